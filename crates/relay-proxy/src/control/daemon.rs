//! The daemon's side of control sessions: the WebSocket upgrade with the per-address
//! limits of §5.8, the signed handshake of §5.2, and one task per session that moves
//! frames between the socket and the [`Shell`].

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use relay_broker::{ConnId, Digest, Fingerprint, Input};
use relay_identity::{HandshakeFields, PublicKey, RouteToken, Secret32, SigningKey, Transcript};
use relay_logging::Throttle;
use relay_proto::{
    Bytes32, Challenge, DisconnectReason, FailureReason, Id, Message, Refused, RefusedCode, Role,
    SUPPORTED_PROTOCOLS, Signature, Text,
};
use tokio::task::JoinSet;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::Role as WsRole;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::client::encode_fields;
use super::wire::{Transport, TransportError, ws_config};
use crate::body::ResponseBody;
use crate::per_address::{Hold, PerAddress};
use crate::shell::{Outbound, Shell};

/// Control sessions that may be in their handshake at once from loopback peers: between the
/// upgrade and the handshake's end (the registration handed to the broker, or a refusal).
/// Each phase of a handshake ends within the challenge lifetime, so a peer that never
/// answers holds its place for at most two. Remote peers have places of their own
/// ([`MAX_REMOTE_HANDSHAKES`]), so that remote peers holding handshakes open can never lock
/// the machine's own users out.
pub const MAX_HANDSHAKES: usize = 64;

/// Control sessions that may be in their handshake at once from all non-loopback peers
/// together.
pub const MAX_REMOTE_HANDSHAKES: usize = 256;

/// Handshakes one non-loopback address may have at once, so that it takes 64 addresses,
/// each holding silent handshakes open, to fill the remote places.
pub const MAX_HANDSHAKES_PER_ADDRESS: u64 = 4;

/// The places for control sessions in their handshake.
struct HandshakePlaces {
    local: Arc<tokio::sync::Semaphore>,
    remote: Arc<tokio::sync::Semaphore>,
    per_address: Arc<PerAddress>,
}

/// One handshake's place, given back when it drops.
struct HandshakePlace {
    _pool: tokio::sync::OwnedSemaphorePermit,
    _address: Option<Hold>,
}

impl HandshakePlaces {
    fn new() -> HandshakePlaces {
        HandshakePlaces {
            local: Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES)),
            remote: Arc::new(tokio::sync::Semaphore::new(MAX_REMOTE_HANDSHAKES)),
            per_address: PerAddress::new("control handshakes per address"),
        }
    }

    /// A place for a handshake from `ip`, or `None` when its pool, or its address's share
    /// of the remote pool, is full.
    fn take(&self, ip: IpAddr) -> Option<HandshakePlace> {
        if ip.is_loopback() {
            let pool = self.local.clone().try_acquire_owned().ok()?;
            return Some(HandshakePlace {
                _pool: pool,
                _address: None,
            });
        }
        let address = self.per_address.hold(ip, 1, MAX_HANDSHAKES_PER_ADDRESS)?;
        let pool = self.remote.clone().try_acquire_owned().ok()?;
        Some(HandshakePlace {
            _pool: pool,
            _address: Some(address),
        })
    }
}

/// Everything the daemon's control plane needs, fixed at start-up.
pub struct ControlOptions {
    pub daemon_key: Arc<SigningKey>,
    /// Normalized origins a client may name in `Hello` (the advertised origin, and on a
    /// loopback bind `http://127.0.0.1:<port>` and `http://localhost:<port>`).
    pub origins: Vec<String>,
    pub challenge_ttl: Duration,
    pub challenge_window: Duration,
    pub challenge_limit: u32,
    pub max_sessions_per_ip: u32,
    pub ping: Duration,
    pub pong_timeout: Duration,
    /// Networks remote workers may name as their endpoint (§5.5).
    pub worker_networks: Vec<ipnet::Ipv4Net>,
    /// The daemon's own addresses, never accepted as a remote worker endpoint.
    pub own_addresses: Vec<IpAddr>,
    /// The host's interface addresses as they are now, read again at each remote worker's
    /// registration: an address the host gains after start (a VPN, a second DHCP lease) is
    /// the daemon's own too.
    pub interfaces: fn() -> Vec<IpAddr>,
}

