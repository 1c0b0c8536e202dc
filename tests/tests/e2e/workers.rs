//! Worker-backed operation (SPEC §1, §3.1, §3.5, §5): a credentialed MCP session leads to
//! one worker process that serves the user's model requests; more sessions of the same
//! machine-user share it; and requests that arrive while it starts pass through once, get
//! 503 in strict mode, or wait for it, as the activation wait says.
//!
//! Where a request went is proven from outside: the provider stand-in records the TCP peer
//! of each request, and `/proc` says which process holds that socket.

use http::StatusCode;
use http_body_util::Full;
use relay_e2e::http::{fetch, post_json};
use relay_e2e::{Mcp, Relayd, Tap, User, WorkerGate, procfs};
use relay_testkit::{ANTHROPIC_MESSAGES_SSE, StandIn};
use rustix::process::Signal;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::support::{
    EVENT_TIMEOUT, INITIALIZE_TIMEOUT, MCP_EXIT_TIMEOUT, STATUS_POLL, WORKER_TIMEOUT, all_logs,
    anthropic_request, assert_no_leaks, assert_through_worker, contains, context, field,
    fresh_token, marker, pass_throughs, recorded_with, requests_to, route_status, run_secrets,
    stand_in_id, user_for, wait_for_route_state, with_a_ready_worker, worker_config,
    workers_status,
};

type Request = http::Request<Full<bytes::Bytes>>;

/// Starts relay-mcp for `user` with `token` and waits for its `initialize` answer, which
/// echoes `version`.
async fn start_mcp(user: &User, origin: &str, token: &str, version: &str) -> anyhow::Result<Mcp> {
    // At `info` so that `daemon_mcp_ready` is logged (the client default is `warn`).
    let mut mcp = user
        .mcp(origin)?
        .token(token)
        .log("info", "jsonl")
        .spawn()?;
    let answer = mcp.initialize(version, INITIALIZE_TIMEOUT).await?;
    assert_eq!(answer["result"]["protocolVersion"], version, "{answer}");
    Ok(mcp)
}

fn streaming_request(token: &str) -> anyhow::Result<Request> {
    Ok(post_json(
        "/v1/messages",
        &[
            ("x-relay-client-token", token),
            ("x-api-key", "sk-ant-test"),
            ("anthropic-version", "2023-06-01"),
        ],
        r#"{"model":"m","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
    )?)
}

fn responses_request(token: &str, marker: &str) -> anyhow::Result<Request> {
    Ok(post_json(
        "/v1/responses",
        &[
            ("x-relay-client-token", token),
            ("authorization", "Bearer sk-test-openai"),
        ],
        format!(r#"{{"model":"m","input":"{marker}"}}"#),
    )?)
}

fn chat_request(token: &str, marker: &str) -> anyhow::Result<Request> {
    Ok(post_json(
        "/v1/chat/completions",
        &[
            ("x-relay-client-token", token),
            ("authorization", "Bearer sk-test-openai"),
        ],
        format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{marker}"}}]}}"#),
    )?)
}

fn hook_request(token: &str) -> anyhow::Result<Request> {
    Ok(post_json(
        "/hooks/claude-code",
        &[("x-relay-client-token", token)],
        r#"{"hook_event_name":"UserPromptSubmit","prompt":"hi"}"#,
    )?)
}

/// A request and a stream with `token`: both reach the provider from `worker`'s own
/// sockets, unchanged.
async fn serves_a_request_and_a_stream(
    relayd: &Relayd,
    stand_in: &StandIn,
    worker: u32,
    token: &str,
) -> anyhow::Result<()> {
    let model_marker = marker("model")?;
    let recorded = assert_through_worker(
        relayd,
        stand_in,
        worker,
        anthropic_request(token, &model_marker)?,
    )
    .await?;
    assert!(contains(&recorded.body, model_marker.as_bytes()));
    assert_eq!(recorded.header_str("x-api-key"), Some("sk-ant-test"));
    let (status, headers, body) = fetch(relayd.addr(), streaming_request(token)?).await?;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body == ANTHROPIC_MESSAGES_SSE,
        "the stream changed on its way through the worker"
    );
    let streamed = stand_in
        .request(stand_in_id(&headers)?)
        .ok_or_else(|| anyhow::anyhow!("the stand-in did not record the stream request"))?;
    assert!(procfs::owns_connection(
        worker,
        streamed.peer,
        stand_in.addr()
    ));
    Ok(())
}

