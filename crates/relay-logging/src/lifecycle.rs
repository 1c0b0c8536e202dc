//! The lifecycle events of SPEC §10.3 as typed values, one variant per event name.
//!
//! Each variant carries what an operator needs to follow a route (its fingerprint), a worker
//! (its id) or an MCP session (its instance id), and nothing secret: there is no field for a
//! token, grant, key, worker secret or request body. Fingerprints and credential digests are
//! passed in full and written as their first 12 hex characters; a value that is not 64 hex
//! characters is written as `invalid` so that a token passed by mistake never reaches a log.
//!
//! The file is long because it is the whole log contract in one enum and one `emit`: an
//! operator (or a reviewer) reads every event name and its fields in one place, and a new
//! event cannot be added without its field list being seen beside the others.

use std::{fmt, net::IpAddr, net::SocketAddr, path::Path};

use relay_proto::{
    ActivationCancelReason, FailureReason, McpDisconnectReason, McpRemovedReason,
    PassThroughReason, RefusedCode, Role, RouteMode, WorkerDisconnectReason, WorkerRemovedReason,
};
use uuid::Uuid;

/// The `target` of every lifecycle event.
pub const LIFECYCLE_TARGET: &str = "relay::lifecycle";

/// How many hex characters of a fingerprint or digest a log line shows.
const PREFIX_LEN: usize = 12;
/// The full length of a SHA-256 digest in hex.
const DIGEST_HEX_LEN: usize = 64;
/// Written instead of a fingerprint or digest that is not 64 hex characters.
const INVALID_DIGEST: &str = "invalid";

/// The 12-character prefix of a 64-hex fingerprint or digest, or `invalid`.
pub(crate) fn digest_prefix(full: &str) -> &str {
    if full.len() == DIGEST_HEX_LEN && full.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        &full[..PREFIX_LEN]
    } else {
        INVALID_DIGEST
    }
}

relay_proto::vocabulary! {
    /// How the daemon serves requests (`relayd` flags, SPEC §2.1).
    DaemonMode {
        /// Default: a worker when one is ready, else pass-through.
        Managed => "managed",
        /// `--pass-through`.
        PassThrough => "pass_through",
        /// `--require-worker`: 503 when no worker is ready.
        RequireWorker => "require_worker",
    }
}

relay_proto::vocabulary! {
    /// `[upstream] daemon_keys` (SPEC §3.2).
    DaemonKeys {
        /// Daemon keys only for requests with a bound route credential.
        BoundOnly => "bound_only",
        /// Daemon keys for any local request.
        AnyLocal => "any_local",
    }
}

relay_proto::vocabulary! {
    /// The family of a public request (SPEC §3.5).
    PublicRoute {
        Hook => "hook",
        Openai => "openai",
        Anthropic => "anthropic",
    }
}

relay_proto::vocabulary! {
    /// Why `relay-mcp` serves its session without a worker route (SPEC §10.3).
    McpPassThroughReason {
        CredentialRejected => "credential_rejected",
        DaemonUnreachable => "daemon_unreachable",
        RouteTableFull => "route_table_full",
        ConfiguredPassThrough => "configured_pass_through",
        ActivationFailed => "activation_failed",
    }
}

relay_proto::vocabulary! {
    /// Where a route credential was looked for (SPEC §4.1).
    CredentialSource {
        /// `RELAY_CLIENT_TOKEN`.
        Env => "env",
        /// `<base>/relay/.client-token`.
        File => "file",
    }
}

relay_proto::vocabulary! {
    /// Why a route credential source was skipped (SPEC §4.1); `invalid_contents` also covers
    /// an environment value that is not a token.
    CredentialSkipReason {
        Symlink => "symlink",
        NotRegularFile => "not_regular_file",
        NotOwnedByCurrentUser => "not_owned_by_current_user",
        InsecurePermissions => "insecure_permissions",
        TooLarge => "too_large",
        InvalidContents => "invalid_contents",
        Unreadable => "unreadable",
    }
}

/// How a process ended, as far as the observer knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessExit {
    /// It exited with this status code.
    Code(i32),
    /// It was killed by this signal (unix).
    Signal(i32),
    /// Neither is known.
    Unknown,
}