impl std::fmt::Debug for ControlOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlOptions")
            .field("origins", &self.origins)
            .finish_non_exhaustive()
    }
}

/// The daemon's control plane.
pub struct ControlPlane {
    options: ControlOptions,
    shell: Arc<Shell>,
    next_conn: AtomicU64,
    /// Handshakes per non-loopback address in the current window.
    handshakes: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
    /// Open sessions per non-loopback address.
    sessions_per_ip: Mutex<HashMap<IpAddr, u32>>,
    /// Places for sessions in their handshake.
    handshaking: HandshakePlaces,
    /// The lines of refused upgrades, rate-limited handshakes and sessions closed for a
    /// malformed frame before they registered, at most one of each every
    /// [`REFUSAL_LOG_EVERY`]: each costs its sender one request, and must not cost the
    /// daemon a log line each.
    refusal_lines: Mutex<[Throttle; 3]>,
    tasks: Mutex<JoinSet<()>>,
}

/// How often a refused control upgrade, a rate-limited handshake, or a session closed
/// before it registered is logged at most.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// Which refusal line a [`Throttle`] of `refusal_lines` counts.
#[derive(Debug, Clone, Copy)]
enum RefusalLine {
    HandshakesFull = 0,
    RateLimited = 1,
    ClosedBeforeRegistering = 2,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane").finish_non_exhaustive()
    }
}

/// The peer went away (it closed, or its socket closed or reset), as against sending
/// something wrong.
fn is_peer_gone(error: &TransportError) -> bool {
    use tokio_tungstenite::tungstenite::Error as Ws;
    use tokio_tungstenite::tungstenite::error::ProtocolError;
    matches!(
        error,
        TransportError::Closed
            | TransportError::WebSocket(
                Ws::ConnectionClosed
                    | Ws::AlreadyClosed
                    | Ws::Io(_)
                    | Ws::Protocol(ProtocolError::ResetWithoutClosingHandshake)
            )
    )
}

/// Why a session ended when a send to the peer failed: its connection broke, or the send
/// itself did.
fn send_failure(error: &TransportError) -> DisconnectReason {
    if is_peer_gone(error) {
        DisconnectReason::ConnectionLost
    } else {
        DisconnectReason::CommunicationFailed
    }
}

/// Why a session ended, for the broker and the logs.
fn disconnect_reason(error: &TransportError) -> DisconnectReason {
    match error {
        TransportError::Closed => DisconnectReason::PeerClosed,
        TransportError::Timeout => DisconnectReason::PongTimeout,
        error if is_peer_gone(error) => DisconnectReason::ConnectionLost,
        _ => DisconnectReason::CommunicationFailed,
    }
}

impl ControlPlane {
    pub fn new(options: ControlOptions, shell: Arc<Shell>) -> Arc<ControlPlane> {
        Arc::new(ControlPlane {
            options,
            shell,
            next_conn: AtomicU64::new(1),
            handshakes: Mutex::new(HashMap::new()),
            sessions_per_ip: Mutex::new(HashMap::new()),
            handshaking: HandshakePlaces::new(),
            refusal_lines: Mutex::new([Throttle::default(); 3]),
            tasks: Mutex::new(JoinSet::new()),
        })
    }

    pub fn shell(&self) -> &Arc<Shell> {
        &self.shell
    }