/// relayd, relay-mcp and the worker build a current-thread runtime when they may use one CPU
/// (docs/operations.md). Limited to one, the whole chain still activates a worker and serves
/// a request and a stream through it.
#[tokio::test]
async fn on_one_cpu_the_worker_path_serves_as_on_many() -> anyhow::Result<()> {
    // A child inherits the CPU mask of the thread that spawns it, and this test's runtime
    // runs on the test's one thread. The mask goes back when the test ends, in case the
    // harness runs the next test on this thread.
    struct Restore(rustix::thread::CpuSet);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = rustix::thread::sched_setaffinity(None, &self.0);
        }
    }
    let allowed = Restore(rustix::thread::sched_getaffinity(None)?);
    let cpu = (0..rustix::thread::CpuSet::MAX_CPU)
        .find(|&cpu| allowed.0.is_set(cpu))
        .ok_or_else(|| anyhow::anyhow!("this thread may run on no CPU"))?;
    let mut one = rustix::thread::CpuSet::new();
    one.set(cpu);
    rustix::thread::sched_setaffinity(None, &one)?;

    let stand_in = StandIn::start().await?;
    let user = user_for(&stand_in)?;
    let (relayd, token, mcp, worker) = with_a_ready_worker(
        Relayd::builder()?.config(worker_config(&stand_in, "")),
        &user,
    )
    .await?;
    for (name, pid) in [
        ("relayd", relayd.pid()?),
        ("relay-mcp", mcp.pid()?),
        ("the worker", worker),
    ] {
        assert_eq!(
            procfs::cpus_allowed_list(pid),
            Some(cpu.to_string()),
            "{name} may use more than one CPU"
        );
    }

    serves_a_request_and_a_stream(&relayd, &stand_in, worker, &token).await?;
    assert_eq!(requests_to(&relayd, "anthropic", "worker").await?, 2);
    assert!(
        pass_throughs(&relayd).is_empty(),
        "{}",
        context(&relayd, &user, &[&mcp])
    );
    Ok(())
}

#[tokio::test]
async fn a_credentialed_mcp_session_gets_one_worker_that_serves_its_requests() -> anyhow::Result<()>
{
    let stand_in = StandIn::start().await?;
    // The MCP and the worker dial the daemon through a tap, so the test learns the grant and
    // the generation secret the daemon handed out and can look for them in the logs; relayd
    // is told the tap's origin so their `Hello` names an origin it serves.
    let tap = Tap::bind().await?;
    let relayd = Relayd::builder()?
        .config(worker_config(&stand_in, ""))
        .args(["--advertise-address", &tap.origin(), "--log-level", "trace"])
        .start()
        .await?;
    let tap = tap.forward_to(relayd.addr());
    let user = user_for(&stand_in)?;
    let token = fresh_token()?;
    let mut mcp = user
        .mcp(&tap.origin())?
        .token(&token)
        .log("trace", "jsonl")
        .spawn()?;
    let answer = mcp.initialize("2025-06-18", INITIALIZE_TIMEOUT).await?;
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-06-18",
        "{answer}"
    );

    // `initialize` waits for the route to settle (§6), so the worker is ready by now.
    let settled = mcp
        .logs()
        .wait_for_event("daemon_mcp_ready", EVENT_TIMEOUT)
        .await?;
    assert_eq!(field(&settled, "route_mode"), "worker", "{settled}");
    let added = relayd
        .wait_for_log_event("worker_added", EVENT_TIMEOUT)
        .await?;
    let worker_id = field(&added, "worker_id").to_owned();
    let pids = user.wait_for_workers(1, WORKER_TIMEOUT).await?;
    let worker = pids[0];
    assert_eq!(
        procfs::parent_pid(worker),
        Some(mcp.pid()?),
        "relay-mcp launched the worker (§1)"
    );

    let workers = workers_status(&relayd).await?;
    assert_eq!(workers.len(), 1, "{workers:?}");
    assert_eq!(workers[0]["worker_id"], worker_id.as_str(), "{workers:?}");
    assert_eq!(workers[0]["state"], "ready", "{workers:?}");
    assert_eq!(workers[0]["control_available"], true, "{workers:?}");
    assert_eq!(workers[0]["reference_count"], 1, "{workers:?}");
    let route = route_status(&relayd, &token).await?;
    assert_eq!(route["route_mode"], "worker", "{route}");
    assert_eq!(route["reason"], serde_json::Value::Null, "{route}");
    assert_eq!(route["worker_id"], worker_id.as_str(), "{route}");
    assert_eq!(route["state"], "ready", "{route}");
    assert_eq!(route["control_available"], true, "{route}");

    serves_a_request_and_a_stream(&relayd, &stand_in, worker, &token).await?;
    assert_eq!(requests_to(&relayd, "anthropic", "worker").await?, 2);
    assert!(
        pass_throughs(&relayd).is_empty(),
        "{}",
        context(&relayd, &user, &[&mcp])
    );

    // The session ends: the reference goes, the worker drains and exits.
    mcp.signal(Signal::TERM)?;
    assert_eq!(mcp.wait(MCP_EXIT_TIMEOUT).await?.code(), Some(0));
    let removed = relayd
        .wait_for_log_event("worker_removed", WORKER_TIMEOUT)
        .await?;
    assert_eq!(field(&removed, "reason"), "drained", "{removed}");
    user.wait_for_workers(0, WORKER_TIMEOUT).await?;

    // Everything ran at trace; no secret may be in any log (§4.1).
    let (secrets, kinds) = run_secrets(&relayd, &user, &[&token], Some(&tap))?;
    for kind in [
        "route credential",
        "resume token",
        "activation token",
        "generation secret",
    ] {
        assert!(
            kinds.contains(&kind),
            "the tap captured no {kind}: {kinds:?}"
        );
    }
    assert_no_leaks(&secrets, &all_logs(&relayd, &user, &[&mcp]));
    Ok(())
}

