use super::*;

#[test]
fn every_id_has_exactly_one_row() {
    let ids: Vec<MeasureId> = MEASURES.iter().map(|row| row.id).collect();
    for (i, id) in ids.iter().enumerate() {
        assert!(!ids[i + 1..].contains(id), "{id:?} has two rows");
        assert_eq!(spec(*id).id, *id);
    }
    // One id per variant: serde names them all, so a missing row would show here.
    assert_eq!(ids.len(), 50);
    assert!(
        MEASURES
            .iter()
            .all(|row| !row.how.is_empty() && !row.name.is_empty())
    );
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
    let row = Measure::compare(MeasureId::LatencyP99, 180.0, 40.0);
    assert_eq!(row.added, Some(140.0));
    assert_eq!(row.within_target, Some(true));
    let json = serde_json::to_value(&row).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "id": "latency_p99",
            "scenario": "latency",
            "measure": "added latency, non-streaming, pass-through, c=1, p99",
            "unit": "us",
            "relay": 180.0,
            "direct": 40.0,
            "added": 140.0,
            "target": "added ≤ 150 µs",
            "within_target": true,
        })
    );
    let back: Measure = serde_json::from_value(json).unwrap();
    assert_eq!(back, row);
    let info = Measure::relay_only(MeasureId::RelaydRssStreams, 9.5);
    assert_eq!(info.within_target, None);
    assert_eq!(
        serde_json::to_value(&info).unwrap()["direct"],
        serde_json::Value::Null
    );
}

#[test]
fn the_pass_through_cpu_is_judged_against_nginx() {
    let unknown = Measure::compare(MeasureId::CpuPassThrough, 40.0, 0.0);
    assert_eq!(unknown.within_target, None);
    assert_eq!(unknown.target.as_deref(), Some("≤ nginx"));
    let cheaper = unknown.clone().with_peer(Some(41.0));
    assert_eq!(cheaper.within_target, Some(true));
    assert_eq!(cheaper.ratio(), Some(40.0 / 41.0));
    let dearer = unknown.with_peer(Some(20.0));
    assert_eq!(dearer.within_target, Some(false));
    assert_eq!(dearer.ratio(), Some(2.0));
}

#[test]
fn the_worker_cpu_is_judged_against_its_limit_and_the_pass_through_figure() {
    let mut rows = vec![
        Measure::relay_only(MeasureId::CpuWorker, 90.0),
        Measure::relay_only(MeasureId::CpuPassThrough, 25.0).with_peer(Some(30.0)),
    ];
    // Alone, the worker row cannot be judged: it needs the pass-through figure.
    assert_eq!(rows[0].within_target, None);
    judge_all(&mut rows);
    // 90 µs is under 100 µs but over 3 × 25 µs.
    assert_eq!(rows[0].within_target, Some(false));
    assert_eq!(rows[1].within_target, Some(true));
    rows[1].relay = 30.0;
    judge_all(&mut rows);
    assert_eq!(rows[0].within_target, Some(true));
    let over = Measure::relay_only(MeasureId::CpuWorker, 101.0);
    assert_eq!(over.within_target, Some(false));
    assert_eq!(
        spec(MeasureId::CpuWorker)
            .target
            .unwrap()
            .text(Unit::Micros),
        "≤ 100 µs and ≤ 3× pass-through"
    );
}

#[test]
fn cpu_per_request_gives_the_ratio_to_the_peer() {
    let cpu = CpuPerRequest::new(60.0, Some(30.0));
    assert_eq!(cpu.ratio, Some(2.0));
    assert_eq!(CpuPerRequest::new(60.0, None).ratio, None);
    assert_eq!(CpuPerRequest::new(60.0, Some(0.0)).ratio, None);
}

#[test]
fn a_row_taken_again_under_another_id_keeps_its_figures_and_takes_that_rows_words() {
    let cpu = Measure::relay_only(MeasureId::CpuPassThrough, 12.0).with_peer(Some(10.0));
    assert_eq!(cpu.within_target, Some(false));
    let https = cpu.as_row(MeasureId::HttpsCpuPassThrough);
    assert_eq!(https.id, MeasureId::HttpsCpuPassThrough);
    assert_eq!((https.relay, https.peer), (12.0, Some(10.0)));
    assert_eq!(https.scenario, "https_provider");
    assert_eq!(https.measure, spec(MeasureId::HttpsCpuPassThrough).name);
    // Informational: no target, so no verdict.
    assert_eq!((https.target, https.within_target), (None, None));
}
