use std::time::Duration;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use http::header::HeaderValue;
use relay_testkit::measures::{MeasureId, SampleCounts, Unit};
use relay_testkit::{Behaviour, StandIn, StandInConfig};

use super::*;
use crate::conn::{Conn, Probe, chat_body_of_size, large_body};
use crate::metrics::{Destinations, open_streams_gauge, rss_bytes};
use crate::samples::{Samples, Side, round_order};
use crate::scenarios::{latency, throughput, ttfb};
use crate::streams::hold_streams;

/// A plan small enough for a unit test, still exercising warm-up, several rounds and blocks.
fn tiny_plan() -> Plan {
    let mut plan = Plan::scaled(0.001, 8, 8);
    plan.latency.block = 5;
    plan.ttfb.block = 5;
    plan.throughput_concurrency = 4;
    plan.throughput_rounds = 2;
    plan.rss_samples = 2;
    plan.rss_interval = Duration::from_millis(1);
    plan
}

fn ctx_against(addr: SocketAddr, plan: Plan) -> Ctx {
    Ctx {
        direct: Some(addr),
        relay: addr,
        relay_pid: None,
        peer: None,
        peer_pids: Vec::new(),
        tls: None,
        throughput_probe: Probe::Json,
        stream_stand_in_pid: None,
        paced: None,
        stream_pace: Duration::from_millis(250),
        worker_pid: None,
        token: None,
        plan,
    }
}

#[test]
fn rounds_alternate_which_target_goes_first() {
    let two = [Side::Direct, Side::Relay];
    assert_eq!(round_order(0, &two), [Side::Direct, Side::Relay]);
    assert_eq!(round_order(1, &two), [Side::Relay, Side::Direct]);
    let three = [Side::Direct, Side::Relay, Side::Peer];
    assert_eq!(
        round_order(1, &three),
        [Side::Relay, Side::Peer, Side::Direct]
    );
    assert_eq!(
        round_order(2, &three),
        [Side::Peer, Side::Direct, Side::Relay]
    );
    assert_eq!(round_order(3, &three), three);
    let plan = Plan::scaled(0.01, 1000, 5000);
    for shape in [plan.latency, plan.ttfb] {
        assert!(
            shape.rounds >= 2 && shape.rounds.is_multiple_of(2),
            "{shape:?}"
        );
    }
    assert!(plan.throughput_rounds.is_multiple_of(2));
}

#[test]
fn full_scale_plan_matches_the_documented_counts() {
    let plan = Plan::scaled(1.0, 1000, 5000);
    assert_eq!(
        plan.latency,
        Interleave {
            warmup: 2000,
            rounds: 1000,
            block: 20
        }
    );
    assert_eq!(plan.ttfb.rounds * plan.ttfb.block, 10_000);
    assert_eq!(plan.latency.rounds * plan.latency.block, 20_000);
    assert_eq!(plan.large_body.rounds * plan.large_body.block, 200);
    assert_eq!(plan.throughput_concurrency, 64);
    assert_eq!(plan.throughput_block, Duration::from_secs(2));
    assert_eq!(plan.streams, 1000);
    let quick = Plan::scaled(0.0001, 10, 10);
    assert_eq!(quick.latency.warmup, 1);
    assert_eq!(quick.throughput_block, Duration::from_millis(20));
}

#[test]
fn own_rss_is_readable() {
    let rss = rss_bytes(std::process::id()).unwrap();
    assert!(rss > 1024 * 1024, "{rss}");
}

#[test]
fn open_streams_gauge_is_found_among_other_metrics() {
    let text = "# HELP relay_open_streams Response bodies being relayed.\n\
                # TYPE relay_open_streams gauge\n\
                relay_open_streams_total 7\n\
                relay_open_streams 1000\n\
                relay_control_sessions 0\n";
    assert_eq!(open_streams_gauge(text), Some(1000.0));
    assert_eq!(open_streams_gauge("relay_control_sessions 0\n"), None);
}

