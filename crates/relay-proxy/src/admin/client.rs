//! `relayd bindings`'s side of the admin socket: one HTTP/1.1 connection to a running
//! daemon.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper_util::rt::TokioIo;
use relay_broker::Fingerprint;
use tokio::net::UnixStream;

use super::protocol::{Action, ActionOutcome, BindingsList, ErrorBody, SOCKET_FILE};

/// How long the client waits for an answer (a revocation waits for a state write).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer the client reads: 4096 routes × 64 digests with tombstones fit.
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// Why the client could not get an answer from a daemon.
#[derive(Debug, thiserror::Error)]
pub enum AdminClientError {
    #[error("cannot connect to {socket}")]
    Connect {
        socket: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the admin connection on {socket} failed")]
    Http {
        socket: PathBuf,
        #[source]
        source: hyper::Error,
    },
    #[error("the daemon did not answer on {socket} within {limit:?}")]
    Timeout { socket: PathBuf, limit: Duration },
    #[error("the daemon answered {status}: {message}")]
    Status { status: u16, message: String },
    #[error("the daemon's answer is not valid: {message}")]
    BadAnswer { message: String },
}

/// One HTTP/1.1 connection to a daemon's admin socket.
#[derive(Debug)]
pub struct AdminClient {
    sender: hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    connection: tokio::task::JoinHandle<()>,
    socket: PathBuf,
}

impl AdminClient {
    /// Connects to the daemon of `state_dir`; `Ok(None)` when no daemon runs there (no
    /// socket, or a stale one). Permission errors are errors: they do not mean "stopped".
    pub async fn connect(state_dir: &Path) -> Result<Option<AdminClient>, AdminClientError> {
        let socket = state_dir.join(SOCKET_FILE);
        let stream = match UnixStream::connect(&socket).await {
            Ok(stream) => stream,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
                ) =>
            {
                return Ok(None);
            }
            Err(source) => return Err(AdminClientError::Connect { socket, source }),
        };
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|source| AdminClientError::Http {
                socket: socket.clone(),
                source,
            })?;
        let connection = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Some(AdminClient {
            sender,
            connection,
            socket,
        }))
    }

    pub async fn bindings(&mut self) -> Result<BindingsList, AdminClientError> {
        self.request(Method::GET, "/bindings").await
    }

    pub async fn act(
        &mut self,
        action: Action,
        fingerprint: &Fingerprint,
    ) -> Result<ActionOutcome, AdminClientError> {
        let path = format!("/bindings/{}/{}", fingerprint.to_hex(), action.as_str());
        self.request(Method::POST, &path).await
    }

    pub(super) async fn request<T: serde::de::DeserializeOwned>(
        &mut self,
        method: Method,
        path: &str,
    ) -> Result<T, AdminClientError> {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "relayd")
            .body(Empty::new())
            .map_err(|e| AdminClientError::BadAnswer {
                message: e.to_string(),
            })?;
        let exchange = async {
            let res = self.sender.send_request(req).await?;
            let status = res.status();
            let body = Limited::new(res.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map(|c| c.to_bytes());
            Ok::<_, hyper::Error>((status, body))
        };
        let (status, body) = tokio::time::timeout(CLIENT_TIMEOUT, exchange)
            .await
            .map_err(|_| AdminClientError::Timeout {
                socket: self.socket.clone(),
                limit: CLIENT_TIMEOUT,
            })?
            .map_err(|source| AdminClientError::Http {
                socket: self.socket.clone(),
                source,
            })?;
        let body = body.map_err(|e| AdminClientError::BadAnswer {
            message: e.to_string(),
        })?;
        if status != StatusCode::OK {
            let message = serde_json::from_slice::<ErrorBody>(&body)
                .map(|e| e.error)
                .unwrap_or_else(|_| String::from_utf8_lossy(&body).chars().take(200).collect());
            return Err(AdminClientError::Status {
                status: status.as_u16(),
                message,
            });
        }
        serde_json::from_slice(&body).map_err(|e| AdminClientError::BadAnswer {
            message: e.to_string(),
        })
    }
}

impl Drop for AdminClient {
    fn drop(&mut self) {
        self.connection.abort();
    }
}
