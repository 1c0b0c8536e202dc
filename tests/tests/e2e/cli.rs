//! The command line of SPEC §2 and §2.1: help, version, usage errors (exit 64, one line
//! naming the culprit), `config defaults` (§8) and `identity show` (§4.3).

use std::os::unix::fs::PermissionsExt as _;

use relay_e2e::{CliOutput, Relayd};

use super::support::{CLI_TIMEOUT, EVENT_TIMEOUT, assert_healthy};

/// The flags of SPEC §2.1 and the default `--help` must show for each.
const FLAGS: [(&str, Option<&str>); 12] = [
    ("--bind", Some("127.0.0.1")),
    ("--port", Some("47632")),
    ("--advertise-address", None),
    ("--tls-cert", None),
    ("--tls-key", None),
    ("--pass-through", None),
    ("--require-worker", None),
    ("--allow-anonymous-pass-through", None),
    ("--max-tokens-per-identity", Some("4")),
    ("--config", None),
    ("--log-level", Some("info")),
    ("--log-format", Some("jsonl")),
];

async fn relayd_cli(args: &[&str]) -> anyhow::Result<CliOutput> {
    Ok(Relayd::builder()?.args(args).output(CLI_TIMEOUT).await?)
}

/// The help text of one option: its line and the lines that continue it.
fn option_entry<'a>(help: &'a str, flag: &str) -> Option<String> {
    let lines: Vec<&'a str> = help.lines().collect();
    let start = lines.iter().position(|line| {
        let trimmed = line.trim_start();
        trimmed.starts_with(flag)
            && trimmed[flag.len()..]
                .chars()
                .next()
                .is_none_or(|next| next == ' ' || next == '=')
    })?;
    let mut entry = lines[start].to_owned();
    for line in &lines[start + 1..] {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('-') {
            break;
        }
        entry.push(' ');
        entry.push_str(trimmed);
    }
    Some(entry)
}

#[tokio::test]
async fn help_lists_every_flag_with_its_default() -> anyhow::Result<()> {
    let out = relayd_cli(&["--help"]).await?;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let help = &out.stdout;
    for (flag, default) in FLAGS {
        let entry = option_entry(help, flag)
            .unwrap_or_else(|| panic!("--help does not list {flag}:\n{help}"));
        if let Some(default) = default {
            assert!(
                entry.contains(&format!("default: {default}")),
                "--help does not give {flag}'s default {default}: {entry}"
            );
        }
    }
    let log_level = option_entry(help, "--log-level").unwrap_or_default();
    for level in ["error", "warn", "info", "debug", "trace"] {
        assert!(log_level.contains(level), "{log_level}");
    }
    let log_format = option_entry(help, "--log-format").unwrap_or_default();
    for format in ["human", "jsonl"] {
        assert!(log_format.contains(format), "{log_format}");
    }
    for command in ["managed-bundle", "bindings", "identity", "config"] {
        assert!(
            help.lines()
                .any(|line| line.trim_start().starts_with(command)),
            "--help does not list the {command} command:\n{help}"
        );
    }

    let bundle = relayd_cli(&["managed-bundle", "--help"]).await?;
    assert_eq!(bundle.status.code(), Some(0), "{bundle:?}");
    for flag in [
        "--output",
        "--daemon-address",
        "--bin-dir",
        "--platform",
        "--agent",
    ] {
        assert!(
            option_entry(&bundle.stdout, flag).is_some(),
            "managed-bundle --help lacks {flag}:\n{}",
            bundle.stdout
        );
    }
    let bindings = relayd_cli(&["bindings", "--help"]).await?;
    for command in ["list", "revoke", "block", "unblock"] {
        assert!(
            bindings
                .stdout
                .lines()
                .any(|line| line.trim_start().starts_with(command)),
            "bindings --help lacks {command}:\n{}",
            bindings.stdout
        );
    }
    Ok(())
}

