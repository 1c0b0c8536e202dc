//! The daemon's admin socket (SPEC §2.1, §5.4 last row): `relayd bindings` reaches a
//! running daemon over HTTP/1.1 on the Unix socket `<state_dir>/admin.sock`.
//!
//! The socket's protection is the file system (mode 0600 in the daemon's 0700 state
//! directory) and, in case a mode is ever widened, the peer's uid: only the daemon's own
//! account and root are served; anyone else gets 403. The daemon also holds an exclusive
//! lock on `<state_dir>/admin.lock` from before it loads its state until after it wrote it a
//! last time, so `relayd bindings` can edit the state file of a stopped daemon without
//! racing a daemon that starts or stops meanwhile.
//!
//! Routes: `GET /bindings` → [`BindingsList`]; `POST /bindings/<fingerprint>/revoke`,
//! `/block`, `/unblock` → [`ActionOutcome`]; errors are [`ErrorBody`].

use std::convert::Infallible;
use std::fs::File;
use std::future::Future;
use std::io;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Empty, Full, Limited};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use relay_broker::{BindingView, Fingerprint};
use serde::{Deserialize, Serialize};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinSet;

use crate::shell::Shell;

/// The socket's name in the daemon's state directory.
pub const SOCKET_FILE: &str = "admin.sock";
/// The lock file's name in the daemon's state directory.
pub const LOCK_FILE: &str = "admin.lock";

/// How long a starting daemon waits for a `relayd bindings` command that holds the lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);
const LOCK_POLL: Duration = Duration::from_millis(50);
/// A client that sends no request head in this time is disconnected.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Admin connections served at once; the socket is for one operator at a time.
const MAX_CONNECTIONS: usize = 16;
/// How long in-flight admin requests may finish once the daemon stops.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// How long the client waits for an answer (a revocation waits for a state write).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer the client reads: 4096 routes × 64 digests with tombstones fit.
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// The three changes an administrator can make to a fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Revoke,
    Block,
    Unblock,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Revoke => "revoke",
            Action::Block => "block",
            Action::Unblock => "unblock",
        }
    }

    fn from_segment(segment: &str) -> Option<Action> {
        match segment {
            "revoke" => Some(Action::Revoke),
            "block" => Some(Action::Block),
            "unblock" => Some(Action::Unblock),
            _ => None,
        }
    }
}

/// `GET /bindings`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindingsList {
    pub bindings: Vec<BindingEntry>,
    /// Every blocked fingerprint, also those without a binding.
    pub blocked: Vec<String>,
}

impl BindingsList {
    /// The list of the broker's bindings view and its blocked fingerprints, with last-use
    /// times in wall-clock milliseconds. A running daemon answers with it, and `relayd
    /// bindings list` makes a stopped daemon's list with it from a broker it restores.
    pub fn from_views(
        views: &[BindingView],
        blocked: &[Fingerprint],
        wall_ms: impl Fn(Instant) -> u64,
    ) -> BindingsList {
        BindingsList {
            bindings: views
                .iter()
                .map(|view| BindingEntry {
                    fingerprint: view.fingerprint.to_hex(),
                    digest_prefix: view.digest.to_hex()[..12].to_owned(),
                    last_use_unix_ms: wall_ms(view.last_use),
                    tombstone: view.tombstone,
                    blocked: view.blocked,
                })
                .collect(),
            blocked: blocked.iter().map(Fingerprint::to_hex).collect(),
        }
    }
}

/// One persisted credential binding: digests only, never a token (§4.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindingEntry {
    /// 64 lowercase hex characters.
    pub fingerprint: String,
    /// The first 12 hex characters of the credential's SHA-256.
    pub digest_prefix: String,
    pub last_use_unix_ms: u64,
    pub tombstone: bool,
    pub blocked: bool,
}

/// The answer to `POST /bindings/<fingerprint>/<action>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionOutcome {
    pub action: Action,
    pub fingerprint: String,
    /// Bindings that became tombstones.
    pub bindings: usize,
    /// MCP sessions closed with `Refused { revoked | blocked }`.
    pub sessions: usize,
    /// A worker generation left service (a published worker was told to `Drain`).
    pub worker_retired: bool,
    /// A launch grant was cancelled before its worker was published.
    pub launch_cancelled: bool,
    /// Whether the fingerprint was blocked before the action.
    pub was_blocked: bool,
    /// False when the change is in effect but the state file could not be written yet (the
    /// daemon keeps retrying); `persist_error` says why.
    pub persisted: bool,
    pub persist_error: Option<String>,
}

