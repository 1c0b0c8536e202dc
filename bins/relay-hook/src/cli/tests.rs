use std::time::Duration;

use clap::Parser as _;
use relay_identity::MapEnv;

use super::*;

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("relay-hook").chain(args.iter().copied()))
}

#[test]
fn flags_select_the_failure_policy() {
    let address = ["--daemon-address", "http://127.0.0.1:47632"];
    let policy = |extra: &[&str]| {
        let mut args = vec!["claude"];
        args.extend(address);
        args.extend(extra);
        parse(&args).map(|cli| cli.failure_policy())
    };
    assert_eq!(policy(&[]).unwrap(), FailurePolicy::Default);
    assert_eq!(policy(&["--fail-open"]).unwrap(), FailurePolicy::Open);
    assert_eq!(policy(&["--fail-closed"]).unwrap(), FailurePolicy::Closed);
    assert!(policy(&["--fail-open", "--fail-closed"]).is_err());
}

#[test]
fn the_daemon_address_follows_the_rules_of_section_2_6() {
    for good in [
        "http://127.0.0.1:47632",
        "http://localhost:47632/",
        "https://relay.example.com:8443",
    ] {
        let cli = parse(&["codex", "--daemon-address", good]).unwrap();
        assert_eq!(cli.agent, Agent::Codex);
    }
    for bad in [
        "http://relay.example.com:80",
        "http://127.0.0.1",
        "http://0.0.0.0:47632",
        "http://[::1]:47632",
        "http://127.0.0.1:47632/hooks",
        "ftp://127.0.0.1:21",
    ] {
        assert!(parse(&["pi", "--daemon-address", bad]).is_err(), "{bad}");
    }
    assert!(parse(&["pi"]).is_err());
    assert!(parse(&["gemini", "--daemon-address", "http://127.0.0.1:1"]).is_err());
}

#[test]
fn each_agent_has_its_route_and_silent_answer() {
    assert_eq!(Agent::Claude.route(), "/hooks/claude-code");
    assert_eq!(Agent::Codex.route(), "/hooks/codex");
    assert_eq!(Agent::Pi.route(), "/hooks/pi");
    assert_eq!(Agent::Claude.silent_answer(), r#"{"continue":true}"#);
    assert_eq!(Agent::Codex.silent_answer(), "{}");
    assert_eq!(Agent::Pi.silent_answer(), "{}");
}

#[test]
fn blocking_events_are_those_of_section_7_1_per_agent() {
    for agent in [Agent::Claude, Agent::Codex] {
        for event in ["PreToolUse", "PermissionRequest", "UserPromptSubmit"] {
            assert!(agent.is_blocking_event(Some(event)), "{agent:?} {event}");
        }
        for event in [
            "PostToolUse",
            "Stop",
            "SessionStart",
            "SessionEnd",
            "Notification",
            "tool_call",
            "user_bash",
            "pretooluse",
        ] {
            assert!(!agent.is_blocking_event(Some(event)), "{agent:?} {event}");
        }
        assert!(!agent.is_blocking_event(None));
    }
    for event in ["tool_call", "user_bash"] {
        assert!(Agent::Pi.is_blocking_event(Some(event)));
    }
    for event in ["PreToolUse", "tool_result", "input", "session_shutdown"] {
        assert!(!Agent::Pi.is_blocking_event(Some(event)), "{event}");
    }
    assert!(!Agent::Pi.is_blocking_event(None));
}

#[test]
fn session_end_of_claude_and_codex_gets_the_short_timeout() {
    let short = Duration::from_millis(2500);
    let long = Duration::from_millis(5000);
    assert_eq!(Agent::Claude.default_timeout(Some("SessionEnd")), short);
    assert_eq!(Agent::Codex.default_timeout(Some("SessionEnd")), short);
    assert_eq!(Agent::Claude.default_timeout(Some("Stop")), long);
    assert_eq!(Agent::Codex.default_timeout(None), long);
    assert_eq!(Agent::Pi.default_timeout(Some("SessionEnd")), long);
    assert_eq!(Agent::Pi.default_timeout(Some("session_shutdown")), long);
}

#[test]
fn the_timeout_override_is_a_positive_number_of_milliseconds() {
    let env = |value: &str| MapEnv::new().with(names::RELAY_HOOK_TIMEOUT_MS, value);
    assert_eq!(timeout_override(&MapEnv::new()), Ok(None));
    assert_eq!(timeout_override(&env("")), Ok(None));
    assert_eq!(
        timeout_override(&env("300")),
        Ok(Some(Duration::from_millis(300)))
    );
    assert_eq!(
        timeout_override(&env("3600000")),
        Ok(Some(Duration::from_millis(3_600_000)))
    );
    for bad in [
        "0",
        "-1",
        "+5",
        "1.5",
        "5s",
        " 300",
        "3600001",
        "99999999999999999999",
    ] {
        let err = timeout_override(&env(bad)).unwrap_err();
        assert_eq!(err.value, bad);
        assert!(err.to_string().contains("RELAY_HOOK_TIMEOUT_MS"), "{err}");
    }
}
