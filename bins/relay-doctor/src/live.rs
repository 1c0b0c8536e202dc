//! `relay-doctor --live --daemon-address URL` (§10.4): proves, for this user, that traffic
//! runs through a worker. The IO ([`run`]) gathers answers; the `judge_*` functions turn each
//! answer into a check and are tested without a daemon.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use relay_identity::{
    DaemonAddress, Env, Origin, PinStore, PublicKey, RouteToken, names, provisioned_daemon_key_file,
};
use relay_proto::{
    Health, HealthStatus, PassThroughReason, RouteMode, RouteStatus, WorkerState, WorkerStatus,
};
use serde_json::json;

use crate::environment::{Inputs, display, resolve_token};
use crate::report::{Check, Mode, Report, Status};
use relay_proxy::daemon_http::{self, Answer, GetError};

/// How long each exchange with the daemon may take.
const LIMIT: Duration = Duration::from_secs(10);

/// Why a GET to the daemon got no answer.
#[derive(Debug)]
pub(crate) enum NoAnswer {
    /// The TLS handshake failed: something answered, but not with a certificate the client
    /// trusts (or not over TLS at all).
    Tls(String),
    /// Anything else: nothing listens, a timeout, a broken exchange.
    Other(String),
}

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoAnswer::Tls(why) | NoAnswer::Other(why) => f.write_str(why),
        }
    }
}

impl From<GetError> for NoAnswer {
    fn from(error: GetError) -> NoAnswer {
        match error {
            GetError::Tls { .. } => NoAnswer::Tls(error.to_string()),
            other => NoAnswer::Other(other.to_string()),
        }
    }
}

/// One GET to the daemon as the doctor, within [`LIMIT`].
async fn fetch(
    daemon: &DaemonAddress,
    tls: Option<&Arc<rustls::ClientConfig>>,
    path: &str,
    token: Option<&RouteToken>,
) -> Result<Answer, NoAnswer> {
    let agent = concat!("relay-doctor/", env!("CARGO_PKG_VERSION"));
    Ok(daemon_http::get(daemon, tls, path, token, LIMIT, agent).await?)
}

/// [`fetch`], with the reason as text.
async fn get(
    daemon: &DaemonAddress,
    tls: Option<&Arc<rustls::ClientConfig>>,
    path: &str,
    token: Option<&RouteToken>,
) -> Result<Answer, String> {
    fetch(daemon, tls, path, token)
        .await
        .map_err(|error| error.to_string())
}

/// The pin the daemon's key is held against.
#[derive(Debug, Clone)]
pub(crate) enum PinFound {
    /// `<system config dir>/daemon-identity.pub`, for this origin.
    Provisioned { key: PublicKey, file: PathBuf },
    /// This user's own pin.
    User { key: PublicKey, file: PathBuf },
    /// No pin for this origin yet; `file` is where it would be.
    None { file: PathBuf },
    /// A pin file exists but cannot be used.
    Unusable(String),
}

/// Looks up the pin the clients would check the daemon's key against, without creating one.
pub(crate) fn find_pin<E: Env>(inputs: &Inputs<'_, E>, origin: &Origin) -> PinFound {
    let provisioned = provisioned_daemon_key_file(inputs.env);
    let pins_dir = inputs
        .paths
        .as_ref()
        .map(|p| p.pins_dir())
        .unwrap_or_default();
    let store = PinStore::new(pins_dir, Some(provisioned.clone()));
    match store.provisioned() {
        Ok(Some(pin)) if pin.origin == *origin => {
            return PinFound::Provisioned {
                key: pin.key,
                file: provisioned,
            };
        }
        Ok(_) => {}
        Err(err) => return PinFound::Unusable(err.to_string()),
    }
    let file = store.pin_file(origin);
    match store.pinned(origin) {
        Ok(Some(pin)) => PinFound::User { key: pin.key, file },
        Ok(None) => PinFound::None { file },
        Err(err) => PinFound::Unusable(err.to_string()),
    }
}

