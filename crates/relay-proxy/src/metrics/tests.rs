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
