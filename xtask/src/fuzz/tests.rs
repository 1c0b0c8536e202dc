use super::*;

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn secs_seed_and_targets_are_read() {
    let parsed = parse_args(&args(&[
        "--secs",
        "60",
        "frame_decode",
        "--seed",
        "7",
        "origin",
    ]))
    .unwrap();
    assert_eq!(
        parsed,
        FuzzArgs {
            secs: 60,
            seed: Some(7),
            targets: vec!["frame_decode".to_owned(), "origin".to_owned()],
        }
    );
}

#[test]
fn secs_is_required_and_positive() {
    assert!(parse_args(&args(&["frame_decode"])).is_err());
    assert!(parse_args(&args(&["--secs", "0"])).is_err());
    assert!(parse_args(&args(&["--secs", "ten"])).is_err());
    assert!(parse_args(&args(&["--secs"])).is_err());
}

#[test]
fn unknown_flags_are_refused() {
    assert!(parse_args(&args(&["--secs", "1", "--jobs", "2"])).is_err());
}
