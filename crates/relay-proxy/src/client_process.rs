//! The start of a client process (`relay-mcp`, `relay-worker`): its configuration from the
//! standard files, logging on stderr, and a small runtime.

use std::process::ExitCode;

use relay_identity::{Env, names};
use relay_logging::LogConfig;

use crate::config::Config;

/// Loads the client configuration, installs logging (`[logging] level`, then `RELAY_LOG`
/// and `RELAY_LOG_FORMAT`), warns about unknown keys, and builds a runtime of at most two
/// threads, one per CPU the process may use ([`crate::runtime::build`]). A configuration
/// error is a usage error (64) named after `binary`.
pub fn start(binary: &str, env: &impl Env) -> Result<(Config, tokio::runtime::Runtime), ExitCode> {
    let (config, ignored) =
        Config::load_client_from(env).map_err(|error| relay_logging::usage_exit(binary, &error))?;
    let text = |name: &str| env.var_os(name).map(|v| v.to_string_lossy().into_owned());
    let log = LogConfig::client(
        Some(&config.logging.level),
        text(names::RELAY_LOG).as_deref(),
        text(names::RELAY_LOG_FORMAT).as_deref(),
    )
    .map_err(|error| relay_logging::usage_exit(binary, &error))?;
    relay_logging::init(&log, std::io::stderr)
        .map_err(|error| relay_logging::usage_exit(binary, &error))?;
    for key in ignored {
        tracing::warn!(event = "config_key_unknown", file = %key.path.display(), key = %key.key, "unknown configuration key ignored");
    }
    let runtime = crate::runtime::build(MAX_THREADS).map_err(|error| {
        relay_logging::say!("{binary}: cannot start the async runtime: {error}");
        ExitCode::FAILURE
    })?;
    Ok((config, runtime))
}

/// A client process's work is one user's requests: two threads are plenty.
const MAX_THREADS: std::num::NonZeroUsize = std::num::NonZeroUsize::new(2).unwrap();
