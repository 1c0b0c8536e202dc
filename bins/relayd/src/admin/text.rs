//! What a bindings command prints.

use relay_broker::Fingerprint;
use relay_proxy::admin::{Action, ActionOutcome, BindingsList};

use super::Edit;

/// One line per binding, then one per blocked fingerprint without a binding.
pub(crate) fn list_lines(list: &BindingsList) -> Vec<String> {
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    let mut lines: Vec<String> = list
        .bindings
        .iter()
        .map(|b| {
            format!(
                "{} digest={} last_use={} tombstone={} blocked={}",
                b.fingerprint,
                b.digest_prefix,
                rfc3339_utc(b.last_use_unix_ms),
                yes_no(b.tombstone),
                yes_no(b.blocked)
            )
        })
        .collect();
    for fp in &list.blocked {
        if !list.bindings.iter().any(|b| &b.fingerprint == fp) {
            lines.push(format!("{fp} digest=- last_use=- tombstone=- blocked=yes"));
        }
    }
    lines
}

fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

pub(crate) fn describe_online(outcome: &ActionOutcome) -> String {
    let fp = &outcome.fingerprint;
    match outcome.action {
        Action::Unblock if outcome.was_blocked => format!("unblocked {fp}"),
        Action::Unblock => format!("{fp} was not blocked"),
        Action::Revoke | Action::Block => {
            let worker = if outcome.worker_retired {
                "worker retired"
            } else if outcome.launch_cancelled {
                "worker launch cancelled"
            } else {
                "no worker"
            };
            let verb = if outcome.action == Action::Block {
                "blocked"
            } else {
                "revoked"
            };
            let already = if outcome.action == Action::Block && outcome.was_blocked {
                " (was already blocked)"
            } else {
                ""
            };
            format!(
                "{verb} {fp}: {}, {} closed, {worker}{already}",
                count(outcome.bindings, "binding", "bindings"),
                count(outcome.sessions, "session", "sessions"),
            )
        }
    }
}

pub(crate) fn describe_offline(action: Action, fingerprint: &Fingerprint, edit: &Edit) -> String {
    let fp = fingerprint.to_hex();
    match action {
        Action::Unblock if edit.was_blocked => format!("unblocked {fp} (daemon not running)"),
        Action::Unblock => format!("{fp} was not blocked (daemon not running)"),
        Action::Revoke | Action::Block => {
            let verb = if action == Action::Block {
                "blocked"
            } else {
                "revoked"
            };
            let already = if action == Action::Block && edit.was_blocked {
                ", was already blocked"
            } else {
                ""
            };
            format!(
                "{verb} {fp}: {}, {} dropped{already} (daemon not running)",
                count(edit.bindings, "binding", "bindings"),
                count(edit.generations, "worker generation", "worker generations"),
            )
        }
    }
}

/// Milliseconds since the Unix epoch as RFC 3339 UTC with whole seconds
/// (`2025-11-30T00:00:00Z`). A time RFC 3339 cannot write (after the year 9999, which only
/// a damaged state file holds) is printed as its number of milliseconds.
pub(crate) fn rfc3339_utc(unix_ms: u64) -> String {
    // Whole seconds: `time` leaves out the fraction when it is zero.
    i64::try_from(unix_ms / 1000)
        .ok()
        .and_then(|secs| time::OffsetDateTime::from_unix_timestamp(secs).ok())
        .and_then(|at| {
            at.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| unix_ms.to_string())
}

#[cfg(test)]
mod tests;
