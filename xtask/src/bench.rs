//! `cargo xtask bench`: the performance measures of SPEC §12, informational and not part of CI.
//!
//! It builds relayd, the client binaries and the testkit binaries in release and runs two phases against a provider stand-in, pinning processes to cores with `taskset` where it can.
//! The pass-through phase starts a second, paced stand-in and relayd in `--pass-through` in front of both, and runs `relay-loadgen`, which measures every figure directly and through relayd in alternating blocks.
//! The worker phase (module `worker`) starts relayd in managed mode, times MCP sessions from `relay-mcp`'s start to a ready route, keeps one session live while `relay-loadgen` measures the path relayd → worker → stand-in and while `relay-hook` runs beside `/bin/true`.
//! It prints every measure as a table beside its target and writes the same as JSON to `target/bench/<timestamp>.json` and `target/bench/latest.json`.
//! Every process it starts is killed when its handle drops, on success and on failure; the stand-ins also stop when this process's end of their standard input closes, and a worker left by a failed session is stopped by its pid.

mod worker;

use std::{
    ffi::OsString,
    fmt::Write as _,
    fs,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};

use crate::command::{cargo, project_root, seconds, step};

/// How long a stand-in may take to print its address.
const STAND_IN_START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long relayd may take to answer `/healthz`.
const RELAYD_START_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts at starting relayd, each on a fresh free port, when the port was taken in between.
const RELAYD_PORT_ATTEMPTS: usize = 5;
/// The pass-through load run; the loadgen takes about a minute at full scale.
const LOADGEN_TIMEOUT: Duration = Duration::from_secs(240);
/// Deltas and pacing of the stand-in behind relayd's Anthropic route: a stream lasts about four minutes, longer than it is held.
const PACED_STREAM_ARGS: [&str; 4] = ["--stream-events", "1000", "--pace-ms", "250"];
/// The release build: relayd, the binaries a harness starts, and the stand-in and load generator.
const BUILD: [&str; 13] = [
    "build",
    "--release",
    "-p",
    "relayd",
    "-p",
    "relay-mcp",
    "-p",
    "relay-worker",
    "-p",
    "relay-hook",
    "-p",
    "relay-testkit",
    "--bins",
];

/// Environment variables relayd reads that must not leak from the caller into a measurement.
const RELAYD_ENV_REMOVED: [&str; 7] = [
    "RELAY_LOG",
    "RELAY_LOG_FORMAT",
    "RELAY_DAEMON_MAX_TOKENS_PER_IDENTITY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "NO_PROXY",
    "no_proxy",
];

pub(crate) fn run() -> Result<()> {
    let started = Instant::now();
    let root = project_root()?;
    step(&format!("cargo {}", BUILD.join(" ")), cargo(BUILD)?)?;
    let target_dir = target_dir(&root);
    let bin_dir = target_dir.join("release");
    let pinning = Pinning::detect();
    println!("\n==> {}", pinning.note);

    let scratch = Scratch::create()?;
    let fast = StandIn::start(
        &bin_dir,
        pinning.stand_ins.as_deref(),
        &[],
        &scratch,
        "fast",
    )?;
    let pass_through = pass_through_phase(&bin_dir, &pinning, &fast, &scratch)?;
    let worker = worker::run(&bin_dir, &pinning, &fast, &scratch)?;
    drop(fast);

    let mut measures = Vec::new();
    for report in [&pass_through.loadgen, &worker.loadgen] {
        measures.extend(
            report["measures"]
                .as_array()
                .context("relay-loadgen's report has no `measures` array")?
                .iter()
                .cloned(),
        );
    }
    measures.extend(worker.rows.iter().cloned());
    let measures = Value::Array(measures);
    let rows = rows(&json!({ "measures": measures.clone() }))?;
    let mut notes = vec![pinning.note.clone()];
    notes.push(
        "2 cores are shared by the load generator, the stand-ins, relayd and the worker: absolute figures, throughput above all, are lower than on a machine where relayd has its cores; read each beside its direct baseline".to_owned(),
    );
    notes.push(other_load_note(
        "pass-through measures",
        pass_through.other_cpu_share,
    ));
    notes.push(other_load_note("worker measures", worker.other_cpu_share));
    notes.extend(worker.notes.iter().cloned());
    for report in [&pass_through.loadgen, &worker.loadgen] {
        if let Some(loadgen_notes) = report["notes"].as_array() {
            notes.extend(
                loadgen_notes
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned),
            );
        }
    }
    println!("\n{}", table(&rows));
    for note in &notes {
        println!("note: {note}");
    }

    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .context("the clock is before 1970")?;
    let stamp = UtcStamp::from_unix(now.as_secs());
    let document = json!({
        "timestamp": stamp.rfc3339(),
        "git_commit": git_commit(&root),
        "pinning": {
            "loadgen": pinning.loadgen,
            "stand_ins": pinning.stand_ins,
            "relayd": pinning.relayd,
        },
        "paced_stand_in_args": PACED_STREAM_ARGS,
        "other_cpu_share": pass_through.other_cpu_share,
        "cpu_ticks": pass_through.cpu_ticks,
        "notes": notes,
        "measures": measures,
        "loadgen": pass_through.loadgen,
        "worker_phase": worker.detail,
        "loadgen_worker": worker.loadgen,
    });
    let out_dir = target_dir.join("bench");
    fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let text = serde_json::to_string_pretty(&document).context("encoding the bench report")?;
    let file = out_dir.join(format!("{}.json", stamp.file_name()));
    for path in [&file, &out_dir.join("latest.json")] {
        fs::write(path, format!("{text}\n"))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    println!(
        "\nwrote {} and latest.json in {}",
        file.display(),
        seconds(started.elapsed())
    );
    Ok(())
}

