//! Starting `relayd` the way a service manager would: in an empty environment with its own
//! temporary home, config and system directories, on a socket the harness bound itself.

use std::ffi::{OsStr, OsString};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use command_fds::{CommandFdExt as _, FdMapping};
use serde_json::Value;
use tempfile::TempDir;
use tokio::process::Command;

use crate::bins;
use crate::error::Error;
use crate::logs::Logs;
use crate::process::Process;

/// How long `start` waits for `daemon_listening`.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// The file descriptor systemd passes the first socket on (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: i32 = 3;

/// How relayd gets its listening socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listen {
    /// The harness binds `127.0.0.1:0` and passes the socket as fd 3 with `LISTEN_FDS=1`,
    /// as systemd does; nothing can take the port between bind and start.
    SocketActivated,
    /// The harness picks a free port by binding and releasing it, then passes `--port`.
    /// Another process can take the port in between, so only the test of this path uses it.
    ExplicitPort,
}

/// The directories and files one relayd run sees, all under one temporary directory.
#[derive(Debug)]
pub struct RelaydBuilder {
    dir: TempDir,
    recipe: Recipe,
    listen: Listen,
    keep_socket: bool,
}

/// How to start relayd again with the same directories, config, flags and environment.
#[derive(Debug, Clone)]
struct Recipe {
    root: PathBuf,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    config: Option<String>,
}

/// What a relayd command printed before it exited.
#[derive(Debug, Clone)]
pub struct CliOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl RelaydBuilder {
    fn new() -> Result<RelaydBuilder, Error> {
        let dir = tempfile::Builder::new()
            .prefix("relay-e2e-")
            .tempdir()
            .map_err(|source| Error::TempDir { source })?;
        for sub in ["home", "xdg", "system"] {
            let path = dir.path().join(sub);
            std::fs::create_dir(&path).map_err(|source| Error::WriteFile { path, source })?;
        }
        let recipe = Recipe {
            root: dir.path().to_path_buf(),
            args: Vec::new(),
            envs: Vec::new(),
            config: None,
        };
        Ok(RelaydBuilder {
            dir,
            recipe,
            listen: Listen::SocketActivated,
            keep_socket: false,
        })
    }

