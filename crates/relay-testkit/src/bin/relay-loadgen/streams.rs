//! relayd's and the worker's memory: idle after a warm-up, and with many streams held open through relayd.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use http_body_util::BodyExt as _;
use relay_testkit::measures::{Measure, MeasureId};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

use crate::conn::{Conn, Probe, first_data};
use crate::limits::raise_open_file_limit_of;
use crate::metrics::{destinations, open_streams_gauge, rss_median, wait_for_quiet};
use crate::{Ctx, MemoryDetail, Report};

/// How long to wait for relayd's `relay_open_streams` to return to zero after the held streams are dropped.
const QUIET_TIMEOUT: Duration = Duration::from_secs(20);
/// How long opening every held stream may take.
const OPEN_STREAMS_TIMEOUT: Duration = Duration::from_secs(90);

/// Streams held open by the memory scenario; dropping it closes them all.
#[derive(Debug)]
pub(crate) struct HeldStreams {
    pub(crate) tasks: JoinSet<()>,
    /// Streams that ended (or broke) while they were meant to be open.
    pub(crate) ended: Arc<AtomicUsize>,
}

impl HeldStreams {
    /// Closes every held stream (dropping a connection is how a client cancels).
    pub(crate) fn close(mut self) {
        self.tasks.abort_all();
    }
}

/// Opens `n` streams to relayd's paced upstream, at most `concurrency` being opened at a time, and returns once each has delivered its first body byte.
pub(crate) async fn hold_streams(
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

pub(crate) async fn memory(ctx: &Ctx, report: &mut Report) -> Result<Vec<Measure>> {
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
        Measure::relay_only(MeasureId::RelaydRssIdle, mebibytes(idle)),
        Measure::relay_only(MeasureId::RelaydRssStreams, mebibytes(with_streams)),
        Measure::relay_only(MeasureId::RelaydRssPerStream, per_stream_kib),
    ])
}

pub(crate) fn mebibytes(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

pub(crate) async fn worker_memory(ctx: &Ctx) -> Result<Vec<Measure>> {
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
        MeasureId::WorkerRssIdle,
        mebibytes(idle),
    )])
}
