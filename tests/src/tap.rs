//! A transparent TCP forwarder that records what clients send (and what they are sent
//! back), so a test can compare the bytes an agent CLI sent with the bytes the provider
//! stand-in received through relayd, or read the control messages of a session.
//!
//! It changes nothing: every byte is copied both ways as it arrives. Point the client at
//! [`Tap::origin`] and tell relayd, with `--advertise-address`, that this is its origin (the
//! `Host` the client sends then names the tap, which relayd accepts as its advertised host).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::error::Error;

/// The bytes of one connection, shared with its forwarding task.
type Recording = Arc<Mutex<Exchange>>;

/// Both directions of one forwarded connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exchange {
    /// What the client sent.
    pub sent: Vec<u8>,
    /// What the server sent back.
    pub received: Vec<u8>,
}

impl Exchange {
    /// The HTTP/1.1 requests the client sent on this connection (for an upgraded one, the
    /// upgrade request only).
    pub fn requests(&self) -> Vec<TappedRequest> {
        parse_requests(&self.sent)
    }
}

/// The running forwarder. Dropping it closes every connection it carries.
#[derive(Debug)]
pub struct Tap {
    addr: SocketAddr,
    connections: Arc<Mutex<Vec<Recording>>>,
    accept_task: JoinHandle<()>,
}

/// One HTTP/1.1 request as the client wrote it on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TappedRequest {
    pub method: String,
    /// The request target as sent (origin form: path and query).
    pub target: String,
    /// Names in the case and order the client sent them.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body after removing chunked framing, if any.
    pub body: Bytes,
    /// The whole body arrived.
    pub complete: bool,
}

impl TappedRequest {
    /// The first value of a header, by case-insensitive name, as text.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.header_values(name)
            .into_iter()
            .next()
            .and_then(|value| std::str::from_utf8(value).ok())
    }

    /// Every value of a header, in the order sent.
    pub fn header_values(&self, name: &str) -> Vec<&[u8]> {
        self.headers
            .iter()
            .filter(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_slice())
            .collect()
    }
}

/// A tap that listens but does not forward yet: its origin is known before the server it
/// forwards to starts (relayd needs the tap's origin as its `--advertise-address`).
#[derive(Debug)]
pub struct TapListener {
    listener: TcpListener,
    addr: SocketAddr,
}

impl TapListener {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>` of the tap.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Starts forwarding every connection to `target`.
    pub fn forward_to(self, target: SocketAddr) -> Tap {
        let connections = Arc::new(Mutex::new(Vec::new()));
        let accept_task = tokio::spawn(accept_loop(self.listener, target, connections.clone()));
        Tap {
            addr: self.addr,
            connections,
            accept_task,
        }
    }
}

impl Tap {
    /// Listens on `127.0.0.1:0`; connections wait in the backlog until
    /// [`TapListener::forward_to`].
    pub async fn bind() -> Result<TapListener, Error> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|source| Error::Bind { source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| Error::Bind { source })?;
        Ok(TapListener { listener, addr })
    }

    /// Listens on `127.0.0.1:0` and forwards every connection to `target`.
    pub async fn start(target: SocketAddr) -> Result<Tap, Error> {
        Ok(Tap::bind().await?.forward_to(target))
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>` of the tap.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request recorded so far, connection by connection in accept order.
    pub fn requests(&self) -> Vec<TappedRequest> {
        let connections: Vec<Recording> = self
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        connections
            .iter()
            .flat_map(|sent| {
                parse_requests(&sent.lock().unwrap_or_else(PoisonError::into_inner).sent)
            })
            .collect()
    }

