use std::{fs, time::SystemTime};

use super::*;

/// A fresh directory under the system temp dir, removed by the caller.
fn scratch_dir(label: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("xtask-{label}-{}-{nanos}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn installed_clis_are_not_installed_again() {
    let cache_dir = scratch_dir("agent-clis");
    let bin_dir = cache_dir.join("node_modules").join(".bin");
    fs::create_dir_all(&bin_dir).unwrap();
    for name in AGENT_BINARIES {
        fs::write(bin_dir.join(name), "#!/bin/sh\n").unwrap();
    }
    // With all three present, npm is never run, so this passes on a machine without npm.
    let found = ensure_agent_clis(&cache_dir).unwrap();
    assert_eq!(found, bin_dir);
    fs::remove_dir_all(&cache_dir).unwrap();
}

#[test]
fn missing_binaries_are_named() {
    let cache_dir = scratch_dir("agent-clis-partial");
    let bin_dir = cache_dir.join("node_modules").join(".bin");
    fs::create_dir_all(&bin_dir).unwrap();
    assert_eq!(missing_binaries(&bin_dir), ["claude", "codex", "pi"]);
    fs::write(bin_dir.join("codex"), "").unwrap();
    fs::create_dir(bin_dir.join("pi")).unwrap();
    assert_eq!(
        missing_binaries(&bin_dir),
        ["claude", "pi"],
        "a directory is not an executable"
    );
    fs::remove_dir_all(&cache_dir).unwrap();
}
