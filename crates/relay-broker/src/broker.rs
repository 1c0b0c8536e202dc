//! The state machine. One `match` per input; every transition of §5.4 is an explicit
//! assignment of [`RouteState`] in one of the `enter_*` / `on_*` methods.
//!
//! This file holds the broker's records, the `handle` / `handle_timeout` dispatch,
//! `restore` / `snapshot` and the small helpers every part uses; the parts live beside it,
//! one concern each: `sessions` (MCP sessions), `workers` (worker generations),
//! `transitions` (route state changes), `bindings` (credentials and the route table),
//! `requests` (the request plane) and `views` (the status views).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use relay_proto::{
    Bytes32, DisconnectReason, FailureReason, Id, McpRemovedReason, Message, Refused, RefusedCode,
    Role, SUPPORTED_PROTOCOLS, Text, WorkerHint, WorkerRemovedReason,
};

use crate::io::{Event, Input, Output};
use crate::persist::{PersistedBinding, PersistedGeneration, PersistedState};
use crate::timers::TimerQueue;
use crate::types::{BrokerConfig, ConnId, Digest, Entropy, Fingerprint};

/// Retry-After for a 503 when no retry time is known (§3.5).
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);
/// Tombstones kept per identity, as a multiple of its token limit.
const TOMBSTONES_PER_TOKEN: usize = 4;
/// The most tombstones kept in all, whatever the limits multiply to: about 72 MB of the
/// state file, which leaves room below the size the daemon reads at start for the live
/// bindings of the largest token limit.
const MAX_TOMBSTONES: usize = 262_144;
/// Readiness probe failures in a row that count as a failed probe (§5.1).
const PROBE_STRIKES: u8 = 2;

mod bindings;
mod requests;
mod sessions;
mod table;
mod transitions;
mod views;
mod workers;

use table::{Binding, Bindings};

/// The state of one route (§5.4). Each variant carries that state's data.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RouteState {
    Empty,
    Activating {
        /// The live grant, or `None` while no MCP is connected to take one.
        grant: Option<Id>,
        since: Instant,
        /// The generation that registered with the grant and is starting.
        worker: Option<Id>,
        /// When the readiness probe of a worker that reported `Ready` started failing.
        probe_failing_since: Option<Instant>,
    },
    Ready {
        worker: Id,
    },
    PassThrough {
        retry_at: Instant,
    },
    Recovering {
        worker: Id,
        deadline: Instant,
    },
    Draining {
        worker: Id,
        deadline: Instant,
        pending_launch: bool,
    },
}

#[derive(Debug)]
struct Route {
    state: RouteState,
    /// Session ids of the MCP references, connected or in their grace.
    sessions: BTreeSet<Id>,
    /// Bound (live) credential digests, least recently registered first.
    digests: Vec<Digest>,
    /// Larger is more recently used (for route-table eviction).
    used: u64,
    /// The next start-failure delay.
    backoff: Duration,
    /// Relaunches since the last ready worker (in a crash loop, since the last one that
    /// served a request), for `worker_relaunch_requested attempt`.
    attempt: u32,
    /// Requests in flight with this route's credentials (worker or pass-through).
    in_flight: u32,
    /// An opening hook waited for a session that did not come. Later ones pass at once until
    /// an MCP registers, so a user whose MCP cannot register does not wait on every prompt.
    opening_waited_in_vain: bool,
    /// Its worker was launched at once because the one before it crashed, and none has
    /// served a request since: if it too dies before serving, the next launch waits its
    /// backoff, so a worker that crashes on start cannot be relaunched in a loop.
    relaunched_after_crash: bool,
}

