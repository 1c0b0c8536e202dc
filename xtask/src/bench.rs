//! `cargo xtask bench`: the performance measures of SPEC §12, informational and not part of CI.
//!
//! It builds relayd and the testkit binaries in release, starts two provider stand-ins (a fast one, and a paced one whose streams stay open for the memory measure) and relayd in pass-through in front of them, pins them to cores with `taskset` where it can, and runs `relay-loadgen`, which measures every figure directly and through relayd in alternating blocks.
//! It prints the loadgen's measures as a table beside their targets and writes the same as JSON to `target/bench/<timestamp>.json` and `target/bench/latest.json`.
//! Every process it starts is killed when its handle drops, on success and on failure; the stand-ins also stop when this process's end of their standard input closes.

use std::{
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
/// The whole load run; the loadgen takes about a minute at full scale.
const LOADGEN_TIMEOUT: Duration = Duration::from_secs(240);
/// Deltas and pacing of the stand-in behind relayd's Anthropic route: a stream lasts about four minutes, longer than it is held.
const PACED_STREAM_ARGS: [&str; 4] = ["--stream-events", "1000", "--pace-ms", "250"];

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
    step(
        "cargo build --release -p relayd -p relay-testkit --bins",
        cargo([
            "build",
            "--release",
            "-p",
            "relayd",
            "-p",
            "relay-testkit",
            "--bins",
        ])?,
    )?;
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
    let paced = StandIn::start(
        &bin_dir,
        pinning.stand_ins.as_deref(),
        &PACED_STREAM_ARGS,
        &scratch,
        "paced",
    )?;
    let relayd = Relayd::start(
        &bin_dir,
        pinning.relayd.as_deref(),
        fast.addr,
        paced.addr,
        &scratch,
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
    let cpu_before = CpuSnapshot::take(&servers);
    let loadgen = run_loadgen(&bin_dir, pinning.loadgen.as_deref(), &fast, &paced, &relayd)?;
    let cpu_after = CpuSnapshot::take(&servers);
    let other_cpu_share = match (cpu_before, cpu_after) {
        (Some(before), Some(after)) => {
            other_cpu_share(&before, &after, loadgen["cpu_ticks"].as_u64().unwrap_or(0))
        }
        _ => None,
    };
    drop(relayd);
    drop(paced);
    drop(fast);

    let rows = rows(&loadgen)?;
    let mut notes = vec![pinning.note.clone()];
    notes.push(
        "2 cores are shared by the load generator, both stand-ins and relayd: absolute figures, throughput above all, are lower than on a machine where relayd has its cores; read each beside its direct baseline".to_owned(),
    );
    notes.push(other_load_note(other_cpu_share));
    if let Some(loadgen_notes) = loadgen["notes"].as_array() {
        notes.extend(
            loadgen_notes
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned),
        );
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
        "other_cpu_share": other_cpu_share,
        "cpu_ticks": cpu_before.zip(cpu_after).map(|(before, after)| json!({
            "all_cpus": after.total.saturating_sub(before.total),
            "busy": after.busy.saturating_sub(before.busy),
            "relayd_and_stand_ins": after.ours.saturating_sub(before.ours),
            "loadgen": loadgen["cpu_ticks"],
        })),
        "notes": notes,
        "measures": loadgen["measures"],
        "loadgen": loadgen,
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

/// The share of all CPU time between two snapshots that neither the measured processes nor the load generator (`loadgen_ticks`) used.
fn other_cpu_share(before: &CpuSnapshot, after: &CpuSnapshot, loadgen_ticks: u64) -> Option<f64> {
    let total = after.total.checked_sub(before.total)?;
    let busy = after.busy.saturating_sub(before.busy);
    let ours = after.ours.saturating_sub(before.ours) + loadgen_ticks;
    (total > 0).then(|| busy.saturating_sub(ours) as f64 / total as f64)
}

/// The note on other processes' load. Per-process and machine-wide tick counts disagree by a few percent, so a small share is reported as such rather than as a precise figure.
fn other_load_note(share: Option<f64>) -> String {
    match share {
        None => "how busy other processes kept the CPUs is unknown (no /proc/stat)".to_owned(),
        Some(share) if share < 0.05 => {
            "other processes used under 5% of the CPUs during the measurement (the estimate is good to a few percent)".to_owned()
        }
        Some(share) => format!(
            "other processes kept the CPUs about {:.0}% busy during the measurement: that load shows in the tails (p99) of both columns",
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
    let after_name = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Field 3 of the line (state) is the first after the name; utime and stime are fields 14 and 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
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

/// A running relayd in pass-through.
#[derive(Debug)]
struct Relayd {
    addr: SocketAddr,
    process: Process,
}

impl Relayd {
    /// relayd refuses `--port 0`, so a free port is found by binding and closing it; if another process takes it in between, relayd exits and the next attempt uses a fresh port.
    fn start(
        bin_dir: &Path,
        cpus: Option<&str>,
        openai_upstream: SocketAddr,
        anthropic_upstream: SocketAddr,
        scratch: &Scratch,
    ) -> Result<Relayd> {
        let config = scratch.path("relayd.toml");
        fs::write(&config, relayd_config(openai_upstream, anthropic_upstream))
            .with_context(|| format!("writing {}", config.display()))?;
        let xdg = scratch.path("xdg");
        let system = scratch.path("system");
        for dir in [&xdg, &system] {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let mut last_log = String::new();
        for attempt in 1..=RELAYD_PORT_ATTEMPTS {
            let port = free_port()?;
            let (log, log_file) = scratch.log(&format!("relayd-{attempt}.stderr"))?;
            let mut command = pinned_command(&bin_dir.join("relayd"), cpus);
            command
                .args(["--port", &port.to_string(), "--pass-through", "--config"])
                .arg(&config)
                .args(["--log-level", "warn"])
                .env("XDG_CONFIG_HOME", &xdg)
                .env("RELAY_SYSTEM_CONFIG_DIR", &system)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log_file);
            for name in RELAYD_ENV_REMOVED {
                command.env_remove(name);
            }
            let mut process = Process::spawn("relayd", command)?;
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
                    return Ok(Relayd { addr, process });
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
    let probe = || -> std::io::Result<String> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        write!(
            stream,
            "GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer)
    };
    probe().is_ok_and(|answer| {
        answer.starts_with("HTTP/1.1 200") && answer.contains("\"service\":\"relayd\"")
    })
}

/// Runs the load generator against the running processes and returns its JSON report.
fn run_loadgen(
    bin_dir: &Path,
    cpus: Option<&str>,
    fast: &StandIn,
    paced: &StandIn,
    relayd: &Relayd,
) -> Result<Value> {
    let mut command = pinned_command(&bin_dir.join("relay-loadgen"), cpus);
    command
        .arg("--direct")
        .arg(fast.addr.to_string())
        .arg("--relay")
        .arg(relayd.addr.to_string())
        .arg("--relay-pid")
        .arg(relayd.process.pid().to_string())
        .arg("--stream-stand-in-pid")
        .arg(paced.process.pid().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    println!("\n==> relay-loadgen (about a minute)");
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
        if started.elapsed() >= LOADGEN_TIMEOUT {
            bail!("relay-loadgen did not finish within {LOADGEN_TIMEOUT:?}");
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
