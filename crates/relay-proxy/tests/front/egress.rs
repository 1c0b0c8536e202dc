//! §3.2: `[upstream] proxy_url` sends provider traffic through a CONNECT proxy, except to
//! hosts listed in `NO_PROXY`.

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use relay_testkit::StandIn;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::support::{Setup, WAIT};

/// A minimal CONNECT proxy: records each target and pipes bytes both ways.
struct ConnectProxy {
    addr: std::net::SocketAddr,
    targets: Arc<Mutex<Vec<String>>>,
    _tasks: JoinSet<()>,
}

impl ConnectProxy {
    async fn start() -> ConnectProxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let targets = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = JoinSet::new();
        let recorded = targets.clone();
        tasks.spawn(async move {
            let mut tunnels = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                tunnels.spawn(tunnel(client, recorded.clone()));
            }
        });
        ConnectProxy {
            addr,
            targets,
            _tasks: tasks,
        }
    }

    fn targets(&self) -> Vec<String> {
        relay_logging::sync::lock(&self.targets, "test")
            .unwrap()
            .clone()
    }
}

async fn tunnel(mut client: TcpStream, targets: Arc<Mutex<Vec<String>>>) {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        if client.read_exact(&mut byte).await.is_err() {
            return;
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut words = text.split_whitespace();
    let (Some("CONNECT"), Some(target)) = (words.next(), words.next()) else {
        let _ = client
            .write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            .await;
        return;
    };
    relay_logging::sync::lock(&targets, "test")
        .unwrap()
        .push(target.to_owned());
    let Ok(mut upstream) = TcpStream::connect(target).await else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
        return;
    };
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

#[tokio::test]
async fn provider_traffic_goes_through_the_egress_proxy() {
    let stand_in = StandIn::start().await.unwrap();
    let proxy = ConnectProxy::start().await;
    let mut setup = Setup::new(&stand_in.base_url());
    setup.config.upstream.proxy_url = format!("http://{}", proxy.addr);
    let relay = setup.start().await;
    for path in ["/v1/messages", "/v1/chat/completions"] {
        let answer = relay
            .post(path, &[("x-api-key", "caller")], r#"{"stream":true}"#)
            .await;
        assert_eq!(answer.status, 200);
        assert!(answer.body.starts_with(b"event: ") || answer.body.starts_with(b"data: "));
    }
    let recorded = stand_in.wait_for_requests(2, WAIT).await.unwrap();
    assert!(recorded.iter().all(|r| r.body_complete));
    let targets = proxy.targets();
    assert!(!targets.is_empty());
    assert!(
        targets.iter().all(|t| *t == stand_in.addr().to_string()),
        "{targets:?}"
    );
    // The proxy saw only a tunnel: the request itself was inside it.
    assert!(
        recorded
            .iter()
            .all(|r| r.path_and_query.starts_with("/v1/"))
    );
}

#[tokio::test]
async fn no_proxy_hosts_are_reached_directly() {
    let stand_in = StandIn::start().await.unwrap();
    let proxy = ConnectProxy::start().await;
    for no_proxy in ["127.0.0.1", "localhost,127.0.0.1", "127.0.0.0/8"] {
        stand_in.clear_requests();
        let mut setup = Setup::new(&stand_in.base_url());
        setup.config.upstream.proxy_url = format!("http://{}", proxy.addr);
        setup.no_proxy = Some(no_proxy.to_owned());
        let relay = setup.start().await;
        let answer = relay.post("/v1/chat/completions", &[], "{}").await;
        assert_eq!(answer.status, 200, "{no_proxy}");
        stand_in.wait_for_requests(1, WAIT).await.unwrap();
        assert!(
            proxy.targets().is_empty(),
            "NO_PROXY={no_proxy}: {:?}",
            proxy.targets()
        );
    }
}

#[tokio::test]
async fn a_proxy_that_refuses_the_tunnel_is_502() {
    let proxy = ConnectProxy::start().await;
    // The tunnel target does not listen, so the proxy answers 502 to CONNECT.
    let closed = {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        listener.local_addr().unwrap()
    };
    let mut setup = Setup::new(&format!("http://{closed}"));
    setup.config.upstream.proxy_url = format!("http://{}", proxy.addr);
    let relay = setup.start().await;
    let answer = relay.post("/v1/chat/completions", &[], "{}").await;
    answer.assert_error(502, "relay_upstream_unreachable");
    assert_eq!(proxy.targets(), [closed.to_string()]);
}
