//! `cargo xtask bench [--quick] [--unpinned] [--only NAME]...`: the performance measures of SPEC §12, informational and not part of CI.
//!
//! It builds relayd, the client binaries and the testkit binaries in release and runs two phases against a provider stand-in, pinning processes to cores with `taskset` where it can.
//! The pass-through phase starts a second, paced stand-in, relayd in `--pass-through` in front of both and nginx (module `nginx`) in front of the fast one, and runs `relay-loadgen`, which measures every figure directly, through relayd and through nginx in interleaved blocks, with the CPU time per request of relayd and nginx.
//! The throughput blocks then run again in four other arrangements, each beside nginx in the same place: in front of an HTTPS provider (module `https`), with relayd and nginx serving HTTPS (module `serving_https`), with the stand-in off their CPU (module `apart`), and asking for streamed answers (module `streams`).
//! Then relayd, and nginx, each run alone under valgrind's callgrind, which counts the instructions of a request (module `instructions`).
//! The worker phase (module `worker`) starts relayd in managed mode, times MCP sessions from `relay-mcp`'s start to a ready route, keeps one session live while `relay-loadgen` measures the path relayd → worker → stand-in and while `relay-hook` runs beside `/bin/true` (module `hook`).
//! It prints every measure of the table in `relay_testkit::measures` beside its target, measured or not (module `report`), and writes the same as JSON to `target/bench/<timestamp>.json` and `target/bench/latest.json`.
//! Every process it starts is stopped (SIGTERM, then SIGKILL) when its handle drops, on success and on failure (module `procs`); the stand-ins also stop when this process's end of their standard input closes, and a worker left by a failed session is stopped by its pid.

mod apart;
mod cpu;
mod debian;
mod hook;
mod http;
mod https;
mod instructions;
mod nginx;
mod pinning;
mod procs;
mod report;
mod serving_https;
mod streams;
mod worker;

use std::{
    ffi::OsString,
    fs,
    path::Path,
    process::Command,
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};

use self::cpu::{CpuSnapshot, cpu_ticks_json, other_cpu_share, other_load_note};
use self::nginx::Nginx;
use self::pinning::Pinning;
use relay_testkit::measures::MeasureId;

use self::procs::{Relayd, RelaydMode, Scratch, StandIn, Upstreams, log_tail, run_loadgen};
use crate::command::{cargo, project_root, seconds, step, target_dir};

/// The pass-through load run; the loadgen takes about a minute and a half at full scale.
const LOADGEN_TIMEOUT: Duration = Duration::from_secs(300);
/// Deltas and pacing of the stand-in behind relayd's Anthropic route: a stream lasts about four minutes, longer than it is held.
pub(crate) const PACED_STREAM_ARGS: [&str; 4] =
    ["--stream-events", "1000", "--pace-ms", PACED_STREAM_PACE_MS];
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
/// The loadgen's pass-through scenarios, in the order they run.
const PASS_THROUGH_SCENARIOS: [&str; 6] = [
    "redactor",
    "memory",
    "latency",
    "ttfb",
    "throughput",
    "open-streams",
];
/// The paced stand-in's time between events, as in [`PACED_STREAM_ARGS`].
pub(crate) const PACED_STREAM_PACE_MS: &str = "250";
/// The pass-through scenarios with an nginx path beside relayd's.
const PEER_SCENARIOS: [&str; 3] = ["latency", "ttfb", "throughput"];
/// The loadgen's worker scenarios, in order: RSS first, so it follows only activation and a warm-up.
const WORKER_SCENARIOS: [&str; 7] = [
    "worker-memory",
    "worker-latency",
    "worker-plugins",
    "worker-ttfb",
    "worker-body",
    "worker-throughput",
    "worker-open-streams",
];
/// The measures the xtask takes itself in the worker phase.
const PROCESS_MEASURES: [&str; 2] = ["activation", "hook"];
/// Instructions per request under callgrind, relayd beside nginx, after the other pass-through measures.
const INSTRUCTIONS: &str = "instructions";
/// relayd and nginx in front of an HTTPS provider, after the plain pass-through measures.
const HTTPS_PROVIDER: &str = "https-provider";
/// relayd and nginx serving HTTPS, after the HTTPS provider.
const SERVING_HTTPS: &str = "serving-https";
/// relayd and nginx with the stand-in off their CPU, after relayd and nginx serving HTTPS.
const STAND_IN_APART: &str = "stand-in-apart";
/// relayd and nginx passing streamed answers, after the stand-in-apart phase.
const STREAMED_ANSWERS: &str = "streamed-answers";
/// The loadgen's `--scale` of a `--quick` run.
const QUICK_SCALE: &str = "0.05";

