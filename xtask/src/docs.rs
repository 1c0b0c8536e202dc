//! `cargo xtask docs [--check]`: generates `docs/reference.md` from the code, or with
//! `--check` fails when the checked-in file differs from what would be generated.
//!
//! - flags: each binary's `--help` and its subcommands' (the built debug binaries, run with
//!   an empty environment so that no `[env: …]` value leaks in);
//! - configuration keys and defaults: `relayd config defaults`;
//! - environment variables: [`ENVIRONMENT`], which a test keeps complete against every
//!   `"RELAY_…"` literal in `crates/` and `bins/` and every name in relay-identity's `names`;
//! - endpoints: [`ENDPOINTS`], which a test keeps equal to the paths `PathClass::classify` in
//!   `crates/relay-proxy/src/routes.rs` matches;
//! - lifecycle events: parsed from `crates/relay-logging/src/lifecycle.rs` (names, levels,
//!   messages and fields of `Lifecycle::name` and `Lifecycle::emit`).
//!
//! Everything but running the binaries is a pure function of text, tested in `docs/tests.rs`.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail};

use crate::{
    command::{cargo, project_root, step, target_dir},
    package::BINARIES,
};

/// The generated file, relative to the workspace root.
pub(crate) const REFERENCE: &str = "docs/reference.md";
/// Where the lifecycle events are defined, relative to the workspace root.
const LIFECYCLE_SOURCE: &str = "crates/relay-logging/src/lifecycle.rs";
/// Where the rate-limited provider-failure events are defined.
const PROVIDER_FAILURE_SOURCE: &str = "crates/relay-logging/src/rate_limit.rs";

