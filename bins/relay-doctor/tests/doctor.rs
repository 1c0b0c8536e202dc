//! End-to-end tests of the `relay-doctor` binary: `token ensure` as an unprivileged user (CI runs
//! as root, so the binary is started under `setpriv` as uid 65534), as root, and the command line.

// The set-up helpers below sit outside `#[test]` functions, where clippy's allow-unwrap-in-tests
// does not reach; a failed set-up step must fail the test, which is what unwrap does.
#![allow(
    clippy::unwrap_used,
    reason = "test set-up helpers fail the test on error"
)]

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use relay_identity::{RouteToken, parse_token_contents};

const NOBODY: u32 = 65534;

fn built_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_relay-doctor"))
}

/// A temporary directory owned by uid 65534, with a config base inside it and a copy of the
/// binary there if uid 65534 cannot run the built one where it is.
struct Sandbox {
    dir: tempfile::TempDir,
    binary: PathBuf,
}

impl Sandbox {
    fn new() -> Sandbox {
        require_root_and_setpriv();
        let dir = tempfile::tempdir().unwrap();
        chown_nobody(dir.path());
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
        let binary = if *nobody_can_run_built_binary() {
            built_binary()
        } else {
            let copy = dir.path().join("relay-doctor");
            fs::copy(built_binary(), &copy).unwrap();
            fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).unwrap();
            copy
        };
        Sandbox { dir, binary }
    }

    /// A fresh, empty config base owned by uid 65534.
    fn config_base(&self, name: &str) -> PathBuf {
        let base = self.dir.path().join(name);
        fs::create_dir(&base).unwrap();
        chown_nobody(&base);
        base
    }

    fn command_as_nobody(&self, base: &Path, args: &[&str]) -> Command {
        let mut command = Command::new("setpriv");
        command
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&self.binary)
            .args(args);
        isolate(&mut command, base, self.dir.path());
        command
    }

    fn run_as_nobody(&self, base: &Path, args: &[&str]) -> Output {
        self.command_as_nobody(base, args).output().unwrap()
    }
}

fn isolate(command: &mut Command, base: &Path, cwd: &Path) {
    command
        .env_clear()
        .env("XDG_CONFIG_HOME", base)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(cwd)
        .stdin(Stdio::null());
}

fn require_root_and_setpriv() {
    assert_eq!(
        relay_identity::store::current_euid(),
        0,
        "these tests start relay-doctor as uid 65534 with setpriv, which needs root (CI runs as root)"
    );
    let probe = Command::new("setpriv").arg("--version").output();
    assert!(
        probe.as_ref().is_ok_and(|out| out.status.success()),
        "setpriv (util-linux) is required to run relay-doctor as an unprivileged user: {probe:?}"
    );
}

fn nobody_can_run_built_binary() -> &'static bool {
    static RUNNABLE: OnceLock<bool> = OnceLock::new();
    RUNNABLE.get_or_init(|| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(built_binary())
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    })
}

fn chown_nobody(path: &Path) {
    std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).unwrap();
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn token_file(base: &Path) -> PathBuf {
    base.join("relay/.client-token")
}

/// Reads and checks the token file as its owner would, and returns the token.
fn read_token(base: &Path) -> RouteToken {
    let path = token_file(base);
    let metadata = fs::symlink_metadata(&path).unwrap();
    assert!(metadata.is_file());
    assert_eq!(metadata.uid(), NOBODY);
    assert_eq!(metadata.mode() & 0o7777, 0o600);
    let dir = fs::metadata(base.join("relay")).unwrap();
    assert_eq!(dir.uid(), NOBODY);
    assert_eq!(dir.mode() & 0o7777, 0o700);
    let bytes = fs::read(&path).unwrap();
    assert_eq!(bytes.len(), 44, "43 characters and a newline");
    parse_token_contents(&bytes).unwrap()
}

fn assert_no_token_in(output: &Output, token: &RouteToken) {
    let encoded = token.encode();
    assert!(!text(&output.stdout).contains(&encoded), "token on stdout");
    assert!(!text(&output.stderr).contains(&encoded), "token on stderr");
}