#[tokio::test]
async fn version_prints_the_name_and_version() -> anyhow::Result<()> {
    let out = relayd_cli(&["--version"]).await?;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // relay-e2e shares the workspace version with relayd.
    assert_eq!(
        out.stdout,
        format!("relayd {}\n", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(out.stderr, "");
    Ok(())
}

/// Exit status 64, nothing on stdout, exactly one line on stderr that says `relayd:` and
/// contains every `names`.
fn assert_usage_error(case: &str, out: &CliOutput, names: &[&str]) {
    assert_eq!(
        out.status.code(),
        Some(64),
        "{case}: expected exit 64, got {out:?}"
    );
    assert_eq!(out.stdout, "", "{case}: stdout must stay empty");
    assert!(
        out.stderr.starts_with("relayd: ")
            && out.stderr.ends_with('\n')
            && out.stderr.lines().count() == 1,
        "{case}: expected one line on stderr, got {:?}",
        out.stderr
    );
    for name in names {
        assert!(
            out.stderr.contains(name),
            "{case}: the message does not name {name:?}: {:?}",
            out.stderr
        );
    }
}

#[tokio::test]
async fn usage_errors_exit_64_with_one_line_naming_the_culprit() -> anyhow::Result<()> {
    let cases: [(&[&str], &[&str]); 9] = [
        (&["--bind", "10.0.0.1"], &["--bind", "--advertise-address"]),
        (&["--bind", "::1"], &["--bind", "::1"]),
        (&["--port", "0"], &["--port"]),
        (
            &["--pass-through", "--require-worker"],
            &["--pass-through", "--require-worker"],
        ),
        (&["--tls-cert", "x"], &["--tls-key"]),
        (
            &[
                "--bind",
                "0.0.0.0",
                "--advertise-address",
                "http://relay.example.com:8443",
            ],
            &["--advertise-address", "https"],
        ),
        // A loopback origin does not keep a network listener's plain http off the network.
        (
            &[
                "--bind",
                "0.0.0.0",
                "--advertise-address",
                "http://127.0.0.1:47632",
            ],
            &["--bind 0.0.0.0", "https", "--tls-cert"],
        ),
        (
            &["--max-tokens-per-identity", "65"],
            &["--max-tokens-per-identity", "65"],
        ),
        (&["--log-level", "loud"], &["--log-level", "loud"]),
    ];
    for (args, names) in cases {
        let out = relayd_cli(args).await?;
        assert_usage_error(&args.join(" "), &out, names);
    }

    // An address with a password in it is refused without repeating the password.
    let args = [
        "--bind",
        "0.0.0.0",
        "--advertise-address",
        "https://alice:s3cr3t@relay.example.com:8443",
    ];
    let out = relayd_cli(&args).await?;
    assert_usage_error("an address with a password", &out, &["--advertise-address"]);
    assert!(!out.stderr.contains("s3cr3t"), "{out:?}");

    let out = Relayd::builder()?
        .env("RELAY_DAEMON_MAX_TOKENS_PER_IDENTITY", "0")
        .output(CLI_TIMEOUT)
        .await?;
    assert_usage_error(
        "RELAY_DAEMON_MAX_TOKENS_PER_IDENTITY=0",
        &out,
        &["RELAY_DAEMON_MAX_TOKENS_PER_IDENTITY"],
    );
    // Also when the flag, which wins, is valid: an invalid value from any source stops
    // start-up.
    let out = Relayd::builder()?
        .env("RELAY_DAEMON_MAX_TOKENS_PER_IDENTITY", "abc")
        .args(["--max-tokens-per-identity", "4"])
        .output(CLI_TIMEOUT)
        .await?;
    assert_usage_error(
        "RELAY_DAEMON_MAX_TOKENS_PER_IDENTITY=abc with the flag",
        &out,
        &["RELAY_DAEMON_MAX_TOKENS_PER_IDENTITY"],
    );
    Ok(())
}

#[tokio::test]
async fn config_errors_exit_64_naming_the_file_and_key() -> anyhow::Result<()> {
    let builder = Relayd::builder()?;
    let file = builder.write_private_file(
        "strange.toml",
        "[daemon]\nmax_connections = 10\nsurprise_key = true\n",
    )?;
    let file_text = file.display().to_string();
    let out = builder
        .arg("--config")
        .arg(&file)
        .output(CLI_TIMEOUT)
        .await?;
    assert_usage_error("unknown key", &out, &[&file_text, "surprise_key"]);

    let builder = Relayd::builder()?;
    let missing = builder.dir().join("no-such-config.toml");
    let missing_text = missing.display().to_string();
    let out = builder
        .arg("--config")
        .arg(&missing)
        .output(CLI_TIMEOUT)
        .await?;
    assert_usage_error("missing --config", &out, &["--config", &missing_text]);

    // Without --config the system file is read (RELAY_SYSTEM_CONFIG_DIR) and is as strict.
    let builder = Relayd::builder()?;
    let system_file = builder.system_config_dir().join("config.toml");
    std::fs::write(&system_file, "[upstream]\nunheard_of = 1\n")?;
    let system_text = system_file.display().to_string();
    let out = builder.output(CLI_TIMEOUT).await?;
    assert_usage_error("unknown system key", &out, &[&system_text, "unheard_of"]);
    Ok(())
}

/// Files the configuration names are read before anything is created: one that is missing,
/// or a key file others may read, is a usage error naming it, and no state is written.
#[tokio::test]
async fn unreadable_key_and_certificate_files_exit_64_naming_them() -> anyhow::Result<()> {
    // A key file that is missing, and one others may read.
    for (key, readable) in [
        ("anthropic_api_key_file", false),
        ("openai_api_key_file", true),
    ] {
        let builder = Relayd::builder()?;
        let file = builder.dir().join("provider.key");
        if readable {
            std::fs::write(&file, "sk-readable-by-all\n")?;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))?;
        }
        let config = builder.write_private_file(
            "keys.toml",
            &format!("[upstream]\n{key} = \"{}\"\n", file.display()),
        )?;
        let state = builder.xdg_config_home().join("relay/daemon");
        let out = builder
            .arg("--config")
            .arg(&config)
            .output(CLI_TIMEOUT)
            .await?;
        let file_text = file.display().to_string();
        assert_usage_error(key, &out, &[&format!("upstream.{key}"), &file_text]);
        assert!(!out.stderr.contains("sk-readable-by-all"), "{}", out.stderr);
        assert!(
            !state.exists(),
            "{key}: state was made before the usage error"
        );
    }

    // The key itself given where its file belongs is not repeated back.
    let builder = Relayd::builder()?;
    let config = builder.write_private_file(
        "keys.toml",
        "[upstream]\nopenai_api_key_file = \"sk-proj-pasted-in-the-wrong-place\"\n",
    )?;
    let out = builder
        .arg("--config")
        .arg(&config)
        .output(CLI_TIMEOUT)
        .await?;
    assert_usage_error("a key as its file", &out, &["upstream.openai_api_key_file"]);
    assert!(!out.stderr.contains("pasted"), "{}", out.stderr);

    let builder = Relayd::builder()?;
    let cert = builder.dir().join("no-such-cert.pem");
    let out = builder
        .args([
            "--advertise-address",
            "https://127.0.0.1:47632",
            "--tls-cert",
        ])
        .arg(&cert)
        .arg("--tls-key")
        .arg(&cert)
        .output(CLI_TIMEOUT)
        .await?;
    assert_usage_error(
        "missing certificate",
        &out,
        &["--tls-cert", &cert.display().to_string()],
    );
    Ok(())
}

