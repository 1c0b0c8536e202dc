use std::{
    collections::{BTreeMap, BTreeSet},
    fmt, io,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::Path,
};

use serde_json::{Map, Value};
use uuid::Uuid;

use super::*;
use crate::{ProviderFailure, RateLimiter, test_support::capture_json};

const FINGERPRINT: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const DIGEST: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
/// A route credential (43 base64url characters); it must never be written.
const TOKEN: &str = "q9Xv3bN0kLmP2rS5tU8wY1zA4cD7eF0gH3jK6mN9pQs";

/// The event names of SPEC §10.3, copied from the SPEC by hand (not from the code), each once,
/// and last the one Relay adds (documented in docs/logging.md).
const SPEC_EVENTS: [&str; 43] = [
    "daemon_listening",
    "daemon_pass_through_enabled",
    "daemon_stopped",
    "daemon_failed",
    "state_write_failed",
    "control_registration_refused",
    "control_rate_limited",
    "daemon_pin_mismatch",
    "machine_identity_conflict",
    "route_credential_evicted",
    "route_evicted",
    "mcp_added",
    "mcp_removed",
    "mcp_control_connected",
    "mcp_control_reconnected",
    "mcp_control_disconnected",
    "worker_staged",
    "worker_startup_pending",
    "worker_added",
    "worker_ready",
    "worker_relaunch_requested",
    "worker_activation_failed",
    "worker_activation_cancelled",
    "worker_control_connected",
    "worker_control_reconnected",
    "worker_control_disconnected",
    "worker_control_lost",
    "worker_readiness_failed",
    "worker_recovery_started",
    "worker_recovery_failed",
    "worker_drain_started",
    "worker_removed",
    "worker_stopped",
    "public_request_pass_through",
    "upstream_request_failed",
    "worker_request_failed",
    "worker_communication_failed",
    "daemon_mcp_ready",
    "daemon_mcp_pass_through",
    "worker_launch_failed",
    "route_credential_skipped",
    "configuration_resolved",
    "credential_tombstones_dropped",
];

#[derive(Debug)]
struct Outer(io::Error);

impl fmt::Display for Outer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("writing the generation ledger")
    }
}

impl std::error::Error for Outer {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Values the samples borrow.
struct Context {
    failure: Outer,
    io_error: io::Error,
}

impl Context {
    fn new() -> Context {
        Context {
            failure: Outer(io::Error::other("no space left on device")),
            io_error: io::Error::other("no space left on device"),
        }
    }
}

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const REMOTE: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));

fn worker() -> Uuid {
    Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0001)
}

fn instance() -> Uuid {
    Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0002)
}

fn activation() -> Uuid {
    Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0003)
}

