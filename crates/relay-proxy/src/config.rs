//! Configuration files (SPEC §8): `config.toml` with `[upstream]`, `[daemon]`,
//! `[daemon.timers]`, `[daemon.logging]`, `[worker]` and `[logging]`.
//!
//! Values come from defaults < user file < system file (< env < flags, applied by the
//! binaries). The daemon is strict: an unknown key or a bad value names its file and key and
//! stops start-up. Workers, MCPs and hooks ignore `[daemon…]` tables and only warn about
//! other unknown keys, so one system file can serve mixed versions during an upgrade.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::Uri;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Every configuration value, with the defaults of SPEC §8.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    pub upstream: UpstreamConfig,
    pub daemon: DaemonConfig,
    pub worker: WorkerConfig,
    pub logging: LoggingConfig,
}

/// `[upstream]`: where provider requests go.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UpstreamConfig {
    pub openai_base_url: BaseUrl,
    pub anthropic_base_url: BaseUrl,
    pub chatgpt_codex_base_url: BaseUrl,
    pub connect_timeout_secs: Secs,
    /// Zero means no response-header deadline.
    pub response_timeout_secs: Secs,
    /// Egress proxy (http or https CONNECT); empty for none. `NO_PROXY` is honoured.
    pub proxy_url: String,
    /// Upstreams a caller may select with `x-relay-upstream-base-url`, matched exactly
    /// after normalization.
    pub allowed_base_urls: Vec<BaseUrl>,
    pub daemon_keys: DaemonKeys,
    pub openai_api_key_file: String,
    pub anthropic_api_key_file: String,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            openai_base_url: BaseUrl::from_static(DEFAULT_OPENAI_BASE_URL),
            anthropic_base_url: BaseUrl::from_static("https://api.anthropic.com"),
            chatgpt_codex_base_url: BaseUrl::from_static("https://chatgpt.com/backend-api/codex"),
            connect_timeout_secs: Secs::from_secs(10),
            response_timeout_secs: Secs::from_secs(0),
            proxy_url: String::new(),
            allowed_base_urls: Vec::new(),
            daemon_keys: DaemonKeys::BoundOnly,
            openai_api_key_file: String::new(),
            anthropic_api_key_file: String::new(),
        }
    }
}

/// The OpenAI base that ChatGPT sign-in rerouting requires (§3.2).
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// When the daemon may add its own provider keys in `--pass-through` (§3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DaemonKeys {
    /// Only for requests that carry a bound route credential.
    BoundOnly,
    /// For any local request meeting the other conditions.
    AnyLocal,
}

/// `[daemon]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DaemonConfig {
    pub max_request_body_bytes: u64,
    pub max_hook_body_bytes: u64,
    pub max_connections: usize,
    /// Connections at once from one non-loopback peer address (loopback peers are not
    /// counted: every local user shares 127.0.0.1).
    pub max_connections_per_ip: usize,
    pub max_requests_per_identity: u32,
    pub max_tokens_per_identity: u8,
    pub max_sessions_per_route: u32,
    pub activation_wait_ms: u64,
    pub keepalive_idle_secs: Secs,
    pub stream_idle_secs: Secs,
    pub max_routes: u32,
    pub max_control_sessions_per_ip: u32,
    pub binding_tombstone_days: u32,
    pub status_public: bool,
    pub allowed_origins: Vec<String>,
    pub worker_networks: Vec<ipnet::Ipv4Net>,
    pub timers: TimersConfig,
    pub logging: DaemonLoggingConfig,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            max_request_body_bytes: 32 * 1024 * 1024,
            max_hook_body_bytes: 1024 * 1024,
            max_connections: 10_000,
            max_connections_per_ip: 256,
            max_requests_per_identity: 256,
            max_tokens_per_identity: 4,
            max_sessions_per_route: 64,
            activation_wait_ms: 2000,
            keepalive_idle_secs: Secs::from_secs(90),
            stream_idle_secs: Secs::from_secs(600),
            max_routes: 4096,
            max_control_sessions_per_ip: 256,
            binding_tombstone_days: 30,
            status_public: false,
            allowed_origins: Vec::new(),
            worker_networks: Vec::new(),
            timers: TimersConfig::default(),
            logging: DaemonLoggingConfig::default(),
        }
    }
}

