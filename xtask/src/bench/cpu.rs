//! How busy other processes kept the CPUs while the bench measured, from `/proc` tick counts.

use relay_testkit::procfs::{self, MachineTicks};
use serde_json::{Value, json};

/// CPU time, in the kernel's clock ticks, of the whole machine and of the bench's long-running processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CpuSnapshot {
    /// Ticks of every CPU, idle included.
    pub(super) total: u64,
    /// Ticks not idle (steal included: another VM had the CPU).
    pub(super) busy: u64,
    /// Ticks spent by the given processes.
    pub(super) ours: u64,
}

impl CpuSnapshot {
    pub(super) fn take(pids: &[u32]) -> Option<CpuSnapshot> {
        let MachineTicks { total, busy, .. } = MachineTicks::read()?;
        let ours = procfs::ticks_of(pids)?;
        Some(CpuSnapshot { total, busy, ours })
    }
}

/// The share of all CPU time between two snapshots that neither the measured processes nor the clients (`client_ticks`: the load generator, or the xtask with the children it reaped) used.
pub(super) fn other_cpu_share(
    before: &CpuSnapshot,
    after: &CpuSnapshot,
    client_ticks: u64,
) -> Option<f64> {
    let total = after.total.checked_sub(before.total)?;
    let busy = after.busy.saturating_sub(before.busy);
    let ours = after.ours.saturating_sub(before.ours) + client_ticks;
    (total > 0).then(|| busy.saturating_sub(ours) as f64 / total as f64)
}

/// The note on other processes' load during one phase. Per-process and machine-wide tick counts disagree by a few percent, so a small share is reported as such rather than as a precise figure.
pub(super) fn other_load_note(phase: &str, share: Option<f64>) -> String {
    match share {
        None => {
            format!("{phase}: how busy other processes kept the CPUs is unknown (no /proc/stat)")
        }
        Some(share) if share < 0.05 => format!(
            "{phase}: other processes used under 5% of the CPUs (the estimate is good to a few percent)"
        ),
        Some(share) => format!(
            "{phase}: other processes kept the CPUs about {:.0}% busy, which shows in the tails (p99) of both columns",
            share * 100.0
        ),
    }
}

/// The raw tick counts behind an other-load share, for the JSON.
pub(super) fn cpu_ticks_json(
    before: Option<CpuSnapshot>,
    after: Option<CpuSnapshot>,
    client_ticks: Value,
) -> Value {
    before
        .zip(after)
        .map(|(before, after)| {
            json!({
                "all_cpus": after.total.saturating_sub(before.total),
                "busy": after.busy.saturating_sub(before.busy),
                "servers": after.ours.saturating_sub(before.ours),
                "clients": client_ticks,
            })
        })
        .unwrap_or(Value::Null)
}
