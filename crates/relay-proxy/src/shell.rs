//! The async shell around the pure broker (SPEC §5.4, §11): it feeds inputs with `now`,
//! executes the outputs (messages to control sessions, readiness probes, state writes,
//! log events), and arms one timer from `poll_timeout`.
//!
//! The broker sits behind a mutex that is held only for `handle` and for draining its
//! outputs, never across an await; outputs are executed after the lock is released.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use relay_broker::{
    Broker, BrokerConfig, ConnId, Decision, Digest, Entropy, Event, Fingerprint, Input, Output,
    ProbeOutcome, RequestKind, Ticket, Wait,
};
use relay_proto::{
    ActivationCancelReason, Bytes32, DisconnectReason, Id, McpRemovedReason, Message, WorkerState,
};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinSet;

use crate::metrics::Metrics;
use crate::state::StateStore;
use crate::worker_client::{WorkerClient, WorkerTarget};

mod events;
mod waiting;

pub use waiting::{MAX_WAITING_PER_ROUTE, MAX_WAITING_UNBOUND};
use waiting::{Pool, Waiting};

/// What the shell hands a control session's task.
#[derive(Debug)]
pub enum Outbound {
    Message(Box<Message>),
    Close,
}

/// Queue length per control session (§5.8): a session that cannot keep up is closed.
pub const SESSION_QUEUE: usize = 64;

/// The OS random generator, for the broker's fresh ids and secrets.
#[derive(Debug)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn id(&mut self) -> Id {
        Id::from(uuid::Uuid::now_v7())
    }

    fn secret(&mut self) -> Bytes32 {
        // SystemRandom only fails when the OS has no entropy source at all, in which case
        // the daemon cannot run safely: a zero secret would be guessable, so abort.
        match relay_identity::Secret32::generate() {
            Ok(secret) => Bytes32(*secret.as_bytes()),
            Err(_) => std::process::abort(),
        }
    }
}

struct Attached {
    sender: mpsc::Sender<Outbound>,
    peer: IpAddr,
}

/// Whether the state was written: the final write as the daemon stops, or one that the
/// stop cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Saved {
    Yes,
    No,
}

/// Drives the broker.
pub struct Shell {
    broker: Mutex<Broker>,
    sessions: Mutex<HashMap<ConnId, Attached>>,
    /// Woken after every input: requests waiting for an activating route re-ask.
    changed: Notify,
    /// Woken when the broker's next deadline may have moved.
    timer: Notify,
    workers: WorkerClient,
    persist: watch::Sender<u64>,
    state: StateStore,
    metrics: Arc<Metrics>,
    tasks: Mutex<JoinSet<()>>,
    /// True while state cannot be written (§4.4): `/healthz` says `degraded`.
    degraded: std::sync::atomic::AtomicBool,
    /// Serializes state writes (the background writer and `persist_now`).
    writing: Arc<tokio::sync::Mutex<()>>,
    /// Requests waiting for a route to start (§3.5): each re-asks the broker on every
    /// change, so their number is bounded, per known route and for unknown credentials.
    waiting: Arc<Waiting>,
    grace: Duration,
    drain: Duration,
    /// Copies of two limits for log events written while the broker is locked.
    max_tokens_per_identity: usize,
    max_routes: usize,
}

impl std::fmt::Debug for Shell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shell").finish_non_exhaustive()
    }
}

