//! Helpers shared by the unit tests: an SSE splitter and a plain hyper client.

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// One SSE event: its `event:` name, if any, and its `data:` text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SseEvent {
    pub(crate) name: Option<String>,
    pub(crate) data: String,
}

impl SseEvent {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap()
    }
}

/// Splits an SSE body into events; every event must end with a blank line.
pub(crate) fn sse_events(body: &[u8]) -> Vec<SseEvent> {
    let text = std::str::from_utf8(body).unwrap();
    assert!(
        text.ends_with("\n\n"),
        "stream does not end with a blank line"
    );
    text.split_terminator("\n\n")
        .map(|block| {
            let mut name = None;
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(value) = line.strip_prefix("event: ") {
                    name = Some(value.to_owned());
                } else if let Some(value) = line.strip_prefix("data: ") {
                    data.push(value);
                } else {
                    panic!("unexpected sse line {line:?}");
                }
            }
            SseEvent {
                name,
                data: data.join("\n"),
            }
        })
        .collect()
}

pub(crate) type TestClient = Client<HttpConnector, Full<Bytes>>;

pub(crate) fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build_http()
}

pub(crate) fn h2c_client() -> TestClient {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

#[derive(Debug)]
pub(crate) struct Answered {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Answered {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    pub(crate) fn header(&self, name: &str) -> &str {
        self.headers.get(name).unwrap().to_str().unwrap()
    }
}

pub(crate) async fn send(
    client: &TestClient,
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answered {
    let mut builder = Request::builder().method(method).uri(url);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let req = builder
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let res = client.request(req).await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    Answered {
        status,
        headers,
        body,
    }
}

pub(crate) async fn post_json(client: &TestClient, url: &str, body: &str) -> Answered {
    send(
        client,
        Method::POST,
        url,
        &[("content-type", "application/json")],
        body,
    )
    .await
}
