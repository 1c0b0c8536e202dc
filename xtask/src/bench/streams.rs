//! relayd and nginx passing streamed answers: the throughput blocks of the pass-through phase again, each request asking a stand-in of their own for a streamed answer whose events it writes apart.
//! Then the same answers through a worker: relayd in managed mode, one session's worker, the same stand-in.
//!
//! The other phases ask for tiny answers that arrive whole, so they measure what a request costs; the answers agents mostly get are streams of many small events, each a chunk the proxy reads, frames and writes on its own.
//! This phase shows what a proxy spends on those chunks, beside nginx, and what the hop to the worker adds to each. It is informational: SPEC sets no target for it.

use anyhow::Result;
use relay_testkit::measures::MeasureId;
use serde_json::json;

use super::pinning::Pinning;
use super::procs::{Scratch, StandIn};
use super::{Beside, Options, PhaseRows, relayd_and_peer, report, throughput_beside, worker};

/// The rows the phase takes from the loadgen's throughput scenario, and the rows they become.
const ROWS: [(MeasureId, MeasureId); 2] = [
    (MeasureId::ThroughputRate, MeasureId::StreamsThroughputRate),
    (MeasureId::CpuPassThrough, MeasureId::StreamsCpuPassThrough),
];

/// The rows the phase takes from the loadgen's worker-throughput scenario, and the rows they become.
const WORKER_ROWS: [(MeasureId, MeasureId); 2] = [
    (
        MeasureId::WorkerThroughputRate,
        MeasureId::StreamsWorkerThroughputRate,
    ),
    (MeasureId::CpuWorker, MeasureId::StreamsCpuWorker),
];

/// The row the phase takes from the same blocks through a worker with plugins on.
const PLUGINS_ROWS: [(MeasureId, MeasureId); 1] =
    [(MeasureId::CpuWorker, MeasureId::StreamsCpuWorkerPlugins)];

/// The stand-in's streams: 100 content events, one every millisecond, so each is written, read and passed on apart, as a provider's tokens are.
pub(super) const STREAM_ARGS: [&str; 4] = ["--stream-events", "100", "--pace-ms", "1"];

/// Runs the phase; without nginx it cannot, and says so.
pub(super) fn run(
    bin_dir: &std::path::Path,
    pinning: &Pinning,
    options: &Options,
) -> Result<PhaseRows> {
    // A scratch of its own: its relayd and nginx would otherwise share the pass-through phase's directories.
    let scratch = Scratch::create()?;
    let stand_in = StandIn::start(
        bin_dir,
        pinning.stand_ins.as_deref(),
        &STREAM_ARGS,
        &scratch,
        "streaming",
    )?;
    let (relayd, peer) = relayd_and_peer(bin_dir, pinning, stand_in.addr, &scratch)?;
    let workers = pinning.server_cpu_count();
    println!(
        "==> streaming stand-in {} ({}), relayd {} (pass-through to it, pid {}), nginx {} (its peer, pid {})",
        stand_in.addr,
        STREAM_ARGS.join(" "),
        relayd.addr,
        relayd.process.pid(),
        peer.addr,
        peer.pid(),
    );
    let beside = Beside {
        extra: &["--whole-streams".into()],
        what: "relayd and nginx passing streamed answers, about half a minute",
        rows: &ROWS,
        note: format!(
            "streamed answers: the throughput blocks again, each request asking a stand-in of their own ({}) for a streamed Chat Completions answer read to its end, relayd and nginx ({workers} worker process(es)) in front of it; CPU per answer is over its hundred-odd chunks; informational",
            STREAM_ARGS.join(" ")
        ),
    };
    let mut phase = throughput_beside(bin_dir, pinning, &relayd, &peer, options, beside)?;
    phase.detail["stand_in_args"] = json!(STREAM_ARGS);
    drop((relayd, peer));

    // A failure through the worker leaves the pass-through rows standing, and says why in a note.
    let through_worker =
        worker::streamed_answers(bin_dir, pinning, stand_in.addr, &scratch, options).and_then(
            |[off, on]| {
                let mut rows = report::rows(&off, &WORKER_ROWS)?;
                rows.extend(report::rows(&on, &PLUGINS_ROWS)?);
                Ok((rows, off, on))
            },
        );
    match through_worker {
        Ok((rows, off, on)) => {
            phase.measures.extend(rows);
            phase.notes.push(
                "streamed answers through the worker: the same stand-in and blocks, with the route credential, through relayd in managed mode and one session's worker, plugins off and then on (recording with content, redaction of requests, one policy rule), beside the direct path; CPU per answer is relayd's and the worker's together".to_owned(),
            );
            phase.detail["worker_loadgen"] = off;
            phase.detail["worker_plugins_loadgen"] = on;
        }
        Err(error) => phase.notes.push(format!(
            "the streamed answers were not measured through the worker: {error:#}"
        )),
    }
    Ok(phase)
}
