//! The open-streams measure of SPEC §12: thousands of concurrent SSE streams from the paced stand-in, directly and then through relayd, every frame checked for arrival, order and lateness.
//!
//! The stand-in writes one SSE event per `pace`, so a frame's delay is how much longer than `pace` it took to follow the one before; a lost frame shows as a gap of twice the pace, and a frame later than [`LATE_SLACK`] past its pace is late.
//! Event names must come in the order of the Anthropic Messages stream (`message_start`, `content_block_start`, deltas, …; `ping` anywhere), so a frame delivered out of order is caught even where the gaps look fine.
//! The two paths run one after the other, not interleaved: holding 5,000 streams is one long block, and each path's block is as long as the other's.

#![expect(
    clippy::disallowed_methods,
    reason = "benchmark tooling: a panic ends the run, so a poisoned lock is read as is"
)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use http::header::HeaderValue;
use http_body_util::BodyExt as _;
use relay_testkit::measures::{Measure, MeasureId, SampleCounts};
use relay_testkit::procfs::{MachineTicks, ticks_to_duration};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

use crate::conn::{Conn, Probe};
use crate::limits::raise_open_file_limit_of;
use crate::metrics::{destinations, open_streams_gauge, rss_bytes, wait_for_quiet};
use crate::samples::Samples;
use crate::{Ctx, Report, Via};

/// A frame this much later than its pace is late.
pub(crate) const LATE_SLACK: Duration = Duration::from_millis(100);
/// How long opening every stream of one path may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(120);
/// How long relayd may take to report no open streams after they close.
const QUIET_TIMEOUT: Duration = Duration::from_secs(30);
/// Streams held directly to the stand-in beside those through relayd, and judged apart:
/// when they too have late frames, a stall was outside relayd (the stand-in, this load
/// generator or the machine), which the frames through relayd alone cannot tell.
const CONTROL_STREAMS: usize = 50;

/// The rank of an Anthropic Messages event in its stream; `None` for `ping` and unknown names, which may come anywhere.
pub(crate) fn event_rank(name: &str) -> Option<u8> {
    Some(match name {
        "message_start" => 0,
        "content_block_start" => 1,
        "content_block_delta" => 2,
        "content_block_stop" => 3,
        "message_delta" => 4,
        "message_stop" => 5,
        _ => return None,
    })
}

/// The `event:` name of one SSE event's text.
pub(crate) fn event_name(event: &str) -> Option<&str> {
    event
        .lines()
        .find_map(|line| line.strip_prefix("event:"))
        .map(str::trim)
}

/// Splits the complete events (ending in a blank line) off the front of `buffer`, leaving a partial one there.
pub(crate) fn take_events(buffer: &mut String) -> Vec<String> {
    let mut events = Vec::new();
    while let Some(end) = buffer.find("\n\n") {
        let event: String = buffer.drain(..end + 2).collect();
        events.push(event);
    }
    events
}

/// What one path's streams delivered.
#[derive(Debug, Default, Clone)]
pub(crate) struct FrameStats {
    /// Each frame's delay past its pace.
    pub(crate) delays: Samples,
    pub(crate) frames: u64,
    pub(crate) late: u64,
    pub(crate) out_of_order: u64,
    /// Streams with at least one late or out-of-order frame, or that ended while they were held.
    pub(crate) bad_streams: u64,
    /// When the first and the last late frame arrived.
    pub(crate) late_window: Option<(Instant, Instant)>,
}

/// One stream's view of its frames.
#[derive(Debug)]
pub(crate) struct StreamCheck {
    pace: Duration,
    last: Option<Instant>,
    rank: u8,
    bad: bool,
}

impl StreamCheck {
    pub(crate) fn new(pace: Duration) -> StreamCheck {
        StreamCheck {
            pace,
            last: None,
            rank: 0,
            bad: false,
        }
    }

    /// Checks one event that arrived at `at`, recording into `stats`.
    pub(crate) fn frame(&mut self, event: &str, at: Instant, stats: &mut FrameStats) {
        stats.frames += 1;
        let mut bad = false;
        if let Some(rank) = event_name(event).and_then(event_rank) {
            if rank < self.rank {
                stats.out_of_order += 1;
                bad = true;
            }
            self.rank = rank;
        }
        if let Some(last) = self.last {
            let delay = at.saturating_duration_since(last).saturating_sub(self.pace);
            stats.delays.record(delay);
            if delay > LATE_SLACK {
                stats.late += 1;
                bad = true;
                let (first, last) = stats.late_window.unwrap_or((at, at));
                stats.late_window = Some((first.min(at), last.max(at)));
            }
        }
        self.last = Some(at);
        if bad && !self.bad {
            self.bad = true;
            stats.bad_streams += 1;
        }
    }
}