    /// Closes every session (the daemon stops; clients enter their reconnect grace).
    /// Ends every session: what is queued for it (the `DaemonStopping` of §5.7) is sent,
    /// then it closes; sessions that do not finish within a second are aborted.
    pub async fn shutdown(&self) {
        self.shell.close_sessions();
        let mut tasks = relay_logging::sync::lock(&self.tasks, "control tasks")
            .map(|mut tasks| std::mem::take(&mut *tasks))
            .unwrap_or_default();
        let flushed = async { while tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(std::time::Duration::from_secs(1), flushed)
            .await
            .is_err()
        {
            tasks.shutdown().await;
        }
    }

    /// Answers a WebSocket upgrade on a control path and starts the session task.
    pub fn upgrade<B>(
        self: &Arc<Self>,
        mut req: Request<B>,
        role: Role,
        peer: SocketAddr,
    ) -> Response<ResponseBody> {
        let headers = req.headers();
        let is_websocket = headers
            .get(header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
        let key = headers.get(header::SEC_WEBSOCKET_KEY).cloned();
        let version_ok = headers
            .get(header::SEC_WEBSOCKET_VERSION)
            .is_some_and(|v| v.as_bytes() == b"13");
        let (true, Some(key), true) = (is_websocket, key, version_ok) else {
            let mut res = crate::answers::upgrade_required(
                "websocket",
                "control sessions are WebSocket version 13",
            );
            // The WebSocket version this side speaks (RFC 6455).
            res.headers_mut().insert(
                header::SEC_WEBSOCKET_VERSION,
                HeaderValue::from_static("13"),
            );
            return res;
        };
        let handshaking = match self.admit(peer.ip(), role) {
            Ok(place) => place,
            Err(refused) => return *refused,
        };
        let on_upgrade = hyper::upgrade::on(&mut req);
        let plane = self.clone();
        self.spawn(async move {
            let Ok(upgraded) = on_upgrade.await else {
                return;
            };
            let ws = WebSocketStream::from_raw_socket(
                TokioIo::new(upgraded),
                WsRole::Server,
                Some(ws_config()),
            )
            .await;
            plane
                .session(Transport::new(ws), role, peer, handshaking)
                .await;
        });
        let mut res = Response::new(ResponseBody::empty());
        *res.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
        let headers = res.headers_mut();
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        if let Ok(accept) = HeaderValue::from_str(&accept) {
            headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
        }
        res
    }

    /// A place for a handshake from `ip`, or the answer that turns the upgrade away: 503
    /// when its pool or its address's share of places is full, 429 past the address's
    /// handshakes per window. The place is taken before the upgrade is answered, so peers
    /// holding handshakes open cannot make the daemon keep more than its places; and it is
    /// taken before the handshake is counted, because an upgrade turned away for want of a
    /// place opened no handshake. Counted, the quick retries of a site behind one NAT
    /// address that reconnects all at once (after a daemon restart) used up its window
    /// four times faster than its handshakes did, and its workers outlived their grace.
    fn admit(&self, ip: IpAddr, role: Role) -> Result<HandshakePlace, Box<Response<ResponseBody>>> {
        let Some(place) = self.handshaking.take(ip) else {
            let retry_after = self.options.challenge_ttl.as_secs().max(1);
            if let Some(suppressed) = self.refusal_line(RefusalLine::HandshakesFull) {
                tracing::warn!(
                    event = "control_upgrade_refused",
                    reason = "handshakes_full",
                    peer = %ip,
                    retry_after_secs = retry_after,
                    suppressed_since_last_emit = suppressed,
                    "control upgrade refused: too many sessions in their handshake"
                );
            }
            return Err(Box::new(crate::answers::retry_later(
                StatusCode::SERVICE_UNAVAILABLE,
                relay_proto::ErrorKind::RelayTooManyRequests,
                "too many control sessions are in their handshake",
                retry_after,
            )));
        };
        if let Some(refused) = self.refuse_over_rate(ip, role) {
            return Err(Box::new(refused));
        }
        Ok(place)
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        if let Some(mut tasks) = relay_logging::sync::lock(&self.tasks, "control tasks") {
            while tasks.try_join_next().is_some() {}
            tasks.spawn(task);
        }
    }

    /// 429 with `Retry-After` for a non-loopback peer past its handshakes in the window,
    /// logged and counted as a refused registration; `None` lets the handshake on.
    fn refuse_over_rate(&self, ip: IpAddr, role: Role) -> Option<Response<ResponseBody>> {
        if ip.is_loopback() {
            return None;
        }
        let retry_after = self.rate_limited(ip)?;
        if let Some(suppressed) = self.refusal_line(RefusalLine::RateLimited) {
            relay_logging::Lifecycle::ControlRateLimited {
                role,
                peer: ip,
                retry_after_secs: retry_after,
                suppressed_since_last_emit: suppressed,
            }
            .emit();
        }
        self.shell.record_refusal(RefusedCode::RateLimited);
        let mut res = crate::answers::error(
            StatusCode::TOO_MANY_REQUESTS,
            relay_proto::ErrorKind::RelayTooManyRequests,
            "too many control handshakes from this address",
        );
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
        Some(res)
    }

    /// Whether a refusal line may be written now: `Some(lines left out since the last)`.
    fn refusal_line(&self, line: RefusalLine) -> Option<u64> {
        let mut lines = relay_logging::sync::lock(&self.refusal_lines, "control refusal lines")?;
        lines[line as usize].admit(Instant::now(), REFUSAL_LOG_EVERY)
    }

    /// Counts a handshake of a non-loopback address; `Some(retry_after_secs)` when over the
    /// limit of §5.2.
    fn rate_limited(&self, ip: IpAddr) -> Option<u64> {
        let now = Instant::now();
        // A poisoned limiter fails closed: every handshake is limited.
        let Some(mut handshakes) =
            relay_logging::sync::lock(&self.handshakes, "handshake rate limiter")
        else {
            return Some(self.options.challenge_window.as_secs().max(1));
        };
        let window = self.options.challenge_window;
        // Addresses whose window has passed are forgotten, so the map stays as small as the
        // set of recently active peers.
        handshakes.retain(|_, recent| {
            recent
                .back()
                .is_some_and(|last| now.duration_since(*last) < window)
        });
        let recent = handshakes.entry(ip).or_default();
        while recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= window)
        {
            recent.pop_front();
        }
        if recent.len() >= self.options.challenge_limit as usize {
            let oldest = recent.front().copied().unwrap_or(now);
            let wait = window.saturating_sub(now.duration_since(oldest));
            return Some(wait.as_secs_f64().ceil().max(1.0) as u64);
        }
        recent.push_back(now);
        None
    }

    async fn session<S>(
        self: Arc<Self>,
        mut transport: Transport<S>,
        role: Role,
        peer: SocketAddr,
        handshaking: HandshakePlace,
    ) where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let ip = peer.ip();
        let remote = !ip.is_loopback();
        let slot = !remote || self.take_ip_slot(ip);
        let handshake = if slot {
            self.handshake(&mut transport, role, peer).await
        } else {
            Err(HandshakeError::refused(RefusedCode::SessionLimit, None))
        };
        // The handshake is over: the broker has the registration, or it is refused.
        drop(handshaking);
        match handshake {
            Ok((conn, receiver)) => {
                let reason = self
                    .serve(&mut transport, role, conn, receiver, remote)
                    .await;
                self.shell.detach(conn, reason);
            }
            Err(HandshakeError::Refused {
                code,
                fingerprint,
                text,
            }) => {
                let told = text.as_deref().unwrap_or(code.as_str());
                refuse(
                    &self.shell,
                    &mut transport,
                    role,
                    code,
                    ip,
                    fingerprint,
                    told,
                )
                .await;
            }
            Err(HandshakeError::Close { code, reason }) => {
                // A malformed or out-of-order frame is closed with its reason, logged; a
                // silent one is only closed. Loopback peers are not rate-limited, so a
                // local process could otherwise write thousands of these lines a second.
                if code == CloseCode::Protocol
                    && let Some(suppressed) =
                        self.refusal_line(RefusalLine::ClosedBeforeRegistering)
                {
                    tracing::warn!(
                        event = "control_session_closed",
                        role = role.as_str(),
                        peer = %ip,
                        reason,
                        suppressed_since_last_emit = suppressed,
                        "control session closed before it registered"
                    );
                }
                transport.close(code, reason).await;
            }
            Err(HandshakeError::Gone) => {}
        }
        if remote && slot {
            self.release_ip_slot(ip);
        }
    }