#[test]
fn ensure_creates_the_file_once_then_reports_existing() {
    let sandbox = Sandbox::new();
    let base = sandbox.config_base("config");
    let path = token_file(&base);

    let first = sandbox.run_as_nobody(&base, &["token", "ensure"]);
    assert!(first.status.success(), "{first:?}");
    assert_eq!(text(&first.stdout), format!("created {}\n", path.display()));
    let token = read_token(&base);
    assert_no_token_in(&first, &token);

    let second = sandbox.run_as_nobody(&base, &["token", "ensure"]);
    assert!(second.status.success(), "{second:?}");
    assert_eq!(
        text(&second.stdout),
        format!("existing {}\n", path.display())
    );
    assert_eq!(read_token(&base), token, "the existing token is left alone");
    assert_no_token_in(&second, &token);
    let entries = fs::read_dir(base.join("relay")).unwrap().count();
    assert_eq!(entries, 1, "only the token file, no temporary file left");
}

#[test]
fn ensure_json_output() {
    let sandbox = Sandbox::new();
    let base = sandbox.config_base("config");
    let path = token_file(&base).display().to_string();
    for expected in ["created", "existing"] {
        let output = sandbox.run_as_nobody(&base, &["token", "ensure", "--json"]);
        assert!(output.status.success(), "{output:?}");
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(
            report,
            serde_json::json!({"outcome": expected, "path": path})
        );
        assert_no_token_in(&output, &read_token(&base));
    }
}

