use bytes::Bytes;
use relay_identity::SigningKey;

use super::*;

fn local() -> DaemonAddress {
    DaemonAddress::parse("http://127.0.0.1:47632").unwrap()
}

fn remote() -> DaemonAddress {
    DaemonAddress::parse("https://relay.example.com:8443").unwrap()
}

fn answer(status: u16, body: serde_json::Value) -> Result<Answer, String> {
    Ok(Answer {
        status: StatusCode::from_u16(status).unwrap(),
        body: Bytes::from(body.to_string()),
    })
}

const WORKER: &str = "0190d3a8-0000-7000-8000-000000000001";

/// [`answer`] as the health check gets it.
fn health_answer(status: u16, body: serde_json::Value) -> Result<Answer, NoAnswer> {
    answer(status, body).map_err(NoAnswer::Other)
}

#[test]
fn health_is_ok_degraded_or_failed() {
    let health = |status: &str| json!({"service":"relayd","version":"1.0.0","instance_id":WORKER,"deployment_mode":"managed","status":status});
    assert_eq!(
        judge_health(&local(), &health_answer(200, health("ok"))).status,
        Status::Ok
    );
    let degraded = judge_health(&local(), &health_answer(200, health("degraded")));
    assert_eq!(degraded.status, Status::Warn);
    assert!(degraded.next_step.unwrap().contains("state_write_failed"));
    let down = judge_health(
        &local(),
        &Err(NoAnswer::Other("connection refused".to_owned())),
    );
    assert_eq!(down.status, Status::Fail);
    assert!(down.next_step.unwrap().contains("start relayd"));
    let other = judge_health(&local(), &health_answer(200, json!({"service":"nginx"})));
    assert_eq!(other.status, Status::Fail);
}

/// A daemon whose certificate is refused does answer: the next step is the certificate, not
/// starting relayd.
#[test]
fn a_refused_certificate_points_at_the_certificate() {
    let refused = judge_health(
        &remote(),
        &Err(NoAnswer::Tls(
            "TLS to https://relay.example.com:8443 failed: the daemon's certificate has expired"
                .to_owned(),
        )),
    );
    assert_eq!(refused.status, Status::Fail);
    assert!(
        refused.summary.contains("has expired"),
        "{}",
        refused.summary
    );
    let next = refused.next_step.unwrap();
    assert!(
        next.contains("--tls-cert") && next.contains("name relay.example.com"),
        "{next}"
    );
    assert!(!next.contains("start relayd"), "{next}");
}

#[test]
fn each_agent_must_trust_an_https_daemons_certificate() {
    assert_eq!(judge_agents_trust(&local(), &[]).status, Status::Skip);
    let node_file = Some(PathBuf::from("/etc/relay/ca.pem"));
    let trusted = judge_agents_trust(
        &remote(),
        &[
            (Agents::Node, node_file.clone(), Trust::Trusted),
            (Agents::Codex, None, Trust::Trusted),
        ],
    );
    assert_eq!(trusted.status, Status::Ok);
    assert!(
        trusted
            .summary
            .contains("NODE_EXTRA_CA_CERTS=/etc/relay/ca.pem")
            && trusted.summary.contains("the system's roots"),
        "{}",
        trusted.summary
    );
    let refused = judge_agents_trust(
        &remote(),
        &[
            (Agents::Node, node_file.clone(), Trust::Trusted),
            (
                Agents::Codex,
                Some(PathBuf::from("/etc/ssl/other.pem")),
                Trust::Refused("the daemon's certificate is not signed by a trusted CA".to_owned()),
            ),
        ],
    );
    assert_eq!(refused.status, Status::Fail);
    assert!(
        refused.summary.starts_with("Codex would refuse")
            && refused.summary.contains("SSL_CERT_FILE=/etc/ssl/other.pem"),
        "{}",
        refused.summary
    );
    assert!(refused.next_step.unwrap().contains("SSL_CERT_FILE"));
    assert_eq!(refused.details["agents"][1]["trusted"], false);
    let unknown = judge_agents_trust(
        &remote(),
        &[(
            Agents::Node,
            node_file,
            Trust::Unknown("no answer within 10s".to_owned()),
        )],
    );
    assert_eq!(unknown.status, Status::Warn);
}

