//! `relay-doctor --managed-bundle DIR --managed-bundle-sha256 HEX`: checks a deployed bundle
//! offline against the digest `relayd managed-bundle` printed, and changes nothing.
//!
//! [`check`] is pure: from the files read and the expected digest to a [`Report`]. Which
//! files differ comes from the bundle's own manifest (`SHA256SUMS`); when the files agree
//! with it but the digest does not, the manifest itself is the changed file.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context as _;
use relay_identity::bundle::{
    Difference, MANIFEST_PATH, bundle_digest, compare, hashes, parse_manifest, read_bundle_dir,
};

/// The outcome of a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Report {
    pub(crate) expected: String,
    pub(crate) actual: String,
    /// Empty exactly when the digests match.
    pub(crate) differences: Vec<Difference>,
}

impl Report {
    pub(crate) fn matches(&self) -> bool {
        self.expected == self.actual
    }

    fn paths(&self, kind: &str) -> Vec<&str> {
        self.differences
            .iter()
            .filter(|d| d.kind() == kind)
            .map(Difference::path)
            .collect()
    }

    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "ok": self.matches(),
            "expected_sha256": self.expected,
            "actual_sha256": self.actual,
            "missing": self.paths("missing"),
            "extra": self.paths("extra"),
            "changed": self.paths("changed"),
        })
    }

    pub(crate) fn to_text(&self) -> String {
        if self.matches() {
            return format!("ok: the bundle matches sha256 {}\n", self.expected);
        }
        let mut text = format!(
            "mismatch: expected sha256 {}, the bundle has {}\n",
            self.expected, self.actual
        );
        for difference in &self.differences {
            text.push_str(&format!("{} {}\n", difference.kind(), difference.path()));
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

/// Reads `dir`, prints the report, and says whether the bundle matches.
pub(crate) fn run(dir: &Path, expected: &str, json: bool) -> anyhow::Result<bool> {
    let files = read_bundle_dir(dir)
        .with_context(|| format!("reading the managed bundle {}", dir.display()))?;
    let report = check(&files, expected);
    let text = if json {
        format!("{}\n", report.to_json())
    } else {
        report.to_text()
    };
    crate::print_report(&text)?;
    Ok(report.matches())
}

#[cfg(test)]
mod tests;
