//! The MCP's control session (SPEC §5, §6): register this machine-user's route, follow the
//! broker's directives, launch and watch the worker, resume after drops, and release the
//! reference when the harness session ends.

use std::time::{Duration, Instant};

use relay_identity::RouteToken;
use relay_logging::{Lifecycle, McpPassThroughReason, ProcessExit};
use relay_proto::{
    Bytes32, DeploymentMode, Directive, Grant, Id, LaunchOutcome, McpActivationFailed, Message,
    RefusedCode, RegisterMcpFields, Registered, ResumeMcpFields, RouteMode, Text, Timers,
    WorkerExited, WorkerHint,
};
use relay_proxy::control::client::{
    Backoff, ClientIdentity, ConnectError, Registration, Session, connect, silence_limit,
};
use relay_proxy::daemon_http;
use tokio::process::Child;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;

use crate::launch::Launcher;

#[cfg(test)]
mod tests;

/// How long the release sequence may take before the MCP exits anyway (§5.5).
const RELEASE_BUDGET: Duration = Duration::from_millis(1800);

/// What a child still running when its successor is launched gets between SIGTERM and
/// SIGKILL: the worker's own drain on a signal (5 s), then the closing of its records and
/// its sinks (up to 4 s), and a margin.
const RETIRE_GRACE: Duration = Duration::from_secs(12);

/// How long the daemon may take to say whether it runs `--pass-through`.
const HEALTH_QUERY_LIMIT: Duration = Duration::from_secs(5);

/// Everything the control loop needs.
pub(crate) struct Control {
    pub(crate) identity: ClientIdentity,
    pub(crate) credential: RouteToken,
    pub(crate) hint: Option<WorkerHint>,
    pub(crate) launcher: Launcher,
    /// How far the route is settled; `initialize` waits while it is `Pending`.
    pub(crate) settled: watch::Sender<Settled>,
    /// Questions to the daemon asked beside the control loop; dropping the set with the
    /// loop aborts any still unanswered.
    pub(crate) queries: std::sync::Mutex<JoinSet<()>>,
    /// Previous children asked to stop when a new launch replaced them, each reaped (or
    /// killed after [`RETIRE_GRACE`]) beside the control loop.
    pub(crate) retiring: std::sync::Mutex<JoinSet<()>>,
}

/// How long `initialize` may wait for the route to settle (§6).
pub(crate) const SETTLE_WITHIN: Duration = Duration::from_secs(5);

/// How far this session's route is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// No answer yet: `initialize` waits (up to its limit).
    Pending,
    /// The daemon is down or silent; the decision that follows when it is back is still
    /// logged.
    DaemonDown,
    /// The daemon decided the route (`RouteReady` or `UsePassThrough`), or the session gave
    /// up on it.
    Decided,
}

/// Why the daemon passes a route through, from its `/healthz` answer (`None` when it could
/// not be asked): `UsePassThrough` says the same for a daemon started with `--pass-through`
/// and for a route whose worker failed to start, and the daemon's mode tells them apart.
/// Only that field is read, so a newer daemon's other fields change nothing.
fn pass_through_reason(health: Option<&daemon_http::Answer>) -> McpPassThroughReason {
    #[derive(serde::Deserialize)]
    struct Mode {
        deployment_mode: DeploymentMode,
    }
    let configured = health.is_some_and(|answer| {
        answer.status.is_success()
            && serde_json::from_slice::<Mode>(&answer.body)
                .is_ok_and(|health| health.deployment_mode == DeploymentMode::PassThrough)
    });
    if configured {
        McpPassThroughReason::ConfiguredPassThrough
    } else {
        McpPassThroughReason::ActivationFailed
    }
}

/// The worker this MCP launched.
struct Launched {
    activation_id: Id,
    child: Child,
    /// The route became ready while this child ran: its end is no failed launch.
    ready: bool,
}

/// How a connected session ended.
enum Ended {
    /// The transport dropped: resume within the grace.
    Dropped,
    /// The daemon is stopping. It keeps no MCP session across a restart, so the next
    /// attempt registers anew: a resume would only be refused, and would spend one of the
    /// handshakes that a site behind one address shares in each window.
    Stopping,
    /// The harness session ended and the reference was released.
    Released,
    /// The route is revoked or blocked (the code says which): stop for good.
    Revoked(RefusedCode),
}

impl Control {
    fn fingerprint(&self) -> String {
        self.identity.key.fingerprint().to_string()
    }

    fn daemon_address(&self) -> String {
        self.identity.daemon.origin().to_string()
    }

