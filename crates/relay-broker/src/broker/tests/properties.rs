//! Random input sequences, with the broker's invariants checked after every step.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use relay_proto::{Bytes32, Directive, FailureReason, Id, Message, Registered, WorkerState};

use super::super::*;
use super::{Counter, digest, fp, test_config};
use crate::io::{Decision, ProbeOutcome, RequestKind, Ticket, Wait};

#[derive(Debug, Clone)]
enum Step {
    Register {
        conn: u8,
        route: u8,
        token: u8,
    },
    Resume {
        conn: u8,
        old: u8,
    },
    Release {
        conn: u8,
    },
    Drop {
        conn: u8,
    },
    WorkerRegister {
        conn: u8,
        route: u8,
        grant: u8,
        forge: bool,
    },
    WorkerResume {
        conn: u8,
        worker: u8,
        route: u8,
    },
    Ready {
        conn: u8,
    },
    Probe {
        worker: u8,
        outcome: u8,
    },
    Exited {
        conn: u8,
        grant: u8,
    },
    Failed {
        conn: u8,
        grant: u8,
    },
    WorkerFailed {
        conn: u8,
    },
    Stopping {
        conn: u8,
    },
    Persisted {
        ok: bool,
    },
    Request {
        token: u8,
        hook: bool,
        waited: bool,
    },
    EndRequest {
        n: u8,
    },
    Unreachable {
        n: u8,
        gone: bool,
    },
    Revoke {
        route: u8,
        block: bool,
    },
    Advance {
        ms: u16,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..8, 0u8..2, 0u8..4).prop_map(|(conn, route, token)| Step::Register { conn, route, token }),
        1 => (0u8..8, 0u8..8).prop_map(|(conn, old)| Step::Resume { conn, old }),
        2 => (0u8..8).prop_map(|conn| Step::Release { conn }),
        2 => (0u8..16).prop_map(|conn| Step::Drop { conn }),
        4 => (8u8..16, 0u8..2, 0u8..6, any::<bool>()).prop_map(|(conn, route, grant, forge)| Step::WorkerRegister { conn, route, grant, forge }),
        1 => (8u8..16, 0u8..6, 0u8..2).prop_map(|(conn, worker, route)| Step::WorkerResume { conn, worker, route }),
        3 => (8u8..16).prop_map(|conn| Step::Ready { conn }),
        4 => (0u8..6, 0u8..3).prop_map(|(worker, outcome)| Step::Probe { worker, outcome }),
        1 => (0u8..8, 0u8..6).prop_map(|(conn, grant)| Step::Exited { conn, grant }),
        1 => (0u8..8, 0u8..6).prop_map(|(conn, grant)| Step::Failed { conn, grant }),
        1 => (8u8..16).prop_map(|conn| Step::WorkerFailed { conn }),
        1 => (8u8..16).prop_map(|conn| Step::Stopping { conn }),
        2 => any::<bool>().prop_map(|ok| Step::Persisted { ok }),
        3 => (0u8..4, any::<bool>(), any::<bool>()).prop_map(|(token, hook, waited)| Step::Request { token, hook, waited }),
        2 => (0u8..8).prop_map(|n| Step::EndRequest { n }),
        1 => (0u8..8, any::<bool>()).prop_map(|(n, gone)| Step::Unreachable { n, gone }),
        1 => (0u8..2, any::<bool>()).prop_map(|(route, block)| Step::Revoke { route, block }),
        3 => (0u16..40_000).prop_map(|ms| Step::Advance { ms }),
    ]
}

struct Model {
    broker: Broker,
    now: Instant,
    grants: Vec<(Id, Bytes32)>,
    sessions: HashMap<u8, (Id, Bytes32)>,
    workers: Vec<(Id, Bytes32)>,
    worker_certs: HashMap<Id, Bytes32>,
    probes: HashMap<Id, u64>,
    tickets: Vec<Ticket>,
    last_seq: u64,
    /// Grants a worker registration succeeded with.
    consumed: HashSet<Id>,
    /// Workers seen draining, which must never be ready again.
    drained: HashSet<Id>,
    /// Worker conns that registered, by conn.
    worker_conns: HashMap<u8, Id>,
    pending_register: HashMap<ConnId, Id>,
}

const ROUTES: [char; 2] = ['A', 'B'];
const TOKENS: [&str; 4] = ["t0", "t1", "t2", "t3"];