/// SPEC §8's defaults, as written there (comments dropped).
const SPEC_DEFAULTS: &str = r#"
[upstream]
openai_base_url = "https://api.openai.com/v1"
anthropic_base_url = "https://api.anthropic.com"
chatgpt_codex_base_url = "https://chatgpt.com/backend-api/codex"
connect_timeout_secs = 10
response_timeout_secs = 0
proxy_url = ""
allowed_base_urls = []
daemon_keys = "bound_only"
openai_api_key_file = ""
anthropic_api_key_file = ""

[daemon]
max_request_body_bytes = 33554432
max_hook_body_bytes = 1048576
max_connections = 10000
max_requests_per_identity = 256
max_tokens_per_identity = 4
max_sessions_per_route = 64
activation_wait_ms = 2000
keepalive_idle_secs = 90
stream_idle_secs = 600
max_routes = 4096
max_control_sessions_per_ip = 256
binding_tombstone_days = 30
status_public = false
allowed_origins = []
worker_networks = []

[daemon.timers]
drain_secs = 120
reconnect_grace_secs = 30
retry_base_ms = 1000
retry_cap_secs = 60
startup_progress_secs = 60
ping_secs = 30
pong_timeout_secs = 10
header_read_timeout_secs = 10
challenge_ttl_secs = 30
challenge_window_secs = 15
challenge_limit = 16
reconnect_first_ms = 250
reconnect_cap_ms = 2000
reconnect_attempt_timeout_secs = 5

[daemon.logging]
level = "info"
stderr_format = "jsonl"

[worker]
observation_capture_bytes = 4194304
observation_total_bytes = 268435456

[logging]
level = "warn"
"#;

/// Every key of `expected` is in `actual` with the same value; the dotted path of the first
/// difference otherwise.
fn first_difference(expected: &toml::Table, actual: &toml::Table, path: &str) -> Option<String> {
    for (key, want) in expected {
        let here = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        match (want, actual.get(key)) {
            (toml::Value::Table(want), Some(toml::Value::Table(got))) => {
                if let Some(difference) = first_difference(want, got, &here) {
                    return Some(difference);
                }
            }
            (want, Some(got)) if want == got => {}
            (want, got) => return Some(format!("{here}: expected {want}, got {got:?}")),
        }
    }
    None
}

#[tokio::test]
async fn config_defaults_prints_every_default_of_the_spec() -> anyhow::Result<()> {
    let out = relayd_cli(&["config", "defaults"]).await?;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let printed: toml::Table = toml::from_str(&out.stdout)?;
    let spec: toml::Table = toml::from_str(SPEC_DEFAULTS)?;
    if let Some(difference) = first_difference(&spec, &printed, "") {
        panic!("`relayd config defaults` differs from SPEC §8 at {difference}");
    }

    // What it prints is a config relayd itself accepts and serves with.
    let mut relayd = Relayd::builder()?
        .config(out.stdout.clone())
        .start()
        .await?;
    assert_healthy(&relayd).await?;
    let status = relayd.stop().await?;
    assert_eq!(status.code(), Some(0), "{}", relayd.logs().text());
    relayd
        .wait_for_log_event("daemon_stopped", EVENT_TIMEOUT)
        .await?;
    Ok(())
}

