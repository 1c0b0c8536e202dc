//! Credential bindings and the route table: eviction, tombstones, pruning, `relayd bindings
//! revoke|block`, and registrations that wait for their binding to be durable.

use std::time::Instant;

use relay_proto::{
    ActivationCancelReason, Id, McpRemovedReason, Message, RefusedCode, Role, WorkerRemovedReason,
};

use super::{Broker, GrantState, RouteState, Timer};
use crate::io::Event;
use crate::types::{Digest, Fingerprint};

impl Broker {
    pub(super) fn evict_route(&mut self, now: Instant, fp: Fingerprint) {
        if let Some(route) = self.routes.remove(&fp) {
            self.clear_route_timers(fp);
            self.event(Event::RouteEvicted { fingerprint: fp });
            for digest in route.digests {
                self.bury(now, digest);
            }
            self.persist();
        }
    }

    /// Takes a credential off `fp`'s route and keeps it as a tombstone (§5.3).
    pub(super) fn tombstone(&mut self, now: Instant, fp: Fingerprint, digest: Digest) {
        if let Some(route) = self.routes.get_mut(&fp) {
            route.digests.retain(|d| *d != digest);
        }
        self.bury(now, digest);
    }

    fn bury(&mut self, now: Instant, digest: Digest) {
        let dropped = self
            .bindings
            .bury(digest, now + self.config.binding_tombstone);
        self.tombstones_dropped(dropped);
    }

    pub(super) fn tombstones_dropped(&mut self, dropped: usize) {
        if dropped > 0 {
            self.event(Event::TombstonesDropped {
                dropped,
                limit: self.bindings.overall(),
            });
        }
    }

    /// Forgets what can no longer matter: expired tombstones, grants that ended (a
    /// `LaunchStatus` asks within seconds of a release; this runs every few minutes), and
    /// retired generations with no connection and no request left. Returns whether the
    /// persisted state changed.
    pub(super) fn prune(&mut self, now: Instant) -> bool {
        let pruned = self.bindings.prune(now);
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
        pruned
    }

    pub(super) fn on_revoke(&mut self, now: Instant, fp: Fingerprint, block: bool) {
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
            .filter(|(_, b)| b.fingerprint == fp && b.is_live())
            .map(|(d, _)| *d)
            .collect();
        for digest in digests {
            self.tombstone(now, fp, digest);
        }
        self.clear_route_timers(fp);
        self.routes.remove(&fp);
        self.persist();
    }

    pub(super) fn on_persisted(&mut self, now: Instant, seq: u64, ok: bool) {
        let mut waiting: Vec<Id> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.pending_persist.is_some_and(|p| p <= seq))
            .map(|(id, _)| *id)
            .collect();
        waiting.sort();
        for session_id in waiting {
            // An MCP that left while its registration was being written never got
            // `Registered`: its durable binding stays, as a later registration's would.
            let left = self
                .sessions
                .get(&session_id)
                .is_some_and(|s| s.conn.is_none());
            if ok && left {
                self.sessions.remove(&session_id);
            } else if ok {
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
                // blocking other identities (§5.3). Only if the binding is still the one
                // it made: an undo must never delete another identity's binding. (Neither
                // its route nor its token is evicted while the write is pending, so
                // nothing known leads there; before that, a flood of identities could
                // have the cap drop the token's tombstone and another identity bind it.)
                let still_its_own = self
                    .bindings
                    .get(&session.digest)
                    .is_some_and(|b| b.is_live() && b.fingerprint == session.fingerprint);
                match session.replaced {
                    Some(previous) if still_its_own => {
                        let (_, dropped) = self.bindings.insert(session.digest, previous);
                        self.tombstones_dropped(dropped);
                    }
                    None if still_its_own => {
                        self.bindings.remove(&session.digest);
                    }
                    _ => {}
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
        // And any other binding that waited for this write.
        for binding in self.bindings.values_mut() {
            if binding.awaiting_write.is_some_and(|write| write <= seq) {
                binding.awaiting_write = None;
            }
        }
    }
}
