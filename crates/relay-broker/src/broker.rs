//! The state machine. One `match` per input; every transition of §5.4 is an explicit
//! assignment of [`RouteState`] in one of the `enter_*` / `on_*` methods below.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use relay_proto::{
    ActivationCancelReason, Bytes32, Directive, DisconnectReason, FailureReason,
    Grant as WireGrant, Id, LaunchOutcome, McpRemovedReason, Message, PassThroughReason, Refused,
    RefusedCode, Registered, Role, RouteState as ViewState, SUPPORTED_PROTOCOLS, Text, WorkerHint,
    WorkerRemovedReason, WorkerState,
};
use subtle::ConstantTimeEq;

use crate::io::{Decision, Event, Input, Output, ProbeOutcome, RequestKind, Ticket, launch_status};
use crate::persist::{PersistedBinding, PersistedGeneration, PersistedState};
use crate::timers::TimerQueue;
use crate::types::{
    BindingView, BrokerConfig, ConnId, Digest, Entropy, Fingerprint, RouteView, WorkerView,
};

/// Retry-After for a 503 when no retry time is known (§3.5).
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);
/// Tombstones kept per identity, as a multiple of its token limit.
const TOMBSTONES_PER_TOKEN: usize = 4;
/// Readiness probe failures in a row that count as a failed probe (§5.1).
const PROBE_STRIKES: u8 = 2;

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
    /// Relaunches since the last ready worker, for `worker_relaunch_requested attempt`.
    attempt: u32,
    /// Requests in flight with this route's credentials (worker or pass-through).
    in_flight: u32,
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

#[derive(Debug)]
struct Binding {
    fingerprint: Fingerprint,
    last_use: Instant,
    tombstone_until: Option<Instant>,
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
    bindings: HashMap<Digest, Binding>,
    blocked: HashSet<Fingerprint>,
    sessions: HashMap<Id, Session>,
    conns: HashMap<ConnId, Party>,
    grants: HashMap<Id, Grant>,
    generations: HashMap<Id, Generation>,
    tickets: HashMap<u64, TicketEntry>,
    next_ticket: u64,
    next_probe: u64,
    next_used: u64,
    persist_seq: u64,
    last_use_dirty: bool,
    timers: TimerQueue<Timer>,
    outputs: VecDeque<Output>,
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
        Broker {
            config,
            entropy,
            routes: HashMap::new(),
            bindings: HashMap::new(),
            blocked: HashSet::new(),
            sessions: HashMap::new(),
            conns: HashMap::new(),
            grants: HashMap::new(),
            generations: HashMap::new(),
            tickets: HashMap::new(),
            next_ticket: 0,
            next_probe: 0,
            next_used: 0,
            persist_seq: 0,
            last_use_dirty: false,
            timers: TimerQueue::new(),
            outputs: VecDeque::new(),
        }
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    /// Loads persisted state at start-up (§5.7): bindings are valid at once; each persisted
    /// generation waits in `Recovering` for its worker to resume within the grace.
    pub fn restore(&mut self, now: Instant, state: PersistedState) {
        for b in state.bindings {
            if b.tombstone_until.is_some_and(|until| until <= now) {
                continue;
            }
            self.bindings.insert(
                b.digest,
                Binding {
                    fingerprint: b.fingerprint,
                    last_use: b.last_use,
                    tombstone_until: b.tombstone_until,
                },
            );
            if b.tombstone_until.is_none() {
                self.route_mut_or_create(b.fingerprint)
                    .digests
                    .push(b.digest);
            }
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
                    secret: Bytes32([0; 32]),
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
            let timer = if g.draining {
                Timer::Drain(g.fingerprint)
            } else {
                Timer::Recovery(g.fingerprint)
            };
            self.timers.set(timer, deadline);
        }
        self.timers
            .set(Timer::Flush, now + self.config.bindings_flush);
    }

    /// The state to persist: bindings, blocked fingerprints, live generations.
    pub fn snapshot(&self) -> PersistedState {
        let mut bindings: Vec<PersistedBinding> = self
            .bindings
            .iter()
            .map(|(digest, b)| PersistedBinding {
                digest: *digest,
                fingerprint: b.fingerprint,
                last_use: b.last_use,
                tombstone_until: b.tombstone_until,
            })
            .collect();
        bindings.sort_by_key(|b| b.digest);
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
            } => self.on_mcp_worker_exited(now, conn, activation_id),
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
            Input::WorkerReady { conn } => self.on_worker_ready(now, conn),
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