/// What the pass-through phase produced.
#[derive(Debug)]
struct PassThroughPhase {
    loadgen: Value,
    other_cpu_share: Option<f64>,
    cpu_ticks: Value,
}

/// relayd in `--pass-through` in front of the fast stand-in (OpenAI routes) and a paced one (Anthropic routes, held open by the memory measure), measured by the loadgen's pass-through scenarios.
fn pass_through_phase(
    bin_dir: &Path,
    pinning: &Pinning,
    fast: &StandIn,
    scratch: &Scratch,
) -> Result<PassThroughPhase> {
    let paced = StandIn::start(
        bin_dir,
        pinning.stand_ins.as_deref(),
        &PACED_STREAM_ARGS,
        scratch,
        "paced",
    )?;
    let relayd = Relayd::start(
        bin_dir,
        pinning.relayd.as_deref(),
        RelaydMode::PassThrough,
        fast.addr,
        paced.addr,
        scratch,
    )?;
    println!(
        "==> stand-in {} (fast), stand-in {} (paced: {}), relayd {} (pass-through, pid {})",
        fast.addr,
        paced.addr,
        PACED_STREAM_ARGS.join(" "),
        relayd.addr,
        relayd.process.pid(),
    );
    let servers = [
        relayd.process.pid(),
        fast.process.pid(),
        paced.process.pid(),
    ];
    let mut args: Vec<OsString> = Vec::new();
    for (flag, value) in [
        ("--direct", fast.addr.to_string()),
        ("--relay", relayd.addr.to_string()),
        ("--relay-pid", relayd.process.pid().to_string()),
        ("--stream-stand-in-pid", paced.process.pid().to_string()),
    ] {
        args.push(flag.into());
        args.push(value.into());
    }
    let cpu_before = CpuSnapshot::take(&servers);
    let loadgen = run_loadgen(
        bin_dir,
        pinning.loadgen.as_deref(),
        &args,
        &[],
        "pass-through, about a minute",
        LOADGEN_TIMEOUT,
    )?;
    let cpu_after = CpuSnapshot::take(&servers);
    let loadgen_ticks = loadgen["cpu_ticks"].as_u64().unwrap_or(0);
    let other_cpu_share = match (cpu_before, cpu_after) {
        (Some(before), Some(after)) => other_cpu_share(&before, &after, loadgen_ticks),
        _ => None,
    };
    let cpu_ticks = cpu_ticks_json(cpu_before, cpu_after, loadgen["cpu_ticks"].clone());
    Ok(PassThroughPhase {
        loadgen,
        other_cpu_share,
        cpu_ticks,
    })
}

