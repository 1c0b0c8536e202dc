//! Ed25519 signing keys, their key files (§4.2), public keys and fingerprints.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use ring::signature::{self, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey};

use crate::secret::RandomError;
use crate::store::{self, FileFacts, StoreError};

/// Key files are tiny (ring's PKCS#8 v2 Ed25519 document is 85 bytes); anything much larger is
/// not a key and is not read into memory.
const MAX_KEY_FILE_BYTES: u64 = 1024;

/// Why a key file could not be loaded or created. Messages name the file and the fix.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key's directory could not be prepared.
    #[error("key directory: {0}")]
    Dir(#[source] StoreError),
    /// Writing a new key file failed.
    #[error("creating key file: {0}")]
    Write(#[source] StoreError),
    /// The key file is a symbolic link.
    #[error(
        "key file {} is a symbolic link, which is refused: replace the link with the key file itself",
        path.display()
    )]
    Symlink {
        /// The key file.
        path: PathBuf,
    },
    /// The key file is not a regular file.
    #[error("key file {} is not a regular file: move it aside", path.display())]
    NotRegularFile {
        /// The key file.
        path: PathBuf,
    },
    /// The key file belongs to another user.
    #[error(
        "key file {} is owned by uid {owner}, not by the current user (uid {euid}): run chown {euid} {}",
        path.display(),
        path.display()
    )]
    NotOwned {
        /// The key file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The effective uid of this process.
        euid: u32,
    },
    /// Group or others have some access to the key file.
    #[error(
        "permissions {mode:04o} for {} are too open; it must not be accessible by others: run chmod 600 {}",
        path.display(),
        path.display()
    )]
    TooOpen {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Opening or reading the key file failed.
    #[error("cannot read key file {}: {source}", path.display())]
    Read {
        /// The key file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The file is not a PKCS#8 v2 Ed25519 key.
    #[error(
        "key file {} is not a pkcs#8 v2 ed25519 key; remove it only if this machine-user should get a new identity",
        path.display()
    )]
    Corrupt {
        /// The key file.
        path: PathBuf,
    },
    /// The key file kept disappearing between creation and loading.
    #[error("key file {} disappeared while it was being loaded", path.display())]
    Vanished {
        /// The key file.
        path: PathBuf,
    },
    /// No randomness for a new key.
    #[error("cannot generate a key: {0}")]
    Random(#[from] RandomError),
}

/// Whether [`SigningKey::load_or_create`] made a new key or loaded an existing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFileOutcome {
    /// This call created the key file.
    Created,
    /// The key file existed (possibly created a moment ago by a concurrent process).
    Loaded,
}

/// An Ed25519 private key. `Debug` shows only the fingerprint prefix.
pub struct SigningKey {
    pair: Ed25519KeyPair,
    public: PublicKey,
}

impl SigningKey {
    /// A fresh key that lives only in memory.
    pub fn generate() -> Result<SigningKey, KeyError> {
        let pkcs8 = generate_pkcs8()?;
        // ring just produced this document; if it refuses it, that is a failure of key
        // generation, not of any input.
        SigningKey::from_pkcs8(pkcs8.as_ref()).map_err(|_| KeyError::Random(RandomError))
    }

    /// Parses a PKCS#8 v2 document as produced by ring.
    fn from_pkcs8(bytes: &[u8]) -> Result<SigningKey, ring::error::KeyRejected> {
        let pair = Ed25519KeyPair::from_pkcs8(bytes)?;
        let mut public = [0u8; 32];
        public.copy_from_slice(pair.public_key().as_ref());
        Ok(SigningKey {
            pair,
            public: PublicKey(public),
        })
    }

    /// Loads the key at `path`, creating it on first use (§4.2).
    ///
    /// The directory is created 0700 (an existing one must be owned by the effective user and not
    /// writable by others); a new key is written 0600 to a temporary file and `link(2)`ed into
    /// place, so concurrent first uses end with one key: a loser loads the winner's key.
    /// An existing file is opened with `O_NOFOLLOW` and refused if it is not a regular file,
    /// belongs to another user or is accessible by group or others.
    pub fn load_or_create(path: &Path) -> Result<(SigningKey, KeyFileOutcome), KeyError> {
        let dir = parent_dir(path);
        store::ensure_private_dir(dir).map_err(KeyError::Dir)?;
        // A concurrent `rm` between our link and our load could make the winner's file vanish;
        // a few rounds settle it, and a file that keeps vanishing is reported.
        for _ in 0..3 {
            if let Some(key) = SigningKey::load_existing(path)? {
                return Ok((key, KeyFileOutcome::Loaded));
            }
            let pkcs8 = generate_pkcs8()?;
            if store::create_new_linked(path, pkcs8.as_ref(), 0o600).map_err(KeyError::Write)? {
                let key = SigningKey::from_pkcs8(pkcs8.as_ref())
                    .map_err(|_| KeyError::Random(RandomError))?;
                return Ok((key, KeyFileOutcome::Created));
            }
        }
        Err(KeyError::Vanished {
            path: path.to_owned(),
        })
    }

    /// Loads the key at `path`, which must exist and pass the checks of
    /// [`SigningKey::load_or_create`].
    pub fn load(path: &Path) -> Result<SigningKey, KeyError> {
        SigningKey::load_existing(path)?.ok_or_else(|| KeyError::Read {
            path: path.to_owned(),
            source: io::Error::from(io::ErrorKind::NotFound),
        })
    }

