//! The daemon's state file (SPEC §5.7): credential bindings (digests only), blocked
//! fingerprints and the ledger of published worker generations, written atomically as
//! JSON with mode 0600. Raw tokens and secrets are never part of it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use relay_broker::{Digest, Fingerprint, PersistedBinding, PersistedGeneration, PersistedState};
use relay_proto::{Bytes32, Id};
use serde::{Deserialize, Serialize};

/// The state file's name in the daemon's state directory.
pub const STATE_FILE: &str = "state.json";
const VERSION: u32 = 1;
/// The largest state file the daemon reads. The default limits (4096 routes, 4 tokens per
/// identity and their tombstones) make a file of about 20 MB at most; a larger one was not
/// written by this daemon, and reading it whole could exhaust memory.
pub const MAX_STATE_FILE_BYTES: u64 = 256 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is a symbolic link; the state file must be a regular file")]
    Symlink { path: PathBuf },
    #[error("{path} is not a regular file")]
    NotRegularFile { path: PathBuf },
    #[error("{path} is larger than {limit} bytes")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{path} is not a valid state file: {message}")]
    Corrupt { path: PathBuf, message: String },
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: relay_identity::StoreError,
    },
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateFile {
    version: u32,
    bindings: Vec<BindingRecord>,
    blocked: Vec<String>,
    generations: Vec<GenerationRecord>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BindingRecord {
    digest: String,
    fingerprint: String,
    last_use_unix_ms: u64,
    tombstone_until_unix_ms: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GenerationRecord {
    worker_id: uuid::Uuid,
    fingerprint: String,
    endpoint: String,
    certificate_sha256: String,
    draining: bool,
}

/// Reads and writes the state file, converting the broker's `Instant`s to wall-clock
/// time and back through one reference point taken at start-up.
#[derive(Debug, Clone)]
pub struct StateStore {
    path: PathBuf,
    epoch: (Instant, SystemTime),
}

impl StateStore {
    pub fn new(state_dir: &Path) -> StateStore {
        StateStore {
            path: state_dir.join(STATE_FILE),
            epoch: (Instant::now(), SystemTime::now()),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn to_wall_ms(&self, at: Instant) -> u64 {
        let wall = if at >= self.epoch.0 {
            self.epoch.1 + (at - self.epoch.0)
        } else {
            self.epoch.1 - (self.epoch.0 - at)
        };
        wall.duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    fn to_instant(&self, wall_ms: u64) -> Instant {
        let wall = UNIX_EPOCH + Duration::from_millis(wall_ms);
        match wall.duration_since(self.epoch.1) {
            Ok(ahead) => self.epoch.0 + ahead,
            Err(behind) => self
                .epoch
                .0
                .checked_sub(behind.duration())
                .unwrap_or(self.epoch.0),
        }
    }

    /// The persisted state; a missing file is an empty state. The file is opened without
    /// following a symlink and read only up to [`MAX_STATE_FILE_BYTES`], so whoever can
    /// write the state directory cannot point the daemon at another file or exhaust its
    /// memory.
    pub fn load(&self) -> Result<PersistedState, StateError> {
        let Some(bytes) = self.read()? else {
            return Ok(PersistedState::default());
        };
        let corrupt = |message: String| StateError::Corrupt {
            path: self.path.clone(),
            message,
        };
        let file: StateFile = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if file.version != VERSION {
            return Err(corrupt(format!(
                "version {} is not {VERSION}",
                file.version
            )));
        }
        let mut state = PersistedState::default();
        for b in file.bindings {
            state.bindings.push(PersistedBinding {
                digest: Digest(hex32(&b.digest).ok_or_else(|| corrupt("bad digest".into()))?),
                fingerprint: Fingerprint(
                    hex32(&b.fingerprint).ok_or_else(|| corrupt("bad fingerprint".into()))?,
                ),
                last_use: self.to_instant(b.last_use_unix_ms),
                tombstone_until: b.tombstone_until_unix_ms.map(|ms| self.to_instant(ms)),
            });
        }
        for f in file.blocked {
            state.blocked.push(Fingerprint(
                hex32(&f).ok_or_else(|| corrupt("bad blocked fingerprint".into()))?,
            ));
        }
        for g in file.generations {
            state.generations.push(PersistedGeneration {
                worker_id: Id::from(g.worker_id),
                fingerprint: Fingerprint(
                    hex32(&g.fingerprint).ok_or_else(|| corrupt("bad fingerprint".into()))?,
                ),
                endpoint: g.endpoint,
                certificate_sha256: Bytes32(
                    hex32(&g.certificate_sha256)
                        .ok_or_else(|| corrupt("bad certificate digest".into()))?,
                ),
                draining: g.draining,
            });
        }
        Ok(state)
    }

    /// The file's bytes, or `None` when there is no file.
    fn read(&self) -> Result<Option<Vec<u8>>, StateError> {
        let path = || self.path.clone();
        let read_error = |source| StateError::Read {
            path: path(),
            source,
        };
        let mut file = match relay_identity::store::open_nofollow(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if relay_identity::store::is_symlink_error(&self.path, &e) => {
                return Err(StateError::Symlink { path: path() });
            }
            Err(source) => return Err(read_error(source)),
        };
        let metadata = file.metadata().map_err(read_error)?;
        if !metadata.is_file() {
            return Err(StateError::NotRegularFile { path: path() });
        }
        let too_large = || StateError::TooLarge {
            path: path(),
            limit: MAX_STATE_FILE_BYTES,
        };
        if metadata.len() > MAX_STATE_FILE_BYTES {
            return Err(too_large());
        }
        // The bound holds even if the file grew after the check.
        let bytes = relay_identity::store::read_bounded(&mut file, MAX_STATE_FILE_BYTES)
            .map_err(read_error)?;
        if bytes.len() as u64 > MAX_STATE_FILE_BYTES {
            return Err(too_large());
        }
        Ok(Some(bytes))
    }

    /// Writes the state atomically (temp file, fsync, rename, fsync of the directory).
    pub fn save(&self, state: &PersistedState) -> Result<(), StateError> {
        let file = StateFile {
            version: VERSION,
            bindings: state
                .bindings
                .iter()
                .map(|b| BindingRecord {
                    digest: b.digest.to_hex(),
                    fingerprint: b.fingerprint.to_hex(),
                    last_use_unix_ms: self.to_wall_ms(b.last_use),
                    tombstone_until_unix_ms: b.tombstone_until.map(|t| self.to_wall_ms(t)),
                })
                .collect(),
            blocked: state.blocked.iter().map(Fingerprint::to_hex).collect(),
            generations: state
                .generations
                .iter()
                .map(|g| GenerationRecord {
                    worker_id: g.worker_id.as_uuid(),
                    fingerprint: g.fingerprint.to_hex(),
                    endpoint: g.endpoint.clone(),
                    certificate_sha256: hex::encode(g.certificate_sha256.0),
                    draining: g.draining,
                })
                .collect(),
        };
        let bytes = serde_json::to_vec_pretty(&file).unwrap_or_default();
        relay_identity::store::write_atomic(&self.path, &bytes, 0o600).map_err(|source| {
            StateError::Write {
                path: self.path.clone(),
                source,
            }
        })
    }

    /// Milliseconds since the Unix epoch of an instant, for `relayd bindings list`.
    pub fn wall_ms(&self, at: Instant) -> u64 {
        self.to_wall_ms(at)
    }
}

fn hex32(text: &str) -> Option<[u8; 32]> {
    let bytes = hex::decode(text).ok()?;
    bytes.try_into().ok()
}

#[cfg(test)]
mod tests;
