//! The managed-bundle deployment the bundle and plugin e2e tests share: relayd behind a
//! tap, a machine-user, a stand-in that asks for one shell tool call, a bundle generated for
//! the tap's origin, and the launch sequence of each real CLI from that bundle (the commands
//! of docs/harnesses.md).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use relay_e2e::{AGENT_TIMEOUT, AgentCommand, AgentOutput, Relayd, Tap, User};
use relay_testkit::{StandIn, TOOL_DONE_TEXT};
use tempfile::TempDir;

use super::support::{
    CLI_TIMEOUT, WORKER_TIMEOUT, WORKER_TIMERS, field, fresh_token, pass_throughs, report_check,
    requests_to, upstream_config,
};

/// The test-only switch of `relayd managed-bundle` (bins/relayd/src/bundle.rs).
pub(crate) const ALLOW_TEMP_BIN_DIR: &str = "RELAY_DANGEROUS_TEST_ONLY_ALLOW_TEMP_BIN_DIR";

/// The Codex merge of docs/harnesses.md: the user's top-level keys (without their own
/// `model_provider`), the bundle's top-level keys, the user's tables, the bundle's tables.
pub(crate) const CODEX_MERGE: &str = r#"set -eu
bundle="$1"; user="$2"
top() { awk '/^[[:space:]]*\[/ { exit } { print }' "$1"; }
tables() { awk '/^[[:space:]]*\[/ { t = 1 } t { print }' "$1"; }
{
  top "$user" | grep -v '^[[:space:]]*model_provider[[:space:]]*=' || true
  top "$bundle"
  tables "$user"
  tables "$bundle"
} > "$user.relay-new"
mv "$user.relay-new" "$user"
"#;

/// How Claude Code gets the bundle's managed files (docs/harnesses.md).
#[derive(Debug, Clone, Copy)]
pub(crate) enum ClaudeInstall {
    /// In `/etc/claude-code`, for every user, with no flag.
    System,
    /// As one user's `--settings` and `--mcp-config`.
    User,
}

/// A Codex ready to launch, with the files of its install.
struct InstalledCodex {
    codex: AgentCommand,
    codex_home: PathBuf,
    /// The bundle's config as installed: the managed layer, or the user's merged file.
    config_file: PathBuf,
    /// Where the bundle's hooks go.
    hooks_file: PathBuf,
    /// The files a system install puts in `/etc/codex`, kept until Codex has run.
    _system: Option<TempDir>,
}

/// How Codex gets the bundle (docs/harnesses.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CodexInstall {
    /// An administrator's install: the bundle's `config.toml` as `/etc/codex/managed_config.toml`
    /// and its `hooks.json` as `/etc/codex/hooks.json`, which Codex treats as managed: the
    /// hooks run without a user's review, and a user's own `model_provider` cannot override
    /// Relay's.
    System,
    /// One user's install without root: the bundle merged into their `config.toml` and the
    /// hooks beside it, which Codex runs only once that user has trusted them.
    User,
}

/// What docs/harnesses.md has an administrator append to the bundle's `config.toml` when it
/// becomes `/etc/codex/managed_config.toml`. The bundle's file ends with the
/// `[mcp_servers.relay]` table, so the first line belongs to it.
const CODEX_MANAGED_PINS: &str = "enabled = true\n\n[features]\nhooks = true\n";

/// A user's own settings that would take Codex around Relay if the managed layer did not
/// win: a provider of their own, hooks off, and Relay's MCP server replaced and disabled.
const USER_OPTING_OUT: &str = "\n[model_providers.elsewhere]\nname = \"Elsewhere\"\nbase_url = \"http://127.0.0.1:9/v1\"\nwire_api = \"responses\"\n\n[features]\nhooks = false\n\n[mcp_servers.relay]\ncommand = \"/bin/false\"\nenabled = false\n";