    /// `Ok(None)` if there is no file at `path`.
    fn load_existing(path: &Path) -> Result<Option<SigningKey>, KeyError> {
        let mut file = match store::open_nofollow(path) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) if store::is_symlink_error(path, &err) => {
                return Err(KeyError::Symlink {
                    path: path.to_owned(),
                });
            }
            Err(source) => {
                return Err(KeyError::Read {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let read_err = |source| KeyError::Read {
            path: path.to_owned(),
            source,
        };
        let metadata = file.metadata().map_err(read_err)?;
        check_key_file(
            path,
            &FileFacts::from_metadata(&metadata),
            store::current_euid(),
        )?;
        let bytes = store::read_bounded(&mut file, MAX_KEY_FILE_BYTES).map_err(read_err)?;
        let corrupt = || KeyError::Corrupt {
            path: path.to_owned(),
        };
        if bytes.len() as u64 > MAX_KEY_FILE_BYTES {
            return Err(corrupt());
        }
        SigningKey::from_pkcs8(&bytes)
            .map(Some)
            .map_err(|_| corrupt())
    }

    /// The public half.
    pub fn public_key(&self) -> PublicKey {
        self.public
    }

    /// The SHA-256 of the public key.
    pub fn fingerprint(&self) -> Fingerprint {
        self.public.fingerprint()
    }

    /// An Ed25519 signature over `message`.
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        let mut signature = [0u8; 64];
        signature.copy_from_slice(self.pair.sign(message).as_ref());
        signature
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("fingerprint", &self.fingerprint().short())
            .finish_non_exhaustive()
    }
}

/// The key-file checks of §4.2 as a function of the opened handle's metadata.
fn check_key_file(path: &Path, facts: &FileFacts, euid: u32) -> Result<(), KeyError> {
    if facts.is_symlink {
        return Err(KeyError::Symlink {
            path: path.to_owned(),
        });
    }
    if !facts.is_regular_file {
        return Err(KeyError::NotRegularFile {
            path: path.to_owned(),
        });
    }
    if facts.uid != euid {
        return Err(KeyError::NotOwned {
            path: path.to_owned(),
            owner: facts.uid,
            euid,
        });
    }
    if facts.mode & 0o077 != 0 {
        return Err(KeyError::TooOpen {
            path: path.to_owned(),
            mode: facts.mode,
        });
    }
    Ok(())
}

fn generate_pkcs8() -> Result<ring::pkcs8::Document, RandomError> {
    Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new()).map_err(|_| RandomError)
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// A signature did not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("bad signature")]
pub struct BadSignature;

/// A hex string of the wrong length or with characters outside `0-9a-f`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HexError {
    /// Not the expected number of hex digits.
    #[error("expected {expected} hex digits, found {found} characters")]
    Length {
        /// Expected number of digits.
        expected: usize,
        /// Characters found.
        found: usize,
    },
    /// A character outside the allowed digits.
    #[error("not lowercase hex")]
    NotLowercaseHex,
}

/// Decodes exactly 64 lowercase hex digits.
pub(crate) fn decode_hex32(text: &str) -> Result<[u8; 32], HexError> {
    if text.len() != 64 {
        return Err(HexError::Length {
            expected: 64,
            found: text.chars().count(),
        });
    }
    if !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(HexError::NotLowercaseHex);
    }
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(text, &mut bytes).map_err(|_| HexError::NotLowercaseHex)?;
    Ok(bytes)
}

/// An Ed25519 public key. `Display` is 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey([u8; 32]);

impl PublicKey {
    /// Wraps 32 bytes received from a peer (checked only when a signature is verified).
    pub fn from_bytes(bytes: [u8; 32]) -> PublicKey {
        PublicKey(bytes)
    }

    /// The 32 key bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Parses 64 lowercase hex digits (the pin file format).
    pub fn parse_hex(text: &str) -> Result<PublicKey, HexError> {
        decode_hex32(text).map(PublicKey)
    }

    /// Whether `signature` is this key's Ed25519 signature over `message`.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> Result<(), BadSignature> {
        UnparsedPublicKey::new(&signature::ED25519, &self.0)
            .verify(message, signature)
            .map_err(|_| BadSignature)
    }

    /// The SHA-256 of the key: the route's fingerprint for a machine key.
    pub fn fingerprint(&self) -> Fingerprint {
        let digest = ring::digest::digest(&ring::digest::SHA256, &self.0);
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(digest.as_ref());
        Fingerprint(bytes)
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

/// The lowercase hex SHA-256 of a machine public key: a route's name (§4.2).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// Wraps 32 digest bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Fingerprint {
        Fingerprint(bytes)
    }

    /// The 32 digest bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Parses 64 hex digits; uppercase is accepted because people paste fingerprints.
    pub fn parse_hex(text: &str) -> Result<Fingerprint, HexError> {
        decode_hex32(&text.to_ascii_lowercase()).map(Fingerprint)
    }

    /// The 12-character prefix that logs carry (§10.3).
    pub fn short(&self) -> String {
        hex::encode(&self.0[..6])
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

macro_rules! hex_serde {
    ($ty:ident, $parse:path) => {
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <String as serde::Deserialize>::deserialize(deserializer)?;
                $parse(&text).map_err(serde::de::Error::custom)
            }
        }
    };
}
pub(crate) use hex_serde;

hex_serde!(PublicKey, PublicKey::parse_hex);
hex_serde!(Fingerprint, Fingerprint::parse_hex);

#[cfg(test)]
mod tests;