/// `[daemon.timers]`: sent to clients in `Registered`; shortened only in tests. Every
/// `_secs` value may be fractional so tests can run in well under a second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TimersConfig {
    pub drain_secs: Secs,
    pub reconnect_grace_secs: Secs,
    pub retry_base_ms: u64,
    pub retry_cap_secs: Secs,
    pub startup_progress_secs: Secs,
    pub ping_secs: Secs,
    pub pong_timeout_secs: Secs,
    pub header_read_timeout_secs: Secs,
    pub challenge_ttl_secs: Secs,
    pub challenge_window_secs: Secs,
    pub challenge_limit: u32,
    pub reconnect_first_ms: u64,
    pub reconnect_cap_ms: u64,
    pub reconnect_attempt_timeout_secs: Secs,
}

impl Default for TimersConfig {
    fn default() -> Self {
        TimersConfig {
            drain_secs: Secs::from_secs(120),
            reconnect_grace_secs: Secs::from_secs(30),
            retry_base_ms: 1000,
            retry_cap_secs: Secs::from_secs(60),
            startup_progress_secs: Secs::from_secs(60),
            ping_secs: Secs::from_secs(30),
            pong_timeout_secs: Secs::from_secs(10),
            header_read_timeout_secs: Secs::from_secs(10),
            challenge_ttl_secs: Secs::from_secs(30),
            challenge_window_secs: Secs::from_secs(15),
            challenge_limit: 16,
            reconnect_first_ms: 250,
            reconnect_cap_ms: 2000,
            reconnect_attempt_timeout_secs: Secs::from_secs(5),
        }
    }
}

impl TimersConfig {
    /// The timers as the control protocol sends them to clients.
    pub fn to_wire(&self) -> relay_proto::Timers {
        let ms = |s: &Secs| u64::try_from(s.0.as_millis()).unwrap_or(u64::MAX);
        relay_proto::Timers {
            drain_ms: ms(&self.drain_secs),
            reconnect_grace_ms: ms(&self.reconnect_grace_secs),
            retry_base_ms: self.retry_base_ms,
            retry_cap_ms: ms(&self.retry_cap_secs),
            startup_progress_ms: ms(&self.startup_progress_secs),
            ping_ms: ms(&self.ping_secs),
            pong_timeout_ms: ms(&self.pong_timeout_secs),
            challenge_ttl_ms: ms(&self.challenge_ttl_secs),
            reconnect_first_ms: self.reconnect_first_ms,
            reconnect_cap_ms: self.reconnect_cap_ms,
            reconnect_attempt_timeout_ms: ms(&self.reconnect_attempt_timeout_secs),
        }
    }
}

/// `[daemon.logging]`: the daemon process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DaemonLoggingConfig {
    pub level: String,
    pub stderr_format: String,
}

impl Default for DaemonLoggingConfig {
    fn default() -> Self {
        DaemonLoggingConfig {
            level: "info".into(),
            stderr_format: "jsonl".into(),
        }
    }
}

/// `[worker]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkerConfig {
    pub observation_capture_bytes: u64,
    pub observation_total_bytes: u64,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            observation_capture_bytes: 4 * 1024 * 1024,
            observation_total_bytes: 256 * 1024 * 1024,
        }
    }
}

/// `[logging]`: workers, MCPs and hooks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LoggingConfig {
    pub level: String,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig {
            level: "warn".into(),
        }
    }
}

/// The longest duration any setting may give: a year. No wait of Relay's is longer, and a
/// clock reading plus anything up to it cannot overflow, which a value near `u64::MAX`
/// seconds did, in every connection's first timer.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// A duration written in (possibly fractional) seconds, at most [`MAX_DURATION`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Secs(pub Duration);

impl Secs {
    pub const fn from_secs(secs: u64) -> Secs {
        Secs(Duration::from_secs(secs))
    }

