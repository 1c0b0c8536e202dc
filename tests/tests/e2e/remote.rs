//! Remote mode across a real network boundary (SPEC §9, §5.1, §5.5, §2.6): relayd in one
//! network namespace with native TLS and an https advertised origin, the client machine
//! in another, joined by a veth pair whose private addresses exist only inside those two
//! namespaces. Every certificate is generated here, with IP subject-alternative names.
//!
//! From the client namespace a real Codex session reaches the provider stand-in (on the
//! client namespace's loopback, where the remote worker calls it) through its remote
//! worker; a wrong CA, a certificate without the daemon's IP and plain http to a
//! non-loopback daemon are each refused with a message that names the cause; cutting the
//! veth for less than the reconnect grace recovers the same worker, for longer a new
//! worker takes over; a daemon restart on the same address with the same state is
//! survived; one remote address cannot fill the daemon's hook-body budget; a worker that
//! advertises an address behind NAT is told why it is refused, and the doctor says so.
//!
//! The namespaces need root (CI runs `cargo xtask e2e` as root): when they cannot be
//! created the test fails, naming what is missing; it never skips. Nothing but the two
//! veth addresses and each namespace's own loopback is ever a target, and the namespaces
//! are deleted when the test ends, also when it panics.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::{BodyExt as _, Full};
use relay_e2e::http::{post_json, request};
use relay_e2e::{AGENT_TIMEOUT, AgentCommand, Logs, Mcp, Process, START_TIMEOUT, User};
use relay_testkit::DEFAULT_TEXT;
use tempfile::TempDir;
use tokio::io::AsyncWriteExt as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

use super::support::{
    CLI_TIMEOUT, EVENT_TIMEOUT, INITIALIZE_TIMEOUT, STATUS_POLL, WORKER_TIMEOUT, field,
    fresh_token, new_ca, trusting,
};

/// The daemon's port inside the server namespace (nothing else listens there).
const DAEMON_PORT: u16 = 8443;
/// A second daemon, with a certificate that does not name the daemon's address.
const WRONG_NAME_PORT: u16 = 8444;
/// The remote worker's port inside the client namespace (`RELAY_WORKER_PORT`).
const WORKER_PORT: u16 = 9443;
/// The stand-in's port on the client namespace's loopback.
const STAND_IN_PORT: u16 = 8080;
/// `[daemon.timers] reconnect_grace_secs` of these tests.
const GRACE: Duration = Duration::from_secs(8);
/// For connecting to a daemon inside a namespace.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Tells the namespaces of the tests of one process apart.
static NEXT_NET: AtomicU8 = AtomicU8::new(1);

/// Two network namespaces joined by a veth pair: `srv` holds `SRV_IP`, `cli` `CLI_IP`.
/// Dropping it deletes both (and so the veth pair).
#[derive(Debug)]
struct Net {
    ip: PathBuf,
    srv: String,
    cli: String,
    veth_cli: String,
    srv_ip: Ipv4Addr,
    cli_ip: Ipv4Addr,
}