    fn take_ip_slot(&self, ip: IpAddr) -> bool {
        let Some(mut counts) =
            relay_logging::sync::lock(&self.sessions_per_ip, "sessions per address")
        else {
            return false;
        };
        let count = counts.entry(ip).or_default();
        if *count >= self.options.max_sessions_per_ip {
            return false;
        }
        *count += 1;
        true
    }

    fn release_ip_slot(&self, ip: IpAddr) {
        if let Some(mut counts) =
            relay_logging::sync::lock(&self.sessions_per_ip, "sessions per address")
            && let Some(count) = counts.get_mut(&ip)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&ip);
            }
        }
    }

    /// `Hello` → `Challenge` → `Register…`; on success the session is attached to the shell
    /// and its registration handed to the broker. A failure says how the session ends; the
    /// caller does it, in one place.
    async fn handshake<S>(
        &self,
        transport: &mut Transport<S>,
        role: Role,
        peer: SocketAddr,
    ) -> Result<(ConnId, tokio::sync::mpsc::Receiver<Outbound>), HandshakeError>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let ip = peer.ip();
        let ttl = self.options.challenge_ttl;
        let hello = match transport.recv_within(ttl).await {
            Ok(frame) => match frame.message {
                Message::Hello(hello) => hello,
                _ => return Err(HandshakeError::close(CloseCode::Protocol, "expected Hello")),
            },
            Err(TransportError::Frame(e)) if e.is_protocol_unsupported() => {
                return Err(HandshakeError::refused(
                    RefusedCode::ProtocolUnsupported,
                    None,
                ));
            }
            // Gone before it said anything: nothing to close, nothing wrong to log.
            Err(e) if is_peer_gone(&e) => return Err(HandshakeError::Gone),
            Err(TransportError::Timeout) => {
                return Err(HandshakeError::close(CloseCode::Away, "no Hello in time"));
            }
            Err(_) => return Err(HandshakeError::close(CloseCode::Protocol, "expected Hello")),
        };
        let selected =
            SUPPORTED_PROTOCOLS
                .highest_common(&hello.protocols)
                .ok_or(HandshakeError::refused(
                    RefusedCode::ProtocolUnsupported,
                    None,
                ))?;
        let client_key = PublicKey::from_bytes(hello.machine_key.0);
        let fingerprint = Fingerprint(*client_key.fingerprint().as_bytes());
        if hello.role != role
            || !self
                .options
                .origins
                .iter()
                .any(|o| o == hello.target_origin.as_str())
        {
            return Err(HandshakeError::refused(
                RefusedCode::TranscriptMismatch,
                Some(fingerprint),
            ));
        }
        let Ok(daemon_nonce) = Secret32::generate() else {
            return Err(HandshakeError::close(CloseCode::Error, "no randomness"));
        };
        // An id like every other on the wire: a UUIDv7. The challenge's secrecy is its
        // nonce's, which the signature covers; the id only names it.
        let id = uuid::Uuid::now_v7().into_bytes();
        let daemon_key = self.options.daemon_key.public_key();
        let transcript = Transcript::new(&HandshakeFields {
            target_origin: hello.target_origin.as_str(),
            role: role.transcript_byte(),
            selected_protocol: selected,
            challenge_id: id,
            client_nonce: hello.client_nonce.0,
            daemon_nonce: *daemon_nonce.as_bytes(),
            client_key,
            daemon_key,
        });
        let challenge = Challenge {
            daemon_key: relay_proto::PublicKey(*daemon_key.as_bytes()),
            daemon_nonce: Bytes32(*daemon_nonce.as_bytes()),
            challenge_id: Id(id),
            selected_protocol: selected,
            signature: Signature(transcript.sign_challenge(&self.options.daemon_key)),
        };
        transport
            .send(&Message::Challenge(challenge))
            .await
            .map_err(|_| HandshakeError::Gone)?;
        // The challenge is single-use and expires (§5.2).
        let frame = match transport.recv_within(ttl).await {
            Ok(frame) => frame,
            Err(TransportError::Timeout) => {
                return Err(HandshakeError::refused(
                    RefusedCode::ChallengeExpired,
                    Some(fingerprint),
                ));
            }
            // A kind or version this daemon does not know is answered, as it is in `Hello`.
            Err(TransportError::Frame(e)) if e.is_protocol_unsupported() => {
                return Err(HandshakeError::refused(
                    RefusedCode::ProtocolUnsupported,
                    Some(fingerprint),
                ));
            }
            Err(e) if is_peer_gone(&e) => return Err(HandshakeError::Gone),
            Err(_) => {
                return Err(HandshakeError::close(
                    CloseCode::Protocol,
                    "expected a registration",
                ));
            }
        };
        let (signed, signature, input_for) = match (role, frame.message) {
            (Role::Mcp, Message::RegisterMcp(m)) => (
                encode_fields(&m.fields),
                m.signature,
                Pending::Mcp(m.fields),
            ),
            (Role::Mcp, Message::ResumeMcp(m)) => (
                encode_fields(&m.fields),
                m.signature,
                Pending::ResumeMcp(m.fields),
            ),
            (Role::Worker, Message::RegisterWorker(m)) => (
                encode_fields(&m.fields),
                m.signature,
                Pending::Worker(m.fields),
            ),
            (Role::Worker, Message::ResumeWorker(m)) => (
                encode_fields(&m.fields),
                m.signature,
                Pending::ResumeWorker(m.fields),
            ),
            _ => {
                return Err(HandshakeError::close(
                    CloseCode::Protocol,
                    "expected a registration",
                ));
            }
        };
        transcript
            .verify_registration(&signed, &signature.0)
            .map_err(|_| HandshakeError::refused(RefusedCode::BadSignature, Some(fingerprint)))?;
        let conn = ConnId(self.next_conn.fetch_add(1, Ordering::Relaxed));
        let input = match input_for {
            Pending::Mcp(fields) => Input::McpRegister {
                conn,
                fingerprint,
                digest: Digest(
                    *RouteToken::from_bytes(fields.credential.0)
                        .digest()
                        .as_bytes(),
                ),
                instance: hello.instance_id,
                peer: ip,
                hint: fields.worker_hint,
            },
            Pending::ResumeMcp(fields) => Input::McpResume {
                conn,
                fingerprint,
                session_id: fields.session_id,
                resume_token: fields.resume_token,
                peer: ip,
            },
            Pending::Worker(fields) => {
                if let Err(refusal) = self.check_endpoint(fields.endpoint.as_str(), ip) {
                    return Err(HandshakeError::Refused {
                        code: RefusedCode::EndpointNotAllowed,
                        fingerprint: Some(fingerprint),
                        text: Some(refusal.to_string()),
                    });
                }
                Input::WorkerRegister {
                    conn,
                    fingerprint,
                    activation_id: fields.activation_id,
                    activation_token: fields.activation_token,
                    endpoint: fields.endpoint.as_str().to_owned(),
                    certificate_sha256: fields.certificate_sha256,
                }
            }
            Pending::ResumeWorker(fields) => Input::WorkerResume {
                conn,
                fingerprint,
                worker_id: fields.worker_id,
                certificate_sha256: fields.certificate_sha256,
            },
        };
        let receiver = self.shell.attach(conn, ip);
        self.shell.input(input);
        Ok((conn, receiver))
    }

    /// §5.5: `127.0.0.1` for a loopback session; for a remote one the peer's own address or
    /// one in `worker_networks`, and never a loopback, link-local, multicast, unspecified
    /// or daemon-owned address.
    fn check_endpoint(&self, endpoint: &str, peer: IpAddr) -> Result<(), EndpointRefusal> {
        let mut own = self.options.own_addresses.clone();
        if !peer.is_loopback() {
            own.extend((self.options.interfaces)().iter().map(IpAddr::to_canonical));
        }
        check_endpoint(endpoint, peer, &self.options.worker_networks, &own)
    }

    /// Moves frames until the session ends; returns why it ended.
    async fn serve<S>(
        &self,
        transport: &mut Transport<S>,
        role: Role,
        conn: ConnId,
        mut outbound: tokio::sync::mpsc::Receiver<Outbound>,
        remote: bool,
    ) -> DisconnectReason
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        // Loopback sessions need no pings (§5.1); remote ones are pinged and must answer.
        let ping_every = if remote {
            self.options.ping
        } else {
            Duration::from_secs(3600 * 24 * 365)
        };
        let mut ping =
            tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
        let mut last_heard = tokio::time::Instant::now();
        loop {
            tokio::select! {
                out = outbound.recv() => match out {
                    Some(Outbound::Message(message)) => {
                        let refused = matches!(*message, Message::Refused(_));
                        // A peer that reads nothing while the daemon has something to say
                        // cannot keep up, and is closed (§5.1): it gets the pong time to
                        // take each message, as it would to answer a ping. Without it the
                        // task waited in this send for as long as the peer lived, and its
                        // queue, unread, could never fill.
                        let sending = transport.send(&message);
                        match tokio::time::timeout(self.options.pong_timeout, sending).await {
                            Ok(Ok(())) => {}
                            Ok(Err(error)) => return send_failure(&error),
                            Err(_) => return DisconnectReason::PongTimeout,
                        }
                        if refused {
                            transport.close(CloseCode::Policy, "refused").await;
                            return DisconnectReason::PeerClosed;
                        }
                    }
                    Some(Outbound::Close) | None => {
                        transport.close(CloseCode::Normal, "closed by the daemon").await;
                        return DisconnectReason::PeerClosed;
                    }
                },
                frame = transport.recv() => match frame {
                    Ok(None) => last_heard = tokio::time::Instant::now(),
                    Ok(Some(frame)) => {
                        last_heard = tokio::time::Instant::now();
                        match session_input(role, conn, frame.message) {
                            Some(input) => self.shell.input(input),
                            None => {
                                transport.close(CloseCode::Protocol, "unexpected message").await;
                                return DisconnectReason::CommunicationFailed;
                            }
                        }
                    }
                    Err(error) => {
                        // A kind or version this daemon does not know is answered with the
                        // range it speaks before the session closes (§5.6).
                        if let TransportError::Frame(e) = &error
                            && e.is_protocol_unsupported()
                        {
                            let _ = transport.send(&Message::Refused(Refused {
                                code: RefusedCode::ProtocolUnsupported.code(),
                                text: Text::truncated(RefusedCode::ProtocolUnsupported.as_str()),
                                supported: SUPPORTED_PROTOCOLS,
                            })).await;
                        }
                        if matches!(error, TransportError::Frame(_) | TransportError::TextFrame) {
                            transport.close(CloseCode::Protocol, "malformed message").await;
                        }
                        return disconnect_reason(&error);
                    }
                },
                _ = ping.tick() => {
                    if let Err(error) = transport.ping().await {
                        return send_failure(&error);
                    }
                }
                // A remote peer that sent nothing, not even a pong, for a ping interval and
                // the pong timeout is gone (§5.1).
                () = tokio::time::sleep_until(last_heard + ping_every + self.options.pong_timeout), if remote => {
                    transport.close(CloseCode::Away, "pong timeout").await;
                    return DisconnectReason::PongTimeout;
                }
            }
        }
    }
}

