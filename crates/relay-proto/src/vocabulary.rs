//! The shared vocabulary of reasons: every reason, role and state that the broker decides,
//! the status endpoints report and the logs write (SPEC §10.3), defined once with its
//! spelling. `relay-broker` puts these values into its events and `relay-logging` writes
//! them as they are; nothing translates between two mirrored enums.

use serde::{Deserialize, Serialize};

/// Declares a closed enum of values with `as_str` (its spelling in logs and JSON), `parse`,
/// `Display` and `ALL`. Exported for `relay-logging`'s own log values.
#[macro_export]
macro_rules! vocabulary {
    (
        $(#[$meta:meta])*
        $name:ident { $($(#[$variant_meta:meta])* $variant:ident => $text:literal,)+ }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$variant_meta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The value as written in logs (and in JSON where the type is serialised).
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The value spelled `text`, if there is one.
            pub fn parse(text: &str) -> Option<$name> {
                Self::ALL.iter().copied().find(|value| value.as_str() == text)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

vocabulary! {
    /// Why a request with a credential did not go to a worker (§3.5, §3.7); also the
    /// `reason` of `GET /_relay/v1/route`.
    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    PassThroughReason {
        MissingCredential => "missing_credential",
        UnboundCredential => "unbound_credential",
        NoLiveSession => "no_live_session",
        WorkerUnavailable => "worker_unavailable",
        ConfiguredPassThrough => "configured_pass_through",
        WorkerConnectFailed => "worker_connect_failed",
    }
}

vocabulary! {
    /// Where a route's traffic goes.
    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    RouteMode {
        Worker => "worker",
        PassThrough => "pass_through",
    }
}

vocabulary! {
    /// A published worker's state in the status endpoints (§3.1).
    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    WorkerState {
        Ready => "ready",
        Draining => "draining",
        Recovering => "recovering",
    }
}

vocabulary! {
    /// Why the daemon stopped counting an MCP session as a reference to its route.
    McpRemovedReason {
        /// The MCP sent `Release` (its harness session ended).
        Released => "released",
        /// Its control session dropped and did not resume within `reconnect_grace_secs`.
        GraceExpired => "grace_expired",
        /// The route was revoked or blocked.
        Revoked => "revoked",
    }
}

/// How a control session ended, as the daemon's control plane saw it, whatever the role.
/// Each role's log event spells it in its own vocabulary ([`DisconnectReason::for_mcp`],
/// [`DisconnectReason::for_worker`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DisconnectReason {
    /// No pong within `pong_timeout_secs`.
    PongTimeout,
    /// The peer (or the daemon, after a refusal) closed the connection.
    PeerClosed,
    /// A malformed or unexpected message, or a failed send.
    CommunicationFailed,
    /// The connection broke without a close: the peer was killed, or the network failed.
    ConnectionLost,
}

impl DisconnectReason {
    /// The `reason` of `mcp_control_disconnected`.
    pub fn for_mcp(self) -> McpDisconnectReason {
        match self {
            DisconnectReason::PongTimeout => McpDisconnectReason::PongTimeout,
            // An MCP that was killed sent nothing wrong: it is gone, as if it had closed.
            DisconnectReason::PeerClosed | DisconnectReason::ConnectionLost => {
                McpDisconnectReason::PeerClosed
            }
            DisconnectReason::CommunicationFailed => McpDisconnectReason::ProtocolViolation,
        }
    }

    /// The `reason` of `worker_control_disconnected` (§10.3).
    pub fn for_worker(self) -> WorkerDisconnectReason {
        match self {
            DisconnectReason::PongTimeout => WorkerDisconnectReason::PongTimeout,
            DisconnectReason::PeerClosed => WorkerDisconnectReason::PeerClosed,
            DisconnectReason::CommunicationFailed | DisconnectReason::ConnectionLost => {
                WorkerDisconnectReason::WorkerCommunicationFailed
            }
        }
    }
}

vocabulary! {
    /// Why an MCP control session closed.
    McpDisconnectReason {
        /// No pong within `pong_timeout_secs`.
        PongTimeout => "pong_timeout",
        /// The peer closed the connection.
        PeerClosed => "peer_closed",
        /// A malformed, oversized or out-of-order message (SPEC §5.1).
        ProtocolViolation => "protocol_violation",
        /// More than 64 outbound messages queued.
        SendQueueFull => "send_queue_full",
        /// The daemon is stopping.
        DaemonStopping => "daemon_stopping",
    }
}

vocabulary! {
    /// Why a worker control session closed (SPEC §10.3).
    WorkerDisconnectReason {
        PongTimeout => "pong_timeout",
        PeerClosed => "peer_closed",
        WorkerCommunicationFailed => "worker_communication_failed",
    }
}

vocabulary! {
    /// Why a launch grant was cancelled before its worker was published.
    ActivationCancelReason {
        /// The MCP holding the grant disconnected.
        OwnerDisconnected => "owner_disconnected",
        /// The MCP holding the grant released its reference.
        OwnerReleased => "owner_released",
        /// The route lost its last reference.
        RouteEmptied => "route_emptied",
        /// The route was revoked or blocked.
        Revoked => "revoked",
    }
}

vocabulary! {
    /// Why a worker generation left its route (`worker_removed`, SPEC §10.3).
    WorkerRemovedReason {
        Drained => "drained",
        DrainTimeout => "drain_timeout",
        Revoked => "revoked",
        Crashed => "crashed",
    }
}

vocabulary! {
    /// Why a worker activation failed: the `failure_reason` of `worker_launch_failed` and
    /// `worker_activation_failed` (SPEC §10.3). The first six are what an MCP or a worker
    /// reports in `ActivationFailed` ([`FailureReason::REPORTED`]); the others the daemon
    /// decides itself; `unknown` stands for a reported text outside the set.
    FailureReason {
        /// `relay-mcp` could not find the `relay-worker` beside it.
        WorkerExecutableResolutionFailed => "worker_executable_resolution_failed",
        /// The worker process could not be started.
        WorkerProcessSpawnFailed => "worker_process_spawn_failed",
        /// The child's stdin pipe, which carries the grant, was not there.
        WorkerActivationPipeUnavailable => "worker_activation_pipe_unavailable",
        /// Writing the grant to the child's stdin failed.
        WorkerActivationGrantWriteFailed => "worker_activation_grant_write_failed",
        /// The worker exited before it reported `Ready`.
        WorkerExitedBeforeReady => "worker_exited_before_ready",
        /// The worker's `plugins.toml` is invalid (the diagnostic stays in the worker's log).
        PluginConfigInvalid => "plugin_config_invalid",
        /// The worker reported `Ready` but its readiness probe kept failing.
        ReadinessProbeFailed => "readiness_probe_failed",
        /// The starting worker lost its control session.
        WorkerControlLost => "worker_control_lost",
        /// The probe found the starting worker gone (connection refused, other certificate).
        WorkerGone => "worker_gone",
        /// The starting worker said `Stopping`.
        WorkerStopped => "worker_stopped",
        /// The published worker ended before it served a request.
        WorkerExitedBeforeServing => "worker_exited_before_serving",
        /// A peer reported a reason this daemon does not know.
        Unknown => "unknown",
    }
}

/// The exit status of a worker that stopped because its plugin configuration is invalid
/// (`EX_CONFIG`), so the `relay-mcp` that started it can name the reason.
pub const WORKER_EXIT_PLUGIN_CONFIG_INVALID: u8 = 78;

impl FailureReason {
    /// The reasons a peer may report in `ActivationFailed` (the `worker_launch_failed`
    /// values of SPEC §10.3).
    pub const REPORTED: &'static [FailureReason] = &[
        FailureReason::WorkerExecutableResolutionFailed,
        FailureReason::WorkerProcessSpawnFailed,
        FailureReason::WorkerActivationPipeUnavailable,
        FailureReason::WorkerActivationGrantWriteFailed,
        FailureReason::WorkerExitedBeforeReady,
        FailureReason::PluginConfigInvalid,
    ];

    /// Reads the `failure_reason` text a peer sent: one of [`FailureReason::REPORTED`], or
    /// `unknown` for anything else, so no peer can write its own text into the daemon's
    /// logs.
    pub fn from_peer(text: &str) -> FailureReason {
        FailureReason::REPORTED
            .iter()
            .copied()
            .find(|reason| reason.as_str() == text)
            .unwrap_or(FailureReason::Unknown)
    }
}

#[cfg(test)]
mod tests;
