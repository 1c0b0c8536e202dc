//! relayd serving HTTPS beside nginx serving HTTPS: the throughput blocks of the pass-through phase again, with the load generator reaching both over TLS, as a relayd for remote clients is reached.
//!
//! Both proxies terminate TLS (1.3, HTTP/1.1, a certificate made for the run) and forward in plain HTTP to the fast stand-in, each on relayd's CPUs; the load generator checks both certificates against that one.

use anyhow::{Context as _, Result};
use relay_testkit::measures::MeasureId;

use super::nginx::{self, Nginx, Site};
use super::pinning::Pinning;
use super::procs::{Relayd, RelaydMode, Scratch, StandIn, TlsFiles, Upstreams};
use super::{Beside, Options, PhaseRows, throughput_beside};

/// The rows the phase takes from the loadgen's throughput scenario, and the rows they become.
const ROWS: [(MeasureId, MeasureId); 2] = [
    (
        MeasureId::ThroughputRate,
        MeasureId::ServingHttpsThroughputRate,
    ),
    (
        MeasureId::CpuPassThrough,
        MeasureId::ServingHttpsCpuPassThrough,
    ),
];

/// Runs the phase; without nginx there is no peer to set beside relayd, so the phase says why and measures nothing.
pub(super) fn run(
    bin_dir: &std::path::Path,
    pinning: &Pinning,
    fast: &StandIn,
    scratch: &Scratch,
    options: &Options,
) -> Result<PhaseRows> {
    let binary = nginx::find_or_install()?;
    let tls = TlsFiles::make(&scratch.path("tls-served"), &["127.0.0.1"])
        .context("the certificate relayd and nginx serve")?;
    let relayd = Relayd::start(
        bin_dir,
        pinning.relayd.as_deref(),
        RelaydMode::PassThroughServingHttps(&tls),
        Upstreams::plain(fast.addr, fast.addr),
        scratch,
        &[],
    )?;
    let site = Site::PeerServingHttps {
        upstream: fast.addr,
        tls: &tls,
    };
    let peer = Nginx::peer(&binary, pinning, site, scratch)?;
    let workers = pinning.server_cpu_count();
    println!(
        "==> relayd https://{} (pass-through, pid {}), nginx https://{} (its peer, pid {}), both in front of the fast stand-in {}",
        relayd.addr,
        relayd.process.pid(),
        peer.addr,
        peer.pid(),
        fast.addr,
    );
    let beside = Beside {
        extra: &["--tls-ca".into(), tls.cert.clone().into()],
        what: "relayd and nginx serving HTTPS, about half a minute",
        rows: &ROWS,
        note: format!(
            "serving HTTPS: relayd (--tls-cert, one event loop per CPU it may use) and nginx ({workers} worker process(es), `listen … ssl`) each terminate TLS 1.3 from the load generator (HTTP/1.1 keep-alive, a certificate made for the run and checked) and forward in plain HTTP to the fast stand-in; the load generator's own TLS work is its own, so only relayd's and nginx's CPU is divided by their requests"
        ),
    };
    throughput_beside(bin_dir, pinning, &relayd, &peer, options, beside)
}
