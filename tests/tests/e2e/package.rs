//! The release archive of `cargo xtask package`, installed as docs/operations.md tells an
//! administrator to install it, but into a temporary root (`DESTDIR`): `SHA256SUMS`
//! verifies, `deploy/install.sh` lays out the files with their modes and is safe to run
//! twice, the installed relayd serves `/healthz` with its state under that root, and
//! `uninstall.sh` removes the binaries and keeps the identity state.
//!
//! The archive is `RELAY_PACKAGE_ARCHIVE` when set, else this test runs
//! `cargo xtask package` with `RELAY_PACKAGE_PROFILE=debug` (a release build takes minutes).

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use http::{Method, StatusCode};
use relay_e2e::http::{fetch, request};

/// A pre-built archive to test instead of building one.
const ENV_ARCHIVE: &str = "RELAY_PACKAGE_ARCHIVE";
/// For relayd to bind and answer `/healthz`.
const START_TIMEOUT: Duration = Duration::from_secs(20);
const BINARIES: [&str; 5] = [
    "relayd",
    "relay-mcp",
    "relay-worker",
    "relay-hook",
    "relay-doctor",
];

fn run(command: &mut Command) -> anyhow::Result<Output> {
    let output = command
        .output()
        .with_context(|| format!("could not run {command:?}"))?;
    ensure!(
        output.status.success(),
        "{command:?} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(output)
}

/// The archive: `RELAY_PACKAGE_ARCHIVE`, or the one `cargo xtask package` builds.
fn archive() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os(ENV_ARCHIVE).filter(|path| !path.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("relay-e2e has no parent directory")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = run(Command::new(cargo)
        .args(["run", "--quiet", "--package", "xtask", "--", "package"])
        .env("RELAY_PACKAGE_PROFILE", "debug")
        .current_dir(workspace)
        .stderr(Stdio::inherit()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout
        .lines()
        .last()
        .context("cargo xtask package printed no archive path")?;
    Ok(PathBuf::from(last.trim()))
}

fn mode(path: &Path) -> anyhow::Result<u32> {
    let metadata = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
    Ok(metadata.permissions().mode() & 0o7777)
}

/// `install.sh` or `uninstall.sh` with `DESTDIR=root` and nothing else from the environment
/// but `PATH`.
fn script(path: &Path, root: &Path) -> Command {
    let mut command = Command::new(path);
    command.env_clear().env("DESTDIR", root);
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    command
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// Polls `/healthz` until it answers 200 with `"status": "ok"` or `timeout` passes.
async fn wait_healthy(addr: SocketAddr, daemon: &mut std::process::Child) -> anyhow::Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    let mut poll = tokio::time::interval(Duration::from_millis(50));
    loop {
        poll.tick().await;
        if let Some(status) = daemon.try_wait()? {
            bail!("the installed relayd exited before it served: {status}");
        }
        let req = request(Method::GET, "/healthz", &[], bytes::Bytes::new())?;
        if let Ok((status, _, body)) = fetch(addr, req).await {
            ensure!(status == StatusCode::OK, "/healthz answered {status}");
            let health: serde_json::Value = serde_json::from_slice(&body)?;
            ensure!(health["service"] == "relayd", "{health}");
            ensure!(health["status"] == "ok", "{health}");
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the installed relayd did not answer /healthz within {START_TIMEOUT:?}");
        }
    }
}

/// Kills the daemon when the test ends early.
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_archive_installs_into_a_root_serves_and_uninstalls_keeping_state() -> anyhow::Result<()>
{
    let archive = archive()?;
    let dir = tempfile::tempdir()?;
    let unpacked = dir.path().join("unpacked");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&unpacked)?;
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(&unpacked))?;
    let stem = archive
        .file_name()
        .and_then(|name| name.to_str())
        .and_then(|name| name.strip_suffix(".tar.gz"))
        .context("the archive is not a .tar.gz")?;
    let top = unpacked.join(stem);
    for entry in [
        "LICENSE",
        "SHA256SUMS",
        "deploy/install.sh",
        "docs/operations.md",
    ] {
        ensure!(top.join(entry).is_file(), "the archive has no {entry}");
    }

    // The sums cover every file of the archive, and they verify.
    let sums = std::fs::read_to_string(top.join("SHA256SUMS"))?;
    for binary in BINARIES {
        ensure!(
            sums.lines()
                .any(|line| line.ends_with(&format!("  bin/{binary}"))),
            "SHA256SUMS does not list bin/{binary}"
        );
    }
    run(Command::new("sha256sum")
        .args(["--check", "--strict", "--quiet", "SHA256SUMS"])
        .current_dir(&top))?;

    // A modified file is refused before anything is installed.
    let tampered_root = dir.path().join("tampered-root");
    let doc = top.join("docs/operations.md");
    let original = std::fs::read(&doc)?;
    std::fs::write(&doc, b"changed")?;
    let refused = script(&top.join("deploy/install.sh"), &tampered_root).output()?;
    std::fs::write(&doc, &original)?;
    assert!(
        !refused.status.success(),
        "install.sh accepted a modified archive"
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("SHA256SUMS"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(
        !tampered_root.exists(),
        "install.sh wrote files before verifying"
    );

    // So is a file added beside the listed ones, which the sums' own check does not read.
    let added = top.join("deploy/extra.sh");
    std::fs::write(&added, b"#!/bin/sh\necho pwned\n")?;
    let refused = script(&top.join("deploy/install.sh"), &tampered_root).output()?;
    std::fs::remove_file(&added)?;
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("deploy/extra.sh is not listed in SHA256SUMS"),
        "install.sh accepted a file the sums do not list: {said}"
    );
    assert!(
        !tampered_root.exists(),
        "install.sh wrote files before checking the list"
    );

    // Installed as docs/operations.md says, into the temporary root.
    run(&mut script(&top.join("deploy/install.sh"), &root))?;
    let bin = root.join("opt/relay/bin");
    for binary in BINARIES {
        assert_eq!(mode(&bin.join(binary))?, 0o755, "{binary}");
    }
    assert_eq!(mode(&root.join("var/lib/relay"))?, 0o700);
    assert_eq!(mode(&root.join("etc/relay"))?, 0o755);
    assert_eq!(mode(&root.join("etc/relay/credentials"))?, 0o700);
    let config = root.join("etc/relay/config.toml");
    assert_eq!(mode(&config)?, 0o644);
    for unit in ["relayd.service", "relayd.socket"] {
        let installed = std::fs::read(root.join("etc/systemd/system").join(unit))?;
        assert_eq!(
            installed,
            std::fs::read(top.join("deploy/systemd/system").join(unit))?
        );
    }
    assert!(root.join("opt/relay/deploy/uninstall.sh").is_file());
    assert!(root.join("opt/relay/docs/reference.md").is_file());

    // Safe to run twice: an administrator's config.toml survives.
    let edited = format!(
        "{}\n# edited by the administrator\n",
        std::fs::read_to_string(&config)?
    );
    std::fs::write(&config, &edited)?;
    run(&mut script(&top.join("deploy/install.sh"), &root))?;
    assert_eq!(std::fs::read_to_string(&config)?, edited);

    // The installed daemon, with the unit's state layout under the root, reads the installed
    // /etc/relay/config.toml and serves.
    let state = root.join("var/lib/relay");
    let port = free_port()?;
    let mut command = Command::new(bin.join("relayd"));
    command
        .env_clear()
        .env("HOME", &state)
        .env("XDG_CONFIG_HOME", state.join(".config"))
        .env("RELAY_SYSTEM_CONFIG_DIR", root.join("etc/relay"))
        .arg("--port")
        .arg(port.to_string())
        .current_dir(&state)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    let mut daemon = Daemon(command.spawn()?);
    wait_healthy(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), &mut daemon.0).await?;
    drop(daemon);
    let identity_dir = state.join(".config/relay/daemon");
    ensure!(
        identity_dir.is_dir(),
        "relayd wrote no state under {}",
        identity_dir.display()
    );
    let identity: Vec<PathBuf> = std::fs::read_dir(&identity_dir)?
        .map(|entry| entry.map(|entry| entry.path()))
        .collect::<Result<_, _>>()?;
    ensure!(!identity.is_empty(), "the daemon state directory is empty");

    // The installed uninstall.sh removes binaries and units and keeps state and config. It
    // names the agents' managed wiring it leaves, which still starts the removed programs.
    let wiring = root.join("etc/claude-code/managed-settings.json");
    std::fs::create_dir_all(wiring.parent().context("a parent")?)?;
    std::fs::write(
        &wiring,
        r#"{"hooks":{"PreToolUse":[{"hooks":[{"type":"command","command":"/opt/relay/bin/relay-hook claude"}]}]}}"#,
    )?;
    let removed = run(&mut script(
        &root.join("opt/relay/deploy/uninstall.sh"),
        &root,
    ))?;
    let said = String::from_utf8_lossy(&removed.stderr);
    assert!(
        said.contains(
            "etc/claude-code/managed-settings.json still starts programs from /opt/relay/bin"
        ),
        "{said}"
    );
    assert!(
        wiring.exists(),
        "uninstall removed the organisation's settings"
    );
    for binary in BINARIES {
        assert!(!bin.join(binary).exists(), "{binary} is still installed");
    }
    assert!(!root.join("opt/relay").exists());
    assert!(!root.join("etc/systemd/system/relayd.service").exists());
    for path in &identity {
        assert!(path.exists(), "uninstall removed {}", path.display());
    }
    assert_eq!(std::fs::read_to_string(&config)?, edited);

    // --purge removes the state too, and keeps what install.sh did not put under the prefix,
    // saying so.
    let bundle = root.join("opt/relay/bundle/claude-code/settings-v1/managed-settings.json");
    std::fs::create_dir_all(bundle.parent().context("a parent")?)?;
    std::fs::write(&bundle, "{}")?;
    let purged = run(script(&top.join("deploy/uninstall.sh"), &root).arg("--purge"))?;
    assert!(!state.exists());
    assert!(!root.join("etc/relay").exists());
    assert!(bundle.exists());
    let said = String::from_utf8_lossy(&purged.stderr);
    assert!(
        said.contains("opt/relay: it holds files install.sh did not put there"),
        "{said}"
    );
    Ok(())
}
