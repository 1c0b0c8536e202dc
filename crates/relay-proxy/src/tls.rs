//! TLS configurations, all on rustls with the ring provider (SPEC §11).
//!
//! - toward providers: the platform's root certificates;
//! - the daemon's own listener: `--tls-cert` / `--tls-key` PEM files, read again when they
//!   change ([`ServedCertificate`]);
//! - clients toward a remote daemon: platform roots plus `RELAY_EXTRA_CA_FILE`
//!   (verification cannot be turned off, §9);
//! - the daemon toward a worker: the worker's registered certificate digest, pinned
//!   (§5.5). No CA and no name check, but the handshake signature is still verified, so
//!   a replayed certificate without its key cannot pass.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ring::digest;
pub use rustls::ServerConfig;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

mod served;
pub use served::{Kept, Reload, ServedCertificate};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read certificates from {path}: {source}")]
    Certificates {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{path} is larger than {MAX_PEM_BYTES} bytes, more than any certificate or key file")]
    TooLarge { path: PathBuf },
    #[error("{path} is not a regular file")]
    NotAFile { path: PathBuf },
    #[error("{path} holds no certificate")]
    NoCertificate { path: PathBuf },
    #[error(
        "the private key in {key} is not the key of the first certificate in {cert}, which must be the server's own"
    )]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("cannot read the private key from {path}: {source}")]
    PrivateKey {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("no usable root certificate was found on this system or in {extra:?}")]
    NoRoots { extra: Option<PathBuf> },
    #[error("the TLS configuration was refused: {0}")]
    Rustls(#[from] rustls::Error),
}

/// A failed TLS handshake toward a daemon in words that name the cause and the next step,
/// followed by rustls's own description (`error` is what tokio-rustls returned).
pub fn describe_handshake_error(error: &std::io::Error) -> String {
    use rustls::CertificateError as C;
    let cause = match error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(certificate)) => match certificate {
            C::UnknownIssuer | C::BadSignature => {
                "the daemon's certificate is not signed by a trusted CA (neither the platform's roots nor RELAY_EXTRA_CA_FILE)"
            }
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                "the daemon's certificate does not name the host of the daemon address (an IP address needs an IP subject-alternative name)"
            }
            C::Expired | C::ExpiredContext { .. } => "the daemon's certificate has expired",
            C::NotValidYet | C::NotValidYetContext { .. } => {
                "the daemon's certificate is not valid yet (check the clocks)"
            }
            // What webpki finds wrong with the certificate itself, most often a CA's own
            // certificate installed as the server's.
            C::Other(_) => {
                "the daemon's certificate is not one a server may use (a CA's own certificate, say, rather than one the CA issued for the daemon)"
            }
            _ => "the daemon's certificate was refused",
        },
        _ => return error.to_string(),
    };
    format!("{cause}: {error}")
}

/// Why a client's TLS handshake with one of Relay's listeners failed, for the line that
/// tells the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum HandshakeFailure {
    /// The client refused the certificate served (it sent an alert saying so).
    CertificateRefused,
    /// The client and the listener share no TLS version, cipher suite or ALPN protocol.
    NoCommonProtocol,
    /// The client sent something that is not TLS at all: most often plain HTTP sent to an
    /// HTTPS address.
    NotTls,
    /// The client broke the TLS protocol otherwise.
    Malformed,
    /// The handshake did not finish in time. (Kept last: it counts the causes.)
    TimedOut,
}

impl HandshakeFailure {
    /// How many causes there are (the last one's number, plus one).
    pub const COUNT: usize = HandshakeFailure::TimedOut as usize + 1;

