//! The measures of SPEC §12 as one table, shared by `relay-loadgen` (which takes the request measures) and `cargo xtask bench` (which takes the process measures, prints the table and writes the JSON).
//!
//! Each row of [`MEASURES`] names one measure: what the table calls it, its unit, its target and how that target is judged ([`Target`]), and how it is measured.
//! A scenario returns [`Measure`] values built from a row's [`MeasureId`], so a name, unit or target is written once, here; the xtask prints every row in this order, measured or not.

use serde::{Deserialize, Serialize};

/// One measure of SPEC §12.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MeasureId {
    LatencyP50,
    LatencyP99,
    WorkerLatencyP50,
    WorkerLatencyP99,
    WorkerLatencyAtofP99,
    TtfbP50,
    TtfbP99,
    TtfbStalls,
    WorkerTtfbP50,
    WorkerTtfbP99,
    WorkerTtfbStalls,
    ThroughputRate,
    ThroughputP99,
    OpenStreams,
    OpenStreamsFrameDelayP99,
    OpenStreamsLateFrames,
    OpenStreamsRssPerStream,
    WorkerOpenStreams,
    WorkerOpenStreamsFrameDelayP99,
    WorkerOpenStreamsLateFrames,
    RelaydRssIdle,
    RelaydRssAfterLoad,
    RelaydRssStreams,
    RelaydRssPerStream,
    WorkerRssIdle,
    HookP50,
    HookP99,
    ActivationP50,
    ActivationMax,
    WorkerBodyP50,
    WorkerBodyP99,
    CpuPassThrough,
    PreemptionsPassThrough,
    InstructionsPassThrough,
    InstructionsAgentHeaders,
    CpuWorker,
    InstructionsWorker,
    WorkerThroughputRate,
    RedactorThroughput,
    HttpsThroughputRate,
    HttpsCpuPassThrough,
    ServingHttpsThroughputRate,
    ServingHttpsCpuPassThrough,
    ApartThroughputRate,
    ApartCpuPassThrough,
    StreamsThroughputRate,
    StreamsCpuPassThrough,
    StreamsWorkerThroughputRate,
    StreamsCpuWorker,
    StreamsCpuWorkerPlugins,
}

/// A row of the table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasureSpec {
    pub id: MeasureId,
    /// Who takes it: a `relay-loadgen` scenario (`latency`, `worker_body`, …) or the xtask (`activation`, `hook`).
    pub scenario: &'static str,
    /// The name printed in the table.
    pub name: &'static str,
    pub unit: Unit,
    /// `None` for an informational row.
    pub target: Option<Target>,
    /// How the figure is taken, in one sentence (also in `docs/benchmarks.md`).
    pub how: &'static str,
}

