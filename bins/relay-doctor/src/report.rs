//! The result of a doctor run: one [`Check`] per line, as text or as the JSON of
//! `docs/doctor.md`.
//!
//! Nothing secret ever enters a check: summaries name files, variables, origins and reason
//! codes, never a token, key or header value.

use serde_json::{Value, json};

/// The version of the JSON report; raised only when a field changes meaning or disappears.
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// It holds.
    Ok,
    /// It holds, but something deserves attention; the exit status stays 0.
    Warn,
    /// It does not hold; the exit status is 1.
    Fail,
    /// Not applicable here, or not run because a check it depends on failed.
    Skip,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Skip => "skip",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Check {
    /// A stable identifier (`state_dir`, `token`, `live.route`, …).
    pub(crate) id: &'static str,
    pub(crate) status: Status,
    /// What was found, in one sentence.
    pub(crate) summary: String,
    /// What to do about it; `None` when nothing needs doing.
    pub(crate) next_step: Option<String>,
    /// Check-specific facts (paths, origins, counts), as documented per check.
    pub(crate) details: Value,
}

impl Check {
    pub(crate) fn new(id: &'static str, status: Status, summary: impl Into<String>) -> Check {
        Check {
            id,
            status,
            summary: summary.into(),
            next_step: None,
            details: Value::Object(serde_json::Map::new()),
        }
    }

    pub(crate) fn ok(id: &'static str, summary: impl Into<String>) -> Check {
        Check::new(id, Status::Ok, summary)
    }

    pub(crate) fn warn(id: &'static str, summary: impl Into<String>) -> Check {
        Check::new(id, Status::Warn, summary)
    }

    pub(crate) fn fail(id: &'static str, summary: impl Into<String>) -> Check {
        Check::new(id, Status::Fail, summary)
    }

    pub(crate) fn skip(id: &'static str, summary: impl Into<String>) -> Check {
        Check::new(id, Status::Skip, summary)
    }

    pub(crate) fn next(mut self, step: impl Into<String>) -> Check {
        self.next_step = Some(step.into());
        self
    }

    pub(crate) fn with(mut self, details: Value) -> Check {
        self.details = details;
        self
    }
}

/// Which mode produced the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Environment,
    Live,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Environment => "environment",
            Mode::Live => "live",
        }
    }
}

/// Every check of a run, in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Report {
    pub(crate) mode: Mode,
    pub(crate) checks: Vec<Check>,
}

impl Report {
    /// True when no check failed (warnings and skips do not count).
    pub(crate) fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.status != Status::Fail)
    }

    fn count(&self, status: Status) -> usize {
        self.checks.iter().filter(|c| c.status == status).count()
    }

    pub(crate) fn to_json(&self) -> Value {
        let checks: Vec<Value> = self
            .checks
            .iter()
            .map(|c| {
                json!({
                    "id": c.id,
                    "status": c.status.as_str(),
                    "summary": c.summary,
                    "next_step": c.next_step,
                    "details": c.details,
                })
            })
            .collect();
        json!({
            "schema_version": SCHEMA_VERSION,
            "mode": self.mode.as_str(),
            "ok": self.passed(),
            "counts": {
                "ok": self.count(Status::Ok),
                "warn": self.count(Status::Warn),
                "fail": self.count(Status::Fail),
                "skip": self.count(Status::Skip),
            },
            "checks": checks,
        })
    }

    /// One line per check: `<status> <id>: <summary>[ -> <next step>]`, then a total.
    pub(crate) fn to_text(&self) -> String {
        let mut text = String::new();
        for check in &self.checks {
            text.push_str(&format!(
                "{:<4} {}: {}",
                check.status.as_str(),
                check.id,
                check.summary
            ));
            if let Some(step) = &check.next_step {
                text.push_str(&format!(" -> next: {step}"));
            }
            text.push('\n');
        }
        text.push_str(&format!(
            "{}: {} ok, {} warn, {} fail, {} skipped\n",
            if self.passed() { "passed" } else { "FAILED" },
            self.count(Status::Ok),
            self.count(Status::Warn),
            self.count(Status::Fail),
            self.count(Status::Skip),
        ));
        text
    }
}

#[cfg(test)]
mod tests;
