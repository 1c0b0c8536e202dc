//! A daemon whose log cannot be written (stderr on a full disk, or a pipe whose reader is
//! gone) keeps serving and stops cleanly: its log lines are lost, never its life.

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

#[test]
fn a_daemon_whose_stderr_is_full_serves_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), "").unwrap();
    let port = free_port();
    let full = std::fs::File::options()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_relayd"))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path())
        .env("RELAY_SYSTEM_CONFIG_DIR", dir.path())
        .arg("--config")
        .arg(dir.path().join("config.toml"))
        .args(["--port", &port.to_string(), "--log-level", "debug"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(full)
        .spawn()
        .unwrap();
    let status = health(&mut daemon, port, Instant::now() + Duration::from_secs(20));
    assert_eq!(status, "HTTP/1.1 200 OK");
    // SIGTERM: drain and exit 0, writing lines no one can read.
    let pid = rustix::process::Pid::from_raw(i32::try_from(daemon.id()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let exit = loop {
        if let Some(exit) = daemon.try_wait().unwrap() {
            break exit;
        }
        assert!(Instant::now() < deadline, "relayd did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(exit.code(), Some(0));
}
