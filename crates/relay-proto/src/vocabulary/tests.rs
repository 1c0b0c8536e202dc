use super::*;

#[test]
fn every_value_parses_back_from_its_spelling() {
    macro_rules! round_trip {
        ($($ty:ident),+) => {
            $(for value in $ty::ALL {
                assert_eq!($ty::parse(value.as_str()), Some(*value));
                assert_eq!(value.to_string(), value.as_str());
            })+
        };
    }
    round_trip!(
        PassThroughReason,
        RouteMode,
        WorkerState,
        McpRemovedReason,
        McpDisconnectReason,
        WorkerDisconnectReason,
        ActivationCancelReason,
        WorkerRemovedReason,
        FailureReason
    );
    assert_eq!(WorkerRemovedReason::parse("drained\n"), None);
    assert_eq!(WorkerRemovedReason::parse(""), None);
}

#[test]
fn serialised_values_are_their_spelling() {
    for value in PassThroughReason::ALL {
        assert_eq!(
            serde_json::to_string(value).ok(),
            Some(format!("\"{}\"", value.as_str()))
        );
    }
    for value in WorkerState::ALL {
        assert_eq!(
            serde_json::to_string(value).ok(),
            Some(format!("\"{}\"", value.as_str()))
        );
    }
    for value in RouteMode::ALL {
        assert_eq!(
            serde_json::to_string(value).ok(),
            Some(format!("\"{}\"", value.as_str()))
        );
    }
}

#[test]
fn a_peer_s_failure_reason_is_one_it_may_report_or_unknown() {
    for reason in FailureReason::REPORTED {
        assert_eq!(FailureReason::from_peer(reason.as_str()), *reason);
    }
    for text in [
        "",
        "unknown",
        "readiness_probe_failed",
        "worker_gone",
        "PLUGIN_CONFIG_INVALID",
        "plugin_config_invalid ",
        "evil\n{\"event\":\"daemon_stopped\"}",
    ] {
        assert_eq!(
            FailureReason::from_peer(text),
            FailureReason::Unknown,
            "{text:?}"
        );
    }
}

#[test]
fn a_disconnect_is_spelled_in_each_role_s_words() {
    assert_eq!(
        DisconnectReason::CommunicationFailed.for_worker().as_str(),
        "worker_communication_failed"
    );
    assert_eq!(
        DisconnectReason::CommunicationFailed.for_mcp().as_str(),
        "protocol_violation"
    );
    // A killed peer: the worker's words keep saying communication failed, the MCP's say
    // the peer is gone, not that it broke the protocol.
    assert_eq!(
        DisconnectReason::ConnectionLost.for_worker().as_str(),
        "worker_communication_failed"
    );
    assert_eq!(
        DisconnectReason::ConnectionLost.for_mcp().as_str(),
        "peer_closed"
    );
    for reason in [DisconnectReason::PongTimeout, DisconnectReason::PeerClosed] {
        assert_eq!(reason.for_mcp().as_str(), reason.for_worker().as_str());
    }
}

#[test]
fn only_the_plugin_exit_status_names_the_plugins() {
    let exited = |exit_code, signal| crate::WorkerExited {
        activation_id: crate::Id([7; 16]),
        exit_code,
        signal,
    };
    assert_eq!(
        exited(Some(i32::from(WORKER_EXIT_PLUGIN_CONFIG_INVALID)), None).failure_reason(),
        FailureReason::PluginConfigInvalid
    );
    for (code, signal) in [
        (Some(1), None),
        (Some(0), None),
        (None, Some(9)),
        (None, None),
    ] {
        assert_eq!(
            exited(code, signal).failure_reason(),
            FailureReason::WorkerExitedBeforeReady,
            "{code:?} {signal:?}"
        );
    }
}
