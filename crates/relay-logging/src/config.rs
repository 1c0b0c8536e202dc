//! Which events are logged and in which format, resolved from defaults, file, environment and flags.

use std::fmt;

use tracing_subscriber::EnvFilter;

/// Environment variable holding a level or a filter (`info`, `relay=debug,hyper=warn`).
pub const ENV_LOG: &str = "RELAY_LOG";
/// Environment variable holding the format: `human` or `jsonl`.
pub const ENV_LOG_FORMAT: &str = "RELAY_LOG_FORMAT";

/// The level names a bare directive may use; a bare word that is not one of these is refused
/// (tracing would read it as a target name and silently log nothing the operator expected).
const LEVEL_NAMES: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One readable line per event, no colours.
    Human,
    /// One JSON object per line (SPEC §10.3).
    Jsonl,
}

impl LogFormat {
    /// The name used in files, `RELAY_LOG_FORMAT` and `--log-format`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Human => "human",
            LogFormat::Jsonl => "jsonl",
        }
    }

    /// Parses `human` or `jsonl` (exactly, lowercase).
    pub fn from_name(name: &str) -> Option<LogFormat> {
        match name {
            "human" => Some(LogFormat::Human),
            "jsonl" => Some(LogFormat::Jsonl),
            _ => None,
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The effective logging configuration of one process. Plain data: build it with
/// [`LogConfig::resolve`], or by hand in tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// A level (`info`) or a filter in `tracing` directive syntax (`relay=debug,hyper=warn`).
    pub level: String,
    /// The line format.
    pub format: LogFormat,
}

/// Where a logging setting came from, so an error can name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogOrigin {
    /// The built-in default of the binary.
    Default,
    /// The configuration file (`[logging]` or `[daemon.logging]`).
    File,
    /// `RELAY_LOG` or `RELAY_LOG_FORMAT`.
    Env,
    /// `--log-level` or `--log-format`.
    Flag,
    /// A [`LogConfig`] handed directly to [`subscriber`](crate::subscriber) or [`init`](crate::init).
    Config,
}

impl LogOrigin {
    /// How the level setting of this origin is named in messages.
    fn level_name(self) -> &'static str {
        match self {
            LogOrigin::Default => "the default log level",
            LogOrigin::File => "the config file key `level`",
            LogOrigin::Env => "the environment variable RELAY_LOG",
            LogOrigin::Flag => "the flag --log-level",
            LogOrigin::Config => "the log configuration",
        }
    }

    /// How the format setting of this origin is named in messages.
    fn format_name(self) -> &'static str {
        match self {
            LogOrigin::Default => "the default log format",
            LogOrigin::File => "the config file key for the log format",
            LogOrigin::Env => "the environment variable RELAY_LOG_FORMAT",
            LogOrigin::Flag => "the flag --log-format",
            LogOrigin::Config => "the log configuration",
        }
    }
}

/// A logging setting that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogConfigError {
    /// The level or filter does not parse, or a bare word is not a level name.
    #[error("invalid log level or filter {value:?} in {}: {reason}", .origin.level_name())]
    InvalidLevel {
        origin: LogOrigin,
        value: String,
        reason: String,
    },
    /// The format is neither `human` nor `jsonl`.
    #[error("invalid log format {value:?} in {}: expected \"human\" or \"jsonl\"", .origin.format_name())]
    InvalidFormat { origin: LogOrigin, value: String },
}

impl LogConfig {
    /// The daemon's defaults (`[daemon.logging]`): `info`, JSON lines.
    pub fn daemon_default() -> LogConfig {
        LogConfig {
            level: "info".to_owned(),
            format: LogFormat::Jsonl,
        }
    }

    /// The defaults of workers, MCPs and hooks (`[logging]`): `warn`, human lines.
    pub fn client_default() -> LogConfig {
        LogConfig {
            level: "warn".to_owned(),
            format: LogFormat::Human,
        }
    }

    /// Resolves the effective configuration with the precedence defaults < file < env < flags.
    ///
    /// Every value that is given is checked, also one that a later source overrides: a typo in
    /// the config file is reported even when a flag happens to hide it, as for every other key.
    /// An empty or blank environment value counts as unset (shells and service managers often
    /// export empty variables); an empty value from a file or flag is an error.
    /// The caller reads the environment and passes the values in.
    /// The configuration of a client process (`relay-mcp`, `relay-worker`): the client
    /// defaults, overridden by `[logging] level` of its config file, then by `RELAY_LOG`
    /// and `RELAY_LOG_FORMAT`.
    pub fn client(
        file_level: Option<&str>,
        env_log: Option<&str>,
        env_format: Option<&str>,
    ) -> Result<LogConfig, LogConfigError> {
        LogConfig::resolve(
            file_level,
            None,
            env_log,
            env_format,
            None,
            None,
            LogConfig::client_default(),
        )
    }

