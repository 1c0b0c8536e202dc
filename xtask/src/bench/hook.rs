//! The hook measure: relay-hook's wall time from start to exit on loopback, beside `/bin/true` started exactly the same way.

use std::{
    io::{ErrorKind, Write as _},
    path::Path,
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, ensure};

use super::worker::SessionEnv;

/// Counted runs of relay-hook, and as many of the baseline.
pub(super) const HOOK_RUNS: usize = 200;
/// Uncounted runs of each first, so both programs are in the page cache.
pub(super) const HOOK_WARMUP: usize = 20;
/// Runs per block; blocks of the two programs alternate, and which goes first alternates by round.
pub(super) const HOOK_BLOCK: usize = 10;
/// A Claude Code `PreToolUse` payload recorded from the real CLI: a blocking event, so relay-hook waits for the worker's answer.
pub(super) const HOOK_PAYLOAD: &str =
    include_str!("../../../bins/relay-hook/tests/fixtures/claude-code/PreToolUse-Bash.json");
/// What the worker answers a Claude Code hook with no plugins (SPEC §7.2).
const HOOK_ANSWER: &str = r#"{"continue":true}"#;
/// Counted runs of each in a `--quick` run.
pub(super) const HOOK_RUNS_QUICK: usize = 40;

/// Wall times of relay-hook and of the `/bin/true` baseline.
#[derive(Debug, Default)]
pub(super) struct HookTimes {
    pub(super) hook: Vec<Duration>,
    pub(super) baseline: Vec<Duration>,
    /// Hook requests relayd counted to the worker during the runs.
    pub(super) to_worker: u64,
}

/// The two programs of the hook measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HookProgram {
    Hook,
    Baseline,
}

/// The block order of a round: which program goes first alternates.
pub(super) fn hook_round_order(round: usize) -> [HookProgram; 2] {
    if round.is_multiple_of(2) {
        [HookProgram::Baseline, HookProgram::Hook]
    } else {
        [HookProgram::Hook, HookProgram::Baseline]
    }
}

/// Runs relay-hook with a PreToolUse payload, and `/bin/true` started the same way (same arguments, environment, pipes and payload), in alternating blocks; checks every answer and, with `/metrics`, that every hook reached the worker.
pub(super) fn hook_wall_time(env: &SessionEnv<'_>, runs: usize) -> Result<HookTimes> {
    let hook = env.bin_dir.join("relay-hook");
    let baseline = ["/bin/true", "/usr/bin/true"]
        .into_iter()
        .map(Path::new)
        .find(|path| path.is_file())
        .context("neither /bin/true nor /usr/bin/true exists")?;
    let url = env.daemon_url();
    let run = |program: HookProgram| -> Result<Duration> {
        let path = match program {
            HookProgram::Hook => hook.as_path(),
            HookProgram::Baseline => baseline,
        };
        let mut command = env.command(path);
        command.args(["claude", "--daemon-address", &url]);
        let (elapsed, output) = timed_run(command, HOOK_PAYLOAD.as_bytes())
            .with_context(|| format!("running {}", path.display()))?;
        ensure!(
            output.status.success(),
            "{} exited with {}; stderr: {}",
            path.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
        if program == HookProgram::Hook {
            let stdout = String::from_utf8_lossy(&output.stdout);
            ensure!(
                stdout.trim() == HOOK_ANSWER,
                "relay-hook printed {stdout:?} instead of {HOOK_ANSWER}"
            );
        }
        Ok(elapsed)
    };
    let (worker_before, passed_before) = env.destinations("hook")?;
    for _ in 0..HOOK_WARMUP {
        run(HookProgram::Baseline)?;
        run(HookProgram::Hook)?;
    }
    let mut times = HookTimes::default();
    for round in 0..runs.div_ceil(HOOK_BLOCK) {
        for program in hook_round_order(round) {
            for _ in 0..HOOK_BLOCK {
                let elapsed = run(program)?;
                match program {
                    HookProgram::Hook => times.hook.push(elapsed),
                    HookProgram::Baseline => times.baseline.push(elapsed),
                }
            }
        }
    }
    let (worker_after, passed_after) = env.destinations("hook")?;
    let passed = passed_after.saturating_sub(passed_before);
    times.to_worker = worker_after.saturating_sub(worker_before);
    let sent = (HOOK_WARMUP + times.hook.len()) as u64;
    ensure!(
        passed == 0,
        "{passed} hook requests passed through instead of going to the worker"
    );
    ensure!(
        times.to_worker >= sent,
        "relayd counted {} hook requests to the worker, expected {sent}",
        times.to_worker
    );
    Ok(times)
}

/// Spawns `command`, writes `payload` to its stdin and closes it, reads its output and waits for its exit: the wall time a harness pays for one hook.
pub(super) fn timed_run(mut command: Command, payload: &[u8]) -> Result<(Duration, Output)> {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = command.spawn().context("spawning")?;
    if let Some(mut stdin) = child.stdin.take() {
        match stdin.write_all(payload) {
            // A program that does not read its stdin (the baseline) may exit before the write.
            Ok(()) => {}
            Err(error) if error.kind() == ErrorKind::BrokenPipe => {}
            Err(error) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(error).context("writing the payload");
            }
        }
    }
    let output = child.wait_with_output().context("waiting for the exit")?;
    Ok((started.elapsed(), output))
}

/// Requests of `route` (its label: `hook`, `openai`, …) in relayd's `relay_requests_total`, by destination: (worker, pass-through).
pub(super) fn destinations(metrics: &str, route: &str) -> (u64, u64) {
    let route = format!("route=\"{route}\"");
    let mut counts = (0, 0);
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("relay_requests_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        if !labels.split(',').any(|label| label == route) {
            continue;
        }
        let Some(value) = value.trim().parse::<f64>().ok().filter(|v| *v >= 0.0) else {
            continue;
        };
        if labels.contains(r#"destination="worker""#) {
            counts.0 += value as u64;
        } else if labels.contains(r#"destination="pass_through""#) {
            counts.1 += value as u64;
        }
    }
    counts
}
