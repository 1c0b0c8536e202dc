//! The client side of a control session, shared by `relay-mcp` and `relay-worker`: dial
//! the daemon origin, send `Hello`, check the daemon's signature and the trust pin for the
//! origin that was dialled (§4.3), then register or resume with a signature over the same
//! transcript (§5.2).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use relay_identity::{
    DaemonAddress, HandshakeFields, PinError, PinStore, PublicKey, Secret32, SigningKey, Transcript,
};
use relay_proto::{
    Bytes32, Hello, Id, Message, RefusedCode, RegisterMcp, RegisterMcpFields, RegisterWorker,
    RegisterWorkerFields, Registered, ResumeMcp, ResumeMcpFields, ResumeWorker, ResumeWorkerFields,
    Role, SUPPORTED_PROTOCOLS, Signature, Text,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::wire::{Transport, TransportError, ws_config};

/// A byte stream to the daemon: plain TCP on loopback, TLS otherwise.
pub enum DaemonStream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl std::fmt::Debug for DaemonStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DaemonStream::Plain(_) => "DaemonStream::Plain",
            DaemonStream::Tls(_) => "DaemonStream::Tls",
        })
    }
}

impl AsyncRead for DaemonStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            DaemonStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            DaemonStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for DaemonStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            DaemonStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            DaemonStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            DaemonStream::Plain(s) => Pin::new(s).poll_flush(cx),
            DaemonStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            DaemonStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            DaemonStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A registered control session.
pub type Session = Transport<DaemonStream>;

/// Who the client is and where it connects.
#[derive(Clone)]
pub struct ClientIdentity {
    pub daemon: DaemonAddress,
    pub key: Arc<SigningKey>,
    pub pins: Arc<PinStore>,
    /// TLS toward an https daemon (platform roots plus `RELAY_EXTRA_CA_FILE`).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// This process's instance id, sent in `Hello`.
    pub instance_id: Id,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("daemon", &self.daemon)
            .field("fingerprint", &self.key.fingerprint().short())
            .finish()
    }
}

/// What the client registers as.
#[derive(Debug, Clone)]
pub enum Registration {
    Mcp(RegisterMcpFields),
    ResumeMcp(ResumeMcpFields),
    Worker(RegisterWorkerFields),
    ResumeWorker(ResumeWorkerFields),
}

impl Registration {
    fn role(&self) -> Role {
        match self {
            Registration::Mcp(_) | Registration::ResumeMcp(_) => Role::Mcp,
            Registration::Worker(_) | Registration::ResumeWorker(_) => Role::Worker,
        }
    }
}

