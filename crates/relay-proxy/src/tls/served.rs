//! The certificate relayd serves over HTTPS, read from `--tls-cert` and `--tls-key`, and
//! read again when either file changes: a renewed certificate is served without a restart,
//! which would otherwise hold new connections back for as long as the drain lasts. New
//! handshakes get the new certificate; connections already open keep the one they began with.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use ring::digest;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::{
    ServerConfig, TlsError, certificates_in, chain_problems, http_server_config, key_in, provider,
    read_pem, read_pem_from,
};

/// The daemon's served certificate and key, and the files they come from.
pub struct ServedCertificate {
    cert: PathBuf,
    key: PathBuf,
    /// The host clients reach the daemon by, which the certificate must name.
    host: String,
    current: Mutex<Arc<CertifiedKey>>,
    /// Whether the files are looked at again: only regular files are. A pipe given at start
    /// (`--tls-cert <(…)`) has been read to its end.
    watched: bool,
    looked: Mutex<Looked>,
}

/// What the looks at the files found, so that each finding is reported once.
struct Looked {
    /// A digest of what the files held when the certificate served now was read from them:
    /// only a digest, so that the key's bytes are kept nowhere but in the served key itself.
    served: Vec<u8>,
    /// Why clients would refuse the certificate served now, as last reported: it may
    /// expire while it is served.
    served_problems: Vec<String>,
    /// Why what the files hold now is not served, as last reported.
    refused: Option<Refusal>,
}

#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// The files could not be taken, for this reason (the error's text).
    Unreadable(String),
    /// Clients would refuse what the files of this digest hold, for these reasons.
    RefusedByClients(Vec<u8>, Vec<String>),
}

/// What [`ServedCertificate::reload_if_changed`] found.
#[derive(Debug)]
pub enum Reload {
    /// Nothing to report: the files hold the certificate served now, or what the last look
    /// reported as not taken.
    Unchanged,
    /// The files hold the certificate served now, and clients would now refuse it for these
    /// reasons, which they did not at the last look: it has expired, and no renewal came.
    ServedRefused { problems: Vec<String> },
    /// The files' certificate is served from now on. `problems` says why clients may refuse
    /// it (empty when none is seen): it is served anyway when clients would refuse the one
    /// it replaces too, as at the daemon's start.
    Served { problems: Vec<String> },
    /// The files changed, but the certificate served until now stays; the next looks judge
    /// the files again, and report only a change.
    Kept(Kept),
}

/// Why changed files were not taken.
#[derive(Debug)]
pub enum Kept {
    /// They could not be read, or their key is not the certificate's: often a renewal
    /// caught between writing its two files, which the next look after it finishes takes.
    Unreadable(TlsError),
    /// Clients would refuse the new certificate (these reasons), where they accept the
    /// current one. Judged again at each look: a certificate not valid yet is served once
    /// it is, or once clients refuse the current one too.
    RefusedByClients(Vec<String>),
}

impl ServedCertificate {
    /// Reads the certificate chain in `cert` and the private key in `key`, which must be
    /// the certificate's, to be served to clients that reach the daemon as `host`.
    pub fn from_files(cert: &Path, key: &Path, host: &str) -> Result<Arc<Self>, TlsError> {
        let regular = |path: &Path| std::fs::metadata(path).is_ok_and(|m| m.is_file());
        let watched = regular(cert) && regular(key);
        let (cert_pem, key_pem) = (read_pem(cert)?, read_pem(key)?);
        let loaded = certified(&cert_pem, cert, &key_pem, key)?;
        let served_problems = chain_problems(&loaded.cert, host, SystemTime::now());
        Ok(Arc::new(ServedCertificate {
            cert: cert.to_owned(),
            key: key.to_owned(),
            host: host.to_owned(),
            current: Mutex::new(Arc::new(loaded)),
            watched,
            looked: Mutex::new(Looked {
                served: fingerprint(&cert_pem, &key_pem),
                served_problems,
                refused: None,
            }),
        }))
    }

    /// The listener's configuration: HTTP/2 and HTTP/1.1 by ALPN, serving whatever this
    /// holds at each handshake.
    pub fn server_config(self: &Arc<Self>) -> Result<ServerConfig, TlsError> {
        http_server_config(|builder| Ok(builder.with_cert_resolver(self.clone())))
    }

    pub fn cert_path(&self) -> &Path {
        &self.cert
    }

    pub fn key_path(&self) -> &Path {
        &self.key
    }

    /// The host the certificate must name.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The SHA-256 of the certificate served now, in lowercase hex, as
    /// `openssl x509 -noout -fingerprint -sha256` gives it (there in uppercase, with colons).
    pub fn sha256_hex(&self) -> String {
        self.chain()
            .first()
            .map(|leaf| hex::encode(super::certificate_sha256(leaf)))
            .unwrap_or_default()
    }

