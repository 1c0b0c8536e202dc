//! `relay-stand-in`: the model-provider stand-in as a process, for benchmarks and end-to-end runs with real agent CLIs.
//!
//! Prints `listening 127.0.0.1:<port>` once bound and serves until SIGTERM, SIGINT or the end of its standard input.
//! It records nothing and logs nothing per request.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use relay_testkit::{Behaviour, StandIn, StandInConfig};

/// A model-provider stand-in speaking the Anthropic Messages, OpenAI Responses and OpenAI Chat Completions wire formats.
#[derive(Debug, Parser)]
#[command(name = "relay-stand-in", version)]
struct Args {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Write response bodies in frames of this many bytes.
    #[arg(long)]
    chunk_size: Option<usize>,
    /// Milliseconds between SSE events (or chunks).
    #[arg(long)]
    pace_ms: Option<u64>,
    /// Content deltas per text stream.
    #[arg(long)]
    stream_events: Option<usize>,
    /// Answer first turns with a shell tool call and tool results with text.
    #[arg(long)]
    tool_round_trip: bool,
    /// Keep serving when standard input ends (stop with a signal only).
    #[arg(long)]
    ignore_stdin: bool,
    /// Runtime worker threads; 1 runs everything on the main thread.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()
    }
    .context("building the tokio runtime")?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let config = StandInConfig {
        listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), args.port),
        behaviour: Behaviour {
            tool_round_trip: args.tool_round_trip,
            chunk_size: args.chunk_size,
            pace: args.pace_ms.map(Duration::from_millis),
            stream_events: args.stream_events,
            ..Behaviour::default()
        },
        record_requests: false,
    };
    let stand_in = StandIn::start_with(config)
        .await
        .context("starting the stand-in")?;
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "listening {}", stand_in.addr()).context("writing to stdout")?;
        stdout.flush().context("flushing stdout")?;
    }
    relay_testkit::shutdown_signal(!args.ignore_stdin).await?;
    stand_in.shutdown().await;
    Ok(())
}
