//! The worker phase of `cargo xtask bench`: relayd in managed mode, MCP sessions that start workers, and the measures of SPEC §12 that need them.
//!
//! Activation is timed here, from spawning `relay-mcp` to the moment `GET /_relay/v1/route` says `worker`, over several sessions, each closed and its worker gone before the next.
//! Then one session stays live while `relay-loadgen` measures the worker path (its worker scenarios, with the credential in `RELAY_CLIENT_TOKEN`) and while `relay-hook` runs beside `/bin/true`.
//! It does not read the MCP's JSON-RPC answers: the route is the measure, and relayd's `/metrics` proves that hooks and model requests reached the worker.

use std::{
    ffi::OsString,
    fs,
    io::{Read as _, Write as _},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{ChildStdin, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail, ensure};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use relay_testkit::measures::{Measure, MeasureId, SampleCounts};
use relay_testkit::procfs::{self, PidStat};
use serde_json::{Value, json};

use super::cpu::{CpuSnapshot, cpu_ticks_json, other_cpu_share};
use super::hook::{HOOK_RUNS, HOOK_RUNS_QUICK, HOOK_WARMUP, destinations, hook_wall_time};
use super::http::http_get;
use super::pinning::Pinning;
use super::procs::{
    Process, Relayd, RelaydMode, Scratch, StandIn, Upstreams, log_tail, run_loadgen,
};
use super::{Options, PACED_STREAM_ARGS, PACED_STREAM_PACE_MS};

/// Sessions whose activation is counted; one more runs first and is reported apart (it creates the machine key, pins the daemon key and binds the credential, which later sessions find done).
const ACTIVATION_SESSIONS: usize = 10;
/// The same in a `--quick` run.
const ACTIVATION_SESSIONS_QUICK: usize = 3;
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
/// The worker-phase load run; it takes under a minute.
const WORKER_LOADGEN_TIMEOUT: Duration = Duration::from_secs(240);
/// The first line a harness writes to its MCP server.
const INITIALIZE: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"bench\",\"version\":\"1\"}}}\n";

/// What the worker phase produced.
#[derive(Debug)]
pub(super) struct WorkerPhase {
    /// The loadgen's report of its worker scenarios, when any ran.
    pub(super) loadgen: Option<Value>,
    /// Its report of the worker-plugins scenario, run through a second worker with plugins on.
    pub(super) plugins_loadgen: Option<Value>,
    /// The measures taken here (activation, hook).
    pub(super) rows: Vec<Measure>,
    pub(super) other_cpu_share: Option<f64>,
    pub(super) notes: Vec<String>,
    /// Raw figures for the JSON.
    pub(super) detail: Value,
}

/// Runs the worker phase against the fast stand-in: activation, then the loadgen's `scenarios` and the hook measure with one session live.
/// Its thread is a client, like the load generator (it polls the route and starts relay-hook), so it runs on a thread of its own pinned where the load generator is, and the caller's thread keeps its CPUs: a run that measures after this one (the bench after the training run of `cargo xtask pgo`) finds them all.
pub(super) fn run(
    bin_dir: &Path,
    pinning: &Pinning,
    fast: &StandIn,
    scratch: &Scratch,
    options: &Options,
    scenarios: &[&str],
) -> Result<WorkerPhase> {
    on_thread_pinned_to(pinning.loadgen.as_deref(), || {
        run_as_client(bin_dir, pinning, fast, scratch, options, scenarios)
    })
}

fn run_as_client(
    bin_dir: &Path,
    pinning: &Pinning,
    fast: &StandIn,
    scratch: &Scratch,
    options: &Options,
    scenarios: &[&str],
) -> Result<WorkerPhase> {
    // The worker's Anthropic upstream is a paced stand-in, whose streams the worker-open-streams scenario holds open; every other worker scenario uses the OpenAI routes and the fast one.
    let paced = StandIn::start(
        bin_dir,
        pinning.stand_ins.as_deref(),
        &PACED_STREAM_ARGS,
        scratch,
        "paced-worker",
    )?;
    let relayd = Relayd::start(
        bin_dir,
        pinning.relayd.as_deref(),
        RelaydMode::Managed,
        Upstreams::plain(fast.addr, paced.addr),
        scratch,
        &[],
    )?;
    let env = SessionEnv::new(bin_dir, &relayd, pinning.relayd.clone(), scratch)?;
    println!(
        "\n==> relayd {} (managed, pid {}); workers call stand-in {}",
        relayd.addr,
        relayd.process.pid(),
        fast.addr
    );
    let servers = [
        relayd.process.pid(),
        fast.process.pid(),
        paced.process.pid(),
    ];
    let cpu_before = CpuSnapshot::take(&servers);
    let own_before = own_ticks();

    let sessions = if !options.selected("activation") {
        0
    } else if options.quick {
        ACTIVATION_SESSIONS_QUICK
    } else {
        ACTIVATION_SESSIONS
    };
    println!(
        "\n==> worker activation: {sessions} MCP sessions after a first one, each closed before the next"
    );
    let started = Instant::now();
    let activation = activation(&env, sessions)?;
    println!(
        "==> worker activation: ok in {}",
        crate::command::seconds(started.elapsed())
    );

    let mut live = McpSession::start(&env, "live")?;
    let (_, worker_pid) = live
        .wait_until_ready(&env, ROUTE_READY_TIMEOUT)
        .context("starting the session kept live for the worker measures")?;
    // Evidence for the JSON that the worker inherited relay-mcp's CPUs.
    let worker_cpus = procfs::cpus_allowed(worker_pid);
    let (with_plugins, scenarios): (Vec<&str>, Vec<&str>) =
        scenarios.iter().partition(|s| **s == PLUGINS_SCENARIO);
    let paced_args: Vec<OsString> = [
        ("--paced", paced.addr.to_string()),
        ("--stream-stand-in-pid", paced.process.pid().to_string()),
        ("--stream-pace-ms", PACED_STREAM_PACE_MS.to_owned()),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.into(), value.into()])
    .collect();
    let loadgen_through = |worker_pid: u32, scenarios: &[&str], label: &str| -> Result<Value> {
        let through = Through {
            env: &env,
            relayd: &relayd,
            direct: fast.addr,
            worker_pid,
        };
        through.loadgen(bin_dir, pinning, options, scenarios, &paced_args, label)
    };
    let loadgen = if scenarios.is_empty() {
        None
    } else {
        Some(loadgen_through(
            worker_pid,
            &scenarios,
            "through the worker",
        )?)
    };

    let hook_runs = if !options.selected("hook") {
        0
    } else if options.quick {
        HOOK_RUNS_QUICK
    } else {
        HOOK_RUNS
    };
    let hook = if hook_runs == 0 {
        None
    } else {
        println!(
            "\n==> relay-hook and /bin/true: {hook_runs} runs each after {HOOK_WARMUP} to warm up"
        );
        let started = Instant::now();
        let hook = hook_wall_time(&env, hook_runs)?;
        println!(
            "==> relay-hook: ok in {}",
            crate::command::seconds(started.elapsed())
        );
        Some(hook)
    };
    let live_ticks = process_ticks(worker_pid).unwrap_or(0);
    live.close().context("closing the live session")?;
    let cpu_after = CpuSnapshot::take(&servers);
    let own_after = own_ticks();

    // A second session whose worker runs the plugins, after the CPU accounting above.
    let plugins_loadgen = if with_plugins.is_empty() {
        None
    } else {
        Some(with_plugins_on(&env, scratch, |pid| {
            loadgen_through(pid, &with_plugins, "through a worker with plugins on")
        })?)
    };
    drop(relayd);

    // The xtask's own ticks include every child it reaped (each relay-mcp, relay-hook, /bin/true and the loadgen); workers are reaped by init, so theirs were read before each closed.
    let client_ticks = own_before
        .zip(own_after)
        .map(|(before, after)| after.saturating_sub(before) + activation.worker_ticks + live_ticks);
    let other_cpu_share = match (cpu_before, cpu_after, client_ticks) {
        (Some(before), Some(after), Some(clients)) => other_cpu_share(&before, &after, clients),
        _ => None,
    };
    let mut rows = Vec::new();
    if !activation.samples.is_empty() {
        let n = activation.samples.len() as u64;
        for (id, quantile) in [
            (MeasureId::ActivationP50, 0.5),
            (MeasureId::ActivationMax, 1.0),
        ] {
            rows.push(
                Measure::relay_only(id, millis(percentile(&activation.samples, quantile)))
                    .with_samples(SampleCounts {
                        direct: 0,
                        relay: n,
                        peer: None,
                    }),
            );
        }
    }
    if let Some(hook) = &hook {
        let n = hook.hook.len() as u64;
        for (id, quantile) in [(MeasureId::HookP50, 0.5), (MeasureId::HookP99, 0.99)] {
            rows.push(
                Measure::compare(
                    id,
                    millis(percentile(&hook.hook, quantile)),
                    millis(percentile(&hook.baseline, quantile)),
                )
                .with_samples(SampleCounts {
                    direct: n,
                    relay: n,
                    peer: None,
                }),
            );
        }
    }
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
        "hook_ms": hook.as_ref().map(|h| as_ms(&h.hook)),
        "bin_true_ms": hook.as_ref().map(|h| as_ms(&h.baseline)),
        "hook_requests_to_worker": hook.as_ref().map(|h| h.to_worker),
        "worker_cpus_allowed": worker_cpus,
    });
    Ok(WorkerPhase {
        loadgen,
        plugins_loadgen,
        rows,
        other_cpu_share,
        notes,
        detail,
    })
}

