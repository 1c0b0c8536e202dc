//! The environment report (§10.4): what this machine-user's set-up looks like before any
//! daemon is asked. Every check reads files and variables through [`Inputs`], so tests give
//! it a temporary directory and a [`relay_identity::MapEnv`].

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use relay_identity::bundle::{CLAUDE_HOOK_EVENTS, CODEX_HOOK_EVENTS};
use relay_identity::{
    CredentialSource, Env, PinStore, RouteToken, SigningKey, StatePaths, names, parse_pin,
    provisioned_daemon_key_file, resolve_credential, store, system_config_dir,
};
use relay_proxy::config::{Config, ConfigError, ConfigSources, elide_quoted};
use relay_proxy::plugins::{PluginConfigError, PluginFile, Plugins, sink_user_name};
use serde_json::json;

use crate::report::{Check, Mode, Report};
use crate::wiring::{AgentFile, Wiring};

/// The header a harness sends the route token in.
const TOKEN_HEADER: &str = "x-relay-client-token";
/// A pin file is two short lines; anything larger is not one.
const MAX_PIN_BYTES: u64 = 4096;
/// Where Codex reads its system and managed configuration on Unix.
const CODEX_SYSTEM_DIR: &str = "/etc/codex";
/// The Codex files, in its system directory and in `CODEX_HOME`, that can hold hooks.
const CODEX_SYSTEM_HOOK_FILES: [&str; 4] = [
    "hooks.json",
    "managed_config.toml",
    "config.toml",
    "requirements.toml",
];
const CODEX_USER_HOOK_FILES: [&str; 2] = ["hooks.json", "config.toml"];
/// The variable that points Claude Code's model requests at a base URL.
const ANTHROPIC_BASE_URL: &str = "ANTHROPIC_BASE_URL";
/// Where Claude Code reads its managed settings and managed MCP servers.
#[cfg(target_os = "macos")]
const CLAUDE_SYSTEM_DIR: &str = "/Library/Application Support/ClaudeCode";
#[cfg(not(target_os = "macos"))]
const CLAUDE_SYSTEM_DIR: &str = "/etc/claude-code";

/// What the checks read: the environment, the state paths it resolves to, and who runs.
pub(crate) struct Inputs<'a, E: Env> {
    pub(crate) env: &'a E,
    /// `None` when no base directory can be found (no XDG_CONFIG_HOME, HOME or USERPROFILE).
    pub(crate) paths: Option<StatePaths>,
    pub(crate) euid: u32,
    /// Codex's system configuration directory, whose hooks Codex runs without a review.
    pub(crate) codex_system_dir: PathBuf,
    /// Claude Code's managed-settings directory.
    pub(crate) claude_system_dir: PathBuf,
}

impl<'a, E: Env> Inputs<'a, E> {
    pub(crate) fn new(env: &'a E, euid: u32) -> Inputs<'a, E> {
        Inputs {
            env,
            paths: StatePaths::resolve(env).ok(),
            euid,
            codex_system_dir: PathBuf::from(CODEX_SYSTEM_DIR),
            claude_system_dir: PathBuf::from(CLAUDE_SYSTEM_DIR),
        }
    }

    fn system_dir(&self) -> PathBuf {
        system_config_dir(self.env)
    }
}

/// Every check of the environment report, in the documented order.
pub(crate) fn report<E: Env>(inputs: &Inputs<'_, E>) -> Report {
    let token = resolve_token(inputs);
    let mut checks = vec![state_dir(inputs), machine_identity(inputs)];
    checks.push(token.check.clone());
    checks.push(custom_headers(inputs.env, &token));
    checks.push(trust_pins(inputs));
    checks.push(provisioned_key(inputs));
    checks.push(config(inputs));
    checks.push(log_variables(inputs.env));
    checks.push(plugins(inputs));
    checks.extend(ca_variables(inputs.env));
    checks.push(no_proxy(inputs.env));
    checks.push(codex_hooks(inputs));
    checks.push(claude_code(inputs));
    checks.push(pi::pi(inputs.env));
    Report {
        mode: Mode::Environment,
        checks,
    }
}

pub(crate) fn display(path: &Path) -> String {
    path.display().to_string()
}

/// `<base>/relay/daemon`: a directory owned by the user with no group or other access.
pub(crate) fn state_dir<E: Env>(inputs: &Inputs<'_, E>) -> Check {
    const ID: &str = "state_dir";
    let Some(paths) = &inputs.paths else {
        return Check::fail(
            ID,
            "no state directory: none of XDG_CONFIG_HOME, HOME or USERPROFILE is set",
        )
        .next("set HOME (or XDG_CONFIG_HOME) for this user");
    };
    let dir = paths.daemon_dir();
    let details = json!({ "path": display(&dir) });
    let metadata = match fs::symlink_metadata(&dir) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Check::warn(ID, format!("{} does not exist yet", dir.display()))
                .next("start a harness session: relay-mcp creates it on first use")
                .with(details);
        }
        Err(err) => {
            return Check::fail(ID, format!("cannot inspect {}: {err}", dir.display()))
                .next("make the directory readable by this user")
                .with(details);
        }
    };
    let mode = metadata.mode() & 0o7777;
    let details =
        json!({ "path": display(&dir), "mode": format!("{mode:04o}"), "uid": metadata.uid() });
    if metadata.file_type().is_symlink() || !metadata.is_dir() {
        return Check::fail(
            ID,
            format!(
                "{} is not a directory (or is a symbolic link)",
                dir.display()
            ),
        )
        .next(format!(
            "move {} away; relay-mcp recreates it",
            dir.display()
        ))
        .with(details);
    }
    if metadata.uid() != inputs.euid {
        return Check::fail(
            ID,
            format!(
                "{} is owned by uid {}, not by this user (uid {})",
                dir.display(),
                metadata.uid(),
                inputs.euid
            ),
        )
        .next(format!(
            "run the harness as the owner, or chown the directory to uid {}",
            inputs.euid
        ))
        .with(details);
    }
    if mode & 0o077 != 0 {
        return Check::fail(
            ID,
            format!(
                "{} has mode {mode:04o}: others can read or change it",
                dir.display()
            ),
        )
        .next(format!("chmod 700 {}", dir.display()))
        .with(details);
    }
    Check::ok(
        ID,
        format!(
            "{} is private to this user (mode {mode:04o})",
            dir.display()
        ),
    )
    .with(details)
}

