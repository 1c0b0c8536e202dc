//! Instructions per proxied request, relayd beside nginx: each runs alone under valgrind's callgrind in front of the fast stand-in, and counts the instructions it executes while one keep-alive client sends it requests one at a time.
//! Then the same through a worker: relayd in managed mode and the worker of one MCP session, both under callgrind, counted together.
//!
//! Wall-clock CPU time on a shared 2-core machine moves by several percent between runs; an instruction count moves by well under one, so it tells whether a change to the request path made it cheaper. The kernel's work (system calls, the loopback) is not counted, and nginx runs as one process (`master_process off`) so that its whole work is under valgrind.

use std::{
    ffi::{OsStr, OsString},
    fs,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, Result, bail, ensure};
use relay_testkit::measures::{Measure, MeasureId};
use serde_json::json;

use super::PhaseRows;
use super::debian;
use super::nginx::{self, Nginx};
use super::pinning::Pinning;
use super::procs::{Relayd, RelaydMode, Scratch, StandIn, Upstreams};
use super::worker::{McpSession, SessionEnv};
use crate::command::find_program;

/// Requests before counting starts: connections, pools and caches are warm by then.
const WARM_UP: u32 = 300;
/// Requests counted.
const COUNTED: u32 = 2000;
/// The request's body: a tiny non-streaming Chat Completions turn, as the latency measure sends (the stand-in answers it on the Messages route too).
const BODY: &str = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#;
/// How long one answer may take under valgrind.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an MCP session may take to make its route ready with relayd and the worker under valgrind.
const WRAPPED_ROUTE_READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Counts relayd's instructions per request, then nginx's when it can run.
pub(super) fn run(
    bin_dir: &Path,
    pinning: &Pinning,
    fast: &StandIn,
    scratch: &Scratch,
) -> Result<PhaseRows> {
    let mut notes = Vec::new();
    // By its full path: the worker, which runs under it too, gets no `PATH`.
    let valgrind = debian::find_or_install("valgrind", &["valgrind"], || {
        let path = std::env::var_os("PATH").unwrap_or_default();
        find_program("valgrind", &path, &[]).filter(|found| debian::runs(found, "--version"))
    })?;
    let dir = scratch.path("callgrind");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let cpus = pinning.relayd.as_deref();

    let out = dir.join("relayd.out");
    let relayd = Relayd::start(
        bin_dir,
        cpus,
        RelaydMode::PassThrough,
        Upstreams::plain(fast.addr, fast.addr),
        scratch,
        &callgrind(&valgrind, &out),
    )?;
    println!(
        "\n==> relayd under callgrind (pid {}): {WARM_UP} requests, then {COUNTED} counted",
        relayd.process.pid()
    );
    let [relayd_count, relayd_agent] = count_both(relayd.addr, relayd.process.pid(), &out)?;
    drop(relayd);

    // The yardstick: hyper's server and client with nothing of Relay's between them.
    let out = dir.join("bare.out");
    let upstream = fast.addr.to_string();
    let bare = StandIn::start_program(
        bin_dir,
        "relay-bare-proxy",
        &callgrind(&valgrind, &out),
        cpus,
        &["--upstream", &upstream],
        scratch,
        "callgrind",
    )?;
    println!(
        "==> relay-bare-proxy under callgrind (pid {})",
        bare.process.pid()
    );
    let [bare_count, bare_agent] = count_both(bare.addr, bare.process.pid(), &out)?;
    drop(bare);

    let peer = nginx::find_or_install().and_then(|binary| {
        let out = dir.join("nginx.out");
        let nginx = Nginx::start(
            &binary,
            cpus,
            nginx::Layout::Alone,
            nginx::Site::Peer(fast.addr),
            scratch,
            &callgrind(&valgrind, &out),
        )?;
        println!("==> nginx under callgrind (pid {})", nginx.pid());
        count_both(nginx.addr, nginx.pid(), &out)
    });
    let (nginx_count, nginx_agent) = match peer {
        Ok([short, agent]) => (Some(short), Some(agent)),
        Err(error) => {
            notes.push(format!("nginx's instructions were not counted: {error:#}"));
            (None, None)
        }
    };
    let per_request = |count: u64| count as f64 / f64::from(COUNTED);
    let mut measures = Vec::new();
    for (id, relayd, bare, nginx, headers) in [
        (
            MeasureId::InstructionsPassThrough,
            relayd_count,
            bare_count,
            nginx_count,
            "the bench's few headers",
        ),
        (
            MeasureId::InstructionsAgentHeaders,
            relayd_agent,
            bare_agent,
            nginx_agent,
            "Claude Code's headers",
        ),
    ] {
        let (relayd, bare, nginx) = (
            per_request(relayd),
            per_request(bare),
            nginx.map(per_request),
        );
        let against = nginx
            .map(|n| format!(", {:.2}× nginx's", relayd / n))
            .unwrap_or_default();
        notes.push(format!(
            "instructions with {headers}: relayd, relay-bare-proxy (hyper's server and client with nothing between them) and nginx each alone under valgrind's callgrind, {COUNTED} sequential keep-alive requests after {WARM_UP}; user-space instructions only; relayd {relayd:.0} per request{against}; the bare proxy {bare:.0}, so relayd's own work is the {:.0} above it",
            relayd - bare
        ));
        measures.push(Measure::relay_only(id, relayd).with_peer(nginx));
    }
    let through_worker = worker_path(bin_dir, &valgrind, pinning, fast, &dir);
    let (relayd_managed, worker) = match through_worker {
        Ok([relayd, worker]) => {
            let both = per_request(relayd + worker);
            notes.push(format!(
                "instructions through the worker: relayd in managed mode and the worker under callgrind, the same requests with the route credential; relayd {:.0} and the worker {:.0} per request, {:.2}× relayd's in pass-through",
                per_request(relayd),
                per_request(worker),
                both / per_request(relayd_count)
            ));
            measures.push(Measure::relay_only(MeasureId::InstructionsWorker, both));
            (Some(relayd), Some(worker))
        }
        Err(error) => {
            notes.push(format!(
                "instructions through the worker were not counted: {error:#}"
            ));
            (None, None)
        }
    };
    Ok(PhaseRows {
        measures,
        notes,
        detail: json!({
            "warm_up": WARM_UP,
            "counted": COUNTED,
            "relayd_instructions": relayd_count,
            "bare_proxy_instructions": bare_count,
            "nginx_instructions": nginx_count,
            "agent_headers": {
                "fixture": AGENT_FIXTURE,
                "relayd_instructions": relayd_agent,
                "bare_proxy_instructions": bare_agent,
                "nginx_instructions": nginx_agent,
            },
            "worker_path": {
                "relayd_instructions": relayd_managed,
                "worker_instructions": worker,
            },
        }),
    })
}

