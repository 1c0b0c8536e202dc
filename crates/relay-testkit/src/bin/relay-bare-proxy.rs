//! `relay-bare-proxy`: the cheapest HTTP/1.1 reverse proxy hyper makes, as a yardstick for `cargo xtask bench`.
//!
//! It does what relayd's pass-through costs at the least: hyper's server reads each request, hyper's client sends it on one upstream connection kept per client connection, and the answer comes back as it arrives.
//! It checks nothing, rewrites nothing but the request target (origin form) and records nothing, so what relayd costs above it is Relay's own work, and what it costs above nginx is hyper's and tokio's.
//! It allocates with jemalloc and runs one current-thread runtime, as relayd does on loopback.
//!
//! Prints `listening 127.0.0.1:<port>` once bound and serves until SIGTERM, SIGINT or the end of its standard input.
// A developer's tool, not a daemon or a hook: a panic on an unwritable stderr is fine here.
#![allow(clippy::disallowed_macros)]

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The cheapest hyper reverse proxy, in front of one upstream.
#[derive(Debug, Parser)]
#[command(name = "relay-bare-proxy", version)]
struct Args {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// The upstream's address (`127.0.0.1:PORT`), spoken to in plain HTTP/1.1.
    #[arg(long)]
    upstream: SocketAddr,
    /// On more than one CPU, a current-thread runtime per CPU, each on a thread of its own
    /// with a listener of its own on the same port (`SO_REUSEPORT`, the kernel spreading the
    /// connections), instead of one: nginx's model with several workers, to compare with.
    #[arg(long)]
    reuseport: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // The runtime relayd builds on loopback: one current-thread runtime, however many CPUs.
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    if args.reuseport && cpus > 1 {
        return serve_per_cpu(cpus, &args);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, args.port)))
            .await
            .context("binding the listener")?;
        announce(listener.local_addr()?)?;
        tokio::select! {
            result = relay_testkit::shutdown_signal(true) => result,
            result = serve(listener, args.upstream) => result,
        }
    })
}

/// `threads` current-thread runtimes, each on its own thread with its own listener on one
/// port; the first binds (a free port for 0) and the others join it.
fn serve_per_cpu(threads: usize, args: &Args) -> anyhow::Result<()> {
    let bind = |port: u16| -> anyhow::Result<std::net::TcpListener> {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)).into())?;
        socket.listen(1024)?;
        Ok(socket.into())
    };
    let first = bind(args.port).context("binding the listener")?;
    let addr = first.local_addr()?;
    let mut listeners = vec![first];
    for _ in 1..threads {
        listeners.push(bind(addr.port()).context("binding another listener")?);
    }
    announce(addr)?;
    let upstream = args.upstream;
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting a runtime")
    };
    for listener in listeners {
        let runtime = runtime()?;
        std::thread::spawn(move || {
            let served = runtime
                .block_on(async move { serve(TcpListener::from_std(listener)?, upstream).await });
            if let Err(error) = served {
                eprintln!("relay-bare-proxy: {error:#}");
                std::process::exit(1);
            }
        });
    }
    runtime()?.block_on(relay_testkit::shutdown_signal(true))
}

/// The line the bench waits for: the proxy is bound and accepting.
fn announce(addr: SocketAddr) -> std::io::Result<()> {
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening {addr}")?;
    stdout.flush()
}

async fn serve(listener: TcpListener, upstream: SocketAddr) -> anyhow::Result<()> {
    loop {
        let (client, _) = listener.accept().await.context("accepting")?;
        client.set_nodelay(true)?;
        tokio::spawn(async move {
            // One upstream connection per client connection, opened by its first request:
            // the pool at its cheapest. HTTP/1.1 serves one request of a connection at a
            // time, so the lock is never contended.
            let kept: Arc<Mutex<Option<SendRequest<Incoming>>>> = Arc::default();
            let service = hyper::service::service_fn(move |req| {
                let kept = kept.clone();
                async move { forward(&mut *kept.lock().await, upstream, req).await }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(client), service)
                .await;
        });
    }
}

/// Sends `req` on the kept upstream connection, opening it first if there is none.
async fn forward(
    kept: &mut Option<SendRequest<Incoming>>,
    upstream: SocketAddr,
    mut req: Request<Incoming>,
) -> anyhow::Result<Response<Incoming>> {
    let sender = match kept {
        Some(sender) => sender,
        None => {
            let stream = TcpStream::connect(upstream).await?;
            stream.set_nodelay(true)?;
            let (sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(conn);
            kept.insert(sender)
        }
    };
    sender.ready().await?;
    *req.uri_mut() = req
        .uri()
        .path_and_query()
        .cloned()
        .map_or_else(|| Uri::from_static("/"), Uri::from);
    Ok(sender.send_request(req).await?)
}
