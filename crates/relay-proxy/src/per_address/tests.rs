use std::net::{IpAddr, Ipv4Addr};

use super::PerAddress;

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));

#[test]
fn an_address_holds_up_to_its_cap_and_gets_each_hold_back_on_drop() {
    let counts = PerAddress::new("test");
    let first = counts.hold(A, 3, 5).unwrap();
    let second = counts.hold(A, 2, 5).unwrap();
    assert!(counts.hold(A, 1, 5).is_none(), "past the cap");
    assert!(
        counts.hold(B, 5, 5).is_some(),
        "another address has its own"
    );
    drop(first);
    let third = counts.hold(A, 3, 5).unwrap();
    drop((second, third));
    assert!(counts.is_empty(), "an address holding nothing has no entry");
    // A refused hold leaves nothing behind either.
    assert!(counts.hold(A, 6, 5).is_none());
    assert!(counts.is_empty());
}
