//! The crate's only filesystem code: private directories, atomic writes, creation by `link(2)`,
//! opening a file without following a symlink, and opening a file an administrator provides
//! only where no other user could have changed it.
//!
//! Every write goes through a temporary file in the target's directory that is written and
//! fsynced before it takes the target's name, so a reader sees the old file, the new file, or
//! none, never a partial one.

use std::fs::{self, DirBuilder, File, Metadata, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::OFlags;

/// A failure to prepare a private directory or to write a file in one.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The path has no parent directory or no file name.
    #[error("{} has no parent directory or file name", path.display())]
    InvalidPath {
        /// The path given.
        path: PathBuf,
    },
    /// Creating the directory failed.
    #[error("cannot create directory {}: {source}", dir.display())]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Reading the directory's metadata failed.
    #[error("cannot inspect directory {}: {source}", dir.display())]
    InspectDir {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Something that is not a directory is in the way.
    #[error("{} is not a directory: move it aside", dir.display())]
    NotADirectory {
        /// The path.
        dir: PathBuf,
    },
    /// The directory belongs to another user.
    #[error(
        "directory {} is owned by uid {owner}, not by the current user (uid {euid}): run chown {euid} {} or remove it",
        dir.display(),
        dir.display()
    )]
    DirNotOwned {
        /// The directory.
        dir: PathBuf,
        /// Its owner.
        owner: u32,
        /// The effective uid of this process.
        euid: u32,
    },
    /// Other users could replace files in the directory.
    #[error(
        "directory {} is writable by group or others (mode {mode:04o}): run chmod 700 {}",
        dir.display(),
        dir.display()
    )]
    DirWritableByOthers {
        /// The directory.
        dir: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Writing, syncing or moving the file into place failed.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The target file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Syncing the directory after the file took its name failed.
    #[error("cannot sync directory {}: {source}", dir.display())]
    SyncDir {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

/// What the checks of a credential or key file look at, taken from the opened handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileFacts {
    /// The path is a symbolic link.
    pub is_symlink: bool,
    /// The file is a regular file.
    pub is_regular_file: bool,
    /// The owner's uid.
    pub uid: u32,
    /// The permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// The size in bytes.
    pub len: u64,
}

impl FileFacts {
    /// The facts of an opened file's metadata (`fstat`).
    pub fn from_metadata(metadata: &Metadata) -> FileFacts {
        FileFacts {
            is_symlink: metadata.file_type().is_symlink(),
            is_regular_file: metadata.file_type().is_file(),
            uid: metadata.uid(),
            mode: metadata.mode() & 0o7777,
            len: metadata.len(),
        }
    }
}

/// The effective uid of this process.
pub fn current_euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Creates `dir` (and missing parents) with mode 0700 if it does not exist, then checks that it
/// is a directory owned by the effective user and not writable by group or others.
pub fn ensure_private_dir(dir: &Path) -> Result<(), StoreError> {
    ensure_private_dir_for(dir, current_euid())
}

/// [`ensure_private_dir`] for an explicit effective uid.
pub fn ensure_private_dir_for(dir: &Path, euid: u32) -> Result<(), StoreError> {
    match fs::metadata(dir) {
        Ok(_) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => create_private_dir(dir)?,
        Err(source) => {
            return Err(StoreError::InspectDir {
                dir: dir.to_owned(),
                source,
            });
        }
    }
    let metadata = fs::metadata(dir).map_err(|source| StoreError::InspectDir {
        dir: dir.to_owned(),
        source,
    })?;
    if !metadata.is_dir() {
        return Err(StoreError::NotADirectory {
            dir: dir.to_owned(),
        });
    }
    if metadata.uid() != euid {
        return Err(StoreError::DirNotOwned {
            dir: dir.to_owned(),
            owner: metadata.uid(),
            euid,
        });
    }
    let mode = metadata.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(StoreError::DirWritableByOthers {
            dir: dir.to_owned(),
            mode,
        });
    }
    Ok(())
}

fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    let create_err = |source| StoreError::CreateDir {
        dir: dir.to_owned(),
        source,
    };
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(create_err)?;
    }
    match DirBuilder::new().mode(0o700).create(dir) {
        // The umask may have taken bits away; say exactly what we mean.
        Ok(()) => fs::set_permissions(dir, Permissions::from_mode(0o700)).map_err(create_err),
        // Another process created it first: the checks that follow decide.
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(create_err(source)),
    }
}

/// Replaces `path` atomically with `bytes` and permission bits `mode`: temporary file in the
/// same directory, write, fsync, rename, fsync of the directory.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), StoreError> {
    let (dir, name) = split(path)?;
    let temp = TempFile::create(dir, name, bytes, mode).map_err(|source| StoreError::Write {
        path: path.to_owned(),
        source,
    })?;
    fs::rename(&temp.path, path).map_err(|source| StoreError::Write {
        path: path.to_owned(),
        source,
    })?;
    temp.disarm();
    sync_dir(dir)
}

/// Creates `path` with `bytes` and permission bits `mode` only if nothing has that name yet:
/// temporary file, fsync, then `link(2)` into place, so that of several concurrent callers
/// exactly one wins and nobody ever sees a partial file.
///
/// Returns `Ok(true)` if this call created the file and `Ok(false)` if something already had
/// the name (which is left untouched). The temporary file is removed either way.
pub fn create_new_linked(path: &Path, bytes: &[u8], mode: u32) -> Result<bool, StoreError> {
    let (dir, name) = split(path)?;
    let temp = TempFile::create(dir, name, bytes, mode).map_err(|source| StoreError::Write {
        path: path.to_owned(),
        source,
    })?;
    let created = match fs::hard_link(&temp.path, path) {
        Ok(()) => true,
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => false,
        Err(source) => {
            return Err(StoreError::Write {
                path: path.to_owned(),
                source,
            });
        }
    };
    drop(temp);
    if created {
        sync_dir(dir)?;
    }
    Ok(created)
}

/// Opens `path` read-only without following a symlink in its last component (`O_NOFOLLOW`) and
/// without blocking on a FIFO (`O_NONBLOCK`), so the caller can check the handle's metadata
/// before reading.
pub fn open_nofollow(path: &Path) -> io::Result<File> {
    let flags = OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let mut options = OpenOptions::new();
    options.read(true).custom_flags(flags.bits() as i32);
    options.open(path)
}

/// Whether an error from [`open_nofollow`] means the path is a symlink.
///
/// Linux reports `ELOOP`; other systems use other codes, so the path is also looked at.
pub fn is_symlink_error(path: &Path, err: &io::Error) -> bool {
    err.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
        || fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// What decides whether a file an administrator provides (a configuration file, a
/// provisioned pin) can be trusted: the file's mode, and each entry on the way to it
/// ([`DirFacts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
struct TrustFacts {
    /// The file's real path, its mode, and whether its mount is read-only here.
    file: PathBuf,
    file_mode: u32,
    file_read_only: bool,
    /// Every entry the path is resolved through, the file's own last: each directory
    /// and symlink on the way, with the directory it is in.
    dirs: Vec<DirFacts>,
}

/// A directory on the way to a trusted file, and the entry there that leads to it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DirFacts {
    dir: PathBuf,
    entry: PathBuf,
    /// The directory's mode, or `None` on a read-only mount, where no entry can be
    /// replaced through it (a Kubernetes ConfigMap's directory is 0777).
    mode: Option<u32>,
    /// The entry's owner, when it is neither root nor the reading user.
    other_owner: Option<u32>,
}

