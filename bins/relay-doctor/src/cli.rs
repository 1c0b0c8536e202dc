//! The command line of SPEC §2.5.

use std::path::PathBuf;

use relay_identity::DaemonAddress;

/// Checks this machine-user's Relay set-up. With no option: the environment report (one line
/// per check: ok, warn, fail or skip, with the next step to take). Never prints a token or key.
#[derive(Debug, clap::Parser)]
#[command(name = "relay-doctor", version, args_conflicts_with_subcommands = true)]
pub(crate) struct Cli {
    /// Print the result as JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,

    /// Check a deployed managed bundle offline against its SHA-256, listing missing, extra
    /// and changed files; changes nothing.
    #[arg(
        long,
        value_name = "DIR",
        requires = "managed_bundle_sha256",
        conflicts_with = "live"
    )]
    pub(crate) managed_bundle: Option<PathBuf>,

    /// The canonical SHA-256 the managed bundle must have (64 hex digits).
    #[arg(long, value_name = "HEX", requires = "managed_bundle", value_parser = parse_sha256)]
    pub(crate) managed_bundle_sha256: Option<String>,

    /// Prove worker-backed operation for this user against a running daemon: it answers,
    /// its signing key matches this user's pin, this user's route goes to a worker, and that
    /// worker is ready with control available. Without this flag (and without
    /// --managed-bundle) the doctor reports on this machine's set-up instead: state
    /// directory, route token, harness headers, pins, config.toml, plugins.toml, CA files
    /// and proxy variables. Exit status 0 when no check fails, 1 when one does.
    #[arg(long, requires = "daemon_address")]
    pub(crate) live: bool,

    /// The daemon origin to check with --live, e.g. http://127.0.0.1:47632.
    #[arg(long, value_name = "URL", requires = "live")]
    pub(crate) daemon_address: Option<DaemonAddress>,

    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// The per-user route token file.
    #[command(subcommand_required = true, arg_required_else_help = false)]
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum TokenCommand {
    /// Create <base>/relay/.client-token if there is none; never prints the token.
    Ensure {
        /// Print {"outcome":"created"|"existing","path":...} instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn parse_sha256(text: &str) -> Result<String, String> {
    if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(text.to_ascii_lowercase())
    } else {
        Err("expected 64 hex digits".to_owned())
    }
}