impl Net {
    /// Creates the namespaces, the veth pair with a private /30 inside them, and brings up
    /// loopback in both. Fails (never skips) when `ip` is missing or not allowed to.
    fn create() -> anyhow::Result<Net> {
        let ip = find_ip()?;
        let n = NEXT_NET.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // The addresses exist only inside these namespaces, so every test may use its own
        // /30 without meeting anyone else's.
        let net = Net {
            ip,
            srv: format!("relay-srv-{pid}-{n}"),
            cli: format!("relay-cli-{pid}-{n}"),
            veth_cli: format!("rc{pid}x{n}"),
            srv_ip: Ipv4Addr::new(10, 213, n, 1),
            cli_ip: Ipv4Addr::new(10, 213, n, 2),
        };
        let veth_srv = format!("rs{pid}x{n}");
        net.ip(&["netns", "add", &net.srv])?;
        net.ip(&["netns", "add", &net.cli])?;
        net.ip(&[
            "-n",
            &net.srv,
            "link",
            "add",
            &veth_srv,
            "type",
            "veth",
            "peer",
            "name",
            &net.veth_cli,
            "netns",
            &net.cli,
        ])?;
        for (ns, veth, addr) in [
            (&net.srv, &veth_srv, net.srv_ip),
            (&net.cli, &net.veth_cli, net.cli_ip),
        ] {
            net.ip(&["-n", ns, "addr", "add", &format!("{addr}/30"), "dev", veth])?;
            net.ip(&["-n", ns, "link", "set", veth, "up"])?;
            net.ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    /// Runs `ip args` to its end; an error names the command and what it printed.
    fn ip(&self, args: &[&str]) -> anyhow::Result<()> {
        let out = std::process::Command::new(&self.ip)
            .args(args)
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            anyhow::bail!(
                "`ip {}` failed ({}): {}; the remote e2e tests create network namespaces and need root (cargo xtask e2e runs as root in CI)",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// `program` run inside `ns` by `ip netns exec`, with a cleared environment (plus
    /// `PATH`), stdin closed and the output discarded; adjust before spawning.
    fn command(&self, ns: &str, program: &Path) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.ip);
        command
            .args(["netns", "exec", ns])
            .arg(program)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        command
    }

    /// Takes the client's end of the veth down (`up: false`) or up again.
    fn set_link(&self, up: bool) -> anyhow::Result<()> {
        let state = if up { "up" } else { "down" };
        self.ip(&["-n", &self.cli, "link", "set", &self.veth_cli, state])
    }

    fn daemon_origin(&self, port: u16) -> String {
        format!("https://{}:{port}", self.srv_ip)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Deleting a namespace removes its end of the veth pair, and so the pair.
        for ns in [&self.srv, &self.cli] {
            let _ = std::process::Command::new(&self.ip)
                .args(["netns", "del", ns])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// `ip` from `PATH` or the usual sbin directories (a test's `PATH` may lack them).
fn find_ip() -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join("ip"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "`ip` (iproute2) is not installed: the remote e2e tests need it to create network namespaces; `cargo xtask e2e` installs it when it runs as root"
            )
        })
}

/// A connection to `addr` made from inside `ns`: a fresh thread moves into the namespace
/// and connects, so the socket belongs to it; nothing else runs on that thread.
fn connect_in(ns: &str, addr: SocketAddr) -> anyhow::Result<tokio::net::TcpStream> {
    let ns_file = PathBuf::from("/run/netns").join(ns);
    let stream = std::thread::spawn(move || -> anyhow::Result<std::net::TcpStream> {
        let file = std::fs::File::open(&ns_file)?;
        rustix::thread::move_into_link_name_space(
            file.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )?;
        let stream = std::net::TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
        stream.set_nonblocking(true)?;
        Ok(stream)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the thread connecting inside {ns} panicked"))??;
    Ok(tokio::net::TcpStream::from_std(stream)?)
}

/// Sends `req` over HTTPS to `addr` from inside `ns`, trusting `ca` only; the status and
/// the whole body.
async fn https(
    ns: &str,
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
    mut req: http::Request<Full<Bytes>>,
) -> anyhow::Result<(StatusCode, Bytes)> {
    let config = trusting(ca)?;
    let tcp = connect_in(ns, addr)?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await?;
    let connection = tokio::spawn(connection);
    req.headers_mut()
        .insert(http::header::HOST, addr.to_string().parse()?);
    let answer = sender.send_request(req).await;
    let result = async {
        let (parts, body) = answer?.into_parts();
        let body = body.collect().await?.to_bytes();
        anyhow::Ok((parts.status, body))
    }
    .await;
    connection.abort();
    result
}

/// The test CA, a daemon certificate naming the server's veth address and 127.0.0.1, one
/// naming neither, and an unrelated CA, as PEM files.
#[derive(Debug)]
struct Pki {
    dir: TempDir,
    ca_der: CertificateDer<'static>,
}

impl Pki {
    fn generate(net: &Net) -> anyhow::Result<Pki> {
        let dir = tempfile::Builder::new()
            .prefix("relay-e2e-pki-")
            .tempdir()?;
        let ca = new_ca("relay e2e remote test ca")?;
        std::fs::write(dir.path().join("ca.pem"), ca.pem())?;
        let other = new_ca("relay e2e unrelated ca")?;
        std::fs::write(dir.path().join("other-ca.pem"), other.pem())?;
        for (name, sans) in [
            (
                "daemon",
                vec![net.srv_ip.to_string(), "127.0.0.1".to_owned()],
            ),
            // A certificate the CA signed for some other host.
            ("wrong-name", vec!["relay.example.com".to_owned()]),
        ] {
            let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
            let mut params = rcgen::CertificateParams::new(sans)?;
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, "relayd");
            let cert = params.signed_by(&key, &ca)?;
            std::fs::write(dir.path().join(format!("{name}.pem")), cert.pem())?;
            let key_path = dir.path().join(format!("{name}-key.pem"));
            std::fs::write(&key_path, key.serialize_pem())?;
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600))?;
        }
        let ca_der = CertificateDer::from(ca.der().to_vec());
        Ok(Pki { dir, ca_der })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// relayd in the server namespace on `0.0.0.0:<port>` (that namespace has only its
/// loopback and its veth address) with TLS, an https advertised origin and short timers.
#[derive(Debug)]
struct Daemon {
    process: Process,
    previous: Vec<Logs>,
    command: Vec<std::ffi::OsString>,
    envs: Vec<(&'static str, PathBuf)>,
    port: u16,
    dir: TempDir,
}

impl Daemon {
    async fn start(net: &Net, pki: &Pki, cert: &str, port: u16) -> anyhow::Result<Daemon> {
        Daemon::start_with(net, pki, cert, port, &[]).await
    }

    /// [`Daemon::start`] with `extra` arguments after the usual ones.
    async fn start_with(
        net: &Net,
        pki: &Pki,
        cert: &str,
        port: u16,
        extra: &[&str],
    ) -> anyhow::Result<Daemon> {
        let dir = tempfile::Builder::new()
            .prefix("relay-e2e-remote-relayd-")
            .tempdir()?;
        for sub in ["home", "xdg", "system"] {
            std::fs::create_dir(dir.path().join(sub))?;
        }
        let config = dir.path().join("config.toml");
        write_private(&config, &daemon_config())?;
        let origin = net.daemon_origin(port);
        let command: Vec<std::ffi::OsString> = [
            "--bind".into(),
            "0.0.0.0".into(),
            "--port".into(),
            port.to_string().into(),
            "--advertise-address".into(),
            origin.into(),
            "--tls-cert".into(),
            pki.path(&format!("{cert}.pem")).into(),
            "--tls-key".into(),
            pki.path(&format!("{cert}-key.pem")).into(),
            "--config".into(),
            config.into(),
        ]
        .into_iter()
        .chain(extra.iter().map(Into::into))
        .collect();
        let envs = vec![
            ("HOME", dir.path().join("home")),
            ("XDG_CONFIG_HOME", dir.path().join("xdg")),
            ("RELAY_SYSTEM_CONFIG_DIR", dir.path().join("system")),
        ];
        let process = Daemon::spawn(net, &command, &envs, dir.path()).await?;
        Ok(Daemon {
            process,
            previous: Vec::new(),
            command,
            envs,
            port,
            dir,
        })
    }

    async fn spawn(
        net: &Net,
        args: &[std::ffi::OsString],
        envs: &[(&'static str, PathBuf)],
        cwd: &Path,
    ) -> anyhow::Result<Process> {
        let mut command = net.command(&net.srv, &relay_e2e::binary("relayd")?);
        command.args(args).current_dir(cwd);
        for (key, value) in envs {
            command.env(key, value);
        }
        let process = Process::spawn("relayd", command)?;
        process
            .logs()
            .wait_for_event("daemon_listening", START_TIMEOUT)
            .await?;
        Ok(process)
    }

    fn logs(&self) -> &Logs {
        self.process.logs()
    }

    /// SIGTERM, the exit, then relayd again with the same flags, directories and state on
    /// the same address and port.
    async fn restart(&mut self, net: &Net) -> anyhow::Result<()> {
        let status = self.process.stop().await?;
        assert!(status.success(), "relayd stopped with {status}");
        let process = Daemon::spawn(net, &self.command, &self.envs, self.dir.path()).await?;
        let previous = std::mem::replace(&mut self.process, process);
        self.previous.push(previous.logs().clone());
        Ok(())
    }

    /// `GET path` over HTTPS from the server namespace's loopback (so the status
    /// endpoints answer), as JSON or text.
    async fn get(&self, net: &Net, pki: &Pki, path: &str) -> anyhow::Result<(StatusCode, Bytes)> {
        https(
            &net.srv,
            SocketAddr::from((Ipv4Addr::LOCALHOST, self.port)),
            &pki.ca_der,
            request(Method::GET, path, &[], Bytes::new())?,
        )
        .await
    }

    async fn workers(&self, net: &Net, pki: &Pki) -> anyhow::Result<Vec<serde_json::Value>> {
        let (status, body) = self.get(net, pki, "/_relay/v1/workers/status").await?;
        assert_eq!(status, StatusCode::OK, "{body:?}");
        let list: serde_json::Value = serde_json::from_slice(&body)?;
        Ok(list["workers"].as_array().cloned().unwrap_or_default())
    }

    /// Polls the worker list until a `ready` worker with control available is there (and
    /// is not `not`), and returns its id.
    async fn wait_ready_worker(
        &self,
        net: &Net,
        pki: &Pki,
        not: Option<&str>,
        timeout: Duration,
    ) -> anyhow::Result<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut poll = tokio::time::interval(STATUS_POLL * 5);
        loop {
            poll.tick().await;
            let workers = self.workers(net, pki).await?;
            let ready = workers.iter().find(|w| {
                w["state"] == "ready"
                    && w["control_available"] == true
                    && Some(field(w, "worker_id")) != not
            });
            if let Some(worker) = ready {
                return Ok(field(worker, "worker_id").to_owned());
            }
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!(
                    "no ready worker (other than {not:?}) within {timeout:?}: {workers:?}\n--- relayd ---\n{}",
                    self.logs().text()
                );
            }
        }
    }

    /// How many requests of `route` relayd counted toward `destination`.
    async fn requests_to(
        &self,
        net: &Net,
        pki: &Pki,
        route: &str,
        destination: &str,
    ) -> anyhow::Result<u64> {
        let (status, body) = self.get(net, pki, "/metrics").await?;
        assert_eq!(status, StatusCode::OK);
        let text = String::from_utf8_lossy(&body);
        let sum = relay_e2e::metrics::sample_sum(
            &text,
            "relay_requests_total",
            &[("route", route), ("destination", destination)],
        );
        Ok(sum as u64)
    }
}

/// Short timers (SPEC §8: every timer is configurable so tests can shorten it): pings
/// every second on the non-loopback sessions, a pong within one, and a grace of
/// [`GRACE`]. The daemon's own upstream is nowhere reachable from its namespace, so a
/// request it passed through would fail instead of looking like a worker's answer.
fn daemon_config() -> String {
    format!(
        "[upstream]\nanthropic_base_url = \"http://127.0.0.1:{STAND_IN_PORT}\"\nopenai_base_url = \"http://127.0.0.1:{STAND_IN_PORT}/v1\"\n\n[daemon]\n\n[daemon.timers]\ndrain_secs = 1\nreconnect_grace_secs = {}\nretry_base_ms = 200\nping_secs = 1\npong_timeout_secs = 1\nreconnect_first_ms = 100\nreconnect_cap_ms = 500\nreconnect_attempt_timeout_secs = 2\nchallenge_limit = 64\n",
        GRACE.as_secs()
    )
}

/// The worker's config (it reads `[upstream]` only from files): the stand-in on the client
/// namespace's loopback.
fn worker_upstream() -> String {
    format!(
        "[upstream]\nanthropic_base_url = \"http://127.0.0.1:{STAND_IN_PORT}\"\nopenai_base_url = \"http://127.0.0.1:{STAND_IN_PORT}/v1\"\n"
    )
}

fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, contents)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}

/// The `relay-stand-in` binary on the client namespace's loopback, where the remote worker
/// calls the provider; it stops when the test drops it (its stdin closes).
async fn start_stand_in(net: &Net) -> anyhow::Result<tokio::process::Child> {
    let mut command = net.command(&net.cli, &relay_e2e::binary("relay-stand-in")?);
    command
        .args(["--port", &STAND_IN_PORT.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = command.spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("the stand-in has no stdout"))?;
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let line = tokio::time::timeout(START_TIMEOUT, lines.next_line()).await??;
    anyhow::ensure!(
        line.as_deref()
            .is_some_and(|l| l.starts_with("listening 127.0.0.1:")),
        "the stand-in printed {line:?}"
    );
    Ok(child)
}

/// A wrapper, written into `dir`, that runs the real relay-mcp inside the namespace `ns`
/// (the worker it launches, the binary beside it, inherits the namespace).
fn mcp_in(net: &Net, ns: &str, dir: &Path) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let script = dir.join(format!("relay-mcp-in-{ns}"));
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nexec '{}' netns exec '{}' '{}' \"$@\"\n",
            net.ip.display(),
            ns,
            relay_e2e::binary("relay-mcp")?.display()
        ),
    )?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    Ok(script)
}

