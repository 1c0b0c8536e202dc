use expect_test::expect;
use uuid::Uuid;

use super::*;

fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap()
}

#[test]
fn health_shape() {
    let health = Health {
        service: "relayd".into(),
        version: "0.1.0".into(),
        instance_id: Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0001),
        deployment_mode: DeploymentMode::PassThrough,
        status: HealthStatus::Ok,
    };
    expect![[r#"{"service":"relayd","version":"0.1.0","instance_id":"01900000-0000-7000-8000-000000000001","deployment_mode":"pass_through","status":"ok"}"#]]
        .assert_eq(&json(&health));
}

#[test]
fn worker_status_shapes() {
    let worker = WorkerStatus {
        worker_id: Uuid::from_u128(7),
        state: WorkerState::Recovering,
        control_available: false,
        reference_count: 2,
        in_flight: 1,
    };
    let list = WorkerStatusList {
        instance_id: Uuid::from_u128(1),
        status: HealthStatus::Ok,
        workers: vec![worker],
    };
    expect![[r#"{"instance_id":"00000000-0000-0000-0000-000000000001","status":"ok","workers":[{"worker_id":"00000000-0000-0000-0000-000000000007","state":"recovering","control_available":false,"reference_count":2,"in_flight":1}]}"#]]
        .assert_eq(&json(&list));
    let ids = WorkerList {
        instance_id: Uuid::from_u128(1),
        status: HealthStatus::Ok,
        workers: vec![Uuid::from_u128(7)],
    };
    expect![[r#"{"instance_id":"00000000-0000-0000-0000-000000000001","status":"ok","workers":["00000000-0000-0000-0000-000000000007"]}"#]]
        .assert_eq(&json(&ids));
}

#[test]
fn route_status_shapes() {
    let unbound = RouteStatus {
        route_mode: RouteMode::PassThrough,
        reason: Some(PassThroughReason::UnboundCredential),
        worker_id: None,
        state: RouteState::None,
        control_available: None,
        machine_identity_conflict: false,
    };
    expect![[r#"{"route_mode":"pass_through","reason":"unbound_credential","worker_id":null,"state":"none","control_available":null}"#]]
        .assert_eq(&json(&unbound));
    let ready = RouteStatus {
        route_mode: RouteMode::Worker,
        reason: None,
        worker_id: Some(Uuid::from_u128(7)),
        state: RouteState::Ready,
        control_available: Some(true),
        machine_identity_conflict: false,
    };
    expect![[r#"{"route_mode":"worker","reason":null,"worker_id":"00000000-0000-0000-0000-000000000007","state":"ready","control_available":true}"#]]
        .assert_eq(&json(&ready));
    // Written only when it is so; an answer without it reads as no conflict.
    let shared = RouteStatus {
        machine_identity_conflict: true,
        ..ready.clone()
    };
    expect![[r#"{"route_mode":"worker","reason":null,"worker_id":"00000000-0000-0000-0000-000000000007","state":"ready","control_available":true,"machine_identity_conflict":true}"#]]
        .assert_eq(&json(&shared));
    let read: RouteStatus = serde_json::from_str(&json(&ready)).unwrap();
    assert_eq!(read, ready);
}

#[test]
fn error_body_shape() {
    expect![[r#"{"error":{"type":"relay_worker_unavailable","message":"no worker is ready for this route"}}"#]]
        .assert_eq(&json(&ErrorBody::new(
            ErrorKind::RelayWorkerUnavailable,
            "no worker is ready for this route",
        )));
    let mut policy = ErrorBody::new(ErrorKind::RelayPolicyRejected, "blocked by policy");
    policy.error.reason = Some("rm -rf is not allowed".into());
    expect![[r#"{"error":{"type":"relay_policy_rejected","message":"blocked by policy","reason":"rm -rf is not allowed"}}"#]]
        .assert_eq(&json(&policy));
}

#[test]
fn pass_through_reasons_serialise_as_their_codes() {
    for reason in [
        PassThroughReason::MissingCredential,
        PassThroughReason::UnboundCredential,
        PassThroughReason::NoLiveSession,
        PassThroughReason::WorkerUnavailable,
        PassThroughReason::ConfiguredPassThrough,
        PassThroughReason::WorkerConnectFailed,
    ] {
        assert_eq!(json(&reason), format!("\"{}\"", reason.as_str()));
    }
}
