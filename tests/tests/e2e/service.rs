//! relayd started the way systemd starts the system service (SPEC §2.1, §10.1): the command
//! is the `ExecStart=` line of `deploy/systemd/system/relayd.service` with only the binary's
//! path replaced, so a flag renamed in relayd but not in the unit fails here; the listening
//! socket is bound as `relayd.socket` says (address family, `Backlog=`, `NoDelay=`, on a free
//! port of the same address) and passed as fd 3 with `LISTEN_FDS=1`, `LISTEN_FDNAMES` and
//! `LISTEN_PID` set to relayd's own pid; the unit's `Environment=`, `WorkingDirectory=`,
//! `StateDirectory=`, `UMask=` and `LimitNOFILE=` apply, with `/var/lib` and `/etc/relay`
//! moved under a temporary root. The daemon must serve on that socket and no other, pass a
//! model request through to the provider stand-in, and exit 0 on the unit's `KillSignal=`
//! within its `TimeoutStopSec=`.
//!
//! What it does not exercise: a real systemd (no `User=relay`, no sandboxing, no
//! `Restart=`); the test runs relayd as the test's own user, and `LimitNOFILE=` is capped
//! at the test's own hard limit where the test may not raise it.
//!
//! `LISTEN_PID` must be the pid of relayd itself, known only after fork. The workspace
//! forbids unsafe code, so no `pre_exec` hook can set it, and Rust's `Command` would replace
//! the environment after such a hook anyway. A `/bin/sh` does it instead: it sets
//! `LISTEN_PID=$$` (its own pid) and `exec`s relayd, which keeps that pid, as systemd sets
//! it in the child it forks before the exec. (`systemd-socket-activate` would bind the
//! socket itself, on a fixed port and without `Backlog=` or `NoDelay=`, and `cargo xtask
//! e2e` does not install it.) The same shell applies `UMask=` and
//! `LimitNOFILE=`, which belong to the process and cannot be set from the test without
//! changing them for every parallel test.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd as _, OwnedFd};
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use command_fds::{CommandFdExt as _, FdMapping};
use http::{Method, StatusCode};
use relay_e2e::http::{fetch, request};
use relay_e2e::{Process, START_TIMEOUT};
use relay_testkit::StandIn;
use rustix::net::{AddressFamily, SocketFlags, SocketType, ipproto, sockopt};
use rustix::process::Signal;

use super::support::{
    EVENT_TIMEOUT, anthropic_request, field, fresh_token, marker, recorded_with, stand_in_id,
    upstream_config,
};

/// The units under test, relative to the workspace root.
const SERVICE_UNIT: &str = "deploy/systemd/system/relayd.service";
const SOCKET_UNIT: &str = "deploy/systemd/system/relayd.socket";
/// The socket unit's name: `Requires=` in the service names it, and it is the default
/// `FileDescriptorName=`, which systemd passes in `LISTEN_FDNAMES`.
const SOCKET_UNIT_NAME: &str = "relayd.socket";
/// The file descriptor systemd passes the first socket on (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: i32 = 3;
/// The `PATH` systemd gives a system service.
const SYSTEMD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin";
/// Where systemd puts `StateDirectory=` of a system unit.
const STATE_DIRECTORY_BASE: &str = "/var/lib";
/// The host directories the unit's paths may name, moved under the test's root: the state
/// (`StateDirectory=`) and the system configuration relayd reads (`/etc/relay`).
const MOVED_UNDER_ROOT: [&str; 2] = [STATE_DIRECTORY_BASE, "/etc/relay"];
/// relayd's system configuration directory when nothing names another one.
const SYSTEM_CONFIG_DIR: &str = "/etc/relay";
/// systemd's defaults for the keys the unit may leave out.
const DEFAULT_TIMEOUT_STOP: Duration = Duration::from_secs(90);
const DEFAULT_UMASK: &str = "0022";
/// `SOMAXCONN`, systemd's default `Backlog=`.
const DEFAULT_BACKLOG: i32 = 4096;
/// `[Socket]` keys this test applies; any other key fails the test until it applies it too.
const SOCKET_KEYS: [&str; 4] = ["ListenStream", "Accept", "NoDelay", "Backlog"];
/// `[Service]` keys that change how the process starts but this test does not model: a unit
/// that gains one fails here until the test models it.
const SERVICE_KEYS_NOT_MODELLED: [&str; 12] = [
    "EnvironmentFile",
    "PassEnvironment",
    "UnsetEnvironment",
    "ExecStartPre",
    "ExecStartPost",
    "ExecCondition",
    "Sockets",
    "RootDirectory",
    "RootImage",
    "RuntimeDirectory",
    "ConfigurationDirectory",
    "StandardInput",
];
/// Sets `LISTEN_PID` to the shell's pid, applies the umask (`$1`) and the open-file limit
/// (`$2`, none when empty), then becomes the command (`$3…`) with the same pid.
const ACTIVATE_SCRIPT: &str = "set -e; umask \"$1\"; if [ -n \"$2\" ]; then ulimit -n \"$2\"; fi; shift 2; LISTEN_PID=$$; export LISTEN_PID; exec \"$@\"";