#[derive(Debug)]
struct Session {
    fingerprint: Fingerprint,
    digest: Digest,
    resume_token: Bytes32,
    instance: Id,
    peer: IpAddr,
    conn: Option<ConnId>,
    /// When its control session dropped, while it is in its grace.
    disconnected_at: Option<Instant>,
    hint: Option<WorkerHint>,
    /// Waiting for its new binding to be durable before it is answered.
    pending_persist: Option<u64>,
    /// The binding (a tombstone, or an expired one of another identity) its registration
    /// replaced, put back if the new binding cannot be made durable.
    replaced: Option<Binding>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GrantState {
    Issued,
    Consumed { worker: Id },
    Cancelled,
}

#[derive(Debug)]
struct Grant {
    token: Bytes32,
    fingerprint: Fingerprint,
    owner: Id,
    state: GrantState,
}

/// Where a worker generation is in its life. Each variant carries what only it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GenStatus {
    /// Registered with a grant, not yet published.
    Starting {
        /// The worker reported `Ready`; publishing still waits for its probe.
        ready_reported: bool,
    },
    /// Published at least once, and still the route's generation.
    Live {
        /// It resumed its control session since it was last published.
        resumed: bool,
    },
    /// Done; it never returns to service.
    Revoked {
        /// It was published at least once (one that never was is a cancelled launch).
        was_live: bool,
    },
}

/// The secret of a generation restored from the state file until it resumes: secrets are
/// not persisted, and a drawn one is never all zeros but with a chance of 2^-256.
pub(crate) const UNKNOWN_SECRET: Bytes32 = Bytes32([0; 32]);

impl GenStatus {
    fn is_revoked(self) -> bool {
        matches!(self, GenStatus::Revoked { .. })
    }

    fn is_live(self) -> bool {
        matches!(self, GenStatus::Live { .. })
    }

    fn is_starting(self) -> bool {
        matches!(self, GenStatus::Starting { .. })
    }
}

#[derive(Debug)]
struct Generation {
    fingerprint: Fingerprint,
    /// The grant it registered with (`None` for one restored from the ledger).
    activation_id: Option<Id>,
    endpoint: String,
    certificate: Bytes32,
    secret: Bytes32,
    conn: Option<ConnId>,
    status: GenStatus,
    /// The probe whose answer is awaited, if any.
    probe: Option<u64>,
    strikes: u8,
    in_flight: u32,
    served: u64,
}

/// Who is on the other end of an authenticated control connection.
#[derive(Debug, Clone, Copy)]
enum Party {
    Mcp(Id),
    /// An MCP that sent `Release` and may still ask `LaunchStatus`.
    Released(Fingerprint),
    Worker(Id),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Timer {
    Retry(Fingerprint),
    Recovery(Fingerprint),
    Drain(Fingerprint),
    StartupTick(Fingerprint),
    Probe(Id),
    Grace(Id),
    Flush,
}

#[derive(Debug)]
struct TicketEntry {
    fingerprint: Fingerprint,
    worker: Option<Id>,
}

/// The route broker.
pub struct Broker {
    config: BrokerConfig,
    entropy: Box<dyn Entropy>,
    routes: HashMap<Fingerprint, Route>,
    bindings: Bindings,
    blocked: HashSet<Fingerprint>,
    sessions: HashMap<Id, Session>,
    conns: HashMap<ConnId, Party>,
    grants: HashMap<Id, Grant>,
    /// Keyed by ids the daemon makes, so ordered rather than hashed: every request looks up
    /// its generation and records and ends its ticket, and a keyed hash of each key costs
    /// more than a few comparisons.
    generations: BTreeMap<Id, Generation>,
    tickets: BTreeMap<u64, TicketEntry>,
    next_ticket: u64,
    next_probe: u64,
    next_used: u64,
    persist_seq: u64,
    last_use_dirty: bool,
    timers: TimerQueue<Timer>,
    outputs: VecDeque<Output>,
    /// The daemon is stopping: what it persisted then stands, and the sessions it closes
    /// are not losses to recover from.
    stopping: bool,
    /// Unbound credentials whose opening hook waited in vain for their MCP to register (the
    /// unbound counterpart of `Route::opening_waited_in_vain`), at most
    /// [`MAX_UNBOUND_WAITED_IN_VAIN`]; emptied when full.
    unbound_waited_in_vain: HashSet<Digest>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("routes", &self.routes.len())
            .field("sessions", &self.sessions.len())
            .field("generations", &self.generations.len())
            .finish()
    }
}

