//! `relay-loadgen`: the load generator behind `cargo xtask bench` (SPEC §12).
//!
//! It drives targets that answer the same routes, the provider stand-in reached directly, relayd in front of it and, when given, a peer proxy (nginx) in front of it, and prints one JSON document on stdout.
//! Each measure is taken on every path in interleaved blocks whose order rotates by round, so drift on a shared machine hits all alike, and is reported as the relayd value, the direct value and the added value (relayd − direct at the same percentile), the peer's value, and the CPU time per request of relayd (with the worker on the worker path) and of the peer, beside its target.
//! A scenario is one variant of [`Scenario`] with one async function that returns [`Measure`] rows built from the rows of `relay_testkit::measures`, the one table of SPEC §12's measures.
//! The pass-through scenarios send no route credential; the worker scenarios send the one in `RELAY_CLIENT_TOKEN` on the relayd side, so their requests go relayd → worker → stand-in, and they fail when relayd's `/metrics` shows that any of them passed through instead.
//! It does not start, pin or stop processes (the xtask does, including the MCP session that keeps the worker up), and it does not judge the machine: on shared cores a figure is only as good as the run, which is why the direct baseline sits beside it.
//!
//! With `--tls-ca`, relayd and the peer are reached over TLS, as remote clients reach a relayd serving HTTPS (the throughput scenario only).
//!
//! Modules: `conn` (one connection, plain or TLS, and its requests), `samples` (paths and histograms), `scenarios` (the request measures), `streams` (memory, with held streams), `metrics` (what `/metrics` and `/proc` say), `limits` (open-file limits).
// A developer's tool, not a daemon or a hook: a panic on an unwritable stderr is fine here.
#![allow(clippy::disallowed_macros)]

mod conn;
mod limits;
mod metrics;
mod open_streams;
mod redactor;
mod samples;
mod scenarios;
mod streams;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use clap::{Parser, ValueEnum};
use http::header::HeaderValue;
use relay_testkit::measures::{Measure, judge_all};
use relay_testkit::procfs::PidStat;
use relay_testkit::tls;
use rustls::ClientConfig;
use serde::Serialize;

use crate::conn::{Conn, Probe};
use crate::limits::raise_own_open_file_limit;

/// The route credential of the worker scenarios (the variable relay-mcp and relay-hook read), kept out of argv.
const TOKEN_ENV: &str = "RELAY_CLIENT_TOKEN";

/// Drives the provider stand-in directly and through relayd, and prints the measures as JSON.
#[derive(Debug, Parser)]
#[command(name = "relay-loadgen", version)]
struct Args {
    /// The stand-in's address (`127.0.0.1:PORT`), the direct baseline. Only the throughput scenario runs without it, on relayd and the peer alone: for a provider the load generator cannot reach itself, such as an HTTPS one.
    #[arg(long, value_name = "ADDR")]
    direct: Option<SocketAddr>,
    /// relayd's address, whose OpenAI upstream is that stand-in.
    #[arg(long, value_name = "ADDR")]
    relay: SocketAddr,
    /// relayd's process id, whose RSS the memory scenario samples and whose CPU time the request scenarios divide by requests.
    #[arg(long, value_name = "PID")]
    relay_pid: Option<u32>,
    /// A peer proxy (nginx) in front of the same stand-in, measured beside relayd in the pass-through scenarios.
    #[arg(long, value_name = "ADDR")]
    peer: Option<SocketAddr>,
    /// The peer's processes (repeat for each), whose CPU time is divided by the requests it served.
    #[arg(long, value_name = "PID")]
    peer_pid: Vec<u32>,
    /// relayd and the peer serve HTTPS: reach both over TLS (HTTP/1.1), trusting only the certificates in this PEM file. The direct path stays plain. Only the throughput scenario.
    #[arg(long, value_name = "PEM")]
    tls_ca: Option<PathBuf>,
    /// The throughput blocks ask for streamed answers and read each to its end, so what a path spends on every chunk counts: for a stand-in whose streams are paced (`--stream-events`, `--pace-ms`). Only the throughput and worker-throughput scenarios.
    #[arg(long)]
    whole_streams: bool,
    /// The paced stand-in's address (relayd's Anthropic upstream), the direct baseline of the open-streams scenario.
    #[arg(long, value_name = "ADDR")]
    paced: Option<SocketAddr>,
    /// The paced stand-in's time between events, in milliseconds (its `--pace-ms`).
    #[arg(long, value_name = "MS", default_value_t = 250)]
    stream_pace_ms: u64,
    /// Streams the open-streams scenario holds at once on each path.
    #[arg(long, value_name = "N", default_value_t = 5000)]
    open_streams: usize,
    /// Streams the worker-open-streams scenario holds at once on each path.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    worker_open_streams: usize,
    /// The paced stand-in's process id (relayd's Anthropic upstream); its open-file limit is raised to its hard limit so the held streams fit.
    #[arg(long, value_name = "PID")]
    stream_stand_in_pid: Option<u32>,
    /// The worker's process id, whose RSS the worker-memory scenario samples and whose CPU time counts with relayd's on the worker path.
    #[arg(long, value_name = "PID")]
    worker_pid: Option<u32>,
    /// Scenarios to run, in this order [default: the pass-through ones, memory first so idle RSS follows only a warm-up]. The worker scenarios run only when named, with RELAY_CLIENT_TOKEN set to a credential whose MCP session is live.
    #[arg(long, value_enum, value_name = "NAME")]
    scenario: Vec<Scenario>,
    /// Multiplies sample counts and durations (0.05 gives a quick smoke run).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Streams the memory scenario holds open.
    #[arg(long, default_value_t = 1000)]
    streams: usize,
}

