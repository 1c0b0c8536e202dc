use super::*;

#[test]
fn loopback_is_judged_on_the_canonical_address() {
    for local in [
        "127.0.0.1:1",
        "127.8.9.10:1",
        "[::1]:1",
        "[::ffff:127.0.0.1]:1",
    ] {
        assert!(is_loopback(&local.parse().unwrap()), "{local}");
    }
    for other in [
        "10.0.0.1:1",
        "192.168.1.2:1",
        "[fe80::1]:1",
        "[::ffff:10.0.0.1]:1",
    ] {
        assert!(!is_loopback(&other.parse().unwrap()), "{other}");
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use super::*;

    /// A connected pair over loopback whose two ends use `congestion`, or `None` when this
    /// kernel does not offer it to this process.
    async fn pair(congestion: &[u8]) -> Option<(TcpStream, TcpStream)> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        for end in [&client, &server] {
            if let Err(error) = socket2::SockRef::from(end).set_tcp_congestion(congestion) {
                relay_logging::say!(
                    "{} is not available here ({error})",
                    String::from_utf8_lossy(congestion)
                );
                return None;
            }
        }
        Some((client, server))
    }

    fn congestion(tcp: &TcpStream) -> Vec<u8> {
        let mut name = socket2::SockRef::from(tcp).tcp_congestion().unwrap();
        name.retain(|&b| b != 0);
        name
    }

    #[tokio::test]
    async fn a_pacing_loopback_connection_is_switched_to_reno_on_both_ends() {
        // bbr ships with every distribution kernel this runs on; without it there is
        // nothing to switch.
        let Some((client, server)) = pair(b"bbr").await else {
            return;
        };
        prepare(&client);
        prepare(&server);
        assert_eq!(congestion(&client), b"reno");
        assert_eq!(congestion(&server), b"reno");
        assert!(client.nodelay().unwrap() && server.nodelay().unwrap());
    }

    #[tokio::test]
    async fn any_other_congestion_control_is_left_as_chosen() {
        // cubic is Linux's default and built in everywhere, but a process without
        // CAP_NET_ADMIN may pick it only where the system allows it.
        let Some((client, _server)) = pair(b"cubic").await else {
            return;
        };
        prepare(&client);
        assert_eq!(congestion(&client), b"cubic");
        assert!(client.nodelay().unwrap());
    }
}

#[test]
fn a_limit_that_holds_every_connection_and_its_provider_connection_leaves_max_connections() {
    assert_eq!(
        Descriptors::share(524_288, 10_000),
        Descriptors {
            accepted: 10_000,
            outbound: 524_288 - 256 - 10_000,
        }
    );
}

#[test]
fn a_limit_too_small_for_both_is_shared_in_halves() {
    // 20,000 (this machine's hard limit) cannot hold 10,000 connections and 10,000 more
    // toward providers besides the reserve.
    assert_eq!(
        Descriptors::share(20_000, 10_000),
        Descriptors {
            accepted: 9_872,
            outbound: 9_872,
        }
    );
    assert_eq!(
        Descriptors::share(1_024, 10_000),
        Descriptors {
            accepted: 384,
            outbound: 384,
        }
    );
}

#[test]
fn a_limit_near_the_reserve_keeps_a_quarter_and_shares_the_rest() {
    // macOS's usual soft limit, where the hard one is unlimited and cannot be set as is.
    assert_eq!(
        Descriptors::share(256, 10_000),
        Descriptors {
            accepted: 96,
            outbound: 96,
        }
    );
    assert_eq!(
        Descriptors::share(3, 10_000),
        Descriptors {
            accepted: 1,
            outbound: 2,
        }
    );
}

#[test]
fn a_budget_gives_a_share_back_when_it_is_dropped() {
    let budget = Budget::new(2);
    let first = budget.take().unwrap();
    let _second = budget.take().unwrap();
    assert!(budget.take().is_err());
    drop(first);
    assert!(budget.take().is_ok());
}
