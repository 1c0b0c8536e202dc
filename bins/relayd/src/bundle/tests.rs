use expect_test::{Expect, expect};

use super::write::{WriteError, WriteOutcome, write_bundle};
use super::*;

fn options(platform: Platform, bin_dir: &str, agents: &[Agent]) -> BundleOptions {
    BundleOptions {
        daemon_address: DaemonAddress::parse("http://localhost:47632").unwrap(),
        bin_dir: check_bin_dir(platform, bin_dir, &BinDirEnv::default()).unwrap(),
        platform,
        agents: agents.to_vec(),
    }
}

fn all_agents() -> Vec<Agent> {
    vec![Agent::Pi, Agent::Codex, Agent::Claude]
}

fn file<'a>(files: &'a [BundleFile], path: &str) -> &'a str {
    let found = files.iter().find(|f| f.path == path);
    std::str::from_utf8(&found.unwrap_or_else(|| panic!("no {path}")).bytes).unwrap()
}

fn check_file(files: &[BundleFile], path: &str, expect: Expect) {
    expect.assert_eq(file(files, path));
}

#[test]
fn golden_linux_bundle_and_its_digest() {
    let files = generate(&options(Platform::Linux, "/opt/relay/bin", &all_agents()));
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    expect![[r#"
        [
            "SHA256SUMS",
            "claude-code/.claude-plugin/marketplace.json",
            "claude-code/plugin-v1/.claude-plugin/plugin.json",
            "claude-code/plugin-v1/.mcp.json",
            "claude-code/plugin-v1/hooks/hooks.json",
            "claude-code/settings-v1/managed-mcp.json",
            "claude-code/settings-v1/managed-settings.json",
            "codex/settings-v1/config.toml",
            "codex/settings-v1/hooks.json",
            "pi/extension-v1/index.ts",
        ]
    "#]]
    .assert_debug_eq(&paths);
    check_file(
        &files,
        "claude-code/plugin-v1/.mcp.json",
        expect![[r#"
        {
          "mcpServers": {
            "relay": {
              "args": [
                "--daemon-address",
                "http://127.0.0.1:47632"
              ],
              "command": "/opt/relay/bin/relay-mcp",
              "type": "stdio"
            }
          }
        }
    "#]],
    );
    // The managed files carry what the plugin carries, its hooks and its MCP server, and
    // the base URL besides. (The digest below pins their bytes.)
    let json = |path| serde_json::from_str::<serde_json::Value>(file(&files, path)).unwrap();
    assert_eq!(
        json("claude-code/settings-v1/managed-mcp.json"),
        json("claude-code/plugin-v1/.mcp.json")
    );
    let mut settings = json("claude-code/settings-v1/managed-settings.json");
    assert_eq!(
        settings.as_object_mut().unwrap().remove("hooks"),
        Some(json("claude-code/plugin-v1/hooks/hooks.json")["hooks"].clone())
    );
    expect![[r#"
        {
          "env": {
            "ANTHROPIC_BASE_URL": "http://127.0.0.1:47632"
          }
        }"#]]
    .assert_eq(&serde_json::to_string_pretty(&settings).unwrap());
    check_file(
        &files,
        "codex/settings-v1/config.toml",
        expect![[r#"
        model_provider = "relay"

        [model_providers.relay]
        name = "Relay"
        base_url = "http://127.0.0.1:47632/v1"
        wire_api = "responses"
        requires_openai_auth = true
        supports_websockets = false
        env_http_headers = { "x-relay-client-token" = "RELAY_CLIENT_TOKEN" }

        [mcp_servers.relay]
        command = "/opt/relay/bin/relay-mcp"
        args = ["--daemon-address", "http://127.0.0.1:47632"]
        startup_timeout_sec = 20
        env_vars = ["HOME", "XDG_CONFIG_HOME", "RELAY_CLIENT_TOKEN", "RELAY_WORKER_ADVERTISE_ADDRESS", "RELAY_WORKER_PORT", "RELAY_EXTRA_CA_FILE", "RELAY_LOG", "RELAY_LOG_FORMAT", "SSL_CERT_FILE", "NO_PROXY", "no_proxy"]
    "#]],
    );
    check_file(
        &files,
        "claude-code/plugin-v1/hooks/hooks.json",
        expect![[r#"
        {
          "hooks": {
            "Notification": [
              {
                "hooks": [
                  {
                    "command": "/opt/relay/bin/relay-hook claude --daemon-address http://127.0.0.1:47632 --fail-open",
                    "timeout": 30,
                    "type": "command"
                  }
                ]
              }
            ],
            "PermissionRequest": [
              {
                "hooks": [
                  {
                    "command": "/opt/relay/bin/relay-hook claude --daemon-address http://127.0.0.1:47632 --fail-closed",
                    "timeout": 30,
                    "type": "command"
                  }
                ],
                "matcher": "*"
              }
            ],
            "PostCompact": [
              {
                "hooks": [
                  {
                    "command": "/opt/relay/bin/relay-hook claude --daemon-address http://127.0.0.1:47632 --fail-open",
                    "timeout": 30,
                    "type": "command"
                  }
                ]
              }
            ],
            "PostToolUse": [
              {
                "hooks": [
                  {
                    "command": "/opt/relay/bin/relay-hook claude --daemon-address http://127.0.0.1:47632 --fail-open",
                    "timeout": 30,
                    "type": "command"
                  }
                ],
                "matcher": "*"
              }
            ],
            "PostToolUseFailure": [
              {
                "hooks": [
                  {
                    "command": "/opt/relay/bin/relay-hook claude --daemon-address http://127.0.0.1:47632 --fail-open",
                    "timeout": 30,
                    "type": "command"
                  }
                ],
                "matcher": "*"
              }
            ],
            "PreCompact": [
              {
                "hooks": [
                  {
                    "command": "/opt/relay/bin/relay-hook claude --daemon-address http://127.0.0.1:47632 --fail-open",
                    "timeout": 30,
                    "type": "command"
                  }
                ]
              }
            ],
            "PreToolUse": [
              {
                "hooks": [
                  {
                    "command": "/opt/relay/bin/relay-hook claude --daemon-address http://127.0.0.1:47632 --fail-closed",
                    "timeout": 30,
                    "type": "command"
                  }
                ],
                "matcher": "*"
              }
            ],
            "SessionEnd": [
              {
                "hooks": [
                  {
                    "command": "/opt/relay/bin/relay-hook claude --daemon-address http://127.0.0.1:47632 --fail-open",
                    "timeout": 30,
                    "type": "command"
                  }
                ]
              }
            ],
            "SessionStart": [
              {
                "hooks": [
                  {
                    "command": "/opt/relay/bin/relay-hook claude --daemon-address http://127.0.0.1:47632 --fail-open",
                    "timeout": 30,
                    "type": "command"
                  }
                ]
              }
            ],
            "Stop": [
              {
                "hooks": [
                  {
                    "command": "/opt/relay/bin/relay-hook claude --daemon-address http://127.0.0.1:47632 --fail-open",
                    "timeout": 30,
                    "type": "command"
                  }
                ]
              }
            ],
            "SubagentStart": [
              {
                "hooks": [
                  {
                    "command": "/opt/relay/bin/relay-hook claude --daemon-address http://127.0.0.1:47632 --fail-open",
                    "timeout": 30,
                    "type": "command"
                  }
                ]
              }
            ],
            "SubagentStop": [
              {
                "hooks": [
                  {
                    "command": "/opt/relay/bin/relay-hook claude --daemon-address http://127.0.0.1:47632 --fail-open",
                    "timeout": 30,
                    "type": "command"
                  }
                ]
              }
            ],
            "UserPromptSubmit": [
              {
                "hooks": [
                  {
                    "command": "/opt/relay/bin/relay-hook claude --daemon-address http://127.0.0.1:47632 --fail-closed",
                    "timeout": 30,
                    "type": "command"
                  }
                ]
              }
            ]
          }
        }
    "#]],
    );
    check_file(
        &files,
        "SHA256SUMS",
        expect![[r#"
            59d54ed7d63b78e4c08a271c77e1bf1fee94bb3115546be21a1601b280d3b39b  claude-code/.claude-plugin/marketplace.json
            7c3b29f4726d911c0999c3e09921572d471bd00d217e098a0d0bb7af4e6ed189  claude-code/plugin-v1/.claude-plugin/plugin.json
            5c4e4456778f2551165007324c630c948c09a87500febb0c3785e56a9979363c  claude-code/plugin-v1/.mcp.json
            cd142104c4cb18c2be9b844b552b0a014c0dc292103c41b7c51e8f540eee8fe0  claude-code/plugin-v1/hooks/hooks.json
            5c4e4456778f2551165007324c630c948c09a87500febb0c3785e56a9979363c  claude-code/settings-v1/managed-mcp.json
            83f931c78e0f5ff5467e2d00eef39e7de49ba897d98d92f61a1d62bbb7303397  claude-code/settings-v1/managed-settings.json
            25d4ea01f4123bf3db65d78c8675f09c0bf86043afad38a3fc4555b47dcfcf9c  codex/settings-v1/config.toml
            2edfa916e0f7915fe5176d82528e839112279ff3def4c63fd16efed0c6ba6461  codex/settings-v1/hooks.json
            7eb01aa3032b0968fcd9de93b3c2b4ffe9ee3ad76f9ab414c7d146d35614265f  pi/extension-v1/index.ts
        "#]],
    );
    expect!["0024c7793a8ee11ed6614f0c38cf6c0a6d123479f16cb0ad2c64895862af360d"]
        .assert_eq(&digest(&files));
}

#[test]
fn the_digest_is_the_shared_canonical_one_and_stable() {
    let one = generate(&options(Platform::Linux, "/opt/relay/bin", &all_agents()));
    let two = generate(&options(
        Platform::Linux,
        "/opt/relay/bin/",
        &[Agent::Claude, Agent::Pi, Agent::Codex, Agent::Pi],
    ));
    assert_eq!(
        one, two,
        "agent order, repeats and a trailing slash change nothing"
    );
    let pairs: Vec<(&str, &[u8])> = one
        .iter()
        .map(|f| (f.path.as_str(), f.bytes.as_slice()))
        .collect();
    assert_eq!(digest(&one), relay_identity::bundle::bundle_digest(pairs));
    // The manifest lists every other file with its hash.
    let manifest = relay_identity::bundle::parse_manifest(file(&one, "SHA256SUMS")).unwrap();
    assert_eq!(manifest.len(), one.len() - 1);
}

#[test]
fn only_the_selected_agents_are_written() {
    let files = generate(&options(Platform::Linux, "/opt/relay/bin", &[Agent::Codex]));
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "SHA256SUMS",
            "codex/settings-v1/config.toml",
            "codex/settings-v1/hooks.json"
        ]
    );
}

#[test]
fn blocking_events_fail_closed_and_the_rest_fail_open() {
    let files = generate(&options(Platform::Linux, "/opt/relay/bin", &all_agents()));
    for path in [
        "claude-code/plugin-v1/hooks/hooks.json",
        "codex/settings-v1/hooks.json",
    ] {
        let hooks: serde_json::Value = serde_json::from_str(file(&files, path)).unwrap();
        let hooks = hooks["hooks"].as_object().unwrap();
        assert!(hooks.len() >= 11, "{path}");
        for (event, groups) in hooks {
            let command = groups[0]["hooks"][0]["command"].as_str().unwrap();
            let blocking =
                ["PreToolUse", "PermissionRequest", "UserPromptSubmit"].contains(&event.as_str());
            let mode = if blocking {
                "--fail-closed"
            } else {
                "--fail-open"
            };
            assert!(command.ends_with(mode), "{path} {event}: {command}");
            assert!(
                command.starts_with("/opt/relay/bin/relay-hook "),
                "{command}"
            );
            assert!(command.contains(" --daemon-address http://127.0.0.1:47632 "));
            let takes_matcher = [
                "PreToolUse",
                "PostToolUse",
                "PostToolUseFailure",
                "PermissionRequest",
            ]
            .contains(&event.as_str());
            assert_eq!(
                groups[0].get("matcher").and_then(|m| m.as_str()),
                takes_matcher.then_some("*"),
                "{path} {event}"
            );
        }
    }
}

#[test]
fn nothing_of_the_run_or_the_user_is_inside() {
    let files = generate(&options(Platform::Linux, "/opt/relay/bin", &all_agents()));
    for f in &files {
        let text = String::from_utf8_lossy(&f.bytes);
        for needle in [env!("CARGO_PKG_VERSION"), "/home/", "/tmp", "localhost"] {
            assert!(!text.contains(needle), "{} contains {needle:?}", f.path);
        }
    }
}

/// Claude Code runs hooks through Git Bash on Windows, which would take the backslashes as
/// escapes: its hook commands use forward slashes. Its MCP server is started directly and
/// keeps the native path.
#[test]
fn claude_hooks_on_windows_name_relay_hook_with_forward_slashes() {
    let files = generate(&options(
        Platform::Windows,
        "C:/ProgramData/Relay/bin",
        &all_agents(),
    ));
    let hooks: serde_json::Value =
        serde_json::from_str(file(&files, "claude-code/plugin-v1/hooks/hooks.json")).unwrap();
    assert_eq!(
        hooks["hooks"]["PreToolUse"][0]["hooks"][0]["command"],
        "C:/ProgramData/Relay/bin/relay-hook.exe claude --daemon-address http://127.0.0.1:47632 --fail-closed"
    );
}

/// A root bin directory does not get a second separator.
#[test]
fn a_root_bin_directory_is_not_doubled() {
    let files = generate(&options(Platform::Linux, "/", &all_agents()));
    let mcp: serde_json::Value =
        serde_json::from_str(file(&files, "claude-code/plugin-v1/.mcp.json")).unwrap();
    assert_eq!(mcp["mcpServers"]["relay"]["command"], "/relay-mcp");
}

/// Codex cuts a `SessionEnd` hook's timeout to 3 s and warns on every run when it is
/// longer; its other hooks and Claude Code's keep 30 s.
#[test]
fn codex_session_end_gets_the_timeout_codex_allows() {
    let files = generate(&options(Platform::Linux, "/opt/relay/bin", &all_agents()));
    let codex: serde_json::Value =
        serde_json::from_str(file(&files, "codex/settings-v1/hooks.json")).unwrap();
    assert_eq!(codex["hooks"]["SessionEnd"][0]["hooks"][0]["timeout"], 3);
    assert_eq!(codex["hooks"]["Stop"][0]["hooks"][0]["timeout"], 30);
    let claude: serde_json::Value =
        serde_json::from_str(file(&files, "claude-code/plugin-v1/hooks/hooks.json")).unwrap();
    assert_eq!(claude["hooks"]["SessionEnd"][0]["hooks"][0]["timeout"], 30);
}

#[test]
fn windows_rendering_uses_exe_and_backslashes() {
    let files = generate(&options(
        Platform::Windows,
        "C:/ProgramData/Relay/bin",
        &all_agents(),
    ));
    let mcp: serde_json::Value =
        serde_json::from_str(file(&files, "claude-code/plugin-v1/.mcp.json")).unwrap();
    assert_eq!(
        mcp["mcpServers"]["relay"]["command"],
        "C:\\ProgramData\\Relay\\bin\\relay-mcp.exe"
    );
    let config: toml::Value =
        toml::from_str(file(&files, "codex/settings-v1/config.toml")).unwrap();
    assert_eq!(
        config["mcp_servers"]["relay"]["command"].as_str(),
        Some("C:\\ProgramData\\Relay\\bin\\relay-mcp.exe")
    );
    let hooks: serde_json::Value =
        serde_json::from_str(file(&files, "codex/settings-v1/hooks.json")).unwrap();
    assert_eq!(
        hooks["hooks"]["PreToolUse"][0]["hooks"][0]["command"],
        "C:\\ProgramData\\Relay\\bin\\relay-hook.exe codex --daemon-address http://127.0.0.1:47632 --fail-closed"
    );
    check_file(
        &files,
        "codex/settings-v1/config.toml",
        expect![[r#"
        model_provider = "relay"

        [model_providers.relay]
        name = "Relay"
        base_url = "http://127.0.0.1:47632/v1"
        wire_api = "responses"
        requires_openai_auth = true
        supports_websockets = false
        env_http_headers = { "x-relay-client-token" = "RELAY_CLIENT_TOKEN" }

        [mcp_servers.relay]
        command = "C:\\ProgramData\\Relay\\bin\\relay-mcp.exe"
        args = ["--daemon-address", "http://127.0.0.1:47632"]
        startup_timeout_sec = 20
        env_vars = ["HOME", "XDG_CONFIG_HOME", "RELAY_CLIENT_TOKEN", "RELAY_WORKER_ADVERTISE_ADDRESS", "RELAY_WORKER_PORT", "RELAY_EXTRA_CA_FILE", "RELAY_LOG", "RELAY_LOG_FORMAT", "SSL_CERT_FILE", "NO_PROXY", "no_proxy"]
    "#]],
    );
    let pi = file(&files, "pi/extension-v1/index.ts");
    assert!(
        pi.contains(r#""relayMcp": "C:\\ProgramData\\Relay\\bin\\relay-mcp.exe""#),
        "{pi}"
    );
}

#[test]
fn macos_rendering_keeps_slashes_and_no_suffix() {
    let files = generate(&options(
        Platform::Macos,
        "/usr/local/relay/bin",
        &[Agent::Claude, Agent::Pi],
    ));
    check_file(
        &files,
        "claude-code/plugin-v1/.mcp.json",
        expect![[r#"
        {
          "mcpServers": {
            "relay": {
              "args": [
                "--daemon-address",
                "http://127.0.0.1:47632"
              ],
              "command": "/usr/local/relay/bin/relay-mcp",
              "type": "stdio"
            }
          }
        }
    "#]],
    );
    let pi = file(&files, "pi/extension-v1/index.ts");
    assert!(pi.contains(r#""relayHook": "/usr/local/relay/bin/relay-hook""#));
    // relay-doctor reads the same settings back from the deployed file.
    let options = options(Platform::Macos, "/usr/local/relay/bin", &[Agent::Pi]);
    assert_eq!(
        relay_identity::bundle::PiExtensionSettings::from_source(pi),
        Some(render::pi_settings(&options))
    );
    assert!(pi.starts_with(relay_identity::bundle::PI_EXTENSION_MARKER));
}

#[test]
fn the_pi_extension_has_one_placeholder_and_it_is_filled() {
    assert_eq!(render::pi_placeholder_count(), 1);
}

/// Every `--bin-dir` rule, each refusal naming it.
#[test]
fn bin_dir_refusals() {
    let env = BinDirEnv {
        home: Some("/srv/people/ann".to_owned()),
        temp: vec!["/scratch".to_owned()],
        dangerous_allow_temp: false,
    };
    let cases: [(Platform, &str, &str); 18] = [
        (Platform::Linux, "opt/relay", "must be an absolute path"),
        (Platform::Linux, "./bin", "must be an absolute path"),
        (Platform::Linux, "/opt/my relay", "must not contain spaces"),
        (
            Platform::Linux,
            "/opt/relay\tbin",
            "must not contain spaces",
        ),
        (Platform::Linux, "/opt/relay;rm", "shell metacharacter ';'"),
        (Platform::Linux, "/opt/$HOME", "shell metacharacter '$'"),
        (Platform::Linux, "/opt/re`x`", "shell metacharacter '`'"),
        (Platform::Linux, "/opt/a\\b", "shell metacharacter '\\\\'"),
        (Platform::Linux, "/opt/../home/x", "\"..\" components"),
        (Platform::Linux, "/opt//relay", "components"),
        (Platform::Linux, "/home/ann/bin", "outside home directories"),
        (Platform::Linux, "/root/bin", "outside home directories"),
        (
            Platform::Linux,
            "/srv/people/ann/bin",
            "outside home directories",
        ),
        (
            Platform::Linux,
            "/tmp/relay",
            "outside temporary directories",
        ),
        (
            Platform::Linux,
            "/scratch/relay",
            "outside temporary directories",
        ),
        (
            Platform::Macos,
            "/private/var/folders/x/bin",
            "outside temporary",
        ),
        (
            Platform::Macos,
            "/users/ann/bin",
            "outside home directories",
        ),
        (
            Platform::Windows,
            "\\Relay\\bin",
            "must be an absolute path",
        ),
    ];
    for (platform, path, needle) in cases {
        let error = check_bin_dir(platform, path, &env).unwrap_err().to_string();
        assert!(error.contains(needle), "{path}: {error}");
        assert!(error.starts_with("--bin-dir "), "{error}");
    }
    let windows: [(&str, &str); 4] = [
        ("C:\\Users\\ann\\bin", "outside home directories"),
        ("D:\\data\\AppData\\bin", "outside home directories"),
        ("c:\\windows\\temp\\relay", "outside temporary directories"),
        ("C:\\Program Files\\Relay", "must not contain spaces"),
    ];
    for (path, needle) in windows {
        let error = check_bin_dir(Platform::Windows, path, &env)
            .unwrap_err()
            .to_string();
        assert!(error.contains(needle), "{path}: {error}");
    }
    // `/homework` is not under `/home`.
    assert!(check_bin_dir(Platform::Linux, "/homework/bin", &env).is_ok());
}

#[test]
fn the_test_only_switch_relaxes_only_the_temp_rule() {
    let env = BinDirEnv {
        home: None,
        temp: Vec::new(),
        dangerous_allow_temp: true,
    };
    assert_eq!(
        check_bin_dir(Platform::Linux, "/tmp/relay/bin/", &env)
            .unwrap()
            .as_str(),
        "/tmp/relay/bin"
    );
    assert!(check_bin_dir(Platform::Linux, "/home/ann/bin", &env).is_err());
    assert!(check_bin_dir(Platform::Linux, "/tmp/a b", &env).is_err());
}

#[test]
fn writing_never_overwrites_a_different_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("nested/bundle");
    let files = generate(&options(Platform::Linux, "/opt/relay/bin", &all_agents()));
    assert_eq!(
        write_bundle(&output, &files).unwrap(),
        WriteOutcome::Written
    );
    let written = relay_identity::bundle::read_bundle_dir(&output).unwrap();
    assert_eq!(written.len(), files.len());
    assert!(
        std::fs::read_dir(output.parent().unwrap())
            .unwrap()
            .all(|e| e.unwrap().file_name() == "bundle"),
        "no staging directory is left behind"
    );

    // Identical: left alone, exit 0.
    let before = std::fs::metadata(output.join("SHA256SUMS"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(
        write_bundle(&output, &files).unwrap(),
        WriteOutcome::AlreadyIdentical
    );
    let after = std::fs::metadata(output.join("SHA256SUMS"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(before, after);

    // A different bundle (another daemon address) is refused, naming the first file.
    let other = generate(&BundleOptions {
        daemon_address: DaemonAddress::parse("http://127.0.0.1:5000").unwrap(),
        ..options(Platform::Linux, "/opt/relay/bin", &all_agents())
    });
    let error = write_bundle(&output, &other).unwrap_err();
    assert!(
        matches!(&error, WriteError::Different { first, .. } if first.path() == "SHA256SUMS"),
        "{error}"
    );
    assert!(error.to_string().contains("never overwritten"), "{error}");
    assert_eq!(
        relay_identity::bundle::read_bundle_dir(&output).unwrap(),
        written,
        "nothing was changed"
    );

    // An extra file makes it different too.
    std::fs::write(output.join("README"), b"x").unwrap();
    let error = write_bundle(&output, &files).unwrap_err();
    assert!(
        matches!(&error, WriteError::Different { first, .. } if first.path() == "README" && first.kind() == "extra"),
        "{error}"
    );
}

#[test]
fn writing_into_an_empty_directory_fills_it() {
    let dir = tempfile::tempdir().unwrap();
    let files = generate(&options(Platform::Linux, "/opt/relay/bin", &[Agent::Pi]));
    assert_eq!(
        write_bundle(dir.path(), &files).unwrap(),
        WriteOutcome::Written
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(dir.path().join("pi/extension-v1/index.ts"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644);
}

#[test]
fn bundles_in_two_folders_are_byte_identical() {
    let one = tempfile::tempdir().unwrap();
    let two = tempfile::tempdir().unwrap();
    let files = generate(&options(Platform::Linux, "/opt/relay/bin", &all_agents()));
    write_bundle(&one.path().join("a"), &files).unwrap();
    write_bundle(&two.path().join("b"), &files).unwrap();
    assert_eq!(
        relay_identity::bundle::read_bundle_dir(&one.path().join("a")).unwrap(),
        relay_identity::bundle::read_bundle_dir(&two.path().join("b")).unwrap()
    );
}
