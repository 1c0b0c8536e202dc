//! The request plane (§3.5): where each request goes (`begin_request`), when it ends
//! (`end_request`), and a worker that could not be reached (`worker_unreachable`).

use std::time::{Duration, Instant};

use relay_proto::{FailureReason, PassThroughReason};

use super::{Broker, DEFAULT_RETRY_AFTER, RouteState, TicketEntry};
use crate::io::{Decision, ProbeOutcome, RequestKind, Ticket, Wait};
use crate::types::{Digest, Fingerprint};

/// At most this many unbound credentials are remembered as having waited in vain.
const MAX_UNBOUND_WAITED_IN_VAIN: usize = 1024;

impl Broker {
    /// Chooses where a request with a well-formed credential goes (§3.5). A request that
    /// gets a ticket keeps its destination; end it with [`Broker::end_request`].
    pub fn begin_request(
        &mut self,
        now: Instant,
        digest: Digest,
        kind: RequestKind,
        wait: Wait,
    ) -> Decision {
        // With no activation wait configured nothing waits, so nothing waits in vain.
        let waits = !self.config.activation_wait.is_zero() && !self.config.pass_through;
        let waited = waits && wait == Wait::Waited;
        let may_wait = waits && wait == Wait::Allowed;
        let opening = kind == RequestKind::OpeningHook;
        let Some(binding) = self.bindings.get_mut(&digest).filter(|b| b.is_live()) else {
            // Its MCP may be registering this very credential for the first time.
            if opening && may_wait && !self.unbound_waited_in_vain.contains(&digest) {
                return Decision::Wait;
            }
            if opening && waited {
                if self.unbound_waited_in_vain.len() >= MAX_UNBOUND_WAITED_IN_VAIN {
                    self.unbound_waited_in_vain.clear();
                }
                self.unbound_waited_in_vain.insert(digest);
            }
            return Decision::Unbound;
        };
        binding.last_use = now;
        self.last_use_dirty = true;
        let fp = binding.fingerprint;
        let registering = binding.awaiting_write.is_some();
        // Looked up once: the request's own count and mark are made through it below.
        let Some(route) = self.routes.get_mut(&fp) else {
            return Decision::Unbound;
        };
        if route.in_flight >= self.config.max_requests_per_identity {
            return Decision::TooMany { fingerprint: fp };
        }
        let live = !route.sessions.is_empty();
        let worker = match &route.state {
            _ if self.config.pass_through => None,
            RouteState::Ready { worker } if live => Some(*worker),
            // Its session's last hooks (`Stop`, `SessionEnd`) close its records (§3.5). A hook
            // that opens a session belongs to a new one, whose MCP is likely registering
            // (Claude Code posts `SessionStart` before it starts its MCP server): it waits for
            // that session's worker, and goes to the draining one only if no session came.
            RouteState::Draining { worker, .. }
                if kind.is_hook() && !(opening && may_wait && !route.opening_waited_in_vain) =>
            {
                Some(*worker)
            }
            _ => None,
        };
        let worker = worker.and_then(|w| {
            self.generations
                .get(&w)
                .filter(|g| g.conn.is_some() && !g.status.is_revoked())
                .map(|g| (w, g.endpoint.clone(), g.certificate, g.secret))
        });
        let starting = matches!(
            route.state,
            RouteState::Activating { .. }
                | RouteState::Draining {
                    pending_launch: true,
                    ..
                }
        ) && live;
        // A first registration's binding is there before its session is (the session joins
        // the route once the binding is durable): its requests wait as for the worker.
        let awaits_session = !live && (registering || (opening && !route.opening_waited_in_vain));
        if worker.is_none() && may_wait && (starting || awaits_session) {
            return Decision::Wait;
        }
        if waited && registering {
            // The write outlasted a whole wait (a stuck disk): the next requests pass at
            // once rather than each waiting in vain.
            if let Some(binding) = self.bindings.get_mut(&digest) {
                binding.awaiting_write = None;
            }
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
        route.in_flight += 1;
        if opening && waited && !live {
            route.opening_waited_in_vain = true;
        }
        match worker {
            Some((worker_id, endpoint, certificate_sha256, secret)) => {
                if route.relaunched_after_crash {
                    // The crash loop, if there was one, is over.
                    route.relaunched_after_crash = false;
                    route.backoff = Duration::ZERO;
                    route.attempt = 0;
                }
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
    ///
    /// Returns the route when this was the last request on its draining worker while a new
    /// session waits for a worker of its own: hand it to [`Broker::end_drain_for_launch`].
    pub fn end_request(&mut self, ticket: Ticket) -> Option<Fingerprint> {
        let entry = self.tickets.remove(&ticket.0)?;
        let fp = entry.fingerprint;
        let mut route = self.routes.get_mut(&fp);
        if let Some(route) = &mut route {
            route.in_flight = route.in_flight.saturating_sub(1);
        }
        let worker = entry.worker?;
        let g = self.generations.get_mut(&worker)?;
        g.in_flight = g.in_flight.saturating_sub(1);
        let idle = g.in_flight == 0;
        let waited_for = matches!(
            route.map(|r| &r.state),
            Some(RouteState::Draining { worker: w, pending_launch: true, .. }) if *w == worker
        );
        (idle && waited_for).then_some(fp)
    }

    /// Ends the drain of the route's worker, idle now, and launches the worker a new session
    /// of the route waits for (see [`Broker::end_request`]).
    pub fn end_drain_for_launch(&mut self, now: Instant, fp: Fingerprint) {
        if let Some(RouteState::Draining { worker, .. }) = self.state(fp).cloned()
            && self.end_idle_drain(fp, worker)
        {
            self.after_drain(now, fp, true);
        }
    }

    /// The connection to the chosen worker failed before any byte of the request was
    /// written (§3.7). The ticket ends; the request may pass through once, which the shell
    /// does without asking again. `Gone` (refused, wrong certificate) is evidence of death.
    pub fn worker_unreachable(&mut self, now: Instant, ticket: Ticket, outcome: ProbeOutcome) {
        let worker = self.tickets.get(&ticket.0).and_then(|t| t.worker);
        if let Some(fp) = self.end_request(ticket) {
            self.end_drain_for_launch(now, fp);
        }
        let Some(worker) = worker else { return };
        match outcome {
            ProbeOutcome::Gone => self.on_worker_gone(now, worker, FailureReason::WorkerGone),
            // A probe already on its way decides. Starting another would discard its result,
            // so requests failing more often than probes answer would keep a hung worker
            // Ready for ever, every request waiting out its connect before passing through.
            ProbeOutcome::Failed => {
                if self
                    .generations
                    .get(&worker)
                    .is_some_and(|g| g.probe.is_none())
                {
                    self.start_probe(worker);
                }
            }
            ProbeOutcome::Ready => {}
        }
    }
}
