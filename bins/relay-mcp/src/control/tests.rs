use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use relay_identity::{DaemonAddress, PinStore, RouteToken, SigningKey};
use relay_logging::{LogCapture, LogConfig, LogFormat};
use relay_proto::{Bytes32, Grant, Id, Message, WorkerExited};
use relay_proxy::control::client::ClientIdentity;
use tokio::process::{Child, Command};
use tokio::sync::watch;

use super::{Control, Launched, Settled, pass_through_reason};
use crate::launch::Launcher;

/// How long a test waits for something that should happen at once.
const WAIT: Duration = Duration::from_secs(10);

/// A control loop that never dials: only its launches are exercised, with `worker_binary`
/// as the worker and `logs_dir` for the worker logs.
fn control(worker_binary: PathBuf, logs_dir: PathBuf) -> Control {
    let daemon: DaemonAddress = "http://127.0.0.1:9".parse().unwrap();
    Control {
        identity: ClientIdentity {
            daemon: daemon.clone(),
            key: Arc::new(SigningKey::generate().unwrap()),
            pins: Arc::new(PinStore::new(logs_dir.join("pins"), None)),
            tls: None,
            instance_id: fresh_id(),
        },
        credential: RouteToken::generate().unwrap(),
        hint: None,
        launcher: Launcher {
            worker_binary,
            daemon_address: daemon.origin().to_string(),
            plugin_files: (
                logs_dir.join("no-system-plugins.toml"),
                logs_dir.join("no-user-plugins.toml"),
            ),
            logs_dir,
            env: Vec::new(),
        },
        settled: watch::channel(Settled::Pending).0,
        queries: std::sync::Mutex::new(tokio::task::JoinSet::new()),
        retiring: std::sync::Mutex::new(tokio::task::JoinSet::new()),
    }
}

/// A session that started while the daemon was down is settled at once; when the daemon
/// later decides its route passes through, that decision is still logged, once.
#[tokio::test]
async fn a_pass_through_decided_after_an_unreachable_daemon_is_still_logged() {
    let dir = Scratch::new();
    let control = control(dir.0.join("no-such-worker"), dir.0.join("logs"));
    let (capture, _guard) = capture_log();
    control.daemon_down();
    assert_eq!(*control.settled.borrow(), Settled::DaemonDown);
    control.use_pass_through();
    control.use_pass_through();
    // The reason is logged once the daemon (here: nobody at the address) has answered.
    let mut queries = std::mem::take(
        &mut *relay_logging::sync::lock(&control.queries, "daemon queries").unwrap(),
    );
    while queries.join_next().await.is_some() {}
    let reasons: Vec<String> = capture
        .contents()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|e| e["event"] == "daemon_mcp_pass_through")
        .map(|e| e["reason"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(reasons, ["daemon_unreachable", "activation_failed"]);
}

/// Only a daemon that says it runs `--pass-through` makes the reason the configuration;
/// no answer, another mode, an error status or a body that is not JSON is a failed start.
#[test]
fn the_pass_through_reason_is_the_configuration_only_when_the_daemon_says_so() {
    use relay_logging::McpPassThroughReason::{ActivationFailed, ConfiguredPassThrough};
    use relay_proxy::daemon_http::Answer;
    let answer = |status: u16, body: &str| Answer {
        status: hyper::StatusCode::from_u16(status).unwrap(),
        body: bytes::Bytes::from(body.to_owned()),
    };
    let pass_through = r#"{"service":"relayd","deployment_mode":"pass_through","status":"ok"}"#;
    let managed = r#"{"service":"relayd","deployment_mode":"managed","status":"ok"}"#;
    assert_eq!(pass_through_reason(None), ActivationFailed);
    assert_eq!(
        pass_through_reason(Some(&answer(200, pass_through))),
        ConfiguredPassThrough
    );
    // A field a newer daemon adds does not matter.
    assert_eq!(
        pass_through_reason(Some(&answer(
            200,
            r#"{"deployment_mode":"pass_through","new_field":[1]}"#
        ))),
        ConfiguredPassThrough
    );
    assert_eq!(
        pass_through_reason(Some(&answer(200, managed))),
        ActivationFailed
    );
    assert_eq!(
        pass_through_reason(Some(&answer(503, pass_through))),
        ActivationFailed
    );
    assert_eq!(
        pass_through_reason(Some(&answer(200, "not json"))),
        ActivationFailed
    );
}

fn fresh_id() -> Id {
    Id::from(uuid::Uuid::now_v7())
}

fn grant(activation_id: Id) -> Grant {
    Grant {
        activation_id,
        activation_token: Bytes32([7; 32]),
        bind_ip: [127, 0, 0, 1],
        port: 0,
        advertise_address: None,
    }
}

/// A fresh directory of this test's own under the system temporary directory, removed
/// when the test ends, passed or failed.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "relay-mcp-control-{}",
            uuid::Uuid::now_v7().simple()
        ));
        std::fs::create_dir(&dir).unwrap();
        Scratch(dir)
    }

    /// A stand-in worker that reads its grant to the end of stdin, then exits 0, whatever
    /// its arguments (one that exited at once could fail the grant's write).
    fn worker(&self) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let path = self.0.join("worker");
        std::fs::write(&path, "#!/bin/sh\nexec /bin/cat >/dev/null\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Logs every event of this thread into a capture while the guard lives.
fn capture_log() -> (LogCapture, tracing::dispatcher::DefaultGuard) {
    let capture = LogCapture::new();
    let dispatch = relay_logging::subscriber(
        &LogConfig {
            level: "info".into(),
            format: LogFormat::Jsonl,
        },
        capture.clone(),
    )
    .unwrap();
    (capture, tracing::dispatcher::set_default(&dispatch))
}

/// The `worker_stopped` events in `capture`.
fn stopped_events(capture: &LogCapture) -> Vec<serde_json::Value> {
    capture
        .contents()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["event"] == "worker_stopped")
        .collect()
}

