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

/// Records never hold a credential, whatever `detectors` lists; request bodies are
/// redacted with the list as written.
#[test]
fn records_are_redacted_of_credentials_even_when_the_list_leaves_them_out() {
    let plugins = |detectors: &str| {
        let text = format!(
            "version = 1\n[[components]]\nkind = \"pii_redaction\"\n[components.config]\ndetectors = {detectors}\nredact_requests = true\n"
        );
        relay_plugins::Plugins::parse(
            Some((std::path::Path::new("/etc/relay/plugins.toml"), &text)),
            None,
        )
        .unwrap()
    };
    let text = "mail alice@example.com the key sk-ant-api03-abcdefghijklmnop";
    for detectors in ["[]", "[\"email\"]"] {
        let redactors = generation_redactors(&plugins(detectors), b"key");
        let records = redactors.records.unwrap().redact_str(text).into_owned();
        assert!(!records.contains("sk-ant-api03"), "{detectors}: {records}");
        let requests = redactors.requests.unwrap().redact_str(text).into_owned();
        assert!(requests.contains("sk-ant-api03"), "{detectors}: {requests}");
        assert_eq!(
            records.contains("alice@example.com"),
            detectors == "[]",
            "{detectors}: {records}"
        );
    }
    // With every detector listed, one redactor serves both.
    let redactors = generation_redactors(
        &plugins(
            "[\"email\", \"api_key\", \"bearer_token\", \"jwt\", \"aws_access_key_id\", \"private_key\"]",
        ),
        b"key",
    );
    assert!(Arc::ptr_eq(
        redactors.records.as_ref().unwrap(),
        redactors.requests.as_ref().unwrap()
    ));
}
