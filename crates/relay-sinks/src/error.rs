//! The errors of starting a sink. Delivery failures are not errors: they are counted.

use std::io;
use std::path::PathBuf;

use relay_plugins::config::{FilenameProblem, RecordFileProblem, SinkDirectoryProblem};

/// A sink that cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The file name gives no record file name (`filename` is the template).
    #[error("file name {filename:?} {problem}")]
    Filename {
        filename: String,
        problem: FilenameProblem,
    },
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
        reason: SinkDirectoryProblem,
    },
    /// The file could not be opened (a symlink is refused here).
    #[error("cannot open the record file {path}: {source}")]
    OpenFile { path: PathBuf, source: io::Error },
    /// The file exists but is unsafe to append to.
    #[error("the record file {path} is {reason}")]
    FileUnsafe {
        path: PathBuf,
        reason: RecordFileProblem,
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
