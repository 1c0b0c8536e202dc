use proptest::prelude::*;

use super::TraceParent;

const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn a_valid_header_gives_the_trace_and_the_parent() {
    let parsed = TraceParent::parse(GOOD);
    assert_eq!(
        parsed,
        Some(TraceParent {
            trace_id: [
                0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e,
                0x47, 0x36
            ],
            parent_id: [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7],
            flags: 1,
        })
    );
}

#[test]
fn invalid_headers_start_a_new_trace() {
    for bad in [
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
    ] {
        assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn a_later_version_may_append_fields() {
    let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-ever";
    let parsed = TraceParent::parse(later).map(|p| p.parent_id);
    assert_eq!(parsed, TraceParent::parse(GOOD).map(|p| p.parent_id));
}

proptest! {
    #[test]
    fn header_for_round_trips(trace in any::<[u8; 16]>(), span in any::<[u8; 8]>(), flags: u8) {
        prop_assume!(trace != [0; 16] && span != [0; 8]);
        let header = TraceParent::header_for(trace, span, flags);
        prop_assert_eq!(
            TraceParent::parse(&header),
            Some(TraceParent { trace_id: trace, parent_id: span, flags })
        );
    }

    #[test]
    fn parse_is_total(header in ".{0,80}") {
        let _ = TraceParent::parse(&header);
    }
}
