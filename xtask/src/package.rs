//! `cargo xtask package [--target TRIPLE]...`: one release archive per target (the host's
//! when none is given) under `<target dir>/dist/`, `relay-<version>-<triple>.tar.gz`.
//!
//! The archive holds one directory, `relay-<version>-<triple>/`, with `bin/` (the five
//! binaries), `deploy/` (service files, `install.sh`, `uninstall.sh`), `docs/`, `LICENSE` and
//! `SHA256SUMS` (the `sha256sum` format, over every other file). `deploy/install.sh` verifies
//! it before it installs anything.
//!
//! The binaries are built with `cargo build --release`; `RELAY_PACKAGE_PROFILE=debug`
//! packages debug binaries instead, which the e2e test uses to stay within minutes. The
//! archive is made with the system `tar` and the sums with the system `sha256sum` (coreutils),
//! so xtask needs no archive or hash crate. The last line on stdout is the archive's path.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::command::{cargo, project_root, step, target_dir};

/// The binaries every archive carries, in `bin/`.
pub(crate) const BINARIES: [&str; 5] = [
    "relayd",
    "relay-mcp",
    "relay-worker",
    "relay-hook",
    "relay-doctor",
];
/// The repository directories copied whole into the archive.
const DIRECTORIES: [&str; 2] = ["deploy", "docs"];
/// Selects the cargo profile of the packaged binaries: `release` (the default) or `debug`.
const ENV_PROFILE: &str = "RELAY_PACKAGE_PROFILE";

/// The cargo profile the binaries are built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Profile {
    Release,
    Debug,
}

impl Profile {
    /// The profile named by `RELAY_PACKAGE_PROFILE` (unset or empty: release).
    pub(crate) fn from_env_value(value: Option<&str>) -> Result<Profile> {
        match value.unwrap_or_default() {
            "" | "release" => Ok(Profile::Release),
            "debug" => Ok(Profile::Debug),
            other => bail!("{ENV_PROFILE} must be `release` or `debug`, got {other:?}"),
        }
    }

    /// The directory below the target directory cargo builds this profile into.
    fn dir(self) -> &'static str {
        match self {
            Profile::Release => "release",
            Profile::Debug => "debug",
        }
    }
}

/// The archive's top directory and file stem: `relay-<version>-<triple>`.
pub(crate) fn archive_stem(version: &str, triple: &str) -> String {
    format!("relay-{version}-{triple}")
}

/// The host triple from the output of `rustc -vV` (its `host: ` line).
pub(crate) fn host_triple(rustc_version: &str) -> Option<&str> {
    rustc_version
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .map(str::trim)
        .filter(|triple| !triple.is_empty())
}

/// What `cargo xtask package` was asked for: the targets named by `--target TRIPLE`
/// arguments (empty means the host's), or `--pgo`, the host's binaries built with
/// profile-guided optimisation.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) targets: Vec<String>,
    pub(crate) pgo: bool,
}

pub(crate) fn parse_request(args: &[String]) -> Result<Request> {
    let mut targets = Vec::new();
    let mut pgo = false;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == "--pgo" {
            pgo = true;
        } else if let Some(triple) = arg.strip_prefix("--target=") {
            targets.push(triple.to_owned());
        } else if arg == "--target" {
            let triple = args.next().context("--target needs a target triple")?;
            targets.push(triple.clone());
        } else {
            bail!("`cargo xtask package` takes `--target TRIPLE` or `--pgo`, got {arg:?}");
        }
    }
    if targets.iter().any(String::is_empty) {
        bail!("--target needs a target triple");
    }
    if pgo && !targets.is_empty() {
        // The training run executes the binaries, so only the host's can be trained.
        bail!("--pgo builds the host's binaries only, so it takes no --target");
    }
    Ok(Request { targets, pgo })
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let root = project_root()?;
    let profile = Profile::from_env_value(std::env::var(ENV_PROFILE).ok().as_deref())?;
    let host = host()?;
    let Request { mut targets, pgo } = parse_request(args)?;
    if pgo && profile == Profile::Debug {
        bail!("--pgo builds release binaries, so {ENV_PROFILE} must not be `debug`");
    }
    if targets.is_empty() {
        targets.push(host.clone());
    }
    let dist = target_dir(&root).join("dist");
    fs::create_dir_all(&dist).with_context(|| format!("could not create {}", dist.display()))?;
    let mut archives = Vec::new();
    for triple in &targets {
        let bin_dir = if pgo {
            crate::bench::build_release()?;
            crate::pgo::build(&root)?
        } else {
            build(&root, profile, triple, triple == &host)?
        };
        archives.push(assemble(&root, &bin_dir, &dist, triple)?);
    }
    for archive in &archives {
        println!("{}", archive.display());
    }
    Ok(())
}