/// What one path's hold produced.
#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) stats: FrameStats,
    /// Streams that ended while they were held.
    pub(crate) ended: u64,
    /// The RSS of `sample_pid` in the middle of the hold, with every stream open.
    pub(crate) rss: Option<u64>,
    /// When the first stream began to open.
    pub(crate) started: Instant,
    /// How long after `started` the last stream was open.
    pub(crate) all_open: Duration,
    /// CPU time the hypervisor gave to other machines during the hold (`/proc/stat`'s steal), where it is known.
    pub(crate) steal: Option<Duration>,
    /// What the [`CONTROL_STREAMS`] held directly to the stand-in at the same time delivered, when there were any.
    pub(crate) control: Option<FrameStats>,
}

impl Hold {
    /// When the first and the last late frame arrived, in milliseconds after the first stream began to open.
    fn late_between_ms(&self) -> Option<[u64; 2]> {
        let since = |at: Instant| at.saturating_duration_since(self.started).as_millis() as u64;
        self.stats
            .late_window
            .map(|(first, last)| [since(first), since(last)])
    }

    /// What the JSON says of one path's hold: the frame counts, and when opening ended and late frames came, in milliseconds after the first stream began to open.
    pub(crate) fn detail(&self) -> serde_json::Value {
        let stats = &self.stats;
        serde_json::json!({
            "frames": stats.frames,
            "late": stats.late,
            "out_of_order": stats.out_of_order,
            "bad_streams": stats.bad_streams,
            "ended_early": self.ended,
            "all_open_ms": self.all_open.as_millis() as u64,
            "late_between_ms": self.late_between_ms(),
            "steal_ms": self.steal.map(|steal| steal.as_millis() as u64),
            "control": self.control.as_ref().map(|control| serde_json::json!({
                "streams": CONTROL_STREAMS,
                "frames": control.frames,
                "late": control.late,
            })),
        })
    }

    /// A sentence on when this path's late frames came, for a run to explain its own miss; `None` without late frames.
    pub(crate) fn late_note(&self, path: &str) -> Option<String> {
        let [first, last] = self.late_between_ms()?;
        let steal = match self.steal {
            Some(steal) => format!(
                "the hypervisor took {} ms of CPU time from this machine during the hold",
                steal.as_millis()
            ),
            None => "how much CPU time the hypervisor took is unknown".to_owned(),
        };
        let control = match &self.control {
            Some(control) if control.late > 0 => format!(
                "; {} of the {} frames of {CONTROL_STREAMS} streams held directly to the stand-in at the same time were late too, so the stall was outside relayd",
                control.late, control.frames
            ),
            Some(control) => format!(
                "; none of the {} frames of {CONTROL_STREAMS} streams held directly to the stand-in at the same time was late, so the stall was relayd's",
                control.frames
            ),
            None => String::new(),
        };
        Some(format!(
            "open streams {path}: {} late frame(s) arrived between {} and {} ms after the first stream began to open; every stream was open at {} ms; {steal}{control}",
            self.stats.late,
            first,
            last,
            self.all_open.as_millis(),
        ))
    }
}

/// One held stream's task: opens it (after a permit of `gate`), says so on `opened` when
/// given one, and checks its frames into `stats` until it is aborted; a stream that ends
/// before that is counted in `ended` when given one.
struct Held {
    addr: SocketAddr,
    token: Option<HeaderValue>,
    pace: Duration,
    gate: Arc<Semaphore>,
    stats: Arc<Mutex<FrameStats>>,
    ended: Option<Arc<AtomicU64>>,
    opened: Option<mpsc::Sender<Result<()>>>,
}

impl Held {
    async fn run(self) {
        let opening = async {
            let _permit = self.gate.acquire().await.context("the open gate closed")?;
            let mut conn = Conn::open(self.addr).await?;
            if let Some(token) = self.token {
                conn = conn.with_token(token);
            }
            let body = conn.send(Probe::HeldStream).await?.into_body();
            Ok::<_, anyhow::Error>((conn, body))
        };
        let (conn, mut body) = match opening.await {
            Ok(open) => open,
            Err(error) => {
                if let Some(opened) = &self.opened {
                    let _ = opened.send(Err(error)).await;
                }
                return;
            }
        };
        if let Some(opened) = &self.opened {
            let _ = opened.send(Ok(())).await;
        }
        let mut check = StreamCheck::new(self.pace);
        let mut buffer = String::new();
        while let Some(Ok(frame)) = body.frame().await {
            let at = Instant::now();
            let Some(data) = frame.data_ref() else {
                continue;
            };
            buffer.push_str(&String::from_utf8_lossy(data));
            let events = take_events(&mut buffer);
            let mut stats = self.stats.lock().unwrap_or_else(PoisonError::into_inner);
            for event in &events {
                check.frame(event, at, &mut stats);
            }
        }
        // The stream ended or broke while it was meant to stay open: its remaining frames are lost.
        if let Some(ended) = &self.ended {
            ended.fetch_add(1, Ordering::Relaxed);
        }
        if !check.bad {
            self.stats
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .bad_streams += 1;
        }
        drop(conn);
    }
}

