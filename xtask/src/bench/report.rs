//! The bench's output: every measure of the SPEC §12 table, measured or not, printed beside its target and written as JSON.
//!
//! The rows come from `relay_testkit::measures::MEASURES`, in its order, so the printed table and the JSON have the same rows as the table the loadgen's scenarios are built from.

use std::fmt::Write as _;

use anyhow::{Context as _, Result};
use relay_testkit::measures::{MEASURES, Measure, MeasureId, MeasureSpec, judge_all};
use serde_json::{Value, json};
use time::{OffsetDateTime, format_description::well_known::Rfc3339};

/// The measures of a loadgen report (its `measures` array).
pub(super) fn measures(report: &Value) -> Result<Vec<Measure>> {
    let measures = report["measures"]
        .as_array()
        .context("relay-loadgen's report has no `measures` array")?;
    measures
        .iter()
        .map(|m| {
            serde_json::from_value(m.clone())
                .with_context(|| format!("a measure that does not read: {m}"))
        })
        .collect()
}

/// The throughput scenario's rows named in `map`, as the rows they become.
pub(super) fn rows(loadgen: &Value, map: &[(MeasureId, MeasureId)]) -> Result<Vec<Measure>> {
    Ok(measures(loadgen)?
        .into_iter()
        .filter_map(|m| {
            let (_, row) = map.iter().find(|(from, _)| *from == m.id)?;
            Some(m.as_row(*row))
        })
        .collect())
}

/// Every row of the table in order, with its measure when one was taken; rows judged again across phases (a target may refer to another phase's figure).
pub(super) fn table_rows(
    mut measured: Vec<Measure>,
) -> Vec<(&'static MeasureSpec, Option<Measure>)> {
    judge_all(&mut measured);
    MEASURES
        .iter()
        .map(|spec| {
            let found = measured.iter().position(|m| m.id == spec.id);
            (spec, found.map(|i| measured.swap_remove(i)))
        })
        .collect()
}

/// The JSON of every row: the table's name, target and method, with the figures when measured.
pub(super) fn rows_json(rows: &[(&'static MeasureSpec, Option<Measure>)]) -> Result<Value> {
    rows.iter()
        .map(|(spec, measure)| {
            let mut row = match measure {
                Some(measure) => serde_json::to_value(measure).context("encoding a measure")?,
                None => json!({
                    "id": spec.id,
                    "scenario": spec.scenario,
                    "measure": spec.name,
                    "unit": spec.unit,
                    "target": spec.target.map(|t| t.text(spec.unit)),
                }),
            };
            row["measured"] = json!(measure.is_some());
            row["how"] = json!(spec.how);
            Ok(row)
        })
        .collect::<Result<Vec<_>>>()
        .map(Value::Array)
}

/// A value with its unit, rounded for reading.
pub(super) fn format_value(value: Option<f64>, unit: &str) -> String {
    let Some(v) = value else {
        return "-".to_owned();
    };
    match unit {
        "us" => format!("{v:.1} µs"),
        "ms" => format!("{v:.2} ms"),
        "req/s" => format!("{v:.0} req/s"),
        "MiB" => format!("{v:.1} MiB"),
        "KiB" => format!("{v:.1} KiB"),
        "count" => format!("{v:.0}"),
        other => format!("{v:.2} {other}"),
    }
}

/// The columns of the table; numbers (1 to 4 and 7 to 9) are right-aligned.
const HEADER: [&str; 10] = [
    "measure",
    "relay",
    "direct",
    "added",
    "nginx",
    "target",
    "within target",
    "CPU/req",
    "nginx CPU/req",
    "CPU vs nginx",
];

/// The cells of one row.
fn cells(spec: &MeasureSpec, measure: Option<&Measure>) -> [String; 10] {
    let target = spec
        .target
        .map_or_else(|| "-".to_owned(), |t| t.text(spec.unit));
    let Some(m) = measure else {
        let mut row = [(); 10].map(|()| "-".to_owned());
        row[0] = spec.name.to_owned();
        row[1] = "not measured".to_owned();
        row[5] = target;
        return row;
    };
    let unit = m.unit.as_str();
    let cpu = m.cpu;
    [
        m.measure.clone(),
        format_value(Some(m.relay), unit),
        format_value(m.direct, unit),
        format_value(m.added, unit),
        format_value(m.peer, unit),
        target,
        match m.within_target {
            Some(true) => "yes".to_owned(),
            Some(false) => "no".to_owned(),
            None => "-".to_owned(),
        },
        format_value(cpu.map(|c| c.relay_us), "us"),
        format_value(cpu.and_then(|c| c.peer_us), "us"),
        cpu.and_then(|c| c.ratio)
            .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}×")),
    ]
}

/// The table of SPEC §12, columns aligned.
pub(super) fn table(rows: &[(&'static MeasureSpec, Option<Measure>)]) -> String {
    let header = HEADER.map(str::to_owned);
    let cells: Vec<[String; 10]> = rows
        .iter()
        .map(|(spec, measure)| cells(spec, measure.as_ref()))
        .collect();
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &cells {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |row: &[String; 10]| {
        let padded: Vec<String> = row
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(column, (cell, width))| {
                let pad = " ".repeat(width - cell.chars().count());
                // Numbers read best right-aligned, words left-aligned.
                if matches!(column, 1..=4 | 7..=9) {
                    format!("{pad}{cell}")
                } else {
                    format!("{cell}{pad}")
                }
            })
            .collect();
        let _ = writeln!(out, "| {} |", padded.join(" | "));
    };
    line(&header);
    line(&widths.map(|w| "-".repeat(w)));
    for row in &cells {
        line(row);
    }
    out
}

/// A UTC time to the second, as RFC 3339 (`2026-11-30T01:17:36Z`) and as a file name that sorts by time (`20261130T011736Z`).
pub(super) fn stamp(unix_seconds: u64) -> Result<(String, String)> {
    let seconds = i64::try_from(unix_seconds).context("the clock is out of range")?;
    let rfc3339 = OffsetDateTime::from_unix_timestamp(seconds)
        .context("the clock is out of range")?
        .format(&Rfc3339)
        .context("formatting the timestamp")?;
    let file_name = rfc3339
        .chars()
        .filter(|c| !matches!(c, '-' | ':'))
        .collect();
    Ok((rfc3339, file_name))
}
