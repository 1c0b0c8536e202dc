//! The version 1 control messages of SPEC §5.6.

use serde::{Deserialize, Serialize};

use crate::types::{Bytes32, Id, ProtocolRange, PublicKey, Role, Signature, Text};
use crate::vocabulary::{FailureReason, WORKER_EXIT_PLUGIN_CONFIG_INVALID};

/// The message kind carried in a frame header. The numbers are part of the wire format:
/// never renumber one, only add.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Kind {
    Hello = 1,
    Challenge = 2,
    Refused = 3,
    RegisterMcp = 10,
    ResumeMcp = 11,
    RegisterWorker = 12,
    ResumeWorker = 13,
    Registered = 14,
    LaunchWorker = 20,
    WaitForWorker = 21,
    ReuseWorker = 22,
    RouteReady = 23,
    UsePassThrough = 24,
    ActivationFailed = 30,
    WorkerExited = 31,
    LaunchStatus = 32,
    LaunchStatusIs = 33,
    Release = 34,
    Ready = 40,
    WorkerActivationFailed = 41,
    Drain = 42,
    Stopping = 43,
    DaemonStopping = 50,
}

impl Kind {
    pub const ALL: [Kind; 23] = [
        Kind::Hello,
        Kind::Challenge,
        Kind::Refused,
        Kind::RegisterMcp,
        Kind::ResumeMcp,
        Kind::RegisterWorker,
        Kind::ResumeWorker,
        Kind::Registered,
        Kind::LaunchWorker,
        Kind::WaitForWorker,
        Kind::ReuseWorker,
        Kind::RouteReady,
        Kind::UsePassThrough,
        Kind::ActivationFailed,
        Kind::WorkerExited,
        Kind::LaunchStatus,
        Kind::LaunchStatusIs,
        Kind::Release,
        Kind::Ready,
        Kind::WorkerActivationFailed,
        Kind::Drain,
        Kind::Stopping,
        Kind::DaemonStopping,
    ];

    pub fn from_u16(kind: u16) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| *k as u16 == kind)
    }
}

/// Every control message. Each variant is one frame kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Hello(Hello),
    Challenge(Challenge),
    Refused(Refused),
    RegisterMcp(RegisterMcp),
    ResumeMcp(ResumeMcp),
    RegisterWorker(RegisterWorker),
    ResumeWorker(ResumeWorker),
    Registered(Registered),
    LaunchWorker(Grant),
    WaitForWorker {
        retry_after_ms: u64,
    },
    ReuseWorker,
    RouteReady,
    UsePassThrough,
    ActivationFailed(McpActivationFailed),
    WorkerExited(WorkerExited),
    LaunchStatus {
        activation_id: Id,
    },
    LaunchStatusIs(LaunchStatusIs),
    Release,
    Ready,
    WorkerActivationFailed(WorkerActivationFailed),
    /// The route drains; the worker has `deadline_ms` from receipt to finish and exit.
    Drain {
        deadline_ms: u64,
    },
    Stopping,
    DaemonStopping {
        restart_expected: bool,
    },
}

impl Message {
    pub fn kind(&self) -> Kind {
        match self {
            Message::Hello(_) => Kind::Hello,
            Message::Challenge(_) => Kind::Challenge,
            Message::Refused(_) => Kind::Refused,
            Message::RegisterMcp(_) => Kind::RegisterMcp,
            Message::ResumeMcp(_) => Kind::ResumeMcp,
            Message::RegisterWorker(_) => Kind::RegisterWorker,
            Message::ResumeWorker(_) => Kind::ResumeWorker,
            Message::Registered(_) => Kind::Registered,
            Message::LaunchWorker(_) => Kind::LaunchWorker,
            Message::WaitForWorker { .. } => Kind::WaitForWorker,
            Message::ReuseWorker => Kind::ReuseWorker,
            Message::RouteReady => Kind::RouteReady,
            Message::UsePassThrough => Kind::UsePassThrough,
            Message::ActivationFailed(_) => Kind::ActivationFailed,
            Message::WorkerExited(_) => Kind::WorkerExited,
            Message::LaunchStatus { .. } => Kind::LaunchStatus,
            Message::LaunchStatusIs(_) => Kind::LaunchStatusIs,
            Message::Release => Kind::Release,
            Message::Ready => Kind::Ready,
            Message::WorkerActivationFailed(_) => Kind::WorkerActivationFailed,
            Message::Drain { .. } => Kind::Drain,
            Message::Stopping => Kind::Stopping,
            Message::DaemonStopping { .. } => Kind::DaemonStopping,
        }
    }

    /// A directive sent to an MCP as its own message.
    pub fn directive(directive: Directive) -> Message {
        match directive {
            Directive::LaunchWorker(grant) => Message::LaunchWorker(grant),
            Directive::WaitForWorker { retry_after_ms } => {
                Message::WaitForWorker { retry_after_ms }
            }
            Directive::ReuseWorker => Message::ReuseWorker,
            Directive::RouteReady => Message::RouteReady,
            Directive::UsePassThrough => Message::UsePassThrough,
        }
    }

