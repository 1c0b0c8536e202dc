//! §9: relayd terminates TLS itself; HTTP/1.1 and HTTP/2 by ALPN.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Version};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use relay_testkit::{ANTHROPIC_MESSAGES_SSE, StandIn};

use crate::support::{Answer, Relay, Setup, WAIT};

struct Certificate {
    _dir: tempfile::TempDir,
    server: rustls::ServerConfig,
    roots: rustls::RootCertStore,
}

fn certificate() -> Certificate {
    let generated =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cert_path = dir.path().join("cert.pem");
    let key_path = dir.path().join("key.pem");
    std::fs::write(&cert_path, generated.cert.pem()).unwrap();
    std::fs::write(&key_path, generated.signing_key.serialize_pem()).unwrap();
    let server =
        relay_proxy::tls::ServedCertificate::from_files(&cert_path, &key_path, "localhost")
            .unwrap()
            .server_config()
            .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(generated.cert.der().clone()).unwrap();
    Certificate {
        _dir: dir,
        server,
        roots,
    }
}

fn client_config(roots: &rustls::RootCertStore) -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(relay_proxy::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots.clone())
        .with_no_client_auth()
}

/// relayd serving HTTPS as `localhost` in front of `stand_in`, and the roots that trust it.
async fn https_relay(stand_in: &StandIn) -> (Relay, rustls::RootCertStore) {
    let certificate = certificate();
    let mut setup = Setup::new(&stand_in.base_url());
    setup.tls = Some(Arc::new(certificate.server));
    setup.advertised_host = Some("localhost".into());
    (setup.start().await, certificate.roots)
}

#[tokio::test]
async fn https_serves_http1_and_http2_by_alpn() {
    let stand_in = StandIn::start().await.unwrap();
    let (relay, roots) = https_relay(&stand_in).await;
    let port = relay.addr.port();
    for (h2, version) in [(false, Version::HTTP_11), (true, Version::HTTP_2)] {
        let builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(client_config(&roots))
            .https_only();
        let connector = if h2 {
            builder.enable_http2().build()
        } else {
            builder.enable_http1().build()
        };
        let client = Client::builder(TokioExecutor::new())
            .http2_only(h2)
            .build::<_, Full<Bytes>>(connector);
        for host in ["localhost", "127.0.0.1"] {
            let req = http::Request::builder()
                .method(Method::GET)
                .uri(format!("https://{host}:{port}/healthz"))
                .body(Full::default())
                .unwrap();
            let answer = Answer::read(client.request(req).await.unwrap()).await;
            assert_eq!(answer.status, 200, "{host}");
            assert_eq!(answer.version, version);
        }
        stand_in.clear_requests();
        let req = http::Request::builder()
            .method(Method::POST)
            .uri(format!("https://localhost:{port}/v1/messages?beta=true"))
            .header("content-type", "application/json")
            .header("x-api-key", "caller")
            .body(Full::new(Bytes::from_static(br#"{"stream":true}"#)))
            .unwrap();
        let answer = Answer::read(client.request(req).await.unwrap()).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.version, version);
        assert_eq!(answer.body, ANTHROPIC_MESSAGES_SSE);
        let recorded = stand_in.wait_for_requests(1, WAIT).await.unwrap();
        assert_eq!(recorded[0].body, r#"{"stream":true}"#);
        assert_eq!(recorded[0].path_and_query, "/v1/messages?beta=true");
    }
    // Plain HTTP on the TLS port is not served: it is told, in plain HTTP, that the address
    // serves HTTPS, and nothing reaches the provider.
    stand_in.clear_requests();
    let plain = crate::support::http1_client()
        .request(crate::support::stream_request(&relay, "/v1/messages"))
        .await
        .unwrap();
    let answer = Answer::read(plain).await;
    assert_eq!(answer.status, 400);
    let body = String::from_utf8_lossy(&answer.body);
    assert!(body.contains(r#""type":"relay_bad_request""#), "{body}");
    assert!(body.contains("https://"), "{body}");
    assert!(stand_in.requests().is_empty());
}

/// A client that negotiates HTTP/2 by ALPN and then speaks HTTP/1 is not served: the framing
/// watcher follows only HTTP/1 connections, so such a request would skip its checks (here a
/// body framed by both `Content-Length` and `Transfer-Encoding`).
#[tokio::test]
async fn http1_on_a_connection_that_negotiated_h2_is_not_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stand_in = StandIn::start().await.unwrap();
    let (relay, roots) = https_relay(&stand_in).await;
    let mut config = client_config(&roots);
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(relay.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let port = relay.addr.port();
    let request = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: localhost:{port}\r\nContent-Type: application/json\r\n\
         x-api-key: caller\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n"
    );
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(WAIT, tls.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the connection stayed open");
    assert!(
        !answer.starts_with(b"HTTP/1"),
        "answered as HTTP/1: {}",
        String::from_utf8_lossy(&answer)
    );
    assert_eq!(stand_in.request_count(), 0, "the request was forwarded");
}

/// A renewed certificate, read again from its files, is what new connections get; a
/// connection opened before goes on with the one it began with.
#[tokio::test]
async fn a_renewed_certificate_is_served_to_new_connections_and_open_ones_go_on() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stand_in = StandIn::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let mut roots = rustls::RootCertStore::empty();
    let mut generate = || {
        let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(&cert_path, generated.cert.pem()).unwrap();
        std::fs::write(&key_path, generated.signing_key.serialize_pem()).unwrap();
        roots.add(generated.cert.der().clone()).unwrap();
        generated.cert.der().clone()
    };
    let first = generate();
    let served =
        relay_proxy::tls::ServedCertificate::from_files(&cert_path, &key_path, "localhost")
            .unwrap();
    let mut setup = Setup::new(&stand_in.base_url());
    setup.tls = Some(Arc::new(served.server_config().unwrap()));
    setup.advertised_host = Some("localhost".into());
    let relay = setup.start().await;
    let renewed = generate();
    let config = Arc::new(client_config(&roots));
    let connect = || async {
        let tcp = tokio::net::TcpStream::connect(relay.addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        tokio_rustls::TlsConnector::from(config.clone())
            .connect(name, tcp)
            .await
            .unwrap()
    };
    let presented = |tls: &tokio_rustls::client::TlsStream<tokio::net::TcpStream>| {
        tls.get_ref().1.peer_certificates().unwrap()[0].clone()
    };
    let mut open = connect().await;
    assert_eq!(presented(&open), first);
    // The files changed, but nothing has looked at them yet.
    assert_eq!(presented(&connect().await), first);

    assert!(matches!(
        served.reload_if_changed(std::time::SystemTime::now()),
        relay_proxy::tls::Reload::Served { .. }
    ));
    assert_eq!(presented(&connect().await), renewed);
    let port = relay.addr.port();
    let request =
        format!("GET /healthz HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n");
    open.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, open.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}