    pub fn resolve(
        file_level: Option<&str>,
        file_format: Option<&str>,
        env_log: Option<&str>,
        env_format: Option<&str>,
        flag_level: Option<&str>,
        flag_format: Option<&str>,
        defaults: LogConfig,
    ) -> Result<LogConfig, LogConfigError> {
        let env_log = env_log.filter(|value| !value.trim().is_empty());
        let env_format = env_format.filter(|value| !value.trim().is_empty());

        check_level(&defaults.level, LogOrigin::Default)?;
        let mut resolved = defaults;
        let levels = [
            (file_level, LogOrigin::File),
            (env_log, LogOrigin::Env),
            (flag_level, LogOrigin::Flag),
        ];
        for (value, origin) in levels {
            if let Some(value) = value {
                resolved.level = check_level(value, origin)?;
            }
        }
        let formats = [
            (file_format, LogOrigin::File),
            (env_format, LogOrigin::Env),
            (flag_format, LogOrigin::Flag),
        ];
        for (value, origin) in formats {
            if let Some(value) = value {
                resolved.format = check_format(value, origin)?;
            }
        }
        Ok(resolved)
    }

    /// Builds the `EnvFilter` for this configuration.
    pub(crate) fn filter(&self) -> Result<EnvFilter, LogConfigError> {
        let level = check_level(&self.level, LogOrigin::Config)?;
        let filter = parse_filter(&level).map_err(|reason| LogConfigError::InvalidLevel {
            origin: LogOrigin::Config,
            value: self.level.clone(),
            reason,
        })?;
        Ok(hold_peer_facing_libraries(
            cap_frame_logging(filter),
            &level,
        ))
    }
}

fn check_format(value: &str, origin: LogOrigin) -> Result<LogFormat, LogConfigError> {
    LogFormat::from_name(value.trim()).ok_or_else(|| LogConfigError::InvalidFormat {
        origin,
        value: value.to_owned(),
    })
}

/// Checks a level or filter and returns it trimmed.
fn check_level(value: &str, origin: LogOrigin) -> Result<String, LogConfigError> {
    let invalid = |reason: String| LogConfigError::InvalidLevel {
        origin,
        value: value.to_owned(),
        reason,
    };
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(invalid("it is empty".to_owned()));
    }
    for directive in trimmed.split(',').map(str::trim) {
        if directive.is_empty() {
            return Err(invalid("it has an empty directive".to_owned()));
        }
        let is_bare_word = !directive.contains(['=', '[']);
        if is_bare_word && !LEVEL_NAMES.contains(&directive.to_ascii_lowercase().as_str()) {
            return Err(invalid(format!(
                "{directive:?} is not a level; use error, warn, info, debug, trace or off, or target=level"
            )));
        }
    }
    parse_filter(trimmed).map_err(invalid)?;
    Ok(trimmed.to_owned())
}

/// The WebSocket library logs every control frame whole at `trace`, and control frames
/// carry route credentials, grants and generation secrets, which no level may log (§4.1):
/// when the filter lets `trace` through, the WebSocket crates are held at `debug`.
fn cap_frame_logging(filter: EnvFilter) -> EnvFilter {
    if filter.max_level_hint() != Some(tracing_subscriber::filter::LevelFilter::TRACE) {
        return filter;
    }
    ["tungstenite=debug", "tokio_tungstenite=debug"]
        .into_iter()
        .filter_map(|directive| directive.parse().ok())
        .fold(filter, EnvFilter::add_directive)
}

/// The libraries that read what peers send: TLS, HTTP/2 and HTTP/1, WebSocket. Their
/// warnings describe a peer's bytes (an IP address as the server name, a ping nobody sent),
/// one line per connection or per frame, so any local user (or, for a daemon serving
/// HTTPS, any network peer) could set the log's volume: fill a disk, or drown the lifecycle
/// events in what journald's rate limit lets through. A directive's target matches every
/// target it begins, so `hyper` also holds `hyper_util` and `hyper_rustls`.
const PEER_FACING_LIBRARIES: [&str; 6] = [
    "h2",
    "hyper",
    "rustls",
    "tokio_rustls",
    "tungstenite",
    "tokio_tungstenite",
];

/// At the levels a service runs at (`warn` and `info` as the filter's default), the
/// libraries of [`PEER_FACING_LIBRARIES`] say only errors, unless a directive sets the
/// library itself (`info,h2=debug`). A directive for one of its modules or spans
/// (`rustls::msgs=off`, `h2[conn]=debug`) applies there, being more specific, and leaves the
/// rest of the library held. Relay's own lines about what peers do are rate-limited where
/// they could come in floods. At `debug` and `trace` the operator asked for everything and
/// gets it; at `error` and `off` there is nothing to hold.
fn hold_peer_facing_libraries(filter: EnvFilter, directives: &str) -> EnvFilter {
    let directives: Vec<&str> = directives.split(',').map(str::trim).collect();
    let default = directives
        .iter()
        .rev()
        .find(|directive| !directive.contains(['=', '[']))
        .map(|level| level.to_ascii_lowercase());
    if !matches!(default.as_deref(), Some("warn" | "info")) {
        return filter;
    }
    // Only a directive with the same target and no span would be replaced by the cap.
    let set_by_the_filter = |library: &str| {
        directives.iter().any(|directive| {
            directive
                .split_once('=')
                .is_some_and(|(target, _)| target == library)
        })
    };
    PEER_FACING_LIBRARIES
        .into_iter()
        .filter(|library| !set_by_the_filter(library))
        .filter_map(|library| format!("{library}=error").parse().ok())
        .fold(filter, EnvFilter::add_directive)
}

fn parse_filter(value: &str) -> Result<EnvFilter, String> {
    EnvFilter::builder()
        .parse(value)
        .map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests;
