//! `relay-loadgen`: the load generator behind `cargo xtask bench` (SPEC §12).
//!
//! It drives two targets that answer the same routes, the provider stand-in reached directly and relayd in front of it, and prints one JSON document on stdout.
//! Each measure is taken on both targets in alternating blocks (direct then relayd, then relayd then direct, …), so drift on a shared machine hits both alike, and is reported as the relayd value, the direct value and the added value (relayd − direct at the same percentile) beside its target.
//! A scenario is one variant of [`Scenario`] with one async function that returns its [`Measure`] rows.
//! The pass-through scenarios send no route credential; the worker scenarios send the one in `RELAY_CLIENT_TOKEN` on the relayd side, so their requests go relayd → worker → stand-in, and they fail when relayd's `/metrics` shows that any of them passed through instead.
//! It does not start, pin or stop processes (the xtask does, including the MCP session that keeps the worker up), and it does not judge the machine: on shared cores a figure is only as good as the run, which is why the direct baseline sits beside it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use bytes::Bytes;
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use http::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::{JoinHandle, JoinSet};

/// The longest a single exchange may take before the run fails: far above any sane figure, low enough that a wedged target does not hang the bench.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// A stream's first byte that takes this long counts as a stall: Linux's delayed ACK, which a missing `TCP_NODELAY` runs into, holds a small write for about 40 ms.
const STALL_THRESHOLD: Duration = Duration::from_millis(35);
/// Histogram range in nanoseconds: 1 ns to 60 s, three significant figures.
const HISTOGRAM_MAX_NS: u64 = 60_000_000_000;
/// How long to wait for relayd's `relay_open_streams` to return to zero after the held streams are dropped.
const QUIET_TIMEOUT: Duration = Duration::from_secs(20);
/// How long opening every held stream may take.
const OPEN_STREAMS_TIMEOUT: Duration = Duration::from_secs(90);

/// A tiny non-streaming Chat Completions request.
const CHAT_BODY: &[u8] = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
/// The same request, streaming.
const CHAT_STREAM_BODY: &[u8] =
    br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
/// A streaming Anthropic Messages request: relayd sends these to the paced stand-in (its `anthropic_base_url`).
const MESSAGES_STREAM_BODY: &[u8] =
    br#"{"model":"m","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
/// The size of the large request body of SPEC §12 (2 MiB).
const LARGE_BODY_BYTES: usize = 2 * 1024 * 1024;
/// The route credential of the worker scenarios (the variable relay-mcp and relay-hook read), kept out of argv.
const TOKEN_ENV: &str = "RELAY_CLIENT_TOKEN";
/// The header that carries the route credential (SPEC §3.5).
const TOKEN_HEADER: HeaderName = HeaderName::from_static("x-relay-client-token");

/// Drives the provider stand-in directly and through relayd, and prints the measures as JSON.
#[derive(Debug, Parser)]
#[command(name = "relay-loadgen", version)]
struct Args {
    /// The stand-in's address (`127.0.0.1:PORT`), the direct baseline.
    #[arg(long, value_name = "ADDR")]
    direct: SocketAddr,
    /// relayd's address, whose OpenAI upstream is that stand-in.
    #[arg(long, value_name = "ADDR")]
    relay: SocketAddr,
    /// relayd's process id, whose RSS the memory scenario samples.
    #[arg(long, value_name = "PID")]
    relay_pid: Option<u32>,
    /// The paced stand-in's process id (relayd's Anthropic upstream); its open-file limit is raised to its hard limit so the held streams fit.
    #[arg(long, value_name = "PID")]
    stream_stand_in_pid: Option<u32>,
    /// The worker's process id, whose RSS the worker-memory scenario samples.
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
    /// Requests per second and p99 at concurrency 64.
    Throughput,
    /// The worker's RSS after a warm-up through it.
    WorkerMemory,
    /// Added latency of a tiny non-streaming request through the worker at concurrency 1.
    WorkerLatency,
    /// Added time to the first body byte of a stream through the worker.
    WorkerTtfb,
    /// Added time of a 2 MiB request body through the worker.
    WorkerBody,
}

impl Scenario {
    /// What runs without `--scenario`: everything that needs no MCP session.
    const PASS_THROUGH: [Scenario; 4] = [
        Scenario::Memory,
        Scenario::Latency,
        Scenario::Ttfb,
        Scenario::Throughput,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::Memory => "memory",
            Scenario::Latency => "latency",
            Scenario::Ttfb => "ttfb",
            Scenario::Throughput => "throughput",
            Scenario::WorkerMemory => "worker-memory",
            Scenario::WorkerLatency => "worker-latency",
            Scenario::WorkerTtfb => "worker-ttfb",
            Scenario::WorkerBody => "worker-body",
        }
    }

    async fn run(self, ctx: &Ctx, report: &mut Report) -> Result<Vec<Measure>> {
        match self {
            Scenario::Memory => memory(ctx, report).await,
            Scenario::Latency => latency(ctx).await,
            Scenario::Ttfb => ttfb(ctx).await,
            Scenario::Throughput => throughput(ctx).await,
            Scenario::WorkerMemory => worker_memory(ctx).await,
            Scenario::WorkerLatency => worker_latency(ctx).await,
            Scenario::WorkerTtfb => worker_ttfb(ctx).await,
            Scenario::WorkerBody => worker_body(ctx).await,
        }
    }
}

