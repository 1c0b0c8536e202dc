//! Starting, serving and stopping the daemon.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use relay_broker::BrokerConfig;
use relay_identity::{Env, ProcessEnv, SigningKey, StatePaths, names};
use relay_logging::{Lifecycle, LogConfig};
use relay_proxy::config::{Config, ConfigSources};
use relay_proxy::control::daemon::{ControlOptions, ControlPlane};
use relay_proxy::front::{Front, FrontOptions, Mode, ProviderKeys};
use relay_proxy::metrics::Metrics;
use relay_proxy::server::{PeerLimit, ServeOptions, serve};
use relay_proxy::shell::{Saved, Shell};
use relay_proxy::sockets::Descriptors;
use relay_proxy::state::StateStore;
use relay_proxy::tls::{Kept, Reload, ServedCertificate, ServerConfig};
use relay_proxy::upstream::{UpstreamClient, UpstreamOptions};
use tokio::net::TcpListener;

use crate::cli::{Cli, DaemonSettings, max_tokens_per_identity};

/// Largest provider key file read.
const MAX_KEY_FILE_BYTES: u64 = 4096;

/// Everything resolved before the runtime starts; a failure here is a usage error (64).
struct Prepared {
    settings: DaemonSettings,
    config: Config,
    /// The daemon's own provider keys, read from their files or the environment.
    keys: ProviderKeys,
    /// The HTTPS listener's certificate, from `--tls-cert` and `--tls-key`, and its
    /// configuration.
    tls: Option<(Arc<ServedCertificate>, Arc<ServerConfig>)>,
    state_dir: PathBuf,
    /// The socket passed by the service manager, taken before any thread starts (taking it
    /// edits the environment).
    activated: Option<std::net::TcpListener>,
}

