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

/// Milliseconds since the Unix epoch as RFC 3339 UTC with whole seconds.
pub(crate) fn rfc3339_utc(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01, counted in 400-year eras that
/// start on 1 March so the leap day is the last day of an era's year.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let shifted = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = shifted / 146_097;
    let day_of_era = shifted % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // 0 = March
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests;
