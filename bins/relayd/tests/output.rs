//! What relayd's commands do when their stdout cannot take their output: a reader that has
//! gone (`relayd config defaults | head -1`) ends the command quietly, and any other failure
//! (a full disk) is said on stderr with a non-zero exit, never a panic.

#![allow(
    clippy::unwrap_used,
    reason = "test set-up helpers fail the test on error"
)]

use std::process::{Command, Output, Stdio};

fn config_defaults(stdout: Stdio) -> Output {
    Command::new(env!("CARGO_BIN_EXE_relayd"))
        .args(["config", "defaults"])
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn output_to_a_full_disk_fails_with_a_line_on_stderr() {
    let full = std::fs::File::options()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let output = config_defaults(Stdio::from(full));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "stderr: {stderr}");
    assert_eq!(
        stderr.trim_end(),
        "relayd: could not write the output to stdout: No space left on device (os error 28)"
    );
}

#[test]
fn output_to_a_pipe_whose_reader_has_gone_ends_quietly() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = config_defaults(Stdio::from(writer));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(stderr, "");
}

/// clap's own output (`--help`, `--version`) follows the same rule.
#[test]
fn help_to_a_full_disk_fails_with_a_line_on_stderr() {
    for flag in ["--help", "--version"] {
        let full = std::fs::File::options()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_relayd"))
            .arg(flag)
            .stdout(Stdio::from(full))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{flag}: {stderr}");
        assert!(
            stderr.starts_with("relayd: could not write the output to stdout: "),
            "{flag}: {stderr}"
        );
    }
}
