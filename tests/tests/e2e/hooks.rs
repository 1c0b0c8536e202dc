//! Hooks on the worker path (SPEC §3.4, §7.1, §7.2): every payload the real agents sent,
//! fed through the real `relay-hook` to relayd and on to the user's worker, gets the
//! agent's answer and exit status; with the daemon down the failure policy decides; an
//! oversize payload is never sent and a malformed one is refused.

use std::path::PathBuf;
use std::process::Stdio;

use relay_e2e::{Mcp, Relayd, User};
use relay_testkit::StandIn;
use tokio::io::AsyncWriteExt as _;

use super::support::{
    EVENT_TIMEOUT, INITIALIZE_TIMEOUT, context, fresh_token, pass_throughs, requests_to, user_for,
    worker_config,
};

/// One captured payload.
struct Payload {
    /// The fixture directory (`claude-code`, `codex`, `pi`).
    dir: &'static str,
    /// The `relay-hook` agent argument.
    agent: &'static str,
    name: String,
    event: String,
    bytes: Vec<u8>,
}

impl Payload {
    /// Whether exit 2 means "do not do this" for this event (§7.1).
    fn is_blocking(&self) -> bool {
        match self.agent {
            "pi" => matches!(self.event.as_str(), "tool_call" | "user_bash"),
            _ => matches!(
                self.event.as_str(),
                "PreToolUse" | "PermissionRequest" | "UserPromptSubmit"
            ),
        }
    }

    /// The worker's answer for the agent (§7.2).
    fn answer(&self) -> &'static [u8] {
        match self.agent {
            "claude" => br#"{"continue":true}"#,
            _ => b"{}",
        }
    }
}

/// Every payload in `bins/relay-hook/tests/fixtures/`, for all three agents.
fn payloads() -> anyhow::Result<Vec<Payload>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bins/relay-hook/tests/fixtures");
    let mut out = Vec::new();
    for (dir, agent) in [("claude-code", "claude"), ("codex", "codex"), ("pi", "pi")] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(dir))?
            .map(|entry| entry.map(|entry| entry.path()))
            .collect::<Result<_, _>>()?;
        files.sort();
        for path in files {
            let bytes = std::fs::read(&path)?;
            let json: serde_json::Value = serde_json::from_slice(&bytes)?;
            out.push(Payload {
                dir,
                agent,
                name: path
                    .file_name()
                    .map(|name| name.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                event: json["hook_event_name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                bytes,
            });
        }
    }
    assert!(out.len() >= 30, "the fixtures went missing: {}", out.len());
    Ok(out)
}