/// Every environment variable a Relay binary reads: name, who reads it, what it does.
pub(crate) const ENVIRONMENT: [(&str, &str, &str); 26] = [
    (
        "RELAY_CLIENT_TOKEN",
        "relay-mcp, relay-hook, relay-doctor",
        "This user's route credential; when unset, the token file `<base>/relay/.client-token` is read. Never given to relayd.",
    ),
    (
        "RELAY_LOG",
        "all binaries",
        "Log level or filter (`error`, `warn`, `info`, `debug`, `trace`); it takes precedence over a config file's level (`[daemon.logging] level` for relayd, `[logging] level` for the others), and relayd's `--log-level` over it.",
    ),
    (
        "RELAY_LOG_FORMAT",
        "all binaries",
        "Log format on stderr, `human` or `jsonl`.",
    ),
    (
        "RELAY_SYSTEM_CONFIG_DIR",
        "all binaries",
        "The system configuration directory (default `/etc/relay`, `%ProgramData%\\relay` on Windows).",
    ),
    (
        "RELAY_DAEMON_MAX_TOKENS_PER_IDENTITY",
        "relayd",
        "Route credentials one machine identity may hold (1-64); overrides `[daemon] max_tokens_per_identity`.",
    ),
    (
        "RELAY_WORKER_ADVERTISE_ADDRESS",
        "relay-mcp, relay-worker",
        "The address a remote worker binds and the daemon connects to.",
    ),
    (
        "RELAY_WORKER_PORT",
        "relay-mcp, relay-worker",
        "The port of a remote worker.",
    ),
    (
        "RELAY_EXTRA_CA_FILE",
        "relay-mcp, relay-worker, relay-hook, relay-doctor",
        "Extra CA certificates (PEM) trusted for a remote daemon, besides the platform roots.",
    ),
    (
        "RELAY_HOOK_TIMEOUT_MS",
        "relay-hook",
        "Overrides the per-event timeout (5000 ms, 2500 ms for SessionEnd).",
    ),
    (
        "RELAY_DANGEROUS_TEST_ONLY_ALLOW_TEMP_BIN_DIR",
        "relayd managed-bundle",
        "For Relay's own end-to-end tests only: lets `--bin-dir` be a temporary directory. Never set it in production.",
    ),
    (
        "XDG_CONFIG_HOME",
        "all binaries",
        "First choice for the state directory base `<base>` (state in `<base>/relay/`).",
    ),
    (
        "HOME",
        "all binaries",
        "Second choice for the state directory base: `$HOME/.config`.",
    ),
    (
        "CREDENTIALS_DIRECTORY",
        "relayd",
        "Set by systemd for `LoadCredential=`: a provider key file directly in it may be root's, readable by the service through an ACL.",
    ),
    (
        "CODEX_HOME",
        "relay-doctor",
        "Codex's own configuration directory (default `$HOME/.codex`), where `relay-doctor` looks for Relay's hooks installed for this user only.",
    ),
    (
        "CLAUDE_CONFIG_DIR",
        "relay-doctor",
        "Claude Code's own configuration directory (default `$HOME/.claude`), where `relay-doctor` looks for Relay's plugin installed for this user.",
    ),
    (
        "USERPROFILE",
        "all binaries (Windows)",
        "Third choice for the state directory base: `%USERPROFILE%\\.config`.",
    ),
    (
        "ProgramData",
        "all binaries (Windows)",
        "The parent of the system configuration directory, `%ProgramData%\\relay`.",
    ),
    (
        "NO_PROXY",
        "relayd, relay-worker, relay-doctor",
        "Hosts that `[upstream] proxy_url` is not used for (`no_proxy` when unset); relay-mcp passes both spellings to the worker.",
    ),
    (
        "no_proxy",
        "relayd, relay-worker, relay-doctor",
        "`NO_PROXY` as many tools spell it; read when `NO_PROXY` is unset.",
    ),
    (
        "SSL_CERT_FILE",
        "relay-doctor",
        "The CA bundle Codex reads instead of the system's roots; relay-doctor --live checks that a remote daemon's certificate verifies with it.",
    ),
    (
        "NODE_EXTRA_CA_CERTS",
        "relay-doctor",
        "The CAs Claude Code and pi add to Node's bundled roots; relay-doctor --live checks that a remote daemon's certificate verifies with them.",
    ),
    (
        "OPENAI_API_KEY",
        "relayd",
        "The daemon's own OpenAI key for pass-through (a key file in `[upstream]` is preferred).",
    ),
    (
        "ANTHROPIC_API_KEY",
        "relayd",
        "The daemon's own Anthropic key for pass-through (a key file in `[upstream]` is preferred).",
    ),
    (
        "ANTHROPIC_CUSTOM_HEADERS",
        "relay-doctor",
        "Claude Code's extra request headers, which carry the route token; checked to carry the same token.",
    ),
    (
        "LANG",
        "relay-mcp",
        "Passed through to the worker, whose environment is otherwise cleared.",
    ),
    (
        "PATH",
        "relay-mcp",
        "Passed through to the worker, whose environment is otherwise cleared.",
    ),
];

/// Every endpoint relayd serves: method, path, what it is for, and the literals
/// `PathClass::classify` matches for it (checked by a test).
pub(crate) struct Endpoint {
    pub(crate) method: &'static str,
    pub(crate) path: &'static str,
    pub(crate) purpose: &'static str,
    /// Only read by the test that compares this table with routes.rs.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) literals: &'static [&'static str],
}