/// One client machine-user of the remote daemon: its directories, its worker's upstream,
/// and the environment of a remote client.
struct Client {
    user: User,
    token: String,
    wrapper: PathBuf,
}

impl Client {
    fn new(net: &Net) -> anyhow::Result<Client> {
        let user = User::new()?;
        user.write_system_config(&worker_upstream())?;
        let wrapper = mcp_in(net, &net.cli, user.dir())?;
        Ok(Client {
            user,
            token: fresh_token()?,
            wrapper,
        })
    }

    /// relay-mcp in the client namespace toward `origin`, trusting `ca_file`, with the
    /// remote worker's hint; `initialize` is not sent yet.
    fn spawn_mcp(&self, net: &Net, origin: &str, ca_file: &Path) -> anyhow::Result<Mcp> {
        self.spawn_mcp_advertising(net.cli_ip, origin, ca_file)
    }

    /// As [`Client::spawn_mcp`], with the worker advertising `advertise`.
    fn spawn_mcp_advertising(
        &self,
        advertise: Ipv4Addr,
        origin: &str,
        ca_file: &Path,
    ) -> anyhow::Result<Mcp> {
        Ok(self
            .user
            .mcp(origin)?
            .token(&self.token)
            .log("info", "jsonl")
            .env("RELAY_EXTRA_CA_FILE", ca_file)
            .env("RELAY_WORKER_ADVERTISE_ADDRESS", advertise.to_string())
            .env("RELAY_WORKER_PORT", WORKER_PORT.to_string())
            .program(self.wrapper.clone())
            .spawn()?)
    }

