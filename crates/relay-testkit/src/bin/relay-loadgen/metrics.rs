//! What relayd's `/metrics` and `/proc` say during a run: where requests went, how many streams are open, and how much memory a process holds.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use relay_testkit::procfs;

use crate::conn::Conn;
use crate::{Ctx, Plan};

/// relayd's model requests by destination, summed over routes and statuses, from `relay_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Destinations {
    pub(crate) worker: u64,
    pub(crate) pass_through: u64,
}

impl Destinations {
    pub(crate) fn parse(text: &str) -> Destinations {
        let mut counts = Destinations::default();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("relay_requests_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once("} ") else {
                continue;
            };
            // Counters are written as integers or, by some encoders, as floats.
            let Some(value) = value.trim().parse::<f64>().ok().filter(|v| *v >= 0.0) else {
                continue;
            };
            let value = value as u64;
            if labels.contains(r#"destination="worker""#) {
                counts.worker += value;
            } else if labels.contains(r#"destination="pass_through""#) {
                counts.pass_through += value;
            }
        }
        counts
    }

    /// Fails unless, between `self` and `after`, `sent` more requests went to the worker and none passed through: relayd passes a request with a bound credential through when the worker is not ready, which would measure the wrong path.
    pub(crate) fn ensure_all_went_to_worker(&self, after: &Destinations, sent: u64) -> Result<()> {
        let passed = after.pass_through.saturating_sub(self.pass_through);
        let worker = after.worker.saturating_sub(self.worker);
        ensure!(
            passed == 0,
            "{passed} requests with the route credential passed through instead of going to the worker (is the MCP session still live?)"
        );
        ensure!(
            worker >= sent,
            "relayd counted {worker} requests to the worker, expected at least {sent}"
        );
        Ok(())
    }
}

/// relayd's request counts by destination, now.
pub(crate) async fn destinations(ctx: &Ctx) -> Result<Destinations> {
    let mut conn = Conn::open(ctx.relay).await?;
    Ok(Destinations::parse(&conn.metrics_text().await?))
}

/// The value of `relay_open_streams` in Prometheus text, if present.
pub(crate) fn open_streams_gauge(text: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix("relay_open_streams")?;
        let value = rest.strip_prefix(' ')?;
        value.trim().parse::<f64>().ok()
    })
}

/// Polls relayd's `relay_open_streams` until it reads zero; false when `timeout` passed first.
pub(crate) async fn wait_for_quiet(metrics: &mut Conn, timeout: Duration) -> Result<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        let text = metrics.metrics_text().await?;
        let open =
            open_streams_gauge(&text).context("relayd's /metrics has no relay_open_streams")?;
        if open == 0.0 {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The median of a few RSS samples taken `plan.rss_interval` apart, in bytes.
pub(crate) async fn rss_median(pid: u32, plan: &Plan) -> Result<u64> {
    let mut samples = Vec::with_capacity(plan.rss_samples);
    for i in 0..plan.rss_samples.max(1) {
        if i > 0 {
            tokio::time::sleep(plan.rss_interval).await;
        }
        samples.push(rss_bytes(pid)?);
    }
    samples.sort_unstable();
    Ok(samples[samples.len() / 2])
}

/// A process's resident set size in bytes, from `/proc/<pid>/status`.
pub(crate) fn rss_bytes(pid: u32) -> Result<u64> {
    procfs::rss_bytes(pid).with_context(|| format!("/proc/{pid}/status has no readable VmRSS line"))
}
