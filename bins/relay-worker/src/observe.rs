//! The observability component at work: observations from the request path go onto a
//! bounded queue (never waited on), one task runs the ATOF recorder over them and hands its
//! records to the sinks, as JSON lines and, with an OTLP exporter, as spans.
//! A terminal hook waits for the file sinks only (`SinkHandle::flush_local`).

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use relay_plugins::Redactor;
use relay_plugins::atof::{self, Entropy, Observation, Recorder, RecorderConfig};
use relay_plugins::config::ObservabilityConfig;
use relay_proxy::worker::Observer;
use relay_sinks::{SinkContext, SinkError, SinkHandle, Sinks, SinksConfig, SpanMapper};
use ring::rand::{SecureRandom, SystemRandom};
use tokio::sync::{mpsc, oneshot};

/// Observations waiting for the recorder; beyond, new ones are dropped and counted.
const QUEUE: usize = 16_384;
/// How long the last records may take to leave when the worker stops.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(2);
/// Drops are logged at most this often.
const DROP_LOG_INTERVAL: Duration = Duration::from_secs(10);

enum Msg {
    Observe(SystemTime, Box<Observation>),
    /// Write what is buffered in the local sinks by this instant, then answer.
    Flush(tokio::time::Instant, oneshot::Sender<()>),
    Shutdown(oneshot::Sender<()>),
}

/// The [`Observer`] the worker's plugin host records through.
pub(crate) struct Recording {
    tx: mpsc::Sender<Msg>,
    dropped: AtomicU64,
    started: Instant,
    /// Milliseconds after `started` of the last drop warning (0: none yet).
    last_drop_log_ms: AtomicU64,
}

impl Recording {
    /// Starts the sinks of `config` and the recorder task. Must run inside the runtime.
    pub(crate) fn start(
        config: &ObservabilityConfig,
        redactor: Option<Arc<Redactor>>,
        ctx: &SinkContext,
    ) -> Result<Arc<Recording>, SinkError> {
        let sinks = Sinks::start(&SinksConfig::from_component(config), ctx)?;
        let redactor: Box<dyn atof::Redactor> = match redactor {
            Some(redactor) => Box::new(Redacting(redactor)),
            None => Box::new(atof::NoRedaction),
        };
        let recorder = Recorder::new(
            RecorderConfig {
                capture_content: config.capture_content,
                ..RecorderConfig::default()
            },
            Box::new(SystemEntropy(SystemRandom::new())),
            redactor,
        );
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(rx, recorder, sinks));
        Ok(Arc::new(Recording {
            tx,
            dropped: AtomicU64::new(0),
            started: Instant::now(),
            last_drop_log_ms: AtomicU64::new(0),
        }))
    }

    /// Closes every open scope, writes the last records and stops the sinks.
    pub(crate) async fn shutdown(&self) {
        let (ack, done) = oneshot::channel();
        if self.tx.send(Msg::Shutdown(ack)).await.is_ok() {
            let _ = tokio::time::timeout(SHUTDOWN_DEADLINE * 2, done).await;
        }
    }
}

impl Observer for Recording {
    fn observe(&self, at: SystemTime, observation: Observation) {
        if self
            .tx
            .try_send(Msg::Observe(at, Box::new(observation)))
            .is_err()
        {
            let total = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX) + 1;
            let last = self.last_drop_log_ms.load(Ordering::Relaxed);
            let due = last == 0 || now.saturating_sub(last) >= DROP_LOG_INTERVAL.as_millis() as u64;
            if due
                && self
                    .last_drop_log_ms
                    .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                tracing::warn!(
                    event = "observation_records_dropped",
                    dropped_total = total,
                    "observability records dropped: the recorder is behind"
                );
            }
        }
    }

    fn flush(&self, deadline: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let tx = self.tx.clone();
        // One deadline for the whole, from the call: a full queue delays the ask, not the
        // answer.
        let until = tokio::time::Instant::now() + deadline;
        Box::pin(async move {
            let (ack, done) = oneshot::channel();
            let asked = tokio::time::timeout_at(until, tx.send(Msg::Flush(until, ack)));
            if matches!(asked.await, Ok(Ok(()))) {
                let _ = tokio::time::timeout_at(until, done).await;
            }
        })
    }
}

async fn run(mut rx: mpsc::Receiver<Msg>, mut recorder: Recorder, sinks: SinkHandle) {
    let mut spans = sinks.exports_spans().then(SpanMapper::new);
    while let Some(msg) = rx.recv().await {
        match msg {
            Msg::Observe(at, observation) => {
                recorder.handle(at, *observation);
                drain(&mut recorder, &sinks, spans.as_mut());
            }
            Msg::Flush(until, ack) => {
                let left = until.saturating_duration_since(tokio::time::Instant::now());
                let _ = sinks.flush_local(left).await;
                let _ = ack.send(());
            }
            Msg::Shutdown(ack) => {
                recorder.handle(SystemTime::now(), Observation::Shutdown);
                drain(&mut recorder, &sinks, spans.as_mut());
                let _ = sinks.shutdown(SHUTDOWN_DEADLINE).await;
                let _ = ack.send(());
                return;
            }
        }
    }
}

fn drain(recorder: &mut Recorder, sinks: &SinkHandle, mut spans: Option<&mut SpanMapper>) {
    let lines = sinks.writes_records();
    while let Some(record) = recorder.poll_record() {
        if lines {
            let mut line = Vec::with_capacity(512);
            record.write_json_line(&mut line);
            sinks.record(line);
        }
        if let Some(span) = spans.as_deref_mut().and_then(|m| m.on_record(&record)) {
            sinks.span(span);
        }
    }
}

/// The component's redactor, applied to every piece of content before it enters a record.
struct Redacting(Arc<Redactor>);

impl atof::Redactor for Redacting {
    fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.0.redact_str(text)
    }
}

struct SystemEntropy(SystemRandom);

impl Entropy for SystemEntropy {
    fn uuid_bytes(&mut self) -> [u8; 10] {
        let mut bytes = [0u8; 10];
        // The system generator does not fail on the platforms Relay runs on; if it ever did,
        // uuids would still be unique per millisecond only by their time part, so fall back
        // to a counter-free variation of the time rather than stopping the recorder.
        if self.0.fill(&mut bytes).is_err() {
            let nanos = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            bytes[..4].copy_from_slice(&nanos.to_le_bytes());
        }
        bytes
    }
}

/// The OS user name of this process, for a file sink's `{user}`: the rule
/// `relay-doctor` names the record file with too.
pub(crate) fn os_user_name() -> String {
    relay_proxy::plugins::sink_user_name(|variable| std::env::var(variable).ok())
}

#[cfg(test)]
mod tests;