/// How a handshake that produced no session ends.
#[derive(Debug)]
enum HandshakeError {
    /// A typed refusal (§5.6): counted, logged, sent as `Refused`, then the session closes.
    Refused {
        code: RefusedCode,
        fingerprint: Option<Fingerprint>,
        /// What the peer is told beside the code; the code's name when `None`.
        text: Option<String>,
    },
    /// Not a well-formed handshake: closed without a refusal.
    Close {
        code: CloseCode,
        reason: &'static str,
    },
    /// The connection already failed: nothing more can be sent.
    Gone,
}

impl HandshakeError {
    fn refused(code: RefusedCode, fingerprint: Option<Fingerprint>) -> HandshakeError {
        HandshakeError::Refused {
            code,
            fingerprint,
            text: None,
        }
    }

    fn close(code: CloseCode, reason: &'static str) -> HandshakeError {
        HandshakeError::Close { code, reason }
    }
}

/// A registration waiting for its checks.
enum Pending {
    Mcp(relay_proto::RegisterMcpFields),
    ResumeMcp(relay_proto::ResumeMcpFields),
    Worker(relay_proto::RegisterWorkerFields),
    ResumeWorker(relay_proto::ResumeWorkerFields),
}

/// The broker input of an in-session message, or `None` when the role may not send it.
/// A peer's `failure_reason` is read against the closed set here, at the edge, and its
/// diagnostic is dropped: no text a peer chose reaches the daemon's log.
fn session_input(role: Role, conn: ConnId, message: Message) -> Option<Input> {
    Some(match (role, message) {
        (Role::Mcp, Message::Release) => Input::McpRelease { conn },
        (Role::Mcp, Message::ActivationFailed(m)) => Input::McpActivationFailed {
            conn,
            activation_id: m.activation_id,
            reason: FailureReason::from_peer(m.failure_reason.as_str()),
        },
        (Role::Mcp, Message::WorkerExited(m)) => Input::McpWorkerExited {
            conn,
            activation_id: m.activation_id,
            reason: m.failure_reason(),
        },
        (Role::Mcp, Message::LaunchStatus { activation_id }) => Input::McpLaunchStatus {
            conn,
            activation_id,
        },
        (Role::Worker, Message::Ready) => Input::WorkerReportedReady { conn },
        (Role::Worker, Message::WorkerActivationFailed(m)) => Input::WorkerActivationFailed {
            conn,
            reason: FailureReason::from_peer(m.failure_reason.as_str()),
        },
        (Role::Worker, Message::Stopping) => Input::WorkerStopping { conn },
        _ => return None,
    })
}

