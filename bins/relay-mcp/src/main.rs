//! `relay-mcp --daemon-address <URL>`: the MCP server a harness starts (SPEC §2.2, §6). It
//! serves MCP on stdin/stdout, registers this machine-user's route with the daemon, and
//! launches the worker when the broker says so. Nothing but JSON-RPC is written to stdout;
//! logs go to stderr.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser as _;
use relay_identity::{DaemonAddress, Env, PinStore, ProcessEnv, SigningKey, StatePaths, names};
use relay_logging::Lifecycle;
use relay_proto::{Text, WorkerHint};
use relay_proxy::control::client::ClientIdentity;
use tokio::sync::{oneshot, watch};

mod control;
mod jsonrpc;
mod launch;

/// MCP server that connects a harness session to Relay.
#[derive(Debug, clap::Parser)]
#[command(name = "relay-mcp", version)]
struct Cli {
    /// The daemon origin, e.g. http://127.0.0.1:47632.
    #[arg(long, value_name = "URL")]
    daemon_address: DaemonAddress,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return relay_logging::clap_exit("relay-mcp", &error),
    };
    let env = ProcessEnv;
    let (_config, runtime) = match relay_proxy::client_process::start("relay-mcp", &env) {
        Ok(started) => started,
        Err(exit) => return exit,
    };
    let hint = match worker_hint(&cli.daemon_address, &env) {
        Ok(hint) => hint,
        Err(error) => return relay_logging::usage_exit("relay-mcp", &error),
    };
    if hint.is_none() && !cli.daemon_address.is_loopback() {
        warn_no_worker_address(&cli.daemon_address);
    }
    runtime.block_on(run(cli, env, hint));
    // The worker is in its own process group and outlives this runtime.
    runtime.shutdown_timeout(Duration::from_millis(100));
    ExitCode::SUCCESS
}

async fn run(cli: Cli, env: ProcessEnv, hint: Option<WorkerHint>) {
    let (settled_tx, settled_rx) = watch::channel(control::Settled::Pending);
    let (stop_tx, stop_rx) = oneshot::channel();
    let control =
        prepare(&cli, &env, hint, settled_tx).map(|control| tokio::spawn(control.run(stop_rx)));
    let settled = {
        let mut settled = settled_rx;
        async move {
            let _ = settled
                .wait_for(|settled| *settled != control::Settled::Pending)
                .await;
        }
    };
    let serving = jsonrpc::serve(
        tokio::io::BufReader::new(tokio::io::stdin()),
        tokio::io::stdout(),
        settled,
        control::SETTLE_WITHIN,
    );
    // Claude Code stops its MCP servers with SIGINT, Codex with SIGTERM; neither closes
    // stdin first.
    tokio::select! {
        result = serving => {
            if let Err(error) = result {
                tracing::warn!(event = "mcp_stdio_failed", %error, "MCP stdio failed");
            }
        }
        () = signal() => {}
    }
    if let Some(control) = control {
        let _ = stop_tx.send(());
        let _ = tokio::time::timeout(Duration::from_secs(2), control).await;
    }
}

async fn signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Resolves the credential and identity; `None` serves MCP without a route.
fn prepare(
    cli: &Cli,
    env: &ProcessEnv,
    hint: Option<WorkerHint>,
    settled: watch::Sender<control::Settled>,
) -> Option<control::Control> {
    let daemon_address = cli.daemon_address.origin().to_string();
    let give_up = |reason: relay_logging::McpPassThroughReason| {
        Lifecycle::DaemonMcpPassThrough {
            daemon_address: &daemon_address,
            fingerprint: None,
            reason,
            refused: None,
        }
        .emit();
        settled.send_replace(control::Settled::Decided);
    };
    let paths = match StatePaths::resolve(env) {
        Ok(paths) => paths,
        Err(error) => {
            tracing::warn!(event = "state_dir_unavailable", %error, "no state directory; serving MCP without a route");
            give_up(relay_logging::McpPassThroughReason::CredentialRejected);
            return None;
        }
    };
    let euid = relay_identity::store::current_euid();
    let resolved = relay_identity::resolve_credential(env, &paths, euid);
    for (source, reason) in &resolved.skipped {
        Lifecycle::RouteCredentialSkipped {
            source: match source {
                relay_identity::CredentialSource::Env => relay_logging::CredentialSource::Env,
                relay_identity::CredentialSource::File => relay_logging::CredentialSource::File,
            },
            reason: relay_logging::CredentialSkipReason::parse(reason.as_str())
                .unwrap_or(relay_logging::CredentialSkipReason::Unreadable),
            path: matches!(source, relay_identity::CredentialSource::File)
                .then(|| paths.token_file())
                .as_deref(),
        }
        .emit();
    }
    let Some((credential, _)) = resolved.token else {
        // Without a credential relay-mcp serves MCP and registers nothing (§6).
        settled.send_replace(control::Settled::Decided);
        return None;
    };
    let key = match relay_identity::store::ensure_private_dir(&paths.daemon_dir())
        .map_err(|e| e.to_string())
        .and_then(|()| {
            SigningKey::load_or_create(&paths.machine_key_file()).map_err(|e| e.to_string())
        }) {
        Ok((key, _)) => Arc::new(key),
        Err(error) => {
            tracing::error!(event = "machine_identity_unusable", %error, "the machine identity is unusable; serving MCP without a route");
            give_up(relay_logging::McpPassThroughReason::CredentialRejected);
            return None;
        }
    };
    let pins = Arc::new(PinStore::new(
        paths.pins_dir(),
        Some(relay_identity::provisioned_daemon_key_file(env)),
    ));
    let tls = if cli.daemon_address.is_tls() {
        let extra = env
            .var_os(names::RELAY_EXTRA_CA_FILE)
            .map(std::path::PathBuf::from);
        match relay_proxy::tls::client_config(extra.as_deref()) {
            Ok(config) => Some(Arc::new(config)),
            Err(error) => {
                tracing::error!(event = "daemon_tls_unavailable", %error, "no TLS configuration for the daemon; serving MCP without a route");
                give_up(relay_logging::McpPassThroughReason::DaemonUnreachable);
                return None;
            }
        }
    } else {
        None
    };
    let launcher = launch::Launcher::new(env, daemon_address.clone(), &paths);
    Some(control::Control {
        identity: ClientIdentity {
            daemon: cli.daemon_address.clone(),
            key,
            pins,
            tls,
            instance_id: relay_proto::Id::from(uuid::Uuid::now_v7()),
        },
        credential,
        hint,
        launcher,
        settled,
        queries: std::sync::Mutex::new(tokio::task::JoinSet::new()),
        retiring: std::sync::Mutex::new(tokio::task::JoinSet::new()),
    })
}

