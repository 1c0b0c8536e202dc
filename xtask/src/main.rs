//! Relay's development tasks, run as `cargo xtask <task>` (the alias is in `.cargo/config.toml`).
//!
//! Each task is one module: `ci` (everything CI checks, in order), `e2e` (the end-to-end tests
//! with the real binaries and agent CLIs), `bench` (SPEC §12, against a direct baseline and
//! nginx), `fuzz` (the relay-fuzz targets), `deploy` (the service files) and `tidy` (the
//! dependency rules of SPEC §11, also run as a test). Everything is `std::process::Command`;
//! besides `anyhow`, `serde_json` and `time`, xtask uses relay-testkit for the table of
//! measures and the `/proc` parser it shares with the load generator.
// A developer's tool, not a daemon or a hook: a panic on an unwritable stderr is fine here.
#![allow(clippy::disallowed_macros)]

mod bench;
mod ci;
mod command;
mod deploy;
mod docs;
mod e2e;
mod fuzz;
mod package;
mod pgo;
mod tidy;

use std::process::ExitCode;

/// Every task with a one-line description, in the order `cargo xtask` prints them.
const TASKS: [(&str, &str); 9] = [
    (
        "ci",
        "fmt check, clippy, all tests (nextest when installed), then e2e; stops at the first failure",
    ),
    (
        "e2e [TEST ARGS]",
        "installs the agent CLIs, builds the binaries and runs relay-e2e with RELAY_E2E=1",
    ),
    (
        "bench [--quick] [--unpinned] [--pgo] [--only SCENARIO]...",
        "the performance measures of SPEC §12, beside a direct baseline and nginx",
    ),
    (
        "fuzz --secs N ...",
        "runs relay-fuzz's targets (or those named after it) N seconds each; crashes go to target/fuzz/",
    ),
    (
        "deploy-check",
        "checks the service files in deploy/ with systemd-analyze, plistlib and xml.etree",
    ),
    (
        "package [--target T | --pgo]",
        "release archives with the binaries, deploy/, docs/ and SHA256SUMS in target/dist/",
    ),
    (
        "pgo",
        "the five release binaries built with profile-guided optimisation, in target/pgo/optimized/release",
    ),
    (
        "docs [--check]",
        "generates docs/reference.md from the binaries and the code; --check fails on drift",
    ),
    (
        "tidy",
        "checks the dependency rules of SPEC §11 and every member's manifest",
    ),
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (task, rest) = match args.split_first() {
        None => {
            print_tasks();
            return ExitCode::SUCCESS;
        }
        Some((task, rest)) => (task.as_str(), rest),
    };
    let result = match (task, rest) {
        ("help" | "--help" | "-h", _) => {
            print_tasks();
            return ExitCode::SUCCESS;
        }
        ("ci", []) => ci::run(),
        ("e2e", test_args) => e2e::run(test_args),
        ("bench", args) => bench::run(args),
        ("fuzz", fuzz_args) => fuzz::run(fuzz_args),
        ("tidy", []) => tidy::run(),
        ("deploy-check", []) => deploy::run(),
        ("package", args) => package::run(args),
        ("pgo", args) => pgo::run(args),
        ("docs", args) => docs::run(args),
        ("ci" | "tidy" | "deploy-check", extra) => Err(anyhow::anyhow!(
            "`cargo xtask {task}` takes no arguments, got {extra:?}"
        )),
        (unknown, _) => {
            eprintln!("unknown task {unknown:?}\n");
            print_tasks();
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn print_tasks() {
    println!("usage: cargo xtask <task>\n\ntasks:");
    for (name, description) in TASKS {
        println!("  {name:<20} {description}");
    }
}