    /// Both directions of every connection so far, in accept order.
    pub fn exchanges(&self) -> Vec<Exchange> {
        let connections: Vec<Recording> = self
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        connections
            .iter()
            .map(|sent| sent.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .collect()
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        // The accept task owns the connection tasks (its JoinSet aborts them when dropped).
        self.accept_task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    connections: Arc<Mutex<Vec<Recording>>>,
) {
    let mut tasks = JoinSet::new();
    loop {
        // An accept error on loopback means the test process is out of descriptors: stop
        // rather than spin; the client's connection failure then shows in the test.
        let Ok((client, _)) = listener.accept().await else {
            return;
        };
        while tasks.try_join_next().is_some() {}
        let recording: Recording = Arc::default();
        connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(recording.clone());
        tasks.spawn(forward(client, target, recording));
    }
}

async fn forward(client: TcpStream, target: SocketAddr, recording: Recording) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = async {
        let mut buffer = vec![0_u8; 64 * 1024];
        loop {
            match client_read.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    recording
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .sent
                        .extend_from_slice(&buffer[..n]);
                    if server_write.write_all(&buffer[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = server_write.shutdown().await;
    };
    let downstream = async {
        let mut buffer = vec![0_u8; 64 * 1024];
        loop {
            match server_read.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    recording
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .received
                        .extend_from_slice(&buffer[..n]);
                    if client_write.write_all(&buffer[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = client_write.shutdown().await;
    };
    tokio::join!(upstream, downstream);
}

/// Splits the bytes a client sent on one connection into requests. A request cut short
/// ends the list, marked incomplete when its head was whole.
pub(crate) fn parse_requests(mut bytes: &[u8]) -> Vec<TappedRequest> {
    let mut requests = Vec::new();
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut parsed = httparse::Request::new(&mut headers);
        let head_len = match parsed.parse(bytes) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) | Err(_) => return requests,
        };
        let method = parsed.method.unwrap_or_default().to_owned();
        let target = parsed.path.unwrap_or_default().to_owned();
        let headers: Vec<(String, Vec<u8>)> = parsed
            .headers
            .iter()
            .map(|header| (header.name.to_owned(), header.value.to_vec()))
            .collect();
        let rest = &bytes[head_len..];
        let chunked = headers.iter().any(|(name, value)| {
            name.eq_ignore_ascii_case("transfer-encoding")
                && String::from_utf8_lossy(value)
                    .to_ascii_lowercase()
                    .contains("chunked")
        });
        let content_length = headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, value)| std::str::from_utf8(value).ok())
            .and_then(|text| text.trim().parse::<usize>().ok());
        let (body, consumed, complete) = if chunked {
            dechunk(rest)
        } else {
            let len = content_length.unwrap_or(0);
            let take = len.min(rest.len());
            (rest[..take].to_vec(), take, take == len)
        };
        requests.push(TappedRequest {
            method,
            target,
            headers,
            body: Bytes::from(body),
            complete,
        });
        if !complete {
            return requests;
        }
        bytes = &rest[consumed..];
    }
}

/// Removes chunked framing: the body, the bytes consumed, and whether the last chunk and
/// the trailers arrived.
fn dechunk(bytes: &[u8]) -> (Vec<u8>, usize, bool) {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let Some(line_end) = find_crlf(&bytes[at..]) else {
            return (body, at, false);
        };
        let line = String::from_utf8_lossy(&bytes[at..at + line_end]);
        let size_text = line.split(';').next().unwrap_or_default().trim();
        let Ok(size) = usize::from_str_radix(size_text, 16) else {
            return (body, at, false);
        };
        at += line_end + 2;
        if size == 0 {
            // Trailers, then the empty line.
            loop {
                let Some(end) = find_crlf(&bytes[at..]) else {
                    return (body, at, false);
                };
                at += end + 2;
                if end == 0 {
                    return (body, at, true);
                }
            }
        }
        if bytes.len() < at + size + 2 {
            body.extend_from_slice(&bytes[at..bytes.len().min(at + size)]);
            return (body, bytes.len(), false);
        }
        body.extend_from_slice(&bytes[at..at + size]);
        at += size + 2;
    }
}

fn find_crlf(bytes: &[u8]) -> Option<usize> {
    bytes.windows(2).position(|window| window == b"\r\n")
}

#[cfg(test)]
mod tests;