/// `<base>/relay/daemon/machine-identity.pk8`, the key relay-mcp and the worker sign their
/// handshakes with, read with the checks they apply: a key they refuse leaves every session
/// of this user passing through.
pub(crate) fn machine_identity<E: Env>(inputs: &Inputs<'_, E>) -> Check {
    const ID: &str = "machine_identity";
    let Some(paths) = &inputs.paths else {
        return Check::skip(ID, "no state directory");
    };
    let file = paths.machine_key_file();
    if matches!(fs::symlink_metadata(&file), Err(err) if err.kind() == std::io::ErrorKind::NotFound)
    {
        return Check::skip(
            ID,
            format!(
                "{} does not exist yet: relay-mcp makes it on first use",
                file.display()
            ),
        )
        .with(json!({ "file": display(&file), "present": false }));
    }
    match SigningKey::load(&file) {
        Ok(key) => Check::ok(
            ID,
            format!("{} is a usable key, private to this user", file.display()),
        )
        .with(json!({
            "file": display(&file),
            "present": true,
            "fingerprint": key.fingerprint().to_string(),
        })),
        Err(error) => Check::fail(ID, format!("relay-mcp would refuse it: {error}"))
            .next("fix the key file as the message says: until then every session of this user passes through")
            .with(json!({ "file": display(&file), "present": true })),
    }
}

/// The resolved token (kept only in memory) and its check.
pub(crate) struct TokenCheck {
    pub(crate) token: Option<(RouteToken, CredentialSource)>,
    pub(crate) check: Check,
}

/// The resolution order the clients use: `RELAY_CLIENT_TOKEN`, else the token file.
pub(crate) fn resolve_token<E: Env>(inputs: &Inputs<'_, E>) -> TokenCheck {
    const ID: &str = "token";
    let Some(paths) = &inputs.paths else {
        return TokenCheck {
            token: None,
            check: Check::fail(ID, "no token file location: no base directory")
                .next("set HOME (or XDG_CONFIG_HOME) for this user"),
        };
    };
    let file = paths.token_file();
    let resolved = resolve_credential(inputs.env, paths, inputs.euid);
    let skipped: Vec<_> = resolved
        .skipped
        .iter()
        .map(|(source, reason)| json!({ "source": source.as_str(), "reason": reason.as_str() }))
        .collect();
    let details = json!({
        "source": resolved.token.as_ref().map(|(_, source)| source.as_str()),
        "file": display(&file),
        "skipped": skipped,
    });
    let skipped_text = resolved
        .skipped
        .iter()
        .map(|(source, reason)| format!("{source} skipped ({reason})"))
        .collect::<Vec<_>>()
        .join(", ");
    let fix_file = format!(
        "fix or remove {}, then run relay-doctor token ensure",
        file.display()
    );
    let check = match (&resolved.token, resolved.skipped.is_empty()) {
        (Some((_, source)), true) => Check::ok(
            ID,
            format!("a valid route token from {}", source_text(*source, &file)),
        ),
        (Some((_, source)), false) => Check::warn(
            ID,
            format!(
                "a valid route token from {}; {skipped_text}",
                source_text(*source, &file)
            ),
        )
        .next(skipped_next(&resolved.skipped, &fix_file)),
        (None, true) => Check::fail(
            ID,
            "no route token: RELAY_CLIENT_TOKEN is unset and there is no token file",
        )
        .next("run relay-doctor token ensure"),
        (None, false) => Check::fail(ID, format!("no usable route token: {skipped_text}"))
            .next(skipped_next(&resolved.skipped, &fix_file)),
    };
    TokenCheck {
        token: resolved.token,
        check: check.with(details),
    }
}

fn source_text(source: CredentialSource, file: &Path) -> String {
    match source {
        CredentialSource::Env => "RELAY_CLIENT_TOKEN".to_owned(),
        CredentialSource::File => file.display().to_string(),
    }
}

fn skipped_next(
    skipped: &[(CredentialSource, relay_identity::TokenFileReason)],
    fix_file: &str,
) -> String {
    if skipped
        .iter()
        .any(|(source, _)| *source == CredentialSource::File)
    {
        fix_file.to_owned()
    } else {
        "set RELAY_CLIENT_TOKEN to a valid token (43 base64url characters) or unset it".to_owned()
    }
}

/// The values of every `x-relay-client-token` line in `ANTHROPIC_CUSTOM_HEADERS` (one
/// `Name: value` per line, names case-insensitive).
pub(crate) fn token_headers(headers: &str) -> Vec<&str> {
    headers
        .lines()
        .filter_map(|line| line.split_once(':'))
        .filter(|(name, _)| name.trim().eq_ignore_ascii_case(TOKEN_HEADER))
        .map(|(_, value)| value.trim())
        .collect()
}

