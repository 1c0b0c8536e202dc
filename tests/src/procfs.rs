//! What Linux's `/proc` says about the processes a test started and the TCP sockets they
//! hold: which `relay-worker` processes belong to a machine-user (by their environment),
//! and which process owns the connection the provider stand-in saw a request on.
//!
//! Everything here is read-only and racy by nature (a process can exit between two
//! reads); callers poll with a deadline and treat an unreadable entry as absent.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

/// One line of `/proc/net/tcp` (IPv4 sockets of this network namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSocket {
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
    /// The kernel's state code (`0x01` established, `0x0A` listening, …).
    pub state: u8,
    /// Bytes received and not yet read by the owner.
    pub rx_queue: u64,
    pub inode: u64,
}

/// The kernel's code for an established connection.
pub const TCP_ESTABLISHED: u8 = 0x01;

/// Every IPv4 TCP socket of this network namespace; empty when `/proc` is unreadable.
pub fn tcp_sockets() -> Vec<TcpSocket> {
    std::fs::read_to_string("/proc/net/tcp")
        .map(|text| parse_tcp_table(&text))
        .unwrap_or_default()
}

/// Parses the text of `/proc/net/tcp`; lines it cannot read are skipped.
pub(crate) fn parse_tcp_table(text: &str) -> Vec<TcpSocket> {
    text.lines().skip(1).filter_map(parse_tcp_line).collect()
}

fn parse_tcp_line(line: &str) -> Option<TcpSocket> {
    let mut fields = line.split_whitespace();
    let _slot = fields.next()?;
    let local = parse_endpoint(fields.next()?)?;
    let remote = parse_endpoint(fields.next()?)?;
    let state = u8::from_str_radix(fields.next()?, 16).ok()?;
    let (_tx, rx) = fields.next()?.split_once(':')?;
    let rx_queue = u64::from_str_radix(rx, 16).ok()?;
    // tr:tm->when, retrnsmt, uid, timeout, then the inode.
    let inode = fields.nth(4)?.parse().ok()?;
    Some(TcpSocket {
        local,
        remote,
        state,
        rx_queue,
        inode,
    })
}

/// `0100007F:1F90`: the address as the kernel's in-memory `u32` printed in hex (so in host
/// byte order), then the port in hex.
fn parse_endpoint(text: &str) -> Option<SocketAddrV4> {
    let (ip, port) = text.split_once(':')?;
    let ip = u32::from_str_radix(ip, 16).ok()?;
    let port = u16::from_str_radix(port, 16).ok()?;
    Some(SocketAddrV4::new(Ipv4Addr::from(ip.to_ne_bytes()), port))
}

/// The socket inodes process `pid` holds open; empty when it is gone or unreadable.
pub fn socket_inodes(pid: u32) -> HashSet<u64> {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .filter_map(|target| {
            target
                .to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// The established connection from `local` to `remote`, as the kernel lists it.
pub fn connection(local: SocketAddr, remote: SocketAddr) -> Option<TcpSocket> {
    let (SocketAddr::V4(local), SocketAddr::V4(remote)) = (local, remote) else {
        return None;
    };
    tcp_sockets()
        .into_iter()
        .find(|socket| socket.local == local && socket.remote == remote)
}

/// Whether process `pid` holds the socket of the connection from `local` to `remote`.
pub fn owns_connection(pid: u32, local: SocketAddr, remote: SocketAddr) -> bool {
    connection(local, remote).is_some_and(|socket| socket_inodes(pid).contains(&socket.inode))
}

/// The live processes whose executable file is named `name` (by the first word of their
/// command line, as `exec` gave it) and whose environment has `key` set to `value`.
pub fn processes(name: &str, key: &str, value: &OsStr) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| program_name(*pid).as_deref() == Some(OsStr::new(name)))
        .filter(|pid| environ_var(*pid, key).as_deref() == Some(value))
        .collect();
    pids.sort_unstable();
    pids
}

/// The file name of a process's `argv[0]`; `None` for a zombie or a vanished process.
fn program_name(pid: u32) -> Option<std::ffi::OsString> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let argv0 = cmdline.split(|&byte| byte == 0).next()?;
    if argv0.is_empty() {
        return None;
    }
    Path::new(OsStr::from_bytes(argv0))
        .file_name()
        .map(OsStr::to_os_string)
}

/// One variable of a process's initial environment.
pub fn environ_var(pid: u32, key: &str) -> Option<std::ffi::OsString> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ
        .split(|&byte| byte == 0)
        .find_map(|entry| entry.strip_prefix(key.as_bytes())?.strip_prefix(b"="))
        .map(|value| OsStr::from_bytes(value).to_os_string())
}

/// The parent of a process, from `/proc/<pid>/stat`.
pub fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`; comm may hold spaces and parentheses, so split after the
    // last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The state letter of a process from `/proc/<pid>/stat` (`R`, `S`, `T` for stopped, `Z`
/// for a zombie, …); `None` once it is gone.
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// The CPUs process `pid` may run on, as `/proc/<pid>/status` lists them (`0-1`, `1`).
pub fn cpus_allowed_list(pid: u32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .map(|list| list.trim().to_owned())
}

/// Whether process `pid` still runs (it exists and is not a zombie waiting to be reaped).
pub fn is_alive(pid: u32) -> bool {
    state(pid).is_some_and(|state| !matches!(state, 'Z' | 'X'))
}

/// The path of a process's executable, if it still runs.
pub fn executable(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

#[cfg(test)]
mod tests;