/// The raw tick counts behind an other-load share, for the JSON.
fn cpu_ticks_json(
    before: Option<CpuSnapshot>,
    after: Option<CpuSnapshot>,
    client_ticks: Value,
) -> Value {
    before
        .zip(after)
        .map(|(before, after)| {
            json!({
                "all_cpus": after.total.saturating_sub(before.total),
                "busy": after.busy.saturating_sub(before.busy),
                "servers": after.ours.saturating_sub(before.ours),
                "clients": client_ticks,
            })
        })
        .unwrap_or(Value::Null)
}

/// cargo's target directory: `CARGO_TARGET_DIR` when set (relative to the workspace root), else `target/`.
fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

/// The commit measured, when git can tell (read-only).
fn git_commit(root: &Path) -> Option<String> {
    let output = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(root)
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// CPU time, in the kernel's clock ticks, of the whole machine and of the bench's long-running processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CpuSnapshot {
    /// Ticks of every CPU, idle included.
    total: u64,
    /// Ticks not idle (steal included: another VM had the CPU).
    busy: u64,
    /// Ticks spent by the given processes.
    ours: u64,
}

impl CpuSnapshot {
    fn take(pids: &[u32]) -> Option<CpuSnapshot> {
        let (total, busy) = parse_proc_stat(&fs::read_to_string("/proc/stat").ok()?)?;
        let mut ours = 0;
        for pid in pids {
            ours += parse_pid_stat_ticks(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
        }
        Some(CpuSnapshot { total, busy, ours })
    }
}

/// The share of all CPU time between two snapshots that neither the measured processes nor the clients (`client_ticks`: the load generator, or the xtask with the children it reaped) used.
fn other_cpu_share(before: &CpuSnapshot, after: &CpuSnapshot, client_ticks: u64) -> Option<f64> {
    let total = after.total.checked_sub(before.total)?;
    let busy = after.busy.saturating_sub(before.busy);
    let ours = after.ours.saturating_sub(before.ours) + client_ticks;
    (total > 0).then(|| busy.saturating_sub(ours) as f64 / total as f64)
}

/// The note on other processes' load during one phase. Per-process and machine-wide tick counts disagree by a few percent, so a small share is reported as such rather than as a precise figure.
fn other_load_note(phase: &str, share: Option<f64>) -> String {
    match share {
        None => {
            format!("{phase}: how busy other processes kept the CPUs is unknown (no /proc/stat)")
        }
        Some(share) if share < 0.05 => format!(
            "{phase}: other processes used under 5% of the CPUs (the estimate is good to a few percent)"
        ),
        Some(share) => format!(
            "{phase}: other processes kept the CPUs about {:.0}% busy, which shows in the tails (p99) of both columns",
            share * 100.0
        ),
    }
}

/// Total and busy ticks from the `cpu` line of `/proc/stat` (busy is everything but idle and iowait).
fn parse_proc_stat(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|t| t.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice, already counted in user and nice]
    let counted = &ticks[..ticks.len().min(8)];
    let total: u64 = counted.iter().sum();
    let idle = counted.get(3)? + counted.get(4).copied().unwrap_or(0);
    Some((total, total.saturating_sub(idle)))
}

/// utime + stime of `/proc/<pid>/stat`, in clock ticks. The command name in parentheses may hold spaces, so fields are counted after its closing parenthesis.
fn parse_pid_stat_ticks(text: &str) -> Option<u64> {
    let fields = stat_fields(text)?;
    // Field 3 of the line (state) is the first after the name; utime and stime are fields 14 and 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// utime + stime + cutime + cstime of `/proc/<pid>/stat`: the process and every child it has reaped.
fn parse_pid_stat_ticks_with_children(text: &str) -> Option<u64> {
    let fields = stat_fields(text)?;
    // cutime and cstime are fields 16 and 17.
    let children = fields
        .get(13..15)?
        .iter()
        .map(|t| t.parse::<u64>().ok())
        .sum::<Option<u64>>()?;
    Some(parse_pid_stat_ticks(text)? + children)
}

/// The fields of a `/proc/<pid>/stat` line after the command name, from the state on.
fn stat_fields(text: &str) -> Option<Vec<&str>> {
    Some(text[text.rfind(')')? + 1..].split_whitespace().collect())
}

/// The one-letter state of `/proc/<pid>/stat` (`R`, `S`, `Z`, …).
fn parse_pid_state(text: &str) -> Option<char> {
    stat_fields(text)?.first()?.chars().next()
}

/// Which CPUs each process is pinned to (a `taskset -c` list), or `None` for unpinned.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pinning {
    loadgen: Option<String>,
    stand_ins: Option<String>,
    relayd: Option<String>,
    /// One sentence saying what was done, printed and written to the JSON.
    note: String,
}

