//! §3.7: a provider that cannot be reached, does not accept in time, or does not answer in
//! time gets the documented status, quickly.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use relay_testkit::{Behaviour, StandIn};
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpSocket, TcpStream};

use crate::support::{Setup, WAIT, base, read_response, secs_f64};

#[tokio::test]
async fn a_refused_connection_is_502_upstream_unreachable() {
    // A port nobody listens on: bind, note it, close.
    let closed = {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        listener.local_addr().unwrap()
    };
    let relay = Setup::new(&format!("http://{closed}")).start().await;
    for (path, headers) in [
        ("/v1/messages", vec![]),
        ("/v1/chat/completions", vec![]),
        ("/v1/models", vec![("anthropic-version", "2023-06-01")]),
    ] {
        let started = Instant::now();
        let answer = if path.ends_with("models") {
            relay.get(path, &headers).await
        } else {
            relay.post(path, &headers, "{}").await
        };
        answer.assert_error(502, "relay_upstream_unreachable");
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}

/// A listener whose accept queue is full: the kernel drops further SYNs, so a connect to it
/// hangs until the connector's own timeout. The fillers must stay open.
async fn full_backlog() -> (tokio::net::TcpListener, Vec<TcpStream>) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind((Ipv4Addr::LOCALHOST, 0).into()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => fillers.push(stream),
            Ok(Err(e)) => panic!("filling the backlog: {e}"),
            Err(_) => break,
        }
        assert!(fillers.len() < 64, "the accept queue never filled");
    }
    (listener, fillers)
}

#[tokio::test]
async fn a_connect_timeout_is_504_upstream_timeout() {
    let (listener, _fillers) = full_backlog().await;
    let mut setup = Setup::new(&format!("http://{}", listener.local_addr().unwrap()));
    setup.config.upstream.connect_timeout_secs = secs_f64(0.3);
    let relay = setup.start().await;
    for path in ["/v1/messages", "/v1/responses"] {
        let started = Instant::now();
        let answer = relay.post(path, &[], "{}").await;
        let took = started.elapsed();
        answer.assert_error(504, "relay_upstream_timeout");
        assert!(took >= Duration::from_millis(250), "{took:?}");
        assert!(took < Duration::from_secs(2), "{took:?}");
    }
}

#[tokio::test]
async fn a_response_head_timeout_is_504_and_cancels_the_provider_request() {
    let stand_in = StandIn::start().await.unwrap();
    let mut setup = Setup::new(&stand_in.base_url());
    setup.config.upstream.response_timeout_secs = secs_f64(0.3);
    let relay = setup.start().await;
    stand_in.set_behaviour(Behaviour {
        hang_before_headers: true,
        ..Behaviour::default()
    });
    let started = Instant::now();
    let answer = relay.post("/v1/messages", &[], r#"{"stream":true}"#).await;
    let took = started.elapsed();
    answer.assert_error(504, "relay_upstream_timeout");
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(2),
        "{took:?}"
    );
    let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
    assert!(recorded[0].body_complete);
    stand_in
        .wait_for_client_gone(recorded[0].id, Duration::from_secs(1))
        .await
        .unwrap();
    // The 0.3 s spent waiting for the provider is not relayd's own time. relayd timed the
    // request inside `took`, and the wait it must leave out lasted at least the 0.3 s limit
    // (a timer never fires early), so the overhead it recorded is below `took` less 0.3 s
    // however slow the machine. Counted in, the wait would put it above: the overhead would
    // then be all of relayd's time, and more than 0.3 s of `took` is never spent outside it.
    let metrics = relay.get("/metrics", &[]).await;
    let text = String::from_utf8(metrics.body.to_vec()).unwrap();
    let sample = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|value| value.trim().parse::<f64>().ok())
    };
    // This request only: the scrape is recorded after its own text is made.
    assert_eq!(sample("relay_overhead_seconds_count "), Some(1.0), "{text}");
    let overhead = sample("relay_overhead_seconds_sum ").unwrap();
    let limit = Duration::from_millis(300);
    assert!(
        overhead < took.saturating_sub(limit).as_secs_f64(),
        "an overhead of {overhead} s for a request that took {took:?}: {text}"
    );

    // The deadline covers the head only: a slow stream after a prompt head is not cut.
    stand_in.set_behaviour(Behaviour {
        pace: Some(Duration::from_millis(100)),
        ..Behaviour::default()
    });
    let answer = relay.post("/v1/messages", &[], r#"{"stream":true}"#).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, relay_testkit::ANTHROPIC_MESSAGES_SSE);
}