/// One value of every variant, with the level it must be logged at. The match in
/// `expected_level` has no wildcard, so a new variant does not compile until it is listed.
fn samples(context: &Context) -> Vec<Lifecycle<'_>> {
    vec![
        Lifecycle::DaemonListening {
            address: SocketAddr::new(LOOPBACK, 47632),
            advertised_origin: None,
            mode: DaemonMode::Managed,
            tls: false,
            socket_activated: true,
            open_file_limit: 65536,
            max_connections: 10000,
            max_provider_connections: 55280,
            instance_id: instance(),
            version: "0.1.0",
        },
        Lifecycle::DaemonPassThroughEnabled {
            daemon_keys: DaemonKeys::BoundOnly,
            openai_key_configured: true,
            anthropic_key_configured: false,
        },
        Lifecycle::DaemonStopped {
            uptime_ms: 1000,
            unfinished_requests: 0,
        },
        Lifecycle::DaemonFailed {
            error: &context.failure,
        },
        Lifecycle::StateWriteFailed {
            file: Path::new("/var/lib/relay/.config/relay/daemon/bindings.json"),
            error: &context.io_error,
            attempt: 2,
        },
        Lifecycle::ControlRegistrationRefused {
            role: Role::Mcp,
            reason: RefusedCode::TokenLimit,
            peer: LOOPBACK,
            fingerprint: Some(FINGERPRINT),
        },
        Lifecycle::ControlRateLimited {
            role: Role::Worker,
            peer: REMOTE,
            retry_after_secs: 15,
            suppressed_since_last_emit: 0,
        },
        Lifecycle::DaemonPinMismatch {
            role: Role::Mcp,
            origin: "http://127.0.0.1:47632",
            pin_file: Path::new("/home/u/.config/relay/daemon/pins/ab"),
        },
        Lifecycle::MachineIdentityConflict {
            fingerprint: FINGERPRINT,
            peer: REMOTE,
            other_peer: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 8)),
        },
        Lifecycle::RouteCredentialEvicted {
            fingerprint: FINGERPRINT,
            credential_digest: DIGEST,
            max_tokens_per_identity: 4,
        },
        Lifecycle::RouteEvicted {
            fingerprint: FINGERPRINT,
            max_routes: 4096,
        },
        Lifecycle::CredentialTombstonesDropped {
            dropped: 1,
            max_tombstones: 65536,
        },
        Lifecycle::McpAdded {
            fingerprint: FINGERPRINT,
            instance_id: instance(),
            references: 1,
        },
        Lifecycle::McpRemoved {
            fingerprint: FINGERPRINT,
            instance_id: instance(),
            references: 0,
            reason: McpRemovedReason::Released,
        },
        Lifecycle::McpControlConnected {
            fingerprint: FINGERPRINT,
            instance_id: instance(),
            peer: LOOPBACK,
        },
        Lifecycle::McpControlReconnected {
            fingerprint: FINGERPRINT,
            instance_id: instance(),
            disconnected_ms: 250,
        },
        Lifecycle::McpControlDisconnected {
            fingerprint: FINGERPRINT,
            instance_id: instance(),
            reason: McpDisconnectReason::PongTimeout,
        },
        Lifecycle::WorkerStaged {
            fingerprint: FINGERPRINT,
            activation_id: activation(),
            owner_instance_id: instance(),
            attempt: 1,
        },
        Lifecycle::WorkerStartupPending {
            fingerprint: FINGERPRINT,
            activation_id: Some(activation()),
            elapsed_ms: 60_000,
        },
        Lifecycle::WorkerAdded {
            fingerprint: FINGERPRINT,
            worker_id: worker(),
            activation_id: Some(activation()),
            startup_elapsed_ms: 120,
        },
        Lifecycle::WorkerReady {
            fingerprint: FINGERPRINT,
            worker_id: worker(),
        },
        Lifecycle::WorkerRelaunchRequested {
            fingerprint: FINGERPRINT,
            attempt: 3,
        },
        Lifecycle::WorkerActivationFailed {
            fingerprint: FINGERPRINT,
            activation_id: Some(activation()),
            failure_reason: FailureReason::PluginConfigInvalid,
            retry_after_ms: 2000,
            attempt: 2,
        },
        Lifecycle::WorkerActivationCancelled {
            fingerprint: FINGERPRINT,
            activation_id: activation(),
            reason: ActivationCancelReason::OwnerDisconnected,
        },
        Lifecycle::WorkerControlConnected {
            fingerprint: FINGERPRINT,
            worker_id: worker(),
            peer: LOOPBACK,
        },
        Lifecycle::WorkerControlReconnected {
            fingerprint: FINGERPRINT,
            worker_id: worker(),
            disconnected_ms: 900,
        },
        Lifecycle::WorkerControlDisconnected {
            fingerprint: FINGERPRINT,
            worker_id: worker(),
            reason: WorkerDisconnectReason::PeerClosed,
        },
        Lifecycle::WorkerControlLost {
            fingerprint: FINGERPRINT,
            worker_id: worker(),
            reconnect_grace_ms: 30_000,
        },
        Lifecycle::WorkerReadinessFailed {
            fingerprint: FINGERPRINT,
            worker_id: worker(),
            consecutive_failures: 2,
        },
        Lifecycle::WorkerRecoveryStarted {
            fingerprint: FINGERPRINT,
            worker_id: worker(),
            reconnect_grace_ms: 30_000,
        },
        Lifecycle::WorkerRecoveryFailed {
            fingerprint: FINGERPRINT,
            worker_id: worker(),
            elapsed_ms: 30_001,
        },
        Lifecycle::WorkerDrainStarted {
            fingerprint: FINGERPRINT,
            worker_id: worker(),
            drain_ms: 120_000,
            in_flight: 3,
        },
        Lifecycle::WorkerRemoved {
            fingerprint: FINGERPRINT,
            worker_id: worker(),
            reason: WorkerRemovedReason::Drained,
        },
        Lifecycle::WorkerStopped {
            fingerprint: Some(FINGERPRINT),
            worker_id: Some(worker()),
            activation_id: None,
            exit: Some(ProcessExit::Code(0)),
        },
        Lifecycle::PublicRequestPassThrough {
            route: PublicRoute::Anthropic,
            reason: PassThroughReason::NoLiveSession,
            fingerprint: Some(FINGERPRINT),
        },
        Lifecycle::DaemonMcpReady {
            daemon_address: "http://127.0.0.1:47632",
            fingerprint: FINGERPRINT,
            route_mode: RouteMode::Worker,
            elapsed_ms: 140,
        },
        Lifecycle::DaemonMcpPassThrough {
            daemon_address: "http://127.0.0.1:47632",
            fingerprint: Some(FINGERPRINT),
            reason: McpPassThroughReason::DaemonUnreachable,
            refused: None,
        },
        Lifecycle::WorkerLaunchFailed {
            fingerprint: FINGERPRINT,
            activation_id: activation(),
            failure_reason: FailureReason::WorkerProcessSpawnFailed,
            detail: Some("permission denied"),
        },
        Lifecycle::RouteCredentialSkipped {
            source: CredentialSource::File,
            reason: CredentialSkipReason::InsecurePermissions,
            path: Some(Path::new("/home/u/.config/relay/.client-token")),
        },
        Lifecycle::ConfigurationResolved {
            fingerprint: Some(FINGERPRINT),
            plugins: 2,
        },
    ]
}