/// Why a control session could not be established.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// It names the daemon and the cause.
    #[error(transparent)]
    Unreachable(#[from] crate::daemon_http::ConnectError),
    #[error("TLS to the daemon failed: {}", crate::tls::describe_handshake_error(.0))]
    Tls(#[source] std::io::Error),
    #[error("the WebSocket handshake failed")]
    Handshake(#[source] tokio_tungstenite::tungstenite::Error),
    #[error("the control session failed")]
    Transport(#[from] TransportError),
    #[error("the daemon's challenge signature is invalid")]
    BadChallenge,
    #[error(transparent)]
    Pin(#[from] PinError),
    #[error("the daemon refused: {text} ({})", code.map_or("unknown code", RefusedCode::as_str))]
    Refused {
        code: Option<RefusedCode>,
        text: String,
    },
    #[error("the daemon sent {0} during the handshake")]
    Unexpected(&'static str),
    #[error("no secure random numbers are available")]
    Random,
    #[error("the handshake took longer than {0:?}")]
    Timeout(Duration),
}

impl ConnectError {
    /// The daemon is down or silent (no connection, or no answer in time), as opposed to
    /// one that answered and refused.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            ConnectError::Unreachable(_) | ConnectError::Timeout(_)
        )
    }

    /// Failures that a retry cannot fix: the MCP stops on these (§5.4).
    pub fn is_fatal(&self) -> bool {
        matches!(self, ConnectError::BadChallenge | ConnectError::Pin(_))
            || matches!(
                self,
                ConnectError::Refused {
                    code: Some(
                        RefusedCode::BadSignature
                            | RefusedCode::TranscriptMismatch
                            | RefusedCode::Revoked
                            | RefusedCode::Blocked
                            | RefusedCode::ProtocolUnsupported
                    ),
                    ..
                }
            )
    }

    /// How long the daemon asked this client to wait before its next handshake: the
    /// `Retry-After` of a 429, which comes once this address has opened all the handshakes
    /// its window allows, and gives the time until one of them leaves the window; another
    /// attempt before then is refused too, and only writes one more warning in the daemon's
    /// log. A 503 for want of a handshake place is not waited on: places free within
    /// moments.
    ///
    /// The answer comes before the daemon has proved its key, so whoever answers can ask
    /// for anything: the wait is at most half of `grace`, the time a client has to get
    /// back, and [`MAX_RETRY_AFTER`]; and none from a loopback daemon, which never limits
    /// loopback peers, so a 429 there is not relayd's (another local user on its port while
    /// it restarts, say).
    pub fn retry_after(&self, daemon: &DaemonAddress, grace: Duration) -> Option<Duration> {
        let ConnectError::Handshake(tokio_tungstenite::tungstenite::Error::Http(res)) = self else {
            return None;
        };
        if daemon.is_loopback() || res.status() != http::StatusCode::TOO_MANY_REQUESTS {
            return None;
        }
        let seconds =
            crate::headers::decimal(res.headers().get(http::header::RETRY_AFTER)?.as_bytes())?;
        Some(
            Duration::from_secs(seconds)
                .min(MAX_RETRY_AFTER)
                .min(grace / 2),
        )
    }

    pub fn refused_code(&self) -> Option<RefusedCode> {
        match self {
            ConnectError::Refused { code, .. } => *code,
            _ => None,
        }
    }
}

/// The longest wait a 429's `Retry-After` may impose ([`ConnectError::retry_after`]): the
/// longest handshake window the daemon would set by default is 15 s.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Opens a control session and registers; at most `limit` for the whole handshake.
pub async fn connect(
    identity: &ClientIdentity,
    registration: Registration,
    limit: Duration,
) -> Result<(Session, Registered), ConnectError> {
    match tokio::time::timeout(limit, handshake(identity, registration)).await {
        Ok(result) => result,
        Err(_) => Err(ConnectError::Timeout(limit)),
    }
}

/// Opens a control session only as far as the daemon's `Challenge`, to learn the daemon's
/// signing key as the daemon proves it: sends `Hello` with a throwaway machine key, checks the
/// challenge signature over the transcript, and closes without registering. Nothing is
/// pinned or bound; `relay-doctor --live` compares the key with the pin itself.
pub async fn probe_daemon_key(
    daemon: &DaemonAddress,
    tls: Option<&Arc<rustls::ClientConfig>>,
    limit: Duration,
) -> Result<PublicKey, ConnectError> {
    let probe = async {
        let throwaway = SigningKey::generate().map_err(|_| ConnectError::Random)?;
        let mut session = dial(daemon, tls, super::MCP_PATH).await?;
        let result = challenge(&mut session, daemon, Role::Mcp, &throwaway, Id([0; 16])).await;
        session.finish("probe done").await;
        result.map(|(_, daemon_key)| daemon_key)
    };
    match tokio::time::timeout(limit, probe).await {
        Ok(result) => result,
        Err(_) => Err(ConnectError::Timeout(limit)),
    }
}

async fn dial(
    daemon: &DaemonAddress,
    tls: Option<&Arc<rustls::ClientConfig>>,
    path: &str,
) -> Result<Session, ConnectError> {
    // IPv4 first, with the request path's socket options, as every client dials the daemon.
    let tcp = crate::daemon_http::connect(daemon).await?;
    let stream = match (tls, daemon.is_tls()) {
        (Some(tls), true) => {
            let name =
                rustls::pki_types::ServerName::try_from(daemon.host().to_owned()).map_err(|e| {
                    ConnectError::Tls(std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
                })?;
            let tls = tokio_rustls::TlsConnector::from(tls.clone())
                .connect(name, tcp)
                .await
                .map_err(ConnectError::Tls)?;
            DaemonStream::Tls(Box::new(tls))
        }
        (None, true) => {
            return Err(ConnectError::Tls(std::io::Error::other(
                "an https daemon needs a TLS configuration",
            )));
        }
        _ => DaemonStream::Plain(tcp),
    };
    let url = daemon.ws_url(path);
    let (ws, _) = tokio_tungstenite::client_async_with_config(url, stream, Some(ws_config()))
        .await
        .map_err(ConnectError::Handshake)?;
    Ok(Transport::new(ws))
}

async fn handshake(
    identity: &ClientIdentity,
    registration: Registration,
) -> Result<(Session, Registered), ConnectError> {
    let role = registration.role();
    let path = match role {
        Role::Mcp => super::MCP_PATH,
        Role::Worker => super::WORKER_PATH,
    };
    let mut session = dial(&identity.daemon, identity.tls.as_ref(), path).await?;
    let (transcript, daemon_key) = challenge(
        &mut session,
        &identity.daemon,
        role,
        &identity.key,
        identity.instance_id,
    )
    .await?;
    // Only a daemon that proved its key is pinned or checked against the pin.
    identity
        .pins
        .check_or_pin(identity.daemon.origin(), &daemon_key)?;
    let sign = |fields: &[u8]| Signature(transcript.sign_registration(&identity.key, fields));
    let message = match registration {
        Registration::Mcp(fields) => Message::RegisterMcp(RegisterMcp {
            signature: sign(&encode_fields(&fields)),
            fields,
        }),
        Registration::ResumeMcp(fields) => Message::ResumeMcp(ResumeMcp {
            signature: sign(&encode_fields(&fields)),
            fields,
        }),
        Registration::Worker(fields) => Message::RegisterWorker(RegisterWorker {
            signature: sign(&encode_fields(&fields)),
            fields,
        }),
        Registration::ResumeWorker(fields) => Message::ResumeWorker(ResumeWorker {
            signature: sign(&encode_fields(&fields)),
            fields,
        }),
    };
    session.send(&message).await?;
    match session.recv_within(Duration::from_secs(30)).await?.message {
        Message::Registered(registered) => Ok((session, registered)),
        Message::Refused(refused) => Err(refused_error(&refused)),
        _ => Err(ConnectError::Unexpected("another message than Registered")),
    }
}

/// Sends `Hello` and verifies the daemon's `Challenge` signature over the transcript (§5.2).
async fn challenge(
    session: &mut Session,
    daemon: &DaemonAddress,
    role: Role,
    key: &SigningKey,
    instance_id: Id,
) -> Result<(Transcript, PublicKey), ConnectError> {
    let client_nonce = Secret32::generate().map_err(|_| ConnectError::Random)?;
    let origin = daemon.origin().to_string();
    let machine_key = key.public_key();
    let hello = Hello {
        role,
        protocols: SUPPORTED_PROTOCOLS,
        binary_version: Text::truncated(env!("CARGO_PKG_VERSION")),
        instance_id,
        machine_key: relay_proto::PublicKey(*machine_key.as_bytes()),
        client_nonce: Bytes32(*client_nonce.as_bytes()),
        target_origin: Text::truncated(&origin),
    };
    session.send(&Message::Hello(hello)).await?;
    let challenge = match session.recv_within(Duration::from_secs(30)).await?.message {
        Message::Challenge(challenge) => challenge,
        Message::Refused(refused) => return Err(refused_error(&refused)),
        _ => return Err(ConnectError::Unexpected("another message than Challenge")),
    };
    let daemon_key = PublicKey::from_bytes(challenge.daemon_key.0);
    let transcript = Transcript::new(&HandshakeFields {
        target_origin: &origin,
        role: role.transcript_byte(),
        selected_protocol: challenge.selected_protocol,
        challenge_id: challenge.challenge_id.0,
        client_nonce: *client_nonce.as_bytes(),
        daemon_nonce: challenge.daemon_nonce.0,
        client_key: machine_key,
        daemon_key,
    });
    transcript
        .verify_challenge(&challenge.signature.0)
        .map_err(|_| ConnectError::BadChallenge)?;
    Ok((transcript, daemon_key))
}

/// The canonical bytes of registration fields, as both sides sign and verify them.
pub fn encode_fields<T: serde::Serialize>(fields: &T) -> Vec<u8> {
    postcard::to_allocvec(fields).unwrap_or_default()
}

fn refused_error(refused: &relay_proto::Refused) -> ConnectError {
    ConnectError::Refused {
        code: refused.reason(),
        text: refused.text.as_str().to_owned(),
    }
}

/// How long a client waits without any frame before it treats its session as dropped:
/// `ping + pong timeout + 5 s` on a non-loopback session, never on loopback (§5.1).
pub fn silence_limit(daemon: &DaemonAddress, timers: &relay_proto::Timers) -> Option<Duration> {
    (!daemon.is_loopback()).then(|| {
        Duration::from_millis(timers.ping_ms + timers.pong_timeout_ms) + Duration::from_secs(5)
    })
}

/// The reconnect schedule of §5.4: the first retry at once, then `first` doubling to
/// `cap`.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Option<Duration>,
    first: Duration,
    cap: Duration,
}

impl Backoff {
    pub fn new(first: Duration, cap: Duration) -> Backoff {
        Backoff {
            next: None,
            first,
            cap,
        }
    }

    /// The delay before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next.unwrap_or(Duration::ZERO);
        self.next = Some(match self.next {
            None => self.first,
            Some(d) => (d * 2).min(self.cap),
        });
        delay
    }
}

#[cfg(test)]
mod tests;
