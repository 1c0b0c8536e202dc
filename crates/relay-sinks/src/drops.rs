//! Counting what a sink writes and drops, and logging drops at most once per interval.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often a sink may log that it dropped records.
pub const DROP_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The most of a collector's message a log line carries.
const MAX_COLLECTOR_MESSAGE_CHARS: usize = 200;

/// What a sink has done so far (a snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SinkStats {
    /// Items written or delivered.
    pub written: u64,
    /// Items dropped: a full queue, or a batch given up after its retries.
    pub dropped: u64,
}

/// The shared counters of one sink: cheap atomics, touched once per item.
#[derive(Debug)]
pub(crate) struct Counters {
    pub(crate) kind: &'static str,
    written: AtomicU64,
    dropped: AtomicU64,
    log: DropLog,
    /// Its own interval for the batches a collector refused, which say why records went.
    refusals: DropLog,
}

impl Counters {
    pub(crate) fn new(kind: &'static str) -> Self {
        Counters {
            kind,
            written: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            log: DropLog::new(Instant::now(), DROP_LOG_INTERVAL),
            refusals: DropLog::new(Instant::now(), DROP_LOG_INTERVAL),
        }
    }

    pub(crate) fn add_written(&self, n: u64) {
        self.written.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts `n` dropped items and logs, at most once per interval, how many were dropped
    /// since the last line.
    pub(crate) fn add_dropped(&self, n: u64, reason: &'static str) {
        let total = self
            .dropped
            .fetch_add(n, Ordering::Relaxed)
            .saturating_add(n);
        if let Some(suppressed) = self.log.on_drop(Instant::now(), n) {
            tracing::warn!(
                event = "sink_records_dropped",
                sink = self.kind,
                reason,
                dropped_total = total,
                suppressed_since_last_emit = suppressed,
                "observability sink dropped records"
            );
        }
    }

    /// Counts the `n` items of a batch the collector refused with `status` as dropped, and
    /// logs the refusal at most once per interval, with the refusals since the last line: a
    /// collector that refuses every batch must not fill the log a line per batch.
    pub(crate) fn add_refused(&self, n: u64, status: u16) {
        if let Some(suppressed) = self.refusals.on_drop(Instant::now(), 1) {
            tracing::warn!(
                event = "sink_batch_refused",
                sink = self.kind,
                status,
                suppressed_since_last_emit = suppressed,
                "collector refused a batch"
            );
        }
        self.add_dropped(n, "refused");
    }

    /// Counts the `n` items a collector took the batch of but rejected (OTLP's partial
    /// success) as dropped, and logs it with the collector's message, at most once per
    /// interval together with the refusals.
    pub(crate) fn add_rejected(&self, n: u64, message: &str) {
        if let Some(suppressed) = self.refusals.on_drop(Instant::now(), 1) {
            // The collector's words, on one line and bounded.
            let message: String = message
                .chars()
                .take(MAX_COLLECTOR_MESSAGE_CHARS)
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            tracing::warn!(
                event = "sink_items_rejected",
                sink = self.kind,
                rejected = n,
                collector_message = message,
                suppressed_since_last_emit = suppressed,
                "collector took a batch but rejected some of its items"
            );
        }
        self.add_dropped(n, "rejected");
    }

    /// Logs the drops counted but not logged since the last line, once its interval has
    /// passed: without it, the last drops before a quiet spell would be told only by the next
    /// drop, however late. The line has no `reason`, as those drops may have had several.
    pub(crate) fn report_suppressed(&self, now: Instant) {
        if let Some(suppressed) = self.log.pending(now) {
            tracing::warn!(
                event = "sink_records_dropped",
                sink = self.kind,
                dropped_total = self.dropped.load(Ordering::Relaxed),
                suppressed_since_last_emit = suppressed,
                "observability sink dropped records since its last line"
            );
        }
    }

    pub(crate) fn stats(&self) -> SinkStats {
        SinkStats {
            written: self.written.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }
}

/// The rate limiter of drop logs, lock-free: the first drop after the interval has passed
/// emits (and reports the drops suppressed since the previous line); the others count.
#[derive(Debug)]
pub(crate) struct DropLog {
    base: Instant,
    interval_ms: u64,
    /// Milliseconds after `base` from which the next line may be emitted.
    next_emit_ms: AtomicU64,
    suppressed: AtomicU64,
}

impl DropLog {
    pub(crate) fn new(base: Instant, interval: Duration) -> Self {
        DropLog {
            base,
            interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
            next_emit_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(suppressed)` when this drop of `n` items should be logged, with the number
    /// dropped silently since the last line; `None` when it is only counted.
    pub(crate) fn on_drop(&self, now: Instant, n: u64) -> Option<u64> {
        let now_ms =
            u64::try_from(now.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX);
        let next = self.next_emit_ms.load(Ordering::Relaxed);
        if now_ms >= next
            && self
                .next_emit_ms
                .compare_exchange(
                    next,
                    now_ms.saturating_add(self.interval_ms),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(n, Ordering::Relaxed);
        None
    }

    /// `Some(suppressed)` when drops were counted but not logged and the interval has passed
    /// since the last line: they are due a line of their own, which starts a new interval.
    pub(crate) fn pending(&self, now: Instant) -> Option<u64> {
        if self.suppressed.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.on_drop(now, 0).filter(|&suppressed| suppressed > 0)
    }
}

#[cfg(test)]
mod tests;
