//! Tools the bench runs beside relayd (nginx, valgrind), installed from Debian packages when they are missing and the bench runs as root; nothing is started or enabled by the install.

use std::{
    ffi::OsStr,
    path::PathBuf,
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail};
use relay_testkit::procfs;

/// The program `find` finds, installing the first of `packages` that installs when it is missing and this process may.
pub(super) fn find_or_install(
    what: &str,
    packages: &[&str],
    find: impl Fn() -> Option<PathBuf>,
) -> Result<PathBuf> {
    if let Some(found) = find() {
        return Ok(found);
    }
    if procfs::own_effective_uid() != Some(0) {
        bail!(
            "{what} is not installed and the bench does not run as root; install it with `apt-get install {}`",
            packages[0]
        );
    }
    println!("\n==> {what} is missing: installing it with apt-get");
    let mut last = String::new();
    for update_first in [false, true] {
        if update_first {
            let _ = apt(&["update"]);
        }
        for package in packages {
            match apt(&["install", "-y", "--no-install-recommends", package]) {
                Ok(()) => {
                    if let Some(found) = find() {
                        return Ok(found);
                    }
                }
                Err(error) => last = format!("{error:#}"),
            }
        }
    }
    bail!("could not install {what}: {last}")
}

/// True when `program` runs with `arg` (a version flag) and succeeds.
pub(super) fn runs(program: impl AsRef<OsStr>, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn apt(args: &[&str]) -> Result<()> {
    let status = Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .status()
        .context("running apt-get")?;
    if !status.success() {
        bail!("apt-get {} failed ({status})", args.join(" "));
    }
    Ok(())
}
