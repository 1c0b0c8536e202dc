//! Putting a generated bundle on disk: into a new or empty directory, never over a
//! different bundle.

use std::path::{Path, PathBuf};

use relay_identity::bundle::{BundleReadError, Difference, compare, hashes, read_bundle_dir};

use super::BundleFile;

/// What writing did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteOutcome {
    /// The bundle was written.
    Written,
    /// The directory already held exactly this bundle; nothing was touched.
    AlreadyIdentical,
}

/// Why the bundle was not written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    #[error(
        "{output} already holds a different bundle ({} is {}); it is never overwritten: remove it or choose another --output",
        .first.path(), .first.kind()
    )]
    Different { output: PathBuf, first: Difference },
    #[error("{0} exists and is not a directory")]
    NotADirectory(PathBuf),
    #[error(transparent)]
    Read(#[from] BundleReadError),
    #[error("writing {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WriteError + '_ {
    move |source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `files` to `output`. A missing directory is created (through a staging directory
/// beside it, renamed into place, so a reader never sees half a bundle); an empty one is
/// filled; one holding exactly these files is left alone; anything else is refused.
pub(crate) fn write_bundle(
    output: &Path,
    files: &[BundleFile],
) -> Result<WriteOutcome, WriteError> {
    if let Some(outcome) = check_existing(output, files)? {
        return Ok(outcome);
    }
    if output.exists() {
        // An existing empty directory: fill it in place. Its mode is its owner's choice
        // (a group may share it, and it may not be ours to change); `hidden_by` says when it
        // keeps other users out.
        write_files(output, files)?;
        return Ok(WriteOutcome::Written);
    }
    let parent = match output.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    create_missing_dirs(&parent)?;
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bundle".to_owned());
    let staging = parent.join(format!(".{name}.partial-{}", std::process::id()));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io(&staging))?;
    }
    create_dir(&staging)?;
    let result = write_files(&staging, files)
        .and_then(|()| std::fs::rename(&staging, output).map_err(io(output)));
    match result {
        Ok(()) => Ok(WriteOutcome::Written),
        Err(error) => {
            let _ = std::fs::remove_dir_all(&staging);
            // Another run may have created the directory meanwhile: judge what it wrote.
            match check_existing(output, files)? {
                Some(outcome) => Ok(outcome),
                None => Err(error),
            }
        }
    }
}

/// `Some` when `output` exists and is not an empty directory: identical, or an error. A
/// symbolic link is judged by the directory it points at (deployments often point a fixed
/// path at a versioned bundle).
fn check_existing(output: &Path, files: &[BundleFile]) -> Result<Option<WriteOutcome>, WriteError> {
    let meta = match std::fs::metadata(output) {
        Ok(meta) => meta,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(WriteError::Io {
                path: output.to_path_buf(),
                source,
            });
        }
    };
    if !meta.is_dir() {
        return Err(WriteError::NotADirectory(output.to_path_buf()));
    }
    let existing = read_bundle_dir(output)?;
    if existing.is_empty() {
        let mut entries = std::fs::read_dir(output).map_err(io(output))?;
        if entries.next().is_none() {
            return Ok(None);
        }
    }
    let expected = hashes(files.iter().map(|f| (f.path.as_str(), f.bytes.as_slice())));
    let actual = hashes(existing.iter().map(|(p, b)| (p.as_str(), b.as_slice())));
    match compare(&expected, &actual).into_iter().next() {
        None => Ok(Some(WriteOutcome::AlreadyIdentical)),
        Some(first) => Err(WriteError::Different {
            output: output.to_path_buf(),
            first,
        }),
    }
}

fn write_files(root: &Path, files: &[BundleFile]) -> Result<(), WriteError> {
    for file in files {
        let path = file
            .path
            .split('/')
            .fold(root.to_path_buf(), |path, part| path.join(part));
        if let Some(parent) = path.parent() {
            let mut missing = Vec::new();
            let mut dir = parent;
            while dir != root && !dir.exists() {
                missing.push(dir.to_path_buf());
                match dir.parent() {
                    Some(up) => dir = up,
                    None => break,
                }
            }
            for dir in missing.iter().rev() {
                create_dir(dir)?;
            }
        }
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        set_mode(&mut options, 0o644);
        let mut handle = options.open(&path).map_err(io(&path))?;
        std::io::Write::write_all(&mut handle, &file.bytes).map_err(io(&path))?;
        handle.sync_all().map_err(io(&path))?;
        // The umask may have taken bits away: every user must be able to read the bundle.
        set_permissions(&path, 0o644)?;
    }
    Ok(())
}

/// The directories on the way to `output`, itself included, that not every user may pass
/// through: each hides the bundle from agents run by other users. Those relayd creates are
/// 0755; those that existed keep their owner's mode, so the caller says so instead.
pub(crate) fn hidden_by(output: &Path) -> Vec<(PathBuf, u32)> {
    let mut on_the_way: Vec<(PathBuf, u32)> = relay_identity::bundle::ancestors_of(output)
        .unwrap_or_default()
        .into_iter()
        .map(|dir| (dir.full, dir.mode))
        .collect();
    #[cfg(unix)]
    if let Ok(meta) = std::fs::metadata(output) {
        use std::os::unix::fs::MetadataExt as _;
        on_the_way.push((output.to_path_buf(), meta.mode() & 0o7777));
    }
    on_the_way.retain(|(_, mode)| cfg!(unix) && mode & 0o001 == 0);
    on_the_way
}

/// Creates `dir` and the directories above it that are missing, each 0755 whatever the
/// umask: a directory that only its owner may enter would hide the bundle from every agent
/// run by another user.
fn create_missing_dirs(dir: &Path) -> Result<(), WriteError> {
    let mut missing = Vec::new();
    let mut current = Some(dir);
    while let Some(path) = current
        && !path.as_os_str().is_empty()
        && !path.exists()
    {
        missing.push(path);
        current = path.parent();
    }
    for path in missing.into_iter().rev() {
        match std::fs::create_dir(path) {
            Ok(()) => set_permissions(path, 0o755)?,
            // Another run made it meanwhile.
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(source) => return Err(io(path)(source)),
        }
    }
    Ok(())
}

fn create_dir(dir: &Path) -> Result<(), WriteError> {
    std::fs::create_dir(dir).map_err(io(dir))?;
    set_permissions(dir, 0o755)
}

#[cfg(unix)]
fn set_mode(options: &mut std::fs::OpenOptions, mode: u32) {
    use std::os::unix::fs::OpenOptionsExt as _;
    options.mode(mode);
}

#[cfg(not(unix))]
fn set_mode(_options: &mut std::fs::OpenOptions, _mode: u32) {}

#[cfg(unix)]
fn set_permissions(path: &Path, mode: u32) -> Result<(), WriteError> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io(path))
}

#[cfg(not(unix))]
fn set_permissions(_path: &Path, _mode: u32) -> Result<(), WriteError> {
    Ok(())
}