impl Broker {
    pub fn new(config: BrokerConfig, entropy: Box<dyn Entropy>) -> Broker {
        // Per identity, a multiple of its token limit; overall, as many as a full route
        // table of identities would hold at their own cap, up to a ceiling.
        let per_identity = config
            .max_tokens_per_identity
            .saturating_mul(TOMBSTONES_PER_TOKEN);
        let overall = config
            .max_routes
            .saturating_mul(per_identity)
            .min(MAX_TOMBSTONES);
        Broker {
            bindings: Bindings::new(per_identity, overall),
            config,
            entropy,
            routes: HashMap::new(),
            blocked: HashSet::new(),
            sessions: HashMap::new(),
            conns: HashMap::new(),
            grants: HashMap::new(),
            generations: BTreeMap::new(),
            tickets: BTreeMap::new(),
            next_ticket: 0,
            next_probe: 0,
            next_used: 0,
            persist_seq: 0,
            last_use_dirty: false,
            timers: TimerQueue::new(),
            outputs: VecDeque::new(),
            stopping: false,
            unbound_waited_in_vain: HashSet::new(),
        }
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    /// Loads persisted state at start-up (§5.7): bindings are valid at once; each persisted
    /// generation waits in `Recovering` for its worker to resume within the grace, and is
    /// probed at once, so a worker that is gone is revoked without waiting.
    pub fn restore(&mut self, now: Instant, state: PersistedState) {
        for b in state.bindings {
            if b.tombstone_until.is_some_and(|until| until <= now) {
                continue;
            }
            let replaced = self.bindings.restore(
                b.digest,
                Binding::restored(b.fingerprint, b.last_use, b.tombstone_until),
            );
            // A file that names a digest twice keeps the last; a route lists it once.
            if let Some(replaced) = replaced
                && replaced.is_live()
                && let Some(route) = self.routes.get_mut(&replaced.fingerprint)
            {
                route.digests.retain(|d| *d != b.digest);
            }
            if b.tombstone_until.is_none() {
                self.route_mut_or_create(b.fingerprint)
                    .digests
                    .push(b.digest);
            }
        }
        // The order of registration is not kept on disk; the order of last use, which a
        // registration updates too, stands in for it, so the least recently used go first.
        for route in self.routes.values_mut() {
            let bindings = &self.bindings;
            route
                .digests
                .sort_by_key(|d| bindings.get(d).map(|b| b.last_use));
        }
        self.blocked.extend(state.blocked);
        for g in state.generations {
            let deadline = now + self.config.reconnect_grace();
            self.generations.insert(
                g.worker_id,
                Generation {
                    fingerprint: g.fingerprint,
                    activation_id: None,
                    endpoint: g.endpoint,
                    certificate: g.certificate_sha256,
                    secret: UNKNOWN_SECRET,
                    conn: None,
                    status: GenStatus::Live { resumed: false },
                    probe: None,
                    strikes: 0,
                    in_flight: 0,
                    // It served before the restart: a crash relaunches at once.
                    served: 1,
                },
            );
            let route = self.route_mut_or_create(g.fingerprint);
            route.state = if g.draining {
                RouteState::Draining {
                    worker: g.worker_id,
                    deadline,
                    pending_launch: false,
                }
            } else {
                RouteState::Recovering {
                    worker: g.worker_id,
                    deadline,
                }
            };
            if g.draining {
                self.timers.set(Timer::Drain(g.fingerprint), deadline);
            } else {
                self.timers.set(Timer::Recovery(g.fingerprint), deadline);
            }
            // A worker that died with the daemon refuses the probe (or another process
            // answers on its port): that is evidence of death, and its route need not wait
            // out the grace, draining or not. The probe carries no valid secret yet, so a
            // live worker fails it and is published only after it resumes.
            self.start_probe(g.worker_id);
        }
        self.timers
            .set(Timer::Flush, now + self.config.bindings_flush);
    }

    /// Holds the limits on tombstones over a restored state, as the daemon does when it
    /// starts: a file written under larger limits, or before there was an overall one,
    /// is trimmed, the tombstones that end first going, and written again. `restore`
    /// alone keeps the file's tombstones as they are, for `relayd bindings` on a stopped
    /// daemon, which may not know the limits it ran with.
    pub fn trim_tombstones(&mut self) {
        let before = self.bindings.len();
        let dropped = self.bindings.trim();
        self.tombstones_dropped(dropped);
        if self.bindings.len() != before {
            self.persist();
        }
    }

    /// The state to persist: bindings, blocked fingerprints, live generations.
    pub fn snapshot(&self) -> PersistedState {
        // In the digests' order already.
        let bindings: Vec<PersistedBinding> = self
            .bindings
            .iter()
            .map(|(digest, b)| PersistedBinding {
                digest: *digest,
                fingerprint: b.fingerprint,
                last_use: b.last_use,
                tombstone_until: b.tombstone_until(),
            })
            .collect();
        let mut blocked: Vec<Fingerprint> = self.blocked.iter().copied().collect();
        blocked.sort();
        let mut generations: Vec<PersistedGeneration> = self
            .generations
            .iter()
            .filter(|(_, g)| g.status.is_live())
            .map(|(id, g)| PersistedGeneration {
                worker_id: *id,
                fingerprint: g.fingerprint,
                endpoint: g.endpoint.clone(),
                certificate_sha256: g.certificate,
                draining: matches!(
                    self.routes.get(&g.fingerprint).map(|r| &r.state),
                    Some(RouteState::Draining { .. })
                ),
            })
            .collect();
        generations.sort_by_key(|g| g.worker_id);
        PersistedState {
            bindings,
            blocked,
            generations,
        }
    }

    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    pub fn handle(&mut self, now: Instant, input: Input) {
        match input {
            Input::McpRegister {
                conn,
                fingerprint,
                digest,
                instance,
                peer,
                hint,
            } => self.on_mcp_register(now, conn, fingerprint, digest, instance, peer, hint),
            Input::McpResume {
                conn,
                fingerprint,
                session_id,
                resume_token,
                peer,
            } => self.on_mcp_resume(now, conn, fingerprint, session_id, resume_token, peer),
            Input::McpRelease { conn } => self.on_mcp_release(now, conn),
            Input::McpActivationFailed {
                conn,
                activation_id,
                reason,
            } => self.on_mcp_activation_failed(now, conn, activation_id, reason),
            Input::McpWorkerExited {
                conn,
                activation_id,
                reason,
            } => self.on_mcp_worker_exited(now, conn, activation_id, reason),
            Input::McpLaunchStatus {
                conn,
                activation_id,
            } => self.on_launch_status(conn, activation_id),
            Input::WorkerRegister {
                conn,
                fingerprint,
                activation_id,
                activation_token,
                endpoint,
                certificate_sha256,
            } => self.on_worker_register(
                now,
                conn,
                fingerprint,
                activation_id,
                activation_token,
                endpoint,
                certificate_sha256,
            ),
            Input::WorkerResume {
                conn,
                fingerprint,
                worker_id,
                certificate_sha256,
            } => self.on_worker_resume(now, conn, fingerprint, worker_id, certificate_sha256),
            Input::WorkerReportedReady { conn } => self.on_worker_reported_ready(now, conn),
            Input::WorkerActivationFailed { conn, reason } => {
                if let Some(Party::Worker(worker)) = self.conns.get(&conn).copied() {
                    self.on_starting_worker_failed(now, worker, reason);
                    if self.conns.contains_key(&conn) {
                        // A published worker that says it failed is treated as gone from
                        // control: the route recovers or relaunches.
                        self.on_disconnected(now, conn, DisconnectReason::CommunicationFailed);
                        self.outputs.push_back(Output::Close { conn });
                    }
                }
            }
            Input::WorkerStopping { conn } => {
                if let Some(Party::Worker(worker)) = self.conns.get(&conn).copied() {
                    self.on_worker_gone(now, worker, FailureReason::WorkerStopped);
                }
            }
            Input::Disconnected { conn, reason } => self.on_disconnected(now, conn, reason),
            Input::ProbeResult {
                worker_id,
                probe,
                outcome,
            } => self.on_probe_result(now, worker_id, probe, outcome),
            Input::Persisted { seq, ok } => self.on_persisted(now, seq, ok),
            Input::Revoke { fingerprint, block } => self.on_revoke(now, fingerprint, block),
            Input::Unblock { fingerprint } => {
                if self.blocked.remove(&fingerprint) {
                    self.persist();
                }
            }
            Input::DaemonStopping => {
                self.stopping = true;
                let mut conns: Vec<ConnId> = self.conns.keys().copied().collect();
                conns.sort();
                for conn in conns {
                    self.send(
                        conn,
                        Message::DaemonStopping {
                            restart_expected: true,
                        },
                    );
                }
                self.persist();
            }
        }
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(timer) = self.timers.pop_due(now) {
            match timer {
                Timer::Retry(fp) => {
                    if matches!(self.state(fp), Some(RouteState::PassThrough { .. })) {
                        let attempt = {
                            let route = self.route_mut(fp);
                            route.attempt += 1;
                            route.attempt
                        };
                        self.event(Event::WorkerRelaunchRequested {
                            fingerprint: fp,
                            attempt,
                        });
                        self.enter_activating(now, fp, None);
                    }
                }
                Timer::Recovery(fp) => {
                    if let Some(RouteState::Recovering { worker, .. }) = self.state(fp).cloned() {
                        self.event(Event::WorkerRecoveryFailed {
                            fingerprint: fp,
                            worker_id: worker,
                        });
                        self.revoke_generation(worker, WorkerRemovedReason::Revoked);
                        self.relaunch_or_empty(now, fp);
                    }
                }
                Timer::Drain(fp) => {
                    if let Some(RouteState::Draining {
                        worker,
                        pending_launch,
                        ..
                    }) = self.state(fp).cloned()
                    {
                        self.revoke_generation(worker, WorkerRemovedReason::DrainTimeout);
                        self.after_drain(now, fp, pending_launch);
                    }
                }
                Timer::StartupTick(fp) => {
                    if let Some(RouteState::Activating { since, grant, .. }) =
                        self.state(fp).cloned()
                    {
                        self.event(Event::WorkerStartupPending {
                            fingerprint: fp,
                            activation_id: grant,
                            elapsed: now.saturating_duration_since(since),
                        });
                        self.timers
                            .set(Timer::StartupTick(fp), now + self.config.startup_progress());
                    }
                }
                Timer::Probe(worker) => self.start_probe(worker),
                Timer::Grace(session) => {
                    let in_grace = self
                        .sessions
                        .get(&session)
                        .is_some_and(|s| s.conn.is_none());
                    if in_grace {
                        self.remove_session(now, session, McpRemovedReason::GraceExpired);
                    }
                }
                Timer::Flush => {
                    let pruned = self.prune(now);
                    if self.last_use_dirty || pruned {
                        self.last_use_dirty = false;
                        self.persist();
                    }
                    self.timers
                        .set(Timer::Flush, now + self.config.bindings_flush);
                }
            }
        }
    }

    // ----- helpers ------------------------------------------------------------------------

    fn state(&self, fp: Fingerprint) -> Option<&RouteState> {
        self.routes.get(&fp).map(|r| &r.state)
    }

    fn route_mut(&mut self, fp: Fingerprint) -> &mut Route {
        self.route_mut_or_create(fp)
    }

    fn route_mut_or_create(&mut self, fp: Fingerprint) -> &mut Route {
        self.routes.entry(fp).or_insert_with(|| Route {
            state: RouteState::Empty,
            sessions: BTreeSet::new(),
            digests: Vec::new(),
            used: 0,
            backoff: Duration::ZERO,
            attempt: 0,
            in_flight: 0,
            opening_waited_in_vain: false,
            relaunched_after_crash: false,
        })
    }

    fn touch_route(&mut self, fp: Fingerprint) {
        self.next_used += 1;
        let used = self.next_used;
        self.route_mut(fp).used = used;
    }

    fn clear_route_timers(&mut self, fp: Fingerprint) {
        for timer in [
            Timer::Retry(fp),
            Timer::Recovery(fp),
            Timer::Drain(fp),
            Timer::StartupTick(fp),
        ] {
            self.timers.clear(timer);
        }
    }

    /// The grant of the route's current activation, if it is still being started.
    fn current_activation(&self, fp: Fingerprint) -> Option<Id> {
        match self.state(fp) {
            Some(RouteState::Activating { grant, .. }) => *grant,
            _ => None,
        }
    }

    fn is_grant_owner_conn(&self, conn: ConnId, activation_id: Id) -> bool {
        let Some(Party::Mcp(session)) = self.conns.get(&conn) else {
            return false;
        };
        self.grants
            .get(&activation_id)
            .is_some_and(|g| g.owner == *session)
    }

    fn retry_hint(&self, now: Instant, fp: Fingerprint) -> u64 {
        let wait = match self.state(fp) {
            Some(RouteState::PassThrough { retry_at }) => retry_at.saturating_duration_since(now),
            _ => DEFAULT_RETRY_AFTER,
        };
        u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)
    }