    /// What the failed handshake `error` (as tokio-rustls returned it) says of the client;
    /// `None` when the client only went away, as a TCP health check or a port scan does,
    /// which is not worth a line.
    pub fn of(error: &std::io::Error) -> Option<HandshakeFailure> {
        use rustls::AlertDescription as A;
        let error = error.get_ref()?.downcast_ref::<rustls::Error>()?;
        Some(match error {
            // A client says `decrypt_error` when a signature on the certificate's chain does
            // not verify (rustls does, for a certificate whose named issuer it trusts but
            // that issuer did not sign it), and `access_denied` when its own check refused
            // it (relayd does, for a worker's certificate that is not the one registered).
            rustls::Error::AlertReceived(
                A::BadCertificate
                | A::DecryptError
                | A::AccessDenied
                | A::BadCertificateStatusResponse
                | A::UnsupportedCertificate
                | A::CertificateRevoked
                | A::CertificateExpired
                | A::CertificateUnknown
                | A::UnknownCA,
            ) => HandshakeFailure::CertificateRefused,
            rustls::Error::AlertReceived(
                A::ProtocolVersion
                | A::HandshakeFailure
                | A::InsufficientSecurity
                | A::NoApplicationProtocol,
            )
            | rustls::Error::PeerIncompatible(_)
            | rustls::Error::NoApplicationProtocol => HandshakeFailure::NoCommonProtocol,
            rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType) => {
                HandshakeFailure::NotTls
            }
            _ => HandshakeFailure::Malformed,
        })
    }

    /// The `reason` field of the line.
    pub fn reason(self) -> &'static str {
        match self {
            HandshakeFailure::CertificateRefused => "client_refused_certificate",
            HandshakeFailure::NoCommonProtocol => "no_common_protocol",
            HandshakeFailure::NotTls => "not_tls",
            HandshakeFailure::Malformed => "malformed",
            HandshakeFailure::TimedOut => "timed_out",
        }
    }

    /// The line's message: what happened and what to look at.
    pub fn message(self) -> &'static str {
        match self {
            HandshakeFailure::CertificateRefused => {
                "a client refused the TLS certificate served here: it does not trust its issuer, the certificate has expired or does not name the address the client dialled, or (at a worker) it is not the certificate the daemon has registered"
            }
            HandshakeFailure::NoCommonProtocol => {
                "a client's TLS handshake failed: it offers no TLS version, cipher suite or protocol this listener accepts (TLS 1.2 or 1.3 are required)"
            }
            HandshakeFailure::NotTls => {
                "a client sent something that is not TLS to this HTTPS listener: most often plain HTTP, from a client whose address begins with http:// instead of https://"
            }
            HandshakeFailure::Malformed => "a client's TLS handshake failed: it broke the protocol",
            HandshakeFailure::TimedOut => "a client's TLS handshake did not finish in time",
        }
    }
}

/// The one crypto provider of the project.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The platform's roots plus `extra_ca_file`'s certificates; an error when that leaves none.
pub fn root_store(extra_ca_file: Option<&Path>) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    // Unreadable system certificates are skipped; an empty result is an error below.
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    if let Some(path) = extra_ca_file {
        for cert in read_certificates(path)? {
            roots.add(cert)?;
        }
    }
    if roots.is_empty() {
        return Err(TlsError::NoRoots {
            extra: extra_ca_file.map(Path::to_owned),
        });
    }
    Ok(roots)
}

/// Client configuration toward model providers (no client certificate, platform roots).
pub fn provider_client_config() -> Result<ClientConfig, TlsError> {
    client_config(None)
}

/// Client configuration toward a daemon: platform roots plus an extra CA file.
pub fn client_config(extra_ca_file: Option<&Path>) -> Result<ClientConfig, TlsError> {
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(root_store(extra_ca_file)?)
        .with_no_client_auth())
}

/// Client configuration trusting `roots` alone: what another client with those roots would
/// accept (relay-doctor asks it for each agent).
pub fn client_config_trusting(roots: RootCertStore) -> Result<ClientConfig, TlsError> {
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The largest PEM file read: a system CA bundle is a few hundred KiB.
const MAX_PEM_BYTES: u64 = 4 << 20;

/// Reads a PEM file of at most [`MAX_PEM_BYTES`]: a path such as `/dev/zero` must not make a
/// hook read without end (and so outlive its agent's timeout) or fill the memory.
fn read_pem(path: &Path) -> Result<Vec<u8>, TlsError> {
    read_pem_from(std::fs::File::open(path), path)
}

/// [`read_pem`] of a file opened from `path`.
fn read_pem_from(file: std::io::Result<std::fs::File>, path: &Path) -> Result<Vec<u8>, TlsError> {
    let io = |source| TlsError::Certificates {
        path: path.to_owned(),
        source: rustls::pki_types::pem::Error::Io(source),
    };
    let bytes = file
        .and_then(|mut file| relay_identity::store::read_bounded(&mut file, MAX_PEM_BYTES))
        .map_err(io)?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(TlsError::TooLarge {
            path: path.to_owned(),
        });
    }
    Ok(bytes)
}

/// The certificates of the PEM file at `path`: at least one, and at most
/// [`MAX_PEM_BYTES`] read.
pub fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    certificates_in(&read_pem(path)?, path)
}