/// The one-letter state of process `pid` in `/proc/<pid>/stat` (`Z` for a zombie).
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces; the state follows it.
    let (_, after) = stat.rsplit_once(')')?;
    after.trim_start().chars().next()
}

/// A child that killed itself with SIGKILL and that nobody has reaped yet: a worker that
/// died while the MCP was busy elsewhere, so its exit is still unnoticed.
async fn child_dead_unnoticed() -> Child {
    let child = Command::new("/bin/sh")
        .args(["-c", "kill -9 $$"])
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut poll = tokio::time::interval(Duration::from_millis(5));
    loop {
        poll.tick().await;
        if process_state(pid) == Some('Z') {
            return child;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the child did not die within {WAIT:?}"
        );
    }
}

fn killed(activation_id: Id) -> Message {
    Message::WorkerExited(WorkerExited {
        activation_id,
        exit_code: None,
        signal: Some(9),
    })
}

/// The race of the flaky e2e test: the daemon saw the worker die (its endpoint refused)
/// and sent a fresh grant before this MCP noticed its child's exit. The exit the new
/// launch reaps is still logged and reported, before anything about the new launch.
#[tokio::test]
async fn a_launch_reports_the_exit_of_a_previous_child_that_died_unnoticed() {
    let dir = Scratch::new();
    let control = control(dir.0.join("no-such-worker"), dir.0.join("logs"));
    let old = fresh_id();
    let mut launched = Some(Launched {
        activation_id: old,
        child: child_dead_unnoticed().await,
        ready: false,
    });
    let (capture, _guard) = capture_log();

    let new = fresh_id();
    let reports = control.launch(grant(new), &mut launched).await;

    assert_eq!(reports.len(), 2, "{reports:?}");
    assert_eq!(reports[0], killed(old));
    assert!(
        matches!(&reports[1], Message::ActivationFailed(failed) if failed.activation_id == new),
        "{reports:?}"
    );
    let stopped = stopped_events(&capture);
    assert_eq!(stopped.len(), 1, "{}", capture.contents());
    assert_eq!(stopped[0]["activation_id"], old.as_uuid().to_string());
    assert_eq!(stopped[0]["exit_signal"], 9, "{}", stopped[0]);
    // The route the worker served, as every other event of the MCP names it (shortened).
    assert_eq!(
        stopped[0]["fingerprint"],
        &control.fingerprint()[..12],
        "{}",
        stopped[0]
    );
    assert!(launched.is_none());
}

