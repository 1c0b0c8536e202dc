use super::*;

#[test]
fn content_length_requests_on_one_connection_are_split() {
    let wire = b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n\
POST /v1/messages?beta=true HTTP/1.1\r\nHost: a\r\nX-Api-Key: k\r\nContent-Length: 7\r\n\r\n{\"a\":1}\
GET /x HTTP/1.1\r\n";
    let requests = parse_requests(wire);
    assert_eq!(requests.len(), 2, "the third head is not complete");
    assert_eq!(requests[0].method, "HEAD");
    assert!(requests[0].body.is_empty());
    assert!(requests[0].complete);
    assert_eq!(requests[1].target, "/v1/messages?beta=true");
    assert_eq!(requests[1].header_str("x-api-key"), Some("k"));
    assert_eq!(requests[1].headers[1].0, "X-Api-Key", "case is kept");
    assert_eq!(&requests[1].body[..], b"{\"a\":1}");
}

#[test]
fn chunked_bodies_are_dechunked() {
    let wire = b"POST /v1/responses HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
4;ext=1\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\nTrailer: x\r\n\r\n\
POST /v1/responses HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
    let requests = parse_requests(wire);
    assert_eq!(requests.len(), 2);
    assert_eq!(&requests[0].body[..], b"{\"a\":1}");
    assert!(requests[0].complete);
    assert_eq!(&requests[1].body[..], b"{}");
}

#[test]
fn a_body_cut_short_is_incomplete() {
    let requests = parse_requests(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n12345");
    assert_eq!(requests.len(), 1);
    assert!(!requests[0].complete);
    assert_eq!(&requests[0].body[..], b"12345");

    let requests = parse_requests(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n12");
    assert!(!requests[0].complete);
    assert_eq!(&requests[0].body[..], b"12");
}

#[tokio::test]
async fn the_tap_forwards_both_ways_and_records_what_the_client_sent() {
    let server = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let server_addr = server.local_addr().unwrap();
    let tap = Tap::start(server_addr).await.unwrap();
    let serving = tokio::spawn(async move {
        let (mut conn, _) = server.accept().await.unwrap();
        let mut received = Vec::new();
        let mut buffer = [0_u8; 1024];
        while !received.ends_with(b"{}") {
            let n = conn.read(&mut buffer).await.unwrap();
            assert_ne!(n, 0);
            received.extend_from_slice(&buffer[..n]);
        }
        conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .await
            .unwrap();
        received
    });
    let mut client = TcpStream::connect(tap.addr()).await.unwrap();
    let request = b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}";
    client.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0_u8; 1024];
    while !answer.ends_with(b"ok") {
        let n = client.read(&mut buffer).await.unwrap();
        assert_ne!(n, 0);
        answer.extend_from_slice(&buffer[..n]);
    }
    assert_eq!(serving.await.unwrap(), request);
    let requests = tap.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].target, "/p");
    assert_eq!(&requests[0].body[..], b"{}");
}
