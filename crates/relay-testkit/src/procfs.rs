//! The one reader of Linux's `/proc` for the bench: machine CPU time (`/proc/stat`), a process's state and CPU time (`/proc/<pid>/stat`), its memory, CPU mask and ids (`/proc/<pid>/status`), its open-file limit (`/proc/<pid>/limits`) and its children.
//! The parsers are pure functions of the file's text, so they are tested on captured lines; the readers beside them return `None` when the file is missing or unreadable (the process is gone, or this is not Linux).

use std::fs;
use std::time::Duration;

/// The length of one clock tick of `/proc/<pid>/stat` and `/proc/stat`: the kernel reports them in `USER_HZ`, which is 100 on every architecture Linux runs the bench on.
pub const CLOCK_TICK: Duration = Duration::from_millis(10);

/// CPU time of the whole machine, from the `cpu` line of `/proc/stat`, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineTicks {
    /// Every CPU's ticks, idle included.
    pub total: u64,
    /// Ticks not idle and not waiting for IO (steal included: another VM had the CPU).
    pub busy: u64,
    /// Ticks the hypervisor gave to someone else while this machine had work to run.
    pub steal: u64,
}

impl MachineTicks {
    /// Parses the text of `/proc/stat`.
    pub fn parse(text: &str) -> Option<MachineTicks> {
        let line = text.lines().find(|l| l.starts_with("cpu "))?;
        let ticks: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|t| t.parse().ok())
            .collect::<Option<_>>()?;
        // user nice system idle iowait irq softirq steal [guest guest_nice, already counted in user and nice]
        let counted = &ticks[..ticks.len().min(8)];
        let total: u64 = counted.iter().sum();
        let idle = counted.get(3)? + counted.get(4).copied().unwrap_or(0);
        Some(MachineTicks {
            total,
            busy: total.saturating_sub(idle),
            steal: counted.get(7).copied().unwrap_or(0),
        })
    }

    /// The machine's ticks now.
    pub fn read() -> Option<MachineTicks> {
        MachineTicks::parse(&fs::read_to_string("/proc/stat").ok()?)
    }
}

/// The fields of `/proc/<pid>/stat` the bench reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidStat {
    /// The one-letter state (`R`, `S`, `Z`, …).
    pub state: char,
    /// User and system time, in clock ticks.
    pub utime: u64,
    pub stime: u64,
    /// User and system time of the children this process has reaped.
    pub cutime: u64,
    pub cstime: u64,
}

impl PidStat {
    /// Parses one `/proc/<pid>/stat` line. The command name in parentheses may hold spaces and parentheses, so fields are counted after its last closing parenthesis.
    pub fn parse(text: &str) -> Option<PidStat> {
        let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
        // The state is field 3 of the line, the first after the name; utime, stime, cutime and cstime are fields 14 to 17.
        let number = |i: usize| fields.get(i)?.parse::<u64>().ok();
        Some(PidStat {
            state: fields.first()?.chars().next()?,
            utime: number(11)?,
            stime: number(12)?,
            cutime: number(13)?,
            cstime: number(14)?,
        })
    }

    /// A process's stat now; `None` once it is gone.
    pub fn read(pid: u32) -> Option<PidStat> {
        PidStat::parse(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }

    /// This process's stat now.
    pub fn read_self() -> Option<PidStat> {
        PidStat::parse(&fs::read_to_string("/proc/self/stat").ok()?)
    }

    /// utime + stime.
    pub fn ticks(&self) -> u64 {
        self.utime + self.stime
    }

    /// utime + stime + cutime + cstime: the process and every child it has reaped.
    pub fn ticks_with_children(&self) -> u64 {
        self.ticks() + self.cutime + self.cstime
    }

    /// True for a process that has ended but not been reaped (`Z`) or is being torn down (`X`).
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// utime + stime of every process in `pids`, summed; `None` when one of them cannot be read.
pub fn ticks_of(pids: &[u32]) -> Option<u64> {
    pids.iter()
        .map(|pid| PidStat::read(*pid).map(|stat| stat.ticks()))
        .sum()
}

/// Clock ticks as a duration.
pub fn ticks_to_duration(ticks: u64) -> Duration {
    CLOCK_TICK * u32::try_from(ticks).unwrap_or(u32::MAX)
}

/// The value of a `Name:\tvalue` line of `/proc/<pid>/status`, trimmed.
pub fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix(':')?;
        Some(rest.trim())
    })
}

