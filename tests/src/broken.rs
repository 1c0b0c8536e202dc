//! A worker binary that fails to start until the test repairs it: a directory with
//! `relay-mcp` (hard-linked, or copied across file systems) beside a `relay-worker` shell
//! script that reads its grant and exits 1, and the real `relay-worker` staged under another
//! name. `relay-mcp` starts the `relay-worker` beside itself (§1), so every launch fails
//! (`worker_exited_before_ready`) until [`BrokenWorker::repair`] renames the real binary
//! over the script, atomically, so no launch ever runs a half-written file.
//!
//! This stands in for a broken installation (a bad upgrade, a missing library) that an
//! administrator fixes while sessions keep retrying.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use crate::bins;
use crate::error::Error;

/// Name of the staged real worker inside the directory.
const STAGED: &str = ".relay-worker.real";

/// The directory of the failing launch.
#[derive(Debug)]
pub struct BrokenWorker {
    dir: PathBuf,
}

impl BrokenWorker {
    /// Prepares `<dir>/relay-mcp`, `<dir>/relay-worker` (the failing script) and the staged
    /// real worker. `dir` must not exist yet.
    pub fn install(dir: &Path) -> Result<BrokenWorker, Error> {
        let broken_error = |source| Error::BrokenWorker {
            dir: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir(dir).map_err(broken_error)?;
        for (binary, name) in [("relay-mcp", "relay-mcp"), ("relay-worker", STAGED)] {
            let from = bins::binary(binary)?;
            let to = dir.join(name);
            if std::fs::hard_link(&from, &to).is_err() {
                std::fs::copy(&from, &to).map_err(broken_error)?;
            }
        }
        // Reading the grant first makes the failure the same every time: the worker
        // exits before it is ready, never before its grant was written.
        let script = "#!/bin/sh\n\
                      # relay-e2e: a worker that cannot start.\n\
                      cat > /dev/null\n\
                      echo 'relay-e2e: this relay-worker is broken' >&2\n\
                      exit 1\n";
        let script_path = dir.join("relay-worker");
        std::fs::write(&script_path, script).map_err(broken_error)?;
        std::fs::set_permissions(&script_path, std::fs::Permissions::from_mode(0o755))
            .map_err(broken_error)?;
        Ok(BrokenWorker {
            dir: dir.to_path_buf(),
        })
    }

    /// The `relay-mcp` to start (see `McpBuilder::program`).
    pub fn mcp_program(&self) -> PathBuf {
        self.dir.join("relay-mcp")
    }

    /// Puts the real `relay-worker` in place of the script (one `rename`).
    pub fn repair(&self) -> Result<(), Error> {
        std::fs::rename(self.dir.join(STAGED), self.dir.join("relay-worker")).map_err(|source| {
            Error::BrokenWorker {
                dir: self.dir.clone(),
                source,
            }
        })
    }
}