#[tokio::test]
async fn more_sessions_of_the_same_user_share_its_worker() -> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let relayd = Relayd::builder()?
        .config(worker_config(&stand_in, ""))
        .start()
        .await?;
    let user = user_for(&stand_in)?;
    let (token, other_token) = (fresh_token()?, fresh_token()?);
    let origin = relayd.origin();
    let first = start_mcp(&user, &origin, &token, "2025-11-25").await?;
    let pids = user.wait_for_workers(1, WORKER_TIMEOUT).await?;
    let second = start_mcp(&user, &origin, &token, "2025-06-18").await?;
    // Another token of the same machine identity selects the same route (§5.3).
    let third = start_mcp(&user, &origin, &other_token, "2025-03-26").await?;
    relayd
        .logs()
        .wait_for("mcp_added with 3 references", EVENT_TIMEOUT, |logs| {
            logs.events_named("mcp_added")
                .into_iter()
                .find(|event| event["references"] == 3)
        })
        .await?;
    for mcp in [&second, &third] {
        let settled = mcp
            .logs()
            .wait_for_event("daemon_mcp_ready", EVENT_TIMEOUT)
            .await?;
        assert_eq!(field(&settled, "route_mode"), "worker", "{settled}");
    }

    let workers = workers_status(&relayd).await?;
    assert_eq!(workers.len(), 1, "{workers:?}");
    assert_eq!(workers[0]["state"], "ready", "{workers:?}");
    assert_eq!(workers[0]["reference_count"], 3, "{workers:?}");
    assert_eq!(user.worker_pids(), pids, "still the one worker process");
    assert_eq!(relayd.logs().events_named("worker_staged").len(), 1);
    let route = route_status(&relayd, &other_token).await?;
    assert_eq!(route["route_mode"], "worker", "{route}");
    assert_eq!(route["worker_id"], workers[0]["worker_id"], "{route}");
    assert_through_worker(
        &relayd,
        &stand_in,
        pids[0],
        anthropic_request(&other_token, &marker("other-token")?)?,
    )
    .await?;
    drop((first, second, third));
    Ok(())
}

/// relayd with `daemon` lines and `args`, a user with a gated worker launch, and its
/// relay-mcp started; returns once the route is `activating` (the worker is held).
async fn activating(
    daemon: &str,
    args: &[&str],
) -> anyhow::Result<(StandIn, Relayd, User, WorkerGate, Mcp, String)> {
    let stand_in = StandIn::start().await?;
    let relayd = Relayd::builder()?
        .config(worker_config(&stand_in, daemon))
        .args(args)
        .start()
        .await?;
    let user = user_for(&stand_in)?;
    let gate = WorkerGate::install(&user.dir().join("gated"))?;
    let token = fresh_token()?;
    let mcp = user
        .mcp(&relayd.origin())?
        .program(gate.mcp_program())
        .token(&token)
        .spawn()?;
    wait_for_route_state(&relayd, &token, "activating", EVENT_TIMEOUT).await?;
    Ok((stand_in, relayd, user, gate, mcp, token))
}