    /// The route is decided; whether this is the first decision.
    fn decide(&self) -> bool {
        self.settled.send_if_modified(|settled| {
            let first = *settled != Settled::Decided;
            *settled = Settled::Decided;
            first
        })
    }

    /// The daemon is down or silent, or still refuses the registration when `initialize`
    /// stops waiting: before the route is settled, that is why this session serves without
    /// a worker, and `initialize` need not wait any longer.
    fn daemon_down(&self) {
        let first = self.settled.send_if_modified(|settled| {
            let pending = *settled == Settled::Pending;
            if pending {
                *settled = Settled::DaemonDown;
            }
            pending
        });
        if first {
            self.pass_through(McpPassThroughReason::DaemonUnreachable, None);
        }
    }

    /// The daemon decided the route passes through; the first such decision is logged,
    /// also after an unreachable daemon settled the session. Its reason takes a question to
    /// the daemon, asked beside the control loop so that a slow answer holds up neither
    /// `initialize` nor the loop.
    fn use_pass_through(&self) {
        if !self.decide() {
            return;
        }
        let daemon = self.identity.daemon.clone();
        let tls = self.identity.tls.clone();
        let daemon_address = self.daemon_address();
        let fingerprint = self.fingerprint();
        let query = async move {
            let health = daemon_http::get(
                &daemon,
                tls.as_ref(),
                "/healthz",
                None,
                HEALTH_QUERY_LIMIT,
                concat!("relay-mcp/", env!("CARGO_PKG_VERSION")),
            )
            .await;
            Lifecycle::DaemonMcpPassThrough {
                daemon_address: &daemon_address,
                fingerprint: Some(&fingerprint),
                reason: pass_through_reason(health.ok().as_ref()),
                refused: None,
            }
            .emit();
        };
        if let Some(mut queries) = relay_logging::sync::lock(&self.queries, "daemon queries") {
            queries.spawn(query);
        }
    }

    /// Says the session goes on without a route, with the daemon's refusal if it refused.
    fn pass_through(&self, reason: McpPassThroughReason, refused: Option<RefusedCode>) {
        let fingerprint = self.fingerprint();
        Lifecycle::DaemonMcpPassThrough {
            daemon_address: &self.daemon_address(),
            fingerprint: Some(&fingerprint),
            reason,
            refused,
        }
        .emit();
    }