/// The level each sample is logged at (docs/logging.md lists the same).
fn expected_level(event: &Lifecycle<'_>) -> &'static str {
    match event {
        Lifecycle::DaemonFailed { .. }
        | Lifecycle::StateWriteFailed { .. }
        | Lifecycle::DaemonPinMismatch { .. } => "error",
        Lifecycle::ControlRegistrationRefused { .. }
        | Lifecycle::ControlRateLimited { .. }
        | Lifecycle::MachineIdentityConflict { .. }
        | Lifecycle::WorkerActivationFailed { .. }
        | Lifecycle::WorkerControlDisconnected { .. }
        | Lifecycle::WorkerControlLost { .. }
        | Lifecycle::WorkerReadinessFailed { .. }
        | Lifecycle::WorkerRecoveryStarted { .. }
        | Lifecycle::WorkerRecoveryFailed { .. }
        | Lifecycle::WorkerLaunchFailed { .. }
        | Lifecycle::RouteCredentialSkipped { .. }
        | Lifecycle::CredentialTombstonesDropped { .. } => "warn",
        // The samples use a warn-level reason for these two; the info-level reasons are
        // checked in their own tests.
        Lifecycle::McpControlDisconnected { .. } | Lifecycle::DaemonMcpPassThrough { .. } => "warn",
        Lifecycle::DaemonListening { .. }
        | Lifecycle::DaemonPassThroughEnabled { .. }
        | Lifecycle::DaemonStopped { .. }
        | Lifecycle::RouteCredentialEvicted { .. }
        | Lifecycle::RouteEvicted { .. }
        | Lifecycle::McpAdded { .. }
        | Lifecycle::McpRemoved { .. }
        | Lifecycle::McpControlConnected { .. }
        | Lifecycle::McpControlReconnected { .. }
        | Lifecycle::WorkerStaged { .. }
        | Lifecycle::WorkerStartupPending { .. }
        | Lifecycle::WorkerAdded { .. }
        | Lifecycle::WorkerReady { .. }
        | Lifecycle::WorkerRelaunchRequested { .. }
        | Lifecycle::WorkerActivationCancelled { .. }
        | Lifecycle::WorkerControlConnected { .. }
        | Lifecycle::WorkerControlReconnected { .. }
        | Lifecycle::WorkerDrainStarted { .. }
        | Lifecycle::WorkerRemoved { .. }
        | Lifecycle::WorkerStopped { .. }
        | Lifecycle::PublicRequestPassThrough { .. }
        | Lifecycle::DaemonMcpReady { .. }
        | Lifecycle::ConfigurationResolved { .. } => "info",
    }
}

fn provider_failures() -> [ProviderFailure<'static>; 3] {
    [
        ProviderFailure::UpstreamRequestFailed {
            route: PublicRoute::Openai,
            fingerprint: Some(FINGERPRINT),
            reason: "connect_timeout",
        },
        ProviderFailure::WorkerRequestFailed {
            route: PublicRoute::Anthropic,
            fingerprint: FINGERPRINT,
            worker_id: worker(),
            reason: "response_head_timeout",
        },
        ProviderFailure::WorkerCommunicationFailed {
            fingerprint: FINGERPRINT,
            worker_id: worker(),
            reason: "tls_handshake_failed",
        },
    ]
}

/// Emits one event and returns its single line.
fn emit_one(event: &Lifecycle<'_>) -> Map<String, Value> {
    let mut lines = capture_json(|| event.emit());
    assert_eq!(lines.len(), 1, "{} wrote {lines:?}", event.name());
    lines.remove(0)
}

#[test]
fn every_spec_event_is_emitted_under_its_name() {
    let context = Context::new();
    let mut emitted = BTreeSet::new();
    for event in samples(&context) {
        let line = emit_one(&event);
        assert_eq!(line["event"], event.name(), "{line:?}");
        assert!(
            emitted.insert(event.name()),
            "{} sampled twice",
            event.name()
        );
    }
    let mut limiter = RateLimiter::default();
    let now = std::time::Instant::now();
    for failure in provider_failures() {
        let lines = capture_json(|| {
            assert!(limiter.emit(now, &failure));
        });
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["event"], failure.name());
        assert!(emitted.insert(failure.name()));
    }
    let documented: BTreeSet<&str> = SPEC_EVENTS.into_iter().collect();
    assert_eq!(
        documented.len(),
        SPEC_EVENTS.len(),
        "SPEC_EVENTS lists a name twice"
    );
    assert_eq!(emitted, documented);
}

