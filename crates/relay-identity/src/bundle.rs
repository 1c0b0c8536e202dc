//! The managed bundle's integrity (SPEC §10.2): its canonical digest, the per-file manifest it
//! carries, the comparison of two file sets, and reading a bundle directory back.
//!
//! `relayd managed-bundle` and `relay-doctor --managed-bundle` both use these, so the digest,
//! the comparison and the hook events the bundle wires are written once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ring::digest::{Context, SHA256, digest};

/// The manifest every bundle carries at its root: `sha256sum` format (`<hex>  <path>`), one
/// line per other file in byte order of the path, so `sha256sum -c SHA256SUMS` works too.
pub const MANIFEST_PATH: &str = "SHA256SUMS";

/// Claude Code's hook events the bundle wires to `relay-hook claude`, with whether the event
/// takes a matcher. `relay-doctor` checks an installation against the same list.
pub const CLAUDE_HOOK_EVENTS: [(&str, bool); 13] = [
    ("SessionStart", false),
    ("UserPromptSubmit", false),
    ("PreToolUse", true),
    ("PermissionRequest", true),
    ("PostToolUse", true),
    ("PostToolUseFailure", true),
    ("Notification", false),
    ("Stop", false),
    ("SubagentStart", false),
    ("SubagentStop", false),
    ("PreCompact", false),
    ("PostCompact", false),
    ("SessionEnd", false),
];

/// Codex's hook events the bundle wires to `relay-hook codex`, with whether the event takes a
/// matcher.
pub const CODEX_HOOK_EVENTS: [(&str, bool); 11] = [
    ("SessionStart", false),
    ("UserPromptSubmit", false),
    ("PreToolUse", true),
    ("PermissionRequest", true),
    ("PostToolUse", true),
    ("Stop", false),
    ("SessionEnd", false),
    ("SubagentStart", false),
    ("SubagentStop", false),
    ("PreCompact", false),
    ("PostCompact", false),
];

/// The Claude Code and Codex events on which a hook's exit 2 means "do not do this": the
/// bundle runs `relay-hook` on them with `--fail-closed`.
pub const BLOCKING_HOOK_EVENTS: [&str; 3] = ["PreToolUse", "PermissionRequest", "UserPromptSubmit"];

/// How the bundle's pi extension (`pi/extension-v1/index.ts`) begins, by which relay-doctor
/// tells it from other extensions.
pub const PI_EXTENSION_MARKER: &str = "// Relay's pi extension, written by `relayd managed-bundle`";

/// The settings `relayd managed-bundle` writes into its pi extension, as the object after
/// `const BUNDLE: … =`: where the daemon is, and the two binaries the extension runs. The
/// bundle writes them and relay-doctor reads them back, through this one type.
/// (Fields in name order, as the object has always been written.)
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PiExtensionSettings {
    pub daemon_address: String,
    pub relay_hook: String,
    pub relay_mcp: String,
}

/// What introduces the settings object in the extension's source.
const PI_SETTINGS_DECLARATION: &str = "const BUNDLE:";

impl PiExtensionSettings {
    /// The object literal the bundle writes (JSON, which TypeScript reads as it is).
    pub fn to_literal(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The settings in an extension's source; `None` when it holds none that can be read.
    pub fn from_source(source: &str) -> Option<PiExtensionSettings> {
        let (_, declared) = source.split_once(PI_SETTINGS_DECLARATION)?;
        let (_, value) = declared.split_once('=')?;
        serde_json::Deserializer::from_str(value)
            .into_iter()
            .next()?
            .ok()
    }
}

/// The command line that runs `relay_hook` for `event` of `agent` (`claude`, `codex`)
/// against the daemon at `origin`: fail-closed on the blocking events, fail-open on the
/// others. Paths pass the bundle's `--bin-dir` rules (no spaces or shell metacharacters),
/// so no quoting is needed on any platform.
pub fn hook_command(relay_hook: &str, agent: &str, origin: &str, event: &str) -> String {
    let mode = if BLOCKING_HOOK_EVENTS.contains(&event) {
        "--fail-closed"
    } else {
        "--fail-open"
    };
    format!("{relay_hook} {agent} --daemon-address {origin} {mode}")
}

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
    let walked = walk_bundle_dir(dir)?;
    match walked
        .entries
        .into_iter()
        .find(|entry| entry.kind != EntryKind::File && entry.kind != EntryKind::Dir || !entry.utf8)
    {
        Some(entry) if !entry.utf8 => Err(BundleReadError::NotUtf8 { path: entry.full }),
        Some(entry) => Err(BundleReadError::NotRegular { path: entry.full }),
        None => Ok(walked.files),
    }
}

