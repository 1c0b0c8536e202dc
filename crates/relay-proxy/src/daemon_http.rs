//! One GET to the daemon on one connection, with hyper's low-level HTTP/1 client: no pool,
//! no proxy discovery and no redirects, so the caller (relay-doctor, relay-mcp) sees the
//! daemon itself.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::header::{HOST, HeaderValue, USER_AGENT};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use relay_identity::{DaemonAddress, RouteToken};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

/// The largest answer read; status answers are a few hundred bytes.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Why a GET to the daemon got no answer. Each message is one line that names the daemon
/// and never the token.
#[derive(Debug, thiserror::Error)]
pub enum GetError {
    #[error("no answer from {origin} within {limit:?}")]
    Timeout { origin: String, limit: Duration },
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("{host} is not a valid host name")]
    HostName { host: String },
    #[error("the route token is not a header value")]
    TokenHeader,
    #[error("cannot build a request for {path}: {source}")]
    Request {
        path: String,
        #[source]
        source: hyper::http::Error,
    },
    #[error("an https daemon needs a TLS configuration")]
    NoTlsConfig,
    #[error(
        "TLS to {origin} failed: {}",
        crate::tls::describe_handshake_error(source)
    )]
    Tls {
        origin: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the HTTP exchange with {origin} failed: {source}")]
    Http {
        origin: String,
        #[source]
        source: hyper::Error,
    },
    #[error("the answer is larger than {limit} bytes")]
    TooLarge { limit: usize },
}

/// An answer: its status and body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Bytes,
}

/// Why no TCP connection to the daemon could be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{host} has no address")]
    NoAddress { host: String },
    #[error("cannot connect to {origin}: {source}")]
    Connect {
        origin: String,
        #[source]
        source: std::io::Error,
    },
}

/// GETs `path` from the daemon as `user_agent`, with the route token when given, within
/// `limit`.
pub async fn get(
    daemon: &DaemonAddress,
    tls: Option<&Arc<rustls::ClientConfig>>,
    path: &str,
    token: Option<&RouteToken>,
    limit: Duration,
    user_agent: &'static str,
) -> Result<Answer, GetError> {
    match tokio::time::timeout(limit, exchange(daemon, tls, path, token, user_agent)).await {
        Ok(result) => result,
        Err(_) => Err(GetError::Timeout {
            origin: daemon.origin().to_string(),
            limit,
        }),
    }
}

async fn exchange(
    daemon: &DaemonAddress,
    tls: Option<&Arc<rustls::ClientConfig>>,
    path: &str,
    token: Option<&RouteToken>,
    user_agent: &'static str,
) -> Result<Answer, GetError> {
    let tcp = connect(daemon).await?;
    let host = format!("{}:{}", daemon.host(), daemon.port());
    let mut request = Request::get(path)
        .header(
            HOST,
            HeaderValue::try_from(host).map_err(|_| GetError::HostName {
                host: daemon.host().to_owned(),
            })?,
        )
        .header(USER_AGENT, HeaderValue::from_static(user_agent));
    if let Some(token) = token {
        let mut value = HeaderValue::try_from(token.encode()).map_err(|_| GetError::TokenHeader)?;
        value.set_sensitive(true);
        request = request.header(crate::headers::CLIENT_TOKEN_NAME, value);
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|source| GetError::Request {
            path: path.to_owned(),
            source,
        })?;
    let response = match (tls, daemon.is_tls()) {
        (Some(config), true) => {
            let name =
                ServerName::try_from(daemon.host().to_owned()).map_err(|_| GetError::HostName {
                    host: daemon.host().to_owned(),
                })?;
            let stream = tokio_rustls::TlsConnector::from(config.clone())
                .connect(name, tcp)
                .await
                .map_err(|source| GetError::Tls {
                    origin: daemon.origin().to_string(),
                    source,
                })?;
            send(stream, request).await
        }
        (None, true) => return Err(GetError::NoTlsConfig),
        _ => send(tcp, request).await,
    };
    let http = |source| GetError::Http {
        origin: daemon.origin().to_string(),
        source,
    };
    let response = response.map_err(http)?;
    let status = response.status();
    // `Limited` fails with the body's own error, or with its length error past the bound.
    let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
        .collect()
        .await
        .map_err(|error| match error.downcast::<hyper::Error>() {
            Ok(source) => http(*source),
            Err(_) => GetError::TooLarge {
                limit: MAX_ANSWER_BYTES,
            },
        })?
        .to_bytes();
    Ok(Answer { status, body })
}

async fn send<IO>(
    io: IO,
    request: Request<Empty<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, hyper::Error>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    // Ends when the answer has been read and the sender dropped, or the daemon closes.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    sender.send_request(request).await
}

/// A TCP connection to the daemon, with the options of every connection on the request
/// path: `127.0.0.1` for `localhost`, the address for an IP literal, else the name's IPv4
/// addresses first (relayd binds IPv4 only).
pub async fn connect(daemon: &DaemonAddress) -> Result<TcpStream, ConnectError> {
    let candidates: Vec<SocketAddr> = match daemon.connect_addr() {
        Some(addr) => vec![addr],
        None => {
            let host = daemon.connect_host();
            let mut addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, daemon.port()))
                .await
                .map_err(|source| ConnectError::Resolve {
                    host: host.to_owned(),
                    source,
                })?
                .collect();
            addrs.sort_by_key(SocketAddr::is_ipv6);
            addrs
        }
    };
    let mut last = None;
    for addr in candidates {
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                crate::sockets::prepare(&stream);
                return Ok(stream);
            }
            Err(err) => last = Some(err),
        }
    }
    Err(match last {
        Some(source) => ConnectError::Connect {
            origin: daemon.origin().to_string(),
            source,
        },
        None => ConnectError::NoAddress {
            host: daemon.host().to_owned(),
        },
    })
}

#[cfg(test)]
mod tests;