/// Runs every live check against `daemon`.
pub(crate) fn run<E: Env>(
    inputs: &Inputs<'_, E>,
    daemon: &DaemonAddress,
) -> anyhow::Result<Report> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let report = runtime.block_on(checks(inputs, daemon));
    runtime.shutdown_background();
    Ok(report)
}

async fn checks<E: Env>(inputs: &Inputs<'_, E>, daemon: &DaemonAddress) -> Report {
    let mut checks = Vec::new();
    let tls = match tls_config(inputs.env, daemon) {
        Ok(tls) => tls,
        Err(check) => {
            checks.push(check);
            return Report {
                mode: Mode::Live,
                checks,
            };
        }
    };
    let health = fetch(daemon, tls.as_ref(), "/healthz", None).await;
    let health_check = judge_health(daemon, &health);
    let reachable = health_check.status != Status::Fail;
    checks.push(health_check);
    if !reachable {
        for id in [
            "live.agents_trust",
            "live.daemon_key",
            "live.route",
            "live.worker",
            "live.worker_reachable",
            "live.machine_identity",
        ] {
            checks.push(Check::skip(id, "not checked: the daemon does not answer"));
        }
        return Report {
            mode: Mode::Live,
            checks,
        };
    }

    checks.push(agents_trust(inputs.env, daemon).await);

    let probed = relay_proxy::control::client::probe_daemon_key(daemon, tls.as_ref(), LIMIT)
        .await
        .map_err(|e| relay_proxy::error_chain(&e));
    let pin = find_pin(inputs, daemon.origin());
    let key_check = judge_key(daemon, &probed, &pin);
    // The route token goes only where relay-mcp would send it: to a daemon that proved the
    // pinned key, or proved a key when there is no pin yet (the first contact, which pins
    // it). Whoever answers at the address without that proof may be the impostor the user
    // runs the doctor to find.
    let proven =
        key_check.status == Status::Ok || (probed.is_ok() && matches!(pin, PinFound::None { .. }));
    checks.push(key_check);
    if !proven {
        let why = "not checked: the daemon did not prove the key this user trusts, and the route token is sent only to that daemon";
        for id in [
            "live.route",
            "live.worker",
            "live.worker_reachable",
            "live.machine_identity",
        ] {
            checks.push(Check::skip(id, why));
        }
        return Report {
            mode: Mode::Live,
            checks,
        };
    }

    let token = resolve_token(inputs);
    let Some((token, _)) = &token.token else {
        checks.push(
            Check::fail(
                "live.route",
                "no usable route token on this machine, so no route to ask about",
            )
            .next(
                token
                    .check
                    .next_step
                    .clone()
                    .unwrap_or_else(|| "run relay-doctor token ensure".to_owned()),
            ),
        );
        checks.push(Check::skip("live.worker", "not checked: no route"));
        checks.push(Check::skip(
            "live.worker_reachable",
            "not checked: no route",
        ));
        checks.push(Check::skip(
            "live.machine_identity",
            "not checked: no route",
        ));
        return Report {
            mode: Mode::Live,
            checks,
        };
    };
    let route_answer = get(daemon, tls.as_ref(), "/_relay/v1/route", Some(token)).await;
    let (route_check, route) = judge_route(&route_answer);
    checks.push(route_check);

    let worker_id = route.as_ref().and_then(|r| r.worker_id);
    let worker = match worker_id {
        Some(id) => {
            let path = format!("/_relay/v1/workers/{id}/status");
            let answer = get(daemon, tls.as_ref(), &path, None).await;
            judge_worker(daemon, id, route.as_ref(), &answer)
        }
        None => Check::skip("live.worker", "not checked: the route names no worker"),
    };
    let worker_ready = worker.status == Status::Ok;
    let worker_checked = worker.status != Status::Skip;
    checks.push(worker);
    let advertised = inputs
        .env
        .non_empty(names::RELAY_WORKER_ADVERTISE_ADDRESS)
        .map(|v| v.to_string_lossy().into_owned());
    checks.push(judge_reachable(
        daemon,
        route.as_ref(),
        advertised.as_deref(),
        worker_checked,
        worker_ready,
    ));
    checks.push(judge_identity(route.as_ref()));
    Report {
        mode: Mode::Live,
        checks,
    }
}