pub(crate) const ENDPOINTS: [Endpoint; 20] = [
    endpoint("HEAD", "/", "Liveness probe without a body.", &["/"]),
    endpoint(
        "GET",
        "/healthz",
        "Health: `service`, `version`, `instance_id`, `deployment_mode`, `status` (`ok`, or `degraded` while state cannot be written).",
        &["/healthz"],
    ),
    endpoint("GET", "/metrics", "Prometheus metrics.", &["/metrics"]),
    endpoint(
        "GET",
        "/_relay/v1/workers",
        "The workers this daemon knows.",
        &["/_relay/v1/workers"],
    ),
    endpoint(
        "GET",
        "/_relay/v1/workers/status",
        "Status of every worker.",
        &["/_relay/v1/workers/status"],
    ),
    endpoint(
        "GET",
        "/_relay/v1/workers/{id}/status",
        "Status of one worker.",
        &["/_relay/v1/workers/", "/status"],
    ),
    endpoint(
        "GET",
        "/_relay/v1/route",
        "Where the caller's route goes (`worker` or pass-through).",
        &["/_relay/v1/route"],
    ),
    endpoint(
        "GET",
        "/_relay/control/v1/mcp",
        "Control session of relay-mcp (WebSocket upgrade).",
        &["/_relay/control/v1/mcp"],
    ),
    endpoint(
        "GET",
        "/_relay/control/v1/worker",
        "Control session of relay-worker (WebSocket upgrade).",
        &["/_relay/control/v1/worker"],
    ),
    endpoint(
        "POST",
        "/v1/messages",
        "Anthropic Messages.",
        &["/v1/messages"],
    ),
    endpoint(
        "POST",
        "/v1/messages/count_tokens",
        "Anthropic token counting.",
        &["/v1/messages/count_tokens"],
    ),
    endpoint(
        "any",
        "/v1/responses",
        "OpenAI Responses (also `/responses`).",
        &["/v1/responses", "/responses"],
    ),
    endpoint(
        "any",
        "/backend-api/codex/responses",
        "ChatGPT-authenticated Codex Responses.",
        &["/backend-api/codex/responses"],
    ),
    endpoint(
        "POST",
        "/v1/chat/completions",
        "OpenAI Chat Completions (also `/chat/completions`).",
        &["/v1/chat/completions", "/chat/completions"],
    ),
    endpoint(
        "GET",
        "/v1/models",
        "Model list (also `/models`).",
        &["/v1/models", "/models"],
    ),
    endpoint(
        "POST",
        "/hooks/claude-code",
        "Claude Code hook events from relay-hook.",
        &["/hooks/claude-code"],
    ),
    endpoint(
        "POST",
        "/hooks/codex",
        "Codex hook events from relay-hook.",
        &["/hooks/codex"],
    ),
    endpoint(
        "POST",
        "/hooks/pi",
        "pi hook events from relay-hook.",
        &["/hooks/pi"],
    ),
    endpoint(
        "GET",
        "/bindings",
        "Admin socket `<state_dir>/admin.sock` only: the bindings list.",
        &[],
    ),
    endpoint(
        "POST",
        "/bindings/{fingerprint}/revoke|block|unblock",
        "Admin socket only: `relayd bindings` changes.",
        &[],
    ),
];

const fn endpoint(
    method: &'static str,
    path: &'static str,
    purpose: &'static str,
    literals: &'static [&'static str],
) -> Endpoint {
    Endpoint {
        method,
        path,
        purpose,
        literals,
    }
}

/// One lifecycle event as `lifecycle.rs` defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    pub(crate) name: String,
    pub(crate) level: String,
    pub(crate) message: String,
    pub(crate) fields: Vec<String>,
}

