//! relayd and nginx with the provider stand-in off their CPU: the throughput blocks of the pass-through phase again, with a fast stand-in of their own on the load generator's CPU.
//!
//! On two CPUs the other phases run the stand-ins beside relayd, so every request relayd writes wakes a process that shares its CPU, and is often preempted by it; a provider in production is another machine.
//! This phase shows the same pair with each proxy alone on its CPU. It is informational: the targets are read from the pass-through phase.

use anyhow::Result;
use relay_testkit::measures::MeasureId;
use serde_json::Value;

use super::PhaseRows;
use super::pinning::Pinning;
use super::procs::{Scratch, StandIn};
use super::{Beside, Options, relayd_and_peer, throughput_beside};

/// The rows the phase takes from the loadgen's throughput scenario, and the rows they become.
const ROWS: [(MeasureId, MeasureId); 2] = [
    (MeasureId::ThroughputRate, MeasureId::ApartThroughputRate),
    (MeasureId::CpuPassThrough, MeasureId::ApartCpuPassThrough),
];

/// Runs the phase when the stand-ins share relayd's CPUs (two CPUs, pinned); otherwise says why it measured nothing.
pub(super) fn run(
    bin_dir: &std::path::Path,
    pinning: &Pinning,
    options: &Options,
) -> Result<PhaseRows> {
    let nothing = |why: &str| PhaseRows {
        measures: Vec::new(),
        notes: vec![format!("the stand-in-apart rows were not taken: {why}")],
        detail: Value::Null,
    };
    let (Some(loadgen_cpus), Some(stand_in_cpus)) = (&pinning.loadgen, &pinning.stand_ins) else {
        return Ok(nothing("processes are not pinned"));
    };
    if pinning.relayd.as_ref() != Some(stand_in_cpus) {
        return Ok(nothing("the stand-ins already run off relayd's CPUs"));
    }
    // A scratch of its own: its relayd and nginx would otherwise share the pass-through phase's directories.
    let scratch = Scratch::create()?;
    let stand_in = StandIn::start(bin_dir, Some(loadgen_cpus), &[], &scratch, "apart")?;
    let (relayd, peer) = relayd_and_peer(bin_dir, pinning, stand_in.addr, &scratch)?;
    let workers = pinning.server_cpu_count();
    println!(
        "==> stand-in {} (on the load generator's CPU {loadgen_cpus}), relayd {} (pass-through to it, pid {}), nginx {} (its peer, pid {})",
        stand_in.addr,
        relayd.addr,
        relayd.process.pid(),
        peer.addr,
        peer.pid(),
    );
    let beside = Beside {
        extra: &[],
        what: "relayd and nginx with the stand-in off their CPU, about half a minute",
        rows: &ROWS,
        note: format!(
            "stand-in apart: the throughput blocks again with a fast stand-in of their own on CPU {loadgen_cpus}, the load generator's, and relayd and nginx ({workers} worker process(es)) on CPU {stand_in_cpus}, so neither proxy shares its CPU with the provider; informational, the targets are read from the pass-through rows"
        ),
    };
    throughput_beside(bin_dir, pinning, &relayd, &peer, options, beside)
}
