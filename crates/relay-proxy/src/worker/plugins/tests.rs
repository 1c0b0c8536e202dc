use super::*;

#[test]
fn the_capture_budget_refuses_beyond_the_worker_total_and_gives_back() {
    let budget = CaptureBudget {
        per_stream: 10,
        total: 100,
        in_use: AtomicUsize::new(0),
    };
    assert!(budget.reserve(60));
    assert!(!budget.reserve(41), "over the total");
    assert_eq!(
        budget.in_use.load(Ordering::Relaxed),
        60,
        "a refusal takes nothing"
    );
    assert!(budget.reserve(40));
    budget.release(100);
    assert_eq!(budget.in_use.load(Ordering::Relaxed), 0);
}

#[test]
fn terminal_events_are_the_ones_a_harness_may_exit_after() {
    for (agent, event) in [
        (Agent::ClaudeCode, "Stop"),
        (Agent::ClaudeCode, "SessionEnd"),
        (Agent::Codex, "Stop"),
        (Agent::Pi, "session_shutdown"),
    ] {
        assert!(is_terminal(agent, event), "{agent} {event}");
    }
    for (agent, event) in [
        (Agent::ClaudeCode, "PreToolUse"),
        (Agent::Pi, "Stop"),
        (Agent::Pi, "agent_end"),
    ] {
        assert!(!is_terminal(agent, event), "{agent} {event}");
    }
}

#[tokio::test]
async fn a_policy_rejection_carries_type_message_and_reason() {
    let res = policy_rejected(Some("destructive command"));
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(value["error"]["type"], "relay_policy_rejected");
    assert_eq!(value["error"]["reason"], "destructive command");
    assert!(
        value["error"]["message"]
            .as_str()
            .unwrap()
            .contains("destructive command")
    );
}

#[test]
fn an_inactive_host_is_free() {
    let host = PluginHost::new(
        &relay_plugins::Plugins::default(),
        None,
        None,
        &WorkerConfig::default(),
    );
    assert!(!host.is_active());
}
