//! Where the binaries under test and the agent CLIs are, and the environment every process
//! the harness starts gets.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::error::Error;

/// The directory holding `relayd` and the other Relay binaries; `cargo xtask e2e` sets it
/// to `target/debug` after `cargo build --workspace --bins`.
pub const ENV_BIN_DIR: &str = "RELAY_BIN_DIR";
/// The directory holding `claude`, `codex` and `pi`; `cargo xtask e2e` installs them with
/// npm into `target/agent-clis` and sets it.
pub const ENV_AGENT_BIN_DIR: &str = "RELAY_AGENT_BIN_DIR";
/// The `node_modules` directory holding the official provider SDKs for Node
/// (`@anthropic-ai/sdk`, `openai`); `cargo xtask e2e` installs them into `target/sdks`.
pub const ENV_SDK_DIR: &str = "RELAY_SDK_DIR";
/// Set to `1` by `cargo xtask e2e`; informational, the tests run without it.
pub const ENV_E2E: &str = "RELAY_E2E";

/// The directory of the Relay binaries: `RELAY_BIN_DIR`, else the target directory the
/// test executable was built into (`target/debug/deps/e2e-…` → `target/debug`).
pub fn bin_dir() -> Result<PathBuf, Error> {
    if let Some(dir) = std::env::var_os(ENV_BIN_DIR).filter(|dir| !dir.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().map_err(|source| Error::CurrentExe { source })?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .ok_or(Error::NoBinDir { exe })
}

/// The path of a Relay binary (`relayd`, `relay-mcp`, …), which must exist.
pub fn binary(name: &str) -> Result<PathBuf, Error> {
    let dir = bin_dir()?;
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::BinaryMissing {
            binary: name.to_owned(),
            dir,
        })
    }
}

/// The path of an agent CLI (`claude`, `codex`, `pi`) under `RELAY_AGENT_BIN_DIR`.
///
/// There is deliberately no fallback (a global install, `PATH`): the tests are about the
/// pinned versions `cargo xtask e2e` installs, and a missing CLI fails the test.
pub fn agent_binary(name: &str) -> Result<PathBuf, Error> {
    let dir = std::env::var_os(ENV_AGENT_BIN_DIR)
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .ok_or(Error::AgentBinDirUnset)?;
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::AgentMissing {
            agent: name.to_owned(),
            dir,
        })
    }
}

/// The `node_modules` directory of the pinned provider SDKs, `RELAY_SDK_DIR`; as for the
/// agent CLIs, there is no fallback.
pub fn sdk_dir() -> Result<PathBuf, Error> {
    let dir = std::env::var_os(ENV_SDK_DIR)
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .ok_or(Error::SdkDirUnset)?;
    if dir.join("openai").is_dir() && dir.join("@anthropic-ai").join("sdk").is_dir() {
        Ok(dir)
    } else {
        Err(Error::SdkMissing { dir })
    }
}

/// The only variables a started process inherits from the test's environment; everything
/// else is cleared, and `HOME` always points into the test's temporary directory.
pub(crate) fn inherited_path() -> Option<OsString> {
    std::env::var_os("PATH")
}
