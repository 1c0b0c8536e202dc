//! Running a real coding-agent CLI (`claude`, `codex`, `pi`) once, non-interactively, in an
//! empty environment with its own temporary home.

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tokio::process::Command;

use crate::bins;
use crate::error::Error;
use crate::logs::{self, Logs};

/// A generous limit for one non-interactive agent run (they take about a second).
pub const AGENT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the output pipes may stay open after the CLI exited.
const PIPE_GRACE: Duration = Duration::from_secs(5);

/// One agent CLI invocation being prepared. Its temporary directory holds `home/` (`HOME`)
/// and `work/` (the working directory) and whatever the test writes there.
#[derive(Debug)]
pub struct AgentCommand {
    agent: String,
    command: Command,
    dir: TempDir,
}

/// What a finished agent run printed.
#[derive(Debug, Clone)]
pub struct AgentOutput {
    pub agent: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl fmt::Display for AgentOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} exited with {} after {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.agent, self.status, self.elapsed, self.stdout, self.stderr
        )
    }
}

impl AgentCommand {
    /// The CLI named `agent` from `RELAY_AGENT_BIN_DIR`; fails (never skips) when it is not
    /// installed, telling the reader to run `cargo xtask e2e`.
    pub fn new(agent: &str) -> Result<AgentCommand, Error> {
        let program = bins::agent_binary(agent)?;
        AgentCommand::with_command(agent, Command::new(program))
    }

    /// A program found on `PATH` (`node`, say), run the same way as an agent CLI.
    pub fn on_path(program: &str) -> Result<AgentCommand, Error> {
        AgentCommand::with_command(program, Command::new(program))
    }

    /// The CLI named `agent` run through `launcher launcher_args… <the CLI>` (such as
    /// `ip netns exec <namespace>`), otherwise as [`AgentCommand::new`].
    pub fn launched_by(
        agent: &str,
        launcher: &Path,
        launcher_args: &[&str],
    ) -> Result<AgentCommand, Error> {
        let program = bins::agent_binary(agent)?;
        let mut command = Command::new(launcher);
        command.args(launcher_args).arg(program);
        AgentCommand::with_command(agent, command)
    }

    fn with_command(agent: &str, mut command: Command) -> Result<AgentCommand, Error> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("relay-e2e-{agent}-"))
            .tempdir()
            .map_err(|source| Error::TempDir { source })?;
        command
            .env_clear()
            .env("HOME", dir.path().join("home"))
            .current_dir(dir.path().join("work"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(path) = bins::inherited_path() {
            command.env("PATH", path);
        }
        let agent_command = AgentCommand {
            agent: agent.to_owned(),
            command,
            dir,
        };
        agent_command.make_dir("home")?;
        agent_command.make_dir("work")?;
        Ok(agent_command)
    }

    /// The run's temporary directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The working directory the CLI runs in.
    pub fn work_dir(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// Creates `name` (relative) in the run's directory and returns its path.
    pub fn make_dir(&self, name: &str) -> Result<PathBuf, Error> {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(&path).map_err(|source| Error::WriteFile {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }

    /// Writes `contents` to `name` (relative, parents created) in the run's directory.
    pub fn write_file(&self, name: &str, contents: &str) -> Result<PathBuf, Error> {
        let path = self.dir.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| Error::WriteFile {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        std::fs::write(&path, contents).map_err(|source| Error::WriteFile {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> AgentCommand {
        self.command.arg(arg);
        self
    }

    pub fn args<I, S>(mut self, args: I) -> AgentCommand
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command.args(args);
        self
    }

    /// An environment variable on top of the cleared environment.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> AgentCommand {
        self.command.env(key, value);
        self
    }

    /// Runs the CLI with stdin closed until it exits or `timeout` passes (then it is killed
    /// and the error carries what it printed so far).
    pub async fn run(mut self, timeout: Duration) -> Result<AgentOutput, Error> {
        let program = PathBuf::from(self.command.as_std().get_program());
        let started = Instant::now();
        let mut child = self.command.spawn().map_err(|source| Error::Spawn {
            program: program.clone(),
            source,
        })?;
        let stdout = Logs::new(&self.agent);
        let stderr = Logs::new(&self.agent);
        let readers = [
            child
                .stdout
                .take()
                .map(|stream| logs::capture(stream, stdout.clone())),
            child
                .stderr
                .take()
                .map(|stream| logs::capture(stream, stderr.clone())),
        ];
        let deadline = tokio::time::Instant::now() + timeout;
        let waited = tokio::time::timeout_at(deadline, child.wait()).await;
        let status = match waited {
            Ok(Ok(status)) => status,
            Ok(Err(source)) => {
                return Err(Error::Wait {
                    program: self.agent,
                    source,
                });
            }
            Err(_) => {
                // Kill it (and so close its pipes) before reporting.
                let _ = child.kill().await;
                return Err(Error::AgentTimedOut {
                    agent: self.agent,
                    timeout,
                    stdout: stdout.text(),
                    stderr: stderr.text(),
                });
            }
        };
        // A grandchild (a helper the CLI left behind) may hold the pipes open; what the CLI
        // printed before it exited is all there is, so the readers get a short grace.
        let grace = tokio::time::Instant::now() + PIPE_GRACE;
        for mut reader in readers.into_iter().flatten() {
            if tokio::time::timeout_at(grace, &mut reader).await.is_err() {
                reader.abort();
            }
        }
        Ok(AgentOutput {
            agent: self.agent,
            status,
            stdout: stdout.text(),
            stderr: stderr.text(),
            elapsed: started.elapsed(),
        })
    }
}