/// Why such a file cannot be trusted, naming what to fix: every user could change it (the
/// file, or a directory on the way to it without the sticky bit), or another user could
/// have put it, a symlink to it or a directory above it in a directory every user may
/// create files in, and with it change where Relay sends the agents' traffic, what its
/// policy allows or which daemon its clients trust. Group write is left to the
/// administrator, who may share the file with an administrators' group, and so is a
/// directory another user owns that the administrator chose. A file every user may write
/// is refused even on a read-only mount: that mount may be only this process's view (a
/// service's `ProtectSystem`) of a file others write elsewhere.
fn unsafe_to_trust(facts: &TrustFacts) -> Option<String> {
    if facts.file_mode & 0o002 != 0 {
        let fix = if facts.file_read_only {
            "give it a mode without write for others where it comes from (a Kubernetes ConfigMap's defaultMode 0644, say): this mount is read-only"
        } else {
            "chmod o-w it"
        };
        return Some(format!(
            "{} is writable by every user, who could have changed it: {fix}",
            facts.file.display()
        ));
    }
    facts.dirs.iter().find_map(|at| {
        let mode = at.mode.filter(|mode| mode & 0o002 != 0)?;
        if mode & 0o1000 == 0 {
            return Some(format!(
                "{} is writable by every user, who could replace {} there: chmod o-w {}",
                at.dir.display(),
                at.entry.display(),
                at.dir.display()
            ));
        }
        // A sticky directory keeps others from replacing an entry, but anyone may have
        // created it there (a system configuration directory pointed at a shared /tmp).
        at.other_owner.map(|uid| {
            format!(
                "{} belongs to uid {uid}, who could have put it in {}, where every user may create files: keep the file and the way to it where only root and its owner may write",
                at.entry.display(),
                at.dir.display()
            )
        })
    })
}

/// Whether a `statvfs` says its filesystem may be written (so that modes there matter);
/// one that cannot be read is taken as writable.
fn writable_mount(statvfs: rustix::io::Result<rustix::fs::StatVfs>) -> bool {
    statvfs.map_or(true, |s| {
        !s.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY)
    })
}

/// How many symlinks are followed on the way to a file, as the kernel follows at most 40.
const MAX_LINKS: usize = 40;

/// Where a path leads, resolved one entry at a time as the kernel would: the file's real
/// path, what `lstat` says of it, and the entries on the way ([`DirFacts`]). `None` when
/// the file does not exist; a symlink that leads to nothing is an error, as an
/// administrator meant something there, and so is a path that leads to anything but a
/// regular file (a directory, a FIFO, a device).
fn resolve_judged(path: &Path) -> io::Result<Option<(PathBuf, Metadata, Vec<DirFacts>)>> {
    use std::ffi::OsString;
    use std::path::Component;
    // The entries left to resolve, the next last; each names the symlink whose target it
    // comes from (an index into `links`), which leads to nothing if the entry is missing.
    let mut pending: Vec<(OsString, Option<usize>)> = Vec::new();
    let push = |pending: &mut Vec<(OsString, Option<usize>)>, path: &Path, from_link| {
        let names = path
            .components()
            .rev()
            .filter_map(|component| match component {
                Component::Normal(name) => Some(name.to_owned()),
                Component::ParentDir => Some("..".into()),
                Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
            });
        pending.extend(names.map(|name| (name, from_link)));
    };
    let mut at = if path.is_absolute() {
        PathBuf::from("/")
    } else {
        std::env::current_dir()?
    };
    push(&mut pending, path, None);
    let mut dirs = Vec::new();
    let mut links: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut last = None;
    while let Some((name, from_link)) = pending.pop() {
        if name == ".." {
            at.pop();
            // Where this leaves the path is a directory, whatever was looked at last.
            last = None;
            continue;
        }
        let entry = at.join(&name);
        let metadata = match fs::symlink_metadata(&entry) {
            Ok(metadata) => metadata,
            Err(e) if e.kind() == io::ErrorKind::NotFound && from_link.is_some() => {
                let (link, target) = from_link
                    .and_then(|index| links.get(index).cloned())
                    .unwrap_or_default();
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "{} is a symlink to {}, which does not exist",
                        link.display(),
                        target.display()
                    ),
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let uid = metadata.uid();
        dirs.push(DirFacts {
            mode: writable_mount(rustix::fs::statvfs(&at)).then_some(fs::metadata(&at)?.mode()),
            dir: at.clone(),
            entry: entry.clone(),
            other_owner: (uid != 0 && uid != current_euid()).then_some(uid),
        });
        if metadata.file_type().is_symlink() {
            if links.len() == MAX_LINKS {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "more than {MAX_LINKS} symlinks lead to it, or they form a loop (at {})",
                        entry.display()
                    ),
                ));
            }
            let target = fs::read_link(&entry)?;
            if target.is_absolute() {
                at = PathBuf::from("/");
            }
            push(&mut pending, &target, Some(links.len()));
            links.push((entry, target));
            last = None;
        } else {
            at = entry;
            last = Some(metadata);
        }
    }
    let Some(metadata) = last.filter(Metadata::is_file) else {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            at.display()
        )));
    };
    Ok(Some((at, metadata, dirs)))
}

