//! The text of each bundle file. Every function here is pure: the same options give the
//! same bytes, and nothing user-, run- or folder-specific goes in (SPEC §10.2).

use relay_identity::bundle::{CLAUDE_HOOK_EVENTS, CODEX_HOOK_EVENTS, PiExtensionSettings};
use serde_json::{Value, json};

use super::{Agent, BundleFile, BundleOptions, Platform};

/// The pi extension's source; its one `__RELAY_BUNDLE_CONFIG__` placeholder becomes the
/// daemon address and the binaries' paths.
const PI_EXTENSION: &str = include_str!("pi-extension.ts");
const PI_PLACEHOLDER: &str = "__RELAY_BUNDLE_CONFIG__";

/// The hook timeout both agents get, in seconds (SPEC §7.3).
const HOOK_TIMEOUT_SECS: u64 = 30;

/// Codex's `SessionEnd` hook timeout, in seconds: Codex cuts a longer one to 3 s and warns
/// about it on every run (relay-hook itself gives up after 2.5 s there).
const CODEX_SESSION_END_TIMEOUT_SECS: u64 = 3;

/// The environment Codex passes to the MCP server (it filters the rest out).
const CODEX_MCP_ENV_VARS: [&str; 11] = [
    "HOME",
    "XDG_CONFIG_HOME",
    "RELAY_CLIENT_TOKEN",
    "RELAY_WORKER_ADVERTISE_ADDRESS",
    "RELAY_WORKER_PORT",
    "RELAY_EXTRA_CA_FILE",
    "RELAY_LOG",
    "RELAY_LOG_FORMAT",
    "SSL_CERT_FILE",
    "NO_PROXY",
    "no_proxy",
];

pub(super) fn files(options: &BundleOptions) -> Vec<BundleFile> {
    let mut agents = options.agents.clone();
    agents.sort();
    agents.dedup();
    let mut files = Vec::new();
    for agent in agents {
        match agent {
            Agent::Claude => claude(options, &mut files),
            Agent::Codex => codex(options, &mut files),
            Agent::Pi => pi(options, &mut files),
        }
    }
    files
}

/// The daemon origin as generated configuration writes it: `127.0.0.1` for `localhost`.
pub(super) fn origin(options: &BundleOptions) -> String {
    let address = &options.daemon_address;
    format!(
        "{}://{}:{}",
        address.scheme(),
        address.connect_host(),
        address.port()
    )
}

/// The path of one of the Relay binaries in the bin directory.
fn binary(options: &BundleOptions, name: &str) -> String {
    let dir = options.bin_dir.as_str();
    let separator = options.platform.separator();
    // A root directory (`/`, `C:\`) already ends with its separator.
    let separator = if dir.ends_with(separator) {
        String::new()
    } else {
        separator.to_string()
    };
    format!(
        "{dir}{separator}{name}{}",
        options.platform.executable_suffix()
    )
}

/// The hook command line for one event.
fn hook_command(options: &BundleOptions, agent: &str, event: &str) -> String {
    let mut relay_hook = binary(options, "relay-hook");
    if agent == "claude" && options.platform == Platform::Windows {
        // Claude Code runs hook commands through Git Bash on Windows, where a backslash is
        // an escape (`C:\ProgramData` becomes `C:ProgramData`); Windows takes forward
        // slashes as well.
        relay_hook = relay_hook.replace('\\', "/");
    }
    relay_identity::bundle::hook_command(&relay_hook, agent, &origin(options), event)
}

fn hooks_object(options: &BundleOptions, agent: &str, events: &[(&str, bool)]) -> Value {
    let mut hooks = serde_json::Map::new();
    for &(event, takes_matcher) in events {
        let handler = json!({
            "type": "command",
            "command": hook_command(options, agent, event),
            "timeout": if agent == "codex" && event == "SessionEnd" {
                CODEX_SESSION_END_TIMEOUT_SECS
            } else {
                HOOK_TIMEOUT_SECS
            },
        });
        let mut group = serde_json::Map::new();
        if takes_matcher {
            group.insert("matcher".to_owned(), json!("*"));
        }
        group.insert("hooks".to_owned(), json!([handler]));
        hooks.insert(event.to_owned(), json!([Value::Object(group)]));
    }
    Value::Object(hooks)
}

fn json_file(path: &str, value: &Value) -> BundleFile {
    // serde_json keeps object keys sorted (no preserve_order), so the bytes are stable.
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    BundleFile {
        path: path.to_owned(),
        bytes: text.into_bytes(),
    }
}

