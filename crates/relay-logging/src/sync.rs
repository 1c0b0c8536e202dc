//! One policy for the std mutexes of the daemon, the worker and their sinks: a lock that a
//! panic poisoned fails closed. It lives here, below every crate that locks, because the
//! policy includes logging the first poisoned lock.
//!
//! A panic while a mutex was held may have left its data half-updated, so nothing reads that
//! data again: [`lock`] returns `None`, and each caller refuses the work that needed it (a
//! rate limiter or a connection cap refuses, a verdict queue refuses the request, a pool
//! hands out no connection). The broker is the exception that proves the rule: without it
//! nothing can be decided safely, so a poisoned broker stops the daemon ([`lock_or_exit`])
//! and the service manager starts it again from its last durable state.
//! The first poisoned lock of a process is logged at error level; later ones are silent, so a
//! request loop cannot flood the log. `clippy.toml` refuses `Mutex::lock` everywhere else.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Set once the first poisoned lock has been logged.
static REPORTED: AtomicBool = AtomicBool::new(false);

/// The exit status of a daemon whose broker lock was poisoned (EX_SOFTWARE).
const EXIT_INTERNAL: i32 = 70;

/// Locks `mutex`; `None` when a panic poisoned it (logged once per process, naming `what`).
pub fn lock<'a, T>(mutex: &'a Mutex<T>, what: &'static str) -> Option<MutexGuard<'a, T>> {
    #[expect(
        clippy::disallowed_methods,
        reason = "the one place that locks a std mutex"
    )]
    let locked = mutex.lock();
    match locked {
        Ok(guard) => Some(guard),
        Err(_) => {
            if !REPORTED.swap(true, Ordering::Relaxed) {
                tracing::error!(
                    event = "lock_poisoned",
                    lock = what,
                    "a panic poisoned a lock; the work that needs it is refused from now on"
                );
            }
            None
        }
    }
}

/// Locks a mutex without which the process cannot go on safely; a poisoned one ends the
/// process with status 70 after logging why.
pub fn lock_or_exit<'a, T>(mutex: &'a Mutex<T>, what: &'static str) -> MutexGuard<'a, T> {
    match lock(mutex, what) {
        Some(guard) => guard,
        None => {
            tracing::error!(
                event = "lock_poisoned",
                lock = what,
                "stopping: a panic left this lock's state unknown, and nothing can be decided safely without it"
            );
            std::process::exit(EXIT_INTERNAL)
        }
    }
}

#[cfg(test)]
mod tests;