/// One group of measures, run as a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
enum Scenario {
    /// relayd's RSS idle and with many open streams.
    Memory,
    /// Added latency of a tiny non-streaming request at concurrency 1.
    Latency,
    /// Added time to the first body byte of a stream.
    Ttfb,
    /// Requests per second, p99 and CPU per request at concurrency 64.
    Throughput,
    /// Thousands of concurrent SSE streams, every frame checked for arrival, order and lateness.
    OpenStreams,
    /// The worker's RSS after a warm-up through it.
    WorkerMemory,
    /// Added latency of a tiny non-streaming request through the worker at concurrency 1.
    WorkerLatency,
    /// Added time to the first body byte of a stream through the worker.
    WorkerTtfb,
    /// Added time of a 2 MiB request body through the worker.
    WorkerBody,
    /// Requests per second and CPU per request through the worker at concurrency 64.
    WorkerThroughput,
    /// A thousand concurrent SSE streams through the worker, every frame checked.
    WorkerOpenStreams,
    /// Added latency through a worker whose plugins are on (the xtask starts that worker).
    WorkerPlugins,
    /// The redactor over a 1 MiB body with no secret, in process.
    Redactor,
}

impl Scenario {
    /// What runs without `--scenario`: everything that needs no MCP session.
    const PASS_THROUGH: [Scenario; 6] = [
        Scenario::Redactor,
        Scenario::Memory,
        Scenario::Latency,
        Scenario::Ttfb,
        Scenario::Throughput,
        Scenario::OpenStreams,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::Memory => "memory",
            Scenario::Latency => "latency",
            Scenario::Ttfb => "ttfb",
            Scenario::Throughput => "throughput",
            Scenario::OpenStreams => "open-streams",
            Scenario::WorkerMemory => "worker-memory",
            Scenario::WorkerLatency => "worker-latency",
            Scenario::WorkerTtfb => "worker-ttfb",
            Scenario::WorkerBody => "worker-body",
            Scenario::WorkerThroughput => "worker-throughput",
            Scenario::WorkerOpenStreams => "worker-open-streams",
            Scenario::WorkerPlugins => "worker-plugins",
            Scenario::Redactor => "redactor",
        }
    }

    async fn run(self, ctx: &Ctx, report: &mut Report) -> Result<Vec<Measure>> {
        match self {
            Scenario::Memory => streams::memory(ctx, report).await,
            Scenario::Latency => scenarios::latency(ctx).await,
            Scenario::Ttfb => scenarios::ttfb(ctx).await,
            Scenario::Throughput => scenarios::throughput(ctx).await,
            Scenario::OpenStreams => open_streams::open_streams(ctx, report).await,
            Scenario::WorkerMemory => streams::worker_memory(ctx).await,
            Scenario::WorkerLatency => scenarios::worker_latency(ctx).await,
            Scenario::WorkerTtfb => scenarios::worker_ttfb(ctx).await,
            Scenario::WorkerBody => scenarios::worker_body(ctx).await,
            Scenario::WorkerThroughput => scenarios::worker_throughput(ctx).await,
            Scenario::WorkerOpenStreams => open_streams::worker_open_streams(ctx, report).await,
            Scenario::WorkerPlugins => scenarios::worker_plugins(ctx).await,
            Scenario::Redactor => redactor::redactor(report.scale),
        }
    }
}