/// How many samples and how long, derived from `--scale`.
#[derive(Debug, Clone, PartialEq)]
struct Plan {
    latency: Interleave,
    ttfb: Interleave,
    large_body: Interleave,
    throughput_concurrency: usize,
    throughput_warmup: Duration,
    throughput_rounds: usize,
    throughput_block: Duration,
    memory_warmup: usize,
    streams: usize,
    stream_open_concurrency: usize,
    rss_samples: usize,
    rss_interval: Duration,
}

/// Warm-up exchanges per target, then `rounds` rounds of one block per target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Interleave {
    warmup: usize,
    rounds: usize,
    block: usize,
}

impl Plan {
    fn scaled(scale: f64, streams: usize) -> Plan {
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
        }
    }
}

/// What every scenario needs.
#[derive(Debug)]
struct Ctx {
    direct: SocketAddr,
    relay: SocketAddr,
    relay_pid: Option<u32>,
    stream_stand_in_pid: Option<u32>,
    worker_pid: Option<u32>,
    /// The route credential of the worker scenarios, from [`TOKEN_ENV`].
    token: Option<HeaderValue>,
    plan: Plan,
}

/// The two targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Direct,
    Relay,
}

/// The first slot of a round alternates, so neither target always runs right after the other.
fn round_order(round: usize) -> [Side; 2] {
    if round.is_multiple_of(2) {
        [Side::Direct, Side::Relay]
    } else {
        [Side::Relay, Side::Direct]
    }
}

/// One value per target.
#[derive(Debug, Clone, Default)]
struct Sides<T> {
    direct: T,
    relay: T,
}

impl<T> Sides<T> {
    fn get_mut(&mut self, side: Side) -> &mut T {
        match side {
            Side::Direct => &mut self.direct,
            Side::Relay => &mut self.relay,
        }
    }
}

impl Ctx {
    fn addr(&self, side: Side) -> SocketAddr {
        match side {
            Side::Direct => self.direct,
            Side::Relay => self.relay,
        }
    }

    /// The credential a worker scenario sends on the relayd side.
    fn token(&self) -> Result<&HeaderValue> {
        self.token.as_ref().with_context(|| {
            format!("the worker scenarios need {TOKEN_ENV}, a credential with a live MCP session")
        })
    }

    /// A connection to relayd that sends the route credential, so its model requests go to the worker.
    async fn worker_conn(&self) -> Result<Conn> {
        let token = self.token()?.clone();
        Ok(Conn::open(self.relay).await?.with_token(token))
    }
}

/// Which way the relayd side of a measure goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// No credential: relayd forwards to the stand-in itself.
    PassThrough,
    /// With the route credential: relayd forwards to the worker, which calls the stand-in.
    Worker,
}

/// What one exchange sends and what it times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// Tiny Chat Completions request; time until the whole answer has arrived.
    Json,
    /// Streaming Chat Completions request; time until the first body byte (the rest is read, untimed).
    StreamFirstByte,
    /// Streaming Messages request to the paced stand-in, held open by the memory scenario.
    HeldStream,
    /// Chat Completions request whose body is [`LARGE_BODY_BYTES`] of JSON; time until the whole answer has arrived.
    LargeJson,
    /// `GET /metrics` on relayd.
    Metrics,
}

impl Probe {
    fn request(self, host: &HeaderValue) -> Result<Request<Full<Bytes>>> {
        let (method, path, body) = match self {
            Probe::Json => (
                Method::POST,
                "/v1/chat/completions",
                Bytes::from_static(CHAT_BODY),
            ),
            Probe::StreamFirstByte => (
                Method::POST,
                "/v1/chat/completions",
                Bytes::from_static(CHAT_STREAM_BODY),
            ),
            Probe::HeldStream => (
                Method::POST,
                "/v1/messages",
                Bytes::from_static(MESSAGES_STREAM_BODY),
            ),
            Probe::LargeJson => (Method::POST, "/v1/chat/completions", large_body()),
            Probe::Metrics => (Method::GET, "/metrics", Bytes::new()),
        };
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, host.clone());
        if !body.is_empty() {
            builder = builder.header(CONTENT_TYPE, "application/json");
        }
        if self == Probe::HeldStream {
            builder = builder.header("anthropic-version", "2023-06-01");
        }
        builder.body(Full::new(body)).context("building a request")
    }
}

/// The 2 MiB Chat Completions body, built once and shared (cloning `Bytes` copies nothing, so building the request is not timed as copying 2 MiB).
fn large_body() -> Bytes {
    static BODY: OnceLock<Bytes> = OnceLock::new();
    BODY.get_or_init(|| Bytes::from(chat_body_of_size(LARGE_BODY_BYTES)))
        .clone()
}

/// A Chat Completions body of exactly `size` bytes (or the smallest one, when `size` is below that), its user message padded with `x`.
fn chat_body_of_size(size: usize) -> Vec<u8> {
    let head = br#"{"model":"m","messages":[{"role":"user","content":""#;
    let tail = br#""}]}"#;
    let padding = size.saturating_sub(head.len() + tail.len());
    let mut body = Vec::with_capacity(head.len() + padding + tail.len());
    body.extend_from_slice(head);
    body.resize(head.len() + padding, b'x');
    body.extend_from_slice(tail);
    body
}