/// How often a thread was preempted: the `nonvoluntary_ctxt_switches` line of its `/proc/<pid>/task/<tid>/status`.
pub fn parse_preemptions(status: &str) -> Option<u64> {
    status_field(status, "nonvoluntary_ctxt_switches")?
        .parse()
        .ok()
}

/// How often the threads of `pids` have been preempted, summed (a process's own `status` counts only its first thread). A thread that ends while it is read counts nothing; `None` once a process is gone.
pub fn preemptions_of(pids: &[u32]) -> Option<u64> {
    pids.iter()
        .map(|pid| {
            let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
            Some(
                tasks
                    .flatten()
                    .filter_map(|task| fs::read_to_string(task.path().join("status")).ok())
                    .filter_map(|status| parse_preemptions(&status))
                    .sum::<u64>(),
            )
        })
        .sum()
}

/// The `VmRSS:  1234 kB` line of `/proc/<pid>/status`, in bytes.
pub fn parse_vm_rss(status: &str) -> Option<u64> {
    let mut words = status_field(status, "VmRSS")?.split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => value.checked_mul(1024),
        _ => None,
    }
}

/// The text of `/proc/<pid>/status`.
pub fn read_status(pid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/status")).ok()
}

/// A process's resident set size in bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    parse_vm_rss(&read_status(pid)?)
}

/// The `Cpus_allowed_list` of a process as the kernel writes it (`0-1`).
pub fn cpus_allowed(pid: u32) -> Option<String> {
    status_field(&read_status(pid)?, "Cpus_allowed_list").map(str::to_owned)
}

/// The CPUs this process may run on.
pub fn own_cpus() -> Option<Vec<usize>> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    parse_cpu_list(status_field(&status, "Cpus_allowed_list")?)
}

/// The effective user id in a `/proc/<pid>/status` (the second number of its `Uid:` line).
pub fn parse_effective_uid(status: &str) -> Option<u32> {
    status_field(status, "Uid")?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// This process's effective user id.
pub fn own_effective_uid() -> Option<u32> {
    parse_effective_uid(&fs::read_to_string("/proc/self/status").ok()?)
}

/// Parses a kernel CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (first.parse::<usize>().ok()?, last.parse::<usize>().ok()?);
                if first > last {
                    return None;
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// The hard limit of the `Max open files  <soft>  <hard>  files` line of `/proc/<pid>/limits`; `Some(None)` is unlimited.
pub fn parse_hard_open_files(limits: &str) -> Option<Option<u64>> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut words = line["Max open files".len()..].split_whitespace();
    let _soft = words.next()?;
    match words.next()? {
        "unlimited" => Some(None),
        hard => hard.parse().ok().map(Some),
    }
}

/// The children of every thread of `pid`, from `/proc/<pid>/task/<tid>/children`.
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// The file name of the program in a `/proc/<pid>/cmdline` (arguments separated by NUL).
pub fn program_name(cmdline: &[u8]) -> Option<String> {
    file_name(cmdline.split(|b| *b == 0).next()?).map(str::to_owned)
}

/// The file name of the program `pid` runs.
pub fn program_of(pid: u32) -> Option<String> {
    program_name(&fs::read(format!("/proc/{pid}/cmdline")).ok()?)
}

/// True when `pid` runs the program named `name`, itself or under a wrapper such as
/// valgrind, which takes it as an argument.
pub fn runs_program(pid: u32, name: &str) -> bool {
    fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
        cmdline
            .split(|b| *b == 0)
            .any(|arg| file_name(arg) == Some(name))
    })
}

/// The last component of a path given as bytes.
fn file_name(path: &[u8]) -> Option<&str> {
    std::path::Path::new(std::str::from_utf8(path).ok()?)
        .file_name()?
        .to_str()
}

#[cfg(test)]
mod tests;
