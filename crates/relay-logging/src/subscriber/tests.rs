use uuid::Uuid;

use super::*;
use crate::{
    LogCapture, LogOrigin,
    lifecycle::Lifecycle,
    test_support::{capture, capture_json},
};

const FINGERPRINT: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

#[test]
fn human_format_writes_one_readable_line_per_event() {
    let worker_id = Uuid::from_u128(7);
    let output = capture("info", LogFormat::Human, || {
        Lifecycle::WorkerReady {
            fingerprint: FINGERPRINT,
            worker_id,
        }
        .emit();
    });
    assert_eq!(output.lines().count(), 1, "{output}");
    assert!(output.ends_with('\n'));
    assert!(output.contains("INFO"), "{output}");
    assert!(output.contains("relay::lifecycle"), "{output}");
    assert!(output.contains("worker is ready"), "{output}");
    assert!(output.contains("event=\"worker_ready\""), "{output}");
    assert!(output.contains("fingerprint=\"0123456789ab\""), "{output}");
    assert!(output.contains(&worker_id.to_string()), "{output}");
    assert!(!output.contains(FINGERPRINT), "{output}");
    assert!(!output.contains('\u{1b}'), "no colour codes: {output:?}");
}

#[test]
fn human_format_escapes_line_breaks_in_values() {
    let output = capture("info", LogFormat::Human, || {
        tracing::info!(detail = "one\ntwo", "value with a line break");
    });
    assert_eq!(output.lines().count(), 1, "{output}");
}

#[test]
fn the_level_filters_events() {
    let output = capture("warn", LogFormat::Jsonl, || {
        tracing::info!("dropped");
        tracing::warn!("kept");
    });
    assert_eq!(output.lines().count(), 1, "{output}");
    assert!(output.contains("kept"));
}

#[test]
fn a_target_filter_applies_per_target() {
    // A library that reads no peer's bytes: those are held apart (below).
    let output = capture("relay=debug,warn", LogFormat::Jsonl, || {
        tracing::debug!(target: "relay::proxy", "relay debug");
        tracing::debug!(target: "notify::inotify", "library debug");
        tracing::warn!(target: "notify::inotify", "library warn");
    });
    assert!(output.contains("relay debug"), "{output}");
    assert!(!output.contains("library debug"), "{output}");
    assert!(output.contains("library warn"), "{output}");
}

/// What a peer's bytes make the TLS and HTTP/2 libraries say, once per connection or per
/// frame (an IP address as the server name, a ping nobody sent), stays out of a service's
/// log unless the filter names the library: otherwise any peer sets the log's volume.
#[test]
fn peer_facing_libraries_say_only_errors_at_a_services_levels() {
    let say = || {
        tracing::warn!(target: "rustls::msgs::handshake", "rustls warn");
        tracing::warn!(target: "h2::proto::ping_pong", "h2 warn");
        tracing::debug!(target: "h2::proto::ping_pong", "h2 debug");
        tracing::error!(target: "h2::proto::streams", "h2 error");
        tracing::warn!(target: "tokio::net", "another crate warn");
        tracing::warn!(target: "hyper_util::client", "hyper_util warn");
        tracing::warn!(target: "relay_proxy::server", "relay warn");
    };
    for level in ["info", "warn", "WARN", "debug,info", "relay=debug,info"] {
        let output = capture(level, LogFormat::Jsonl, say);
        assert!(!output.contains("rustls warn"), "{level}: {output}");
        assert!(!output.contains("h2 warn"), "{level}: {output}");
        assert!(!output.contains("hyper_util warn"), "{level}: {output}");
        assert!(output.contains("h2 error"), "{level}: {output}");
        assert!(output.contains("another crate warn"), "{level}: {output}");
        assert!(output.contains("relay warn"), "{level}: {output}");
    }
    // Named, a library says what its directive lets through; the others stay held.
    for level in ["info,h2=debug", "h2::proto=debug,warn"] {
        let output = capture(level, LogFormat::Jsonl, say);
        assert!(output.contains("h2 warn"), "{level}: {output}");
        assert!(output.contains("h2 debug"), "{level}: {output}");
        assert!(!output.contains("rustls warn"), "{level}: {output}");
    }
    // A directive for one module, one span or one companion crate applies there only: the
    // rest of the library stays held.
    for level in [
        "info,rustls::other=off",
        "info,h2::proto::streams=off",
        "info,h2[conn]=debug",
        "info,hyper::client=info",
    ] {
        let output = capture(level, LogFormat::Jsonl, say);
        assert!(!output.contains("rustls warn"), "{level}: {output}");
        assert!(!output.contains("h2 warn"), "{level}: {output}");
        assert!(!output.contains("hyper_util warn"), "{level}: {output}");
    }
    // Asked for everything, the operator gets it.
    let output = capture("debug", LogFormat::Jsonl, say);
    assert!(output.contains("rustls warn"), "{output}");
    assert!(output.contains("h2 debug"), "{output}");
    // Nothing is let through that the filter turned off.
    for level in ["off", "off,relay=info", "error,relay=info"] {
        let output = capture(level, LogFormat::Jsonl, say);
        assert!(!output.contains("h2 warn"), "{level}: {output}");
        assert!(!output.contains("rustls warn"), "{level}: {output}");
        assert!(!output.contains("another crate warn"), "{level}: {output}");
    }
    let output = capture("off,relay=info", LogFormat::Jsonl, say);
    assert!(!output.contains("h2 error"), "{output}");
}