impl Pinning {
    fn detect() -> Pinning {
        let allowed = fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                    .and_then(|list| parse_cpu_list(list.trim()))
            });
        let taskset = Command::new("taskset")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        Pinning::plan(allowed.as_deref(), taskset)
    }

    /// With three or more CPUs every party gets its own.
    /// With two, the load generator gets one and the stand-ins share the other with relayd: a request then crosses between CPUs twice on both paths (client to server side and back), so the added figure is relayd's own work and its extra loopback hop, not an extra cross-CPU wake-up that the direct path would not pay.
    fn plan(allowed: Option<&[usize]>, taskset: bool) -> Pinning {
        let unpinned = |why: String| Pinning {
            loadgen: None,
            stand_ins: None,
            relayd: None,
            note: format!("processes are not pinned: {why}"),
        };
        if !taskset {
            return unpinned("taskset is not installed".to_owned());
        }
        let cpus = match allowed {
            None => return unpinned("Cpus_allowed_list is unreadable".to_owned()),
            Some(cpus) if cpus.len() < 2 => {
                return unpinned(format!("only {} CPU is available", cpus.len()));
            }
            Some(cpus) => cpus,
        };
        let list = |cpus: &[usize]| {
            cpus.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        let (loadgen, stand_ins, relayd) = match cpus {
            [a, b] => (list(&[*a]), list(&[*b]), list(&[*b])),
            [a, b, rest @ ..] => (list(&[*a]), list(&[*b]), list(rest)),
            _ => return unpinned("no CPU list".to_owned()),
        };
        let note = format!(
            "pinned with taskset: relay-loadgen on CPU {loadgen}, stand-ins on CPU {stand_ins}, relayd on CPU {relayd}"
        );
        Pinning {
            loadgen: Some(loadgen),
            stand_ins: Some(stand_ins),
            relayd: Some(relayd),
            note,
        }
    }
}

