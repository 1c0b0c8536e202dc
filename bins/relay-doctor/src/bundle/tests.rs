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

fn entry(path: &str, kind: EntryKind, mode: u32, uid: u32) -> BundleEntry {
    BundleEntry {
        path: path.to_owned(),
        full: std::path::PathBuf::from("/opt/bundle").join(path),
        kind,
        utf8: true,
        mode,
        uid,
    }
}

#[test]
fn a_bundle_root_owns_and_everyone_reads_is_safe() {
    let entries = [
        entry(".", EntryKind::Dir, 0o755, 0),
        entry("pi", EntryKind::Dir, 0o555, 0),
        entry("pi/index.ts", EntryKind::File, 0o644, 0),
        entry("SHA256SUMS", EntryKind::File, 0o444, 1000),
    ];
    // uid 1000 runs the check: its own files are its to change anyway.
    let above = [
        entry("/", EntryKind::Dir, 0o755, 0),
        entry("/tmp", EntryKind::Dir, 0o1777, 0),
        entry("/tmp/deploy", EntryKind::Dir, 0o2755, 1000),
    ];
    assert_eq!(unsafe_entries(&entries, &above, 1000), Vec::new());
}

#[test]
fn what_another_user_could_change_or_not_read_is_unsafe() {
    let mut not_utf8 = entry("b\u{fffd}d", EntryKind::File, 0o644, 0);
    not_utf8.utf8 = false;
    let entries = [
        entry(".", EntryKind::Dir, 0o700, 0),
        entry("pi", EntryKind::Dir, 0o777, 0),
        entry("pi/index.ts", EntryKind::File, 0o666, 0),
        entry("pi/theirs.ts", EntryKind::File, 0o644, 65534),
        entry("pi/link.ts", EntryKind::Symlink, 0o777, 0),
        entry("pi/fifo", EntryKind::Special, 0o644, 0),
        not_utf8,
    ];
    let found = unsafe_entries(&entries, &[], 0);
    let expected: Vec<(String, String)> = [
        (".", "not readable by every user (mode 0700)"),
        ("b\u{fffd}d", "its name is not UTF-8"),
        ("pi", "writable by users other than its owner (mode 0777)"),
        ("pi/fifo", "a special file, which a bundle never holds"),
        (
            "pi/index.ts",
            "writable by users other than its owner (mode 0666)",
        ),
        ("pi/link.ts", "a symbolic link, which a bundle never holds"),
        ("pi/theirs.ts", "owned by uid 65534, who could change it"),
    ]
    .into_iter()
    .map(|(p, w)| (p.to_owned(), w.to_owned()))
    .collect();
    assert_eq!(found, expected);
}

#[test]
fn a_bundle_without_its_manifest_says_other_files_may_differ() {
    let (mut files, digest) = bundle();
    files.remove(MANIFEST_PATH);
    files.insert("b/two.toml".to_owned(), b"x = 2\n".to_vec());
    let text = check(&files, &digest).to_text();
    assert!(text.contains("missing SHA256SUMS\n"), "{text}");
    assert!(
        text.contains("(other files may differ too: SHA256SUMS is what names them)"),
        "{text}"
    );
}

/// Above the bundle: a directory other users cannot pass through hides it (a `umask 077`
/// parent), and one they may write in without the sticky bit, or own, lets them replace it.
#[test]
fn directories_above_that_hide_the_bundle_or_let_others_replace_it_are_unsafe() {
    let above = [
        entry("/", EntryKind::Dir, 0o755, 0),
        entry("/srv", EntryKind::Dir, 0o700, 0),
        entry("/srv/shared", EntryKind::Dir, 0o777, 0),
        entry("/srv/shared/ann", EntryKind::Dir, 0o755, 1000),
    ];
    let found = unsafe_entries(&[], &above, 0);
    let expected: Vec<(String, String)> = [
        (
            "/srv",
            "not searchable by every user (mode 0700), so agents run by other users cannot reach the bundle",
        ),
        (
            "/srv/shared",
            "writable by users other than its owner (mode 0777), who could replace the bundle",
        ),
        ("/srv/shared/ann", "owned by uid 1000, who could replace the bundle"),
    ]
    .into_iter()
    .map(|(p, w)| (p.to_owned(), w.to_owned()))
    .collect();
    assert_eq!(found, expected);
}