    // ----- MCP sessions -------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn on_mcp_register(
        &mut self,
        now: Instant,
        conn: ConnId,
        fp: Fingerprint,
        digest: Digest,
        instance: Id,
        peer: IpAddr,
        hint: Option<WorkerHint>,
    ) {
        if self.conns.contains_key(&conn) {
            return self.refuse(conn, Role::Mcp, RefusedCode::SessionLimit, Some(fp));
        }
        if self.blocked.contains(&fp) {
            return self.refuse(conn, Role::Mcp, RefusedCode::Blocked, Some(fp));
        }
        // The credential binding (§5.3).
        let previous = self.bindings.get(&digest);
        if let Some(binding) = previous {
            let expired = binding.tombstone_until.is_some_and(|until| until <= now);
            if binding.fingerprint != fp && !expired {
                return self.refuse(
                    conn,
                    Role::Mcp,
                    RefusedCode::CredentialBoundElsewhere,
                    Some(fp),
                );
            }
        }
        let new_binding =
            previous.is_none_or(|b| b.tombstone_until.is_some() || b.fingerprint != fp);
        // Every refusal is decided before anything changes.
        let route = self.routes.get(&fp);
        if route.is_some_and(|r| r.sessions.len() >= self.config.max_sessions_per_route) {
            return self.refuse(conn, Role::Mcp, RefusedCode::SessionLimit, Some(fp));
        }
        let evict_token = if new_binding
            && route.map_or(0, |r| r.digests.len()) >= self.config.max_tokens_per_identity
        {
            // The least recently registered digest without a live MCP (§5.3).
            let idle = route.and_then(|route| {
                route.digests.iter().copied().find(|d| {
                    !route
                        .sessions
                        .iter()
                        .any(|s| self.sessions.get(s).is_some_and(|s| s.digest == *d))
                })
            });
            match idle {
                Some(victim) => Some(victim),
                None => return self.refuse(conn, Role::Mcp, RefusedCode::TokenLimit, Some(fp)),
            }
        } else {
            None
        };
        let evict_route = if route.is_none() && self.routes.len() >= self.config.max_routes {
            let victim = self
                .routes
                .iter()
                .filter(|(_, r)| r.sessions.is_empty() && r.state == RouteState::Empty)
                .min_by_key(|(_, r)| r.used)
                .map(|(fp, _)| *fp);
            match victim {
                Some(victim) => Some(victim),
                None => return self.refuse(conn, Role::Mcp, RefusedCode::RouteTableFull, Some(fp)),
            }
        } else {
            None
        };
        if let Some(victim) = evict_route {
            self.evict_route(now, victim);
        }
        if let Some(victim) = evict_token {
            self.tombstone(now, victim);
            self.event(Event::CredentialEvicted {
                fingerprint: fp,
                digest: victim,
            });
        }
        let conflict = self.routes.get(&fp).and_then(|r| {
            r.sessions
                .iter()
                .filter_map(|s| self.sessions.get(s))
                .find(|s| s.conn.is_some() && s.peer != peer)
                .map(|s| s.peer)
        });
        if let Some(other_peer) = conflict {
            self.event(Event::MachineIdentityConflict {
                fingerprint: fp,
                peer,
                other_peer,
            });
        }
        let mut replaced = None;
        if new_binding {
            replaced = self.bindings.insert(
                digest,
                Binding {
                    fingerprint: fp,
                    last_use: now,
                    tombstone_until: None,
                },
            );
            self.route_mut_or_create(fp).digests.push(digest);
        }
        self.touch_route(fp);
        let session_id = self.entropy.id();
        let resume_token = self.entropy.secret();
        let pending_persist = new_binding.then(|| self.persist());
        self.sessions.insert(
            session_id,
            Session {
                fingerprint: fp,
                digest,
                resume_token,
                instance,
                peer,
                conn: Some(conn),
                disconnected_at: None,
                hint,
                pending_persist,
                replaced,
            },
        );
        self.conns.insert(conn, Party::Mcp(session_id));
        self.event(Event::McpConnected {
            fingerprint: fp,
            instance,
            peer,
        });
        if pending_persist.is_none() {
            self.attach_session(now, session_id);
        }
    }

    /// Makes a registered session a reference of its route and answers it `Registered`
    /// with the route's current directive (§5.4, "an MCP registers" rows).
    fn attach_session(&mut self, now: Instant, session_id: Id) {
        let Some(session) = self.sessions.get(&session_id) else {
            return;
        };
        let (fp, instance) = (session.fingerprint, session.instance);
        let route = self.route_mut_or_create(fp);
        route.sessions.insert(session_id);
        let references = route.sessions.len() as u32;
        self.event(Event::McpAdded {
            fingerprint: fp,
            instance,
            references,
        });
        let directive = self.directive_for(now, fp, session_id, true);
        self.send_registered(session_id, directive);
    }

    /// The directive a (re)connecting session gets, entering `Activating` from `Empty` and
    /// handing it the grant if the route waits for one.
    fn directive_for(
        &mut self,
        now: Instant,
        fp: Fingerprint,
        session_id: Id,
        new_reference: bool,
    ) -> Directive {
        if self.config.pass_through {
            return Directive::UsePassThrough;
        }
        let retry_hint = self.retry_hint(now, fp);
        match self.state(fp).cloned().unwrap_or(RouteState::Empty) {
            RouteState::Empty => self.enter_activating(now, fp, Some(session_id)).map_or(
                Directive::WaitForWorker {
                    retry_after_ms: retry_hint,
                },
                Directive::LaunchWorker,
            ),
            RouteState::Activating { grant: None, .. } => {
                self.issue_grant(fp, Some(session_id)).map_or(
                    Directive::WaitForWorker {
                        retry_after_ms: retry_hint,
                    },
                    Directive::LaunchWorker,
                )
            }
            RouteState::Activating { .. } | RouteState::Recovering { .. } => {
                if let Some(RouteState::Recovering { worker, .. }) = self.state(fp).cloned()
                    && self
                        .generations
                        .get(&worker)
                        .is_some_and(|g| g.conn.is_some() && g.probe.is_none())
                {
                    // A resumed generation waits for a reference and a fresh probe (§5.7).
                    self.start_probe(worker);
                }
                Directive::WaitForWorker {
                    retry_after_ms: retry_hint,
                }
            }
            RouteState::Ready { .. } if new_reference => Directive::ReuseWorker,
            RouteState::Ready { .. } => Directive::RouteReady,
            RouteState::PassThrough { .. } => Directive::UsePassThrough,
            RouteState::Draining { .. } => {
                if let RouteState::Draining { pending_launch, .. } = &mut self.route_mut(fp).state {
                    *pending_launch = true;
                }
                Directive::WaitForWorker {
                    retry_after_ms: retry_hint,
                }
            }
        }
    }

    fn send_registered(&mut self, session_id: Id, directive: Directive) {
        let Some(session) = self.sessions.get(&session_id) else {
            return;
        };
        let Some(conn) = session.conn else { return };
        let reuse = directive == Directive::ReuseWorker;
        self.send(
            conn,
            Message::Registered(Registered::Mcp {
                session_id,
                resume_token: session.resume_token,
                directive,
                timers: self.config.timers,
            }),
        );
        if reuse {
            self.send(conn, Message::RouteReady);
        }
    }

    fn on_mcp_resume(
        &mut self,
        now: Instant,
        conn: ConnId,
        fp: Fingerprint,
        session_id: Id,
        resume_token: Bytes32,
        peer: IpAddr,
    ) {
        if self.conns.contains_key(&conn) {
            return self.refuse(conn, Role::Mcp, RefusedCode::SessionLimit, Some(fp));
        }
        if self.blocked.contains(&fp) {
            return self.refuse(conn, Role::Mcp, RefusedCode::Blocked, Some(fp));
        }
        let valid = self.sessions.get(&session_id).is_some_and(|s| {
            s.fingerprint == fp
                && s.pending_persist.is_none()
                && bool::from(s.resume_token.0.ct_eq(&resume_token.0))
        });
        if !valid {
            return self.refuse(conn, Role::Mcp, RefusedCode::SessionUnknown, Some(fp));
        }
        let mut disconnected = Duration::ZERO;
        let old = self.sessions.get_mut(&session_id).and_then(|s| {
            s.peer = peer;
            if let Some(at) = s.disconnected_at.take() {
                disconnected = now.saturating_duration_since(at);
            }
            s.conn.replace(conn)
        });
        if let Some(old) = old {
            // A stale connection of the same session: the new one replaces it.
            self.conns.remove(&old);
            self.outputs.push_back(Output::Close { conn: old });
        }
        self.conns.insert(conn, Party::Mcp(session_id));
        self.timers.clear(Timer::Grace(session_id));
        let instance = self
            .sessions
            .get(&session_id)
            .map_or(session_id, |s| s.instance);
        self.event(Event::McpReconnected {
            fingerprint: fp,
            instance,
            disconnected,
        });
        let directive = self.directive_for(now, fp, session_id, false);
        self.send_registered(session_id, directive);
    }

    fn on_mcp_release(&mut self, now: Instant, conn: ConnId) {
        if let Some(Party::Mcp(session_id)) = self.conns.get(&conn).copied() {
            let fp = self.sessions.get(&session_id).map(|s| s.fingerprint);
            self.remove_session(now, session_id, McpRemovedReason::Released);
            if let Some(fp) = fp {
                self.conns.insert(conn, Party::Released(fp));
            }
        }
    }

    /// A session stops being a reference: its grant is cancelled, and the route reacts to
    /// losing a reference (§5.4).
    fn remove_session(&mut self, now: Instant, session_id: Id, reason: McpRemovedReason) {
        let Some(session) = self.sessions.remove(&session_id) else {
            return;
        };
        self.timers.clear(Timer::Grace(session_id));
        if let Some(conn) = session.conn {
            self.conns.remove(&conn);
        }
        let fp = session.fingerprint;
        let Some(route) = self.routes.get_mut(&fp) else {
            return;
        };
        let was_reference = route.sessions.remove(&session_id);
        let references = route.sessions.len() as u32;
        if was_reference {
            self.event(Event::McpRemoved {
                fingerprint: fp,
                instance: session.instance,
                references,
                reason,
            });
        }
        if references == 0 {
            self.on_last_reference_left(now, fp);
        } else {
            self.reissue_if_owner_left(fp, session_id, ActivationCancelReason::OwnerReleased);
        }
    }

    /// When the grant owner is gone but other references remain, the grant is cancelled and
    /// a fresh one goes at once to another connected MCP (§5.4).
    fn reissue_if_owner_left(
        &mut self,
        fp: Fingerprint,
        session_id: Id,
        reason: ActivationCancelReason,
    ) {
        let Some(RouteState::Activating {
            grant: Some(grant), ..
        }) = self.state(fp).cloned()
        else {
            return;
        };
        if self
            .grants
            .get(&grant)
            .is_some_and(|g| g.owner == session_id)
        {
            self.cancel_grant(grant, reason);
            self.issue_grant(fp, None);
        }
    }

    fn on_last_reference_left(&mut self, now: Instant, fp: Fingerprint) {
        match self.state(fp).cloned() {
            Some(RouteState::Ready { worker }) => {
                let deadline = now + self.config.drain();
                self.route_mut(fp).state = RouteState::Draining {
                    worker,
                    deadline,
                    pending_launch: false,
                };
                self.timers.clear(Timer::Probe(worker));
                self.timers
                    .set(Timer::Drain(fp), deadline + self.config.reconnect_grace());
                if let Some(conn) = self.generations.get(&worker).and_then(|g| g.conn) {
                    self.send(
                        conn,
                        Message::Drain {
                            deadline_ms: self.config.timers.drain_ms,
                        },
                    );
                }
                let in_flight = self.generations.get(&worker).map_or(0, |g| g.in_flight);
                self.event(Event::WorkerDrainStarted {
                    fingerprint: fp,
                    worker_id: worker,
                    in_flight,
                });
                self.persist();
            }
            Some(RouteState::Activating { grant, worker, .. }) => {
                if let Some(grant) = grant {
                    self.cancel_grant(grant, ActivationCancelReason::RouteEmptied);
                }
                if let Some(worker) = worker {
                    self.revoke_generation(worker, WorkerRemovedReason::Revoked);
                }
                self.enter_empty(fp);
            }
            Some(RouteState::Recovering { worker, .. }) => {
                self.revoke_generation(worker, WorkerRemovedReason::Revoked);
                self.enter_empty(fp);
            }
            Some(RouteState::PassThrough { .. }) => self.enter_empty(fp),
            Some(RouteState::Draining { .. }) => {
                if let RouteState::Draining { pending_launch, .. } = &mut self.route_mut(fp).state {
                    *pending_launch = false;
                }
            }
            Some(RouteState::Empty) | None => {}
        }
    }

    fn on_mcp_activation_failed(
        &mut self,
        now: Instant,
        conn: ConnId,
        activation_id: Id,
        reason: FailureReason,
    ) {
        if !self.is_grant_owner_conn(conn, activation_id) {
            return;
        }
        let Some(grant) = self.grants.get(&activation_id) else {
            return;
        };
        let fp = grant.fingerprint;
        if self.current_activation(fp) == Some(activation_id) {
            self.activation_failed(now, fp, reason);
        }
    }

    fn on_mcp_worker_exited(&mut self, now: Instant, conn: ConnId, activation_id: Id) {
        let fp = match self.conns.get(&conn) {
            Some(Party::Mcp(s)) => self.sessions.get(s).map(|s| s.fingerprint),
            Some(Party::Released(fp)) => Some(*fp),
            _ => None,
        };
        let Some(grant) = self.grants.get(&activation_id) else {
            return;
        };
        if Some(grant.fingerprint) != fp {
            return;
        }
        match grant.state {
            GrantState::Consumed { worker } => {
                self.on_worker_gone(now, worker, FailureReason::WorkerExitedBeforeReady)
            }
            GrantState::Issued => {
                let fp = grant.fingerprint;
                if self.current_activation(fp) == Some(activation_id) {
                    self.activation_failed(now, fp, FailureReason::WorkerExitedBeforeReady);
                }
            }
            GrantState::Cancelled => {}
        }
    }

    fn on_launch_status(&mut self, conn: ConnId, activation_id: Id) {
        let fp = match self.conns.get(&conn) {
            Some(Party::Mcp(s)) => self.sessions.get(s).map(|s| s.fingerprint),
            Some(Party::Released(fp)) => Some(*fp),
            _ => None,
        };
        let outcome = match self.grants.get(&activation_id) {
            Some(grant) if Some(grant.fingerprint) == fp => match grant.state {
                GrantState::Issued => LaunchOutcome::Pending,
                GrantState::Cancelled => LaunchOutcome::Cancelled,
                GrantState::Consumed { worker } => match self.generations.get(&worker) {
                    Some(g) => match g.status {
                        GenStatus::Starting { .. } => LaunchOutcome::Pending,
                        GenStatus::Live { .. } => LaunchOutcome::Published,
                        GenStatus::Revoked { was_live: false } => LaunchOutcome::Cancelled,
                        GenStatus::Revoked { was_live: true } => LaunchOutcome::Superseded,
                    },
                    None => LaunchOutcome::Superseded,
                },
            },
            _ => LaunchOutcome::Unknown,
        };
        self.send(conn, launch_status(activation_id, outcome));
    }

    // ----- workers ------------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn on_worker_register(
        &mut self,
        now: Instant,
        conn: ConnId,
        fp: Fingerprint,
        activation_id: Id,
        token: Bytes32,
        endpoint: String,
        certificate: Bytes32,
    ) {
        if self.conns.contains_key(&conn) {
            return self.refuse(conn, Role::Worker, RefusedCode::GrantReplayed, Some(fp));
        }
        if self.config.pass_through {
            return self.refuse(conn, Role::Worker, RefusedCode::PassThroughMode, Some(fp));
        }
        let Some(grant) = self.grants.get(&activation_id) else {
            return self.refuse(conn, Role::Worker, RefusedCode::GrantUnknown, Some(fp));
        };
        if !bool::from(grant.token.0.ct_eq(&token.0)) {
            return self.refuse(conn, Role::Worker, RefusedCode::GrantUnknown, Some(fp));
        }
        match grant.state {
            GrantState::Issued => {}
            GrantState::Consumed { .. } => {
                return self.refuse(conn, Role::Worker, RefusedCode::GrantReplayed, Some(fp));
            }
            GrantState::Cancelled => {
                return self.refuse(conn, Role::Worker, RefusedCode::GrantUnknown, Some(fp));
            }
        }
        if grant.fingerprint != fp {
            return self.refuse(
                conn,
                Role::Worker,
                RefusedCode::GrantIdentityMismatch,
                Some(fp),
            );
        }
        let worker_id = self.entropy.id();
        let secret = self.entropy.secret();
        if let Some(grant) = self.grants.get_mut(&activation_id) {
            grant.state = GrantState::Consumed { worker: worker_id };
        }
        self.generations.insert(
            worker_id,
            Generation {
                fingerprint: fp,
                activation_id: Some(activation_id),
                endpoint,
                certificate,
                secret,
                conn: Some(conn),
                status: GenStatus::Starting {
                    ready_reported: false,
                },
                probe: None,
                strikes: 0,
                in_flight: 0,
                served: 0,
            },
        );
        if let RouteState::Activating { worker, .. } = &mut self.route_mut(fp).state {
            *worker = Some(worker_id);
        }
        self.conns.insert(conn, Party::Worker(worker_id));
        self.send(
            conn,
            Message::Registered(Registered::Worker {
                worker_id,
                generation_secret: secret,
                drain_deadline_ms: None,
                timers: self.config.timers,
            }),
        );
        self.event(Event::WorkerControlConnected {
            conn,
            fingerprint: fp,
            worker_id,
        });
        let _ = now;
    }

    fn on_worker_resume(
        &mut self,
        now: Instant,
        conn: ConnId,
        fp: Fingerprint,
        worker_id: Id,
        certificate: Bytes32,
    ) {
        if self.conns.contains_key(&conn) {
            return self.refuse(conn, Role::Worker, RefusedCode::GenerationRevoked, Some(fp));
        }
        let matches = self.generations.get(&worker_id).is_some_and(|g| {
            g.fingerprint == fp && g.certificate == certificate && !g.status.is_revoked()
        });
        if !matches {
            return self.refuse(conn, Role::Worker, RefusedCode::GenerationRevoked, Some(fp));
        }
        let secret = self.entropy.secret();
        let old = self.generations.get_mut(&worker_id).and_then(|g| {
            g.secret = secret;
            g.strikes = 0;
            if let GenStatus::Live { resumed } = &mut g.status {
                *resumed = true;
            }
            g.conn.replace(conn)
        });
        if let Some(old) = old {
            self.conns.remove(&old);
            self.outputs.push_back(Output::Close { conn: old });
        }
        self.conns.insert(conn, Party::Worker(worker_id));
        // Requests decided before the resume carry the old secret; start afresh.
        self.outputs.push_back(Output::Forget { worker_id });
        let drain_deadline_ms = match self.state(fp) {
            Some(RouteState::Draining { deadline, .. }) => Some(
                u64::try_from(deadline.saturating_duration_since(now).as_millis())
                    .unwrap_or(u64::MAX),
            ),
            _ => None,
        };
        self.send(
            conn,
            Message::Registered(Registered::Worker {
                worker_id,
                generation_secret: secret,
                drain_deadline_ms,
                timers: self.config.timers,
            }),
        );
        match self.state(fp).cloned() {
            Some(RouteState::Recovering { worker, .. }) if worker == worker_id => {
                self.start_probe(worker_id);
            }
            Some(RouteState::Activating {
                worker: Some(worker),
                ..
            }) if worker == worker_id => {
                let ready = self.generations.get(&worker_id).is_some_and(|g| {
                    matches!(
                        g.status,
                        GenStatus::Starting {
                            ready_reported: true
                        }
                    )
                });
                if ready {
                    self.start_probe(worker_id);
                }
            }
            _ => {}
        }
    }

    fn on_worker_ready(&mut self, now: Instant, conn: ConnId) {
        let Some(Party::Worker(worker)) = self.conns.get(&conn).copied() else {
            return;
        };
        let Some(generation) = self.generations.get_mut(&worker) else {
            return;
        };
        if let GenStatus::Starting { ready_reported } = &mut generation.status {
            *ready_reported = true;
        }
        let fp = generation.fingerprint;
        if matches!(self.state(fp), Some(RouteState::Activating { worker: Some(w), .. }) if *w == worker)
        {
            self.start_probe(worker);
        }
        let _ = now;
    }

    /// A starting worker reported that it cannot start, or its control session failed.
    fn on_starting_worker_failed(&mut self, now: Instant, worker: Id, reason: FailureReason) {
        let Some(generation) = self.generations.get(&worker) else {
            return;
        };
        let fp = generation.fingerprint;
        if matches!(self.state(fp), Some(RouteState::Activating { worker: Some(w), .. }) if *w == worker)
        {
            self.activation_failed(now, fp, reason);
        }
    }

    fn on_disconnected(&mut self, now: Instant, conn: ConnId, reason: DisconnectReason) {
        match self.conns.remove(&conn) {
            Some(Party::Mcp(session_id)) => {
                let Some(session) = self.sessions.get_mut(&session_id) else {
                    return;
                };
                if session.conn != Some(conn) {
                    return;
                }
                session.conn = None;
                session.disconnected_at = Some(now);
                let (fp, instance) = (session.fingerprint, session.instance);
                if session.pending_persist.is_some() {
                    // Never answered: it was not yet a reference.
                    self.sessions.remove(&session_id);
                    return;
                }
                self.event(Event::McpDisconnected {
                    fingerprint: fp,
                    instance,
                    reason: reason.for_mcp(),
                });
                self.timers.set(
                    Timer::Grace(session_id),
                    now + self.config.reconnect_grace(),
                );
                // It keeps its reference but receives no grant meanwhile (§5.4).
                self.reissue_if_owner_left(
                    fp,
                    session_id,
                    ActivationCancelReason::OwnerDisconnected,
                );
            }
            Some(Party::Worker(worker)) => {
                let Some(generation) = self.generations.get_mut(&worker) else {
                    return;
                };
                if generation.conn != Some(conn) {
                    return;
                }
                generation.conn = None;
                let fp = generation.fingerprint;
                self.event(Event::WorkerControlDisconnected {
                    fingerprint: fp,
                    worker_id: worker,
                    reason: reason.for_worker(),
                });
                match self.state(fp).cloned() {
                    Some(RouteState::Ready { worker: w }) if w == worker => {
                        self.event(Event::WorkerControlLost {
                            fingerprint: fp,
                            worker_id: worker,
                        });
                        self.enter_recovering(now, fp, worker);
                        // Refused, or another certificate, is evidence of death.
                        self.start_probe(worker);
                    }
                    Some(RouteState::Activating {
                        worker: Some(w), ..
                    }) if w == worker => {
                        self.activation_failed(now, fp, FailureReason::WorkerControlLost);
                    }
                    Some(RouteState::Draining {
                        worker: w,
                        pending_launch,
                        ..
                    }) if w == worker => {
                        // A draining worker does not resume (§5.4).
                        self.retire_generation(worker, WorkerRemovedReason::Drained);
                        self.after_drain(now, fp, pending_launch);
                    }
                    _ => {}
                }
            }
            Some(Party::Released(_)) | None => {}
        }
    }

    fn on_probe_result(&mut self, now: Instant, worker: Id, probe: u64, outcome: ProbeOutcome) {
        let Some(generation) = self.generations.get_mut(&worker) else {
            return;
        };
        if generation.probe != Some(probe) || generation.status.is_revoked() {
            return;
        }
        generation.probe = None;
        let fp = generation.fingerprint;
        let connected = generation.conn.is_some();
        match (self.state(fp).cloned(), outcome) {
            (
                Some(RouteState::Activating {
                    worker: Some(w), ..
                }),
                ProbeOutcome::Ready,
            ) if w == worker => {
                self.publish(now, fp, worker);
            }
            (
                Some(RouteState::Activating {
                    worker: Some(w),
                    probe_failing_since,
                    ..
                }),
                ProbeOutcome::Failed,
            ) if w == worker => {
                let since = probe_failing_since.unwrap_or(now);
                if now.saturating_duration_since(since) >= self.config.startup_progress() {
                    self.activation_failed(now, fp, FailureReason::ReadinessProbeFailed);
                } else {
                    if let RouteState::Activating {
                        probe_failing_since,
                        ..
                    } = &mut self.route_mut(fp).state
                    {
                        *probe_failing_since = Some(since);
                    }
                    self.timers.set(
                        Timer::Probe(worker),
                        now + self.config.activation_probe_retry,
                    );
                }
            }
            (
                Some(RouteState::Activating {
                    worker: Some(w), ..
                }),
                ProbeOutcome::Gone,
            ) if w == worker => {
                self.activation_failed(now, fp, FailureReason::ReadinessProbeFailed);
            }
            (Some(RouteState::Ready { worker: w }), outcome) if w == worker => match outcome {
                ProbeOutcome::Ready => {
                    if let Some(g) = self.generations.get_mut(&worker) {
                        g.strikes = 0;
                    }
                    self.timers
                        .set(Timer::Probe(worker), now + self.config.probe_interval);
                }
                ProbeOutcome::Failed => {
                    let strikes = self.generations.get_mut(&worker).map_or(0, |g| {
                        g.strikes += 1;
                        g.strikes
                    });
                    if strikes >= PROBE_STRIKES {
                        self.event(Event::WorkerReadinessFailed {
                            fingerprint: fp,
                            worker_id: worker,
                            consecutive_failures: u32::from(strikes),
                        });
                        self.enter_recovering(now, fp, worker);
                        self.timers.set(
                            Timer::Probe(worker),
                            now + self.config.activation_probe_retry,
                        );
                    } else {
                        self.timers.set(
                            Timer::Probe(worker),
                            now + self.config.activation_probe_retry,
                        );
                    }
                }
                ProbeOutcome::Gone => self.on_worker_gone(now, worker, FailureReason::WorkerGone),
            },
            (Some(RouteState::Recovering { worker: w, .. }), outcome) if w == worker => {
                match outcome {
                    ProbeOutcome::Ready => {
                        let live = self.routes.get(&fp).is_some_and(|r| !r.sessions.is_empty());
                        if connected && live {
                            let resumed = self.generations.get(&worker).is_some_and(|g| {
                                matches!(g.status, GenStatus::Live { resumed: true })
                            });
                            let since = match self.state(fp) {
                                Some(RouteState::Recovering { deadline, .. }) => {
                                    deadline.checked_sub(self.config.reconnect_grace())
                                }
                                _ => None,
                            };
                            let disconnected = since
                                .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
                            // Only a worker that had to resume reconnected (§5.4).
                            if resumed {
                                self.event(Event::WorkerControlReconnected {
                                    fingerprint: fp,
                                    worker_id: worker,
                                    disconnected,
                                });
                            }
                            self.publish(now, fp, worker);
                        }
                        // Not connected or no reference yet: a resume or a registration probes again.
                    }
                    ProbeOutcome::Failed => {
                        self.timers.set(
                            Timer::Probe(worker),
                            now + self.config.activation_probe_retry,
                        );
                    }
                    ProbeOutcome::Gone => {
                        self.on_worker_gone(now, worker, FailureReason::WorkerGone)
                    }
                }
            }
            (
                Some(RouteState::Draining {
                    worker: w,
                    pending_launch,
                    ..
                }),
                ProbeOutcome::Gone,
            ) if w == worker => {
                self.retire_generation(worker, WorkerRemovedReason::Drained);
                self.after_drain(now, fp, pending_launch);
            }
            _ => {}
        }
    }

    /// Positive evidence that a worker is gone (its MCP saw it exit, its endpoint refused,
    /// or it said `Stopping`).
    fn on_worker_gone(&mut self, now: Instant, worker: Id, reason: FailureReason) {
        let Some(generation) = self.generations.get(&worker) else {
            return;
        };
        let fp = generation.fingerprint;
        let served = generation.served;
        match self.state(fp).cloned() {
            Some(RouteState::Activating {
                worker: Some(w), ..
            }) if w == worker => {
                self.activation_failed(now, fp, reason);
            }
            Some(RouteState::Ready { worker: w })
            | Some(RouteState::Recovering { worker: w, .. })
                if w == worker =>
            {
                self.revoke_generation(worker, WorkerRemovedReason::Crashed);
                if served > 0 {
                    // No backoff for a crash of a worker that served (§5.4).
                    self.relaunch_or_empty(now, fp);
                } else if self.routes.get(&fp).is_some_and(|r| !r.sessions.is_empty()) {
                    let activation_id = self.generations.get(&worker).and_then(|g| g.activation_id);
                    self.enter_pass_through(
                        now,
                        fp,
                        activation_id,
                        FailureReason::WorkerExitedBeforeServing,
                    );
                } else {
                    self.enter_empty(fp);
                }
            }
            Some(RouteState::Draining {
                worker: w,
                pending_launch,
                ..
            }) if w == worker => {
                self.retire_generation(worker, WorkerRemovedReason::Drained);
                self.after_drain(now, fp, pending_launch);
            }
            _ => {}
        }
    }

    // ----- transitions --------------------------------------------------------------------

    /// `Activating`, with a grant for `prefer` (or any connected MCP). Returns the grant when
    /// it went to `prefer`, for embedding in its `Registered`.
    fn enter_activating(
        &mut self,
        now: Instant,
        fp: Fingerprint,
        prefer: Option<Id>,
    ) -> Option<WireGrant> {
        self.clear_route_timers(fp);
        self.route_mut(fp).state = RouteState::Activating {
            grant: None,
            since: now,
            worker: None,
            probe_failing_since: None,
        };
        self.timers
            .set(Timer::StartupTick(fp), now + self.config.startup_progress());
        self.issue_grant(fp, prefer)
    }

    /// Gives the waiting route's grant to `prefer` if connected, else to the first connected
    /// MCP of the route. A grant sent to another MCP goes out as `LaunchWorker`.
    fn issue_grant(&mut self, fp: Fingerprint, prefer: Option<Id>) -> Option<WireGrant> {
        let connected = |b: &Broker, s: &Id| {
            b.sessions
                .get(s)
                .is_some_and(|s| s.conn.is_some() && s.pending_persist.is_none())
        };
        let route = self.routes.get(&fp)?;
        let owner = prefer
            .filter(|s| route.sessions.contains(s) && connected(self, s))
            .or_else(|| route.sessions.iter().find(|s| connected(self, s)).copied())?;
        let activation_id = self.entropy.id();
        let token = self.entropy.secret();
        let hint = self.sessions.get(&owner).and_then(|s| s.hint.clone());
        let (bind_ip, port, advertise_address) = match hint {
            Some(hint) => ([0, 0, 0, 0], hint.port.unwrap_or(0), hint.advertise_address),
            None => ([127, 0, 0, 1], 0, None),
        };
        let wire = WireGrant {
            activation_id,
            activation_token: token,
            bind_ip,
            port,
            advertise_address,
        };
        self.grants.insert(
            activation_id,
            Grant {
                token,
                fingerprint: fp,
                owner,
                state: GrantState::Issued,
            },
        );
        if let RouteState::Activating { grant, .. } = &mut self.route_mut(fp).state {
            *grant = Some(activation_id);
        }
        let owner_instance = self.sessions.get(&owner).map_or(owner, |s| s.instance);
        let attempt = self.routes.get(&fp).map_or(0, |r| r.attempt);
        self.event(Event::WorkerStaged {
            fingerprint: fp,
            activation_id,
            owner_instance,
            attempt,
        });
        if Some(owner) == prefer {
            return Some(wire);
        }
        if let Some(conn) = self.sessions.get(&owner).and_then(|s| s.conn) {
            self.send(conn, Message::LaunchWorker(wire));
        }
        None
    }

    fn cancel_grant(&mut self, activation_id: Id, reason: ActivationCancelReason) {
        let Some(grant) = self.grants.get_mut(&activation_id) else {
            return;
        };
        let fp = grant.fingerprint;
        match grant.state {
            GrantState::Issued => grant.state = GrantState::Cancelled,
            GrantState::Consumed { worker } => {
                if self
                    .generations
                    .get(&worker)
                    .is_some_and(|g| g.status.is_starting())
                {
                    self.revoke_generation(worker, WorkerRemovedReason::Revoked);
                }
            }
            GrantState::Cancelled => return,
        }
        if let RouteState::Activating { grant, worker, .. } = &mut self.route_mut(fp).state
            && *grant == Some(activation_id)
        {
            *grant = None;
            *worker = None;
        }
        self.event(Event::WorkerActivationCancelled {
            fingerprint: fp,
            activation_id,
            reason,
        });
    }

    fn activation_failed(&mut self, now: Instant, fp: Fingerprint, reason: FailureReason) {
        let mut activation_id = None;
        if let Some(RouteState::Activating { grant, worker, .. }) = self.state(fp).cloned() {
            activation_id = grant;
            if let Some(worker) = worker {
                self.revoke_generation(worker, WorkerRemovedReason::Crashed);
            }
            if let Some(grant) = grant
                && let Some(g) = self.grants.get_mut(&grant)
                && g.state == GrantState::Issued
            {
                g.state = GrantState::Cancelled;
            }
        }
        self.enter_pass_through(now, fp, activation_id, reason);
    }

    /// `PassThrough` until `now + backoff`; the backoff doubles up to its cap.
    fn enter_pass_through(
        &mut self,
        now: Instant,
        fp: Fingerprint,
        activation_id: Option<Id>,
        reason: FailureReason,
    ) {
        let base = BrokerConfig::ms(self.config.timers.retry_base_ms);
        let cap = BrokerConfig::ms(self.config.timers.retry_cap_ms);
        self.clear_route_timers(fp);
        let route = self.route_mut(fp);
        let delay = if route.backoff.is_zero() {
            base
        } else {
            route.backoff
        };
        route.backoff = (delay * 2).min(cap);
        let retry_at = now + delay;
        route.state = RouteState::PassThrough { retry_at };
        let attempt = route.attempt;
        self.timers.set(Timer::Retry(fp), retry_at);
        self.event(Event::WorkerActivationFailed {
            fingerprint: fp,
            activation_id,
            reason,
            retry_after: delay,
            attempt,
        });
        self.broadcast(fp, Message::UsePassThrough);
    }

    fn publish(&mut self, now: Instant, fp: Fingerprint, worker: Id) {
        let since = match self.state(fp) {
            Some(RouteState::Activating { since, .. }) => Some(*since),
            _ => None,
        };
        self.clear_route_timers(fp);
        let route = self.route_mut(fp);
        route.state = RouteState::Ready { worker };
        route.backoff = Duration::ZERO;
        route.attempt = 0;
        if let Some(g) = self.generations.get_mut(&worker) {
            g.status = GenStatus::Live { resumed: false };
            g.strikes = 0;
        }
        self.timers
            .set(Timer::Probe(worker), now + self.config.probe_interval);
        if let Some(since) = since {
            let activation_id = self.generations.get(&worker).and_then(|g| g.activation_id);
            self.event(Event::WorkerAdded {
                fingerprint: fp,
                worker_id: worker,
                activation_id,
                startup_elapsed: now.saturating_duration_since(since),
            });
        }
        self.event(Event::WorkerReady {
            fingerprint: fp,
            worker_id: worker,
        });
        self.broadcast(fp, Message::RouteReady);
        self.persist();
    }

    fn enter_recovering(&mut self, now: Instant, fp: Fingerprint, worker: Id) {
        let deadline = now + self.config.reconnect_grace();
        self.clear_route_timers(fp);
        self.route_mut(fp).state = RouteState::Recovering { worker, deadline };
        self.timers.set(Timer::Recovery(fp), deadline);
        self.event(Event::WorkerRecoveryStarted {
            fingerprint: fp,
            worker_id: worker,
        });
    }

    fn enter_empty(&mut self, fp: Fingerprint) {
        self.clear_route_timers(fp);
        if let Some(route) = self.routes.get_mut(&fp) {
            route.state = RouteState::Empty;
        }
    }

    /// After a generation died or recovery failed: relaunch at once through a connected MCP
    /// when the route has references, else `Empty`.
    fn relaunch_or_empty(&mut self, now: Instant, fp: Fingerprint) {
        if self.routes.get(&fp).is_some_and(|r| !r.sessions.is_empty()) {
            self.enter_activating(now, fp, None);
        } else {
            self.enter_empty(fp);
        }
    }

    fn after_drain(&mut self, now: Instant, fp: Fingerprint, pending_launch: bool) {
        self.enter_empty(fp);
        if pending_launch && self.routes.get(&fp).is_some_and(|r| !r.sessions.is_empty()) {
            self.enter_activating(now, fp, None);
        }
    }

    /// The generation is done (drained or revoked): it never returns to service.
    fn retire_generation(&mut self, worker: Id, reason: WorkerRemovedReason) {
        let Some(generation) = self.generations.get_mut(&worker) else {
            return;
        };
        let was_live = match generation.status {
            GenStatus::Revoked { .. } => return,
            GenStatus::Starting { .. } => false,
            GenStatus::Live { .. } => true,
        };
        generation.status = GenStatus::Revoked { was_live };
        let fp = generation.fingerprint;
        self.timers.clear(Timer::Probe(worker));
        self.outputs.push_back(Output::Forget { worker_id: worker });
        if was_live {
            // Only a published worker is removed from service and from the ledger.
            self.event(Event::WorkerRemoved {
                fingerprint: fp,
                worker_id: worker,
                reason,
            });
            self.persist();
        }
    }

    /// Retires the generation and tells its worker, if connected, that it is done.
    fn revoke_generation(&mut self, worker: Id, reason: WorkerRemovedReason) {
        let conn = self
            .generations
            .get_mut(&worker)
            .and_then(|g| g.conn.take());
        self.retire_generation(worker, reason);
        if let Some(conn) = conn {
            self.refuse_existing(conn, RefusedCode::GenerationRevoked);
        }
    }

    fn evict_route(&mut self, now: Instant, fp: Fingerprint) {
        if let Some(route) = self.routes.remove(&fp) {
            for digest in route.digests {
                self.bindings.insert(
                    digest,
                    Binding {
                        fingerprint: fp,
                        last_use: now,
                        tombstone_until: Some(now + self.config.binding_tombstone),
                    },
                );
            }
            self.clear_route_timers(fp);
            self.event(Event::RouteEvicted { fingerprint: fp });
            self.persist();
        }
    }

    fn tombstone(&mut self, now: Instant, digest: Digest) {
        let Some(binding) = self.bindings.get_mut(&digest) else {
            return;
        };
        binding.tombstone_until = Some(now + self.config.binding_tombstone);
        let fp = binding.fingerprint;
        if let Some(route) = self.routes.get_mut(&fp) {
            route.digests.retain(|d| *d != digest);
        }
        // A peer minting tokens for its own identity must not grow the table without bound:
        // beyond the cap, the tombstones of that identity that expire first go.
        let cap = self.config.max_tokens_per_identity * TOMBSTONES_PER_TOKEN;
        let mut tombstones: Vec<(Instant, Digest)> = self
            .bindings
            .iter()
            .filter(|(_, b)| b.fingerprint == fp)
            .filter_map(|(d, b)| b.tombstone_until.map(|until| (until, *d)))
            .collect();
        if tombstones.len() > cap {
            tombstones.sort();
            for (_, digest) in &tombstones[..tombstones.len() - cap] {
                self.bindings.remove(digest);
            }
        }
    }

    /// Forgets what can no longer matter: expired tombstones, grants that ended (a
    /// `LaunchStatus` asks within seconds of a release; this runs every few minutes), and
    /// retired generations with no connection and no request left. Returns whether the
    /// persisted state changed.
    fn prune(&mut self, now: Instant) -> bool {
        let before = self.bindings.len();
        self.bindings
            .retain(|_, b| b.tombstone_until.is_none_or(|until| until > now));
        let generations = &self.generations;
        self.grants.retain(|_, grant| match grant.state {
            GrantState::Issued => true,
            GrantState::Cancelled => false,
            GrantState::Consumed { worker } => generations
                .get(&worker)
                .is_some_and(|g| !g.status.is_revoked()),
        });
        self.generations
            .retain(|_, g| !g.status.is_revoked() || g.conn.is_some() || g.in_flight > 0);
        self.bindings.len() != before
    }

    fn on_revoke(&mut self, now: Instant, fp: Fingerprint, block: bool) {
        if block {
            self.blocked.insert(fp);
        }
        let code = if block {
            RefusedCode::Blocked
        } else {
            RefusedCode::Revoked
        };
        let sessions: Vec<Id> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.fingerprint == fp)
            .map(|(id, _)| *id)
            .collect();
        for session_id in sessions {
            if let Some(session) = self.sessions.remove(&session_id) {
                self.timers.clear(Timer::Grace(session_id));
                if let Some(conn) = session.conn {
                    self.refuse_existing(conn, code);
                }
                let references = self.routes.get_mut(&fp).map_or(0, |r| {
                    r.sessions.remove(&session_id);
                    r.sessions.len() as u32
                });
                self.event(Event::McpRemoved {
                    fingerprint: fp,
                    instance: session.instance,
                    references,
                    reason: McpRemovedReason::Revoked,
                });
            }
        }
        match self.state(fp).cloned() {
            Some(RouteState::Activating { grant, worker, .. }) => {
                if let Some(grant) = grant {
                    self.cancel_grant(grant, ActivationCancelReason::Revoked);
                }
                if let Some(worker) = worker {
                    self.revoke_generation(worker, WorkerRemovedReason::Revoked);
                }
            }
            Some(RouteState::Ready { worker })
            | Some(RouteState::Recovering { worker, .. })
            | Some(RouteState::Draining { worker, .. }) => {
                if let Some(conn) = self.generations.get(&worker).and_then(|g| g.conn) {
                    self.send(
                        conn,
                        Message::Drain {
                            deadline_ms: self.config.timers.drain_ms,
                        },
                    );
                }
                self.retire_generation(worker, WorkerRemovedReason::Revoked);
            }
            _ => {}
        }
        let digests: Vec<Digest> = self
            .bindings
            .iter()
            .filter(|(_, b)| b.fingerprint == fp && b.tombstone_until.is_none())
            .map(|(d, _)| *d)
            .collect();
        for digest in digests {
            self.tombstone(now, digest);
        }
        self.clear_route_timers(fp);
        self.routes.remove(&fp);
        self.persist();
    }

    fn on_persisted(&mut self, now: Instant, seq: u64, ok: bool) {
        let mut waiting: Vec<Id> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.pending_persist.is_some_and(|p| p <= seq))
            .map(|(id, _)| *id)
            .collect();
        waiting.sort();
        for session_id in waiting {
            if ok {
                if let Some(s) = self.sessions.get_mut(&session_id) {
                    s.pending_persist = None;
                }
                self.attach_session(now, session_id);
            } else if let Some(session) = self.sessions.remove(&session_id) {
                // The binding is not durable: undo it and refuse (§5.3).
                if let Some(route) = self.routes.get_mut(&session.fingerprint) {
                    route.digests.retain(|d| *d != session.digest);
                }
                // Put back what the registration replaced: a revived tombstone must keep
                // blocking other identities (§5.3).
                match session.replaced {
                    Some(previous) => {
                        self.bindings.insert(session.digest, previous);
                    }
                    None => {
                        self.bindings.remove(&session.digest);
                    }
                }
                if let Some(conn) = session.conn {
                    self.conns.remove(&conn);
                    self.refuse(
                        conn,
                        Role::Mcp,
                        RefusedCode::StateUnavailable,
                        Some(session.fingerprint),
                    );
                }
                let orphan = self.routes.get(&session.fingerprint).is_some_and(|r| {
                    r.digests.is_empty() && r.sessions.is_empty() && r.state == RouteState::Empty
                });
                if orphan {
                    self.routes.remove(&session.fingerprint);
                }
            }
        }
    }

    // ----- the request plane --------------------------------------------------------------

    /// Chooses where a request with a well-formed credential goes (§3.5). A request that
    /// gets a ticket keeps its destination; end it with [`Broker::end_request`].
    pub fn begin_request(
        &mut self,
        now: Instant,
        digest: Digest,
        kind: RequestKind,
        waited: bool,
    ) -> Decision {
        let may_wait =
            !waited && !self.config.activation_wait.is_zero() && !self.config.pass_through;
        let opening = kind == RequestKind::OpeningHook;
        let Some(binding) = self
            .bindings
            .get_mut(&digest)
            .filter(|b| b.tombstone_until.is_none())
        else {
            // Its MCP may be registering this very credential for the first time.
            return if opening && may_wait {
                Decision::Wait
            } else {
                Decision::Unbound
            };
        };
        binding.last_use = now;
        self.last_use_dirty = true;
        let fp = binding.fingerprint;
        let Some(route) = self.routes.get(&fp) else {
            return Decision::Unbound;
        };
        if route.in_flight >= self.config.max_requests_per_identity {
            return Decision::TooMany { fingerprint: fp };
        }
        let live = !route.sessions.is_empty();
        let worker = match &route.state {
            _ if self.config.pass_through => None,
            RouteState::Ready { worker } if live => Some(*worker),
            RouteState::Draining { worker, .. } if kind.is_hook() => Some(*worker),
            _ => None,
        };
        let worker = worker.and_then(|w| {
            self.generations
                .get(&w)
                .filter(|g| g.conn.is_some() && !g.status.is_revoked())
                .map(|g| (w, g.endpoint.clone(), g.certificate, g.secret))
        });
        let starting = matches!(route.state, RouteState::Activating { .. }) && live;
        if worker.is_none() && may_wait && (starting || (opening && !live)) {
            return Decision::Wait;
        }
        let (reason, retry_after) = if self.config.pass_through {
            (
                PassThroughReason::ConfiguredPassThrough,
                DEFAULT_RETRY_AFTER,
            )
        } else if !live {
            (PassThroughReason::NoLiveSession, DEFAULT_RETRY_AFTER)
        } else if let RouteState::PassThrough { retry_at } = route.state {
            (
                PassThroughReason::WorkerUnavailable,
                retry_at.saturating_duration_since(now),
            )
        } else {
            (PassThroughReason::WorkerUnavailable, DEFAULT_RETRY_AFTER)
        };
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        self.route_mut(fp).in_flight += 1;
        match worker {
            Some((worker_id, endpoint, certificate_sha256, secret)) => {
                if let Some(g) = self.generations.get_mut(&worker_id) {
                    g.in_flight += 1;
                    g.served += 1;
                }
                self.tickets.insert(
                    ticket.0,
                    TicketEntry {
                        fingerprint: fp,
                        worker: Some(worker_id),
                    },
                );
                Decision::Worker {
                    ticket,
                    fingerprint: fp,
                    worker_id,
                    endpoint,
                    certificate_sha256,
                    secret,
                }
            }
            None => {
                self.tickets.insert(
                    ticket.0,
                    TicketEntry {
                        fingerprint: fp,
                        worker: None,
                    },
                );
                Decision::PassThrough {
                    ticket,
                    fingerprint: fp,
                    reason,
                    retry_after: retry_after.max(Duration::from_millis(1)),
                }
            }
        }
    }

    /// The request of `ticket` finished (its response ended or was dropped).
    pub fn end_request(&mut self, ticket: Ticket) {
        let Some(entry) = self.tickets.remove(&ticket.0) else {
            return;
        };
        if let Some(route) = self.routes.get_mut(&entry.fingerprint) {
            route.in_flight = route.in_flight.saturating_sub(1);
        }
        if let Some(worker) = entry.worker
            && let Some(g) = self.generations.get_mut(&worker)
        {
            g.in_flight = g.in_flight.saturating_sub(1);
        }
    }

    /// The connection to the chosen worker failed before any byte of the request was
    /// written (§3.7). The ticket ends; the request may pass through once, which the shell
    /// does without asking again. `Gone` (refused, wrong certificate) is evidence of death.
    pub fn worker_unreachable(&mut self, now: Instant, ticket: Ticket, outcome: ProbeOutcome) {
        let worker = self.tickets.get(&ticket.0).and_then(|t| t.worker);
        self.end_request(ticket);
        let Some(worker) = worker else { return };
        match outcome {
            ProbeOutcome::Gone => self.on_worker_gone(now, worker, FailureReason::WorkerGone),
            ProbeOutcome::Failed => self.start_probe(worker),
            ProbeOutcome::Ready => {}
        }
    }

    // ----- views --------------------------------------------------------------------------

    /// Workers as `/_relay/v1/workers/status` lists them, sorted by id.
    pub fn workers(&self) -> Vec<WorkerView> {
        let mut workers: Vec<WorkerView> = self
            .routes
            .values()
            .filter_map(|route| {
                let (worker, state) = match route.state {
                    RouteState::Ready { worker } => (worker, WorkerState::Ready),
                    RouteState::Draining { worker, .. } => (worker, WorkerState::Draining),
                    RouteState::Recovering { worker, .. } => (worker, WorkerState::Recovering),
                    _ => return None,
                };
                let generation = self.generations.get(&worker)?;
                Some(WorkerView {
                    worker_id: worker,
                    state,
                    control_available: generation.conn.is_some(),
                    reference_count: route.sessions.len() as u32,
                    in_flight: generation.in_flight,
                })
            })
            .collect();
        workers.sort_by_key(|w| w.worker_id);
        workers
    }

    /// The route of a credential, or `None` when it is not bound.
    pub fn route_view(&self, digest: &Digest) -> Option<RouteView> {
        let binding = self
            .bindings
            .get(digest)
            .filter(|b| b.tombstone_until.is_none())?;
        let route = self.routes.get(&binding.fingerprint)?;
        let (state, worker) = match route.state {
            RouteState::Empty => (ViewState::Empty, None),
            RouteState::Activating { .. } => (ViewState::Activating, None),
            RouteState::Ready { worker } => (ViewState::Ready, Some(worker)),
            RouteState::PassThrough { .. } => (ViewState::PassThrough, None),
            RouteState::Recovering { worker, .. } => (ViewState::Recovering, Some(worker)),
            RouteState::Draining { worker, .. } => (ViewState::Draining, Some(worker)),
        };
        let control = worker
            .and_then(|w| self.generations.get(&w))
            .map(|g| g.conn.is_some());
        Some(RouteView {
            state,
            worker_id: worker,
            control_available: control,
            worker_ready: state == ViewState::Ready
                && control == Some(true)
                && !self.config.pass_through,
            live_references: route.sessions.len() as u32,
        })
    }

    pub fn bindings(&self) -> Vec<BindingView> {
        let mut views: Vec<BindingView> = self
            .bindings
            .iter()
            .map(|(digest, b)| BindingView {
                fingerprint: b.fingerprint,
                digest: *digest,
                last_use: b.last_use,
                tombstone: b.tombstone_until.is_some(),
                blocked: self.blocked.contains(&b.fingerprint),
            })
            .collect();
        views.sort_by_key(|v| (v.fingerprint, v.digest));
        views
    }

    /// The number of authenticated control connections.
    pub fn control_sessions(&self) -> usize {
        self.conns.len()
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
        self.conns.remove(&conn);
        self.send(
            conn,
            Message::Refused(Refused {
                code: code.code(),
                text: Text::truncated(code.as_str()),
                supported: SUPPORTED_PROTOCOLS,
            }),
        );
        self.outputs.push_back(Output::Close { conn });
    }
}

#[cfg(test)]
mod tests;