/// Every measure, in the order of SPEC §12.
pub const MEASURES: &[MeasureSpec] = &[
    row(
        MeasureId::LatencyP50,
        "latency",
        "added latency, non-streaming, pass-through, c=1, p50",
        Unit::Micros,
        Some(Target::AddedAtMost(60.0)),
        "a tiny POST /v1/chat/completions on one keep-alive connection per path, sending to the whole answer; relayd minus direct at p50",
    ),
    row(
        MeasureId::LatencyP99,
        "latency",
        "added latency, non-streaming, pass-through, c=1, p99",
        Unit::Micros,
        Some(Target::AddedAtMost(150.0)),
        "the same samples at p99",
    ),
    row(
        MeasureId::WorkerLatencyP50,
        "worker_latency",
        "added latency through the worker, plugins off, c=1, p50",
        Unit::Micros,
        None,
        "the latency request with the route credential, relayd → worker → stand-in, against the stand-in directly, at p50",
    ),
    row(
        MeasureId::WorkerLatencyP99,
        "worker_latency",
        "added latency through the worker, plugins off, c=1, p99",
        Unit::Micros,
        Some(Target::AddedAtMost(400.0)),
        "the same samples at p99",
    ),
    row(
        MeasureId::WorkerLatencyAtofP99,
        "worker_plugins",
        "added latency through the worker, ATOF file recording, redaction and one policy rule on, c=1, p99",
        Unit::Micros,
        Some(Target::AddedAtMost(600.0)),
        "the worker-latency request through a worker whose plugins.toml enables observability (content captured, a file sink), pii_redaction with redact_requests and a model policy rule, at p99",
    ),
    row(
        MeasureId::TtfbP50,
        "ttfb",
        "added stream time to first byte, p50",
        Unit::Micros,
        None,
        "a streaming request, sending to the first body byte (the rest is read, untimed), at p50",
    ),
    row(
        MeasureId::TtfbP99,
        "ttfb",
        "added stream time to first byte, p99",
        Unit::Micros,
        Some(Target::AddedAtMost(250.0)),
        "the same samples at p99",
    ),
    row(
        MeasureId::TtfbStalls,
        "ttfb",
        "stream first bytes after ≥ 35 ms (Nagle-like stall)",
        Unit::Count,
        Some(Target::RelayAtMost(0.0)),
        "how many of those first bytes took 35 ms or more",
    ),
    row(
        MeasureId::WorkerTtfbP50,
        "worker_ttfb",
        "added stream time to first byte through the worker, p50",
        Unit::Micros,
        None,
        "the first-byte request through the worker, at p50",
    ),
    row(
        MeasureId::WorkerTtfbP99,
        "worker_ttfb",
        "added stream time to first byte through the worker, p99",
        Unit::Micros,
        None,
        "the same samples at p99",
    ),
    row(
        MeasureId::WorkerTtfbStalls,
        "worker_ttfb",
        "stream first bytes after ≥ 35 ms through the worker",
        Unit::Count,
        Some(Target::RelayAtMost(0.0)),
        "stalls among those first bytes",
    ),
    row(
        MeasureId::ThroughputRate,
        "throughput",
        "throughput, c=64, tiny responses, pass-through",
        Unit::PerSecond,
        Some(Target::RelayAtLeast(15_000.0)),
        "64 keep-alive connections per path sending tiny requests back to back in interleaved 2 s blocks; completed requests per second",
    ),
    row(
        MeasureId::ThroughputP99,
        "throughput",
        "throughput, c=64, p99 latency",
        Unit::Millis,
        Some(Target::RelayBelow(10.0)),
        "the per-request latency during those blocks, at p99",
    ),
    row(
        MeasureId::OpenStreams,
        "open_streams",
        "concurrent open SSE streams without a lost or late frame",
        Unit::Count,
        Some(Target::RelayAtLeast(5_000.0)),
        "5,000 SSE streams from the paced stand-in held open at once, directly and then through relayd; the streams whose every frame came in order within 100 ms of its pace",
    ),
    row(
        MeasureId::OpenStreamsFrameDelayP99,
        "open_streams",
        "frame delay with the streams open, p99",
        Unit::Millis,
        None,
        "how much longer than the pace each frame took to follow the one before, at p99",
    ),
    row(
        MeasureId::OpenStreamsLateFrames,
        "open_streams",
        "frames late by over 100 ms or out of order, streams open",
        Unit::Count,
        Some(Target::RelayAtMost(0.0)),
        "frames more than 100 ms past their pace, or whose event came before one it follows",
    ),
    row(
        MeasureId::OpenStreamsRssPerStream,
        "open_streams",
        "relayd RSS per open stream, streams open",
        Unit::Kibibytes,
        Some(Target::RelayAtMost(64.0)),
        "(relayd's RSS in the middle of the hold − before it) / streams",
    ),
    row(
        MeasureId::WorkerOpenStreams,
        "worker_open_streams",
        "concurrent open SSE streams through one worker without a lost or late frame",
        Unit::Count,
        Some(Target::RelayAtLeast(1_000.0)),
        "1,000 streams with the route credential, relayd → worker → paced stand-in, checked like the pass-through streams",
    ),
    row(
        MeasureId::WorkerOpenStreamsFrameDelayP99,
        "worker_open_streams",
        "frame delay with the streams open through the worker, p99",
        Unit::Millis,
        None,
        "how much longer than the pace each frame took to follow the one before, at p99",
    ),
    row(
        MeasureId::WorkerOpenStreamsLateFrames,
        "worker_open_streams",
        "frames late by over 100 ms or out of order, through the worker",
        Unit::Count,
        Some(Target::RelayAtMost(0.0)),
        "frames more than 100 ms past their pace, or whose event came before one it follows",
    ),
    row(
        MeasureId::RelaydRssIdle,
        "memory",
        "relayd RSS idle (after start and a warm-up)",
        Unit::Mebibytes,
        Some(Target::RelayAtMost(20.0)),
        "VmRSS of relayd after a warm-up, median of five samples",
    ),
    row(
        MeasureId::RelaydRssAfterLoad,
        "throughput",
        "relayd RSS after the c=64 load",
        Unit::Mebibytes,
        Some(Target::RelayAtMost(24.0)),
        "VmRSS of relayd just after its throughput blocks, median of five samples",
    ),
    row(
        MeasureId::RelaydRssStreams,
        "memory",
        "relayd RSS with the held streams open",
        Unit::Mebibytes,
        None,
        "the same while the held SSE streams (1,000 by default) from the paced stand-in are open through relayd",
    ),
    row(
        MeasureId::RelaydRssPerStream,
        "memory",
        "relayd RSS per open stream",
        Unit::Kibibytes,
        Some(Target::RelayAtMost(64.0)),
        "(RSS with streams − RSS idle) / streams",
    ),
    row(
        MeasureId::WorkerRssIdle,
        "worker_memory",
        "worker RSS idle (after activation and a warm-up)",
        Unit::Mebibytes,
        Some(Target::RelayAtMost(20.0)),
        "VmRSS of the live session's worker after the same warm-up through it, median of five samples",
    ),
    row(
        MeasureId::HookP50,
        "hook",
        "relay-hook start to exit, loopback, p50 (direct: /bin/true)",
        Unit::Millis,
        Some(Target::RelayAtMost(3.0)),
        "relay-hook's wall time with a PreToolUse payload, beside /bin/true started the same way",
    ),
    row(
        MeasureId::HookP99,
        "hook",
        "relay-hook start to exit, loopback, p99 (direct: /bin/true)",
        Unit::Millis,
        None,
        "the same runs at p99",
    ),
    row(
        MeasureId::ActivationP50,
        "activation",
        "worker activation, MCP start to route ready, p50",
        Unit::Millis,
        Some(Target::RelayAtMost(150.0)),
        "spawning relay-mcp to GET /_relay/v1/route answering worker, over several sessions",
    ),
    row(
        MeasureId::ActivationMax,
        "activation",
        "worker activation, MCP start to route ready, max",
        Unit::Millis,
        Some(Target::RelayAtMost(150.0)),
        "the slowest of those sessions",
    ),
    row(
        MeasureId::WorkerBodyP50,
        "worker_body",
        "added time of a 2 MiB request body through the worker, p50",
        Unit::Millis,
        Some(Target::AddedAtMost(2.0)),
        "a POST whose JSON body is exactly 2 MiB, sending to the whole answer, at p50",
    ),
    row(
        MeasureId::WorkerBodyP99,
        "worker_body",
        "added time of a 2 MiB request body through the worker, p99",
        Unit::Millis,
        None,
        "the same samples at p99",
    ),
    row(
        MeasureId::CpuPassThrough,
        "throughput",
        "CPU per proxied request, pass-through, c=64 (peer: nginx)",
        Unit::Micros,
        Some(Target::AtMostPeer),
        "relayd's user + system time over its throughput blocks divided by the requests it completed, beside nginx's in the same run",
    ),
    row(
        MeasureId::PreemptionsPassThrough,
        "throughput",
        "preemptions per proxied request, pass-through, c=64 (peer: nginx)",
        Unit::PerRequest,
        None,
        "how often relayd's threads were switched off their CPU while they could still run (the sum of `nonvoluntary_ctxt_switches` over its threads in /proc) during its throughput blocks, divided by the requests it completed, beside nginx's: on two CPUs the stand-in shares relayd's, and each preemption is the stand-in, woken by relayd's write, taking the CPU from it",
    ),
    row(
        MeasureId::InstructionsPassThrough,
        "instructions",
        "instructions per proxied request, pass-through, c=1 (peer: nginx)",
        Unit::Count,
        None,
        "relayd, then nginx, alone under valgrind's callgrind in front of the fast stand-in: 2,000 sequential keep-alive requests after 300 uncounted ones, user-space instructions divided by 2,000",
    ),
    row(
        MeasureId::InstructionsAgentHeaders,
        "instructions",
        "instructions per proxied request with Claude Code's headers, pass-through, c=1 (peer: nginx)",
        Unit::Count,
        None,
        "the row above, but each request carries the 21 headers Claude Code sends, as captured and in its order, on the Messages route: what an agent's request costs, where the row above has the fewest headers a request can carry",
    ),
    row(
        MeasureId::CpuWorker,
        "worker_throughput",
        "CPU per request through the worker (relayd + worker), c=64",
        Unit::Micros,
        Some(Target::AtMostAndTimes {
            at_most: 100.0,
            times: 3.0,
            of: MeasureId::CpuPassThrough,
        }),
        "relayd's and the worker's user + system time over the worker throughput blocks divided by the requests completed",
    ),
    row(
        MeasureId::InstructionsWorker,
        "instructions",
        "instructions per request through the worker (relayd + worker), c=1",
        Unit::Count,
        None,
        "relayd in managed mode and one session's worker, both under valgrind's callgrind, the same requests with the route credential: both processes' user-space instructions divided by 2,000",
    ),
    row(
        MeasureId::WorkerThroughputRate,
        "worker_throughput",
        "throughput through the worker, c=64, tiny responses",
        Unit::PerSecond,
        None,
        "64 keep-alive connections with the route credential, interleaved with the direct path; completed requests per second",
    ),
    row(
        MeasureId::RedactorThroughput,
        "redactor",
        "redactor throughput on a 1 MiB JSON body with no secret",
        Unit::MebibytesPerSecond,
        None,
        "every built-in detector over a 1 MiB chat request of log-like prose with numbers and no secret, in process, median of the runs",
    ),
    row(
        MeasureId::HttpsThroughputRate,
        "https_provider",
        "throughput, c=64, tiny responses, pass-through to an HTTPS provider over HTTP/2 (peer: nginx)",
        Unit::PerSecond,
        None,
        "the throughput blocks again, with relayd and nginx in front of an nginx TLS front (a local certificate, HTTP/2 offered by ALPN) before the fast stand-in: relayd speaks HTTP/2 to it, nginx HTTP/1.1 over TLS with upstream keep-alive; completed requests per second",
    ),
    row(
        MeasureId::HttpsCpuPassThrough,
        "https_provider",
        "CPU per proxied request, pass-through to an HTTPS provider over HTTP/2, c=64 (peer: nginx)",
        Unit::Micros,
        None,
        "relayd's user + system time over those throughput blocks divided by the requests it completed, beside nginx's in the same run",
    ),
    row(
        MeasureId::ServingHttpsThroughputRate,
        "serving_https",
        "throughput, c=64, tiny responses, pass-through, relayd serving HTTPS (peer: nginx serving HTTPS)",
        Unit::PerSecond,
        None,
        "the throughput blocks again, with the load generator reaching relayd (--tls-cert) and nginx (listen ssl) over TLS 1.3 and HTTP/1.1 keep-alive, both forwarding in plain HTTP to the fast stand-in; completed requests per second",
    ),
    row(
        MeasureId::ServingHttpsCpuPassThrough,
        "serving_https",
        "CPU per proxied request, pass-through, c=64, relayd serving HTTPS (peer: nginx serving HTTPS)",
        Unit::Micros,
        None,
        "relayd's user + system time over those throughput blocks divided by the requests it completed, TLS included, beside nginx's in the same run",
    ),
    row(
        MeasureId::ApartThroughputRate,
        "stand_in_apart",
        "throughput, c=64, tiny responses, pass-through, the stand-in off relayd's CPU (peer: nginx)",
        Unit::PerSecond,
        None,
        "the throughput blocks again, with a fast stand-in of their own on the load generator's CPU, so that relayd and nginx each have their CPU to themselves, as beside a remote provider; completed requests per second",
    ),
    row(
        MeasureId::ApartCpuPassThrough,
        "stand_in_apart",
        "CPU per proxied request, pass-through, c=64, the stand-in off relayd's CPU (peer: nginx)",
        Unit::Micros,
        None,
        "relayd's user + system time over those throughput blocks divided by the requests it completed, beside nginx's in the same run",
    ),
    row(
        MeasureId::StreamsThroughputRate,
        "streamed_answers",
        "throughput, c=64, streamed answers of 100 events 1 ms apart, pass-through (peer: nginx)",
        Unit::PerSecond,
        None,
        "the throughput blocks again, each request asking a stand-in of their own for a streamed answer of 100 events (about 100 chunks, each written apart) and reading it to its end; completed answers per second, set by the stand-in's pace",
    ),
    row(
        MeasureId::StreamsCpuPassThrough,
        "streamed_answers",
        "CPU per streamed answer of 100 events, pass-through, c=64 (peer: nginx)",
        Unit::Micros,
        None,
        "relayd's user + system time over those blocks divided by the answers it completed, beside nginx's in the same run: what a proxy spends on every chunk of the answers agents mostly get",
    ),
    row(
        MeasureId::StreamsWorkerThroughputRate,
        "streamed_answers",
        "throughput, c=64, streamed answers of 100 events 1 ms apart, through the worker",
        Unit::PerSecond,
        None,
        "the same streamed answers with the route credential, through relayd in managed mode and one session's worker (plugins off) to the same stand-in, interleaved with the direct path; completed answers per second, set by the stand-in's pace",
    ),
    row(
        MeasureId::StreamsCpuWorker,
        "streamed_answers",
        "CPU per streamed answer of 100 events through the worker (relayd + worker), c=64",
        Unit::Micros,
        None,
        "relayd's and the worker's user + system time over those blocks divided by the answers completed: beside the pass-through row, what the hop to the worker adds to every chunk",
    ),
    row(
        MeasureId::StreamsCpuWorkerPlugins,
        "streamed_answers",
        "CPU per streamed answer of 100 events through the worker with plugins on (relayd + worker), c=64",
        Unit::Micros,
        None,
        "the same blocks through a second session's worker running the plugins of the worker-plugins measure, recording each answer with its content: relayd's and the worker's CPU per answer, beside the row above",
    ),
];