/// The remote worker's network hint (§9), from `RELAY_WORKER_ADVERTISE_ADDRESS` and
/// `RELAY_WORKER_PORT`. A value the daemon can never accept is a configuration error, named
/// at start: ignored or passed on, it would leave every worker refused (or on a random port
/// that a firewall opened for the intended one blocks) and relaunched with backoff for the
/// whole session, with the reason only in the worker's log.
///
/// Both are for a remote daemon only: a local one runs its users' workers on loopback and
/// ignores a hint, so a remote set-up's environment on the daemon's own host is no error.
fn worker_hint(daemon: &DaemonAddress, env: &impl Env) -> Result<Option<WorkerHint>, String> {
    if daemon.is_loopback() {
        return Ok(None);
    }
    let port = match env.non_empty(names::RELAY_WORKER_PORT) {
        None => None,
        Some(text) => {
            let text = text.to_string_lossy();
            Some(text.trim().parse::<u16>().map_err(|_| {
                format!(
                    "{}: {text:?} is not a port number (0 to 65535)",
                    names::RELAY_WORKER_PORT
                )
            })?)
        }
    };
    let address = match env.non_empty(names::RELAY_WORKER_ADVERTISE_ADDRESS) {
        None => None,
        Some(text) => Some(advertise_address(&text.to_string_lossy())?),
    };
    match (address, port) {
        (None, None) => Ok(None),
        // The worker would advertise 127.0.0.1, which a remote daemon refuses.
        (None, Some(_)) => Err(format!(
            "{}: set without {}, which a remote worker needs: the address the daemon reaches it at",
            names::RELAY_WORKER_PORT,
            names::RELAY_WORKER_ADVERTISE_ADDRESS
        )),
        (Some(address), port) => Ok(Some(WorkerHint {
            advertise_address: Some(Text::truncated(&address.to_string())),
            port,
        })),
    }
}

/// A remote daemon with no `RELAY_WORKER_ADVERTISE_ADDRESS`: each worker will advertise
/// 127.0.0.1, which the daemon refuses, so the session's requests pass through (or get 503)
/// while worker after worker is launched. Not an error, since relay-mcp still serves MCP and
/// nothing else is wrong, but said once at start in this log, not only in each worker's.
fn warn_no_worker_address(daemon: &DaemonAddress) {
    tracing::warn!(
        event = "worker_address_missing",
        daemon = %daemon.origin(),
        "{} is not set, so this session's worker will advertise 127.0.0.1, which a remote daemon refuses: its requests pass through (or get 503) until the variable gives this machine's address as the daemon sees it",
        names::RELAY_WORKER_ADVERTISE_ADDRESS
    );
}

/// An advertised worker address: an IPv4 address the daemon may connect to. The daemon
/// connects only to an address, never to a name, and never to a loopback, link-local,
/// multicast, unspecified or broadcast one for a remote worker (§5.5).
fn advertise_address(text: &str) -> Result<std::net::Ipv4Addr, String> {
    let name = names::RELAY_WORKER_ADVERTISE_ADDRESS;
    let address: std::net::IpAddr = text.trim().parse().map_err(|_| {
        format!("{name}: {text:?} is not an IP address (a host name is not accepted: the daemon connects to addresses only)")
    })?;
    let std::net::IpAddr::V4(address) = address else {
        return Err(format!(
            "{name}: {text:?} is an IPv6 address; relayd reaches workers over IPv4 only"
        ));
    };
    match relay_proxy::control::daemon::never_a_remote_worker(address) {
        Some(kind) => Err(format!(
            "{name}: {text:?} is {kind}, which the daemon never accepts for a remote worker; give this machine's address as the daemon sees it"
        )),
        None => Ok(address),
    }
}

#[cfg(test)]
mod tests;