    /// relay-mcp started, initialized, and reporting a worker route.
    async fn ready_mcp(&self, net: &Net, pki: &Pki, daemon: &Daemon) -> anyhow::Result<Mcp> {
        let mut mcp = self.spawn_mcp(net, &net.daemon_origin(daemon.port), &pki.path("ca.pem"))?;
        mcp.initialize("2025-11-25", INITIALIZE_TIMEOUT).await?;
        let ready = mcp
            .logs()
            .wait_for_event("daemon_mcp_ready", WORKER_TIMEOUT)
            .await
            .map_err(|e| anyhow::anyhow!("{e}\n{}", self.context(daemon, &mcp)))?;
        assert_eq!(field(&ready, "route_mode"), "worker", "{ready}");
        Ok(mcp)
    }

    /// An Anthropic request from the client namespace to the daemon's veth address; the
    /// status and body.
    async fn model_request(
        &self,
        net: &Net,
        pki: &Pki,
        daemon: &Daemon,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let req = post_json(
            "/v1/messages",
            &[
                ("x-relay-client-token", &self.token),
                ("x-api-key", "sk-ant-test"),
                ("anthropic-version", "2023-06-01"),
            ],
            r#"{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#,
        )?;
        https(
            &net.cli,
            SocketAddr::from((net.srv_ip, daemon.port)),
            &pki.ca_der,
            req,
        )
        .await
    }

    /// `relay-doctor --live --json` run as this user in the client namespace, with the
    /// worker advertising `advertise`: its exit code and report, `None` when it did not
    /// finish or printed no report.
    async fn live_doctor(
        &self,
        net: &Net,
        origin: &str,
        pki: &Pki,
        advertise: Ipv4Addr,
    ) -> Option<(Option<i32>, serde_json::Value)> {
        let mut command = net.command(&net.cli, &relay_e2e::binary("relay-doctor").ok()?);
        command
            .args(["--live", "--daemon-address", origin, "--json"])
            .env("HOME", self.user.home())
            .env("XDG_CONFIG_HOME", self.user.xdg_config_home())
            .env("RELAY_SYSTEM_CONFIG_DIR", self.user.system_config_dir())
            .env("RELAY_CLIENT_TOKEN", &self.token)
            .env("RELAY_EXTRA_CA_FILE", pki.path("ca.pem"))
            .env("RELAY_WORKER_ADVERTISE_ADDRESS", advertise.to_string())
            .stdout(Stdio::piped());
        let out = tokio::time::timeout(CLI_TIMEOUT, command.output())
            .await
            .ok()?
            .ok()?;
        let report = serde_json::from_slice(&out.stdout).ok()?;
        Some((out.status.code(), report))
    }

    fn context(&self, daemon: &Daemon, mcp: &Mcp) -> String {
        let mut out = String::new();
        for (i, logs) in daemon.previous.iter().enumerate() {
            out.push_str(&format!("--- relayd run {i} ---\n{}\n", logs.text()));
        }
        out.push_str(&format!(
            "--- relayd ---\n{}\n--- relay-mcp ---\n{}\n{}",
            daemon.logs().text(),
            mcp.logs().text(),
            self.user.worker_log_text()
        ));
        out
    }
}

/// A daemon, a stand-in and one client with a ready remote worker.
struct Remote {
    // Dropped in this order: the processes first, the namespaces last.
    mcp: Mcp,
    client: Client,
    _stand_in: tokio::process::Child,
    daemon: Daemon,
    pki: Pki,
    net: Net,
}