/// What a phase that adds rows to the table produced: its rows, its notes, and what the
/// JSON keeps of it.
struct PhaseRows {
    measures: Vec<relay_testkit::measures::Measure>,
    notes: Vec<String>,
    detail: Value,
}

/// What a phase runs the throughput blocks for: the loadgen's `extra` arguments (`--tls-ca`
/// when both serve HTTPS), `what` runs (said while it runs), the table's rows its figures
/// become, and the phase's note.
struct Beside<'a> {
    extra: &'a [OsString],
    what: &'a str,
    rows: &'a [(MeasureId, MeasureId)],
    note: String,
}

/// The loadgen's throughput scenario on `relayd` and its `peer` only (no direct path), with
/// the run's scale, as a phase's rows; its detail holds the peer's pids and the loadgen's
/// report.
fn throughput_beside(
    bin_dir: &Path,
    pinning: &Pinning,
    relayd: &Relayd,
    peer: &Nginx,
    options: &Options,
    beside: Beside<'_>,
) -> Result<PhaseRows> {
    let mut args: Vec<OsString> = Vec::new();
    for (flag, value) in [
        ("--scenario", "throughput".to_owned()),
        ("--relay", relayd.addr.to_string()),
        ("--relay-pid", relayd.process.pid().to_string()),
        ("--peer", peer.addr.to_string()),
    ] {
        args.extend([flag.into(), value.into()]);
    }
    for pid in &peer.pids {
        args.extend(["--peer-pid".into(), pid.to_string().into()]);
    }
    args.extend_from_slice(beside.extra);
    args.extend(options.scale_args());
    let loadgen = run_loadgen(
        bin_dir,
        pinning.loadgen.as_deref(),
        &args,
        &[],
        beside.what,
        LOADGEN_TIMEOUT,
    )
    .with_context(|| {
        format!(
            "the peer's error log:\n{}",
            log_tail(&peer.dir.join("error.log"))
        )
    })?;
    Ok(PhaseRows {
        measures: report::rows(&loadgen, beside.rows)?,
        notes: vec![beside.note],
        detail: json!({ "peer_pids": peer.pids, "loadgen": loadgen }),
    })
}

/// relayd in `--pass-through` with both base URLs at `provider`, and nginx as its peer in
/// front of the same provider, both where relayd is pinned, their files in `scratch`.
fn relayd_and_peer(
    bin_dir: &Path,
    pinning: &Pinning,
    provider: std::net::SocketAddr,
    scratch: &Scratch,
) -> Result<(Relayd, Nginx)> {
    let binary = nginx::find_or_install()?;
    let relayd = Relayd::start(
        bin_dir,
        pinning.relayd.as_deref(),
        RelaydMode::PassThrough,
        Upstreams::plain(provider, provider),
        scratch,
        &[],
    )?;
    let peer = Nginx::peer(&binary, pinning, nginx::Site::Peer(provider), scratch)?;
    Ok((relayd, peer))
}

/// What `cargo xtask bench` was asked to run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Options {
    /// Short rounds: for trying the bench, not for figures.
    pub(crate) quick: bool,
    /// Only these scenarios (empty: all).
    pub(crate) only: Vec<String>,
    /// Leave every process free to run on any CPU, to compare with the pinned figures.
    pub(crate) unpinned: bool,
    /// Measure Relay's binaries built with profile-guided optimisation (`cargo xtask pgo`).
    pub(crate) pgo: bool,
}

