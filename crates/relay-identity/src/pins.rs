//! Trust pins of the daemon's public key, one per normalized origin (§4.3).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use crate::keys::{HexError, PublicKey};
use crate::origin::{AddressError, Origin};
use crate::store::{self, StoreError};

/// A pin file is two short lines; anything much larger is not a pin and is not read into memory.
const MAX_PIN_FILE_BYTES: u64 = 4096;

/// An origin and the daemon key pinned for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// The normalized origin.
    pub origin: Origin,
    /// The daemon's Ed25519 public key.
    pub key: PublicKey,
}

/// How a pin file's text departs from `origin <origin>\ned25519 <hex>\n`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinFormatError {
    /// Larger than any pin.
    #[error("larger than {MAX_PIN_FILE_BYTES} bytes")]
    TooLarge,
    /// Not UTF-8.
    #[error("not utf-8 text")]
    NotUtf8,
    /// The first line does not start with `origin `.
    #[error("the first line must be \"origin <normalized origin>\"")]
    OriginLine,
    /// The origin does not parse.
    #[error("invalid origin: {0}")]
    Origin(#[source] AddressError),
    /// The origin is not written in its normalized form.
    #[error("origin {found:?} is not normalized (expected {normalized:?})")]
    OriginNotNormalized {
        /// The origin as written.
        found: String,
        /// Its normalized form.
        normalized: String,
    },
    /// The second line does not start with `ed25519 `.
    #[error("the second line must be \"ed25519 <64 lowercase hex digits>\"")]
    KeyLine,
    /// The key is not 64 lowercase hex digits.
    #[error("invalid key: {0}")]
    Key(#[source] HexError),
    /// A line is not terminated by `\n`.
    #[error("a line is not terminated by a newline")]
    MissingNewline,
    /// Something follows the second line.
    #[error("unexpected text after the second line")]
    TrailingData,
    /// The file holds the pin of another origin.
    #[error("it pins {found}, not {expected}")]
    WrongOrigin {
        /// The origin being checked.
        expected: Origin,
        /// The origin in the file.
        found: Origin,
    },
}

/// A pin check that did not succeed. Messages name the origin and the file.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// The daemon presented another key than the pinned one.
    #[error(
        "the daemon at {origin} presented a key that does not match the pin in {}; the pin is never replaced automatically: if the daemon identity was changed on purpose, compare it with `relayd identity show` and update or remove that file",
        pin_file.display()
    )]
    Mismatch {
        /// The origin dialled.
        origin: Origin,
        /// The pin file (the user's, or the provisioned one).
        pin_file: PathBuf,
    },
    /// The pin file is not in the pin format; it is never reset automatically.
    #[error(
        "pin file {} is corrupt ({reason}); it is never reset automatically: compare it with `relayd identity show`, then fix or remove it",
        pin_file.display()
    )]
    Corrupt {
        /// The pin file.
        pin_file: PathBuf,
        /// What is wrong with it.
        reason: PinFormatError,
    },
    /// The pin file could not be opened or read (including: it is a symlink or not a file).
    #[error("cannot read pin file {}: {source}", pin_file.display())]
    Unreadable {
        /// The pin file.
        pin_file: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The pins directory could not be prepared.
    #[error("pins directory: {0}")]
    Dir(#[source] StoreError),
    /// Writing a new pin failed.
    #[error("writing pin: {0}")]
    Write(#[source] StoreError),
}

/// How the daemon key was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinOutcome {
    /// It matches the administrator-provisioned key for this origin.
    Provisioned,
    /// It matches this user's existing pin.
    Matched,
    /// First contact: it has just been pinned (trust on first use).
    PinnedNow,
}

/// The text of a pin file, and of `relayd identity show`:
/// `origin <normalized origin>\ned25519 <64 lowercase hex>\n`.
pub fn format_pin(origin: &Origin, key: &PublicKey) -> String {
    format!("origin {origin}\ned25519 {key}\n")
}

/// Parses exactly the text [`format_pin`] produces.
pub fn parse_pin(text: &str) -> Result<Pin, PinFormatError> {
    let rest = text
        .strip_prefix("origin ")
        .ok_or(PinFormatError::OriginLine)?;
    let (origin_text, rest) = rest
        .split_once('\n')
        .ok_or(PinFormatError::MissingNewline)?;
    let origin = Origin::parse(origin_text).map_err(PinFormatError::Origin)?;
    let normalized = origin.to_string();
    if normalized != origin_text {
        return Err(PinFormatError::OriginNotNormalized {
            found: origin_text.to_owned(),
            normalized,
        });
    }
    let rest = rest
        .strip_prefix("ed25519 ")
        .ok_or(PinFormatError::KeyLine)?;
    let (key_text, rest) = rest
        .split_once('\n')
        .ok_or(PinFormatError::MissingNewline)?;
    let key = PublicKey::parse_hex(key_text).map_err(PinFormatError::Key)?;
    if !rest.is_empty() {
        return Err(PinFormatError::TrailingData);
    }
    Ok(Pin { origin, key })
}

/// A user's pins directory plus the optional provisioned pin that overrides first-use trust.
#[derive(Debug, Clone)]
pub struct PinStore {
    pins_dir: PathBuf,
    provisioned_file: Option<PathBuf>,
}

impl PinStore {
    /// Pins under `pins_dir` (`<base>/relay/daemon/pins`), with the provisioned pin at
    /// `provisioned_file` (`<system config dir>/daemon-identity.pub`) if that file exists.
    pub fn new(pins_dir: impl Into<PathBuf>, provisioned_file: Option<PathBuf>) -> PinStore {
        PinStore {
            pins_dir: pins_dir.into(),
            provisioned_file,
        }
    }

    /// The file that holds (or would hold) this user's pin for `origin`: the lowercase hex
    /// SHA-256 of the normalized origin.
    pub fn pin_file(&self, origin: &Origin) -> PathBuf {
        let digest = ring::digest::digest(&ring::digest::SHA256, origin.to_string().as_bytes());
        self.pins_dir.join(hex::encode(digest.as_ref()))
    }

    /// Accepts `key` for `origin` or says why not (§4.3).
    ///
    /// A provisioned pin for this origin decides alone. Otherwise the user's pin must match;
    /// without one, `key` is pinned now (created by `link(2)`, so two racing first contacts
    /// agree on one key). A corrupt or unreadable pin is an error and is never rewritten.
    pub fn check_or_pin(&self, origin: &Origin, key: &PublicKey) -> Result<PinOutcome, PinError> {
        if let Some((pin, file)) = self.provisioned_for(origin)? {
            return if pin.key == *key {
                Ok(PinOutcome::Provisioned)
            } else {
                Err(PinError::Mismatch {
                    origin: origin.clone(),
                    pin_file: file.to_owned(),
                })
            };
        }
        store::ensure_private_dir(&self.pins_dir).map_err(PinError::Dir)?;
        let pin_file = self.pin_file(origin);
        let outcome = match self.pinned(origin)? {
            Some(pin) if pin.key == *key => PinOutcome::Matched,
            Some(_) => {
                return Err(PinError::Mismatch {
                    origin: origin.clone(),
                    pin_file,
                });
            }
            None => {
                let text = format_pin(origin, key);
                if store::create_new_linked(&pin_file, text.as_bytes(), 0o600)
                    .map_err(PinError::Write)?
                {
                    PinOutcome::PinnedNow
                } else {
                    // A concurrent first contact pinned first: its key decides.
                    match self.pinned(origin)? {
                        Some(pin) if pin.key == *key => PinOutcome::Matched,
                        _ => {
                            return Err(PinError::Mismatch {
                                origin: origin.clone(),
                                pin_file,
                            });
                        }
                    }
                }
            }
        };
        Ok(outcome)
    }

    /// This user's pin for `origin`, if there is one (for `relay-doctor`).
    pub fn pinned(&self, origin: &Origin) -> Result<Option<Pin>, PinError> {
        let pin_file = self.pin_file(origin);
        let unreadable = |source| PinError::Unreadable {
            pin_file: pin_file.clone(),
            source,
        };
        let file = match store::open_nofollow(&pin_file) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(unreadable(source)),
        };
        let metadata = file.metadata().map_err(unreadable)?;
        if !metadata.is_file() {
            return Err(unreadable(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        let pin = read_pin(file, &pin_file)?;
        if pin.origin != *origin {
            return Err(PinError::Corrupt {
                pin_file,
                reason: PinFormatError::WrongOrigin {
                    expected: origin.clone(),
                    found: pin.origin,
                },
            });
        }
        Ok(Some(pin))
    }

    /// The provisioned pin, if the file is configured and exists (for `relay-doctor`).
    pub fn provisioned(&self) -> Result<Option<Pin>, PinError> {
        Ok(self.provisioned_with_file()?.map(|(pin, _)| pin))
    }

    fn provisioned_for(&self, origin: &Origin) -> Result<Option<(Pin, &Path)>, PinError> {
        Ok(self
            .provisioned_with_file()?
            .filter(|(pin, _)| pin.origin == *origin))
    }

    fn provisioned_with_file(&self) -> Result<Option<(Pin, &Path)>, PinError> {
        let Some(path) = self.provisioned_file.as_deref() else {
            return Ok(None);
        };
        // The system directory may be assembled from symlinks by configuration management,
        // so the file is opened as the configuration files are, symlinks followed; like
        // them, it is refused where another user could have changed it, as it decides
        // which daemon this user's clients trust.
        match store::open_trusted(path) {
            Ok(Some(file)) => Ok(Some((read_pin(file, path)?, path))),
            Ok(None) => Ok(None),
            Err(source) => Err(PinError::Unreadable {
                pin_file: path.to_owned(),
                source,
            }),
        }
    }
}

fn read_pin(mut file: File, path: &Path) -> Result<Pin, PinError> {
    let bytes = store::read_bounded(&mut file, MAX_PIN_FILE_BYTES).map_err(|source| {
        PinError::Unreadable {
            pin_file: path.to_owned(),
            source,
        }
    })?;
    let corrupt = |reason| PinError::Corrupt {
        pin_file: path.to_owned(),
        reason,
    };
    if bytes.len() as u64 > MAX_PIN_FILE_BYTES {
        return Err(corrupt(PinFormatError::TooLarge));
    }
    let text = std::str::from_utf8(&bytes).map_err(|_| corrupt(PinFormatError::NotUtf8))?;
    parse_pin(text).map_err(corrupt)
}

#[cfg(test)]
mod tests;