/// How many samples and how long, derived from `--scale`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub(crate) latency: Interleave,
    pub(crate) ttfb: Interleave,
    pub(crate) large_body: Interleave,
    pub(crate) throughput_concurrency: usize,
    pub(crate) throughput_warmup: Duration,
    pub(crate) throughput_rounds: usize,
    pub(crate) throughput_block: Duration,
    pub(crate) memory_warmup: usize,
    pub(crate) streams: usize,
    pub(crate) stream_open_concurrency: usize,
    pub(crate) rss_samples: usize,
    pub(crate) rss_interval: Duration,
    pub(crate) open_streams: usize,
    pub(crate) worker_open_streams: usize,
    pub(crate) open_streams_hold: Duration,
}

/// Warm-up exchanges per target, then `rounds` rounds of one block per target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Interleave {
    pub(crate) warmup: usize,
    pub(crate) rounds: usize,
    pub(crate) block: usize,
}

impl Plan {
    fn scaled(scale: f64, streams: usize, open_streams: usize) -> Plan {
        let count = |n: usize| ((n as f64 * scale).round() as usize).max(1);
        // An even number of rounds gives each target the first slot equally often.
        let rounds = |n: usize| count(n).max(2).next_multiple_of(2);
        let time = |ms: u64| Duration::from_millis(((ms as f64 * scale).round() as u64).max(20));
        Plan {
            // Short blocks: a burst of load from another process (a compiler on a shared machine) then lands on both targets instead of on one block of one target.
            latency: Interleave {
                warmup: count(2000),
                rounds: rounds(1000),
                block: 20,
            },
            ttfb: Interleave {
                warmup: count(300),
                rounds: rounds(1000),
                block: 10,
            },
            // A 2 MiB exchange takes milliseconds, so 200 samples per path keep the scenario to a few seconds.
            large_body: Interleave {
                warmup: count(20),
                rounds: rounds(40),
                block: 5,
            },
            throughput_concurrency: 64,
            throughput_warmup: time(1000),
            throughput_rounds: 6,
            throughput_block: time(2000),
            memory_warmup: count(200),
            streams,
            stream_open_concurrency: 64,
            rss_samples: 5,
            rss_interval: time(200),
            open_streams,
            worker_open_streams: open_streams.min(1000),
            // At least a few paces, so even a quick run sees every stream's frames follow each other.
            open_streams_hold: time(10_000).max(Duration::from_secs(2)),
        }
    }
}

/// What every scenario needs.
#[derive(Debug)]
pub(crate) struct Ctx {
    /// `None`: no direct path, only relayd's and the peer's.
    pub(crate) direct: Option<SocketAddr>,
    pub(crate) relay: SocketAddr,
    pub(crate) relay_pid: Option<u32>,
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) peer_pids: Vec<u32>,
    /// Set when relayd and the peer serve HTTPS: the roots their certificates are checked against.
    pub(crate) tls: Option<Arc<ClientConfig>>,
    /// What each request of the throughput blocks is.
    pub(crate) throughput_probe: Probe,
    pub(crate) stream_stand_in_pid: Option<u32>,
    pub(crate) paced: Option<SocketAddr>,
    pub(crate) stream_pace: Duration,
    pub(crate) worker_pid: Option<u32>,
    /// The route credential of the worker scenarios, from [`TOKEN_ENV`].
    pub(crate) token: Option<HeaderValue>,
    pub(crate) plan: Plan,
}

impl Ctx {
    /// The credential a worker scenario sends on the relayd side.
    pub(crate) fn token(&self) -> Result<&HeaderValue> {
        self.token.as_ref().with_context(|| {
            format!("the worker scenarios need {TOKEN_ENV}, a credential with a live MCP session")
        })
    }

    /// A connection to relayd that sends the route credential, so its model requests go to the worker.
    pub(crate) async fn worker_conn(&self) -> Result<Conn> {
        let token = self.token()?.clone();
        Ok(self.front_conn(self.relay).await?.with_token(token))
    }

    /// A connection to relayd or the peer at `addr`: over TLS when they serve HTTPS.
    pub(crate) async fn front_conn(&self, addr: SocketAddr) -> Result<Conn> {
        match &self.tls {
            Some(tls) => Conn::open_tls(addr, tls).await,
            None => Conn::open(addr).await,
        }
    }
}

/// Which way the relayd side of a measure goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// No credential: relayd forwards to the stand-in itself.
    PassThrough,
    /// With the route credential: relayd forwards to the worker, which calls the stand-in.
    Worker,
}