    /// Runs until `shutdown` fires (the harness session ended) or the route is refused for
    /// good; then releases the reference as §5.5 says.
    pub(crate) async fn run(self, mut shutdown: oneshot::Receiver<()>) {
        let started = Instant::now();
        let mut timers = Timers::default();
        let mut session: Option<(Id, Bytes32, Instant)> = None;
        let mut launched: Option<Launched> = None;
        let mut pending_exit: Option<WorkerExited> = None;
        let mut backoff = Backoff::new(
            Duration::from_millis(timers.reconnect_first_ms),
            Duration::from_millis(timers.reconnect_cap_ms),
        );
        let mut warned_unreachable = false;
        loop {
            let grace = Duration::from_millis(timers.reconnect_grace_ms);
            let registration = match session {
                Some((session_id, resume_token, dropped_at)) if dropped_at.elapsed() < grace => {
                    Registration::ResumeMcp(ResumeMcpFields {
                        session_id,
                        resume_token,
                    })
                }
                _ => Registration::Mcp(RegisterMcpFields {
                    credential: Bytes32(*self.credential.expose_bytes()),
                    worker_hint: self.hint.clone(),
                }),
            };
            let attempt = Duration::from_millis(timers.reconnect_attempt_timeout_ms);
            let result = tokio::select! {
                _ = &mut shutdown => {
                    // The daemon cannot be reached: cleanup is left to the broker and the
                    // worker's own grace (§5.5).
                    return;
                }
                result = connect(&self.identity, registration, attempt) => result,
            };
            let (mut transport, registered) = match result {
                Ok(ok) => ok,
                Err(error) => {
                    match error.refused_code() {
                        Some(RefusedCode::SessionUnknown) => {
                            // The daemon restarted or the grace ran out: register anew.
                            session = None;
                            continue;
                        }
                        // state_unavailable is not here: the daemon retries its write, so
                        // this retries its registration.
                        Some(
                            code @ (RefusedCode::CredentialBoundElsewhere
                            | RefusedCode::TokenLimit
                            | RefusedCode::CredentialMalformed),
                        ) => {
                            self.pass_through(McpPassThroughReason::CredentialRejected, Some(code));
                            return self.idle(launched, shutdown).await;
                        }
                        Some(code @ RefusedCode::RouteTableFull) => {
                            self.pass_through(McpPassThroughReason::RouteTableFull, Some(code));
                            return self.idle(launched, shutdown).await;
                        }
                        _ => {}
                    }
                    if let ConnectError::Pin(relay_identity::PinError::Mismatch {
                        origin,
                        pin_file,
                    }) = &error
                    {
                        Lifecycle::DaemonPinMismatch {
                            role: relay_proto::Role::Mcp,
                            origin: &origin.to_string(),
                            pin_file,
                        }
                        .emit();
                    }
                    if error.is_fatal() {
                        tracing::error!(event = "control_registration_failed", error = %error, "control registration failed for good");
                        self.pass_through(
                            McpPassThroughReason::CredentialRejected,
                            error.refused_code(),
                        );
                        return self.idle(launched, shutdown).await;
                    }
                    if !warned_unreachable {
                        warned_unreachable = true;
                        tracing::warn!(event = "control_registration_retrying", error = %error, "could not register with the daemon; retrying");
                    }
                    // The harness need not wait for a daemon that is down or silent:
                    // `initialize` is answered now, and the route settles again when a
                    // retry gets through.
                    if error.is_unreachable() {
                        self.daemon_down();
                    }
                    // A 429 says when this address may open a handshake again.
                    let asked = error.retry_after(&self.identity.daemon, grace);
                    let delay = backoff.next_delay().max(asked.unwrap_or_default());
                    let settle_by = tokio::time::Instant::from_std(started + SETTLE_WITHIN);
                    let pending = *self.settled.borrow() == Settled::Pending;
                    tokio::select! {
                        _ = &mut shutdown => return,
                        () = tokio::time::sleep(delay) => {}
                        // Still not registered when `initialize` stops waiting (a daemon
                        // that keeps refusing, say state_unavailable): the session serves
                        // without a worker, and says so then.
                        () = tokio::time::sleep_until(settle_by), if pending => self.daemon_down(),
                        exit = self.wait_child(&mut launched) => pending_exit = Some(exit),
                    }
                    continue;
                }
            };
            let Registered::Mcp {
                session_id,
                resume_token,
                directive,
                timers: effective,
            } = registered
            else {
                tracing::error!(
                    event = "control_role_mismatch",
                    "the daemon answered an MCP registration as a worker's"
                );
                return self.idle(launched, shutdown).await;
            };
            timers = effective;
            backoff = Backoff::new(
                Duration::from_millis(timers.reconnect_first_ms),
                Duration::from_millis(timers.reconnect_cap_ms),
            );
            warned_unreachable = false;
            session = Some((session_id, resume_token, Instant::now()));
            if let Some(exit) = pending_exit.take() {
                let _ = transport.send(&Message::WorkerExited(exit)).await;
            }
            self.directive(&mut transport, directive, &mut launched, started)
                .await;
            let silence = silence_limit(&self.identity.daemon, &timers);
            let ended = self
                .connected(
                    &mut transport,
                    &mut launched,
                    &mut shutdown,
                    started,
                    silence,
                )
                .await;
            match ended {
                Ended::Released => return,
                Ended::Revoked(code) => {
                    self.pass_through(McpPassThroughReason::CredentialRejected, Some(code));
                    return self.idle(launched, shutdown).await;
                }
                Ended::Dropped => {
                    if let Some((id, token, _)) = session {
                        session = Some((id, token, Instant::now()));
                    }
                }
                Ended::Stopping => session = None,
            }
        }
    }

    /// The registered session: directives in, child exits out, until it drops or the
    /// harness session ends.
    async fn connected(
        &self,
        transport: &mut Session,
        launched: &mut Option<Launched>,
        shutdown: &mut oneshot::Receiver<()>,
        started: Instant,
        silence: Option<Duration>,
    ) -> Ended {
        loop {
            tokio::select! {
                _ = &mut *shutdown => {
                    self.release(transport, launched).await;
                    return Ended::Released;
                }
                exit = self.wait_child(launched) => {
                    if transport.send(&Message::WorkerExited(exit)).await.is_err() {
                        return Ended::Dropped;
                    }
                }
                frame = transport.recv_alive(silence) => match frame {
                    Ok(None) => {}
                    Ok(Some(frame)) => match frame.message {
                        Message::DaemonStopping { .. } => return Ended::Stopping,
                        Message::Refused(refused) => {
                            tracing::warn!(event = "control_session_ended", reason = refused.text.as_str(), "the daemon ended the session");
                            return match refused.reason() {
                                Some(code @ (RefusedCode::Revoked | RefusedCode::Blocked)) => {
                                    Ended::Revoked(code)
                                }
                                _ => Ended::Dropped,
                            };
                        }
                        message => match message.as_directive() {
                            Some(directive) => self.directive(transport, directive, launched, started).await,
                            None => tracing::debug!(kind = ?message.kind(), "ignored control message"),
                        },
                    },
                    Err(_) => return Ended::Dropped,
                },
            }
        }
    }