// ----- the unit files ---------------------------------------------------------------------

/// A systemd unit file as `section`, `key`, `value` assignments in file order.
#[derive(Debug)]
struct Unit {
    name: String,
    entries: Vec<(String, String, String)>,
}

impl Unit {
    fn read(relative: &str) -> anyhow::Result<Unit> {
        let path = workspace_root()?.join(relative);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        Unit::parse(relative, &text)
    }

    /// systemd's syntax: `[Section]` headers, `Key=Value` lines, `#` and `;` comments, and a
    /// trailing backslash that joins a line with the next one.
    fn parse(name: &str, text: &str) -> anyhow::Result<Unit> {
        let mut entries = Vec::new();
        let mut section = String::new();
        let mut pending = String::new();
        for (number, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if pending.is_empty() && (line.is_empty() || line.starts_with(['#', ';'])) {
                continue;
            }
            if let Some(start) = line.strip_suffix('\\') {
                pending.push_str(start);
                pending.push(' ');
                continue;
            }
            pending.push_str(line);
            let logical = std::mem::take(&mut pending);
            if let Some(header) = logical
                .strip_prefix('[')
                .and_then(|rest| rest.strip_suffix(']'))
            {
                section = header.to_owned();
                continue;
            }
            let (key, value) = logical
                .split_once('=')
                .with_context(|| format!("{name}:{}: not `Key=Value`: {raw}", number + 1))?;
            ensure!(
                !section.is_empty(),
                "{name}:{}: an assignment before any section",
                number + 1
            );
            entries.push((
                section.clone(),
                key.trim().to_owned(),
                value.trim().to_owned(),
            ));
        }
        ensure!(pending.is_empty(), "{name}: ends inside a continued line");
        Ok(Unit {
            name: name.to_owned(),
            entries,
        })
    }

    /// The values of `key` in `section` that are in effect: an empty assignment resets the
    /// list, as it does for systemd's list settings.
    fn values(&self, section: &str, key: &str) -> Vec<&str> {
        let mut values = Vec::new();
        for (s, k, v) in &self.entries {
            if s == section && k == key {
                if v.is_empty() {
                    values.clear();
                } else {
                    values.push(v.as_str());
                }
            }
        }
        values
    }

    /// The one value of `key` in `section`, if it is set.
    fn optional(&self, section: &str, key: &str) -> anyhow::Result<Option<&str>> {
        match self.values(section, key).as_slice() {
            [] => Ok(None),
            [value] => Ok(Some(value)),
            many => bail!(
                "{}: {many:?}: more than one {key}= in [{section}]",
                self.name
            ),
        }
    }

    fn single(&self, section: &str, key: &str) -> anyhow::Result<&str> {
        self.optional(section, key)?
            .with_context(|| format!("{}: no {key}= in [{section}]", self.name))
    }

    fn keys(&self, section: &str) -> impl Iterator<Item = &str> {
        self.entries
            .iter()
            .filter(move |(s, _, _)| s == section)
            .map(|(_, k, _)| k.as_str())
    }
}

/// Which expansions systemd applies to a setting (systemd.service(5), "Command lines").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expansion {
    /// `ExecStart=`: specifiers and `$VAR`.
    Command,
    /// `Environment=`: specifiers only.
    Environment,
}