#[test]
fn every_event_has_the_lifecycle_shape() {
    let context = Context::new();
    for event in samples(&context) {
        let line = emit_one(&event);
        let name = event.name();
        assert_eq!(line["target"], LIFECYCLE_TARGET, "{name}");
        assert_eq!(line["level"], expected_level(&event), "{name}");
        assert!(line["timestamp"].is_string(), "{name}");
        let message = line["message"].as_str().unwrap();
        assert!(!message.is_empty(), "{name}");
        assert_eq!(
            message,
            message.to_lowercase(),
            "{name}: message must be lowercase"
        );
        assert!(!message.ends_with('.'), "{name}");
    }
}

#[test]
fn fingerprints_and_digests_are_written_as_12_character_prefixes() {
    let context = Context::new();
    let mut lines: Vec<Map<String, Value>> = samples(&context).iter().map(emit_one).collect();
    let mut limiter = RateLimiter::default();
    let now = std::time::Instant::now();
    for failure in provider_failures() {
        lines.extend(capture_json(|| {
            limiter.emit(now, &failure);
        }));
    }
    let mut with_fingerprint = 0;
    for line in &lines {
        let text = serde_json::to_string(line).unwrap();
        assert!(!text.contains(FINGERPRINT), "full fingerprint in {text}");
        assert!(!text.contains(DIGEST), "full digest in {text}");
        if let Some(fingerprint) = line.get("fingerprint") {
            assert_eq!(fingerprint.as_str().unwrap().len(), 12, "{text}");
            assert_eq!(fingerprint, &FINGERPRINT[..12], "{text}");
            with_fingerprint += 1;
        }
    }
    // Every sample except the daemon-wide and credential-source events (the tombstones
    // dropped among them) names its route.
    assert_eq!(with_fingerprint, lines.len() - 9, "{lines:#?}");
    let evicted = emit_one(&Lifecycle::RouteCredentialEvicted {
        fingerprint: FINGERPRINT,
        credential_digest: DIGEST,
        max_tokens_per_identity: 4,
    });
    assert_eq!(evicted["credential_digest"], &DIGEST[..12]);
}