impl From<std::process::ExitStatus> for ProcessExit {
    fn from(status: std::process::ExitStatus) -> ProcessExit {
        if let Some(code) = status.code() {
            return ProcessExit::Code(code);
        }
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt as _;
            if let Some(signal) = status.signal() {
                return ProcessExit::Signal(signal);
            }
        }
        ProcessExit::Unknown
    }
}

impl ProcessExit {
    fn code(self) -> Option<i32> {
        match self {
            ProcessExit::Code(code) => Some(code),
            ProcessExit::Signal(_) | ProcessExit::Unknown => None,
        }
    }

    fn signal(self) -> Option<i32> {
        match self {
            ProcessExit::Signal(signal) => Some(signal),
            ProcessExit::Code(_) | ProcessExit::Unknown => None,
        }
    }
}

/// Formats an error with its chain of sources: `a: b: c`.
struct ErrorChain<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        Ok(())
    }
}

/// One lifecycle event of SPEC §10.3. Build the variant and call [`Lifecycle::emit`].
///
/// `fingerprint` is always the full 64-hex route fingerprint (written as its 12-character
/// prefix); durations are milliseconds. The provider-failure events are not here: they are
/// [`ProviderFailure`](crate::ProviderFailure) values, emitted through a
/// [`RateLimiter`](crate::RateLimiter).
#[derive(Debug, Clone, Copy)]
pub enum Lifecycle<'a> {
    /// The daemon serves on `address` (info).
    DaemonListening {
        address: SocketAddr,
        advertised_origin: Option<&'a str>,
        mode: DaemonMode,
        tls: bool,
        socket_activated: bool,
        open_file_limit: u64,
        /// Accepted connections open at once, at most: `max_connections`, or less when the
        /// open-file limit cannot hold that many and their provider connections.
        max_connections: usize,
        /// Provider connections open at once, at most: what the open-file limit leaves.
        max_provider_connections: usize,
        instance_id: Uuid,
        version: &'a str,
    },
    /// The daemon runs with `--pass-through` (info); says whether daemon provider keys are
    /// configured, never the keys.
    DaemonPassThroughEnabled {
        daemon_keys: DaemonKeys,
        openai_key_configured: bool,
        anthropic_key_configured: bool,
    },
    /// The daemon stopped cleanly (info).
    DaemonStopped {
        uptime_ms: u64,
        unfinished_requests: u64,
    },
    /// The daemon cannot continue (error).
    DaemonFailed {
        error: &'a (dyn std::error::Error + 'static),
    },
    /// Writing a state file failed; it is retried and `/healthz` says `degraded` (error).
    StateWriteFailed {
        file: &'a Path,
        error: &'a std::io::Error,
        attempt: u32,
    },
    /// A control registration was refused (warn; info for `session_unknown`, which every
    /// MCP meets once after a daemon restart).
    ControlRegistrationRefused {
        role: Role,
        reason: RefusedCode,
        peer: IpAddr,
        fingerprint: Option<&'a str>,
    },
    /// A non-loopback address opened too many handshakes (warn).
    ControlRateLimited {
        role: Role,
        peer: IpAddr,
        retry_after_secs: u64,
        /// Lines of this event left out since the last one written (at most one is written
        /// every ten seconds: a flood of handshakes must not become a flood of lines).
        suppressed_since_last_emit: u64,
    },
    /// Client side: the daemon's key does not match the pinned one (error).
    DaemonPinMismatch {
        role: Role,
        origin: &'a str,
        pin_file: &'a Path,
    },
    /// One fingerprint registered from two peer addresses at once (warn).
    MachineIdentityConflict {
        fingerprint: &'a str,
        peer: IpAddr,
        other_peer: IpAddr,
    },
    /// An idle credential digest was released to make room for a new one (info).
    /// `credential_digest` is the full SHA-256 hex of the token, written as its prefix.
    RouteCredentialEvicted {
        fingerprint: &'a str,
        credential_digest: &'a str,
        max_tokens_per_identity: u32,
    },
    /// The least recently used idle route left the full route table (info).
    RouteEvicted {
        fingerprint: &'a str,
        max_routes: u64,
    },
    /// The table of credential tombstones was full, so the ones that expire first were
    /// dropped: their tokens no longer keep other identities away (warn).
    CredentialTombstonesDropped { dropped: u64, max_tombstones: u64 },
    /// An MCP session became a reference of its route (info).
    McpAdded {
        fingerprint: &'a str,
        instance_id: Uuid,
        references: u32,
    },
    /// An MCP session stopped being a reference (info).
    McpRemoved {
        fingerprint: &'a str,
        instance_id: Uuid,
        references: u32,
        reason: McpRemovedReason,
    },
    /// An MCP control session authenticated (info).
    McpControlConnected {
        fingerprint: &'a str,
        instance_id: Uuid,
        peer: IpAddr,
    },
    /// An MCP resumed its session (info).
    McpControlReconnected {
        fingerprint: &'a str,
        instance_id: Uuid,
        disconnected_ms: u64,
    },
    /// An MCP control session closed (info when the peer closed it, else warn).
    McpControlDisconnected {
        fingerprint: &'a str,
        instance_id: Uuid,
        reason: McpDisconnectReason,
    },
    /// A launch grant went to an MCP (info).
    WorkerStaged {
        fingerprint: &'a str,
        activation_id: Uuid,
        owner_instance_id: Uuid,
        attempt: u32,
    },
    /// A worker start-up is still running, every `startup_progress_secs` (info).
    WorkerStartupPending {
        fingerprint: &'a str,
        /// `None` while no MCP is connected to take the grant.
        activation_id: Option<Uuid>,
        elapsed_ms: u64,
    },
    /// A worker generation was published (info).
    WorkerAdded {
        fingerprint: &'a str,
        worker_id: Uuid,
        /// `None` for a generation restored after a daemon restart.
        activation_id: Option<Uuid>,
        startup_elapsed_ms: u64,
    },
    /// A worker is ready; logged by the daemon and by the worker itself (info).
    WorkerReady {
        fingerprint: &'a str,
        worker_id: Uuid,
    },
    /// After a failed activation, the retry time was reached (info).
    WorkerRelaunchRequested { fingerprint: &'a str, attempt: u32 },
    /// An activation failed; the route passes through until `retry_after_ms` (warn).
    /// `failure_reason` is the reason the MCP or worker reported (`unknown` for a text outside
    /// the closed set), or one the daemon decided, such as `readiness_probe_failed`.
    WorkerActivationFailed {
        fingerprint: &'a str,
        activation_id: Option<Uuid>,
        failure_reason: FailureReason,
        retry_after_ms: u64,
        attempt: u32,
    },
    /// A launch grant was cancelled (info).
    WorkerActivationCancelled {
        fingerprint: &'a str,
        activation_id: Uuid,
        reason: ActivationCancelReason,
    },
    /// A worker control session authenticated (info).
    WorkerControlConnected {
        fingerprint: &'a str,
        worker_id: Uuid,
        peer: IpAddr,
    },
    /// A worker resumed its control session (info).
    WorkerControlReconnected {
        fingerprint: &'a str,
        worker_id: Uuid,
        disconnected_ms: u64,
    },
    /// A worker control session closed (warn).
    WorkerControlDisconnected {
        fingerprint: &'a str,
        worker_id: Uuid,
        reason: WorkerDisconnectReason,
    },
    /// The published worker lost its control session; the route recovers (warn).
    WorkerControlLost {
        fingerprint: &'a str,
        worker_id: Uuid,
        reconnect_grace_ms: u64,
    },
    /// The published worker failed its readiness probe (warn).
    WorkerReadinessFailed {
        fingerprint: &'a str,
        worker_id: Uuid,
        consecutive_failures: u32,
    },
    /// The route entered `Recovering` (warn).
    WorkerRecoveryStarted {
        fingerprint: &'a str,
        worker_id: Uuid,
        reconnect_grace_ms: u64,
    },
    /// The worker did not come back in time; its generation is revoked (warn).
    WorkerRecoveryFailed {
        fingerprint: &'a str,
        worker_id: Uuid,
        elapsed_ms: u64,
    },
    /// The route lost its last reference; the worker drains (info).
    WorkerDrainStarted {
        fingerprint: &'a str,
        worker_id: Uuid,
        drain_ms: u64,
        in_flight: u64,
    },
    /// A worker generation left the route (info for `drained` and `revoked`, else warn).
    WorkerRemoved {
        fingerprint: &'a str,
        worker_id: Uuid,
        reason: WorkerRemovedReason,
    },
    /// A worker process ended; logged by the MCP that watched it or by the worker (info).
    WorkerStopped {
        fingerprint: Option<&'a str>,
        worker_id: Option<Uuid>,
        activation_id: Option<Uuid>,
        exit: Option<ProcessExit>,
    },
    /// A request that carried a credential was passed through (info). `fingerprint` is known
    /// when the credential is bound.
    PublicRequestPassThrough {
        route: PublicRoute,
        reason: PassThroughReason,
        fingerprint: Option<&'a str>,
    },
    /// MCP side: its route is settled (info).
    DaemonMcpReady {
        daemon_address: &'a str,
        fingerprint: &'a str,
        route_mode: RouteMode,
        elapsed_ms: u64,
    },
    /// MCP side: the session runs without a worker route (info when configured, else warn).
    DaemonMcpPassThrough {
        daemon_address: &'a str,
        fingerprint: Option<&'a str>,
        reason: McpPassThroughReason,
        /// The daemon's refusal, when it refused the registration or ended the session.
        refused: Option<RefusedCode>,
    },
    /// MCP side: the worker could not be launched (warn). `detail` is a diagnostic such as
    /// the plugin configuration error; it must never hold the grant.
    WorkerLaunchFailed {
        fingerprint: &'a str,
        activation_id: Uuid,
        failure_reason: FailureReason,
        detail: Option<&'a str>,
    },
    /// A route credential source was unusable and skipped (warn).
    RouteCredentialSkipped {
        source: CredentialSource,
        reason: CredentialSkipReason,
        path: Option<&'a Path>,
    },
    /// Worker side: its configuration and plugins are loaded; `mode` is `managed_worker` (info).
    ConfigurationResolved {
        fingerprint: Option<&'a str>,
        plugins: u64,
    },
}

