use std::collections::BTreeMap;

use relay_identity::bundle::{bundle_digest, render_manifest};

use super::*;

/// A small bundle with its manifest, and its digest.
fn bundle() -> (BTreeMap<String, Vec<u8>>, String) {
    let mut files: BTreeMap<String, Vec<u8>> = [
        ("a/one.json", b"{}".to_vec()),
        ("b/two.toml", b"x = 1\n".to_vec()),
        ("c/three.ts", b"export {}\n".to_vec()),
    ]
    .into_iter()
    .map(|(p, b)| (p.to_owned(), b))
    .collect();
    let manifest = render_manifest(files.iter().map(|(p, b)| (p.as_str(), b.as_slice())));
    files.insert(MANIFEST_PATH.to_owned(), manifest.into_bytes());
    let digest = bundle_digest(files.iter().map(|(p, b)| (p.as_str(), b.as_slice())));
    (files, digest)
}

#[test]
fn an_intact_bundle_matches() {
    let (files, digest) = bundle();
    let report = check(&files, &digest.to_ascii_uppercase());
    assert!(report.matches());
    assert!(report.differences.is_empty());
    assert_eq!(report.to_json()["ok"], true);
}

#[test]
fn missing_extra_and_changed_files_are_each_named() {
    let (mut files, digest) = bundle();
    files.remove("a/one.json");
    files.insert("b/two.toml".to_owned(), b"x = 2\n".to_vec());
    files.insert("d/new.sh".to_owned(), b"rm -rf /".to_vec());
    let report = check(&files, &digest);
    assert!(!report.matches());
    assert_eq!(
        report.differences,
        vec![
            Difference::Missing("a/one.json".into()),
            Difference::Changed("b/two.toml".into()),
            Difference::Extra("d/new.sh".into()),
        ]
    );
    let json = report.to_json();
    assert_eq!(json["missing"], serde_json::json!(["a/one.json"]));
    assert_eq!(json["changed"], serde_json::json!(["b/two.toml"]));
    assert_eq!(json["extra"], serde_json::json!(["d/new.sh"]));
    let text = report.to_text();
    assert!(text.contains("missing a/one.json\n"), "{text}");
    assert!(text.contains("changed b/two.toml\n"), "{text}");
    assert!(text.contains("extra d/new.sh\n"), "{text}");
}

#[test]
fn a_file_changed_together_with_the_manifest_is_still_caught() {
    // An attacker who edits a file and the manifest to match cannot hide from the digest.
    let (mut files, digest) = bundle();
    files.insert("c/three.ts".to_owned(), b"evil()\n".to_vec());
    files.remove(MANIFEST_PATH);
    let manifest = render_manifest(files.iter().map(|(p, b)| (p.as_str(), b.as_slice())));
    files.insert(MANIFEST_PATH.to_owned(), manifest.into_bytes());
    let report = check(&files, &digest);
    assert!(!report.matches());
    assert_eq!(
        report.differences,
        vec![Difference::Changed(MANIFEST_PATH.into())]
    );
}

#[test]
fn a_missing_or_garbled_manifest_is_named() {
    let (mut files, digest) = bundle();
    files.insert(MANIFEST_PATH.to_owned(), b"garbage".to_vec());
    assert_eq!(
        check(&files, &digest).differences,
        vec![Difference::Changed(MANIFEST_PATH.into())]
    );
    files.remove(MANIFEST_PATH);
    assert_eq!(
        check(&files, &digest).differences,
        vec![Difference::Missing(MANIFEST_PATH.into())]
    );
}