/// Counts relayd's and the worker's instructions through the worker: relayd in managed mode under callgrind, and one MCP session whose worker runs under callgrind too.
/// relay-mcp starts the `relay-worker` beside its own executable, so a copy of relay-mcp goes into a directory whose `relay-worker` is a script that runs the real one under valgrind.
fn worker_path(
    bin_dir: &Path,
    valgrind: &Path,
    pinning: &Pinning,
    fast: &StandIn,
    dir: &Path,
) -> Result<[u64; 2]> {
    let scratch = Scratch::create()?;
    let wrapped_bin = scratch.path("bin");
    fs::create_dir_all(&wrapped_bin)
        .with_context(|| format!("creating {}", wrapped_bin.display()))?;
    let mcp = wrapped_bin.join("relay-mcp");
    fs::copy(bin_dir.join("relay-mcp"), &mcp)
        .with_context(|| format!("copying relay-mcp to {}", mcp.display()))?;
    let worker_out = dir.join("worker.out");
    let script = wrapper_script(
        &callgrind(valgrind, &worker_out),
        &bin_dir.join("relay-worker"),
    )?;
    let worker = wrapped_bin.join("relay-worker");
    fs::write(&worker, script).with_context(|| format!("writing {}", worker.display()))?;
    fs::set_permissions(&worker, fs::Permissions::from_mode(0o755))?;

    let relayd_out = dir.join("relayd-managed.out");
    let relayd = Relayd::start(
        bin_dir,
        pinning.relayd.as_deref(),
        RelaydMode::Managed,
        Upstreams::plain(fast.addr, fast.addr),
        &scratch,
        &callgrind(valgrind, &relayd_out),
    )?;
    let env = SessionEnv::new(&wrapped_bin, &relayd, pinning.relayd.clone(), &scratch)?;
    let mut session = McpSession::start(&env, "callgrind")?;
    let (_, worker_pid) = session
        .wait_until_ready(&env, WRAPPED_ROUTE_READY_TIMEOUT)
        .context("starting a session whose worker runs under callgrind")?;
    println!(
        "==> relayd (managed, pid {}) and its worker (pid {worker_pid}) under callgrind",
        relayd.process.pid()
    );
    let before = env.destinations("openai")?;
    let counts = count(
        relayd.addr,
        Some(&env.token),
        Head::Short,
        [
            (relayd.process.pid(), &relayd_out),
            (worker_pid, &worker_out),
        ],
    )?;
    // Every request must have gone to the worker: one passed through would count as relayd's alone.
    let after = env.destinations("openai")?;
    let sent = u64::from(WARM_UP + COUNTED);
    ensure!(
        after.0 - before.0 == sent && after.1 == before.1,
        "of {sent} requests relayd sent {} to the worker and {} straight to the provider",
        after.0 - before.0,
        after.1 - before.1
    );
    session.close().context("closing the session")?;
    Ok(counts)
}

