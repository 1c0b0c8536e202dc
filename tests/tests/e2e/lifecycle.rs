//! Starting and stopping relayd (SPEC §2.1, §10.3): socket activation and an explicit
//! port, graceful stop with a stream in flight, and a drain time that runs out.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::Duration;

use http::StatusCode;
use relay_e2e::http::{post_json, send};
use relay_e2e::{Relayd, STOP_TIMEOUT};
use relay_testkit::{ANTHROPIC_MESSAGES_SSE, Behaviour, REQUEST_ID_HEADER, StandIn, StandInConfig};
use tokio::net::TcpStream;

use super::support::{EVENT_TIMEOUT, assert_cut, assert_healthy, between, field, upstream_config};

/// How often the refusal check retries a connection.
const CONNECT_POLL: Duration = Duration::from_millis(20);

/// A streaming Messages request, answered by the stand-in with the fixture stream.
fn stream_request() -> anyhow::Result<http::Request<http_body_util::Full<bytes::Bytes>>> {
    Ok(post_json(
        "/v1/messages",
        &[
            ("x-api-key", "sk-ant-test"),
            ("anthropic-version", "2023-06-01"),
        ],
        r#"{"model":"m","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
    )?)
}

/// A stand-in whose streams trickle: `chunk` bytes every `pace`.
async fn slow_stand_in(chunk: usize, pace: Duration) -> anyhow::Result<StandIn> {
    Ok(StandIn::start_with(StandInConfig {
        behaviour: Behaviour {
            chunk_size: Some(chunk),
            pace: Some(pace),
            ..Behaviour::default()
        },
        ..StandInConfig::default()
    })
    .await?)
}

/// Polls until a connection to `addr` is refused; false if the deadline passes first.
async fn wait_until_refused(addr: SocketAddr, timeout: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut poll = tokio::time::interval(CONNECT_POLL);
    loop {
        poll.tick().await;
        match TcpStream::connect(addr).await {
            Err(error) if error.kind() == ErrorKind::ConnectionRefused => return true,
            // Accepted (or queued) before the signal was handled: try again.
            Ok(_) | Err(_) => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
    }
}

#[tokio::test]
async fn socket_activated_relayd_serves_on_the_passed_socket() -> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let mut relayd = Relayd::builder()?
        .config(upstream_config(&stand_in, ""))
        .start()
        .await?;
    let listening = relayd.listening_event().clone();
    assert_eq!(listening["socket_activated"], true, "{listening}");
    assert_eq!(field(&listening, "address"), relayd.addr().to_string());
    assert_eq!(field(&listening, "advertised_origin"), relayd.origin());
    assert_eq!(field(&listening, "mode"), "managed");
    assert!(
        listening["open_file_limit"].as_u64().is_some(),
        "{listening}"
    );
    assert_healthy(&relayd).await?;

    let status = relayd.stop().await?;
    assert_eq!(status.code(), Some(0), "{}", relayd.logs().text());
    Ok(())
}

/// A passed socket on another address than `--bind` is a configuration error (exit 64):
/// which address listens decides who may connect, and the two must agree.
#[tokio::test]
async fn a_passed_socket_on_another_address_than_bind_is_refused() -> anyhow::Result<()> {
    // Loopback, but not the 127.0.0.1 that --bind names by default.
    let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::new(127, 0, 0, 2), 0))?;
    let out = Relayd::builder()?
        .output_with_socket(listener, Duration::from_secs(20))
        .await?;
    assert_eq!(out.status.code(), Some(64), "{}", out.stderr);
    assert!(
        out.stderr.contains("not on --bind 127.0.0.1"),
        "{}",
        out.stderr
    );
    Ok(())
}

#[tokio::test]
async fn relayd_binds_an_explicit_port_without_activation() -> anyhow::Result<()> {
    let stand_in = StandIn::start().await?;
    let mut relayd = Relayd::builder()?
        .config(upstream_config(&stand_in, ""))
        .explicit_port()
        .start()
        .await?;
    let listening = relayd.listening_event().clone();
    assert_eq!(listening["socket_activated"], false, "{listening}");
    assert_eq!(field(&listening, "address"), relayd.addr().to_string());
    assert_healthy(&relayd).await?;

    let status = relayd.stop().await?;
    assert_eq!(status.code(), Some(0), "{}", relayd.logs().text());
    Ok(())
}