impl Options {
    pub(crate) fn parse(args: &[String]) -> Result<Options> {
        let mut options = Options::default();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--quick" => options.quick = true,
                "--unpinned" => options.unpinned = true,
                "--pgo" => options.pgo = true,
                "--only" => {
                    let name = args.next().context("--only needs a scenario name")?;
                    let known = PASS_THROUGH_SCENARIOS
                        .iter()
                        .chain(&WORKER_SCENARIOS)
                        .chain(&PROCESS_MEASURES)
                        .chain(&[
                            INSTRUCTIONS,
                            HTTPS_PROVIDER,
                            SERVING_HTTPS,
                            STAND_IN_APART,
                            STREAMED_ANSWERS,
                        ]);
                    if !known.clone().any(|k| k == name) {
                        bail!(
                            "unknown scenario {name:?} for --only; known: {}",
                            known.copied().collect::<Vec<_>>().join(", ")
                        );
                    }
                    options.only.push(name.clone());
                }
                other => bail!(
                    "unknown argument {other:?}; `cargo xtask bench` takes --quick, --unpinned, --pgo and --only <scenario>"
                ),
            }
        }
        Ok(options)
    }

    /// The training run of `cargo xtask pgo`: `scenarios` at the quick scale, pinned as a
    /// measuring run is, so the processes run as they will be measured.
    pub(crate) fn training(scenarios: &[&str]) -> Options {
        Options {
            quick: true,
            only: scenarios.iter().map(|s| (*s).to_owned()).collect(),
            ..Options::default()
        }
    }

    pub(crate) fn selected(&self, scenario: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == scenario)
    }

    fn selected_of<'a>(&self, scenarios: &[&'a str]) -> Vec<&'a str> {
        scenarios
            .iter()
            .copied()
            .filter(|s| self.selected(s))
            .collect()
    }

    /// The loadgen's `--scale` arguments.
    pub(crate) fn scale_args(&self) -> Vec<OsString> {
        if self.quick {
            vec!["--scale".into(), QUICK_SCALE.into()]
        } else {
            Vec::new()
        }
    }
}

