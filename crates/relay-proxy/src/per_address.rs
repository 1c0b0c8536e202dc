//! Amounts held per peer address under a cap (the connections of one address, the hook-body
//! bytes of one address), each given back when its [`Hold`] drops.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// What each peer address holds now; an address holding nothing has no entry, so the map
/// is as small as the set of addresses holding something.
#[derive(Debug)]
pub(crate) struct PerAddress {
    /// What is counted, for the message of a poisoned lock.
    what: &'static str,
    held: Mutex<HashMap<IpAddr, u64>>,
}

/// `amount` held by one address, given back on drop.
#[derive(Debug)]
pub(crate) struct Hold {
    counts: Arc<PerAddress>,
    ip: IpAddr,
    amount: u64,
}

impl PerAddress {
    pub(crate) fn new(what: &'static str) -> Arc<PerAddress> {
        Arc::new(PerAddress {
            what,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// Holds `amount` more for `ip` when its total stays within `cap`; `None` otherwise,
    /// and when the map is poisoned: refusing is safe, counting wrong is not.
    pub(crate) fn hold(self: &Arc<Self>, ip: IpAddr, amount: u64, cap: u64) -> Option<Hold> {
        let mut held = relay_logging::sync::lock(&self.held, self.what)?;
        let now = held.get(&ip).copied().unwrap_or(0);
        if now.saturating_add(amount) > cap {
            return None;
        }
        held.insert(ip, now + amount);
        Some(Hold {
            counts: self.clone(),
            ip,
            amount,
        })
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        relay_logging::sync::lock(&self.held, self.what).is_some_and(|held| held.is_empty())
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let Some(mut held) = relay_logging::sync::lock(&self.counts.held, self.counts.what) else {
            return;
        };
        if let Some(now) = held.get_mut(&self.ip) {
            *now = now.saturating_sub(self.amount);
            if *now == 0 {
                held.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests;