/// Opens a file an administrator provides, or `None` when there is none. Symlinks are
/// followed (configuration management assembles such directories from them), but a symlink
/// to nothing is refused, as the defaults would otherwise apply without a word where an
/// administrator meant a file; so are a FIFO, a device or a directory (never opened: the
/// path is resolved and judged first), and a file that another user could change or have
/// planted, or a symlink or directory on the way to it ([`unsafe_to_trust`]). The real
/// path the judging found is then opened without following anything, and must still be the
/// file judged, so that nothing swapped in between is read. Each refusal names what to fix.
pub fn open_trusted(path: &Path) -> io::Result<Option<File>> {
    let Some((real, found, dirs)) = resolve_judged(path)? else {
        return Ok(None);
    };
    let file = open_nofollow(&real)?;
    let metadata = file.metadata()?;
    if (metadata.dev(), metadata.ino()) != (found.dev(), found.ino()) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} was replaced while it was read", real.display()),
        ));
    }
    let facts = TrustFacts {
        file: real,
        file_mode: metadata.mode(),
        file_read_only: !writable_mount(rustix::fs::fstatvfs(&file)),
        dirs,
    };
    if let Some(why) = unsafe_to_trust(&facts) {
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, why));
    }
    Ok(Some(file))
}

/// Reads at most `max + 1` bytes, so a caller can tell "at most `max`" from "more than `max`"
/// even if the file grew after it was checked.
pub fn read_bounded(file: &mut File, max: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn split(path: &Path) -> Result<(&Path, &std::ffi::OsStr), StoreError> {
    let invalid = || StoreError::InvalidPath {
        path: path.to_owned(),
    };
    let name = path.file_name().ok_or_else(invalid)?;
    let dir = path.parent().ok_or_else(invalid)?;
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    Ok((dir, name))
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| StoreError::SyncDir {
            dir: dir.to_owned(),
            source,
        })
}

/// A written and fsynced temporary file that removes itself unless disarmed.
struct TempFile {
    path: PathBuf,
    armed: bool,
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl TempFile {
    fn create(dir: &Path, name: &std::ffi::OsStr, bytes: &[u8], mode: u32) -> io::Result<TempFile> {
        let pid = std::process::id();
        let mut attempts = 0;
        let (path, mut file) = loop {
            let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
            let mut temp_name = std::ffi::OsString::from(".");
            temp_name.push(name);
            temp_name.push(format!(".{pid}.{n}.tmp"));
            let path = dir.join(temp_name);
            // create_new is O_EXCL: it never follows a symlink planted at the temporary name.
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(&path)
            {
                Ok(file) => break (path, file),
                // A leftover of a crashed process with a recycled pid: take the next name.
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists && attempts < 16 => {
                    attempts += 1;
                }
                Err(err) => return Err(err),
            }
        };
        let temp = TempFile { path, armed: true };
        // The umask may have taken bits away; say exactly what we mean.
        file.set_permissions(Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        Ok(temp)
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            // Best effort: a leftover temporary file is harmless and never read.
            let _ = fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests;