/// The `--help` of one command line (`relayd bindings`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Help {
    pub(crate) command: String,
    pub(crate) text: String,
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let check = match args {
        [] => false,
        [flag] if flag == "--check" => true,
        other => bail!("`cargo xtask docs` takes only `--check`, got {other:?}"),
    };
    let root = project_root()?;
    let mut build = cargo(["build", "--bins"])?;
    for binary in BINARIES {
        build.args(["--package", binary]);
    }
    step(
        "cargo build --bins (the five binaries, for their --help)",
        build,
    )?;
    let bin_dir = target_dir(&root).join("debug");

    let mut helps = Vec::new();
    for binary in BINARIES {
        collect_help(&bin_dir, &[binary.to_owned()], &mut helps)?;
    }
    let defaults = output(&bin_dir, &["relayd", "config", "defaults"])?;
    let lifecycle_path = root.join(LIFECYCLE_SOURCE);
    let lifecycle = fs::read_to_string(&lifecycle_path)
        .with_context(|| format!("could not read {}", lifecycle_path.display()))?;
    let mut events = lifecycle_events(&lifecycle)?;
    let failures_path = root.join(PROVIDER_FAILURE_SOURCE);
    let failures = fs::read_to_string(&failures_path)
        .with_context(|| format!("could not read {}", failures_path.display()))?;
    events.extend(provider_failure_events(&failures)?);
    let generated = render(&helps, &config_keys(&defaults), &events);

    let path = root.join(REFERENCE);
    if check {
        let current = fs::read_to_string(&path).unwrap_or_default();
        if current != generated {
            bail!(
                "{REFERENCE} is not what `cargo xtask docs` generates from the code: run `cargo xtask docs` and commit the result"
            );
        }
        println!("{REFERENCE} is up to date");
    } else {
        fs::write(&path, generated)
            .with_context(|| format!("could not write {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Runs `words --help` and then the same for each of its subcommands, depth first.
fn collect_help(bin_dir: &Path, words: &[String], helps: &mut Vec<Help>) -> Result<()> {
    let mut args: Vec<&str> = words.iter().map(String::as_str).collect();
    args.push("--help");
    let text = output(bin_dir, &args)?;
    let subcommands = subcommands(&text);
    helps.push(Help {
        command: words.join(" "),
        text,
    });
    for subcommand in subcommands {
        let mut next = words.to_vec();
        next.push(subcommand);
        collect_help(bin_dir, &next, helps)?;
    }
    Ok(())
}

/// The stdout of `bin_dir/<args[0]> args[1..]` in an environment with only `PATH`.
fn output(bin_dir: &Path, args: &[&str]) -> Result<String> {
    let (program, rest) = args.split_first().context("no program")?;
    let program: PathBuf = bin_dir.join(program);
    let mut command = Command::new(&program);
    command.args(rest).env_clear().stdin(Stdio::null());
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    let out = command
        .output()
        .with_context(|| format!("could not run {}", program.display()))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{}` printed no UTF-8", args.join(" ")))
}

/// The subcommands a clap help text lists under `Commands:`, without `help`.
pub(crate) fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| line.trim_end() != "Commands:")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        // A description that wraps continues on a line indented deeper than the names.
        .filter(|line| line.starts_with("  ") && !line.starts_with("    "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// `(section.key, default)` for every key of `relayd config defaults`, in its order.
pub(crate) fn config_keys(defaults: &str) -> Vec<(String, String)> {
    let mut section = String::new();
    let mut keys = Vec::new();
    for line in defaults.lines().map(str::trim) {
        if let Some(name) = line
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
        {
            section = name.to_owned();
        } else if let Some((key, value)) = line.split_once(" = ") {
            let key = if section.is_empty() {
                key.to_owned()
            } else {
                format!("{section}.{key}")
            };
            keys.push((key, value.to_owned()));
        }
    }
    keys
}

/// The lifecycle events of `lifecycle.rs`: names from `Lifecycle::name`, level, message and
/// fields from `Lifecycle::emit`, in the order `name` lists them.
pub(crate) fn lifecycle_events(source: &str) -> Result<Vec<Event>> {
    let (before_emit, emit) = source
        .split_once("pub fn emit(&self)")
        .context("lifecycle.rs has no `pub fn emit(&self)`")?;
    let name_fn = before_emit
        .split_once("pub fn name(&self)")
        .map(|(_, rest)| rest)
        .context("lifecycle.rs has no `pub fn name(&self)`")?;
    let mut names = Vec::new();
    for line in name_fn.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Lifecycle::")
            && let Some((variant, name)) = rest.split_once(" => \"")
        {
            let variant = variant.split_whitespace().next().unwrap_or_default();
            let name = name.trim_end_matches(['"', ',']);
            names.push((variant.to_owned(), name.to_owned()));
        }
    }
    // In `emit`: each arm starts with `Lifecycle::Variant`, then `lifecycle_event!(LEVEL,
    // name, "message";` and one field per line up to the arm's `)`.
    let mut arms: Vec<(String, Event)> = Vec::new();
    let mut variant: Option<String> = None;
    let mut open: Option<(String, Event)> = None;
    for line in emit.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Lifecycle::") {
            let end = rest
                .find(|c: char| !c.is_alphanumeric())
                .unwrap_or(rest.len());
            variant = Some(rest[..end].to_owned());
        }
        if let Some(at) = line.find("lifecycle_event!(") {
            let rest = &line[at + "lifecycle_event!(".len()..];
            let (level, rest) = rest.split_once(", name, \"").with_context(|| {
                format!("lifecycle.rs: cannot read the level and message of: {line}")
            })?;
            let (message, fields) = rest
                .split_once("\";")
                .with_context(|| format!("lifecycle.rs: cannot read the message of: {line}"))?;
            // One arm may log at different levels (a `match` inside it): the same variant.
            let variant = variant
                .clone()
                .with_context(|| format!("lifecycle.rs: no variant before: {line}"))?;
            let mut event = Event {
                name: String::new(),
                level: level.to_ascii_lowercase(),
                message: message.to_owned(),
                fields: Vec::new(),
            };
            let inline = fields.trim();
            if inline.is_empty() {
                open = Some((variant, event));
            } else {
                event.fields.extend(field_name(inline));
                push_arm(&mut arms, (variant, event));
            }
            continue;
        }
        if let Some((_, event)) = open.as_mut() {
            if line.starts_with(')') {
                if let Some(done) = open.take() {
                    push_arm(&mut arms, done);
                }
            } else if let Some(field) = field_name(line) {
                event.fields.push(field);
            }
        }
    }
    let mut events = Vec::new();
    for (variant, name) in names {
        let (_, event) = arms
            .iter()
            .find(|(arm, _)| *arm == variant)
            .with_context(|| format!("lifecycle.rs: `emit` has no arm for {variant}"))?;
        let mut event = event.clone();
        event.name = name;
        events.push(event);
    }
    if events.is_empty() {
        bail!("lifecycle.rs: no lifecycle event found");
    }
    Ok(events)
}

/// The rate-limited provider-failure events of `rate_limit.rs`, from
/// `ProviderFailure::emit_with`: each arm's `tracing::<level>!(` with its fields (not
/// `target` and `event`) and its closing message literal. The event name is the variant's
/// name in snake case, which is how `ProviderFailure::NAMES` spells it (checked by a test).
pub(crate) fn provider_failure_events(source: &str) -> Result<Vec<Event>> {
    let body = source
        .split_once("fn emit_with(")
        .map(|(_, rest)| rest)
        .context("rate_limit.rs has no `fn emit_with(`")?;
    let mut events = Vec::new();
    let mut current: Option<Event> = None;
    for line in body.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("ProviderFailure::") {
            let end = rest
                .find(|c: char| !c.is_alphanumeric())
                .unwrap_or(rest.len());
            current = Some(Event {
                name: snake_case(&rest[..end]),
                level: String::new(),
                message: String::new(),
                fields: Vec::new(),
            });
        } else if let Some(event) = current.as_mut() {
            if let Some(rest) = line.strip_prefix("} => tracing::") {
                event.level = rest.trim_end_matches("!(").to_owned();
            } else if line.starts_with('"') {
                event.message = line.trim_matches('"').to_owned();
                if let Some(done) = current.take() {
                    events.push(done);
                }
            } else if !event.level.is_empty()
                && let Some(field) = field_name(line)
                && field != "event"
            {
                event.fields.push(field);
            }
        }
    }
    if events.is_empty() {
        bail!("rate_limit.rs: no provider-failure event found");
    }
    Ok(events)
}

/// `UpstreamRequestFailed` → `upstream_request_failed`.
pub(crate) fn snake_case(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Adds an arm, or merges a second `lifecycle_event!` of the same variant into the first:
/// its level joins the levels (`info or warn`), its fields the fields.
fn push_arm(arms: &mut Vec<(String, Event)>, (variant, event): (String, Event)) {
    match arms.iter_mut().find(|(arm, _)| *arm == variant) {
        Some((_, first)) => {
            if !first.level.split(" or ").any(|level| level == event.level) {
                first.level = format!("{} or {}", first.level, event.level);
            }
            for field in event.fields {
                if !first.fields.contains(&field) {
                    first.fields.push(field);
                }
            }
        }
        None => arms.push((variant, event)),
    }
}

/// The field a line of a `lifecycle_event!` names: `name = value,` or `name,`.
fn field_name(line: &str) -> Option<String> {
    let end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(line.len());
    let (name, rest) = line.split_at(end);
    let rest = rest.trim_start();
    let starts_lower = name.chars().next().is_some_and(|c| c.is_ascii_lowercase());
    (starts_lower && (rest.starts_with('=') || rest.starts_with(',') || rest.is_empty()))
        .then(|| name.to_owned())
}

/// The whole of `docs/reference.md`.
pub(crate) fn render(helps: &[Help], config: &[(String, String)], events: &[Event]) -> String {
    let mut out = String::new();
    out.push_str("# Reference\n\n");
    out.push_str(
        "This file is generated by `cargo xtask docs` from the binaries' `--help`, `relayd config defaults`, the endpoint and environment tables of `xtask/src/docs.rs` (kept complete by its tests) and the lifecycle events of `crates/relay-logging/src/lifecycle.rs`.\n",
    );
    out.push_str("Do not edit it by hand: change the code, then run `cargo xtask docs`; CI runs `cargo xtask docs --check` and fails when this file is out of date.\n\n");

    out.push_str("## Command lines\n\n");
    for help in helps {
        out.push_str(&format!("### `{}`\n\n```text\n", help.command));
        out.push_str(help.text.trim_end());
        out.push_str("\n```\n\n");
    }

    out.push_str("## Environment variables\n\n");
    out.push_str("An empty variable counts as unset.\n\n");
    out.push_str("| Variable | Read by | Meaning |\n|---|---|---|\n");
    for (name, readers, meaning) in ENVIRONMENT {
        out.push_str(&format!("| `{name}` | {readers} | {meaning} |\n"));
    }

    out.push_str("\n## Configuration keys\n\n");
    out.push_str(
        "Every key of `config.toml` with its default, as `relayd config defaults` prints them.\n",
    );
    out.push_str("relayd reads the user file `<base>/relay/config.toml` and the system file `/etc/relay/config.toml` (or `--config FILE` only).\n");
    out.push_str("A key ending in `_secs` takes whole or fractional seconds, and one ending in `_ms` milliseconds; either is at most a year (31,536,000 seconds), and a longer one is refused at load.\n");
    out.push_str("Counts and limits must be positive (`binding_tombstone_days` too: a tombstone that ends at once protects nothing), and a starting delay may not exceed the delay it grows to (`reconnect_first_ms` ≤ `reconnect_cap_ms`, `retry_base_ms` ≤ `retry_cap_secs`). relayd also checks `[logging] level`, which it does not use but the workers of its machine read from the same files and refuse to start on.\n");
    out.push_str("Each file must be a regular file (a symlink to one is followed) of at most 1 MiB: a FIFO, a device or a directory at its path, or a symlink to nothing, is refused at load with the file named, rather than read without end, waited on, or taken for no file.\n\n");
    out.push_str("A file every user could change is refused too, since it says where Relay sends the agents' traffic: one every user may write, or one in a directory every user may write without the sticky bit, or with it when the file belongs to neither root nor the reading user (who could have put it there); every directory and symlink on the way to the file is judged the same way, by the directory it is in and whose it is; group write is left to the administrator, a directory another user owns is followed where no other user could have put it, and on a read-only mount a directory's modes are not judged (a Kubernetes ConfigMap's directory is 0777) but a file every user may write is refused all the same, as the mount may be only relayd's view of it (systemd's `ProtectSystem`). Each refusal names the file, directory or link to fix. The rule counts modes only: a POSIX ACL that lets one other user write, or a file another user owns in a directory only root may write, is the administrator's to avoid.\n\n");
    out.push_str("| Key | Default |\n|---|---|\n");
    for (key, value) in config {
        out.push_str(&format!("| `{key}` | `{value}` |\n"));
    }

    out.push_str("\n## Endpoints\n\n");
    out.push_str("| Method | Path | Purpose |\n|---|---|---|\n");
    for endpoint in &ENDPOINTS {
        out.push_str(&format!(
            "| {} | `{}` | {} |\n",
            endpoint.method,
            endpoint.path.replace('|', "\\|"),
            endpoint.purpose
        ));
    }

    out.push_str("\n## Lifecycle events\n\n");
    out.push_str("Each is one log record with the target `relay::lifecycle` and the event name in its `event` field.\n");
    out.push_str("The provider-failure events (`upstream_request_failed`, `worker_request_failed`, `worker_communication_failed`) are rate-limited and carry `suppressed_since_last_emit`.\n\n");
    out.push_str("| Event | Level | Message | Fields |\n|---|---|---|---|\n");
    for event in events {
        let fields: Vec<String> = event
            .fields
            .iter()
            .map(|field| format!("`{field}`"))
            .collect();
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            event.name,
            event.level,
            event.message,
            fields.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests;
