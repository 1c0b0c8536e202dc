//! relayd and nginx in front of an HTTPS provider: the throughput blocks of the pass-through phase again, with an nginx TLS front (a certificate made for the run, HTTP/2 offered by ALPN) before the fast stand-in.
//!
//! The providers agents use are HTTPS and choose HTTP/2 when relayd offers it, so this is the path their requests take; nginx, the peer, reaches an upstream over HTTP/1.1 only, with keep-alive and TLS session reuse.
//! The front runs on the stand-ins' CPUs; relayd and its peer on relayd's.

use anyhow::{Context as _, Result};
use relay_testkit::measures::MeasureId;
use serde_json::json;

use super::nginx::{self, Nginx, Site};
use super::pinning::Pinning;
use super::procs::{Relayd, RelaydMode, Scratch, StandIn, TlsFiles, Upstreams};
use super::{Beside, Options, PhaseRows, throughput_beside};

/// The rows the phase takes from the loadgen's throughput scenario, and the rows they become.
const ROWS: [(MeasureId, MeasureId); 2] = [
    (MeasureId::ThroughputRate, MeasureId::HttpsThroughputRate),
    (MeasureId::CpuPassThrough, MeasureId::HttpsCpuPassThrough),
];

/// Runs the phase; nginx is needed twice over (the provider and the peer), so without it the phase says why and measures nothing.
pub(super) fn run(
    bin_dir: &std::path::Path,
    pinning: &Pinning,
    fast: &StandIn,
    scratch: &Scratch,
    options: &Options,
) -> Result<PhaseRows> {
    let binary = nginx::find_or_install()?;
    // relayd checks the address it dials against the IP name; nginx checks `localhost` (it does not match an IP name).
    let tls = TlsFiles::make(&scratch.path("tls"), &["127.0.0.1", "localhost"])
        .context("the HTTPS provider's certificate")?;
    let cert = &tls.cert;
    let front = Nginx::start(
        &binary,
        pinning.stand_ins.as_deref(),
        nginx::Layout::Workers(1),
        Site::TlsFront {
            upstream: fast.addr,
            tls: &tls,
        },
        scratch,
        &[],
    )?;
    let relayd = Relayd::start(
        bin_dir,
        pinning.relayd.as_deref(),
        RelaydMode::PassThrough,
        Upstreams {
            openai: front.addr,
            anthropic: front.addr,
            trusted: Some(cert),
        },
        scratch,
        &[],
    )?;
    let workers = pinning.server_cpu_count();
    let site = Site::PeerOfTls {
        upstream: front.addr,
        trusted: cert,
    };
    let peer = Nginx::peer(&binary, pinning, site, scratch)?;
    println!(
        "==> nginx {} (the HTTPS provider, pid {}), relayd {} (pass-through to it, pid {}), nginx {} (its peer, pid {})",
        front.addr,
        front.pid(),
        relayd.addr,
        relayd.process.pid(),
        peer.addr,
        peer.pid(),
    );
    let (front_cpus, peer_cpus) = match pinning.stand_ins {
        Some(_) => ("on the stand-ins' CPUs", "on relayd's CPUs"),
        None => ("unpinned", "unpinned"),
    };
    let note = format!(
        "HTTPS provider: nginx with TLS (a certificate made for the run, trusted by relayd through SSL_CERT_FILE and by its peer), HTTP/2 offered by ALPN, 1 worker process {front_cpus}, in front of the fast stand-in; relayd offers HTTP/2 and HTTP/1.1 by ALPN and so speaks HTTP/2 to it, its peer nginx ({workers} worker process(es) {peer_cpus}) HTTP/1.1 with upstream keep-alive and TLS session reuse; the load generator measures no direct path, as it cannot reach the provider over TLS"
    );
    let beside = Beside {
        extra: &[],
        what: "relayd and nginx in front of an HTTPS provider, about half a minute",
        rows: &ROWS,
        note,
    };
    let mut phase = throughput_beside(bin_dir, pinning, &relayd, &peer, options, beside)?;
    phase.detail["front_pids"] = json!(front.pids);
    Ok(phase)
}
