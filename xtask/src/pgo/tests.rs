use std::os::unix::fs::PermissionsExt as _;

use super::*;

#[test]
fn every_training_scenario_is_one_the_bench_knows() {
    let args: Vec<String> = TRAINING
        .iter()
        .flat_map(|name| ["--only".to_owned(), (*name).to_owned()])
        .collect();
    let training = bench::Options::training(&TRAINING);
    assert_eq!(bench::Options::parse(&args).unwrap().only, training.only);
    assert!(training.quick && !training.pgo && !training.unpinned);
}

#[test]
fn the_profile_flag_follows_the_callers_flags_and_a_path_with_spaces_stays_one_flag() {
    let callers = ["-Ctarget-cpu=x86-64-v2".to_owned()];
    assert_eq!(
        encoded_rustflags(&callers, "-Cprofile-use=/tmp/a b/relay.profdata"),
        "-Ctarget-cpu=x86-64-v2\x1f-Cprofile-use=/tmp/a b/relay.profdata"
    );
    assert_eq!(
        encoded_rustflags(&[], "-Cprofile-generate=/p"),
        "-Cprofile-generate=/p"
    );
}

#[test]
fn llvm_profdata_is_looked_for_in_the_toolchains_rustlib() {
    assert_eq!(
        profdata_path(
            Path::new("/home/u/.rustup/toolchains/stable-x86_64-unknown-linux-gnu"),
            "x86_64-unknown-linux-gnu"
        ),
        Path::new(
            "/home/u/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/lib/rustlib/x86_64-unknown-linux-gnu/bin/llvm-profdata"
        )
    );
}

#[test]
fn a_measured_directory_takes_relays_binaries_from_one_build_and_the_rest_from_the_other() {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let root = std::env::temp_dir().join(format!("xtask-pgo-{}-{nanos}", std::process::id()));
    let (relay, plain, out) = (root.join("relay"), root.join("plain"), root.join("out"));
    for dir in [&relay, &plain] {
        fs::create_dir_all(dir).unwrap();
    }
    let write = |path: PathBuf, text: &str, mode: u32| {
        fs::write(&path, text).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    };
    for binary in BINARIES {
        write(relay.join(binary), "optimised", 0o755);
        write(plain.join(binary), "plain", 0o755);
    }
    write(plain.join("relay-stand-in"), "stand-in", 0o755);
    write(plain.join("relayd.d"), "dependency list", 0o644);
    // What an earlier run left is replaced.
    fs::create_dir_all(&out).unwrap();
    fs::write(out.join("stale"), "").unwrap();

    with_binaries(&out, &relay, &plain).unwrap();

    for binary in BINARIES {
        assert_eq!(fs::read_to_string(out.join(binary)).unwrap(), "optimised");
    }
    assert_eq!(
        fs::read_to_string(out.join("relay-stand-in")).unwrap(),
        "stand-in"
    );
    assert!(!out.join("relayd.d").exists());
    assert!(!out.join("stale").exists());
    fs::remove_dir_all(&root).unwrap();
}