/// Splits a setting into words as systemd does: whitespace separates, single and double
/// quotes group, a backslash escapes a quote, a backslash or a space; `%%` and (in commands)
/// `$$` stand for themselves. Specifiers, `$VAR` and C escapes are refused: this test does
/// not expand them, and passing them on unexpanded would not be what systemd runs.
fn split_words(text: &str, expansion: Expansion) -> anyhow::Result<Vec<String>> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped @ ('\\' | '"' | '\'' | ' ')) => {
                    word.get_or_insert_default().push(escaped);
                }
                other => bail!(
                    "`\\{}` in {text:?}: C escapes are not modelled",
                    other.unwrap_or(' ')
                ),
            },
            '%' => {
                ensure!(
                    chars.next_if_eq(&'%').is_some(),
                    "a specifier in {text:?}: specifiers are not modelled"
                );
                word.get_or_insert_default().push('%');
            }
            '$' if expansion == Expansion::Command => {
                ensure!(
                    chars.next_if_eq(&'$').is_some(),
                    "`$` in {text:?}: environment expansion is not modelled"
                );
                word.get_or_insert_default().push('$');
            }
            '"' | '\'' if quote == Some(c) => quote = None,
            '"' | '\'' if quote.is_none() => {
                quote = Some(c);
                word.get_or_insert_default();
            }
            c if c.is_whitespace() && quote.is_none() => words.extend(word.take()),
            c => word.get_or_insert_default().push(c),
        }
    }
    ensure!(quote.is_none(), "an unterminated quote in {text:?}");
    words.extend(word);
    Ok(words)
}

/// The executable and the arguments of `ExecStart=`, as written.
fn exec_start(unit: &Unit) -> anyhow::Result<(String, Vec<String>)> {
    let line = unit.single("Service", "ExecStart")?;
    if let Some(prefix) = line.chars().next().filter(|c| "@-:+!|".contains(*c)) {
        bail!(
            "{}: ExecStart= has the prefix `{prefix}`, which this test does not model",
            unit.name
        );
    }
    let mut words = split_words(line, Expansion::Command)?.into_iter();
    let executable = words
        .next()
        .with_context(|| format!("{}: ExecStart= is empty", unit.name))?;
    Ok((executable, words.collect()))
}

/// The `Environment=` assignments in order (a later one of the same name wins).
fn environment(unit: &Unit) -> anyhow::Result<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    for line in unit.values("Service", "Environment") {
        for word in split_words(line, Expansion::Environment)? {
            let (key, value) = word
                .split_once('=')
                .with_context(|| format!("{}: Environment= word {word:?} has no `=`", unit.name))?;
            pairs.push((key.to_owned(), value.to_owned()));
        }
    }
    Ok(pairs)
}

/// A systemd time span of whole units (`150`, `150s`, `2min 30s`, `500ms`).
fn time_span(text: &str) -> anyhow::Result<Duration> {
    let mut total = Duration::ZERO;
    for part in text.split_whitespace() {
        let digits = part
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(part.len());
        let (number, unit) = part.split_at(digits);
        let n: u64 = number
            .parse()
            .with_context(|| format!("time span {text:?}: {part:?} is not a number"))?;
        total += match unit {
            "" | "s" | "sec" => Duration::from_secs(n),
            "ms" | "msec" => Duration::from_millis(n),
            "m" | "min" => Duration::from_secs(n * 60),
            _ => bail!("time span {text:?}: the unit {unit:?} is not modelled"),
        };
    }
    ensure!(
        total > Duration::ZERO,
        "time span {text:?} is empty or zero"
    );
    Ok(total)
}

fn boolean(text: &str) -> anyhow::Result<bool> {
    match text {
        "yes" | "true" | "on" | "1" => Ok(true),
        "no" | "false" | "off" | "0" => Ok(false),
        _ => bail!("{text:?} is not a systemd boolean"),
    }
}

/// The stop signal; relayd stops on SIGTERM and SIGINT only.
fn kill_signal(text: &str) -> anyhow::Result<Signal> {
    match text.trim_start_matches("SIG") {
        "TERM" | "15" => Ok(Signal::TERM),
        "INT" | "2" => Ok(Signal::INT),
        _ => bail!("KillSignal={text}: relayd stops only on SIGTERM and SIGINT"),
    }
}

