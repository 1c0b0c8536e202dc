use super::*;

#[test]
fn kept_counters_count_in_the_family() {
    let metrics = Metrics::new();
    let (routes, destinations) = (RouteLabel::ALL, Destination::ALL);
    for route in routes {
        for destination in destinations {
            for status in [200, 200, 502, 200] {
                metrics.record_request(route, destination, status);
            }
        }
    }
    let text = metrics.encode();
    for route in routes {
        for destination in destinations {
            for (status, count) in [(200, 3), (502, 1)] {
                let line = format!(
                    "relay_requests_total{{route=\"{}\",destination=\"{}\",status=\"{status}\"}} {count}\n",
                    route.as_str(),
                    destination.as_str(),
                );
                assert!(text.contains(&line), "{line} missing from:\n{text}");
            }
        }
    }
}

/// `ALL` lists each enum's variants in order, so every variant listed has a kept counter.
/// A variant added to an enum must be added to the match below, beside which `ALL` is
/// checked; one missing from `ALL` is still counted, through the family's look-up.
#[test]
fn all_lists_every_variant_in_order() {
    for (i, route) in RouteLabel::ALL.into_iter().enumerate() {
        assert_eq!(route as usize, i);
        match route {
            RouteLabel::Anthropic
            | RouteLabel::Openai
            | RouteLabel::Hook
            | RouteLabel::Status
            | RouteLabel::Control
            | RouteLabel::Other => {}
        }
    }
    for (i, destination) in Destination::ALL.into_iter().enumerate() {
        assert_eq!(destination as usize, i);
        match destination {
            Destination::Worker | Destination::PassThrough | Destination::Local => {}
        }
    }
}

#[test]
fn classic_text_names_counter_families_as_their_samples() {
    let openmetrics = "# HELP relay_requests Requests.\n# TYPE relay_requests counter\nrelay_requests_total{route=\"hook\"} 1\n# HELP relay_requests_open Open ones.\n# TYPE relay_requests_open gauge\nrelay_requests_open 0\n# HELP relay_wait_seconds Wait.\n# TYPE relay_wait_seconds histogram\n# UNIT relay_wait_seconds seconds\nrelay_wait_seconds_count 0\n# EOF\n";
    assert_eq!(
        classic_text(openmetrics),
        "# HELP relay_requests_total Requests.\n# TYPE relay_requests_total counter\nrelay_requests_total{route=\"hook\"} 1\n# HELP relay_requests_open Open ones.\n# TYPE relay_requests_open gauge\nrelay_requests_open 0\n# HELP relay_wait_seconds Wait.\n# TYPE relay_wait_seconds histogram\nrelay_wait_seconds_count 0\n"
    );
    // The daemon's own families come out typed.
    let metrics = Metrics::new();
    metrics.record_refusal("token_limit");
    let text = classic_text(&metrics.encode());
    assert!(
        text.lines()
            .any(|l| l == "# TYPE relay_refused_registrations_total counter"),
        "{text}"
    );
}

/// Every refusal reason is a sample from the start, at 0, and counts from there.
#[test]
fn every_refusal_reason_is_shown_at_zero_before_the_first() {
    let metrics = Metrics::new();
    let text = metrics.encode();
    for code in relay_proto::RefusedCode::ALL {
        let line = format!(
            "relay_refused_registrations_total{{reason=\"{}\"}} 0",
            code.as_str()
        );
        assert!(text.lines().any(|l| l == line), "{line} not in {text}");
    }
    metrics.record_refusal(relay_proto::RefusedCode::RateLimited.as_str());
    let text = metrics.encode();
    assert!(
        text.lines()
            .any(|l| l == "relay_refused_registrations_total{reason=\"rate_limited\"} 1"),
        "{text}"
    );
}
