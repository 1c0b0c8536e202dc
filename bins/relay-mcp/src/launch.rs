//! Starting `relay-worker` for a launch grant (SPEC §5.5): the binary beside this one, a
//! cleared environment with an allow-list (and the variables `plugins.toml`'s `header_env`
//! names, which hold its collectors' secrets), its own process group, the grant written to
//! its stdin and nowhere else, and a private log file as its stderr.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use relay_identity::{Env, StatePaths, names};
use relay_proto::{FailureReason, Grant, Id, Message};
use relay_proxy::plugins::Plugins;
use tokio::io::AsyncWriteExt as _;
use tokio::process::{Child, Command};

/// Worker log files kept per user (§5.5).
const KEPT_LOGS: usize = 5;

/// A launch that did not produce a running worker.
#[derive(Debug)]
pub(crate) struct LaunchFailure {
    pub(crate) reason: FailureReason,
    pub(crate) detail: String,
}

fn fail(reason: FailureReason, detail: impl std::fmt::Display) -> LaunchFailure {
    LaunchFailure {
        reason,
        detail: detail.to_string(),
    }
}

/// Where the worker comes from and what it may see.
#[derive(Debug, Clone)]
pub(crate) struct Launcher {
    pub(crate) worker_binary: PathBuf,
    pub(crate) daemon_address: String,
    pub(crate) logs_dir: PathBuf,
    /// The allow-listed variables of this process, copied into the child's cleared
    /// environment.
    pub(crate) env: Vec<(String, OsString)>,
    /// The system and user `plugins.toml`, as the worker will read them.
    pub(crate) plugin_files: (PathBuf, PathBuf),
}

impl Launcher {
    pub(crate) fn new(env: &impl Env, daemon_address: String, paths: &StatePaths) -> Launcher {
        let worker_binary = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|dir| dir.join("relay-worker")))
            .unwrap_or_else(|| PathBuf::from("relay-worker"));
        let plugin_files = (
            relay_identity::system_plugins_file(env),
            paths.user_plugins_file(),
        );
        let env = names::WORKER_ENV_ALLOW_LIST
            .iter()
            .filter_map(|name| env.var_os(name).map(|value| ((*name).to_owned(), value)))
            .collect();
        Launcher {
            worker_binary,
            daemon_address,
            logs_dir: paths.logs_dir(),
            env,
            plugin_files,
        }
    }

    /// The variables the plugin configuration's `header_env` tables name, from this
    /// process's environment: the worker reads its collectors' secrets there. They are read
    /// at each launch, because the worker reads the configuration then too. A configuration
    /// that does not load adds nothing: the worker reports what is wrong with it.
    fn plugin_secrets(&self) -> Vec<(String, OsString)> {
        let (system, user) = &self.plugin_files;
        let Ok(plugins) = Plugins::load(system, Some(user)) else {
            return Vec::new();
        };
        plugins
            .config()
            .header_env_variables()
            .into_iter()
            // This process's own environment, which the `ProcessEnv` given to `new` reads too;
            // the names are only known once the file is read, at launch.
            .filter_map(|name| std::env::var_os(name).map(|value| (name.to_owned(), value)))
            .collect()
    }

    /// Starts the worker for `grant`.
    pub(crate) async fn launch(&self, grant: &Grant) -> Result<Child, LaunchFailure> {
        if !self.worker_binary.is_file() {
            return Err(fail(
                FailureReason::WorkerExecutableResolutionFailed,
                format!("{} does not exist", self.worker_binary.display()),
            ));
        }
        let log = self.open_log(grant).map_err(|e| {
            fail(
                FailureReason::WorkerProcessSpawnFailed,
                format!("worker log file: {e}"),
            )
        })?;
        let mut command = Command::new(&self.worker_binary);
        command
            .arg("--daemon-address")
            .arg(&self.daemon_address)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .envs(self.plugin_secrets())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            // The worker makes itself a session leader (setsid) as its first act, which it
            // could not do as a process group leader: it outlives this MCP.
            .kill_on_drop(false);
        let mut child = command
            .spawn()
            .map_err(|e| fail(FailureReason::WorkerProcessSpawnFailed, e))?;
        let Some(mut stdin) = child.stdin.take() else {
            let _ = child.start_kill();
            return Err(fail(
                FailureReason::WorkerActivationPipeUnavailable,
                "the worker has no stdin pipe",
            ));
        };
        let frame = relay_proto::encode(&Message::LaunchWorker(grant.clone()))
            .map_err(|e| fail(FailureReason::WorkerActivationGrantWriteFailed, e))?;
        let written = async {
            stdin.write_all(&frame).await?;
            stdin.shutdown().await
        }
        .await;
        drop(stdin);
        if let Err(e) = written {
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Err(fail(FailureReason::WorkerActivationGrantWriteFailed, e));
        }
        Ok(child)
    }

    /// `<logs>/worker-<activation id prefix>.log`: the worker of that launch writes there.
    pub(crate) fn log_file(&self, activation_id: Id) -> PathBuf {
        // Sixteen hex digits: the UUIDv7 timestamp and some of its random bits.
        let simple = activation_id.as_uuid().simple().to_string();
        self.logs_dir.join(format!("worker-{}.log", &simple[..16]))
    }

    /// The launch's [`Launcher::log_file`], mode 0600, keeping the five newest.
    fn open_log(&self, grant: &Grant) -> std::io::Result<File> {
        relay_identity::store::ensure_private_dir(&self.logs_dir).map_err(std::io::Error::other)?;
        let path = self.log_file(grant.activation_id);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)?;
        prune_logs(&self.logs_dir, KEPT_LOGS);
        Ok(file)
    }
}

/// Removes all but the `keep` newest `worker-*.log` files.
fn prune_logs(dir: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut logs: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("worker-") && name.ends_with(".log")
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    logs.sort_by_key(|(modified, _)| std::cmp::Reverse(*modified));
    for (_, path) in logs.into_iter().skip(keep) {
        let _ = std::fs::remove_file(path);
    }
}
