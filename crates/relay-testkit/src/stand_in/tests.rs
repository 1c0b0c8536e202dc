use std::time::Duration;

use bytes::Bytes;
use http::header::RETRY_AFTER;
use http::{Method, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;
use crate::behaviour::CannedResponse;
use crate::fixtures::fixture_request;
use crate::formats::{Api, DEFAULT_TEXT, TOOL_COMMAND, TOOL_DONE_TEXT};
use crate::test_support::{client, h2c_client, post_json, send, sse_events};

const WAIT: Duration = Duration::from_secs(5);

const MESSAGES_PATHS: [&str; 1] = ["/v1/messages?beta=true"];
const RESPONSES_PATHS: [&str; 2] = ["/v1/responses", "/responses"];
const CHAT_PATHS: [&str; 2] = ["/v1/chat/completions", "/chat/completions"];

fn streaming_routes() -> Vec<(&'static str, Api)> {
    let mut routes = Vec::new();
    routes.extend(MESSAGES_PATHS.map(|p| (p, Api::AnthropicMessages)));
    routes.extend(RESPONSES_PATHS.map(|p| (p, Api::OpenAiResponses)));
    routes.push(("/backend-api/codex/responses", Api::OpenAiResponses));
    routes.extend(CHAT_PATHS.map(|p| (p, Api::OpenAiChat)));
    routes
}

#[tokio::test]
async fn head_probe_answers_200_empty() {
    let stand_in = StandIn::start().await.unwrap();
    let res = send(
        &client(),
        Method::HEAD,
        &format!("{}/", stand_in.base_url()),
        &[],
        "",
    )
    .await;
    assert_eq!(res.status, StatusCode::OK);
    assert!(res.body.is_empty());
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    assert_eq!(recorded[0].method, Method::HEAD);
    assert_eq!(recorded[0].path_and_query, "/");
}

#[tokio::test]
async fn models_answer_in_the_openai_or_anthropic_shape() {
    let stand_in = StandIn::start().await.unwrap();
    let client = client();
    for path in ["/v1/models", "/models"] {
        let url = format!("{}{path}", stand_in.base_url());
        let openai = send(&client, Method::GET, &url, &[], "").await;
        assert_eq!(openai.status, StatusCode::OK);
        assert_eq!(openai.json()["object"], "list");
        assert!(openai.json()["data"][0]["id"].is_string());
        let anthropic = send(
            &client,
            Method::GET,
            &url,
            &[("anthropic-version", "2023-06-01")],
            "",
        )
        .await;
        assert_eq!(anthropic.json()["data"][0]["type"], "model");
        assert_eq!(anthropic.json()["has_more"], false);
    }
}

#[tokio::test]
async fn non_streaming_turns_answer_each_api_shape() {
    let stand_in = StandIn::start().await.unwrap();
    let client = client();
    let base = stand_in.base_url();
    let body = r#"{"model":"m","stream":false}"#;

    let res = post_json(&client, &format!("{base}/v1/messages?beta=true"), body).await;
    assert_eq!(res.status, StatusCode::OK);
    assert_eq!(res.header("content-type"), "application/json");
    assert_eq!(res.json()["type"], "message");
    assert_eq!(res.json()["content"][0]["text"], DEFAULT_TEXT);

    let res = post_json(&client, &format!("{base}/v1/messages/count_tokens"), body).await;
    assert_eq!(res.json(), json!({"input_tokens": 10}));

    for path in RESPONSES_PATHS {
        let res = post_json(&client, &format!("{base}{path}"), body).await;
        assert_eq!(res.json()["object"], "response", "{path}");
        assert_eq!(res.json()["output"][0]["content"][0]["text"], DEFAULT_TEXT);
    }
    for path in CHAT_PATHS {
        let res = post_json(&client, &format!("{base}{path}"), "{}").await;
        assert_eq!(res.json()["object"], "chat.completion", "{path}");
        assert_eq!(res.json()["choices"][0]["message"]["content"], DEFAULT_TEXT);
    }
    // A body that is not JSON at all (compressed, say) still gets an answer.
    let res = post_json(
        &client,
        &format!("{base}/v1/responses"),
        "\u{1f}\u{8b}binary",
    )
    .await;
    assert_eq!(res.status, StatusCode::OK);
    assert_eq!(res.json()["object"], "response");
}

#[tokio::test]
async fn codex_chatgpt_path_always_streams() {
    let stand_in = StandIn::start().await.unwrap();
    let url = format!("{}/backend-api/codex/responses", stand_in.base_url());
    let res = post_json(&client(), &url, "{}").await;
    assert_eq!(res.header("content-type"), "text/event-stream");
    assert_eq!(res.body, crate::fixtures::OPENAI_RESPONSES_SSE);
}

#[tokio::test]
async fn unknown_paths_and_wrong_methods_are_refused() {
    let stand_in = StandIn::start().await.unwrap();
    let client = client();
    let res = post_json(
        &client,
        &format!("{}/v2/nothing", stand_in.base_url()),
        "{}",
    )
    .await;
    assert_eq!(res.status, StatusCode::NOT_FOUND);
    assert_eq!(res.json()["error"]["type"], "not_found_error");
    let res = send(
        &client,
        Method::GET,
        &format!("{}/v1/responses", stand_in.base_url()),
        &[],
        "",
    )
    .await;
    assert_eq!(res.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(res.header("allow"), "POST");
}

#[tokio::test]
async fn streamed_bodies_are_the_fixture_bytes_also_one_byte_at_a_time() {
    let stand_in = StandIn::start().await.unwrap();
    let client = client();
    for chunk_size in [None, Some(1)] {
        stand_in.set_behaviour(Behaviour {
            chunk_size,
            ..Behaviour::default()
        });
        for (path, api) in streaming_routes() {
            let url = format!("{}{path}", stand_in.base_url());
            let res = post_json(&client, &url, r#"{"model":"m","stream":true}"#).await;
            assert_eq!(res.status, StatusCode::OK);
            assert_eq!(res.header("content-type"), "text/event-stream");
            assert!(res.headers.get("content-length").is_none());
            assert_eq!(res.body, api.fixture_stream(), "{path} with {chunk_size:?}");
        }
    }
}

#[tokio::test]
async fn requests_are_recorded_with_query_headers_body_and_peer() {
    let stand_in = StandIn::start().await.unwrap();
    let fixture = fixture_request("claude-code-messages-1").unwrap();
    let req = fixture.to_request(&stand_in.base_url()).unwrap();
    let res = client().request(req).await.unwrap();
    let id: u64 = res.headers()[REQUEST_ID_HEADER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, crate::fixtures::ANTHROPIC_MESSAGES_SSE);

    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    let request = &recorded[0];
    assert_eq!(request.id, id);
    assert_eq!(request.method, Method::POST);
    assert_eq!(request.path_and_query, "/v1/messages?beta=true");
    assert_eq!(request.version, Version::HTTP_11);
    assert_eq!(
        request.header_str("x-claude-code-session-id"),
        Some("3bb17d1a-ca03-4829-9e16-6f6b5d84c7e3")
    );
    assert_eq!(request.header_str("X-Api-Key"), Some("sk-ant-dummy"));
    assert_eq!(request.body, fixture.body);
    assert!(request.body_complete);
    assert!(request.peer.ip().is_loopback());
    assert!(!request.client_went_away);
    assert_eq!(stand_in.request(id).as_ref(), Some(request));
    assert_eq!(stand_in.request_count(), 1);
    stand_in.clear_requests();
    assert!(stand_in.requests().is_empty());
}

/// The instant each complete SSE event reached the client.
async fn event_arrivals(
    res: hyper::Response<hyper::body::Incoming>,
) -> (Vec<tokio::time::Instant>, Vec<u8>) {
    let mut body = res.into_body();
    let mut received = Vec::new();
    let mut arrivals = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.unwrap();
        if let Some(data) = frame.data_ref() {
            received.extend_from_slice(data);
            let complete = received.windows(2).filter(|w| w == b"\n\n").count();
            while arrivals.len() < complete {
                arrivals.push(tokio::time::Instant::now());
            }
        }
    }
    (arrivals, received)
}

#[tokio::test]
async fn pace_spaces_the_events_the_client_receives() {
    let pace = Duration::from_millis(80);
    let stand_in = StandIn::start().await.unwrap();
    stand_in.set_behaviour(Behaviour {
        pace: Some(pace),
        ..Behaviour::default()
    });
    let req = http::Request::post(format!("{}/v1/messages", stand_in.base_url()))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(br#"{"stream":true}"#)))
        .unwrap();
    let sent = tokio::time::Instant::now();
    let res = client().request(req).await.unwrap();
    let (arrivals, received) = event_arrivals(res).await;
    assert_eq!(received, crate::fixtures::ANTHROPIC_MESSAGES_SSE);
    assert_eq!(arrivals.len(), 7);
    // Event k leaves the stand-in after k pauses at the earliest: a hard lower bound.
    for (k, arrival) in arrivals.iter().enumerate() {
        assert!(
            arrival.duration_since(sent) >= pace * k as u32,
            "event {k} arrived after {:?}",
            arrival.duration_since(sent)
        );
    }
    // And the stream was not held back and delivered at the end (half the ideal spread, to stay robust on busy machines).
    let spread = arrivals[6].duration_since(arrivals[0]);
    assert!(spread >= pace * 3, "events arrived within {spread:?}");
}

#[tokio::test]
async fn held_answers_stop_after_their_first_frame_until_the_hold_ends() {
    let stand_in = StandIn::start().await.unwrap();
    let hold = stand_in.hold_answers();
    let req = http::Request::post(format!("{}/v1/messages", stand_in.base_url()))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(br#"{"stream":true}"#)))
        .unwrap();
    let mut body = client().request(req).await.unwrap().into_body();
    let mut received = loop {
        if let Some(data) = body.frame().await.unwrap().unwrap().data_ref() {
            break data.to_vec();
        }
    };
    assert!(received.len() < crate::fixtures::ANTHROPIC_MESSAGES_SSE.len());
    // Unpaced, the next event would follow at once; held, nothing comes while the hold lives.
    let waited = tokio::time::timeout(Duration::from_millis(300), body.frame()).await;
    assert!(waited.is_err(), "a frame came while an answer was held");
    drop(hold);
    while let Some(frame) = body.frame().await {
        if let Some(data) = frame.unwrap().data_ref() {
            received.extend_from_slice(data);
        }
    }
    assert_eq!(received, crate::fixtures::ANTHROPIC_MESSAGES_SSE);
}

#[tokio::test]
async fn stepped_answers_send_one_frame_per_step_until_the_steps_end() {
    let stand_in = StandIn::start().await.unwrap();
    let steps = stand_in.step_answers();
    let req = http::Request::post(format!("{}/v1/messages", stand_in.base_url()))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(br#"{"stream":true}"#)))
        .unwrap();
    let mut body = client().request(req).await.unwrap().into_body();
    let mut frame = async || loop {
        if let Some(data) = body.frame().await.unwrap().unwrap().data_ref() {
            break data.to_vec();
        }
    };
    // One event per frame: the first at once, each next one on its step. Read until each is
    // whole, however the reads split them; ungated, more would have come.
    let sse = crate::fixtures::ANTHROPIC_MESSAGES_SSE;
    let events = |bytes: &[u8]| bytes.windows(2).filter(|w| w == b"\n\n").count();
    let mut received = Vec::new();
    for step in 0..3 {
        if step > 0 {
            steps.release(1);
        }
        while events(&received) <= step {
            received.extend_from_slice(&frame().await);
        }
    }
    assert_eq!(events(&received), 3);
    assert!(sse.starts_with(&received));
    // Without the guard the rest comes unasked.
    drop(steps);
    while received.len() < sse.len() {
        received.extend_from_slice(&frame().await);
    }
    assert_eq!(received, sse);
}

#[tokio::test]
async fn fail_after_bytes_breaks_the_client_body_read() {
    let stand_in = StandIn::start().await.unwrap();
    stand_in.set_behaviour(Behaviour {
        fail_after_bytes: Some(100),
        ..Behaviour::default()
    });
    let req = http::Request::post(format!("{}/v1/responses", stand_in.base_url()))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(br#"{"stream":true}"#)))
        .unwrap();
    let res = client().request(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let mut body = res.into_body();
    let mut received = Vec::new();
    let outcome = loop {
        match body.frame().await {
            Some(Ok(frame)) => received.extend_from_slice(frame.data_ref().unwrap()),
            Some(Err(error)) => break Err(error),
            None => break Ok(()),
        }
    };
    assert!(outcome.is_err(), "the body ended cleanly");
    assert_eq!(received, &crate::fixtures::OPENAI_RESPONSES_SSE[..100]);
    // The stand-in broke off on purpose: that is not the client going away.
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    assert!(!recorded[0].client_went_away);
}

#[tokio::test]
async fn canned_status_passes_with_its_headers_and_body() {
    let stand_in = StandIn::start().await.unwrap();
    stand_in.set_behaviour(Behaviour {
        status: Some(
            CannedResponse::json(
                StatusCode::TOO_MANY_REQUESTS,
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
            )
            .header(RETRY_AFTER, HeaderValue::from_static("7")),
        ),
        ..Behaviour::default()
    });
    let client = client();
    let res = post_json(
        &client,
        &format!("{}/v1/messages", stand_in.base_url()),
        r#"{"stream":true}"#,
    )
    .await;
    assert_eq!(res.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(res.header("retry-after"), "7");
    assert_eq!(res.json()["error"]["type"], "rate_limit_error");
    // The probe is never faulted.
    let probe = send(
        &client,
        Method::HEAD,
        &format!("{}/", stand_in.base_url()),
        &[],
        "",
    )
    .await;
    assert_eq!(probe.status, StatusCode::OK);
}

#[tokio::test]
async fn delay_before_headers_holds_the_answer_back() {
    let delay = Duration::from_millis(150);
    let stand_in = StandIn::start().await.unwrap();
    stand_in.set_behaviour(Behaviour {
        delay_before_headers: Some(delay),
        ..Behaviour::default()
    });
    let started = tokio::time::Instant::now();
    let res = post_json(
        &client(),
        &format!("{}/v1/chat/completions", stand_in.base_url()),
        "{}",
    )
    .await;
    assert_eq!(res.status, StatusCode::OK);
    assert!(started.elapsed() >= delay);
}

const SMALL_REQUEST: &[u8] = b"POST /v1/messages HTTP/1.1\r\nhost: stand-in\r\ncontent-type: application/json\r\ncontent-length: 17\r\n\r\n{\"stream\": true }";

#[tokio::test]
async fn a_client_leaving_a_hanging_request_is_recorded_within_a_second() {
    let stand_in = StandIn::start().await.unwrap();
    stand_in.set_behaviour(Behaviour {
        hang_before_headers: true,
        ..Behaviour::default()
    });
    let mut socket = TcpStream::connect(stand_in.addr()).await.unwrap();
    socket.write_all(SMALL_REQUEST).await.unwrap();
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    let request = &recorded[0];
    assert!(request.body_complete);
    assert!(!request.client_went_away);
    drop(socket);
    let gone = stand_in
        .wait_for_client_gone(request.id, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(gone.went_away_at.unwrap() >= gone.received_at);
}

#[tokio::test]
async fn a_client_leaving_mid_stream_is_recorded() {
    let stand_in = StandIn::start().await.unwrap();
    stand_in.set_behaviour(Behaviour {
        pace: Some(Duration::from_millis(20)),
        stream_events: Some(10_000),
        ..Behaviour::default()
    });
    let mut socket = TcpStream::connect(stand_in.addr()).await.unwrap();
    socket.write_all(SMALL_REQUEST).await.unwrap();
    let mut head = [0_u8; 512];
    let n = socket.read(&mut head).await.unwrap();
    assert!(head[..n].starts_with(b"HTTP/1.1 200 OK\r\n"));
    drop(socket);
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    stand_in
        .wait_for_client_gone(recorded[0].id, Duration::from_secs(1))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_completed_exchange_is_not_a_client_going_away() {
    let stand_in = StandIn::start().await.unwrap();
    let res = post_json(
        &client(),
        &format!("{}/v1/messages", stand_in.base_url()),
        r#"{"stream":true}"#,
    )
    .await;
    let id: u64 = res.header(REQUEST_ID_HEADER).parse().unwrap();
    let error = stand_in
        .wait_for_client_gone(id, Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::ClientStillConnected { .. }),
        "{error}"
    );
}

#[tokio::test]
async fn a_half_sent_chunked_body_is_recorded_incomplete() {
    let stand_in = StandIn::start().await.unwrap();
    let mut socket = TcpStream::connect(stand_in.addr()).await.unwrap();
    socket
        .write_all(b"POST /v1/messages HTTP/1.1\r\nhost: stand-in\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n7\r\n{\"model\r\n")
        .await
        .unwrap();
    drop(socket);
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    let request = &recorded[0];
    assert!(!request.body_complete);
    assert_eq!(request.body, &b"{\"model"[..]);
    assert!(request.client_went_away);
}

#[tokio::test]
async fn h2c_prior_knowledge_is_served() {
    let stand_in = StandIn::start().await.unwrap();
    let res = post_json(
        &h2c_client(),
        &format!("{}/v1/chat/completions", stand_in.base_url()),
        r#"{"stream":true}"#,
    )
    .await;
    assert_eq!(res.body, crate::fixtures::OPENAI_CHAT_SSE);
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    assert_eq!(recorded[0].version, Version::HTTP_2);
}

#[tokio::test]
async fn stream_events_makes_a_long_stream() {
    let stand_in = StandIn::start().await.unwrap();
    stand_in.set_behaviour(Behaviour {
        stream_events: Some(50),
        ..Behaviour::default()
    });
    let res = post_json(
        &client(),
        &format!("{}/v1/responses", stand_in.base_url()),
        r#"{"stream":true}"#,
    )
    .await;
    let events = sse_events(&res.body);
    let deltas = events
        .iter()
        .filter(|e| e.name.as_deref() == Some("response.output_text.delta"))
        .count();
    assert_eq!(deltas, 50);
    let completed = events.last().unwrap().json();
    assert_eq!(
        completed["response"]["output"][0]["content"][0]["text"],
        DEFAULT_TEXT.repeat(50)
    );
}

/// Sends one turn and returns the streamed events' JSON (without `[DONE]`).
async fn stream_turn(stand_in: &StandIn, path: &str, body: Value) -> Vec<(Option<String>, Value)> {
    let res = post_json(
        &client(),
        &format!("{}{path}", stand_in.base_url()),
        &body.to_string(),
    )
    .await;
    assert_eq!(res.header("content-type"), "text/event-stream");
    sse_events(&res.body)
        .into_iter()
        .filter(|e| e.data != "[DONE]")
        .map(|e| (e.name.clone(), e.json()))
        .collect()
}

#[tokio::test]
async fn tool_round_trip_anthropic() {
    let stand_in = StandIn::start().await.unwrap();
    stand_in.set_tool_round_trip(true);
    let first = json!({"model": "m", "stream": true, "tools": [{"name": "Bash", "input_schema": {}}],
        "messages": [{"role": "user", "content": "run echo"}]});
    let events = stream_turn(&stand_in, "/v1/messages?beta=true", first.clone()).await;
    let block = &events[1].1["content_block"];
    assert_eq!(block["type"], "tool_use");
    assert_eq!(block["name"], "Bash");
    let partial = events[3].1["delta"]["partial_json"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(partial).unwrap(),
        json!({"command": TOOL_COMMAND})
    );
    assert_eq!(events[5].1["delta"]["stop_reason"], "tool_use");

    let second = json!({"model": "m", "stream": true, "messages": [
        {"role": "user", "content": "run echo"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": block["id"], "name": "Bash", "input": {"command": TOOL_COMMAND}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block["id"], "content": "relay-tool-ok\n"}]}
    ]});
    let events = stream_turn(&stand_in, "/v1/messages?beta=true", second).await;
    assert_eq!(events[3].1["delta"]["text"], TOOL_DONE_TEXT);
    assert_eq!(events[5].1["delta"]["stop_reason"], "end_turn");

    let mut unstreamed = first;
    unstreamed["stream"] = json!(false);
    let res = post_json(
        &client(),
        &format!("{}/v1/messages", stand_in.base_url()),
        &unstreamed.to_string(),
    )
    .await;
    assert_eq!(res.json()["content"][0]["type"], "tool_use");
    assert_eq!(
        res.json()["content"][0]["input"],
        json!({"command": TOOL_COMMAND})
    );
}

#[tokio::test]
async fn tool_round_trip_responses() {
    let stand_in = StandIn::start().await.unwrap();
    stand_in.set_behaviour(Behaviour {
        tool_round_trip: true,
        ..Behaviour::default()
    });
    let first = json!({"model": "mock-model", "stream": true,
        "tools": [{"type": "function", "name": "exec_command"}, {"type": "function", "name": "write_stdin"}],
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "run echo"}]}]});
    let events = stream_turn(&stand_in, "/v1/responses", first).await;
    let done = events
        .iter()
        .find(|(name, _)| name.as_deref() == Some("response.output_item.done"))
        .unwrap();
    let item = &done.1["item"];
    assert_eq!(item["type"], "function_call");
    assert_eq!(item["name"], "exec_command");
    let arguments = item["arguments"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(arguments).unwrap(),
        json!({"cmd": TOOL_COMMAND})
    );

    let second = json!({"model": "mock-model", "stream": true, "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "run echo"}]},
        {"type": "function_call", "call_id": item["call_id"], "name": "exec_command", "arguments": arguments},
        {"type": "function_call_output", "call_id": item["call_id"], "output": "relay-tool-ok\n"}
    ]});
    let events = stream_turn(&stand_in, "/v1/responses", second).await;
    let text = events
        .iter()
        .find(|(name, _)| name.as_deref() == Some("response.output_text.done"))
        .unwrap();
    assert_eq!(text.1["text"], TOOL_DONE_TEXT);
    assert_eq!(events.last().unwrap().1["response"]["status"], "completed");
}

#[tokio::test]
async fn tool_round_trip_chat() {
    let stand_in = StandIn::start().await.unwrap();
    stand_in.set_tool_round_trip(true);
    let first = json!({"model": "mock-chat", "stream": true,
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": {}}}],
        "messages": [{"role": "user", "content": "run echo"}]});
    let events = stream_turn(&stand_in, "/v1/chat/completions", first).await;
    let call = &events[0].1["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "bash");
    let arguments = events[1].1["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(arguments).unwrap(),
        json!({"command": TOOL_COMMAND})
    );
    assert_eq!(events[2].1["choices"][0]["finish_reason"], "tool_calls");

    let second = json!({"model": "mock-chat", "stream": false, "messages": [
        {"role": "user", "content": "run echo"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": call["id"], "type": "function", "function": {"name": "bash", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": call["id"], "content": "relay-tool-ok\n"}
    ]});
    let res = post_json(
        &client(),
        &format!("{}/chat/completions", stand_in.base_url()),
        &second.to_string(),
    )
    .await;
    assert_eq!(
        res.json()["choices"][0]["message"]["content"],
        TOOL_DONE_TEXT
    );
    assert_eq!(res.json()["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn shutdown_ends_hanging_exchanges_and_stops_listening() {
    let stand_in = StandIn::start().await.unwrap();
    stand_in.set_behaviour(Behaviour {
        hang_before_headers: true,
        ..Behaviour::default()
    });
    let addr = stand_in.addr();
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket.write_all(SMALL_REQUEST).await.unwrap();
    stand_in.wait_for_requests(1, WAIT).await.unwrap();
    tokio::time::timeout(WAIT, stand_in.shutdown())
        .await
        .unwrap();
    // The hanging connection was closed without an answer.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(WAIT, socket.read_to_end(&mut rest))
        .await
        .unwrap();
    assert!(read.is_err() || rest.is_empty());
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn recording_can_be_turned_off() {
    let stand_in = StandIn::start_with(StandInConfig {
        record_requests: false,
        ..StandInConfig::default()
    })
    .await
    .unwrap();
    let res = post_json(
        &client(),
        &format!("{}/v1/messages", stand_in.base_url()),
        "{}",
    )
    .await;
    assert_eq!(res.status, StatusCode::OK);
    assert_eq!(stand_in.request_count(), 0);
}