/// TLS toward an https daemon: the platform roots plus `RELAY_EXTRA_CA_FILE`, as every client.
fn tls_config(
    env: &impl Env,
    daemon: &DaemonAddress,
) -> Result<Option<Arc<rustls::ClientConfig>>, Check> {
    if !daemon.is_tls() {
        return Ok(None);
    }
    let extra = env.non_empty(names::RELAY_EXTRA_CA_FILE).map(PathBuf::from);
    match relay_proxy::tls::client_config(extra.as_deref()) {
        Ok(mut config) => {
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(Some(Arc::new(config)))
        }
        Err(err) => Err(Check::fail(
            "live.healthz",
            format!("cannot set up TLS toward {}: {}", daemon.origin(), relay_proxy::error_chain(&err)),
        )
        .next("point RELAY_EXTRA_CA_FILE at a readable PEM file with the CA that issued the daemon's certificate")),
    }
}

pub(crate) fn judge_health(daemon: &DaemonAddress, answer: &Result<Answer, NoAnswer>) -> Check {
    const ID: &str = "live.healthz";
    let start = format!(
        "start relayd, or check that {} is the daemon's address and that the network lets you reach it",
        daemon.origin()
    );
    let answer = match answer {
        Ok(answer) => answer,
        // A first answer that is not a TLS record: the daemon there speaks plain HTTP.
        Err(NoAnswer::Tls(err)) if err.contains("InvalidContentType") => {
            return Check::fail(ID, format!("{} does not answer over TLS: {err}", daemon.origin()))
                .next(format!(
                    "the daemon at {} serves plain http: start relayd with --tls-cert and --tls-key to serve https there, or, for a daemon on this machine, use http://127.0.0.1:{}",
                    daemon.origin(),
                    daemon.port()
                ))
                .with(json!({ "origin": daemon.origin().to_string() }));
        }
        Err(NoAnswer::Tls(err)) => {
            return Check::fail(ID, format!("the daemon's TLS is refused: {err}"))
                .next(format!(
                    "something answers at {}, but not with a certificate this machine trusts: relayd's --tls-cert must be current, be a server certificate (not a CA's own), name {}, and come from a CA in the platform's roots or in RELAY_EXTRA_CA_FILE",
                    daemon.origin(),
                    daemon.host()
                ))
                .with(json!({ "origin": daemon.origin().to_string() }));
        }
        Err(NoAnswer::Other(err)) => {
            return Check::fail(ID, format!("the daemon does not answer: {err}"))
                .next(start)
                .with(json!({ "origin": daemon.origin().to_string() }));
        }
    };
    let health = (answer.status == StatusCode::OK)
        .then(|| serde_json::from_slice::<Health>(&answer.body).ok())
        .flatten()
        .filter(|h| h.service == "relayd");
    let Some(health) = health else {
        return Check::fail(
            ID,
            format!(
                "{} answers /healthz with status {}, not as relayd does",
                daemon.origin(),
                answer.status.as_u16()
            ),
        )
        .next(start)
        .with(
            json!({ "origin": daemon.origin().to_string(), "http_status": answer.status.as_u16() }),
        );
    };
    let details = json!({
        "origin": daemon.origin().to_string(),
        "version": health.version,
        "instance_id": health.instance_id.to_string(),
        "deployment_mode": match health.deployment_mode { relay_proto::DeploymentMode::Managed => "managed", relay_proto::DeploymentMode::PassThrough => "pass_through" },
        "status": match health.status { HealthStatus::Ok => "ok", HealthStatus::Degraded => "degraded" },
    });
    match health.status {
        HealthStatus::Ok => Check::ok(ID, format!("relayd {} answers at {}", health.version, daemon.origin())).with(details),
        HealthStatus::Degraded => Check::warn(ID, format!("relayd {} answers at {} but is degraded: it cannot write its state", health.version, daemon.origin()))
            .next("look for state_write_failed in the daemon log (a full disk, a read-only state directory)")
            .with(details),
    }
}