#[test]
fn concurrent_runs_end_with_exactly_one_token() {
    let sandbox = Sandbox::new();
    for round in 0..6 {
        let base = sandbox.config_base(&format!("config-{round}"));
        let children: Vec<_> = (0..2)
            .map(|_| {
                sandbox
                    .command_as_nobody(&base, &["token", "ensure", "--json"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let outputs: Vec<Output> = children
            .into_iter()
            .map(|child| child.wait_with_output().unwrap())
            .collect();
        let token = read_token(&base);
        let mut outcomes: Vec<String> = outputs
            .iter()
            .map(|output| {
                assert!(output.status.success(), "round {round}: {output:?}");
                assert_no_token_in(output, &token);
                let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
                report["outcome"].as_str().unwrap().to_owned()
            })
            .collect();
        outcomes.sort();
        assert_eq!(outcomes, ["created", "existing"], "round {round}");
        let entries = fs::read_dir(base.join("relay")).unwrap().count();
        assert_eq!(
            entries, 1,
            "round {round}: one file, no temporary file left"
        );
    }
}

#[test]
fn ensure_refuses_root() {
    require_root_and_setpriv();
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(built_binary());
    command.args(["token", "ensure"]);
    isolate(&mut command, dir.path(), dir.path());
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(text(&output.stdout), "");
    let stderr = text(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("refusing to run as root"), "{stderr}");
    assert!(!dir.path().join("relay").exists(), "root creates nothing");
}

#[test]
fn ensure_never_overwrites_an_unusable_file() {
    let sandbox = Sandbox::new();
    let cases: [(&[u8], u32, &str); 3] = [
        (b"not a token\n", 0o600, "invalid_contents"),
        (
            b"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8\n",
            0o644,
            "insecure_permissions",
        ),
        (&[b'A'; 200], 0o600, "too_large"),
    ];
    for (i, (contents, mode, reason)) in cases.into_iter().enumerate() {
        let base = sandbox.config_base(&format!("config-{i}"));
        let relay = base.join("relay");
        fs::create_dir(&relay).unwrap();
        fs::set_permissions(&relay, fs::Permissions::from_mode(0o700)).unwrap();
        chown_nobody(&relay);
        let path = token_file(&base);
        fs::write(&path, contents).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        chown_nobody(&path);

        let output = sandbox.run_as_nobody(&base, &["token", "ensure"]);
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        assert_eq!(text(&output.stdout), "");
        let stderr = text(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(&path.display().to_string()), "{stderr}");
        assert!(stderr.contains(reason), "{stderr}");
        assert_eq!(fs::read(&path).unwrap(), contents, "left unchanged");
    }
}

#[test]
fn ensure_refuses_a_relay_dir_others_can_write() {
    let sandbox = Sandbox::new();
    let base = sandbox.config_base("config");
    let relay = base.join("relay");
    fs::create_dir(&relay).unwrap();
    chown_nobody(&relay);
    fs::set_permissions(&relay, fs::Permissions::from_mode(0o777)).unwrap();
    let output = sandbox.run_as_nobody(&base, &["token", "ensure"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = text(&output.stderr);
    assert!(stderr.contains(&relay.display().to_string()), "{stderr}");
    assert!(stderr.contains("chmod 700"), "{stderr}");
    assert!(!token_file(&base).exists());
}

fn doctor(args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(built_binary());
    command.args(args);
    isolate(&mut command, dir.path(), dir.path());
    command.output().unwrap()
}

#[test]
fn help_lists_every_mode_and_version_works() {
    let help = doctor(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    let stdout = text(&help.stdout);
    for flag in [
        "--json",
        "--managed-bundle",
        "--managed-bundle-sha256",
        "token",
    ] {
        assert!(stdout.contains(flag), "{flag} missing from:\n{stdout}");
    }
    // Built now, so offered.
    for flag in ["--live", "--daemon-address"] {
        assert!(stdout.contains(flag), "{flag} missing from:\n{stdout}");
    }
    assert!(!stdout.contains('§'), "{stdout}");
    let token_help = doctor(&["token", "ensure", "--help"]);
    assert_eq!(token_help.status.code(), Some(0));
    assert!(text(&token_help.stdout).contains("--json"));

    let version = doctor(&["--version"]);
    assert_eq!(version.status.code(), Some(0));
    assert!(text(&version.stdout).starts_with("relay-doctor "));
}

#[test]
fn usage_errors_exit_64_with_one_line() {
    let cases: [(&[&str], &str); 7] = [
        (&["--bogus"], "--bogus"),
        (&["token"], "requires a subcommand"),
        (&["token", "rotate"], "rotate"),
        (&["--live"], "--daemon-address"),
        (
            &["--live", "--daemon-address", "http://0.0.0.0:47632"],
            "is a bind address, not a daemon target",
        ),
        (
            &["--managed-bundle", "/opt/bundle"],
            "--managed-bundle-sha256",
        ),
        (
            &[
                "--managed-bundle",
                "/opt/bundle",
                "--managed-bundle-sha256",
                "xyz",
            ],
            "--managed-bundle-sha256",
        ),
    ];
    for (args, needle) in cases {
        let output = doctor(args);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {output:?}");
        let stderr = text(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert_eq!(text(&output.stdout), "");
    }
}

/// `relay-doctor --managed-bundle <path> --managed-bundle-sha256 <digest>`, then `extra`.
fn check_bundle(path: &str, digest: &str, extra: &[&str]) -> Output {
    let mut args = vec!["--managed-bundle", path, "--managed-bundle-sha256", digest];
    args.extend_from_slice(extra);
    doctor(&args)
}

/// A temporary directory every user may pass through, as a deployment's directories are
/// (tempfile makes them 0700, which the check reports).
fn readable_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Writes a small bundle with its manifest and returns its digest.
fn write_bundle(dir: &Path) -> String {
    use relay_identity::bundle::{MANIFEST_PATH, bundle_digest, render_manifest};
    let files = [
        (
            "codex/settings-v1/config.toml",
            b"model_provider = \"relay\"\n".to_vec(),
        ),
        (
            "pi/extension-v1/index.ts",
            b"export default function () {}\n".to_vec(),
        ),
    ];
    let manifest = render_manifest(files.iter().map(|(p, b)| (*p, b.as_slice())));
    let mut all: Vec<(&str, Vec<u8>)> = files.to_vec();
    all.push((MANIFEST_PATH, manifest.into_bytes()));
    for (path, bytes) in &all {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    bundle_digest(all.iter().map(|(p, b)| (*p, b.as_slice())))
}

#[test]
fn managed_bundle_check_reports_and_changes_nothing() {
    let dir = readable_tempdir();
    let bundle = dir.path().join("bundle");
    let digest = write_bundle(&bundle);
    let path = bundle.to_str().unwrap();

    let ok = check_bundle(path, &digest, &[]);
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    assert!(text(&ok.stdout).starts_with("ok: "), "{ok:?}");

    std::fs::write(bundle.join("pi/extension-v1/index.ts"), b"evil()\n").unwrap();
    std::fs::write(bundle.join("pi/extension-v1/extra.ts"), b"x").unwrap();
    std::fs::remove_file(bundle.join("codex/settings-v1/config.toml")).unwrap();
    let before = relay_identity::bundle::read_bundle_dir(&bundle).unwrap();
    let bad = check_bundle(path, &digest, &["--json"]);
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    let report: serde_json::Value = serde_json::from_slice(&bad.stdout).unwrap();
    assert_eq!(report["ok"], false);
    assert_eq!(
        report["missing"],
        serde_json::json!(["codex/settings-v1/config.toml"])
    );
    assert_eq!(
        report["changed"],
        serde_json::json!(["pi/extension-v1/index.ts"])
    );
    assert_eq!(
        report["extra"],
        serde_json::json!(["pi/extension-v1/extra.ts"])
    );
    assert_eq!(
        relay_identity::bundle::read_bundle_dir(&bundle).unwrap(),
        before
    );

    let text_report = check_bundle(path, &digest, &[]);
    assert_eq!(text_report.status.code(), Some(1));
    assert!(text(&text_report.stdout).contains("missing codex/settings-v1/config.toml"));

    let absent = doctor(&[
        "--managed-bundle",
        dir.path().join("nope").to_str().unwrap(),
        "--managed-bundle-sha256",
        &digest,
    ]);
    assert_eq!(absent.status.code(), Some(1), "{absent:?}");
}

/// A bundle whose bytes match can still be unfit to deploy: unreadable to other users (an
/// agent they run would go without Relay, silently), writable by them, or holding a symbolic
/// link. The check names each, exits 1, and changes nothing.
#[test]
fn managed_bundle_check_reports_what_makes_a_matching_bundle_unsafe() {
    let dir = readable_tempdir();
    let bundle = dir.path().join("bundle");
    let digest = write_bundle(&bundle);
    let path = bundle.to_str().unwrap();
    fs::set_permissions(&bundle, fs::Permissions::from_mode(0o700)).unwrap();
    let index = bundle.join("pi/extension-v1/index.ts");
    fs::set_permissions(&index, fs::Permissions::from_mode(0o666)).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", bundle.join("pi/extension-v1/link.ts")).unwrap();

    let output = check_bundle(path, &digest, &["--json"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["ok"], false);
    assert_eq!(report["expected_sha256"], report["actual_sha256"]);
    assert_eq!(
        report["unsafe"],
        serde_json::json!([
            {"path": ".", "problem": "not readable by every user (mode 0700)"},
            {"path": "pi/extension-v1/index.ts", "problem": "writable by users other than its owner (mode 0666)"},
            {"path": "pi/extension-v1/link.ts", "problem": "a symbolic link, which a bundle never holds"},
        ])
    );
    let text_report = check_bundle(path, &digest, &[]);
    assert_eq!(text_report.status.code(), Some(1));
    assert!(
        text(&text_report.stdout).starts_with("unsafe: the bundle's files match sha256"),
        "{text_report:?}"
    );
    assert_eq!(
        fs::metadata(&index).unwrap().permissions().mode() & 0o777,
        0o666
    );

    // A directory above the bundle that other users cannot pass through hides it too.
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
    let output = check_bundle(path, &digest, &["--json"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["unsafe"][0]["path"],
        dir.path().canonicalize().unwrap().to_str().unwrap(),
        "{report}"
    );
}

/// A config base and system directory set up as a working client machine would be, with
/// `token` in the token file, and the environment that goes with it.
struct Machine {
    dir: tempfile::TempDir,
    token: RouteToken,
}

impl Machine {
    fn new() -> Machine {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["xdg/relay/daemon", "system"] {
            fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        for sub in ["xdg/relay", "xdg/relay/daemon"] {
            fs::set_permissions(dir.path().join(sub), fs::Permissions::from_mode(0o700)).unwrap();
        }
        let token = RouteToken::generate().unwrap();
        let file = dir.path().join("xdg/relay/.client-token");
        fs::write(&file, format!("{}\n", token.encode())).unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
        Machine { dir, token }
    }

    fn base(&self) -> PathBuf {
        self.dir.path().join("xdg")
    }

    fn system(&self) -> PathBuf {
        self.dir.path().join("system")
    }

    /// `relay-doctor --live --json` against `address`, which must fail (exit 1): its report.
    fn failed_live_report(&self, address: &str) -> serde_json::Value {
        let output = self
            .command(&["--live", "--daemon-address", address, "--json"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1));
        json_of(&output)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(built_binary());
        command.args(args);
        isolate(&mut command, &self.base(), self.dir.path());
        command.env("RELAY_SYSTEM_CONFIG_DIR", self.system()).env(
            "ANTHROPIC_CUSTOM_HEADERS",
            format!("x-relay-client-token: {}", self.token.encode()),
        );
        command
    }
}

fn json_of(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&output.stdout)))
}

fn check<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    report["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["id"] == id))
        .unwrap_or_else(|| panic!("no check {id} in {report}"))
}

#[test]
fn report_of_a_machine_in_order_passes_with_exit_0() {
    let machine = Machine::new();
    let output = machine.command(&[]).output().unwrap();
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        text(&output.stderr)
    );
    for line in stdout.lines().filter(|l| !l.starts_with("passed")) {
        assert!(
            ["ok ", "warn ", "skip "]
                .iter()
                .any(|s| line.starts_with(s)),
            "{line}"
        );
    }
    assert!(
        stdout.contains("token: a valid route token from"),
        "{stdout}"
    );
    assert!(!stdout.contains('§'), "{stdout}");

    let json = json_of(&machine.command(&["--json"]).output().unwrap());
    assert_eq!(json["schema_version"], 1);
    assert_eq!(json["mode"], "environment");
    assert_eq!(json["ok"], true, "{json}");
    let ids: Vec<&str> = json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "state_dir",
            "machine_identity",
            "token",
            "anthropic_custom_headers",
            "trust_pins",
            "provisioned_daemon_key",
            "config",
            "log_variables",
            "plugins",
            "ca_files",
            "no_proxy",
            "codex_hooks",
            "claude_code",
            "pi"
        ]
    );
    assert_eq!(check(&json, "token")["details"]["source"], "file");
    assert_eq!(check(&json, "anthropic_custom_headers")["status"], "ok");
    for c in json["checks"].as_array().unwrap() {
        for key in ["id", "status", "summary", "next_step", "details"] {
            assert!(c.get(key).is_some(), "{key} missing in {c}");
        }
    }
}

#[test]
fn a_failed_check_exits_1_with_its_next_step() {
    let machine = Machine::new();
    fs::remove_file(machine.base().join("relay/.client-token")).unwrap();
    let output = machine.command(&[]).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains("fail token: no route token")
            && stdout.contains("relay-doctor token ensure"),
        "{stdout}"
    );
    assert!(
        stdout.lines().last().unwrap().starts_with("FAILED"),
        "{stdout}"
    );
}

#[test]
fn live_against_no_daemon_fails_with_exit_1() {
    let machine = Machine::new();
    // A port nobody listens on: bind one, then let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("http://127.0.0.1:{port}");
    let json = machine.failed_live_report(&address);
    assert_eq!(json["mode"], "live");
    assert_eq!(check(&json, "live.healthz")["status"], "fail");
    assert!(
        check(&json, "live.healthz")["next_step"]
            .as_str()
            .unwrap()
            .contains("start relayd")
    );
    assert_eq!(check(&json, "live.route")["status"], "skip");
}

/// The attack: every secret the doctor could come across is present, several of them in
/// files that fail their checks (so their contents are near an error message), and none of
/// them may appear anywhere in what the doctor prints, in any mode.
#[test]
fn no_check_prints_a_token_key_or_secret() {
    let machine = Machine::new();
    let env_token = RouteToken::generate().unwrap();
    let header_token = RouteToken::generate().unwrap();
    let state = machine.base().join("relay/daemon");
    relay_identity::SigningKey::load_or_create(&state.join("machine-identity.pk8")).unwrap();
    relay_identity::SigningKey::load_or_create(&state.join("daemon-identity.pk8")).unwrap();
    let key_bytes = [
        fs::read(state.join("machine-identity.pk8")).unwrap(),
        fs::read(state.join("daemon-identity.pk8")).unwrap(),
    ];
    let proxy_password = "proxy-pw-7c1e0b";
    let config_secret = "config-secret-5d2a9f";
    let plugin_secret = "plugin-secret-93be41";
    fs::write(
        machine.system().join("config.toml"),
        format!("[upstream]\nproxy_url = \"http://u:{config_secret}@proxy:3128\" oops\n"),
    )
    .unwrap();
    fs::write(
        machine.system().join("plugins.toml"),
        format!(
            "version = 1\n[[components]]\nkind = \"observability\"\napi_key = \"{plugin_secret}\"\n"
        ),
    )
    .unwrap();
    let run = |args: &[&str], extra: &dyn Fn(&mut Command)| {
        let mut command = machine.command(args);
        command
            .env("RELAY_CLIENT_TOKEN", env_token.encode())
            .env(
                "ANTHROPIC_CUSTOM_HEADERS",
                format!("x-relay-client-token: {}", header_token.encode()),
            )
            .env(
                "HTTPS_PROXY",
                format!("http://user:{proxy_password}@proxy:3128"),
            );
        extra(&mut command);
        command.output().unwrap()
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("http://127.0.0.1:{port}");
    let outputs = [
        run(&[], &|_| {}),
        run(&["--json"], &|_| {}),
        run(&["--live", "--daemon-address", &address], &|_| {}),
        run(&["--live", "--daemon-address", &address, "--json"], &|_| {}),
        // An invalid env token makes the file token the resolved one.
        run(&["--json"], &|c| {
            c.env("RELAY_CLIENT_TOKEN", format!("{}x", env_token.encode()));
        }),
    ];
    let mut needles: Vec<String> = vec![
        machine.token.encode(),
        env_token.encode(),
        header_token.encode(),
        proxy_password.to_owned(),
        config_secret.to_owned(),
        plugin_secret.to_owned(),
    ];
    for bytes in &key_bytes {
        use base64::Engine as _;
        needles.push(bytes.iter().map(|b| format!("{b:02x}")).collect());
        needles.push(base64::engine::general_purpose::STANDARD.encode(bytes));
        // The PKCS#8 v2 document ends with the 32-byte public key; its seed is in the middle.
        needles.push(bytes[16..48].iter().map(|b| format!("{b:02x}")).collect());
    }
    for output in &outputs {
        let all = format!("{}{}", text(&output.stdout), text(&output.stderr));
        assert!(!all.is_empty());
        for needle in &needles {
            assert!(
                !all.contains(needle.as_str()),
                "a secret leaked into:\n{all}"
            );
        }
        // Each failed as it should, so the secrets were near the messages.
        assert_eq!(output.status.code(), Some(1), "{all}");
    }
    let json = json_of(&outputs[1]);
    assert_eq!(check(&json, "config")["status"], "fail");
    assert_eq!(check(&json, "plugins")["status"], "fail");
    assert_eq!(check(&json, "anthropic_custom_headers")["status"], "fail");
    assert_eq!(check(&json, "no_proxy")["status"], "fail");
}

/// A report that cannot be written (stdout on a full disk) is a failure said on stderr, not a
/// panic.
#[test]
fn a_report_that_cannot_be_written_fails_with_a_line_on_stderr() {
    let full = fs::File::options().write(true).open("/dev/full").unwrap();
    let output = Command::new(built_binary())
        .stdout(Stdio::from(full))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "stderr: {stderr}");
    assert!(
        stderr.starts_with("relay-doctor: writing the report to stdout: No space left on device"),
        "stderr: {stderr}"
    );
}

/// The attack: whoever answers at the daemon's address looks like relayd (its `/healthz`
/// says so) but cannot prove the daemon's key. The doctor must fail the key check and send
/// the route token nowhere: it is the tool a user runs when they suspect an impostor.
/// A server on 127.0.0.1 that answers `/healthz` as relayd does and anything else with a
/// route-like body, over TLS with `tls` when given; each request head goes to the receiver.
/// It proves no key: its control answers are not relayd's.
fn fake_relayd(tls: Option<rustls::ServerConfig>) -> (String, std::sync::mpsc::Receiver<String>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let address = format!("{scheme}://{}", listener.local_addr().unwrap());
    let tls = tls.map(std::sync::Arc::new);
    let (seen, heads) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            match &tls {
                None => answer_like_relayd(stream, &seen),
                Some(config) => {
                    let Ok(conn) = rustls::ServerConnection::new(config.clone()) else {
                        return;
                    };
                    answer_like_relayd(rustls::StreamOwned::new(conn, stream), &seen);
                }
            }
        }
    });
    (address, heads)
}

fn answer_like_relayd(
    mut stream: impl std::io::Read + std::io::Write,
    seen: &std::sync::mpsc::Sender<String>,
) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            // A client that refused the certificate, or closed.
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let body = if head.starts_with("GET /healthz ") {
        r#"{"service":"relayd","version":"9.9.9","instance_id":"01900000-0000-7000-8000-000000000001","deployment_mode":"managed","status":"ok"}"#
    } else {
        r#"{"route_state":"ready","worker_id":"01900000-0000-7000-8000-000000000002"}"#
    };
    let _ = seen.send(head);
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(answer.as_bytes());
    let _ = stream.flush();
}

#[test]
fn live_sends_no_token_to_a_daemon_that_does_not_prove_its_key() {
    let machine = Machine::new();
    let (address, heads) = fake_relayd(None);
    let json = machine.failed_live_report(&address);
    assert_eq!(check(&json, "live.healthz")["status"], "ok");
    assert_eq!(check(&json, "live.daemon_key")["status"], "fail");
    for id in [
        "live.route",
        "live.worker",
        "live.worker_reachable",
        "live.machine_identity",
    ] {
        assert_eq!(check(&json, id)["status"], "skip", "{id}");
    }
    let heads: Vec<String> = heads.try_iter().collect();
    assert!(heads.iter().any(|h| h.starts_with("GET /healthz ")));
    let encoded = machine.token.encode();
    for head in heads.iter() {
        assert!(!head.contains(&*encoded), "the token was sent: {head}");
        assert!(
            !head.to_ascii_lowercase().contains("x-relay-client-token"),
            "{head}"
        );
    }
}

/// An https address where a plain http daemon listens: the doctor says the daemon does not
/// speak TLS there, rather than blaming its certificate.
#[test]
fn live_tells_a_plain_http_daemon_from_a_refused_certificate() {
    let machine = Machine::new();
    // A plain HTTP server answers a TLS hello, which is no request head, with a 400.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("https://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let _ = std::io::Write::write_all(
                &mut stream,
                b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n",
            );
        }
    });
    let json = machine.failed_live_report(&address);
    let health = check(&json, "live.healthz");
    assert_eq!(health["status"], "fail");
    assert!(
        health["summary"]
            .as_str()
            .unwrap()
            .contains("does not answer over TLS"),
        "{health}"
    );
    let next = health["next_step"].as_str().unwrap();
    assert!(next.contains("serves plain http"), "{next}");
    assert!(!next.contains("certificate"), "{next}");
}