fn workspace_root() -> anyhow::Result<PathBuf> {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .context("relay-e2e has no parent directory")
}

// ----- the service as systemd would start it ----------------------------------------------

/// A temporary directory standing in for `/`: the unit's `/var/lib` and `/etc/relay`
/// paths move below it.
#[derive(Debug)]
struct Root {
    dir: PathBuf,
}

impl Root {
    /// `path` below the root if it is one of [`MOVED_UNDER_ROOT`] or inside one, else as is.
    fn moved(&self, path: &str) -> String {
        let inside = |base: &str| {
            path.strip_prefix(base)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        };
        if MOVED_UNDER_ROOT.iter().any(|base| inside(base)) {
            self.dir
                .join(path.trim_start_matches('/'))
                .display()
                .to_string()
        } else {
            path.to_owned()
        }
    }
}

/// What systemd would hand relayd: the command, the environment, the working directory.
#[derive(Debug)]
struct Service {
    args: Vec<String>,
    envs: Vec<(String, String)>,
    working_directory: PathBuf,
    state_directory: PathBuf,
    umask: String,
    /// `LimitNOFILE=`, capped at the test's own hard limit.
    open_file_limit: Option<u64>,
    kill_signal: Signal,
    timeout_stop: Duration,
}

impl Service {
    /// Reads the system unit and prepares its directories under `root` (the state directory
    /// with `StateDirectoryMode=`, `/etc/relay` with `config` as its `config.toml`).
    fn prepare(unit: &Unit, root: &Root, config: &str) -> anyhow::Result<Service> {
        for key in unit.keys("Service") {
            ensure!(
                !SERVICE_KEYS_NOT_MODELLED.contains(&key),
                "{}: {key}= changes how relayd starts and this test does not model it",
                unit.name
            );
        }
        ensure!(
            unit.single("Service", "Type")? == "exec",
            "{}: this test models Type=exec",
            unit.name
        );
        let requires: Vec<String> = unit
            .values("Unit", "Requires")
            .into_iter()
            .flat_map(str::split_whitespace)
            .map(str::to_owned)
            .collect();
        ensure!(
            requires.iter().any(|name| name == SOCKET_UNIT_NAME),
            "{}: does not require {SOCKET_UNIT_NAME}: {requires:?}",
            unit.name
        );
        let (executable, args) = exec_start(unit)?;
        ensure!(
            Path::new(&executable).is_absolute()
                && Path::new(&executable).file_name() == Some("relayd".as_ref()),
            "{}: ExecStart= starts {executable:?}, not an installed relayd",
            unit.name
        );

        let state_name = unit.single("Service", "StateDirectory")?;
        let state_directory =
            PathBuf::from(root.moved(&format!("{STATE_DIRECTORY_BASE}/{state_name}")));
        let state_mode = u32::from_str_radix(
            unit.optional("Service", "StateDirectoryMode")?
                .unwrap_or("0755"),
            8,
        )
        .context("StateDirectoryMode= is not octal")?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(state_mode)
            .create(&state_directory)?;
        std::fs::set_permissions(
            &state_directory,
            std::fs::Permissions::from_mode(state_mode),
        )?;

        let mut envs = vec![("PATH".to_owned(), SYSTEMD_PATH.to_owned())];
        let mut names_system_config = false;
        for (key, value) in environment(unit)? {
            names_system_config |= key == relay_identity::names::RELAY_SYSTEM_CONFIG_DIR;
            envs.push((key, root.moved(&value)));
        }
        // systemd tells the service where its state directory is.
        envs.push((
            "STATE_DIRECTORY".to_owned(),
            state_directory.display().to_string(),
        ));
        // relayd reads /etc/relay unless told otherwise; the test's /etc/relay is below the
        // root, like every other path of the unit.
        let system_config = if names_system_config {
            None
        } else {
            envs.push((
                relay_identity::names::RELAY_SYSTEM_CONFIG_DIR.to_owned(),
                root.moved(SYSTEM_CONFIG_DIR),
            ));
            Some(PathBuf::from(root.moved(SYSTEM_CONFIG_DIR)))
        };
        if let Some(dir) = system_config {
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join("config.toml"), config)?;
        }