/// One HTTP/1.1 keep-alive connection with `TCP_NODELAY`, as a harness would hold.
#[derive(Debug)]
struct Conn {
    sender: SendRequest<Full<Bytes>>,
    driver: JoinHandle<()>,
    host: HeaderValue,
    /// The route credential sent with every request, if any.
    token: Option<HeaderValue>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl Conn {
    async fn open(addr: SocketAddr) -> Result<Conn> {
        let tcp = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        tcp.set_nodelay(true).context("setting TCP_NODELAY")?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .with_context(|| format!("starting HTTP/1.1 with {addr}"))?;
        let driver = tokio::spawn(async move {
            // The exchange that is waiting on this connection sees its error.
            let _ = connection.await;
        });
        let host = HeaderValue::from_str(&addr.to_string()).context("building the host header")?;
        Ok(Conn {
            sender,
            driver,
            host,
            token: None,
        })
    }

    /// The same connection, sending `token` as the route credential with every request.
    fn with_token(mut self, token: HeaderValue) -> Conn {
        self.token = Some(token);
        self
    }

    /// Sends the probe's request and returns its response once the head has arrived.
    async fn send(&mut self, probe: Probe) -> Result<Response<Incoming>> {
        let mut req = probe.request(&self.host)?;
        if let Some(token) = &self.token {
            req.headers_mut().insert(TOKEN_HEADER, token.clone());
        }
        self.sender.ready().await.context("connection closed")?;
        let res = self
            .sender
            .send_request(req)
            .await
            .context("sending a request")?;
        if res.status() != StatusCode::OK {
            bail!("{probe:?} answered {} instead of 200", res.status());
        }
        Ok(res)
    }

    /// One timed exchange: the time [`Probe`] describes, with the whole answer read.
    async fn exchange(&mut self, probe: Probe) -> Result<Duration> {
        let run = async {
            self.sender.ready().await.context("connection closed")?;
            let started = Instant::now();
            let mut body = self.send(probe).await?.into_body();
            match probe {
                Probe::StreamFirstByte => {
                    let first = first_data(&mut body).await?;
                    let elapsed = started.elapsed();
                    ensure!(first, "the stream ended without a body byte");
                    while let Some(frame) = body.frame().await {
                        frame.context("reading the rest of the stream")?;
                    }
                    Ok(elapsed)
                }
                Probe::Json | Probe::HeldStream | Probe::LargeJson | Probe::Metrics => {
                    body.collect().await.context("reading the answer")?;
                    Ok(started.elapsed())
                }
            }
        };
        tokio::time::timeout(EXCHANGE_TIMEOUT, run)
            .await
            .with_context(|| format!("{probe:?} took longer than {EXCHANGE_TIMEOUT:?}"))?
    }

    /// The whole body of a `GET /metrics`, as text.
    async fn metrics_text(&mut self) -> Result<String> {
        let body = self.send(Probe::Metrics).await?.into_body();
        let bytes = tokio::time::timeout(EXCHANGE_TIMEOUT, body.collect())
            .await
            .context("reading /metrics timed out")?
            .context("reading /metrics")?
            .to_bytes();
        String::from_utf8(bytes.to_vec()).context("/metrics is not UTF-8")
    }
}

/// Reads frames until the first non-empty data frame; false when the body ended first.
async fn first_data(body: &mut Incoming) -> Result<bool> {
    while let Some(frame) = body.frame().await {
        let frame = frame.context("reading the stream")?;
        if frame.data_ref().is_some_and(|data| !data.is_empty()) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Timings of one target in one scenario.
#[derive(Debug, Clone)]
struct Samples {
    /// Nanoseconds.
    histogram: Histogram<u64>,
    /// Samples at or above [`STALL_THRESHOLD`].
    stalls: u64,
}

impl Default for Samples {
    fn default() -> Self {
        Samples::new()
    }
}

impl Samples {
    fn new() -> Samples {
        // Constant bounds that hdrhistogram accepts: this depends on no input, so it cannot fail at run time.
        let histogram = Histogram::new_with_bounds(1, HISTOGRAM_MAX_NS, 3)
            .expect("constant histogram bounds are valid");
        Samples {
            histogram,
            stalls: 0,
        }
    }

    fn record(&mut self, elapsed: Duration) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.histogram.saturating_record(ns.max(1));
        if elapsed >= STALL_THRESHOLD {
            self.stalls += 1;
        }
    }

    fn merge(&mut self, other: &Samples) -> Result<()> {
        self.histogram
            .add(&other.histogram)
            .map_err(|e| anyhow::anyhow!("merging histograms: {e:?}"))?;
        self.stalls += other.stalls;
        Ok(())
    }

    fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// The value at `quantile` (0.5, 0.99) in microseconds.
    fn micros(&self, quantile: f64) -> f64 {
        self.histogram.value_at_quantile(quantile) as f64 / 1_000.0
    }

    /// The value at `quantile` in milliseconds.
    fn millis(&self, quantile: f64) -> f64 {
        self.histogram.value_at_quantile(quantile) as f64 / 1_000_000.0
    }
}

/// Runs `probe` on one connection per target: warm-up, then alternating blocks.
/// Through the worker, it also checks with relayd's `/metrics` that every relayd-side exchange went to the worker.
async fn interleaved(
    ctx: &Ctx,
    probe: Probe,
    shape: Interleave,
    via: Via,
) -> Result<Sides<Samples>> {
    let relay = match via {
        Via::PassThrough => Conn::open(ctx.relay).await?,
        Via::Worker => ctx.worker_conn().await?,
    };
    let before = match via {
        Via::PassThrough => None,
        Via::Worker => Some(destinations(ctx).await?),
    };
    let mut conns = Sides {
        direct: Conn::open(ctx.direct).await?,
        relay,
    };
    for side in [Side::Direct, Side::Relay] {
        let conn = conns.get_mut(side);
        for _ in 0..shape.warmup {
            conn.exchange(probe)
                .await
                .with_context(|| format!("warming up {side:?}"))?;
        }
    }
    let mut samples = Sides::<Samples>::default();
    for round in 0..shape.rounds {
        for side in round_order(round) {
            let conn = conns.get_mut(side);
            let into = samples.get_mut(side);
            for _ in 0..shape.block {
                let elapsed = conn
                    .exchange(probe)
                    .await
                    .with_context(|| format!("{probe:?} to {side:?}"))?;
                into.record(elapsed);
            }
        }
    }
    if let Some(before) = before {
        let sent = shape.warmup + shape.rounds * shape.block;
        before.ensure_all_went_to_worker(&destinations(ctx).await?, sent as u64)?;
    }
    Ok(samples)
}

async fn latency(ctx: &Ctx) -> Result<Vec<Measure>> {
    let s = interleaved(ctx, Probe::Json, ctx.plan.latency, Via::PassThrough).await?;
    let counts = SampleCounts::of(&s);
    Ok(vec![
        Measure::compare(
            Scenario::Latency,
            "added latency, non-streaming, pass-through, c=1, p50",
            Unit::Micros,
            s.relay.micros(0.5),
            s.direct.micros(0.5),
            Some(Target::AddedAtMost(60.0)),
        )
        .with_samples(counts),
        Measure::compare(
            Scenario::Latency,
            "added latency, non-streaming, pass-through, c=1, p99",
            Unit::Micros,
            s.relay.micros(0.99),
            s.direct.micros(0.99),
            Some(Target::AddedAtMost(150.0)),
        )
        .with_samples(counts),
    ])
}

async fn ttfb(ctx: &Ctx) -> Result<Vec<Measure>> {
    let s = interleaved(ctx, Probe::StreamFirstByte, ctx.plan.ttfb, Via::PassThrough).await?;
    let counts = SampleCounts::of(&s);
    Ok(vec![
        Measure::compare(
            Scenario::Ttfb,
            "added stream time to first byte, p50",
            Unit::Micros,
            s.relay.micros(0.5),
            s.direct.micros(0.5),
            None,
        )
        .with_samples(counts),
        Measure::compare(
            Scenario::Ttfb,
            "added stream time to first byte, p99",
            Unit::Micros,
            s.relay.micros(0.99),
            s.direct.micros(0.99),
            Some(Target::AddedAtMost(250.0)),
        )
        .with_samples(counts),
        Measure::compare(
            Scenario::Ttfb,
            "stream first bytes after ≥ 35 ms (Nagle-like stall)",
            Unit::Count,
            s.relay.stalls as f64,
            s.direct.stalls as f64,
            Some(Target::RelayAtMost(0.0)),
        )
        .with_samples(counts),
    ])
}

async fn worker_latency(ctx: &Ctx) -> Result<Vec<Measure>> {
    let s = interleaved(ctx, Probe::Json, ctx.plan.latency, Via::Worker).await?;
    let counts = SampleCounts::of(&s);
    Ok(vec![
        Measure::compare(
            Scenario::WorkerLatency,
            "added latency through the worker, plugins off, c=1, p50",
            Unit::Micros,
            s.relay.micros(0.5),
            s.direct.micros(0.5),
            None,
        )
        .with_samples(counts),
        Measure::compare(
            Scenario::WorkerLatency,
            "added latency through the worker, plugins off, c=1, p99",
            Unit::Micros,
            s.relay.micros(0.99),
            s.direct.micros(0.99),
            Some(Target::AddedAtMost(400.0)),
        )
        .with_samples(counts),
    ])
}

async fn worker_ttfb(ctx: &Ctx) -> Result<Vec<Measure>> {
    let s = interleaved(ctx, Probe::StreamFirstByte, ctx.plan.ttfb, Via::Worker).await?;
    let counts = SampleCounts::of(&s);
    Ok(vec![
        Measure::compare(
            Scenario::WorkerTtfb,
            "added stream time to first byte through the worker, p50",
            Unit::Micros,
            s.relay.micros(0.5),
            s.direct.micros(0.5),
            None,
        )
        .with_samples(counts),
        Measure::compare(
            Scenario::WorkerTtfb,
            "added stream time to first byte through the worker, p99",
            Unit::Micros,
            s.relay.micros(0.99),
            s.direct.micros(0.99),
            None,
        )
        .with_samples(counts),
        Measure::compare(
            Scenario::WorkerTtfb,
            "stream first bytes after ≥ 35 ms through the worker",
            Unit::Count,
            s.relay.stalls as f64,
            s.direct.stalls as f64,
            Some(Target::RelayAtMost(0.0)),
        )
        .with_samples(counts),
    ])
}

async fn worker_body(ctx: &Ctx) -> Result<Vec<Measure>> {
    let s = interleaved(ctx, Probe::LargeJson, ctx.plan.large_body, Via::Worker).await?;
    let counts = SampleCounts::of(&s);
    Ok(vec![
        Measure::compare(
            Scenario::WorkerBody,
            "added time of a 2 MiB request body through the worker, p50",
            Unit::Millis,
            s.relay.millis(0.5),
            s.direct.millis(0.5),
            Some(Target::AddedAtMost(2.0)),
        )
        .with_samples(counts),
        Measure::compare(
            Scenario::WorkerBody,
            "added time of a 2 MiB request body through the worker, p99",
            Unit::Millis,
            s.relay.millis(0.99),
            s.direct.millis(0.99),
            None,
        )
        .with_samples(counts),
    ])
}

/// What one throughput block produced.
#[derive(Debug, Default)]
struct Block {
    samples: Samples,
    completed: u64,
    elapsed: Duration,
}

/// Every connection sends tiny requests back to back until `length` has passed.
async fn run_block(conns: &mut Vec<Conn>, length: Duration) -> Result<Block> {
    let started = Instant::now();
    let deadline = started + length;
    let mut tasks = JoinSet::new();
    for mut conn in conns.drain(..) {
        tasks.spawn(async move {
            let mut samples = Samples::new();
            while Instant::now() < deadline {
                let elapsed = conn.exchange(Probe::Json).await?;
                samples.record(elapsed);
            }
            Ok::<_, anyhow::Error>((conn, samples))
        });
    }
    let mut block = Block::default();
    while let Some(joined) = tasks.join_next().await {
        let (conn, samples) = joined.context("a load task panicked")??;
        block.completed += samples.count();
        block.samples.merge(&samples)?;
        conns.push(conn);
    }
    block.elapsed = started.elapsed();
    Ok(block)
}

async fn throughput(ctx: &Ctx) -> Result<Vec<Measure>> {
    let plan = &ctx.plan;
    let mut conns = Sides::<Vec<Conn>>::default();
    for side in [Side::Direct, Side::Relay] {
        for _ in 0..plan.throughput_concurrency {
            conns.get_mut(side).push(Conn::open(ctx.addr(side)).await?);
        }
    }
    for side in [Side::Direct, Side::Relay] {
        run_block(conns.get_mut(side), plan.throughput_warmup)
            .await
            .with_context(|| format!("warming up {side:?}"))?;
    }
    let mut totals = Sides::<Block>::default();
    for round in 0..plan.throughput_rounds {
        for side in round_order(round) {
            let block = run_block(conns.get_mut(side), plan.throughput_block)
                .await
                .with_context(|| format!("throughput block on {side:?}"))?;
            let total = totals.get_mut(side);
            total.samples.merge(&block.samples)?;
            total.completed += block.completed;
            total.elapsed += block.elapsed;
        }
    }
    let rate = |b: &Block| b.completed as f64 / b.elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
    let counts = SampleCounts {
        direct: totals.direct.completed,
        relay: totals.relay.completed,
    };
    let concurrency = plan.throughput_concurrency;
    Ok(vec![
        Measure::compare(
            Scenario::Throughput,
            &format!("throughput, c={concurrency}, tiny responses, pass-through"),
            Unit::PerSecond,
            rate(&totals.relay),
            rate(&totals.direct),
            Some(Target::RelayAtLeast(15_000.0)),
        )
        .with_samples(counts),
        Measure::compare(
            Scenario::Throughput,
            &format!("throughput, c={concurrency}, p99 latency"),
            Unit::Millis,
            totals.relay.samples.millis(0.99),
            totals.direct.samples.millis(0.99),
            Some(Target::RelayBelow(10.0)),
        )
        .with_samples(counts),
    ])
}

/// Streams held open by the memory scenario; dropping it closes them all.
#[derive(Debug)]
struct HeldStreams {
    tasks: JoinSet<()>,
    /// Streams that ended (or broke) while they were meant to be open.
    ended: Arc<AtomicUsize>,
}

impl HeldStreams {
    /// Closes every held stream (dropping a connection is how a client cancels).
    fn close(mut self) {
        self.tasks.abort_all();
    }
}

/// Opens `n` streams to relayd's paced upstream, at most `concurrency` being opened at a time, and returns once each has delivered its first body byte.
async fn hold_streams(
    addr: SocketAddr,
    n: usize,
    concurrency: usize,
    timeout: Duration,
) -> Result<HeldStreams> {
    let gate = Arc::new(Semaphore::new(concurrency.max(1)));
    let ended = Arc::new(AtomicUsize::new(0));
    let (opened_tx, mut opened_rx) = mpsc::channel::<Result<()>>(n.max(1));
    let mut tasks = JoinSet::new();
    for _ in 0..n {
        let gate = gate.clone();
        let ended = ended.clone();
        let opened_tx = opened_tx.clone();
        tasks.spawn(async move {
            let opening = async {
                let _permit = gate.acquire().await.context("the open gate closed")?;
                let mut conn = Conn::open(addr).await?;
                let mut body = conn.send(Probe::HeldStream).await?.into_body();
                ensure!(
                    first_data(&mut body).await?,
                    "a held stream ended before its first byte"
                );
                Ok((conn, body))
            };
            let (conn, mut body) = match opening.await {
                Ok(open) => open,
                Err(error) => {
                    let _ = opened_tx.send(Err(error)).await;
                    return;
                }
            };
            let _ = opened_tx.send(Ok(())).await;
            // Read like a harness would, so relayd is not holding a backlog for a stalled client.
            while let Some(Ok(_)) = body.frame().await {}
            ended.fetch_add(1, Ordering::Relaxed);
            drop(conn);
        });
    }
    drop(opened_tx);
    let held = HeldStreams { tasks, ended };
    let deadline = tokio::time::Instant::now() + timeout;
    for opened in 0..n {
        match tokio::time::timeout_at(deadline, opened_rx.recv()).await {
            Ok(Some(Ok(()))) => {}
            Ok(Some(Err(error))) => {
                return Err(error.context(format!("opening held stream {}", opened + 1)));
            }
            Ok(None) => bail!("the held-stream tasks stopped after {opened} of {n}"),
            Err(_) => bail!("only {opened} of {n} streams opened within {timeout:?}"),
        }
    }
    Ok(held)
}

async fn memory(ctx: &Ctx, report: &mut Report) -> Result<Vec<Measure>> {
    let plan = &ctx.plan;
    let pid = ctx
        .relay_pid
        .context("the memory scenario needs --relay-pid")?;
    // Warm-up: the request path, the upstream pool and a few streams have run once.
    {
        let mut conn = Conn::open(ctx.relay).await?;
        for _ in 0..plan.memory_warmup {
            conn.exchange(Probe::Json).await.context("memory warm-up")?;
        }
        for _ in 0..plan.memory_warmup.div_ceil(10) {
            conn.exchange(Probe::StreamFirstByte)
                .await
                .context("memory warm-up")?;
        }
    }
    let idle = rss_median(pid, plan).await?;
    if let Some(stand_in) = ctx.stream_stand_in_pid {
        match raise_open_file_limit_of(stand_in) {
            Ok(limit) => report.note(format!("paced stand-in open-file limit raised to {limit}")),
            Err(error) => report.note(format!(
                "could not raise the paced stand-in's open-file limit: {error:#}"
            )),
        }
    }
    let held = hold_streams(
        ctx.relay,
        plan.streams,
        plan.stream_open_concurrency,
        OPEN_STREAMS_TIMEOUT,
    )
    .await
    .context("holding streams open through relayd")?;
    let with_streams = rss_median(pid, plan).await?;
    let mut metrics = Conn::open(ctx.relay).await?;
    let gauge = open_streams_gauge(&metrics.metrics_text().await?);
    let ended = held.ended.load(Ordering::Relaxed);
    report.memory = Some(MemoryDetail {
        streams: plan.streams,
        streams_ended_early: ended,
        relay_open_streams_at_sample: gauge,
        rss_idle_bytes: idle,
        rss_with_streams_bytes: with_streams,
    });
    if ended > 0 {
        report.note(format!(
            "{ended} of {} held streams ended before RSS was sampled",
            plan.streams
        ));
    }
    held.close();
    match wait_for_quiet(&mut metrics, QUIET_TIMEOUT).await {
        Ok(true) => {}
        Ok(false) => report.note(format!(
            "relayd still reported open streams {QUIET_TIMEOUT:?} after the held streams closed"
        )),
        Err(error) => report.note(format!(
            "could not read relay_open_streams after closing the held streams: {error:#}"
        )),
    }
    let streams = plan.streams.max(1) as f64;
    let per_stream_kib = (with_streams as f64 - idle as f64) / streams / 1024.0;
    Ok(vec![
        Measure::relay_only(
            Scenario::Memory,
            "relayd RSS idle (after start and a warm-up)",
            Unit::Mebibytes,
            idle as f64 / (1024.0 * 1024.0),
            Some(Target::RelayAtMost(20.0)),
        ),
        Measure::relay_only(
            Scenario::Memory,
            &format!("relayd RSS with {} open streams", plan.streams),
            Unit::Mebibytes,
            with_streams as f64 / (1024.0 * 1024.0),
            None,
        ),
        Measure::relay_only(
            Scenario::Memory,
            "relayd RSS per open stream",
            Unit::Kibibytes,
            per_stream_kib,
            Some(Target::RelayAtMost(64.0)),
        ),
    ])
}

async fn worker_memory(ctx: &Ctx) -> Result<Vec<Measure>> {
    let plan = &ctx.plan;
    let pid = ctx
        .worker_pid
        .context("the worker-memory scenario needs --worker-pid")?;
    // The same warm-up as relayd's idle figure, through the worker: its request path, its upstream pool and a few streams have run once.
    let before = destinations(ctx).await?;
    let mut conn = ctx.worker_conn().await?;
    let streams = plan.memory_warmup.div_ceil(10);
    for _ in 0..plan.memory_warmup {
        conn.exchange(Probe::Json)
            .await
            .context("worker memory warm-up")?;
    }
    for _ in 0..streams {
        conn.exchange(Probe::StreamFirstByte)
            .await
            .context("worker memory warm-up")?;
    }
    drop(conn);
    before.ensure_all_went_to_worker(
        &destinations(ctx).await?,
        (plan.memory_warmup + streams) as u64,
    )?;
    let idle = rss_median(pid, plan).await?;
    Ok(vec![Measure::relay_only(
        Scenario::WorkerMemory,
        "worker RSS idle (after activation and a warm-up)",
        Unit::Mebibytes,
        idle as f64 / (1024.0 * 1024.0),
        Some(Target::RelayAtMost(20.0)),
    )])
}

/// relayd's model requests by destination, summed over routes and statuses, from `relay_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Destinations {
    worker: u64,
    pass_through: u64,
}

impl Destinations {
    fn parse(text: &str) -> Destinations {
        let mut counts = Destinations::default();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("relay_requests_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once("} ") else {
                continue;
            };
            // Counters are written as integers or, by some encoders, as floats.
            let Some(value) = value.trim().parse::<f64>().ok().filter(|v| *v >= 0.0) else {
                continue;
            };
            let value = value as u64;
            if labels.contains(r#"destination="worker""#) {
                counts.worker += value;
            } else if labels.contains(r#"destination="pass_through""#) {
                counts.pass_through += value;
            }
        }
        counts
    }

    /// Fails unless, between `self` and `after`, `sent` more requests went to the worker and none passed through: relayd passes a request with a bound credential through when the worker is not ready, which would measure the wrong path.
    fn ensure_all_went_to_worker(&self, after: &Destinations, sent: u64) -> Result<()> {
        let passed = after.pass_through.saturating_sub(self.pass_through);
        let worker = after.worker.saturating_sub(self.worker);
        ensure!(
            passed == 0,
            "{passed} requests with the route credential passed through instead of going to the worker (is the MCP session still live?)"
        );
        ensure!(
            worker >= sent,
            "relayd counted {worker} requests to the worker, expected at least {sent}"
        );
        Ok(())
    }
}