impl Shell {
    /// A shell around a broker restored from `state`. Call [`Shell::run`] to drive its
    /// timer and state writes.
    pub fn new(
        config: BrokerConfig,
        state: StateStore,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Shell>, crate::state::StateError> {
        let persisted = state.load()?;
        let grace = Duration::from_millis(config.timers.reconnect_grace_ms);
        let (max_tokens_per_identity, max_routes) =
            (config.max_tokens_per_identity, config.max_routes);
        let drain = Duration::from_millis(config.timers.drain_ms);
        let mut broker = Broker::new(config, Box::new(OsEntropy));
        broker.restore(Instant::now(), persisted);
        broker.trim_tombstones();
        let (persist, _) = watch::channel(0);
        Ok(Arc::new(Shell {
            broker: Mutex::new(broker),
            sessions: Mutex::new(HashMap::new()),
            changed: Notify::new(),
            timer: Notify::new(),
            workers: WorkerClient::new(),
            persist,
            state,
            metrics,
            tasks: Mutex::new(JoinSet::new()),
            degraded: std::sync::atomic::AtomicBool::new(false),
            writing: Arc::default(),
            waiting: Arc::new(Waiting::default()),
            grace,
            drain,
            max_tokens_per_identity,
            max_routes,
        }))
    }

    pub fn workers(&self) -> &WorkerClient {
        &self.workers
    }

    /// Runs the timer and the state writer until `shutdown`, then lets a write in progress
    /// finish and writes the state a last time (§5.7).
    pub async fn run(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) -> Saved {
        // What the broker decided while restoring the state file (the probes of the workers
        // it waits for) is carried out now.
        self.drive(|_| ());
        let (stop, stopped) = watch::channel(false);
        let writer = {
            let shell = self.clone();
            let mut requests = self.persist.subscribe();
            let mut stopped = stopped.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        biased;
                        _ = stopped.changed() => return,
                        changed = requests.changed() => {
                            if changed.is_err() {
                                return;
                            }
                            requests.borrow_and_update();
                            // A failure is logged and retried; the final write reports.
                            let _ = shell.write_state(&stopped).await;
                        }
                    }
                }
            })
        };
        let timer = {
            let shell = self.clone();
            async move {
                loop {
                    let next = shell.with_broker(|b| b.poll_timeout());
                    let woken = shell.timer.notified();
                    match next {
                        Some(at) => {
                            tokio::select! {
                                () = tokio::time::sleep_until(at.into()) => {
                                    shell.timeout();
                                }
                                () = woken => {}
                            }
                        }
                        None => woken.await,
                    }
                }
            }
        };
        tokio::select! {
            () = shutdown => {}
            () = timer => {}
        }
        // No write may land after the final one.
        stop.send_replace(true);
        let _ = writer.await;
        let saved = self.write_state(&stopped).await;
        if let Some(mut tasks) = relay_logging::sync::lock(&self.tasks, "shell tasks") {
            drop(std::mem::take(&mut *tasks));
        }
        saved
    }

    /// Writes the state. Every attempt reports to the broker, so the registrations waiting
    /// for it are answered or refused (§5.3); a failure is logged, surfaces in `/healthz`,
    /// and is retried until it succeeds or the daemon stops (§4.4).
    async fn write_state(self: &Arc<Self>, stopped: &watch::Receiver<bool>) -> Saved {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            // Read before the snapshot is taken: the write covers every request up to it.
            let seq = *self.persist.borrow();
            let result = self.save_snapshot().await;
            let ok = result.is_ok();
            if let Err(error) = &result {
                let io = find_io_error(error)
                    .unwrap_or_else(|| std::io::Error::other("state write failed"));
                relay_logging::Lifecycle::StateWriteFailed {
                    file: self.state.path(),
                    error: &io,
                    attempt,
                }
                .emit();
            }
            let was_degraded = self
                .degraded
                .swap(!ok, std::sync::atomic::Ordering::Relaxed);
            if ok && was_degraded {
                // Said, not only seen in /healthz: the failures before it were logged.
                tracing::info!(
                    event = "state_write_recovered",
                    file = %self.state.path().display(),
                    "the state file is written again"
                );
            }
            if seq > 0 {
                self.input(Input::Persisted { seq, ok });
            }
            if ok || *stopped.borrow() {
                return if ok { Saved::Yes } else { Saved::No };
            }
            let retry = Duration::from_secs(u64::from(attempt.min(30)));
            let mut stopped = stopped.clone();
            tokio::select! {
                () = tokio::time::sleep(retry) => {}
                _ = stopped.changed() => return Saved::No,
            }
        }
    }

    /// Counts a refusal the control plane answered before the broker saw the registration
    /// (a bad handshake, an endpoint not allowed), like the broker's own (§3.1 `/metrics`).
    pub fn record_refusal(&self, code: relay_proto::RefusedCode) {
        self.metrics.record_refusal(code.as_str());
    }

    /// The state file.
    pub fn state_path(&self) -> &std::path::Path {
        self.state.path()
    }

    pub fn is_degraded(&self) -> bool {
        self.degraded.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn with_broker<T>(&self, f: impl FnOnce(&mut Broker) -> T) -> T {
        let mut broker = relay_logging::sync::lock_or_exit(&self.broker, "broker");
        f(&mut broker)
    }

    /// Feeds one input and executes what the broker decided.
    pub fn input(self: &Arc<Self>, input: Input) {
        self.drive(|b| b.handle(Instant::now(), input));
    }

    fn timeout(self: &Arc<Self>) {
        self.drive(|b| b.handle_timeout(Instant::now()));
    }

    /// Runs `f` on the broker and executes its outputs in order while the lock is still
    /// held: they only queue work (session messages, a state-write request, pool evictions,
    /// log lines), and executing them in the broker's order is what keeps a `Registered`
    /// ahead of a `RouteReady` decided by another task. Probes are spawned after the lock is
    /// released. Returns `f`'s value and the outputs, for callers that report on them.
    fn drive<T>(self: &Arc<Self>, f: impl FnOnce(&mut Broker) -> T) -> (T, Vec<Output>) {
        let (value, outputs) = {
            let mut broker = relay_logging::sync::lock_or_exit(&self.broker, "broker");
            let value = f(&mut broker);
            let outputs = drain(&mut broker);
            for output in &outputs {
                self.execute(output);
            }
            let workers = broker.workers();
            for state in WorkerState::ALL {
                let count = workers.iter().filter(|w| w.state == *state).count();
                self.metrics.set_workers(state.as_str(), count as i64);
            }
            (value, outputs)
        };
        for output in &outputs {
            if let Output::Probe {
                worker_id,
                probe,
                endpoint,
                certificate_sha256,
                secret,
            } = output
            {
                self.spawn_probe(
                    *probe,
                    WorkerTarget {
                        worker_id: *worker_id,
                        endpoint: endpoint.clone(),
                        certificate_sha256: certificate_sha256.0,
                        secret: secret.0,
                    },
                );
            }
        }
        self.changed.notify_waiters();
        self.timer.notify_one();
        (value, outputs)
    }

    /// Registers the outbound queue of an authenticated control session.
    pub fn attach(&self, conn: ConnId, peer: IpAddr) -> mpsc::Receiver<Outbound> {
        let (sender, receiver) = mpsc::channel(SESSION_QUEUE);
        if let Some(mut sessions) = relay_logging::sync::lock(&self.sessions, "control sessions") {
            sessions.insert(conn, Attached { sender, peer });
            self.metrics.set_control_sessions(sessions.len() as i64);
        }
        receiver
    }

    /// Drops every session's queue: each session sends what is queued, then closes.
    pub fn close_sessions(&self) {
        if let Some(mut sessions) = relay_logging::sync::lock(&self.sessions, "control sessions") {
            sessions.clear();
            self.metrics.set_control_sessions(0);
        }
    }

    /// A control session ended: the broker is told, its queue dropped.
    pub fn detach(self: &Arc<Self>, conn: ConnId, reason: DisconnectReason) {
        if let Some(mut sessions) = relay_logging::sync::lock(&self.sessions, "control sessions") {
            sessions.remove(&conn);
            self.metrics.set_control_sessions(sessions.len() as i64);
        }
        self.input(Input::Disconnected { conn, reason });
    }

    /// Executes one output, with the broker locked (see [`Shell::drive`]); probes are
    /// left to the caller.
    fn execute(&self, output: &Output) {
        match output {
            Output::Send { conn, message } => {
                self.deliver(*conn, Outbound::Message(Box::new(message.clone())));
            }
            Output::Close { conn } => self.deliver(*conn, Outbound::Close),
            Output::Probe { .. } => {}
            Output::Persist { seq } => {
                // Never move the request back: a later seq covers the earlier ones.
                self.persist.send_if_modified(|current| {
                    let newer = *seq > *current;
                    if newer {
                        *current = *seq;
                    }
                    newer
                });
            }
            Output::Forget { worker_id } => self.workers.forget(*worker_id),
            Output::Event(event) => self.log(event),
        }
    }

    fn spawn_probe(self: &Arc<Self>, probe: u64, target: WorkerTarget) {
        let shell = self.clone();
        self.spawn(async move {
            let outcome = shell.workers.probe(&target).await;
            shell.input(Input::ProbeResult {
                worker_id: target.worker_id,
                probe,
                outcome,
            });
        });
    }

    fn deliver(&self, conn: ConnId, outbound: Outbound) {
        let Some(mut sessions) = relay_logging::sync::lock(&self.sessions, "control sessions")
        else {
            return;
        };
        let full = sessions
            .get(&conn)
            .is_some_and(|attached| attached.sender.try_send(outbound).is_err());
        if full {
            // A session that cannot keep up is closed rather than buffered without bound
            // (§5.1): dropping its queue ends its task.
            tracing::warn!(
                event = "control_session_closed",
                reason = "send_queue_full",
                "control session closed"
            );
            sessions.remove(&conn);
        }
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        if let Some(mut tasks) = relay_logging::sync::lock(&self.tasks, "shell tasks") {
            while tasks.try_join_next().is_some() {}
            tasks.spawn(task);
        }
    }

    /// Where a request with a well-formed credential goes, waiting up to `activation_wait`
    /// while its route starts its first worker (§3.5).
    pub async fn route(self: &Arc<Self>, digest: Digest, kind: RequestKind) -> Decision {
        let wait = self.with_broker(|b| b.config().activation_wait);
        let deadline = tokio::time::Instant::now() + wait;
        // Waiting is bounded in numbers too: a request whose pool is full decides at once.
        // A credential the broker knows waits in its route's budget, any other in the small
        // unbound pool, so unbound tokens cannot crowd out a known user (§3.5).
        let mut permit = None;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let wait = if tokio::time::Instant::now() >= deadline {
                Wait::Waited
            } else {
                Wait::Allowed
            };
            let decision = self.begin_request(digest, kind, wait);
            if decision != Decision::Wait {
                return decision;
            }
            if permit.is_none() {
                let pool = match self.with_broker(|b| b.known_credential(&digest)) {
                    Some(fingerprint) => Pool::Route(fingerprint),
                    None => Pool::Unbound,
                };
                match self.waiting.try_take(pool) {
                    Some(held) => permit = Some(held),
                    None => return self.begin_request(digest, kind, Wait::NotAllowed),
                }
            }
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// The broker's decision for one request. A worker's pool is opened under the broker's
    /// lock, which its retirement also holds: see [`WorkerClient::admit`].
    fn begin_request(&self, digest: Digest, kind: RequestKind, wait: Wait) -> Decision {
        self.with_broker(|b| {
            let decision = b.begin_request(Instant::now(), digest, kind, wait);
            if let Decision::Worker { worker_id, .. } = &decision {
                self.workers.admit(*worker_id);
            }
            decision
        })
    }

    pub fn end_request(self: &Arc<Self>, ticket: Ticket) {
        // Rarely, the last request on a draining worker that a new session waits on.
        if let Some(fingerprint) = self.with_broker(|b| b.end_request(ticket)) {
            self.drive(|b| b.end_drain_for_launch(Instant::now(), fingerprint));
        }
    }

    /// The worker of `ticket` could not be reached before anything was written.
    pub fn worker_unreachable(self: &Arc<Self>, ticket: Ticket, outcome: ProbeOutcome) {
        self.drive(|b| b.worker_unreachable(Instant::now(), ticket, outcome));
    }

    pub fn workers_view(&self) -> Vec<relay_broker::WorkerView> {
        self.with_broker(|b| b.workers())
    }

    pub fn route_view(&self, digest: &Digest) -> Option<relay_broker::RouteView> {
        self.with_broker(|b| b.route_view(digest))
    }

    pub fn bindings_view(&self) -> Vec<relay_broker::BindingView> {
        self.with_broker(|b| b.bindings())
    }

    pub fn state_store(&self) -> &StateStore {
        &self.state
    }

    /// `relayd bindings revoke` (or `block` when `block`) for a running daemon (§5.4, last
    /// row): the broker ends the route, and this says what it ended.
    pub fn revoke(self: &Arc<Self>, fingerprint: Fingerprint, block: bool) -> RevokeSummary {
        let (bindings, outputs) = self.drive(|b| {
            let bindings = b
                .bindings()
                .iter()
                .filter(|v| v.fingerprint == fingerprint && !v.tombstone)
                .count();
            b.handle(Instant::now(), Input::Revoke { fingerprint, block });
            bindings
        });
        let mut summary = RevokeSummary {
            bindings,
            ..RevokeSummary::default()
        };
        for output in &outputs {
            match output {
                Output::Event(Event::McpRemoved {
                    fingerprint: fp,
                    reason: McpRemovedReason::Revoked,
                    ..
                }) if *fp == fingerprint => summary.sessions += 1,
                Output::Event(Event::WorkerActivationCancelled {
                    fingerprint: fp,
                    reason: ActivationCancelReason::Revoked,
                    ..
                }) if *fp == fingerprint => summary.launch_cancelled = true,
                // Every generation the revocation retires is forgotten, published or not.
                Output::Forget { .. } => summary.worker_retired = true,
                _ => {}
            }
        }
        summary
    }

    /// `relayd bindings unblock` for a running daemon; true when the fingerprint was
    /// blocked.
    pub fn unblock(self: &Arc<Self>, fingerprint: Fingerprint) -> bool {
        let (was_blocked, _) = self.drive(|b| {
            let was_blocked = b.snapshot().blocked.contains(&fingerprint);
            b.handle(Instant::now(), Input::Unblock { fingerprint });
            was_blocked
        });
        was_blocked
    }

    /// The blocked fingerprints, also those without any binding.
    pub fn blocked_fingerprints(&self) -> Vec<Fingerprint> {
        self.with_broker(|b| b.snapshot().blocked)
    }

    /// Writes the current state now, so an admin command answers only once its change is
    /// durable. The background writer may rename an older snapshot after this one; it then
    /// writes again, because the change that preceded this call also requested a write.
    pub async fn persist_now(&self) -> Result<(), crate::state::StateError> {
        self.save_snapshot().await
    }

    /// Takes a snapshot and writes it, one write at a time: a write that starts later always
    /// writes a newer snapshot, so an older one can never land last.
    async fn save_snapshot(&self) -> Result<(), crate::state::StateError> {
        // Held by the write itself, not by this future: a caller dropped mid-write (an admin
        // command cut off at the daemon's stop) must not let a newer write start, and then
        // be overtaken by this older one's rename.
        let writing = self.writing.clone().lock_owned().await;
        let snapshot = self.with_broker(|b| b.snapshot());
        let store = self.state.clone();
        let write = move || {
            let saved = store.save(&snapshot);
            drop(writing);
            saved
        };
        match tokio::task::spawn_blocking(write).await {
            Ok(result) => result,
            // The blocking task panicked or was cancelled at shutdown: nothing was renamed
            // into place by it, so report the write as failed.
            Err(join) => Err(crate::state::StateError::Write {
                path: self.state.path().to_owned(),
                source: relay_identity::StoreError::Write {
                    path: self.state.path().to_owned(),
                    source: std::io::Error::other(join.to_string()),
                },
            }),
        }
    }

    fn peer_of(&self, conn: ConnId) -> Option<IpAddr> {
        relay_logging::sync::lock(&self.sessions, "control sessions")?
            .get(&conn)
            .map(|a| a.peer)
    }
}

fn find_io_error(error: &(dyn std::error::Error + 'static)) -> Option<std::io::Error> {
    crate::error_chain::causes(error)
        .find_map(|cause| cause.downcast_ref::<std::io::Error>())
        .map(|io| std::io::Error::new(io.kind(), io.to_string()))
}

fn drain(broker: &mut Broker) -> Vec<Output> {
    std::iter::from_fn(|| broker.poll_output()).collect()
}

/// What [`Shell::revoke`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RevokeSummary {
    /// Bindings of the fingerprint that became tombstones.
    pub bindings: usize,
    /// MCP sessions removed; their connections got `Refused { revoked | blocked }`.
    pub sessions: usize,
    /// A worker generation left service (a published one was told to `Drain`).
    pub worker_retired: bool,
    /// A launch grant that had not produced a worker yet was cancelled.
    pub launch_cancelled: bool,
}

/// Ends a broker ticket when the request it belongs to is done: the response body ended
/// or was dropped, or the request failed.
#[derive(Debug)]
pub struct TicketGuard {
    shell: Arc<Shell>,
    ticket: Option<Ticket>,
}

impl TicketGuard {
    pub fn new(shell: Arc<Shell>, ticket: Ticket) -> TicketGuard {
        TicketGuard {
            shell,
            ticket: Some(ticket),
        }
    }

    /// The worker could not be reached before anything was written: the ticket ends here
    /// and the broker hears of it (§3.7).
    pub fn unreachable(mut self, outcome: ProbeOutcome) {
        if let Some(ticket) = self.ticket.take() {
            self.shell.worker_unreachable(ticket, outcome);
        }
    }
}

impl Drop for TicketGuard {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.shell.end_request(ticket);
        }
    }
}