/// Run by `unshare --mount` before an agent, with the directory of the files the agent
/// should find in `/etc/<dir>` as `$1`, `<dir>` as `$2`, and the agent's command line after
/// them: lays a copy-on-write layer over `/etc` whose writes go to a tmpfs (an overlay's
/// upper layer may not itself be an overlay, which a container's `/tmp` can be), replaces
/// whatever the host has in `/etc/<dir>` with the files, and starts the agent. Nothing the
/// host or another test sees changes.
const PRIVATE_ETC: &str = r#"set -eu
files="$1"; dir="/etc/$2"; shift 2
mkdir -p "$files/.layer"
mount -t tmpfs tmpfs "$files/.layer"
mkdir "$files/.layer/upper" "$files/.layer/work"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$files/.layer/upper,workdir=$files/.layer/work" /etc
rm -rf "$dir"
mkdir "$dir"
find "$files" -maxdepth 1 -type f -exec cp {} "$dir/" \;
exec "$@"
"#;

/// The arguments of `unshare` that run a command over a private `/etc` (see
/// [`PRIVATE_ETC`]) whose `etc_dir` holds the files in `files`; the command follows them.
fn private_etc_args<'a>(files: &'a str, etc_dir: &'a str) -> [&'a str; 9] {
    [
        "--mount",
        "--propagation",
        "private",
        "/bin/sh",
        "-c",
        PRIVATE_ETC,
        "sh",
        files,
        etc_dir,
    ]
}

/// `agent` launched over a private `/etc` whose `etc_dir` holds the files in `files`.
fn with_private_etc(agent: &str, files: &Path, etc_dir: &str) -> anyhow::Result<AgentCommand> {
    Ok(AgentCommand::launched_by(
        agent,
        Path::new("unshare"),
        &private_etc_args(&path(files), etc_dir),
    )?)
}

/// A stand-in that asks for a shell tool once, relayd behind a tap, a machine-user, and a
/// bundle generated for the tap's origin.
pub(crate) struct Deployment {
    pub(crate) stand_in: StandIn,
    pub(crate) tap: Tap,
    pub(crate) relayd: Relayd,
    pub(crate) user: User,
    pub(crate) token: String,
    /// Whether the system config directory holds a `plugins.toml`.
    plugins: bool,
    _bins: TempDir,
    bundle_dir: TempDir,
}

/// The collectors' secret, in the variable the e2e `plugins.toml` names in `header_env`: set
/// in the agent's environment whenever a `plugins.toml` is installed.
pub(crate) const COLLECTOR_KEY_VAR: &str = "RELAY_E2E_COLLECTOR_KEY";
pub(crate) const COLLECTOR_KEY: &str = "collector-key-e2e";

/// `config` with `variable` added to the `env_vars` of `[mcp_servers.relay]`: Codex gives an
/// MCP server only the variables listed there.
fn pass_to_relay_mcp(config: &str, variable: &str) -> anyhow::Result<String> {
    // Edited in place: the pins appended to a managed file land in its last table, so its
    // tables keep their order.
    let line = "env_vars = [";
    anyhow::ensure!(
        config.matches(line).count() == 1,
        "the bundle's Codex config should have one env_vars list:\n{config}"
    );
    Ok(config.replacen(line, &format!("{line}\"{variable}\", "), 1))
}

/// What a deployment adds to the plain one: a `relay-hook` stand-in, a system `plugins.toml`
/// next to `config.toml`, and the shell command the stand-in's tool call runs.
#[derive(Default)]
pub(crate) struct Extras<'a> {
    /// Installed as the bin directory's `relay-hook` in place of the link to the real one;
    /// it gets the real one's path as `$RELAY_HOOK`.
    pub(crate) hook_script: Option<&'a str>,
    pub(crate) plugins_toml: Option<&'a str>,
    pub(crate) tool_command: Option<&'a str>,
}

impl Deployment {
    pub(crate) async fn start() -> anyhow::Result<Deployment> {
        Deployment::start_with(Extras::default()).await
    }

    /// `hook_script`, when given, is installed as the bin directory's `relay-hook` in
    /// place of the link to the real one; it gets the real one's path as `$RELAY_HOOK`.
    pub(crate) async fn start_with_hook(hook_script: Option<&str>) -> anyhow::Result<Deployment> {
        Deployment::start_with(Extras {
            hook_script,
            ..Extras::default()
        })
        .await
    }