    fn start_probe(&mut self, worker: Id) {
        let Some(generation) = self.generations.get_mut(&worker) else {
            return;
        };
        if generation.status.is_revoked() {
            return;
        }
        self.next_probe += 1;
        generation.probe = Some(self.next_probe);
        self.timers.clear(Timer::Probe(worker));
        self.outputs.push_back(Output::Probe {
            worker_id: worker,
            probe: self.next_probe,
            endpoint: generation.endpoint.clone(),
            certificate_sha256: generation.certificate,
            secret: generation.secret,
        });
    }

    fn broadcast(&mut self, fp: Fingerprint, message: Message) {
        let Some(route) = self.routes.get(&fp) else {
            return;
        };
        let conns: Vec<ConnId> = route
            .sessions
            .iter()
            .filter_map(|s| self.sessions.get(s))
            .filter(|s| s.pending_persist.is_none())
            .filter_map(|s| s.conn)
            .collect();
        for conn in conns {
            self.send(conn, message.clone());
        }
    }

    fn send(&mut self, conn: ConnId, message: Message) {
        self.outputs.push_back(Output::Send { conn, message });
    }

    fn event(&mut self, event: Event) {
        self.outputs.push_back(Output::Event(event));
    }

    fn persist(&mut self) -> u64 {
        self.persist_seq += 1;
        self.outputs.push_back(Output::Persist {
            seq: self.persist_seq,
        });
        self.persist_seq
    }

    /// Refuses a connection that has not been accepted: `Refused`, close, and a log event.
    fn refuse(
        &mut self,
        conn: ConnId,
        role: Role,
        code: RefusedCode,
        fingerprint: Option<Fingerprint>,
    ) {
        self.event(Event::RegistrationRefused {
            conn,
            role,
            reason: code,
            fingerprint,
        });
        self.refuse_existing(conn, code);
    }

    /// Sends `Refused` and closes, forgetting the connection.
    fn refuse_existing(&mut self, conn: ConnId, code: RefusedCode) {
        self.refuse_existing_saying(conn, code, code.as_str());
    }

    /// [`Broker::refuse_existing`] with `text` for the peer's log beside the code.
    fn refuse_existing_saying(&mut self, conn: ConnId, code: RefusedCode, text: &str) {
        self.conns.remove(&conn);
        self.send(
            conn,
            Message::Refused(Refused {
                code: code.code(),
                text: Text::truncated(text),
                supported: SUPPORTED_PROTOCOLS,
            }),
        );
        self.outputs.push_back(Output::Close { conn });
    }
}

#[cfg(test)]
mod tests;