/// A previous child that still runs (its grant was lost, so it can never register; or a
/// worker stopping on a signal with a stream in flight) is asked to stop with SIGTERM, not
/// killed, and is reaped and logged in the background; the daemon, which has replaced its
/// generation already, gets no report for it. The new child is the one watched afterwards.
#[tokio::test]
async fn a_launch_asks_a_previous_child_that_still_runs_to_stop() {
    let dir = Scratch::new();
    let control = control(dir.worker(), dir.0.join("logs"));
    let old = fresh_id();
    let mut launched = Some(Launched {
        activation_id: old,
        child: Command::new("/bin/sleep").arg("60").spawn().unwrap(),
        ready: false,
    });
    let old_pid = launched.as_ref().and_then(|l| l.child.id()).unwrap();
    let (capture, _guard) = capture_log();

    let new = fresh_id();
    let reports = control.launch(grant(new), &mut launched).await;

    assert_eq!(reports, []);
    assert_eq!(launched.as_ref().map(|l| l.activation_id), Some(new));
    let exit = tokio::time::timeout(WAIT, control.wait_child(&mut launched))
        .await
        .unwrap();
    assert_eq!(
        exit,
        WorkerExited {
            activation_id: new,
            exit_code: Some(0),
            signal: None,
        }
    );
    let mut retiring = std::mem::take(
        &mut *relay_logging::sync::lock(&control.retiring, "retiring children").unwrap(),
    );
    let reaped = tokio::time::timeout(WAIT, retiring.join_next()).await;
    assert!(
        matches!(reaped, Ok(Some(Ok(())))),
        "the old child was not reaped: {}",
        capture.contents()
    );
    assert_eq!(process_state(old_pid), None, "the old child was not reaped");
    let stopped = stopped_events(&capture);
    assert_eq!(stopped.len(), 2, "{}", capture.contents());
    let old_stop = stopped
        .iter()
        .find(|s| s["activation_id"] == old.as_uuid().to_string())
        .expect("the old child's end");
    // SIGTERM, which `sleep` does not catch: it was asked to stop, not killed.
    assert_eq!(old_stop["exit_signal"], 15, "{old_stop}");
    let new_stop = stopped
        .iter()
        .find(|s| s["activation_id"] == new.as_uuid().to_string())
        .expect("the new child's end");
    assert_eq!(new_stop["exit_code"], 0, "{new_stop}");
}

/// A child that exits before its route is ready is a failed launch, named by its exit
/// status; one that exits after the route was ready is not.
#[tokio::test]
async fn a_child_that_exits_before_it_is_ready_is_a_failed_launch() {
    let dir = Scratch::new();
    let control = control(dir.worker(), dir.0.join("logs"));
    let (capture, _guard) = capture_log();
    for (code, ready) in [(78, false), (1, false), (1, true)] {
        let mut launched = Some(Launched {
            activation_id: fresh_id(),
            child: Command::new("/bin/sh")
                .args(["-c", &format!("exit {code}")])
                .spawn()
                .unwrap(),
            ready,
        });
        tokio::time::timeout(WAIT, control.wait_child(&mut launched))
            .await
            .unwrap();
    }
    let reasons: Vec<String> = capture
        .contents()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["event"] == "worker_launch_failed")
        .map(|event| {
            event["failure_reason"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(
        reasons,
        ["plugin_config_invalid", "worker_exited_before_ready"],
        "{}",
        capture.contents()
    );
}
