//! How relayd stops: cleanly on SIGTERM and on SIGHUP, and so also when its log cannot be
//! written (stderr on a full disk, or a pipe whose reader is gone): its log lines are
//! lost, never its life.

#![allow(
    clippy::unwrap_used,
    reason = "test set-up helpers fail the test on error"
)]

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    listener.local_addr().unwrap().port()
}

/// `GET /healthz`'s status line, once the daemon accepts connections.
fn health(daemon: &mut Child, port: u16, deadline: Instant) -> String {
    loop {
        if let Some(exit) = daemon.try_wait().unwrap() {
            panic!("relayd exited before it listened: {exit}");
        }
        if let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) {
            stream
                .write_all(format!("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").as_bytes())
                .unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).unwrap();
            return answer.lines().next().unwrap_or_default().to_owned();
        }
        assert!(Instant::now() < deadline, "relayd never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A relayd the test started, killed and reaped if the test fails before it stops.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A relayd started with `stderr`, once it answers `/healthz` with 200.
fn start(stderr: Stdio, dir: &std::path::Path) -> Daemon {
    std::fs::write(dir.join("config.toml"), "").unwrap();
    let port = free_port();
    let mut daemon = Daemon(
        Command::new(env!("CARGO_BIN_EXE_relayd"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", dir)
            .env("XDG_CONFIG_HOME", dir)
            .env("RELAY_SYSTEM_CONFIG_DIR", dir)
            .arg("--config")
            .arg(dir.join("config.toml"))
            .args(["--port", &port.to_string(), "--log-level", "debug"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap(),
    );
    let status = health(
        &mut daemon.0,
        port,
        Instant::now() + Duration::from_secs(20),
    );
    assert_eq!(status, "HTTP/1.1 200 OK");
    daemon
}

/// Sends `signal` and returns the exit code.
fn stop(mut daemon: Daemon, signal: rustix::process::Signal) -> Option<i32> {
    let pid = rustix::process::Pid::from_raw(i32::try_from(daemon.0.id()).unwrap()).unwrap();
    rustix::process::kill_process(pid, signal).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(exit) = daemon.0.try_wait().unwrap() {
            return exit.code();
        }
        assert!(Instant::now() < deadline, "relayd did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_daemon_whose_stderr_is_full_serves_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let full = std::fs::File::options()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let daemon = start(Stdio::from(full), dir.path());
    // SIGTERM: drain and exit 0, writing lines no one can read.
    assert_eq!(stop(daemon, rustix::process::Signal::TERM), Some(0));
}

/// relayd has nothing to reload: a hang-up (its terminal closing) stops it cleanly, as
/// SIGTERM does, instead of killing it mid-request.
#[test]
fn a_hang_up_stops_the_daemon_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = start(Stdio::null(), dir.path());
    assert_eq!(stop(daemon, rustix::process::Signal::HUP), Some(0));
}
