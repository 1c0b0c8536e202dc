//! `plugins.toml` (SPEC §8.1) for the worker: reading the two files, boundedly, and handing
//! their texts to `relay_plugins::config`, which holds every parsing and validation rule
//! (version 1, unknown keys, settings only in the system file, system components shadowing
//! user ones, typed component configurations).
//! The worker hosts the enabled components with [`crate::worker::PluginHost`].

use std::path::Path;

pub use relay_plugins::config::{
    Component, ComponentConfig, ComponentKind, FAILURE_REASON, FieldPath, KEPT_FROM_WORKERS,
    PluginConfigError, PluginFile,
};

/// The largest `plugins.toml` read; a larger file is refused rather than read whole.
pub const MAX_PLUGIN_FILE_BYTES: u64 = 1 << 20;

/// The effective plugin configuration of a worker.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plugins {
    inner: relay_plugins::Plugins,
}

impl Plugins {
    /// Reads the system file and, when it sets `allow_user_components = true`, the user
    /// file. A missing file is no components; any other problem is an error.
    pub fn load(
        system_file: &Path,
        user_file: Option<&Path>,
    ) -> Result<Plugins, PluginConfigError> {
        let inner = relay_plugins::Plugins::load_with(system_file, user_file, read_optional)?;
        Ok(Plugins { inner })
    }

    /// The effective components: the system file's in order, then the user file's that no
    /// system component shadows.
    pub fn components(&self) -> &[Component] {
        self.inner.components()
    }

    /// The enabled components, in order.
    pub fn enabled(&self) -> impl Iterator<Item = &Component> {
        self.inner.enabled()
    }

    /// What the system file's `[settings] allow_user_components` says.
    pub fn allows_user_components(&self) -> bool {
        self.inner.allows_user_components()
    }

    /// Checks the directory of every enabled file sink on disk (it must exist, be a
    /// directory, and not be writable by others unless sticky); the error names the
    /// component, its `directory` field and the file. The worker runs this before it opens
    /// any sink, and `relay-doctor` reports the same error.
    pub fn check_sink_directories(&self) -> Result<(), PluginConfigError> {
        self.inner
            .check_sink_directories(|dir| Ok(directory_facts(&std::fs::metadata(dir)?)))
    }

    /// The validated configuration, with the typed component configurations.
    pub fn config(&self) -> &relay_plugins::Plugins {
        &self.inner
    }
}

#[cfg(unix)]
fn directory_facts(metadata: &std::fs::Metadata) -> relay_plugins::config::DirectoryFacts {
    use std::os::unix::fs::MetadataExt as _;
    relay_plugins::config::DirectoryFacts {
        is_dir: metadata.is_dir(),
        mode: metadata.mode() & 0o7777,
        owner: metadata.uid(),
        euid: relay_identity::store::current_euid(),
    }
}

/// Elsewhere the directory's ACL is the operating system's business.
#[cfg(not(unix))]
fn directory_facts(metadata: &std::fs::Metadata) -> relay_plugins::config::DirectoryFacts {
    relay_plugins::config::DirectoryFacts {
        is_dir: metadata.is_dir(),
        mode: 0o700,
        owner: 0,
        euid: 0,
    }
}

/// The file's text, `None` when it does not exist; at most `MAX_PLUGIN_FILE_BYTES`, read
/// as `config.toml` is (no FIFO, no file others could change: it holds the policy).
fn read_optional(path: &Path) -> Result<Option<String>, PluginConfigError> {
    crate::config::read_trusted_text(path, MAX_PLUGIN_FILE_BYTES).map_err(|source| {
        if source.kind() == std::io::ErrorKind::FileTooLarge {
            PluginConfigError::TooLarge {
                path: path.to_owned(),
                limit: MAX_PLUGIN_FILE_BYTES,
            }
        } else {
            PluginConfigError::Read {
                path: path.to_owned(),
                source,
            }
        }
    })
}

#[cfg(test)]
mod tests;