#[allow(clippy::too_many_arguments)]
const fn row(
    id: MeasureId,
    scenario: &'static str,
    name: &'static str,
    unit: Unit,
    target: Option<Target>,
    how: &'static str,
) -> MeasureSpec {
    MeasureSpec {
        id,
        scenario,
        name,
        unit,
        target,
        how,
    }
}

/// The row of `id`.
pub fn spec(id: MeasureId) -> &'static MeasureSpec {
    // Every id has a row; the table test proves it, so the fallback is never taken.
    MEASURES
        .iter()
        .find(|row| row.id == id)
        .unwrap_or(&MEASURES[0])
}

/// The unit of a figure, written in the JSON as `us`, `ms`, `req/s`, `MiB`, `KiB` or `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unit {
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
    #[serde(rename = "MiB/s")]
    MebibytesPerSecond,
    #[serde(rename = "/req")]
    PerRequest,
}

impl Unit {
    /// The JSON name.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Micros => "us",
            Unit::Millis => "ms",
            Unit::PerSecond => "req/s",
            Unit::Mebibytes => "MiB",
            Unit::Kibibytes => "KiB",
            Unit::Count => "count",
            Unit::MebibytesPerSecond => "MiB/s",
            Unit::PerRequest => "/req",
        }
    }

    /// What follows a number in text.
    pub fn suffix(self) -> &'static str {
        match self {
            Unit::Micros => " µs",
            Unit::Millis => " ms",
            Unit::PerSecond => " req/s",
            Unit::Mebibytes => " MiB",
            Unit::Kibibytes => " KiB",
            Unit::Count => "",
            Unit::MebibytesPerSecond => " MiB/s",
            Unit::PerRequest => " /req",
        }
    }
}

