use super::*;

#[test]
fn the_archive_is_named_by_version_and_triple() {
    assert_eq!(
        archive_stem("0.1.0", "x86_64-unknown-linux-gnu"),
        "relay-0.1.0-x86_64-unknown-linux-gnu"
    );
}

#[test]
fn the_host_triple_comes_from_the_host_line() {
    let rustc = "rustc 1.95.0 (abc 2026-01-01)\nbinary: rustc\nhost: x86_64-unknown-linux-gnu\nrelease: 1.95.0\n";
    assert_eq!(host_triple(rustc), Some("x86_64-unknown-linux-gnu"));
    assert_eq!(host_triple("rustc 1.95.0\nhost: \n"), None);
    assert_eq!(host_triple(""), None);
}

#[test]
fn targets_come_only_from_target_flags() -> Result<()> {
    assert_eq!(parse_request(&[])?, Request::default());
    let args = [
        "--target",
        "aarch64-unknown-linux-gnu",
        "--target=x86_64-apple-darwin",
    ]
    .map(String::from);
    assert_eq!(
        parse_request(&args)?.targets,
        ["aarch64-unknown-linux-gnu", "x86_64-apple-darwin"]
    );
    assert!(parse_request(&["--target".to_owned()]).is_err());
    assert!(parse_request(&["--target=".to_owned()]).is_err());
    assert!(parse_request(&["--release".to_owned()]).is_err());
    Ok(())
}

#[test]
fn pgo_builds_the_hosts_binaries_only() -> Result<()> {
    assert_eq!(
        parse_request(&["--pgo".to_owned()])?,
        Request {
            targets: Vec::new(),
            pgo: true
        }
    );
    // The training run executes what it builds, so another target cannot be trained.
    let across = ["--pgo", "--target", "aarch64-unknown-linux-gnu"].map(String::from);
    assert!(parse_request(&across).is_err());
    Ok(())
}

#[test]
fn the_profile_is_release_unless_debug_is_asked_for() -> Result<()> {
    assert_eq!(Profile::from_env_value(None)?, Profile::Release);
    assert_eq!(Profile::from_env_value(Some(""))?, Profile::Release);
    assert_eq!(Profile::from_env_value(Some("release"))?, Profile::Release);
    assert_eq!(Profile::from_env_value(Some("debug"))?, Profile::Debug);
    assert!(Profile::from_env_value(Some("Debug")).is_err());
    Ok(())
}

/// The install script looks for exactly these binaries; a renamed binary must fail here.
#[test]
fn install_sh_installs_the_packaged_binaries() -> Result<()> {
    let script = fs::read_to_string(project_root()?.join("deploy/install.sh"))?;
    let line = script
        .lines()
        .find_map(|line| line.strip_prefix("BINARIES=\""))
        .context("install.sh has no BINARIES line")?;
    let listed: Vec<&str> = line.trim_end_matches('"').split(' ').collect();
    assert_eq!(listed, BINARIES);
    Ok(())
}

#[test]
fn uninstall_sh_removes_the_packaged_binaries() -> Result<()> {
    let script = fs::read_to_string(project_root()?.join("deploy/uninstall.sh"))?;
    let line = script
        .lines()
        .find_map(|line| line.strip_prefix("BINARIES=\""))
        .context("uninstall.sh has no BINARIES line")?;
    let listed: Vec<&str> = line.trim_end_matches('"').split(' ').collect();
    assert_eq!(listed, BINARIES);
    Ok(())
}