pub(crate) fn run(cli: &Cli) -> ExitCode {
    let env = ProcessEnv;
    // `json_logs`: stderr carries JSON lines and nothing else.
    let (prepared, json_logs) = match prepare(cli, &env) {
        Ok(prepared) => prepared,
        Err(message) => return relay_logging::usage_exit("relayd", &message),
    };
    let https = prepared.tls.is_some();
    let runtime = match relay_proxy::runtime::build(runtime_threads(prepared.settings.bind, https))
    {
        Ok(runtime) => runtime,
        Err(error) => {
            relay_logging::say!("relayd: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(serve_daemon(prepared, &env));
    // A look at the certificate's files stuck in a file system that hangs must not keep the
    // stopped daemon from exiting.
    runtime.shutdown_timeout(Duration::from_secs(1));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            Lifecycle::DaemonFailed {
                error: error.as_ref(),
            }
            .emit();
            // A last plain line for a person reading a terminal; a log shipper reading JSON
            // lines has the whole error in `daemon_failed`, unless the level filtered it out,
            // and a failure is never silent.
            let logged =
                tracing::enabled!(target: relay_logging::LIFECYCLE_TARGET, tracing::Level::ERROR);
            if !(json_logs && logged) {
                relay_logging::say!("relayd: {}", relay_proxy::error_chain(error.as_ref()));
            }
            ExitCode::FAILURE
        }
    }
}

/// What the daemon needs to run, and whether its logs are JSON lines.
fn prepare(cli: &Cli, env: &impl Env) -> Result<(Prepared, bool), String> {
    let settings = cli.daemon_settings().map_err(|e| e.to_string())?;
    let sources = match &cli.config {
        Some(file) => {
            if !file.exists() {
                return Err(format!("--config {}: no such file", file.display()));
            }
            if !file.is_file() {
                return Err(format!("--config {}: not a regular file", file.display()));
            }
            ConfigSources::only(file.clone())
        }
        None => ConfigSources::standard(
            StatePaths::resolve(env)
                .ok()
                .map(|p| p.relay_dir())
                .as_deref(),
            &relay_identity::system_config_dir(env),
        ),
    };
    let config = load_config(&sources, cli.max_tokens_per_identity, env)?;
    let text = |name: &str| env.var_os(name).map(|v| v.to_string_lossy().into_owned());
    let log = LogConfig::resolve(
        Some(&config.daemon.logging.level),
        Some(&config.daemon.logging.stderr_format),
        text(names::RELAY_LOG).as_deref(),
        text(names::RELAY_LOG_FORMAT).as_deref(),
        cli.log_level.as_deref(),
        cli.log_format.as_deref(),
        LogConfig::daemon_default(),
    )
    .map_err(|e| e.to_string())?;
    relay_logging::init(&log, std::io::stderr).map_err(|e| e.to_string())?;
    // Read before anything is created, so that a wrong file is a usage error like any other.
    let keys = provider_keys(&config, env)?;
    let tls = match &settings.tls {
        Some((cert, key)) => {
            warn_if_others_can_read(key);
            warn_if_clients_will_refuse(cert, &settings.advertised.host);
            let served = ServedCertificate::from_files(cert, key, &settings.advertised.host)
                .and_then(|served| {
                    let config = served.server_config()?;
                    Ok((served, Arc::new(config)))
                })
                .map_err(|e| {
                    format!(
                        "--tls-cert {} and --tls-key {}: {e}",
                        cert.display(),
                        key.display()
                    )
                })?;
            Some(served)
        }
        None => None,
    };
    let state_dir = state_dir(cli, env)?;
    let activated = listenfd::ListenFd::from_env()
        .take_tcp_listener(0)
        .map_err(|e| format!("LISTEN_FDS: the passed socket is not a TCP listener: {e}"))?;
    if let Some(listener) = &activated {
        // Loopback privileges follow --bind: a passed socket must listen where it says. Its
        // port is the service manager's to choose (--port is not used then).
        let local = listener
            .local_addr()
            .map_err(|e| format!("LISTEN_FDS: cannot read the passed socket's address: {e}"))?;
        let expected = IpAddr::V4(settings.bind);
        if local.ip().to_canonical() != expected {
            return Err(format!(
                "the socket passed by the service manager listens on {local}, not on --bind {expected}"
            ));
        }
    }
    let prepared = Prepared {
        settings,
        config,
        keys,
        tls,
        state_dir,
        activated,
    };
    Ok((prepared, log.format == relay_logging::LogFormat::Jsonl))
}

/// The most threads relayd's runtime may run, by whom it serves.
///
/// Plain HTTP on loopback serves its own machine's agents, far fewer requests than one event
/// loop can take, and one loop costs less CPU per request than a pool of threads that wake
/// one another for work (docs/benchmarks.md). Over HTTPS it serves other machines (bound to
/// their network, or reached through a tunnel to loopback), and takes a thread per CPU for
/// their load and their bursts of TLS handshakes.
fn runtime_threads(bind: Ipv4Addr, https: bool) -> std::num::NonZeroUsize {
    if bind.is_loopback() && !https {
        std::num::NonZeroUsize::MIN
    } else {
        std::num::NonZeroUsize::MAX
    }
}

/// The daemon's configuration: the files of `sources`, then `max_tokens_per_identity` from
/// the flag or the environment (§2.1). `relayd bindings` builds a stopped daemon's broker
/// settings from it too, without the flag.
pub(crate) fn load_config(
    sources: &ConfigSources,
    max_tokens_flag: Option<u8>,
    env: &impl Env,
) -> Result<Config, String> {
    let mut config = Config::load_daemon(sources).map_err(|e| e.to_string())?;
    let env_tokens = env
        .var_os(names::RELAY_DAEMON_MAX_TOKENS_PER_IDENTITY)
        .map(|v| v.to_string_lossy().into_owned());
    config.daemon.max_tokens_per_identity = max_tokens_per_identity(
        max_tokens_flag,
        env_tokens.as_deref(),
        config.daemon.max_tokens_per_identity,
    )?;
    Ok(config)
}

fn state_dir(cli: &Cli, env: &impl Env) -> Result<PathBuf, String> {
    match &cli.state_dir {
        Some(dir) => Ok(dir.clone()),
        None => StatePaths::resolve(env)
            .map(|p| p.daemon_dir())
            .map_err(|e| format!("cannot find the state directory: {e}; set XDG_CONFIG_HOME or HOME, or pass --state-dir")),
    }
}

async fn serve_daemon(prepared: Prepared, env: &impl Env) -> anyhow::Result<()> {
    let Prepared {
        settings,
        config,
        keys,
        tls,
        state_dir,
        activated,
    } = prepared;
    let started = Instant::now();
    let signal = shutdown_signal()?;
    let (served, tls) = tls.unzip();
    // Ends with the runtime, when the daemon has stopped.
    if let Some(served) = served {
        tokio::spawn(watch_certificate(served, CERTIFICATE_CHECK, report_reload));
    }
    let drain = config.daemon.timers.drain_secs.get();
    // Said at once: the stop's next lines come only when the drain has ended, up to
    // drain_secs later.
    let shutdown = async move {
        signal.await;
        tracing::info!(
            event = "daemon_stopping",
            drain_secs = drain.as_secs(),
            "stopping: no new connection is accepted, and accepted requests get up to drain_secs to finish"
        );
    };
    relay_identity::store::ensure_private_dir(&state_dir)
        .with_context(|| format!("preparing the state directory {}", state_dir.display()))?;
    // The state lock is held until the state is written a last time, so `relayd bindings`
    // never edits the file of a running daemon; the admin socket serves those commands.
    let (_state_lock, admin_listener) = relay_proxy::admin::bind(&state_dir)
        .await
        .context("opening the admin socket")?;
    let (daemon_key, _) = SigningKey::load_or_create(&state_dir.join("daemon-identity.pk8"))
        .context("loading the daemon identity")?;
    let open_file_limit = relay_proxy::server::raise_open_file_limit();
    let socket_activated = activated.is_some();
    let listener = listener(&settings, activated)?;
    let local = listener
        .local_addr()
        .context("reading the listening address")?;
    let mut advertised = settings.advertised.clone();
    if settings.bind.is_loopback() && advertised.port == settings.port {
        // Port 0 and socket activation: the loopback origin is the real port.
        advertised.port = local.port();
    }
    let descriptors = Descriptors::share(open_file_limit, config.daemon.max_connections);
    if descriptors.accepted < config.daemon.max_connections {
        tracing::warn!(
            event = "max_connections_lowered",
            configured = config.daemon.max_connections,
            max_connections = descriptors.accepted,
            open_file_limit,
            "the open-file limit leaves room for fewer connections than max_connections: raise the limit (LimitNOFILE= under systemd, ulimit -n) to accept as many"
        );
    }
    let upstream = UpstreamClient::new(&UpstreamOptions::from_config(
        &config.upstream,
        env,
        descriptors.outbound,
    ))
    .context("building the upstream client")?;
    let instance_id = uuid::Uuid::now_v7();
    let config = Arc::new(config);
    let metrics = Arc::new(Metrics::new());
    let shell = Shell::new(
        broker_config(&config, settings.mode),
        StateStore::new(&state_dir),
        metrics.clone(),
    )
    .context("loading the daemon state")?;
    // Connections to workers and to providers share one room in the open-file limit.
    shell.workers().limit_to(upstream.budget());
    let control = ControlPlane::new(
        control_options(&config, &settings, &advertised, local, Arc::new(daemon_key))?,
        shell.clone(),
    );
    let (stop_shell, shell_stopped) = tokio::sync::oneshot::channel::<()>();
    let shell_task = tokio::spawn(shell.clone().run(async move {
        let _ = shell_stopped.await;
    }));
    let (stop_admin, admin_stopped) = tokio::sync::oneshot::channel::<()>();
    let admin_task = tokio::spawn(relay_proxy::admin::serve(
        admin_listener,
        shell.clone(),
        async move {
            let _ = admin_stopped.await;
        },
    ));
    let front = Arc::new(
        Front::new(
            FrontOptions {
                bind: settings.bind,
                port: local.port(),
                advertised: advertised.clone(),
                mode: settings.mode,
                allow_anonymous_pass_through: settings.allow_anonymous_pass_through,
                config: config.clone(),
                instance_id,
            },
            upstream,
            keys.clone(),
            metrics,
        )
        .with_control(shell.clone(), control.clone()),
    );
    let origin = advertised.origin();
    Lifecycle::DaemonListening {
        address: local,
        advertised_origin: Some(&origin),
        mode: match settings.mode {
            Mode::Managed => relay_logging::DaemonMode::Managed,
            Mode::PassThrough => relay_logging::DaemonMode::PassThrough,
            Mode::RequireWorker => relay_logging::DaemonMode::RequireWorker,
        },
        tls: tls.is_some(),
        socket_activated,
        open_file_limit,
        max_connections: descriptors.accepted,
        max_provider_connections: descriptors.outbound,
        instance_id,
        version: env!("CARGO_PKG_VERSION"),
    }
    .emit();
    if settings.mode == Mode::PassThrough {
        Lifecycle::DaemonPassThroughEnabled {
            daemon_keys: match config.upstream.daemon_keys {
                relay_proxy::config::DaemonKeys::BoundOnly => relay_logging::DaemonKeys::BoundOnly,
                relay_proxy::config::DaemonKeys::AnyLocal => relay_logging::DaemonKeys::AnyLocal,
            },
            openai_key_configured: keys.openai.is_some(),
            anthropic_key_configured: keys.anthropic.is_some(),
        }
        .emit();
    }
    let report = serve(
        listener,
        ServeOptions {
            max_connections: descriptors.accepted,
            header_read_timeout: config.daemon.timers.header_read_timeout_secs.get(),
            keepalive_idle: config.daemon.keepalive_idle_secs.get(),
            write_stall: config.daemon.stream_idle_secs.get(),
            drain_timeout: config.daemon.timers.drain_secs.get(),
            tls,
            handshake_timeout: config.daemon.timers.header_read_timeout_secs.get(),
            per_peer: PeerLimit {
                max: config.daemon.max_connections_per_ip,
                loopback: false,
            },
            // Callers of the public listener prove nothing per connection.
            unvouched: None,
            // A passed socket is the service manager's to keep, listening for the next run.
            hold_port: !socket_activated,
        },
        front.clone(),
        shutdown,
    )
    .await;
    if !report.drained() {
        tracing::warn!(
            event = "drain_deadline_passed",
            drain = ?config.daemon.timers.drain_secs.get(),
            unfinished = report.unfinished,
            "accepted requests did not complete in the drain time"
        );
    }
    // Clients keep their state and resume within their grace (§5.7).
    shell.input(relay_broker::Input::DaemonStopping);
    control.shutdown().await;
    let _ = stop_admin.send(());
    let _ = admin_task.await;
    let _ = stop_shell.send(());
    let saved = shell_task.await.unwrap_or(Saved::No);
    // A stop that loses state is no clean stop: a revoke or a block the state file does not
    // hold yet would be undone by the next start, and a service manager that restarts
    // failed daemons must see it.
    if saved == Saved::No {
        anyhow::bail!(
            "the state file {} could not be written as the daemon stopped (state_write_failed says why): changes since the last successful write, such as a revoke, a block or new bindings, are lost; make the state directory writable, start relayd and apply them again",
            shell.state_path().display()
        );
    }
    Lifecycle::DaemonStopped {
        uptime_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        unfinished_requests: u64::try_from(report.unfinished).unwrap_or(u64::MAX),
    }
    .emit();
    Ok(())
}

/// The broker's settings from the daemon's configuration; `relayd bindings` drives a broker
/// with them on a stopped daemon's state.
pub(crate) fn broker_config(config: &Config, mode: Mode) -> BrokerConfig {
    let d = &config.daemon;
    let timers = d.timers.to_wire();
    BrokerConfig {
        pass_through: mode == Mode::PassThrough,
        max_tokens_per_identity: usize::from(d.max_tokens_per_identity),
        max_routes: d.max_routes as usize,
        max_sessions_per_route: d.max_sessions_per_route as usize,
        max_requests_per_identity: d.max_requests_per_identity,
        activation_wait: Duration::from_millis(d.activation_wait_ms),
        binding_tombstone: Duration::from_secs(u64::from(d.binding_tombstone_days) * 24 * 3600),
        probe_interval: d.timers.ping_secs.get(),
        activation_probe_retry: Duration::from_millis(timers.reconnect_first_ms),
        bindings_flush: Duration::from_secs(300),
        timers,
    }
}

/// The control plane's settings: the origins clients may name, limits and timers.
fn control_options(
    config: &Config,
    settings: &DaemonSettings,
    advertised: &relay_proxy::front::Advertised,
    local: SocketAddr,
    daemon_key: Arc<SigningKey>,
) -> anyhow::Result<ControlOptions> {
    let scheme = if advertised.https { "https" } else { "http" };
    let mut origins = vec![advertised.origin()];
    if settings.bind.is_loopback() {
        for host in ["127.0.0.1", "localhost"] {
            origins.push(format!("{scheme}://{host}:{}", local.port()));
        }
    }
    let origins = origins
        .iter()
        .map(|o| relay_identity::Origin::parse(o).map(|o| o.to_string()))
        .collect::<Result<Vec<_>, _>>()
        .context("normalizing the daemon's origins")?;
    let interfaces = if_addrs::get_if_addrs()
        .context("enumerating the host's interface addresses")?
        .iter()
        .map(if_addrs::Interface::ip)
        .collect::<Vec<_>>();
    let own_addresses = own_addresses(settings.bind, &advertised.host, &interfaces);
    tracing::info!(
        event = "daemon_own_addresses",
        interface_addresses = interfaces.len(),
        own_addresses = own_addresses.len(),
        "the daemon's own addresses are enumerated; remote workers may not name them"
    );
    let t = &config.daemon.timers;
    Ok(ControlOptions {
        daemon_key,
        origins,
        challenge_ttl: t.challenge_ttl_secs.get(),
        challenge_window: t.challenge_window_secs.get(),
        challenge_limit: t.challenge_limit,
        max_sessions_per_ip: config.daemon.max_control_sessions_per_ip,
        ping: t.ping_secs.get(),
        pong_timeout: t.pong_timeout_secs.get(),
        worker_networks: config.daemon.worker_networks.clone(),
        own_addresses,
        interfaces: current_interfaces,
    })
}

/// The host's interface addresses now; none when they cannot be read (the addresses read at
/// start still count).
fn current_interfaces() -> Vec<IpAddr> {
    if_addrs::get_if_addrs()
        .map(|interfaces| interfaces.iter().map(if_addrs::Interface::ip).collect())
        .unwrap_or_default()
}

/// The addresses a remote worker may never name as its endpoint (§5.5): the bind address,
/// an IP-literal advertised host, and every address of the host's interfaces (enumerated at
/// start), so a local user reaching the daemon over one of its own interfaces cannot
/// register a worker that is really the daemon's own host. Sorted, without duplicates,
/// IPv4-mapped IPv6 addresses written as IPv4.
pub(crate) fn own_addresses(
    bind: Ipv4Addr,
    advertised_host: &str,
    interfaces: &[IpAddr],
) -> Vec<IpAddr> {
    let mut own = vec![IpAddr::V4(bind)];
    if let Ok(ip) = advertised_host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        own.push(ip);
    }
    own.extend_from_slice(interfaces);
    let mut own: Vec<IpAddr> = own.iter().map(IpAddr::to_canonical).collect();
    own.sort_unstable();
    own.dedup();
    own
}