/// What a row must meet, and so how it is judged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    /// relay − direct ≤ value.
    AddedAtMost(f64),
    /// relay ≤ value.
    RelayAtMost(f64),
    /// relay ≥ value.
    RelayAtLeast(f64),
    /// relay < value.
    RelayBelow(f64),
    /// relay ≤ the peer's (nginx's) figure in the same run.
    AtMostPeer,
    /// relay ≤ `at_most` and ≤ `times` × the relay figure of another measure.
    AtMostAndTimes {
        at_most: f64,
        times: f64,
        of: MeasureId,
    },
}

impl Target {
    pub fn text(self, unit: Unit) -> String {
        let suffix = unit.suffix();
        match self {
            Target::AddedAtMost(v) => format!("added ≤ {v}{suffix}"),
            Target::RelayAtMost(v) => format!("≤ {v}{suffix}"),
            Target::RelayAtLeast(v) => format!("≥ {v}{suffix}"),
            Target::RelayBelow(v) => format!("< {v}{suffix}"),
            Target::AtMostPeer => "≤ nginx".to_owned(),
            Target::AtMostAndTimes { at_most, times, .. } => {
                format!("≤ {at_most}{suffix} and ≤ {times}× pass-through")
            }
        }
    }

    /// Judges a target that needs only the row's own relay and added values; `None` when it needs more.
    pub fn is_met(self, relay: f64, added: Option<f64>) -> Option<bool> {
        match self {
            Target::AddedAtMost(v) => added.map(|a| a <= v),
            Target::RelayAtMost(v) => Some(relay <= v),
            Target::RelayAtLeast(v) => Some(relay >= v),
            Target::RelayBelow(v) => Some(relay < v),
            Target::AtMostPeer | Target::AtMostAndTimes { .. } => None,
        }
    }