/// A live session's worker, and what the loadgen needs to measure through it.
struct Through<'a> {
    env: &'a SessionEnv<'a>,
    relayd: &'a Relayd,
    /// The stand-in the worker calls, the direct path beside it.
    direct: SocketAddr,
    worker_pid: u32,
}

impl Through<'_> {
    /// Runs the loadgen's worker `scenarios` with the session's credential, `extra` arguments after the addresses and the run's scale; `label` says what runs.
    fn loadgen(
        &self,
        bin_dir: &Path,
        pinning: &Pinning,
        options: &Options,
        scenarios: &[&str],
        extra: &[OsString],
        label: &str,
    ) -> Result<Value> {
        let mut args: Vec<OsString> = Vec::new();
        for (flag, value) in [
            ("--direct", self.direct.to_string()),
            ("--relay", self.relayd.addr.to_string()),
            ("--relay-pid", self.relayd.process.pid().to_string()),
            ("--worker-pid", self.worker_pid.to_string()),
        ] {
            args.extend([flag.into(), value.into()]);
        }
        args.extend_from_slice(extra);
        for scenario in scenarios {
            args.extend(["--scenario".into(), (*scenario).into()]);
        }
        args.extend(options.scale_args());
        run_loadgen(
            bin_dir,
            pinning.loadgen.as_deref(),
            &args,
            &[("RELAY_CLIENT_TOKEN", self.env.token.as_str())],
            &format!("{label}, pid {}, under a minute", self.worker_pid),
            WORKER_LOADGEN_TIMEOUT,
        )
    }
}

