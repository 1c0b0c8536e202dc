//! The observability back ends' stand-in: one loopback HTTP server that keeps what an
//! ATOF http sink posts (JSON Lines on `/atof`) and what an OTLP/HTTP exporter posts
//! (`ExportTraceServiceRequest` protobuf on `/v1/traces`, decoded with the official
//! `opentelemetry-proto` types), and answers 200 to both.

#![allow(
    clippy::disallowed_methods,
    reason = "test support: a panic here fails the test that caused it, so a poisoned lock is read as is"
)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use tokio::net::TcpListener;

/// The header the e2e plugin configuration fills from `header_env`; every POST's value is
/// kept.
pub(crate) const KEY_HEADER: &str = "x-collector-key";

#[derive(Default)]
struct Received {
    records: Vec<serde_json::Value>,
    spans: Vec<Span>,
    undecodable: Vec<String>,
    /// The [`KEY_HEADER`] of every POST, in arrival order.
    keys: Vec<Option<String>>,
}

/// What the server task and the test share: what arrived, and a wake-up after each POST.
#[derive(Default)]
struct Shared {
    received: Mutex<Received>,
    arrived: tokio::sync::Notify,
}

pub(crate) struct Collector {
    addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Collector {
    pub(crate) async fn start() -> anyhow::Result<Collector> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let for_server = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let shared = Arc::clone(&for_server);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let shared = Arc::clone(&shared);
                        async move {
                            let path = req.uri().path().to_owned();
                            let key = req
                                .headers()
                                .get(KEY_HEADER)
                                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
                            let body = req.into_body().collect().await?.to_bytes();
                            keep(&shared, &path, key, &body);
                            Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::new())))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Collector { addr, shared, task })
    }

    pub(crate) fn atof_url(&self) -> String {
        format!("http://{}/atof", self.addr)
    }

    pub(crate) fn otlp_url(&self) -> String {
        format!("http://{}/v1/traces", self.addr)
    }

    pub(crate) fn records(&self) -> Vec<serde_json::Value> {
        self.lock().records.clone()
    }

    pub(crate) fn spans(&self) -> Vec<Span> {
        self.lock().spans.clone()
    }

    /// The [`KEY_HEADER`] of every POST so far.
    pub(crate) fn keys(&self) -> Vec<Option<String>> {
        self.lock().keys.clone()
    }

    /// Bodies that were neither JSON Lines nor an OTLP trace export.
    pub(crate) fn undecodable(&self) -> Vec<String> {
        self.lock().undecodable.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Received> {
        self.shared
            .received
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits until `done` holds for what arrived (checked after every POST), or fails at the
    /// deadline.
    pub(crate) async fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[serde_json::Value], &[Span]) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Registered before the check, so a POST between the two still wakes us.
            let arrived = self.shared.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            {
                let received = self.lock();
                if done(&received.records, &received.spans) {
                    return Ok(());
                }
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                anyhow::bail!(
                    "the collector never got {what}: {} records, {} spans",
                    self.records().len(),
                    self.spans().len()
                );
            }
        }
    }
}

fn keep(shared: &Shared, path: &str, key: Option<String>, body: &[u8]) {
    store(shared, path, key, body);
    shared.arrived.notify_waiters();
}

fn store(shared: &Shared, path: &str, key: Option<String>, body: &[u8]) {
    let mut received = shared
        .received
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    received.keys.push(key);
    if path == "/v1/traces" {
        match ExportTraceServiceRequest::decode(body) {
            Ok(export) => received.spans.extend(
                export
                    .resource_spans
                    .into_iter()
                    .flat_map(|r| r.scope_spans)
                    .flat_map(|s| s.spans),
            ),
            Err(error) => received.undecodable.push(format!("{path}: {error}")),
        }
        return;
    }
    for line in body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice(line) {
            Ok(record) => received.records.push(record),
            Err(error) => received.undecodable.push(format!("{path}: {error}")),
        }
    }
}