/// The listening socket: the one passed by the service manager, else a fresh bind.
fn listener(
    settings: &DaemonSettings,
    activated: Option<std::net::TcpListener>,
) -> anyhow::Result<TcpListener> {
    let std_listener = match activated {
        // Checked against --bind when it was taken.
        Some(listener) => listener,
        None => {
            let address = SocketAddr::from((settings.bind, settings.port));
            std::net::TcpListener::bind(address).with_context(|| format!("binding {address}"))?
        }
    };
    std_listener
        .set_nonblocking(true)
        .context("configuring the listening socket")?;
    Ok(TcpListener::from_std(std_listener)?)
}

/// The daemon's own provider keys: a key file (checked like the token file) wins over the
/// environment variable. A key file directly in the credentials directory systemd gives
/// the service (`$CREDENTIALS_DIRECTORY`, filled by `LoadCredential=`) is owned by root and
/// read through an ACL, so it is checked as systemd writes it.
fn provider_keys(config: &Config, env: &impl Env) -> Result<ProviderKeys, String> {
    let credentials = env
        .non_empty(names::CREDENTIALS_DIRECTORY)
        .map(PathBuf::from);
    let read = |key: &str, file: &str, var: &str| -> Result<Option<String>, String> {
        if !file.is_empty() {
            let path = Path::new(file);
            if !path.is_absolute() {
                // A key pasted where its file belongs must not reach a terminal or a log.
                return Err(format!(
                    "{key}: must be the absolute path of a file that holds the key (the value given is not shown, in case it is the key itself)"
                ));
            }
            let euid = relay_identity::store::current_euid();
            let from_systemd = credentials
                .as_deref()
                .is_some_and(|dir| path.parent() == Some(dir));
            let read_file = if from_systemd {
                relay_identity::read_service_credential
            } else {
                relay_identity::read_private_file
            };
            let bytes = read_file(path, euid, MAX_KEY_FILE_BYTES)
                .map_err(|reason| format!("{key}: provider key file {}: {reason}", path.display()))?
                .ok_or_else(|| {
                    format!("{key}: provider key file {} does not exist", path.display())
                })?;
            let text = String::from_utf8(bytes)
                .map_err(|_| format!("{key}: provider key file {} is not UTF-8", path.display()))?;
            return Ok(Some(text.trim().to_owned()).filter(|k| !k.is_empty()));
        }
        Ok(env
            .var_os(var)
            .map(|v| v.to_string_lossy().trim().to_owned())
            .filter(|k| !k.is_empty()))
    };
    let openai = read(
        "upstream.openai_api_key_file",
        &config.upstream.openai_api_key_file,
        names::OPENAI_API_KEY,
    )?;
    let anthropic = read(
        "upstream.anthropic_api_key_file",
        &config.upstream.anthropic_api_key_file,
        names::ANTHROPIC_API_KEY,
    )?;
    ProviderKeys::new(openai.as_deref(), anthropic.as_deref())
        .map_err(|which| format!("{which} is not a valid header value"))
}

