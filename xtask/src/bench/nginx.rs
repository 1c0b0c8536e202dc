//! nginx as relayd's peer: `proxy_pass` with upstream keep-alive in front of the same stand-in, so the pass-through measures have a reference proxy measured in the same run.
//!
//! It runs in the foreground from a generated config in the scratch directory, on a free 127.0.0.1 port, with its pid file, logs and temp directories there too; `/etc/nginx` and the system service are never read, written or started.
//! When nginx is missing and the bench runs as root, it is installed from the Debian package (`nginx-light`, else `nginx`); otherwise the run goes on without a peer and says why.

use std::{
    ffi::OsString,
    fs,
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use relay_testkit::procfs;

use super::debian;
use super::procs::{
    PORT_ATTEMPTS, Process, Scratch, TlsFiles, free_port, log_tail, start_timeout, wrapped_command,
};

/// How long nginx may take to accept connections and start its workers.
const NGINX_START_TIMEOUT: Duration = Duration::from_secs(10);
/// Where Debian puts the binary (not always on a non-root PATH).
const DEBIAN_BINARY: &str = "/usr/sbin/nginx";
/// Packages tried in order: the smallest build first.
const PACKAGES: [&str; 2] = ["nginx-light", "nginx"];

/// The nginx binary, installing the package when it is missing and this process may (the service is not started or enabled).
pub(super) fn find_or_install() -> Result<PathBuf> {
    debian::find_or_install("nginx", &PACKAGES, find)
}

fn find() -> Option<PathBuf> {
    if debian::runs("nginx", "-v") {
        return Some(PathBuf::from("nginx"));
    }
    Path::new(DEBIAN_BINARY)
        .is_file()
        .then(|| PathBuf::from(DEBIAN_BINARY))
}

/// nginx's version line (`nginx version: nginx/1.22.1`), for the JSON.
pub(super) fn version(binary: &Path) -> Option<String> {
    let output = Command::new(binary).arg("-v").output().ok()?;
    // nginx prints its version on stderr.
    let text = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    (!text.is_empty()).then_some(text)
}

/// How nginx's processes are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    /// A master and this many worker processes, as nginx is deployed.
    Workers(usize),
    /// One process that serves itself (`master_process off`), so that a tool wrapping it (valgrind) sees all of its work.
    Alone,
}

/// What an nginx serves, and in front of what.
#[derive(Debug, Clone, Copy)]
pub(super) enum Site<'a> {
    /// relayd's peer: plain HTTP in front of a plain stand-in.
    Peer(SocketAddr),
    /// An HTTPS provider: TLS with `tls`'s certificate, HTTP/2 offered by ALPN beside HTTP/1.1, in front of a plain stand-in.
    TlsFront {
        upstream: SocketAddr,
        tls: &'a TlsFiles,
    },
    /// relayd's peer when relayd serves HTTPS: the same TLS front, in front of the plain stand-in relayd forwards to.
    PeerServingHttps {
        upstream: SocketAddr,
        tls: &'a TlsFiles,
    },
    /// relayd's peer in front of an HTTPS provider: plain HTTP in, HTTP/1.1 over TLS out (nginx speaks no HTTP/2 to an upstream), verifying the provider as `localhost` against `trusted` and resuming TLS sessions.
    PeerOfTls {
        upstream: SocketAddr,
        trusted: &'a Path,
    },
}

impl Site<'_> {
    /// Its scratch subdirectory.
    fn dir_name(self) -> &'static str {
        match self {
            Site::Peer(_) => "nginx",
            Site::TlsFront { .. } => "nginx-tls-front",
            Site::PeerServingHttps { .. } => "nginx-peer-serving-https",
            Site::PeerOfTls { .. } => "nginx-peer-of-tls",
        }
    }
}