/// What one `relay-hook` run did.
#[derive(Debug)]
struct HookRun {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

/// Runs `relay-hook <agent> --daemon-address <address> <flags>` with `payload` on stdin,
/// as `user` with the route credential `token`.
async fn run_hook(
    user: &User,
    agent: &str,
    address: &str,
    token: &str,
    flags: &[&str],
    payload: &[u8],
) -> anyhow::Result<HookRun> {
    let mut hook = tokio::process::Command::new(relay_e2e::binary("relay-hook")?)
        .arg(agent)
        .args(["--daemon-address", address])
        .args(flags)
        .env_clear()
        .env("HOME", user.home())
        .env("XDG_CONFIG_HOME", user.xdg_config_home())
        .env("RELAY_CLIENT_TOKEN", token)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdin = hook.stdin.take();
    let payload = payload.to_vec();
    // relay-hook stops reading an oversize payload, so the write may fail; it runs beside
    // the wait so a full pipe cannot block either side.
    let writer = tokio::spawn(async move {
        if let Some(mut stdin) = stdin {
            let _ = stdin.write_all(&payload).await;
        }
    });
    let out = tokio::time::timeout(EVENT_TIMEOUT, hook.wait_with_output()).await??;
    let _ = writer.await;
    Ok(HookRun {
        code: out.status.code(),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// relayd, a user, and a relay-mcp whose worker is ready.
async fn worker_ready() -> anyhow::Result<(StandIn, Relayd, User, Mcp, String)> {
    let stand_in = StandIn::start().await?;
    let relayd = Relayd::builder()?
        .config(worker_config(&stand_in, ""))
        .start()
        .await?;
    let user = user_for(&stand_in)?;
    let token = fresh_token()?;
    let mut mcp = user.mcp(&relayd.origin())?.token(&token).spawn()?;
    mcp.initialize("2025-06-18", INITIALIZE_TIMEOUT).await?;
    relayd
        .wait_for_log_event("worker_ready", EVENT_TIMEOUT)
        .await?;
    Ok((stand_in, relayd, user, mcp, token))
}

#[tokio::test]
async fn every_captured_payload_reaches_the_worker_and_gets_its_agents_answer() -> anyhow::Result<()>
{
    let (_stand_in, relayd, user, mcp, token) = worker_ready().await?;
    let payloads = payloads()?;
    for payload in &payloads {
        let run = run_hook(
            &user,
            payload.agent,
            &relayd.origin(),
            &token,
            &[],
            &payload.bytes,
        )
        .await?;
        let what = format!("{}/{}", payload.dir, payload.name);
        assert_eq!(run.code, Some(0), "{what}: {run:?}");
        assert_eq!(
            run.stdout,
            payload.answer(),
            "{what}: {}",
            String::from_utf8_lossy(&run.stdout)
        );
        assert!(run.stderr.is_empty(), "{what}: {}", run.stderr);
    }
    // Every one was answered by the worker, none passed through.
    assert_eq!(
        requests_to(&relayd, "hook", "worker").await?,
        payloads.len() as u64,
        "{}",
        context(&relayd, &user, &[&mcp])
    );
    assert!(pass_throughs(&relayd).is_empty());
    Ok(())
}

#[tokio::test]
async fn with_the_daemon_down_the_failure_policy_decides() -> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let mut relayd = Relayd::builder()?
        .config(worker_config(&stand_in, ""))
        .start()
        .await?;
    let origin = relayd.origin();
    relayd.stop().await?;
    let user = user_for(&stand_in)?;
    let token = fresh_token()?;
    for payload in payloads()? {
        let what = format!("{}/{}", payload.dir, payload.name);
        let blocking = payload.is_blocking();
        let cases: [(&[&str], i32); 3] = [
            (&["--fail-open"], 0),
            (&["--fail-closed"], if blocking { 2 } else { 1 }),
            // Default: fail-closed for the blocking events, fail-open for the rest.
            (&[], if blocking { 2 } else { 0 }),
        ];
        for (flags, code) in cases {
            let run =
                run_hook(&user, payload.agent, &origin, &token, flags, &payload.bytes).await?;
            assert_eq!(run.code, Some(code), "{what} {flags:?}: {run:?}");
            assert!(run.stdout.is_empty(), "{what} {flags:?}: {run:?}");
            let lines: Vec<&str> = run.stderr.lines().collect();
            assert_eq!(lines.len(), 1, "{what} {flags:?}: {run:?}");
            assert!(lines[0].starts_with("relay-hook: "), "{what}: {run:?}");
        }
    }
    Ok(())
}

#[tokio::test]
async fn an_oversize_payload_is_never_sent_and_a_malformed_one_is_refused() -> anyhow::Result<()> {
    const LIMIT: usize = 1024 * 1024;
    let (_stand_in, relayd, user, _mcp, token) = worker_ready().await?;
    let origin = relayd.origin();
    let padded = |len: usize| {
        let head = r#"{"hook_event_name":"PreToolUse","tool_name":"Bash","pad":""#;
        let tail = r#""}"#;
        let mut bytes = head.as_bytes().to_vec();
        bytes.resize(len - tail.len(), b'x');
        bytes.extend_from_slice(tail.as_bytes());
        bytes
    };
    let hooks_seen = || async {
        let text = super::support::metrics(&relayd).await?;
        anyhow::Ok(relay_e2e::metrics::sample_sum(
            &text,
            "relay_requests_total",
            &[("route", "hook")],
        ) as u64)
    };

    // Exactly 1 MiB is sent, and the worker answers it.
    let run = run_hook(&user, "claude", &origin, &token, &[], &padded(LIMIT)).await?;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, br#"{"continue":true}"#);
    assert_eq!(requests_to(&relayd, "hook", "worker").await?, 1);

    // One byte more is never sent: a failure, blocking here (PreToolUse).
    let before = hooks_seen().await?;
    let run = run_hook(&user, "claude", &origin, &token, &[], &padded(LIMIT + 1)).await?;
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.stdout.is_empty());
    let run = run_hook(
        &user,
        "claude",
        &origin,
        &token,
        &["--fail-open"],
        &padded(LIMIT + 1),
    )
    .await?;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stdout.is_empty());
    assert_eq!(
        hooks_seen().await?,
        before,
        "an oversize payload reached relayd"
    );

    // Malformed payloads reach relayd, which refuses them (400) before any worker; the
    // event name is still read from a payload cut after it.
    for (payload, blocking) in [
        (&b"not json at all"[..], false),
        (
            &br#"{"hook_event_name":"PreToolUse","tool_name":"#[..],
            true,
        ),
        (&br#"["PreToolUse"]"#[..], false),
    ] {
        let run = run_hook(&user, "claude", &origin, &token, &[], payload).await?;
        assert_eq!(
            run.code,
            Some(if blocking { 2 } else { 0 }),
            "{}: {run:?}",
            String::from_utf8_lossy(payload)
        );
        assert!(run.stdout.is_empty(), "{run:?}");
        let run = run_hook(
            &user,
            "claude",
            &origin,
            &token,
            &["--fail-closed"],
            payload,
        )
        .await?;
        assert_eq!(run.code, Some(if blocking { 2 } else { 1 }), "{run:?}");
    }
    let text = super::support::metrics(&relayd).await?;
    let refused = relay_e2e::metrics::sample_sum(
        &text,
        "relay_requests_total",
        &[
            ("route", "hook"),
            ("destination", "local"),
            ("status", "400"),
        ],
    );
    assert_eq!(refused, 6.0, "{text}");
    assert_eq!(requests_to(&relayd, "hook", "worker").await?, 1);
    Ok(())
}
