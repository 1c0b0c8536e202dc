//! §3.1: the status endpoints, their shapes, who may read them, and `/metrics`.

use std::net::{Ipv4Addr, SocketAddr};

use relay_proxy::front::Mode;
use relay_testkit::StandIn;
use serde_json::json;
use tokio::net::TcpStream;

use crate::support::{Answer, RawResponse, Setup, Tripwire, non_loopback_ip, raw_exchange};

#[tokio::test]
async fn healthz_has_its_exact_shape_and_follows_degraded_state() {
    let tripwire = Tripwire::new().await;
    for (mode, deployment) in [
        (Mode::Managed, "managed"),
        (Mode::RequireWorker, "managed"),
        (Mode::PassThrough, "pass_through"),
    ] {
        let mut setup = Setup::new(&tripwire.base_url());
        setup.mode = mode;
        let relay = setup.start().await;
        let answer = relay.get("/healthz", &[]).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("cache-control"), Some("no-store"));
        assert_eq!(answer.header("content-type"), Some("application/json"));
        assert_eq!(
            answer.json(),
            json!({
                "service": "relayd",
                "version": env!("CARGO_PKG_VERSION"),
                "instance_id": relay.instance_id.to_string(),
                "deployment_mode": deployment,
                "status": "ok",
            })
        );
        assert_eq!(relay.instance_id.get_version_num(), 7);
        relay.front.set_degraded(true);
        assert_eq!(
            relay.get("/healthz", &[]).await.json()["status"],
            "degraded"
        );
        relay.front.set_degraded(false);
        assert_eq!(relay.get("/healthz", &[]).await.json()["status"], "ok");
    }
    assert!(!tripwire.was_touched().await);
}

#[tokio::test]
async fn worker_lists_are_empty_and_final_in_shape() {
    let tripwire = Tripwire::new().await;
    let relay = Setup::new(&tripwire.base_url()).start().await;
    let id = relay.instance_id.to_string();
    for path in ["/_relay/v1/workers", "/_relay/v1/workers/status"] {
        let answer = relay.get(path, &[]).await;
        assert_eq!(answer.status, 200, "{path}");
        assert_eq!(answer.header("cache-control"), Some("no-store"));
        assert_eq!(
            answer.json(),
            json!({"instance_id": id, "status": "ok", "workers": []}),
            "{path}"
        );
    }
    for path in [
        format!("/_relay/v1/workers/{}/status", uuid::Uuid::now_v7()),
        "/_relay/v1/workers/not-a-uuid/status".to_owned(),
    ] {
        let answer = relay.get(&path, &[]).await;
        answer.assert_error(404, "relay_not_found");
        assert_eq!(answer.json()["error"]["message"], "worker not found");
    }
    // HEAD / is answered here, empty, before any credential rule.
    let answer = relay
        .send(
            relay
                .request(http::Method::HEAD, "/")
                .header("x-relay-client-token", "malformed")
                .body(Default::default())
                .unwrap(),
        )
        .await;
    assert_eq!(answer.status, 200);
    assert!(answer.body.is_empty());
    // Like every local answer, it is never to be cached: a cached probe would say the
    // daemon is there when it is not.
    assert_eq!(answer.header("cache-control"), Some("no-store"));
    assert!(!tripwire.was_touched().await);
}