/// Installs the SIGTERM, SIGINT and SIGHUP handlers now, so a signal that arrives right
/// after start-up already stops the daemon cleanly, and resolves on the first of them.
/// relayd has nothing to reload, so a hang-up (the terminal it was started from closing)
/// stops it as SIGTERM does, draining and saving its state, rather than killing it.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut hup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = hup.recv() => {}
        }
    })
}

/// How often the served certificate's files are looked at for a renewal.
const CERTIFICATE_CHECK: Duration = Duration::from_secs(60);

/// Looks at the served certificate's files every `every` and serves a renewed certificate
/// from the next handshake on, so that renewing it takes no restart; `report` says what
/// each look did ([`report_reload`] logs it).
async fn watch_certificate(
    served: Arc<ServedCertificate>,
    every: Duration,
    report: impl Fn(&ServedCertificate, Reload) + Clone + Send + 'static,
) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        // Off the event loop: a file system that hangs must not hold up requests. The next
        // look waits for this one.
        let (served, report) = (served.clone(), report.clone());
        let mut look = tokio::task::spawn_blocking(move || {
            report(&served, served.reload_if_changed(SystemTime::now()));
        });
        if tokio::time::timeout(every, &mut look).await.is_err() {
            tracing::warn!(
                event = "tls_certificate_look_stalled",
                "reading the TLS certificate's files has taken over a minute: their file system may hang; relayd serves the certificate it has meanwhile"
            );
            let _ = look.await;
        }
    }
}