/// relayd's request counts by destination, now.
async fn destinations(ctx: &Ctx) -> Result<Destinations> {
    let mut conn = Conn::open(ctx.relay).await?;
    Ok(Destinations::parse(&conn.metrics_text().await?))
}

/// The value of `relay_open_streams` in Prometheus text, if present.
fn open_streams_gauge(text: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix("relay_open_streams")?;
        let value = rest.strip_prefix(' ')?;
        value.trim().parse::<f64>().ok()
    })
}

/// Polls relayd's `relay_open_streams` until it reads zero; false when `timeout` passed first.
async fn wait_for_quiet(metrics: &mut Conn, timeout: Duration) -> Result<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        let text = metrics.metrics_text().await?;
        let open =
            open_streams_gauge(&text).context("relayd's /metrics has no relay_open_streams")?;
        if open == 0.0 {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The median of a few RSS samples taken `plan.rss_interval` apart, in bytes.
async fn rss_median(pid: u32, plan: &Plan) -> Result<u64> {
    let mut samples = Vec::with_capacity(plan.rss_samples);
    for i in 0..plan.rss_samples.max(1) {
        if i > 0 {
            tokio::time::sleep(plan.rss_interval).await;
        }
        samples.push(rss_bytes(pid)?);
    }
    samples.sort_unstable();
    Ok(samples[samples.len() / 2])
}

/// A process's resident set size in bytes, from `/proc/<pid>/status`.
fn rss_bytes(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_vm_rss(&status).with_context(|| format!("{path} has no VmRSS line"))
}

/// The `VmRSS:  1234 kB` line of `/proc/<pid>/status`, in bytes.
fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut words = line["VmRSS:".len()..].split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => value.checked_mul(1024),
        _ => None,
    }
}

