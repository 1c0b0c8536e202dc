//! The sinks' configuration: plain data the worker builds from the validated `plugins.toml`
//! ([`SinksConfig::from_component`]); `relay_plugins::config` owns the file's grammar.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use relay_plugins::config::{ObservabilityConfig, Sink};

/// Every sink of one observability component.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinksConfig {
    /// The record sinks, each fed every ATOF line.
    pub sinks: Vec<SinkConfig>,
    /// The optional OTLP/HTTP trace exporter, fed spans.
    pub otlp: Option<OtlpConfig>,
}

/// One record sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkConfig {
    /// Appends JSON Lines to a per-user (or per-route) file.
    File(FileSinkConfig),
    /// Posts batches of JSON Lines to a collector.
    Http(HttpSinkConfig),
}

/// The `file` sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSinkConfig {
    /// The directory the file lives in; it must exist and must not be writable by others
    /// unless it has the sticky bit.
    pub directory: PathBuf,
    /// The file name; it must contain `{user}` or `{fingerprint}` so that users never share
    /// a file.
    pub filename: String,
    /// Records queued for the writer before new ones are dropped.
    pub queue_capacity: usize,
}

/// The `http` sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSinkConfig {
    /// The collector's URL (`http` or `https`).
    pub url: String,
    /// Literal headers sent with every batch.
    pub headers: BTreeMap<String, String>,
    /// Headers whose values are read from the named environment variables when the sink
    /// starts (header name to variable name), for secrets that must not sit in the file.
    pub header_env: BTreeMap<String, String>,
    /// Batching, timeout, queue and retry.
    pub delivery: DeliveryConfig,
}

/// The OTLP/HTTP trace exporter (protobuf encoding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// The collector: a base URL such as `http://collector:4318` (then `/v1/traces` is
    /// appended) or the full traces URL when it has a path.
    pub endpoint: String,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// Literal headers sent with every export.
    pub headers: BTreeMap<String, String>,
    /// Headers whose values are read from the named environment variables at start.
    pub header_env: BTreeMap<String, String>,
    /// Batching, timeout, queue and retry.
    pub delivery: DeliveryConfig,
}

/// How a network sink batches, times out, queues and retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryConfig {
    /// A batch is sent when it holds this many items.
    pub batch_max_items: usize,
    /// A batch is sent at the latest this long after its first item arrived.
    pub batch_max_delay_ms: u64,
    /// The timeout of one POST, connection included.
    pub timeout_ms: u64,
    /// Items queued before new ones are dropped.
    pub queue_capacity: usize,
    /// The first retry waits this long; each next one twice as long.
    pub retry_initial_ms: u64,
    /// No retry waits longer than this.
    pub retry_max_ms: u64,
    /// Attempts per batch, the first included; then the batch is dropped and counted.
    pub max_attempts: u32,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig {
            batch_max_items: default_batch_max_items(),
            batch_max_delay_ms: default_batch_max_delay_ms(),
            timeout_ms: default_timeout_ms(),
            queue_capacity: default_queue_capacity(),
            retry_initial_ms: default_retry_initial_ms(),
            retry_max_ms: default_retry_max_ms(),
            max_attempts: default_max_attempts(),
        }
    }
}

/// What the worker knows that the sinks need.
#[derive(Debug, Clone, Default)]
pub struct SinkContext {
    /// The OS user name of the worker, substituted for `{user}`.
    pub user: String,
    /// The route fingerprint, substituted for `{fingerprint}`.
    pub fingerprint: String,
    /// The TLS client configuration for `https` collectors; `None` builds one with the
    /// platform's roots and the ring provider.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl SinksConfig {
    /// The sinks of an observability component as `plugins.toml` configures them (parsed and
    /// validated by `relay_plugins::config`); retries keep their defaults.
    pub fn from_component(config: &ObservabilityConfig) -> SinksConfig {
        let sinks = config
            .sinks
            .iter()
            .map(|sink| match sink {
                Sink::File(file) => SinkConfig::File(FileSinkConfig {
                    directory: file.directory.clone(),
                    filename: file.filename.clone(),
                    queue_capacity: default_queue_capacity(),
                }),
                Sink::Http(http) => SinkConfig::Http(HttpSinkConfig {
                    url: http.url.clone(),
                    headers: http.headers.clone(),
                    header_env: http.header_env.clone(),
                    delivery: DeliveryConfig {
                        batch_max_items: http.batch_max,
                        batch_max_delay_ms: http.flush_ms,
                        timeout_ms: http.timeout_ms,
                        queue_capacity: http.queue,
                        ..DeliveryConfig::default()
                    },
                }),
            })
            .collect();
        let otlp = config.otlp.as_ref().map(|otlp| OtlpConfig {
            endpoint: otlp.endpoint.clone(),
            service_name: otlp.service_name.clone(),
            headers: otlp.headers.clone(),
            header_env: otlp.header_env.clone(),
            delivery: DeliveryConfig::default(),
        });
        SinksConfig { sinks, otlp }
    }
}

fn default_queue_capacity() -> usize {
    4096
}

fn default_batch_max_items() -> usize {
    256
}

fn default_batch_max_delay_ms() -> u64 {
    1000
}

fn default_timeout_ms() -> u64 {
    5000
}

fn default_retry_initial_ms() -> u64 {
    200
}

fn default_retry_max_ms() -> u64 {
    10_000
}

fn default_max_attempts() -> u32 {
    5
}

#[cfg(test)]
mod tests;