/// A CA's certificate in PEM, and a server configuration for 127.0.0.1 with a certificate it
/// issued.
fn private_ca() -> (String, rustls::ServerConfig) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "relay-doctor test ca");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let mut server = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![leaf.der().clone()], key)
    .unwrap();
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    (ca.pem(), server)
}

/// The agents do not read RELAY_EXTRA_CA_FILE: with a private CA, the doctor tells whether
/// Claude Code and pi (Node's roots plus NODE_EXTRA_CA_CERTS) and Codex (SSL_CERT_FILE
/// instead of the system's roots) would trust the daemon, by a handshake with their roots.
#[test]
fn live_tells_whether_each_agent_trusts_an_https_daemons_certificate() {
    let machine = Machine::new();
    let (ca_pem, server) = private_ca();
    let (other_pem, _) = private_ca();
    let (address, _heads) = fake_relayd(Some(server));
    let ca = machine.dir.path().join("ca.pem");
    let other = machine.dir.path().join("other.pem");
    fs::write(&ca, ca_pem).unwrap();
    fs::write(&other, other_pem).unwrap();
    let report = |node: &Path, codex: &Path| {
        let output = machine
            .command(&["--live", "--daemon-address", &address, "--json"])
            .env("RELAY_EXTRA_CA_FILE", &ca)
            .env("NODE_EXTRA_CA_CERTS", node)
            .env("SSL_CERT_FILE", codex)
            .output()
            .unwrap();
        json_of(&output)
    };

    let trusted = report(&ca, &ca);
    assert_eq!(check(&trusted, "live.healthz")["status"], "ok", "{trusted}");
    let agents = check(&trusted, "live.agents_trust");
    assert_eq!(agents["status"], "ok", "{agents}");

    let codex_refuses = report(&ca, &other);
    assert_eq!(check(&codex_refuses, "live.healthz")["status"], "ok");
    let agents = check(&codex_refuses, "live.agents_trust");
    assert_eq!(agents["status"], "fail", "{agents}");
    assert!(
        agents["summary"]
            .as_str()
            .unwrap()
            .starts_with("Codex would refuse"),
        "{agents}"
    );

    let node_refuses = report(&other, &ca);
    let agents = check(&node_refuses, "live.agents_trust");
    assert_eq!(agents["status"], "fail", "{agents}");
    assert!(
        agents["summary"]
            .as_str()
            .unwrap()
            .starts_with("Claude Code and pi would refuse"),
        "{agents}"
    );
}