/// utime + stime of a `/proc/<pid>/stat` line, in clock ticks; fields are counted after the command name's closing parenthesis, since the name may hold spaces.
fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Raises this process's soft open-file limit to its hard limit and returns the new soft limit.
#[cfg(unix)]
fn raise_own_open_file_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if setrlimit(Resource::Nofile, limit).is_err() {
            limit = getrlimit(Resource::Nofile);
        }
    }
    limit.current
}

#[cfg(not(unix))]
fn raise_own_open_file_limit() -> Option<u64> {
    None
}

/// Raises another process's soft open-file limit to its hard limit (same user, no privilege needed) and returns the new soft limit.
#[cfg(target_os = "linux")]
fn raise_open_file_limit_of(pid: u32) -> Result<String> {
    use rustix::process::{Pid, Resource, Rlimit, prlimit};
    let path = format!("/proc/{pid}/limits");
    let limits = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let hard = parse_hard_open_files(&limits)
        .with_context(|| format!("{path} has no readable \"Max open files\" line"))?;
    let raw = i32::try_from(pid).context("process id out of range")?;
    let target = Pid::from_raw(raw).context("process id 0")?;
    prlimit(
        Some(target),
        Resource::Nofile,
        Rlimit {
            current: hard,
            maximum: hard,
        },
    )
    .context("setting the open-file limit")?;
    Ok(hard.map_or_else(|| "unlimited".to_owned(), |n| n.to_string()))
}

