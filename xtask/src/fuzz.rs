//! `cargo xtask fuzz --secs N [--seed N] [TARGET...]`: runs the fuzz targets of `relay-fuzz`
//! for N seconds each (all of them when none is named), from their seed corpora.
//!
//! It builds the `relay-fuzz` binary in the dev profile and runs it: debug assertions and
//! overflow checks make more mistakes panic, and the build shares the test build's
//! dependencies (the release profile's LTO build of the whole proxy stack costs minutes and
//! gigabytes for a speed the targets do not need). One minimized input per distinct crash is
//! written under `target/fuzz/<target>/`, and the task fails when any target crashed.
//! The engine is relay-fuzz's own mutation loop, which runs on the pinned stable toolchain.

use std::process::Command;

use anyhow::{Context as _, Result, bail};

use crate::command::{cargo, project_root, step, target_dir};

/// What `cargo xtask fuzz` was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FuzzArgs {
    pub(crate) secs: u64,
    pub(crate) seed: Option<u64>,
    pub(crate) targets: Vec<String>,
}

/// Reads `--secs N`, `--seed N` and target names.
pub(crate) fn parse_args(args: &[String]) -> Result<FuzzArgs> {
    let mut secs = None;
    let mut seed = None;
    let mut targets = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--secs" => {
                let value = args.next().context("--secs needs a number of seconds")?;
                let value: u64 = value
                    .parse()
                    .with_context(|| format!("--secs takes whole seconds, got {value:?}"))?;
                if value == 0 {
                    bail!("--secs must be at least 1");
                }
                secs = Some(value);
            }
            "--seed" => {
                let value = args.next().context("--seed needs a number")?;
                seed = Some(
                    value
                        .parse()
                        .with_context(|| format!("--seed takes a number, got {value:?}"))?,
                );
            }
            flag if flag.starts_with('-') => bail!("unknown flag {flag:?}"),
            name => targets.push(name.to_owned()),
        }
    }
    let secs = secs.context("`cargo xtask fuzz` needs --secs N (seconds per target)")?;
    Ok(FuzzArgs {
        secs,
        seed,
        targets,
    })
}

/// `cargo xtask fuzz`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    let args = parse_args(args)?;
    let root = project_root()?;
    step(
        "build relay-fuzz",
        cargo(["build", "-p", "relay-fuzz", "--bin", "relay-fuzz"])?,
    )?;
    let target_dir = target_dir(&root);
    let out = target_dir.join("fuzz");
    let mut command = Command::new(target_dir.join("debug").join("relay-fuzz"));
    command
        .current_dir(&root)
        .arg("--secs")
        .arg(args.secs.to_string())
        .arg("--out")
        .arg(&out);
    if let Some(seed) = args.seed {
        command.arg("--seed").arg(seed.to_string());
    }
    command.args(&args.targets);
    step("fuzz", command).with_context(|| {
        format!(
            "a fuzz target crashed: the inputs are under {}; replay one with `{} --replay TARGET FILE`",
            out.display(),
            target_dir.join("debug").join("relay-fuzz").display()
        )
    })
}

#[cfg(test)]
mod tests;
