//! The state directory layout of §4.4 and the system configuration directory of §8.

use std::path::{Path, PathBuf};

use crate::env::{Env, names};

/// No state directory base could be found.
#[derive(Debug, thiserror::Error)]
pub enum PathsError {
    /// None of `XDG_CONFIG_HOME`, `HOME`, `USERPROFILE` is set to an absolute path.
    #[error("no state directory: set XDG_CONFIG_HOME, HOME or USERPROFILE to an absolute path")]
    NoBase,
}

/// Where a machine-user's Relay state lives: `<base>/relay/...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatePaths {
    base: PathBuf,
}

impl StatePaths {
    /// Resolves the base per §4.4: `XDG_CONFIG_HOME`, else `$HOME/.config`, else
    /// `$USERPROFILE/.config`.
    ///
    /// A variable that is empty or not an absolute path is passed over, as the XDG base directory
    /// specification asks: a relative base would make the state depend on the working directory.
    pub fn resolve(env: &impl Env) -> Result<StatePaths, PathsError> {
        if let Some(xdg) = absolute(env, names::XDG_CONFIG_HOME) {
            return Ok(StatePaths { base: xdg });
        }
        for home_var in [names::HOME, names::USERPROFILE] {
            if let Some(home) = absolute(env, home_var) {
                return Ok(StatePaths {
                    base: home.join(".config"),
                });
            }
        }
        Err(PathsError::NoBase)
    }

    /// State paths under an explicit base (e.g. `relayd --state-dir`'s parent, or a test dir).
    pub fn from_base(base: impl Into<PathBuf>) -> StatePaths {
        StatePaths { base: base.into() }
    }

    /// The base directory (`$XDG_CONFIG_HOME` or `$HOME/.config`).
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// `<base>/relay`.
    pub fn relay_dir(&self) -> PathBuf {
        self.base.join("relay")
    }

    /// `<base>/relay/daemon`: keys, pins and daemon state.
    pub fn daemon_dir(&self) -> PathBuf {
        self.relay_dir().join("daemon")
    }

    /// `<base>/relay/daemon/machine-identity.pk8`.
    pub fn machine_key_file(&self) -> PathBuf {
        self.daemon_dir().join("machine-identity.pk8")
    }

    /// `<base>/relay/daemon/daemon-identity.pk8`.
    pub fn daemon_key_file(&self) -> PathBuf {
        self.daemon_dir().join("daemon-identity.pk8")
    }

    /// `<base>/relay/daemon/pins`.
    pub fn pins_dir(&self) -> PathBuf {
        self.daemon_dir().join("pins")
    }

    /// `<base>/relay/.client-token`.
    pub fn token_file(&self) -> PathBuf {
        self.relay_dir().join(".client-token")
    }

    /// `<base>/relay/logs`.
    pub fn logs_dir(&self) -> PathBuf {
        self.relay_dir().join("logs")
    }

    /// `<base>/relay/config.toml`.
    pub fn user_config_file(&self) -> PathBuf {
        self.relay_dir().join("config.toml")
    }

    /// `<base>/relay/plugins.toml`.
    pub fn user_plugins_file(&self) -> PathBuf {
        self.relay_dir().join("plugins.toml")
    }
}

/// The system configuration directory: `RELAY_SYSTEM_CONFIG_DIR` if set, else `/etc/relay`
/// (`%ProgramData%\relay` on Windows).
pub fn system_config_dir(env: &impl Env) -> PathBuf {
    if let Some(dir) = env.non_empty(names::RELAY_SYSTEM_CONFIG_DIR) {
        return PathBuf::from(dir);
    }
    default_system_config_dir(env)
}

/// `<system config dir>/plugins.toml`, the organisation's plugins (§8.1).
pub fn system_plugins_file(env: &impl Env) -> PathBuf {
    system_config_dir(env).join("plugins.toml")
}

/// `<system config dir>/daemon-identity.pub`, the administrator-provisioned daemon pin (§4.3).
pub fn provisioned_daemon_key_file(env: &impl Env) -> PathBuf {
    system_config_dir(env).join("daemon-identity.pub")
}

#[cfg(not(windows))]
fn default_system_config_dir(_env: &impl Env) -> PathBuf {
    PathBuf::from("/etc/relay")
}

#[cfg(windows)]
fn default_system_config_dir(env: &impl Env) -> PathBuf {
    let program_data = env
        .non_empty(names::PROGRAM_DATA)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(r"C:\ProgramData"));
    program_data.join("relay")
}

fn absolute(env: &impl Env, key: &str) -> Option<PathBuf> {
    env.non_empty(key)
        .map(PathBuf::from)
        .filter(|path| path.is_absolute())
}

#[cfg(test)]
mod tests;
