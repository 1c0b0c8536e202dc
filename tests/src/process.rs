//! A started process whose stderr is captured, killed when dropped.

use std::process::ExitStatus;
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;

use crate::error::Error;
use crate::logs::{self, Logs};

/// How long [`Process::stop`] waits for the process to exit after SIGTERM.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// A running process of the test. Dropping it kills the process (SIGKILL) if it still runs.
#[derive(Debug)]
pub struct Process {
    name: String,
    child: Child,
    logs: Logs,
    stderr_task: JoinHandle<()>,
    status: Option<ExitStatus>,
}

impl Process {
    /// Starts `command` with stderr captured into [`Process::logs`]; stdin and stdout are
    /// left as the command has them.
    pub fn spawn(name: &str, mut command: Command) -> Result<Process, Error> {
        command
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let program = std::path::PathBuf::from(command.as_std().get_program());
        let mut child = command
            .spawn()
            .map_err(|source| Error::Spawn { program, source })?;
        let logs = Logs::new(name);
        let stderr_task = match child.stderr.take() {
            Some(stderr) => logs::capture(stderr, logs.clone()),
            None => {
                // Cannot happen with `Stdio::piped()`; an empty, closed log says so plainly.
                logs.close();
                tokio::spawn(async {})
            }
        };
        Ok(Process {
            name: name.to_owned(),
            child,
            logs,
            stderr_task,
            status: None,
        })
    }

    /// What the process wrote to stderr so far.
    pub fn logs(&self) -> &Logs {
        &self.logs
    }

    pub fn pid(&self) -> Result<u32, Error> {
        self.child.id().ok_or_else(|| Error::NoPid {
            program: self.name.clone(),
        })
    }

    /// The process's standard input, if the command piped it and nobody took it yet.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.stdin.take()
    }

    /// The process's standard output, if the command piped it and nobody took it yet.
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    /// Sends SIGTERM and returns at once.
    pub fn terminate(&self) -> Result<(), Error> {
        self.signal(Signal::TERM)
    }

    /// Sends `signal` and returns at once.
    pub fn signal(&self, signal: Signal) -> Result<(), Error> {
        let pid = self.pid()?;
        send_signal(&self.name, pid, signal)
    }

    /// Waits until the process has exited and its stderr is read to the end, so the logs
    /// are complete when this returns.
    pub async fn wait(&mut self, timeout: Duration) -> Result<ExitStatus, Error> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let status = match tokio::time::timeout_at(deadline, self.child.wait()).await {
            Ok(Ok(status)) => status,
            Ok(Err(source)) => {
                return Err(Error::Wait {
                    program: self.name.clone(),
                    source,
                });
            }
            Err(_) => {
                return Err(Error::ExitTimedOut {
                    program: self.name.clone(),
                    timeout,
                    stderr: self.logs.text(),
                });
            }
        };
        self.status = Some(status);
        // A grandchild that inherited stderr could hold it open; the exit status is what
        // matters, so give the reader only until the same deadline.
        let _ = tokio::time::timeout_at(deadline, &mut self.stderr_task).await;
        Ok(status)
    }

    /// The exit status if the process has already exited, without waiting.
    pub fn try_status(&mut self) -> Result<Option<ExitStatus>, Error> {
        if self.status.is_none() {
            self.status = self.child.try_wait().map_err(|source| Error::Wait {
                program: self.name.clone(),
                source,
            })?;
        }
        Ok(self.status)
    }

    /// Sends SIGTERM and waits for the exit (at most [`STOP_TIMEOUT`]).
    pub async fn stop(&mut self) -> Result<ExitStatus, Error> {
        if let Some(status) = self.try_status()? {
            return Ok(status);
        }
        self.terminate()?;
        self.wait(STOP_TIMEOUT).await
    }
}

/// Sends `signal` to the process `pid` (one the test started), naming `program` in errors.
pub(crate) fn send_signal(program: &str, pid: u32, signal: Signal) -> Result<(), Error> {
    let signal_error = |source| Error::Signal {
        program: program.to_owned(),
        pid,
        signal: format!("{signal:?}"),
        source,
    };
    let raw = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| signal_error(std::io::Error::from(std::io::ErrorKind::InvalidInput)))?;
    kill_process(raw, signal).map_err(|errno| signal_error(errno.into()))
}

impl Drop for Process {
    fn drop(&mut self) {
        // `kill_on_drop` kills the child; the reader ends with the pipe, but do not wait.
        self.stderr_task.abort();
    }
}
