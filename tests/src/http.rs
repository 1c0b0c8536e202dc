//! A minimal HTTP/1.1 client: one fresh connection per request, so a test knows exactly
//! which connection a request used, and the response body read frame by frame.

use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use http::header::{CONTENT_TYPE, HOST, HeaderValue};
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use crate::error::Error;

/// A response whose body has not been read yet. Dropping it closes the connection.
#[derive(Debug)]
pub struct HttpResponse {
    head: http::response::Parts,
    body: Incoming,
    connection: JoinHandle<()>,
}

/// A body that ended with an error (the server aborted the response), with what had
/// arrived before.
#[derive(Debug)]
pub struct BodyError {
    pub received: Bytes,
    pub error: hyper::Error,
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the body broke off after {} bytes: {}",
            self.received.len(),
            self.error
        )
    }
}

impl std::error::Error for BodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl HttpResponse {
    pub fn status(&self) -> StatusCode {
        self.head.status
    }

    pub fn headers(&self) -> &HeaderMap {
        &self.head.headers
    }

    /// A header's first value as text.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.head
            .headers
            .get(name)
            .and_then(|value| value.to_str().ok())
    }

    /// The next data frame, `None` at the end of the body (trailers are skipped).
    pub async fn next_data(&mut self) -> Result<Option<Bytes>, hyper::Error> {
        while let Some(frame) = self.body.frame().await {
            if let Ok(data) = frame?.into_data() {
                return Ok(Some(data));
            }
        }
        Ok(None)
    }

    /// Reads the rest of the body; `already` is what the test read with `next_data` before.
    pub async fn read_rest(&mut self, already: &[u8]) -> Result<Bytes, BodyError> {
        let mut received = BytesMut::from(already);
        loop {
            match self.next_data().await {
                Ok(Some(data)) => received.extend_from_slice(&data),
                Ok(None) => return Ok(received.freeze()),
                Err(error) => {
                    return Err(BodyError {
                        received: received.freeze(),
                        error,
                    });
                }
            }
        }
    }

    /// Reads the whole body.
    pub async fn read_to_end(&mut self) -> Result<Bytes, BodyError> {
        self.read_rest(&[]).await
    }
}

impl Drop for HttpResponse {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// A request for `path` (origin form, with query) carrying `headers` and `body`.
pub fn request(
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Result<Request<Full<Bytes>>, http::Error> {
    let mut builder = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(Full::new(body.into()))
}

/// A `POST` of a JSON body (`content-type: application/json`).
pub fn post_json(
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Result<Request<Full<Bytes>>, http::Error> {
    let mut req = request(Method::POST, path, headers, body)?;
    req.headers_mut()
        .entry(CONTENT_TYPE)
        .or_insert(HeaderValue::from_static("application/json"));
    Ok(req)
}

/// Sends `req` on a new connection to `addr` and returns once the response head arrived.
///
/// The target is sent in origin form (an absolute URI is cut down to its path and query)
/// and `Host` is set to `addr` unless the request has one.
pub async fn send(addr: SocketAddr, req: Request<Full<Bytes>>) -> Result<HttpResponse, Error> {
    let (mut parts, body) = req.into_parts();
    let target = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str().to_owned())
        .ok_or_else(|| Error::RequestTarget {
            target: parts.uri.to_string(),
        })?;
    parts.uri = target.parse().map_err(|_| Error::RequestTarget {
        target: target.clone(),
    })?;
    if !parts.headers.contains_key(HOST) {
        let host = HeaderValue::from_str(&addr.to_string()).map_err(|_| Error::RequestTarget {
            target: target.clone(),
        })?;
        parts.headers.insert(HOST, host);
    }
    let method = parts.method.to_string();
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|source| Error::Connect { addr, source })?;
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|source| Error::Handshake { addr, source })?;
    // Owned by the returned response (aborted when it drops); it also ends by itself when
    // the server closes the connection.
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    let res = sender
        .send_request(Request::from_parts(parts, body))
        .await
        .map_err(|source| Error::Send {
            addr,
            method,
            target,
            source,
        });
    let res = match res {
        Ok(res) => res,
        Err(error) => {
            connection.abort();
            return Err(error);
        }
    };
    let (head, body) = res.into_parts();
    Ok(HttpResponse {
        head,
        body,
        connection,
    })
}

/// Sends `req` and reads the whole answer; a body that breaks off is an error.
pub async fn fetch(
    addr: SocketAddr,
    req: Request<Full<Bytes>>,
) -> Result<(StatusCode, HeaderMap, Bytes), Error> {
    let mut res = send(addr, req).await?;
    let body = res
        .read_to_end()
        .await
        .map_err(|broken| Error::BodyBrokeOff {
            addr,
            received: broken.received.len(),
            source: broken.error,
        })?;
    Ok((res.status(), res.headers().clone(), body))
}