/// Whether Claude Code's model requests carry the same token as MCP and hooks.
pub(crate) fn custom_headers(env: &impl Env, token: &TokenCheck) -> Check {
    const ID: &str = "anthropic_custom_headers";
    let value = env.non_empty(names::ANTHROPIC_CUSTOM_HEADERS);
    let headers = value.as_deref().map(OsStr::to_string_lossy);
    let found = headers.as_deref().map(token_headers).unwrap_or_default();
    let details = json!({
        "set": headers.is_some(),
        "token_headers": found.len(),
        "matches": null,
    });
    let only_file = matches!(token.token, Some((_, CredentialSource::File)));
    let covers = if only_file {
        "the token file alone covers MCP and hooks, not model traffic"
    } else {
        "model requests from Claude Code carry no route token and pass through"
    };
    match found.as_slice() {
        [] => Check::warn(
            ID,
            format!(
                "ANTHROPIC_CUSTOM_HEADERS has no {TOKEN_HEADER} line: {covers}"
            ),
        )
        .next(format!(
            "for Claude Code, set ANTHROPIC_CUSTOM_HEADERS to \"{TOKEN_HEADER}: <the route token>\" (Codex and pi carry it in their own provider settings)"
        ))
        .with(details),
        [one] => {
            let Some((resolved, _)) = &token.token else {
                return Check::warn(ID, format!("ANTHROPIC_CUSTOM_HEADERS has one {TOKEN_HEADER}, but there is no resolved token to compare it with"))
                    .next("fix the token check first")
                    .with(details);
            };
            let matches = RouteToken::parse(one).is_ok_and(|t| t == *resolved);
            let details = json!({ "set": true, "token_headers": 1, "matches": matches });
            if matches {
                Check::ok(ID, format!("ANTHROPIC_CUSTOM_HEADERS carries exactly one {TOKEN_HEADER}, equal to the resolved token")).with(details)
            } else {
                Check::fail(ID, format!("the {TOKEN_HEADER} in ANTHROPIC_CUSTOM_HEADERS differs from the resolved token: model requests would select another route than MCP and hooks"))
                    .next(format!("put the same token in ANTHROPIC_CUSTOM_HEADERS as in {}", if only_file { "the token file" } else { "RELAY_CLIENT_TOKEN" }))
                    .with(details)
            }
        }
        many => Check::fail(
            ID,
            format!("ANTHROPIC_CUSTOM_HEADERS has {} {TOKEN_HEADER} lines: the daemon refuses a request that carries it twice", many.len()),
        )
        .next(format!("keep exactly one {TOKEN_HEADER} line in ANTHROPIC_CUSTOM_HEADERS"))
        .with(details),
    }
}

/// The user's pins: every file under `<base>/relay/daemon/pins/` must be a valid pin stored
/// under its origin's name.
pub(crate) fn trust_pins<E: Env>(inputs: &Inputs<'_, E>) -> Check {
    const ID: &str = "trust_pins";
    let Some(paths) = &inputs.paths else {
        return Check::skip(ID, "no base directory, so no pins");
    };
    let dir = paths.pins_dir();
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Check::ok(
                ID,
                "no daemon is pinned yet: the first session pins the daemon it reaches",
            )
            .with(json!({ "directory": display(&dir), "origins": [] }));
        }
        Err(err) => {
            return Check::fail(ID, format!("cannot list {}: {err}", dir.display()))
                .next(format!("make {} readable by this user", dir.display()))
                .with(json!({ "directory": display(&dir), "origins": [] }));
        }
    };
    let store = PinStore::new(&dir, None);
    let mut origins = Vec::new();
    let mut bad = Vec::new();
    let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    for file in files {
        // Temporary files of an interrupted write are not pins.
        if file
            .file_name()
            .and_then(OsStr::to_str)
            .is_some_and(|n| n.starts_with('.'))
        {
            continue;
        }
        match read_pin_file(&file) {
            Ok(pin) if store.pin_file(&pin.origin) == file => origins.push(pin.origin.to_string()),
            Ok(pin) => bad.push(format!(
                "{} holds the pin of {} under another name",
                file.display(),
                pin.origin
            )),
            Err(reason) => bad.push(format!("{}: {reason}", file.display())),
        }
    }
    let details = json!({ "directory": display(&dir), "origins": origins, "invalid": bad });
    if !bad.is_empty() {
        return Check::fail(ID, format!("invalid pin files: {}", bad.join("; ")))
            .next("remove each invalid pin file named here; the next session pins the daemon it reaches again")
            .with(details);
    }
    if origins.is_empty() {
        return Check::ok(
            ID,
            "no daemon is pinned yet: the first session pins the daemon it reaches",
        )
        .with(details);
    }
    Check::ok(ID, format!("pinned daemon origins: {}", origins.join(", "))).with(details)
}

fn read_pin_file(path: &Path) -> Result<relay_identity::Pin, String> {
    let mut file = store::open_nofollow(path).map_err(|e| format!("unreadable ({e})"))?;
    let metadata = file.metadata().map_err(|e| format!("unreadable ({e})"))?;
    if !metadata.is_file() {
        return Err("not a regular file".to_owned());
    }
    let bytes =
        store::read_bounded(&mut file, MAX_PIN_BYTES).map_err(|e| format!("unreadable ({e})"))?;
    let text = std::str::from_utf8(&bytes).map_err(|_| "not text".to_owned())?;
    parse_pin(text).map_err(|e| format!("corrupt ({e})"))
}