/// The agents that verify the daemon with the same roots, and the variable that adds to them
/// (Node's bundled roots plus `NODE_EXTRA_CA_CERTS`) or replaces them (`SSL_CERT_FILE`, which
/// Codex reads instead of the system's roots).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Agents {
    Node,
    Codex,
}

impl Agents {
    const ALL: [Agents; 2] = [Agents::Node, Agents::Codex];

    fn names(self) -> &'static str {
        match self {
            Agents::Node => "Claude Code and pi",
            Agents::Codex => "Codex",
        }
    }

    fn variable(self) -> &'static str {
        match self {
            Agents::Node => "NODE_EXTRA_CA_CERTS",
            Agents::Codex => names::SSL_CERT_FILE,
        }
    }

    /// The roots these agents verify a server with, given the variable's file.
    fn roots(self, file: Option<&Path>) -> Result<rustls::RootCertStore, String> {
        let extra = file
            .map(relay_proxy::tls::read_certificates)
            .transpose()
            .map_err(|e| relay_proxy::error_chain(&e))?
            .unwrap_or_default();
        let mut roots = match (self, file) {
            (Agents::Node, _) => {
                let mut roots = rustls::RootCertStore::empty();
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
                roots
            }
            (Agents::Codex, Some(_)) => rustls::RootCertStore::empty(),
            (Agents::Codex, None) => {
                relay_proxy::tls::root_store(None).map_err(|e| relay_proxy::error_chain(&e))?
            }
        };
        for cert in extra {
            roots.add(cert).map_err(|e| format!("{e}"))?;
        }
        Ok(roots)
    }
}

/// What one kind of agent would make of the daemon's certificate.
#[derive(Debug)]
pub(crate) enum Trust {
    Trusted,
    /// The handshake refused it, for this reason.
    Refused(String),
    /// Not known: the file is unusable, or the daemon stopped answering.
    Unknown(String),
}

/// For an https daemon, whether each agent would trust its certificate with the roots it
/// uses in this environment: a handshake with those roots, as the agent makes it.
async fn agents_trust(env: &impl Env, daemon: &DaemonAddress) -> Check {
    if !daemon.is_tls() {
        return judge_agents_trust(daemon, &[]);
    }
    let mut seen = Vec::new();
    for agents in Agents::ALL {
        let file = env.non_empty(agents.variable()).map(PathBuf::from);
        let trust = match agents.roots(file.as_deref()).and_then(|roots| {
            relay_proxy::tls::client_config_trusting(roots)
                .map_err(|e| relay_proxy::error_chain(&e))
        }) {
            Err(why) => Trust::Unknown(why),
            Ok(mut config) => {
                config.alpn_protocols = vec![b"http/1.1".to_vec()];
                match fetch(daemon, Some(&Arc::new(config)), "/healthz", None).await {
                    Ok(_) => Trust::Trusted,
                    Err(NoAnswer::Tls(why)) => Trust::Refused(why),
                    Err(NoAnswer::Other(why)) => Trust::Unknown(why),
                }
            }
        };
        seen.push((agents, file, trust));
    }
    judge_agents_trust(daemon, &seen)
}