/// Logs what a look at the served certificate's files did.
fn report_reload(served: &ServedCertificate, reload: Reload) {
    let cert = served.cert_path().display();
    match reload {
        Reload::Unchanged => {}
        Reload::ServedRefused { problems } => {
            warn_refused_by_clients(served.cert_path(), served.host(), &problems);
        }
        Reload::Served { problems } => {
            tracing::info!(
                event = "tls_certificate_reloaded",
                file = %cert,
                sha256 = served.sha256_hex(),
                "the TLS certificate's files changed: new connections get the certificate they hold now"
            );
            warn_if_others_can_read(served.key_path());
            warn_refused_by_clients(served.cert_path(), served.host(), &problems);
        }
        Reload::Kept(Kept::Unreadable(error)) => tracing::warn!(
            event = "tls_certificate_reload_failed",
            file = %cert,
            error = %relay_proxy::error_chain(&error),
            "the TLS certificate's files changed but cannot be served, so relayd keeps the certificate it has; it reads them again at every look"
        ),
        Reload::Kept(Kept::RefusedByClients(problems)) => tracing::warn!(
            event = "tls_certificate_reload_refused",
            file = %cert,
            problems = problems.join("; "),
            "the TLS certificate's files changed to a certificate clients would refuse, so relayd keeps the one it has, which they accept; it judges the files again at every look and serves theirs once clients would take it"
        ),
    }
}

