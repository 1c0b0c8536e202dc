//! How relayd stops: cleanly on SIGTERM and on SIGHUP, and so also when its log cannot be
//! written (stderr on a full disk, or a pipe whose reader is gone): its log lines are
//! lost, never its life.

#![allow(
    clippy::unwrap_used,
    reason = "test set-up helpers fail the test on error"
)]

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::time::Duration;

use command_fds::{CommandFdExt as _, FdMapping};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

/// How long any one step may take.
const STEP: Duration = Duration::from_secs(20);

/// A relayd the test started on a listening socket of its own (fd 3, `LISTEN_FDS=1`, as
/// systemd passes one), so it can be asked at once: a connection waits in the backlog
/// until relayd serves it. Killed if the test ends before it stops.
struct Daemon {
    child: Child,
    addr: SocketAddr,
}

fn start(stderr: Stdio, dir: &std::path::Path) -> Daemon {
    std::fs::write(dir.join("config.toml"), "").unwrap();
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_relayd"));
    command
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir)
        .env("RELAY_SYSTEM_CONFIG_DIR", dir)
        .env("LISTEN_FDS", "1")
        .arg("--config")
        .arg(dir.join("config.toml"))
        .args(["--port", &addr.port().to_string(), "--log-level", "debug"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .kill_on_drop(true)
        .fd_mappings(vec![FdMapping {
            parent_fd: OwnedFd::from(listener),
            child_fd: 3,
        }])
        .unwrap();
    Daemon {
        child: command.spawn().unwrap(),
        addr,
    }
}

impl Daemon {
    /// `GET /healthz`'s status line.
    async fn health(&self) -> String {
        let ask = async {
            let mut stream = TcpStream::connect(self.addr).await.unwrap();
            let request = format!(
                "GET /healthz HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                self.addr
            );
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await.unwrap();
            answer.lines().next().unwrap_or_default().to_owned()
        };
        tokio::time::timeout(STEP, ask)
            .await
            .expect("relayd never answered")
    }

    /// Sends `signal` and returns the exit code.
    async fn stop(mut self, signal: rustix::process::Signal) -> Option<i32> {
        let pid = rustix::process::Pid::from_raw(i32::try_from(self.child.id().unwrap()).unwrap());
        rustix::process::kill_process(pid.unwrap(), signal).unwrap();
        let exit = tokio::time::timeout(STEP, self.child.wait()).await;
        exit.expect("relayd did not stop").unwrap().code()
    }
}

#[tokio::test]
async fn a_daemon_whose_stderr_is_full_serves_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let full = std::fs::File::options()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let daemon = start(Stdio::from(full), dir.path());
    assert_eq!(daemon.health().await, "HTTP/1.1 200 OK");
    // SIGTERM: drain and exit 0, writing lines no one can read.
    assert_eq!(daemon.stop(rustix::process::Signal::TERM).await, Some(0));
}

/// relayd has nothing to reload: a hang-up (its terminal closing) stops it cleanly, as
/// SIGTERM does, instead of killing it mid-request.
#[tokio::test]
async fn a_hang_up_stops_the_daemon_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = start(Stdio::null(), dir.path());
    assert_eq!(daemon.health().await, "HTTP/1.1 200 OK");
    assert_eq!(daemon.stop(rustix::process::Signal::HUP).await, Some(0));
}