/// Opens `n` streams to `addr` (at most `concurrency` opening at a time), checks their frames while they are held for `hold` after the last one opened (frames during the opening count too), samples the RSS of `sample_pid` in the middle of that, and closes them.
/// With `control`, [`CONTROL_STREAMS`] more are held directly to that stand-in at the same time and judged apart.
#[expect(
    clippy::too_many_arguments,
    reason = "one call per path, each argument named at it"
)]
pub(crate) async fn hold_and_check(
    addr: SocketAddr,
    n: usize,
    concurrency: usize,
    pace: Duration,
    hold: Duration,
    sample_pid: Option<u32>,
    token: Option<HeaderValue>,
    control: Option<SocketAddr>,
) -> Result<Hold> {
    let started = Instant::now();
    let ticks_before = MachineTicks::read();
    let gate = Arc::new(Semaphore::new(concurrency.max(1)));
    let stats = Arc::new(Mutex::new(FrameStats::default()));
    let ended = Arc::new(AtomicU64::new(0));
    let (opened_tx, mut opened_rx) = mpsc::channel::<Result<()>>(n.max(1));
    let mut tasks = JoinSet::new();
    let control_stats = control.map(|control| {
        let stats = Arc::new(Mutex::new(FrameStats::default()));
        let gate = Arc::new(Semaphore::new(CONTROL_STREAMS));
        for _ in 0..CONTROL_STREAMS {
            let held = Held {
                addr: control,
                token: None,
                pace,
                gate: gate.clone(),
                stats: stats.clone(),
                ended: None,
                opened: None,
            };
            tasks.spawn(held.run());
        }
        stats
    });
    for _ in 0..n {
        let held = Held {
            addr,
            token: token.clone(),
            pace,
            gate: gate.clone(),
            stats: stats.clone(),
            ended: Some(ended.clone()),
            opened: Some(opened_tx.clone()),
        };
        tasks.spawn(held.run());
    }
    drop(opened_tx);
    let deadline = tokio::time::Instant::now() + OPEN_TIMEOUT;
    for opened in 0..n {
        match tokio::time::timeout_at(deadline, opened_rx.recv()).await {
            Ok(Some(Ok(()))) => {}
            Ok(Some(Err(error))) => {
                return Err(error.context(format!("opening stream {}", opened + 1)));
            }
            Ok(None) => bail!("the stream tasks stopped after {opened} of {n}"),
            Err(_) => bail!("only {opened} of {n} streams opened within {OPEN_TIMEOUT:?}"),
        }
    }
    let all_open = started.elapsed();
    tokio::time::sleep(hold / 2).await;
    let rss = sample_pid.map(rss_bytes).transpose()?;
    tokio::time::sleep(hold - hold / 2).await;
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    let steal = ticks_before
        .zip(MachineTicks::read())
        .map(|(before, after)| ticks_to_duration(after.steal.saturating_sub(before.steal)));
    let ended = ended.load(Ordering::Relaxed);
    let unwrap = |stats: Arc<Mutex<FrameStats>>| {
        Arc::try_unwrap(stats)
            .map_err(|_| anyhow::anyhow!("a stream task outlived the hold"))
            .map(|stats| stats.into_inner().unwrap_or_else(PoisonError::into_inner))
    };
    Ok(Hold {
        stats: unwrap(stats)?,
        ended,
        rss,
        started,
        all_open,
        steal,
        control: control_stats.map(unwrap).transpose()?,
    })
}

/// The rows of one way through relayd.
struct Ids {
    streams: MeasureId,
    delay: MeasureId,
    late: MeasureId,
    rss: Option<MeasureId>,
}

/// The scenario in pass-through: `plan.open_streams` streams directly to the paced stand-in, then as many through relayd, with relayd's RSS sampled while they are open.
pub(crate) async fn open_streams(ctx: &Ctx, report: &mut Report) -> Result<Vec<Measure>> {
    let ids = Ids {
        streams: MeasureId::OpenStreams,
        delay: MeasureId::OpenStreamsFrameDelayP99,
        late: MeasureId::OpenStreamsLateFrames,
        rss: Some(MeasureId::OpenStreamsRssPerStream),
    };
    streams_on(ctx, report, Via::PassThrough, ctx.plan.open_streams, ids).await
}