    pub fn get(self) -> Duration {
        self.0
    }

    pub fn is_zero(self) -> bool {
        self.0.is_zero()
    }
}

impl fmt::Debug for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl Serialize for Secs {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0.subsec_nanos() == 0 {
            serializer.serialize_u64(self.0.as_secs())
        } else {
            serializer.serialize_f64(self.0.as_secs_f64())
        }
    }
}

impl<'de> Deserialize<'de> for Secs {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// Whole or fractional seconds; its `expecting` is what a wrong value's error says.
        struct Seconds;

        impl serde::de::Visitor<'_> for Seconds {
            type Value = Secs;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    "a non-negative number of seconds, at most {} (a year)",
                    MAX_DURATION.as_secs()
                )
            }

            fn visit_u64<E: serde::de::Error>(self, secs: u64) -> Result<Secs, E> {
                Some(Duration::from_secs(secs))
                    .filter(|d| *d <= MAX_DURATION)
                    .map(Secs)
                    .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Unsigned(secs), &self))
            }

            fn visit_i64<E: serde::de::Error>(self, secs: i64) -> Result<Secs, E> {
                u64::try_from(secs)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(secs), &self))
                    .and_then(|secs| self.visit_u64(secs))
            }

            fn visit_f64<E: serde::de::Error>(self, secs: f64) -> Result<Secs, E> {
                Duration::try_from_secs_f64(secs)
                    .ok()
                    .filter(|d| *d <= MAX_DURATION)
                    .map(Secs)
                    .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Float(secs), &self))
            }
        }

        deserializer.deserialize_any(Seconds)
    }
}

/// An absolute `http` or `https` base URL without query or fragment, stored without a
/// trailing slash so joining is exact (§3.2).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct BaseUrl {
    text: String,
    uri: Uri,
}

/// `text` as an error may quote it: user information and a query or fragment are left out,
/// since they may hold a password or a key (an egress proxy's `user:password@`). A password
/// may itself hold `/`, `?` or `#`, so everything up to the last `@` goes, even where the
/// `@` is in a path. A URL holds no blank, so nothing after one is shown either.
fn shown(text: &str) -> String {
    let (text, cut) = match text.find(char::is_whitespace) {
        Some(at) => (&text[..at], "…"),
        None => (text, ""),
    };
    let (scheme, rest) = match text.split_once("://") {
        Some((scheme, rest)) => (&text[..scheme.len() + 3], rest),
        None => ("", text),
    };
    let (user, rest) = match rest.rfind('@') {
        Some(at) => ("…@", &rest[at + 1..]),
        None => ("", rest),
    };
    let (rest, hidden) = match rest.find(['?', '#']) {
        Some(at) => (&rest[..at], "?…"),
        None => (rest, ""),
    };
    format!("{:?}", format!("{scheme}{user}{rest}{hidden}{cut}"))
}

impl BaseUrl {
    pub fn parse(text: &str) -> Result<BaseUrl, String> {
        let trimmed = text.trim_end_matches('/');
        // Built only for an error: a caller-selected base is parsed on every request.
        let refused = |why: &str| format!("{} {why}", shown(text));
        let uri: Uri = trimmed
            .parse()
            .map_err(|e| refused(&format!("is not a URL: {e}")))?;
        let scheme = uri.scheme_str().map(str::to_ascii_lowercase);
        if !matches!(scheme.as_deref(), Some("http" | "https")) {
            return Err(refused("must be an absolute http or https URL"));
        }
        let Some(authority) = uri.authority() else {
            return Err(refused("has no host"));
        };
        if authority.as_str().contains('@') {
            return Err(refused("must not carry user information"));
        }
        if uri.query().is_some() || text.contains('#') {
            return Err(refused("must not have a query or fragment"));
        }
        // Normalize scheme and host case; keep the path as written.
        let path = uri.path().trim_end_matches('/');
        let normalized = format!(
            "{}://{}{}",
            scheme.unwrap_or_default(),
            authority.as_str().to_ascii_lowercase(),
            path
        );
        let uri = normalized
            .parse()
            .map_err(|e| refused(&format!("is not a URL: {e}")))?;
        Ok(BaseUrl {
            text: normalized,
            uri,
        })
    }