#[cfg(not(target_os = "linux"))]
fn raise_open_file_limit_of(_pid: u32) -> Result<String> {
    bail!("raising another process's limit needs Linux prlimit")
}

/// The hard limit of the `Max open files  <soft>  <hard>  files` line of `/proc/<pid>/limits`; `Some(None)` is unlimited.
fn parse_hard_open_files(limits: &str) -> Option<Option<u64>> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut words = line["Max open files".len()..].split_whitespace();
    let _soft = words.next()?;
    match words.next()? {
        "unlimited" => Some(None),
        hard => hard.parse().ok().map(Some),
    }
}

/// Everything printed on stdout.
#[derive(Debug, Serialize)]
struct Report {
    tool: &'static str,
    version: &'static str,
    scale: f64,
    scenarios: Vec<Scenario>,
    open_file_limit: Option<u64>,
    /// CPU time this process used (utime + stime of `/proc/self/stat`, in clock ticks), so the xtask can tell the bench's load from other processes'.
    cpu_ticks: Option<u64>,
    measures: Vec<Measure>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory: Option<MemoryDetail>,
    notes: Vec<String>,
}

impl Report {
    fn note(&mut self, note: String) {
        eprintln!("relay-loadgen: {note}");
        self.notes.push(note);
    }
}