/// A shell script that runs `program` under `wrapper` (a command and its arguments) with the script's own arguments.
pub(super) fn wrapper_script(wrapper: &[OsString], program: &Path) -> Result<String> {
    let mut script = String::from("#!/bin/sh\nexec");
    for word in wrapper
        .iter()
        .map(OsString::as_os_str)
        .chain([program.as_os_str()])
    {
        script.push(' ');
        script.push_str(&shell_quote(word)?);
    }
    script.push_str(" \"$@\"\n");
    Ok(script)
}

/// A word for `sh`, in single quotes.
fn shell_quote(word: &OsStr) -> Result<String> {
    let text = word
        .to_str()
        .with_context(|| format!("{word:?} is not UTF-8"))?;
    Ok(format!("'{}'", text.replace('\'', r"'\''")))
}

/// valgrind's command line: callgrind, counting nothing until told to.
fn callgrind(valgrind: &Path, out: &Path) -> Vec<OsString> {
    let mut file = OsString::from("--callgrind-out-file=");
    file.push(out);
    vec![
        valgrind.into(),
        "--tool=callgrind".into(),
        "--instr-atstart=no".into(),
        file,
    ]
}

/// The instructions one process under callgrind (its pid and its output file) ran for the bench's requests, then for Claude Code's.
fn count_both(addr: SocketAddr, pid: u32, out: &Path) -> Result<[u64; 2]> {
    let [short] = count(addr, None, Head::Short, [(pid, out)])?;
    let [agent] = count(addr, None, Head::ClaudeCode, [(pid, out)])?;
    Ok([short, agent])
}

/// Sends the warm-up requests to `addr` (with the route credential `token`, if any), turns counting on in each process under callgrind (its pid and its output file), sends the counted requests, dumps and turns counting off again: the instructions each process ran for them.
fn count<const N: usize>(
    addr: SocketAddr,
    token: Option<&str>,
    head: Head,
    counted: [(u32, &Path); N],
) -> Result<[u64; N]> {
    let mut client = Client::connect(addr, token, head)?;
    for _ in 0..WARM_UP {
        client.exchange()?;
    }
    for (pid, _) in counted {
        callgrind_control(&["-i", "on"], pid)?;
    }
    for _ in 0..COUNTED {
        client.exchange()?;
    }
    let mut totals_of = [0; N];
    for ((pid, out), total) in counted.into_iter().zip(&mut totals_of) {
        callgrind_control(&["-d"], pid)?;
        callgrind_control(&["-i", "off"], pid)?;
        let dump = last_dump(out)?;
        let text =
            fs::read_to_string(&dump).with_context(|| format!("reading {}", dump.display()))?;
        *total = totals(&text)
            .with_context(|| format!("{} has no instruction total", dump.display()))?;
    }
    Ok(totals_of)
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

/// What the counted requests carry.
#[derive(Debug, Clone, Copy)]
enum Head {
    /// `Content-Type` and `Authorization` (and the route credential, if any) on Chat Completions.
    Short,
    /// The headers of [`AGENT_FIXTURE`], as captured and in their order, on its route.
    ClaudeCode,
}

/// The captured request whose headers the agent's row sends.
const AGENT_FIXTURE: &str = "claude-code-messages-1";

/// One keep-alive connection sending the request and reading each answer whole.
struct Client {
    reader: BufReader<TcpStream>,
    request: Vec<u8>,
}

impl Client {
    /// A connection to `addr` whose requests carry `head`'s headers, and `token` as the route credential if given.
    fn connect(addr: SocketAddr, token: Option<&str>, head: Head) -> Result<Client> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(ANSWER_TIMEOUT))?;
        let credential = token
            .map(|token| format!("x-relay-client-token: {token}\r\n"))
            .unwrap_or_default();
        let (path, headers) = match head {
            Head::Short => (
                "/v1/chat/completions".to_owned(),
                "Content-Type: application/json\r\nAuthorization: Bearer sk-bench\r\n".to_owned(),
            ),
            Head::ClaudeCode => {
                let fixture = relay_testkit::fixture_request(AGENT_FIXTURE)?;
                let headers = fixture
                    .headers
                    .iter()
                    .map(|(name, value)| format!("{name}: {value}\r\n"))
                    .collect();
                (fixture.path, headers)
            }
        };
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}{credential}Content-Length: {}\r\n\r\n{BODY}",
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