/// The `mode` of `configuration_resolved`: the only mode a worker runs in.
const MANAGED_WORKER_MODE: &str = "managed_worker";
/// The `route_mode` of `public_request_pass_through`.
const PASS_THROUGH_ROUTE_MODE: &str = "pass_through";

/// Emits one event with the lifecycle target and its `event` name first.
macro_rules! lifecycle_event {
    ($level:ident, $name:expr, $message:literal; $($fields:tt)*) => {
        tracing::event!(
            target: LIFECYCLE_TARGET,
            tracing::Level::$level,
            event = $name,
            $($fields)*
            $message
        )
    };
}

impl Lifecycle<'_> {
    /// The event name of SPEC §10.3, written as the `event` field.
    pub fn name(&self) -> &'static str {
        match self {
            Lifecycle::DaemonListening { .. } => "daemon_listening",
            Lifecycle::DaemonPassThroughEnabled { .. } => "daemon_pass_through_enabled",
            Lifecycle::DaemonStopped { .. } => "daemon_stopped",
            Lifecycle::DaemonFailed { .. } => "daemon_failed",
            Lifecycle::StateWriteFailed { .. } => "state_write_failed",
            Lifecycle::ControlRegistrationRefused { .. } => "control_registration_refused",
            Lifecycle::ControlRateLimited { .. } => "control_rate_limited",
            Lifecycle::DaemonPinMismatch { .. } => "daemon_pin_mismatch",
            Lifecycle::MachineIdentityConflict { .. } => "machine_identity_conflict",
            Lifecycle::RouteCredentialEvicted { .. } => "route_credential_evicted",
            Lifecycle::RouteEvicted { .. } => "route_evicted",
            Lifecycle::CredentialTombstonesDropped { .. } => "credential_tombstones_dropped",
            Lifecycle::McpAdded { .. } => "mcp_added",
            Lifecycle::McpRemoved { .. } => "mcp_removed",
            Lifecycle::McpControlConnected { .. } => "mcp_control_connected",
            Lifecycle::McpControlReconnected { .. } => "mcp_control_reconnected",
            Lifecycle::McpControlDisconnected { .. } => "mcp_control_disconnected",
            Lifecycle::WorkerStaged { .. } => "worker_staged",
            Lifecycle::WorkerStartupPending { .. } => "worker_startup_pending",
            Lifecycle::WorkerAdded { .. } => "worker_added",
            Lifecycle::WorkerReady { .. } => "worker_ready",
            Lifecycle::WorkerRelaunchRequested { .. } => "worker_relaunch_requested",
            Lifecycle::WorkerActivationFailed { .. } => "worker_activation_failed",
            Lifecycle::WorkerActivationCancelled { .. } => "worker_activation_cancelled",
            Lifecycle::WorkerControlConnected { .. } => "worker_control_connected",
            Lifecycle::WorkerControlReconnected { .. } => "worker_control_reconnected",
            Lifecycle::WorkerControlDisconnected { .. } => "worker_control_disconnected",
            Lifecycle::WorkerControlLost { .. } => "worker_control_lost",
            Lifecycle::WorkerReadinessFailed { .. } => "worker_readiness_failed",
            Lifecycle::WorkerRecoveryStarted { .. } => "worker_recovery_started",
            Lifecycle::WorkerRecoveryFailed { .. } => "worker_recovery_failed",
            Lifecycle::WorkerDrainStarted { .. } => "worker_drain_started",
            Lifecycle::WorkerRemoved { .. } => "worker_removed",
            Lifecycle::WorkerStopped { .. } => "worker_stopped",
            Lifecycle::PublicRequestPassThrough { .. } => "public_request_pass_through",
            Lifecycle::DaemonMcpReady { .. } => "daemon_mcp_ready",
            Lifecycle::DaemonMcpPassThrough { .. } => "daemon_mcp_pass_through",
            Lifecycle::WorkerLaunchFailed { .. } => "worker_launch_failed",
            Lifecycle::RouteCredentialSkipped { .. } => "route_credential_skipped",
            Lifecycle::ConfigurationResolved { .. } => "configuration_resolved",
        }
    }

    /// Logs the event through the current `tracing` subscriber.
    pub fn emit(&self) {
        let name = self.name();
        match *self {
            Lifecycle::DaemonListening {
                address,
                advertised_origin,
                mode,
                tls,
                socket_activated,
                open_file_limit,
                max_connections,
                max_provider_connections,
                instance_id,
                version,
            } => lifecycle_event!(INFO, name, "daemon is listening";
                address = %address,
                advertised_origin,
                mode = mode.as_str(),
                tls,
                socket_activated,
                open_file_limit,
                max_connections,
                max_provider_connections,
                instance_id = %instance_id,
                version,
            ),
            Lifecycle::DaemonPassThroughEnabled {
                daemon_keys,
                openai_key_configured,
                anthropic_key_configured,
            } => lifecycle_event!(INFO, name, "daemon pass-through mode is enabled";
                daemon_keys = daemon_keys.as_str(),
                openai_key_configured,
                anthropic_key_configured,
            ),
            Lifecycle::DaemonStopped {
                uptime_ms,
                unfinished_requests,
            } => lifecycle_event!(INFO, name, "daemon stopped";
                uptime_ms,
                unfinished_requests,
            ),
            Lifecycle::DaemonFailed { error } => lifecycle_event!(ERROR, name, "daemon failed";
                error = ErrorChain(error).to_string().as_str(),
            ),
            Lifecycle::StateWriteFailed {
                file,
                error,
                attempt,
            } => lifecycle_event!(ERROR, name, "state write failed";
                file = &*file.to_string_lossy(),
                error = error.to_string().as_str(),
                attempt,
            ),
            // A resume the daemon does not know is what every MCP meets once after a
            // daemon restart, and it registers anew at once: routine, not a warning.
            Lifecycle::ControlRegistrationRefused {
                role,
                reason: reason @ RefusedCode::SessionUnknown,
                peer,
                fingerprint,
            } => lifecycle_event!(INFO, name, "control registration refused";
                role = role.as_str(),
                reason = reason.as_str(),
                peer = %peer,
                fingerprint = fingerprint.map(digest_prefix),
            ),
            Lifecycle::ControlRegistrationRefused {
                role,
                reason,
                peer,
                fingerprint,
            } => lifecycle_event!(WARN, name, "control registration refused";
                role = role.as_str(),
                reason = reason.as_str(),
                peer = %peer,
                fingerprint = fingerprint.map(digest_prefix),
            ),
            Lifecycle::ControlRateLimited {
                role,
                peer,
                retry_after_secs,
                suppressed_since_last_emit,
            } => lifecycle_event!(WARN, name, "control handshake rate limited";
                role = role.as_str(),
                peer = %peer,
                retry_after_secs,
                suppressed_since_last_emit,
            ),
            Lifecycle::DaemonPinMismatch {
                role,
                origin,
                pin_file,
            } => lifecycle_event!(ERROR, name, "daemon key does not match the pin";
                role = role.as_str(),
                origin,
                pin_file = &*pin_file.to_string_lossy(),
            ),
            Lifecycle::MachineIdentityConflict {
                fingerprint,
                peer,
                other_peer,
            } => lifecycle_event!(WARN, name, "machine identity registered from two addresses";
                fingerprint = digest_prefix(fingerprint),
                peer = %peer,
                other_peer = %other_peer,
            ),
            Lifecycle::RouteCredentialEvicted {
                fingerprint,
                credential_digest,
                max_tokens_per_identity,
            } => lifecycle_event!(INFO, name, "idle route credential evicted";
                fingerprint = digest_prefix(fingerprint),
                credential_digest = digest_prefix(credential_digest),
                max_tokens_per_identity,
            ),
            Lifecycle::RouteEvicted {
                fingerprint,
                max_routes,
            } => lifecycle_event!(INFO, name, "idle route evicted";
                fingerprint = digest_prefix(fingerprint),
                max_routes,
            ),
            Lifecycle::CredentialTombstonesDropped {
                dropped,
                max_tombstones,
            } => {
                lifecycle_event!(WARN, name, "oldest credential tombstones dropped, the table is full";
                    dropped,
                    max_tombstones,
                )
            }
            Lifecycle::McpAdded {
                fingerprint,
                instance_id,
                references,
            } => lifecycle_event!(INFO, name, "mcp session added";
                fingerprint = digest_prefix(fingerprint),
                instance_id = %instance_id,
                references,
            ),
            Lifecycle::McpRemoved {
                fingerprint,
                instance_id,
                references,
                reason,
            } => lifecycle_event!(INFO, name, "mcp session removed";
                fingerprint = digest_prefix(fingerprint),
                instance_id = %instance_id,
                references,
                reason = reason.as_str(),
            ),
            Lifecycle::McpControlConnected {
                fingerprint,
                instance_id,
                peer,
            } => lifecycle_event!(INFO, name, "mcp control session connected";
                fingerprint = digest_prefix(fingerprint),
                instance_id = %instance_id,
                peer = %peer,
            ),
            Lifecycle::McpControlReconnected {
                fingerprint,
                instance_id,
                disconnected_ms,
            } => lifecycle_event!(INFO, name, "mcp control session reconnected";
                fingerprint = digest_prefix(fingerprint),
                instance_id = %instance_id,
                disconnected_ms,
            ),
            Lifecycle::McpControlDisconnected {
                fingerprint,
                instance_id,
                reason,
            } => match reason {
                McpDisconnectReason::PeerClosed | McpDisconnectReason::DaemonStopping => {
                    lifecycle_event!(INFO, name, "mcp control session disconnected";
                        fingerprint = digest_prefix(fingerprint),
                        instance_id = %instance_id,
                        reason = reason.as_str(),
                    )
                }
                McpDisconnectReason::PongTimeout
                | McpDisconnectReason::ProtocolViolation
                | McpDisconnectReason::SendQueueFull => {
                    lifecycle_event!(WARN, name, "mcp control session disconnected";
                        fingerprint = digest_prefix(fingerprint),
                        instance_id = %instance_id,
                        reason = reason.as_str(),
                    )
                }
            },
            Lifecycle::WorkerStaged {
                fingerprint,
                activation_id,
                owner_instance_id,
                attempt,
            } => lifecycle_event!(INFO, name, "worker launch granted";
                fingerprint = digest_prefix(fingerprint),
                activation_id = %activation_id,
                owner_instance_id = %owner_instance_id,
                attempt,
            ),
            Lifecycle::WorkerStartupPending {
                fingerprint,
                activation_id,
                elapsed_ms,
            } => lifecycle_event!(INFO, name, "worker start-up still pending";
                fingerprint = digest_prefix(fingerprint),
                activation_id = activation_id.map(|id| id.to_string()),
                elapsed_ms,
            ),
            Lifecycle::WorkerAdded {
                fingerprint,
                worker_id,
                activation_id,
                startup_elapsed_ms,
            } => lifecycle_event!(INFO, name, "worker added";
                fingerprint = digest_prefix(fingerprint),
                worker_id = %worker_id,
                activation_id = activation_id.map(|id| id.to_string()),
                startup_elapsed_ms,
            ),
            Lifecycle::WorkerReady {
                fingerprint,
                worker_id,
            } => lifecycle_event!(INFO, name, "worker is ready";
                fingerprint = digest_prefix(fingerprint),
                worker_id = %worker_id,
            ),
            Lifecycle::WorkerRelaunchRequested {
                fingerprint,
                attempt,
            } => lifecycle_event!(INFO, name, "worker relaunch requested";
                fingerprint = digest_prefix(fingerprint),
                attempt,
            ),
            Lifecycle::WorkerActivationFailed {
                fingerprint,
                activation_id,
                failure_reason,
                retry_after_ms,
                attempt,
            } => lifecycle_event!(WARN, name, "worker activation failed";
                fingerprint = digest_prefix(fingerprint),
                activation_id = activation_id.map(tracing::field::display),
                failure_reason = failure_reason.as_str(),
                retry_after_ms,
                attempt,
            ),
            Lifecycle::WorkerActivationCancelled {
                fingerprint,
                activation_id,
                reason,
            } => lifecycle_event!(INFO, name, "worker activation cancelled";
                fingerprint = digest_prefix(fingerprint),
                activation_id = %activation_id,
                reason = reason.as_str(),
            ),
            Lifecycle::WorkerControlConnected {
                fingerprint,
                worker_id,
                peer,
            } => lifecycle_event!(INFO, name, "worker control session connected";
                fingerprint = digest_prefix(fingerprint),
                worker_id = %worker_id,
                peer = %peer,
            ),
            Lifecycle::WorkerControlReconnected {
                fingerprint,
                worker_id,
                disconnected_ms,
            } => lifecycle_event!(INFO, name, "worker control session reconnected";
                fingerprint = digest_prefix(fingerprint),
                worker_id = %worker_id,
                disconnected_ms,
            ),
            Lifecycle::WorkerControlDisconnected {
                fingerprint,
                worker_id,
                reason,
            } => lifecycle_event!(WARN, name, "worker control session disconnected";
                fingerprint = digest_prefix(fingerprint),
                worker_id = %worker_id,
                reason = reason.as_str(),
            ),
            Lifecycle::WorkerControlLost {
                fingerprint,
                worker_id,
                reconnect_grace_ms,
            } => lifecycle_event!(WARN, name, "worker control lost";
                fingerprint = digest_prefix(fingerprint),
                worker_id = %worker_id,
                reconnect_grace_ms,
            ),
            Lifecycle::WorkerReadinessFailed {
                fingerprint,
                worker_id,
                consecutive_failures,
            } => lifecycle_event!(WARN, name, "worker readiness probe failed";
                fingerprint = digest_prefix(fingerprint),
                worker_id = %worker_id,
                consecutive_failures,
            ),
            Lifecycle::WorkerRecoveryStarted {
                fingerprint,
                worker_id,
                reconnect_grace_ms,
            } => lifecycle_event!(WARN, name, "worker recovery started";
                fingerprint = digest_prefix(fingerprint),
                worker_id = %worker_id,
                reconnect_grace_ms,
            ),
            Lifecycle::WorkerRecoveryFailed {
                fingerprint,
                worker_id,
                elapsed_ms,
            } => lifecycle_event!(WARN, name, "worker recovery failed";
                fingerprint = digest_prefix(fingerprint),
                worker_id = %worker_id,
                elapsed_ms,
            ),
            Lifecycle::WorkerDrainStarted {
                fingerprint,
                worker_id,
                drain_ms,
                in_flight,
            } => lifecycle_event!(INFO, name, "worker drain started";
                fingerprint = digest_prefix(fingerprint),
                worker_id = %worker_id,
                drain_ms,
                in_flight,
            ),
            Lifecycle::WorkerRemoved {
                fingerprint,
                worker_id,
                reason,
            } => match reason {
                WorkerRemovedReason::Drained | WorkerRemovedReason::Revoked => {
                    lifecycle_event!(INFO, name, "worker removed";
                        fingerprint = digest_prefix(fingerprint),
                        worker_id = %worker_id,
                        reason = reason.as_str(),
                    )
                }
                WorkerRemovedReason::DrainTimeout | WorkerRemovedReason::Crashed => {
                    lifecycle_event!(WARN, name, "worker removed";
                        fingerprint = digest_prefix(fingerprint),
                        worker_id = %worker_id,
                        reason = reason.as_str(),
                    )
                }
            },
            Lifecycle::WorkerStopped {
                fingerprint,
                worker_id,
                activation_id,
                exit,
            } => lifecycle_event!(INFO, name, "worker stopped";
                fingerprint = fingerprint.map(digest_prefix),
                worker_id = worker_id.map(tracing::field::display),
                activation_id = activation_id.map(tracing::field::display),
                exit_code = exit.and_then(ProcessExit::code),
                exit_signal = exit.and_then(ProcessExit::signal),
            ),
            Lifecycle::PublicRequestPassThrough {
                route,
                reason,
                fingerprint,
            } => lifecycle_event!(INFO, name, "request passed through";
                route = route.as_str(),
                route_mode = PASS_THROUGH_ROUTE_MODE,
                reason = reason.as_str(),
                fingerprint = fingerprint.map(digest_prefix),
            ),
            Lifecycle::DaemonMcpReady {
                daemon_address,
                fingerprint,
                route_mode,
                elapsed_ms,
            } => lifecycle_event!(INFO, name, "route settled with the daemon";
                daemon_address,
                fingerprint = digest_prefix(fingerprint),
                route_mode = route_mode.as_str(),
                elapsed_ms,
            ),
            Lifecycle::DaemonMcpPassThrough {
                daemon_address,
                fingerprint,
                reason,
                refused,
            } => match reason {
                McpPassThroughReason::ConfiguredPassThrough => {
                    lifecycle_event!(INFO, name, "session continues without a worker route";
                        daemon_address,
                        fingerprint = fingerprint.map(digest_prefix),
                        reason = reason.as_str(),
                        refused = refused.map(RefusedCode::as_str),
                    )
                }
                McpPassThroughReason::CredentialRejected
                | McpPassThroughReason::DaemonUnreachable
                | McpPassThroughReason::RouteTableFull
                | McpPassThroughReason::ActivationFailed => {
                    lifecycle_event!(WARN, name, "session continues without a worker route";
                        daemon_address,
                        fingerprint = fingerprint.map(digest_prefix),
                        reason = reason.as_str(),
                        refused = refused.map(RefusedCode::as_str),
                    )
                }
            },
            Lifecycle::WorkerLaunchFailed {
                fingerprint,
                activation_id,
                failure_reason,
                detail,
            } => lifecycle_event!(WARN, name, "worker launch failed";
                fingerprint = digest_prefix(fingerprint),
                activation_id = %activation_id,
                failure_reason = failure_reason.as_str(),
                detail,
            ),
            Lifecycle::RouteCredentialSkipped {
                source,
                reason,
                path,
            } => lifecycle_event!(WARN, name, "route credential source skipped";
                source = source.as_str(),
                reason = reason.as_str(),
                path = path.map(Path::to_string_lossy).as_deref(),
            ),
            Lifecycle::ConfigurationResolved {
                fingerprint,
                plugins,
            } => lifecycle_event!(INFO, name, "configuration resolved";
                mode = MANAGED_WORKER_MODE,
                fingerprint = fingerprint.map(digest_prefix),
                plugins,
            ),
        }
    }
}

#[cfg(test)]
mod tests;
