//! Which CPU each process of the bench runs on.

use std::process::{Command, Stdio};

use relay_testkit::procfs;

/// Which CPUs each process is pinned to (a `taskset -c` list), or `None` for unpinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Pinning {
    pub(super) loadgen: Option<String>,
    pub(super) stand_ins: Option<String>,
    pub(super) relayd: Option<String>,
    /// One sentence saying what was done, printed and written to the JSON.
    pub(super) note: String,
}

impl Pinning {
    pub(super) fn detect(unpinned: bool) -> Pinning {
        if unpinned {
            return Pinning::unpinned("--unpinned was given".to_owned());
        }
        let allowed = procfs::own_cpus();
        let taskset = Command::new("taskset")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        Pinning::plan(allowed.as_deref(), taskset)
    }

    /// With three or more CPUs every party gets its own.
    /// With two, the load generator gets one and the stand-ins share the other with relayd: a request then crosses between CPUs twice on both paths (client to server side and back), so the added figure is relayd's own work and its extra loopback hop, not an extra cross-CPU wake-up that the direct path would not pay.
    fn unpinned(why: String) -> Pinning {
        Pinning {
            loadgen: None,
            stand_ins: None,
            relayd: None,
            note: format!("processes are not pinned: {why}"),
        }
    }

    pub(super) fn plan(allowed: Option<&[usize]>, taskset: bool) -> Pinning {
        let unpinned = Pinning::unpinned;
        if !taskset {
            return unpinned("taskset is not installed".to_owned());
        }
        let cpus = match allowed {
            None => return unpinned("Cpus_allowed_list is unreadable".to_owned()),
            Some(cpus) if cpus.len() < 2 => {
                return unpinned(format!("only {} CPU is available", cpus.len()));
            }
            Some(cpus) => cpus,
        };
        let list = |cpus: &[usize]| {
            cpus.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        let (loadgen, stand_ins, relayd) = match cpus {
            [a, b] => (list(&[*a]), list(&[*b]), list(&[*b])),
            [a, b, rest @ ..] => (list(&[*a]), list(&[*b]), list(rest)),
            _ => return unpinned("no CPU list".to_owned()),
        };
        let note = format!(
            "pinned with taskset: relay-loadgen on CPU {loadgen}, stand-ins on CPU {stand_ins}, relayd on CPU {relayd}"
        );
        Pinning {
            loadgen: Some(loadgen),
            stand_ins: Some(stand_ins),
            relayd: Some(relayd),
            note,
        }
    }
}

impl Pinning {
    /// How many CPUs relayd (and its peer) may use, for the peer's worker count.
    pub(super) fn server_cpu_count(&self) -> usize {
        match &self.relayd {
            Some(list) => procfs::parse_cpu_list(list).map_or(1, |cpus| cpus.len()),
            None => procfs::own_cpus().map_or(1, |cpus| cpus.len()),
        }
    }
}