fn mcp_args(options: &BundleOptions) -> Value {
    json!(["--daemon-address", origin(options)])
}

fn claude(options: &BundleOptions, files: &mut Vec<BundleFile>) {
    files.push(json_file(
        "claude-code/.claude-plugin/marketplace.json",
        &json!({
            "name": "relay",
            "owner": { "name": "Relay administrators" },
            "plugins": [{
                "name": "relay",
                "source": "./plugin-v1",
                "description": "Routes model requests and hook events through the Relay daemon",
            }],
        }),
    ));
    files.push(json_file(
        "claude-code/plugin-v1/.claude-plugin/plugin.json",
        &json!({
            "name": "relay",
            "description": "Routes model requests and hook events through the Relay daemon",
        }),
    ));
    let mcp_servers = json!({
        "mcpServers": {
            "relay": {
                "type": "stdio",
                "command": binary(options, "relay-mcp"),
                "args": mcp_args(options),
            },
        },
    });
    let hooks = hooks_object(options, "claude", &CLAUDE_HOOK_EVENTS);
    files.push(json_file("claude-code/plugin-v1/.mcp.json", &mcp_servers));
    files.push(json_file(
        "claude-code/plugin-v1/hooks/hooks.json",
        &json!({ "hooks": hooks }),
    ));
    // The pinned Claude Code does not install a plugin that managed settings register
    // through a marketplace, so the managed files carry the hooks and the MCP server
    // themselves; the plugin stays for a launch with `--plugin-dir` where nothing is
    // installed system-wide.
    files.push(json_file(
        "claude-code/settings-v1/managed-mcp.json",
        &mcp_servers,
    ));
    files.push(json_file(
        "claude-code/settings-v1/managed-settings.json",
        &json!({
            "env": { "ANTHROPIC_BASE_URL": origin(options) },
            "hooks": hooks,
        }),
    ));
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn toml_array(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|item| toml_string(item)).collect();
    format!("[{}]", quoted.join(", "))
}

fn codex(options: &BundleOptions, files: &mut Vec<BundleFile>) {
    let origin = origin(options);
    let env_vars: Vec<String> = CODEX_MCP_ENV_VARS.iter().map(|v| (*v).to_owned()).collect();
    // Installed as Codex's managed layer (`/etc/codex/managed_config.toml`), or merged into
    // one user's own: top-level keys first, then tables, so the merge can put the top-level
    // lines beside the user's and append the tables after them (docs/harnesses.md).
    let config = format!(
        "model_provider = \"relay\"\n\
         \n\
         [model_providers.relay]\n\
         name = \"Relay\"\n\
         base_url = {base_url}\n\
         wire_api = \"responses\"\n\
         requires_openai_auth = true\n\
         supports_websockets = false\n\
         env_http_headers = {{ \"x-relay-client-token\" = \"RELAY_CLIENT_TOKEN\" }}\n\
         \n\
         [mcp_servers.relay]\n\
         command = {command}\n\
         args = {args}\n\
         startup_timeout_sec = 20\n\
         env_vars = {env_vars}\n",
        base_url = toml_string(&format!("{origin}/v1")),
        command = toml_string(&binary(options, "relay-mcp")),
        args = toml_array(&["--daemon-address".to_owned(), origin.clone()]),
        env_vars = toml_array(&env_vars),
    );
    files.push(BundleFile {
        path: "codex/settings-v1/config.toml".to_owned(),
        bytes: config.into_bytes(),
    });
    files.push(json_file(
        "codex/settings-v1/hooks.json",
        &json!({ "hooks": hooks_object(options, "codex", &CODEX_HOOK_EVENTS) }),
    ));
}

/// What the pi extension is told: the daemon's origin and the two binaries' paths.
pub(super) fn pi_settings(options: &BundleOptions) -> PiExtensionSettings {
    PiExtensionSettings {
        daemon_address: origin(options),
        relay_hook: binary(options, "relay-hook"),
        relay_mcp: binary(options, "relay-mcp"),
    }
}

fn pi(options: &BundleOptions, files: &mut Vec<BundleFile>) {
    let source = PI_EXTENSION.replacen(PI_PLACEHOLDER, &pi_settings(options).to_literal(), 1);
    files.push(BundleFile {
        path: "pi/extension-v1/index.ts".to_owned(),
        bytes: source.into_bytes(),
    });
}

/// Whether the checked-in extension has exactly one placeholder (a unit test holds it).
#[cfg(test)]
pub(super) fn pi_placeholder_count() -> usize {
    PI_EXTENSION.matches(PI_PLACEHOLDER).count()
}