#[test]
fn the_daemon_key_must_match_the_pin() {
    let key = SigningKey::generate().unwrap().public_key();
    let other = SigningKey::generate().unwrap().public_key();
    let file = PathBuf::from("/home/u/.config/relay/daemon/pins/abc");
    let user = |k: PublicKey| PinFound::User {
        key: k,
        file: file.clone(),
    };

    let ok = judge_key(&local(), &Ok(key), &user(key));
    assert_eq!(ok.status, Status::Ok);
    assert_eq!(ok.details["matches"], true);

    let changed = judge_key(&local(), &Ok(key), &user(other));
    assert_eq!(changed.status, Status::Fail);
    let next = changed.next_step.unwrap();
    assert!(next.contains("the daemon key changed"), "{next}");
    assert!(
        next.contains("remove the pin file /home/u/.config/relay/daemon/pins/abc"),
        "{next}"
    );
    assert!(!changed.summary.contains(&hex_of(&key)) && !next.contains(&hex_of(&key)));

    let provisioned = PinFound::Provisioned {
        key: other,
        file: PathBuf::from("/etc/relay/daemon-identity.pub"),
    };
    let admin = judge_key(&local(), &Ok(key), &provisioned);
    assert_eq!(admin.status, Status::Fail);
    assert!(admin.next_step.unwrap().contains("administrator"));

    let none = judge_key(&local(), &Ok(key), &PinFound::None { file: file.clone() });
    assert_eq!(none.status, Status::Fail);
    assert!(
        none.next_step
            .unwrap()
            .contains("start a harness session so relay-mcp registers")
    );

    let unproved = judge_key(
        &local(),
        &Err("the daemon's challenge signature is invalid".to_owned()),
        &user(key),
    );
    assert_eq!(unproved.status, Status::Fail);
}