    async fn directive(
        &self,
        transport: &mut Session,
        directive: Directive,
        launched: &mut Option<Launched>,
        started: Instant,
    ) {
        match directive {
            Directive::LaunchWorker(grant) => {
                for report in self.launch(grant, launched).await {
                    let _ = transport.send(&report).await;
                }
            }
            Directive::WaitForWorker { retry_after_ms } => {
                tracing::debug!(retry_after_ms, "waiting for the route's worker");
            }
            Directive::ReuseWorker => {}
            Directive::RouteReady => {
                if let Some(launched) = launched.as_mut() {
                    launched.ready = true;
                }
                let fingerprint = self.fingerprint();
                Lifecycle::DaemonMcpReady {
                    daemon_address: &self.daemon_address(),
                    fingerprint: &fingerprint,
                    route_mode: RouteMode::Worker,
                    elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                }
                .emit();
                self.decide();
            }
            Directive::UsePassThrough => self.use_pass_through(),
        }
    }

    /// Starts the worker for `grant`; returns what the daemon must be told, in order.
    async fn launch(&self, grant: Grant, launched: &mut Option<Launched>) -> Vec<Message> {
        let mut reports = Vec::new();
        // A fresh grant while a child is still held: either the daemon learnt first that
        // the child died (its endpoint refused, §5.4) and this MCP has not reaped it yet,
        // or a previous launch lost its grant and its worker can never register. Either
        // way the child's end is logged and reported like any other exit (§5.5): a child
        // is never reaped without a trace.
        if let Some(old) = launched.take()
            && let Some(exit) = old.retire(&self.fingerprint(), &self.retiring)
        {
            reports.push(Message::WorkerExited(exit));
        }
        match self.launcher.launch(&grant).await {
            Ok(child) => {
                *launched = Some(Launched {
                    activation_id: grant.activation_id,
                    child,
                    ready: false,
                });
            }
            Err(failure) => {
                let fingerprint = self.fingerprint();
                Lifecycle::WorkerLaunchFailed {
                    fingerprint: &fingerprint,
                    activation_id: grant.activation_id.as_uuid(),
                    failure_reason: failure.reason,
                    detail: Some(&failure.detail),
                }
                .emit();
                reports.push(Message::ActivationFailed(McpActivationFailed {
                    activation_id: grant.activation_id,
                    failure_reason: Text::truncated(failure.reason.as_str()),
                }));
            }
        }
        reports
    }

    /// `Release`, then `LaunchStatus`: the child is killed unless the broker owns it now.
    async fn release(&self, transport: &mut Session, launched: &mut Option<Launched>) {
        let sequence = async {
            transport.send(&Message::Release).await.ok()?;
            let activation_id = launched.as_ref()?.activation_id;
            transport
                .send(&Message::LaunchStatus { activation_id })
                .await
                .ok()?;
            loop {
                if let Some(frame) = transport.recv().await.ok()?
                    && let Message::LaunchStatusIs(status) = frame.message
                    && status.activation_id == activation_id
                {
                    return Some(status.outcome);
                }
            }
        };
        let outcome = tokio::time::timeout(RELEASE_BUDGET, sequence)
            .await
            .ok()
            .flatten();
        if let Some(launched) = launched.take() {
            match outcome {
                // The broker owns the worker: it drains and exits on its own.
                Some(LaunchOutcome::Published) => return,
                // The broker does not know this launch: a daemon restarted since then, and
                // the worker may have resumed and serve other sessions of the route. Like
                // no answer, the broker and the worker's own grace clean up.
                Some(LaunchOutcome::Unknown) | None => return,
                Some(
                    LaunchOutcome::Cancelled | LaunchOutcome::Superseded | LaunchOutcome::Pending,
                ) => {}
            }
            // Asked to stop, and reaped and logged as `worker_stopped` like any other end of a
            // child if it ends within the budget. A worker the daemon has already retired
            // may be finishing a stream (a logout sends SIGTERM to the worker as well): it
            // gets its own drain rather than a SIGKILL that would cut the stream and leave
            // its records open.
            let fingerprint = self.fingerprint();
            launched
                .terminate(&fingerprint, Duration::from_millis(200))
                .await;
        }
    }