impl Remote {
    async fn start() -> anyhow::Result<Remote> {
        let net = Net::create()?;
        let pki = Pki::generate(&net)?;
        let daemon = Daemon::start(&net, &pki, "daemon", DAEMON_PORT).await?;
        let stand_in = start_stand_in(&net).await?;
        let client = Client::new(&net)?;
        let mcp = client.ready_mcp(&net, &pki, &daemon).await?;
        Ok(Remote {
            mcp,
            client,
            _stand_in: stand_in,
            daemon,
            pki,
            net,
        })
    }

    fn context(&self) -> String {
        self.client.context(&self.daemon, &self.mcp)
    }

    async fn ready_worker(&self, not: Option<&str>, timeout: Duration) -> anyhow::Result<String> {
        self.daemon
            .wait_ready_worker(&self.net, &self.pki, not, timeout)
            .await
            .map_err(|e| anyhow::anyhow!("{e}\n{}", self.context()))
    }

    /// A model request from the client namespace is answered by the stand-in through the
    /// worker: relayd counts one more worker request and no pass-through.
    async fn assert_served_by_worker(&self) -> anyhow::Result<()> {
        let before = self
            .daemon
            .requests_to(&self.net, &self.pki, "anthropic", "worker")
            .await?;
        let (status, body) = self
            .client
            .model_request(&self.net, &self.pki, &self.daemon)
            .await?;
        assert_eq!(status, StatusCode::OK, "{body:?}\n{}", self.context());
        assert!(
            super::support::contains(&body, DEFAULT_TEXT.as_bytes()),
            "{body:?}"
        );
        let after = self
            .daemon
            .requests_to(&self.net, &self.pki, "anthropic", "worker")
            .await?;
        assert_eq!(after, before + 1, "{}", self.context());
        assert_eq!(
            self.daemon
                .requests_to(&self.net, &self.pki, "anthropic", "pass_through")
                .await?,
            0
        );
        Ok(())
    }
}

#[tokio::test]
async fn remote_codex_reaches_the_stand_in_through_its_remote_worker() -> anyhow::Result<()> {
    let net = Net::create()?;
    let pki = Pki::generate(&net)?;
    let daemon = Daemon::start(&net, &pki, "daemon", DAEMON_PORT).await?;
    let _stand_in = start_stand_in(&net).await?;
    let client = Client::new(&net)?;
    let origin = net.daemon_origin(DAEMON_PORT);

    // Codex itself runs in the client namespace and trusts the test CA through
    // SSL_CERT_FILE, as a remote user's Codex does.
    let codex = AgentCommand::launched_by("codex", &net.ip, &["netns", "exec", &net.cli])?;
    let codex_home = codex.make_dir("codex-home")?;
    let mcp_env = [
        ("HOME", client.user.home().display().to_string()),
        (
            "XDG_CONFIG_HOME",
            client.user.xdg_config_home().display().to_string(),
        ),
        (
            "RELAY_SYSTEM_CONFIG_DIR",
            client.user.system_config_dir().display().to_string(),
        ),
        ("RELAY_CLIENT_TOKEN", client.token.clone()),
        (
            "RELAY_EXTRA_CA_FILE",
            pki.path("ca.pem").display().to_string(),
        ),
        ("RELAY_WORKER_ADVERTISE_ADDRESS", net.cli_ip.to_string()),
        ("RELAY_WORKER_PORT", WORKER_PORT.to_string()),
        ("RELAY_LOG", "info".to_owned()),
        ("RELAY_LOG_FORMAT", "jsonl".to_owned()),
    ];
    let env_table: Vec<String> = mcp_env
        .iter()
        .map(|(key, value)| format!("{key} = {}", toml::Value::from(value.as_str())))
        .collect();
    codex.write_file(
        "codex-home/config.toml",
        &format!(
            r#"model = "mock-model"
model_provider = "relay"
approval_policy = "never"
sandbox_mode = "read-only"

[model_providers.relay]
name = "Relay"
base_url = {base_url}
env_key = "RELAY_E2E_OPENAI_KEY"
wire_api = "responses"
supports_websockets = false
env_http_headers = {{ "x-relay-client-token" = "RELAY_CLIENT_TOKEN" }}

[mcp_servers.relay]
command = {command}
args = ["--daemon-address", {origin}]
startup_timeout_sec = 20
env = {{ {env} }}
"#,
            base_url = toml::Value::from(format!("{origin}/v1")),
            command = toml::Value::from(relay_e2e::binary("relay-mcp")?.display().to_string()),
            origin = toml::Value::from(origin.as_str()),
            env = env_table.join(", "),
        ),
    )?;
    let out = codex
        .env("CODEX_HOME", &codex_home)
        .env("RELAY_E2E_OPENAI_KEY", "sk-test-openai")
        .env("RELAY_CLIENT_TOKEN", &client.token)
        .env("SSL_CERT_FILE", pki.path("ca.pem"))
        .args(["exec", "--skip-git-repo-check", "say hi"])
        .run(AGENT_TIMEOUT)
        .await?;
    let context = || {
        format!(
            "{out}\n--- relayd ---\n{}\n{}",
            daemon.logs().text(),
            client.user.worker_log_text()
        )
    };
    assert!(
        out.status.success() && out.stdout.contains(DEFAULT_TEXT),
        "codex did not answer through the remote worker\n{}",
        context()
    );
    let through_worker = daemon.requests_to(&net, &pki, "openai", "worker").await?;
    assert!(through_worker >= 1, "{through_worker}\n{}", context());
    assert_eq!(
        daemon
            .requests_to(&net, &pki, "openai", "pass_through")
            .await?,
        0,
        "{}",
        context()
    );
    // The worker registered the client's veth address, which the daemon accepted because
    // it is the peer address of the worker's control session.
    // The worker's control session came from the client's veth address, the only host
    // the daemon accepts for its endpoint (no worker_networks are configured).
    let connected = daemon
        .logs()
        .wait_for_event("worker_control_connected", EVENT_TIMEOUT)
        .await?;
    assert_eq!(
        field(&connected, "peer"),
        net.cli_ip.to_string(),
        "{connected}\n{}",
        context()
    );
    Ok(())
}