#[tokio::test]
async fn identity_show_prints_a_stable_pin_line_pair() -> anyhow::Result<()> {
    let builder = Relayd::builder()?.args(["identity", "show"]);
    let key_file = builder
        .xdg_config_home()
        .join("relay/daemon/daemon-identity.pk8");
    let first = builder.output(CLI_TIMEOUT).await?;
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let lines: Vec<&str> = first.stdout.split_inclusive('\n').collect();
    assert_eq!(lines.len(), 2, "{:?}", first.stdout);
    assert_eq!(lines[0], "origin http://127.0.0.1:47632\n");
    let key = lines[1]
        .strip_prefix("ed25519 ")
        .and_then(|rest| rest.strip_suffix('\n'))
        .unwrap_or_else(|| panic!("not an ed25519 line: {:?}", lines[1]));
    assert!(
        key.len() == 64
            && key
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "not 64 lowercase hex: {key:?}"
    );
    let mode = std::fs::metadata(&key_file)?.permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", key_file.display());
    // Making the key is said, so a mistyped --state-dir does not pass unnoticed.
    assert!(
        first.stderr.contains("held no daemon key: made a new one"),
        "{:?}",
        first.stderr
    );

    // A second run with the same state directory shows the same key, and makes none.
    let second = builder.output(CLI_TIMEOUT).await?;
    assert_eq!(second.status.code(), Some(0), "{second:?}");
    assert_eq!(second.stdout, first.stdout);
    assert_eq!(second.stderr, "");
    Ok(())
}

/// A daemon clients reach at another origin (remote, or another port): `identity show`
/// prints the pin for that origin when given the daemon's own flags, since clients use a
/// provisioned pin only for the origin they dial.
#[tokio::test]
async fn identity_show_prints_the_pin_for_the_advertised_origin() -> anyhow::Result<()> {
    let show = |flags: &[&str]| {
        let args: Vec<String> = flags
            .iter()
            .chain(&["identity", "show"])
            .map(|flag| (*flag).to_owned())
            .collect();
        async move { Relayd::builder()?.args(args).output(CLI_TIMEOUT).await }
    };
    for (flags, origin) in [
        (
            &["--advertise-address", "https://relay.example.com:8443"][..],
            "https://relay.example.com:8443",
        ),
        (&["--port", "50000"][..], "http://127.0.0.1:50000"),
    ] {
        let out = show(flags).await?;
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert!(
            out.stdout
                .starts_with(&format!("origin {origin}\ned25519 ")),
            "{flags:?}: {:?}",
            out.stdout
        );
    }
    // An origin no client would be allowed to dial is a usage error.
    let out = show(&["--advertise-address", "http://relay.example.com:8080"]).await?;
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    Ok(())
}

/// A daemon that fails after start-up (here its port is taken) says why in
/// `daemon_failed`; with JSON logs, every line on stderr is one JSON object, as log
/// shippers expect, and with the human format a last plain line says it too.
#[tokio::test]
async fn a_failed_start_with_json_logs_writes_only_json_lines() -> anyhow::Result<()> {
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = taken.local_addr()?.port().to_string();
    // With every log line filtered out, the failure still gets its plain line.
    let out = Relayd::builder()?
        .env("RELAY_LOG", "off")
        .args(["--port", &port, "--log-format", "jsonl"])
        .output(CLI_TIMEOUT)
        .await?;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        out.stderr.starts_with("relayd: binding"),
        "{:?}",
        out.stderr
    );
    for format in ["jsonl", "human"] {
        let out = Relayd::builder()?
            .args(["--port", &port, "--log-format", format])
            .output(CLI_TIMEOUT)
            .await?;
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        if format == "jsonl" {
            let mut failed = false;
            for line in out.stderr.lines() {
                let event: serde_json::Value = serde_json::from_str(line)
                    .map_err(|e| anyhow::anyhow!("{e}: a line that is not JSON: {line:?}"))?;
                failed |= event["event"] == "daemon_failed";
            }
            assert!(failed, "no daemon_failed in {:?}", out.stderr);
        } else {
            assert!(
                out.stderr
                    .lines()
                    .last()
                    .is_some_and(|l| l.starts_with("relayd: ")),
                "{:?}",
                out.stderr
            );
        }
    }
    drop(taken);
    Ok(())
}