/// `<system config dir>/daemon-identity.pub`, which overrides first-use trust for its origin.
pub(crate) fn provisioned_key<E: Env>(inputs: &Inputs<'_, E>) -> Check {
    const ID: &str = "provisioned_daemon_key";
    let file = provisioned_daemon_key_file(inputs.env);
    let store = PinStore::new(
        inputs
            .paths
            .as_ref()
            .map(StatePaths::pins_dir)
            .unwrap_or_default(),
        Some(file.clone()),
    );
    match store.provisioned() {
        Ok(None) => Check::ok(
            ID,
            format!(
                "no provisioned daemon key at {}: first contact pins the daemon",
                file.display()
            ),
        )
        .with(json!({ "file": display(&file), "present": false, "origin": null })),
        Ok(Some(pin)) => {
            let mut check = Check::ok(
                ID,
                format!(
                    "{} pins the daemon of {} for every user",
                    file.display(),
                    pin.origin
                ),
            );
            if let Some(paths) = &inputs.paths {
                let user = PinStore::new(paths.pins_dir(), None);
                if let Ok(Some(own)) = user.pinned(&pin.origin)
                    && own.key != pin.key
                {
                    check = Check::warn(ID, format!("{} pins the daemon of {}, and this user's own pin for it holds another key (the provisioned one decides)", file.display(), pin.origin))
                        .next(format!("remove {} to avoid confusion", user.pin_file(&pin.origin).display()));
                }
            }
            check.with(json!({ "file": display(&file), "present": true, "origin": pin.origin.to_string() }))
        }
        Err(err) => Check::fail(ID, format!("the provisioned daemon key is unusable: {err}"))
            .next(format!(
                "ask the administrator to fix {}: it must hold the pin relayd identity show prints, where no other user could have changed it",
                file.display()
            ))
            .with(json!({ "file": display(&file), "present": true, "origin": null })),
    }
}

/// `config.toml`, user and system, read with the loader the worker, MCP and hooks use.
pub(crate) fn config<E: Env>(inputs: &Inputs<'_, E>) -> Check {
    const ID: &str = "config";
    let user = inputs
        .paths
        .as_ref()
        .map(|p| p.relay_dir().join("config.toml"));
    let system = inputs.system_dir().join("config.toml");
    let sources = ConfigSources::standard(
        inputs.paths.as_ref().map(StatePaths::relay_dir).as_deref(),
        &inputs.system_dir(),
    );
    let present: Vec<String> = user
        .iter()
        .chain(std::iter::once(&system))
        .filter(|p| p.exists())
        .map(|p| display(p))
        .collect();
    // relayd reads the same files (a user daemon this user's, every daemon the system's),
    // and refuses any unknown key, `[daemon…]` tables included, where the clients warn.
    let daemon_refusal = Config::load_daemon(&sources)
        .err()
        .map(|err| config_error_text(&err));
    let details = |ignored: Vec<serde_json::Value>| {
        json!({
            "user_file": user.as_deref().map(display),
            "system_file": display(&system),
            "present": present,
            "ignored_keys": ignored,
            "daemon_refuses": daemon_refusal,
        })
    };
    match Config::load_client(&sources) {
        Ok((_, ignored)) if ignored.is_empty() && daemon_refusal.is_none() => {
            let what = if present.is_empty() {
                "no config.toml: the defaults apply".to_owned()
            } else {
                format!("valid: {}", present.join(", "))
            };
            Check::ok(ID, what).with(details(Vec::new()))
        }
        Ok((_, ignored)) => {
            let mut problems = Vec::new();
            if !ignored.is_empty() {
                let keys: Vec<String> = ignored
                    .iter()
                    .map(|k| format!("{} in {}", k.key, k.path.display()))
                    .collect();
                problems.push(format!(
                    "relay-mcp and the worker ignore unknown keys: {}",
                    keys.join(", ")
                ));
            }
            if let Some(refusal) = &daemon_refusal {
                problems.push(format!("relayd refuses it ({refusal}), so a daemon that reads this file does not start: a user daemon reads this user's file, every daemon the system's"));
            }
            let listed = ignored
                .iter()
                .map(|k| json!({ "file": display(&k.path), "key": k.key }))
                .collect();
            Check::warn(ID, format!("valid for the clients, but {}", problems.join("; and ")))
                .next("remove or correct the keys named (a misspelt key silently keeps its default for relay-mcp and the worker, and stops relayd)")
                .with(details(listed))
        }
        Err(err) => Check::fail(ID, format!("invalid: {}", config_error_text(&err)))
            .next("correct the file named here; workers refuse to start with it")
            .with(details(Vec::new())),
    }
}

/// `RELAY_LOG` and `RELAY_LOG_FORMAT`, read as the clients read them: a value they refuse
/// stops relay-mcp and the worker at start, so no worker ever runs for the harness.
pub(crate) fn log_variables(env: &impl Env) -> Check {
    const ID: &str = "log_variables";
    // Blank counts as unset, as the clients read it.
    let text = |name: &str| {
        env.non_empty(name)
            .map(|v| v.to_string_lossy().into_owned())
            .filter(|v| !v.trim().is_empty())
    };
    let (level, format) = (text(names::RELAY_LOG), text(names::RELAY_LOG_FORMAT));
    let set: Vec<&str> = [
        (names::RELAY_LOG, &level),
        (names::RELAY_LOG_FORMAT, &format),
    ]
    .into_iter()
    .filter(|(_, value)| value.is_some())
    .map(|(name, _)| name)
    .collect();
    let details = json!({ "set": set });
    match relay_logging::LogConfig::client(None, level.as_deref(), format.as_deref()) {
        Ok(_) if set.is_empty() => {
            Check::ok(ID, "RELAY_LOG and RELAY_LOG_FORMAT are not set: the defaults apply")
                .with(details)
        }
        Ok(_) => Check::ok(ID, format!("{} valid", set.join(" and "))).with(details),
        Err(err) => Check::fail(
            ID,
            format!(
                "{}: relay-mcp and relay-worker refuse to start with it, so no worker runs and model requests pass through",
                elide_quoted(&err.to_string())
            ),
        )
        .next("correct or unset it in the harness launch environment (a level such as info or debug, a filter such as relay=debug; the format human or jsonl)")
        .with(details),
    }
}