    fn from_static(text: &'static str) -> BaseUrl {
        BaseUrl {
            text: text.to_owned(),
            uri: Uri::from_static(text),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    /// The base's path, without a trailing slash (`""` for a bare origin).
    pub fn path(&self) -> &str {
        let path = self.uri.path();
        if path == "/" { "" } else { path }
    }

    pub fn is_https(&self) -> bool {
        self.uri.scheme_str() == Some("https")
    }
}

impl fmt::Debug for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, f)
    }
}

impl fmt::Display for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for BaseUrl {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for BaseUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        BaseUrl::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Which files to read, in increasing precedence.
#[derive(Debug, Clone, Default)]
pub struct ConfigSources {
    pub user_file: Option<PathBuf>,
    pub system_file: Option<PathBuf>,
}

impl ConfigSources {
    /// The standard places: `<base>/relay/config.toml` and `<system dir>/config.toml`.
    pub fn standard(user_relay_dir: Option<&Path>, system_dir: &Path) -> ConfigSources {
        ConfigSources {
            user_file: user_relay_dir.map(|dir| dir.join("config.toml")),
            system_file: Some(system_dir.join("config.toml")),
        }
    }

    /// Only this file (the daemon's `--config`).
    pub fn only(file: PathBuf) -> ConfigSources {
        ConfigSources {
            user_file: None,
            system_file: Some(file),
        }
    }

    fn files(&self) -> impl Iterator<Item = &PathBuf> {
        self.user_file.iter().chain(self.system_file.iter())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: unknown key `{key}`")]
    UnknownKey { path: PathBuf, key: String },
    #[error("{key}: {message}")]
    Invalid { key: &'static str, message: String },
    /// An invalid value, and the file it was read from: the last one that sets its key,
    /// since that is the one whose value counts.
    #[error("{path}: {error}")]
    InFile {
        path: PathBuf,
        error: Box<ConfigError>,
    },
}

impl ConfigError {
    /// Names the file an invalid value came from among `files` (in the order they were
    /// merged), when one sets its key.
    fn in_file(self, files: &[(&PathBuf, toml::Table)]) -> ConfigError {
        let ConfigError::Invalid { key, .. } = &self else {
            return self;
        };
        let sets = |table: &toml::Table| {
            let mut parts = key.split('.');
            let first = parts.next().and_then(|part| table.get(part));
            parts
                .try_fold(first, |value, part| Some(value?.get(part)))
                .flatten()
                .is_some()
        };
        match files.iter().rev().find(|(_, table)| sets(table)) {
            Some((path, _)) => ConfigError::InFile {
                path: (*path).clone(),
                error: Box::new(self),
            },
            None => self,
        }
    }
}

/// An unknown key a client ignored, to be logged as a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoredKey {
    pub path: PathBuf,
    pub key: String,
}

impl Config {
    /// Loads the daemon's configuration: every unknown key is an error.
    pub fn load_daemon(sources: &ConfigSources) -> Result<Config, ConfigError> {
        let mut merged = toml::Table::new();
        let mut files = Vec::new();
        for path in sources.files() {
            let Some(text) = read_optional(path)? else {
                continue;
            };
            let (table, ignored) = check_file(path, &text, false)?;
            if let Some(key) = ignored.into_iter().next() {
                return Err(ConfigError::UnknownKey {
                    path: path.clone(),
                    key,
                });
            }
            merge(&mut merged, table.clone());
            files.push((path, table));
        }
        let config = from_table(merged)?;
        config.validate().map_err(|e| e.in_file(&files))?;
        Ok(config)
    }