/// The scenario through the worker: `plan.worker_open_streams` streams with the route credential, every one proven to have gone to the worker.
pub(crate) async fn worker_open_streams(ctx: &Ctx, report: &mut Report) -> Result<Vec<Measure>> {
    let ids = Ids {
        streams: MeasureId::WorkerOpenStreams,
        delay: MeasureId::WorkerOpenStreamsFrameDelayP99,
        late: MeasureId::WorkerOpenStreamsLateFrames,
        rss: None,
    };
    streams_on(ctx, report, Via::Worker, ctx.plan.worker_open_streams, ids).await
}

async fn streams_on(
    ctx: &Ctx,
    report: &mut Report,
    via: Via,
    n: usize,
    ids: Ids,
) -> Result<Vec<Measure>> {
    let plan = &ctx.plan;
    let pid = ctx
        .relay_pid
        .context("the open-streams scenario needs --relay-pid")?;
    let paced = ctx
        .paced
        .context("the open-streams scenario needs --paced, the paced stand-in's address")?;
    if let Some(stand_in) = ctx.stream_stand_in_pid
        && let Err(error) = raise_open_file_limit_of(stand_in)
    {
        report.note(format!(
            "could not raise the paced stand-in's open-file limit: {error:#}"
        ));
    }
    let pace = ctx.stream_pace;
    let direct = hold_and_check(
        paced,
        n,
        plan.stream_open_concurrency,
        pace,
        plan.open_streams_hold,
        None,
        None,
        None,
    )
    .await
    .context("holding streams open directly")?;
    let (token, before) = match via {
        Via::PassThrough => (None, None),
        Via::Worker => (Some(ctx.token()?.clone()), Some(destinations(ctx).await?)),
    };
    let idle = rss_bytes(pid)?;
    let relay = hold_and_check(
        ctx.relay,
        n,
        plan.stream_open_concurrency,
        pace,
        plan.open_streams_hold,
        Some(pid),
        token,
        Some(paced),
    )
    .await
    .context("holding streams open through relayd")?;
    if let Some(before) = before {
        before.ensure_all_went_to_worker(&destinations(ctx).await?, n as u64)?;
    }
    let with_streams = relay.rss.context("relayd's RSS was not sampled")?;
    let through = match via {
        Via::PassThrough => "through relayd",
        Via::Worker => "through the worker",
    };
    for note in [direct.late_note("directly"), relay.late_note(through)]
        .into_iter()
        .flatten()
    {
        report.note(note);
    }
    // A fresh connection: relayd may have closed an idle one while it held thousands of streams.
    let mut metrics = Conn::open(ctx.relay).await?;
    let gauge = open_streams_gauge(&metrics.metrics_text().await?);
    if !wait_for_quiet(&mut metrics, QUIET_TIMEOUT).await? {
        report.note(format!(
            "relayd still reported open streams {QUIET_TIMEOUT:?} after the open-streams measure"
        ));
    }
    let detail = serde_json::json!({
        "streams": n,
        "pace_ms": pace.as_millis() as u64,
        "hold_ms": plan.open_streams_hold.as_millis() as u64,
        "late_slack_ms": LATE_SLACK.as_millis() as u64,
        "direct": direct.detail(),
        "relay": relay.detail(),
        "relay_open_streams_after_hold": gauge,
        "rss_before_bytes": idle,
        "rss_with_streams_bytes": with_streams,
    });
    match via {
        Via::PassThrough => report.open_streams = Some(detail),
        Via::Worker => report.worker_open_streams = Some(detail),
    }
    let (direct, relay) = (direct.stats, relay.stats);
    let counts = SampleCounts {
        direct: direct.frames,
        relay: relay.frames,
        peer: None,
    };
    let good = |stats: &FrameStats| n as f64 - stats.bad_streams as f64;
    let per_stream_kib = (with_streams as f64 - idle as f64) / n.max(1) as f64 / 1024.0;
    let mut rows = vec![
        Measure::compare(ids.streams, good(&relay), good(&direct)).with_samples(counts),
        Measure::compare(
            ids.delay,
            relay.delays.millis(0.99),
            direct.delays.millis(0.99),
        )
        .with_samples(counts),
        Measure::compare(
            ids.late,
            (relay.late + relay.out_of_order) as f64,
            (direct.late + direct.out_of_order) as f64,
        )
        .with_samples(counts),
    ];
    rows.extend(ids.rss.map(|id| Measure::relay_only(id, per_stream_kib)));
    Ok(rows)
}
