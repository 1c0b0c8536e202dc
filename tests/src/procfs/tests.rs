use super::*;

#[test]
fn the_tcp_table_is_read_in_host_byte_order() {
    let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0\n   1: 0100007F:9C40 0100007F:1F90 01 00000000:0000002A 00:00000000 00000000     0        0 4243 1 0000000000000000 20 4 30 10 -1\nnot a line\n";
    let sockets = parse_tcp_table(text);
    assert_eq!(sockets.len(), 2);
    assert_eq!(sockets[0].local, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(sockets[0].state, 0x0A);
    assert_eq!(sockets[0].inode, 4242);
    assert_eq!(sockets[1].remote, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(sockets[1].local.port(), 0x9C40);
    assert_eq!(sockets[1].state, TCP_ESTABLISHED);
    assert_eq!(sockets[1].rx_queue, 42);
}

#[tokio::test]
async fn this_process_owns_its_own_connection() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    let client = tokio::net::TcpStream::connect(server).await.unwrap();
    let (_accepted, _) = listener.accept().await.unwrap();
    let local = client.local_addr().unwrap();
    assert!(owns_connection(std::process::id(), local, server));
    assert!(!owns_connection(std::process::id(), server, server));
    assert!(parent_pid(std::process::id()).is_some());
    let me = std::process::id();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let name = executable(me).unwrap();
    let name = name.file_name().unwrap().to_str().unwrap().to_owned();
    assert!(processes(&name, "PATH", &path).contains(&me));
}