/// Everything printed on stdout.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    tool: &'static str,
    version: &'static str,
    scale: f64,
    scenarios: Vec<Scenario>,
    open_file_limit: Option<u64>,
    /// CPU time this process used (utime + stime of `/proc/self/stat`, in clock ticks), so the xtask can tell the bench's load from other processes'.
    cpu_ticks: Option<u64>,
    measures: Vec<Measure>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) memory: Option<MemoryDetail>,
    /// The raw counts behind the open-streams rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) open_streams: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) worker_open_streams: Option<serde_json::Value>,
    notes: Vec<String>,
}

impl Report {
    pub(crate) fn note(&mut self, note: String) {
        eprintln!("relay-loadgen: {note}");
        self.notes.push(note);
    }
}

/// The raw figures behind the memory rows.
#[derive(Debug, Serialize)]
pub(crate) struct MemoryDetail {
    pub(crate) streams: usize,
    pub(crate) streams_ended_early: usize,
    pub(crate) relay_open_streams_at_sample: Option<f64>,
    pub(crate) rss_idle_bytes: u64,
    pub(crate) rss_with_streams_bytes: u64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(
        args.scale.is_finite() && args.scale > 0.0,
        "--scale must be a positive number"
    );
    // One thread: the xtask pins this process to one core, and a single-threaded client keeps cross-thread wake-ups out of the timings.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    let report = runtime.block_on(run(args))?;
    let json = serde_json::to_string_pretty(&report).context("encoding the report")?;
    println!("{json}");
    Ok(())
}

async fn run(args: Args) -> Result<Report> {
    let scenarios = if args.scenario.is_empty() {
        Scenario::PASS_THROUGH.to_vec()
    } else {
        args.scenario.clone()
    };
    let only_throughput = scenarios.iter().all(|s| *s == Scenario::Throughput);
    ensure!(
        args.direct.is_some() || only_throughput,
        "every scenario but throughput needs --direct"
    );
    ensure!(
        args.tls_ca.is_none() || only_throughput,
        "--tls-ca serves the throughput scenario only"
    );
    ensure!(
        !args.whole_streams
            || scenarios
                .iter()
                .all(|s| matches!(s, Scenario::Throughput | Scenario::WorkerThroughput)),
        "--whole-streams serves the throughput and worker-throughput scenarios only"
    );
    let tls = args.tls_ca.as_deref().map(tls::client_config).transpose()?;
    let token = match std::env::var(TOKEN_ENV) {
        Ok(token) if !token.is_empty() => {
            let mut value = HeaderValue::from_str(&token)
                .with_context(|| format!("{TOKEN_ENV} is not a valid header value"))?;
            value.set_sensitive(true);
            Some(value)
        }
        _ => None,
    };
    let ctx = Ctx {
        direct: args.direct,
        relay: args.relay,
        relay_pid: args.relay_pid,
        peer: args.peer,
        peer_pids: args.peer_pid.clone(),
        tls,
        throughput_probe: if args.whole_streams {
            Probe::WholeStream
        } else {
            Probe::Json
        },
        stream_stand_in_pid: args.stream_stand_in_pid,
        paced: args.paced,
        stream_pace: Duration::from_millis(args.stream_pace_ms),
        worker_pid: args.worker_pid,
        token,
        plan: Plan {
            worker_open_streams: args.worker_open_streams,
            ..Plan::scaled(args.scale, args.streams, args.open_streams)
        },
    };
    let mut report = Report {
        tool: "relay-loadgen",
        version: env!("CARGO_PKG_VERSION"),
        scale: args.scale,
        scenarios: scenarios.clone(),
        open_file_limit: raise_own_open_file_limit(),
        cpu_ticks: None,
        measures: Vec::new(),
        memory: None,
        open_streams: None,
        worker_open_streams: None,
        notes: Vec::new(),
    };
    for scenario in scenarios {
        let started = Instant::now();
        eprintln!("relay-loadgen: {} ...", scenario.name());
        let measures = scenario
            .run(&ctx, &mut report)
            .await
            .with_context(|| format!("scenario {}", scenario.name()))?;
        eprintln!(
            "relay-loadgen: {} done in {:.1}s",
            scenario.name(),
            started.elapsed().as_secs_f64()
        );
        report.measures.extend(measures);
    }
    judge_all(&mut report.measures);
    report.cpu_ticks = PidStat::read_self().map(|stat| stat.ticks());
    Ok(report)
}

#[cfg(test)]
mod tests;
