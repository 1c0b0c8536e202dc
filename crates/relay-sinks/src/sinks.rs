//! The handle the worker holds: one bounded queue per sink, filled with `try_send` so the
//! request path never waits, drained by one task (or, for files, one thread) per sink.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::config::{SinkConfig, SinkContext, SinksConfig};
use crate::drops::{Counters, SinkStats};
use crate::error::SinkError;
use crate::file::FileSink;
use crate::http::{
    JSON_LINES, Poster, encode_json_lines, no_rejections, parse_url, resolve_headers, run_batches,
};
use crate::otlp::{OTLP_PROTOBUF, SpanData, encode_spans, rejected_spans, traces_url};

/// What travels on a sink's queue.
#[derive(Debug)]
pub(crate) enum Msg<T> {
    /// A record or a span.
    Item(T),
    /// Answer once everything queued before has been written or given up.
    Flush(oneshot::Sender<()>),
    /// Like `Flush`, then stop.
    Shutdown(oneshot::Sender<()>),
}

/// The sinks did not finish within the deadline; what they had not written by then may be
/// lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("observability sinks did not flush within {deadline:?}")]
pub struct FlushTimedOut {
    /// The deadline that ran out.
    pub deadline: Duration,
}

/// Starts the sinks of one observability component.
#[derive(Debug)]
pub struct Sinks;

impl Sinks {
    /// Opens the files, resolves headers and spawns one drain per sink. Must be called
    /// inside a tokio runtime. A sink that cannot start is an activation error.
    pub fn start(config: &SinksConfig, ctx: &SinkContext) -> Result<SinkHandle, SinkError> {
        let mut records = Vec::with_capacity(config.sinks.len());
        let mut tasks = Vec::new();
        let mut tls = ctx.tls.clone();
        let mut tls = move || -> Result<Arc<rustls::ClientConfig>, SinkError> {
            match &tls {
                Some(tls) => Ok(tls.clone()),
                None => {
                    let made = crate::http::default_tls()?;
                    tls = Some(made.clone());
                    Ok(made)
                }
            }
        };
        for sink in &config.sinks {
            match sink {
                SinkConfig::File(file) => {
                    let writer = FileSink::open(file, &ctx.user, &ctx.fingerprint)?;
                    tracing::debug!(path = %writer.path().display(), "atof file sink opened");
                    let (tx, rx) = mpsc::channel(file.queue_capacity.max(1));
                    let counters = Arc::new(Counters::new("file"));
                    let drain = counters.clone();
                    std::thread::Builder::new()
                        .name("relay-atof-file".to_owned())
                        .spawn(move || writer.run(rx, drain))
                        .map_err(|source| SinkError::SpawnWriter { source })?;
                    records.push(Lane {
                        tx,
                        counters,
                        local: true,
                    });
                }
                SinkConfig::Http(http) => {
                    let uri = parse_url(&http.url)?;
                    let headers = resolve_headers(&http.headers, &http.header_env, |var| {
                        std::env::var(var).ok()
                    })?;
                    let poster = Poster::new(
                        tls()?,
                        uri,
                        headers,
                        JSON_LINES,
                        Duration::from_millis(http.delivery.timeout_ms),
                        no_rejections,
                    );
                    let (tx, rx) = mpsc::channel(http.delivery.queue_capacity.max(1));
                    let counters = Arc::new(Counters::new("http"));
                    tasks.push(tokio::spawn(run_batches(
                        rx,
                        http.delivery.clone(),
                        poster,
                        encode_json_lines,
                        counters.clone(),
                    )));
                    records.push(Lane {
                        tx,
                        counters,
                        local: false,
                    });
                }
            }
        }
        let spans = match &config.otlp {
            None => None,
            Some(otlp) => {
                let url = traces_url(&otlp.endpoint);
                let uri = parse_url(&url)?;
                let headers = resolve_headers(&otlp.headers, &otlp.header_env, |var| {
                    std::env::var(var).ok()
                })?;
                let poster = Poster::new(
                    tls()?,
                    uri,
                    headers,
                    OTLP_PROTOBUF,
                    Duration::from_millis(otlp.delivery.timeout_ms),
                    rejected_spans,
                );
                let (tx, rx) = mpsc::channel(otlp.delivery.queue_capacity.max(1));
                let counters = Arc::new(Counters::new("otlp"));
                let service_name = otlp.service_name.clone();
                tasks.push(tokio::spawn(run_batches(
                    rx,
                    otlp.delivery.clone(),
                    poster,
                    move |spans: &[SpanData]| encode_spans(&service_name, spans),
                    counters.clone(),
                )));
                Some(Lane {
                    tx,
                    counters,
                    local: false,
                })
            }
        };
        Ok(SinkHandle {
            inner: Arc::new(Inner {
                records,
                spans,
                stopped: AtomicBool::new(false),
                tasks: Mutex::new(tasks),
            }),
        })
    }
}