/// The loadgen's worker-throughput blocks asking `stand_in` for streamed answers (`--whole-streams`) through a worker: relayd in managed mode with both upstreams at `stand_in`, one MCP session kept live while they run, then one whose worker runs the plugins. Returns the loadgen's reports, plugins off and on.
/// Like the worker phase, it runs on a thread pinned where the load generator is, as a client, so relay-mcp and the worker start beside relayd.
pub(super) fn streamed_answers(
    bin_dir: &Path,
    pinning: &Pinning,
    stand_in: SocketAddr,
    scratch: &Scratch,
    options: &Options,
) -> Result<[Value; 2]> {
    on_thread_pinned_to(pinning.loadgen.as_deref(), || {
        let relayd = Relayd::start(
            bin_dir,
            pinning.relayd.as_deref(),
            RelaydMode::Managed,
            Upstreams::plain(stand_in, stand_in),
            scratch,
            &[],
        )?;
        let env = SessionEnv::new(bin_dir, &relayd, pinning.relayd.clone(), scratch)?;
        let mut session = McpSession::start(&env, "streams")?;
        let (_, worker_pid) = session
            .wait_until_ready(&env, ROUTE_READY_TIMEOUT)
            .context("starting the session whose worker passes the streamed answers")?;
        let streams = |worker_pid: u32, label: &str| {
            let through = Through {
                env: &env,
                relayd: &relayd,
                direct: stand_in,
                worker_pid,
            };
            through.loadgen(
                bin_dir,
                pinning,
                options,
                &["worker-throughput"],
                &["--whole-streams".into()],
                label,
            )
        };
        let plugins_off = streams(worker_pid, "streamed answers through the worker")?;
        session
            .close()
            .context("closing the streamed-answers session")?;
        let plugins_on = with_plugins_on(&env, scratch, |pid| {
            streams(pid, "streamed answers through a worker with plugins on")
        })?;
        Ok([plugins_off, plugins_on])
    })
}

