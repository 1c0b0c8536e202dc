//! The redactor's clean path (SPEC §12: redaction on the request path must cost little when
//! nothing matches): every built-in detector over a 1 MiB chat request with no secret.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use relay_plugins::{RedactionConfig, Redactor};
use relay_testkit::measures::{Measure, MeasureId};

/// The body's size.
const BODY_BYTES: usize = 1 << 20;
/// Runs at scale 1.
const RUNS: usize = 200;

/// A chat request of log-like prose: words, paths, versions, counts and times, as a tool
/// result carries them, but no address, key or card number.
fn clean_body() -> Vec<u8> {
    let line = "The build of crate relay-proxy v0.4.2 finished in 42.7 s on runner 7; 1318 tests passed, 0 failed, see target/debug/deps and step 3 of 12 (retry 2). ";
    let mut text = String::with_capacity(BODY_BYTES);
    while text.len() + line.len() < BODY_BYTES - 200 {
        text.push_str(line);
    }
    let body = serde_json::json!({
        "model": "claude-sonnet-4-5",
        "messages": [{ "role": "user", "content": text }],
    });
    let mut bytes = serde_json::to_vec(&body).unwrap_or_default();
    bytes.resize(BODY_BYTES.max(bytes.len()), b' ');
    bytes
}

pub(crate) fn redactor(scale: f64) -> Result<Vec<Measure>> {
    let redactor = Redactor::new(&RedactionConfig::default(), b"relay-loadgen");
    let body = clean_body();
    let runs = ((RUNS as f64 * scale).round() as usize).max(5);
    let mut samples: Vec<Duration> = Vec::with_capacity(runs);
    for run in 0..runs + 3 {
        let started = Instant::now();
        let redacted = redactor.redact_json_body(&body);
        let took = started.elapsed();
        ensure!(
            redacted.replaced.is_empty(),
            "the clean body matched a detector: {:?}",
            redacted.replaced.iter().collect::<Vec<_>>()
        );
        // The first runs warm the caches.
        if run >= 3 {
            samples.push(took);
        }
    }
    samples.sort();
    let median = samples[samples.len() / 2].as_secs_f64().max(1e-9);
    let mib = body.len() as f64 / (1024.0 * 1024.0);
    eprintln!(
        "redactor: {runs} runs over {} bytes, median {:.3} ms",
        body.len(),
        median * 1e3
    );
    Ok(vec![Measure::relay_only(
        MeasureId::RedactorThroughput,
        mib / median,
    )])
}