/// The host triple, from `rustc -vV`.
pub(crate) fn host() -> Result<String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let output = Command::new(rustc)
        .arg("-vV")
        .output()
        .context("could not run `rustc -vV`")?;
    let text = String::from_utf8_lossy(&output.stdout);
    host_triple(&text)
        .map(str::to_owned)
        .with_context(|| format!("`rustc -vV` printed no host line:\n{text}"))
}

/// Builds the five binaries for `triple` and returns the directory they are in. The host is
/// built without `--target`, into the usual `target/<profile>`, so the build is shared with
/// every other cargo command.
fn build(root: &Path, profile: Profile, triple: &str, is_host: bool) -> Result<PathBuf> {
    let mut command = cargo(["build", "--bins"])?;
    for binary in BINARIES {
        command.args(["--package", binary]);
    }
    if profile == Profile::Release {
        command.arg("--release");
    }
    let mut out = target_dir(root);
    if !is_host {
        command.args(["--target", triple]);
        out.push(triple);
    }
    let name = format!(
        "cargo build --bins{}{} ({})",
        if profile == Profile::Release {
            " --release"
        } else {
            ""
        },
        if is_host {
            String::new()
        } else {
            format!(" --target {triple}")
        },
        BINARIES.join(", ")
    );
    step(&name, command)?;
    Ok(out.join(profile.dir()))
}

/// Stages the archive's directory under `dist`, writes `SHA256SUMS`, packs it with tar and
/// removes the staging directory.
fn assemble(root: &Path, bin_dir: &Path, dist: &Path, triple: &str) -> Result<PathBuf> {
    let stem = archive_stem(env!("CARGO_PKG_VERSION"), triple);
    let stage = dist.join(&stem);
    let archive = dist.join(format!("{stem}.tar.gz"));
    remove_dir_if_present(&stage)?;
    fs::create_dir_all(stage.join("bin"))
        .with_context(|| format!("could not create {}", stage.display()))?;
    for binary in BINARIES {
        let from = bin_dir.join(binary);
        if !from.is_file() {
            bail!("{} was not built", from.display());
        }
        copy(&from, &stage.join("bin").join(binary))?;
    }
    for directory in DIRECTORIES {
        copy_tree(&root.join(directory), &stage.join(directory))?;
    }
    copy(&root.join("LICENSE"), &stage.join("LICENSE"))?;
    write_sums(&stage)?;

    let mut tar = Command::new("tar");
    tar.args([
        "--create",
        "--gzip",
        "--sort=name",
        "--owner=0",
        "--group=0",
        "--numeric-owner",
        "--file",
    ])
    .arg(&archive)
    .arg("--directory")
    .arg(dist)
    .arg(&stem);
    step(&format!("tar --create {}", archive.display()), tar)?;
    remove_dir_if_present(&stage)?;
    Ok(archive)
}

/// Writes `SHA256SUMS` in `stage`: one `sha256sum` line per file below it, sorted by path.
fn write_sums(stage: &Path) -> Result<()> {
    let mut files = Vec::new();
    list_files(stage, Path::new(""), &mut files)?;
    files.sort();
    let output = Command::new("sha256sum")
        .arg("--")
        .args(&files)
        .current_dir(stage)
        .output()
        .context("could not run sha256sum (coreutils)")?;
    if !output.status.success() {
        bail!(
            "sha256sum failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let sums = stage.join("SHA256SUMS");
    fs::write(&sums, &output.stdout).with_context(|| format!("could not write {}", sums.display()))
}

/// Every file below `dir`, as paths relative to the staging root (`relative` is `dir`'s).
fn list_files(dir: &Path, relative: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    for entry in read_dir(dir)? {
        let path = entry.path();
        let name = relative.join(entry.file_name());
        if path.is_dir() {
            list_files(&path, &name, files)?;
        } else {
            files.push(name);
        }
    }
    Ok(())
}

/// Copies the directory `from` to `to`, files with their permissions.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to).with_context(|| format!("could not create {}", to.display()))?;
    for entry in read_dir(from)? {
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_tree(&path, &target)?;
        } else {
            copy(&path, &target)?;
        }
    }
    Ok(())
}

fn read_dir(dir: &Path) -> Result<Vec<fs::DirEntry>> {
    let entries = fs::read_dir(dir).with_context(|| format!("could not read {}", dir.display()))?;
    entries
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("could not read {}", dir.display()))
}

pub(crate) fn copy(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to)
        .map(drop)
        .with_context(|| format!("could not copy {} to {}", from.display(), to.display()))
}

pub(crate) fn remove_dir_if_present(dir: &Path) -> Result<()> {
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error).with_context(|| format!("could not remove {}", dir.display())),
    }
}

#[cfg(test)]
mod tests;
