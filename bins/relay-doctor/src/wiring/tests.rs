use std::os::unix::fs::PermissionsExt as _;

use relay_identity::MapEnv;
use relay_identity::bundle::{CLAUDE_HOOK_EVENTS, CODEX_HOOK_EVENTS};
use serde_json::json;

use super::*;

pub(crate) const DAEMON: &str = "http://127.0.0.1:47632";

/// A directory with an executable `relay-hook` and `relay-mcp`.
pub(crate) fn bin_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in ["relay-hook", "relay-mcp"] {
        let path = dir.path().join(name);
        fs::write(&path, "#!/bin/sh\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

/// The hooks table the bundle writes for `agent` over `events`.
pub(crate) fn bundle_hooks(bin: &Path, agent: &str, events: &[(&str, bool)]) -> Value {
    let relay_hook = bin.join("relay-hook").display().to_string();
    let mut hooks = serde_json::Map::new();
    for &(event, _) in events {
        let command = relay_identity::bundle::hook_command(&relay_hook, agent, DAEMON, event);
        hooks.insert(
            event.to_owned(),
            json!([{ "matcher": "*", "hooks": [{ "type": "command", "command": command, "timeout": 30 }] }]),
        );
    }
    Value::Object(hooks)
}

fn wiring(value: &Value, servers_key: &str) -> Wiring {
    let mut wiring = Wiring::default();
    wiring.add(value, servers_key);
    wiring
}

#[test]
fn the_bundles_own_wiring_has_no_problem() {
    let bin = bin_dir();
    let env = MapEnv::new();
    let claude = json!({
        "env": { "ANTHROPIC_BASE_URL": DAEMON },
        "hooks": bundle_hooks(bin.path(), "claude", &CLAUDE_HOOK_EVENTS),
        "mcpServers": { "relay": { "command": bin.path().join("relay-mcp"), "args": ["--daemon-address", DAEMON] } },
    });
    let claude = wiring(&claude, "mcpServers");
    assert_eq!(claude.hooks.len(), 13);
    assert_eq!(claude.servers.len(), 1);
    assert!(
        claude
            .hook_problems("claude", &CLAUDE_HOOK_EVENTS)
            .is_empty()
    );
    assert!(claude.install_problems(&env, Some(DAEMON)).is_empty());

    let codex = wiring(
        &json!({ "hooks": bundle_hooks(bin.path(), "codex", &CODEX_HOOK_EVENTS) }),
        "mcp_servers",
    );
    assert!(codex.hook_problems("codex", &CODEX_HOOK_EVENTS).is_empty());
    assert!(codex.install_problems(&env, None).is_empty());
}

/// Each way an edited file still names `relay-hook` but leaves a gap is named.
#[test]
fn a_gap_in_the_hooks_is_named() {
    let bin = bin_dir();
    let mut hooks = bundle_hooks(bin.path(), "claude", &CLAUDE_HOOK_EVENTS);
    let table = hooks.as_object_mut().unwrap();
    table.remove("PreToolUse");
    table.remove("SessionEnd");
    let prompt = &mut table["UserPromptSubmit"][0]["hooks"][0]["command"];
    *prompt = json!(
        prompt
            .as_str()
            .unwrap()
            .replace("--fail-closed", "--fail-open")
    );
    let stop = &mut table["Stop"][0]["hooks"][0]["command"];
    *stop = json!(stop.as_str().unwrap().replace(" claude ", " codex "));
    let problems = wiring(&json!({ "hooks": hooks }), "mcpServers")
        .hook_problems("claude", &CLAUDE_HOOK_EVENTS);
    assert_eq!(
        problems,
        [
            "no Relay hook for PreToolUse, SessionEnd: those events never reach Relay",
            "the hook of Stop does not run `relay-hook claude`: the daemon would read the event as another agent's",
            "the hook of UserPromptSubmit runs with --fail-open: while the daemon cannot be asked, what policy would refuse goes ahead",
        ]
    );
}

/// A hook or server whose binary is missing or not executable, or that names another daemon.
#[test]
fn missing_binaries_and_other_daemons_are_named() {
    let bin = bin_dir();
    fs::set_permissions(
        bin.path().join("relay-mcp"),
        fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let mut hooks = bundle_hooks(bin.path(), "claude", &CLAUDE_HOOK_EVENTS);
    hooks["Stop"][0]["hooks"][0]["command"] = json!(format!(
        "/opt/gone/relay-hook claude --daemon-address {DAEMON}"
    ));
    hooks["Notification"][0]["hooks"][0]["command"] = json!(format!(
        "{} claude --daemon-address=http://127.0.0.1:1",
        bin.path().join("relay-hook").display()
    ));
    let value = json!({
        "hooks": hooks,
        "mcpServers": { "relay": { "command": bin.path().join("relay-mcp"), "args": ["--daemon-address", format!("{DAEMON}/")] } },
    });
    let problems = wiring(&value, "mcpServers")
        .install_problems(&MapEnv::new(), Some("http://localhost:47632"));
    assert_eq!(
        problems,
        [
            "/opt/gone/relay-hook does not exist".to_owned(),
            format!("{} is not an executable file", bin.path().join("relay-mcp").display()),
            "they name more than one daemon address (http://127.0.0.1:1, http://127.0.0.1:47632, http://localhost:47632): hooks, MCP server and model requests must reach the same daemon, spelled the same way".to_owned(),
        ]
    );
}

/// A bare program name is looked up on the environment's PATH.
#[test]
fn a_bare_name_is_looked_up_on_path() {
    let bin = bin_dir();
    let value = json!({ "hooks": { "Stop": [{ "hooks": [{ "command": "relay-hook claude" }] }] } });
    let wiring = wiring(&value, "mcpServers");
    assert_eq!(
        wiring.install_problems(&MapEnv::new(), None),
        ["relay-hook is not on PATH"]
    );
    let env = MapEnv::new().with(
        names::PATH,
        format!("/nonexistent:{}", bin.path().display()),
    );
    assert!(wiring.install_problems(&env, None).is_empty());
}

/// Other tools' hooks and servers are not Relay's; Windows paths are read too.
#[test]
fn only_relay_binaries_count() {
    let value = json!({
        "hooks": {
            "Stop": [{ "hooks": [{ "command": "/usr/bin/notify-send done" }, { "command": "/opt/relay-hooker claude" }] }],
            "PreToolUse": [{ "hooks": [{ "command": "C:\\Relay\\relay-hook.exe codex --fail-closed" }] }],
        },
        "mcp_servers": { "other": { "command": "/usr/bin/other-mcp" }, "relay": { "command": "relay-mcp.exe" } },
    });
    let wiring = wiring(&value, "mcp_servers");
    assert_eq!(wiring.hooks.keys().collect::<Vec<_>>(), ["PreToolUse"]);
    assert_eq!(
        wiring.hooks["PreToolUse"][0].agent.as_deref(),
        Some("codex")
    );
    assert!(!wiring.hooks["PreToolUse"][0].fail_open);
    assert_eq!(wiring.servers.len(), 1);
}

/// What a shell runs before the program (assignments, `exec`, `env` and its options) does
/// not hide a `relay-hook` command; a word that merely mentions it does not make one.
#[test]
fn a_hook_run_through_env_or_with_assignments_is_read() {
    let lines = [
        "RELAY_HOOK_TIMEOUT_MS=8000 /opt/relay/bin/relay-hook claude --fail-closed",
        "env -u HTTP_PROXY RELAY_LOG=warn /opt/relay/bin/relay-hook claude --fail-closed",
        "/usr/bin/env /opt/relay/bin/relay-hook claude --fail-closed",
        "exec /opt/relay/bin/relay-hook claude --fail-open",
        "exec -a hook /opt/relay/bin/relay-hook claude --fail-closed",
        "timeout -k 5 20 nohup nice -n 5 command /opt/relay/bin/relay-hook claude --fail-closed",
        "env -- /opt/relay/bin/relay-hook claude --fail-closed",
        // Quoted as a shell reads it, and run through a shell's `-c`.
        "'/opt/relay/bin/relay-hook' \"claude\" --fail-closed",
        "sh -c '/opt/relay/bin/relay-hook claude --fail-closed'",
        "/bin/bash --norc -o pipefail -lc 'RELAY_LOG=warn exec /opt/relay/bin/relay-hook claude --fail-open'",
        "env FOO=1 sh -ec \"bash -c '/opt/relay/bin/relay-hook claude --fail-closed'\"",
    ];
    for line in lines {
        let value = json!({ "hooks": { "PreToolUse": [{ "hooks": [{ "command": line }] }] } });
        let hooks = &wiring(&value, "mcp_servers").hooks;
        let command = hooks.get("PreToolUse").map(|c| &c[0]);
        assert_eq!(
            command.map(|c| c.program.as_str()),
            Some("/opt/relay/bin/relay-hook"),
            "{line}"
        );
        assert_eq!(command.unwrap().agent.as_deref(), Some("claude"), "{line}");
        assert_eq!(
            command.unwrap().fail_open,
            line.contains("--fail-open"),
            "{line}"
        );
    }
    // A quoted Windows path keeps its backslashes, as a shell's double quotes keep them.
    let line = r#""C:\Program Files\Relay\relay-hook.exe" codex --fail-closed"#;
    let value = json!({ "hooks": { "Stop": [{ "hooks": [{ "command": line }] }] } });
    assert_eq!(
        wiring(&value, "hooks").hooks["Stop"][0].program,
        r"C:\Program Files\Relay\relay-hook.exe"
    );
    // Unquoted backslashes with a quote elsewhere on the line: read as written.
    for line in [
        r#"C:\Relay\relay-hook.exe codex --fail-closed 2>>"%TEMP%\relay-hook.log""#,
        r#"C:\Relay\relay-hook.exe codex --daemon-address "http://127.0.0.1:47632""#,
    ] {
        let value = json!({ "hooks": { "Stop": [{ "hooks": [{ "command": line }] }] } });
        assert_eq!(
            wiring(&value, "hooks").hooks["Stop"][0].program,
            r"C:\Relay\relay-hook.exe",
            "{line}"
        );
    }
    for line in [
        "echo relay-hook",
        "/usr/bin/logger =relay-hook claude",
        // A shell's script is the word after its options, and only with `-c`.
        "sh /opt/relay/bin/relay-hook claude",
        "sh -c 'echo relay-hook' /opt/relay/bin/relay-hook",
        "sh +c '/opt/relay/bin/relay-hook claude'",
        // `command -v` and `-V` say where a program is and run nothing.
        "command -v /opt/relay/bin/relay-hook claude",
        "nohup command -V relay-hook claude",
    ] {
        let value = json!({ "hooks": { "Stop": [{ "hooks": [{ "command": line }] }] } });
        assert!(wiring(&value, "mcp_servers").hooks.is_empty(), "{line}");
    }
}

/// A file that names Relay but does not parse is a problem; another tool's broken file is
/// not; JSON and TOML are read by the file's name.
#[test]
fn files_are_read_as_their_agent_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("managed-settings.json");
    fs::write(&broken, r#"{"hooks": relay-hook"#).unwrap();
    let file = AgentFile::load(&broken);
    assert!(file.value.is_none());
    let problem = file.problem.unwrap();
    assert!(
        problem.starts_with(&format!("{} is not valid JSON", broken.display())),
        "{problem}"
    );

    fs::write(&broken, "{not json").unwrap();
    let other = AgentFile::load(&broken);
    assert!(other.problem.is_none() && other.value.is_none() && !other.names_relay);

    let toml = dir.path().join("managed_config.toml");
    fs::write(
        &toml,
        "[[hooks.Stop]]\n[[hooks.Stop.hooks]]\ntype = \"command\"\ncommand = \"/opt/relay/bin/relay-hook codex\"\n\n[mcp_servers.relay]\ncommand = \"/opt/relay/bin/relay-mcp\"\nargs = [\"--daemon-address\", \"http://127.0.0.1:47632\"]\n",
    )
    .unwrap();
    let file = AgentFile::load(&toml);
    assert!(file.names_relay && file.problem.is_none());
    let wiring = wiring(file.value.as_ref().unwrap(), "mcp_servers");
    assert_eq!(wiring.hooks["Stop"][0].program, "/opt/relay/bin/relay-hook");
    assert_eq!(wiring.servers[0].daemon_address.as_deref(), Some(DAEMON));

    fs::write(&toml, "command = \"relay-hook\"\n[[[").unwrap();
    let problem = AgentFile::load(&toml).problem.unwrap();
    assert!(problem.contains("is not valid TOML"), "{problem}");
    assert!(
        !problem.contains("[[["),
        "the file's text is not quoted: {problem}"
    );

    assert!(
        AgentFile::load(&dir.path().join("missing.json"))
            .problem
            .is_none()
    );
}

/// A FIFO, a directory or a file this user cannot read where an agent file belongs is
/// passed over, never waited on or reported as Relay's.
#[test]
fn what_is_not_a_readable_file_is_passed_over() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("hooks.json");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    let file = AgentFile::load(&fifo);
    assert!(file.value.is_none() && file.problem.is_none() && !file.names_relay);
    let file = AgentFile::load(dir.path());
    assert!(file.value.is_none() && file.problem.is_none());
}

/// The server the bundle names `relay` is judged whatever it runs, so a wrong binary name
/// is a missing binary, not a missing server.
#[test]
fn the_server_named_relay_is_judged_whatever_it_runs() {
    let value = json!({ "mcpServers": { "relay": { "command": "/opt/relay/bin/relay-mcpx" } } });
    let wiring = wiring(&value, "mcpServers");
    assert_eq!(wiring.servers.len(), 1);
    assert_eq!(
        wiring.install_problems(&MapEnv::new(), None),
        ["/opt/relay/bin/relay-mcpx does not exist"]
    );
}

/// A file this user may not read is a problem whoever's it is: the agent cannot read it
/// either. (Root reads every file, so this runs only as another user.)
#[test]
fn a_file_this_user_may_not_read_is_a_problem() {
    if store::current_euid() == 0 {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hooks.json");
    fs::write(&path, "{}").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o000)).unwrap();
    let problem = AgentFile::load(&path).problem.unwrap();
    assert!(problem.contains("cannot be read by this user"), "{problem}");
}