#[test]
fn samples_give_percentiles_and_count_stalls() {
    let mut samples = Samples::new();
    for us in 1..=100 {
        samples.record(Duration::from_micros(us));
    }
    samples.record(Duration::from_millis(41));
    assert_eq!(samples.count(), 101);
    assert_eq!(samples.stalls, 1);
    let p50 = samples.micros(0.5);
    assert!((50.0..=51.1).contains(&p50), "{p50}");
    let mut other = Samples::new();
    other.record(Duration::from_millis(40));
    samples.merge(&other).unwrap();
    assert_eq!(samples.count(), 102);
    assert_eq!(samples.stalls, 2);
    assert!(samples.millis(1.0) >= 40.9);
}

#[tokio::test]
async fn latency_ttfb_and_throughput_run_against_a_stand_in() {
    let stand_in = StandIn::start_with(StandInConfig {
        record_requests: false,
        ..StandInConfig::default()
    })
    .await
    .unwrap();
    let plan = tiny_plan();
    let ctx = ctx_against(stand_in.addr(), plan.clone());

    let rows = latency(&ctx).await.unwrap();
    assert_eq!(rows.len(), 2);
    let per_side = (plan.latency.rounds * plan.latency.block) as u64;
    for row in &rows {
        assert_eq!(
            row.samples,
            Some(SampleCounts {
                direct: per_side,
                relay: per_side,
                peer: None,
            })
        );
        assert!(
            row.relay > 0.0 && row.direct.is_some_and(|d| d > 0.0),
            "{row:?}"
        );
        assert!(row.within_target.is_some());
    }

    let rows = ttfb(&ctx).await.unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[2].unit, Unit::Count);

    let rows = throughput(&ctx).await.unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].unit, Unit::PerSecond);
    assert!(rows[0].relay > 0.0 && rows[0].direct.is_some_and(|d| d > 0.0));
    let counts = rows[0].samples.unwrap();
    assert!(counts.direct >= plan.throughput_concurrency as u64);
}

#[tokio::test]
async fn without_a_direct_address_throughput_runs_on_relayd_alone() {
    // As for an HTTPS provider: a direct figure from another provider would mean nothing.
    let stand_in = StandIn::start_with(StandInConfig {
        record_requests: false,
        ..StandInConfig::default()
    })
    .await
    .unwrap();
    let ctx = Ctx {
        direct: None,
        ..ctx_against(stand_in.addr(), tiny_plan())
    };
    let rows = throughput(&ctx).await.unwrap();
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert_eq!((row.direct, row.added), (None, None), "{row:?}");
        assert!(row.relay > 0.0, "{row:?}");
        assert_eq!(row.samples.unwrap().direct, 0);
    }
}