    /// The temporary directory of this run (removed when the [`Relayd`] is dropped).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `HOME` of the process.
    pub fn home_dir(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// `XDG_CONFIG_HOME` of the process; its state lives in `relay/daemon/` below.
    pub fn xdg_config_home(&self) -> PathBuf {
        self.dir.path().join("xdg")
    }

    /// `RELAY_SYSTEM_CONFIG_DIR` of the process.
    pub fn system_config_dir(&self) -> PathBuf {
        self.dir.path().join("system")
    }

    /// Writes `contents` to `name` in the run's directory with mode 0600 and returns its
    /// path (key files, config files).
    pub fn write_private_file(&self, name: &str, contents: &str) -> Result<PathBuf, Error> {
        write_private_file(&self.dir.path().join(name), contents)
    }

    /// The config file passed with `--config` (written as `config.toml` on start).
    pub fn config(mut self, toml: impl Into<String>) -> RelaydBuilder {
        self.recipe.config = Some(toml.into());
        self
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> RelaydBuilder {
        self.recipe.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> RelaydBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.recipe
            .args
            .extend(args.into_iter().map(|arg| arg.as_ref().to_owned()));
        self
    }

    /// An environment variable on top of the cleared environment.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> RelaydBuilder {
        self.recipe
            .envs
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Start on `--port` instead of a passed socket (see [`Listen::ExplicitPort`]).
    pub fn explicit_port(mut self) -> RelaydBuilder {
        self.listen = Listen::ExplicitPort;
        self
    }

    /// Keep the harness's copy of the passed socket, as systemd's `relayd.socket` does, so
    /// [`Relayd::start_again`] can hand the same socket to the next relayd. While no relayd
    /// runs, connections then wait in the socket's backlog instead of being refused.
    pub fn keep_socket(mut self) -> RelaydBuilder {
        self.keep_socket = true;
        self
    }

    /// Runs relayd to its exit (a subcommand, `--help`, a usage error) without a listening
    /// socket, killing it if it is still running after `timeout`. The builder can run again
    /// (the same directories, so the same state).
    pub async fn output(&self, timeout: Duration) -> Result<CliOutput, Error> {
        run_to_exit(self.recipe.command()?, timeout).await
    }

    /// Runs the daemon with `listener` passed as the service manager passes it, to its exit
    /// (for a start that must fail), killing it after `timeout`.
    pub async fn output_with_socket(
        &self,
        listener: TcpListener,
        timeout: Duration,
    ) -> Result<CliOutput, Error> {
        let mut command = self.recipe.command()?;
        pass_socket(&mut command, OwnedFd::from(listener))?;
        run_to_exit(command, timeout).await
    }

    /// Starts the daemon and waits until it logs `daemon_listening`.
    pub async fn start(self) -> Result<Relayd, Error> {
        let mut command = self.recipe.command()?;
        let (addr, kept) = match self.listen {
            Listen::SocketActivated => {
                let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                    .map_err(|source| Error::Bind { source })?;
                let addr = listener
                    .local_addr()
                    .map_err(|source| Error::Bind { source })?;
                let socket = OwnedFd::from(listener);
                let kept = if self.keep_socket {
                    Some(
                        socket
                            .try_clone()
                            .map_err(|source| Error::Bind { source })?,
                    )
                } else {
                    None
                };
                pass_socket(&mut command, socket)?;
                (addr, kept)
            }
            Listen::ExplicitPort => {
                let port = free_port()?;
                command.arg("--port").arg(port.to_string());
                (SocketAddr::from((Ipv4Addr::LOCALHOST, port)), None)
            }
        };
        let process = Process::spawn("relayd", command)?;
        // `command` owned the harness's copy of the socket; now only relayd holds it (and
        // `kept`, when asked for), so once relayd closes it new connections are refused
        // rather than queued.
        let mut relayd = Relayd {
            process,
            addr,
            listening: Value::Null,
            recipe: self.recipe,
            listen: self.listen,
            kept,
            previous: Vec::new(),
            dir: self.dir,
        };
        relayd.listening = relayd
            .process
            .logs()
            .wait_for_event("daemon_listening", START_TIMEOUT)
            .await?;
        Ok(relayd)
    }
}

impl Recipe {
    /// The daemon command: the cleared environment, the run's directories, the config and
    /// the flags. Its stdout is discarded.
    fn command(&self) -> Result<Command, Error> {
        let mut command = self.bare_command()?;
        if let Some(config) = &self.config {
            let path = write_private_file(&self.root.join("config.toml"), config)?;
            command.arg("--config").arg(path);
        }
        command.args(&self.args);
        Ok(command)
    }

    /// relayd with the run's environment and directories but none of the daemon's flags,
    /// for a subcommand (`bindings …`), which takes no daemon flag.
    fn bare_command(&self) -> Result<Command, Error> {
        let mut command = Command::new(bins::binary("relayd")?);
        command
            .env_clear()
            .env(relay_identity::names::HOME, self.root.join("home"))
            .env(
                relay_identity::names::XDG_CONFIG_HOME,
                self.root.join("xdg"),
            )
            .env(
                relay_identity::names::RELAY_SYSTEM_CONFIG_DIR,
                self.root.join("system"),
            )
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if let Some(path) = bins::inherited_path() {
            command.env(relay_identity::names::PATH, path);
        }
        for (key, value) in &self.envs {
            command.env(key, value);
        }
        Ok(command)
    }
}

/// Hands `socket` to the command as fd 3 with `LISTEN_FDS=1`, as systemd does.
fn pass_socket(command: &mut Command, socket: OwnedFd) -> Result<(), Error> {
    command
        .env("LISTEN_FDS", "1")
        .fd_mappings(vec![FdMapping {
            parent_fd: socket,
            child_fd: LISTEN_FDS_START,
        }])
        .map_err(|_| Error::FdMappingCollision {
            child_fd: LISTEN_FDS_START,
        })?;
    Ok(())
}

/// Runs `command` to its exit with stdout and stderr captured, killing it if it still
/// runs after `timeout`.
async fn run_to_exit(mut command: Command, timeout: Duration) -> Result<CliOutput, Error> {
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let program = PathBuf::from(command.as_std().get_program());
    let child = command.spawn().map_err(|source| Error::Spawn {
        program: program.clone(),
        source,
    })?;
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(output)) => Ok(CliOutput {
            status: output.status,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }),
        Ok(Err(source)) => Err(Error::Wait {
            program: program.display().to_string(),
            source,
        }),
        // Dropping the future drops the child, which kills it.
        Err(_) => Err(Error::ExitTimedOut {
            program: program.display().to_string(),
            timeout,
            stderr: String::new(),
        }),
    }
}

