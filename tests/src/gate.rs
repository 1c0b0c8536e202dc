//! A worker launch the test holds back: a directory with `relay-mcp` (hard-linked, or
//! copied across file systems) beside a `relay-worker` shell script that waits on a FIFO
//! before it `exec`s the real `relay-worker` with the same arguments, environment and
//! stdin (the grant). `relay-mcp` starts the `relay-worker` beside itself (§1), so the
//! route stays `Activating` for exactly as long as the test keeps the gate shut.
//!
//! This stands in for a worker that is slow to start (a cold disk, a slow plugin load)
//! without sleeping anywhere: the test decides when the worker may start.

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::bins;
use crate::error::Error;

/// The held-back launch. Dropping it opens the gate, so no script is left waiting.
#[derive(Debug)]
pub struct WorkerGate {
    dir: PathBuf,
    fifo: PathBuf,
}

impl WorkerGate {
    /// Prepares `<dir>/relay-mcp`, `<dir>/relay-worker` (the script) and `<dir>/gate` (the
    /// FIFO). `dir` must not exist yet.
    pub fn install(dir: &Path) -> Result<WorkerGate, Error> {
        let gate_error = |source| Error::Gate {
            dir: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir(dir).map_err(gate_error)?;
        let mcp = bins::binary("relay-mcp")?;
        let worker = bins::binary("relay-worker")?;
        let linked = dir.join("relay-mcp");
        if std::fs::hard_link(&mcp, &linked).is_err() {
            std::fs::copy(&mcp, &linked).map_err(gate_error)?;
        }
        let fifo = dir.join("gate");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .map_err(|errno| gate_error(errno.into()))?;
        let script = format!(
            "#!/bin/sh\n\
             # relay-e2e: hold this worker launch until the test opens the gate.\n\
             read -r _ < '{}'\n\
             exec '{}' \"$@\"\n",
            fifo.display(),
            worker.display()
        );
        let script_path = dir.join("relay-worker");
        std::fs::write(&script_path, script).map_err(gate_error)?;
        std::fs::set_permissions(&script_path, std::fs::Permissions::from_mode(0o755))
            .map_err(gate_error)?;
        Ok(WorkerGate {
            dir: dir.to_path_buf(),
            fifo,
        })
    }

    /// The `relay-mcp` to start (see `McpBuilder::program`).
    pub fn mcp_program(&self) -> PathBuf {
        self.dir.join("relay-mcp")
    }

    /// Lets the waiting launch go on. Fails if no launch reaches the gate within
    /// `timeout` (then nothing was launched).
    pub async fn open(&self, timeout: Duration) -> Result<(), Error> {
        let fifo = self.fifo.clone();
        // Opening a FIFO for writing blocks until the script opens it for reading.
        let opened = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let mut writer = std::fs::OpenOptions::new().write(true).open(&fifo)?;
            writer.write_all(b"open\n")
        });
        match tokio::time::timeout(timeout, opened).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(source))) => Err(Error::Gate {
                dir: self.dir.clone(),
                source,
            }),
            Ok(Err(_)) | Err(_) => Err(Error::GateTimedOut {
                fifo: self.fifo.clone(),
                timeout,
            }),
        }
    }
}

impl Drop for WorkerGate {
    fn drop(&mut self) {
        // Read-write never blocks on Linux; a script still waiting reads this line, and a
        // blocked `open` above finds its reader.
        if let Ok(mut gate) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(&self.fifo)
        {
            let _ = gate.write_all(b"open\n");
        }
    }
}