/// The config: worker processes as `layout` says, no access log, the upstream kept alive, responses and request bodies streamed like relayd streams them.
pub(super) fn config(dir: &Path, port: u16, site: Site, layout: Layout, as_root: bool) -> String {
    // The `listen` parameters after the address, the upstream, its scheme, and what the server and the location add.
    let (listen, upstream, scheme, server_extra, location_extra) = match site {
        Site::Peer(upstream) => ("", upstream, "http", String::new(), String::new()),
        Site::TlsFront { upstream, tls } | Site::PeerServingHttps { upstream, tls } => (
            " ssl http2",
            upstream,
            "http",
            // nginx before 1.23.4 leaves TLS 1.3 off unless it is named; relayd and the
            // providers agents use speak it.
            format!(
                "\n        ssl_certificate {};\n        ssl_certificate_key {};\n        ssl_protocols TLSv1.2 TLSv1.3;",
                tls.cert.display(),
                tls.key.display()
            ),
            String::new(),
        ),
        Site::PeerOfTls { upstream, trusted } => (
            "",
            upstream,
            "https",
            String::new(),
            format!(
                "\n            proxy_ssl_trusted_certificate {};\n            proxy_ssl_verify on;\n            proxy_ssl_name localhost;\n            proxy_ssl_session_reuse on;",
                trusted.display()
            ),
        ),
    };
    let dir = dir.display();
    let (master, workers) = match layout {
        Layout::Workers(workers) => ("on", workers),
        Layout::Alone => ("off", 1),
    };
    // As root, nginx would switch its workers to `nobody`, who may not read the scratch directory.
    let user = if as_root { "user root;\n" } else { "" };
    format!(
        "# Written by cargo xtask bench.
daemon off;
master_process {master};
worker_processes {workers};
{user}pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{
    worker_connections 4096;
}}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    keepalive_timeout 90s;
    keepalive_requests 1000000;
    client_max_body_size 32m;
    upstream origin {{
        server {upstream};
        keepalive 128;
        keepalive_requests 1000000;
        keepalive_timeout 90s;
    }}
    server {{
        listen 127.0.0.1:{port}{listen};{server_extra}
        location / {{
            proxy_pass {scheme}://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_buffering off;
            proxy_request_buffering off;{location_extra}
        }}
    }}
}}
"
    )
}

/// A running nginx: its master and worker processes.
#[derive(Debug)]
pub(super) struct Nginx {
    pub(super) addr: SocketAddr,
    /// Its scratch directory: its config, pid file and logs.
    pub(super) dir: PathBuf,
    process: Process,
    /// The master and its workers, whose CPU time is nginx's.
    pub(super) pids: Vec<u32>,
}

impl Nginx {
    /// nginx as relayd's peer: as many worker processes as relayd may use CPUs, on those
    /// CPUs, serving `site`, so the two are compared on the same ground.
    pub(super) fn peer(
        binary: &Path,
        pinning: &super::pinning::Pinning,
        site: Site,
        scratch: &Scratch,
    ) -> Result<Nginx> {
        let workers = Layout::Workers(pinning.server_cpu_count());
        Nginx::start(
            binary,
            pinning.relayd.as_deref(),
            workers,
            site,
            scratch,
            &[],
        )
    }

    /// Starts nginx (under `wrapper`, a command and its arguments, when not empty) on a free port, serving `site`, and waits until it accepts connections and its workers run.
    pub(super) fn start(
        binary: &Path,
        cpus: Option<&str>,
        layout: Layout,
        site: Site,
        scratch: &Scratch,
        wrapper: &[OsString],
    ) -> Result<Nginx> {
        let workers = match layout {
            Layout::Workers(workers) => workers,
            Layout::Alone => 0,
        };
        let start_timeout = start_timeout(wrapper, NGINX_START_TIMEOUT);
        let dir = scratch.path(site.dir_name());
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let as_root = procfs::own_effective_uid() == Some(0);
        let mut last_log = String::new();
        for attempt in 1..=PORT_ATTEMPTS {
            let port = free_port()?;
            let conf = dir.join("nginx.conf");
            fs::write(&conf, config(&dir, port, site, layout, as_root))
                .with_context(|| format!("writing {}", conf.display()))?;
            let (log, log_file) = scratch.log(&format!("{}/stderr-{attempt}", site.dir_name()))?;
            let mut command = wrapped_command(wrapper, binary, cpus);
            command
                .arg("-p")
                .arg(&dir)
                .arg("-c")
                .arg(&conf)
                // The error log before the config is read, so nothing goes to /var/log/nginx.
                .arg("-e")
                .arg(dir.join("error.log"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log_file);
            let mut process = Process::spawn("nginx", command)?;
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let deadline = Instant::now() + start_timeout;
            loop {
                if let Some(status) = process.exited()? {
                    last_log = format!("{}\n{}", log_tail(&log), log_tail(&dir.join("error.log")));
                    if last_log.contains("Address already in use") {
                        break;
                    }
                    bail!("nginx exited at start-up ({status}):\n{last_log}");
                }
                let workers_now = procfs::children(process.pid());
                if workers_now.len() >= workers
                    && TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
                {
                    let mut pids = vec![process.pid()];
                    pids.extend(workers_now);
                    return Ok(Nginx {
                        addr,
                        dir,
                        process,
                        pids,
                    });
                }
                if Instant::now() >= deadline {
                    bail!(
                        "nginx did not accept connections on {addr} within {start_timeout:?}:\n{}",
                        log_tail(&dir.join("error.log"))
                    );
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        bail!("nginx could not bind a free port in {PORT_ATTEMPTS} attempts:\n{last_log}")
    }

    pub(super) fn pid(&self) -> u32 {
        self.process.pid()
    }
}