impl Model {
    fn new() -> Model {
        let mut config = test_config();
        config.timers.drain_ms = 5_000;
        config.timers.reconnect_grace_ms = 3_000;
        config.timers.startup_progress_ms = 4_000;
        // Tombstones end within a run, so pruning runs.
        config.binding_tombstone = Duration::from_secs(60);
        let now = Instant::now();
        let mut broker = Broker::new(config, Box::new(Counter(0)));
        // Caps the four tokens can reach: two tombstones per identity, three in all.
        broker.bindings = table::Bindings::new(2, 3);
        broker.restore(now, PersistedState::default());
        Model {
            broker,
            now,
            grants: Vec::new(),
            sessions: HashMap::new(),
            workers: Vec::new(),
            worker_certs: HashMap::new(),
            probes: HashMap::new(),
            tickets: Vec::new(),
            last_seq: 0,
            consumed: HashSet::new(),
            drained: HashSet::new(),
            worker_conns: HashMap::new(),
            pending_register: HashMap::new(),
        }
    }

    fn apply(&mut self, step: &Step) -> Result<(), TestCaseError> {
        let now = self.now;
        let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
        match *step {
            Step::Register { conn, route, token } => self.broker.handle(
                now,
                Input::McpRegister {
                    conn: ConnId(u64::from(conn)),
                    fingerprint: fp(ROUTES[route as usize]),
                    digest: digest(TOKENS[token as usize]),
                    instance: Id([conn; 16]),
                    peer: local,
                    hint: None,
                },
            ),
            Step::Resume { conn, old } => {
                if let Some((session_id, resume_token)) = self.sessions.get(&old).copied() {
                    self.broker.handle(
                        now,
                        Input::McpResume {
                            conn: ConnId(u64::from(conn)),
                            fingerprint: fp(ROUTES[0]),
                            session_id,
                            resume_token,
                            peer: local,
                        },
                    );
                }
            }
            Step::Release { conn } => self.broker.handle(
                now,
                Input::McpRelease {
                    conn: ConnId(u64::from(conn)),
                },
            ),
            Step::Drop { conn } => self.broker.handle(
                now,
                Input::Disconnected {
                    conn: ConnId(u64::from(conn)),
                    reason: DisconnectReason::PeerClosed,
                },
            ),
            Step::WorkerRegister {
                conn,
                route,
                grant,
                forge,
            } => {
                if let Some((id, token)) = self.grants.get(grant as usize).copied() {
                    let token = if forge { Bytes32([0xee; 32]) } else { token };
                    self.pending_register.insert(ConnId(u64::from(conn)), id);
                    self.broker.handle(
                        now,
                        Input::WorkerRegister {
                            conn: ConnId(u64::from(conn)),
                            fingerprint: fp(ROUTES[route as usize]),
                            activation_id: id,
                            activation_token: token,
                            endpoint: format!("127.0.0.1:{}", 40000 + u32::from(conn)),
                            certificate_sha256: Bytes32([conn; 32]),
                        },
                    );
                }
            }
            Step::WorkerResume {
                conn,
                worker,
                route,
            } => {
                if let Some((worker_id, _)) = self.workers.get(worker as usize).copied() {
                    let certificate_sha256 = self.worker_certs[&worker_id];
                    self.broker.handle(
                        now,
                        Input::WorkerResume {
                            conn: ConnId(u64::from(conn)),
                            fingerprint: fp(ROUTES[route as usize]),
                            worker_id,
                            certificate_sha256,
                        },
                    );
                }
            }
            Step::Ready { conn } => self.broker.handle(
                now,
                Input::WorkerReportedReady {
                    conn: ConnId(u64::from(conn)),
                },
            ),
            Step::Probe { worker, outcome } => {
                if let Some((worker_id, _)) = self.workers.get(worker as usize).copied() {
                    let probe = self.probes.get(&worker_id).copied().unwrap_or(0);
                    let outcome = [
                        ProbeOutcome::Ready,
                        ProbeOutcome::Failed,
                        ProbeOutcome::Gone,
                    ][outcome as usize];
                    self.broker.handle(
                        now,
                        Input::ProbeResult {
                            worker_id,
                            probe,
                            outcome,
                        },
                    );
                }
            }
            Step::Exited { conn, grant } => {
                if let Some((activation_id, _)) = self.grants.get(grant as usize).copied() {
                    self.broker.handle(
                        now,
                        Input::McpWorkerExited {
                            conn: ConnId(u64::from(conn)),
                            activation_id,
                            reason: FailureReason::WorkerExitedBeforeReady,
                        },
                    );
                }
            }
            Step::Failed { conn, grant } => {
                if let Some((activation_id, _)) = self.grants.get(grant as usize).copied() {
                    self.broker.handle(
                        now,
                        Input::McpActivationFailed {
                            conn: ConnId(u64::from(conn)),
                            activation_id,
                            reason: FailureReason::WorkerProcessSpawnFailed,
                        },
                    );
                }
            }
            Step::WorkerFailed { conn } => self.broker.handle(
                now,
                Input::WorkerActivationFailed {
                    conn: ConnId(u64::from(conn)),
                    reason: FailureReason::PluginConfigInvalid,
                },
            ),
            Step::Stopping { conn } => self.broker.handle(
                now,
                Input::WorkerStopping {
                    conn: ConnId(u64::from(conn)),
                },
            ),
            Step::Persisted { ok } => self.broker.handle(
                now,
                Input::Persisted {
                    seq: self.last_seq,
                    ok,
                },
            ),
            Step::Request {
                token,
                hook,
                waited,
            } => {
                let kind = if hook {
                    RequestKind::Hook
                } else {
                    RequestKind::Model
                };
                let wait = if waited { Wait::Waited } else { Wait::Allowed };
                let decision =
                    self.broker
                        .begin_request(now, digest(TOKENS[token as usize]), kind, wait);
                match decision {
                    Decision::Worker {
                        ticket,
                        worker_id,
                        fingerprint,
                        ..
                    } => {
                        let views = self.broker.workers();
                        let view = views.iter().find(|w| w.worker_id == worker_id);
                        let state = view.map(|w| w.state);
                        prop_assert!(
                            state == Some(WorkerState::Ready)
                                || (hook && state == Some(WorkerState::Draining)),
                            "a {kind:?} request went to worker {worker_id:?} in state {state:?}"
                        );
                        let route = self.broker.route_view(&digest(TOKENS[token as usize]));
                        prop_assert!(route.is_some(), "routed without a binding");
                        let _ = fingerprint;
                        self.tickets.push(ticket);
                    }
                    Decision::PassThrough { ticket, .. } => self.tickets.push(ticket),
                    Decision::Unbound | Decision::Wait | Decision::TooMany { .. } => {}
                }
            }
            Step::EndRequest { n } => {
                if !self.tickets.is_empty() {
                    let ticket = self.tickets.remove(n as usize % self.tickets.len());
                    // As the shell does.
                    if let Some(fp) = self.broker.end_request(ticket) {
                        self.broker.end_drain_for_launch(self.now, fp);
                    }
                }
            }
            Step::Unreachable { n, gone } => {
                if !self.tickets.is_empty() {
                    let ticket = self.tickets.remove(n as usize % self.tickets.len());
                    let outcome = if gone {
                        ProbeOutcome::Gone
                    } else {
                        ProbeOutcome::Failed
                    };
                    self.broker.worker_unreachable(now, ticket, outcome);
                }
            }
            Step::Revoke { route, block } => self.broker.handle(
                now,
                Input::Revoke {
                    fingerprint: fp(ROUTES[route as usize]),
                    block,
                },
            ),
            Step::Advance { ms } => {
                self.now += Duration::from_millis(u64::from(ms));
                self.broker.handle_timeout(self.now);
            }
        }
        self.collect()
    }

