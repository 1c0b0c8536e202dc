//! `relay-worker --daemon-address <URL>` (SPEC §2.4, §5.5): the per-user process that runs
//! the organisation's plugins and calls the provider. It is never started by hand: its
//! one-time launch grant arrives on stdin from `relay-mcp`, and it refuses to run without.
//!
//! Order of start-up: bind, make this generation's certificate, serve HTTPS, register with
//! the grant, load the plugins, report `Ready`. Afterwards it follows its control session:
//! it drains on `Drain`, stops taking new requests when control is lost and resumes as the
//! same generation within the grace, and exits when the grace runs out or it is revoked.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser as _;
use relay_identity::{DaemonAddress, Env, PinStore, ProcessEnv, SigningKey, StatePaths, names};
use relay_logging::Lifecycle;
use relay_proto::{
    Bytes32, Grant, Message, RefusedCode, RegisterWorkerFields, Registered, ResumeWorkerFields,
    Text, Timers,
};
use relay_proxy::config::Config;
use relay_proxy::control::client::{
    Backoff, ClientIdentity, ConnectError, Registration, Session, connect, silence_limit,
};
use relay_proxy::plugins::{PluginConfigError, Plugins};
use relay_proxy::sockets::Descriptors;
use relay_proxy::upstream::{UpstreamClient, UpstreamOptions};
use relay_proxy::worker::{
    Phase, PluginHost, WorkerHandler, WorkerIdentity, WorkerLimits, WorkerState,
    generation_redactors, serve_options,
};
use relay_sinks::{SinkContext, SinkError};

mod observe;
use tokio::io::AsyncReadExt as _;

/// What a worker stopped by SIGTERM or SIGINT gives the requests in flight.
const SIGNAL_DRAIN: Duration = Duration::from_secs(5);

/// A future that ends on SIGTERM or SIGINT with the signal's name; the handlers are installed
/// at once, so a signal that comes before it is awaited is not lost.
fn stop_signal() -> anyhow::Result<impl std::future::Future<Output = &'static str>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    })
}

/// Returns once the daemon ends a draining worker's session: a refusal, or the session's end.
async fn ended_by_daemon(session: &mut Session) {
    loop {
        match session.recv_alive(None).await {
            Ok(Some(frame)) if matches!(frame.message, Message::Refused(_)) => return,
            Ok(_) => {}
            Err(_) => return,
        }
    }
}

/// A draining worker stops once nothing came for this long: the harness's last hooks
/// (`Stop`, `SessionEnd`) arrive around its MCP's release.
const DRAIN_QUIET: Duration = Duration::from_secs(2);

/// The grant frame is small; anything longer on stdin is not a grant.
const MAX_GRANT_BYTES: u64 = 64 * 1024;

/// The worker of one machine-user.
#[derive(Debug, clap::Parser)]
#[command(name = "relay-worker", version)]
struct Cli {
    /// The daemon origin, e.g. http://127.0.0.1:47632.
    #[arg(long, value_name = "URL")]
    daemon_address: DaemonAddress,
}

