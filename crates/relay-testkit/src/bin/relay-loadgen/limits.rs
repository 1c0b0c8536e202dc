//! Open-file limits: the load generator's own, and the paced stand-in's, raised so the held streams fit.

#[cfg(target_os = "linux")]
use anyhow::Context as _;
use anyhow::Result;
#[cfg(not(target_os = "linux"))]
use anyhow::bail;
#[cfg(target_os = "linux")]
use relay_testkit::procfs;

/// Raises this process's soft open-file limit to its hard limit and returns the new soft limit.
#[cfg(unix)]
pub(crate) fn raise_own_open_file_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if setrlimit(Resource::Nofile, limit).is_err() {
            limit = getrlimit(Resource::Nofile);
        }
    }
    limit.current
}

#[cfg(not(unix))]
pub(crate) fn raise_own_open_file_limit() -> Option<u64> {
    None
}

/// Raises another process's soft open-file limit to its hard limit (same user, no privilege needed) and returns the new soft limit.
#[cfg(target_os = "linux")]
pub(crate) fn raise_open_file_limit_of(pid: u32) -> Result<String> {
    use rustix::process::{Pid, Resource, Rlimit, prlimit};
    let path = format!("/proc/{pid}/limits");
    let limits = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let hard = procfs::parse_hard_open_files(&limits)
        .with_context(|| format!("{path} has no readable \"Max open files\" line"))?;
    let raw = i32::try_from(pid).context("process id out of range")?;
    let target = Pid::from_raw(raw).context("process id 0")?;
    prlimit(
        Some(target),
        Resource::Nofile,
        Rlimit {
            current: hard,
            maximum: hard,
        },
    )
    .context("setting the open-file limit")?;
    Ok(hard.map_or_else(|| "unlimited".to_owned(), |n| n.to_string()))
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn raise_open_file_limit_of(_pid: u32) -> Result<String> {
    bail!("raising another process's limit needs Linux prlimit")
}
