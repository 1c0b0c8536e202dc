//! `plugins.toml` (SPEC §8.1) for the worker: reading the two files, boundedly, and handing
//! their texts to `relay_plugins::config`, which holds every parsing and validation rule
//! (version 1, unknown keys, settings only in the system file, system components shadowing
//! user ones, typed component configurations).
//! The worker hosts the enabled components with [`crate::worker::PluginHost`].

use std::path::Path;

use relay_plugins::config::{DirectoryFacts, RecordFileFacts};

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

    /// Checks every enabled file sink as it will be when the worker opens its record file:
    /// the directory (it must exist, be a directory, and not be writable by others unless
    /// sticky), then the record file for
    /// `user` (see [`sink_user_name`]) and `fingerprint` (`None` when there is no machine key
    /// yet): an existing file the sink would refuse or could not open, or a directory this
    /// process's user cannot create the file in, is an error in the sink's own words, naming
    /// the component and the field. The worker runs this before it starts its sinks, and
    /// `relay-doctor` runs it to say whether the worker would start. It creates nothing: the
    /// write access is asked with access(2).
    pub fn check_file_sinks(
        &self,
        user: &str,
        fingerprint: Option<&str>,
    ) -> Result<(), PluginConfigError> {
        self.inner.check_file_sinks(user, fingerprint, &mut Disk)
    }

    /// The validated configuration, with the typed component configurations.
    pub fn config(&self) -> &relay_plugins::Plugins {
        &self.inner
    }
}

/// The OS user name a file sink's `{user}` stands for: from the password database by the
/// real uid (so that it cannot be chosen through the environment), else the variable
/// `USER` (`USERNAME` elsewhere than unix) as `variable` reads it, else the numeric uid.
/// The worker and `relay-doctor` both name the record file with it.
pub fn sink_user_name(variable: impl FnOnce(&str) -> Option<String>) -> String {
    let user_variable = variable(if cfg!(unix) { "USER" } else { "USERNAME" });
    #[cfg(unix)]
    {
        let uid = rustix::process::getuid().as_raw();
        if let Ok(passwd) = std::fs::read_to_string("/etc/passwd") {
            for line in passwd.lines() {
                let mut fields = line.split(':');
                let (Some(name), Some(_), Some(id)) = (fields.next(), fields.next(), fields.next())
                else {
                    continue;
                };
                if id.parse::<u32>() == Ok(uid) && !name.is_empty() {
                    return name.to_owned();
                }
            }
        }
        user_variable.unwrap_or_else(|| uid.to_string())
    }
    #[cfg(not(unix))]
    {
        user_variable.unwrap_or_else(|| "user".to_owned())
    }
}

/// The sink checks' questions, answered from the disk.
struct Disk;

impl relay_plugins::config::SinkFiles for Disk {
    fn directory(&mut self, directory: &Path) -> std::io::Result<DirectoryFacts> {
        let euid = relay_identity::store::current_euid();
        Ok(DirectoryFacts::of(&std::fs::metadata(directory)?, euid))
    }

    fn record_file(&mut self, file: &Path) -> std::io::Result<Option<RecordFileFacts>> {
        match std::fs::symlink_metadata(file) {
            Ok(metadata) => Ok(Some(RecordFileFacts::of(
                &metadata,
                relay_identity::store::current_euid(),
            ))),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err),
        }
    }

    fn may_open(&mut self, file: &Path) -> std::io::Result<()> {
        may_access(file, Access::Open)
    }

    fn may_create_in(&mut self, directory: &Path) -> std::io::Result<()> {
        may_access(directory, Access::CreateIn)
    }
}

#[derive(Clone, Copy)]
enum Access {
    /// Read and write, as the sink opens its file.
    Open,
    /// Write and search, to create a file in a directory.
    CreateIn,
}

/// access(2) for the effective user, as an open would judge it (a read-only mount
/// included), without creating anything.
#[cfg(unix)]
fn may_access(path: &Path, access: Access) -> std::io::Result<()> {
    use rustix::fs::Access as Mode;
    let mode = match access {
        Access::Open => Mode::READ_OK | Mode::WRITE_OK,
        Access::CreateIn => Mode::WRITE_OK | Mode::EXEC_OK,
    };
    // By the real ids, which are the effective ones here (nothing of Relay's is setuid):
    // asking by the effective ones (`AT_EACCESS`) needs faccessat2, which older container
    // seccomp profiles refuse with EPERM, and that would read as the file being refused.
    rustix::fs::accessat(rustix::fs::CWD, path, mode, rustix::fs::AtFlags::empty())
        .map_err(std::io::Error::from)
}

/// Elsewhere the open itself is the only judge.
#[cfg(not(unix))]
fn may_access(_path: &Path, _access: Access) -> std::io::Result<()> {
    Ok(())
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