/// The worker's side of the sinks: cheap to clone, never blocking.
#[derive(Debug, Clone)]
pub struct SinkHandle {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    records: Vec<Lane<Bytes>>,
    spans: Option<Lane<SpanData>>,
    /// Set by `shutdown`: later items are counted as dropped instead of queued behind the
    /// stop.
    stopped: AtomicBool,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

#[derive(Debug)]
struct Lane<T> {
    tx: mpsc::Sender<Msg<T>>,
    counters: Arc<Counters>,
    /// A file on this machine, as opposed to a collector or exporter across the network.
    local: bool,
}

impl<T> Lane<T> {
    fn offer(&self, item: T, stopped: bool) {
        if stopped {
            self.counters.add_dropped(1, "stopped");
            return;
        }
        match self.tx.try_send(Msg::Item(item)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => self.counters.add_dropped(1, "queue_full"),
            Err(mpsc::error::TrySendError::Closed(_)) => self.counters.add_dropped(1, "stopped"),
        }
    }

    /// Asks the drain to send what it holds now, without waiting for it or for room in its
    /// queue (a full queue is being sent anyway).
    fn nudge(&self) {
        let (ack, _) = oneshot::channel();
        let _ = self.tx.try_send(Msg::Flush(ack));
    }

    async fn request(&self, shutdown: bool) -> Option<oneshot::Receiver<()>> {
        let (ack, done) = oneshot::channel();
        let msg = if shutdown {
            Msg::Shutdown(ack)
        } else {
            Msg::Flush(ack)
        };
        self.tx.send(msg).await.ok().map(|()| done)
    }
}

impl SinkHandle {
    /// Queues one serialised ATOF record (one JSON object, with or without its newline) for
    /// every record sink. Never waits: a full queue drops the record and counts it.
    pub fn record(&self, line: impl Into<Bytes>) {
        let line = line.into();
        let stopped = self.inner.stopped.load(Ordering::Relaxed);
        for lane in &self.inner.records {
            lane.offer(line.clone(), stopped);
        }
    }

    /// Queues one finished span for the OTLP exporter, if there is one; never waits.
    pub fn span(&self, span: SpanData) {
        if let Some(lane) = &self.inner.spans {
            lane.offer(span, self.inner.stopped.load(Ordering::Relaxed));
        }
    }

    /// Whether an OTLP exporter runs, so the caller can skip building spans.
    pub fn exports_spans(&self) -> bool {
        self.inner.spans.is_some()
    }

    /// Whether any record sink runs, so the caller can skip serialising records.
    pub fn writes_records(&self) -> bool {
        !self.inner.records.is_empty()
    }

    /// Per sink, in configuration order (the OTLP exporter last): its kind and counts.
    pub fn stats(&self) -> Vec<(&'static str, SinkStats)> {
        let records = self.inner.records.iter().map(|l| &l.counters);
        records
            .chain(self.inner.spans.iter().map(|l| &l.counters))
            .map(|c| (c.kind, c.stats()))
            .collect()
    }

    /// Waits until everything queued before the call is written (files) or delivered or given
    /// up (network sinks), at most `deadline`.
    pub async fn flush(&self, deadline: Duration) -> Result<(), FlushTimedOut> {
        tokio::time::timeout(deadline, self.ask(false, |_| true))
            .await
            .map_err(|_| FlushTimedOut { deadline })
    }

    /// Waits, at most `deadline`, until the file sinks have written everything queued before
    /// the call, and asks the network sinks (http collectors, the OTLP exporter) to send their
    /// batch now without waiting for them. This is what a terminal hook (`Stop`,
    /// `SessionEnd`) waits for: a collector that is down retries for seconds, longer than
    /// Claude Code and Codex give a `SessionEnd` hook; the network sinks deliver the rest on
    /// their own and at shutdown.
    pub async fn flush_local(&self, deadline: Duration) -> Result<(), FlushTimedOut> {
        for lane in self.inner.records.iter().filter(|lane| !lane.local) {
            lane.nudge();
        }
        if let Some(lane) = &self.inner.spans {
            lane.nudge();
        }
        tokio::time::timeout(deadline, self.ask(false, |local| local))
            .await
            .map_err(|_| FlushTimedOut { deadline })
    }

    /// Flushes, then stops every sink; what is still running at `deadline` is cancelled.
    pub async fn shutdown(&self, deadline: Duration) -> Result<(), FlushTimedOut> {
        self.inner.stopped.store(true, Ordering::Relaxed);
        let outcome = tokio::time::timeout(deadline, self.ask(true, |_| true))
            .await
            .map_err(|_| FlushTimedOut { deadline });
        let tasks = relay_logging::sync::lock(&self.inner.tasks, "sink tasks")
            .map(|mut tasks| std::mem::take(&mut *tasks))
            .unwrap_or_default();
        for task in tasks {
            task.abort();
        }
        if outcome.is_err() {
            tracing::warn!(
                event = "sinks_flush_timed_out",
                ?deadline,
                "observability sinks did not complete in time"
            );
        }
        outcome
    }

    /// Asks every lane that `include` takes (by whether it is local) to flush, or to shut
    /// down, then waits until each one asked has done it: they work at the same time.
    async fn ask(&self, shutdown: bool, include: impl Fn(bool) -> bool) {
        let mut acks = Vec::new();
        for lane in self.inner.records.iter().filter(|lane| include(lane.local)) {
            acks.extend(lane.request(shutdown).await);
        }
        if let Some(lane) = self.inner.spans.as_ref().filter(|lane| include(lane.local)) {
            acks.extend(lane.request(shutdown).await);
        }
        for ack in acks {
            let _ = ack.await;
        }
    }
}

#[cfg(test)]
mod tests;
