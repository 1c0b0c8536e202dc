//! The daemon's side of the admin socket: binding it under the state lock, and serving
//! the bindings list and the revoke, block and unblock actions from the shell.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use relay_broker::Fingerprint;
use serde::Serialize;
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinSet;

use super::lock::{LOCK_FILE, StateLock};
use super::protocol::{
    Action, ActionOutcome, AdminRoute, BindingsList, ErrorBody, SOCKET_FILE, admin_route,
};
use crate::shell::Shell;

/// How long a starting daemon waits for a `relayd bindings` command that holds the lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);
const LOCK_POLL: Duration = Duration::from_millis(50);
/// A client that sends no request head in this time is disconnected.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Admin connections served at once; the socket is for one operator at a time.
const MAX_CONNECTIONS: usize = 16;
/// How long in-flight admin requests may finish once the daemon stops.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Whether a peer with this uid may use the admin socket of a daemon running as
/// `daemon_euid`.
pub fn is_peer_allowed(peer_uid: u32, daemon_euid: u32) -> bool {
    peer_uid == daemon_euid || peer_uid == 0
}

/// Why the admin socket or the state lock could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("cannot lock {path}")]
    Lock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} stayed locked for {waited:?} (a relayd bindings command or another relayd)")]
    LockBusy { path: PathBuf, waited: Duration },
    #[error("another relayd answers on {socket}: one daemon per state directory")]
    AlreadyRunning { socket: PathBuf },
    #[error("{socket} exists and is not a socket: move it aside")]
    NotASocket { socket: PathBuf },
    #[error("cannot check {socket}")]
    Probe {
        socket: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot remove the stale socket {socket}")]
    RemoveStale {
        socket: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot listen on {socket}")]
    Bind {
        socket: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// What is at `<state_dir>/admin.sock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// A daemon accepts connections.
    Answers,
    /// No socket file.
    Absent,
    /// A socket file nobody listens on (a daemon that did not stop cleanly).
    Stale,
}

/// Looks at the admin socket without sending anything.
pub fn probe(state_dir: &Path) -> Result<Probe, AdminError> {
    let socket = state_dir.join(SOCKET_FILE);
    match std::os::unix::net::UnixStream::connect(&socket) {
        Ok(_) => Ok(Probe::Answers),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Probe::Absent),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(Probe::Stale),
        Err(source) => Err(AdminError::Probe { socket, source }),
    }
}

/// The daemon's listening admin socket; the socket file is removed when it is dropped, if
/// it is still the one this daemon created.
#[derive(Debug)]
pub struct AdminListener {
    listener: UnixListener,
    path: PathBuf,
    /// Device and inode of the socket file this daemon created.
    file_id: (u64, u64),
}

impl AdminListener {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for AdminListener {
    fn drop(&mut self) {
        let ours =
            std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.file_id);
        if ours && let Err(error) = std::fs::remove_file(&self.path) {
            tracing::warn!(event = "admin_socket_not_removed", socket = %self.path.display(), %error, "admin socket not removed");
        }
    }
}

/// Takes the state lock and creates the admin socket, before the daemon loads its state.
///
/// The lock is held for the daemon's life (drop it after the last state write). A socket
/// file left by a daemon that did not stop cleanly is replaced; if another daemon answers
/// on it, start-up is refused.
pub async fn bind(state_dir: &Path) -> Result<(StateLock, AdminListener), AdminError> {
    let socket = state_dir.join(SOCKET_FILE);
    let deadline = tokio::time::Instant::now() + LOCK_WAIT;
    let lock = loop {
        if let Some(lock) = StateLock::try_acquire(state_dir)? {
            break lock;
        }
        // A running daemon holds the lock for its whole life; a bindings command only for
        // the moment of its edit.
        if probe(state_dir)? == Probe::Answers {
            return Err(AdminError::AlreadyRunning { socket });
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(AdminError::LockBusy {
                path: state_dir.join(LOCK_FILE),
                waited: LOCK_WAIT,
            });
        }
        tokio::time::sleep(LOCK_POLL).await;
    };
    match std::fs::symlink_metadata(&socket) {
        Ok(meta) if !meta.file_type().is_socket() => {
            return Err(AdminError::NotASocket { socket });
        }
        Ok(_) => match probe(state_dir)? {
            Probe::Answers => return Err(AdminError::AlreadyRunning { socket }),
            Probe::Absent => {}
            Probe::Stale => std::fs::remove_file(&socket).or_else(|source| {
                if source.kind() == io::ErrorKind::NotFound {
                    Ok(())
                } else {
                    Err(AdminError::RemoveStale {
                        socket: socket.clone(),
                        source,
                    })
                }
            })?,
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(AdminError::Probe { socket, source }),
    }
    let bind_error = |source: io::Error| AdminError::Bind {
        socket: socket.clone(),
        source,
    };
    // The state directory is 0700, so nobody else can reach the socket before its mode is
    // narrowed here.
    let listener = UnixListener::bind(&socket).map_err(bind_error)?;
    let meta = std::fs::symlink_metadata(&socket).map_err(bind_error)?;
    let admin = AdminListener {
        listener,
        path: socket.clone(),
        file_id: (meta.dev(), meta.ino()),
    };
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
        .map_err(bind_error)?;
    Ok((lock, admin))
}

/// Serves the admin socket until `shutdown`, then removes the socket file and gives
/// in-flight requests a moment to finish.
pub async fn serve(listener: AdminListener, shell: Arc<Shell>, shutdown: impl Future<Output = ()>) {
    let daemon_euid = rustix::process::geteuid().as_raw();
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.listener.accept() => {
                while connections.try_join_next().is_some() {}
                match accepted {
                    Ok((stream, _)) if connections.len() < MAX_CONNECTIONS => {
                        connections.spawn(serve_connection(stream, shell.clone(), daemon_euid));
                    }
                    Ok(_) => tracing::warn!(event = "admin_connection_dropped", limit = MAX_CONNECTIONS, "admin connection dropped at the limit"),
                    Err(error) => {
                        // Out of file descriptors, typically: do not spin.
                        tracing::warn!(event = "admin_accept_failed", %error, "admin socket accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }
    }
    drop(listener);
    let finished = tokio::time::timeout(STOP_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        tracing::warn!(event = "admin_requests_cut_off", grace = ?STOP_GRACE, "admin requests did not complete in the grace time");
    }
}

async fn serve_connection(stream: UnixStream, shell: Arc<Shell>, daemon_euid: u32) {
    let peer_uid = stream.peer_cred().ok().map(|cred| cred.uid());
    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
        let shell = shell.clone();
        async move {
            let allowed = peer_uid.is_some_and(|uid| is_peer_allowed(uid, daemon_euid));
            if !allowed {
                tracing::warn!(
                    event = "admin_request_refused",
                    peer_uid = peer_uid.map_or(-1, i64::from),
                    "admin request refused"
                );
                return Ok::<_, Infallible>(error(
                    StatusCode::FORBIDDEN,
                    "only the daemon's account and root may use this socket",
                ));
            }
            Ok(respond(req.method(), req.uri().path(), &shell).await)
        }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(error) = served {
        tracing::debug!(%error, "admin connection ended");
    }
}

async fn respond(method: &Method, path: &str, shell: &Arc<Shell>) -> Response<Full<Bytes>> {
    match admin_route(method, path) {
        AdminRoute::List => json(StatusCode::OK, &list(shell)),
        AdminRoute::Act {
            fingerprint,
            action,
        } => json(StatusCode::OK, &act(shell, fingerprint, action).await),
        AdminRoute::BadFingerprint(e) => error(StatusCode::BAD_REQUEST, &e.to_string()),
        AdminRoute::MethodNotAllowed => error(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed on this path",
        ),
        AdminRoute::NotFound => error(StatusCode::NOT_FOUND, "no such admin route"),
    }
}

fn list(shell: &Shell) -> BindingsList {
    let store = shell.state_store();
    BindingsList::from_views(
        &shell.bindings_view(),
        &shell.blocked_fingerprints(),
        |at| store.wall_ms(at),
    )
}

async fn act(shell: &Arc<Shell>, fingerprint: Fingerprint, action: Action) -> ActionOutcome {
    let was_blocked = shell.blocked_fingerprints().contains(&fingerprint);
    let (summary, now_blocked) = match action {
        Action::Revoke => (shell.revoke(fingerprint, false), was_blocked),
        Action::Block => (shell.revoke(fingerprint, true), true),
        Action::Unblock => {
            shell.unblock(fingerprint);
            (Default::default(), false)
        }
    };
    let persisted = shell.persist_now().await;
    let short = &fingerprint.to_hex()[..12];
    tracing::info!(
        event = "admin_route_changed",
        action = action.as_str(),
        fingerprint = short,
        bindings = summary.bindings,
        sessions = summary.sessions,
        worker_retired = summary.worker_retired,
        blocked = now_blocked,
        "admin changed a route"
    );
    ActionOutcome {
        action,
        fingerprint: fingerprint.to_hex(),
        bindings: summary.bindings,
        sessions: summary.sessions,
        worker_retired: summary.worker_retired,
        launch_cancelled: summary.launch_cancelled,
        was_blocked,
        persisted: persisted.is_ok(),
        persist_error: persisted.err().map(|e| crate::error_chain(&e)),
    }
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<Full<Bytes>> {
    // These types serialize infallibly (strings, numbers and booleans only).
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut res = Response::new(Full::new(Bytes::from(body)));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    res
}

fn error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    json(
        status,
        &ErrorBody {
            error: message.to_owned(),
        },
    )
}
