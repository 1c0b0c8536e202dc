//! Building and installing the `tracing` subscriber.

use tracing::Dispatch;
use tracing_subscriber::{
    fmt::{MakeWriter, time::SystemTime},
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
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_timer(SystemTime)
        .with_ansi(false);
    let dispatch = match config.format {
        LogFormat::Human => Dispatch::new(builder.finish()),
        LogFormat::Jsonl => Dispatch::new(builder.event_format(JsonLines).finish()),
    };
    Ok(dispatch)
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
