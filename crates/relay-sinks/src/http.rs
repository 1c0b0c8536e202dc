//! The network delivery shared by the `http` sink and the OTLP exporter: a batching loop,
//! one hyper client over rustls with ring, and retries with capped exponential backoff.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::config::DeliveryConfig;
use crate::drops::{Counters, DROP_LOG_INTERVAL};
use crate::error::SinkError;
use crate::sinks::Msg;

/// The content type of the `http` sink's batches.
pub const JSON_LINES: &str = "application/x-ndjson";

type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The wait before retry number `retry` (1 for the first): `initial * 2^(retry-1)`, never
/// more than `cap`.
pub fn backoff(retry: u32, initial: Duration, cap: Duration) -> Duration {
    let factor = 1u32
        .checked_shl(retry.saturating_sub(1))
        .unwrap_or(u32::MAX);
    initial.saturating_mul(factor).min(cap)
}

/// Parses a collector URL: `http` or `https` with a host, and no user information.
pub(crate) fn parse_url(url: &str) -> Result<Uri, SinkError> {
    let uri: Uri = url.parse().map_err(|_| SinkError::InvalidUrl {
        reason: "not a URL",
    })?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => {
            return Err(SinkError::InvalidUrl {
                reason: "the scheme must be http or https",
            });
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(SinkError::InvalidUrl { reason: "no host" });
    }
    // A user and password in the URL would not be sent (no client here turns them into a
    // header), and the connection pool's debug lines name the authority whole: refused, with
    // the way to send a credential.
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(SinkError::InvalidUrl {
            reason: "a user or password in the URL is not sent; put the credential in headers or header_env",
        });
    }
    Ok(uri)
}

/// The headers of a sink: the literal ones, then those read from the environment through
/// `lookup`. Values are marked sensitive and never appear in an error or a log.
pub fn resolve_headers(
    headers: &BTreeMap<String, String>,
    header_env: &BTreeMap<String, String>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<HeaderMap, SinkError> {
    let mut map = HeaderMap::new();
    let mut insert = |name: &str, value: &str| -> Result<(), SinkError> {
        let invalid = || SinkError::InvalidHeader {
            name: name.to_owned(),
        };
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid())?;
        let mut value = HeaderValue::from_str(value).map_err(|_| invalid())?;
        value.set_sensitive(true);
        map.insert(header, value);
        Ok(())
    };
    for (name, value) in headers {
        insert(name, value)?;
    }
    for (name, var) in header_env {
        let value = lookup(var).ok_or_else(|| SinkError::HeaderEnvMissing {
            header: name.clone(),
            var: var.clone(),
        })?;
        insert(name, &value)?;
    }
    Ok(map)
}

/// The TLS configuration with the platform's roots and the ring provider. An empty root
/// store is not an error here: `http` collectors still work, `https` ones fail and count.
pub(crate) fn default_tls() -> Result<Arc<rustls::ClientConfig>, SinkError> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        tracing::warn!(
            event = "sink_without_platform_roots",
            "no platform root certificates: https collectors will fail"
        );
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|_| SinkError::Tls)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Header value words shorter than this (`Bearer`'s scheme aside, tokens are longer) are
/// left in a collector's message, where masking them would hide its words, not a secret.
const MIN_MASKED_WORD: usize = 8;

/// Posts one encoded batch to one collector.
#[derive(Debug)]
pub(crate) struct Poster {
    client: HttpsClient,
    uri: Uri,
    headers: HeaderMap,
    content_type: &'static str,
    timeout: Duration,
    /// The items a successful answer says were rejected, with the collector's message.
    rejected: fn(&[u8]) -> Option<(u64, String)>,
}

/// For collectors whose answers say nothing of rejected items.
pub(crate) fn no_rejections(_answer: &[u8]) -> Option<(u64, String)> {
    None
}

/// The outcome of one POST.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Attempt {
    /// Taken; an OTLP collector may still say it rejected some items (a partial success),
    /// which is final: OTLP/HTTP says not to send them again.
    Delivered(Option<(u64, String)>),
    /// A network error or a timeout: worth another try after the backoff.
    Unreachable,
    /// 429, 502, 503 or 504, the statuses OTLP/HTTP says to retry: worth another try, after
    /// the collector's `Retry-After` when it gave one.
    Busy(Option<Duration>),
    /// Any other status: the collector refuses the batch; OTLP/HTTP says not to retry it.
    Refused(StatusCode),
}

/// The longest `Retry-After` waited for: the batch holds the queue behind it meanwhile.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// A `Retry-After` in seconds, at most [`MAX_RETRY_AFTER`]; a date or anything else is none.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