    /// Judges `measure`, looking up the relay figure of other measures with `other`.
    pub fn judge(
        self,
        measure: &Measure,
        other: &dyn Fn(MeasureId) -> Option<f64>,
    ) -> Option<bool> {
        let relay = measure.relay;
        match self {
            Target::AtMostPeer => measure.peer.map(|peer| relay <= peer),
            Target::AtMostAndTimes { at_most, times, of } => {
                if relay > at_most {
                    return Some(false);
                }
                other(of).map(|base| relay <= times * base)
            }
            simple => simple.is_met(relay, measure.added),
        }
    }
}

/// One measured row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measure {
    pub id: MeasureId,
    pub scenario: String,
    pub measure: String,
    pub unit: Unit,
    pub relay: f64,
    pub direct: Option<f64>,
    /// relay − direct, at the same percentile for latencies.
    pub added: Option<f64>,
    /// The peer's (nginx's) figure, taken like relay's in the same rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<f64>,
    /// The CPU time per request of the servers on each path, over the blocks this row's samples come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuPerRequest>,
    /// Human text, e.g. `added ≤ 60 µs`; absent for an informational row.
    pub target: Option<String>,
    pub within_target: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<SampleCounts>,
}

/// How many samples each path contributed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleCounts {
    pub direct: u64,
    pub relay: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<u64>,
}

