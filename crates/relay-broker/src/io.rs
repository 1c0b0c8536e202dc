//! What goes into the broker and what comes out.

use std::net::IpAddr;
use std::time::Duration;

use relay_proto::{
    ActivationCancelReason, Bytes32, DisconnectReason, FailureReason, Id, LaunchOutcome,
    McpDisconnectReason, McpRemovedReason, Message, PassThroughReason, RefusedCode, Role,
    WorkerDisconnectReason, WorkerHint, WorkerRemovedReason,
};

use crate::types::{ConnId, Digest, Fingerprint};

/// Everything that happens to the broker, as the shell reports it. Every control input
/// names the connection it arrived on; authentication (the signed handshake) has already
/// happened in the shell, which passes the authenticated fingerprint.
#[derive(Debug, Clone)]
pub enum Input {
    /// An MCP registers its route credential (`RegisterMcp`).
    McpRegister {
        conn: ConnId,
        fingerprint: Fingerprint,
        digest: Digest,
        /// The MCP process's instance id from `Hello`.
        instance: Id,
        peer: IpAddr,
        hint: Option<WorkerHint>,
    },
    /// An MCP resumes its session after a drop (`ResumeMcp`).
    McpResume {
        conn: ConnId,
        fingerprint: Fingerprint,
        session_id: Id,
        resume_token: Bytes32,
        peer: IpAddr,
    },
    /// The harness session ends (`Release`).
    McpRelease { conn: ConnId },
    /// The MCP's launch failed (`ActivationFailed`).
    McpActivationFailed {
        conn: ConnId,
        activation_id: Id,
        reason: FailureReason,
    },
    /// The MCP's child exited (`WorkerExited`). `reason` is what its exit status tells,
    /// should the child not have been ready: the worker's own `ActivationFailed`, sent just
    /// before it exits, travels on another connection and may be read after this.
    McpWorkerExited {
        conn: ConnId,
        activation_id: Id,
        reason: FailureReason,
    },
    /// The MCP asks what became of its launch (`LaunchStatus`).
    McpLaunchStatus { conn: ConnId, activation_id: Id },
    /// A worker registers with its grant (`RegisterWorker`). The shell has checked the
    /// endpoint (§5.5) and the signature.
    WorkerRegister {
        conn: ConnId,
        fingerprint: Fingerprint,
        activation_id: Id,
        activation_token: Bytes32,
        endpoint: String,
        certificate_sha256: Bytes32,
    },
    /// A worker of a known generation comes back (`ResumeWorker`).
    WorkerResume {
        conn: ConnId,
        fingerprint: Fingerprint,
        worker_id: Id,
        certificate_sha256: Bytes32,
    },
    /// The worker says it loaded its plugins and listens (`Ready`). This is only its report:
    /// the route is ready once the readiness probe also succeeds.
    WorkerReportedReady { conn: ConnId },
    /// The worker could not start (`ActivationFailed` from the worker).
    WorkerActivationFailed { conn: ConnId, reason: FailureReason },
    /// The worker is about to exit (`Stopping`).
    WorkerStopping { conn: ConnId },
    /// A control connection closed or failed, of either role.
    Disconnected {
        conn: ConnId,
        reason: DisconnectReason,
    },
    /// The result of an [`Output::Probe`].
    ProbeResult {
        worker_id: Id,
        probe: u64,
        outcome: ProbeOutcome,
    },
    /// The state write requested by [`Output::Persist`] finished.
    Persisted { seq: u64, ok: bool },
    /// `relayd bindings revoke` (or `block` when `block`).
    Revoke {
        fingerprint: Fingerprint,
        block: bool,
    },
    /// `relayd bindings unblock`.
    Unblock { fingerprint: Fingerprint },
    /// The daemon is stopping: every client is told so and keeps its state.
    DaemonStopping,
}

/// How a readiness probe (or a connection attempt to a worker) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeOutcome {
    Ready,
    /// Connection refused, or a certificate that is not the registered one: the worker is
    /// gone (positive evidence of death, §5.4).
    Gone,
    /// Anything else: a timeout, a TLS or HTTP failure, not ready yet.
    Failed,
}

/// What the shell must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send a control message on a connection.
    Send { conn: ConnId, message: Message },
    /// Close a connection (after any `Refused` sent before it).
    Close { conn: ConnId },
    /// Probe a worker's readiness endpoint over its pinned TLS connection, and report
    /// [`Input::ProbeResult`] with the same `probe` number.
    Probe {
        worker_id: Id,
        probe: u64,
        endpoint: String,
        certificate_sha256: Bytes32,
        secret: Bytes32,
    },
    /// Bindings or the generation ledger changed: write [`Broker::snapshot`] and report
    /// [`Input::Persisted`] with this `seq`.
    Persist { seq: u64 },
    /// A worker generation is no longer usable: drop pooled connections to it.
    Forget { worker_id: Id },
    /// Something to log.
    Event(Event),
}