/// Opens the gate and waits until the worker is ready; returns its pid.
async fn release_worker(relayd: &Relayd, user: &User, gate: &WorkerGate) -> anyhow::Result<u32> {
    gate.open(EVENT_TIMEOUT).await?;
    relayd
        .wait_for_log_event("worker_ready", WORKER_TIMEOUT)
        .await?;
    Ok(user.wait_for_workers(1, WORKER_TIMEOUT).await?[0])
}

#[tokio::test]
async fn without_an_activation_wait_requests_during_a_worker_start_pass_through_once()
-> anyhow::Result<()> {
    let (stand_in, relayd, user, gate, mcp, token) =
        activating("activation_wait_ms = 0", &[]).await?;
    // The gate is shut, so the worker cannot be ready: each request takes its row of §3.5
    // at once, "bound, live reference, worker not ready".
    let markers = [marker("anthropic")?, marker("responses")?, marker("chat")?];
    for req in [
        anthropic_request(&token, &markers[0])?,
        responses_request(&token, &markers[1])?,
        chat_request(&token, &markers[2])?,
    ] {
        let (status, _, body) = fetch(relayd.addr(), req).await?;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    }
    let (status, _, body) = fetch(relayd.addr(), hook_request(&token)?).await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        &body[..],
        br#"{"continue":true}"#,
        "the pass-through answer"
    );
    let passed = relayd
        .logs()
        .wait_for_events("public_request_pass_through", 4, EVENT_TIMEOUT)
        .await?;
    let routes: Vec<&str> = passed.iter().map(|event| field(event, "route")).collect();
    assert_eq!(
        routes,
        ["anthropic", "openai", "openai", "hook"],
        "{passed:?}"
    );
    for event in &passed {
        assert_eq!(field(event, "reason"), "worker_unavailable", "{event}");
        assert_eq!(field(event, "route_mode"), "pass_through", "{event}");
    }
    let route = route_status(&relayd, &token).await?;
    assert_eq!(route["state"], "activating", "{route}");
    assert_eq!(route["reason"], "worker_unavailable", "{route}");
    assert_eq!(requests_to(&relayd, "anthropic", "worker").await?, 0);

    let worker = release_worker(&relayd, &user, &gate).await?;
    let last = marker("after-ready")?;
    assert_through_worker(
        &relayd,
        &stand_in,
        worker,
        anthropic_request(&token, &last)?,
    )
    .await?;
    // Each request reached the provider exactly once, on one path.
    for marker in markers.iter().chain([&last]) {
        assert_eq!(recorded_with(&stand_in, marker).len(), 1, "{marker}");
    }
    assert_eq!(stand_in.request_count(), 4);
    assert_eq!(pass_throughs(&relayd).len(), 4);
    drop(mcp);
    Ok(())
}

#[tokio::test]
async fn in_strict_mode_requests_during_a_worker_start_get_503_and_reach_nobody()
-> anyhow::Result<()> {
    let (stand_in, relayd, user, gate, mcp, token) =
        activating("activation_wait_ms = 0", &["--require-worker"]).await?;
    for req in [
        anthropic_request(&token, &marker("strict")?)?,
        hook_request(&token)?,
    ] {
        let (status, headers, body) = fetch(relayd.addr(), req).await?;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        let retry_after: u64 = headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| anyhow::anyhow!("a 503 without Retry-After: {headers:?}"))?
            .parse()?;
        assert!(retry_after >= 1);
        let error: serde_json::Value = serde_json::from_slice(&body)?;
        assert_eq!(
            error["error"]["type"], "relay_worker_unavailable",
            "{error}"
        );
    }
    assert_eq!(stand_in.request_count(), 0, "a 503 forwards nothing");
    assert!(pass_throughs(&relayd).is_empty());

    let worker = release_worker(&relayd, &user, &gate).await?;
    assert_through_worker(
        &relayd,
        &stand_in,
        worker,
        anthropic_request(&token, &marker("strict-ready")?)?,
    )
    .await?;
    assert_eq!(stand_in.request_count(), 1);
    drop(mcp);
    Ok(())
}