        let working_directory =
            PathBuf::from(root.moved(
                unit.optional("Service", "WorkingDirectory")?.context(
                    "the unit has no WorkingDirectory=; systemd would start relayd in /",
                )?,
            ));
        let umask = unit
            .optional("Service", "UMask")?
            .unwrap_or(DEFAULT_UMASK)
            .to_owned();
        ensure!(
            umask.chars().all(|c| c.is_digit(8)),
            "UMask={umask} is not octal"
        );
        let open_file_limit = unit
            .optional("Service", "LimitNOFILE")?
            .map(|text| {
                text.parse::<u64>().with_context(|| {
                    format!("LimitNOFILE={text}: only one plain number is modelled")
                })
            })
            .transpose()?
            .map(|limit| {
                // systemd (pid 1) may raise the hard limit; a test without CAP_SYS_RESOURCE
                // (a container, even as root) only lowers it, so it stops at its own.
                let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
                hard.map_or(limit, |hard| limit.min(hard))
            });
        let kill_signal =
            kill_signal(unit.optional("Service", "KillSignal")?.unwrap_or("SIGTERM"))?;
        let timeout_stop = match unit.optional("Service", "TimeoutStopSec")? {
            Some(text) => time_span(text)?,
            None => DEFAULT_TIMEOUT_STOP,
        };
        Ok(Service {
            args,
            envs,
            working_directory,
            state_directory,
            umask,
            open_file_limit,
            kill_signal,
            timeout_stop,
        })
    }

    /// The command: the shell that sets `LISTEN_PID` and becomes `relayd` with the unit's
    /// arguments, in the unit's environment and working directory, with `socket` as fd 3.
    fn command(&self, relayd: &Path, socket: OwnedFd) -> anyhow::Result<tokio::process::Command> {
        let mut command = tokio::process::Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(ACTIVATE_SCRIPT)
            .arg("relayd")
            .arg(&self.umask)
            .arg(
                self.open_file_limit
                    .map(|n| n.to_string())
                    .unwrap_or_default(),
            )
            .arg(relayd)
            .args(&self.args)
            .env_clear()
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .env("LISTEN_FDS", "1")
            .env("LISTEN_FDNAMES", SOCKET_UNIT_NAME)
            .current_dir(&self.working_directory)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        command
            .fd_mappings(vec![FdMapping {
                parent_fd: socket,
                child_fd: LISTEN_FDS_START,
            }])
            .map_err(|_| anyhow::anyhow!("fd {LISTEN_FDS_START} is mapped twice"))?;
        Ok(command)
    }
}

/// The listening socket `relayd.socket` describes, bound as systemd binds it
/// (`SO_REUSEADDR`, `Backlog=`, `NoDelay=`) on the same address with a free port: the fixed
/// port may be held by an installed relayd or a parallel test.
fn bind_socket_unit(unit: &Unit) -> anyhow::Result<OwnedFd> {
    for key in unit.keys("Socket") {
        ensure!(
            SOCKET_KEYS.contains(&key),
            "{}: [Socket] {key}= is not modelled by this test",
            unit.name
        );
    }
    let listen = unit.single("Socket", "ListenStream")?;
    let fixed: SocketAddr = listen.parse().with_context(|| {
        format!(
            "{}: ListenStream={listen} is not an address with a port (relayd listens on one IPv4 address)",
            unit.name
        )
    })?;
    ensure!(
        !boolean(unit.optional("Socket", "Accept")?.unwrap_or("no"))?,
        "{}: Accept=yes would pass connections, not the listening socket",
        unit.name
    );
    let backlog = match unit.optional("Socket", "Backlog")? {
        Some(text) => text.parse().context("Backlog= is not a number")?,
        None => DEFAULT_BACKLOG,
    };
    let family = match fixed.ip() {
        IpAddr::V4(_) => AddressFamily::INET,
        IpAddr::V6(_) => AddressFamily::INET6,
    };
    let socket = rustix::net::socket_with(
        family,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        Some(ipproto::TCP),
    )?;
    sockopt::set_socket_reuseaddr(&socket, true)?;
    if let Some(text) = unit.optional("Socket", "NoDelay")? {
        sockopt::set_tcp_nodelay(&socket, boolean(text)?)?;
    }
    rustix::net::bind(&socket, &SocketAddr::new(fixed.ip(), 0))?;
    rustix::net::listen(&socket, backlog)?;
    Ok(socket)
}

