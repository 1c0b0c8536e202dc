//! Logging for every Relay process: the `tracing` subscriber set-up and the typed lifecycle events of SPEC §10.3.
//!
//! A binary resolves its [`LogConfig`] from defaults, its config file, `RELAY_LOG` / `RELAY_LOG_FORMAT` and its flags ([`LogConfig::resolve`], a pure function), then calls [`init`] once with a writer (stderr, or the worker's log file).
//! Tests build a [`Dispatch`](tracing::Dispatch) with [`subscriber`] and use it under `tracing::dispatcher::with_default`, writing into a [`LogCapture`].
//! Lifecycle events are values of [`Lifecycle`] emitted with [`Lifecycle::emit`]; the three provider-failure events are [`ProviderFailure`] values that can only be emitted through a [`RateLimiter`], which adds `suppressed_since_last_emit`.
//! Fingerprints and credential digests are taken in full and always written as a 12-character prefix; no event type has a place for a token, grant, key or secret.
//! It also holds the exit conventions every binary shares ([`clap_exit`], [`usage_exit`]: one line on stderr and status 64 for a usage error).
//! This crate reads no environment variable and opens no file (callers pass both in), the rate limiter reads no clock, and it depends on no other Relay crate but `relay-proto`, whose shared vocabulary of reasons (roles, refusal codes, removal, cancel and disconnect reasons) the events carry as they are.

/// Writes one line to stderr, as `eprintln!` does, but a line that cannot be written (a
/// full disk, a pipe whose reader is gone) is lost instead of panicking: a daemon must
/// not die of its log, nor a hook's answer be lost for want of its message.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stderr(), $($arg)*);
    }};
}

/// Writes a command's output to stdout, as `print!` does, without panicking when it cannot
/// be written. A reader that has gone away (`relayd bindings list | head -1`) is not a
/// failure: it read what it wanted. Any other failure, such as a full disk, is returned
/// for the command to report on stderr and exit non-zero, since its output is lost.
pub fn print_out(text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        written => written,
    }
}

mod capture;
mod config;
mod exit;
mod jsonl;
mod lifecycle;
mod rate_limit;
mod subscriber;
pub mod sync;
#[cfg(test)]
mod test_support;

pub use crate::{
    capture::LogCapture,
    config::{ENV_LOG, ENV_LOG_FORMAT, LogConfig, LogConfigError, LogFormat, LogOrigin},
    exit::{EXIT_USAGE, clap_exit, usage_exit},
    lifecycle::{
        CredentialSkipReason, CredentialSource, DaemonKeys, DaemonMode, LIFECYCLE_TARGET,
        Lifecycle, McpPassThroughReason, ProcessExit, PublicRoute,
    },
    rate_limit::{ProviderFailure, RateLimiter, Throttle},
    subscriber::{InitError, init, subscriber},
};
