//! The paths a measure compares, and the latency samples taken on each.

use std::time::Duration;

use anyhow::Result;
use hdrhistogram::Histogram;
use relay_testkit::measures::SampleCounts;

/// A stream's first byte that takes this long counts as a stall: Linux's delayed ACK, which a missing `TCP_NODELAY` runs into, holds a small write for about 40 ms.
pub(crate) const STALL_THRESHOLD: Duration = Duration::from_millis(35);
/// Histogram range in nanoseconds: 1 ns to 60 s, three significant figures.
const HISTOGRAM_MAX_NS: u64 = 60_000_000_000;

/// The paths of a measure: the stand-in directly, relayd in front of it, and a peer proxy (nginx) in front of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Direct,
    Relay,
    Peer,
}

/// The order of one round: the paths rotate, so each goes first equally often over as many rounds as there are paths and none always runs right after another.
pub(crate) fn round_order(round: usize, sides: &[Side]) -> Vec<Side> {
    let mut order = sides.to_vec();
    if !order.is_empty() {
        let len = order.len();
        order.rotate_left(round % len);
    }
    order
}

/// One value per path; `peer` stays at its default when no peer runs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sides<T> {
    pub(crate) direct: T,
    pub(crate) relay: T,
    pub(crate) peer: T,
}

impl<T> Sides<T> {
    pub(crate) fn get_mut(&mut self, side: Side) -> &mut T {
        match side {
            Side::Direct => &mut self.direct,
            Side::Relay => &mut self.relay,
            Side::Peer => &mut self.peer,
        }
    }
}

/// Timings of one path in one scenario.
#[derive(Debug, Clone)]
pub(crate) struct Samples {
    /// Nanoseconds.
    histogram: Histogram<u64>,
    /// Samples at or above [`STALL_THRESHOLD`].
    pub(crate) stalls: u64,
}

impl Default for Samples {
    fn default() -> Self {
        Samples::new()
    }
}

impl Samples {
    pub(crate) fn new() -> Samples {
        // Constant bounds that hdrhistogram accepts: this depends on no input, so it cannot fail at run time.
        let histogram = Histogram::new_with_bounds(1, HISTOGRAM_MAX_NS, 3)
            .expect("constant histogram bounds are valid");
        Samples {
            histogram,
            stalls: 0,
        }
    }

    pub(crate) fn record(&mut self, elapsed: Duration) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.histogram.saturating_record(ns.max(1));
        if elapsed >= STALL_THRESHOLD {
            self.stalls += 1;
        }
    }

    pub(crate) fn merge(&mut self, other: &Samples) -> Result<()> {
        self.histogram
            .add(&other.histogram)
            .map_err(|e| anyhow::anyhow!("merging histograms: {e:?}"))?;
        self.stalls += other.stalls;
        Ok(())
    }

    pub(crate) fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// The value at `quantile` (0.5, 0.99) in microseconds.
    pub(crate) fn micros(&self, quantile: f64) -> f64 {
        self.histogram.value_at_quantile(quantile) as f64 / 1_000.0
    }

    /// The value at `quantile` in milliseconds.
    pub(crate) fn millis(&self, quantile: f64) -> f64 {
        self.histogram.value_at_quantile(quantile) as f64 / 1_000_000.0
    }
}

/// How many samples each path contributed; the peer's only when it ran.
pub(crate) fn sample_counts(s: &Sides<Samples>, with_peer: bool) -> SampleCounts {
    SampleCounts {
        direct: s.direct.count(),
        relay: s.relay.count(),
        peer: with_peer.then(|| s.peer.count()),
    }
}