/// A lifecycle event (§10.3) the broker decided on; the shell writes it to the log. Its
/// reasons are the shared vocabulary of `relay-proto`, which the log writes as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    RegistrationRefused {
        conn: ConnId,
        role: Role,
        reason: RefusedCode,
        fingerprint: Option<Fingerprint>,
    },
    MachineIdentityConflict {
        fingerprint: Fingerprint,
        peer: IpAddr,
        other_peer: IpAddr,
    },
    CredentialEvicted {
        fingerprint: Fingerprint,
        digest: Digest,
    },
    RouteEvicted {
        fingerprint: Fingerprint,
    },
    /// The tombstone table was full: the tombstones that expire first were dropped.
    TombstonesDropped {
        dropped: usize,
        limit: usize,
    },
    McpAdded {
        fingerprint: Fingerprint,
        instance: Id,
        references: u32,
    },
    McpRemoved {
        fingerprint: Fingerprint,
        instance: Id,
        references: u32,
        reason: McpRemovedReason,
    },
    McpConnected {
        fingerprint: Fingerprint,
        instance: Id,
        peer: IpAddr,
    },
    McpReconnected {
        fingerprint: Fingerprint,
        instance: Id,
        disconnected: Duration,
    },
    McpDisconnected {
        fingerprint: Fingerprint,
        instance: Id,
        reason: McpDisconnectReason,
    },
    WorkerStaged {
        fingerprint: Fingerprint,
        activation_id: Id,
        owner_instance: Id,
        attempt: u32,
    },
    WorkerStartupPending {
        fingerprint: Fingerprint,
        activation_id: Option<Id>,
        elapsed: Duration,
    },
    WorkerAdded {
        fingerprint: Fingerprint,
        worker_id: Id,
        activation_id: Option<Id>,
        startup_elapsed: Duration,
    },
    WorkerReady {
        fingerprint: Fingerprint,
        worker_id: Id,
    },
    WorkerRelaunchRequested {
        fingerprint: Fingerprint,
        attempt: u32,
    },
    WorkerActivationFailed {
        fingerprint: Fingerprint,
        activation_id: Option<Id>,
        reason: FailureReason,
        retry_after: Duration,
        attempt: u32,
    },
    WorkerActivationCancelled {
        fingerprint: Fingerprint,
        activation_id: Id,
        reason: ActivationCancelReason,
    },
    WorkerControlConnected {
        conn: ConnId,
        fingerprint: Fingerprint,
        worker_id: Id,
    },
    WorkerControlReconnected {
        fingerprint: Fingerprint,
        worker_id: Id,
        disconnected: Duration,
    },
    WorkerControlDisconnected {
        fingerprint: Fingerprint,
        worker_id: Id,
        reason: WorkerDisconnectReason,
    },
    WorkerControlLost {
        fingerprint: Fingerprint,
        worker_id: Id,
    },
    WorkerReadinessFailed {
        fingerprint: Fingerprint,
        worker_id: Id,
        consecutive_failures: u32,
    },
    WorkerRecoveryStarted {
        fingerprint: Fingerprint,
        worker_id: Id,
    },
    WorkerRecoveryFailed {
        fingerprint: Fingerprint,
        worker_id: Id,
    },
    WorkerDrainStarted {
        fingerprint: Fingerprint,
        worker_id: Id,
        in_flight: u32,
    },
    WorkerRemoved {
        fingerprint: Fingerprint,
        worker_id: Id,
        reason: WorkerRemovedReason,
    },
}

/// Whether a request may still be told to wait for its route's worker (§3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Its first decision: it may be told [`Decision::Wait`].
    Allowed,
    /// It waited the whole activation wait: decided now, and an opening hook that waited
    /// for an MCP in vain is remembered, so the next ones of its route do not wait.
    Waited,
    /// It may not wait (the shell's room for waiting requests is full) but did not wait
    /// either: decided now, with no sign that its MCP will not come.
    NotAllowed,
}

/// What a request is, for the routing rules (§3.5: draining workers still take hooks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    Model,
    Hook,
    /// A hook that opens a harness session (`SessionStart`, the first prompt): the harness
    /// sends it while its MCP server is still registering, so it may wait for the session
    /// as it would for an activating route, instead of bypassing the worker.
    OpeningHook,
}

impl RequestKind {
    pub(crate) fn is_hook(self) -> bool {
        matches!(self, RequestKind::Hook | RequestKind::OpeningHook)
    }
}

/// A request routed to a worker, to be ended with [`crate::Broker::end_request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket(pub(crate) u64);

/// Where one request goes (§3.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No live route for this credential.
    Unbound,
    /// The route is starting its worker: ask again when the broker changes or the wait
    /// (`activation_wait`) is over, then with `waited = true`.
    Wait,
    /// Forward to this worker.
    Worker {
        ticket: Ticket,
        fingerprint: Fingerprint,
        worker_id: Id,
        endpoint: String,
        certificate_sha256: Bytes32,
        secret: Bytes32,
    },
    /// No worker takes it; pass through (or 503 in strict mode with `retry_after`).
    PassThrough {
        ticket: Ticket,
        fingerprint: Fingerprint,
        reason: PassThroughReason,
        retry_after: Duration,
    },
    /// Over `max_requests_per_identity` (429).
    TooMany { fingerprint: Fingerprint },
}

/// What an MCP is told about its launch at shutdown.
pub(crate) fn launch_status(activation_id: Id, outcome: LaunchOutcome) -> Message {
    Message::LaunchStatusIs(relay_proto::LaunchStatusIs {
        activation_id,
        outcome,
    })
}