/// Says so when every user of the machine can read the daemon's TLS key (a key left 0644),
/// and so could pose as the daemon to its clients. A warning, not a refusal: group access
/// (`root:relay 0640`) is how keys are commonly shared with a service account.
fn warn_if_others_can_read(key: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let Ok(metadata) = std::fs::metadata(key) else {
        return;
    };
    let mode = metadata.permissions().mode() & 0o7777;
    if mode & 0o004 != 0 {
        tracing::warn!(
            event = "tls_key_readable_by_others",
            file = %key.display(),
            mode = format!("{mode:04o}"),
            "every user of this machine can read the TLS key, and so could pose as the daemon: chmod o-rwx it"
        );
    }
}

/// Says so when clients will refuse the certificate relayd is given to serve (expired, a
/// CA's own, not for servers, or not naming the advertised host), which would otherwise show
/// only as every client's failed handshake. A warning, not a refusal: a clock can be wrong,
/// and a renewed certificate may be on its way.
fn warn_if_clients_will_refuse(cert: &Path, host: &str) {
    // A file that cannot be read is refused with the TLS configuration just after.
    if let Ok(problems) =
        relay_proxy::tls::served_certificate_problems(cert, host, SystemTime::now())
    {
        warn_refused_by_clients(cert, host, &problems);
    }
}

