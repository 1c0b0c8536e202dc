//! The errors of starting a sink. Delivery failures are not errors: they are counted.

use std::io;
use std::path::PathBuf;

/// Why a directory or file cannot hold records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UnsafePathReason {
    /// The directory path is not a directory.
    #[error("not a directory")]
    NotADirectory,
    /// Others may write to the directory and it has no sticky bit, so anyone could replace
    /// the file.
    #[error("writable by others without the sticky bit")]
    WritableByOthers,
    /// Another user owns the directory: they could replace or remove the file.
    #[error("owned by another user, who could replace or remove the record file")]
    OwnedByAnotherUser,
    /// The file is not a regular file.
    #[error("not a regular file")]
    NotRegularFile,
    /// The file belongs to another user.
    #[error("owned by another user")]
    NotOwnedByCurrentUser,
    /// The group or others may access the file.
    #[error("readable or writable by group or others")]
    InsecurePermissions,
}

/// A sink that cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The file name has neither `{user}` nor `{fingerprint}`.
    #[error("file name {filename:?} must contain {{user}} or {{fingerprint}}")]
    FilenamePlaceholderMissing { filename: String },
    /// The file name, once substituted, is not a single path component.
    #[error("file name {filename:?} is not a plain file name once substituted")]
    FilenameInvalid { filename: String },
    /// The directory's metadata could not be read.
    #[error("cannot inspect the sink directory {directory}: {source}")]
    DirectoryMetadata {
        directory: PathBuf,
        source: io::Error,
    },
    /// The directory is unsafe.
    #[error("the sink directory {directory} is {reason}")]
    DirectoryUnsafe {
        directory: PathBuf,
        reason: UnsafePathReason,
    },
    /// The file could not be opened (a symlink is refused here).
    #[error("cannot open the record file {path}: {source}")]
    OpenFile { path: PathBuf, source: io::Error },
    /// The file exists but is unsafe to append to.
    #[error("the record file {path} is {reason}")]
    FileUnsafe {
        path: PathBuf,
        reason: UnsafePathReason,
    },
    /// The file writer's thread could not be started.
    #[error("cannot start the record file writer: {source}")]
    SpawnWriter { source: io::Error },
    /// The URL does not parse or is not `http`/`https`. The URL is never shown: its query
    /// or user part may hold a credential.
    #[error("invalid sink URL: {reason}")]
    InvalidUrl { reason: &'static str },
    /// A header name or value is not valid HTTP (the value is never shown).
    #[error("invalid header {name:?}")]
    InvalidHeader { name: String },
    /// A `header_env` variable is unset or not Unicode.
    #[error("header {header:?} needs the environment variable {var}, which is not set")]
    HeaderEnvMissing { header: String, var: String },
    /// The TLS client configuration could not be built.
    #[error("cannot build the TLS client configuration")]
    Tls,
    /// The system random generator failed (span or trace ids).
    #[error("the system random generator failed")]
    Random,
}