    /// Loads a worker's, MCP's or hook's configuration: `[daemon…]` tables are skipped and
    /// other unknown keys are returned for a warning.
    pub fn load_client(sources: &ConfigSources) -> Result<(Config, Vec<IgnoredKey>), ConfigError> {
        let mut merged = toml::Table::new();
        let mut warnings = Vec::new();
        let mut files = Vec::new();
        for path in sources.files() {
            let Some(text) = read_optional(path)? else {
                continue;
            };
            let (table, ignored) = check_file(path, &text, true)?;
            warnings.extend(ignored.into_iter().map(|key| IgnoredKey {
                path: path.clone(),
                key,
            }));
            merge(&mut merged, table.clone());
            files.push((path, table));
        }
        let config = from_table(merged)?;
        config.validate_shared().map_err(|e| e.in_file(&files))?;
        Ok((config, warnings))
    }

    /// A client's configuration from the standard places of `env`: `<base>/relay/config.toml`
    /// and `<system dir>/config.toml` (§8).
    pub fn load_client_from(
        env: &impl relay_identity::Env,
    ) -> Result<(Config, Vec<IgnoredKey>), ConfigError> {
        let user = relay_identity::StatePaths::resolve(env)
            .ok()
            .map(|p| p.relay_dir());
        let system = relay_identity::system_config_dir(env);
        Config::load_client(&ConfigSources::standard(user.as_deref(), &system))
    }

    /// The effective default `config.toml`, as `relayd config defaults` prints it.
    pub fn defaults_toml() -> String {
        toml::to_string_pretty(&Config::default()).unwrap_or_default()
    }

    fn validate(&self) -> Result<(), ConfigError> {
        // The daemon checks the tables its machine's workers read too: it must not run
        // healthy while every activation fails on a value the workers refuse.
        self.validate_shared()?;
        let d = &self.daemon;
        let invalid = |key: &'static str, message: &str| {
            Err(ConfigError::Invalid {
                key,
                message: message.to_owned(),
            })
        };
        if !(1..=64).contains(&d.max_tokens_per_identity) {
            return invalid("daemon.max_tokens_per_identity", "must be between 1 and 64");
        }
        if d.max_request_body_bytes == 0 {
            return invalid("daemon.max_request_body_bytes", "must be positive");
        }
        if d.max_hook_body_bytes == 0 {
            return invalid("daemon.max_hook_body_bytes", "must be positive");
        }
        if d.max_connections == 0 {
            return invalid("daemon.max_connections", "must be positive");
        }
        if d.max_connections_per_ip == 0 {
            return invalid("daemon.max_connections_per_ip", "must be positive");
        }
        if d.max_control_sessions_per_ip == 0 {
            return invalid("daemon.max_control_sessions_per_ip", "must be positive");
        }
        // A tombstone that ends at once would let another identity bind a revoked or
        // evicted credential straight away, which is what tombstones are for.
        if d.binding_tombstone_days == 0 {
            return invalid("daemon.binding_tombstone_days", "must be positive");
        }
        if d.max_requests_per_identity == 0 {
            return invalid("daemon.max_requests_per_identity", "must be positive");
        }
        if d.max_sessions_per_route == 0 {
            return invalid("daemon.max_sessions_per_route", "must be positive");
        }
        if d.max_routes == 0 {
            return invalid("daemon.max_routes", "must be positive");
        }
        if d.keepalive_idle_secs.is_zero() {
            return invalid("daemon.keepalive_idle_secs", "must be positive");
        }
        if d.stream_idle_secs.is_zero() {
            return invalid("daemon.stream_idle_secs", "must be positive");
        }
        for origin in &d.allowed_origins {
            if BaseUrl::parse(origin).is_err() {
                return invalid(
                    "daemon.allowed_origins",
                    &format!("{} is not an http or https origin", shown(origin)),
                );
            }
        }
        check_level("daemon.logging.level", &d.logging.level)?;
        if !matches!(d.logging.stderr_format.as_str(), "human" | "jsonl") {
            return invalid(
                "daemon.logging.stderr_format",
                "must be \"human\" or \"jsonl\"",
            );
        }
        let t = &d.timers;
        for (key, value) in [
            ("daemon.timers.drain_secs", t.drain_secs),
            ("daemon.timers.reconnect_grace_secs", t.reconnect_grace_secs),
            ("daemon.timers.retry_cap_secs", t.retry_cap_secs),
            (
                "daemon.timers.startup_progress_secs",
                t.startup_progress_secs,
            ),
            ("daemon.timers.ping_secs", t.ping_secs),
            ("daemon.timers.pong_timeout_secs", t.pong_timeout_secs),
            (
                "daemon.timers.header_read_timeout_secs",
                t.header_read_timeout_secs,
            ),
            ("daemon.timers.challenge_ttl_secs", t.challenge_ttl_secs),
            (
                "daemon.timers.challenge_window_secs",
                t.challenge_window_secs,
            ),
            (
                "daemon.timers.reconnect_attempt_timeout_secs",
                t.reconnect_attempt_timeout_secs,
            ),
        ] {
            if value.is_zero() {
                return invalid(key, "must be positive");
            }
        }
        for (key, value) in [
            ("daemon.timers.retry_base_ms", t.retry_base_ms),
            ("daemon.timers.reconnect_first_ms", t.reconnect_first_ms),
            ("daemon.timers.reconnect_cap_ms", t.reconnect_cap_ms),
            (
                "daemon.timers.challenge_limit",
                u64::from(t.challenge_limit),
            ),
        ] {
            if value == 0 {
                return invalid(key, "must be positive");
            }
        }
        if t.reconnect_first_ms > t.reconnect_cap_ms {
            return invalid(
                "daemon.timers.reconnect_first_ms",
                "must be at most daemon.timers.reconnect_cap_ms, the delay it grows to",
            );
        }
        if Duration::from_millis(t.retry_base_ms) > t.retry_cap_secs.get() {
            return invalid(
                "daemon.timers.retry_base_ms",
                "must be at most daemon.timers.retry_cap_secs, the delay it grows to",
            );
        }
        let longest = u64::try_from(MAX_DURATION.as_millis()).unwrap_or(u64::MAX);
        for (key, value) in [
            ("daemon.activation_wait_ms", d.activation_wait_ms),
            ("daemon.timers.retry_base_ms", t.retry_base_ms),
            ("daemon.timers.reconnect_first_ms", t.reconnect_first_ms),
            ("daemon.timers.reconnect_cap_ms", t.reconnect_cap_ms),
        ] {
            if value > longest {
                return invalid(key, &format!("must be at most {longest} (a year)"));
            }
        }
        Ok(())
    }