#[tokio::test]
async fn sigterm_lets_a_stream_in_flight_finish_and_refuses_new_connections() -> anyhow::Result<()>
{
    let stand_in = slow_stand_in(30, Duration::from_millis(20)).await?;
    let mut relayd = Relayd::builder()?
        .config(upstream_config(&stand_in, ""))
        .start()
        .await?;
    // The provider sends its first chunk and then nothing until the hold ends, so the stream
    // is certainly still open when the signal comes and the refusal is seen.
    let hold = stand_in.hold_answers();
    let mut res = send(relayd.addr(), stream_request()?).await?;
    assert_eq!(res.status(), StatusCode::OK);
    let id: u64 = res.header_str(REQUEST_ID_HEADER).unwrap_or("").parse()?;
    let first = res.next_data().await?.unwrap_or_default();
    assert!(!first.is_empty());

    relayd.terminate()?;
    assert!(
        wait_until_refused(relayd.addr(), EVENT_TIMEOUT).await,
        "relayd still accepts connections after SIGTERM"
    );
    // Said when the signal came, not when the drain ends.
    let stopping = relayd
        .wait_for_log_event("daemon_stopping", EVENT_TIMEOUT)
        .await?;
    assert!(stopping["drain_secs"].as_u64().is_some(), "{stopping}");
    drop(hold);
    let body = res.read_rest(&first).await?;
    assert_eq!(
        body.len(),
        ANTHROPIC_MESSAGES_SSE.len(),
        "the stream was cut short"
    );
    assert_eq!(&body[..], ANTHROPIC_MESSAGES_SSE);
    let recorded = stand_in
        .request(id)
        .ok_or_else(|| anyhow::anyhow!("the stand-in has no request {id}"))?;
    assert!(recorded.body_complete);
    assert!(
        !recorded.client_went_away,
        "relayd dropped the provider stream during the drain"
    );

    let status = relayd.wait_exit(STOP_TIMEOUT).await?;
    assert_eq!(status.code(), Some(0), "{}", relayd.logs().text());
    let stopped = relayd
        .wait_for_log_event("daemon_stopped", EVENT_TIMEOUT)
        .await?;
    assert_eq!(stopped["level"], "info", "{stopped}");
    Ok(())
}

#[tokio::test]
async fn a_stream_longer_than_the_drain_time_is_cut_and_relayd_still_exits_0() -> anyhow::Result<()>
{
    let stand_in = slow_stand_in(8, Duration::from_millis(20)).await?;
    let mut relayd = Relayd::builder()?
        .config(upstream_config(
            &stand_in,
            "\n[daemon.timers]\ndrain_secs = 1\n",
        ))
        .start()
        .await?;
    // The provider sends one chunk and then nothing while this lives: a stream that would
    // outlast any drain.
    let hold = stand_in.hold_answers();
    let mut res = send(relayd.addr(), stream_request()?).await?;
    assert_eq!(res.status(), StatusCode::OK);
    let id: u64 = res.header_str(REQUEST_ID_HEADER).unwrap_or("").parse()?;
    let first = res.next_data().await?.unwrap_or_default();

    relayd.terminate()?;
    // Only the one-second drain running out can end relayd within this wait, far shorter
    // than the default drain, while the stream is held.
    let status = relayd.wait_exit(STOP_TIMEOUT).await?;
    assert_eq!(status.code(), Some(0), "{}", relayd.logs().text());

    assert_cut(res.read_rest(&first).await);
    drop(hold);
    stand_in.wait_for_client_gone(id, EVENT_TIMEOUT).await?;
    let stopped = relayd
        .wait_for_log_event("daemon_stopped", EVENT_TIMEOUT)
        .await?;
    let warned = relayd.logs().events().into_iter().any(|event| {
        event["level"] == "warn" && field(&event, "message").contains("did not complete")
    });
    assert!(
        warned,
        "no warning that the drain ran out:\n{}",
        relayd.logs().text()
    );
    // By relayd's own clock, which the test's scheduling does not move: the drain ran its
    // one second, and relayd stopped within seconds of the signal.
    let stopping = relayd
        .wait_for_log_event("daemon_stopping", EVENT_TIMEOUT)
        .await?;
    let passed = relayd
        .wait_for_log_event("drain_deadline_passed", EVENT_TIMEOUT)
        .await?;
    let drained = between(&stopping, &passed);
    assert!(
        drained >= Duration::from_millis(990) && drained < Duration::from_secs(5),
        "the drain ran {drained:?} with drain_secs = 1"
    );
    let took = between(&stopping, &stopped);
    assert!(
        took < Duration::from_secs(5),
        "relayd took {took:?} to stop with a 1 s drain"
    );
    Ok(())
}

/// A stop whose final state write fails is no clean stop: a revoke or a block not yet on
/// disk would come undone at the next start, so relayd exits 1 saying so, which a service
/// manager restarting failed daemons sees.
#[tokio::test]
async fn a_stop_that_cannot_write_the_state_exits_1_saying_what_is_lost() -> anyhow::Result<()> {
    let mut relayd = Relayd::builder()?.start().await?;
    // Gone, the directory cannot be written to even by root.
    std::fs::remove_dir_all(relayd.state_dir())?;
    relayd.terminate()?;
    let status = relayd.wait_exit(STOP_TIMEOUT).await?;
    let logs = relayd.logs().text();
    assert_eq!(status.code(), Some(1), "{logs}");
    let failed = relayd
        .wait_for_log_event("daemon_failed", EVENT_TIMEOUT)
        .await?;
    assert!(
        field(&failed, "error").contains("could not be written as the daemon stopped"),
        "{failed}"
    );
    assert!(
        relayd.logs().events_named("daemon_stopped").is_empty(),
        "{logs}"
    );
    Ok(())
}
