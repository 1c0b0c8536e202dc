//! `relay-doctor --managed-bundle DIR --managed-bundle-sha256 HEX`: checks a deployed bundle
//! offline against the digest `relayd managed-bundle` printed, and changes nothing.
//!
//! [`check`] is pure: from the files read and the expected digest to a [`Report`]. Which
//! files differ comes from the bundle's own manifest (`SHA256SUMS`); when the files agree
//! with it but the digest does not, the manifest itself is the changed file.
//! [`unsafe_entries`], pure too, adds what makes a bundle unfit to deploy read-only even when
//! its bytes match: entries that are not plain files or directories, entries another user
//! may change, and entries not every user can read.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context as _;
use relay_identity::bundle::{
    BundleEntry, Difference, EntryKind, MANIFEST_PATH, ancestors_of, bundle_digest, compare,
    hashes, parse_manifest, walk_bundle_dir,
};

/// The outcome of a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Report {
    pub(crate) expected: String,
    pub(crate) actual: String,
    /// Empty exactly when the digests match.
    pub(crate) differences: Vec<Difference>,
    /// What makes the bundle unsafe to deploy, by relative path, whatever its bytes.
    pub(crate) unsafe_entries: Vec<(String, String)>,
}

impl Report {
    /// The bytes match the digest.
    pub(crate) fn matches(&self) -> bool {
        self.expected == self.actual
    }

    /// The bytes match and nothing makes the bundle unsafe.
    pub(crate) fn passed(&self) -> bool {
        self.matches() && self.unsafe_entries.is_empty()
    }

    /// Only the manifest is named: the files it would have named cannot be.
    fn only_the_manifest_is_named(&self) -> bool {
        matches!(self.differences.as_slice(), [only] if only.path() == MANIFEST_PATH)
    }

    fn paths(&self, kind: &str) -> Vec<&str> {
        self.differences
            .iter()
            .filter(|d| d.kind() == kind)
            .map(Difference::path)
            .collect()
    }

    pub(crate) fn to_json(&self) -> serde_json::Value {
        let unsafe_entries: Vec<serde_json::Value> = self
            .unsafe_entries
            .iter()
            .map(|(path, problem)| serde_json::json!({"path": path, "problem": problem}))
            .collect();
        serde_json::json!({
            "ok": self.passed(),
            "expected_sha256": self.expected,
            "actual_sha256": self.actual,
            "missing": self.paths("missing"),
            "extra": self.paths("extra"),
            "changed": self.paths("changed"),
            "unsafe": unsafe_entries,
        })
    }

    pub(crate) fn to_text(&self) -> String {
        let mut text = if self.passed() {
            return format!("ok: the bundle matches sha256 {}\n", self.expected);
        } else if self.matches() {
            format!(
                "unsafe: the bundle's files match sha256 {}, but it is not safe to deploy\n",
                self.expected
            )
        } else {
            format!(
                "mismatch: expected sha256 {}, the bundle has {}\n",
                self.expected, self.actual
            )
        };
        for difference in &self.differences {
            text.push_str(&format!("{} {}\n", difference.kind(), difference.path()));
        }
        if self.only_the_manifest_is_named() {
            text.push_str(&format!(
                "(other files may differ too: {MANIFEST_PATH} is what names them)\n"
            ));
        }
        for (path, problem) in &self.unsafe_entries {
            text.push_str(&format!("unsafe {path}: {problem}\n"));
        }
        text
    }
}

/// Compares the bundle's files with the expected digest.
pub(crate) fn check(files: &BTreeMap<String, Vec<u8>>, expected: &str) -> Report {
    let actual = bundle_digest(files.iter().map(|(p, b)| (p.as_str(), b.as_slice())));
    let mut report = Report {
        expected: expected.to_ascii_lowercase(),
        actual,
        differences: Vec::new(),
        unsafe_entries: Vec::new(),
    };
    if report.matches() {
        return report;
    }
    let Some(manifest_bytes) = files.get(MANIFEST_PATH) else {
        report.differences = vec![Difference::Missing(MANIFEST_PATH.to_owned())];
        return report;
    };
    let manifest = std::str::from_utf8(manifest_bytes)
        .ok()
        .and_then(parse_manifest);
    let Some(manifest) = manifest else {
        report.differences = vec![Difference::Changed(MANIFEST_PATH.to_owned())];
        return report;
    };
    let others = hashes(
        files
            .iter()
            .filter(|(path, _)| path.as_str() != MANIFEST_PATH)
            .map(|(p, b)| (p.as_str(), b.as_slice())),
    );
    report.differences = compare(&manifest, &others);
    if report.differences.is_empty() {
        report.differences = vec![Difference::Changed(MANIFEST_PATH.to_owned())];
    }
    report
}