    /// The directive this message carries, if it is one.
    pub fn as_directive(&self) -> Option<Directive> {
        Some(match self {
            Message::LaunchWorker(grant) => Directive::LaunchWorker(grant.clone()),
            Message::WaitForWorker { retry_after_ms } => Directive::WaitForWorker {
                retry_after_ms: *retry_after_ms,
            },
            Message::ReuseWorker => Directive::ReuseWorker,
            Message::RouteReady => Directive::RouteReady,
            Message::UsePassThrough => Directive::UsePassThrough,
            _ => return None,
        })
    }
}

/// First frame of every control session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub role: Role,
    pub protocols: ProtocolRange,
    pub binary_version: Text,
    /// The client process's instance id (for logs and identity-conflict detection).
    pub instance_id: Id,
    pub machine_key: PublicKey,
    pub client_nonce: Bytes32,
    /// The normalized origin the client dialled (§4.3); part of the signed transcript.
    pub target_origin: Text,
}

/// The daemon's answer to `Hello`, signed over the handshake transcript.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Challenge {
    pub daemon_key: PublicKey,
    pub daemon_nonce: Bytes32,
    pub challenge_id: Id,
    pub selected_protocol: u16,
    pub signature: Signature,
}

/// Why a session was refused. The numeric code is on the wire so that an old client can
/// still show a reason added later; the text is for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    pub code: u16,
    pub text: Text,
    /// The protocol versions this daemon speaks, so a client can tell what to upgrade.
    pub supported: ProtocolRange,
}

impl Refused {
    /// The known reason for the code, if this build knows it.
    pub fn reason(&self) -> Option<RefusedCode> {
        RefusedCode::from_code(self.code)
    }
}

/// Every refusal reason of §5.6, with its stable numeric code; its spelling is the `reason`
/// of `control_registration_refused`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum RefusedCode {
    ProtocolUnsupported = 1,
    BadSignature = 2,
    TranscriptMismatch = 3,
    ChallengeExpired = 4,
    CredentialMalformed = 5,
    CredentialBoundElsewhere = 6,
    TokenLimit = 7,
    RouteTableFull = 8,
    RateLimited = 9,
    SessionLimit = 10,
    SessionUnknown = 11,
    StateUnavailable = 12,
    GrantUnknown = 13,
    GrantReplayed = 14,
    GrantIdentityMismatch = 15,
    EndpointNotAllowed = 16,
    GenerationRevoked = 17,
    PassThroughMode = 18,
    Revoked = 19,
    Blocked = 20,
}

impl RefusedCode {
    pub const ALL: [RefusedCode; 20] = [
        RefusedCode::ProtocolUnsupported,
        RefusedCode::BadSignature,
        RefusedCode::TranscriptMismatch,
        RefusedCode::ChallengeExpired,
        RefusedCode::CredentialMalformed,
        RefusedCode::CredentialBoundElsewhere,
        RefusedCode::TokenLimit,
        RefusedCode::RouteTableFull,
        RefusedCode::RateLimited,
        RefusedCode::SessionLimit,
        RefusedCode::SessionUnknown,
        RefusedCode::StateUnavailable,
        RefusedCode::GrantUnknown,
        RefusedCode::GrantReplayed,
        RefusedCode::GrantIdentityMismatch,
        RefusedCode::EndpointNotAllowed,
        RefusedCode::GenerationRevoked,
        RefusedCode::PassThroughMode,
        RefusedCode::Revoked,
        RefusedCode::Blocked,
    ];

    pub fn code(self) -> u16 {
        self as u16
    }

    pub fn from_code(code: u16) -> Option<RefusedCode> {
        RefusedCode::ALL.into_iter().find(|c| c.code() == code)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RefusedCode::ProtocolUnsupported => "protocol_unsupported",
            RefusedCode::BadSignature => "bad_signature",
            RefusedCode::TranscriptMismatch => "transcript_mismatch",
            RefusedCode::ChallengeExpired => "challenge_expired",
            RefusedCode::CredentialMalformed => "credential_malformed",
            RefusedCode::CredentialBoundElsewhere => "credential_bound_elsewhere",
            RefusedCode::TokenLimit => "token_limit",
            RefusedCode::RouteTableFull => "route_table_full",
            RefusedCode::RateLimited => "rate_limited",
            RefusedCode::SessionLimit => "session_limit",
            RefusedCode::SessionUnknown => "session_unknown",
            RefusedCode::StateUnavailable => "state_unavailable",
            RefusedCode::GrantUnknown => "grant_unknown",
            RefusedCode::GrantReplayed => "grant_replayed",
            RefusedCode::GrantIdentityMismatch => "grant_identity_mismatch",
            RefusedCode::EndpointNotAllowed => "endpoint_not_allowed",
            RefusedCode::GenerationRevoked => "generation_revoked",
            RefusedCode::PassThroughMode => "pass_through_mode",
            RefusedCode::Revoked => "revoked",
            RefusedCode::Blocked => "blocked",
        }
    }
}