    /// Reads the outputs, remembering what later steps can use, and checks per-output rules.
    fn collect(&mut self) -> Result<(), TestCaseError> {
        while let Some(output) = self.broker.poll_output() {
            match output {
                Output::Send { conn, message } => match message {
                    Message::Registered(Registered::Mcp {
                        session_id,
                        resume_token,
                        directive,
                        ..
                    }) => {
                        self.sessions
                            .insert(conn.0 as u8, (session_id, resume_token));
                        if let Directive::LaunchWorker(grant) = directive {
                            self.grants
                                .push((grant.activation_id, grant.activation_token));
                        }
                    }
                    Message::LaunchWorker(grant) => self
                        .grants
                        .push((grant.activation_id, grant.activation_token)),
                    Message::Registered(Registered::Worker {
                        worker_id,
                        generation_secret,
                        ..
                    }) => {
                        if let Some(grant) = self.pending_register.remove(&conn) {
                            // A grant is consumed at most once.
                            prop_assert!(
                                self.consumed.insert(grant),
                                "grant {grant:?} consumed twice"
                            );
                            self.worker_certs
                                .insert(worker_id, Bytes32([conn.0 as u8; 32]));
                            self.workers.push((worker_id, generation_secret));
                            self.worker_conns.insert(conn.0 as u8, worker_id);
                        }
                    }
                    _ => {}
                },
                Output::Probe {
                    worker_id, probe, ..
                } => {
                    self.probes.insert(worker_id, probe);
                }
                Output::Persist { seq } => self.last_seq = seq,
                Output::Close { .. } | Output::Forget { .. } | Output::Event(_) => {}
            }
        }
        self.pending_register.clear();
        Ok(())
    }