/// The check of [`agents_trust`]: fail when an agent would refuse the daemon's certificate,
/// warn when it could not be told.
pub(crate) fn judge_agents_trust(
    daemon: &DaemonAddress,
    seen: &[(Agents, Option<PathBuf>, Trust)],
) -> Check {
    const ID: &str = "live.agents_trust";
    if !daemon.is_tls() {
        return Check::skip(
            ID,
            "not checked: the daemon serves plain http on loopback, with no certificate to trust",
        );
    }
    let roots = |agents: Agents, file: &Option<PathBuf>| match (agents, file) {
        (Agents::Node, None) => "Node's bundled roots".to_owned(),
        (Agents::Node, Some(file)) => format!(
            "Node's bundled roots plus NODE_EXTRA_CA_CERTS={}",
            file.display()
        ),
        (Agents::Codex, None) => "the system's roots".to_owned(),
        (Agents::Codex, Some(file)) => format!("SSL_CERT_FILE={}", file.display()),
    };
    let details = json!({
        "agents": seen.iter().map(|(agents, file, trust)| json!({
            "agents": agents.names(),
            "variable": agents.variable(),
            "file": file.as_deref().map(display),
            "trusted": matches!(trust, Trust::Trusted),
            "error": match trust {
                Trust::Trusted => None,
                Trust::Refused(why) | Trust::Unknown(why) => Some(why.as_str()),
            },
        })).collect::<Vec<_>>(),
    });
    if let Some((agents, file, Trust::Refused(why))) = seen
        .iter()
        .find(|(_, _, trust)| matches!(trust, Trust::Refused(_)))
    {
        let next = match agents {
            Agents::Node => {
                "set NODE_EXTRA_CA_CERTS, where Claude Code and pi run, to a PEM file holding the CA that issued the daemon's certificate (RELAY_EXTRA_CA_FILE's, for Relay's own clients)"
            }
            Agents::Codex => {
                "set SSL_CERT_FILE, where Codex runs, to a PEM bundle of the system's roots and the CA that issued the daemon's certificate: Codex reads that file instead of the system's roots"
            }
        };
        return Check::fail(
            ID,
            format!(
                "{} would refuse the daemon's certificate with {}: {why}",
                agents.names(),
                roots(*agents, file)
            ),
        )
        .next(next)
        .with(details);
    }
    if let Some((agents, _, Trust::Unknown(why))) = seen
        .iter()
        .find(|(_, _, trust)| matches!(trust, Trust::Unknown(_)))
    {
        return Check::warn(
            ID,
            format!(
                "whether {} trust the daemon's certificate is not known: {why}",
                agents.names()
            ),
        )
        .next(format!(
            "make {} name a readable PEM file, and run the doctor again",
            agents.variable()
        ))
        .with(details);
    }
    Check::ok(
        ID,
        format!(
            "the agents trust the daemon's certificate: {}",
            seen.iter()
                .map(|(agents, file, _)| format!(
                    "{} with {}",
                    agents.names(),
                    roots(*agents, file)
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    )
    .with(details)
}

pub(crate) fn judge_key(
    daemon: &DaemonAddress,
    probed: &Result<PublicKey, String>,
    pin: &PinFound,
) -> Check {
    const ID: &str = "live.daemon_key";
    let origin = daemon.origin().to_string();
    let key = match probed {
        Ok(key) => key,
        Err(err) => {
            return Check::fail(ID, format!("the control handshake did not prove the daemon's key: {err}"))
                .next("check that the address is the daemon's own origin (not a proxy) and that relayd serves control sessions there")
                .with(json!({ "origin": origin, "pin": null, "pin_file": null, "matches": null }));
        }
    };
    match pin {
        PinFound::Provisioned { key: pinned, file } | PinFound::User { key: pinned, file } => {
            let kind = if matches!(pin, PinFound::Provisioned { .. }) { "provisioned" } else { "user" };
            let matches = pinned == key;
            let details = json!({ "origin": origin, "pin": kind, "pin_file": file.display().to_string(), "matches": matches });
            if matches {
                Check::ok(ID, format!("the daemon proved the key pinned for {origin} ({kind} pin)")).with(details)
            } else if kind == "provisioned" {
                Check::fail(ID, format!("the daemon's signing key differs from the provisioned pin {} for {origin}: every client refuses it", file.display()))
                    .next(format!("ask the administrator whether the daemon's identity changed; if so, update {} with what relayd identity show prints", file.display()))
                    .with(details)
            } else {
                Check::fail(ID, format!("the daemon's signing key differs from this user's pin for {origin}: relay-mcp and relay-worker refuse it"))
                    .next(format!("the daemon key changed: if this is expected (the daemon's state was reset or moved), remove the pin file {}; otherwise find out who answers at {origin}", file.display()))
                    .with(details)
            }
        }
        PinFound::None { file } => Check::fail(ID, format!("no pin for {origin} yet, so nothing proves this is the daemon this user trusts"))
            .next(if origin.contains("://localhost:") {
                // Pins are kept per origin as it is spelled, and the bundle spells it 127.0.0.1.
                "pins are kept per address as the harness spells it, and Relay's bundle writes 127.0.0.1, not localhost: run the doctor with the --daemon-address the harness uses; if that finds no pin either, start a harness session so relay-mcp registers and pins the daemon key"
            } else {
                "start a harness session so relay-mcp registers and pins the daemon key (or have the administrator provision daemon-identity.pub)"
            })
            .with(json!({ "origin": origin, "pin": null, "pin_file": file.display().to_string(), "matches": null })),
        PinFound::Unusable(err) => Check::fail(ID, format!("the pin cannot be read: {err}"))
            .next("remove the corrupt pin file named here; the next session pins the daemon again")
            .with(json!({ "origin": origin, "pin": null, "pin_file": null, "matches": null })),
    }
}

/// The route check, and the route answer for the checks after it.
pub(crate) fn judge_route(answer: &Result<Answer, String>) -> (Check, Option<RouteStatus>) {
    const ID: &str = "live.route";
    let answer = match answer {
        Ok(answer) => answer,
        Err(err) => {
            return (
                Check::fail(ID, format!("asking for the route failed: {err}"))
                    .next("run the doctor again; if it persists, look at the daemon log"),
                None,
            );
        }
    };
    if answer.status == StatusCode::UNAUTHORIZED {
        return (
            Check::fail(ID, "the daemon refuses this user's route token (401): it is malformed, or the daemon requires a bound token (strict mode, or a non-loopback daemon without anonymous pass-through)")
                .next("start a harness session so relay-mcp registers this token, and check that RELAY_CLIENT_TOKEN and the token file agree")
                .with(json!({ "http_status": 401 })),
            None,
        );
    }
    let route = (answer.status == StatusCode::OK)
        .then(|| serde_json::from_slice::<RouteStatus>(&answer.body).ok())
        .flatten();
    let Some(route) = route else {
        return (
            Check::fail(
                ID,
                format!(
                    "the daemon answers /_relay/v1/route with status {} and no route status",
                    answer.status.as_u16()
                ),
            )
            .next("check that the daemon is a relayd of this version")
            .with(json!({ "http_status": answer.status.as_u16() })),
            None,
        );
    };
    let state = serde_json::to_value(route.state).unwrap_or_default();
    let state_text = state.as_str().unwrap_or("unknown").to_owned();
    let details = json!({
        "route_mode": route.route_mode.as_str(),
        "reason": route.reason.map(PassThroughReason::as_str),
        "worker_id": route.worker_id.map(|id| id.to_string()),
        "state": state,
        "control_available": route.control_available,
    });
    let check = match (route.route_mode, route.reason) {
        (RouteMode::Worker, _) => Check::ok(
            ID,
            format!(
                "this user's traffic goes to worker {} (route {state_text})",
                route
                    .worker_id
                    .map(|id| id.to_string())
                    .unwrap_or_else(|| "?".to_owned())
            ),
        ),
        (RouteMode::PassThrough, reason) => {
            let reason_text = reason.map_or("no reason given", PassThroughReason::as_str);
            Check::fail(
                ID,
                format!("the route passes through because {reason_text} (route {state_text})"),
            )
            .next(pass_through_next(reason, &state_text))
        }
    };
    (check.with(details), Some(route))
}

fn pass_through_next(reason: Option<PassThroughReason>, state: &str) -> String {
    match reason {
        Some(PassThroughReason::UnboundCredential) => "this token is bound to no route: start a harness session so relay-mcp registers with it; if one is running, the daemon refused its registration (the route was revoked or blocked by an administrator, or the daemon's route table is full): relay-mcp's log says which, and an administrator can list the bindings with relayd bindings list".to_owned(),
        Some(PassThroughReason::NoLiveSession) => "no relay-mcp session holds this route: start a harness session so relay-mcp registers".to_owned(),
        Some(PassThroughReason::WorkerUnavailable) => match state {
            "activating" | "empty" => "no worker is ready for this route: the worker is gone or still starting, and relay-mcp has been asked to start one; run the doctor again in a few seconds, and if it stays so, restart the harness session and look for worker_launch_failed in the relay-mcp log and worker_activation_failed in the daemon log".to_owned(),
            "recovering" => "the worker lost its control session or stopped answering its readiness probe: it has the reconnect grace to come back, then relay-mcp starts a new one; if it stays so, look for worker_recovery_failed in the daemon log".to_owned(),
            "draining" => "the route's worker drains because its last session ended: a session that starts now gets a new worker once the old one has drained".to_owned(),
            _ => "the last worker activation failed and the daemon retries with backoff: look for worker_activation_failed in the daemon log (failure_reason says why)".to_owned(),
        },
        Some(PassThroughReason::ConfiguredPassThrough) => "the daemon runs with --pass-through: restart it without that flag to use workers".to_owned(),
        Some(PassThroughReason::WorkerConnectFailed) => "the daemon could not connect to the worker: look for worker_request_failed in the daemon log and at the worker's log".to_owned(),
        Some(PassThroughReason::MissingCredential) | None => "send the route token (the doctor did; check the daemon version)".to_owned(),
    }
}

pub(crate) fn judge_worker(
    daemon: &DaemonAddress,
    id: uuid::Uuid,
    route: Option<&RouteStatus>,
    answer: &Result<Answer, String>,
) -> Check {
    const ID: &str = "live.worker";
    let restart = "relay-mcp starts a new worker by itself; if none becomes ready, restart the harness session and look for worker_activation_failed in the daemon log";
    let answer = match answer {
        Ok(answer) => answer,
        Err(err) => {
            return Check::fail(ID, format!("asking for worker {id} failed: {err}"))
                .next("run the doctor again");
        }
    };
    let details = |status: Option<&WorkerStatus>| {
        json!({
            "worker_id": id.to_string(),
            "http_status": answer.status.as_u16(),
            "state": status.map(|s| s.state.as_str()),
            "control_available": status.map(|s| s.control_available),
        })
    };
    if answer.status == StatusCode::NOT_FOUND && daemon.is_loopback() {
        return Check::fail(
            ID,
            format!("worker {id} is gone: the daemon no longer knows it"),
        )
        .next(restart)
        .with(details(None));
    }
    if !daemon.is_loopback()
        && matches!(answer.status, StatusCode::NOT_FOUND | StatusCode::FORBIDDEN)
    {
        // A non-loopback daemon answers worker status to loopback peers only, unless
        // `status_public`; the route answer still says the state and control.
        return match route {
            Some(r) if r.route_mode == RouteMode::Worker && r.control_available == Some(true) => Check::ok(
                ID,
                format!("worker {id} is ready with control available (from the route answer; this daemon shows worker status only to local callers)"),
            )
            .with(details(None)),
            _ => Check::fail(ID, format!("worker {id} is not shown ready (this daemon shows worker status only to local callers)"))
                .next(restart)
                .with(details(None)),
        };
    }
    let status = (answer.status == StatusCode::OK)
        .then(|| serde_json::from_slice::<WorkerStatus>(&answer.body).ok())
        .flatten();
    let Some(status) = status else {
        return Check::fail(
            ID,
            format!(
                "the daemon answers worker {id}'s status with {} and no worker status",
                answer.status.as_u16()
            ),
        )
        .next("check that the daemon is a relayd of this version")
        .with(details(None));
    };
    match (status.state, status.control_available) {
        (WorkerState::Ready, true) => Check::ok(ID, format!("worker {id} is ready with control available ({} references, {} in flight)", status.reference_count, status.in_flight)),
        (WorkerState::Ready, false) => Check::fail(ID, format!("worker {id} is ready but has no control session"))
            .next("the worker reconnects by itself within the reconnect grace; if it does not, restart the harness session"),
        (WorkerState::Recovering, _) => Check::fail(ID, format!("worker {id} is recovering: its control session dropped or its readiness probe failed"))
            .next(restart),
        (WorkerState::Draining, _) => Check::fail(ID, format!("worker {id} drains: the last session of this route ended"))
            .next("start a harness session so relay-mcp registers; a new worker starts once this one has drained"),
    }
    .with(details(Some(&status)))
}

/// Whether the daemon can reach this user's worker. For a remote daemon a route whose last
/// activation failed is the very case to catch: a worker the daemon cannot connect to
/// (firewall, NAT, VPN) or whose endpoint it refuses never becomes ready, so the check
/// fails there instead of being skipped for want of a worker. `advertised` is
/// `RELAY_WORKER_ADVERTISE_ADDRESS` in this environment.
pub(crate) fn judge_reachable(
    daemon: &DaemonAddress,
    route: Option<&RouteStatus>,
    advertised: Option<&str>,
    worker_checked: bool,
    worker_ready: bool,
) -> Check {
    const ID: &str = "live.worker_reachable";
    const INBOUND: &str = "let inbound connections from the daemon reach RELAY_WORKER_ADVERTISE_ADDRESS:RELAY_WORKER_PORT on this machine (firewall, NAT, VPN); otherwise activation fails with readiness_probe_failed";
    if daemon.is_loopback() {
        return Check::skip(
            ID,
            "a local daemon: the worker listens on this machine's loopback",
        );
    }
    let details = json!({ "advertise_address": advertised });
    if worker_checked {
        return if worker_ready {
            Check::ok(
                ID,
                "the daemon reaches the worker's endpoint: a worker counts as ready only while the daemon's readiness probe of its endpoint succeeds",
            )
        } else {
            Check::fail(ID, "the daemon does not report the worker ready, so it cannot be shown to reach the worker's endpoint")
                .next(INBOUND)
        }
        .with(details);
    }
    // `pass_through` with `worker_unavailable`: the last activation failed, and the daemon
    // retries with backoff.
    let activation_failed = route.is_some_and(|r| {
        r.route_mode == RouteMode::PassThrough
            && r.reason == Some(PassThroughReason::WorkerUnavailable)
            && r.state == relay_proto::RouteState::PassThrough
    });
    if !activation_failed {
        return Check::skip(ID, "not checked: there is no worker to reach");
    }
    match advertised {
        None => Check::fail(ID, "the last worker activation failed, and RELAY_WORKER_ADVERTISE_ADDRESS is not set in this environment: if relay-mcp runs without it too, a remote daemon refuses every worker, as none advertises this machine's address")
            .next("set RELAY_WORKER_ADVERTISE_ADDRESS (and RELAY_WORKER_PORT) in the environment relay-mcp runs in, to this machine's address as the daemon sees it, and restart the harness session; if it is set there, the worker's log (relay/logs/worker-*.log under XDG_CONFIG_HOME, or ~/.config) says why the activation failed"),
        Some(address) => Check::fail(ID, format!("the last worker activation failed; for a remote daemon the likeliest cause is that it cannot connect to the worker at {address}, or refuses that address: the worker's log (relay/logs/worker-*.log under XDG_CONFIG_HOME, or ~/.config) says which, or names another cause (its plugin configuration, a port another user's worker holds)"))
            .next(format!("{INBOUND}; behind NAT, the address must be the one the daemon sees, or lie in the daemon's worker_networks")),
    }
    .with(details)
}

/// Whether this machine identity is the only one of its kind: the route answer says when
/// its sessions are connected from more than one address at once.
pub(crate) fn judge_identity(route: Option<&RouteStatus>) -> Check {
    const ID: &str = "live.machine_identity";
    let Some(route) = route.filter(|r| r.state != relay_proto::RouteState::None) else {
        return Check::skip(ID, "not checked: this token is bound to no route");
    };
    let details = json!({ "conflict": route.machine_identity_conflict });
    if route.machine_identity_conflict {
        Check::fail(ID, "this machine identity is connected to the daemon from more than one address at once: most likely another machine uses the same key (a cloned disk image, or a home directory on a network share), which the daemon cannot tell apart from this one, so the two share one route, its worker and its records")
            .next("the daemon's machine_identity_conflict log event names both addresses: if the other is not this machine's (a second interface or a VPN switched mid-session can explain it), then on that machine stop the harness sessions, remove relay/daemon/machine-identity.pk8 and relay/.client-token under its XDG_CONFIG_HOME (or ~/.config), and run relay-doctor token ensure there; it gets an identity and a token of its own at its next session")
    } else {
        Check::ok(ID, "the daemon reports no other address using this machine identity now")
    }
    .with(details)
}

#[cfg(test)]
mod tests;