#[tokio::test]
async fn metrics_are_prometheus_text_and_count_requests() {
    let stand_in = StandIn::start().await.unwrap();
    let relay = Setup::new(&stand_in.base_url()).start().await;
    for _ in 0..3 {
        assert_eq!(
            relay.post("/v1/chat/completions", &[], "{}").await.status,
            200
        );
    }
    assert_eq!(relay.post("/v1/messages", &[], "{}").await.status, 200);
    relay
        .post("/v1/messages", &[("origin", "https://evil.example")], "{}")
        .await;
    relay.post("/hooks/codex", &[], "{}").await;
    let answer = relay.get("/metrics", &[]).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("cache-control"), Some("no-store"));
    let assert_classic = |answer: &Answer| {
        assert!(
            answer
                .header("content-type")
                .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")),
            "{:?}",
            answer.header("content-type")
        );
    };
    assert_classic(&answer);
    let text = String::from_utf8(answer.body.to_vec()).unwrap();
    for line in [
        r#"relay_requests_total{route="openai",destination="pass_through",status="200"} 3"#,
        r#"relay_requests_total{route="anthropic",destination="pass_through",status="200"} 1"#,
        r#"relay_requests_total{route="anthropic",destination="local",status="403"} 1"#,
        r#"relay_requests_total{route="hook",destination="pass_through",status="200"} 1"#,
        "relay_open_streams 0",
        "relay_control_sessions 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    // Classic text: a counter's family is named as its samples are, so it keeps its type.
    for family in [
        "# TYPE relay_requests_total counter",
        "# TYPE relay_overhead_seconds histogram",
        "# TYPE relay_open_streams gauge",
        "# TYPE relay_control_sessions gauge",
    ] {
        assert!(
            text.lines().any(|l| l == family),
            "missing {family:?} in\n{text}"
        );
    }
    assert!(
        !text.contains("# EOF") && !text.contains("# UNIT"),
        "{text}"
    );

    // Prometheus asks for OpenMetrics first, and is told that is what it gets.
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let answer = relay.get("/metrics", &[("accept", prometheus)]).await;
    assert_eq!(
        answer.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    let text = String::from_utf8(answer.body.to_vec()).unwrap();
    assert!(
        text.lines().any(|l| l == "# TYPE relay_requests counter"),
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
    // Two `Accept` lines are one list: the second line's OpenMetrics outweighs the first's
    // classic text.
    let answer = relay
        .get(
            "/metrics",
            &[
                ("accept", "text/plain;version=0.0.4;q=0.5"),
                ("accept", "application/openmetrics-text;version=1.0.0"),
            ],
        )
        .await;
    assert_eq!(
        answer.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    // A client that weighs the classic text higher, or both alike, gets the classic text.
    for accept in [
        "application/openmetrics-text;q=0, text/plain",
        "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5",
        "*/*",
        "application/openmetrics-text;q=0.5, text/*;q=0.5",
        // A weight that is no number from 0 to 1 counts as 0.
        "application/openmetrics-text;q=NaN, text/plain;q=0.1",
        "application/openmetrics-text;q=inf, text/plain;q=0.1",
    ] {
        assert_classic(&relay.get("/metrics", &[("accept", accept)]).await);
    }
}

async fn get_from(addr: SocketAddr, host: &str, path: &str) -> RawResponse {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    raw_exchange(
        &mut stream,
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
    )
    .await
}

/// On a non-loopback bind, `/metrics` and the worker endpoints answer loopback peers only
/// (others get 404, as if they did not exist) unless `status_public`; `/healthz` answers
/// everyone.
#[tokio::test]
async fn status_endpoints_answer_remote_peers_only_when_public() {
    let Some(ip) = non_loopback_ip() else {
        // No non-loopback address here; front/tests.rs covers the rule directly.
        return;
    };
    let tripwire = Tripwire::new().await;
    for public in [false, true] {
        let mut setup = Setup::new(&tripwire.base_url());
        setup.bind = Ipv4Addr::UNSPECIFIED;
        setup.listen = Ipv4Addr::UNSPECIFIED;
        setup.advertised_host = Some("relay.test".into());
        setup.config.daemon.status_public = public;
        let relay = setup.start().await;
        let port = relay.addr.port();
        let remote = SocketAddr::from((ip, port));
        let local = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let advertised = format!("relay.test:{port}");
        for path in [
            "/metrics",
            "/_relay/v1/workers",
            "/_relay/v1/workers/status",
        ] {
            let res = get_from(remote, &advertised, path).await;
            if public {
                assert_eq!(res.status, 200, "{path}");
            } else {
                res.assert_error(404, "relay_not_found");
            }
            let res = get_from(local, &advertised, path).await;
            assert_eq!(res.status, 200, "{path} from loopback");
            let res = get_from(local, &format!("127.0.0.1:{port}"), path).await;
            assert_eq!(res.status, 200, "{path} from loopback by loopback name");
        }
        let res = get_from(remote, &advertised, "/healthz").await;
        assert_eq!(res.status, 200);
        assert_eq!(res.header("cache-control"), Some("no-store"));
    }
}