#[tokio::test]
async fn with_the_default_activation_wait_an_early_request_waits_for_the_worker()
-> anyhow::Result<()> {
    // `activation_wait_ms` is left at its default of 2000 (§3.5).
    let (stand_in, relayd, user, gate, mcp, token) = activating("", &[]).await?;
    let early = marker("early")?;
    let body = format!(
        r#"{{"model":"m","max_tokens":16,"messages":[{{"role":"user","content":"{early}"}}]}}"#
    );
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nx-relay-client-token: {token}\r\nx-api-key: sk-ant-test\r\n\
         anthropic-version: 2023-06-01\r\nConnection: close\r\n\r\n",
        relayd.addr(),
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(relayd.addr()).await?;
    let local = stream.local_addr()?;
    stream.write_all(format!("{head}{body}").as_bytes()).await?;
    // relayd has read the whole request (its socket's receive queue is empty) while the
    // worker is still held back: the request is in relayd's hands before the worker can
    // possibly be ready.
    let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
    let mut poll = tokio::time::interval(STATUS_POLL);
    loop {
        poll.tick().await;
        if procfs::connection(relayd.addr(), local).is_some_and(|socket| socket.rx_queue == 0) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "relayd did not read the request"
        );
    }
    assert_eq!(route_status(&relayd, &token).await?["state"], "activating");

    gate.open(EVENT_TIMEOUT).await?;
    let mut answer = Vec::new();
    tokio::time::timeout(WORKER_TIMEOUT, stream.read_to_end(&mut answer)).await??;
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    response.parse(&answer)?;
    assert_eq!(
        response.code,
        Some(200),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let recorded = recorded_with(&stand_in, &early);
    assert_eq!(recorded.len(), 1, "the request reached the provider once");
    let worker = user.wait_for_workers(1, WORKER_TIMEOUT).await?[0];
    assert!(
        procfs::owns_connection(worker, recorded[0].peer, stand_in.addr()),
        "the early request did not go through the worker"
    );
    assert!(
        pass_throughs(&relayd).is_empty(),
        "the early request passed through instead of waiting: {:?}",
        pass_throughs(&relayd)
    );
    assert_eq!(requests_to(&relayd, "anthropic", "worker").await?, 1);
    drop(mcp);
    Ok(())
}

/// A body sent in pieces, of a length it does not declare: HTTP/2 then sends no
/// `content-length`.
struct Pieces(std::collections::VecDeque<bytes::Bytes>);

impl hyper::body::Body for Pieces {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        std::task::Poll::Ready(
            self.0
                .pop_front()
                .map(|piece| Ok(hyper::body::Frame::data(piece))),
        )
    }
}

/// An HTTP/2 client's body of unknown length reaches the provider through the worker whole.
/// The hop to the worker is HTTP/1.1, where such a body goes chunked; sent with the
/// client's HTTP/2 version, hyper's HTTP/1 client had sent it empty.
#[tokio::test]
async fn an_http2_body_of_unknown_length_reaches_the_provider_through_the_worker_whole()
-> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let user = user_for(&stand_in)?;
    let (relayd, token, _mcp, worker) = with_a_ready_worker(
        Relayd::builder()?.config(worker_config(&stand_in, "")),
        &user,
    )
    .await?;
    let marker = marker("h2-body")?;
    let pieces = [
        r#"{"model":"m","max_tokens":16,"#.to_owned(),
        format!(r#""messages":[{{"role":"user","content":"{marker}"}}]}}"#),
    ];
    let whole = pieces.concat();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Pieces>();
    let req = http::Request::post(format!("http://{}/v1/messages", relayd.addr()))
        .header("x-relay-client-token", &token)
        .header("x-api-key", "sk-ant-test")
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(Pieces(pieces.into_iter().map(bytes::Bytes::from).collect()))?;
    let res = client.request(req).await?;
    assert_eq!(res.status(), StatusCode::OK);
    let id = stand_in_id(res.headers())?;
    http_body_util::BodyExt::collect(res.into_body()).await?;
    let recorded = stand_in
        .request(id)
        .ok_or_else(|| anyhow::anyhow!("the stand-in did not record the request"))?;
    assert!(recorded.body_complete);
    assert_eq!(recorded.body, whole.as_bytes());
    assert!(procfs::owns_connection(
        worker,
        recorded.peer,
        stand_in.addr()
    ));
    Ok(())
}