    /// The chain served now; its first certificate is the daemon's own.
    pub fn chain(&self) -> Vec<rustls::pki_types::CertificateDer<'static>> {
        self.current().map(|c| c.cert.clone()).unwrap_or_default()
    }

    /// Reads the files again and, when they hold another certificate than the one served,
    /// serves theirs from the next handshake on, unless they cannot be read (or are not
    /// regular files, which could block the read), their key is not their certificate's,
    /// or clients would refuse their certificate at `now` where they accept the current one.
    pub fn reload_if_changed(&self, now: SystemTime) -> Reload {
        if !self.watched {
            return Reload::Unchanged;
        }
        let Some(mut looked) = relay_logging::sync::lock(&self.looked, "served certificate") else {
            return Reload::Unchanged;
        };
        let (refusal, kept) = match self.judge(&mut looked, now) {
            Ok(reload) => {
                looked.refused = None;
                return reload;
            }
            Err(refused) => refused,
        };
        if looked.refused.as_ref() == Some(&refusal) {
            return Reload::Unchanged;
        }
        looked.refused = Some(refusal);
        Reload::Kept(kept)
    }

    /// What the files hold: unchanged or served, or why it is not taken.
    fn judge(&self, looked: &mut Looked, now: SystemTime) -> Result<Reload, (Refusal, Kept)> {
        let unreadable = |error: TlsError| {
            (
                Refusal::Unreadable(error.to_string()),
                Kept::Unreadable(error),
            )
        };
        let (cert, key) = read_both(&self.cert, &self.key).map_err(unreadable)?;
        let digest = fingerprint(&cert, &key);
        if digest == looked.served {
            let problems = self
                .current()
                .map(|current| chain_problems(&current.cert, &self.host, now))
                .unwrap_or_default();
            if problems == looked.served_problems {
                return Ok(Reload::Unchanged);
            }
            looked.served_problems.clone_from(&problems);
            return Ok(if problems.is_empty() {
                Reload::Unchanged
            } else {
                Reload::ServedRefused { problems }
            });
        }
        let loaded = certified(&cert, &self.cert, &key, &self.key).map_err(unreadable)?;
        let problems = chain_problems(&loaded.cert, &self.host, now);
        if !problems.is_empty()
            && self
                .current()
                .is_some_and(|current| chain_problems(&current.cert, &self.host, now).is_empty())
        {
            return Err((
                Refusal::RefusedByClients(digest, problems.clone()),
                Kept::RefusedByClients(problems),
            ));
        }
        if let Some(mut current) = relay_logging::sync::lock(&self.current, "served certificate") {
            *current = Arc::new(loaded);
            looked.served = digest;
            looked.served_problems.clone_from(&problems);
        }
        Ok(Reload::Served { problems })
    }

    fn current(&self) -> Option<Arc<CertifiedKey>> {
        relay_logging::sync::lock(&self.current, "served certificate").map(|c| Arc::clone(&c))
    }
}

impl ResolvesServerCert for ServedCertificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current()
    }
}

impl std::fmt::Debug for ServedCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedCertificate")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// The PEM text of both files, each a regular file: they are opened without waiting for a
/// writer (a FIFO put in a file's place would otherwise block the read), and a file that
/// turns out not to be a regular file is not read.
fn read_both(cert: &Path, key: &Path) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let read = |path: &Path| {
        let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::CLOEXEC;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags.bits() as i32)
            .open(path);
        if let Ok(file) = &file
            && file.metadata().is_ok_and(|m| !m.is_file())
        {
            return Err(TlsError::NotAFile {
                path: path.to_owned(),
            });
        }
        read_pem_from(file, path)
    };
    Ok((read(cert)?, read(key)?))
}

/// The chain of `cert_pem` (from `cert`) with the key of `key_pem` (from `key`), refused
/// unless the key is the certificate's.
fn certified(
    cert_pem: &[u8],
    cert: &Path,
    key_pem: &[u8],
    key: &Path,
) -> Result<CertifiedKey, TlsError> {
    CertifiedKey::from_der(
        certificates_in(cert_pem, cert)?,
        key_in(key_pem, key)?,
        &provider(),
    )
    .map_err(|error| match error {
        rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch {
            cert: cert.to_owned(),
            key: key.to_owned(),
        },
        other => other.into(),
    })
}

/// A SHA-256 of both files' bytes, the first's length first, so that no two pairs of
/// contents give the same input.
fn fingerprint(cert_pem: &[u8], key_pem: &[u8]) -> Vec<u8> {
    let mut context = digest::Context::new(&digest::SHA256);
    context.update(&(cert_pem.len() as u64).to_le_bytes());
    context.update(cert_pem);
    context.update(key_pem);
    context.finish().as_ref().to_vec()
}

#[cfg(test)]
mod tests;
