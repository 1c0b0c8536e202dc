//! `relayd`: the daemon every model request and hook event of a coding agent passes
//! through (SPEC §2.1). This binary parses and validates its command line, reads its
//! configuration, and composes the server from `relay-proxy`.

use std::process::ExitCode;

mod admin;
mod bundle;
mod cli;
mod daemon;

/// jemalloc, because it returns the memory of a load that has passed to the system (glibc
/// kept the heap of 1,000 closed streams: 64 MiB against 17 MiB after load), at the same CPU
/// per request and about 6 KiB more per open stream.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = match cli::Cli::parse_args() {
        Ok(cli) => cli,
        Err(error) => return relay_logging::clap_exit("relayd", &error),
    };
    match &cli.command {
        None => daemon::run(&cli),
        Some(cli::Command::Config {
            command: cli::ConfigCommand::Defaults,
        }) => print_stdout(&relay_proxy::config::Config::defaults_toml()),
        Some(cli::Command::Identity {
            command: cli::IdentityCommand::Show,
        }) => daemon::identity_show(&cli),
        Some(cli::Command::Bindings { command }) => admin::run(cli.state_dir.as_deref(), command),
        Some(cli::Command::ManagedBundle {
            output,
            daemon_address,
            bin_dir,
            platform,
            agent,
        }) => bundle::run(output, daemon_address, bin_dir, platform, agent),
    }
}

/// Prints a command's output and gives the command's exit status: success, or failure
/// said on stderr when stdout could not take it.
pub(crate) fn print_stdout(text: &str) -> ExitCode {
    match relay_logging::print_out(text) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            relay_logging::say!("relayd: could not write the output to stdout: {error}");
            ExitCode::FAILURE
        }
    }
}
