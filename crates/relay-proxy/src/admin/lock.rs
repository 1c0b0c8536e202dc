//! The exclusive lock on `<state_dir>/admin.lock`: a running daemon holds it for its whole
//! life, a `relayd bindings` command for the moment of its edit of a stopped daemon's state.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use super::AdminError;

/// The lock file's name in the daemon's state directory.
pub const LOCK_FILE: &str = "admin.lock";

/// The exclusive lock on `<state_dir>/admin.lock`, released when dropped.
#[derive(Debug)]
pub struct StateLock {
    _file: File,
    path: PathBuf,
}

impl StateLock {
    /// Takes the lock if nobody holds it; `Ok(None)` when somebody does. A lock file that
    /// root creates for a state directory of another account is given to that account, so
    /// its daemon can still lock it.
    pub fn try_acquire(state_dir: &Path) -> Result<Option<StateLock>, AdminError> {
        use rustix::fs::{FlockOperation, Mode, OFlags};
        let path = state_dir.join(LOCK_FILE);
        let lock_error = |source: io::Error| AdminError::Lock {
            path: path.clone(),
            source,
        };
        let fd = rustix::fs::open(
            &path,
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| lock_error(e.into()))?;
        match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => return Ok(None),
            Err(e) => return Err(lock_error(e.into())),
        }
        let file = File::from(fd);
        give_to_directory_owner(state_dir, &file).map_err(lock_error)?;
        Ok(Some(StateLock { _file: file, path }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// When root writes into another account's state directory, the new file must stay usable
/// by that account: it gets the directory's owner and group.
pub fn give_to_directory_owner(state_dir: &Path, file: &File) -> io::Result<()> {
    let dir = std::fs::metadata(state_dir)?;
    let meta = file.metadata()?;
    if rustix::process::geteuid().is_root() && (meta.uid(), meta.gid()) != (dir.uid(), dir.gid()) {
        std::os::unix::fs::fchown(file, Some(dir.uid()), Some(dir.gid()))?;
    }
    Ok(())
}