fn warn_refused_by_clients(cert: &Path, host: &str, problems: &[String]) {
    if !problems.is_empty() {
        tracing::warn!(
            event = "tls_certificate_refused_by_clients",
            file = %cert.display(),
            host,
            problems = problems.join("; "),
            "clients will refuse the TLS certificate relayd serves: fix or replace --tls-cert"
        );
    }
}

pub(crate) fn identity_show(cli: &Cli) -> ExitCode {
    let env = ProcessEnv;
    let origin = match cli.advertised(false) {
        Ok(advertised) => advertised.origin(),
        Err(error) => return relay_logging::usage_exit("relayd", &error.to_string()),
    };
    let run = || -> anyhow::Result<String> {
        let origin = relay_identity::Origin::parse(&origin)?;
        let dir = state_dir(cli, &env).map_err(anyhow::Error::msg)?;
        relay_identity::store::ensure_private_dir(&dir)?;
        let (key, outcome) = SigningKey::load_or_create(&dir.join("daemon-identity.pk8"))?;
        // Provisioning before the daemon's first start is meant to work; a mistyped
        // --state-dir must not hand out a key no daemon uses without a word.
        if outcome == relay_identity::KeyFileOutcome::Created {
            relay_logging::say!(
                "relayd: {} held no daemon key: made a new one, which a daemon started with this state directory will use",
                dir.display()
            );
        }
        Ok(relay_identity::format_pin(&origin, &key.public_key()))
    };
    match run() {
        Ok(pin) => crate::print_stdout(&pin),
        Err(error) => {
            relay_logging::say!("relayd: {}", relay_proxy::error_chain(error.as_ref()));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests;
