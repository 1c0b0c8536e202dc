//! The request scenarios: latency, first byte and throughput, on each path in interleaved rounds, with the servers' CPU time per request.
//!
//! Every row they return is built from its [`MeasureId`], so its name, unit and target come from the table of `relay_testkit::measures`.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use relay_testkit::measures::{CpuPerRequest, Measure, MeasureId, SampleCounts};
use relay_testkit::procfs;
use tokio::task::JoinSet;

use crate::Ctx;
use crate::conn::{Conn, Probe};
use crate::metrics::{destinations, rss_median};
use crate::samples::{Samples, Side, Sides, round_order, sample_counts};
use crate::streams::mebibytes;
use crate::{Interleave, Via};

/// A counter of the servers at one moment: relayd's (with the worker's on the worker path) and the peer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counters {
    relay: Option<u64>,
    peer: Option<u64>,
}

impl Counters {
    #[cfg(test)]
    pub(crate) fn new(relay: Option<u64>, peer: Option<u64>) -> Counters {
        Counters { relay, peer }
    }

    /// What each server's counter grew by since `before`, divided by the requests it served in that window (it idles while the other paths run).
    pub(crate) fn per_request(
        before: Counters,
        after: Counters,
        relay_requests: u64,
        peer_requests: u64,
    ) -> (Option<f64>, Option<f64>) {
        let per_request = |before: Option<u64>, after: Option<u64>, requests: u64| {
            let grown = after?.checked_sub(before?)?;
            (requests > 0).then(|| grown as f64 / requests as f64)
        };
        (
            per_request(before.relay, after.relay, relay_requests),
            per_request(before.peer, after.peer, peer_requests),
        )
    }
}

impl Ctx {
    /// The processes whose CPU time is relayd's side of a measure.
    fn relay_pids(&self, via: Via) -> Vec<u32> {
        let mut pids: Vec<u32> = self.relay_pid.into_iter().collect();
        if via == Via::Worker {
            pids.extend(self.worker_pid);
        }
        pids
    }

    /// The paths a measure runs on: the direct one when there is one, and the peer only in pass-through, where it does the same job as relayd.
    pub(crate) fn sides(&self, via: Via) -> Vec<Side> {
        let mut sides = vec![Side::Relay];
        if self.direct.is_some() {
            sides.insert(0, Side::Direct);
        }
        if via == Via::PassThrough && self.peer.is_some() {
            sides.push(Side::Peer);
        }
        sides
    }

    /// The servers' CPU time now, in clock ticks.
    pub(crate) fn cpu_ticks(&self, via: Via) -> Counters {
        self.counters(via, procfs::ticks_of)
    }

    /// How often the servers' threads have been preempted until now.
    fn preemptions(&self, via: Via) -> Counters {
        self.counters(via, procfs::preemptions_of)
    }

    fn counters(&self, via: Via, read: fn(&[u32]) -> Option<u64>) -> Counters {
        let of = |pids: &[u32]| if pids.is_empty() { None } else { read(pids) };
        Counters {
            relay: of(&self.relay_pids(via)),
            peer: if via == Via::PassThrough {
                of(&self.peer_pids)
            } else {
                None
            },
        }
    }

    /// A connection on `side`'s path: relayd with the credential when `via` is the worker.
    async fn conn(&self, side: Side, via: Via) -> Result<Conn> {
        match (side, via) {
            (Side::Direct, _) => Conn::open(self.direct.context("no direct address")?).await,
            (Side::Relay, Via::PassThrough) => self.front_conn(self.relay).await,
            (Side::Relay, Via::Worker) => self.worker_conn().await,
            (Side::Peer, _) => self.front_conn(self.peer.context("no peer address")?).await,
        }
    }
}

/// CPU time per request, in microseconds, over a window in which each server handled only its own path's `requests`.
pub(crate) fn cpu_per_request(
    before: Counters,
    after: Counters,
    relay_requests: u64,
    peer_requests: u64,
) -> Option<CpuPerRequest> {
    let micros = |ticks: f64| ticks * procfs::CLOCK_TICK.as_secs_f64() * 1_000_000.0;
    let (relay, peer) = Counters::per_request(before, after, relay_requests, peer_requests);
    Some(CpuPerRequest::new(micros(relay?), peer.map(micros)))
}

/// What an interleaved scenario measured.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) samples: Sides<Samples>,
    pub(crate) with_peer: bool,
    pub(crate) cpu: Option<CpuPerRequest>,
}

impl Run {
    fn counts(&self) -> SampleCounts {
        sample_counts(&self.samples, self.with_peer)
    }

    /// A row comparing relayd with the direct path (and the peer) at one quantile.
    fn row(&self, id: MeasureId, figure: impl Fn(&Samples) -> f64) -> Measure {
        let s = &self.samples;
        Measure::compare(id, figure(&s.relay), figure(&s.direct))
            .with_peer(self.with_peer.then(|| figure(&s.peer)))
            .with_cpu(self.cpu)
            .with_samples(self.counts())
    }
}

