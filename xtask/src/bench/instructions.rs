//! Instructions per proxied request, relayd beside nginx: each runs alone under valgrind's callgrind in front of the fast stand-in, and counts the instructions it executes while one keep-alive client sends it requests one at a time.
//!
//! Wall-clock CPU time on a shared 2-core machine moves by several percent between runs; an instruction count moves by well under one, so it tells whether a change to the request path made it cheaper. The kernel's work (system calls, the loopback) is not counted, and nginx runs as one process (`master_process off`) so that its whole work is under valgrind.

use std::{
    ffi::OsString,
    fs,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use relay_testkit::measures::{Measure, MeasureId};
use serde_json::{Value, json};

use super::debian;
use super::nginx::{self, Nginx};
use super::pinning::Pinning;
use super::procs::{Relayd, RelaydMode, Scratch, StandIn};

/// Requests before counting starts: connections, pools and caches are warm by then.
const WARM_UP: u32 = 300;
/// Requests counted.
const COUNTED: u32 = 2000;
/// The request: a tiny non-streaming Chat Completions turn, as the latency measure sends.
const BODY: &str = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#;
/// How long one answer may take under valgrind.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// The instructions row, and what it was measured with.
pub(super) struct InstructionsPhase {
    pub(super) measure: Measure,
    pub(super) notes: Vec<String>,
    /// Raw figures for the JSON.
    pub(super) detail: Value,
}

/// Counts relayd's instructions per request, then nginx's when it can run.
pub(super) fn run(
    bin_dir: &Path,
    pinning: &Pinning,
    fast: &StandIn,
    scratch: &Scratch,
) -> Result<InstructionsPhase> {
    let mut notes = Vec::new();
    debian::find_or_install("valgrind", &["valgrind"], || {
        debian::runs("valgrind", "--version").then(|| PathBuf::from("valgrind"))
    })?;
    let dir = scratch.path("callgrind");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let cpus = pinning.relayd.as_deref();

    let out = dir.join("relayd.out");
    let relayd = Relayd::start(
        bin_dir,
        cpus,
        RelaydMode::PassThrough,
        fast.addr,
        fast.addr,
        scratch,
        &callgrind(&out),
    )?;
    println!(
        "\n==> relayd under callgrind (pid {}): {WARM_UP} requests, then {COUNTED} counted",
        relayd.process.pid()
    );
    let relayd_count = count(relayd.addr, relayd.process.pid(), &out)?;
    drop(relayd);

    // The yardstick: hyper's server and client with nothing of Relay's between them.
    let out = dir.join("bare.out");
    let upstream = fast.addr.to_string();
    let bare = StandIn::start_program(
        bin_dir,
        "relay-bare-proxy",
        &callgrind(&out),
        cpus,
        &["--upstream", &upstream],
        scratch,
        "callgrind",
    )?;
    println!(
        "==> relay-bare-proxy under callgrind (pid {})",
        bare.process.pid()
    );
    let bare_count = count(bare.addr, bare.process.pid(), &out)?;
    drop(bare);

    let peer = nginx::find_or_install().and_then(|binary| {
        let out = dir.join("nginx.out");
        let nginx = Nginx::start(
            &binary,
            cpus,
            nginx::Layout::Alone,
            fast.addr,
            scratch,
            &callgrind(&out),
        )?;
        println!("==> nginx under callgrind (pid {})", nginx.pid());
        count(nginx.addr, nginx.pid(), &out)
    });
    let nginx_count = match peer {
        Ok(count) => Some(count),
        Err(error) => {
            notes.push(format!("nginx's instructions were not counted: {error:#}"));
            None
        }
    };
    let relayd_per_request = relayd_count as f64 / f64::from(COUNTED);
    let bare_per_request = bare_count as f64 / f64::from(COUNTED);
    let nginx_per_request = nginx_count.map(|n| n as f64 / f64::from(COUNTED));
    let against = nginx_per_request
        .map(|n| format!(", {:.2}× nginx's", relayd_per_request / n))
        .unwrap_or_default();
    notes.push(format!(
        "instructions: relayd and nginx each alone under valgrind's callgrind, {COUNTED} sequential keep-alive requests after {WARM_UP}; user-space instructions only; relayd {relayd_per_request:.0} per request{against}"
    ));
    notes.push(format!(
        "instructions: relay-bare-proxy (hyper's server and client with nothing between them) {bare_per_request:.0} per request, the same way; relayd's own work is the {:.0} above it",
        relayd_per_request - bare_per_request
    ));
    Ok(InstructionsPhase {
        measure: Measure::relay_only(MeasureId::InstructionsPassThrough, relayd_per_request)
            .with_peer(nginx_per_request),
        notes,
        detail: json!({
            "warm_up": WARM_UP,
            "counted": COUNTED,
            "relayd_instructions": relayd_count,
            "bare_proxy_instructions": bare_count,
            "nginx_instructions": nginx_count,
        }),
    })
}

/// valgrind's command line: callgrind, counting nothing until told to.
fn callgrind(out: &Path) -> Vec<OsString> {
    let mut file = OsString::from("--callgrind-out-file=");
    file.push(out);
    vec![
        "valgrind".into(),
        "--tool=callgrind".into(),
        "--instr-atstart=no".into(),
        file,
    ]
}

/// Sends the warm-up requests, turns counting on, sends the counted ones and dumps: the instructions of the counted requests.
fn count(addr: SocketAddr, pid: u32, out: &Path) -> Result<u64> {
    let mut client = Client::connect(addr)?;
    for _ in 0..WARM_UP {
        client.exchange()?;
    }
    callgrind_control(&["-i", "on"], pid)?;
    for _ in 0..COUNTED {
        client.exchange()?;
    }
    callgrind_control(&["-d"], pid)?;
    let dump = last_dump(out)?;
    let text = fs::read_to_string(&dump).with_context(|| format!("reading {}", dump.display()))?;
    totals(&text).with_context(|| format!("{} has no instruction total", dump.display()))
}

fn callgrind_control(args: &[&str], pid: u32) -> Result<()> {
    let output = Command::new("callgrind_control")
        .args(args)
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .output()
        .context("running callgrind_control")?;
    if !output.status.success() {
        bail!(
            "callgrind_control {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// The newest dump of `out`: callgrind writes `<out>.1`, `<out>.2`, … on each request to dump.
fn last_dump(out: &Path) -> Result<PathBuf> {
    let name = out
        .file_name()
        .and_then(|n| n.to_str())
        .context("the callgrind file has no name")?;
    let dir = out
        .parent()
        .context("the callgrind file has no directory")?;
    let mut newest: Option<(u32, PathBuf)> = None;
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let number = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix(name)?.strip_prefix('.')?.parse::<u32>().ok());
        if let Some(number) = number
            && newest.as_ref().is_none_or(|(n, _)| number > *n)
        {
            newest = Some((number, path));
        }
    }
    newest
        .map(|(_, path)| path)
        .with_context(|| format!("callgrind wrote no dump next to {}", out.display()))
}

/// The instruction total of a callgrind dump: its `totals:` line (or `summary:`, which older versions write alone).
pub(super) fn totals(dump: &str) -> Option<u64> {
    let line = |key: &str| {
        dump.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
    };
    line("totals:").or_else(|| line("summary:"))
}

/// One keep-alive connection sending the request and reading each answer whole.
struct Client {
    reader: BufReader<TcpStream>,
    request: Vec<u8>,
}

impl Client {
    fn connect(addr: SocketAddr) -> Result<Client> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(ANSWER_TIMEOUT))?;
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAuthorization: Bearer sk-bench\r\nContent-Length: {}\r\n\r\n{BODY}",
            BODY.len()
        )
        .into_bytes();
        Ok(Client {
            reader: BufReader::new(stream),
            request,
        })
    }

    /// One request and its whole answer, which must be 200.
    fn exchange(&mut self) -> Result<()> {
        self.reader.get_mut().write_all(&self.request)?;
        let mut status = String::new();
        self.reader.read_line(&mut status)?;
        if !status.starts_with("HTTP/1.1 200") {
            bail!("the answer was {:?}, not 200", status.trim());
        }
        let (mut length, mut chunked) = (None, false);
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line)? == 0 {
                bail!("the connection closed inside an answer's head");
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    length = Some(value.parse::<usize>().context("a bad Content-Length")?);
                } else if name.eq_ignore_ascii_case("transfer-encoding") {
                    chunked = value.eq_ignore_ascii_case("chunked");
                }
            }
        }
        if chunked {
            self.read_chunks()
        } else {
            let mut body = vec![0; length.unwrap_or(0)];
            self.reader.read_exact(&mut body)?;
            Ok(())
        }
    }

    fn read_chunks(&mut self) -> Result<()> {
        loop {
            let mut size = String::new();
            self.reader.read_line(&mut size)?;
            let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
                .context("a bad chunk size")?;
            // The chunk and its CRLF; the last chunk is followed by the empty trailer line.
            let mut chunk = vec![0; size + 2];
            self.reader.read_exact(&mut chunk)?;
            if size == 0 {
                return Ok(());
            }
        }
    }
}
