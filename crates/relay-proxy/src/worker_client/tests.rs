use bytes::Bytes;
use http::StatusCode;
use http_body_util::BodyExt;
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};

use super::*;
use crate::upstream::tests::{Close, Seen, answer, answered_once_and_closed, counts};
use crate::worker::WorkerIdentity;

const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

/// A worker stand-in behind the pinned certificate of `target`, answering every request
/// head with `ok`, closing connections as `close` says.
async fn worker(close: Close) -> (WorkerTarget, mpsc::UnboundedReceiver<Seen>) {
    let identity = WorkerIdentity::generate("127.0.0.1").unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(identity.server_config());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let _ = tx.send(Seen::Connection);
            let (acceptor, tx, close) = (acceptor.clone(), tx.clone(), close.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    answer(tls, OK, close, tx).await;
                }
            });
        }
    });
    let target = WorkerTarget {
        worker_id: Id([7; 16]),
        endpoint,
        certificate_sha256: identity.certificate_sha256(),
        secret: [9; 32],
    };
    (target, rx)
}

/// A client with the pool of `target`'s generation open, as routing a request to it opens
/// it.
fn routed_to(target: &WorkerTarget) -> WorkerClient {
    let client = WorkerClient::new();
    client.admit(target.worker_id);
    client
}

fn get() -> Request<RequestBody> {
    let mut req = Request::new(RequestBody::empty());
    *req.uri_mut() = http::Uri::from_static("/v1/models");
    req
}

fn kept(client: &WorkerClient, worker_id: Id) -> Option<usize> {
    let pools = relay_logging::sync::lock(&client.pools, "test").unwrap();
    pools.get(&worker_id).map(|g| g.conns.len())
}

async fn read(res: Response<UpstreamBody>) -> (StatusCode, Bytes) {
    let status = res.status();
    (status, res.into_body().collect().await.unwrap().to_bytes())
}

#[tokio::test]
async fn requests_one_after_another_share_one_pinned_connection() {
    let (target, mut seen) = worker(Close::Never).await;
    let client = routed_to(&target);
    for _ in 0..3 {
        let res = client.send(&target, get()).await.unwrap();
        assert_eq!(read(res).await, (StatusCode::OK, "ok".into()));
    }
    let (connections, heads) = counts(&mut seen);
    assert_eq!((connections, heads.len()), (1, 3));
    assert!(heads.iter().all(|h| h.contains("x-relay-worker-secret: ")));
    assert_eq!(kept(&client, target.worker_id), Some(1));
}

#[tokio::test]
async fn a_connection_busy_when_its_generation_is_forgotten_is_not_kept() {
    let (target, mut seen) = worker(Close::Never).await;
    let client = routed_to(&target);
    let res = client.send(&target, get()).await.unwrap();
    client.forget(target.worker_id);
    assert_eq!(read(res).await.0, StatusCode::OK);
    assert_eq!(kept(&client, target.worker_id), None);
    answered_once_and_closed(&mut seen).await;
}

#[tokio::test]
async fn a_request_routed_before_its_generation_was_forgotten_keeps_nothing() {
    let (target, mut seen) = worker(Close::Never).await;
    let client = routed_to(&target);
    client.forget(target.worker_id);
    // Its connection is opened after the generation was forgotten.
    let res = client.send(&target, get()).await.unwrap();
    assert_eq!(read(res).await.0, StatusCode::OK);
    assert_eq!(kept(&client, target.worker_id), None);
    answered_once_and_closed(&mut seen).await;
}

#[tokio::test]
async fn a_kept_connection_the_worker_closed_gives_the_request_back_unwritten() {
    let told = Arc::new(Notify::new());
    let (target, mut seen) = worker(Close::WhenTold(told.clone())).await;
    let client = routed_to(&target);
    for _ in 0..3 {
        let res = client.send(&target, get()).await.unwrap();
        assert_eq!(read(res).await.0, StatusCode::OK);
        told.notify_one();
        answered_once_and_closed(&mut seen).await;
        // Kept, though its worker has closed it since: the next request finds out.
        assert_eq!(kept(&client, target.worker_id), Some(1));
    }
    assert_eq!(counts(&mut seen), (0, Vec::new()));
}

#[tokio::test]
async fn the_look_every_half_minute_drops_the_idle_connections_the_worker_closed() {
    let told = Arc::new(Notify::new());
    let (target, mut seen) = worker(Close::WhenTold(told.clone())).await;
    let client = routed_to(&target);
    let res = client.send(&target, get()).await.unwrap();
    assert_eq!(read(res).await.0, StatusCode::OK);
    told.notify_one();
    answered_once_and_closed(&mut seen).await;
    assert_eq!(kept(&client, target.worker_id), Some(1));
    // Half a minute later, the next request's look drops it before anything is sent on it.
    {
        let mut pools = relay_logging::sync::lock(&client.pools, "test").unwrap();
        pools.get_mut(&target.worker_id).unwrap().looked -= LOOK_EVERY;
    }
    assert!(client.take(target.worker_id).is_none());
    assert_eq!(kept(&client, target.worker_id), Some(0));
}

#[test]
fn each_request_carries_the_secret_its_route_gave_it() {
    let mut target = WorkerTarget {
        worker_id: Id([7; 16]),
        endpoint: "127.0.0.1:9".to_owned(),
        certificate_sha256: [0; 32],
        secret: [9; 32],
    };
    let client = routed_to(&target);
    let (first, none) = client.check_out(&target);
    assert_eq!(first, secret_header(&[9; 32]));
    assert!(first.is_sensitive());
    assert!(none.is_none());
    assert_eq!(client.check_out(&target).0, first);
    // A resumed generation keeps its id and gets a fresh secret: the header follows it.
    target.secret = [10; 32];
    assert_eq!(client.check_out(&target).0, secret_header(&[10; 32]));
    // A generation whose pool is gone still gets the secret it was routed with.
    client.forget(target.worker_id);
    assert_eq!(client.check_out(&target).0, secret_header(&[10; 32]));
}

/// Connections to workers take their room from the provider client's budget: past it, a
/// request opens no connection and comes back as no room, not as a worker that failed (which
/// would pass it through and tell the broker the worker is unreachable).
#[tokio::test]
async fn past_the_budget_a_request_opens_no_connection_and_blames_no_worker() {
    let (target, mut seen) = worker(Close::Never).await;
    let client = routed_to(&target);
    let budget = Budget::new(1);
    client.limit_to(budget.clone());
    // An answer not yet read holds its connection, and with it the only share.
    let held = client.send(&target, get()).await.unwrap();
    assert!(budget.take().is_err());
    assert!(matches!(
        client.send(&target, get()).await,
        Err(WorkerSendError::NoRoom)
    ));
    assert_eq!(counts(&mut seen).0, 1);
    // Read whole, its connection goes back to the pool, keeping its share, and serves the
    // next request.
    assert_eq!(read(held).await, (StatusCode::OK, "ok".into()));
    let res = client.send(&target, get()).await.unwrap();
    assert_eq!(read(res).await, (StatusCode::OK, "ok".into()));
    assert_eq!(counts(&mut seen).0, 0);
    // Forgotten, the generation's connections close and give the share back.
    client.forget(target.worker_id);
    assert!(budget.take().is_ok());
}