impl std::fmt::Display for RefusedCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The network hint an MCP signs into its registration for a remote worker (§9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerHint {
    pub advertise_address: Option<Text>,
    pub port: Option<u16>,
}

/// The fields of `RegisterMcp` that its signature covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterMcpFields {
    /// The raw route credential. It travels only over loopback or TLS; the daemon keeps
    /// its digest.
    pub credential: Bytes32,
    pub worker_hint: Option<WorkerHint>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterMcp {
    pub signature: Signature,
    pub fields: RegisterMcpFields,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeMcpFields {
    pub session_id: Id,
    pub resume_token: Bytes32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeMcp {
    pub signature: Signature,
    pub fields: ResumeMcpFields,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterWorkerFields {
    pub activation_id: Id,
    pub activation_token: Bytes32,
    /// `host:port` the worker serves HTTPS on.
    pub endpoint: Text,
    pub certificate_sha256: Bytes32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterWorker {
    pub signature: Signature,
    pub fields: RegisterWorkerFields,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeWorkerFields {
    pub worker_id: Id,
    pub certificate_sha256: Bytes32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeWorker {
    pub signature: Signature,
    pub fields: ResumeWorkerFields,
}

/// The effective timers of the daemon, in milliseconds, which clients obey (§5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timers {
    pub drain_ms: u64,
    pub reconnect_grace_ms: u64,
    pub retry_base_ms: u64,
    pub retry_cap_ms: u64,
    pub startup_progress_ms: u64,
    pub ping_ms: u64,
    pub pong_timeout_ms: u64,
    pub challenge_ttl_ms: u64,
    pub reconnect_first_ms: u64,
    pub reconnect_cap_ms: u64,
    pub reconnect_attempt_timeout_ms: u64,
}

impl Default for Timers {
    /// The defaults of SPEC §8 `[daemon.timers]`.
    fn default() -> Self {
        Timers {
            drain_ms: 120_000,
            reconnect_grace_ms: 30_000,
            retry_base_ms: 1_000,
            retry_cap_ms: 60_000,
            startup_progress_ms: 60_000,
            ping_ms: 30_000,
            pong_timeout_ms: 10_000,
            challenge_ttl_ms: 30_000,
            reconnect_first_ms: 250,
            reconnect_cap_ms: 2_000,
            reconnect_attempt_timeout_ms: 5_000,
        }
    }
}

/// What an MCP is told to do about its route's worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Directive {
    LaunchWorker(Grant),
    WaitForWorker { retry_after_ms: u64 },
    ReuseWorker,
    RouteReady,
    UsePassThrough,
}

/// A one-time launch grant (§5.5), bound by the broker to the fingerprint of the MCP that
/// received it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub activation_id: Id,
    pub activation_token: Bytes32,
    pub bind_ip: [u8; 4],
    /// 0 lets the OS choose.
    pub port: u16,
    /// The address the worker advertises when it is not 127.0.0.1 (remote workers, §9).
    pub advertise_address: Option<Text>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Registered {
    Mcp {
        session_id: Id,
        resume_token: Bytes32,
        directive: Directive,
        timers: Timers,
    },
    Worker {
        worker_id: Id,
        generation_secret: Bytes32,
        /// Set when the route already drains: the worker finishes and exits.
        drain_deadline_ms: Option<u64>,
        timers: Timers,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpActivationFailed {
    pub activation_id: Id,
    pub failure_reason: Text,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerExited {
    pub activation_id: Id,
    /// The exit code, or `None` when a signal ended the process.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
}

impl WorkerExited {
    /// Why the launch failed, if the child exited before its route was ready: its exit
    /// status names an invalid plugin configuration; anything else is an early exit.
    pub fn failure_reason(&self) -> FailureReason {
        if self.exit_code == Some(i32::from(WORKER_EXIT_PLUGIN_CONFIG_INVALID)) {
            FailureReason::PluginConfigInvalid
        } else {
            FailureReason::WorkerExitedBeforeReady
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LaunchOutcome {
    Cancelled,
    Superseded,
    Pending,
    Published,
    Unknown,
}

impl LaunchOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            LaunchOutcome::Cancelled => "cancelled",
            LaunchOutcome::Superseded => "superseded",
            LaunchOutcome::Pending => "pending",
            LaunchOutcome::Published => "published",
            LaunchOutcome::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchStatusIs {
    pub activation_id: Id,
    pub outcome: LaunchOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerActivationFailed {
    pub failure_reason: Text,
    /// A human diagnostic, e.g. the plugin component and field at fault.
    pub diagnostic: Text,
}
