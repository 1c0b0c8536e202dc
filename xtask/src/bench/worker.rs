//! The worker phase of `cargo xtask bench`: relayd in managed mode, MCP sessions that start workers, and the measures of SPEC §12 that need them.
//!
//! Activation is timed here, from spawning `relay-mcp` to the moment `GET /_relay/v1/route` says `worker`, over several sessions, each closed and its worker gone before the next.
//! Then one session stays live while `relay-loadgen` measures the worker path (its worker scenarios, with the credential in `RELAY_CLIENT_TOKEN`) and while `relay-hook` runs beside `/bin/true`.
//! It does not read the MCP's JSON-RPC answers: the route is the measure, and relayd's `/metrics` proves that hooks and model requests reached the worker.

use std::{
    ffi::OsString,
    fs,
    io::{ErrorKind, Read as _, Write as _},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{ChildStdin, Command, Output, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use serde_json::{Value, json};

use super::{
    CpuSnapshot, Pinning, Process, Relayd, RelaydMode, Scratch, StandIn, cpu_ticks_json, http_get,
    log_tail, other_cpu_share, parse_pid_stat_ticks, parse_pid_stat_ticks_with_children,
    parse_pid_state, run_loadgen,
};

/// Sessions whose activation is counted; one more runs first and is reported apart (it creates the machine key, pins the daemon key and binds the credential, which later sessions find done).
const ACTIVATION_SESSIONS: usize = 10;
/// How often the route is polled while a session activates: the figure is good to about this much.
const ROUTE_POLL: Duration = Duration::from_millis(1);
/// How long a session may take to make its route ready before the bench fails.
const ROUTE_READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long relay-mcp may take to exit after its stdin closed (SPEC §5.5 says within 2 s).
const MCP_EXIT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an idle worker may take to exit once its only session is gone.
const WORKER_EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a live relay-mcp's worker may take to show up among its children.
const WORKER_CHILD_TIMEOUT: Duration = Duration::from_secs(2);
/// The worker-phase load run; it takes about half a minute.
const WORKER_LOADGEN_TIMEOUT: Duration = Duration::from_secs(150);
/// Counted runs of relay-hook, and as many of the baseline.
const HOOK_RUNS: usize = 200;
/// Uncounted runs of each first, so both programs are in the page cache.
const HOOK_WARMUP: usize = 20;
/// Runs per block; blocks of the two programs alternate, and which goes first alternates by round.
const HOOK_BLOCK: usize = 10;
/// A Claude Code `PreToolUse` payload recorded from the real CLI: a blocking event, so relay-hook waits for the worker's answer.
const HOOK_PAYLOAD: &str =
    include_str!("../../../bins/relay-hook/tests/fixtures/claude-code/PreToolUse-Bash.json");
/// What the worker answers a Claude Code hook with no plugins (SPEC §7.2).
const HOOK_ANSWER: &str = r#"{"continue":true}"#;
/// The first line a harness writes to its MCP server.
const INITIALIZE: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"bench\",\"version\":\"1\"}}}\n";
/// The worker scenarios of relay-loadgen, in order: RSS first, so it follows only activation and a warm-up.
const LOADGEN_SCENARIOS: [&str; 4] = [
    "worker-memory",
    "worker-latency",
    "worker-ttfb",
    "worker-body",
];

/// What the worker phase produced.
#[derive(Debug)]
pub(super) struct WorkerPhase {
    /// The loadgen's report of its worker scenarios.
    pub(super) loadgen: Value,
    /// Rows of the measures taken here (activation, hook), in the loadgen's row shape.
    pub(super) rows: Vec<Value>,
    pub(super) other_cpu_share: Option<f64>,
    pub(super) notes: Vec<String>,
    /// Raw figures for the JSON.
    pub(super) detail: Value,
}

/// Runs the worker phase against the fast stand-in.
pub(super) fn run(
    bin_dir: &Path,
    pinning: &Pinning,
    fast: &StandIn,
    scratch: &Scratch,
) -> Result<WorkerPhase> {
    // From here on this thread is a client, like the load generator: it polls the route and starts relay-hook.
    if let Some(cpus) = pinning.loadgen.as_deref() {
        pin_current_thread(cpus)?;
    }
    let relayd = Relayd::start(
        bin_dir,
        pinning.relayd.as_deref(),
        RelaydMode::Managed,
        fast.addr,
        fast.addr,
        scratch,
    )?;
    let home = scratch.path("managed/user");
    let xdg = home.join("xdg");
    fs::create_dir_all(&xdg).with_context(|| format!("creating {}", xdg.display()))?;
    let env = SessionEnv {
        bin_dir: bin_dir.to_path_buf(),
        daemon: relayd.addr,
        token: new_token()?,
        home,
        xdg,
        system_dir: relayd.system_dir.clone(),
        server_cpus: pinning.relayd.clone(),
        scratch,
    };
    println!(
        "\n==> relayd {} (managed, pid {}); workers call stand-in {}",
        relayd.addr,
        relayd.process.pid(),
        fast.addr
    );
    let servers = [relayd.process.pid(), fast.process.pid()];
    let cpu_before = CpuSnapshot::take(&servers);
    let own_before = own_ticks();

    println!(
        "\n==> worker activation: {ACTIVATION_SESSIONS} MCP sessions after a first one, each closed before the next"
    );
    let started = Instant::now();
    let activation = activation(&env, ACTIVATION_SESSIONS)?;
    println!(
        "==> worker activation: ok in {}",
        crate::command::seconds(started.elapsed())
    );

    let mut live = McpSession::start(&env, "live")?;
    live.wait_until_ready(&env)
        .context("starting the session kept live for the worker measures")?;
    let worker_pid = live
        .worker
        .context("the live session has no worker process")?;
    // Evidence for the JSON that the worker inherited relay-mcp's CPUs.
    let worker_cpus = cpus_allowed(worker_pid);
    let mut args: Vec<OsString> = Vec::new();
    for (flag, value) in [
        ("--direct", fast.addr.to_string()),
        ("--relay", relayd.addr.to_string()),
        ("--relay-pid", relayd.process.pid().to_string()),
        ("--worker-pid", worker_pid.to_string()),
    ] {
        args.push(flag.into());
        args.push(value.into());
    }
    for scenario in LOADGEN_SCENARIOS {
        args.push("--scenario".into());
        args.push(scenario.into());
    }
    let loadgen = run_loadgen(
        bin_dir,
        pinning.loadgen.as_deref(),
        &args,
        &[("RELAY_CLIENT_TOKEN", env.token.as_str())],
        &format!("through the worker, pid {worker_pid}, about half a minute"),
        WORKER_LOADGEN_TIMEOUT,
    )?;

    println!(
        "\n==> relay-hook and /bin/true: {HOOK_RUNS} runs each after {HOOK_WARMUP} to warm up"
    );
    let started = Instant::now();
    let hook = hook_wall_time(&env)?;
    println!(
        "==> relay-hook: ok in {}",
        crate::command::seconds(started.elapsed())
    );
    let live_ticks = process_ticks(worker_pid).unwrap_or(0);
    live.close().context("closing the live session")?;
    let cpu_after = CpuSnapshot::take(&servers);
    let own_after = own_ticks();
    drop(relayd);

    // The xtask's own ticks include every child it reaped (each relay-mcp, relay-hook, /bin/true and the loadgen); workers are reaped by init, so theirs were read before each closed.
    let client_ticks = own_before
        .zip(own_after)
        .map(|(before, after)| after.saturating_sub(before) + activation.worker_ticks + live_ticks);
    let other_cpu_share = match (cpu_before, cpu_after, client_ticks) {
        (Some(before), Some(after), Some(clients)) => other_cpu_share(&before, &after, clients),
        _ => None,
    };
    let rows = vec![
        measure_row(
            "activation",
            "worker activation, MCP start to route ready, p50",
            millis(percentile(&activation.samples, 0.5)),
            None,
            Some(150.0),
            activation.samples.len(),
        ),
        measure_row(
            "activation",
            "worker activation, MCP start to route ready, max",
            millis(percentile(&activation.samples, 1.0)),
            None,
            Some(150.0),
            activation.samples.len(),
        ),
        measure_row(
            "hook",
            "relay-hook start to exit, loopback, p50 (direct: /bin/true)",
            millis(percentile(&hook.hook, 0.5)),
            Some(millis(percentile(&hook.baseline, 0.5))),
            Some(3.0),
            hook.hook.len(),
        ),
        measure_row(
            "hook",
            "relay-hook start to exit, loopback, p99 (direct: /bin/true)",
            millis(percentile(&hook.hook, 0.99)),
            Some(millis(percentile(&hook.baseline, 0.99))),
            None,
            hook.hook.len(),
        ),
    ];
    let client_cpus = pinning.loadgen.as_deref().unwrap_or("any");
    let server_cpus = pinning.relayd.as_deref().unwrap_or("any");
    let notes = vec![
        format!(
            "worker measures: relayd in managed mode with its default configuration, no plugins; relay-mcp and the worker run beside relayd (CPU {server_cpus}); the route is polled every {} ms during activation, which costs relayd one small request per poll; relay-hook and /bin/true start from the xtask on CPU {client_cpus}",
            ROUTE_POLL.as_millis()
        ),
        format!(
            "the first worker activation, which also creates the machine key, pins the daemon key and binds the credential, took {:.1} ms and is not in the activation rows",
            millis(activation.first)
        ),
    ];
    let as_ms = |samples: &[Duration]| samples.iter().map(|d| millis(*d)).collect::<Vec<_>>();
    let detail = json!({
        "other_cpu_share": other_cpu_share,
        "cpu_ticks": cpu_ticks_json(cpu_before, cpu_after, json!(client_ticks)),
        "first_activation_ms": millis(activation.first),
        "activation_ms": as_ms(&activation.samples),
        "hook_ms": as_ms(&hook.hook),
        "bin_true_ms": as_ms(&hook.baseline),
        "hook_requests_to_worker": hook.to_worker,
        "worker_cpus_allowed": worker_cpus,
    });
    Ok(WorkerPhase {
        loadgen,
        rows,
        other_cpu_share,
        notes,
        detail,
    })
}

/// What every process of a session gets: the daemon, the credential and the user's directories.
#[derive(Debug)]
struct SessionEnv<'a> {
    bin_dir: PathBuf,
    daemon: SocketAddr,
    /// The route credential, a fresh one per run; it goes only into environments, never into argv or output.
    token: String,
    home: PathBuf,
    xdg: PathBuf,
    system_dir: PathBuf,
    /// Where relay-mcp starts (its worker inherits the mask): beside relayd.
    server_cpus: Option<String>,
    scratch: &'a Scratch,
}

impl SessionEnv<'_> {
    fn daemon_url(&self) -> String {
        format!("http://{}", self.daemon)
    }

    /// A command with the caller's environment cleared, then the session's: the credential, `HOME`, `XDG_CONFIG_HOME` and `RELAY_SYSTEM_CONFIG_DIR`.
    fn command(&self, program: &Path) -> Command {
        let mut command = Command::new(program);
        command
            .env_clear()
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", &self.xdg)
            .env("RELAY_SYSTEM_CONFIG_DIR", &self.system_dir)
            .env("RELAY_CLIENT_TOKEN", &self.token);
        command
    }

    /// True when relayd says this credential's requests go to a worker.
    fn is_route_ready(&self) -> Result<bool> {
        let (status, body) = http_get(self.daemon, "/_relay/v1/route", Some(&self.token))
            .context("asking relayd for the route")?;
        ensure!(
            status == 200,
            "GET /_relay/v1/route answered {status}: {body}"
        );
        let route: Value = serde_json::from_str(&body)
            .with_context(|| format!("the route is not JSON: {body}"))?;
        Ok(route["route_mode"] == "worker")
    }

    /// relayd's count of hook requests by destination: (worker, pass-through).
    fn hook_destinations(&self) -> Result<(u64, u64)> {
        let (status, body) =
            http_get(self.daemon, "/metrics", None).context("reading relayd's /metrics")?;
        ensure!(status == 200, "GET /metrics answered {status}");
        Ok(hook_destinations(&body))
    }
}

