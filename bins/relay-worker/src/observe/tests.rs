use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use relay_plugins::PriceTable;
use relay_plugins::atof::{Agent, HookEvent, Observation};
use relay_plugins::config::{FileSink, HttpSink, ObservabilityConfig, OtlpConfig, Sink};
use relay_proxy::worker::Observer as _;
use relay_sinks::SinkContext;

use super::Recording;

fn http(url: String) -> Sink {
    Sink::Http(HttpSink {
        url,
        headers: BTreeMap::new(),
        header_env: BTreeMap::new(),
        batch_max: HttpSink::DEFAULT_BATCH_MAX,
        flush_ms: 10,
        timeout_ms: 100,
        queue: HttpSink::DEFAULT_QUEUE,
    })
}

fn config(sinks: Vec<Sink>, otlp: Option<String>) -> ObservabilityConfig {
    ObservabilityConfig {
        capture_content: false,
        sinks,
        otlp: otlp.map(|endpoint| OtlpConfig {
            endpoint,
            service_name: OtlpConfig::DEFAULT_SERVICE_NAME.to_owned(),
            headers: BTreeMap::new(),
            header_env: BTreeMap::new(),
        }),
        prices: PriceTable::default(),
    }
}

fn file(directory: PathBuf) -> Sink {
    Sink::File(FileSink {
        directory,
        filename: "events-{user}.jsonl".to_owned(),
    })
}

/// A terminal hook waits for the file, not for a collector that is down: the flush returns
/// long before the deadline the collector's retries would run into, with the record written.
#[tokio::test]
async fn a_down_collector_does_not_hold_a_terminal_flush() {
    let dir = tempfile::tempdir().unwrap();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let component = config(
        vec![
            file(dir.path().to_path_buf()),
            http(format!("http://{closed}/atof")),
        ],
        Some(format!("http://{closed}/v1/traces")),
    );
    let ctx = SinkContext {
        user: "tester".to_owned(),
        fingerprint: "0123456789ab".to_owned(),
        tls: None,
    };
    let recording = Recording::start(&component, None, &ctx).unwrap();
    recording.observe(
        std::time::SystemTime::now(),
        Observation::Hook(HookEvent::from_payload(
            Agent::ClaudeCode,
            serde_json::json!({"hook_event_name": "SessionStart", "session_id": "s-1"}),
        )),
    );
    let deadline = Duration::from_secs(2);
    let started = std::time::Instant::now();
    recording.flush(deadline).await;
    let took = started.elapsed();
    assert!(took < Duration::from_millis(500), "the flush took {took:?}");
    let written = std::fs::read_to_string(dir.path().join("events-tester.jsonl")).unwrap();
    assert!(written.contains("\"s-1\""), "{written}");
    recording.shutdown().await;
}

/// A terminal hook answers within its 2 s however long the recorder's queue kept the
/// flush waiting: the wait to be queued and the wait for the answer share one deadline.
#[tokio::test(start_paused = true)]
async fn a_full_queue_does_not_stretch_a_terminal_flush() {
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    let recording = Recording {
        tx,
        dropped: std::sync::atomic::AtomicU64::new(0),
        started: std::time::Instant::now(),
        last_drop_log_ms: std::sync::atomic::AtomicU64::new(0),
    };
    // The queue is full.
    recording
        .tx
        .send(super::Msg::Shutdown(tokio::sync::oneshot::channel().0))
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let flush = tokio::spawn(recording.flush(Duration::from_secs(2)));
    // 1.5 s later the recorder takes the message ahead of the flush, then the flush, which
    // it never answers.
    tokio::time::advance(Duration::from_millis(1500)).await;
    let _ahead = rx.recv().await.unwrap();
    let _unanswered = rx.recv().await.unwrap();
    flush.await.unwrap();
    assert_eq!(started.elapsed(), Duration::from_secs(2));
}