/// Every answer that is not a success.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}

/// A fingerprint argument that is not the SHA-256 of a machine key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{text:?} is not a fingerprint: expected 64 hex characters (the SHA-256 of a machine public key)"
)]
pub struct FingerprintError {
    pub text: String,
}

/// Parses a fingerprint: 64 hex characters, uppercase accepted.
pub fn parse_fingerprint(text: &str) -> Result<Fingerprint, FingerprintError> {
    let error = || FingerprintError {
        text: text.chars().take(80).collect(),
    };
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(error());
    }
    let bytes = hex::decode(text.to_ascii_lowercase()).map_err(|_| error())?;
    let bytes: [u8; 32] = bytes.try_into().map_err(|_| error())?;
    Ok(Fingerprint(bytes))
}

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

/// The exclusive lock on `<state_dir>/admin.lock`, released when dropped.
#[derive(Debug)]
pub struct StateLock {
    _file: File,
    path: PathBuf,
}

impl StateLock {
    /// Takes the lock if nobody holds it; `Ok(None)` when somebody does. A lock file that
    /// root creates for a state directory of another account is given to that account, so
    /// its daemon can still lock it.
    pub fn try_acquire(state_dir: &Path) -> Result<Option<StateLock>, AdminError> {
        use rustix::fs::{FlockOperation, Mode, OFlags};
        let path = state_dir.join(LOCK_FILE);
        let lock_error = |source: io::Error| AdminError::Lock {
            path: path.clone(),
            source,
        };
        let fd = rustix::fs::open(
            &path,
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| lock_error(e.into()))?;
        match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => return Ok(None),
            Err(e) => return Err(lock_error(e.into())),
        }
        let file = File::from(fd);
        give_to_directory_owner(state_dir, &file).map_err(lock_error)?;
        Ok(Some(StateLock { _file: file, path }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// When root writes into another account's state directory, the new file must stay usable
/// by that account: it gets the directory's owner and group.
pub fn give_to_directory_owner(state_dir: &Path, file: &File) -> io::Result<()> {
    let dir = std::fs::metadata(state_dir)?;
    let meta = file.metadata()?;
    if rustix::process::geteuid().is_root() && (meta.uid(), meta.gid()) != (dir.uid(), dir.gid()) {
        std::os::unix::fs::fchown(file, Some(dir.uid()), Some(dir.gid()))?;
    }
    Ok(())
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
            tracing::warn!(socket = %self.path.display(), %error, "admin socket not removed");
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
                    Ok(_) => tracing::warn!(limit = MAX_CONNECTIONS, "admin connection dropped at the limit"),
                    Err(error) => {
                        // Out of file descriptors, typically: do not spin.
                        tracing::warn!(%error, "admin socket accept failed");
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
        tracing::warn!(grace = ?STOP_GRACE, "admin requests did not complete in the grace time");
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

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AdminRoute {
    List,
    Act {
        fingerprint: Fingerprint,
        action: Action,
    },
    BadFingerprint(FingerprintError),
    MethodNotAllowed,
    NotFound,
}

pub(crate) fn admin_route(method: &Method, path: &str) -> AdminRoute {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["bindings"] if method == Method::GET => AdminRoute::List,
        ["bindings"] => AdminRoute::MethodNotAllowed,
        ["bindings", fingerprint, action] => match Action::from_segment(action) {
            None => AdminRoute::NotFound,
            Some(_) if method != Method::POST => AdminRoute::MethodNotAllowed,
            Some(action) => match parse_fingerprint(fingerprint) {
                Ok(fingerprint) => AdminRoute::Act {
                    fingerprint,
                    action,
                },
                Err(e) => AdminRoute::BadFingerprint(e),
            },
        },
        _ => AdminRoute::NotFound,
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
        persist_error: persisted.err().map(|e| error_chain(&e)),
    }
}

fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
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

    async fn request<T: serde::de::DeserializeOwned>(
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

#[cfg(test)]
mod tests;