/// One harness session: a running relay-mcp with its stdin held open, and its worker once the route is ready.
#[derive(Debug)]
struct McpSession {
    process: Process,
    stdin: Option<ChildStdin>,
    log: PathBuf,
    /// Just before relay-mcp was spawned.
    started: Instant,
    worker: Option<u32>,
}

impl McpSession {
    /// Spawns relay-mcp on the server CPUs and writes the harness's `initialize`.
    fn start(env: &SessionEnv<'_>, label: &str) -> Result<McpSession> {
        let (log, log_file) = env
            .scratch
            .log(&format!("managed/relay-mcp-{label}.stderr"))?;
        let mut command = env.command(&env.bin_dir.join("relay-mcp"));
        command
            .arg("--daemon-address")
            .arg(env.daemon_url())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log_file);
        let (started, mut process) = spawn_on(env.server_cpus.as_deref(), "relay-mcp", command)?;
        let mut stdin = process
            .child
            .stdin
            .take()
            .context("relay-mcp has no stdin pipe")?;
        stdin
            .write_all(INITIALIZE)
            .context("writing initialize to relay-mcp")?;
        Ok(McpSession {
            process,
            stdin: Some(stdin),
            log,
            started,
            worker: None,
        })
    }

    /// Polls the route every [`ROUTE_POLL`] until it says `worker`, finds the worker process, and returns the time since relay-mcp was spawned.
    fn wait_until_ready(&mut self, env: &SessionEnv<'_>) -> Result<Duration> {
        loop {
            if let Some(status) = self.process.exited()? {
                bail!(
                    "relay-mcp exited ({status}) before its route was ready; its stderr:\n{}",
                    log_tail(&self.log)
                );
            }
            if env.is_route_ready()? {
                let elapsed = self.started.elapsed();
                self.worker = Some(find_worker(self.process.pid())?);
                return Ok(elapsed);
            }
            if self.started.elapsed() >= ROUTE_READY_TIMEOUT {
                bail!(
                    "the route was not ready {ROUTE_READY_TIMEOUT:?} after relay-mcp started; its stderr:\n{}",
                    log_tail(&self.log)
                );
            }
            thread::sleep(ROUTE_POLL);
        }
    }

    /// CPU ticks the worker used so far (it is reaped by init, so the xtask's own counts never see them).
    fn worker_ticks(&self) -> u64 {
        self.worker.and_then(process_ticks).unwrap_or(0)
    }

    /// Ends the session as a harness does, by closing relay-mcp's stdin; waits for relay-mcp to exit and then for the worker, whose route it released.
    fn close(mut self) -> Result<()> {
        drop(self.stdin.take());
        let deadline = Instant::now() + MCP_EXIT_TIMEOUT;
        let status = loop {
            if let Some(status) = self.process.exited()? {
                break status;
            }
            if Instant::now() >= deadline {
                bail!(
                    "relay-mcp did not exit within {MCP_EXIT_TIMEOUT:?} of its stdin closing; its stderr:\n{}",
                    log_tail(&self.log)
                );
            }
            thread::sleep(Duration::from_millis(2));
        };
        ensure!(
            status.success(),
            "relay-mcp exited with {status}; its stderr:\n{}",
            log_tail(&self.log)
        );
        if let Some(pid) = self.worker {
            wait_for_exit(pid, WORKER_EXIT_TIMEOUT).with_context(|| {
                format!("the worker (pid {pid}) of a closed session did not exit")
            })?;
            self.worker = None;
        }
        Ok(())
    }
}