#[tokio::test]
async fn remote_refusals_name_their_cause() -> anyhow::Result<()> {
    let net = Net::create()?;
    let pki = Pki::generate(&net)?;
    let daemon = Daemon::start(&net, &pki, "daemon", DAEMON_PORT).await?;
    let wrong_name = Daemon::start(&net, &pki, "wrong-name", WRONG_NAME_PORT).await?;
    let client = Client::new(&net)?;
    let context = |logs: &Logs| {
        format!(
            "--- relay-mcp ---\n{}\n--- relayd ---\n{}\n--- relayd (wrong name) ---\n{}",
            logs.text(),
            daemon.logs().text(),
            wrong_name.logs().text()
        )
    };

    // A CA that did not sign the daemon's certificate.
    let mut mcp = client.spawn_mcp(
        &net,
        &net.daemon_origin(DAEMON_PORT),
        &pki.path("other-ca.pem"),
    )?;
    mcp.initialize("2025-11-25", INITIALIZE_TIMEOUT).await?;
    mcp.logs()
        .wait_for("a refusal naming the untrusted CA", EVENT_TIMEOUT, |logs| {
            logs.text()
                .contains("not signed by a trusted CA")
                .then_some(())
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", context(mcp.logs())))?;
    assert!(daemon.logs().events_named("mcp_added").is_empty());

    // The daemon's certificate, from the right CA, names another host.
    let mut mcp = client.spawn_mcp(
        &net,
        &net.daemon_origin(WRONG_NAME_PORT),
        &pki.path("ca.pem"),
    )?;
    mcp.initialize("2025-11-25", INITIALIZE_TIMEOUT).await?;
    mcp.logs()
        .wait_for(
            "a refusal naming the certificate's names",
            EVENT_TIMEOUT,
            |logs| {
                logs.text()
                    .contains("does not name the host of the daemon address")
                    .then_some(())
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", context(mcp.logs())))?;
    assert!(wrong_name.logs().events_named("mcp_added").is_empty());

    // relay-hook names the untrusted CA too.
    let stderr = hook_stderr(
        &net,
        &client,
        &net.daemon_origin(DAEMON_PORT),
        Some(&pki.path("other-ca.pem")),
    )
    .await?;
    assert!(
        stderr.contains("not signed by a trusted CA"),
        "relay-hook: {stderr}"
    );

    // A worker that names another host than the one it connects from (here the daemon's
    // own address) is refused: the daemon never connects where a worker merely points.
    let mut mcp = client.spawn_mcp_advertising(
        net.srv_ip,
        &net.daemon_origin(DAEMON_PORT),
        &pki.path("ca.pem"),
    )?;
    mcp.initialize("2025-11-25", INITIALIZE_TIMEOUT).await?;
    let refused = daemon
        .logs()
        .wait_for("the worker endpoint refused", WORKER_TIMEOUT, |logs| {
            logs.events_named("control_registration_refused")
                .into_iter()
                .find(|e| field(e, "reason") == "endpoint_not_allowed")
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", context(mcp.logs())))?;
    assert_eq!(field(&refused, "role"), "worker", "{refused}");
    assert_eq!(field(&refused, "peer"), net.cli_ip.to_string(), "{refused}");
    assert!(
        daemon.logs().events_named("worker_ready").is_empty(),
        "{}",
        context(mcp.logs())
    );
    drop(mcp);

    // Plain http to a daemon that is not on loopback: refused before anything is sent.
    let plain = format!("http://{}:{DAEMON_PORT}", net.srv_ip);
    let mut command = net.command(&net.cli, &relay_e2e::binary("relay-mcp")?);
    command
        .args(["--daemon-address", &plain])
        .env("HOME", client.user.home())
        .env("XDG_CONFIG_HOME", client.user.xdg_config_home())
        .env("RELAY_CLIENT_TOKEN", &client.token)
        .stderr(Stdio::piped());
    let out = tokio::time::timeout(CLI_TIMEOUT, command.output()).await??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("https"), "relay-mcp: {stderr}");

    let stderr = hook_stderr(&net, &client, &plain, None).await?;
    assert!(stderr.contains("https"), "relay-hook: {stderr}");
    Ok(())
}

/// A worker that advertises its address behind NAT (not the one its control session comes
/// from) is told why it is refused, in its own log, which is all a user on a client machine
/// can read; `relay-doctor --live` there fails the reachability check naming that address,
/// instead of skipping it for want of a worker; and an address the daemon can never accept
/// stops relay-mcp at start, naming the variable.
#[tokio::test]
async fn remote_a_worker_behind_nat_is_told_why_and_the_doctor_says_so() -> anyhow::Result<()> {
    let net = Net::create()?;
    let pki = Pki::generate(&net)?;
    let daemon = Daemon::start(&net, &pki, "daemon", DAEMON_PORT).await?;
    let client = Client::new(&net)?;
    let origin = net.daemon_origin(DAEMON_PORT);
    let private = Ipv4Addr::new(192, 168, 77, 2);

    let mut mcp = client.spawn_mcp_advertising(private, &origin, &pki.path("ca.pem"))?;
    mcp.initialize("2025-11-25", INITIALIZE_TIMEOUT).await?;
    let context = || {
        format!(
            "--- relayd ---\n{}\n{}",
            daemon.logs().text(),
            client.user.worker_log_text()
        )
    };
    let told = format!(
        "the worker advertises {private}, but the daemon sees its control session come from {}",
        net.cli_ip
    );
    relay_testkit::eventually_some(WORKER_TIMEOUT, || async {
        client.user.worker_log_text().contains(&told).then_some(())
    })
    .await
    .ok_or_else(|| anyhow::anyhow!("no worker log says {told:?}\n{}", context()))?;
    assert!(
        daemon.logs().events_named("worker_ready").is_empty(),
        "{}",
        context()
    );

    // The doctor, run as that user in the client namespace with the same address.
    let doctor = || async {
        let (code, report) = client.live_doctor(&net, &origin, &pki, private).await?;
        let check = super::support::report_check(&report, "live.worker_reachable").clone();
        (code == Some(1) && check["status"] == "fail").then_some(check)
    };
    // Between relaunches the route passes through; the doctor fails the check once it does.
    let check = relay_testkit::eventually_some(WORKER_TIMEOUT, doctor)
        .await
        .ok_or_else(|| {
            anyhow::anyhow!(
                "the doctor never failed live.worker_reachable\n{}",
                context()
            )
        })?;
    let summary = check["summary"].as_str().unwrap_or_default();
    assert!(summary.contains(&private.to_string()), "{check}");
    assert!(
        check["next_step"]
            .as_str()
            .is_some_and(|next| next.contains("worker_networks")),
        "{check}"
    );
    drop(mcp);

    // An address the daemon never accepts stops relay-mcp at once.
    let mut command = net.command(&net.cli, &relay_e2e::binary("relay-mcp")?);
    command
        .args(["--daemon-address", &origin])
        .env("HOME", client.user.home())
        .env("XDG_CONFIG_HOME", client.user.xdg_config_home())
        .env("RELAY_CLIENT_TOKEN", &client.token)
        .env("RELAY_WORKER_ADVERTISE_ADDRESS", "::ffff:127.0.0.1")
        .stderr(Stdio::piped());
    let out = tokio::time::timeout(CLI_TIMEOUT, command.output()).await??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("RELAY_WORKER_ADVERTISE_ADDRESS"),
        "relay-mcp: {stderr}"
    );
    Ok(())
}

/// One machine identity connected from two addresses at once, as a cloned machine would be:
/// the same user's key and token, a second relay-mcp reaching the daemon from the server
/// namespace's own address. The daemon logs `machine_identity_conflict` naming both, the
/// doctor's live check fails on it and says what to do, and passes again once the second
/// session has gone.
#[tokio::test]
async fn remote_one_identity_from_two_addresses_is_reported_by_the_doctor() -> anyhow::Result<()> {
    let remote = Remote::start().await?;
    let (net, client) = (&remote.net, &remote.client);
    let origin = net.daemon_origin(remote.daemon.port);
    let identity = |report: &serde_json::Value| {
        super::support::report_check(report, "live.machine_identity").clone()
    };
    let (_, report) = client
        .live_doctor(net, &origin, &remote.pki, net.cli_ip)
        .await
        .ok_or_else(|| anyhow::anyhow!("the doctor gave no report\n{}", remote.context()))?;
    assert_eq!(identity(&report)["status"], "ok", "{report}");

    let clone_wrapper = mcp_in(net, &net.srv, client.user.dir())?;
    let mut clone = client
        .user
        .mcp(&origin)?
        .token(&client.token)
        .log("info", "jsonl")
        .env("RELAY_EXTRA_CA_FILE", remote.pki.path("ca.pem"))
        .program(clone_wrapper)
        .spawn()?;
    clone.initialize("2025-11-25", INITIALIZE_TIMEOUT).await?;
    let conflict = remote
        .daemon
        .logs()
        .wait_for_event("machine_identity_conflict", EVENT_TIMEOUT)
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", remote.context()))?;
    assert_eq!(
        field(&conflict, "peer"),
        net.srv_ip.to_string(),
        "{conflict}"
    );
    assert_eq!(
        field(&conflict, "other_peer"),
        net.cli_ip.to_string(),
        "{conflict}"
    );

    let failed = relay_testkit::eventually_some(EVENT_TIMEOUT, || async {
        let (code, report) = client
            .live_doctor(net, &origin, &remote.pki, net.cli_ip)
            .await?;
        let check = identity(&report);
        (code == Some(1) && check["status"] == "fail").then_some(check)
    })
    .await
    .ok_or_else(|| {
        anyhow::anyhow!(
            "the doctor never failed live.machine_identity\n{}",
            remote.context()
        )
    })?;
    assert!(
        failed["summary"]
            .as_str()
            .is_some_and(|s| s.contains("more than one address")),
        "{failed}"
    );
    assert!(
        failed["next_step"]
            .as_str()
            .is_some_and(|s| s.contains("machine-identity.pk8")),
        "{failed}"
    );

    drop(clone);
    relay_testkit::eventually_some(EVENT_TIMEOUT, || async {
        let (_, report) = client
            .live_doctor(net, &origin, &remote.pki, net.cli_ip)
            .await?;
        (identity(&report)["status"] == "ok").then_some(())
    })
    .await
    .ok_or_else(|| {
        anyhow::anyhow!(
            "the conflict outlived the second session\n{}",
            remote.context()
        )
    })?;
    Ok(())
}

/// Runs relay-hook for one Codex `SessionStart` event from the client namespace toward
/// `origin` (trusting `ca_file` when given) and returns its stderr.
async fn hook_stderr(
    net: &Net,
    client: &Client,
    origin: &str,
    ca_file: Option<&Path>,
) -> anyhow::Result<String> {
    let mut command = net.command(&net.cli, &relay_e2e::binary("relay-hook")?);
    command
        .args(["codex", "--daemon-address", origin])
        .env("HOME", client.user.home())
        .env("XDG_CONFIG_HOME", client.user.xdg_config_home())
        .env("RELAY_CLIENT_TOKEN", &client.token)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(ca_file) = ca_file {
        command.env("RELAY_EXTRA_CA_FILE", ca_file);
    }
    let mut child = command.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        tokio::io::AsyncWriteExt::write_all(
            &mut stdin,
            br#"{"hook_event_name":"SessionStart","session_id":"s","cwd":"/","source":"startup"}"#,
        )
        .await?;
    }
    let out = tokio::time::timeout(CLI_TIMEOUT, child.wait_with_output()).await??;
    Ok(String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test]
async fn remote_a_short_cut_keeps_the_worker_and_a_long_one_replaces_it() -> anyhow::Result<()> {
    let remote = Remote::start().await?;
    let first = remote.ready_worker(None, WORKER_TIMEOUT).await?;
    remote.assert_served_by_worker().await?;

    // Shorter than the grace: the daemon notices (no pong), the sessions come back and
    // the same worker serves again.
    remote.net.set_link(false)?;
    let lost = remote
        .daemon
        .logs()
        .wait_for("worker_control_lost", EVENT_TIMEOUT, |logs| {
            logs.events_named("worker_control_lost").into_iter().next()
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", remote.context()))?;
    assert_eq!(field(&lost, "worker_id"), first, "{lost}");
    remote.net.set_link(true)?;
    let again = remote.ready_worker(None, GRACE).await?;
    assert_eq!(again, first, "{}", remote.context());
    remote
        .daemon
        .logs()
        .wait_for_event("worker_control_reconnected", EVENT_TIMEOUT)
        .await?;
    remote.assert_served_by_worker().await?;

    // Longer than the grace: the daemon gives the worker up; once the network is back a
    // new worker takes over the route.
    remote.net.set_link(false)?;
    let removed = remote
        .daemon
        .logs()
        .wait_for("the worker removed", GRACE * 3, |logs| {
            logs.events_named("worker_removed")
                .into_iter()
                .find(|e| field(e, "worker_id") == first)
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", remote.context()))?;
    remote.net.set_link(true)?;
    let second = remote
        .ready_worker(Some(&first), WORKER_TIMEOUT * 2)
        .await?;
    assert_ne!(second, first, "{removed}");
    remote.assert_served_by_worker().await?;
    Ok(())
}

#[tokio::test]
async fn remote_a_daemon_restart_is_survived() -> anyhow::Result<()> {
    let mut remote = Remote::start().await?;
    let first = remote.ready_worker(None, WORKER_TIMEOUT).await?;
    remote.assert_served_by_worker().await?;

    remote.daemon.restart(&remote.net).await?;
    let resumed = remote.ready_worker(None, GRACE).await?;
    assert_eq!(resumed, first, "{}", remote.context());
    remote.assert_served_by_worker().await?;
    Ok(())
}

/// One remote address that keeps starting slow hook bodies holds at most its share of the
/// daemon's hook-body budget (a quarter): its next body is refused at once with 429, while
/// a caller on another address (here the daemon's own loopback) is still served.
#[tokio::test]
async fn remote_one_address_cannot_fill_the_hook_body_budget() -> anyhow::Result<()> {
    const LIMIT: usize = 1024 * 1024;
    let net = Net::create()?;
    let pki = Pki::generate(&net)?;
    let daemon = Daemon::start_with(
        &net,
        &pki,
        "daemon",
        DAEMON_PORT,
        &["--allow-anonymous-pass-through"],
    )
    .await?;
    let remote = SocketAddr::new(net.srv_ip.into(), DAEMON_PORT);
    let tls = tokio_rustls::TlsConnector::from(Arc::new(trusting(&pki.ca_der)?));
    // Four bodies just under the 1 MiB limit, each stalled after its first KiB: together
    // they reserve the address's whole share of the default 16 MiB budget.
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let tcp = connect_in(&net.cli, remote)?;
        let mut stream = tls
            .connect(ServerName::IpAddress(remote.ip().into()), tcp)
            .await?;
        let head = format!(
            "POST /hooks/claude-code HTTP/1.1\r\nHost: {remote}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{{\"pad\":\"{}",
            LIMIT - 1,
            "p".repeat(1024)
        );
        stream.write_all(head.as_bytes()).await?;
        stream.flush().await?;
        stalled.push(stream);
    }
    let hook = || {
        post_json(
            "/hooks/claude-code",
            &[],
            r#"{"hook_event_name":"Stop"}"#.to_owned(),
        )
    };
    // A small body from the same address finds no room, once the four hold theirs.
    let refused = relay_testkit::eventually_some(Duration::from_secs(5), || async {
        let answer = https(&net.cli, remote, &pki.ca_der, hook().ok()?)
            .await
            .ok()?;
        (answer.0 == StatusCode::TOO_MANY_REQUESTS).then_some(answer.1)
    })
    .await;
    let Some(body) = refused else {
        panic!(
            "no 429 for the address within 5 s\n{}",
            daemon.logs().text()
        );
    };
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("relay_too_many_requests"), "{body}");
    // The daemon's budget itself still has room: a caller on another address is served.
    let local = SocketAddr::from((Ipv4Addr::LOCALHOST, DAEMON_PORT));
    let (status, body) = https(&net.srv, local, &pki.ca_der, hook()?).await?;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    drop(stalled);
    Ok(())
}
