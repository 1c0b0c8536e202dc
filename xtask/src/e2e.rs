//! `cargo xtask e2e`: the end-to-end tests with the real binaries, the real agent CLIs and
//! the official provider SDKs.

use std::{
    io,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::command::{cargo, project_root, step, target_dir};

/// The npm packages of the agent CLIs the e2e tests drive, pinned to the versions the
/// fixtures in `shared/fixtures` were recorded with (SPEC §7.3 facts depend on them). Change
/// a pin deliberately, re-run `cargo xtask e2e`, and re-record fixtures whose shape changed.
const AGENT_PACKAGES: [(&str, &str); 3] = [
    ("@anthropic-ai/claude-code", "2.1.197"),
    ("@openai/codex", "0.171.0"),
    ("@mariozechner/pi-coding-agent", "0.73.1"),
];
/// The executables those packages install into `node_modules/.bin`.
const AGENT_BINARIES: [&str; 3] = ["claude", "codex", "pi"];
/// The official provider SDKs for Node the e2e tests drive as an application would,
/// installed under a directory of their own so they cannot change how the agent CLIs
/// resolve theirs. `openai` stays on 6.x, the last line that supports Node 20 (7.x asks
/// for Node 22).
const SDK_PACKAGES: [(&str, &str); 2] = [("@anthropic-ai/sdk", "1.17.0"), ("openai", "6.30.1")];

/// Tells the e2e tests that the binaries are built and the agent CLIs and SDKs installed.
const ENV_E2E: &str = "RELAY_E2E";
/// Tells the e2e tests where `relayd` and the other Relay binaries are.
const ENV_BIN_DIR: &str = "RELAY_BIN_DIR";
/// Tells the e2e tests where `claude`, `codex` and `pi` are.
const ENV_AGENT_BIN_DIR: &str = "RELAY_AGENT_BIN_DIR";
/// Tells the e2e tests which `node_modules` holds the provider SDKs.
const ENV_SDK_DIR: &str = "RELAY_SDK_DIR";

/// Installs the agent CLIs and the SDKs, builds every binary, then runs the `relay-e2e`
/// package with `RELAY_E2E=1`, `RELAY_BIN_DIR`, `RELAY_AGENT_BIN_DIR` and `RELAY_SDK_DIR`;
/// `test_args` go to the test harness (a name filter, `--nocapture`, …).
pub(crate) fn run(test_args: &[String]) -> Result<()> {
    let root = project_root()?;
    // The npm installs stay in `target/` whatever CARGO_TARGET_DIR says, as they always have.
    let npm_dir = root.join("target");
    let agent_bin_dir = ensure_agent_clis(&npm_dir.join("agent-clis"))?;
    let sdk_dir = ensure_npm_packages(&npm_dir.join("sdks"), &SDK_PACKAGES, &[])?;
    ensure_iproute2()?;

    step(
        "cargo build --workspace --bins",
        cargo(["build", "--workspace", "--bins"])?,
    )?;
    let bin_dir = target_dir(&root).join("debug");

    let mut tests = cargo(["test", "--package", "relay-e2e"])?;
    if !test_args.is_empty() {
        tests.arg("--").args(test_args);
    }
    tests
        .env(ENV_E2E, "1")
        .env(ENV_BIN_DIR, &bin_dir)
        .env(ENV_AGENT_BIN_DIR, &agent_bin_dir)
        .env(ENV_SDK_DIR, &sdk_dir);
    step(
        &format!(
            "{ENV_E2E}=1 {ENV_BIN_DIR}={} {ENV_AGENT_BIN_DIR}={} {ENV_SDK_DIR}={} cargo test --package relay-e2e",
            bin_dir.display(),
            agent_bin_dir.display(),
            sdk_dir.display()
        ),
        tests,
    )
}

/// Where `ip` is looked for: `PATH`, then the sbin directories a user's `PATH` may lack.
const IP_DIRS: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

/// The `ip` executable (iproute2) in `path` (a `PATH` value) or [`IP_DIRS`], if any.
fn find_ip(path: &std::ffi::OsStr) -> Option<PathBuf> {
    crate::command::find_program("ip", path, &IP_DIRS)
}

/// The remote-mode tests create network namespaces with `ip` (they fail without it): when
/// it is missing, installs iproute2 with apt-get (CI runs as root on Debian), refreshing
/// the package lists once if the first attempt fails.
fn ensure_iproute2() -> Result<()> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(ip) = find_ip(&path) {
        println!("\n==> iproute2 already installed ({})", ip.display());
        return Ok(());
    }
    let install = || {
        let mut command = Command::new("apt-get");
        command
            .args(["install", "-y", "--no-install-recommends", "iproute2"])
            .env("DEBIAN_FRONTEND", "noninteractive");
        step("apt-get install -y iproute2", command)
    };
    if install().is_err() {
        let mut update = Command::new("apt-get");
        update.arg("update");
        step("apt-get update", update)?;
        install().context(
            "installing iproute2 for the remote e2e tests (they need `ip netns` and root)",
        )?;
    }
    if find_ip(&path).is_none() {
        bail!("apt-get installed iproute2 but `ip` is still not found");
    }
    Ok(())
}