#[test]
fn a_token_passed_as_a_fingerprint_is_never_written() {
    let line = emit_one(&Lifecycle::WorkerReady {
        fingerprint: TOKEN,
        worker_id: worker(),
    });
    assert_eq!(line["fingerprint"], "invalid");
    let evicted = emit_one(&Lifecycle::RouteCredentialEvicted {
        fingerprint: FINGERPRINT,
        credential_digest: TOKEN,
        max_tokens_per_identity: 4,
    });
    assert_eq!(evicted["credential_digest"], "invalid");
    for line in [line, evicted] {
        let text = serde_json::to_string(&line).unwrap();
        assert!(!text.contains(&TOKEN[..12]), "{text}");
    }
}

#[test]
fn digest_prefix_accepts_only_64_hex_characters() {
    assert_eq!(digest_prefix(FINGERPRINT), "0123456789ab");
    assert_eq!(digest_prefix(&FINGERPRINT.to_uppercase()), "0123456789AB");
    assert_eq!(digest_prefix(&FINGERPRINT[..63]), "invalid");
    assert_eq!(digest_prefix(&format!("{FINGERPRINT}0")), "invalid");
    assert_eq!(
        digest_prefix(&format!("{}g", &FINGERPRINT[..63])),
        "invalid"
    );
    assert_eq!(digest_prefix(""), "invalid");
    // Multi-byte characters must not make slicing panic.
    assert_eq!(digest_prefix(&"é".repeat(32)), "invalid");
}

#[test]
fn worker_ready_says_worker_is_ready() {
    let line = emit_one(&Lifecycle::WorkerReady {
        fingerprint: FINGERPRINT,
        worker_id: worker(),
    });
    assert_eq!(line["message"], "worker is ready");
    assert_eq!(line["worker_id"], worker().to_string());
    assert_eq!(line["level"], "info");
}

#[test]
fn daemon_listening_carries_address_mode_and_descriptor_limits() {
    let context = Context::new();
    let line = emit_one(&samples(&context)[0]);
    assert_eq!(line["event"], "daemon_listening");
    assert_eq!(line["address"], "127.0.0.1:47632");
    assert_eq!(line["mode"], "managed");
    assert_eq!(line["open_file_limit"], 65536);
    assert_eq!(line["max_connections"], 10000);
    assert_eq!(line["max_provider_connections"], 55280);
    assert_eq!(line["socket_activated"], true);
    assert_eq!(line["tls"], false);
    assert_eq!(line["instance_id"], instance().to_string());
    assert!(
        !line.contains_key("advertised_origin"),
        "None fields are left out"
    );
}

#[test]
fn control_registration_refused_names_role_reason_and_peer() {
    let line = emit_one(&Lifecycle::ControlRegistrationRefused {
        role: Role::Worker,
        reason: RefusedCode::GrantReplayed,
        peer: REMOTE,
        fingerprint: None,
    });
    assert_eq!(line["level"], "warn");
    assert_eq!(line["role"], "worker");
    assert_eq!(line["reason"], "grant_replayed");
    assert_eq!(line["peer"], "192.0.2.7");
    assert!(!line.contains_key("fingerprint"));
}