/// Runs `probe` on one connection per path: warm-up, then rounds of one block per path in rotating order.
/// Through the worker, it also checks with relayd's `/metrics` that every relayd-side exchange went to the worker.
pub(crate) async fn interleaved(
    ctx: &Ctx,
    probe: Probe,
    shape: Interleave,
    via: Via,
) -> Result<Run> {
    let sides = ctx.sides(via);
    let before = match via {
        Via::PassThrough => None,
        Via::Worker => Some(destinations(ctx).await?),
    };
    let mut conns = Sides::<Option<Conn>>::default();
    for side in &sides {
        *conns.get_mut(*side) = Some(ctx.conn(*side, via).await?);
    }
    for side in &sides {
        let Some(conn) = conns.get_mut(*side).as_mut() else {
            continue;
        };
        for _ in 0..shape.warmup {
            conn.exchange(probe)
                .await
                .with_context(|| format!("warming up {side:?}"))?;
        }
    }
    let cpu_before = ctx.cpu_ticks(via);
    let mut samples = Sides::<Samples>::default();
    for round in 0..shape.rounds {
        for side in round_order(round, &sides) {
            let Some(conn) = conns.get_mut(side).as_mut() else {
                continue;
            };
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
    let cpu_after = ctx.cpu_ticks(via);
    if let Some(before) = before {
        let sent = shape.warmup + shape.rounds * shape.block;
        before.ensure_all_went_to_worker(&destinations(ctx).await?, sent as u64)?;
    }
    let cpu = cpu_per_request(
        cpu_before,
        cpu_after,
        samples.relay.count(),
        samples.peer.count(),
    );
    Ok(Run {
        with_peer: sides.contains(&Side::Peer),
        samples,
        cpu,
    })
}

pub(crate) async fn latency(ctx: &Ctx) -> Result<Vec<Measure>> {
    let run = interleaved(ctx, Probe::Json, ctx.plan.latency, Via::PassThrough).await?;
    Ok(vec![
        run.row(MeasureId::LatencyP50, |s| s.micros(0.5)),
        run.row(MeasureId::LatencyP99, |s| s.micros(0.99)),
    ])
}

pub(crate) async fn ttfb(ctx: &Ctx) -> Result<Vec<Measure>> {
    let run = interleaved(ctx, Probe::StreamFirstByte, ctx.plan.ttfb, Via::PassThrough).await?;
    Ok(vec![
        run.row(MeasureId::TtfbP50, |s| s.micros(0.5)),
        run.row(MeasureId::TtfbP99, |s| s.micros(0.99)),
        run.row(MeasureId::TtfbStalls, |s| s.stalls as f64),
    ])
}

pub(crate) async fn worker_latency(ctx: &Ctx) -> Result<Vec<Measure>> {
    let run = interleaved(ctx, Probe::Json, ctx.plan.latency, Via::Worker).await?;
    Ok(vec![
        run.row(MeasureId::WorkerLatencyP50, |s| s.micros(0.5)),
        run.row(MeasureId::WorkerLatencyP99, |s| s.micros(0.99)),
    ])
}

pub(crate) async fn worker_plugins(ctx: &Ctx) -> Result<Vec<Measure>> {
    let run = interleaved(ctx, Probe::Json, ctx.plan.latency, Via::Worker).await?;
    Ok(vec![
        run.row(MeasureId::WorkerLatencyAtofP99, |s| s.micros(0.99)),
    ])
}

pub(crate) async fn worker_ttfb(ctx: &Ctx) -> Result<Vec<Measure>> {
    let run = interleaved(ctx, Probe::StreamFirstByte, ctx.plan.ttfb, Via::Worker).await?;
    Ok(vec![
        run.row(MeasureId::WorkerTtfbP50, |s| s.micros(0.5)),
        run.row(MeasureId::WorkerTtfbP99, |s| s.micros(0.99)),
        run.row(MeasureId::WorkerTtfbStalls, |s| s.stalls as f64),
    ])
}

pub(crate) async fn worker_body(ctx: &Ctx) -> Result<Vec<Measure>> {
    let run = interleaved(ctx, Probe::LargeJson, ctx.plan.large_body, Via::Worker).await?;
    Ok(vec![
        run.row(MeasureId::WorkerBodyP50, |s| s.millis(0.5)),
        run.row(MeasureId::WorkerBodyP99, |s| s.millis(0.99)),
    ])
}

/// What one throughput block produced.
#[derive(Debug, Default)]
struct Block {
    samples: Samples,
    completed: u64,
    elapsed: Duration,
}

/// Every connection sends `probe`'s requests back to back until `length` has passed.
async fn run_block(conns: &mut Vec<Conn>, length: Duration, probe: Probe) -> Result<Block> {
    let started = Instant::now();
    let deadline = started + length;
    let mut tasks = JoinSet::new();
    for mut conn in conns.drain(..) {
        tasks.spawn(async move {
            let mut samples = Samples::new();
            while Instant::now() < deadline {
                let elapsed = conn.exchange(probe).await?;
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

/// What the throughput rounds of every path produced.
#[derive(Debug)]
struct Throughput {
    totals: Sides<Block>,
    with_peer: bool,
    cpu: Option<CpuPerRequest>,
    /// Times relayd's threads, and the peer's, were preempted per request.
    preemptions: (Option<f64>, Option<f64>),
}

impl Throughput {
    fn rate(block: &Block) -> f64 {
        block.completed as f64 / block.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    fn counts(&self) -> SampleCounts {
        SampleCounts {
            direct: self.totals.direct.completed,
            relay: self.totals.relay.completed,
            peer: self.with_peer.then_some(self.totals.peer.completed),
        }
    }
}

/// `plan.throughput_concurrency` connections per path, a warm-up block each, then rounds of one block per path in rotating order.
async fn throughput_rounds(ctx: &Ctx, via: Via) -> Result<Throughput> {
    let plan = &ctx.plan;
    let sides = ctx.sides(via);
    let probe = ctx.throughput_probe;
    let before = match via {
        Via::PassThrough => None,
        Via::Worker => Some(destinations(ctx).await?),
    };
    let mut conns = Sides::<Vec<Conn>>::default();
    for side in &sides {
        for _ in 0..plan.throughput_concurrency {
            conns.get_mut(*side).push(ctx.conn(*side, via).await?);
        }
    }
    let mut sent = 0;
    for side in &sides {
        let warmup = run_block(conns.get_mut(*side), plan.throughput_warmup, probe)
            .await
            .with_context(|| format!("warming up {side:?}"))?;
        if *side == Side::Relay {
            sent += warmup.completed;
        }
    }
    let cpu_before = ctx.cpu_ticks(via);
    let preempted_before = ctx.preemptions(via);
    let mut totals = Sides::<Block>::default();
    for round in 0..plan.throughput_rounds {
        for side in round_order(round, &sides) {
            let block = run_block(conns.get_mut(side), plan.throughput_block, probe)
                .await
                .with_context(|| format!("throughput block on {side:?}"))?;
            let total = totals.get_mut(side);
            total.samples.merge(&block.samples)?;
            total.completed += block.completed;
            total.elapsed += block.elapsed;
        }
    }
    let cpu_after = ctx.cpu_ticks(via);
    let preempted_after = ctx.preemptions(via);
    if let Some(before) = before {
        sent += totals.relay.completed;
        before.ensure_all_went_to_worker(&destinations(ctx).await?, sent)?;
    }
    let cpu = cpu_per_request(
        cpu_before,
        cpu_after,
        totals.relay.completed,
        totals.peer.completed,
    );
    let preemptions = Counters::per_request(
        preempted_before,
        preempted_after,
        totals.relay.completed,
        totals.peer.completed,
    );
    Ok(Throughput {
        with_peer: sides.contains(&Side::Peer),
        totals,
        cpu,
        preemptions,
    })
}

pub(crate) async fn throughput(ctx: &Ctx) -> Result<Vec<Measure>> {
    let run = throughput_rounds(ctx, Via::PassThrough).await?;
    let t = &run.totals;
    let peer = |figure: f64| run.with_peer.then_some(figure);
    let direct = |figure: f64| ctx.direct.is_some().then_some(figure);
    let mut rows = vec![
        Measure::new(
            MeasureId::ThroughputRate,
            Throughput::rate(&t.relay),
            direct(Throughput::rate(&t.direct)),
        )
        .with_peer(peer(Throughput::rate(&t.peer)))
        .with_cpu(run.cpu)
        .with_samples(run.counts()),
        Measure::new(
            MeasureId::ThroughputP99,
            t.relay.samples.millis(0.99),
            direct(t.direct.samples.millis(0.99)),
        )
        .with_peer(peer(t.peer.samples.millis(0.99)))
        .with_cpu(run.cpu)
        .with_samples(run.counts()),
    ];
    if let Some(cpu) = run.cpu {
        rows.push(
            Measure::relay_only(MeasureId::CpuPassThrough, cpu.relay_us)
                .with_peer(cpu.peer_us)
                .with_cpu(run.cpu)
                .with_samples(run.counts()),
        );
    }
    if let (Some(relay), peer) = run.preemptions {
        rows.push(
            Measure::relay_only(MeasureId::PreemptionsPassThrough, relay)
                .with_peer(peer)
                .with_samples(run.counts()),
        );
    }
    if let Some(pid) = ctx.relay_pid {
        let rss = rss_median(pid, &ctx.plan).await?;
        rows.push(Measure::relay_only(
            MeasureId::RelaydRssAfterLoad,
            mebibytes(rss),
        ));
    }
    Ok(rows)
}

pub(crate) async fn worker_throughput(ctx: &Ctx) -> Result<Vec<Measure>> {
    let run = throughput_rounds(ctx, Via::Worker).await?;
    let t = &run.totals;
    let mut rows = vec![
        Measure::compare(
            MeasureId::WorkerThroughputRate,
            Throughput::rate(&t.relay),
            Throughput::rate(&t.direct),
        )
        .with_cpu(run.cpu)
        .with_samples(run.counts()),
    ];
    if let Some(cpu) = run.cpu {
        rows.push(
            Measure::relay_only(MeasureId::CpuWorker, cpu.relay_us)
                .with_cpu(run.cpu)
                .with_samples(run.counts()),
        );
    }
    Ok(rows)
}