    /// The checks of the tables that workers, MCPs and hooks read: `[upstream]`, `[worker]`
    /// and `[logging]`.
    fn validate_shared(&self) -> Result<(), ConfigError> {
        self.validate_upstream()?;
        // A capture of nothing would mark every record's usage unknown and truncated.
        for (key, value) in [
            (
                "worker.observation_capture_bytes",
                self.worker.observation_capture_bytes,
            ),
            (
                "worker.observation_total_bytes",
                self.worker.observation_total_bytes,
            ),
        ] {
            if value == 0 {
                return Err(ConfigError::Invalid {
                    key,
                    message: "must be positive".into(),
                });
            }
        }
        check_level("logging.level", &self.logging.level)
    }

    fn validate_upstream(&self) -> Result<(), ConfigError> {
        let u = &self.upstream;
        if u.anthropic_base_url.path().ends_with("/v1") {
            return Err(ConfigError::Invalid {
                key: "upstream.anthropic_base_url",
                message: format!(
                    "{} must not end in /v1: Anthropic paths already start with /v1",
                    u.anthropic_base_url
                ),
            });
        }
        if u.connect_timeout_secs.is_zero() {
            return Err(ConfigError::Invalid {
                key: "upstream.connect_timeout_secs",
                message: "must be positive".into(),
            });
        }
        if !u.proxy_url.is_empty() {
            BaseUrl::parse(&u.proxy_url).map_err(|message| ConfigError::Invalid {
                key: "upstream.proxy_url",
                message,
            })?;
        }
        Ok(())
    }
}

/// The most of a configuration file read: far past any real one, and a bound on what a path
/// such as `/dev/zero` can make a process read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The text of the configuration file at `path`, or `None` when there is none: see
/// [`read_trusted_text`].
fn read_optional(path: &Path) -> Result<Option<String>, ConfigError> {
    read_trusted_text(path, MAX_CONFIG_BYTES).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })
}