/// The loader's message, without any value quoted from the file (which may hold a proxy
/// password): a syntax error is re-read for its line and short message, and quoted values in
/// other messages are elided.
fn config_error_text(err: &ConfigError) -> String {
    elide_quoted(&err.to_string())
}

/// `plugins.toml`, system and (when allowed) user, read as the worker reads it.
pub(crate) fn plugins<E: Env>(inputs: &Inputs<'_, E>) -> Check {
    const ID: &str = "plugins";
    let system = relay_identity::system_plugins_file(inputs.env);
    let user = inputs.paths.as_ref().map(StatePaths::user_plugins_file);
    // The record file is named as the worker will name it: for this user, and for the
    // machine key's fingerprint once relay-mcp has made the key.
    let fingerprint = inputs
        .paths
        .as_ref()
        .and_then(|paths| SigningKey::load(&paths.machine_key_file()).ok())
        .map(|key| key.fingerprint().to_string());
    let sink_user = sink_user_name(|variable| worker_variable(inputs.env, variable));
    let loaded = Plugins::load(&system, user.as_deref()).and_then(|plugins| {
        plugins
            .check_file_sinks(&sink_user, fingerprint.as_deref())
            .map(|()| plugins)
    });
    match loaded {
        Ok(plugins) => {
            let enabled: Vec<serde_json::Value> = plugins
                .enabled()
                .map(|c| json!({ "kind": c.kind.as_str(), "source": source_str(c.source), "file": display(&c.file), "index": c.index }))
                .collect();
            let listed: Vec<String> = plugins
                .enabled()
                .map(|c| format!("{} ({} file)", c.kind, source_str(c.source)))
                .collect();
            // relay-mcp hands the worker these from its own environment, and the worker
            // cannot start its sinks without each, as a header value (`plugin_config_invalid`).
            let mut unset = Vec::new();
            let mut unusable = Vec::new();
            let entries = plugins
                .config()
                .observability()
                .into_iter()
                .flat_map(|o| o.header_env());
            for (header, variable) in entries {
                match inputs.env.var_os(variable) {
                    None => unset.push(variable),
                    Some(value) => {
                        let usable = value
                            .to_str()
                            .is_some_and(|v| hyper::header::HeaderValue::from_str(v).is_ok());
                        if !usable {
                            unusable.push(format!("{variable} (the {header} header)"));
                        }
                    }
                }
            }
            let details = json!({
                "system_file": display(&system),
                "user_file": user.as_deref().map(display),
                "allow_user_components": plugins.allows_user_components(),
                "components": plugins.components().len(),
                "enabled": enabled,
                "header_env_unset": unset,
                "header_env_unusable": unusable,
            });
            if !unusable.is_empty() {
                return Check::fail(
                    ID,
                    format!(
                        "valid, but header_env reads {} whose value here is not a header value (a line break, a control character or bytes that are not UTF-8): a worker started from here cannot start its sinks and refuses to start, so every session passes through",
                        unusable.join(", ")
                    ),
                )
                .next("set the variable to the header's value alone (a key read from a file with $(cat …) keeps a Windows line end); its value is not shown here")
                .with(details);
            }
            if !unset.is_empty() {
                return Check::warn(
                    ID,
                    format!(
                        "valid, but header_env names {} that this environment does not set: if relay-mcp's environment lacks it too, the worker cannot start its sinks and refuses to start, so every session passes through",
                        unset.join(", ")
                    ),
                )
                .next("set it in the environment the harness starts relay-mcp in (for Codex, also list it in env_vars of [mcp_servers.relay]); the doctor sees its own environment, which may differ from the harness's")
                .with(details);
            }
            let summary = if listed.is_empty() {
                format!(
                    "valid; no enabled component ({} present)",
                    if system.exists() {
                        display(&system)
                    } else {
                        "no system plugins.toml".to_owned()
                    }
                )
            } else {
                format!("valid; enabled components: {}", listed.join(", "))
            };
            Check::ok(ID, summary).with(details)
        }
        Err(err) => {
            // The other messages quote only the values a field would take, which must show.
            let message = if err.quotes_file_text() {
                elide_quoted(&err.to_string())
            } else {
                err.to_string()
            };
            let fix = match &err {
                PluginConfigError::Read { source, .. }
                    if source.kind() == std::io::ErrorKind::PermissionDenied =>
                {
                    "fix what the message names, so that the file is readable here and only root and its owner can change it or the way to it"
                }
                PluginConfigError::Read { .. } => {
                    "put a readable regular file of UTF-8 text at that path, or remove what is there"
                }
                PluginConfigError::TooLarge { .. } => "shorten the file below its limit",
                PluginConfigError::RecordFile { .. } => {
                    "remove the record file named, or make it a regular file of the user the harness runs as with no access for group or others (chmod 600)"
                }
                PluginConfigError::RecordFileUnopenable { .. } => {
                    "let the user the harness runs as create and write the record file named (the directory's owner and mode, and the file's), or choose another directory"
                }
                _ => "correct the component and field named here",
            };
            Check::fail(ID, format!("invalid: {message}"))
                .next(format!(
                    "{fix}; until then every worker activation fails with plugin_config_invalid"
                ))
                .with(json!({
                    "system_file": display(&system),
                    "user_file": user.as_deref().map(display),
                    "error_file": display(err.path()),
                    "enabled": [],
                }))
        }
    }
}

