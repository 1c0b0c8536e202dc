//! The worker's TLS identity for one generation (SPEC §5.5): a fresh ECDSA P-256 key and a
//! self-signed certificate, whose SHA-256 the worker registers and the daemon pins.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::tls::{self, TlsError};

/// Why no identity could be made.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("{host:?} is neither an IP address nor a DNS name")]
    InvalidHost { host: String },
    #[error("generating the worker certificate failed: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the worker TLS configuration was refused: {0}")]
    Tls(#[from] TlsError),
}

/// A certificate and key that live exactly as long as one worker generation. Never
/// written to disk; `Debug` shows only the certificate digest.
pub struct WorkerIdentity {
    certificate: CertificateDer<'static>,
    sha256: [u8; 32],
    server_config: Arc<rustls::ServerConfig>,
}

impl fmt::Debug for WorkerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerIdentity")
            .field("certificate_sha256", &hex::encode(self.sha256))
            .finish_non_exhaustive()
    }
}

impl WorkerIdentity {
    /// Generates a fresh P-256 key and a self-signed certificate naming `advertise_host`
    /// (`127.0.0.1` locally, or the advertised address of a remote worker) as its subject
    /// alternative name. The daemon pins the certificate by digest and checks no name, so
    /// the name is informative only. P-256 because RSA generation would eat the
    /// activation budget.
    pub fn generate(advertise_host: &str) -> Result<WorkerIdentity, IdentityError> {
        let host = advertise_host.trim();
        let san = match host.parse::<IpAddr>() {
            Ok(ip) => rcgen::SanType::IpAddress(ip),
            Err(_) => {
                let invalid = || IdentityError::InvalidHost {
                    host: advertise_host.to_owned(),
                };
                if !is_dns_name(host) {
                    return Err(invalid());
                }
                rcgen::SanType::DnsName(
                    rcgen::string::Ia5String::try_from(host).map_err(|_| invalid())?,
                )
            }
        };
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = rcgen::CertificateParams::default();
        params.subject_alt_names = vec![san];
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "relay-worker");
        let certificate = params.self_signed(&key)?.der().clone();
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = tls::server_config(vec![certificate.clone()], private)?;
        // The daemon's pinned client speaks HTTP/1.1 only; one protocol keeps the worker's
        // surface small.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let sha256 = tls::certificate_sha256(certificate.as_ref());
        Ok(WorkerIdentity {
            certificate,
            sha256,
            server_config: Arc::new(config),
        })
    }

    /// The rustls server configuration to serve with (ALPN `http/1.1`).
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        self.server_config.clone()
    }

    /// The SHA-256 of the DER certificate, as `RegisterWorker` and `ResumeWorker` carry it.
    pub fn certificate_sha256(&self) -> [u8; 32] {
        self.sha256
    }

    /// The DER certificate (public).
    pub fn certificate_der(&self) -> &CertificateDer<'static> {
        &self.certificate
    }
}

/// A host name made of dot-separated labels of letters, digits and hyphens.
fn is_dns_name(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

#[cfg(test)]
mod tests;
