use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;

/// A daemon that answers every connection with `body` (its length declared or chunked).
async fn answering(body: Vec<u8>, chunked: bool) -> DaemonAddress {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut head = [0u8; 1024];
                let _ = stream.read(&mut head).await;
                let answer = if chunked {
                    let mut text =
                        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
                    text.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
                    text.extend_from_slice(&body);
                    text.extend_from_slice(b"\r\n0\r\n\r\n");
                    text
                } else {
                    let mut text =
                        format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len())
                            .into_bytes();
                    text.extend_from_slice(&body);
                    text
                };
                let _ = stream.write_all(&answer).await;
            });
        }
    });
    DaemonAddress::parse(&format!("http://127.0.0.1:{port}")).unwrap()
}

/// An answer of exactly the bound is read whole; one byte more is refused, whether its
/// length is declared or not.
#[tokio::test]
async fn an_answer_past_the_bound_is_refused() {
    let limit = Duration::from_secs(5);
    for chunked in [false, true] {
        let fits = answering(vec![b'x'; MAX_ANSWER_BYTES], chunked).await;
        let answer = get(&fits, None, "/healthz", None, limit, "test")
            .await
            .unwrap();
        assert_eq!(answer.body.len(), MAX_ANSWER_BYTES, "chunked {chunked}");
        let over = answering(vec![b'x'; MAX_ANSWER_BYTES + 1], chunked).await;
        let refused = get(&over, None, "/healthz", None, limit, "test").await;
        assert!(
            matches!(refused, Err(GetError::TooLarge { .. })),
            "chunked {chunked}: {refused:?}"
        );
    }
}