/// `variable` as the worker sees it: relay-mcp clears the worker's environment but for its
/// allow list, so the doctor's own value counts only if that list has it.
fn worker_variable(env: &impl Env, variable: &str) -> Option<String> {
    names::WORKER_ENV_ALLOW_LIST
        .contains(&variable)
        .then(|| env.var_os(variable))
        .flatten()
        .and_then(|value| value.into_string().ok())
}

fn source_str(source: PluginFile) -> &'static str {
    match source {
        PluginFile::System => "system",
        PluginFile::User => "user",
    }
}

/// The CA variables a remote daemon with a private CA needs: `RELAY_EXTRA_CA_FILE` for
/// Relay's own clients, `NODE_EXTRA_CA_CERTS` for Claude Code and pi, `SSL_CERT_FILE` for
/// Codex.
pub(crate) fn ca_variables(env: &impl Env) -> Vec<Check> {
    const ID: &str = "ca_files";
    let vars = [
        names::RELAY_EXTRA_CA_FILE,
        "NODE_EXTRA_CA_CERTS",
        names::SSL_CERT_FILE,
    ];
    let set: Vec<(&str, PathBuf)> = vars
        .iter()
        .filter_map(|name| env.non_empty(name).map(|v| (*name, PathBuf::from(v))))
        .collect();
    let details = json!({
        "variables": set.iter().map(|(name, path)| json!({ "name": name, "file": display(path) })).collect::<Vec<_>>(),
    });
    if set.is_empty() {
        return vec![Check::ok(ID, "no extra CA configured (needed only for an https daemon whose certificate a private CA issued)").with(details)];
    }
    let mut problems = Vec::new();
    for (name, path) in &set {
        let result = if *name == names::RELAY_EXTRA_CA_FILE {
            relay_proxy::tls::client_config(Some(path))
                .map(|_| ())
                .map_err(|e| relay_proxy::error_chain(&e))
        } else {
            pem_certificates(path)
        };
        if let Err(why) = result {
            problems.push(format!("{name}={}: {why}", path.display()));
        }
    }
    if !problems.is_empty() {
        return vec![Check::fail(ID, format!("unusable CA files: {}", problems.join("; ")))
            .next("point each variable at a readable PEM file with the CA certificate that issued the daemon's certificate")
            .with(details)];
    }
    let has = |name: &str| set.iter().any(|(n, _)| *n == name);
    let missing: Vec<&str> = vars.iter().copied().filter(|name| !has(name)).collect();
    if has(names::RELAY_EXTRA_CA_FILE) && !missing.is_empty() {
        return vec![Check::warn(ID, format!("RELAY_EXTRA_CA_FILE is set but {} is not: the harness that reads it will not trust the daemon", missing.join(" and ")))
            .next("set NODE_EXTRA_CA_CERTS (Claude Code, pi) and SSL_CERT_FILE (Codex) to a file holding the same CA")
            .with(details)];
    }
    vec![
        Check::ok(
            ID,
            format!(
                "readable PEM CA files: {}",
                set.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
            ),
        )
        .with(details),
    ]
}

fn pem_certificates(path: &Path) -> Result<(), String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject as _;
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("not a readable PEM file ({e})"))?;
    if certs.is_empty() {
        return Err("no certificate in it".to_owned());
    }
    Ok(())
}

