//! The route state changes of §5.4 (`enter_*`, `publish`, `activation_failed`), the launch
//! grant they issue or cancel, and the retirement of generations.

use std::time::{Duration, Instant};

use relay_proto::{
    ActivationCancelReason, FailureReason, Grant as WireGrant, Id, Message, RefusedCode,
    WorkerRemovedReason,
};

use super::{Broker, GenStatus, Grant, GrantState, RouteState, Timer};
use crate::io::{Event, Output};
use crate::types::{BrokerConfig, Fingerprint};

/// What a worker whose readiness probe kept failing through its start-up is told.
const UNREACHABLE_WORKER: &str = "generation_revoked: the daemon could not reach this worker at the endpoint it registered (readiness_probe_failed); for a remote daemon, let inbound connections from the daemon reach RELAY_WORKER_ADVERTISE_ADDRESS:RELAY_WORKER_PORT on this machine (firewall, NAT, VPN)";

impl Broker {
    /// `Activating`, with a grant for `prefer` (or any connected MCP). Returns the grant when
    /// it went to `prefer`, for embedding in its `Registered`.
    pub(super) fn enter_activating(
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
    pub(super) fn issue_grant(&mut self, fp: Fingerprint, prefer: Option<Id>) -> Option<WireGrant> {
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
        // A worker of a session on the daemon's loopback is accepted on 127.0.0.1 only (§5.5),
        // so a hint from such a session (a remote set-up's environment on the daemon's own
        // host) is ignored: honoured, every worker was refused and relaunched for the whole
        // session, each listening on every interface of the machine meanwhile.
        let hint = self
            .sessions
            .get(&owner)
            .filter(|s| !s.peer.is_loopback())
            .and_then(|s| s.hint.clone());
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

    pub(super) fn cancel_grant(&mut self, activation_id: Id, reason: ActivationCancelReason) {
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

    pub(super) fn activation_failed(
        &mut self,
        now: Instant,
        fp: Fingerprint,
        reason: FailureReason,
    ) {
        let mut activation_id = None;
        if let Some(RouteState::Activating { grant, worker, .. }) = self.state(fp).cloned() {
            activation_id = grant;
            if let Some(worker) = worker {
                // A worker the daemon cannot reach is up and registered, and all its log
                // would say is that it was revoked; the user on a remote client machine
                // cannot read the daemon's log, so the worker is told why.
                let why = if reason == FailureReason::ReadinessProbeFailed {
                    UNREACHABLE_WORKER
                } else {
                    RefusedCode::GenerationRevoked.as_str()
                };
                self.revoke_generation_saying(worker, WorkerRemovedReason::Crashed, why);
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
    pub(super) fn enter_pass_through(
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

    pub(super) fn publish(&mut self, now: Instant, fp: Fingerprint, worker: Id) {
        let since = match self.state(fp) {
            Some(RouteState::Activating { since, .. }) => Some(*since),
            _ => None,
        };
        self.clear_route_timers(fp);
        let route = self.route_mut(fp);
        route.state = RouteState::Ready { worker };
        // A worker launched after one that crashed must serve a request before the backoff
        // is forgiven (then `begin_request` resets it): published and dead again before
        // serving, the next launch waits twice as long, as for any failed start.
        if !route.relaunched_after_crash {
            route.backoff = Duration::ZERO;
            route.attempt = 0;
        }
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

    pub(super) fn enter_recovering(&mut self, now: Instant, fp: Fingerprint, worker: Id) {
        let deadline = now + self.config.reconnect_grace();
        self.clear_route_timers(fp);
        self.route_mut(fp).state = RouteState::Recovering { worker, deadline };
        self.timers.set(Timer::Recovery(fp), deadline);
        self.event(Event::WorkerRecoveryStarted {
            fingerprint: fp,
            worker_id: worker,
        });
    }

    pub(super) fn enter_empty(&mut self, fp: Fingerprint) {
        self.clear_route_timers(fp);
        if let Some(route) = self.routes.get_mut(&fp) {
            route.state = RouteState::Empty;
            route.relaunched_after_crash = false;
        }
    }

    /// After a generation died or recovery failed: relaunch at once through a connected MCP
    /// when the route has references, else `Empty`.
    pub(super) fn relaunch_or_empty(&mut self, now: Instant, fp: Fingerprint) {
        if self.routes.get(&fp).is_some_and(|r| !r.sessions.is_empty()) {
            self.enter_activating(now, fp, None);
        } else {
            self.enter_empty(fp);
        }
    }

    /// Ends the drain of `worker` when a launch waits for it and nothing is in flight on it:
    /// its generation is retired as drained and told so, and the route is `Empty`. The
    /// caller launches. `false` when the drain goes on.
    pub(super) fn end_idle_drain(&mut self, fp: Fingerprint, worker: Id) -> bool {
        let waiting = matches!(
            self.state(fp),
            Some(RouteState::Draining { worker: w, pending_launch: true, .. }) if *w == worker
        );
        if !waiting
            || self
                .generations
                .get(&worker)
                .is_none_or(|g| g.in_flight > 0)
        {
            return false;
        }
        self.revoke_generation_saying(
            worker,
            WorkerRemovedReason::Drained,
            "drained: a new session of the route starts its own worker",
        );
        self.enter_empty(fp);
        true
    }

    pub(super) fn after_drain(&mut self, now: Instant, fp: Fingerprint, pending_launch: bool) {
        self.enter_empty(fp);
        if pending_launch && self.routes.get(&fp).is_some_and(|r| !r.sessions.is_empty()) {
            self.enter_activating(now, fp, None);
        }
    }

    /// The generation is done (drained or revoked): it never returns to service.
    pub(super) fn retire_generation(&mut self, worker: Id, reason: WorkerRemovedReason) {
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
    pub(super) fn revoke_generation(&mut self, worker: Id, reason: WorkerRemovedReason) {
        self.revoke_generation_saying(worker, reason, RefusedCode::GenerationRevoked.as_str());
    }

    /// [`Broker::revoke_generation`], telling the worker `why` in its refusal.
    pub(super) fn revoke_generation_saying(
        &mut self,
        worker: Id,
        reason: WorkerRemovedReason,
        why: &str,
    ) {
        let conn = self
            .generations
            .get_mut(&worker)
            .and_then(|g| g.conn.take());
        self.retire_generation(worker, reason);
        if let Some(conn) = conn {
            self.refuse_existing_saying(conn, RefusedCode::GenerationRevoked, why);
        }
    }
}