/// jemalloc, as in relayd: it returns the memory of a load that has passed to the system,
/// where glibc keeps the heap of its peak, at the same CPU per request.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    // Its own session, before anything else: the worker outlives the MCP that launched it
    // and must not get the harness's terminal signals, nor a SIGHUP when that MCP's
    // process group is orphaned (§5.5).
    let _ = rustix::process::setsid();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return relay_logging::clap_exit("relay-worker", &error),
    };
    let env = ProcessEnv;
    let (config, runtime) = match relay_proxy::client_process::start("relay-worker", &env) {
        Ok(started) => started,
        Err(exit) => return exit,
    };
    match runtime.block_on(run(cli, env, config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(
                event = "worker_failed",
                error = relay_proxy::error_chain(error.as_ref()),
                "worker stopped"
            );
            relay_logging::say!("relay-worker: {}", relay_proxy::error_chain(error.as_ref()));
            if error.downcast_ref::<PluginFailure>().is_some() {
                ExitCode::from(relay_proto::WORKER_EXIT_PLUGIN_CONFIG_INVALID)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Reads the one grant from stdin; there is no other way to start a worker.
async fn read_grant() -> anyhow::Result<Grant> {
    let mut bytes = Vec::new();
    tokio::io::stdin()
        .take(MAX_GRANT_BYTES + 1)
        .read_to_end(&mut bytes)
        .await
        .context("reading the launch grant from stdin")?;
    anyhow::ensure!(
        !bytes.is_empty(),
        "no launch grant on stdin: relay-worker is started by relay-mcp"
    );
    anyhow::ensure!(
        bytes.len() as u64 <= MAX_GRANT_BYTES,
        "stdin holds more than a launch grant"
    );
    match relay_proto::decode(&bytes)
        .context("decoding the launch grant")?
        .message
    {
        Message::LaunchWorker(grant) => Ok(grant),
        _ => anyhow::bail!("stdin holds another message than a launch grant"),
    }
}

async fn run(cli: Cli, env: ProcessEnv, config: Config) -> anyhow::Result<()> {
    let grant = read_grant().await?;
    let open_file_limit = relay_proxy::server::raise_open_file_limit();
    tracing::debug!(open_file_limit, "open-file limit raised");
    let paths = StatePaths::resolve(&env).context("finding the state directory")?;
    let config = Arc::new(config);

    // Bind, and make this generation's certificate.
    let bind = SocketAddr::from((Ipv4Addr::from(grant.bind_ip), grant.port));
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .with_context(|| format!("binding {bind}"))?;
    let local = listener.local_addr()?;
    let advertised: IpAddr = match &grant.advertise_address {
        Some(address) => address
            .as_str()
            .parse()
            .context("the advertised worker address")?,
        None => IpAddr::V4(Ipv4Addr::LOCALHOST),
    };
    let endpoint = SocketAddr::new(advertised, local.port());
    let identity = WorkerIdentity::generate(&advertised.to_string())
        .context("making the worker certificate")?;

    // Serve HTTPS for the whole life of the process.
    let state = Arc::new(WorkerState::new());
    let mut serving = serve_options(&identity, Duration::from_secs(5));
    let descriptors = Descriptors::share(open_file_limit, serving.max_connections);
    serving.max_connections = descriptors.accepted;
    let upstream = UpstreamClient::new(&UpstreamOptions::from_config(
        &config.upstream,
        &env,
        descriptors.outbound,
    ))
    .context("building the provider client")?;
    let handler = Arc::new(WorkerHandler::new(
        state.clone(),
        config.clone(),
        upstream,
        WorkerLimits::default(),
    ));
    let (stop_serving, serving_stopped) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(relay_proxy::server::serve(
        listener,
        serving,
        handler.clone(),
        async move {
            let _ = serving_stopped.await;
        },
    ));

    // Register with the grant.
    relay_identity::store::ensure_private_dir(&paths.daemon_dir())?;
    let (key, _) = SigningKey::load_or_create(&paths.machine_key_file())
        .context("loading the machine identity")?;
    let tls = if cli.daemon_address.is_tls() {
        let extra = env
            .var_os(names::RELAY_EXTRA_CA_FILE)
            .map(std::path::PathBuf::from);
        Some(Arc::new(relay_proxy::tls::client_config(extra.as_deref())?))
    } else {
        None
    };
    let client = ClientIdentity {
        daemon: cli.daemon_address.clone(),
        key: Arc::new(key),
        pins: Arc::new(PinStore::new(
            paths.pins_dir(),
            Some(relay_identity::provisioned_daemon_key_file(&env)),
        )),
        tls,
        instance_id: relay_proto::Id::from(uuid::Uuid::now_v7()),
    };
    let certificate_sha256 = Bytes32(identity.certificate_sha256());
    let registration = Registration::Worker(RegisterWorkerFields {
        activation_id: grant.activation_id,
        activation_token: grant.activation_token,
        endpoint: Text::truncated(&endpoint.to_string()),
        certificate_sha256,
    });
    let (mut session, registered) = connect(&client, registration, Duration::from_secs(10))
        .await
        .map_err(|e| refusal_context(&client, e))?;
    let Registered::Worker {
        worker_id,
        generation_secret,
        drain_deadline_ms,
        timers,
    } = registered
    else {
        anyhow::bail!("the daemon answered a worker registration as an MCP's");
    };
    state.set_secret(generation_secret.0);
    let fingerprint = client.key.fingerprint().to_string();

    // Load the plugins; an invalid configuration stops the activation.
    let plugins = Plugins::load(
        &relay_identity::system_plugins_file(&env),
        Some(&paths.user_plugins_file()),
    );
    let hosted = plugins.map_err(PluginFailure::from).and_then(|plugins| {
        let hosted = host_plugins(&plugins, &config, &fingerprint)?;
        Ok((plugins, hosted))
    });
    let (plugins, recording) = match hosted {
        Ok((plugins, (host, recording))) => {
            handler.install_plugins(host);
            (plugins, recording)
        }
        Err(failure) => {
            let _ = session
                .send(&Message::WorkerActivationFailed(failure.message()))
                .await;
            return Err(anyhow::Error::new(failure).context("plugin configuration"));
        }
    };
    state.set_ready();
    session
        .send(&Message::Ready)
        .await
        .context("reporting Ready")?;
    Lifecycle::ConfigurationResolved {
        fingerprint: Some(&fingerprint),
        plugins: plugins.enabled().count() as u64,
    }
    .emit();
    Lifecycle::WorkerReady {
        fingerprint: &fingerprint,
        worker_id: worker_id.as_uuid(),
    }
    .emit();

    let life = Life {
        client,
        state: state.clone(),
        worker_id,
        certificate_sha256,
        timers,
    };
    let stopped = stop_signal()?;
    let lived = async move {
        match drain_deadline_ms {
            Some(ms) => life.drain(&mut session, Duration::from_millis(ms)).await,
            None => life.follow(session).await,
        }
    };
    let result = tokio::select! {
        result = lived => result,
        signal = stopped => {
            // A logout or a shutdown: what is in flight gets a few seconds, then the open
            // records are closed as `shutdown` below, as at the end of a drain. The daemon
            // sees the control session end and treats the worker as gone.
            tracing::info!(
                event = "worker_signalled",
                signal,
                in_flight = state.in_flight(),
                "stopping on a signal"
            );
            state.start_drain(Instant::now() + SIGNAL_DRAIN);
            Ok(())
        }
    };
    let _ = stop_serving.send(());
    // A drain has had its time: accepted requests get up to the drain deadline, then the
    // worker exits, and what is still in flight then is cut off rather than given the
    // server's own few seconds more. Other ends (control lost for good, revoked) give
    // those seconds.
    match state.snapshot().phase {
        Phase::Draining { deadline, .. } => {
            let left = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(left, &mut server).await.is_err() {
                tracing::warn!(
                    event = "drain_deadline_passed",
                    in_flight = state.in_flight(),
                    "the drain deadline passed: cutting off what is still in flight"
                );
                handler.cut_off_in_flight();
                server.abort();
            }
        }
        Phase::Starting | Phase::Ready => {
            let _ = server.await;
        }
    }
    if let Some(recording) = recording {
        recording.shutdown().await;
    }
    Lifecycle::WorkerStopped {
        fingerprint: Some(&fingerprint),
        worker_id: Some(worker_id.as_uuid()),
        activation_id: Some(grant.activation_id.as_uuid()),
        exit: None,
    }
    .emit();
    result
}

/// Why the plugins of this generation cannot run; reported as `plugin_config_invalid`.
#[derive(Debug, thiserror::Error)]
enum PluginFailure {
    #[error(transparent)]
    Config(#[from] PluginConfigError),
    #[error("{file}: component {component} (observability): the sinks cannot start: {error}")]
    Sinks {
        file: String,
        component: usize,
        error: SinkError,
    },
    #[error("the system random generator failed to give this generation's hashing key")]
    Random,
}

impl PluginFailure {
    fn message(&self) -> relay_proto::WorkerActivationFailed {
        match self {
            PluginFailure::Config(error) => error.to_activation_failed(),
            PluginFailure::Sinks { .. } | PluginFailure::Random => {
                relay_proto::WorkerActivationFailed {
                    failure_reason: Text::truncated(relay_proxy::plugins::FAILURE_REASON.as_str()),
                    diagnostic: Text::truncated(&self.to_string()),
                }
            }
        }
    }
}

/// The host of the enabled components, and the recording when observability is on. File
/// sinks are checked first, as `relay-doctor` checks them, so an unsafe directory or a
/// record file that cannot be used is named by its component and field.
fn host_plugins(
    plugins: &Plugins,
    config: &Config,
    fingerprint: &str,
) -> Result<(PluginHost, Option<Arc<observe::Recording>>), PluginFailure> {
    let user = observe::os_user_name();
    plugins.check_file_sinks(&user, Some(fingerprint))?;
    let config_of = plugins.config();
    let mut key = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key)
        .map_err(|_| PluginFailure::Random)?;
    let redactors = generation_redactors(config_of, &key);
    let recording = match config_of.observability() {
        None => None,
        Some(observability) => {
            let ctx = SinkContext {
                user,
                fingerprint: fingerprint.to_owned(),
                tls: None,
            };
            let (file, component) = plugins
                .enabled()
                .find(|c| c.kind == relay_proxy::plugins::ComponentKind::Observability)
                .map(|c| (c.file.display().to_string(), c.index))
                .unwrap_or_default();
            Some(
                observe::Recording::start(observability, redactors.records, &ctx).map_err(
                    |error| PluginFailure::Sinks {
                        file,
                        component,
                        error,
                    },
                )?,
            )
        }
    };
    let observer = recording
        .clone()
        .map(|r| r as Arc<dyn relay_proxy::worker::Observer>);
    let host = PluginHost::new(config_of, redactors.requests, observer, &config.worker);
    Ok((host, recording))
}

fn refusal_context(client: &ClientIdentity, error: ConnectError) -> anyhow::Error {
    if let ConnectError::Pin(relay_identity::PinError::Mismatch { origin, pin_file }) = &error {
        Lifecycle::DaemonPinMismatch {
            role: relay_proto::Role::Worker,
            origin: &origin.to_string(),
            pin_file,
        }
        .emit();
    }
    anyhow::Error::new(error).context(format!("registering with {}", client.daemon.origin()))
}

/// The worker after its registration.
struct Life {
    client: ClientIdentity,
    state: Arc<WorkerState>,
    worker_id: relay_proto::Id,
    certificate_sha256: Bytes32,
    timers: Timers,
}

impl Life {
    /// Follows the control session until the worker drains, is revoked, or loses control
    /// for longer than the grace.
    async fn follow(mut self, mut session: Session) -> anyhow::Result<()> {
        loop {
            let silence = silence_limit(&self.client.daemon, &self.timers);
            let dropped = loop {
                match session.recv_alive(silence).await {
                    Ok(None) => {}
                    Ok(Some(frame)) => match frame.message {
                        Message::Drain { deadline_ms } => {
                            return self
                                .drain(&mut session, Duration::from_millis(deadline_ms))
                                .await;
                        }
                        Message::DaemonStopping { .. } => break "daemon_stopping",
                        Message::Refused(refused) => {
                            anyhow::bail!("the daemon ended this worker: {}", refused.text);
                        }
                        other => tracing::debug!(kind = ?other.kind(), "ignored control message"),
                    },
                    Err(_) => break "control_lost",
                }
            };
            // Without control: no new requests (503), accepted ones finish, and the same
            // generation resumes within the grace (§5.4).
            self.state.set_control(false);
            tracing::warn!(
                event = "worker_control_dropped",
                reason = dropped,
                "worker control lost; resuming"
            );
            match self.resume().await? {
                Some(resumed) => session = resumed,
                None => return Ok(()),
            }
        }
    }

    /// Resumes as the same generation: first retry at once, then `reconnect_first_ms`
    /// doubling to `reconnect_cap_ms`, each attempt bounded, until the grace runs out.
    /// `None` when the route drained meanwhile and the worker has finished.
    async fn resume(&mut self) -> anyhow::Result<Option<Session>> {
        let grace = Duration::from_millis(self.timers.reconnect_grace_ms);
        let deadline = Instant::now() + grace;
        let mut backoff = Backoff::new(
            Duration::from_millis(self.timers.reconnect_first_ms),
            Duration::from_millis(self.timers.reconnect_cap_ms),
        );
        // What a 429 asked to wait: until then another attempt is refused too.
        let mut asked = Duration::ZERO;
        loop {
            // The wait a 429 asked for never takes the time of a last attempt in the grace.
            let last_chance = deadline
                .saturating_duration_since(Instant::now())
                .saturating_sub(Duration::from_millis(
                    self.timers.reconnect_attempt_timeout_ms,
                ));
            let wait = std::mem::take(&mut asked).min(last_chance);
            tokio::time::sleep(backoff.next_delay().max(wait)).await;
            let left = deadline.saturating_duration_since(Instant::now());
            anyhow::ensure!(!left.is_zero(), "no daemon control for {grace:?}: exiting");
            let attempt = left.min(Duration::from_millis(
                self.timers.reconnect_attempt_timeout_ms,
            ));
            let registration = Registration::ResumeWorker(ResumeWorkerFields {
                worker_id: self.worker_id,
                certificate_sha256: self.certificate_sha256,
            });
            match connect(&self.client, registration, attempt).await {
                Ok((
                    mut session,
                    Registered::Worker {
                        generation_secret,
                        drain_deadline_ms,
                        timers,
                        ..
                    },
                )) => {
                    self.timers = timers;
                    self.state.set_secret(generation_secret.0);
                    self.state.set_control(true);
                    if let Some(ms) = drain_deadline_ms {
                        self.drain(&mut session, Duration::from_millis(ms)).await?;
                        return Ok(None);
                    }
                    return Ok(Some(session));
                }
                Ok(_) => anyhow::bail!("the daemon answered a worker resume as an MCP's"),
                Err(error)
                    if error.refused_code() == Some(RefusedCode::GenerationRevoked)
                        || error.is_fatal() =>
                {
                    return Err(refusal_context(&self.client, error));
                }
                Err(error) => {
                    asked = error
                        .retry_after(&self.client.daemon, grace)
                        .unwrap_or_default();
                    tracing::debug!(%error, "resume attempt failed");
                }
            }
        }
    }

    /// Finishes accepted requests and answers late hooks (at most until the deadline), says
    /// `Stopping`, exits. What is still in flight at the deadline is cut off, and warned
    /// of, where the worker stops serving.
    async fn drain(&self, session: &mut Session, deadline: Duration) -> anyhow::Result<()> {
        self.state.start_drain(Instant::now() + deadline);
        let finished = async {
            tokio::select! {
                () = self.state.quiet_for(DRAIN_QUIET.min(deadline)) => {}
                () = ended_by_daemon(session) => {
                    // The daemon retired this generation (a new session of the route starts
                    // a worker of its own): no hook will come, so only what is in flight
                    // is waited for.
                    self.state.quiet_for(Duration::ZERO).await;
                }
            }
        };
        let _ = tokio::time::timeout(deadline, finished).await;
        let _ = session.send(&Message::Stopping).await;
        session.finish("drained").await;
        Ok(())
    }
}