/// The provider's time to answer starts once it has the whole request: an upload slower
/// than that time, never idle, is answered, and a provider that then says nothing is still
/// cut that long after the upload's end.
#[tokio::test]
async fn the_response_head_timeout_leaves_out_a_slow_upload() {
    let stand_in = StandIn::start().await.unwrap();
    let mut setup = Setup::new(&stand_in.base_url());
    setup.config.upstream.response_timeout_secs = secs_f64(0.3);
    let relay = setup.start().await;
    let body = br#"{"stream":false}"#;
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        relay.host(),
        body.len()
    );
    // A byte every 60 ms: the upload takes about a second, three times the limit.
    let head = head.as_str();
    let trickle = |mut stream: TcpStream| async move {
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut every = tokio::time::interval(Duration::from_millis(60));
        for byte in body {
            every.tick().await;
            stream.write_all(&[*byte]).await.unwrap();
        }
        (stream, Instant::now())
    };
    let (mut stream, _) = trickle(relay.connect().await).await;
    assert_eq!(read_response(&mut stream).await.status, 200);

    stand_in.set_behaviour(Behaviour {
        hang_before_headers: true,
        ..Behaviour::default()
    });
    let (mut stream, ended) = trickle(relay.connect().await).await;
    read_response(&mut stream)
        .await
        .assert_error(504, "relay_upstream_timeout");
    let took = ended.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

/// A base whose host does not resolve is unreachable, not a timeout.
#[tokio::test]
async fn an_unresolvable_host_is_502() {
    let mut setup = Setup::new("http://127.0.0.1:9");
    setup.config.upstream.openai_base_url = base("http://relay-test.invalid:9/v1");
    let relay = setup.start().await;
    let answer = relay.post("/v1/chat/completions", &[], "{}").await;
    answer.assert_error(502, "relay_upstream_unreachable");
}

/// A client whose upload stops arriving is answered 408, its own doing: not a 502 that
/// blames the provider.
#[tokio::test]
async fn an_upload_that_stops_arriving_is_408_not_a_provider_failure() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let stand_in = StandIn::start().await.unwrap();
    let mut setup = Setup::new(&stand_in.base_url());
    setup.config.daemon.stream_idle_secs = secs_f64(0.3);
    let relay = setup.start().await;
    let mut stream = relay.connect().await;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n5\r\n{{\"a\":\r\n",
        relay.host()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(WAIT, stream.read(&mut answer))
        .await
        .expect("no answer to a stalled upload")
        .unwrap();
    let text = String::from_utf8_lossy(&answer[..n]);
    assert!(text.starts_with("HTTP/1.1 408 "), "{text}");
    assert!(text.contains("relay_bad_request"), "{text}");
}

/// A provider whose answer cannot be read (not HTTP, or a head larger than relayd reads) is
/// a 502 that says so, rather than a connection that failed; the request is not sent again.
#[tokio::test]
async fn an_unreadable_provider_answer_is_502_and_says_why() {
    let huge_head = format!(
        "HTTP/1.1 200 OK\r\nx-pad: {}\r\ncontent-length: 2\r\n\r\n{{}}",
        "p".repeat(512 * 1024)
    );
    for (answer, says) in [
        (
            "SSH-2.0-OpenSSH_9.6\r\n".to_owned(),
            "not a valid HTTP answer",
        ),
        (huge_head, "larger than relayd reads"),
    ] {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let provider = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 4096];
            let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut buf).await;
            let _ = stream.write_all(answer.as_bytes()).await;
            let _ = stream.shutdown().await;
            listener
        });
        let relay = Setup::new(&format!("http://{addr}")).start().await;
        let got = relay.post("/v1/chat/completions", &[], "{}").await;
        got.assert_error(502, "relay_upstream_unreachable");
        let message = got.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains(says), "{message}");
        // A second connection would be waiting already: loopback completes a connect in
        // the kernel, before relayd could have written to it.
        let listener = provider.await.unwrap();
        tokio::select! {
            biased;
            _ = listener.accept() => panic!("the request was sent again"),
            () = std::future::ready(()) => {}
        }
    }
}
