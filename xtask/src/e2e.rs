//! `cargo xtask e2e`: the end-to-end tests with the real binaries and the real agent CLIs.

use std::{
    io,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::command::{cargo, project_root, step};

/// The npm packages of the agent CLIs the e2e tests drive. Pin versions here
/// (`@openai/codex@0.x.y`) once a test depends on one CLI version's behaviour.
const AGENT_PACKAGES: [&str; 3] = [
    "@anthropic-ai/claude-code",
    "@openai/codex",
    "@mariozechner/pi-coding-agent",
];
/// The executables those packages install into `node_modules/.bin`.
const AGENT_BINARIES: [&str; 3] = ["claude", "codex", "pi"];

/// Tells the e2e tests that the binaries are built and the agent CLIs installed.
const ENV_E2E: &str = "RELAY_E2E";
/// Tells the e2e tests where `claude`, `codex` and `pi` are.
const ENV_AGENT_BIN_DIR: &str = "RELAY_AGENT_BIN_DIR";

/// Installs the agent CLIs, builds every binary, then runs the `relay-e2e` package with
/// `RELAY_E2E=1`; `test_args` go to the test harness (a name filter, `--nocapture`, …).
pub(crate) fn run(test_args: &[String]) -> Result<()> {
    let cache_dir = project_root()?.join("target").join("agent-clis");
    let agent_bin_dir = ensure_agent_clis(&cache_dir)?;

    step(
        "cargo build --workspace --bins",
        cargo(["build", "--workspace", "--bins"])?,
    )?;

    let mut tests = cargo(["test", "--package", "relay-e2e"])?;
    if !test_args.is_empty() {
        tests.arg("--").args(test_args);
    }
    tests
        .env(ENV_E2E, "1")
        .env(ENV_AGENT_BIN_DIR, &agent_bin_dir);
    step(
        &format!(
            "{ENV_E2E}=1 {ENV_AGENT_BIN_DIR}={} cargo test --package relay-e2e",
            agent_bin_dir.display()
        ),
        tests,
    )
}

/// Installs the agent CLIs under `cache_dir` with npm unless all three are there already, and
/// returns the directory holding their executables (`cache_dir/node_modules/.bin`).
///
/// Fails loudly when npm is missing or the install fails: the e2e tests are about the real
/// CLIs, so there is no fallback.
pub(crate) fn ensure_agent_clis(cache_dir: &Path) -> Result<PathBuf> {
    let bin_dir = cache_dir.join("node_modules").join(".bin");
    if missing_binaries(&bin_dir).is_empty() {
        println!(
            "\n==> agent CLIs already installed in {}",
            bin_dir.display()
        );
        return Ok(bin_dir);
    }

    match Command::new("npm").arg("--version").output() {
        Ok(output) if output.status.success() => {}
        Ok(output) => bail!(
            "`npm --version` failed ({}): the e2e tests install the agent CLIs with npm; fix the Node.js installation",
            output.status
        ),
        Err(error) if error.kind() == io::ErrorKind::NotFound => bail!(
            "npm is not installed: the e2e tests install the agent CLIs ({}) with npm; install Node.js 20 or newer with npm",
            AGENT_PACKAGES.join(", ")
        ),
        Err(error) => return Err(error).context("running `npm --version`"),
    }

    std::fs::create_dir_all(cache_dir)
        .with_context(|| format!("creating {}", cache_dir.display()))?;
    let mut install = Command::new("npm");
    install
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(cache_dir)
        .args(AGENT_PACKAGES);
    step(
        &format!(
            "npm install --no-audit --no-fund --prefix {} {}",
            cache_dir.display(),
            AGENT_PACKAGES.join(" ")
        ),
        install,
    )
    .context("installing the agent CLIs for the e2e tests")?;

    let missing = missing_binaries(&bin_dir);
    if !missing.is_empty() {
        bail!(
            "npm install finished but {} missing from {}",
            missing.join(", "),
            bin_dir.display()
        );
    }
    Ok(bin_dir)
}

fn missing_binaries(bin_dir: &Path) -> Vec<&'static str> {
    AGENT_BINARIES
        .into_iter()
        .filter(|name| !bin_dir.join(name).is_file())
        .collect()
}

#[cfg(test)]
mod tests;
