//! Building and installing the `tracing` subscriber.

use tracing::Dispatch;
use tracing_subscriber::{
    filter::{FilterFn, filter_fn},
    fmt::{MakeWriter, time::SystemTime},
    layer::SubscriberExt as _,
    util::SubscriberInitExt,
};

use crate::{
    config::{LogConfig, LogConfigError, LogFormat},
    jsonl::JsonLines,
};

/// Installing the global subscriber failed.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The configuration handed to [`init`] is not valid.
    #[error(transparent)]
    Config(#[from] LogConfigError),
    /// A global `tracing` subscriber or `log` logger was installed before.
    #[error("a global log subscriber is already installed")]
    AlreadyInstalled,
}

/// Builds a subscriber for `config` writing to `writer`, without installing it.
///
/// Use it with `tracing::dispatcher::with_default` in tests, or hand it to
/// `tracing::dispatcher::set_global_default` yourself.
/// The human format is written without colour codes, whatever the writer is: logs go to
/// journald, files and CI output more often than to a terminal.
pub fn subscriber<W>(config: &LogConfig, writer: W) -> Result<Dispatch, LogConfigError>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = config.filter()?;
    // A line that cannot be written (a full disk, a pipe whose reader is gone) is lost:
    // tracing-subscriber's report of it would be printed to stderr, which panics when
    // stderr is that same unwritable file, and a daemon must not die of its log.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_timer(SystemTime)
        .with_ansi(false)
        .log_internal_errors(false);
    let dispatch = match config.format {
        LogFormat::Human => Dispatch::new(builder.finish().with(no_frame_logs())),
        LogFormat::Jsonl => Dispatch::new(
            builder
                .event_format(JsonLines)
                .finish()
                .with(no_frame_logs()),
        ),
    };
    Ok(dispatch)
}

/// The WebSocket crates log each control frame whole at `trace`, and control frames carry
/// route credentials, grants and generation secrets. The level filter already holds those
/// crates at `debug`, but a more specific directive (`tungstenite::protocol=trace`) or a
/// span directive would outrank that; this refuses their `trace` events whatever the
/// directives say.
fn no_frame_logs() -> FilterFn {
    filter_fn(|metadata| {
        let target = metadata.target();
        let websocket = ["tungstenite", "tokio_tungstenite"].iter().any(|krate| {
            target
                .strip_prefix(krate)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
        });
        !(websocket && *metadata.level() == tracing::Level::TRACE)
    })
}

/// Installs the process-wide subscriber for `config` writing to `writer` (`std::io::stderr` for
/// the daemon, MCP and hook; `std::sync::Mutex::new(file)` for a worker's log file), and routes records of the `log` crate
/// (rustls, for instance) through it. Call it once, early in `main`.
pub fn init<W>(config: &LogConfig, writer: W) -> Result<(), InitError>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let dispatch = subscriber(config, writer)?;
    dispatch
        .try_init()
        .map_err(|_already| InitError::AlreadyInstalled)
}

#[cfg(test)]
mod tests;
