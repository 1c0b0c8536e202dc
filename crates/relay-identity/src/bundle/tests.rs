use std::collections::BTreeMap;

use super::*;

#[test]
fn digest_follows_the_canonical_framing() {
    // Computed by hand: SHA-256 of u64be(1) "a" u64be(2) "xy".
    let mut framed = Vec::new();
    framed.extend_from_slice(&1u64.to_be_bytes());
    framed.extend_from_slice(b"a");
    framed.extend_from_slice(&2u64.to_be_bytes());
    framed.extend_from_slice(b"xy");
    assert_eq!(
        bundle_digest([("a", b"xy".as_slice())]),
        file_sha256(&framed)
    );
    assert_eq!(
        bundle_digest([]),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}

#[test]
fn digest_sorts_by_path_bytes_and_separates_path_from_content() {
    let one = bundle_digest([("b", b"1".as_slice()), ("a/c", b"2".as_slice())]);
    let other = bundle_digest([("a/c", b"2".as_slice()), ("b", b"1".as_slice())]);
    assert_eq!(one, other);
    // Moving a byte from the path into the content changes the digest.
    assert_ne!(
        bundle_digest([("ab", b"c".as_slice())]),
        bundle_digest([("a", b"bc".as_slice())])
    );
}

#[test]
fn manifest_round_trips_and_rejects_garbage() {
    let text = render_manifest([("z", b"1".as_slice()), ("a/b", b"".as_slice())]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0].ends_with("  a/b"), "{text}");
    let parsed = parse_manifest(&text).unwrap();
    assert_eq!(
        parsed,
        hashes([("z", b"1".as_slice()), ("a/b", b"".as_slice())])
    );
    assert_eq!(parse_manifest("nothex  a\n"), None);
    assert_eq!(parse_manifest(&format!("{}  \n", "0".repeat(64))), None);
}

#[test]
fn compare_reports_missing_extra_and_changed_in_path_order() {
    let expected: BTreeMap<String, String> = hashes([
        ("a", b"1".as_slice()),
        ("b", b"2".as_slice()),
        ("c", b"3".as_slice()),
    ]);
    let actual = hashes([
        ("b", b"two".as_slice()),
        ("c", b"3".as_slice()),
        ("d", b"4".as_slice()),
    ]);
    assert_eq!(
        compare(&expected, &actual),
        vec![
            Difference::Missing("a".into()),
            Difference::Changed("b".into()),
            Difference::Extra("d".into()),
        ]
    );
    assert!(compare(&expected, &expected).is_empty());
}

#[test]
fn read_bundle_dir_reads_nested_files_and_refuses_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("x/y")).unwrap();
    std::fs::write(dir.path().join("x/y/f"), b"deep").unwrap();
    std::fs::write(dir.path().join("top"), b"t").unwrap();
    let files = read_bundle_dir(dir.path()).unwrap();
    let paths: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(paths, ["top", "x/y/f"]);
    assert_eq!(files["x/y/f"], b"deep");

    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("x/link")).unwrap();
    let error = read_bundle_dir(dir.path()).unwrap_err();
    assert!(
        matches!(error, BundleReadError::NotRegular { .. }),
        "{error}"
    );
}
