//! `cargo xtask pgo`: the five release binaries built with profile-guided optimisation.
//!
//! 1. The binaries are built instrumented (`-Cprofile-generate`) into `<target>/pgo/instrumented`.
//! 2. The bench's request measures run once against them at the quick scale (the training
//!    run), so every process writes a profile of the request paths as it exits.
//! 3. `llvm-profdata` (rustup's `llvm-tools` component, added when missing) merges the
//!    profiles into `<target>/pgo/relay.profdata`.
//! 4. The binaries are built again with `-Cprofile-use` into `<target>/pgo/optimized`.
//!
//! The stand-in and the load generator of the training run are the plain release builds, so
//! only Relay's own binaries write profiles. Both builds have target directories of their
//! own: their flags differ from a plain build's, which they would otherwise evict.

use std::{
    ffi::OsString,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::{
    bench,
    command::{cargo, project_root, step, target_dir},
    package::{BINARIES, copy, host, remove_dir_if_present},
};

/// The scenarios of the training run: the request paths an agent's traffic takes, through
/// relayd alone (to a plain and to an HTTPS provider, serving HTTPS, and passing streamed
/// answers) and through the worker, with and without plugins, and the hook path. The
/// memory, open-streams and instructions measures add nothing a profile needs and take long.
const TRAINING: [&str; 12] = [
    "latency",
    "ttfb",
    "throughput",
    "https-provider",
    "serving-https",
    "streamed-answers",
    "worker-latency",
    "worker-plugins",
    "worker-ttfb",
    "worker-body",
    "worker-throughput",
    "hook",
];

pub(crate) fn run(args: &[String]) -> Result<()> {
    if let Some(arg) = args.first() {
        bail!("`cargo xtask pgo` takes no arguments, got {arg:?}");
    }
    bench::build_release()?;
    let bin_dir = build(&project_root()?)?;
    println!("{}", bin_dir.display());
    Ok(())
}

/// Trains and builds the five binaries (the plain release build of the bench's binaries must
/// be there already) and returns the directory they are in.
pub(crate) fn build(root: &Path) -> Result<PathBuf> {
    let target = target_dir(root);
    let pgo = target.join("pgo");
    let profiles = pgo.join("profiles");
    let profdata_tool = llvm_profdata()?;

    let instrumented = pgo.join("instrumented");
    let generate = format!("-Cprofile-generate={}", profiles.display());
    step(
        "cargo build --release, instrumented for profiling",
        release_build(&instrumented, &generate)?,
    )?;
    // Build scripts are instrumented too, and wrote their profiles while the build ran.
    remove_dir_if_present(&profiles)?;
    let training = pgo.join("training");
    with_binaries(
        &training,
        &instrumented.join("release"),
        &target.join("release"),
    )?;
    println!(
        "\n==> the training run: the bench's request measures against the instrumented binaries"
    );
    bench::measure(&training, &bench::Options::training(&TRAINING))
        .context("the training run failed")?;

    let raw = profile_files(&profiles)?;
    if raw.is_empty() {
        bail!(
            "the training run left no profile in {}: an instrumented process writes one only when it exits by itself",
            profiles.display()
        );
    }
    let merged = pgo.join("relay.profdata");
    let mut merge = Command::new(&profdata_tool);
    merge.arg("merge").arg("-o").arg(&merged).args(&raw);
    step(
        &format!("llvm-profdata merge ({} profiles)", raw.len()),
        merge,
    )?;

    let optimized = pgo.join("optimized");
    let apply = format!("-Cprofile-use={}", merged.display());
    step(
        "cargo build --release, optimised with the profiles",
        release_build(&optimized, &apply)?,
    )?;
    Ok(optimized.join("release"))
}

/// The release build of the five binaries into `target_dir`, with `flag` added to the
/// caller's rustflags.
fn release_build(target_dir: &Path, flag: &str) -> Result<Command> {
    let mut command = cargo(["build", "--release", "--bins"])?;
    for binary in BINARIES {
        command.args(["--package", binary]);
    }
    command
        .env("CARGO_TARGET_DIR", target_dir)
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            encoded_rustflags(&caller_rustflags(), flag),
        )
        .env_remove("RUSTFLAGS");
    Ok(command)
}

/// The rustflags of the caller's environment, one per item: `CARGO_ENCODED_RUSTFLAGS` when
/// set (cargo prefers it), else `RUSTFLAGS` split at whitespace.
fn caller_rustflags() -> Vec<String> {
    if let Some(encoded) = std::env::var_os("CARGO_ENCODED_RUSTFLAGS") {
        let encoded = encoded.to_string_lossy();
        return encoded
            .split('\x1f')
            .filter(|flag| !flag.is_empty())
            .map(str::to_owned)
            .collect();
    }
    std::env::var("RUSTFLAGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// `CARGO_ENCODED_RUSTFLAGS` for `flags` and then `flag`: separated by 0x1f, so a path with
/// spaces stays one flag.
fn encoded_rustflags(flags: &[String], flag: &str) -> String {
    flags
        .iter()
        .map(String::as_str)
        .chain([flag])
        .collect::<Vec<_>>()
        .join("\x1f")
}

/// A directory holding Relay's five binaries from `relay_from` and every other binary the
/// bench runs (the stand-in, the load generator, the bare proxy) from `others_from`, as hard
/// links where the file system allows and copies elsewhere. relay-mcp starts the worker that
/// lies beside it, so both come from `relay_from`.
pub(crate) fn with_binaries(dir: &Path, relay_from: &Path, others_from: &Path) -> Result<()> {
    remove_dir_if_present(dir)?;
    fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))?;
    for entry in fs::read_dir(others_from)
        .with_context(|| format!("could not read {}", others_from.display()))?
    {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
            continue;
        };
        if is_executable(&path) && !BINARIES.contains(&name) {
            link_or_copy(&path, &dir.join(name))?;
        }
    }
    for binary in BINARIES {
        link_or_copy(&relay_from.join(binary), &dir.join(binary))?;
    }
    Ok(())
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

fn link_or_copy(from: &Path, to: &Path) -> Result<()> {
    if fs::hard_link(from, to).is_ok() {
        return Ok(());
    }
    copy(from, to)
}

/// The `.profraw` files in `dir`, sorted.
fn profile_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "profraw") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// `llvm-profdata` from the toolchain's `llvm-tools` component, which is added with rustup
/// when it is missing: it must be the LLVM that rustc itself uses, which reads the profiles
/// rustc's instrumentation writes.
fn llvm_profdata() -> Result<PathBuf> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
    let output = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .context("could not run `rustc --print sysroot`")?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    let tool = profdata_path(&sysroot, &host()?);
    if !tool.is_file() {
        let mut rustup = Command::new("rustup");
        rustup.args(["component", "add", "llvm-tools"]);
        // A rustup toolchain's sysroot is named for it.
        if let Some(toolchain) = sysroot.file_name() {
            rustup.arg("--toolchain").arg(toolchain);
        }
        step("rustup component add llvm-tools", rustup)
            .context("llvm-profdata is needed to merge the profiles")?;
    }
    if !tool.is_file() {
        bail!(
            "{} is missing after adding rustup's llvm-tools component",
            tool.display()
        );
    }
    Ok(tool)
}

/// Where the `llvm-tools` component puts `llvm-profdata` in a toolchain's sysroot.
fn profdata_path(sysroot: &Path, host: &str) -> PathBuf {
    sysroot
        .join("lib/rustlib")
        .join(host)
        .join("bin/llvm-profdata")
}

#[cfg(test)]
mod tests;