/// The plain release build of every binary the bench runs, in `<target>/release`.
pub(crate) fn build_release() -> Result<()> {
    step(&format!("cargo {}", BUILD.join(" ")), cargo(BUILD)?)
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let options = Options::parse(args)?;
    let started = Instant::now();
    let root = project_root()?;
    build_release()?;
    let target_dir = target_dir(&root);
    let release = target_dir.join("release");
    let bin_dir = if options.pgo {
        let optimized = crate::pgo::build(&root)?;
        let measured = target_dir.join("pgo").join("measured");
        crate::pgo::with_binaries(&measured, &optimized, &release)?;
        measured
    } else {
        release
    };
    let Measured {
        rows,
        mut notes,
        mut document,
    } = measure(&bin_dir, &options)?;
    if options.pgo {
        notes.push(format!(
            "Relay's binaries were built with profile-guided optimisation (`cargo xtask pgo`), from {}",
            bin_dir.display()
        ));
    }
    println!("\n{}", report::table(&rows));
    for note in &notes {
        println!("note: {note}");
    }

    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .context("the clock is before 1970")?;
    let (timestamp, file_stamp) = report::stamp(now.as_secs())?;
    document["timestamp"] = json!(timestamp);
    document["git_commit"] = json!(git_commit(&root));
    document["pgo"] = json!(options.pgo);
    document["notes"] = json!(notes);
    document["measures"] = report::rows_json(&rows)?;
    let out_dir = target_dir.join("bench");
    fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let text = serde_json::to_string_pretty(&document).context("encoding the bench report")?;
    let file = out_dir.join(format!("{file_stamp}.json"));
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

/// What a run measured: the table's rows, the notes, and the JSON document without its
/// stamps.
pub(crate) struct Measured {
    rows: Vec<(
        &'static relay_testkit::measures::MeasureSpec,
        Option<relay_testkit::measures::Measure>,
    )>,
    notes: Vec<String>,
    document: Value,
}

/// Runs the phases `options` selects with the binaries in `bin_dir`.
pub(crate) fn measure(bin_dir: &Path, options: &Options) -> Result<Measured> {
    let pinning = Pinning::detect(options.unpinned);
    println!("\n==> {}", pinning.note);

    let scratch = Scratch::create()?;
    let fast = StandIn::start(bin_dir, pinning.stand_ins.as_deref(), &[], &scratch, "fast")?;
    let mut notes = vec![pinning.note.clone()];
    notes.push(
        "2 cores are shared by the load generator, the stand-ins, relayd, nginx and the worker: absolute figures, throughput above all, are lower than on a machine where relayd has its cores; read each beside its direct baseline and nginx".to_owned(),
    );
    let mut measures = Vec::new();
    let mut document = json!({
        "pinning": {
            "loadgen": pinning.loadgen,
            "stand_ins": pinning.stand_ins,
            "relayd": pinning.relayd,
        },
        "paced_stand_in_args": PACED_STREAM_ARGS,
        "quick": options.quick,
        "only": options.only,
    });

    let pass_through_scenarios = options.selected_of(&PASS_THROUGH_SCENARIOS);
    if !pass_through_scenarios.is_empty() {
        let phase = pass_through_phase(
            bin_dir,
            &pinning,
            &fast,
            &scratch,
            options,
            &pass_through_scenarios,
        )?;
        measures.extend(report::measures(&phase.loadgen)?);
        notes.push(other_load_note(
            "pass-through measures",
            phase.other_cpu_share,
        ));
        notes.extend(phase.notes);
        notes.extend(loadgen_notes(&phase.loadgen));
        document["other_cpu_share"] = json!(phase.other_cpu_share);
        document["cpu_ticks"] = phase.cpu_ticks;
        document["nginx"] = phase.nginx;
        document["loadgen"] = phase.loadgen;
    }
    let mut add = |phase: Result<PhaseRows>, key: &str, failed: &str| match phase {
        Ok(phase) => {
            measures.extend(phase.measures);
            notes.extend(phase.notes);
            document[key] = phase.detail;
        }
        Err(error) => notes.push(format!("{failed}: {error:#}")),
    };
    if options.selected(HTTPS_PROVIDER) {
        add(
            https::run(bin_dir, &pinning, &fast, &scratch, options),
            "https_provider",
            "the HTTPS provider measures were not taken",
        );
    }
    if options.selected(SERVING_HTTPS) {
        add(
            serving_https::run(bin_dir, &pinning, &fast, &scratch, options),
            "serving_https",
            "the serving-HTTPS measures were not taken",
        );
    }
    if options.selected(STAND_IN_APART) {
        add(
            apart::run(bin_dir, &pinning, options),
            "stand_in_apart",
            "the stand-in-apart measures were not taken",
        );
    }
    if options.selected(STREAMED_ANSWERS) {
        add(
            streams::run(bin_dir, &pinning, options),
            "streamed_answers",
            "the streamed-answer measures were not taken",
        );
    }
    if options.selected(INSTRUCTIONS) {
        add(
            instructions::run(bin_dir, &pinning, &fast, &scratch),
            "instructions",
            "instructions per request not counted",
        );
    }
    let worker_scenarios = options.selected_of(&WORKER_SCENARIOS);
    if !worker_scenarios.is_empty() || PROCESS_MEASURES.iter().any(|m| options.selected(m)) {
        let phase = worker::run(
            bin_dir,
            &pinning,
            &fast,
            &scratch,
            options,
            &worker_scenarios,
        )?;
        for loadgen in phase.loadgen.iter().chain(&phase.plugins_loadgen) {
            measures.extend(report::measures(loadgen)?);
        }
        measures.extend(phase.rows.iter().cloned());
        notes.push(other_load_note("worker measures", phase.other_cpu_share));
        notes.extend(phase.notes.iter().cloned());
        if let Some(loadgen) = &phase.loadgen {
            notes.extend(loadgen_notes(loadgen));
        }
        document["worker_phase"] = phase.detail;
        document["loadgen_worker"] = phase.loadgen.unwrap_or(Value::Null);
        document["loadgen_worker_plugins"] = phase.plugins_loadgen.unwrap_or(Value::Null);
    }
    drop(fast);
    if options.quick {
        notes.push(format!(
            "a quick run (--quick: loadgen scale {QUICK_SCALE}, fewer sessions and hook runs): for trying the bench, not for figures"
        ));
    }

    Ok(Measured {
        rows: report::table_rows(measures),
        notes,
        document,
    })
}

/// The notes of a loadgen report.
fn loadgen_notes(report: &Value) -> Vec<String> {
    report["notes"]
        .as_array()
        .map(|notes| {
            notes
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// What the pass-through phase produced.
#[derive(Debug)]
struct PassThroughPhase {
    loadgen: Value,
    other_cpu_share: Option<f64>,
    cpu_ticks: Value,
    /// nginx's version, pids and config, or why it did not run.
    nginx: Value,
    notes: Vec<String>,
}

/// Starts nginx beside relayd when a scenario compares with it; a missing nginx is a note, not a failure.
fn start_peer(
    pinning: &Pinning,
    fast: &StandIn,
    scratch: &Scratch,
    notes: &mut Vec<String>,
) -> (Option<Nginx>, Value) {
    let started = nginx::find_or_install().and_then(|binary| {
        let nginx = Nginx::peer(&binary, pinning, nginx::Site::Peer(fast.addr), scratch)?;
        Ok((binary, nginx, pinning.server_cpu_count()))
    });
    match started {
        Ok((binary, nginx, workers)) => {
            notes.push(format!(
                "nginx: proxy_pass with upstream keep-alive in front of the fast stand-in, {workers} worker process(es) on relayd's CPUs, no access log, buffering off"
            ));
            let detail = json!({
                "version": nginx::version(&binary),
                "workers": workers,
                "pids": nginx.pids,
            });
            (Some(nginx), detail)
        }
        Err(error) => {
            let why = format!("{error:#}");
            notes.push(format!("nginx did not run, so no peer figures: {why}"));
            (None, json!({ "error": why }))
        }
    }
}

/// relayd in `--pass-through` in front of the fast stand-in (OpenAI routes) and a paced one (Anthropic routes, held open by the memory measure), and nginx in front of the fast one, measured by the loadgen's pass-through scenarios.
fn pass_through_phase(
    bin_dir: &Path,
    pinning: &Pinning,
    fast: &StandIn,
    scratch: &Scratch,
    options: &Options,
    scenarios: &[&str],
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
        Upstreams::plain(fast.addr, paced.addr),
        scratch,
        &[],
    )?;
    let mut notes = Vec::new();
    let (peer, nginx_detail) = if scenarios.iter().any(|s| PEER_SCENARIOS.contains(s)) {
        start_peer(pinning, fast, scratch, &mut notes)
    } else {
        (None, Value::Null)
    };
    println!(
        "==> stand-in {} (fast), stand-in {} (paced: {}), relayd {} (pass-through, pid {}){}",
        fast.addr,
        paced.addr,
        PACED_STREAM_ARGS.join(" "),
        relayd.addr,
        relayd.process.pid(),
        peer.as_ref()
            .map(|p| format!(", nginx {} (pid {})", p.addr, p.pid()))
            .unwrap_or_default(),
    );
    let mut servers = vec![
        relayd.process.pid(),
        fast.process.pid(),
        paced.process.pid(),
    ];
    let mut args: Vec<OsString> = Vec::new();
    let mut flag = |flag: &str, value: String| {
        args.push(flag.into());
        args.push(value.into());
    };
    flag("--direct", fast.addr.to_string());
    flag("--relay", relayd.addr.to_string());
    flag("--relay-pid", relayd.process.pid().to_string());
    flag("--stream-stand-in-pid", paced.process.pid().to_string());
    flag("--paced", paced.addr.to_string());
    flag("--stream-pace-ms", PACED_STREAM_PACE_MS.to_owned());
    if let Some(peer) = &peer {
        flag("--peer", peer.addr.to_string());
        for pid in &peer.pids {
            flag("--peer-pid", pid.to_string());
        }
        servers.extend(&peer.pids);
    }
    for scenario in scenarios {
        flag("--scenario", (*scenario).to_owned());
    }
    args.extend(options.scale_args());
    let cpu_before = CpuSnapshot::take(&servers);
    let loadgen = run_loadgen(
        bin_dir,
        pinning.loadgen.as_deref(),
        &args,
        &[],
        "pass-through and nginx, about two minutes",
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
        nginx: nginx_detail,
        notes,
    })
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

#[cfg(test)]
mod tests;