/// With an HTTP(S) proxy set, `NO_PROXY` must keep loopback traffic to relayd away from it.
pub(crate) fn no_proxy(env: &impl Env) -> Check {
    const ID: &str = "no_proxy";
    let proxies: Vec<&str> = [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ]
    .into_iter()
    .filter(|name| env.non_empty(name).is_some())
    .collect();
    if proxies.is_empty() {
        return Check::ok(ID, "no HTTP proxy is set")
            .with(json!({ "proxy_variables": [], "missing": [] }));
    }
    let no_proxy: Vec<String> = ["NO_PROXY", "no_proxy"]
        .into_iter()
        .filter_map(|name| env.non_empty(name))
        .flat_map(|v| {
            v.to_string_lossy()
                .split(',')
                .map(|s| s.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .collect();
    let missing: Vec<&str> = ["127.0.0.1", "localhost"]
        .into_iter()
        .filter(|host| !no_proxy.iter().any(|entry| entry == host))
        .collect();
    let details = json!({ "proxy_variables": proxies, "missing": missing });
    if missing.is_empty() {
        Check::ok(
            ID,
            format!(
                "{} is set and NO_PROXY keeps 127.0.0.1 and localhost off the proxy",
                proxies.join(", ")
            ),
        )
        .with(details)
    } else {
        Check::fail(ID, format!("{} is set but NO_PROXY lacks {}: traffic to a local relayd would go to the proxy, route token included", proxies.join(", "), missing.join(" and ")))
            .next("add 127.0.0.1,localhost to NO_PROXY (and no_proxy) in the harness launch environment")
            .with(details)
    }
}

/// Where Relay's Codex hooks are installed, and whether they are whole. Codex runs hooks
/// from its system and managed layers at once, and hooks from the user's `CODEX_HOME` only
/// after that user has trusted them (`codex exec` never asks, and skips them without a word).
pub(crate) fn codex_hooks<E: Env>(inputs: &Inputs<'_, E>) -> Check {
    const ID: &str = "codex_hooks";
    let codex_home = agent_dir(inputs.env, names::CODEX_HOME, ".codex");
    let system = CodexLayer::read(
        &inputs.codex_system_dir,
        &CODEX_SYSTEM_HOOK_FILES,
        inputs.env,
    );
    let user = codex_home
        .as_deref()
        .map(|dir| CodexLayer::read(dir, &CODEX_USER_HOOK_FILES, inputs.env))
        .unwrap_or_default();
    let mut problems: Vec<String> = system
        .problems
        .iter()
        .chain(&user.problems)
        .cloned()
        .collect();
    if !system.hook_files.is_empty() || !user.hook_files.is_empty() {
        // The managed layer wins over the user's, which wins over the system's own.
        let switch = [
            system.hooks_feature("managed_config.toml"),
            user.hooks_feature("config.toml"),
            system.hooks_feature("config.toml"),
        ];
        problems.extend(codex_hooks_switched_off(switch.into_iter().flatten()));
    }
    let details = json!({
        "system_files": system.hook_files,
        "user_files": user.hook_files,
        "mcp_server_files": system.server_files.iter().chain(&user.server_files).collect::<Vec<_>>(),
        "problems": problems,
    });
    if !problems.is_empty() {
        return Check::fail(
            ID,
            format!("Relay's Codex set-up is broken: {}", problems.join("; ")),
        )
        .next("install the bundle's hooks.json and config.toml again as docs/harnesses.md says, or fix what is named")
        .with(details);
    }
    match (system.hook_files.is_empty(), user.hook_files.is_empty()) {
        (false, true) => Check::ok(
            ID,
            format!("Relay's Codex hooks are installed system-wide ({}), where Codex runs them without asking", system.hook_files.join(", ")),
        )
        .with(details),
        (false, false) => Check::warn(
            ID,
            format!("Relay's Codex hooks are installed system-wide and also in {}: once this user trusts the second copy, every hook runs twice", user.hook_files.join(", ")),
        )
        .next("remove Relay's hooks from the user's CODEX_HOME (and restore their own config.toml)")
        .with(details),
        (true, false) => Check::warn(
            ID,
            format!("Relay's Codex hooks are only in {}: Codex runs them only after this user has trusted them, and codex exec skips them until then without a word", user.hook_files.join(", ")),
        )
        .next("install them system-wide in /etc/codex as the administrator's install in docs/harnesses.md says, or start codex once and trust them when it asks")
        .with(details),
        (true, true) if !system.server_files.is_empty() || !user.server_files.is_empty() => Check::warn(
            ID,
            format!("Codex runs Relay's MCP server ({}) but has no Relay hooks: no hook event reaches Relay, so policy never sees a tool call", system.server_files.iter().chain(&user.server_files).cloned().collect::<Vec<_>>().join(", ")),
        )
        .next("install the bundle's hooks.json in /etc/codex as docs/harnesses.md says")
        .with(details),
        (true, true) => Check::skip(ID, "no Relay hooks for Codex found (Codex is not set up for Relay here)")
            .with(details),
    }
}

/// Where Codex's hooks feature is switched off: the first of the settings (highest
/// precedence first) decides.
fn codex_hooks_switched_off<'a>(
    mut settings: impl Iterator<Item = &'a (String, PathBuf, bool)>,
) -> Option<String> {
    let (_, path, on) = settings.next()?;
    (!on).then(|| {
        format!(
            "{} switches Codex's hooks off ([features] hooks = false), Relay's among them: add [features] hooks = true to the managed layer, as docs/harnesses.md says",
            display(path)
        )
    })
}

/// Relay's entries in one of Codex's configuration layers (its system directory, or the
/// user's `CODEX_HOME`), and what is wrong with them.
#[derive(Default)]
struct CodexLayer {
    /// The files holding Relay's hooks.
    hook_files: Vec<String>,
    /// The files configuring Relay's MCP server.
    server_files: Vec<String>,
    /// `[features] hooks` (or its older name `codex_hooks`) where a file sets it: the
    /// file's name in the layer, its path and the value.
    hooks_features: Vec<(String, PathBuf, bool)>,
    problems: Vec<String>,
}

impl CodexLayer {
    fn read(dir: &Path, files: &[&str], env: &impl Env) -> CodexLayer {
        let mut layer = CodexLayer::default();
        let mut wiring = Wiring::default();
        for name in files {
            let file = AgentFile::load(&dir.join(name));
            layer.problems.extend(file.problem);
            let Some(value) = &file.value else { continue };
            let (hooks, servers) = (wiring.hook_count(), wiring.servers.len());
            wiring.add(value, "mcp_servers");
            if wiring.hook_count() > hooks {
                layer.hook_files.push(display(&file.path));
            }
            if wiring.servers.len() > servers {
                layer.server_files.push(display(&file.path));
            }
            let features = value.get("features");
            let switch = features.and_then(|f| f.get("hooks").or_else(|| f.get("codex_hooks")));
            if let Some(on) = switch.and_then(serde_json::Value::as_bool) {
                layer
                    .hooks_features
                    .push(((*name).to_owned(), file.path.clone(), on));
            }
        }
        if wiring.has_hooks() {
            layer
                .problems
                .extend(wiring.hook_problems("codex", &CODEX_HOOK_EVENTS));
        }
        layer.problems.extend(wiring.install_problems(env, None));
        layer
    }

    /// The hooks feature as the file `name` of this layer sets it, if it does.
    fn hooks_feature(&self, name: &str) -> Option<&(String, PathBuf, bool)> {
        self.hooks_features.iter().find(|(file, _, _)| file == name)
    }
}

/// How Claude Code is set up for Relay here: system-wide through its managed files (the
/// hooks in `managed-settings.json`, the server in `managed-mcp.json`), whether what they
/// hold is whole, and whether this user also installed Relay's plugin, whose hooks would
/// then run a second time.
pub(crate) fn claude_code<E: Env>(inputs: &Inputs<'_, E>) -> Check {
    const ID: &str = "claude_code";
    let settings = AgentFile::load(&inputs.claude_system_dir.join("managed-settings.json"));
    let servers = AgentFile::load(&inputs.claude_system_dir.join("managed-mcp.json"));
    let plugins = agent_dir(inputs.env, names::CLAUDE_CONFIG_DIR, ".claude")
        .map(|dir| dir.join("plugins").join("installed_plugins.json"));
    let plugin = plugins
        .as_deref()
        .is_some_and(|file| file_names(file, "relay@relay"));
    let mut wiring = Wiring::default();
    let mut problems: Vec<String> = settings
        .problem
        .iter()
        .chain(&servers.problem)
        .cloned()
        .collect();
    if let Some(value) = &settings.value {
        wiring.add(value, "mcpServers");
    }
    // Without one in the managed settings, the launch environment's is what Claude Code uses.
    let env_base_url = inputs
        .env
        .non_empty(ANTHROPIC_BASE_URL)
        .map(|url| url.to_string_lossy().into_owned())
        .filter(|_| wiring.base_urls.is_empty());
    let hooks = wiring.has_hooks() || (settings.problem.is_some() && settings.names_relay);
    if let Some(value) = &servers.value {
        wiring.add(value, "mcpServers");
    }
    let server = !wiring.servers.is_empty() || (servers.problem.is_some() && servers.names_relay);
    if wiring.has_hooks() {
        problems.extend(wiring.hook_problems("claude", &CLAUDE_HOOK_EVENTS));
        if wiring.base_urls.is_empty() && env_base_url.is_none() {
            problems.push(format!(
                "{} sets no env.ANTHROPIC_BASE_URL (nor does this environment): Claude Code sends its model requests straight to the provider",
                display(&settings.path)
            ));
        }
    }
    problems.extend(wiring.install_problems(inputs.env, env_base_url.as_deref()));
    let details = json!({
        "managed_settings": display(&settings.path),
        "hooks": hooks,
        "managed_mcp": display(&servers.path),
        "mcp_server": server,
        "user_plugin": plugin,
        "problems": problems,
    });
    if !problems.is_empty() {
        return Check::fail(
            ID,
            format!("Relay's Claude Code set-up in {} is broken: {}", display(&inputs.claude_system_dir), problems.join("; ")),
        )
        .next("install the bundle's managed-settings.json and managed-mcp.json again as docs/harnesses.md says, or fix what is named")
        .with(details);
    }
    match (hooks, server, plugin) {
        (true, true, false) => Check::ok(
            ID,
            format!("Relay's hooks and MCP server are installed for every user ({})", display(&inputs.claude_system_dir)),
        )
        .with(details),
        (true, true, true) => Check::warn(
            ID,
            "Relay's hooks are installed for every user and this user also installed Relay's plugin: every hook runs twice",
        )
        .next("uninstall the plugin (claude plugin uninstall relay@relay)")
        .with(details),
        (true, false, _) => Check::warn(
            ID,
            format!("{} has Relay's hooks but {} has no relay server: no worker starts, so model requests pass through", display(&settings.path), display(&servers.path)),
        )
        .next("install the bundle's managed-mcp.json beside managed-settings.json, as docs/harnesses.md says")
        .with(details),
        (false, true, _) => Check::warn(
            ID,
            format!("{} has Relay's server but {} has no Relay hooks: no hook event reaches Relay", display(&servers.path), display(&settings.path)),
        )
        .next("install the bundle's managed-settings.json, as docs/harnesses.md says")
        .with(details),
        (false, false, true) => Check::ok(
            ID,
            "Relay's plugin is installed for this user; sessions get Relay's hooks and server, and the daemon's address only where the launch sets ANTHROPIC_BASE_URL",
        )
        .with(details),
        (false, false, false) => Check::skip(
            ID,
            "Claude Code is not set up for Relay in its managed files or as this user's plugin (a launch with --settings and --mcp-config leaves nothing to check)",
        )
        .with(details),
    }
}

/// An agent's own configuration directory: `variable` when set, else `default` in `HOME`.
fn agent_dir(env: &impl Env, variable: &str, default: &str) -> Option<PathBuf> {
    env.non_empty(variable).map(PathBuf::from).or_else(|| {
        env.non_empty(names::HOME)
            .map(|home| Path::new(&home).join(default))
    })
}

/// Whether `file` is a readable regular file of reasonable size that names `needle`.
fn file_names(file: &Path, needle: &str) -> bool {
    crate::wiring::read(file)
        .ok()
        .flatten()
        .is_some_and(|bytes| crate::wiring::contains(&bytes, needle.as_bytes()))
}

mod pi;

#[cfg(test)]
mod tests;