/// Parses a kernel CPU list such as `0-3,8,10-11`.
fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (first.parse::<usize>().ok()?, last.parse::<usize>().ok()?);
                if first > last {
                    return None;
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// A command for `program`, under `taskset -c <cpus>` when pinned. taskset execs the program, so the child's pid is the program's.
fn pinned_command(program: &Path, cpus: Option<&str>) -> Command {
    match cpus {
        Some(cpus) => {
            let mut command = Command::new("taskset");
            command.arg("-c").arg(cpus).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// A child process that is killed and reaped when this drops.
#[derive(Debug)]
struct Process {
    name: String,
    child: Child,
}

impl Process {
    fn spawn(name: &str, mut command: Command) -> Result<Process> {
        let child = command
            .spawn()
            .with_context(|| format!("starting {name} ({command:?})"))?;
        Ok(Process {
            name: name.to_owned(),
            child,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the process has ended.
    fn exited(&mut self) -> Result<Option<std::process::ExitStatus>> {
        self.child
            .try_wait()
            .with_context(|| format!("checking on {}", self.name))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // Killing may race with a natural exit; either way the process is gone after wait.
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// A private scratch directory (config file, XDG dirs, logs), removed on drop.
#[derive(Debug)]
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn create() -> Result<Scratch> {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let dir = std::env::temp_dir().join(format!("relay-bench-{}-{nanos}", std::process::id()));
        fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Scratch { dir })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// An empty log file for a child's stderr.
    fn log(&self, name: &str) -> Result<(PathBuf, fs::File)> {
        let path = self.path(name);
        let file =
            fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok((path, file))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The last lines of a child's log, for an error message.
fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(15)..].join("\n");
    if tail.is_empty() {
        "(no output)".to_owned()
    } else {
        tail
    }
}

/// A running `relay-stand-in`.
#[derive(Debug)]
struct StandIn {
    addr: SocketAddr,
    process: Process,
}

impl StandIn {
    /// Starts a stand-in on a free port and waits for its `listening` line. Its standard input stays open in this process, so it also stops if the xtask dies.
    fn start(
        bin_dir: &Path,
        cpus: Option<&str>,
        extra: &[&str],
        scratch: &Scratch,
        label: &str,
    ) -> Result<StandIn> {
        let name = format!("relay-stand-in ({label})");
        let (log, log_file) = scratch.log(&format!("stand-in-{label}.stderr"))?;
        let mut command = pinned_command(&bin_dir.join("relay-stand-in"), cpus);
        command
            .args(["--port", "0"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file);
        let mut process = Process::spawn(&name, command)?;
        let stdout = process
            .child
            .stdout
            .take()
            .with_context(|| format!("{name} has no stdout pipe"))?;
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = tx.send(reader.read_line(&mut line).map(|_| line));
            // Keep draining so the stand-in never blocks on a full pipe.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        let line = match rx.recv_timeout(STAND_IN_START_TIMEOUT) {
            Ok(Ok(line)) => line,
            Ok(Err(error)) => {
                return Err(error).with_context(|| format!("reading {name}'s stdout"));
            }
            Err(_) => bail!(
                "{name} did not print its address within {STAND_IN_START_TIMEOUT:?}; its stderr:\n{}",
                log_tail(&log)
            ),
        };
        let addr = parse_listening(&line).with_context(|| {
            format!(
                "{name} printed {line:?} instead of `listening <addr>`; its stderr:\n{}",
                log_tail(&log)
            )
        })?;
        Ok(StandIn { addr, process })
    }
}

/// The address in the stand-in's `listening 127.0.0.1:<port>` line.
fn parse_listening(line: &str) -> Option<SocketAddr> {
    line.trim().strip_prefix("listening ")?.parse().ok()
}

/// How a bench relayd routes model requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RelaydMode {
    /// `--pass-through`: every request goes straight to the stand-ins.
    PassThrough,
    /// The default managed mode: requests with a credential whose worker is ready go to the worker.
    Managed,
}

impl RelaydMode {
    /// The scratch subdirectory of this relayd's files, and its name in messages.
    fn label(self) -> &'static str {
        match self {
            RelaydMode::PassThrough => "pass-through",
            RelaydMode::Managed => "managed",
        }
    }
}

/// A running relayd.
#[derive(Debug)]
struct Relayd {
    addr: SocketAddr,
    process: Process,
    /// Its `RELAY_SYSTEM_CONFIG_DIR`, whose `config.toml` also gives a worker its upstreams.
    system_dir: PathBuf,
}

impl Relayd {
    /// relayd refuses `--port 0`, so a free port is found by binding and closing it; if another process takes it in between, relayd exits and the next attempt uses a fresh port.
    /// Its files live in the scratch subdirectory named for `mode`: `relayd.toml`, `daemon/` (its `XDG_CONFIG_HOME`) and `system/` (`RELAY_SYSTEM_CONFIG_DIR`).
    /// In managed mode the same upstreams also go to `system/config.toml`, because a worker takes `[upstream]` only from the config files (SPEC §8).
    fn start(
        bin_dir: &Path,
        cpus: Option<&str>,
        mode: RelaydMode,
        openai_upstream: SocketAddr,
        anthropic_upstream: SocketAddr,
        scratch: &Scratch,
    ) -> Result<Relayd> {
        let dir = scratch.path(mode.label());
        let xdg = dir.join("daemon");
        let system_dir = dir.join("system");
        for dir in [&xdg, &system_dir] {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let config_text = relayd_config(openai_upstream, anthropic_upstream);
        let config = dir.join("relayd.toml");
        let mut config_files = vec![config.clone()];
        if mode == RelaydMode::Managed {
            config_files.push(system_dir.join("config.toml"));
        }
        for file in &config_files {
            fs::write(file, &config_text).with_context(|| format!("writing {}", file.display()))?;
        }
        let mut last_log = String::new();
        for attempt in 1..=RELAYD_PORT_ATTEMPTS {
            let port = free_port()?;
            let (log, log_file) =
                scratch.log(&format!("{}/relayd-{attempt}.stderr", mode.label()))?;
            let mut command = pinned_command(&bin_dir.join("relayd"), cpus);
            command.args(["--port", &port.to_string()]);
            if mode == RelaydMode::PassThrough {
                command.arg("--pass-through");
            }
            command
                .arg("--config")
                .arg(&config)
                .args(["--log-level", "warn"])
                .env("XDG_CONFIG_HOME", &xdg)
                .env("RELAY_SYSTEM_CONFIG_DIR", &system_dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log_file);
            for name in RELAYD_ENV_REMOVED {
                command.env_remove(name);
            }
            let mut process = Process::spawn(&format!("relayd ({})", mode.label()), command)?;
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let deadline = Instant::now() + RELAYD_START_TIMEOUT;
            loop {
                if let Some(status) = process.exited()? {
                    last_log = log_tail(&log);
                    if last_log.contains("binding") {
                        // The port was taken between our probe and relayd's bind: try another.
                        break;
                    }
                    bail!("relayd exited at start-up ({status}); its stderr:\n{last_log}");
                }
                if is_relayd_healthy(addr) {
                    return Ok(Relayd {
                        addr,
                        process,
                        system_dir,
                    });
                }
                if Instant::now() >= deadline {
                    bail!(
                        "relayd did not answer /healthz on {addr} within {RELAYD_START_TIMEOUT:?}; its stderr:\n{}",
                        log_tail(&log)
                    );
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        bail!(
            "relayd could not bind a free port in {RELAYD_PORT_ATTEMPTS} attempts; last stderr:\n{last_log}"
        )
    }
}

/// relayd's config file: both provider families go to the local stand-ins.
fn relayd_config(openai_upstream: SocketAddr, anthropic_upstream: SocketAddr) -> String {
    format!(
        "# Written by cargo xtask bench.\n[upstream]\nopenai_base_url = \"http://{openai_upstream}/v1\"\nanthropic_base_url = \"http://{anthropic_upstream}\"\n"
    )
}

/// A port that was free a moment ago.
fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
    Ok(listener
        .local_addr()
        .context("reading the probe's address")?
        .port())
}

/// True when `GET /healthz` on `addr` is answered by relayd (and not some other process that took the port).
fn is_relayd_healthy(addr: SocketAddr) -> bool {
    http_get(addr, "/healthz", None)
        .is_ok_and(|(status, body)| status == 200 && body.contains("\"service\":\"relayd\""))
}

/// One `GET` on its own connection (`Connection: close`), with the route credential when given; returns the status and the body.
fn http_get(addr: SocketAddr, path: &str, token: Option<&str>) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let credential = token
        .map(|token| format!("x-relay-client-token: {token}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{credential}Connection: close\r\n\r\n"
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    parse_response(&answer).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not an HTTP/1.1 answer to GET {path}"),
        )
    })
}

/// The status and body of a whole HTTP/1.1 response read until the connection closed; a chunked body is joined.
fn parse_response(answer: &str) -> Option<(u16, String)> {
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()?
        .strip_prefix("HTTP/1.1 ")?
        .get(..3)?
        .parse()
        .ok()?;
    let chunked = lines.any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.eq_ignore_ascii_case("transfer-encoding")
                && value.trim().eq_ignore_ascii_case("chunked")
        })
    });
    if !chunked {
        return Some((status, body.to_owned()));
    }
    let mut joined = String::new();
    let mut rest = body;
    loop {
        let (size, after) = rest.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some((status, joined));
        }
        joined.push_str(after.get(..size)?);
        rest = after.get(size..)?.strip_prefix("\r\n")?;
    }
}

/// Runs the load generator with `args` (and `envs`), waits at most `timeout`, and returns its JSON report.
fn run_loadgen(
    bin_dir: &Path,
    cpus: Option<&str>,
    args: &[OsString],
    envs: &[(&str, &str)],
    what: &str,
    timeout: Duration,
) -> Result<Value> {
    let mut command = pinned_command(&bin_dir.join("relay-loadgen"), cpus);
    command
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    println!("\n==> relay-loadgen ({what})");
    let started = Instant::now();
    let mut process = Process::spawn("relay-loadgen", command)?;
    let mut stdout = process
        .child
        .stdout
        .take()
        .context("relay-loadgen has no stdout pipe")?;
    let reader = thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).map(|_| text)
    });
    let status = loop {
        if let Some(status) = process.exited()? {
            break status;
        }
        if started.elapsed() >= timeout {
            bail!("relay-loadgen did not finish within {timeout:?}");
        }
        thread::sleep(Duration::from_millis(100));
    };
    let output = reader
        .join()
        .map_err(|_| anyhow::anyhow!("the thread reading relay-loadgen's output panicked"))?
        .context("reading relay-loadgen's output")?;
    if !status.success() {
        bail!("relay-loadgen failed ({status}); see its messages above");
    }
    println!("==> relay-loadgen: ok in {}", seconds(started.elapsed()));
    serde_json::from_str(&output).context("relay-loadgen's output is not JSON")
}