    pub(crate) async fn start_with(extras: Extras<'_>) -> anyhow::Result<Deployment> {
        let Extras {
            hook_script,
            plugins_toml,
            tool_command,
        } = extras;
        let stand_in = StandIn::start().await?;
        stand_in.set_behaviour(relay_testkit::Behaviour {
            tool_round_trip: true,
            tool_command: tool_command.map(str::to_owned),
            ..stand_in.behaviour()
        });
        let base = stand_in.base_url();
        // pi selects its provider's base itself; the daemon and the worker must allow it.
        let allowed = format!("allowed_base_urls = [\"{base}\", \"{base}/v1\"]\n");
        let tap = Tap::bind().await?;
        let relayd = Relayd::builder()?
            .config(upstream_config(
                &stand_in,
                &format!("{allowed}\n[daemon]\n{WORKER_TIMERS}"),
            ))
            .args(["--advertise-address", &tap.origin()])
            .start()
            .await?;
        let tap = tap.forward_to(relayd.addr());
        let user = User::new()?;
        let user_config = upstream_config(&stand_in, &allowed);
        user.write_system_config(&user_config)?;
        if let Some(plugins) = plugins_toml {
            user.write_file(
                &user.system_config_dir().join("plugins.toml"),
                plugins,
                0o644,
            )?;
        }
        // Codex passes the MCP server XDG_CONFIG_HOME but not RELAY_SYSTEM_CONFIG_DIR.
        user.write_file(
            &user.xdg_config_home().join("relay").join("config.toml"),
            &user_config,
            0o600,
        )?;

        let bins = tempfile::Builder::new()
            .prefix("relay-e2e-bin-")
            .tempdir()?;
        for name in ["relay-mcp", "relay-hook", "relay-worker"] {
            std::os::unix::fs::symlink(relay_e2e::binary(name)?, bins.path().join(name))?;
        }
        if let Some(script) = hook_script {
            use std::os::unix::fs::PermissionsExt as _;
            let hook = bins.path().join("relay-hook");
            std::fs::remove_file(&hook)?;
            let real = relay_e2e::binary("relay-hook")?;
            std::fs::write(
                &hook,
                format!("#!/bin/sh\nRELAY_HOOK='{}'\n{script}", real.display()),
            )?;
            std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755))?;
        }
        let bundle_dir = tempfile::Builder::new()
            .prefix("relay-e2e-bundle-")
            .tempdir()?;
        // Every user may pass through a deployment's directories; relay-doctor refuses a
        // bundle under one that is 0700, as tempfile makes them.
        std::fs::set_permissions(
            bundle_dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )?;
        let deployment = Deployment {
            stand_in,
            tap,
            relayd,
            user,
            token: fresh_token()?,
            plugins: plugins_toml.is_some(),
            _bins: bins,
            bundle_dir,
        };
        deployment.generate().await?;
        Ok(deployment)
    }

    pub(crate) fn bundle(&self) -> PathBuf {
        self.bundle_dir.path().join("bundle")
    }

    /// `relayd managed-bundle` for all three agents, then `relay-doctor --managed-bundle`
    /// on the result.
    pub(crate) async fn generate(&self) -> anyhow::Result<()> {
        let bundle = self.bundle();
        let out = tokio::process::Command::new(relay_e2e::binary("relayd")?)
            .args(["managed-bundle", "--output"])
            .arg(&bundle)
            .args(["--daemon-address", &self.tap.origin(), "--bin-dir"])
            .arg(self._bins.path())
            .args(["--platform", "linux"])
            .args(["--agent", "claude", "--agent", "codex", "--agent", "pi"])
            .env_clear()
            .env("HOME", self.user.home())
            .env(ALLOW_TEMP_BIN_DIR, "1")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(CLI_TIMEOUT, out).await??;
        let digest = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "managed-bundle failed: {out:?}");
        let digest = digest.trim_end();
        assert_eq!(digest.len(), 64, "{digest:?}");

        let check = tokio::process::Command::new(relay_e2e::binary("relay-doctor")?)
            .arg("--managed-bundle")
            .arg(&bundle)
            .args(["--managed-bundle-sha256", digest])
            .env_clear()
            .env("HOME", self.user.home())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let check = tokio::time::timeout(CLI_TIMEOUT, check).await??;
        assert!(check.status.success(), "relay-doctor disagrees: {check:?}");
        Ok(())
    }

    /// relay-doctor's `claude_code` check over a private `/etc/claude-code` that holds the
    /// bundle's two managed files, as the system install puts them.
    pub(crate) async fn doctor_claude_code(&self) -> anyhow::Result<serde_json::Value> {
        let files = self.claude_system_files()?;
        let out = AgentCommand::on_path("unshare")?
            .args(private_etc_args(&path(files.path()), "claude-code"))
            .arg(relay_e2e::binary("relay-doctor")?)
            .arg("--json")
            .env("HOME", self.user.home())
            .env("XDG_CONFIG_HOME", self.user.xdg_config_home())
            .run(CLI_TIMEOUT)
            .await?;
        let report: serde_json::Value = serde_json::from_str(&out.stdout)
            .map_err(|e| anyhow::anyhow!("relay-doctor's stdout is not JSON ({e}): {out}"))?;
        Ok(report_check(&report, "claude_code").clone())
    }

    /// The bundle's two managed Claude Code files, in a directory of their own, for a
    /// private `/etc/claude-code`.
    fn claude_system_files(&self) -> anyhow::Result<TempDir> {
        let files = tempfile::Builder::new()
            .prefix("relay-e2e-etc-claude-")
            .tempdir()?;
        let settings = self.bundle().join("claude-code/settings-v1");
        for file in ["managed-settings.json", "managed-mcp.json"] {
            std::fs::copy(settings.join(file), files.path().join(file))?;
        }
        Ok(files)
    }

    /// What the harness environment gets: the token, and where this machine-user's Relay
    /// state and config live (a real user has them in the default places).
    pub(crate) fn relay_env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("RELAY_CLIENT_TOKEN", self.token.clone()),
            (
                "XDG_CONFIG_HOME",
                self.user.xdg_config_home().display().to_string(),
            ),
            (
                "RELAY_SYSTEM_CONFIG_DIR",
                self.user.system_config_dir().display().to_string(),
            ),
        ];
        if self.plugins {
            env.push((COLLECTOR_KEY_VAR, COLLECTOR_KEY.to_owned()));
        }
        env
    }

    pub(crate) fn fail(&self, out: &AgentOutput, why: &str) -> ! {
        panic!(
            "{why}\n{out}\n--- relayd ---\n{}\n--- workers ---\n{}\n--- stand-in saw ---\n{:?}",
            self.relayd.logs().text(),
            self.user.worker_log_text(),
            self.stand_in
                .requests()
                .iter()
                .map(|r| format!("{} {}", r.method, r.path_and_query))
                .collect::<Vec<_>>()
        )
    }

    /// The hook events the CLI posted to `path`, in the tap's order.
    pub(crate) fn hooks_sent(&self, path: &str) -> Vec<String> {
        self.tap
            .requests()
            .into_iter()
            .filter(|req| req.method == "POST" && req.target == path)
            .map(|req| {
                let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap_or_default();
                body["hook_event_name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    }

    /// Everything a bundle-launched session must show after the CLI exited.
    pub(crate) async fn check(
        &self,
        out: &AgentOutput,
        model_route: &str,
        hook_path: &str,
        expected_hooks: &[&str],
    ) -> anyhow::Result<()> {
        if !out.status.success() || !out.stdout.contains(TOOL_DONE_TEXT) {
            self.fail(out, "the CLI did not finish its tool round trip");
        }
        let turns = self
            .stand_in
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST")
            .count() as u64;
        if turns < 2 {
            self.fail(out, &format!("the stand-in saw {turns} model turns"));
        }
        let through_worker = requests_to(&self.relayd, model_route, "worker").await?;
        if through_worker != turns {
            self.fail(
                out,
                &format!("{through_worker} of {turns} model requests went through the worker"),
            );
        }
        let sent = self.hooks_sent(hook_path);
        for event in expected_hooks {
            if !sent.iter().any(|e| e == event) {
                self.fail(out, &format!("no {event} hook: {sent:?}"));
            }
        }
        let hooks = requests_to(&self.relayd, "hook", "worker").await?;
        if hooks != sent.len() as u64 {
            self.fail(
                out,
                &format!(
                    "{hooks} of {} hook events reached the worker: {sent:?}",
                    sent.len()
                ),
            );
        }
        let passed = pass_throughs(&self.relayd);
        if !passed.is_empty() {
            self.fail(out, &format!("relayd passed requests through: {passed:?}"));
        }
        for request in self.stand_in.requests() {
            for (name, value) in &request.headers {
                assert!(
                    !name.starts_with("x-relay-"),
                    "{} {}: the provider saw {name}",
                    request.method,
                    request.path_and_query
                );
                assert!(
                    !super::support::contains(value, self.token.as_bytes()),
                    "the provider saw the route token in {name}"
                );
            }
            assert!(
                !super::support::contains(&request.body, self.token.as_bytes()),
                "the provider saw the route token in a body"
            );
        }

        // The agent stopped relay-mcp: its session ends, the worker drains and exits.
        self.relayd
            .wait_for_log_event("mcp_removed", WORKER_TIMEOUT)
            .await?;
        let removed = self
            .relayd
            .wait_for_log_event("worker_removed", WORKER_TIMEOUT)
            .await?;
        assert_eq!(field(&removed, "reason"), "drained", "{removed}");
        self.user.wait_for_workers(0, WORKER_TIMEOUT).await?;
        assert!(
            !self.relayd.logs().contains(self.token.as_bytes()),
            "the token reached relayd's log"
        );
        Ok(())
    }

    /// Claude Code installed from the bundle for every user (see [`Deployment::run_claude_as`]).
    pub(crate) async fn run_claude(
        &self,
        prompt: &str,
        permissions: serde_json::Value,
    ) -> anyhow::Result<AgentOutput> {
        self.run_claude_as(ClaudeInstall::System, prompt, permissions)
            .await
    }

    /// Claude Code launched from the bundle with `prompt` in -p mode, installed as
    /// docs/harnesses.md says; `permissions` is the `permissions` object of the user's own
    /// settings (`{"allow": ["Bash(echo:*)"]}` lets the stand-in's tool run without a
    /// prompt).
    pub(crate) async fn run_claude_as(
        &self,
        install: ClaudeInstall,
        prompt: &str,
        permissions: serde_json::Value,
    ) -> anyhow::Result<AgentOutput> {
        let settings = self.bundle().join("claude-code/settings-v1");
        // The bundle's two managed files in /etc/claude-code, seen only by this Claude Code,
        // which runs without any flag; or the same files as one user's launch flags.
        let (claude, system) = match install {
            ClaudeInstall::System => {
                let system = self.claude_system_files()?;
                let claude = with_private_etc("claude", system.path(), "claude-code")?;
                (claude, Some(system))
            }
            ClaudeInstall::User => {
                let claude = AgentCommand::new("claude")?
                    .arg("--settings")
                    .arg(path(&settings.join("managed-settings.json")))
                    .arg("--mcp-config")
                    .arg(path(&settings.join("managed-mcp.json")));
                (claude, None)
            }
        };
        // The user's own Claude Code settings: the allowed tools run in -p mode.
        let config_dir = claude.make_dir("claude-config")?;
        claude.write_file(
            "claude-config/settings.json",
            &serde_json::json!({ "permissions": permissions }).to_string(),
        )?;
        let mut claude = claude
            .env("CLAUDE_CONFIG_DIR", config_dir)
            .env("ANTHROPIC_API_KEY", "sk-ant-test")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env(
                "ANTHROPIC_CUSTOM_HEADERS",
                format!("x-relay-client-token: {}", self.token),
            )
            .arg("-p")
            .arg(prompt);
        for (key, value) in self.relay_env() {
            claude = claude.env(key, value);
        }
        let out = claude.run(AGENT_TIMEOUT).await?;
        drop(system);
        Ok(out)
    }

    /// Codex, its `CODEX_HOME` with the user's own `config.toml`, and the bundle's config
    /// placed as `install` says; the bundle's hooks go to `hooks_file`.
    async fn install_codex(&self, install: CodexInstall) -> anyhow::Result<InstalledCodex> {
        let bundle_config = self.bundle().join("codex/settings-v1/config.toml");
        // The user's own config.toml: model and approval lines, and their trusted project.
        let own_config = |codex: &AgentCommand| {
            format!(
                "model = \"mock-model\"\napproval_policy = \"never\"\nsandbox_mode = \"workspace-write\"\n\n[projects.{}]\ntrust_level = \"trusted\"\n",
                toml::Value::from(path(&codex.work_dir()))
            )
        };
        match install {
            CodexInstall::System => {
                let system = tempfile::Builder::new()
                    .prefix("relay-e2e-etc-codex-")
                    .tempdir()?;
                // Only this Codex (and the processes it starts) sees the files in /etc/codex:
                // it runs in a mount namespace of its own over a copy-on-write /etc.
                let codex = with_private_etc("codex", system.path(), "codex")?;
                let codex_home = codex.make_dir("codex-home")?;
                // A user who tries to go around Relay: their own provider (at a port nobody
                // listens on), hooks switched off, and Relay's MCP server disabled. The
                // managed layer must win on every one.
                codex.write_file(
                    "codex-home/config.toml",
                    &format!(
                        "model_provider = \"elsewhere\"\n{}{USER_OPTING_OUT}",
                        own_config(&codex)
                    ),
                )?;
                let config_file = system.path().join("managed_config.toml");
                let mut managed = std::fs::read_to_string(&bundle_config)?;
                managed.push_str(CODEX_MANAGED_PINS);
                std::fs::write(&config_file, managed)?;
                Ok(InstalledCodex {
                    codex,
                    codex_home,
                    config_file,
                    hooks_file: system.path().join("hooks.json"),
                    _system: Some(system),
                })
            }
            CodexInstall::User => {
                let codex = AgentCommand::new("codex")?;
                let codex_home = codex.make_dir("codex-home")?;
                let config_file =
                    codex.write_file("codex-home/config.toml", &own_config(&codex))?;
                let script = codex.write_file("merge-codex-config.sh", CODEX_MERGE)?;
                let merged = tokio::process::Command::new("/bin/sh")
                    .arg(&script)
                    .arg(&bundle_config)
                    .arg(&config_file)
                    .stdin(Stdio::null())
                    .output()
                    .await?;
                assert!(merged.status.success(), "{merged:?}");
                let config = std::fs::read_to_string(&config_file)?;
                let parsed: toml::Value = toml::from_str(&config)?;
                assert_eq!(parsed["model_provider"].as_str(), Some("relay"), "{config}");
                assert_eq!(parsed["model"].as_str(), Some("mock-model"), "{config}");
                Ok(InstalledCodex {
                    hooks_file: codex_home.join("hooks.json"),
                    codex,
                    codex_home,
                    config_file,
                    _system: None,
                })
            }
        }
    }

    /// Codex launched from the bundle with `prompt`, installed as `install` says, and the
    /// user's own key stored by `codex login`.
    pub(crate) async fn run_codex(
        &self,
        prompt: &str,
        install: CodexInstall,
    ) -> anyhow::Result<AgentOutput> {
        let bundle = self.bundle();
        let InstalledCodex {
            codex,
            codex_home,
            config_file,
            hooks_file,
            _system,
        } = self.install_codex(install).await?;
        if self.plugins {
            // Codex hands its MCP server only the variables the bundle lists: the worker
            // would look for plugins.toml in /etc/relay, where a deployment has it, so it is
            // pointed at the test's system directory; and the collectors' secret is added as
            // docs/harnesses.md tells administrators.
            let mut config = std::fs::read_to_string(&config_file)?;
            for variable in ["RELAY_SYSTEM_CONFIG_DIR", COLLECTOR_KEY_VAR] {
                config = pass_to_relay_mcp(&config, variable)?;
            }
            std::fs::write(&config_file, config)?;
        }
        std::fs::copy(bundle.join("codex/settings-v1/hooks.json"), &hooks_file)?;

        // The user's own OpenAI key, as `codex login --with-api-key` stores it.
        let mut login = tokio::process::Command::new(relay_e2e::agent_binary("codex")?)
            .args(["login", "--with-api-key"])
            .env_clear()
            .env("HOME", codex.dir().join("home"))
            .env("CODEX_HOME", &codex_home)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        if let Some(mut stdin) = login.stdin.take() {
            tokio::io::AsyncWriteExt::write_all(&mut stdin, b"sk-test-openai\n").await?;
        }
        let login = tokio::time::timeout(AGENT_TIMEOUT, login.wait_with_output()).await??;
        assert!(login.status.success(), "codex login failed: {login:?}");

        let mut codex = codex
            .env("CODEX_HOME", &codex_home)
            .args(["exec", "--skip-git-repo-check"]);
        if install == CodexInstall::User {
            // A user's own hooks run once the user has trusted them (`/hooks` in Codex);
            // the flag stands for that review.
            codex = codex.arg("--dangerously-bypass-hook-trust");
        }
        codex = codex.arg(prompt);
        for (key, value) in self.relay_env() {
            codex = codex.env(key, value);
        }
        Ok(codex.run(AGENT_TIMEOUT).await?)
    }

    /// pi launched from the bundle's extension with `prompt` against the user's own
    /// provider `mock` (Anthropic Messages at the stand-in); with `other_provider` the user
    /// also has a provider whose API Relay does not serve.
    pub(crate) async fn run_pi(
        &self,
        prompt: &str,
        other_provider: bool,
    ) -> anyhow::Result<AgentOutput> {
        let bundle = self.bundle();
        let pi = AgentCommand::new("pi")?;
        let agent_dir = self.pi_agent_dir();
        std::fs::create_dir_all(&agent_dir)?;
        let base = self.stand_in.base_url();
        let mut providers = serde_json::json!({
            "mock": {"baseUrl": base, "api": "anthropic-messages", "apiKey": "RELAY_E2E_PI_KEY",
                     "models": [{"id": "mock-claude"}]},
        });
        if other_provider {
            providers["other"] = serde_json::json!(
                {"baseUrl": base, "api": "google-generative-ai", "apiKey": "RELAY_E2E_PI_KEY",
                 "models": [{"id": "mock-gemini"}]}
            );
        }
        let models = serde_json::json!({ "providers": providers });
        std::fs::write(agent_dir.join("models.json"), models.to_string())?;
        // Installed as an administrator installs it: listed in pi's settings.
        let extension = bundle.join("pi/extension-v1/index.ts");
        let settings = serde_json::json!({ "extensions": [path(&extension)] });
        std::fs::write(agent_dir.join("settings.json"), settings.to_string())?;
        let mut pi = pi
            .env("PI_CODING_AGENT_DIR", &agent_dir)
            .env("PI_OFFLINE", "1")
            .env("RELAY_E2E_PI_KEY", "sk-ant-pi-test")
            .args(["-p", "--model", "mock/mock-claude", prompt]);
        for (key, value) in self.relay_env() {
            pi = pi.env(key, value);
        }
        Ok(pi.run(AGENT_TIMEOUT).await?)
    }
}

impl Deployment {
    /// pi's own directory (`PI_CODING_AGENT_DIR`) for this deployment's user.
    fn pi_agent_dir(&self) -> PathBuf {
        self.user.dir().join("pi-agent")
    }

    /// relay-doctor's `pi` check for this deployment's user, after [`Deployment::run_pi`].
    pub(crate) async fn doctor_pi(&self) -> anyhow::Result<serde_json::Value> {
        let out = tokio::process::Command::new(relay_e2e::binary("relay-doctor")?)
            .arg("--json")
            .env_clear()
            .env("HOME", self.user.home())
            .env("XDG_CONFIG_HOME", self.user.xdg_config_home())
            .env("PI_CODING_AGENT_DIR", self.pi_agent_dir())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(CLI_TIMEOUT, out).await??;
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| anyhow::anyhow!("relay-doctor's stdout is not JSON ({e}): {out:?}"))?;
        Ok(report_check(&report, "pi").clone())
    }
}

pub(crate) fn path(path: &Path) -> String {
    path.display().to_string()
}
