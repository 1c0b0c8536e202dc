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

/// Writes `node_modules/<package>/package.json` as npm would.
fn write_manifest(cache_dir: &Path, package: &str, version: &str) {
    let dir = cache_dir.join("node_modules").join(package);
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join("package.json"),
        format!(r#"{{"name":"{package}","version":"{version}"}}"#),
    )
    .unwrap();
}

#[test]
fn installed_clis_are_not_installed_again() {
    let cache_dir = scratch_dir("agent-clis");
    let bin_dir = cache_dir.join("node_modules").join(".bin");
    fs::create_dir_all(&bin_dir).unwrap();
    for name in AGENT_BINARIES {
        fs::write(bin_dir.join(name), "#!/bin/sh\n").unwrap();
    }
    for (package, version) in AGENT_PACKAGES {
        write_manifest(&cache_dir, package, version);
    }
    // With all three present at their pins, npm is never run, so this passes on a machine
    // without npm.
    let found = ensure_agent_clis(&cache_dir).unwrap();
    assert_eq!(found, bin_dir);
    fs::remove_dir_all(&cache_dir).unwrap();
}

#[test]
fn missing_binaries_are_named() {
    let cache_dir = scratch_dir("agent-clis-partial");
    let bin_dir = cache_dir.join("node_modules").join(".bin");
    fs::create_dir_all(&bin_dir).unwrap();
    assert_eq!(
        missing_binaries(&AGENT_BINARIES, &bin_dir),
        ["claude", "codex", "pi"]
    );
    fs::write(bin_dir.join("codex"), "").unwrap();
    fs::create_dir(bin_dir.join("pi")).unwrap();
    assert_eq!(
        missing_binaries(&AGENT_BINARIES, &bin_dir),
        ["claude", "pi"],
        "a directory is not an executable"
    );
    fs::remove_dir_all(&cache_dir).unwrap();
}

#[test]
fn packages_off_their_pin_are_stale() {
    let cache_dir = scratch_dir("agent-clis-versions");
    let [claude, codex, pi] = AGENT_PACKAGES;
    write_manifest(&cache_dir, claude.0, claude.1);
    write_manifest(&cache_dir, codex.0, "0.0.1");
    let stale = stale_packages(&AGENT_PACKAGES, &cache_dir);
    assert_eq!(
        stale,
        [
            format!("{} (installed 0.0.1, pinned {})", codex.0, codex.1),
            format!("{} (installed none, pinned {})", pi.0, pi.1),
        ]
    );
    write_manifest(&cache_dir, codex.0, codex.1);
    write_manifest(&cache_dir, pi.0, pi.1);
    assert!(stale_packages(&AGENT_PACKAGES, &cache_dir).is_empty());
    fs::remove_dir_all(&cache_dir).unwrap();
}

#[test]
fn pins_are_exact_versions() {
    for (package, version) in AGENT_PACKAGES.into_iter().chain(SDK_PACKAGES) {
        assert!(
            version.split('.').count() == 3
                && version.split('.').all(|part| part.parse::<u32>().is_ok()),
            "{package} must be pinned to an exact x.y.z version, not {version:?}"
        );
    }
}

#[test]
fn ip_is_found_in_path_before_the_sbin_directories() {
    let dir = scratch_dir("ip");
    fs::write(dir.join("ip"), "").unwrap();
    let path = std::env::join_paths([&dir]).unwrap();
    assert_eq!(find_ip(&path), Some(dir.join("ip")));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_directory_named_ip_is_not_the_ip_executable() {
    let dir = scratch_dir("ip-dir");
    fs::create_dir_all(dir.join("ip")).unwrap();
    let path = std::env::join_paths([&dir]).unwrap();
    assert_ne!(find_ip(&path), Some(dir.join("ip")));
    fs::remove_dir_all(&dir).unwrap();
}
