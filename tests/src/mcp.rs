//! `relay-mcp` as a harness starts it: a stdio child with a cleared environment, JSON-RPC
//! lines on its stdin, answers read from its stdout with a deadline, logs on stderr.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use rustix::process::Signal;
use serde_json::Value;
use tokio::io::AsyncWriteExt as _;
use tokio::process::{ChildStdin, Command};
use tokio::task::JoinHandle;

use crate::bins;
use crate::error::Error;
use crate::logs::{self, Logs};
use crate::process::Process;
use crate::user::User;

/// A `relay-mcp` being prepared for one [`User`].
#[derive(Debug)]
pub struct McpBuilder {
    program: PathBuf,
    daemon_address: String,
    cwd: PathBuf,
    envs: Vec<(OsString, OsString)>,
}

impl McpBuilder {
    pub(crate) fn new(user: &User, daemon_address: &str) -> Result<McpBuilder, Error> {
        let mut envs: Vec<(OsString, OsString)> = vec![
            (relay_identity::names::HOME.into(), user.home().into()),
            (
                relay_identity::names::XDG_CONFIG_HOME.into(),
                user.xdg_config_home().into(),
            ),
            (
                relay_identity::names::RELAY_SYSTEM_CONFIG_DIR.into(),
                user.system_config_dir().into(),
            ),
        ];
        if let Some(path) = bins::inherited_path() {
            envs.push((relay_identity::names::PATH.into(), path));
        }
        Ok(McpBuilder {
            program: bins::binary("relay-mcp")?,
            daemon_address: daemon_address.to_owned(),
            cwd: user.dir().to_path_buf(),
            envs,
        })
    }

    /// The route credential, as `RELAY_CLIENT_TOKEN`.
    pub fn token(self, token: &str) -> McpBuilder {
        self.env(relay_identity::names::RELAY_CLIENT_TOKEN, token)
    }

    /// `RELAY_LOG` and `RELAY_LOG_FORMAT` (they reach the worker too, through the
    /// allow-list of §5.5).
    pub fn log(self, level: &str, format: &str) -> McpBuilder {
        self.env(relay_identity::names::RELAY_LOG, level)
            .env(relay_identity::names::RELAY_LOG_FORMAT, format)
    }

    /// An environment variable on top of the cleared environment.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> McpBuilder {
        self.envs
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Another `relay-mcp` executable (a copy beside a gated `relay-worker`, say).
    pub fn program(mut self, program: PathBuf) -> McpBuilder {
        self.program = program;
        self
    }

    /// Starts it with stdin and stdout piped.
    pub fn spawn(self) -> Result<Mcp, Error> {
        let mut command = Command::new(&self.program);
        command
            .arg("--daemon-address")
            .arg(&self.daemon_address)
            .env_clear()
            .envs(self.envs.iter().map(|(key, value)| (key, value)))
            .current_dir(&self.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut process = Process::spawn("relay-mcp", command)?;
        let stdin = process.take_stdin();
        let stdout = Logs::new("relay-mcp stdout");
        let stdout_task = match process.take_stdout() {
            Some(stream) => logs::capture(stream, stdout.clone()),
            None => {
                stdout.close();
                tokio::spawn(async {})
            }
        };
        Ok(Mcp {
            process,
            stdin,
            stdout,
            stdout_task,
            read: 0,
        })
    }
}

/// A running `relay-mcp`. Dropping it kills the process (not the worker it launched,
/// which lives in its own process group; [`User`] takes care of that).
#[derive(Debug)]
pub struct Mcp {
    process: Process,
    stdin: Option<ChildStdin>,
    stdout: Logs,
    stdout_task: JoinHandle<()>,
    /// Stdout lines already returned by [`Mcp::next_line`].
    read: usize,
}

impl Mcp {
    pub fn pid(&self) -> Result<u32, Error> {
        self.process.pid()
    }

    /// What it wrote to stderr so far (its logs).
    pub fn logs(&self) -> &Logs {
        self.process.logs()
    }

    /// Everything it wrote to stdout so far.
    pub fn stdout(&self) -> &Logs {
        &self.stdout
    }

    /// Writes `line` and a `\n` to its stdin.
    pub async fn send(&mut self, line: &str) -> Result<(), Error> {
        let stdin = self.stdin.as_mut().ok_or_else(|| Error::NoPipe {
            program: "relay-mcp".to_owned(),
        })?;
        let write_error = |source| Error::WriteStdin {
            program: "relay-mcp".to_owned(),
            source,
        };
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .map_err(write_error)?;
        stdin.flush().await.map_err(write_error)
    }

    /// The next stdout line not returned before, waiting at most `timeout` for it.
    pub async fn next_line(&mut self, timeout: Duration) -> Result<String, Error> {
        let index = self.read;
        let line = self
            .stdout
            .wait_for(&format!("stdout line {}", index + 1), timeout, |logs| {
                logs.lines().into_iter().nth(index)
            })
            .await?;
        self.read += 1;
        Ok(line)
    }

    /// The next stdout line, parsed as JSON.
    pub async fn next_json(&mut self, timeout: Duration) -> Result<Value, Error> {
        let line = self.next_line(timeout).await?;
        serde_json::from_str(&line).map_err(|_| Error::NotJson {
            program: "relay-mcp".to_owned(),
            line,
        })
    }

    /// Sends `initialize` (id 0) asking for `version` and returns the answer line.
    pub async fn initialize(&mut self, version: &str, timeout: Duration) -> Result<Value, Error> {
        let request = serde_json::json!({
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "relay-e2e", "version": "0"}},
        });
        self.send(&request.to_string()).await?;
        self.next_json(timeout).await
    }

    /// Closes its stdin (end of input).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Sends `signal` and returns at once.
    pub fn signal(&self, signal: Signal) -> Result<(), Error> {
        self.process.signal(signal)
    }

    /// The exit status if it has already exited, without waiting.
    pub fn try_status(&mut self) -> Result<Option<ExitStatus>, Error> {
        self.process.try_status()
    }

    /// Waits for the exit and the end of its output, at most `timeout`.
    pub async fn wait(&mut self, timeout: Duration) -> Result<ExitStatus, Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        let status = self.process.wait(timeout).await?;
        let _ = tokio::time::timeout_at(deadline, &mut self.stdout_task).await;
        Ok(status)
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        self.stdout_task.abort();
    }
}
