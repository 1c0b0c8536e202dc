//! One machine-user on the client side: the directories its `relay-mcp`, `relay-worker` and
//! `relay-hook` processes see (`HOME`, `XDG_CONFIG_HOME`, `RELAY_SYSTEM_CONFIG_DIR`), and
//! the worker processes that run for it.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::process::Signal;
use tempfile::TempDir;

use crate::error::Error;
use crate::mcp::McpBuilder;
use crate::procfs;

/// How often [`User::wait_for_workers`] looks at `/proc` again.
const PROC_POLL: Duration = Duration::from_millis(20);

/// A machine-user's temporary directories. Dropping it kills (SIGKILL) the worker
/// processes still running for it, found by their `XDG_CONFIG_HOME`: they run in their own
/// process group and outlive the MCP that launched them by design (SPEC §5.5).
#[derive(Debug)]
pub struct User {
    dir: TempDir,
}

impl User {
    /// Fresh `home/`, `xdg/` and `system/` directories.
    pub fn new() -> Result<User, Error> {
        let dir = tempfile::Builder::new()
            .prefix("relay-e2e-user-")
            .tempdir()
            .map_err(|source| Error::TempDir { source })?;
        for sub in ["home", "xdg", "system"] {
            let path = dir.path().join(sub);
            std::fs::create_dir(&path).map_err(|source| Error::WriteFile { path, source })?;
        }
        Ok(User { dir })
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `HOME` of the user's processes.
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// `XDG_CONFIG_HOME` of the user's processes (the base of §4.4).
    pub fn xdg_config_home(&self) -> PathBuf {
        self.dir.path().join("xdg")
    }

    /// `RELAY_SYSTEM_CONFIG_DIR` of the user's processes.
    pub fn system_config_dir(&self) -> PathBuf {
        self.dir.path().join("system")
    }

    /// `<base>/relay/daemon/`: the machine key and the trust pins.
    pub fn state_dir(&self) -> PathBuf {
        self.xdg_config_home().join("relay").join("daemon")
    }

    /// `<base>/relay/daemon/pins/`.
    pub fn pins_dir(&self) -> PathBuf {
        self.state_dir().join("pins")
    }

    /// The machine identity key (created by the first `relay-mcp`).
    pub fn machine_key_file(&self) -> PathBuf {
        self.state_dir().join("machine-identity.pk8")
    }

    /// `<base>/relay/logs/`, where `relay-mcp` puts each worker's log file.
    pub fn logs_dir(&self) -> PathBuf {
        self.xdg_config_home().join("relay").join("logs")
    }

    /// Writes `<system dir>/config.toml`, the file a worker reads `[upstream]` from.
    pub fn write_system_config(&self, toml: &str) -> Result<PathBuf, Error> {
        self.write_file(&self.system_config_dir().join("config.toml"), toml, 0o644)
    }

    /// Writes `contents` to `path` (parents created) with `mode`.
    pub fn write_file(&self, path: &Path, contents: &str, mode: u32) -> Result<PathBuf, Error> {
        let write = || -> std::io::Result<()> {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(path, contents)?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        };
        write().map_err(|source| Error::WriteFile {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(path.to_path_buf())
    }

    /// A `relay-mcp` of this user for the daemon at `daemon_address`, not started yet.
    pub fn mcp(&self, daemon_address: &str) -> Result<McpBuilder, Error> {
        McpBuilder::new(self, daemon_address)
    }

    /// The `relay-worker` processes running for this user now, by pid.
    pub fn worker_pids(&self) -> Vec<u32> {
        procfs::processes(
            "relay-worker",
            relay_identity::names::XDG_CONFIG_HOME,
            self.xdg_config_home().as_os_str(),
        )
    }

    /// Waits until exactly `count` worker processes run for this user and returns them.
    pub async fn wait_for_workers(
        &self,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<u32>, Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut poll = tokio::time::interval(PROC_POLL);
        loop {
            poll.tick().await;
            let pids = self.worker_pids();
            if pids.len() == count {
                return Ok(pids);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::WorkerCount {
                    expected: count,
                    found: pids,
                    timeout,
                });
            }
        }
    }

    /// Sends `signal` to `pid`, which must be one of this user's worker processes (the test
    /// never signals a process it did not start).
    pub fn signal_worker(&self, pid: u32, signal: Signal) -> Result<(), Error> {
        if !self.worker_pids().contains(&pid) {
            return Err(Error::NotAWorker {
                program: "relay-worker".to_owned(),
                pid,
            });
        }
        crate::process::send_signal("relay-worker", pid, signal)
    }

    /// Waits until process `pid` has exited (gone, or a zombie its parent has not reaped).
    pub async fn wait_for_exit(&self, pid: u32, timeout: Duration) -> Result<(), Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut poll = tokio::time::interval(PROC_POLL);
        loop {
            poll.tick().await;
            if !procfs::is_alive(pid) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::PidStillAlive {
                    program: "relay-worker".to_owned(),
                    pid,
                    timeout,
                });
            }
        }
    }

    /// Every worker log file of this user with its contents, oldest name first.
    pub fn worker_logs(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let Ok(entries) = std::fs::read_dir(self.logs_dir()) else {
            return Vec::new();
        };
        let mut logs: Vec<(PathBuf, Vec<u8>)> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| {
                path.file_name()
                    .and_then(|name| name.to_str())
                    .is_some_and(|name| name.starts_with("worker-") && name.ends_with(".log"))
            })
            .filter_map(|path| {
                let bytes = std::fs::read(&path).ok()?;
                Some((path, bytes))
            })
            .collect();
        logs.sort();
        logs
    }

    /// Every worker log of this user as one text, for failure messages.
    pub fn worker_log_text(&self) -> String {
        self.worker_logs()
            .iter()
            .map(|(path, bytes)| {
                format!(
                    "--- {} ---\n{}",
                    path.display(),
                    String::from_utf8_lossy(bytes)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for User {
    fn drop(&mut self) {
        for pid in self.worker_pids() {
            let _ = crate::process::send_signal("relay-worker", pid, Signal::KILL);
        }
    }
}