/// Runs `run` with the worker of a session of `env` started with the bench's plugins on ([`plugins_toml`]), then closes the session, takes the plugins away, and checks that the recording wrote something.
fn with_plugins_on<T>(
    env: &SessionEnv<'_>,
    scratch: &Scratch,
    run: impl FnOnce(u32) -> Result<T>,
) -> Result<T> {
    let plugins_file = env.system_dir.join("plugins.toml");
    let sink_dir = scratch.path("managed/atof");
    fs::create_dir_all(&sink_dir).with_context(|| format!("creating {}", sink_dir.display()))?;
    fs::set_permissions(
        &sink_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )?;
    fs::write(&plugins_file, plugins_toml(&sink_dir))
        .with_context(|| format!("writing {}", plugins_file.display()))?;
    let mut session = McpSession::start(env, "plugins")?;
    let (_, pid) = session
        .wait_until_ready(env, ROUTE_READY_TIMEOUT)
        .context("starting the session whose worker runs the plugins")?;
    let outcome = run(pid);
    session.close().context("closing the plugins session")?;
    fs::remove_file(&plugins_file)?;
    let records = fs::read_dir(&sink_dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| fs::metadata(e.path()).ok())
        .map(|m| m.len())
        .sum::<u64>();
    ensure!(
        records > 0,
        "the worker with plugins on wrote no ATOF record into {}",
        sink_dir.display()
    );
    outcome
}

/// The loadgen scenario that runs through a worker with plugins on.
const PLUGINS_SCENARIO: &str = "worker-plugins";

/// The plugins of the worker-plugins measure: ATOF file recording with content captured,
/// redaction of records and request bodies, and one model policy rule (which the bench's
/// model never matches, so every request is evaluated and forwarded).
fn plugins_toml(sink_dir: &Path) -> String {
    format!(
        r#"version = 1

[[components]]
kind = "observability"
[components.config]
capture_content = true
[[components.config.sinks]]
type = "file"
directory = "{}"
filename = "bench-{{user}}.jsonl"

[[components]]
kind = "pii_redaction"
[components.config]
redact_requests = true

[[components]]
kind = "policy"
[[components.config.rules]]
model = "forbidden-*"
action = "deny"
reason = "not for benchmarks"
"#,
        sink_dir.display()
    )
}

/// What every process of a session gets: the daemon, the credential and the user's directories.
#[derive(Debug)]
pub(super) struct SessionEnv<'a> {
    pub(super) bin_dir: PathBuf,
    daemon: SocketAddr,
    /// The route credential, a fresh one per run; it goes only into environments and request headers, never into argv or output.
    pub(super) token: String,
    home: PathBuf,
    xdg: PathBuf,
    system_dir: PathBuf,
    /// Where relay-mcp starts (its worker inherits the mask): beside relayd.
    server_cpus: Option<String>,
    scratch: &'a Scratch,
}

impl<'a> SessionEnv<'a> {
    /// The sessions of `relayd` (in managed mode): a fresh credential, and the user's directories in `scratch`; relay-mcp and its workers start from `bin_dir`, on `server_cpus`.
    pub(super) fn new(
        bin_dir: &Path,
        relayd: &Relayd,
        server_cpus: Option<String>,
        scratch: &'a Scratch,
    ) -> Result<SessionEnv<'a>> {
        let home = scratch.path("managed/user");
        let xdg = home.join("xdg");
        fs::create_dir_all(&xdg).with_context(|| format!("creating {}", xdg.display()))?;
        Ok(SessionEnv {
            bin_dir: bin_dir.to_path_buf(),
            daemon: relayd.addr,
            token: new_token()?,
            home,
            xdg,
            system_dir: relayd.system_dir.clone(),
            server_cpus,
            scratch,
        })
    }

    pub(super) fn daemon_url(&self) -> String {
        format!("http://{}", self.daemon)
    }

    /// A command with the caller's environment cleared, then the session's: the credential, `HOME`, `XDG_CONFIG_HOME` and `RELAY_SYSTEM_CONFIG_DIR`.
    pub(super) fn command(&self, program: &Path) -> Command {
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

    /// relayd's count of requests of `route` (`hook`, `openai`, …) by destination: (worker, pass-through).
    pub(super) fn destinations(&self, route: &str) -> Result<(u64, u64)> {
        let (status, body) =
            http_get(self.daemon, "/metrics", None).context("reading relayd's /metrics")?;
        ensure!(status == 200, "GET /metrics answered {status}");
        Ok(destinations(&body, route))
    }
}