/// The certificates of `pem`, read from `path`: at least one.
fn certificates_in(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Certificates {
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// The private key of `pem`, read from `path`.
fn key_in(pem: &[u8], path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|source| TlsError::PrivateKey {
        path: path.to_owned(),
        source,
    })
}

/// Why clients will refuse the certificate in `cert` when a daemon serves it for `host`,
/// judged from the certificate alone at `now`: expired or not valid yet, a CA's own
/// certificate, not for servers, or not naming `host`. Whether its issuer is trusted is for
/// each client's roots to say, so an unknown issuer is no problem here. Empty when none of
/// these is seen.
pub fn served_certificate_problems(
    cert: &Path,
    host: &str,
    now: std::time::SystemTime,
) -> Result<Vec<String>, TlsError> {
    Ok(chain_problems(&read_certificates(cert)?, host, now))
}

/// [`served_certificate_problems`] of a chain already read.
fn chain_problems(
    chain: &[CertificateDer<'_>],
    host: &str,
    now: std::time::SystemTime,
) -> Vec<String> {
    let now = UnixTime::since_unix_epoch(
        now.duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default(),
    );
    let Some((leaf, intermediates)) = chain.split_first() else {
        return Vec::new();
    };
    let leaf = match webpki::EndEntityCert::try_from(leaf) {
        Ok(leaf) => leaf,
        Err(error) => return vec![format!("its first certificate cannot be read ({error})")],
    };
    let mut problems = Vec::new();
    // No trust anchor: the certificate's own properties are checked before its issuer is
    // looked for, and the missing issuer is the one error that is not a problem.
    match leaf.verify_for_usage(
        provider().signature_verification_algorithms.all,
        &[],
        intermediates,
        now,
        webpki::KeyUsage::server_auth(),
        None,
        None,
    ) {
        Ok(_) | Err(webpki::Error::UnknownIssuer) => {}
        Err(webpki::Error::CertExpired { .. }) => problems.push("it has expired".to_owned()),
        Err(webpki::Error::CertNotValidYet { .. }) => {
            problems.push("it is not valid yet".to_owned());
        }
        Err(webpki::Error::CaUsedAsEndEntity) => problems.push(
            "it is a certificate authority's own certificate, which clients never accept from a server"
                .to_owned(),
        ),
        Err(webpki::Error::RequiredEkuNotFoundContext(_)) => {
            problems.push("it is not for servers (its extended key usage lacks serverAuth)".to_owned());
        }
        Err(other) => problems.push(format!("clients will refuse it ({other})")),
    }
    let name_problem = match ServerName::try_from(host) {
        Ok(name) => leaf.verify_is_valid_for_subject_name(&name).err(),
        Err(_) => None,
    };
    if name_problem.is_some() {
        problems.push(format!(
            "it does not name {host}, the advertised host (an IP address needs an IP subject-alternative name)"
        ));
    }
    problems
}

/// Server configuration from DER values (the worker's generated certificate).
pub fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<ServerConfig, TlsError> {
    http_server_config(|builder| builder.with_single_cert(chain, key))
}

/// A server configuration with no client authentication, whose certificate `certify`
/// gives, speaking HTTP/2 and HTTP/1.1 by ALPN.
fn http_server_config(
    certify: impl FnOnce(
        rustls::ConfigBuilder<ServerConfig, rustls::server::WantsServerCert>,
    ) -> Result<ServerConfig, rustls::Error>,
) -> Result<ServerConfig, TlsError> {
    let mut config = certify(
        ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth(),
    )?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The SHA-256 of a DER certificate, as workers register it.
pub fn certificate_sha256(cert: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, cert).as_ref());
    out
}

/// Client configuration toward one worker generation: the presented end-entity
/// certificate must hash to `pinned_sha256`, and the handshake must be signed by its key.
pub fn pinned_client_config(pinned_sha256: [u8; 32]) -> Result<ClientConfig, TlsError> {
    // Both ends are Relay's, and every request body crosses this hop encrypted: AES-128-GCM
    // does the same work as the default AES-256-GCM in ten rounds instead of fourteen. The
    // worker follows the client's order.
    let mut provider = rustls::crypto::ring::default_provider();
    provider
        .cipher_suites
        .sort_by_key(|suite| suite.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    let provider = Arc::new(provider);
    let verifier = PinnedCertificate {
        pinned_sha256,
        algorithms: provider.signature_verification_algorithms,
    };
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Accepts exactly one certificate, by digest. Signatures over the handshake are checked
/// with the provider's algorithms, which is what proves the peer holds the private key.
#[derive(Debug)]
struct PinnedCertificate {
    pinned_sha256: [u8; 32],
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedCertificate {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let presented = certificate_sha256(end_entity.as_ref());
        // Both digests are public; the comparison needs no constant time.
        if presented == self.pinned_sha256 {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests;
