//! Running commands as visible, timed steps.

use std::{
    ffi::{OsStr, OsString},
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

/// The executable `name` in `path` (a `PATH` value), then in the directories `also`, if any.
pub(crate) fn find_program(name: &str, path: &OsStr, also: &[&str]) -> Option<PathBuf> {
    std::env::split_paths(path)
        .chain(also.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// The workspace root: the parent of this crate's directory.
pub(crate) fn project_root() -> Result<PathBuf> {
    let manifest_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map(std::path::Path::to_path_buf)
        .with_context(|| format!("{} has no parent directory", manifest_dir.display()))
}

/// Cargo's target directory: `CARGO_TARGET_DIR` (relative to the workspace root) or
/// `<root>/target`.
pub(crate) fn target_dir(root: &std::path::Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").filter(|dir| !dir.is_empty()) {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

/// The cargo that runs this xtask (so the pinned toolchain is used), in the workspace root.
pub(crate) fn cargo<const N: usize>(args: [&str; N]) -> Result<Command> {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut command = Command::new(program);
    command.args(args).current_dir(project_root()?);
    Ok(command)
}

/// Runs `command` as a named step: prints the name, inherits stdio, prints the duration, and
/// fails when the command cannot start or exits unsuccessfully.
pub(crate) fn step(name: &str, mut command: Command) -> Result<()> {
    println!("\n==> {name}");
    let started = Instant::now();
    let status = command
        .status()
        .with_context(|| format!("could not start `{name}`"))?;
    let elapsed = started.elapsed();
    if !status.success() {
        bail!("`{name}` failed ({status}) after {}", seconds(elapsed));
    }
    println!("==> {name}: ok in {}", seconds(elapsed));
    Ok(())
}

/// A duration as `12.3s`.
pub(crate) fn seconds(duration: Duration) -> String {
    format!("{:.1}s", duration.as_secs_f64())
}
