use super::*;

#[test]
fn samples_are_summed_over_matching_labels() {
    let text = "# HELP relay_requests Requests\n# TYPE relay_requests counter\n\
relay_requests_total{route=\"hook\",destination=\"worker\",status=\"200\"} 4\n\
relay_requests_total{route=\"hook\",destination=\"pass_through\",status=\"200\"} 1\n\
relay_requests_total{route=\"hook\",destination=\"worker\",status=\"400\"} 2\n\
relay_control_sessions 3\n# EOF\n";
    let hook_worker = [("route", "hook"), ("destination", "worker")];
    assert_eq!(sample_sum(text, "relay_requests_total", &hook_worker), 6.0);
    assert_eq!(
        sample_sum(
            text,
            "relay_requests_total",
            &[("destination", "pass_through")]
        ),
        1.0
    );
    assert_eq!(sample_sum(text, "relay_control_sessions", &[]), 3.0);
    assert_eq!(
        sample_sum(text, "relay_requests_total", &[("route", "openai")]),
        0.0
    );
}