/// What makes a bundle unsafe to deploy read-only, whatever its bytes. Inside it (`inside`):
/// an entry that is not a plain file or directory (a symbolic link could point anywhere),
/// or whose name is not UTF-8; an entry a user other than its owner may change; one not
/// every user can read (an agent run by another user would then run without Relay, and say
/// nothing); and one owned by a user other than root and `euid`, who could change it. Above
/// it (`above`, the directories from the root down): one not every user may pass through,
/// and one another user could replace the bundle in (writable by others without the sticky
/// bit, or owned by a user other than root and `euid`). The directories above come first,
/// then the bundle's entries in byte order of the path.
pub(crate) fn unsafe_entries(
    inside: &[BundleEntry],
    above: &[BundleEntry],
    euid: u32,
) -> Vec<(String, String)> {
    let owner = |entry: &BundleEntry, what: &str| {
        (entry.uid != 0 && entry.uid != euid)
            .then(|| format!("owned by uid {}, who could {what}", entry.uid))
    };
    let mut found: Vec<(String, String)> = Vec::new();
    let mut report = |entry: &BundleEntry, problems: Vec<String>| {
        if !problems.is_empty() {
            found.push((entry.path.clone(), problems.join("; ")));
        }
    };
    for entry in above {
        let mut problems = Vec::new();
        if entry.mode & 0o001 == 0 {
            problems.push(format!(
                "not searchable by every user (mode {:04o}), so agents run by other users cannot reach the bundle",
                entry.mode
            ));
        }
        if entry.mode & 0o022 != 0 && entry.mode & 0o1000 == 0 {
            problems.push(format!(
                "writable by users other than its owner (mode {:04o}), who could replace the bundle",
                entry.mode
            ));
        }
        problems.extend(owner(entry, "replace the bundle"));
        report(entry, problems);
    }
    let mut inside: Vec<&BundleEntry> = inside.iter().collect();
    inside.sort_by(|a, b| a.path.cmp(&b.path));
    for entry in inside {
        let mut problems = Vec::new();
        if !matches!(entry.kind, EntryKind::File | EntryKind::Dir) {
            problems.push(format!(
                "{}, which a bundle never holds",
                entry.kind.describe()
            ));
        } else {
            let readable = if entry.kind == EntryKind::Dir {
                0o555
            } else {
                0o444
            };
            if entry.mode & 0o022 != 0 {
                problems.push(format!(
                    "writable by users other than its owner (mode {:04o})",
                    entry.mode
                ));
            }
            if entry.mode & readable != readable {
                problems.push(format!(
                    "not readable by every user (mode {:04o})",
                    entry.mode
                ));
            }
            problems.extend(owner(entry, "change it"));
        }
        if !entry.utf8 {
            problems.push("its name is not UTF-8".to_owned());
        }
        report(entry, problems);
    }
    found
}

/// Reads `dir`, prints the report, and says whether the bundle matches and is safe.
pub(crate) fn run(dir: &Path, expected: &str, json: bool) -> anyhow::Result<bool> {
    let walked = walk_bundle_dir(dir)
        .with_context(|| format!("reading the managed bundle {}", dir.display()))?;
    let above = ancestors_of(dir)
        .with_context(|| format!("reading the directories above {}", dir.display()))?;
    let mut report = check(&walked.files, expected);
    report.unsafe_entries = unsafe_entries(
        &walked.entries,
        &above,
        relay_identity::store::current_euid(),
    );
    let text = if json {
        format!("{}\n", report.to_json())
    } else {
        report.to_text()
    };
    crate::print_report(&text)?;
    Ok(report.passed())
}

#[cfg(test)]
mod tests;
