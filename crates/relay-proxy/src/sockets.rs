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
//!
//! It also shares the open-file limit between the connections a process accepts and those
//! it opens to providers and workers ([`Descriptors`]), so that neither side can use the
//! descriptors the other needs: an HTTP/2 client holds up to 100 requests on one
//! connection, each of which may need a connection onward of its own.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::{Connected, Connection};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Sets the options of one connected socket. Failures leave the kernel's defaults: they
/// cost speed, never correctness.
pub fn prepare(tcp: &TcpStream) {
    let _ = tcp.set_nodelay(true);
    if tcp.peer_addr().is_ok_and(|peer| is_loopback(&peer)) {
        unpace(tcp);
    }
}

/// For a socket relayd accepted: at most [`UNSENT_TO_CLIENT`] bytes wait in the kernel
/// unsent before a write waits. A client that reads slowly then lets writes through each
/// time a little of what waits has gone, rather than when half of a queue of megabytes
/// has, so the stalled-write timer (`conn.rs`) sees a slow reader as one that reads; and a
/// client that reads nothing holds no more than that much of the kernel's memory unsent.
pub fn prepare_accepted(tcp: &TcpStream) {
    prepare(tcp);
    limit_unsent(tcp);
}

/// What a client connection may hold unsent in the kernel.
const UNSENT_TO_CLIENT: u32 = 128 * 1024;

#[cfg(any(target_os = "linux", target_os = "android"))]
fn limit_unsent(tcp: &TcpStream) {
    let _ = socket2::SockRef::from(tcp).set_tcp_notsent_lowat(UNSENT_TO_CLIENT);
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn limit_unsent(_tcp: &TcpStream) {}

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

/// Descriptors kept for everything that is not a connection (listeners, the runtime's own,
/// the admin socket, state and log files, pipes to child processes): this many, or a
/// quarter of a smaller limit.
const RESERVED_DESCRIPTORS: u64 = 256;

/// How a process's open-file limit is shared between its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptors {
    /// Accepted connections open at once, at most: the configured `max_connections`, or
    /// half of what the limit leaves when that is less.
    pub accepted: usize,
    /// Connections to providers, to the egress proxy and (in the daemon) to workers open at
    /// once, at most: the rest.
    pub outbound: usize,
}

impl Descriptors {
    /// The shares of `open_file_limit` for a server that accepts up to `max_connections`.
    /// Each accepted connection may need one onward, so when the limit cannot hold
    /// both in full, each side gets half; neither gets less than one.
    pub fn share(open_file_limit: u64, max_connections: usize) -> Descriptors {
        let reserved = RESERVED_DESCRIPTORS.min(open_file_limit / 4);
        let usable = usize::try_from(open_file_limit - reserved)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        let accepted = max_connections.min(usable / 2).max(1);
        Descriptors {
            accepted,
            outbound: usable.saturating_sub(accepted).max(1),
        }
    }
}

/// Room for the connections a client may have open at once; each holds a share until its
/// socket is closed.
#[derive(Debug, Clone)]
pub struct Budget(Arc<Semaphore>);

impl Budget {
    pub fn new(connections: usize) -> Budget {
        Budget(Arc::new(Semaphore::new(
            connections.min(Semaphore::MAX_PERMITS),
        )))
    }

    /// A share for one more connection, or the error that says there is none.
    pub fn take(&self) -> Result<Share, NoRoom> {
        match self.0.clone().try_acquire_owned() {
            Ok(permit) => Ok(Share { _permit: permit }),
            Err(_) => Err(NoRoom),
        }
    }
}

/// One connection's room in a [`Budget`], given back when dropped.
#[derive(Debug)]
pub struct Share {
    _permit: OwnedSemaphorePermit,
}

/// No room in a [`Budget`]: as many connections are open as the open-file limit allows.
#[derive(Debug, thiserror::Error)]
#[error("too many connections are open at once")]
pub struct NoRoom;

/// A connected socket that holds its [`Share`], when it has one, for as long as it is open.
#[derive(Debug)]
pub struct Budgeted {
    tcp: TcpStream,
    _share: Option<Share>,
}

impl Budgeted {
    pub fn new(tcp: TcpStream, share: Option<Share>) -> Budgeted {
        Budgeted { tcp, _share: share }
    }
}

impl AsyncRead for Budgeted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Budgeted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

impl Connection for Budgeted {
    fn connected(&self) -> Connected {
        self.tcp.connected()
    }
}

#[cfg(test)]
mod tests;