/// A TLS front for `upstream` on a loopback port, speaking the TLS `versions`, with a certificate made for it (written as PEM to `dir/name.pem`): each connection's TLS ends here and its bytes go on to `upstream`, as a relayd serving HTTPS would take them.
async fn tls_front(
    upstream: SocketAddr,
    dir: &std::path::Path,
    name: &str,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> (SocketAddr, PathBuf) {
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let pem = dir.join(format!("{name}.pem"));
    std::fs::write(&pem, made.cert.pem()).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(made.signing_key.serialize_der()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(versions)
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![made.cert.der().clone()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that does not trust the certificate ends its connection here.
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut plain = tokio::net::TcpStream::connect(upstream).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    (addr, pem)
}

#[tokio::test]
async fn with_tls_relayd_and_the_peer_are_reached_over_tls_and_checked() {
    let stand_in = StandIn::start().await.unwrap();
    let dir = std::env::temp_dir().join(format!("relay-loadgen-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let both_versions = rustls::DEFAULT_VERSIONS;
    let (relay, relay_pem) = tls_front(stand_in.addr(), &dir, "relay", both_versions).await;
    let (peer, peer_pem) = tls_front(stand_in.addr(), &dir, "peer", both_versions).await;
    let both = dir.join("both.pem");
    let pems = [&relay_pem, &peer_pem].map(|pem| std::fs::read_to_string(pem).unwrap());
    std::fs::write(&both, pems.concat()).unwrap();

    let ctx = Ctx {
        direct: None,
        relay,
        peer: Some(peer),
        tls: Some(tls::client_config(&both).unwrap()),
        ..ctx_against(stand_in.addr(), tiny_plan())
    };
    let rows = throughput(&ctx).await.unwrap();
    let samples = rows[0].samples.unwrap();
    let peer_samples = samples.peer.unwrap();
    assert!(samples.relay > 0 && peer_samples > 0, "{samples:?}");
    // Every request the stand-in saw came through one of the two fronts, whole.
    let records = stand_in.requests();
    assert!(records.len() as u64 >= samples.relay + peer_samples);
    assert!(records.iter().all(|record| record.body_complete));

    // A server whose certificate the roots do not hold is refused before any request.
    let only_relay = tls::client_config(&relay_pem).unwrap();
    let refused = Conn::open_tls(peer, &only_relay).await.unwrap_err();
    assert!(
        format!("{refused:#}").contains("TLS handshake"),
        "{refused:#}"
    );
    // So is a server that would speak TLS 1.2 only: the figures beside relayd's are TLS 1.3.
    let (old, old_pem) = tls_front(stand_in.addr(), &dir, "old", &[&rustls::version::TLS12]).await;
    let refused = Conn::open_tls(old, &tls::client_config(&old_pem).unwrap())
        .await
        .unwrap_err();
    assert!(
        format!("{refused:#}").contains("TLS handshake"),
        "{refused:#}"
    );
    let seen = stand_in.requests().len();
    assert_eq!(seen, records.len());
    // A roots file that cannot be read is an error, never an empty trust.
    assert!(tls::client_config(&dir.join("missing.pem")).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// With `--whole-streams` every request of the throughput blocks asks for a stream, and an
/// exchange counts only once the stream has ended.
#[tokio::test]
async fn whole_streams_throughput_asks_for_streams_and_reads_them_to_their_end() {
    let stand_in = StandIn::start_with(StandInConfig {
        behaviour: Behaviour {
            stream_events: Some(20),
            ..Behaviour::default()
        },
        ..StandInConfig::default()
    })
    .await
    .unwrap();
    let plan = tiny_plan();
    let ctx = Ctx {
        throughput_probe: Probe::WholeStream,
        ..ctx_against(stand_in.addr(), plan.clone())
    };
    let rows = throughput(&ctx).await.unwrap();
    let counts = rows[0].samples.unwrap();
    assert!(counts.relay >= plan.throughput_concurrency as u64);
    let requests = stand_in.requests();
    assert!(!requests.is_empty());
    for request in &requests {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(body["stream"], true, "{body}");
        assert!(request.body_complete && !request.client_went_away);
    }
}

/// `--whole-streams` changes only the throughput blocks, pass-through or through a worker: beside any
/// other scenario it is refused before anything is sent, as is `--tls-ca` beside a worker scenario.
#[tokio::test]
async fn whole_streams_and_tls_are_refused_beside_scenarios_they_do_not_change() {
    let refused = |extra: &[&str]| {
        let mut argv = vec![
            "relay-loadgen",
            "--relay",
            "127.0.0.1:9",
            "--direct",
            "127.0.0.1:9",
        ];
        argv.extend_from_slice(extra);
        run(Args::parse_from(argv))
    };
    for (extra, flag) in [
        (
            &[
                "--whole-streams",
                "--scenario",
                "worker-throughput",
                "--scenario",
                "latency",
            ][..],
            "--whole-streams",
        ),
        (
            &["--whole-streams", "--scenario", "worker-ttfb"][..],
            "--whole-streams",
        ),
        (
            &[
                "--tls-ca",
                "/nonexistent.pem",
                "--scenario",
                "worker-throughput",
            ][..],
            "--tls-ca",
        ),
    ] {
        let error = refused(extra).await.unwrap_err();
        assert!(error.to_string().starts_with(flag), "{extra:?}: {error:#}");
    }
}

#[tokio::test]
async fn held_streams_stay_open_until_dropped() {
    let stand_in = StandIn::start_with(StandInConfig {
        behaviour: Behaviour {
            pace: Some(Duration::from_secs(1)),
            stream_events: Some(100),
            ..Behaviour::default()
        },
        ..StandInConfig::default()
    })
    .await
    .unwrap();
    let held = hold_streams(stand_in.addr(), 8, 3, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(held.ended.load(Ordering::Relaxed), 0);
    assert_eq!(held.tasks.len(), 8);
    held.close();
    let gone = stand_in
        .wait_until(Duration::from_secs(10), |records| {
            (records.len() == 8 && records.iter().all(|r| r.client_went_away)).then_some(())
        })
        .await;
    assert!(gone.is_ok(), "the stand-in did not see all 8 clients go");
}

#[tokio::test]
async fn a_refused_stream_fails_the_hold_with_the_status() {
    // `GET`-only path answered 405 by the stand-in would not exercise the POST; point at a port with nothing behind it instead.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let error = hold_streams(addr, 2, 2, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(format!("{error:#}").contains("connecting to"), "{error:#}");
}

#[test]
fn the_large_body_is_two_mebibytes_of_valid_json() {
    let body = large_body();
    assert_eq!(body.len(), 2 * 1024 * 1024);
    let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(value["model"], "m");
    assert!(value["messages"][0]["content"].as_str().unwrap().len() > 2_000_000);
    // Smaller than the frame itself: the frame alone, still valid JSON.
    let tiny = chat_body_of_size(3);
    let value: serde_json::Value = serde_json::from_slice(&tiny).unwrap();
    assert_eq!(value["messages"][0]["content"], "");
}

#[test]
fn destinations_sum_every_route_and_status() {
    let text = "# HELP relay_requests Requests by route, destination and status.\n\
                # TYPE relay_requests counter\n\
                relay_requests_total{route=\"openai\",destination=\"worker\",status=\"200\"} 20000\n\
                relay_requests_total{route=\"hook\",destination=\"worker\",status=\"200\"} 12\n\
                relay_requests_total{route=\"openai\",destination=\"pass_through\",status=\"200\"} 3\n\
                relay_requests_total{route=\"status\",destination=\"local\",status=\"200\"} 9\n\
                relay_requests_created{route=\"openai\",destination=\"worker\",status=\"200\"} 1.7e9\n\
                relay_open_streams 0\n";
    assert_eq!(
        Destinations::parse(text),
        Destinations {
            worker: 20_012,
            pass_through: 3
        }
    );
    assert_eq!(Destinations::parse(""), Destinations::default());
}

#[test]
fn a_request_that_passed_through_fails_a_worker_measure() {
    let before = Destinations {
        worker: 10,
        pass_through: 2,
    };
    let all_to_worker = Destinations {
        worker: 110,
        pass_through: 2,
    };
    assert!(
        before
            .ensure_all_went_to_worker(&all_to_worker, 100)
            .is_ok()
    );
    let one_passed = Destinations {
        worker: 109,
        pass_through: 3,
    };
    let error = before
        .ensure_all_went_to_worker(&one_passed, 100)
        .unwrap_err();
    assert!(error.to_string().contains("1 requests"), "{error}");
    let too_few = Destinations {
        worker: 50,
        pass_through: 2,
    };
    assert!(before.ensure_all_went_to_worker(&too_few, 100).is_err());
}

#[tokio::test]
async fn a_worker_connection_sends_the_credential_and_the_large_body_arrives_whole() {
    let stand_in = StandIn::start().await.unwrap();
    let token = HeaderValue::from_static("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
    let mut ctx = ctx_against(stand_in.addr(), tiny_plan());
    assert!(ctx.worker_conn().await.is_err());
    ctx.token = Some(token);
    let mut conn = ctx.worker_conn().await.unwrap();
    conn.exchange(Probe::LargeJson).await.unwrap();
    let mut plain = Conn::open(stand_in.addr()).await.unwrap();
    plain.exchange(Probe::Json).await.unwrap();
    let records = stand_in.requests();
    assert_eq!(records.len(), 2);
    assert_eq!(
        records[0].header_str("x-relay-client-token"),
        Some("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
    );
    assert_eq!(records[0].body.len(), 2 * 1024 * 1024);
    assert!(records[0].body_complete);
    assert_eq!(records[1].header("x-relay-client-token"), None);
}

#[tokio::test]
async fn a_peer_runs_beside_relayd_and_cpu_is_counted_per_request() {
    let direct = StandIn::start_with(StandInConfig {
        record_requests: false,
        ..StandInConfig::default()
    })
    .await
    .unwrap();
    let peer = StandIn::start_with(StandInConfig {
        record_requests: false,
        ..StandInConfig::default()
    })
    .await
    .unwrap();
    let plan = tiny_plan();
    let mut ctx = ctx_against(direct.addr(), plan.clone());
    // This process stands in for relayd and the peer: its CPU time is what the window sees.
    ctx.relay_pid = Some(std::process::id());
    ctx.peer = Some(peer.addr());
    ctx.peer_pids = vec![std::process::id()];

    let rows = latency(&ctx).await.unwrap();
    let per_side = (plan.latency.rounds * plan.latency.block) as u64;
    for row in &rows {
        assert_eq!(row.samples.unwrap().peer, Some(per_side), "{row:?}");
        assert!(row.peer.is_some_and(|p| p > 0.0), "{row:?}");
        let cpu = row.cpu.unwrap();
        assert!(cpu.relay_us >= 0.0 && cpu.peer_us.is_some(), "{cpu:?}");
    }

    let rows = throughput(&ctx).await.unwrap();
    let ids: Vec<MeasureId> = rows.iter().map(|r| r.id).collect();
    assert_eq!(
        ids,
        [
            MeasureId::ThroughputRate,
            MeasureId::ThroughputP99,
            MeasureId::CpuPassThrough,
            MeasureId::PreemptionsPassThrough,
            MeasureId::RelaydRssAfterLoad
        ]
    );
    assert!(rows[4].relay > 0.0, "{:?}", rows[4]);
    assert!(rows[0].peer.is_some_and(|rate| rate > 0.0));
    let cpu = &rows[2];
    assert_eq!(cpu.unit, Unit::Micros);
    assert_eq!(cpu.peer, cpu.cpu.unwrap().peer_us);
    let preemptions = &rows[3];
    assert_eq!(preemptions.unit, Unit::PerRequest);
    assert!(preemptions.relay >= 0.0, "{preemptions:?}");
    assert!(
        preemptions.peer.is_some_and(|p| p >= 0.0),
        "{preemptions:?}"
    );
    assert!(rows[0].samples.unwrap().peer.is_some_and(|n| n > 0));
}

#[test]
fn cpu_per_request_is_the_window_s_ticks_over_the_requests() {
    use crate::scenarios::{Counters, cpu_per_request};
    let before = Counters::new(Some(100), Some(50));
    let after = Counters::new(Some(300), Some(150));
    // 200 ticks of 10 ms over 40,000 requests: 50 µs each; the peer 1 s over 20,000: 50 µs.
    let cpu = cpu_per_request(before, after, 40_000, 20_000).unwrap();
    assert!((cpu.relay_us - 50.0).abs() < 1e-9, "{cpu:?}");
    assert_eq!(
        Counters::per_request(before, after, 400, 50),
        (Some(0.5), Some(2.0))
    );
    assert_eq!(cpu.ratio, Some(1.0));
    assert_eq!(cpu_per_request(before, after, 0, 10), None);
    let no_peer = cpu_per_request(before, Counters::new(Some(300), None), 40_000, 0).unwrap();
    assert_eq!(no_peer.peer_us, None);
    assert_eq!(cpu_per_request(after, before, 1, 1), None);
}

#[test]
fn events_are_split_at_blank_lines_and_a_partial_one_waits() {
    use crate::open_streams::{event_name, take_events};
    let mut buffer =
        "event: message_start\ndata: {}\n\nevent: ping\ndata: {}\n\nevent: content_block"
            .to_owned();
    let events = take_events(&mut buffer);
    assert_eq!(events.len(), 2);
    assert_eq!(event_name(&events[0]), Some("message_start"));
    assert_eq!(event_name(&events[1]), Some("ping"));
    assert_eq!(buffer, "event: content_block");
    buffer.push_str("_delta\ndata: {}\n\n");
    let events = take_events(&mut buffer);
    assert_eq!(event_name(&events[0]), Some("content_block_delta"));
    assert!(buffer.is_empty());
    assert_eq!(event_name("data: {}\n\n"), None);
}

#[test]
fn a_late_a_lost_or_an_out_of_order_frame_marks_its_stream_once() {
    use crate::open_streams::{FrameStats, LATE_SLACK, StreamCheck};
    let pace = Duration::from_millis(250);
    let start = std::time::Instant::now();
    let mut stats = FrameStats::default();
    let mut on_time = StreamCheck::new(pace);
    for (k, name) in [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "ping",
        "content_block_delta",
    ]
    .iter()
    .enumerate()
    {
        on_time.frame(
            &format!("event: {name}\ndata: {{}}\n\n"),
            start + pace * k as u32,
            &mut stats,
        );
    }
    assert_eq!(
        (
            stats.frames,
            stats.late,
            stats.out_of_order,
            stats.bad_streams
        ),
        (5, 0, 0, 0)
    );

    // A lost frame: the next one comes two paces after the last.
    let mut lossy = StreamCheck::new(pace);
    lossy.frame("event: content_block_delta\n\n", start, &mut stats);
    lossy.frame(
        "event: content_block_delta\n\n",
        start + pace * 2,
        &mut stats,
    );
    // Late again, but the stream is counted once.
    lossy.frame(
        "event: content_block_delta\n\n",
        start + pace * 3 + LATE_SLACK * 2,
        &mut stats,
    );
    assert_eq!((stats.late, stats.bad_streams), (2, 1));
    assert_eq!(
        stats.late_window,
        Some((start + pace * 2, start + pace * 3 + LATE_SLACK * 2))
    );

    let mut reordered = StreamCheck::new(pace);
    reordered.frame("event: content_block_delta\n\n", start, &mut stats);
    reordered.frame("event: message_start\n\n", start + pace, &mut stats);
    assert_eq!((stats.out_of_order, stats.bad_streams), (1, 2));
}

#[tokio::test]
async fn held_streams_that_end_early_lost_their_frames() {
    use crate::open_streams::hold_and_check;
    // Streams of three paced events end long before the hold does: every one of them lost frames.
    let short = StandIn::start_with(StandInConfig {
        behaviour: Behaviour {
            pace: Some(Duration::from_millis(20)),
            stream_events: Some(3),
            ..Behaviour::default()
        },
        record_requests: false,
        ..StandInConfig::default()
    })
    .await
    .unwrap();
    let pace = Duration::from_millis(20);
    let hold = hold_and_check(
        short.addr(),
        4,
        2,
        pace,
        Duration::from_millis(600),
        None,
        None,
        None,
    )
    .await
    .unwrap();
    assert_eq!(hold.ended, 4);
    assert_eq!(hold.stats.bad_streams, 4);
    assert!(hold.stats.frames >= 4 * 3, "{:?}", hold.stats);
    assert_eq!(hold.rss, None);

    // Long streams stay open through the hold, and the RSS is sampled in its middle.
    let long = StandIn::start_with(StandInConfig {
        behaviour: Behaviour {
            pace: Some(Duration::from_millis(50)),
            stream_events: Some(1000),
            ..Behaviour::default()
        },
        record_requests: false,
        ..StandInConfig::default()
    })
    .await
    .unwrap();
    let hold = hold_and_check(
        long.addr(),
        4,
        2,
        Duration::from_millis(50),
        Duration::from_millis(400),
        Some(std::process::id()),
        None,
        Some(long.addr()),
    )
    .await
    .unwrap();
    assert_eq!(hold.ended, 0);
    // The control streams were held beside them, and judged apart.
    let control = hold
        .control
        .as_ref()
        .expect("control streams were asked for");
    assert!(control.frames >= 50, "{control:?}");
    assert_eq!(control.bad_streams, 0, "{control:?}");
    assert!(hold.stats.frames >= 4, "{:?}", hold.stats);
    assert!(hold.rss.is_some_and(|rss| rss > 0));
    assert!(hold.all_open < hold.started.elapsed());
    assert!(hold.steal.is_some(), "/proc/stat was not read");
}

#[test]
fn late_frames_are_placed_in_time_in_the_json_and_a_note() {
    use crate::open_streams::{FrameStats, Hold, LATE_SLACK, StreamCheck};
    let pace = Duration::from_millis(250);
    let started = std::time::Instant::now();
    let mut stats = FrameStats::default();
    let mut check = StreamCheck::new(pace);
    check.frame("event: ping\n\n", started, &mut stats);
    let hold = |stats: FrameStats| Hold {
        stats,
        ended: 0,
        rss: None,
        started,
        all_open: Duration::from_millis(900),
        steal: Some(Duration::from_millis(30)),
        control: None,
    };
    let on_time = hold(std::mem::take(&mut stats));
    assert_eq!(on_time.late_note("directly"), None);
    assert_eq!(on_time.detail()["late_between_ms"], serde_json::Value::Null);

    let mut check = StreamCheck::new(pace);
    check.frame("event: ping\n\n", started + pace, &mut stats);
    check.frame(
        "event: ping\n\n",
        started + pace * 2 + LATE_SLACK * 2,
        &mut stats,
    );
    let late = hold(stats);
    assert_eq!(
        late.detail()["late_between_ms"],
        serde_json::json!([700, 700])
    );
    assert_eq!(late.detail()["steal_ms"], 30);
    assert_eq!(late.detail()["all_open_ms"], 900);
    assert_eq!(
        late.late_note("through relayd").unwrap(),
        "open streams through relayd: 1 late frame(s) arrived between 700 and 700 ms after the first stream began to open; every stream was open at 900 ms; the hypervisor took 30 ms of CPU time from this machine during the hold"
    );
    // Streams held directly to the stand-in at the same time say whose the stall was.
    let late_with = |control_late| {
        let control = FrameStats {
            frames: 200,
            late: control_late,
            ..FrameStats::default()
        };
        Hold {
            control: Some(control),
            ..hold(late.stats.clone())
        }
        .late_note("through relayd")
        .unwrap()
    };
    assert!(
        late_with(3).ends_with("; 3 of the 200 frames of 50 streams held directly to the stand-in at the same time were late too, so the stall was outside relayd"),
        "{}",
        late_with(3)
    );
    assert!(
        late_with(0).ends_with("so the stall was relayd's"),
        "{}",
        late_with(0)
    );
}

#[test]
fn the_late_window_spans_the_earliest_and_latest_late_frame_in_any_order_of_recording() {
    use crate::open_streams::{FrameStats, LATE_SLACK, StreamCheck};
    let pace = Duration::from_millis(250);
    let start = std::time::Instant::now();
    let mut stats = FrameStats::default();
    // Stream tasks record in the order they take the lock, not the order frames arrived.
    let late_by = |slacks: u32| start + pace + LATE_SLACK * slacks;
    for slacks in [4, 2, 3] {
        let mut stream = StreamCheck::new(pace);
        stream.frame("event: ping\n\n", start, &mut stats);
        stream.frame("event: ping\n\n", late_by(slacks), &mut stats);
    }
    assert_eq!(stats.late, 3);
    assert_eq!(stats.late_window, Some((late_by(2), late_by(4))));
}