/// Control frames carry secrets; no directive, however specific, lets the WebSocket
/// crates' frame logs (`trace`) through.
#[test]
fn no_directive_lets_the_websocket_frame_logs_through() {
    for level in [
        "trace",
        "warn,tungstenite::protocol=trace",
        "warn,tokio_tungstenite::compat=trace,tungstenite=trace",
        "warn,[frames]=trace",
    ] {
        let output = capture(level, LogFormat::Jsonl, || {
            let _span = tracing::info_span!("frames").entered();
            tracing::trace!(target: "tungstenite::protocol", "frame with a secret");
            tracing::trace!(target: "tokio_tungstenite::compat", "frame with a secret");
            tracing::debug!(target: "tungstenite::protocol", "connection closed");
            tracing::trace!(target: "relay_proxy::control", "relay trace");
        });
        assert!(!output.contains("secret"), "{level}: {output}");
        if level != "warn,[frames]=trace" {
            assert!(output.contains("connection closed"), "{level}: {output}");
        }
        if level == "trace" {
            assert!(output.contains("relay trace"), "{level}: {output}");
        }
    }
}

#[test]
fn lifecycle_events_pass_a_warn_filter_for_their_target() {
    let output = capture("warn,relay::lifecycle=info", LogFormat::Jsonl, || {
        Lifecycle::WorkerReady {
            fingerprint: FINGERPRINT,
            worker_id: Uuid::nil(),
        }
        .emit();
        tracing::info!(target: "relay::proxy", "not lifecycle");
    });
    assert_eq!(output.lines().count(), 1, "{output}");
    assert!(output.contains("worker_ready"));
}

#[test]
fn an_invalid_configuration_is_refused() {
    let config = LogConfig {
        level: "relay=loud".to_owned(),
        format: LogFormat::Jsonl,
    };
    match subscriber(&config, LogCapture::new()) {
        Err(LogConfigError::InvalidLevel { origin, value, .. }) => {
            assert_eq!(origin, LogOrigin::Config);
            assert_eq!(value, "relay=loud");
        }
        other => panic!("expected InvalidLevel, got {other:?}"),
    }
}

#[test]
fn capture_json_sees_every_line() {
    let lines = capture_json(|| {
        for n in 0..5u64 {
            tracing::info!(n, "line");
        }
    });
    let numbers: Vec<u64> = lines
        .iter()
        .map(|line| line["n"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [0, 1, 2, 3, 4]);
}

/// The only test in this binary that touches the global subscriber.
#[test]
fn init_installs_the_global_subscriber_once() {
    let capture = LogCapture::new();
    let config = LogConfig {
        level: "info".to_owned(),
        format: LogFormat::Jsonl,
    };
    init(&config, capture.clone()).unwrap();
    // A fresh thread has no scoped default, so it logs through the global subscriber.
    std::thread::spawn(|| tracing::info!(target: "relay::global", "through the global subscriber"))
        .join()
        .unwrap();
    assert!(capture.contents().contains("through the global subscriber"));

    let again = init(&config, LogCapture::new());
    assert!(
        matches!(again, Err(InitError::AlreadyInstalled)),
        "{again:?}"
    );
    let invalid = LogConfig {
        level: "chatty".to_owned(),
        format: LogFormat::Human,
    };
    assert!(matches!(
        init(&invalid, LogCapture::new()),
        Err(InitError::Config(_))
    ));
}

#[test]
fn human_format_keeps_multi_line_errors_and_paths_on_one_line() {
    let error = std::io::Error::other("first line\nsecond line");
    let output = capture("info", LogFormat::Human, || {
        Lifecycle::DaemonFailed { error: &error }.emit();
        Lifecycle::StateWriteFailed {
            file: std::path::Path::new("/tmp/odd\nname"),
            error: &error,
            attempt: 1,
        }
        .emit();
    });
    assert_eq!(output.lines().count(), 2, "{output}");
}