/// Writes `contents` to `path` with mode 0600.
fn write_private_file(path: &Path, contents: &str) -> Result<PathBuf, Error> {
    let write = || -> std::io::Result<()> {
        use std::io::Write as _;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        file.write_all(contents.as_bytes())?;
        // The umask cannot widen 0600, but a test may depend on the exact mode.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
    };
    write().map_err(|source| Error::WriteFile {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(path.to_path_buf())
}

/// Finds a free loopback port by binding and releasing it.
fn free_port() -> Result<u16, Error> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|source| Error::Bind { source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| Error::Bind { source })?;
    Ok(addr.port())
}

/// A running relayd. Dropping it kills the daemon and removes its directory.
#[derive(Debug)]
pub struct Relayd {
    process: Process,
    addr: SocketAddr,
    listening: Value,
    recipe: Recipe,
    listen: Listen,
    /// The harness's copy of the passed socket, if the builder was asked to keep it.
    kept: Option<OwnedFd>,
    /// The stderr of the runs before [`Relayd::start_again`], oldest first.
    previous: Vec<Logs>,
    // Declared last so the directory outlives the process when dropped.
    dir: TempDir,
}

impl Relayd {
    /// A fresh temporary directory, the cleared environment and a passed socket; adjust
    /// with the builder's methods, then `start` or `output`.
    pub fn builder() -> Result<RelaydBuilder, Error> {
        RelaydBuilder::new()
    }

    /// The address relayd listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`, what a harness is given as its base URL.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The run's temporary directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// relayd's `XDG_CONFIG_HOME`; its state is in `relay/daemon/` below.
    pub fn xdg_config_home(&self) -> PathBuf {
        self.dir.path().join("xdg")
    }

    /// relayd's state directory, `<XDG_CONFIG_HOME>/relay/daemon` (`state.json`,
    /// `admin.sock`).
    pub fn state_dir(&self) -> PathBuf {
        self.xdg_config_home().join("relay").join("daemon")
    }

    /// The daemon's signing key (§4.2).
    pub fn daemon_key_file(&self) -> PathBuf {
        self.xdg_config_home()
            .join("relay")
            .join("daemon")
            .join("daemon-identity.pk8")
    }

    pub fn pid(&self) -> Result<u32, Error> {
        self.process.pid()
    }

    /// The `daemon_listening` line relayd logged at start.
    pub fn listening_event(&self) -> &Value {
        &self.listening
    }

    /// Everything relayd wrote to stderr so far.
    pub fn logs(&self) -> &Logs {
        self.process.logs()
    }

    pub async fn wait_for_log_event(&self, event: &str, timeout: Duration) -> Result<Value, Error> {
        self.process.logs().wait_for_event(event, timeout).await
    }

    /// Sends SIGTERM and returns at once.
    pub fn terminate(&self) -> Result<(), Error> {
        self.process.terminate()
    }

    /// Waits for the exit (and the end of stderr) at most `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus, Error> {
        self.process.wait(timeout).await
    }

    /// SIGTERM, then the exit status; the logs are complete afterwards.
    pub async fn stop(&mut self) -> Result<ExitStatus, Error> {
        self.process.stop().await
    }

    /// The stderr of every earlier run of this daemon (before [`Relayd::start_again`]),
    /// oldest first.
    pub fn previous_logs(&self) -> &[Logs] {
        &self.previous
    }

    /// Starts relayd again after it exited, with the same directories (so the same state),
    /// config, flags and environment, on the same socket (kept by the harness, see
    /// [`RelaydBuilder::keep_socket`]) or the same `--port`, and waits for its
    /// `daemon_listening`. [`Relayd::logs`] is the new run's stderr from then on.
    pub async fn start_again(&mut self) -> Result<(), Error> {
        if self.process.try_status()?.is_none() {
            return Err(Error::StillRunning {
                program: "relayd".to_owned(),
            });
        }
        let mut command = self.recipe.command()?;
        match self.listen {
            Listen::SocketActivated => {
                let kept = self.kept.as_ref().ok_or(Error::SocketNotKept)?;
                let socket = kept.try_clone().map_err(|source| Error::Bind { source })?;
                pass_socket(&mut command, socket)?;
            }
            Listen::ExplicitPort => {
                command.arg("--port").arg(self.addr.port().to_string());
            }
        }
        let process = Process::spawn("relayd", command)?;
        let previous = std::mem::replace(&mut self.process, process);
        self.previous.push(previous.logs().clone());
        self.listening = self
            .process
            .logs()
            .wait_for_event("daemon_listening", START_TIMEOUT)
            .await?;
        Ok(())
    }

    /// Runs a relayd subcommand (`bindings list`, `bindings revoke <fp>`, …) to its exit
    /// as the daemon's account would, with `--state-dir` naming this daemon's state.
    pub async fn cli<I, S>(&self, args: I, timeout: Duration) -> Result<CliOutput, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = self.recipe.bare_command()?;
        command.arg("--state-dir").arg(self.state_dir()).args(args);
        run_to_exit(command, timeout).await
    }
}
