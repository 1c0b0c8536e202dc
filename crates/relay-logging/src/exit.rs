//! The exit conventions every Relay binary shares (SPEC §2): help and version print
//! normally and exit 0; any other usage or configuration error is one line on stderr,
//! naming the flag, file or key at fault, and exit status 64.

use std::fmt::Display;
use std::process::ExitCode;

/// Exit status for usage and configuration errors.
pub const EXIT_USAGE: u8 = 64;

/// Turns a clap error into the process's exit: help and version print and succeed; any
/// other error prints clap's first paragraph (which names the flag at fault) as one line.
/// A value the flag's parser refused is not repeated: clap would quote it, and an address
/// can carry a password in its user info.
pub fn clap_exit(binary: &str, error: &clap::Error) -> ExitCode {
    use clap::error::{ContextKind, ErrorKind};
    match error.kind() {
        // As for any command's output: a reader that has gone took what it wanted, and
        // any other failure to write is said on stderr.
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => match error.print() {
            Err(failed) if failed.kind() != std::io::ErrorKind::BrokenPipe => {
                crate::say!("{binary}: could not write the output to stdout: {failed}");
                ExitCode::FAILURE
            }
            _ => ExitCode::SUCCESS,
        },
        ErrorKind::ValueValidation => {
            let flag = error
                .get(ContextKind::InvalidArg)
                .map_or_else(|| "a flag".to_owned(), |arg| format!("'{arg}'"));
            match std::error::Error::source(error) {
                Some(why) => usage_exit(binary, &format!("invalid value for {flag}: {why}")),
                None => usage_exit(binary, &format!("invalid value for {flag}")),
            }
        }
        _ => usage_exit(binary, &first_paragraph(&error.render().to_string())),
    }
}

/// Prints `<binary>: <message>` as one line and returns status 64.
pub fn usage_exit(binary: &str, message: &dyn Display) -> ExitCode {
    let line = message.to_string().replace('\n', " ");
    crate::say!("{binary}: {line}");
    ExitCode::from(EXIT_USAGE)
}

fn first_paragraph(rendered: &str) -> String {
    let lines: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .skip_while(|line| line.is_empty())
        .take_while(|line| !line.is_empty())
        .collect();
    if lines.is_empty() {
        "invalid usage".to_owned()
    } else {
        lines.join(" ")
    }
}
