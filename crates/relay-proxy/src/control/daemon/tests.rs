use std::net::{IpAddr, Ipv4Addr};

use super::*;

fn ip(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

#[test]
fn a_loopback_session_may_only_name_127_0_0_1() {
    let peer = ip(127, 0, 0, 1);
    assert!(endpoint_allowed("127.0.0.1:40001", peer, &[], &[]));
    for endpoint in [
        "127.0.0.2:40001",
        "10.0.0.5:40001",
        "0.0.0.0:40001",
        "127.0.0.1:0",
        "localhost:40001",
        "[::1]:40001",
        "garbage",
    ] {
        assert!(!endpoint_allowed(endpoint, peer, &[], &[]), "{endpoint}");
    }
}

#[test]
fn a_remote_worker_names_its_own_address_or_an_allowed_network() {
    let peer = ip(10, 0, 0, 7);
    let networks = ["10.1.0.0/16".parse().unwrap()];
    let own = [ip(10, 0, 0, 1)];
    assert!(endpoint_allowed("10.0.0.7:47700", peer, &networks, &own));
    assert!(endpoint_allowed("10.1.2.3:47700", peer, &networks, &own));
    for endpoint in [
        "10.0.0.8:47700",
        "127.0.0.1:47700",
        "169.254.0.1:47700",
        "224.0.0.1:47700",
        "0.0.0.0:47700",
        "255.255.255.255:47700",
        "10.0.0.1:47700",
    ] {
        assert!(
            !endpoint_allowed(endpoint, peer, &networks, &own),
            "{endpoint}"
        );
    }
    // The daemon's own address stays refused even inside an allowed network.
    let networks = ["10.0.0.0/8".parse().unwrap()];
    assert!(!endpoint_allowed("10.0.0.1:47700", peer, &networks, &own));
}