impl Drop for McpSession {
    /// On a failure path: closes stdin so relay-mcp can release the route, then stops a worker that is still there (it runs in its own process group, so killing relay-mcp does not reach it).
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(2);
        while matches!(self.process.exited(), Ok(None)) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        if let Some(pid) = self.worker.take()
            && wait_for_exit(pid, Duration::from_secs(2)).is_err()
            && is_relay_worker(pid)
        {
            let _ = Command::new("kill")
                .arg(pid.to_string())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Activation times of the first session and of `n` more.
#[derive(Debug)]
struct Activation {
    first: Duration,
    samples: Vec<Duration>,
    /// CPU ticks of the sessions' workers, read just before each closed.
    worker_ticks: u64,
}

/// Starts a session, times it to a ready route, closes it and waits for its worker to exit, `n + 1` times.
fn activation(env: &SessionEnv<'_>, n: usize) -> Result<Activation> {
    let mut first = None;
    let mut samples = Vec::with_capacity(n);
    let mut worker_ticks = 0;
    for i in 0..=n {
        let mut session = McpSession::start(env, &i.to_string())?;
        let elapsed = session
            .wait_until_ready(env)
            .with_context(|| format!("activation session {}", i + 1))?;
        worker_ticks += session.worker_ticks();
        session
            .close()
            .with_context(|| format!("closing activation session {}", i + 1))?;
        if first.is_none() {
            first = Some(elapsed);
        } else {
            samples.push(elapsed);
        }
    }
    let first = first.context("no activation session ran")?;
    Ok(Activation {
        first,
        samples,
        worker_ticks,
    })
}

/// Wall times of relay-hook and of the `/bin/true` baseline.
#[derive(Debug, Default)]
struct HookTimes {
    hook: Vec<Duration>,
    baseline: Vec<Duration>,
    /// Hook requests relayd counted to the worker during the runs.
    to_worker: u64,
}

/// The two programs of the hook measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HookProgram {
    Hook,
    Baseline,
}

/// The block order of a round: which program goes first alternates.
fn hook_round_order(round: usize) -> [HookProgram; 2] {
    if round.is_multiple_of(2) {
        [HookProgram::Baseline, HookProgram::Hook]
    } else {
        [HookProgram::Hook, HookProgram::Baseline]
    }
}

/// Runs relay-hook with a PreToolUse payload, and `/bin/true` started the same way (same arguments, environment, pipes and payload), in alternating blocks; checks every answer and, with `/metrics`, that every hook reached the worker.
fn hook_wall_time(env: &SessionEnv<'_>) -> Result<HookTimes> {
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
    let (worker_before, passed_before) = env.hook_destinations()?;
    for _ in 0..HOOK_WARMUP {
        run(HookProgram::Baseline)?;
        run(HookProgram::Hook)?;
    }
    let mut times = HookTimes::default();
    for round in 0..HOOK_RUNS.div_ceil(HOOK_BLOCK) {
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
    let (worker_after, passed_after) = env.hook_destinations()?;
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
fn timed_run(mut command: Command, payload: &[u8]) -> Result<(Duration, Output)> {
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

/// Hook requests in relayd's `relay_requests_total`, by destination: (worker, pass-through).
fn hook_destinations(metrics: &str) -> (u64, u64) {
    let mut counts = (0, 0);
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("relay_requests_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        if !labels.contains(r#"route="hook""#) {
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

/// Pins the calling thread, not the whole process, to `cpus`; processes it spawns afterwards start with that mask.
fn pin_current_thread(cpus: &str) -> Result<()> {
    let link = fs::read_link("/proc/thread-self").context("reading /proc/thread-self")?;
    let tid = link
        .file_name()
        .and_then(|name| name.to_str())
        .with_context(|| format!("/proc/thread-self points at {}", link.display()))?
        .to_owned();
    let status = Command::new("taskset")
        .args(["-p", "-c", cpus, &tid])
        .stdout(Stdio::null())
        .status()
        .context("running taskset -p")?;
    ensure!(
        status.success(),
        "taskset -p -c {cpus} {tid} failed ({status})"
    );
    Ok(())
}

/// Spawns `command` from a short-lived thread pinned to `cpus`, so the process starts there without taskset's own exec inside the timed span; returns the instant just before the spawn.
fn spawn_on(cpus: Option<&str>, name: &str, command: Command) -> Result<(Instant, Process)> {
    let Some(cpus) = cpus else {
        let started = Instant::now();
        return Ok((started, Process::spawn(name, command)?));
    };
    let cpus = cpus.to_owned();
    let owned_name = name.to_owned();
    thread::spawn(move || {
        pin_current_thread(&cpus)?;
        let started = Instant::now();
        Ok((started, Process::spawn(&owned_name, command)?))
    })
    .join()
    .map_err(|_| anyhow!("the thread starting {name} panicked"))?
}

/// The relay-worker child of a relay-mcp, waiting briefly for it to appear.
fn find_worker(mcp_pid: u32) -> Result<u32> {
    let deadline = Instant::now() + WORKER_CHILD_TIMEOUT;
    loop {
        if let Some(pid) = children(mcp_pid)
            .into_iter()
            .find(|pid| is_relay_worker(*pid))
        {
            return Ok(pid);
        }
        if Instant::now() >= deadline {
            bail!("relay-mcp (pid {mcp_pid}) has no relay-worker child though its route is ready");
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// The children of every thread of `pid`, from `/proc/<pid>/task/<tid>/children`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// True when `pid` runs a program named `relay-worker`.
fn is_relay_worker(pid: u32) -> bool {
    fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .and_then(|cmdline| program_name(&cmdline))
        .is_some_and(|name| name == "relay-worker")
}

/// The file name of the program in a `/proc/<pid>/cmdline` (arguments separated by NUL).
fn program_name(cmdline: &[u8]) -> Option<String> {
    let program = cmdline.split(|b| *b == 0).next()?;
    let name = Path::new(std::str::from_utf8(program).ok()?).file_name()?;
    Some(name.to_str()?.to_owned())
}

/// Waits until `pid` is gone or a zombie (a worker is reaped by whoever adopted it, which may be never in a container).
fn wait_for_exit(pid: u32, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let state = fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| parse_pid_state(&stat));
        if matches!(state, None | Some('Z' | 'X')) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("pid {pid} still runs after {timeout:?}");
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// The `Cpus_allowed_list` of a process, as `/proc/<pid>/status` gives it.
fn cpus_allowed(pid: u32) -> Option<String> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .map(|list| list.trim().to_owned())
}

/// utime + stime of a running process.
fn process_ticks(pid: u32) -> Option<u64> {
    parse_pid_stat_ticks(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// This process's ticks with those of the children it reaped.
fn own_ticks() -> Option<u64> {
    parse_pid_stat_ticks_with_children(&fs::read_to_string("/proc/self/stat").ok()?)
}

/// A fresh route credential: 32 random bytes as 43 base64url characters (SPEC §4.1).
fn new_token() -> Result<String> {
    let mut bytes = [0_u8; 32];
    fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .context("reading /dev/urandom for a route credential")?;
    Ok(base64url(&bytes))
}

/// Base64 with the URL-safe alphabet and no padding (RFC 4648 §5).
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        // One input byte gives two characters, two give three, three give four.
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// The nearest-rank percentile (`quantile` 0.5 is the median, 1.0 the maximum); zero for no samples.
fn percentile(samples: &[Duration], quantile: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = (quantile * sorted.len() as f64).ceil() as usize;
    sorted
        .get(rank.clamp(1, sorted.len().max(1)) - 1)
        .copied()
        .unwrap_or_default()
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// A row in relay-loadgen's measure shape (unit ms), for a measure the xtask takes itself; `at_most` is a target on the relay value.
fn measure_row(
    scenario: &str,
    measure: &str,
    relay: f64,
    direct: Option<f64>,
    at_most: Option<f64>,
    samples: usize,
) -> Value {
    json!({
        "scenario": scenario,
        "measure": measure,
        "unit": "ms",
        "relay": relay,
        "direct": direct,
        "added": direct.map(|direct| relay - direct),
        "target": at_most.map(|limit| format!("≤ {limit} ms")),
        "within_target": at_most.map(|limit| relay <= limit),
        "samples": {
            "direct": direct.map(|_| samples),
            "relay": samples,
        },
    })
}

#[cfg(test)]
mod tests;