fn hex_of(key: &PublicKey) -> String {
    key.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

fn route(mode: &str, reason: Option<&str>, state: &str) -> Result<Answer, String> {
    answer(
        200,
        json!({"route_mode":mode,"reason":reason,"worker_id":(mode == "worker").then_some(WORKER),"state":state,"control_available":(mode == "worker").then_some(true)}),
    )
}

#[test]
fn the_route_must_say_worker() {
    let (ok, parsed) = judge_route(&route("worker", None, "ready"));
    assert_eq!(ok.status, Status::Ok);
    assert_eq!(ok.details["route_mode"], "worker");
    assert_eq!(parsed.unwrap().worker_id.unwrap().to_string(), WORKER);

    let cases = [
        (
            "no_live_session",
            "empty",
            "start a harness session so relay-mcp registers",
        ),
        (
            "unbound_credential",
            "none",
            "start a harness session so relay-mcp registers",
        ),
        ("worker_unavailable", "activating", "the worker is gone"),
        ("worker_unavailable", "recovering", "reconnect grace"),
        ("worker_unavailable", "draining", "drains"),
        (
            "worker_unavailable",
            "pass_through",
            "worker_activation_failed",
        ),
        ("configured_pass_through", "none", "--pass-through"),
    ];
    for (reason, state, step) in cases {
        let (check, _) = judge_route(&route("pass_through", Some(reason), state));
        assert_eq!(check.status, Status::Fail, "{reason}");
        assert!(
            check
                .summary
                .contains(&format!("passes through because {reason}")),
            "{}",
            check.summary
        );
        assert!(
            check
                .next_step
                .as_deref()
                .unwrap_or_default()
                .contains(step),
            "{reason}/{state}: {:?}",
            check.next_step
        );
    }

    let (unauthorized, _) = judge_route(&answer(
        401,
        json!({"error":{"type":"relay_unauthorized","message":"m"}}),
    ));
    assert_eq!(unauthorized.status, Status::Fail);
    assert_eq!(unauthorized.details["http_status"], 401);
}

#[test]
fn one_machine_identity_must_not_connect_from_two_addresses() {
    let parsed = |answer: Result<Answer, String>| judge_route(&answer).1;
    let ready = parsed(route("worker", None, "ready"));
    let alone = judge_identity(ready.as_ref());
    assert_eq!(alone.status, Status::Ok);
    assert_eq!(alone.details["conflict"], false);

    let mut shared = ready.clone().unwrap();
    shared.machine_identity_conflict = true;
    let conflict = judge_identity(Some(&shared));
    assert_eq!(conflict.status, Status::Fail);
    assert!(
        conflict.summary.contains("more than one address"),
        "{}",
        conflict.summary
    );
    assert!(
        conflict
            .next_step
            .as_deref()
            .unwrap_or_default()
            .contains("machine-identity.pk8"),
        "{:?}",
        conflict.next_step
    );

    // An unbound token has no route to judge; neither has a route that did not answer.
    let unbound = parsed(route("pass_through", Some("unbound_credential"), "none"));
    assert_eq!(judge_identity(unbound.as_ref()).status, Status::Skip);
    assert_eq!(judge_identity(None).status, Status::Skip);
}

fn worker_status(state: &str, control: bool) -> Result<Answer, String> {
    answer(
        200,
        json!({"worker_id":WORKER,"state":state,"control_available":control,"reference_count":1,"in_flight":0}),
    )
}

#[test]
fn the_worker_must_be_ready_with_control() {
    let id = uuid::Uuid::parse_str(WORKER).unwrap();
    assert_eq!(
        judge_worker(&local(), id, None, &worker_status("ready", true)).status,
        Status::Ok
    );
    assert_eq!(
        judge_worker(&local(), id, None, &worker_status("ready", false)).status,
        Status::Fail
    );
    let recovering = judge_worker(&local(), id, None, &worker_status("recovering", true));
    assert_eq!(recovering.status, Status::Fail);
    assert!(recovering.summary.contains("recovering"));
    let gone = judge_worker(
        &local(),
        id,
        None,
        &answer(
            404,
            json!({"error":{"type":"relay_not_found","message":"worker not found"}}),
        ),
    );
    assert_eq!(gone.status, Status::Fail);
    assert!(gone.summary.contains("is gone"));
    assert!(
        gone.next_step
            .unwrap()
            .contains("relay-mcp starts a new worker")
    );
}

#[test]
fn a_remote_daemon_that_hides_worker_status_is_judged_from_the_route() {
    let id = uuid::Uuid::parse_str(WORKER).unwrap();
    let (_, parsed) = judge_route(&route("worker", None, "ready"));
    let hidden = answer(404, json!({}));
    assert_eq!(
        judge_worker(&remote(), id, parsed.as_ref(), &hidden).status,
        Status::Ok
    );
    assert_eq!(
        judge_worker(&remote(), id, None, &hidden).status,
        Status::Fail
    );
}

#[test]
fn reachability_applies_to_remote_daemons_only() {
    assert_eq!(
        judge_reachable(&local(), None, None, true, true).status,
        Status::Skip
    );
    assert_eq!(
        judge_reachable(&remote(), None, None, false, false).status,
        Status::Skip
    );
    assert_eq!(
        judge_reachable(&remote(), None, Some("10.0.0.2"), true, true).status,
        Status::Ok
    );
    let unreachable = judge_reachable(&remote(), None, Some("10.0.0.2"), true, false);
    assert_eq!(unreachable.status, Status::Fail);
    assert!(unreachable.next_step.unwrap().contains("RELAY_WORKER_PORT"));
}

/// A remote route whose last activation failed has no worker to look at, and that is the
/// case the check is for (a worker behind NAT or a firewall never becomes ready): it fails
/// naming the cause, instead of being skipped for want of a worker.
#[test]
fn a_remote_route_whose_activation_failed_fails_reachability_naming_the_cause() {
    let (_, failed) = judge_route(&route(
        "pass_through",
        Some("worker_unavailable"),
        "pass_through",
    ));
    let failed = failed.unwrap();
    let check = judge_reachable(&remote(), Some(&failed), Some("10.0.0.2"), false, false);
    assert_eq!(check.status, Status::Fail);
    assert!(check.summary.contains("10.0.0.2"), "{}", check.summary);
    assert!(
        check.summary.contains("cannot connect"),
        "{}",
        check.summary
    );
    let next = check.next_step.unwrap();
    assert!(next.contains("RELAY_WORKER_PORT"), "{next}");
    assert!(next.contains("worker_networks"), "{next}");
    assert_eq!(check.details["advertise_address"], "10.0.0.2");

    // Without the address in this environment, that is named first.
    let check = judge_reachable(&remote(), Some(&failed), None, false, false);
    assert_eq!(check.status, Status::Fail);
    assert!(
        check
            .summary
            .contains("RELAY_WORKER_ADVERTISE_ADDRESS is not set"),
        "{}",
        check.summary
    );

    // A local daemon, or a route that is not failing to activate, is still skipped.
    assert_eq!(
        judge_reachable(&local(), Some(&failed), None, false, false).status,
        Status::Skip
    );
    for (mode, reason, state) in [
        ("pass_through", Some("no_live_session"), "empty"),
        ("pass_through", Some("unbound_credential"), "none"),
        (
            "pass_through",
            Some("configured_pass_through"),
            "pass_through",
        ),
        ("pass_through", Some("worker_unavailable"), "draining"),
    ] {
        let (_, other) = judge_route(&route(mode, reason, state));
        let check = judge_reachable(&remote(), other.as_ref(), Some("10.0.0.2"), false, false);
        assert_eq!(check.status, Status::Skip, "{reason:?} {state}");
    }
}