/// The raw figures behind the memory rows.
#[derive(Debug, Serialize)]
struct MemoryDetail {
    streams: usize,
    streams_ended_early: usize,
    relay_open_streams_at_sample: Option<f64>,
    rss_idle_bytes: u64,
    rss_with_streams_bytes: u64,
}

/// One row of the bench table.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct Measure {
    scenario: Scenario,
    measure: String,
    unit: Unit,
    relay: f64,
    direct: Option<f64>,
    /// relay − direct, at the same percentile for latencies.
    added: Option<f64>,
    /// Human text, e.g. `added ≤ 60 µs`; absent for an informational row.
    target: Option<String>,
    within_target: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    samples: Option<SampleCounts>,
}

/// How many samples each side contributed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
struct SampleCounts {
    direct: u64,
    relay: u64,
}

impl SampleCounts {
    fn of(s: &Sides<Samples>) -> SampleCounts {
        SampleCounts {
            direct: s.direct.count(),
            relay: s.relay.count(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
enum Unit {
    #[serde(rename = "us")]
    Micros,
    #[serde(rename = "ms")]
    Millis,
    #[serde(rename = "req/s")]
    PerSecond,
    #[serde(rename = "MiB")]
    Mebibytes,
    #[serde(rename = "KiB")]
    Kibibytes,
    #[serde(rename = "count")]
    Count,
}

impl Unit {
    fn suffix(self) -> &'static str {
        match self {
            Unit::Micros => " µs",
            Unit::Millis => " ms",
            Unit::PerSecond => " req/s",
            Unit::Mebibytes => " MiB",
            Unit::Kibibytes => " KiB",
            Unit::Count => "",
        }
    }
}

/// What a row must meet.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    /// relay − direct ≤ value.
    AddedAtMost(f64),
    /// relay ≤ value.
    RelayAtMost(f64),
    /// relay ≥ value.
    RelayAtLeast(f64),
    /// relay < value.
    RelayBelow(f64),
}

impl Target {
    fn text(self, unit: Unit) -> String {
        let suffix = unit.suffix();
        match self {
            Target::AddedAtMost(v) => format!("added ≤ {v}{suffix}"),
            Target::RelayAtMost(v) => format!("≤ {v}{suffix}"),
            Target::RelayAtLeast(v) => format!("≥ {v}{suffix}"),
            Target::RelayBelow(v) => format!("< {v}{suffix}"),
        }
    }

    fn is_met(self, relay: f64, added: Option<f64>) -> Option<bool> {
        match self {
            Target::AddedAtMost(v) => added.map(|a| a <= v),
            Target::RelayAtMost(v) => Some(relay <= v),
            Target::RelayAtLeast(v) => Some(relay >= v),
            Target::RelayBelow(v) => Some(relay < v),
        }
    }
}

impl Measure {
    /// A row with both targets measured; `added` is `relay - direct`.
    fn compare(
        scenario: Scenario,
        measure: &str,
        unit: Unit,
        relay: f64,
        direct: f64,
        target: Option<Target>,
    ) -> Measure {
        let added = relay - direct;
        Measure {
            scenario,
            measure: measure.to_owned(),
            unit,
            relay,
            direct: Some(direct),
            added: Some(added),
            target: target.map(|t| t.text(unit)),
            within_target: target.and_then(|t| t.is_met(relay, Some(added))),
            samples: None,
        }
    }

    /// A row with no direct counterpart (relayd's own memory).
    fn relay_only(
        scenario: Scenario,
        measure: &str,
        unit: Unit,
        relay: f64,
        target: Option<Target>,
    ) -> Measure {
        Measure {
            scenario,
            measure: measure.to_owned(),
            unit,
            relay,
            direct: None,
            added: None,
            target: target.map(|t| t.text(unit)),
            within_target: target.and_then(|t| t.is_met(relay, None)),
            samples: None,
        }
    }

    fn with_samples(mut self, counts: SampleCounts) -> Measure {
        self.samples = Some(counts);
        self
    }
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
        stream_stand_in_pid: args.stream_stand_in_pid,
        worker_pid: args.worker_pid,
        token,
        plan: Plan::scaled(args.scale, args.streams),
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
    report.cpu_ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| parse_stat_ticks(&stat));
    Ok(report)
}

// A binary's root is its own file, so its test module is found through an explicit path.
#[cfg(test)]
#[path = "relay-loadgen/tests.rs"]
mod tests;