/// Sends a typed refusal saying `text` beside the code, logs it, counts it in `/metrics`,
/// and closes (§5.8).
async fn refuse<S>(
    shell: &Shell,
    transport: &mut Transport<S>,
    role: Role,
    code: RefusedCode,
    peer: IpAddr,
    fingerprint: Option<Fingerprint>,
    text: &str,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    shell.record_refusal(code);
    let fp = fingerprint.map(|f| f.to_hex());
    relay_logging::Lifecycle::ControlRegistrationRefused {
        role,
        reason: code,
        peer,
        fingerprint: fp.as_deref(),
    }
    .emit();
    let refused = Message::Refused(Refused {
        code: code.code(),
        text: Text::truncated(text),
        supported: SUPPORTED_PROTOCOLS,
    });
    let _ = transport.send(&refused).await;
    transport.close(CloseCode::Policy, "refused").await;
}

/// Why a worker endpoint is refused (§5.5). Its text goes back to the worker in `Refused`,
/// so the worker's log, which is all a user on a remote client machine can read, says what
/// to change; the host in it is the parsed address, never the worker's own text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointRefusal {
    #[error("the worker endpoint must be an IPv4 address and a port other than 0")]
    Malformed,
    #[error(
        "a worker whose control session comes from the daemon's own loopback must listen on 127.0.0.1"
    )]
    NotLoopback,
    #[error(
        "the worker advertises {host}, {kind}, which the daemon never connects to for a remote worker: set RELAY_WORKER_ADVERTISE_ADDRESS to this machine's address as the daemon sees it"
    )]
    Unusable { host: Ipv4Addr, kind: &'static str },
    /// Also the refusal of one of the daemon's own addresses, in the same words: it comes
    /// before the grant is checked, so its peer is not yet known to hold one, and must not
    /// learn which addresses are the daemon's.
    #[error(
        "the worker advertises {host}, but the daemon sees its control session come from {peer}: advertise {peer} if the daemon can connect to the worker there (behind NAT, only with the worker port forwarded to this machine), or have the administrator list this network in worker_networks"
    )]
    NotThePeer { host: Ipv4Addr, peer: IpAddr },
}

