//! The hook-body budget's share per remote address: the attack of one address that keeps
//! starting slow bodies, tried against the budget itself.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use http::HeaderMap;

use super::{HookBuffer, NoRoom};

const MIB: u64 = 1024 * 1024;
const LIMIT: u64 = MIB;
const ATTACKER: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));
const OTHER: IpAddr = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// A head without `Content-Length`: the body reserves the whole per-body limit.
fn undeclared() -> HeaderMap {
    HeaderMap::new()
}

#[tokio::test(start_paused = true)]
async fn one_remote_address_holds_at_most_a_quarter_of_the_budget() {
    let buffer = HookBuffer::new(16 * MIB);
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(
            buffer
                .reserve(&undeclared(), LIMIT, ATTACKER)
                .await
                .unwrap(),
        );
    }
    // The fifth is refused at once, with room left in the budget.
    let refused = buffer.reserve(&undeclared(), LIMIT, ATTACKER).await;
    assert_eq!(refused.err(), Some(NoRoom::PeerShare));
    assert_eq!(refused_status(&buffer, ATTACKER).await, 429);
    // Another address and a local caller still get room.
    let _other = buffer.reserve(&undeclared(), LIMIT, OTHER).await.unwrap();
    let _local = buffer.reserve(&undeclared(), LIMIT, LOCAL).await.unwrap();
    // A body that ends gives its address the room back.
    held.pop();
    let _again = buffer
        .reserve(&undeclared(), LIMIT, ATTACKER)
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_small_budget_still_lets_an_address_send_one_body_at_the_limit() {
    let buffer = HookBuffer::new(2 * MIB);
    let _one = buffer
        .reserve(&undeclared(), LIMIT, ATTACKER)
        .await
        .unwrap();
    let refused = buffer.reserve(&undeclared(), LIMIT, ATTACKER).await;
    assert_eq!(refused.err(), Some(NoRoom::PeerShare));
}

#[tokio::test(start_paused = true)]
async fn local_callers_share_the_whole_budget() {
    let buffer = HookBuffer::new(4 * MIB);
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(buffer.reserve(&undeclared(), LIMIT, LOCAL).await.unwrap());
    }
    // The budget is full: a remote body waits, then is refused for the budget (429), and
    // its address holds nothing afterwards.
    let refused = buffer.reserve(&undeclared(), LIMIT, ATTACKER).await;
    assert_eq!(refused.err(), Some(NoRoom::Budget));
    assert!(buffer.held.is_empty());
    assert_eq!(refused_status(&buffer, LOCAL).await, 429);
}

async fn refused_status(buffer: &HookBuffer, peer: IpAddr) -> u16 {
    match buffer.reserve(&undeclared(), LIMIT, peer).await {
        Ok(_) => panic!("{peer} got room"),
        Err(no_room) => no_room.answer().status().as_u16(),
    }
}