    /// Resolves when the launched child exits; never when there is none. A child that
    /// exits before its route was ready is a failed launch, and says why when its exit
    /// status tells (an invalid plugin configuration).
    async fn wait_child(&self, launched: &mut Option<Launched>) -> WorkerExited {
        let Some(current) = launched.as_mut() else {
            return std::future::pending().await;
        };
        let status = current.child.wait().await;
        let (activation_id, ready) = (current.activation_id, current.ready);
        *launched = None;
        let exit = exited(activation_id, &self.fingerprint(), status);
        if !ready {
            let failure_reason = exit.failure_reason();
            let detail = format!(
                "the worker exited before it was ready; its log is {}",
                self.launcher.log_file(activation_id).display()
            );
            Lifecycle::WorkerLaunchFailed {
                fingerprint: &self.fingerprint(),
                activation_id: activation_id.as_uuid(),
                failure_reason,
                detail: Some(&detail),
            }
            .emit();
        }
        exit
    }

    /// Without a route: serve MCP only.
    ///
    /// A worker still running is left to end as the daemon tells it (a revoked one drains
    /// and exits), but is reaped and logged when it does: dropped unwaited, it would stay a
    /// zombie until the harness session ends.
    /// Its end is not a failed launch, even before it was ready: it was told to stop.
    async fn idle(&self, launched: Option<Launched>, mut shutdown: oneshot::Receiver<()>) {
        self.decide();
        if let Some(mut child) = launched {
            tokio::select! {
                _ = &mut shutdown => return,
                status = child.child.wait() => {
                    exited(child.activation_id, &self.fingerprint(), status);
                }
            }
        }
        let _ = shutdown.await;
    }
}

impl Launched {
    /// Ends a child whose successor is about to be launched. One that has exited is reaped,
    /// and its end is returned for the daemon. One still running (a worker stopping on a
    /// signal with a request in flight, a hung one, one whose grant was lost) is asked to
    /// stop with SIGTERM, so a worker finishes what is in flight and closes its records,
    /// and is killed only if it is still there after [`RETIRE_GRACE`]; it is reaped and
    /// logged in the background, as the daemon has already replaced its generation.
    fn retire(
        mut self,
        fingerprint: &str,
        retiring: &std::sync::Mutex<JoinSet<()>>,
    ) -> Option<WorkerExited> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(exited(self.activation_id, fingerprint, Ok(status)));
        }
        self.ask_to_stop();
        let fingerprint = fingerprint.to_owned();
        let mut retiring = relay_logging::sync::lock(retiring, "retiring children")?;
        retiring.spawn(async move {
            if tokio::time::timeout(RETIRE_GRACE, self.child.wait())
                .await
                .is_err()
            {
                let _ = self.child.start_kill();
            }
            let status = self.child.wait().await;
            exited(self.activation_id, &fingerprint, status);
        });
        None
    }

    /// SIGTERM to the child, and SIGCONT should it be stopped, so that it can act on it. A
    /// worker finishes what is in flight (up to 5 s) and closes its records; a worker not
    /// ready yet dies at once.
    fn ask_to_stop(&self) {
        use rustix::process::{Pid, Signal, kill_process};
        if let Some(pid) = self.child.id().and_then(|id| Pid::from_raw(id as i32)) {
            let _ = kill_process(pid, Signal::TERM);
            let _ = kill_process(pid, Signal::CONT);
        }
    }

    /// Asks the child to stop and reaps it, logging its end, if it ends within `wait`; one
    /// still finishing its drain is left to end on its own.
    async fn terminate(mut self, fingerprint: &str, wait: Duration) {
        self.ask_to_stop();
        if let Ok(status) = tokio::time::timeout(wait, self.child.wait()).await {
            exited(self.activation_id, fingerprint, status);
        }
    }
}

/// Logs `worker_stopped` for the reaped child of `activation_id` on the route of
/// `fingerprint` and builds its report. The MCP never learns the worker id, which the daemon
/// gives the worker when it registers.
fn exited(
    activation_id: Id,
    fingerprint: &str,
    status: std::io::Result<std::process::ExitStatus>,
) -> WorkerExited {
    let exit = match status {
        Ok(status) => ProcessExit::from(status),
        Err(_) => ProcessExit::Unknown,
    };
    Lifecycle::WorkerStopped {
        fingerprint: Some(fingerprint),
        worker_id: None,
        activation_id: Some(activation_id.as_uuid()),
        exit: Some(exit),
    }
    .emit();
    let (exit_code, signal) = match exit {
        ProcessExit::Code(code) => (Some(code), None),
        ProcessExit::Signal(signal) => (None, Some(signal)),
        ProcessExit::Unknown => (None, None),
    };
    WorkerExited {
        activation_id,
        exit_code,
        signal,
    }
}