#[test]
fn public_request_pass_through_has_route_mode_and_reason() {
    let line = emit_one(&Lifecycle::PublicRequestPassThrough {
        route: PublicRoute::Hook,
        reason: PassThroughReason::WorkerConnectFailed,
        fingerprint: Some(FINGERPRINT),
    });
    assert_eq!(line["route"], "hook");
    assert_eq!(line["route_mode"], "pass_through");
    assert_eq!(line["reason"], "worker_connect_failed");
}

#[test]
fn worker_removed_level_follows_its_reason() {
    let expected = [
        (WorkerRemovedReason::Drained, "info"),
        (WorkerRemovedReason::Revoked, "info"),
        (WorkerRemovedReason::DrainTimeout, "warn"),
        (WorkerRemovedReason::Crashed, "warn"),
    ];
    for (reason, level) in expected {
        let line = emit_one(&Lifecycle::WorkerRemoved {
            fingerprint: FINGERPRINT,
            worker_id: worker(),
            reason,
        });
        assert_eq!(line["reason"], reason.as_str());
        assert_eq!(line["level"], level, "{reason}");
    }
}

#[test]
fn disconnect_and_mcp_pass_through_levels_follow_their_reason() {
    for reason in McpDisconnectReason::ALL.iter().copied() {
        let line = emit_one(&Lifecycle::McpControlDisconnected {
            fingerprint: FINGERPRINT,
            instance_id: instance(),
            reason,
        });
        let expected = match reason {
            McpDisconnectReason::PeerClosed | McpDisconnectReason::DaemonStopping => "info",
            _ => "warn",
        };
        assert_eq!(line["level"], expected, "{reason}");
        assert_eq!(line["reason"], reason.as_str());
    }
    for reason in McpPassThroughReason::ALL.iter().copied() {
        let line = emit_one(&Lifecycle::DaemonMcpPassThrough {
            daemon_address: "http://127.0.0.1:47632",
            fingerprint: None,
            reason,
            refused: None,
        });
        let expected = if reason == McpPassThroughReason::ConfiguredPassThrough {
            "info"
        } else {
            "warn"
        };
        assert_eq!(line["level"], expected, "{reason}");
        assert_eq!(line["reason"], reason.as_str());
    }
}

#[test]
fn worker_stopped_reports_code_or_signal() {
    let code = emit_one(&Lifecycle::WorkerStopped {
        fingerprint: None,
        worker_id: None,
        activation_id: Some(activation()),
        exit: Some(ProcessExit::Code(3)),
    });
    assert_eq!(code["exit_code"], 3);
    assert!(!code.contains_key("exit_signal"));
    assert_eq!(code["activation_id"], activation().to_string());
    let signal = emit_one(&Lifecycle::WorkerStopped {
        fingerprint: None,
        worker_id: None,
        activation_id: None,
        exit: Some(ProcessExit::Signal(9)),
    });
    assert_eq!(signal["exit_signal"], 9);
    assert!(!signal.contains_key("exit_code"));
}

#[cfg(unix)]
#[test]
fn process_exit_reads_an_exit_status() {
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(
        ProcessExit::from(std::process::ExitStatus::from_raw(0)),
        ProcessExit::Code(0)
    );
    assert_eq!(
        ProcessExit::from(std::process::ExitStatus::from_raw(2 << 8)),
        ProcessExit::Code(2)
    );
    assert_eq!(
        ProcessExit::from(std::process::ExitStatus::from_raw(9)),
        ProcessExit::Signal(9)
    );
}

#[test]
fn daemon_failed_writes_the_error_chain() {
    let context = Context::new();
    let line = emit_one(&Lifecycle::DaemonFailed {
        error: &context.failure,
    });
    assert_eq!(line["level"], "error");
    assert_eq!(
        line["error"],
        "writing the generation ledger: no space left on device"
    );
}

