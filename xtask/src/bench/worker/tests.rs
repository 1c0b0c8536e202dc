use std::process::Command;

use super::super::hook::*;
use super::*;

#[test]
fn a_token_is_43_url_safe_characters_and_fresh() {
    let token = new_token().unwrap();
    assert_eq!(token.len(), 43);
    assert!(
        token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "{token}"
    );
    assert_ne!(token, new_token().unwrap());
}

#[test]
fn percentiles_are_nearest_rank() {
    let samples: Vec<Duration> = (1..=10).rev().map(Duration::from_millis).collect();
    assert_eq!(percentile(&samples, 0.5), Duration::from_millis(5));
    assert_eq!(percentile(&samples, 0.99), Duration::from_millis(10));
    assert_eq!(percentile(&samples, 1.0), Duration::from_millis(10));
    assert_eq!(percentile(&samples, 0.0), Duration::from_millis(1));
    assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    assert_eq!(
        percentile(&[Duration::from_millis(7)], 0.5),
        Duration::from_millis(7)
    );
}

#[test]
fn destinations_count_only_the_route_asked_for() {
    let metrics = "# TYPE relay_requests counter\n\
                   relay_requests_total{route=\"hook\",destination=\"worker\",status=\"200\"} 220\n\
                   relay_requests_total{route=\"hook\",destination=\"pass_through\",status=\"200\"} 1\n\
                   relay_requests_total{route=\"openai\",destination=\"worker\",status=\"200\"} 9000\n\
                   relay_requests_total{route=\"status\",destination=\"local\",status=\"200\"} 5\n";
    assert_eq!(destinations(metrics, "hook"), (220, 1));
    assert_eq!(destinations(metrics, "openai"), (9000, 0));
    assert_eq!(destinations(metrics, "anthropic"), (0, 0));
    assert_eq!(destinations("", "hook"), (0, 0));
}

#[test]
fn hook_blocks_alternate_which_program_goes_first() {
    assert_eq!(
        hook_round_order(0),
        [HookProgram::Baseline, HookProgram::Hook]
    );
    assert_eq!(
        hook_round_order(1),
        [HookProgram::Hook, HookProgram::Baseline]
    );
    // An even number of rounds gives each program the first slot equally often.
    assert!(HOOK_RUNS.div_ceil(HOOK_BLOCK).is_multiple_of(2));
}

#[test]
fn the_hook_payload_is_a_claude_code_pre_tool_use_event() {
    let payload: Value = serde_json::from_str(HOOK_PAYLOAD).unwrap();
    assert_eq!(payload["hook_event_name"], "PreToolUse");
}

#[test]
fn a_timed_run_feeds_stdin_and_collects_stdout() {
    let mut command = Command::new("cat");
    command.env_clear();
    let (elapsed, output) = timed_run(command, b"payload").unwrap();
    assert!(output.status.success());
    assert_eq!(output.stdout, b"payload");
    assert!(elapsed > Duration::ZERO);
    // A program that exits without reading its stdin is still timed, not an error.
    let (_, output) = timed_run(Command::new("true"), &[b'x'; 1 << 20]).unwrap();
    assert!(output.status.success());
}

#[test]
fn children_are_found_and_an_exit_is_noticed() {
    let mut command = Command::new("sleep");
    command.arg("600");
    let (_, sleeper) = spawn_on(None, "sleep", command).unwrap();
    let pid = sleeper.pid();
    assert!(procfs::children(std::process::id()).contains(&pid));
    assert!(!is_relay_worker(pid));
    assert!(wait_for_exit(pid, Duration::from_millis(20)).is_err());
    assert!(process_ticks(pid).is_some());
    assert!(procfs::cpus_allowed(pid).is_some_and(|list| !list.is_empty()));
    drop(sleeper);
    wait_for_exit(pid, Duration::from_secs(5)).unwrap();
    assert!(own_ticks().is_some());
}