/// User + system time per request, in microseconds: relayd's (and the worker's, on the worker path), the peer's, and their ratio.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CpuPerRequest {
    pub relay_us: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_us: Option<f64>,
    /// relay_us / peer_us.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
}

impl CpuPerRequest {
    pub fn new(relay_us: f64, peer_us: Option<f64>) -> CpuPerRequest {
        CpuPerRequest {
            relay_us,
            peer_us,
            ratio: peer_us.filter(|p| *p > 0.0).map(|p| relay_us / p),
        }
    }
}

impl Measure {
    /// A row with both paths measured; `added` is `relay - direct`.
    pub fn compare(id: MeasureId, relay: f64, direct: f64) -> Measure {
        Measure::new(id, relay, Some(direct))
    }

    /// A row with no direct counterpart (memory, activation).
    pub fn relay_only(id: MeasureId, relay: f64) -> Measure {
        Measure::new(id, relay, None)
    }

    /// A row of relayd's figure beside the direct path's, when that path was measured.
    pub fn new(id: MeasureId, relay: f64, direct: Option<f64>) -> Measure {
        let spec = spec(id);
        let mut measure = Measure {
            id,
            scenario: spec.scenario.to_owned(),
            measure: spec.name.to_owned(),
            unit: spec.unit,
            relay,
            direct,
            added: direct.map(|direct| relay - direct),
            peer: None,
            cpu: None,
            target: spec.target.map(|t| t.text(spec.unit)),
            within_target: None,
            samples: None,
        };
        measure.judge(&|_| None);
        measure
    }

    /// The same figures as the row `id`: a scenario run again against another setup.
    pub fn as_row(mut self, id: MeasureId) -> Measure {
        let spec = spec(id);
        self.id = id;
        self.scenario = spec.scenario.to_owned();
        self.measure = spec.name.to_owned();
        self.unit = spec.unit;
        self.target = spec.target.map(|t| t.text(spec.unit));
        self.judge(&|_| None);
        self
    }

    pub fn with_samples(mut self, counts: SampleCounts) -> Measure {
        self.samples = Some(counts);
        self
    }

    /// The same row with the peer's figure, judged again.
    pub fn with_peer(mut self, peer: Option<f64>) -> Measure {
        self.peer = peer;
        self.judge(&|_| None);
        self
    }

    pub fn with_cpu(mut self, cpu: Option<CpuPerRequest>) -> Measure {
        self.cpu = cpu;
        self
    }

    /// relay / peer, when there is a peer.
    pub fn ratio(&self) -> Option<f64> {
        self.peer.filter(|p| *p > 0.0).map(|p| self.relay / p)
    }

    fn judge(&mut self, other: &dyn Fn(MeasureId) -> Option<f64>) {
        self.within_target = spec(self.id).target.and_then(|t| t.judge(self, other));
    }
}

/// Judges every row again, now that the rows a target refers to are known.
pub fn judge_all(measures: &mut [Measure]) {
    let figures: Vec<(MeasureId, f64)> = measures.iter().map(|m| (m.id, m.relay)).collect();
    let other = |id: MeasureId| figures.iter().find(|(i, _)| *i == id).map(|(_, v)| *v);
    for measure in measures.iter_mut() {
        measure.judge(&other);
    }
}

#[cfg(test)]
mod tests;
