//! Worker generations: registration with a grant, resume, the worker's own reports (`Ready`,
//! `ActivationFailed`, `Stopping`), lost control sessions and readiness probes.

use std::time::{Duration, Instant};

use relay_proto::{
    ActivationCancelReason, Bytes32, DisconnectReason, FailureReason, Id, McpDisconnectReason,
    Message, RefusedCode, Registered, Role, WorkerRemovedReason,
};
use subtle::ConstantTimeEq;

use super::{
    Broker, GenStatus, Generation, GrantState, PROBE_STRIKES, Party, RouteState, Timer,
    UNKNOWN_SECRET,
};
use crate::io::{Event, Output, ProbeOutcome};
use crate::types::{ConnId, Fingerprint};

impl Broker {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_worker_register(
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

    pub(super) fn on_worker_resume(
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

    pub(super) fn on_worker_reported_ready(&mut self, now: Instant, conn: ConnId) {
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
    pub(super) fn on_starting_worker_failed(
        &mut self,
        now: Instant,
        worker: Id,
        reason: FailureReason,
    ) {
        let Some(generation) = self.generations.get(&worker) else {
            return;
        };
        let fp = generation.fingerprint;
        if matches!(self.state(fp), Some(RouteState::Activating { worker: Some(w), .. }) if *w == worker)
        {
            self.activation_failed(now, fp, reason);
        }
    }

    pub(super) fn on_disconnected(&mut self, now: Instant, conn: ConnId, reason: DisconnectReason) {
        // A stopping daemon closed the session itself: its client resumes after the restart
        // from the state persisted when the daemon began to stop, so nothing else follows.
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
                    // Never answered: it was not yet a reference. It stays until its write
                    // ends, which keeps the binding it made or undoes it.
                    return;
                }
                self.event(Event::McpDisconnected {
                    fingerprint: fp,
                    instance,
                    reason: if self.stopping {
                        McpDisconnectReason::DaemonStopping
                    } else {
                        reason.for_mcp()
                    },
                });
                if self.stopping {
                    return;
                }
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
                if self.stopping || generation.status.is_revoked() {
                    // A retired generation leaving (after `Stopping`, say) is its expected
                    // end; `worker_removed` has said so.
                    return;
                }
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

    pub(super) fn on_probe_result(
        &mut self,
        now: Instant,
        worker: Id,
        probe: u64,
        outcome: ProbeOutcome,
    ) {
        let Some(generation) = self.generations.get_mut(&worker) else {
            return;
        };
        if generation.probe != Some(probe) || generation.status.is_revoked() {
            return;
        }
        generation.probe = None;
        let fp = generation.fingerprint;
        let connected = generation.conn.is_some();
        let secret_unknown = generation.secret == UNKNOWN_SECRET;
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
                    // A restored generation that has not resumed fails every probe (it is
                    // asked with no valid secret): only `Gone` says anything, and its
                    // resume probes again.
                    ProbeOutcome::Failed if secret_unknown => {}
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
    pub(super) fn on_worker_gone(&mut self, now: Instant, worker: Id, reason: FailureReason) {
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
                let route = self.route_mut(fp);
                let again = served == 0 && route.relaunched_after_crash;
                if !again {
                    // No backoff for a crash (§5.4): only one that dies again before serving
                    // a request waits.
                    route.relaunched_after_crash = true;
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
}
