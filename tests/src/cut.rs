//! A TCP forwarder between the clients and relayd that can cut the control sessions of one
//! path and restore them later, as a network fault between a worker and its daemon would.
//!
//! It reads the request line of every connection to learn its path (`/_relay/control/v1/mcp`,
//! `/_relay/control/v1/worker`, or anything else) and otherwise copies bytes both ways
//! unchanged. [`ControlCut::cut`] closes every connection of that path at once and holds the
//! new ones (accepted, nothing forwarded, as if their packets were lost) until
//! [`ControlCut::restore`]; then the held connections whose client still waits are forwarded.
//! Other paths are never touched, so an MCP keeps its session while its worker's is cut.
//!
//! Point `relay-mcp` at [`ControlCut::origin`] (its worker dials the same address) and start
//! relayd with `--advertise-address` set to it, so the `Hello`'s target origin is one relayd
//! serves.

use std::collections::{BTreeSet, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::error::Error;

/// The most a request line may take before the forwarder gives up finding its path and
/// forwards the connection as "other".
const MAX_REQUEST_LINE: usize = 8 * 1024;
/// How often [`ControlCut::wait_for_held`] looks at the counters again.
const COUNT_POLL: Duration = Duration::from_millis(20);

/// What happened to the connections of one path so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathCounts {
    /// Connections forwarded to the server (at once, or after a restore).
    pub forwarded: usize,
    /// Connections that arrived while the path was cut and were held.
    pub held: usize,
    /// Forwarded connections closed by a cut.
    pub severed: usize,
}

/// The state the connection tasks share with the test.
#[derive(Debug)]
struct Shared {
    /// The paths cut right now; every task watches it.
    cut: watch::Sender<BTreeSet<String>>,
    counts: Mutex<HashMap<String, PathCounts>>,
}

impl Shared {
    fn count(&self, path: &str, update: impl FnOnce(&mut PathCounts)) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        update(counts.entry(path.to_owned()).or_default());
    }
}

/// A cut forwarder that listens but does not forward yet, so its origin can be given to
/// relayd as `--advertise-address` before relayd starts.
#[derive(Debug)]
pub struct ControlCutListener {
    listener: TcpListener,
    addr: SocketAddr,
}

impl ControlCutListener {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>` of the forwarder.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Starts forwarding every connection to `target`, nothing cut.
    pub fn forward_to(self, target: SocketAddr) -> ControlCut {
        let shared = Arc::new(Shared {
            cut: watch::Sender::new(BTreeSet::new()),
            counts: Mutex::new(HashMap::new()),
        });
        let accept_task = tokio::spawn(accept_loop(self.listener, target, shared.clone()));
        ControlCut {
            addr: self.addr,
            shared,
            accept_task,
        }
    }
}

/// The running forwarder. Dropping it closes every connection it carries or holds.
#[derive(Debug)]
pub struct ControlCut {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept_task: JoinHandle<()>,
}

impl ControlCut {
    /// Listens on `127.0.0.1:0`; connections wait in the backlog until
    /// [`ControlCutListener::forward_to`].
    pub async fn bind() -> Result<ControlCutListener, Error> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|source| Error::Bind { source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| Error::Bind { source })?;
        Ok(ControlCutListener { listener, addr })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>` of the forwarder.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Closes every connection of `path` now and holds the new ones until
    /// [`ControlCut::restore`].
    pub fn cut(&self, path: &str) {
        self.shared.cut.send_modify(|cut| {
            cut.insert(path.to_owned());
        });
    }

    /// Forwards `path` again, starting with the connections held meanwhile.
    pub fn restore(&self, path: &str) {
        self.shared.cut.send_modify(|cut| {
            cut.remove(path);
        });
    }

    /// What happened to the connections of `path` so far.
    pub fn counts(&self, path: &str) -> PathCounts {
        self.shared
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(path)
            .copied()
            .unwrap_or_default()
    }

    /// Waits until at least `n` connections of `path` were held (a client tried to get
    /// through the cut); false if the deadline passes first.
    pub async fn wait_for_held(&self, path: &str, n: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut poll = tokio::time::interval(COUNT_POLL);
        loop {
            poll.tick().await;
            if self.counts(path).held >= n {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
        }
    }
}

impl Drop for ControlCut {
    fn drop(&mut self) {
        // The accept task owns the connection tasks (its JoinSet aborts them when dropped).
        self.accept_task.abort();
    }
}

async fn accept_loop(listener: TcpListener, target: SocketAddr, shared: Arc<Shared>) {
    let mut tasks = JoinSet::new();
    loop {
        // An accept error on loopback means the test process is out of descriptors: stop
        // rather than spin; the client's connection failure then shows in the test.
        let Ok((client, _)) = listener.accept().await else {
            return;
        };
        while tasks.try_join_next().is_some() {}
        tasks.spawn(carry(client, target, shared.clone()));
    }
}

/// One connection: learn its path, wait while that path is cut, forward until it is cut.
async fn carry(mut client: TcpStream, target: SocketAddr, shared: Arc<Shared>) {
    let _ = client.set_nodelay(true);
    let Some((head, path)) = read_request_line(&mut client).await else {
        return;
    };
    let mut cut = shared.cut.subscribe();
    let mut head = head;
    if cut.borrow_and_update().contains(&path) {
        shared.count(&path, |c| c.held += 1);
        // Held: keep reading what the client sends (so a client that gives up is noticed
        // and its connection dropped) until the path is restored.
        let mut buffer = vec![0_u8; 4096];
        loop {
            tokio::select! {
                restored = cut.wait_for(|cut| !cut.contains(&path)) => {
                    if restored.is_err() {
                        return;
                    }
                    break;
                }
                read = client.read(&mut buffer) => match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buffer[..n]),
                },
            }
        }
    }
    let Ok(mut server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    if server.write_all(&head).await.is_err() {
        return;
    }
    shared.count(&path, |c| c.forwarded += 1);
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        severed = cut.wait_for(|cut| cut.contains(&path)) => {
            if severed.is_ok() {
                shared.count(&path, |c| c.severed += 1);
            }
        }
    }
    // Dropping both streams closes them: the client and the server each see the peer go.
}

/// Reads until the end of the request line and returns the bytes read with the line's
/// path (without a query); `None` if the client closed first. A connection that sends no
/// line within [`MAX_REQUEST_LINE`] bytes gets the path `""`.
async fn read_request_line(client: &mut TcpStream) -> Option<(Vec<u8>, String)> {
    let mut head = Vec::new();
    let mut buffer = vec![0_u8; 4096];
    loop {
        if let Some(end) = head.windows(2).position(|w| w == b"\r\n") {
            let path = request_path(&head[..end]);
            return Some((head, path));
        }
        if head.len() > MAX_REQUEST_LINE {
            return Some((head, String::new()));
        }
        match client.read(&mut buffer).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&buffer[..n]),
        }
    }
}

/// `GET /_relay/control/v1/worker?x HTTP/1.1` → `/_relay/control/v1/worker`.
pub(crate) fn request_path(line: &[u8]) -> String {
    let line = String::from_utf8_lossy(line);
    let target = line.split(' ').nth(1).unwrap_or_default();
    target.split('?').next().unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests;
