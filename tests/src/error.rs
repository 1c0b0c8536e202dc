//! The harness's one error type: every way setting up or driving a process can fail, each
//! with what a reader of a failed test needs to act on it.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::bins::{ENV_AGENT_BIN_DIR, ENV_BIN_DIR, ENV_SDK_DIR};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{binary} is missing from {}: run `cargo xtask e2e` (it builds every binary and sets {ENV_BIN_DIR}), or build with `cargo build --workspace --bins`",
        dir.display()
    )]
    BinaryMissing { binary: String, dir: PathBuf },
    #[error(
        "{ENV_BIN_DIR} is unset and the test executable {} has no grandparent directory to look in: run `cargo xtask e2e`",
        exe.display()
    )]
    NoBinDir { exe: PathBuf },
    #[error("{ENV_BIN_DIR} is unset and the test executable's path is unknown")]
    CurrentExe {
        #[source]
        source: io::Error,
    },
    #[error(
        "{ENV_AGENT_BIN_DIR} is not set: the agent CLI tests need the real CLIs; run `cargo xtask e2e`, which installs them into target/agent-clis and sets {ENV_AGENT_BIN_DIR}"
    )]
    AgentBinDirUnset,
    #[error(
        "agent CLI {agent} is missing from {}: run `cargo xtask e2e`, which installs the pinned CLIs",
        dir.display()
    )]
    AgentMissing { agent: String, dir: PathBuf },
    #[error(
        "{ENV_SDK_DIR} is not set: the SDK tests need the official provider SDKs; run `cargo xtask e2e`, which installs them into target/sdks and sets {ENV_SDK_DIR}"
    )]
    SdkDirUnset,
    #[error(
        "the provider SDKs are missing from {}: run `cargo xtask e2e`, which installs the pinned SDKs",
        dir.display()
    )]
    SdkMissing { dir: PathBuf },
    #[error("creating the temporary directory for a test process")]
    TempDir {
        #[source]
        source: io::Error,
    },
    #[error("writing {}", path.display())]
    WriteFile {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("binding a loopback listener for relayd")]
    Bind {
        #[source]
        source: io::Error,
    },
    #[error("two file descriptor mappings for fd {child_fd}")]
    FdMappingCollision { child_fd: i32 },
    #[error("starting {}", program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{program} has no process id: it was already reaped")]
    NoPid { program: String },
    #[error("sending {signal} to {program} (pid {pid})")]
    Signal {
        program: String,
        pid: u32,
        signal: String,
        #[source]
        source: io::Error,
    },
    #[error("waiting for {program} to exit")]
    Wait {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("{program} did not exit within {timeout:?}; its stderr:\n{stderr}")]
    ExitTimedOut {
        program: String,
        timeout: Duration,
        stderr: String,
    },
    #[error("{program} did not log {event:?} within {timeout:?}; its stderr:\n{stderr}")]
    LogEventTimedOut {
        program: String,
        event: String,
        timeout: Duration,
        stderr: String,
    },
    #[error("{program} closed its stderr without logging {event:?}; its stderr:\n{stderr}")]
    LogEventMissing {
        program: String,
        event: String,
        stderr: String,
    },
    #[error("connecting to {addr}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("HTTP/1.1 handshake with {addr}")]
    Handshake {
        addr: SocketAddr,
        #[source]
        source: hyper::Error,
    },
    #[error("sending {method} {target} to {addr}")]
    Send {
        addr: SocketAddr,
        method: String,
        target: String,
        #[source]
        source: hyper::Error,
    },
    #[error("the answer from {addr} broke off after {received} body bytes")]
    BodyBrokeOff {
        addr: SocketAddr,
        received: usize,
        #[source]
        source: hyper::Error,
    },
    #[error("the request target {target:?} has no path")]
    RequestTarget { target: String },
    #[error(
        "{agent} did not exit within {timeout:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
    )]
    AgentTimedOut {
        agent: String,
        timeout: Duration,
        stdout: String,
        stderr: String,
    },
    #[error("expected {expected} relay-worker process(es) within {timeout:?}, found {found:?}")]
    WorkerCount {
        expected: usize,
        found: Vec<u32>,
        timeout: Duration,
    },
    #[error("writing to the stdin of {program}")]
    WriteStdin {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("{program} has no stdin or stdout pipe (already taken or closed)")]
    NoPipe { program: String },
    #[error("a line from {program} is not JSON: {line:?}")]
    NotJson { program: String, line: String },
    #[error("the worker gate {} was not opened within {timeout:?}: no worker was launched", fifo.display())]
    GateTimedOut { fifo: PathBuf, timeout: Duration },
    #[error("preparing the gated worker launch in {}", dir.display())]
    Gate {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("preparing the broken worker binary in {}", dir.display())]
    BrokenWorker {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("opening a control session to {addr}")]
    ControlDial {
        addr: SocketAddr,
        #[source]
        source: tokio_tungstenite::tungstenite::Error,
    },
    #[error("the control session failed")]
    ControlTransport(#[from] relay_proxy::control::TransportError),
    #[error("no secure random numbers are available")]
    Random,
    #[error("making a TLS identity for a test endpoint")]
    TlsIdentity(#[from] relay_proxy::worker::IdentityError),
    #[error("the daemon address {address:?} is not valid: {reason}")]
    DaemonAddress { address: String, reason: String },
    #[error("the machine identity key")]
    Key(#[from] relay_identity::KeyError),
    #[error("{program} is still running: stop it before starting it again")]
    StillRunning { program: String },
    #[error(
        "relayd's socket was not kept: build it with `keep_socket()` to start it again on the same socket"
    )]
    SocketNotKept,
    #[error("process {pid} ({program}) is not one of this user's worker processes")]
    NotAWorker { program: String, pid: u32 },
    #[error("process {pid} ({program}) did not exit within {timeout:?}")]
    PidStillAlive {
        program: String,
        pid: u32,
        timeout: Duration,
    },
}
