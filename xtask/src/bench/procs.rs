//! The processes of a bench run: a child stopped when its handle drops, the scratch directory, the stand-ins, relayd and the load generator.

use std::{
    ffi::OsString,
    fs,
    io::{BufRead as _, BufReader, Read as _},
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use super::http::{is_relayd_healthy, is_relayd_healthy_over_tls};
use crate::command::seconds;

/// How long a stand-in may take to print its address.
const STAND_IN_START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long relayd may take to answer `/healthz`.
const RELAYD_START_TIMEOUT: Duration = Duration::from_secs(10);
/// The same under a wrapper such as valgrind, which starts it many times slower.
const WRAPPED_START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a process may take to stop after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Attempts at starting relayd, each on a fresh free port, when the port was taken in between.
pub(super) const PORT_ATTEMPTS: usize = 5;
/// Environment variables relayd reads that must not leak from the caller into a measurement.
const RELAYD_ENV_REMOVED: [&str; 7] = [
    "RELAY_LOG",
    "RELAY_LOG_FORMAT",
    "RELAY_DAEMON_MAX_TOKENS_PER_IDENTITY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "NO_PROXY",
    "no_proxy",
];

/// A command for `program`, under `taskset -c <cpus>` when pinned. taskset execs the program, so the child's pid is the program's.
pub(super) fn pinned_command(program: &Path, cpus: Option<&str>) -> Command {
    match cpus {
        Some(cpus) => {
            let mut command = Command::new("taskset");
            command.arg("-c").arg(cpus).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// How long a program may take to start: `unwrapped`, or [`WRAPPED_START_TIMEOUT`] under a wrapper.
pub(super) fn start_timeout(wrapper: &[OsString], unwrapped: Duration) -> Duration {
    if wrapper.is_empty() {
        unwrapped
    } else {
        WRAPPED_START_TIMEOUT
    }
}

/// A command for `program` run by `wrapper` (a command and its arguments, such as valgrind's), pinned as [`pinned_command`] pins; `program` alone when `wrapper` is empty.
pub(super) fn wrapped_command(wrapper: &[OsString], program: &Path, cpus: Option<&str>) -> Command {
    match wrapper.split_first() {
        None => pinned_command(program, cpus),
        Some((first, rest)) => {
            let mut command = pinned_command(Path::new(first), cpus);
            command.args(rest).arg(program);
            command
        }
    }
}

/// A child process that is stopped and reaped when this drops.
#[derive(Debug)]
pub(super) struct Process {
    name: String,
    pub(super) child: Child,
}

impl Process {
    pub(super) fn spawn(name: &str, mut command: Command) -> Result<Process> {
        let child = command
            .spawn()
            .with_context(|| format!("starting {name} ({command:?})"))?;
        Ok(Process {
            name: name.to_owned(),
            child,
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the process has ended.
    pub(super) fn exited(&mut self) -> Result<Option<std::process::ExitStatus>> {
        self.child
            .try_wait()
            .with_context(|| format!("checking on {}", self.name))
    }
}

impl Drop for Process {
    /// SIGTERM first, so the process stops as it would in service (nginx's master stops its
    /// workers, relayd drains and exits, and a build instrumented for profile-guided
    /// optimisation writes its profile on the way out), then SIGKILL for whatever is left
    /// after [`STOP_TIMEOUT`].
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .stderr(Stdio::null())
                .status();
            let deadline = Instant::now() + STOP_TIMEOUT;
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(10));
            }
            // Killing may race with a natural exit; either way the process is gone after wait.
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// A private scratch directory (config file, XDG dirs, logs), removed on drop.
#[derive(Debug)]
pub(super) struct Scratch {
    pub(super) dir: PathBuf,
}

impl Scratch {
    pub(super) fn create() -> Result<Scratch> {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let dir = std::env::temp_dir().join(format!("relay-bench-{}-{nanos}", std::process::id()));
        fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Scratch { dir })
    }

    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// An empty log file for a child's stderr.
    pub(super) fn log(&self, name: &str) -> Result<(PathBuf, fs::File)> {
        let path = self.path(name);
        let file =
            fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok((path, file))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The last lines of a child's log, for an error message.
pub(super) fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(15)..].join("\n");
    if tail.is_empty() {
        "(no output)".to_owned()
    } else {
        tail
    }
}

/// A running `relay-stand-in`, or another of the testkit's servers that says where it listens the same way (`relay-bare-proxy`).
#[derive(Debug)]
pub(super) struct StandIn {
    pub(super) addr: SocketAddr,
    pub(super) process: Process,
}

impl StandIn {
    /// Starts a stand-in on a free port and waits for its `listening` line. Its standard input stays open in this process, so it also stops if the xtask dies.
    pub(super) fn start(
        bin_dir: &Path,
        cpus: Option<&str>,
        extra: &[&str],
        scratch: &Scratch,
        label: &str,
    ) -> Result<StandIn> {
        StandIn::start_program(bin_dir, "relay-stand-in", &[], cpus, extra, scratch, label)
    }

    /// Starts `program` from `bin_dir` with `--port 0` and `extra`, under `wrapper` when it is not empty, and waits for its `listening` line, as [`StandIn::start`] does.
    pub(super) fn start_program(
        bin_dir: &Path,
        program: &str,
        wrapper: &[OsString],
        cpus: Option<&str>,
        extra: &[&str],
        scratch: &Scratch,
        label: &str,
    ) -> Result<StandIn> {
        let name = format!("{program} ({label})");
        let (log, log_file) = scratch.log(&format!("{program}-{label}.stderr"))?;
        let mut command = wrapped_command(wrapper, &bin_dir.join(program), cpus);
        command
            .args(["--port", "0"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file);
        let mut process = Process::spawn(&name, command)?;
        let stdout = process
            .child
            .stdout
            .take()
            .with_context(|| format!("{name} has no stdout pipe"))?;
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = tx.send(reader.read_line(&mut line).map(|_| line));
            // Keep draining so the stand-in never blocks on a full pipe.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        let timeout = start_timeout(wrapper, STAND_IN_START_TIMEOUT);
        let line = match rx.recv_timeout(timeout) {
            Ok(Ok(line)) => line,
            Ok(Err(error)) => {
                return Err(error).with_context(|| format!("reading {name}'s stdout"));
            }
            Err(_) => bail!(
                "{name} did not print its address within {timeout:?}; its stderr:\n{}",
                log_tail(&log)
            ),
        };
        let addr = parse_listening(&line).with_context(|| {
            format!(
                "{name} printed {line:?} instead of `listening <addr>`; its stderr:\n{}",
                log_tail(&log)
            )
        })?;
        Ok(StandIn { addr, process })
    }
}

/// The address in the stand-in's `listening 127.0.0.1:<port>` line.
pub(super) fn parse_listening(line: &str) -> Option<SocketAddr> {
    line.trim().strip_prefix("listening ")?.parse().ok()
}

/// How a bench relayd serves and routes model requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RelaydMode<'a> {
    /// `--pass-through`: every request goes straight to the stand-ins.
    PassThrough,
    /// The same, serving HTTPS with these files, as a relayd for remote clients does.
    PassThroughServingHttps(&'a TlsFiles),
    /// The default managed mode: requests with a credential whose worker is ready go to the worker.
    Managed,
}

impl RelaydMode<'_> {
    /// The scratch subdirectory of this relayd's files, and its name in messages.
    fn label(self) -> &'static str {
        match self {
            RelaydMode::PassThrough => "pass-through",
            RelaydMode::PassThroughServingHttps(_) => "pass-through-serving-https",
            RelaydMode::Managed => "managed",
        }
    }
}

/// A certificate made for the run and its key, as PEM files; the certificate is also the one root a client needs to trust it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TlsFiles {
    pub(super) cert: PathBuf,
    pub(super) key: PathBuf,
}

impl TlsFiles {
    /// A self-signed certificate for `names` (an IP address becomes an IP name), written into `dir`.
    pub(super) fn make(dir: &Path, names: &[&str]) -> Result<TlsFiles> {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
        let made = rcgen::generate_simple_self_signed(names).context("making a certificate")?;
        let files = TlsFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        // Both new files: a file already there is not the run's. The key is its owner's
        // alone, as relayd wants a key it serves (it warns otherwise).
        write_new(&files.cert, made.cert.pem().as_bytes(), 0o644)?;
        write_new(
            &files.key,
            made.signing_key.serialize_pem().as_bytes(),
            0o600,
        )?;
        Ok(files)
    }
}

/// Writes `contents` into a new file at `path` with `mode`.
fn write_new(path: &Path, contents: &[u8], mode: u32) -> Result<()> {
    let mut options = fs::OpenOptions::new();
    std::os::unix::fs::OpenOptionsExt::mode(options.write(true).create_new(true), mode);
    options
        .open(path)
        .and_then(|mut file| std::io::Write::write_all(&mut file, contents))
        .with_context(|| format!("writing {}", path.display()))
}

/// A running relayd.
#[derive(Debug)]
pub(super) struct Relayd {
    pub(super) addr: SocketAddr,
    pub(super) process: Process,
    /// Its `RELAY_SYSTEM_CONFIG_DIR`, whose `config.toml` also gives a worker its upstreams.
    pub(super) system_dir: PathBuf,
}

impl Relayd {
    /// relayd refuses `--port 0`, so a free port is found by binding and closing it; if another process takes it in between, relayd exits and the next attempt uses a fresh port.
    /// It runs under `wrapper` (a command and its arguments) when that is not empty.
    /// Its files live in the scratch subdirectory named for `mode` (and `-https` when its upstreams are): `relayd.toml`, `daemon/` (its `XDG_CONFIG_HOME`) and `system/` (`RELAY_SYSTEM_CONFIG_DIR`).
    /// In managed mode the same upstreams also go to `system/config.toml`, because a worker takes `[upstream]` only from the config files (SPEC §8).
    pub(super) fn start(
        bin_dir: &Path,
        cpus: Option<&str>,
        mode: RelaydMode<'_>,
        upstreams: Upstreams,
        scratch: &Scratch,
        wrapper: &[OsString],
    ) -> Result<Relayd> {
        let start_timeout = start_timeout(wrapper, RELAYD_START_TIMEOUT);
        let label = match upstreams.trusted {
            Some(_) => format!("{}-https", mode.label()),
            None => mode.label().to_owned(),
        };
        let dir = scratch.path(&label);
        let xdg = dir.join("daemon");
        let system_dir = dir.join("system");
        for dir in [&xdg, &system_dir] {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let config_text = relayd_config(&upstreams);
        let config = dir.join("relayd.toml");
        let mut config_files = vec![config.clone()];
        if mode == RelaydMode::Managed {
            config_files.push(system_dir.join("config.toml"));
        }
        for file in &config_files {
            fs::write(file, &config_text).with_context(|| format!("writing {}", file.display()))?;
        }
        let mut last_log = String::new();
        for attempt in 1..=PORT_ATTEMPTS {
            let port = free_port()?;
            let (log, log_file) = scratch.log(&format!("{label}/relayd-{attempt}.stderr"))?;
            let mut command = wrapped_command(wrapper, &bin_dir.join("relayd"), cpus);
            command.args(["--port", &port.to_string()]);
            match mode {
                RelaydMode::PassThrough => {
                    command.arg("--pass-through");
                }
                RelaydMode::PassThroughServingHttps(tls) => {
                    command
                        .arg("--pass-through")
                        .arg("--tls-cert")
                        .arg(&tls.cert)
                        .arg("--tls-key")
                        .arg(&tls.key);
                }
                RelaydMode::Managed => {}
            }
            command
                .arg("--config")
                .arg(&config)
                .args(["--log-level", "warn"])
                .env("XDG_CONFIG_HOME", &xdg)
                .env("RELAY_SYSTEM_CONFIG_DIR", &system_dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log_file);
            for name in RELAYD_ENV_REMOVED {
                command.env_remove(name);
            }
            if let Some(trusted) = upstreams.trusted {
                // The roots relayd trusts for providers are the platform's, read from here.
                command.env("SSL_CERT_FILE", trusted);
            }
            let mut process = Process::spawn(&format!("relayd ({label})"), command)?;
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let deadline = Instant::now() + start_timeout;
            loop {
                if let Some(status) = process.exited()? {
                    last_log = log_tail(&log);
                    if last_log.contains("binding") {
                        // The port was taken between our probe and relayd's bind: try another.
                        break;
                    }
                    bail!("relayd exited at start-up ({status}); its stderr:\n{last_log}");
                }
                let healthy = match mode {
                    RelaydMode::PassThroughServingHttps(tls) => {
                        is_relayd_healthy_over_tls(addr, &tls.cert)
                    }
                    RelaydMode::PassThrough | RelaydMode::Managed => is_relayd_healthy(addr),
                };
                if healthy {
                    return Ok(Relayd {
                        addr,
                        process,
                        system_dir,
                    });
                }
                if Instant::now() >= deadline {
                    bail!(
                        "relayd did not answer /healthz on {addr} within {start_timeout:?}; its stderr:\n{}",
                        log_tail(&log)
                    );
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        bail!(
            "relayd could not bind a free port in {PORT_ATTEMPTS} attempts; last stderr:\n{last_log}"
        )
    }
}

/// relayd's config file: both provider families go to the local stand-ins.
/// `[daemon] max_requests_per_identity` for the bench: the open-streams measure holds 1,000
/// streams through one worker with one credential, over the default of 256 requests in
/// flight per route.
const BENCH_REQUESTS_PER_IDENTITY: u32 = 2048;

pub(super) fn relayd_config(upstreams: &Upstreams) -> String {
    let Upstreams {
        openai,
        anthropic,
        trusted,
    } = upstreams;
    let scheme = if trusted.is_some() { "https" } else { "http" };
    format!(
        "# Written by cargo xtask bench.\n[upstream]\nopenai_base_url = \"{scheme}://{openai}/v1\"\nanthropic_base_url = \"{scheme}://{anthropic}\"\n# One credential holds the 1,000 streams of the worker open-streams measure.\n[daemon]\nmax_requests_per_identity = {BENCH_REQUESTS_PER_IDENTITY}\n"
    )
}

/// Where a bench relayd sends each provider family.
#[derive(Debug, Clone, Copy)]
pub(super) struct Upstreams<'a> {
    pub(super) openai: SocketAddr,
    pub(super) anthropic: SocketAddr,
    /// Over HTTPS, trusting this certificate (as `SSL_CERT_FILE`); plain HTTP when `None`.
    pub(super) trusted: Option<&'a Path>,
}

impl Upstreams<'_> {
    pub(super) fn plain(openai: SocketAddr, anthropic: SocketAddr) -> Upstreams<'static> {
        Upstreams {
            openai,
            anthropic,
            trusted: None,
        }
    }
}

/// A port that was free a moment ago.
pub(super) fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
    Ok(listener
        .local_addr()
        .context("reading the probe's address")?
        .port())
}

/// Runs the load generator with `args` (and `envs`), waits at most `timeout`, and returns its JSON report.
pub(super) fn run_loadgen(
    bin_dir: &Path,
    cpus: Option<&str>,
    args: &[OsString],
    envs: &[(&str, &str)],
    what: &str,
    timeout: Duration,
) -> Result<Value> {
    let mut command = pinned_command(&bin_dir.join("relay-loadgen"), cpus);
    command
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    println!("\n==> relay-loadgen ({what})");
    let started = Instant::now();
    let mut process = Process::spawn("relay-loadgen", command)?;
    let mut stdout = process
        .child
        .stdout
        .take()
        .context("relay-loadgen has no stdout pipe")?;
    let reader = thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).map(|_| text)
    });
    let status = loop {
        if let Some(status) = process.exited()? {
            break status;
        }
        if started.elapsed() >= timeout {
            bail!("relay-loadgen did not finish within {timeout:?}");
        }
        thread::sleep(Duration::from_millis(100));
    };
    let output = reader
        .join()
        .map_err(|_| anyhow::anyhow!("the thread reading relay-loadgen's output panicked"))?
        .context("reading relay-loadgen's output")?;
    if !status.success() {
        bail!("relay-loadgen failed ({status}); see its messages above");
    }
    println!("==> relay-loadgen: ok in {}", seconds(started.elapsed()));
    serde_json::from_str(&output).context("relay-loadgen's output is not JSON")
}
