use std::time::Duration;

use relay_testkit::{Behaviour, StandIn, StandInConfig};

use super::*;

/// A plan small enough for a unit test, still exercising warm-up, several rounds and blocks.
fn tiny_plan() -> Plan {
    let mut plan = Plan::scaled(0.001, 8);
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
        direct: addr,
        relay: addr,
        relay_pid: None,
        stream_stand_in_pid: None,
        worker_pid: None,
        token: None,
        plan,
    }
}

#[test]
fn rounds_alternate_which_target_goes_first() {
    assert_eq!(round_order(0), [Side::Direct, Side::Relay]);
    assert_eq!(round_order(1), [Side::Relay, Side::Direct]);
    let plan = Plan::scaled(0.01, 1000);
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
    let plan = Plan::scaled(1.0, 1000);
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
    let quick = Plan::scaled(0.0001, 10);
    assert_eq!(quick.latency.warmup, 1);
    assert_eq!(quick.throughput_block, Duration::from_millis(20));
}

#[test]
fn vm_rss_is_read_in_bytes() {
    let status = "Name:\trelayd\nVmPeak:\t  99999 kB\nVmRSS:\t   12345 kB\nThreads:\t3\n";
    assert_eq!(parse_vm_rss(status), Some(12345 * 1024));
    assert_eq!(parse_vm_rss("Name:\tzombie\n"), None);
    assert_eq!(parse_vm_rss("VmRSS:\t12 MB\n"), None);
    assert_eq!(parse_vm_rss("VmRSS:\tlots kB\n"), None);
}

#[test]
fn own_rss_is_readable() {
    let rss = rss_bytes(std::process::id()).unwrap();
    assert!(rss > 1024 * 1024, "{rss}");
}

#[test]
fn cpu_ticks_are_utime_plus_stime() {
    let stat = "77 (relay-loadgen) R 1 77 77 0 -1 4194304 900 0 0 0 250 31 0 0 20 0 1 0 5 100 50\n";
    assert_eq!(parse_stat_ticks(stat), Some(281));
    assert_eq!(parse_stat_ticks("77 (x) R\n"), None);
    let own = std::fs::read_to_string("/proc/self/stat").unwrap();
    assert!(parse_stat_ticks(&own).is_some());
}

#[test]
fn hard_open_file_limit_is_parsed() {
    let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                  Max cpu time              unlimited            unlimited            seconds   \n\
                  Max open files            1024                 524288               files     \n";
    assert_eq!(parse_hard_open_files(limits), Some(Some(524_288)));
    let unlimited = "Max open files            1024                 unlimited            files\n";
    assert_eq!(parse_hard_open_files(unlimited), Some(None));
    assert_eq!(parse_hard_open_files("Max processes 1 2 processes\n"), None);
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
fn targets_are_checked_on_the_added_or_the_relay_value() {
    assert_eq!(
        Target::AddedAtMost(60.0).is_met(100.0, Some(60.0)),
        Some(true)
    );
    assert_eq!(
        Target::AddedAtMost(60.0).is_met(100.0, Some(60.1)),
        Some(false)
    );
    assert_eq!(Target::AddedAtMost(60.0).is_met(100.0, None), None);
    assert_eq!(Target::RelayAtMost(0.0).is_met(0.0, Some(-2.0)), Some(true));
    assert_eq!(Target::RelayAtMost(0.0).is_met(1.0, Some(0.0)), Some(false));
    assert_eq!(
        Target::RelayAtLeast(15_000.0).is_met(14_999.0, None),
        Some(false)
    );
    assert_eq!(Target::RelayBelow(10.0).is_met(10.0, None), Some(false));
    assert_eq!(
        Target::AddedAtMost(60.0).text(Unit::Micros),
        "added ≤ 60 µs"
    );
    assert_eq!(
        Target::RelayAtLeast(15_000.0).text(Unit::PerSecond),
        "≥ 15000 req/s"
    );
    assert_eq!(Target::RelayAtMost(0.0).text(Unit::Count), "≤ 0");
}

#[test]
fn a_compared_row_carries_relay_direct_and_added() {
    let row = Measure::compare(
        Scenario::Latency,
        "p99",
        Unit::Micros,
        180.0,
        40.0,
        Some(Target::AddedAtMost(150.0)),
    );
    assert_eq!(row.added, Some(140.0));
    assert_eq!(row.within_target, Some(true));
    let json = serde_json::to_value(&row).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "scenario": "latency",
            "measure": "p99",
            "unit": "us",
            "relay": 180.0,
            "direct": 40.0,
            "added": 140.0,
            "target": "added ≤ 150 µs",
            "within_target": true,
        })
    );
    let info = Measure::relay_only(Scenario::Memory, "rss", Unit::Mebibytes, 9.5, None);
    assert_eq!(info.within_target, None);
    assert_eq!(
        serde_json::to_value(&info).unwrap()["direct"],
        serde_json::Value::Null
    );
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
                relay: per_side
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
