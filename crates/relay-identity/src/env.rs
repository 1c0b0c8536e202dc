//! Where environment variables come from, and the name of every variable Relay reads.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;

/// A source of environment variables, so code that reads them can be tested without touching the
/// process environment.
pub trait Env {
    /// The value of `key`, if set.
    fn var_os(&self, key: &str) -> Option<OsString>;

    /// The value of `key` if it is set and not empty: SPEC treats an empty variable as unset.
    fn non_empty(&self, key: &str) -> Option<OsString> {
        self.var_os(key).filter(|value| !value.is_empty())
    }
}

impl<E: Env + ?Sized> Env for &E {
    fn var_os(&self, key: &str) -> Option<OsString> {
        (**self).var_os(key)
    }
}

/// The real process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var_os(&self, key: &str) -> Option<OsString> {
        std::env::var_os(key)
    }
}

/// An environment held in a map, for tests.
#[derive(Clone, Default)]
pub struct MapEnv {
    vars: HashMap<String, OsString>,
}

impl MapEnv {
    /// An empty environment.
    pub fn new() -> MapEnv {
        MapEnv::default()
    }

    /// This environment with `key` set to `value`.
    pub fn with(mut self, key: &str, value: impl Into<OsString>) -> MapEnv {
        self.set(key, value);
        self
    }

    /// Sets `key` to `value`.
    pub fn set(&mut self, key: &str, value: impl Into<OsString>) {
        self.vars.insert(key.to_owned(), value.into());
    }

    /// Removes `key`.
    pub fn remove(&mut self, key: &str) {
        self.vars.remove(key);
    }
}

impl Env for MapEnv {
    fn var_os(&self, key: &str) -> Option<OsString> {
        self.vars.get(key).cloned()
    }
}

// Values may be credentials (RELAY_CLIENT_TOKEN), so only the names are shown.
impl fmt::Debug for MapEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut keys: Vec<&String> = self.vars.keys().collect();
        keys.sort();
        f.debug_struct("MapEnv").field("keys", &keys).finish()
    }
}

/// The name of every environment variable of the SPEC, in one place.
pub mod names {
    /// Route credential for `relay-mcp`, `relay-hook` and `relay-doctor` (§4.1).
    pub const RELAY_CLIENT_TOKEN: &str = "RELAY_CLIENT_TOKEN";
    /// First choice for the state directory base (§4.4).
    pub const XDG_CONFIG_HOME: &str = "XDG_CONFIG_HOME";
    /// Second choice for the state directory base: `$HOME/.config` (§4.4).
    pub const HOME: &str = "HOME";
    /// Third choice for the state directory base: `$USERPROFILE/.config` (§4.4).
    pub const USERPROFILE: &str = "USERPROFILE";
    /// Windows: the parent of the system configuration directory (`%ProgramData%\relay`, §8).
    pub const PROGRAM_DATA: &str = "ProgramData";
    /// Overrides the system configuration directory (§8).
    pub const RELAY_SYSTEM_CONFIG_DIR: &str = "RELAY_SYSTEM_CONFIG_DIR";
    /// Log level or filter (§8).
    pub const RELAY_LOG: &str = "RELAY_LOG";
    /// Log format, `human` or `jsonl` (§8).
    pub const RELAY_LOG_FORMAT: &str = "RELAY_LOG_FORMAT";
    /// Advertised address of a remote worker (§9).
    pub const RELAY_WORKER_ADVERTISE_ADDRESS: &str = "RELAY_WORKER_ADVERTISE_ADDRESS";
    /// Port of a remote worker (§9).
    pub const RELAY_WORKER_PORT: &str = "RELAY_WORKER_PORT";
    /// Where systemd hands a service its `LoadCredential=` files (relayd's provider keys).
    pub const CREDENTIALS_DIRECTORY: &str = "CREDENTIALS_DIRECTORY";
    /// Codex's own configuration directory (default `$HOME/.codex`), which relay-doctor
    /// looks in for Relay's hooks.
    pub const CODEX_HOME: &str = "CODEX_HOME";
    /// Claude Code's own configuration directory (default `$HOME/.claude`), where
    /// relay-doctor looks for Relay's plugin.
    pub const CLAUDE_CONFIG_DIR: &str = "CLAUDE_CONFIG_DIR";
    /// Extra CA certificates that clients trust for a remote daemon (§9).
    pub const RELAY_EXTRA_CA_FILE: &str = "RELAY_EXTRA_CA_FILE";
    /// CA bundle used by Codex, checked by `relay-doctor` (§9).
    pub const SSL_CERT_FILE: &str = "SSL_CERT_FILE";
    /// Overrides the per-event timeout of `relay-hook` (§7.1).
    pub const RELAY_HOOK_TIMEOUT_MS: &str = "RELAY_HOOK_TIMEOUT_MS";
    /// Overrides `[daemon] max_tokens_per_identity` (§2.1).
    pub const RELAY_DAEMON_MAX_TOKENS_PER_IDENTITY: &str = "RELAY_DAEMON_MAX_TOKENS_PER_IDENTITY";
    /// Daemon key for OpenAI pass-through (§8).
    pub const OPENAI_API_KEY: &str = "OPENAI_API_KEY";
    /// Daemon key for Anthropic pass-through (§8).
    pub const ANTHROPIC_API_KEY: &str = "ANTHROPIC_API_KEY";
    /// Claude Code's extra request headers, which carry the route token (§4.1).
    pub const ANTHROPIC_CUSTOM_HEADERS: &str = "ANTHROPIC_CUSTOM_HEADERS";
    /// Passed through to workers (§5.5).
    pub const LANG: &str = "LANG";
    /// Passed through to workers (§5.5).
    pub const PATH: &str = "PATH";
    /// The hosts an egress proxy (`[upstream] proxy_url`) is not used for; the worker
    /// honours it as relayd does.
    pub const NO_PROXY: &str = "NO_PROXY";
    /// `NO_PROXY` as many tools spell it; read when `NO_PROXY` is unset.
    pub const NO_PROXY_LOWER: &str = "no_proxy";

    /// The variables a worker inherits; everything else is cleared (§5.5). `NO_PROXY` is
    /// there too, so that a worker with an egress proxy keeps the hosts it exempts off it.
    pub const WORKER_ENV_ALLOW_LIST: [&str; 11] = [
        HOME,
        XDG_CONFIG_HOME,
        PATH,
        LANG,
        RELAY_LOG,
        RELAY_LOG_FORMAT,
        RELAY_EXTRA_CA_FILE,
        SSL_CERT_FILE,
        RELAY_SYSTEM_CONFIG_DIR,
        NO_PROXY,
        NO_PROXY_LOWER,
    ];
}
