//! `relayd bindings` against the built binary (SPEC §2.1, §5.4 last row, §5.7): on the
//! state file of a stopped daemon, and through the admin socket of a running one whose
//! routes are registered by a test control client with its own machine key and token.

#![allow(
    clippy::disallowed_methods,
    reason = "a test's own lock: a panic fails the test, so a poisoned lock is read as is"
)]
// The set-up helpers below sit outside `#[test]` functions, where clippy's allow-unwrap-in-tests
// does not reach; a failed set-up step must fail the test, which is what unwrap does.
#![allow(
    clippy::unwrap_used,
    reason = "test set-up helpers fail the test on error"
)]

use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relay_identity::{DaemonAddress, PinStore, RouteToken, SigningKey};
use relay_proto::{Bytes32, Id, Message, RefusedCode, RegisterMcpFields};
use relay_proxy::control::client::{ClientIdentity, ConnectError, Registration, Session, connect};
use relay_proxy::state::StateStore;
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, Command};

const START_TIMEOUT: Duration = Duration::from_secs(20);
const STEP: Duration = Duration::from_secs(10);

/// One daemon's world: home, `XDG_CONFIG_HOME`, system config directory, config file.
struct World {
    dir: TempDir,
}

impl World {
    fn new() -> World {
        let dir = tempfile::Builder::new()
            .prefix("relayd-bindings-")
            .tempdir()
            .unwrap();
        for sub in ["home", "xdg", "system"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        std::fs::write(dir.path().join("config.toml"), "").unwrap();
        World { dir }
    }

    fn state_dir(&self) -> PathBuf {
        self.dir.path().join("xdg").join("relay").join("daemon")
    }

    fn command(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_relayd"));
        command
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", self.dir.path().join("home"))
            .env("XDG_CONFIG_HOME", self.dir.path().join("xdg"))
            .env("RELAY_SYSTEM_CONFIG_DIR", self.dir.path().join("system"))
            .kill_on_drop(true);
        command
    }

    async fn start(&self) -> Daemon {
        let mut command = self.command();
        command
            .arg("--config")
            .arg(self.dir.path().join("config.toml"));
        self.spawn(command).await
    }

    /// A daemon that reads the standard config files (`<xdg>/relay/config.toml` and the
    /// system one), the files `relayd bindings` reads for a stopped daemon.
    async fn start_with_standard_config(&self) -> Daemon {
        self.spawn(self.command()).await
    }

    async fn spawn(&self, mut command: Command) -> Daemon {
        let port = free_port();
        let mut child = command
            .arg("--port")
            .arg(port.to_string())
            .args(["--log-format", "jsonl", "--log-level", "info"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (listening_tx, listening_rx) = tokio::sync::oneshot::channel::<()>();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = log.clone();
        tokio::spawn(async move {
            let mut listening = Some(listening_tx);
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("daemon_listening")
                    && let Some(tx) = listening.take()
                {
                    let _ = tx.send(());
                }
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let started = tokio::time::timeout(START_TIMEOUT, listening_rx).await;
        assert!(
            matches!(started, Ok(Ok(()))),
            "relayd did not start: {}",
            log.lock().unwrap()
        );
        Daemon { child, port, log }
    }

    /// `relayd [--state-dir DIR] bindings ARGS…`, as the test's own user.
    async fn bindings(&self, state_dir: Option<&Path>, args: &[&str]) -> Output {
        let mut command = self.command();
        if let Some(dir) = state_dir {
            command.arg("--state-dir").arg(dir);
        }
        command.arg("bindings").args(args);
        tokio::time::timeout(STEP * 3, command.output())
            .await
            .unwrap()
            .unwrap()
    }

    fn persisted(&self) -> relay_broker::PersistedState {
        StateStore::new(&self.state_dir()).load().unwrap()
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    listener.local_addr().unwrap().port()
}

struct Daemon {
    child: Child,
    port: u16,
    log: Arc<Mutex<String>>,
}

impl Daemon {
    /// SIGTERM, then the exit status and everything it logged.
    async fn stop(mut self) -> String {
        let pid = rustix::process::Pid::from_raw(self.child.id().unwrap() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let status = tokio::time::timeout(START_TIMEOUT, self.child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "{status:?}");
        self.log()
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// `GET /_relay/v1/route` with `token`, as a harness would ask.
    async fn route(&self, token: &RouteToken) -> String {
        let mut stream = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))
            .await
            .unwrap();
        let request = format!(
            "GET /_relay/v1/route HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nx-relay-client-token: {}\r\nConnection: close\r\n\r\n",
            self.port,
            token.encode()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        tokio::time::timeout(STEP, stream.read_to_string(&mut response))
            .await
            .unwrap()
            .unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        response
    }
}

/// A machine-user: its own machine key and route token, and the MCP registration a
/// `relay-mcp` would send.
struct Machine {
    key: Arc<SigningKey>,
    token: RouteToken,
    pins: TempDir,
}

impl Machine {
    fn new() -> Machine {
        Machine {
            key: Arc::new(SigningKey::generate().unwrap()),
            token: RouteToken::generate().unwrap(),
            pins: tempfile::tempdir().unwrap(),
        }
    }

    fn fingerprint(&self) -> String {
        self.key.fingerprint().to_string()
    }

    async fn register(&self, daemon: &Daemon) -> Result<Session, ConnectError> {
        let identity = ClientIdentity {
            daemon: DaemonAddress::parse(&format!("http://127.0.0.1:{}", daemon.port)).unwrap(),
            key: self.key.clone(),
            pins: Arc::new(PinStore::new(self.pins.path().join("pins"), None)),
            tls: None,
            instance_id: Id::from(uuid::Uuid::now_v7()),
        };
        let registration = Registration::Mcp(RegisterMcpFields {
            credential: Bytes32(*self.token.expose_bytes()),
            worker_hint: None,
        });
        connect(&identity, registration, STEP)
            .await
            .map(|(session, _registered)| session)
    }

    /// The secrets of this machine that must never appear in a log or an output.
    fn secrets(&self) -> [String; 2] {
        [self.token.encode(), hex::encode(self.token.expose_bytes())]
    }
}

/// Waits for the `Refused` that ends a registered session.
async fn refusal(session: &mut Session) -> Option<RefusedCode> {
    loop {
        let frame = session.recv_within(STEP).await.unwrap();
        if let Message::Refused(refused) = frame.message {
            return RefusedCode::from_code(refused.code);
        }
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn assert_no_secret(text: &str, machine: &Machine) {
    for secret in machine.secrets() {
        assert!(!text.contains(&secret), "a token leaked: {text}");
    }
}

#[tokio::test]
async fn a_running_daemon_revokes_blocks_and_unblocks_through_its_socket() {
    let world = World::new();
    let daemon = world.start().await;
    let machine = Machine::new();
    let fp = machine.fingerprint();
    let mut session = machine.register(&daemon).await.unwrap();
    assert!(
        daemon
            .route(&machine.token)
            .await
            .contains("\"state\":\"activating\"")
    );

    let socket = world.state_dir().join("admin.sock");
    let meta = std::fs::symlink_metadata(&socket).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.uid(), rustix::process::geteuid().as_raw());

    // Listed by the default state directory, with the running daemon's view.
    let listed = world.bindings(None, &["list"]).await;
    assert!(listed.status.success(), "{}", stderr(&listed));
    let text = stdout(&listed);
    let line = text.lines().find(|l| l.starts_with(&fp)).unwrap();
    let digest = hex::encode(machine.token.digest().as_bytes());
    assert!(
        line.contains(&format!("digest={} ", &digest[..12])),
        "{line}"
    );
    assert!(!line.contains(&digest[..13]), "{line}");
    assert!(line.contains("tombstone=no blocked=no"), "{line}");
    assert!(!stderr(&listed).contains("daemon not running"));
    assert_no_secret(&text, &machine);

    // Revoke, with the fingerprint in uppercase: the session ends, the credential stops
    // routing, and the same machine may register again.
    let revoked = world
        .bindings(None, &["revoke", &fp.to_ascii_uppercase()])
        .await;
    assert!(revoked.status.success(), "{}", stderr(&revoked));
    assert_eq!(
        stdout(&revoked).trim(),
        format!("revoked {fp}: 1 binding, 1 session closed, worker launch cancelled")
    );
    assert_eq!(refusal(&mut session).await, Some(RefusedCode::Revoked));
    let route = daemon.route(&machine.token).await;
    assert!(route.contains("\"route_mode\":\"pass_through\""), "{route}");
    assert!(
        route.contains("\"reason\":\"unbound_credential\""),
        "{route}"
    );
    let listed = stdout(&world.bindings(None, &["list"]).await);
    assert!(listed.contains("tombstone=yes blocked=no"), "{listed}");
    let mut session = machine.register(&daemon).await.unwrap();

    // Block: the session ends and a new registration is refused until unblocked.
    let blocked = world
        .bindings(Some(&world.state_dir()), &["block", &fp])
        .await;
    assert!(blocked.status.success(), "{}", stderr(&blocked));
    assert!(stdout(&blocked).starts_with(&format!("blocked {fp}: 1 binding, 1 session closed")));
    assert_eq!(refusal(&mut session).await, Some(RefusedCode::Blocked));
    let error = machine.register(&daemon).await.unwrap_err();
    assert_eq!(error.refused_code(), Some(RefusedCode::Blocked), "{error}");
    assert_eq!(
        world.persisted().blocked.len(),
        1,
        "blocked is durable at once"
    );
    let listed = stdout(&world.bindings(None, &["list"]).await);
    assert!(listed.contains("blocked=yes"), "{listed}");

    let unblocked = world.bindings(None, &["unblock", &fp]).await;
    assert!(unblocked.status.success(), "{}", stderr(&unblocked));
    assert_eq!(stdout(&unblocked).trim(), format!("unblocked {fp}"));
    let again = world.bindings(None, &["unblock", &fp]).await;
    assert_eq!(stdout(&again).trim(), format!("{fp} was not blocked"));
    let _session = machine.register(&daemon).await.unwrap();
    assert!(
        daemon
            .route(&machine.token)
            .await
            .contains("\"state\":\"activating\"")
    );

    let log = daemon.stop().await;
    assert!(log.contains("admin changed a route"), "{log}");
    assert_no_secret(&log, &machine);
    assert!(!socket.exists(), "the socket is removed at stop");
}

#[tokio::test]
async fn a_stopped_daemons_state_file_is_listed_and_edited_and_a_restart_honours_it() {
    let world = World::new();
    let machine = Machine::new();
    let fp = machine.fingerprint();
    let daemon = world.start().await;
    drop(machine.register(&daemon).await.unwrap());
    let first_log = daemon.stop().await;
    assert!(!world.state_dir().join("admin.sock").exists());

    let listed = world.bindings(Some(&world.state_dir()), &["list"]).await;
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert!(stderr(&listed).contains("(daemon not running)"));
    let text = stdout(&listed);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.starts_with(&format!("{fp} digest=")), "{text}");
    assert!(text.contains("tombstone=no blocked=no"), "{text}");

    let blocked = world.bindings(None, &["block", &fp]).await;
    assert!(blocked.status.success(), "{}", stderr(&blocked));
    assert_eq!(
        stdout(&blocked).trim(),
        format!("blocked {fp}: 1 binding, 0 worker generations dropped (daemon not running)")
    );
    let state = world.persisted();
    assert_eq!(state.blocked.len(), 1);
    assert!(state.bindings.iter().all(|b| b.tombstone_until.is_some()));

    // The restarted daemon refuses the blocked machine, and the credential does not route.
    let daemon = world.start().await;
    let error = machine.register(&daemon).await.unwrap_err();
    assert_eq!(error.refused_code(), Some(RefusedCode::Blocked), "{error}");
    assert!(
        daemon
            .route(&machine.token)
            .await
            .contains("unbound_credential")
    );
    let second_log = daemon.stop().await;

    let unblocked = world.bindings(None, &["unblock", &fp]).await;
    assert!(unblocked.status.success(), "{}", stderr(&unblocked));
    assert_eq!(
        stdout(&unblocked).trim(),
        format!("unblocked {fp} (daemon not running)")
    );
    let daemon = world.start().await;
    let _session = machine.register(&daemon).await.unwrap();
    let third_log = daemon.stop().await;

    // Revoke on the stopped daemon: the binding becomes a tombstone, nothing is blocked.
    let revoked = world.bindings(None, &["revoke", &fp]).await;
    assert!(revoked.status.success(), "{}", stderr(&revoked));
    assert!(stdout(&revoked).starts_with(&format!("revoked {fp}: 1 binding")));
    let state = world.persisted();
    assert!(state.blocked.is_empty());
    assert!(state.bindings.iter().all(|b| b.tombstone_until.is_some()));

    for text in [first_log, second_log, third_log] {
        assert_no_secret(&text, &machine);
    }
}

#[tokio::test]
async fn bad_arguments_exit_64_and_a_missing_state_directory_exits_1() {
    let world = World::new();
    for args in [
        vec!["revoke", "not-a-fingerprint"],
        vec!["block", &"ab".repeat(31)],
        vec!["unblock", &"zz".repeat(32)],
    ] {
        let output = world.bindings(None, &args).await;
        assert_eq!(output.status.code(), Some(64), "{args:?}");
        assert!(
            stderr(&output).contains("64 hex characters"),
            "{}",
            stderr(&output)
        );
        assert_eq!(stderr(&output).lines().count(), 1);
    }
    let output = world.bindings(None, &["list"]).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("does not exist"),
        "{}",
        stderr(&output)
    );
    // A directory named by --state-dir that is not there is a usage error naming the flag.
    let missing = world.dir.path().join("no-such-dir");
    let output = world.bindings(Some(&missing), &["list"]).await;
    assert_eq!(output.status.code(), Some(64));
    assert!(
        stderr(&output).contains("--state-dir"),
        "{}",
        stderr(&output)
    );
    assert_eq!(stderr(&output).lines().count(), 1);
    let mut command = world.command();
    let output = command
        .args(["--port", "5000", "bindings", "list"])
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
}

#[tokio::test]
async fn another_local_user_is_refused_even_when_the_socket_mode_is_widened() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test runs relayd as uid 65534 with setpriv, which needs root (CI runs as root)"
    );
    let world = World::new();
    let daemon = world.start().await;
    let machine = Machine::new();
    let fp = machine.fingerprint();
    let _session = machine.register(&daemon).await.unwrap();

    // Widen what only a mistake would widen: every directory on the way and the socket.
    let state_dir = world.state_dir();
    for dir in [
        world.dir.path().to_owned(),
        world.dir.path().join("xdg"),
        world.dir.path().join("xdg").join("relay"),
        state_dir.clone(),
    ] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    }
    std::fs::set_permissions(
        state_dir.join("admin.sock"),
        std::fs::Permissions::from_mode(0o666),
    )
    .unwrap();

    for args in [
        vec!["revoke", fp.as_str()],
        vec!["block", &fp],
        vec!["list"],
    ] {
        let output = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_relayd"))
            .arg("--state-dir")
            .arg(&state_dir)
            .arg("bindings")
            .args(&args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .await
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(1),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(stderr(&output).contains("403"), "{}", stderr(&output));
        assert!(stdout(&output).is_empty(), "{}", stdout(&output));
    }

    // Nothing changed: the binding routes and is not blocked.
    let listed = stdout(&world.bindings(None, &["list"]).await);
    assert!(listed.contains("tombstone=no blocked=no"), "{listed}");
    assert!(
        daemon
            .route(&machine.token)
            .await
            .contains("\"state\":\"activating\"")
    );
    let log = daemon.stop().await;
    assert!(log.contains("admin request refused"), "{log}");
    assert!(log.contains("65534"), "{log}");
}

#[tokio::test]
async fn root_editing_a_stopped_system_daemons_state_leaves_its_files_to_the_daemon_account() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test plays root administering a daemon of uid 65534 (CI runs as root)"
    );
    let world = World::new();
    std::fs::set_permissions(world.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let state_dir = world.dir.path().join("daemon-account-state");
    std::fs::create_dir(&state_dir).unwrap();
    std::fs::set_permissions(&state_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let fp = relay_broker::Fingerprint([0xab; 32]);
    let now = std::time::Instant::now();
    let store = StateStore::new(&state_dir);
    store
        .save(&relay_broker::PersistedState {
            bindings: vec![relay_broker::PersistedBinding {
                digest: relay_broker::Digest([1; 32]),
                fingerprint: fp,
                last_use: now,
                tombstone_until: None,
            }],
            blocked: vec![],
            generations: vec![relay_broker::PersistedGeneration {
                worker_id: Id([7; 16]),
                fingerprint: fp,
                endpoint: "127.0.0.1:40001".into(),
                certificate_sha256: Bytes32([5; 32]),
                draining: false,
            }],
        })
        .unwrap();
    for path in [state_dir.clone(), store.path().to_owned()] {
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    }

    let blocked = world
        .bindings(Some(&state_dir), &["block", &fp.to_hex()])
        .await;
    assert!(blocked.status.success(), "{}", stderr(&blocked));
    assert_eq!(
        stdout(&blocked).trim(),
        format!(
            "blocked {}: 1 binding, 1 worker generation dropped (daemon not running)",
            fp.to_hex()
        )
    );
    for name in ["state.json", "admin.lock"] {
        let meta = std::fs::symlink_metadata(state_dir.join(name)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (65534, 65534), "{name}");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{name}");
    }
    let state = store.load().unwrap();
    assert_eq!(state.blocked, vec![fp]);
    assert!(state.generations.is_empty());

    // The daemon's account can still read and lock what root wrote.
    let unblocked = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_relayd"))
        .arg("--state-dir")
        .arg(&state_dir)
        .args(["bindings", "unblock", &fp.to_hex()])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("RELAY_SYSTEM_CONFIG_DIR", world.dir.path().join("system"))
        .output()
        .await
        .unwrap();
    assert!(unblocked.status.success(), "{}", stderr(&unblocked));
    assert!(store.load().unwrap().blocked.is_empty());
}

const FP: &str = "abababababababababababababababababababababababababababababababab";
const OTHER: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const HOUR_MS: u64 = 3600 * 1000;
const DAY_MS: u64 = 24 * HOUR_MS;
/// `binding_tombstone_days` of the comparison below.
const TOMBSTONE_DAYS: u64 = 10;

fn wall_ms() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

/// A state file with what a revocation must get right: two live bindings of `FP` and three
/// of its tombstones (so that, at one token per identity, the cap of four tombstones
/// applies), a generation of each fingerprint, another fingerprint's live binding and
/// expired tombstone, and a blocked fingerprint without bindings.
/// `endpoint` is where the generations' workers listen.
fn comparison_state(now_ms: u64, endpoint: &str) -> String {
    let binding = |digest: u8, fp: &str, tombstone_until: Option<u64>| {
        format!(
            r#"{{"digest":"{}","fingerprint":"{fp}","last_use_unix_ms":{},"tombstone_until_unix_ms":{}}}"#,
            hex::encode([digest; 32]),
            now_ms - 60_000 - u64::from(digest),
            tombstone_until.map_or("null".to_owned(), |t| t.to_string())
        )
    };
    let generation = |id: u8, fp: &str| {
        format!(
            r#"{{"worker_id":"00000000-0000-7000-8000-0000000000{id:02x}","fingerprint":"{fp}","endpoint":"{endpoint}","certificate_sha256":"{}","draining":false}}"#,
            hex::encode([id; 32])
        )
    };
    let bindings = [
        binding(0x01, FP, None),
        binding(0x02, FP, None),
        binding(0x03, FP, Some(now_ms + DAY_MS)),
        binding(0x04, FP, Some(now_ms + 2 * DAY_MS)),
        binding(0x05, FP, Some(now_ms + 40 * DAY_MS)),
        binding(0x21, OTHER, None),
        binding(0x22, OTHER, Some(now_ms - HOUR_MS)),
    ];
    format!(
        r#"{{"version":1,"bindings":[{}],"blocked":["{}"],"generations":[{},{}]}}"#,
        bindings.join(","),
        "ff".repeat(32),
        generation(1, FP),
        generation(2, OTHER)
    )
}

/// A world whose daemon allows one token per identity, keeps tombstones for
/// `TOMBSTONE_DAYS` and waits long for its workers to resume, with `state` as its state file.
fn comparison_world(state: &str) -> World {
    let world = World::new();
    let relay_dir = world.dir.path().join("xdg").join("relay");
    std::fs::create_dir_all(&relay_dir).unwrap();
    std::fs::write(
        relay_dir.join("config.toml"),
        format!(
            "[daemon]\nmax_tokens_per_identity = 1\nbinding_tombstone_days = {TOMBSTONE_DAYS}\n\n[daemon.timers]\nreconnect_grace_secs = 3600\n"
        ),
    )
    .unwrap();
    let state_dir = world.state_dir();
    std::fs::create_dir(&state_dir).unwrap();
    std::fs::set_permissions(&state_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let file = state_dir.join(relay_proxy::state::STATE_FILE);
    std::fs::write(&file, state).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    world
}

/// The state file after the command, with the tombstone ends that the command set itself
/// (now + the tombstone period, taken between `before_ms` and `after_ms`) replaced by a
/// placeholder; every other byte is kept.
fn written_state(world: &World, before_ms: u64, after_ms: u64) -> (String, usize) {
    let text =
        std::fs::read_to_string(world.state_dir().join(relay_proxy::state::STATE_FILE)).unwrap();
    let period = TOMBSTONE_DAYS * DAY_MS;
    // The daemon converts its clock to wall-clock time through a reference taken at its
    // start; a second covers that and the rounding to milliseconds.
    let window = (before_ms + period - 1000)..=(after_ms + period + 1000);
    let mut fresh = 0;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let value = line
                .trim()
                .strip_prefix("\"tombstone_until_unix_ms\": ")
                .and_then(|v| v.trim_end_matches(',').parse::<u64>().ok());
            match value {
                Some(ms) if window.contains(&ms) => {
                    fresh += 1;
                    line.replace(&ms.to_string(), "<set by this command>")
                }
                _ => line.to_owned(),
            }
        })
        .collect();
    (lines.join("\n"), fresh)
}

#[tokio::test]
async fn revoke_and_block_write_the_same_state_on_a_running_and_a_stopped_daemon() {
    // The workers are alive, as far as the daemon can tell: their port takes connections
    // (the probe a starting daemon makes then never finishes its handshake, which is no
    // evidence of death, where a refused connection would be).
    let workers = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = workers.local_addr().unwrap().to_string();
    for (action, verb) in [("revoke", "revoked"), ("block", "blocked")] {
        let state = comparison_state(wall_ms(), &endpoint);

        let online = comparison_world(&state);
        let daemon = online.start_with_standard_config().await;
        let before_ms = wall_ms();
        let output = online.bindings(None, &[action, FP]).await;
        let after_ms = wall_ms();
        assert!(output.status.success(), "{action}: {}", stderr(&output));
        assert!(
            stdout(&output).starts_with(&format!("{verb} {FP}: 2 bindings, 0 sessions")),
            "{}",
            stdout(&output)
        );
        daemon.stop().await;
        let (running, fresh) = written_state(&online, before_ms, after_ms);
        assert_eq!(fresh, 2, "{action}: {running}");

        let offline = comparison_world(&state);
        let before_ms = wall_ms();
        let output = offline.bindings(None, &[action, FP]).await;
        let after_ms = wall_ms();
        assert!(output.status.success(), "{action}: {}", stderr(&output));
        assert_eq!(
            stdout(&output).trim(),
            format!("{verb} {FP}: 2 bindings, 1 worker generation dropped (daemon not running)")
        );
        let (stopped, fresh) = written_state(&offline, before_ms, after_ms);
        assert_eq!(fresh, 2, "{action}: {stopped}");

        assert_eq!(running, stopped, "{action}");
        // The rule was applied, not skipped by both: the tombstone that ends first went
        // (one token per identity keeps four), the expired one and the revoked
        // generation are gone, the other identity's binding and generation stay.
        let persisted = online.persisted();
        let digests: Vec<u8> = persisted.bindings.iter().map(|b| b.digest.0[0]).collect();
        assert_eq!(digests, vec![0x01, 0x02, 0x04, 0x05, 0x21], "{action}");
        assert_eq!(persisted.generations.len(), 1, "{action}");
        assert_eq!(persisted.generations[0].fingerprint.to_hex(), OTHER);
        let blocked: Vec<String> = persisted.blocked.iter().map(|f| f.to_hex()).collect();
        let mut expected = vec!["ff".repeat(32)];
        if action == "block" {
            expected.insert(0, FP.to_owned());
        }
        assert_eq!(blocked, expected, "{action}");
    }
}
