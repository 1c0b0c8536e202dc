//! The managed bundle's integrity (SPEC §10.2): its canonical digest, the per-file manifest it
//! carries, the comparison of two file sets, and reading a bundle directory back.
//!
//! `relayd managed-bundle` and `relay-doctor --managed-bundle` both use these, so the digest
//! and the comparison are written once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ring::digest::{Context, SHA256, digest};

/// The manifest every bundle carries at its root: `sha256sum` format (`<hex>  <path>`), one
/// line per other file in byte order of the path, so `sha256sum -c SHA256SUMS` works too.
pub const MANIFEST_PATH: &str = "SHA256SUMS";

/// The largest bundle file `read_bundle_dir` accepts; generated files are a few KiB.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// The most files `read_bundle_dir` accepts, so a wrong directory does not read a disk.
const MAX_FILES: usize = 256;

/// The canonical SHA-256 of a bundle, lowercase hex: over each file in byte order of its
/// `/`-separated relative path, `u64be(len(path)) ‖ path ‖ u64be(len(bytes)) ‖ bytes`.
pub fn bundle_digest<'a, I>(files: I) -> String
where
    I: IntoIterator<Item = (&'a str, &'a [u8])>,
{
    let mut sorted: Vec<(&str, &[u8])> = files.into_iter().collect();
    sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut context = Context::new(&SHA256);
    for (path, bytes) in sorted {
        context.update(&(path.len() as u64).to_be_bytes());
        context.update(path.as_bytes());
        context.update(&(bytes.len() as u64).to_be_bytes());
        context.update(bytes);
    }
    hex::encode(context.finish().as_ref())
}

/// The lowercase hex SHA-256 of one file's bytes, as the manifest lists it.
pub fn file_sha256(bytes: &[u8]) -> String {
    hex::encode(digest(&SHA256, bytes).as_ref())
}

/// The manifest text for `files` (which must not contain the manifest itself).
pub fn render_manifest<'a, I>(files: I) -> String
where
    I: IntoIterator<Item = (&'a str, &'a [u8])>,
{
    let hashes: BTreeMap<&str, String> = files
        .into_iter()
        .map(|(path, bytes)| (path, file_sha256(bytes)))
        .collect();
    let mut sorted: Vec<_> = hashes.into_iter().collect();
    sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    sorted
        .into_iter()
        .map(|(path, hash)| format!("{hash}  {path}\n"))
        .collect()
}

/// Parses a manifest into path → file hash; `None` when a line is not `<64 hex>  <path>`.
pub fn parse_manifest(text: &str) -> Option<BTreeMap<String, String>> {
    let mut entries = BTreeMap::new();
    for line in text.lines() {
        let (hash, path) = line.split_once("  ")?;
        let valid = hash.len() == 64
            && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            && !path.is_empty();
        if !valid {
            return None;
        }
        entries.insert(path.to_owned(), hash.to_owned());
    }
    Some(entries)
}

/// How one file of a bundle differs from what was expected.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Difference {
    /// Expected but absent.
    Missing(String),
    /// Present but not expected.
    Extra(String),
    /// Present with other bytes.
    Changed(String),
}

impl Difference {
    /// The relative path the difference is about.
    pub fn path(&self) -> &str {
        match self {
            Difference::Missing(path) | Difference::Extra(path) | Difference::Changed(path) => path,
        }
    }

    /// `missing`, `extra` or `changed`.
    pub fn kind(&self) -> &'static str {
        match self {
            Difference::Missing(_) => "missing",
            Difference::Extra(_) => "extra",
            Difference::Changed(_) => "changed",
        }
    }
}

/// Every difference between two maps of relative path → file hash, in byte order of the path.
pub fn compare(
    expected: &BTreeMap<String, String>,
    actual: &BTreeMap<String, String>,
) -> Vec<Difference> {
    let mut differences: Vec<Difference> = Vec::new();
    for (path, hash) in expected {
        match actual.get(path) {
            None => differences.push(Difference::Missing(path.clone())),
            Some(other) if other != hash => differences.push(Difference::Changed(path.clone())),
            Some(_) => {}
        }
    }
    for path in actual.keys() {
        if !expected.contains_key(path) {
            differences.push(Difference::Extra(path.clone()));
        }
    }
    differences.sort_by(|a, b| a.path().as_bytes().cmp(b.path().as_bytes()));
    differences
}

/// Path → file hash of a list of files.
pub fn hashes<'a, I>(files: I) -> BTreeMap<String, String>
where
    I: IntoIterator<Item = (&'a str, &'a [u8])>,
{
    files
        .into_iter()
        .map(|(path, bytes)| (path.to_owned(), file_sha256(bytes)))
        .collect()
}

/// Why a bundle directory could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BundleReadError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is neither a regular file nor a directory (a bundle holds only those)")]
    NotRegular { path: PathBuf },
    #[error("{path} has a name that is not UTF-8")]
    NotUtf8 { path: PathBuf },
    #[error("{path} is larger than any bundle file ({MAX_FILE_BYTES} bytes)")]
    TooLarge { path: PathBuf },
    #[error("{dir} holds more than {MAX_FILES} files, more than any bundle")]
    TooManyFiles { dir: PathBuf },
}

/// Reads every regular file under `dir` as `/`-separated relative path → bytes. Symbolic
/// links and other special files are refused rather than followed: a deployed bundle holds
/// none.
pub fn read_bundle_dir(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>, BundleReadError> {
    let mut files = BTreeMap::new();
    let mut pending: Vec<(PathBuf, String)> = vec![(dir.to_path_buf(), String::new())];
    while let Some((current, prefix)) = pending.pop() {
        let entries = std::fs::read_dir(&current).map_err(|source| BundleReadError::Io {
            path: current.clone(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| BundleReadError::Io {
                path: current.clone(),
                source,
            })?;
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                return Err(BundleReadError::NotUtf8 { path });
            };
            let relative = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let meta = std::fs::symlink_metadata(&path).map_err(|source| BundleReadError::Io {
                path: path.clone(),
                source,
            })?;
            if meta.is_dir() {
                pending.push((path, relative));
            } else if meta.is_file() {
                if meta.len() > MAX_FILE_BYTES {
                    return Err(BundleReadError::TooLarge { path });
                }
                if files.len() >= MAX_FILES {
                    return Err(BundleReadError::TooManyFiles {
                        dir: dir.to_path_buf(),
                    });
                }
                let bytes = std::fs::read(&path).map_err(|source| BundleReadError::Io {
                    path: path.clone(),
                    source,
                })?;
                files.insert(relative, bytes);
            } else {
                return Err(BundleReadError::NotRegular { path });
            }
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests;