/// The inodes of every listening TCP socket (IPv4 and IPv6) in this network namespace.
fn listening_inodes() -> HashSet<u64> {
    const LISTEN: &str = "0A";
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    (fields.get(3) == Some(&LISTEN))
                        .then(|| fields.get(9)?.parse().ok())
                        .flatten()
                })
                .collect::<Vec<u64>>()
        })
        .collect()
}

#[tokio::test]
async fn the_system_unit_starts_relayd_on_the_socket_unit_s_socket_and_stops_it()
-> anyhow::Result<()> {
    let service_unit = Unit::read(SERVICE_UNIT)?;
    let socket_unit = Unit::read(SOCKET_UNIT)?;
    let stand_in = StandIn::start().await?;
    let dir = tempfile::Builder::new()
        .prefix("relay-e2e-service-")
        .tempdir()?;
    let root = Root {
        dir: dir.path().canonicalize()?,
    };
    let service = Service::prepare(&service_unit, &root, &upstream_config(&stand_in, ""))?;

    // systemd keeps its own copy of the socket; relayd gets another on fd 3.
    let held = bind_socket_unit(&socket_unit)?;
    let passed = held.try_clone()?;
    let socket_inode = rustix::fs::fstat(&held)?.st_ino;
    let addr = TcpListener::from(held.try_clone()?).local_addr()?;
    assert!(
        sockopt::tcp_nodelay(held.as_fd())?,
        "NoDelay=yes in the socket unit"
    );

    let command = service.command(&relay_e2e::binary("relayd")?, passed)?;
    let mut relayd = Process::spawn("relayd", command)?;
    let listening = relayd
        .logs()
        .wait_for_event("daemon_listening", START_TIMEOUT)
        .await
        .with_context(|| {
            format!(
                "relayd did not start from the unit's ExecStart= line:\n{}",
                relayd.logs().text()
            )
        })?;
    let pid = relayd.pid()?;

    // It serves on the passed socket and opened no listener of its own.
    assert_eq!(listening["socket_activated"], true, "{listening}");
    assert_eq!(
        field(&listening, "address"),
        addr.to_string(),
        "{listening}"
    );
    let own: HashSet<u64> = listening_inodes()
        .intersection(&relay_e2e::procfs::socket_inodes(pid))
        .copied()
        .collect();
    assert_eq!(
        own,
        HashSet::from([socket_inode]),
        "relayd listens on sockets other than the passed one"
    );
    if let Some(limit) = service.open_file_limit {
        assert_eq!(
            listening["open_file_limit"], limit,
            "LimitNOFILE= reaches relayd: {listening}"
        );
    }
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/cwd"))?,
        service.working_directory,
        "relayd runs in the unit's WorkingDirectory="
    );

    // The status endpoint answers from this daemon.
    let (status, headers, body) = fetch(
        addr,
        request(Method::GET, "/healthz", &[], bytes::Bytes::new())?,
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(
        headers.get("cache-control").map(|v| v.as_bytes()),
        Some(&b"no-store"[..])
    );
    let health: serde_json::Value = serde_json::from_slice(&body)?;
    assert_eq!(health["service"], "relayd", "{health}");
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(health["instance_id"], listening["instance_id"], "{health}");

    // A model request passes through relayd's own connection to the provider stand-in.
    let token = fresh_token()?;
    let text = marker("service")?;
    let (status, headers, body) = fetch(addr, anthropic_request(&token, &text)?).await?;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let recorded = stand_in
        .request(stand_in_id(&headers)?)
        .context("the stand-in has no record of the request")?;
    assert_eq!(recorded_with(&stand_in, &text).len(), 1);
    assert!(recorded.body_complete);
    assert!(
        relay_e2e::procfs::owns_connection(pid, recorded.peer, stand_in.addr()),
        "the stand-in's peer {} is not relayd's socket",
        recorded.peer
    );
    assert_eq!(recorded.header("x-relay-client-token"), None);
    let passed_through = relayd
        .logs()
        .wait_for_event("public_request_pass_through", EVENT_TIMEOUT)
        .await?;
    assert_eq!(
        field(&passed_through, "reason"),
        "unbound_credential",
        "{passed_through}"
    );

    // The unit's Environment= put the daemon's identity in the state directory.
    let key = service
        .state_directory
        .join(".config/relay/daemon/daemon-identity.pk8");
    assert!(key.is_file(), "no daemon key at {}", key.display());

    // Stopped as systemd stops it: KillSignal=, then at most TimeoutStopSec= to exit 0.
    relayd.signal(service.kill_signal)?;
    let exit = relayd.wait(service.timeout_stop).await?;
    assert!(
        exit.success(),
        "relayd exited with {exit}:\n{}",
        relayd.logs().text()
    );
    assert_eq!(relayd.logs().events_named("daemon_stopped").len(), 1);

    // systemd's copy keeps the port: a client now waits in the backlog instead of being
    // refused, until the next relayd accepts it.
    TcpStream::connect_timeout(&addr, EVENT_TIMEOUT)
        .context("the socket unit's port was not held after relayd stopped")?;
    drop(held);
    Ok(())
}

