//! `cargo xtask ci`: every check CI runs, in order, stopping at the first failure.

use std::{
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::Result;

use crate::{
    command::{cargo, seconds, step},
    deploy, e2e,
};

pub(crate) fn run() -> Result<()> {
    let started = Instant::now();
    step(
        "cargo fmt --all --check",
        cargo(["fmt", "--all", "--check"])?,
    )?;
    step(
        "cargo clippy --workspace --all-targets -- -D warnings",
        cargo([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ])?,
    )?;
    // docs/reference.md is generated from the binaries' --help and the code: drift fails here.
    crate::docs::run(&["--check".to_owned()])?;
    // `--workspace` also covers xtask, which is not a default member: its tests include the
    // tidy check. relay-e2e needs the built binaries and the agent CLIs, so it runs in the
    // e2e step below, which provides both.
    if nextest_installed()? {
        step(
            "cargo nextest run --workspace --exclude relay-e2e",
            cargo(["nextest", "run", "--workspace", "--exclude", "relay-e2e"])?,
        )?;
    } else {
        step(
            "cargo test --workspace --exclude relay-e2e",
            cargo(["test", "--workspace", "--exclude", "relay-e2e"])?,
        )?;
    }
    // The service files, with the real systemd-analyze (installed here when missing), before
    // e2e so that a broken unit fails in seconds rather than after the long suite.
    println!("\n==> deploy-check");
    let deploy_started = Instant::now();
    deploy::run()?;
    println!(
        "==> deploy-check: ok in {}",
        seconds(deploy_started.elapsed())
    );
    println!("\n==> e2e");
    let e2e_started = Instant::now();
    e2e::run(&[])?;
    println!("==> e2e: ok in {}", seconds(e2e_started.elapsed()));
    println!("\nci passed in {}", seconds(started.elapsed()));
    Ok(())
}

fn nextest_installed() -> Result<bool> {
    let mut probe: Command = cargo(["nextest", "--version"])?;
    let status = probe.stdout(Stdio::null()).stderr(Stdio::null()).status();
    Ok(status.is_ok_and(|status| status.success()))
}