/// The text of a configuration file of Relay's (`config.toml`, `plugins.toml`) at `path`,
/// or `None` when there is none. A file [`relay_identity::store::open_trusted`] refuses is
/// refused, and so is one past `max` bytes (`FileTooLarge`).
pub(crate) fn read_trusted_text(path: &Path, max: u64) -> std::io::Result<Option<String>> {
    use std::io::{Error, ErrorKind};
    let Some(mut file) = relay_identity::store::open_trusted(path)? else {
        return Ok(None);
    };
    let bytes = relay_identity::store::read_bounded(&mut file, max)?;
    if bytes.len() as u64 > max {
        return Err(Error::new(
            ErrorKind::FileTooLarge,
            format!("larger than {max} bytes, more than any configuration file"),
        ));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| Error::new(ErrorKind::InvalidData, "not UTF-8 text"))
}

/// A log level or filter from the files, checked with the other values so that the error
/// names its key (and then the file that set it) as every other one does.
fn check_level(key: &'static str, level: &str) -> Result<(), ConfigError> {
    match relay_logging::LogConfig::resolve(
        Some(level),
        None,
        None,
        None,
        None,
        None,
        relay_logging::LogConfig::daemon_default(),
    ) {
        Err(relay_logging::LogConfigError::InvalidLevel { reason, .. }) => {
            Err(ConfigError::Invalid {
                key,
                message: reason,
            })
        }
        _ => Ok(()),
    }
}

/// Parses one file and type-checks it on its own, so an error names the file it is in.
/// Returns the table (without `[daemon]` for clients) and the keys nothing consumed.
fn check_file(
    path: &Path,
    text: &str,
    skip_daemon: bool,
) -> Result<(toml::Table, Vec<String>), ConfigError> {
    // Neither the parser's nor serde's words are quoted with the values they name.
    let parse_error = |e: &dyn fmt::Display| ConfigError::Parse {
        path: path.to_owned(),
        message: elide_quoted(e.to_string().trim_end()).replace('\n', " "),
    };
    // The parser's message and line, not its own `Display`, which quotes the line: a value
    // on it may be a credential pasted in the wrong file.
    let mut table: toml::Table = toml::from_str(text).map_err(|e| {
        let (line, message) = relay_plugins::config::toml_syntax_error(text, &e);
        parse_error(&format_args!("line {line}: {message}"))
    })?;
    if skip_daemon {
        table.remove("daemon");
    }
    let mut ignored = Vec::new();
    let _: Config = serde_ignored::deserialize(toml::Value::Table(table.clone()), |key| {
        ignored.push(key.to_string());
    })
    .map_err(|e| parse_error(&e))?;
    Ok((table, ignored))
}

fn from_table(table: toml::Table) -> Result<Config, ConfigError> {
    toml::Value::Table(table)
        .try_into()
        .map_err(|e| ConfigError::Parse {
            path: PathBuf::from("<merged configuration>"),
            message: elide_quoted(&e.to_string()),
        })
}

/// Replaces every value quoted in `"…"` or `'…'` with `…`, and the value serde names in
/// backticks after "unknown variant" (a setting's value, not a key); key names in backticks
/// stay. A value may be a credential pasted in the wrong place.
pub fn elide_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut quote: Option<char> = None;
    for c in text.chars() {
        match quote {
            Some(q) if c == q => {
                out.push('…');
                out.push(c);
                quote = None;
            }
            Some(_) => {}
            None if c == '"' || c == '\'' || (c == '`' && out.ends_with("unknown variant ")) => {
                out.push(c);
                quote = Some(c);
            }
            None => out.push(c),
        }
    }
    if quote.is_some() {
        out.push('…');
    }
    out
}

/// Deep-merges `over` into `base`: tables merge key by key, any other value replaces.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(base_table)), toml::Value::Table(over_table)) => {
                merge(base_table, over_table);
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests;
