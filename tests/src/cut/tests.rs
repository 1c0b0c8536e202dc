use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use super::*;

const WAIT: Duration = Duration::from_secs(5);

#[test]
fn the_path_is_the_request_target_without_its_query() {
    assert_eq!(
        request_path(b"GET /_relay/control/v1/worker HTTP/1.1"),
        "/_relay/control/v1/worker"
    );
    assert_eq!(
        request_path(b"POST /v1/messages?beta=true HTTP/1.1"),
        "/v1/messages"
    );
    assert_eq!(request_path(b"garbage"), "");
}

/// An echo server that answers each connection's bytes back.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buffer = vec![0_u8; 1024];
                loop {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if stream.write_all(&buffer[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

async fn read_exactly(stream: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut out = vec![0_u8; n];
    tokio::time::timeout(WAIT, stream.read_exact(&mut out))
        .await
        .unwrap()
        .unwrap();
    out
}

#[tokio::test]
async fn a_cut_closes_its_path_holds_new_connections_and_leaves_other_paths_alone() {
    let server = echo_server().await;
    let cut = ControlCut::bind().await.unwrap().forward_to(server);
    let worker_line = b"GET /w HTTP/1.1\r\n";
    let other_line = b"GET /m HTTP/1.1\r\n";

    let mut worker = TcpStream::connect(cut.addr()).await.unwrap();
    worker.write_all(worker_line).await.unwrap();
    assert_eq!(
        read_exactly(&mut worker, worker_line.len()).await,
        worker_line
    );
    let mut other = TcpStream::connect(cut.addr()).await.unwrap();
    other.write_all(other_line).await.unwrap();
    assert_eq!(read_exactly(&mut other, other_line.len()).await, other_line);

    cut.cut("/w");
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(WAIT, worker.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the cut path's connection stayed open");
    other.write_all(b"still").await.unwrap();
    assert_eq!(read_exactly(&mut other, 5).await, b"still");

    let mut held = TcpStream::connect(cut.addr()).await.unwrap();
    held.write_all(worker_line).await.unwrap();
    held.write_all(b"more").await.unwrap();
    assert!(cut.wait_for_held("/w", 1, WAIT).await);
    let mut probe = [0_u8; 1];
    let nothing = tokio::time::timeout(Duration::from_millis(100), held.read(&mut probe)).await;
    assert!(nothing.is_err(), "a held connection got an answer");

    cut.restore("/w");
    let mut expected = worker_line.to_vec();
    expected.extend_from_slice(b"more");
    assert_eq!(read_exactly(&mut held, expected.len()).await, expected);
    let counts = cut.counts("/w");
    assert_eq!(
        counts,
        PathCounts {
            forwarded: 2,
            held: 1,
            severed: 1
        }
    );
    assert_eq!(cut.counts("/m").severed, 0);
}
