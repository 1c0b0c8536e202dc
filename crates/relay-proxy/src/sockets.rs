//! Options of every TCP connection on the request path (accepted, and opened to a worker,
//! the daemon, a provider or the egress proxy): `TCP_NODELAY` (SPEC §3.2), and no pacing
//! between two processes of one host.
//!
//! BBR paces what a socket sends, and with no pacing queue discipline under it (loopback has
//! none) the kernel does that with a timer per burst. Between two local processes there is
//! no link to pace for, so the timers only cost: a 2 MiB body from relayd to its worker and
//! on to a local provider spent more CPU in them than in Relay. A connection whose peer is a
//! loopback address and whose congestion control is BBR is switched to Reno, which every
//! process may choose and which does not pace. Connections to other hosts keep the system's
//! choice.

use std::net::SocketAddr;

use tokio::net::TcpStream;

/// Sets the options of one connected socket. Failures leave the kernel's defaults: they
/// cost speed, never correctness.
pub fn prepare(tcp: &TcpStream) {
    let _ = tcp.set_nodelay(true);
    if tcp.peer_addr().is_ok_and(|peer| is_loopback(&peer)) {
        unpace(tcp);
    }
}

fn is_loopback(peer: &SocketAddr) -> bool {
    peer.ip().to_canonical().is_loopback()
}

/// Switches a BBR socket to Reno, which every process may choose and which does not pace.
#[cfg(target_os = "linux")]
fn unpace(tcp: &TcpStream) {
    let socket = socket2::SockRef::from(tcp);
    if socket
        .tcp_congestion()
        .is_ok_and(|name| name.starts_with(b"bbr"))
    {
        let _ = socket.set_tcp_congestion(b"reno");
    }
}

/// Elsewhere Relay leaves the congestion control as the system chose it.
#[cfg(not(target_os = "linux"))]
fn unpace(_tcp: &TcpStream) {}

#[cfg(test)]
mod tests;