/// Installs the pinned agent CLIs under `cache_dir` with npm unless all three are there
/// already at their pinned versions, and returns the directory holding their executables
/// (`cache_dir/node_modules/.bin`).
///
/// Fails loudly when npm is missing or the install fails: the e2e tests are about the real
/// CLIs, so there is no fallback.
pub(crate) fn ensure_agent_clis(cache_dir: &Path) -> Result<PathBuf> {
    let modules = ensure_npm_packages(cache_dir, &AGENT_PACKAGES, &AGENT_BINARIES)?;
    Ok(modules.join(".bin"))
}

/// Installs `packages` (name and pinned version) under `cache_dir` with npm unless they
/// are all there at their pins with every one of `binaries`, and returns the
/// `node_modules` directory holding them.
pub(crate) fn ensure_npm_packages(
    cache_dir: &Path,
    packages: &[(&str, &str)],
    binaries: &[&'static str],
) -> Result<PathBuf> {
    let modules = cache_dir.join("node_modules");
    let bin_dir = modules.join(".bin");
    let specs: Vec<String> = packages
        .iter()
        .map(|(package, version)| format!("{package}@{version}"))
        .collect();
    if missing_binaries(binaries, &bin_dir).is_empty()
        && stale_packages(packages, cache_dir).is_empty()
    {
        println!(
            "\n==> {} already installed in {}",
            specs.join(", "),
            modules.display()
        );
        return Ok(modules);
    }

    match Command::new("npm").arg("--version").output() {
        Ok(output) if output.status.success() => {}
        Ok(output) => bail!(
            "`npm --version` failed ({}): the e2e tests install {} with npm; fix the Node.js installation",
            output.status,
            specs.join(", ")
        ),
        Err(error) if error.kind() == io::ErrorKind::NotFound => bail!(
            "npm is not installed: the e2e tests install {} with npm; install Node.js 20 or newer with npm",
            specs.join(", ")
        ),
        Err(error) => return Err(error).context("running `npm --version`"),
    }

    std::fs::create_dir_all(cache_dir)
        .with_context(|| format!("creating {}", cache_dir.display()))?;
    let mut install = Command::new("npm");
    install
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--save-exact",
            "--prefix",
        ])
        .arg(cache_dir)
        .args(&specs);
    step(
        &format!(
            "npm install --no-audit --no-fund --save-exact --prefix {} {}",
            cache_dir.display(),
            specs.join(" ")
        ),
        install,
    )
    .with_context(|| format!("installing {} for the e2e tests", specs.join(", ")))?;

    let missing = missing_binaries(binaries, &bin_dir);
    if !missing.is_empty() {
        bail!(
            "npm install finished but {} missing from {}",
            missing.join(", "),
            bin_dir.display()
        );
    }
    let stale = stale_packages(packages, cache_dir);
    if !stale.is_empty() {
        bail!(
            "npm install finished but these packages are not at their pinned versions: {}",
            stale.join(", ")
        );
    }
    Ok(modules)
}

fn missing_binaries(binaries: &[&'static str], bin_dir: &Path) -> Vec<&'static str> {
    binaries
        .iter()
        .copied()
        .filter(|name| !bin_dir.join(name).is_file())
        .collect()
}

/// The pinned packages that are not installed at their pinned version, as
/// `package (installed X, pinned Y)`.
fn stale_packages(packages: &[(&str, &str)], cache_dir: &Path) -> Vec<String> {
    packages
        .iter()
        .filter_map(|(package, pinned)| {
            let installed = installed_version(cache_dir, package);
            (installed.as_deref() != Some(*pinned)).then(|| {
                format!(
                    "{package} (installed {}, pinned {pinned})",
                    installed.as_deref().unwrap_or("none")
                )
            })
        })
        .collect()
}

/// The `version` in `node_modules/<package>/package.json`, if it is there and readable.
fn installed_version(cache_dir: &Path, package: &str) -> Option<String> {
    let manifest = cache_dir
        .join("node_modules")
        .join(package)
        .join("package.json");
    let text = std::fs::read_to_string(manifest).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json.get("version")?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests;
