//! The client side of TLS for the benchmark: `relay-loadgen` and `cargo xtask bench` reach a relayd (and its nginx peer) that serve HTTPS with a certificate made for the run.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, Result, ensure};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use rustls::{ClientConfig, RootCertStore};

/// A client configuration that trusts only the certificates in the PEM file `trusted`, on rustls with the ring provider, offering TLS 1.3 alone (so a server measured beside relayd cannot fall back to TLS 1.2 unnoticed) and no ALPN (so servers speak HTTP/1.1, as most agents' HTTP clients do).
pub fn client_config(trusted: &Path) -> Result<Arc<ClientConfig>> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(trusted)
        .with_context(|| format!("reading {}", trusted.display()))?
    {
        let cert =
            cert.with_context(|| format!("reading a certificate of {}", trusted.display()))?;
        roots
            .add(cert)
            .with_context(|| format!("trusting a certificate of {}", trusted.display()))?;
    }
    ensure!(
        !roots.is_empty(),
        "{} holds no certificate",
        trusted.display()
    );
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .context("choosing TLS 1.3")?
            .with_root_certificates(roots)
            .with_no_client_auth();
    Ok(Arc::new(config))
}