/// One harness session: a running relay-mcp with its stdin held open, and its worker once the route is ready.
#[derive(Debug)]
pub(super) struct McpSession {
    process: Process,
    stdin: Option<ChildStdin>,
    log: PathBuf,
    /// Just before relay-mcp was spawned.
    started: Instant,
    pub(super) worker: Option<u32>,
}

impl McpSession {
    /// Spawns relay-mcp on the server CPUs and writes the harness's `initialize`.
    pub(super) fn start(env: &SessionEnv<'_>, label: &str) -> Result<McpSession> {
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

    /// Polls the route every [`ROUTE_POLL`] until it says `worker`, finds the worker process, and returns the time since relay-mcp was spawned and the worker's pid; fails after `timeout`.
    pub(super) fn wait_until_ready(
        &mut self,
        env: &SessionEnv<'_>,
        timeout: Duration,
    ) -> Result<(Duration, u32)> {
        loop {
            if let Some(status) = self.process.exited()? {
                bail!(
                    "relay-mcp exited ({status}) before its route was ready; its stderr:\n{}",
                    log_tail(&self.log)
                );
            }
            if env.is_route_ready()? {
                let elapsed = self.started.elapsed();
                let worker = find_worker(self.process.pid())?;
                self.worker = Some(worker);
                return Ok((elapsed, worker));
            }
            if self.started.elapsed() >= timeout {
                bail!(
                    "the route was not ready {timeout:?} after relay-mcp started; its stderr:\n{}",
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
    pub(super) fn close(mut self) -> Result<()> {
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
        let (elapsed, _) = session
            .wait_until_ready(env, ROUTE_READY_TIMEOUT)
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
    on_thread_pinned_to(cpus, || {
        let started = Instant::now();
        Ok((started, Process::spawn(name, command)?))
    })
}

/// Runs `work` on a thread of its own, pinned to `cpus` when given: the processes it starts inherit that mask, and the caller's thread keeps its own.
fn on_thread_pinned_to<T: Send>(
    cpus: Option<&str>,
    work: impl FnOnce() -> Result<T> + Send,
) -> Result<T> {
    thread::scope(|scope| {
        scope
            .spawn(|| {
                if let Some(cpus) = cpus {
                    pin_current_thread(cpus)?;
                }
                work()
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// The relay-worker child of a relay-mcp, waiting briefly for it to appear.
fn find_worker(mcp_pid: u32) -> Result<u32> {
    let deadline = Instant::now() + WORKER_CHILD_TIMEOUT;
    loop {
        if let Some(pid) = procfs::children(mcp_pid)
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

/// True when `pid` runs a program named `relay-worker`, itself or under a wrapper such as valgrind (which the instructions phase runs it under).
fn is_relay_worker(pid: u32) -> bool {
    procfs::runs_program(pid, "relay-worker")
}

/// Waits until `pid` is gone or a zombie (a worker is reaped by whoever adopted it, which may be never in a container).
fn wait_for_exit(pid: u32, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if PidStat::read(pid).is_none_or(|stat| stat.is_dead()) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("pid {pid} still runs after {timeout:?}");
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// utime + stime of a running process.
fn process_ticks(pid: u32) -> Option<u64> {
    PidStat::read(pid).map(|stat| stat.ticks())
}

/// This process's ticks with those of the children it reaped.
fn own_ticks() -> Option<u64> {
    PidStat::read_self().map(|stat| stat.ticks_with_children())
}

/// A fresh route credential: 32 random bytes as 43 base64url characters (SPEC §4.1).
fn new_token() -> Result<String> {
    let mut bytes = [0_u8; 32];
    fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .context("reading /dev/urandom for a route credential")?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
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

#[cfg(test)]
mod tests;