    fn check_invariants(&mut self) -> Result<(), TestCaseError> {
        let broker = &self.broker;
        // The tombstones' index matches the bindings, within both caps.
        prop_assert!(broker.bindings.index_holds());
        // A route lists only credentials bound to it, each once.
        for (fp, route) in &broker.routes {
            for (n, digest) in route.digests.iter().enumerate() {
                prop_assert!(
                    broker
                        .bindings
                        .get(digest)
                        .is_some_and(|b| b.is_live() && b.fingerprint == *fp),
                    "{fp:?} lists {digest:?} without its live binding"
                );
                prop_assert!(!route.digests[..n].contains(digest));
            }
        }
        for (fp, route) in &broker.routes {
            // No route exceeds its token limit.
            prop_assert!(route.digests.len() <= broker.config.max_tokens_per_identity);
            // At most one published (live) and one starting generation per route.
            let live = broker
                .generations
                .values()
                .filter(|g| g.fingerprint == *fp && g.status.is_live())
                .count();
            prop_assert!(live <= 1, "{fp:?} has {live} live generations");
            let starting = broker
                .generations
                .values()
                .filter(|g| g.fingerprint == *fp && g.status.is_starting())
                .count();
            prop_assert!(starting <= 1, "{fp:?} has {starting} starting generations");
            // At most one issued grant per route, held by a connected reference.
            let issued: Vec<&Grant> = broker
                .grants
                .values()
                .filter(|g| g.fingerprint == *fp && g.state == GrantState::Issued)
                .collect();
            prop_assert!(
                issued.len() <= 1,
                "{fp:?} has {} issued grants",
                issued.len()
            );
            for grant in issued {
                let owner = broker.sessions.get(&grant.owner);
                prop_assert!(
                    owner
                        .is_some_and(|s| s.conn.is_some() && route.sessions.contains(&grant.owner)),
                    "a grant is held by an MCP that is not a connected reference"
                );
                let activating = matches!(route.state, RouteState::Activating { .. });
                prop_assert!(activating, "an issued grant outside Activating");
            }
            // The route's state names a generation of its own that is not revoked.
            if let RouteState::Ready { worker }
            | RouteState::Recovering { worker, .. }
            | RouteState::Draining { worker, .. } = route.state
            {
                let generation = broker.generations.get(&worker);
                prop_assert!(
                    generation.is_some_and(|g| g.fingerprint == *fp && g.status.is_live())
                );
            }
            // A launch waits on a draining worker only while something is in flight on it:
            // an idle one is retired at once.
            if let RouteState::Draining {
                worker,
                pending_launch: true,
                ..
            } = route.state
            {
                prop_assert!(
                    broker
                        .generations
                        .get(&worker)
                        .is_some_and(|g| g.in_flight > 0),
                    "{fp:?} waits on an idle draining worker"
                );
            }
            if let RouteState::Ready { .. } = route.state {
                prop_assert!(
                    !route.sessions.is_empty(),
                    "a ready route without references"
                );
            }
        }
        // A draining worker is never published again.
        for view in broker.workers() {
            match view.state {
                WorkerState::Draining => {
                    self.drained.insert(view.worker_id);
                }
                WorkerState::Ready | WorkerState::Recovering => {
                    prop_assert!(
                        !self.drained.contains(&view.worker_id),
                        "a drained worker is back in service"
                    );
                }
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_after_every_step(steps in proptest::collection::vec(step(), 1..80)) {
        let mut model = Model::new();
        for step in &steps {
            model.apply(step)?;
            model.check_invariants()?;
        }
    }
}
