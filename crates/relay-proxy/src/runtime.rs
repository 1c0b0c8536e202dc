//! The async runtime of Relay's long-running processes (relayd, relay-worker, relay-mcp),
//! sized to the CPUs the process may use.

use std::num::NonZeroUsize;

use tokio::runtime::{Builder, Runtime};

/// Builds the runtime of a process that may run `max_threads` threads at most: one thread
/// per CPU it may use (its affinity mask, or its cgroup's CPU quota), two when that count is
/// unknown.
///
/// On one CPU the runtime is a current-thread runtime. A multi-thread runtime of one worker
/// still pays for what only several threads need: a clock read and a moving average around
/// every batch of polls, an injection queue, and a wake of the worker whenever the thread in
/// `block_on` hands it a task. A second thread on the same CPU would only add wake-ups
/// between the two.
pub fn build(max_threads: NonZeroUsize) -> std::io::Result<Runtime> {
    let threads = threads(std::thread::available_parallelism().ok(), max_threads);
    let mut builder = if threads == 1 {
        Builder::new_current_thread()
    } else {
        let mut builder = Builder::new_multi_thread();
        builder.worker_threads(threads);
        builder
    };
    builder.enable_all().build()
}

fn threads(cpus: Option<NonZeroUsize>, max_threads: NonZeroUsize) -> usize {
    cpus.map_or(2, NonZeroUsize::get).min(max_threads.get())
}

#[cfg(test)]
mod tests;