// ----- the parsing above, on its own -------------------------------------------------------

#[test]
fn unit_files_parse_with_comments_continuations_and_resets() -> anyhow::Result<()> {
    let unit = Unit::parse(
        "test.service",
        "# comment\n[Service]\n; other comment\nExecStart=/opt/relay/bin/relayd \\\n  --bind 127.0.0.1\nEnvironment=A=1\nEnvironment=\nEnvironment=B=2 \"C=x y\"\n",
    )?;
    assert_eq!(
        exec_start(&unit)?,
        (
            "/opt/relay/bin/relayd".to_owned(),
            vec!["--bind".to_owned(), "127.0.0.1".to_owned()]
        )
    );
    assert_eq!(
        environment(&unit)?,
        vec![
            ("B".to_owned(), "2".to_owned()),
            ("C".to_owned(), "x y".to_owned())
        ]
    );
    assert!(Unit::parse("bad.service", "Key=value\n").is_err());
    assert!(Unit::parse("bad.service", "[Service]\nno equals sign\n").is_err());
    Ok(())
}

#[test]
fn exec_start_refuses_what_the_test_would_not_run_as_systemd_does() -> anyhow::Result<()> {
    for line in [
        "-/opt/relay/bin/relayd",
        "/opt/relay/bin/relayd --port $PORT",
        "/opt/relay/bin/relayd --state-dir %S/relay",
        "/opt/relay/bin/relayd \"--bind",
        "/opt/relay/bin/relayd \\n",
    ] {
        let unit = Unit::parse("test.service", &format!("[Service]\nExecStart={line}\n"))?;
        assert!(exec_start(&unit).is_err(), "{line}");
    }
    let unit = Unit::parse(
        "test.service",
        "[Service]\nExecStart=/opt/relay/bin/relayd 'a b' 100%% $$x\n",
    )?;
    assert_eq!(exec_start(&unit)?.1, ["a b", "100%", "$x"]);
    let twice = Unit::parse("test.service", "[Service]\nExecStart=/a\nExecStart=/b\n")?;
    assert!(exec_start(&twice).is_err());
    Ok(())
}

#[test]
fn only_the_host_s_state_and_config_paths_move_under_the_root() {
    let root = Root {
        dir: PathBuf::from("/tmp/root"),
    };
    assert_eq!(
        root.moved("/var/lib/relay/.config"),
        "/tmp/root/var/lib/relay/.config"
    );
    assert_eq!(root.moved("/etc/relay"), "/tmp/root/etc/relay");
    assert_eq!(root.moved("/etc/relayx"), "/etc/relayx");
    assert_eq!(root.moved("/opt/relay/bin"), "/opt/relay/bin");
    assert_eq!(root.moved("info"), "info");
}

#[test]
fn time_spans_and_signals_read_as_systemd_reads_them() -> anyhow::Result<()> {
    assert_eq!(time_span("150")?, Duration::from_secs(150));
    assert_eq!(time_span("2min 30s")?, Duration::from_secs(150));
    assert!(time_span("infinity").is_err());
    assert!(time_span("0").is_err());
    assert_eq!(kill_signal("SIGTERM")?, Signal::TERM);
    assert!(kill_signal("SIGKILL").is_err());
    Ok(())
}