/// One line of the table, taken from a loadgen measure.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    measure: String,
    unit: String,
    relay: Option<f64>,
    direct: Option<f64>,
    added: Option<f64>,
    target: Option<String>,
    within_target: Option<bool>,
}

/// The measures of a loadgen report.
fn rows(report: &Value) -> Result<Vec<Row>> {
    let measures = report["measures"]
        .as_array()
        .context("relay-loadgen's report has no `measures` array")?;
    measures
        .iter()
        .map(|m| {
            Ok(Row {
                measure: m["measure"]
                    .as_str()
                    .with_context(|| format!("a measure without a name: {m}"))?
                    .to_owned(),
                unit: m["unit"].as_str().unwrap_or_default().to_owned(),
                relay: m["relay"].as_f64(),
                direct: m["direct"].as_f64(),
                added: m["added"].as_f64(),
                target: m["target"].as_str().map(str::to_owned),
                within_target: m["within_target"].as_bool(),
            })
        })
        .collect()
}

/// A value with its unit, rounded for reading.
fn format_value(value: Option<f64>, unit: &str) -> String {
    let Some(v) = value else {
        return "-".to_owned();
    };
    match unit {
        "us" => format!("{v:.1} µs"),
        "ms" => format!("{v:.2} ms"),
        "req/s" => format!("{v:.0} req/s"),
        "MiB" => format!("{v:.1} MiB"),
        "KiB" => format!("{v:.1} KiB"),
        "count" => format!("{v:.0}"),
        other => format!("{v:.2} {other}"),
    }
}

