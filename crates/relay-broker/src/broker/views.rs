//! Read-only views for the status endpoints and `relayd bindings list`.

use relay_proto::{RouteState as ViewState, WorkerState};

use super::{Broker, RouteState};
use std::net::IpAddr;

use crate::types::{BindingView, Digest, Fingerprint, RouteView, WorkerView};

impl Broker {
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

    /// The identity a credential belongs to when the broker knows it: bound, or named by a
    /// registration whose binding is still being written (§5.3). `None` for a credential no
    /// MCP has registered, which is what a random token looks like (and a user's very
    /// first session before its MCP registers). Read-only: it does not count as a use.
    pub fn known_credential(&self, digest: &Digest) -> Option<Fingerprint> {
        self.bindings
            .get(digest)
            .filter(|b| b.is_live())
            .map(|b| b.fingerprint)
    }

    /// The addresses the route's connected sessions come from, one per session.
    pub(super) fn connected_peers(&self, fp: &Fingerprint) -> impl Iterator<Item = IpAddr> {
        self.routes
            .get(fp)
            .into_iter()
            .flat_map(|route| &route.sessions)
            .filter_map(|s| self.sessions.get(s))
            .filter(|s| s.conn.is_some())
            .map(|s| s.peer)
    }

    /// The route of a credential, or `None` when it is not bound.
    pub fn route_view(&self, digest: &Digest) -> Option<RouteView> {
        let binding = self.bindings.get(digest).filter(|b| b.is_live())?;
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
        // More than one address is a machine identity used by two machines.
        let mut peers = self.connected_peers(&binding.fingerprint);
        let first_peer = peers.next();
        Some(RouteView {
            state,
            worker_id: worker,
            control_available: control,
            worker_ready: state == ViewState::Ready
                && control == Some(true)
                && !self.config.pass_through,
            live_references: route.sessions.len() as u32,
            identity_conflict: peers.any(|peer| Some(peer) != first_peer),
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
                tombstone: !b.is_live(),
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
}