/// What kind of address `host` is when the daemon never accepts it for a remote worker,
/// whatever the session's peer (`"a loopback address"`, `"the unspecified address"`);
/// `None` for an address it may accept. relay-mcp checks `RELAY_WORKER_ADVERTISE_ADDRESS`
/// with it at start.
pub fn never_a_remote_worker(host: Ipv4Addr) -> Option<&'static str> {
    if host.is_loopback() {
        Some("a loopback address")
    } else if host.is_link_local() {
        Some("a link-local address")
    } else if host.is_multicast() {
        Some("a multicast address")
    } else if host.is_unspecified() {
        Some("the unspecified address")
    } else if host.is_broadcast() {
        Some("the broadcast address")
    } else {
        None
    }
}

/// The endpoint rule of §5.5, as a pure function: `Ok` for an endpoint the daemon may
/// call, or why not.
pub fn check_endpoint(
    endpoint: &str,
    peer: IpAddr,
    networks: &[ipnet::Ipv4Net],
    own: &[IpAddr],
) -> Result<(), EndpointRefusal> {
    let Ok(addr) = endpoint.parse::<SocketAddr>() else {
        return Err(EndpointRefusal::Malformed);
    };
    let IpAddr::V4(host) = addr.ip() else {
        return Err(EndpointRefusal::Malformed);
    };
    if addr.port() == 0 {
        return Err(EndpointRefusal::Malformed);
    }
    if peer.is_loopback() {
        return if host == Ipv4Addr::LOCALHOST {
            Ok(())
        } else {
            Err(EndpointRefusal::NotLoopback)
        };
    }
    if let Some(kind) = never_a_remote_worker(host) {
        return Err(EndpointRefusal::Unusable { host, kind });
    }
    if own.contains(&IpAddr::V4(host)) {
        return Err(EndpointRefusal::NotThePeer { host, peer });
    }
    if IpAddr::V4(host) == peer || networks.iter().any(|net| net.contains(&host)) {
        Ok(())
    } else {
        Err(EndpointRefusal::NotThePeer { host, peer })
    }
}

#[cfg(test)]
mod tests;