/// What a walk of a bundle directory found: its regular files, and every entry (the
/// directory itself first, as `.`) with its kind, mode and owner.
#[derive(Debug, Default)]
pub struct BundleDir {
    /// Every regular file with a UTF-8 name, as `/`-separated relative path → bytes.
    pub files: BTreeMap<String, Vec<u8>>,
    /// Every entry, files included, never followed through a symbolic link.
    pub entries: Vec<BundleEntry>,
}

/// One entry of a bundle directory.
#[derive(Debug, Clone)]
pub struct BundleEntry {
    /// The `/`-separated relative path (`.` for the directory itself), with a name that is
    /// not UTF-8 shown lossily.
    pub path: String,
    /// The full path.
    pub full: PathBuf,
    /// What it is.
    pub kind: EntryKind,
    /// Whether its name is UTF-8 (a bundle's names all are).
    pub utf8: bool,
    /// Its permission bits (`0o7777`); 0 where the platform has none.
    pub mode: u32,
    /// Its owner's uid; 0 where the platform has none.
    pub uid: u32,
}

/// The kind of a bundle entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed).
    Symlink,
    /// A FIFO, socket or device.
    Special,
}

impl EntryKind {
    /// How a person would name it.
    pub fn describe(self) -> &'static str {
        match self {
            EntryKind::File => "a file",
            EntryKind::Dir => "a directory",
            EntryKind::Symlink => "a symbolic link",
            EntryKind::Special => "a special file",
        }
    }
}

/// Walks `dir` without following symbolic links: reads every regular file with a UTF-8
/// name and lists every entry. Fails only when something cannot be read at all, a file is
/// larger than any bundle file, or there are more files than any bundle holds.
pub fn walk_bundle_dir(dir: &Path) -> Result<BundleDir, BundleReadError> {
    let mut walked = BundleDir::default();
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BundleReadError::Io { path, source }
    };
    let root = std::fs::metadata(dir).map_err(io(dir))?;
    walked
        .entries
        .push(entry(".".to_owned(), dir.to_path_buf(), &root, true));
    let mut pending: Vec<(PathBuf, String)> = vec![(dir.to_path_buf(), String::new())];
    while let Some((current, prefix)) = pending.pop() {
        for dir_entry in std::fs::read_dir(&current).map_err(io(&current))? {
            let dir_entry = dir_entry.map_err(io(&current))?;
            let path = dir_entry.path();
            let name = dir_entry.file_name();
            let utf8 = name.to_str().is_some();
            let name = name.to_string_lossy();
            let relative = if prefix.is_empty() {
                name.into_owned()
            } else {
                format!("{prefix}/{name}")
            };
            let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
            let found = entry(relative.clone(), path.clone(), &meta, utf8);
            let kind = found.kind;
            walked.entries.push(found);
            if !utf8 {
                continue;
            }
            match kind {
                EntryKind::Dir => pending.push((path, relative)),
                EntryKind::File => {
                    if meta.len() > MAX_FILE_BYTES {
                        return Err(BundleReadError::TooLarge { path });
                    }
                    if walked.files.len() >= MAX_FILES {
                        return Err(BundleReadError::TooManyFiles {
                            dir: dir.to_path_buf(),
                        });
                    }
                    let bytes = std::fs::read(&path).map_err(io(&path))?;
                    walked.files.insert(relative, bytes);
                }
                EntryKind::Symlink | EntryKind::Special => {}
            }
        }
    }
    Ok(walked)
}

/// The directories above `dir`, from the root down, each named by its full path: those a
/// reader passes through to reach the bundle (symbolic links resolved).
pub fn ancestors_of(dir: &Path) -> Result<Vec<BundleEntry>, BundleReadError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BundleReadError::Io { path, source }
    };
    let canonical = std::fs::canonicalize(dir).map_err(io(dir))?;
    let mut found = Vec::new();
    let mut current = canonical.parent();
    while let Some(path) = current {
        let meta = std::fs::metadata(path).map_err(io(path))?;
        found.push(entry(
            path.display().to_string(),
            path.to_path_buf(),
            &meta,
            true,
        ));
        current = path.parent();
    }
    found.reverse();
    Ok(found)
}

fn entry(path: String, full: PathBuf, meta: &std::fs::Metadata, utf8: bool) -> BundleEntry {
    let file_type = meta.file_type();
    let kind = if file_type.is_symlink() {
        EntryKind::Symlink
    } else if file_type.is_dir() {
        EntryKind::Dir
    } else if file_type.is_file() {
        EntryKind::File
    } else {
        EntryKind::Special
    };
    #[cfg(unix)]
    let (mode, uid) = {
        use std::os::unix::fs::MetadataExt as _;
        (meta.mode() & 0o7777, meta.uid())
    };
    #[cfg(not(unix))]
    let (mode, uid) = (0, 0);
    BundleEntry {
        path,
        full,
        kind,
        utf8,
        mode,
        uid,
    }
}

#[cfg(test)]
mod tests;
