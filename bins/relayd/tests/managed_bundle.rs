//! `relayd managed-bundle` against the built binary (SPEC §2.1, §10.2): stdout is only the
//! digest, the bytes do not depend on the output folder or the user, an existing bundle is
//! never overwritten, and `--bin-dir` rules exit 64 naming the rule.

#![allow(
    clippy::unwrap_used,
    reason = "test set-up helpers fail the test on error"
)]

use std::path::Path;
use std::process::{Command, Output};

use relay_identity::bundle::{bundle_digest, read_bundle_dir};

fn relayd(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_relayd"))
        .args(["managed-bundle"])
        .args(args)
        .env_clear()
        .env("HOME", home)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap()
}

/// A temporary directory every user may pass through, as a deployment's are: tempfile makes
/// them 0700, which relayd warns about.
fn readable_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    dir
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn args<'a>(output: &'a str, address: &'a str) -> Vec<&'a str> {
    vec![
        "--output",
        output,
        "--daemon-address",
        address,
        "--bin-dir",
        "/opt/relay/bin",
        "--platform",
        "linux",
        "--agent",
        "claude",
        "--agent",
        "codex",
        "--agent",
        "pi",
    ]
}

#[test]
fn stdout_is_the_digest_and_the_bytes_are_the_same_everywhere() {
    let dir = readable_tempdir();
    let (home_a, home_b) = (dir.path().join("ann"), dir.path().join("bob"));
    std::fs::create_dir_all(&home_a).unwrap();
    std::fs::create_dir_all(&home_b).unwrap();
    let out_a = dir.path().join("one/bundle");
    let out_b = dir.path().join("two/elsewhere");
    let a = relayd(
        &home_a,
        &args(out_a.to_str().unwrap(), "http://127.0.0.1:47632"),
    );
    let b = relayd(
        &home_b,
        &args(out_b.to_str().unwrap(), "http://localhost:47632"),
    );
    assert_eq!(a.status.code(), Some(0), "{a:?}");
    assert_eq!(b.status.code(), Some(0), "{b:?}");
    assert_eq!(text(&a.stderr), "");
    let digest = text(&a.stdout);
    assert_eq!(digest.len(), 65, "{digest:?}");
    assert!(digest.ends_with('\n'));
    assert_eq!(a.stdout, b.stdout);

    let files_a = read_bundle_dir(&out_a).unwrap();
    assert_eq!(files_a, read_bundle_dir(&out_b).unwrap());
    let recomputed = bundle_digest(files_a.iter().map(|(p, b)| (p.as_str(), b.as_slice())));
    assert_eq!(format!("{recomputed}\n"), digest);
    for (path, bytes) in &files_a {
        let content = text(bytes);
        for needle in [
            out_a.to_str().unwrap(),
            home_a.to_str().unwrap(),
            env!("CARGO_PKG_VERSION"),
        ] {
            assert!(!content.contains(needle), "{path} contains {needle}");
        }
    }

    // Again into the same folder: untouched, same digest, exit 0.
    let again = relayd(
        &home_a,
        &args(out_a.to_str().unwrap(), "http://127.0.0.1:47632"),
    );
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    assert_eq!(again.stdout, a.stdout);

    // Another daemon address into the same folder: refused, nothing changed.
    let other = relayd(
        &home_a,
        &args(out_a.to_str().unwrap(), "http://127.0.0.1:5000"),
    );
    assert_eq!(other.status.code(), Some(1), "{other:?}");
    assert_eq!(text(&other.stdout), "");
    let stderr = text(&other.stderr);
    assert!(stderr.contains("SHA256SUMS is changed"), "{stderr}");
    assert!(stderr.contains("never overwritten"), "{stderr}");
    assert_eq!(read_bundle_dir(&out_a).unwrap(), files_a);
}

#[test]
fn bin_dir_rules_exit_64_naming_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let output = dir.path().join("out");
    let home_bin = format!("{}/bin", home.display());
    let cases = [
        ("relay/bin", "must be an absolute path"),
        ("/opt/re lay", "must not contain spaces"),
        ("/opt/relay|x", "shell metacharacter"),
        ("/tmp/relay", "outside temporary directories"),
        (home_bin.as_str(), "outside home directories"),
    ];
    for (bin_dir, needle) in cases {
        let out = relayd(
            &home,
            &[
                "--output",
                output.to_str().unwrap(),
                "--daemon-address",
                "http://127.0.0.1:47632",
                "--bin-dir",
                bin_dir,
                "--platform",
                "linux",
                "--agent",
                "pi",
            ],
        );
        assert_eq!(out.status.code(), Some(64), "{bin_dir}: {out:?}");
        let stderr = text(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("relayd: --bin-dir "), "{stderr}");
        assert!(stderr.contains(needle), "{bin_dir}: {stderr}");
        assert!(!output.exists(), "nothing is written on a refusal");
    }
}

/// `relayd managed-bundle` run under `umask 077`, with `args` after the subcommand.
fn relayd_under_umask_077(home: &Path, args: &[&str]) -> Output {
    Command::new("/bin/sh")
        .arg("-c")
        .arg("umask 077 && exec \"$0\" managed-bundle \"$@\"")
        .arg(env!("CARGO_BIN_EXE_relayd"))
        .args(args)
        .env_clear()
        .env("HOME", home)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap()
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Every user must read the bundle, whatever the administrator's umask: the directories
/// relayd makes above it, and everything inside, are 0755 and 0644. Otherwise an agent run
/// by another user goes without Relay, and says nothing.
#[test]
fn every_user_can_read_the_bundle_whatever_the_umask() {
    let dir = readable_tempdir();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let fresh = dir.path().join("new/parents/bundle");
    let out = relayd_under_umask_077(
        &home,
        &args(fresh.to_str().unwrap(), "http://127.0.0.1:47632"),
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stderr), "");
    for path in [
        dir.path().join("new"),
        dir.path().join("new/parents"),
        fresh.clone(),
    ] {
        assert_eq!(mode(&path), 0o755, "{}", path.display());
    }
    assert_eq!(mode(&fresh.join("pi/extension-v1")), 0o755);
    assert_eq!(mode(&fresh.join("pi/extension-v1/index.ts")), 0o644);

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::set_permissions(&empty, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let out = relayd_under_umask_077(
        &home,
        &args(empty.to_str().unwrap(), "http://127.0.0.1:47632"),
    );
    // An existing directory is its owner's (a group may share it; it may not be relayd's
    // to change): relayd fills it, keeps its mode, and says that other users cannot reach
    // the bundle through it.
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(mode(&empty), 0o700);
    let warning = text(&out.stderr);
    assert!(
        warning.starts_with(&format!(
            "relayd: warning: {} is not searchable by every user (mode 0700)",
            empty.display()
        )),
        "{warning}"
    );
    assert_eq!(text(&out.stdout).len(), 65);
}

/// A fixed path that is a symbolic link to the bundle (a versioned deployment) is judged
/// by the directory it points at: the same bundle is left alone, exit 0.
#[test]
fn a_link_to_the_same_bundle_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let versioned = dir.path().join("bundle-v1");
    let first = relayd(
        &home,
        &args(versioned.to_str().unwrap(), "http://127.0.0.1:47632"),
    );
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let link = dir.path().join("current");
    std::os::unix::fs::symlink(&versioned, &link).unwrap();
    let again = relayd(
        &home,
        &args(link.to_str().unwrap(), "http://127.0.0.1:47632"),
    );
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    assert_eq!(text(&again.stdout), text(&first.stdout));
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
}
