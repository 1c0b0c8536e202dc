//! MCP sessions: registration and resume, release, the grace of a dropped session, and what
//! an MCP reports about its launch (`ActivationFailed`, `WorkerExited`, `LaunchStatus`).

use std::collections::HashSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use relay_proto::{
    ActivationCancelReason, Bytes32, Directive, FailureReason, Id, LaunchOutcome, McpRemovedReason,
    Message, RefusedCode, Registered, Role, WorkerHint, WorkerRemovedReason,
};
use subtle::ConstantTimeEq;

use super::{Binding, Broker, GenStatus, GrantState, Party, RouteState, Session, Timer};
use crate::io::{Event, Output, launch_status};
use crate::types::{ConnId, Digest, Fingerprint};

impl Broker {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_mcp_register(
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
            let expired = binding.tombstone_until().is_some_and(|until| until <= now);
            if binding.fingerprint != fp && !expired {
                return self.refuse(
                    conn,
                    Role::Mcp,
                    RefusedCode::CredentialBoundElsewhere,
                    Some(fp),
                );
            }
        }
        let new_binding = previous.is_none_or(|b| !b.is_live() || b.fingerprint != fp);
        // Every refusal is decided before anything changes.
        let route = self.routes.get(&fp);
        if route.is_some_and(|r| r.sessions.len() >= self.config.max_sessions_per_route) {
            return self.refuse(conn, Role::Mcp, RefusedCode::SessionLimit, Some(fp));
        }
        let evict_token = if new_binding
            && route.map_or(0, |r| r.digests.len()) >= self.config.max_tokens_per_identity
        {
            // The least recently registered digest without a live MCP (§5.3), nor one
            // whose registration is still being written, which is about to be live.
            let idle = route.and_then(|route| {
                route.digests.iter().copied().find(|d| {
                    !self
                        .sessions
                        .values()
                        .any(|s| s.fingerprint == fp && s.digest == *d)
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
            // A registration whose binding is still being written is a reference about to
            // be live: evicted, its route would come back when the write lands, its token
            // a tombstone, and the table over its capacity.
            let registering: HashSet<Fingerprint> = self
                .sessions
                .values()
                .filter(|s| s.pending_persist.is_some())
                .map(|s| s.fingerprint)
                .collect();
            let victim = self
                .routes
                .iter()
                .filter(|(fp, r)| {
                    r.sessions.is_empty()
                        && r.state == RouteState::Empty
                        && !registering.contains(fp)
                })
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
            self.tombstone(now, fp, victim);
            self.event(Event::CredentialEvicted {
                fingerprint: fp,
                digest: victim,
            });
        }
        let conflict = self.connected_peers(&fp).find(|other| *other != peer);
        if let Some(other_peer) = conflict {
            self.event(Event::MachineIdentityConflict {
                fingerprint: fp,
                peer,
                other_peer,
            });
        }
        let mut replaced = None;
        if new_binding {
            self.unbound_waited_in_vain.remove(&digest);
            replaced = self.bindings.insert(digest, Binding::live(fp, now)).0;
            self.route_mut_or_create(fp).digests.push(digest);
        } else if let Some(binding) = self.bindings.get_mut(&digest) {
            // Registered again: now the most recently registered of its route's digests, the
            // last an eviction would take, and used now.
            binding.last_use = now;
            self.last_use_dirty = true;
            if let Some(route) = self.routes.get_mut(&fp) {
                route.digests.retain(|d| *d != digest);
                route.digests.push(digest);
            }
        }
        self.touch_route(fp);
        let session_id = self.entropy.id();
        let resume_token = self.entropy.secret();
        let pending_persist = new_binding.then(|| self.persist());
        if let Some(binding) = self.bindings.get_mut(&digest) {
            binding.awaiting_write = pending_persist;
        }
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
    pub(super) fn attach_session(&mut self, now: Instant, session_id: Id) {
        let Some(session) = self.sessions.get(&session_id) else {
            return;
        };
        let (fp, instance) = (session.fingerprint, session.instance);
        let route = self.route_mut_or_create(fp);
        route.sessions.insert(session_id);
        route.opening_waited_in_vain = false;
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
    pub(super) fn directive_for(
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
            RouteState::Draining { worker, .. } => {
                if let RouteState::Draining { pending_launch, .. } = &mut self.route_mut(fp).state {
                    *pending_launch = true;
                }
                // A draining worker with nothing in flight has no more to do for the route:
                // the new session gets its own worker now, not once the old one has waited
                // out its quiet time, meanwhile passing its requests by policy.
                if self.end_idle_drain(fp, worker) {
                    return self.enter_activating(now, fp, Some(session_id)).map_or(
                        Directive::WaitForWorker {
                            retry_after_ms: retry_hint,
                        },
                        Directive::LaunchWorker,
                    );
                }
                Directive::WaitForWorker {
                    retry_after_ms: retry_hint,
                }
            }
        }
    }

    pub(super) fn send_registered(&mut self, session_id: Id, directive: Directive) {
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

    pub(super) fn on_mcp_resume(
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

    pub(super) fn on_mcp_release(&mut self, now: Instant, conn: ConnId) {
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
    pub(super) fn remove_session(
        &mut self,
        now: Instant,
        session_id: Id,
        reason: McpRemovedReason,
    ) {
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
    pub(super) fn reissue_if_owner_left(
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

    pub(super) fn on_last_reference_left(&mut self, now: Instant, fp: Fingerprint) {
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

    pub(super) fn on_mcp_activation_failed(
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

    pub(super) fn on_mcp_worker_exited(
        &mut self,
        now: Instant,
        conn: ConnId,
        activation_id: Id,
        reason: FailureReason,
    ) {
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
            GrantState::Consumed { worker } => self.on_worker_gone(now, worker, reason),
            GrantState::Issued => {
                let fp = grant.fingerprint;
                if self.current_activation(fp) == Some(activation_id) {
                    self.activation_failed(now, fp, reason);
                }
            }
            GrantState::Cancelled => {}
        }
    }

    pub(super) fn on_launch_status(&mut self, conn: ConnId, activation_id: Id) {
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
}
