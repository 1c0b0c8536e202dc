//! Budgets for requests waiting while a route starts its worker (SPEC §3.5).
//!
//! Each route the broker knows has its own budget, and credentials it does not know share
//! one small pool: a flood of random, well-formed tokens can fill only that pool, never take
//! a known user's place.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use relay_broker::Fingerprint;

/// Requests of one known route that may wait at once.
pub const MAX_WAITING_PER_ROUTE: usize = 64;

/// Requests with credentials the broker does not know (yet) that may wait at once, across
/// the daemon. A user's very first session looks like this until its MCP registers.
pub const MAX_WAITING_UNBOUND: usize = 16;

/// The budget a waiting request draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Pool {
    /// A credential the broker knows, budgeted with the other requests of its route.
    Route(Fingerprint),
    /// A credential the broker does not know.
    Unbound,
}

impl Pool {
    fn limit(self) -> usize {
        match self {
            Pool::Route(_) => MAX_WAITING_PER_ROUTE,
            Pool::Unbound => MAX_WAITING_UNBOUND,
        }
    }
}

/// How many requests wait in each pool; a pool's entry goes when its last waiter does.
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    counts: Mutex<HashMap<Pool, usize>>,
}

impl Waiting {
    /// A place in `pool`, or `None` when it is full.
    pub(crate) fn try_take(self: &Arc<Self>, pool: Pool) -> Option<WaitPermit> {
        let mut counts = relay_logging::sync::lock(&self.counts, "waiting pools")?;
        let count = counts.entry(pool).or_default();
        if *count >= pool.limit() {
            return None;
        }
        *count += 1;
        Some(WaitPermit {
            waiting: self.clone(),
            pool,
        })
    }

    #[cfg(test)]
    fn count(&self, pool: Pool) -> usize {
        relay_logging::sync::lock(&self.counts, "waiting pools")
            .map(|c| c.get(&pool).copied().unwrap_or(0))
            .unwrap_or(0)
    }
}

/// A place in a pool, given back when dropped.
#[derive(Debug)]
pub(crate) struct WaitPermit {
    waiting: Arc<Waiting>,
    pool: Pool,
}

impl Drop for WaitPermit {
    fn drop(&mut self) {
        let Some(mut counts) = relay_logging::sync::lock(&self.waiting.counts, "waiting pools")
        else {
            return;
        };
        if let Some(count) = counts.get_mut(&self.pool) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.pool);
            }
        }
    }
}

#[cfg(test)]
mod tests;