impl Poster {
    pub(crate) fn new(
        tls: Arc<rustls::ClientConfig>,
        uri: Uri,
        headers: HeaderMap,
        content_type: &'static str,
        timeout: Duration,
        rejected: fn(&[u8]) -> Option<(u64, String)>,
    ) -> Self {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*tls).clone())
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .build();
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(https);
        Poster {
            client,
            uri,
            headers,
            content_type,
            timeout,
            rejected,
        }
    }

    /// `message` with every word of the sink's header values written `…`: a collector may
    /// echo the credential it was sent ("bad key …"), and header values never reach a log.
    fn without_header_values(&self, message: &str) -> String {
        let mut words: Vec<&str> = self
            .headers
            .values()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(|c: char| c.is_whitespace() || c == ','))
            .filter(|word| word.len() >= MIN_MASKED_WORD)
            .collect();
        // Longest first: a word that is part of a longer one must not leave the rest of it.
        words.sort_unstable_by_key(|word| std::cmp::Reverse(word.len()));
        words.into_iter().fold(message.to_owned(), |message, word| {
            message.replace(word, "…")
        })
    }

    async fn post(&self, body: Bytes) -> Attempt {
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = self.uri.clone();
        *req.headers_mut() = self.headers.clone();
        req.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(self.content_type));
        let exchange = async {
            let res = self.client.request(req).await.ok()?;
            let status = res.status();
            let wait = retry_after(res.headers());
            // Read the answer to the end so the connection goes back to the pool. The status
            // decides; an answer that breaks off only gives no partial-success count.
            let answer = res
                .into_body()
                .collect()
                .await
                .map(http_body_util::Collected::to_bytes)
                .unwrap_or_default();
            Some((status, wait, answer))
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(Some((status, _, answer))) if status.is_success() => {
                Attempt::Delivered((self.rejected)(&answer))
            }
            Ok(Some((
                StatusCode::TOO_MANY_REQUESTS
                | StatusCode::BAD_GATEWAY
                | StatusCode::SERVICE_UNAVAILABLE
                | StatusCode::GATEWAY_TIMEOUT,
                wait,
                _,
            ))) => Attempt::Busy(wait),
            Ok(Some((status, _, _))) => Attempt::Refused(status),
            Ok(None) | Err(_) => Attempt::Unreachable,
        }
    }

    /// Delivers one batch with retries; gives up after `max_attempts` and counts the batch
    /// as dropped.
    async fn deliver(&self, body: Bytes, n: u64, delivery: &DeliveryConfig, counters: &Counters) {
        let initial = Duration::from_millis(delivery.retry_initial_ms);
        let cap = Duration::from_millis(delivery.retry_max_ms);
        let mut attempt = 1;
        loop {
            let wait = match self.post(body.clone()).await {
                Attempt::Delivered(None) => {
                    counters.add_written(n);
                    return;
                }
                Attempt::Delivered(Some((rejected, message))) => {
                    let rejected = rejected.min(n);
                    counters.add_written(n - rejected);
                    counters.add_rejected(rejected, &self.without_header_values(&message));
                    return;
                }
                Attempt::Refused(status) => {
                    counters.add_refused(n, status.as_u16());
                    return;
                }
                Attempt::Unreachable if attempt >= delivery.max_attempts.max(1) => {
                    counters.add_dropped(n, "collector_unreachable");
                    return;
                }
                // The collector answered every attempt, that it could not take the batch.
                Attempt::Busy(_) if attempt >= delivery.max_attempts.max(1) => {
                    counters.add_dropped(n, "collector_unavailable");
                    return;
                }
                Attempt::Busy(Some(wait)) => wait,
                Attempt::Unreachable | Attempt::Busy(None) => backoff(attempt, initial, cap),
            };
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }
}

/// The batching loop: a batch goes out when it is full, when its first item has waited
/// `batch_max_delay_ms`, on a flush and on shutdown. Acknowledgements are sent once what came
/// before them was delivered or given up.
pub(crate) async fn run_batches<T>(
    mut rx: mpsc::Receiver<Msg<T>>,
    delivery: DeliveryConfig,
    poster: Poster,
    encode: impl Fn(&[T]) -> Bytes,
    counters: Arc<Counters>,
) {
    let max_items = delivery.batch_max_items.max(1);
    let max_delay = Duration::from_millis(delivery.batch_max_delay_ms);
    let mut batch: Vec<T> = Vec::with_capacity(max_items);
    let mut due: Option<Instant> = None;
    let mut report = tokio::time::interval(DROP_LOG_INTERVAL);
    report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let batch_due = async {
            match due {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let msg = tokio::select! {
            msg = rx.recv() => msg,
            () = batch_due => {
                send_batch(&mut batch, &mut due, &poster, &encode, &delivery, &counters).await;
                continue;
            }
            at = report.tick() => {
                counters.report_suppressed(at.into_std());
                continue;
            }
        };
        match msg {
            Some(Msg::Item(item)) => {
                batch.push(item);
                if due.is_none() {
                    due = Some(Instant::now() + max_delay);
                }
                if batch.len() >= max_items {
                    send_batch(&mut batch, &mut due, &poster, &encode, &delivery, &counters).await;
                }
            }
            Some(Msg::Flush(ack)) => {
                send_batch(&mut batch, &mut due, &poster, &encode, &delivery, &counters).await;
                let _ = ack.send(());
            }
            Some(Msg::Shutdown(ack)) => {
                send_batch(&mut batch, &mut due, &poster, &encode, &delivery, &counters).await;
                let _ = ack.send(());
                return;
            }
            None => {
                send_batch(&mut batch, &mut due, &poster, &encode, &delivery, &counters).await;
                return;
            }
        }
    }
}

async fn send_batch<T>(
    batch: &mut Vec<T>,
    due: &mut Option<Instant>,
    poster: &Poster,
    encode: &impl Fn(&[T]) -> Bytes,
    delivery: &DeliveryConfig,
    counters: &Counters,
) {
    *due = None;
    if batch.is_empty() {
        return;
    }
    let body = encode(batch);
    let n = u64::try_from(batch.len()).unwrap_or(u64::MAX);
    batch.clear();
    poster.deliver(body, n, delivery, counters).await;
}

/// A batch of JSON Lines: each record once, each ending in a newline.
pub(crate) fn encode_json_lines(records: &[Bytes]) -> Bytes {
    let len = records.iter().map(|r| r.len() + 1).sum();
    let mut body = Vec::with_capacity(len);
    for record in records {
        body.extend_from_slice(record);
        if !record.ends_with(b"\n") {
            body.push(b'\n');
        }
    }
    Bytes::from(body)
}

#[cfg(test)]
mod tests;