/// The table of SPEC §12: measure | relay | direct | added | target | within target, columns aligned.
fn table(rows: &[Row]) -> String {
    let header = [
        "measure",
        "relay",
        "direct",
        "added",
        "target",
        "within target",
    ]
    .map(str::to_owned);
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.measure.clone(),
                format_value(r.relay, &r.unit),
                format_value(r.direct, &r.unit),
                format_value(r.added, &r.unit),
                r.target.clone().unwrap_or_else(|| "-".to_owned()),
                match r.within_target {
                    Some(true) => "yes".to_owned(),
                    Some(false) => "no".to_owned(),
                    None => "-".to_owned(),
                },
            ]
        })
        .collect();
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &cells {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |row: &[String; 6]| {
        let padded: Vec<String> = row
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(column, (cell, width))| {
                let pad = " ".repeat(width - cell.chars().count());
                // Numbers read best right-aligned, words left-aligned.
                if (1..=3).contains(&column) {
                    format!("{pad}{cell}")
                } else {
                    format!("{cell}{pad}")
                }
            })
            .collect();
        let _ = writeln!(out, "| {} |", padded.join(" | "));
    };
    line(&header);
    line(&widths.map(|w| "-".repeat(w)));
    for row in &cells {
        line(row);
    }
    out
}

/// A UTC time of day, computed without a date library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct UtcStamp {
    year: i64,
    month: u32,
    day: u32,
    hour: u64,
    minute: u64,
    second: u64,
}

impl UtcStamp {
    fn from_unix(secs: u64) -> UtcStamp {
        let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX);
        let rem = secs % 86_400;
        let (year, month, day) = civil_from_days(days);
        UtcStamp {
            year,
            month,
            day,
            hour: rem / 3600,
            minute: rem % 3600 / 60,
            second: rem % 60,
        }
    }

    /// `2026-11-30T01:17:36Z`.
    fn rfc3339(self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }

    /// `20261130T011736Z`, which sorts by time and is a valid file name everywhere.
    fn file_name(self) -> String {
        format!(
            "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (the era arithmetic of the civil calendar: 400-year eras of 146,097 days, years starting in March so the leap day comes last).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests;