#[test]
fn worker_side_and_mcp_side_events_carry_their_fields() {
    let context = Context::new();
    let by_name: BTreeMap<&str, Map<String, Value>> = samples(&context)
        .iter()
        .map(|event| (event.name(), emit_one(event)))
        .collect();
    assert_eq!(by_name["configuration_resolved"]["mode"], "managed_worker");
    assert_eq!(by_name["configuration_resolved"]["plugins"], 2);
    let skipped = &by_name["route_credential_skipped"];
    assert_eq!(skipped["source"], "file");
    assert_eq!(skipped["reason"], "insecure_permissions");
    assert_eq!(skipped["path"], "/home/u/.config/relay/.client-token");
    let launch = &by_name["worker_launch_failed"];
    assert_eq!(launch["failure_reason"], "worker_process_spawn_failed");
    assert_eq!(launch["detail"], "permission denied");
    let activation_failed = &by_name["worker_activation_failed"];
    assert_eq!(activation_failed["failure_reason"], "plugin_config_invalid");
    assert_eq!(activation_failed["retry_after_ms"], 2000);
    assert_eq!(by_name["worker_relaunch_requested"]["attempt"], 3);
    assert_eq!(by_name["worker_added"]["startup_elapsed_ms"], 120);
    assert_eq!(by_name["worker_startup_pending"]["elapsed_ms"], 60_000);
    assert_eq!(by_name["daemon_mcp_ready"]["route_mode"], "worker");
    assert_eq!(by_name["state_write_failed"]["attempt"], 2);
    assert_eq!(
        by_name["state_write_failed"]["error"],
        "no space left on device"
    );
    assert_eq!(
        by_name["worker_control_disconnected"]["reason"],
        "peer_closed"
    );
}

#[test]
fn value_lists_match_the_spec() {
    assert_eq!(
        WorkerRemovedReason::ALL
            .iter()
            .map(|v| v.as_str())
            .collect::<Vec<_>>(),
        ["drained", "drain_timeout", "revoked", "crashed"]
    );
    assert_eq!(
        WorkerDisconnectReason::ALL
            .iter()
            .map(|v| v.as_str())
            .collect::<Vec<_>>(),
        ["pong_timeout", "peer_closed", "worker_communication_failed"]
    );
    assert_eq!(
        McpPassThroughReason::ALL
            .iter()
            .map(|v| v.as_str())
            .collect::<Vec<_>>(),
        [
            "credential_rejected",
            "daemon_unreachable",
            "route_table_full",
            "configured_pass_through",
            "activation_failed"
        ]
    );
    assert_eq!(
        FailureReason::REPORTED
            .iter()
            .map(|v| v.as_str())
            .collect::<Vec<_>>(),
        [
            "worker_executable_resolution_failed",
            "worker_process_spawn_failed",
            "worker_activation_pipe_unavailable",
            "worker_activation_grant_write_failed",
            "worker_exited_before_ready",
            "plugin_config_invalid"
        ]
    );
    assert_eq!(
        PublicRoute::ALL
            .iter()
            .map(|v| v.as_str())
            .collect::<Vec<_>>(),
        ["hook", "openai", "anthropic"]
    );
    assert_eq!(RefusedCode::ALL.len(), 20);
    assert_eq!(CredentialSkipReason::ALL.len(), 7);
}

#[test]
fn every_value_is_a_distinct_snake_case_word() {
    let mut all: Vec<(&str, Vec<&str>)> = Vec::new();
    macro_rules! collect {
        ($($ty:ident),+) => {
            $(all.push((stringify!($ty), $ty::ALL.iter().map(|value| value.as_str()).collect()));)+
        };
    }
    collect!(
        DaemonMode,
        DaemonKeys,
        Role,
        RefusedCode,
        McpRemovedReason,
        McpDisconnectReason,
        WorkerDisconnectReason,
        ActivationCancelReason,
        WorkerRemovedReason,
        PublicRoute,
        PassThroughReason,
        RouteMode,
        McpPassThroughReason,
        FailureReason,
        CredentialSource,
        CredentialSkipReason
    );
    for (ty, values) in all {
        let distinct: BTreeSet<&str> = values.iter().copied().collect();
        assert_eq!(distinct.len(), values.len(), "{ty} repeats a value");
        for value in values {
            assert!(
                !value.is_empty() && value.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{ty}: {value:?}"
            );
        }
    }
}
