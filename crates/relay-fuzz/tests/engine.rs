//! The mutation engine: panics are caught with their location, reproducers are minimized, and
//! a short run finds a planted bug reachable from its seed.

use std::time::Duration;

use relay_fuzz::engine::{Options, fuzz, minimize, run_one};

fn boom(data: &[u8]) {
    assert!(!data.windows(4).any(|w| w == b"boom"), "planted bug");
}

#[test]
fn a_panic_is_caught_with_its_location_and_message() {
    assert!(run_one(boom, b"quiet").is_ok());
    let panic = run_one(boom, b"a boom here").unwrap_err();
    assert!(panic.location.contains("tests/engine.rs"), "{panic:?}");
    assert_eq!(panic.message, "planted bug");
}

#[test]
fn a_reproducer_is_minimized_to_what_makes_it_panic() {
    let location = run_one(boom, b"xxxxxxxxboomyyyyyyyy").unwrap_err().location;
    assert_eq!(minimize(boom, b"xxxxxxxxboomyyyyyyyy", &location), b"boom");
}

#[test]
fn a_short_run_finds_a_planted_bug_next_to_its_seed_and_writes_it() {
    let out = std::env::temp_dir().join(format!("relay-fuzz-engine-{}", std::process::id()));
    let options = Options {
        duration: Duration::from_secs(2),
        seed: 7,
        out: out.clone(),
    };
    // One byte away from the seed: found in the first few thousand inputs.
    let report = fuzz("planted", boom, &[b"xxbo-omxx".to_vec()], &options).unwrap();
    assert_eq!(report.crashes.len(), 1, "{report:?}");
    let crash = &report.crashes[0];
    assert_eq!(std::fs::read(&crash.file).unwrap(), b"boom");
    assert!(crash.file.starts_with(out.join("planted")));
    std::fs::remove_dir_all(&out).unwrap();
}
