//! The command line of SPEC §2.1 and its validation.
//!
//! Parsing is clap's; the rules that tie flags together (a non-loopback bind needs an
//! advertised https origin, TLS needs an https origin, …) are [`Cli::daemon_settings`], a
//! pure function so every rule is tested without starting anything.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use relay_identity::{DaemonAddress, Scheme};
use relay_proxy::front::{Advertised, Mode};

/// The daemon that every coding-agent request and hook passes through.
#[derive(Debug, clap::Parser)]
#[command(name = "relayd", version)]
pub(crate) struct Cli {
    /// IPv4 address to listen on; a non-loopback one needs an https --advertise-address with
    /// --tls-cert and --tls-key, and another loopback one than 127.0.0.1 needs TLS too unless
    /// --advertise-address names the origin clients dial.
    #[arg(long, value_name = "IPV4", default_value = "127.0.0.1", value_parser = parse_bind)]
    pub(crate) bind: Ipv4Addr,

    /// TCP port to listen on (1-65535).
    #[arg(long, default_value_t = 47632, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) port: u16,

    /// The origin clients use, with scheme, host and explicit port, e.g.
    /// https://relay.example.com:8443 (https unless the host is loopback).
    #[arg(long, value_name = "URL")]
    pub(crate) advertise_address: Option<String>,

    /// PEM certificate chain for HTTPS (with --tls-key). Both files are read again every
    /// minute, and a renewed certificate is served to new connections without a restart.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,

    /// PEM private key for HTTPS (with --tls-cert): PKCS#8, or PKCS#1 or SEC1.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,

    /// Never use workers: forward every request straight to the provider.
    #[arg(long, conflicts_with = "require_worker")]
    pub(crate) pass_through: bool,

    /// Refuse (401/503) instead of passing through when no worker is ready.
    #[arg(long)]
    pub(crate) require_worker: bool,

    /// On a non-loopback bind, pass through requests without a bound credential instead of
    /// answering 401.
    #[arg(long)]
    pub(crate) allow_anonymous_pass_through: bool,

    /// Route credentials one machine identity may hold (1-64) [default: 4; also
    /// [daemon] max_tokens_per_identity and RELAY_DAEMON_MAX_TOKENS_PER_IDENTITY].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=64))]
    pub(crate) max_tokens_per_identity: Option<u8>,

    /// Read only this config.toml instead of the user and system files.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// Log level [default: info, or [daemon.logging] level, or RELAY_LOG].
    #[arg(long, value_name = "LEVEL", value_parser = ["error", "warn", "info", "debug", "trace"])]
    pub(crate) log_level: Option<String>,

    /// Log format on stderr [default: jsonl, or [daemon.logging] stderr_format, or
    /// RELAY_LOG_FORMAT].
    #[arg(long, value_name = "FORMAT", value_parser = ["human", "jsonl"])]
    pub(crate) log_format: Option<String>,

    /// The daemon's state directory, for `bindings` and `identity` run under another
    /// account [default: <base>/relay/daemon].
    #[arg(long, value_name = "DIR", global = true)]
    pub(crate) state_dir: Option<PathBuf>,

    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Write the read-only bundle that wires Claude Code, Codex and pi to this daemon, and
    /// print its SHA-256.
    ManagedBundle {
        /// Directory to create (or an empty one); an existing different bundle is never
        /// overwritten.
        #[arg(long, value_name = "DIR")]
        output: PathBuf,
        /// The daemon origin the agents use, e.g. http://127.0.0.1:47632.
        #[arg(long, value_name = "URL")]
        daemon_address: DaemonAddress,
        /// Where relay-mcp, relay-hook and relay-worker are installed on the target
        /// machines: absolute, outside home and temporary directories, no spaces or shell
        /// metacharacters.
        #[arg(long, value_name = "ABS DIR")]
        bin_dir: String,
        /// The operating system of the target machines (paths and executable names).
        #[arg(long, value_parser = ["linux", "macos", "windows"])]
        platform: String,
        /// An agent to wire; repeat for several.
        #[arg(long, value_parser = ["claude", "codex", "pi"], required = true)]
        agent: Vec<String>,
    },
    /// Persisted credential bindings of a running or stopped daemon.
    Bindings {
        #[command(subcommand)]
        command: BindingsCommand,
    },
    /// The daemon's signing identity.
    Identity {
        #[command(subcommand)]
        command: IdentityCommand,
    },
    /// Configuration.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum BindingsCommand {
    /// Print the bindings (fingerprint, digest prefix, last use, blocked); never a token.
    List,
    /// Remove every binding of a fingerprint, close its sessions and retire its worker.
    Revoke { fingerprint: String },
    /// Revoke and refuse the fingerprint until unblocked.
    Block { fingerprint: String },
    /// Accept a blocked fingerprint again.
    Unblock { fingerprint: String },
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum IdentityCommand {
    /// Print the daemon public key in the trust pin file format clients are provisioned with.
    ///
    /// The pin is for the origin clients dial: give the daemon's --advertise-address, or its
    /// --port and --tls-cert/--tls-key, before `identity show` when it runs with them.
    Show,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print the effective default config.toml.
    Defaults,
}

fn parse_bind(text: &str) -> Result<Ipv4Addr, String> {
    text.parse::<Ipv4Addr>()
        .map_err(|_| format!("{text:?} is not an IPv4 address (IPv6 is not supported)"))
}

/// The validated listener settings of a daemon run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DaemonSettings {
    pub(crate) bind: Ipv4Addr,
    pub(crate) port: u16,
    pub(crate) advertised: Advertised,
    pub(crate) tls: Option<(PathBuf, PathBuf)>,
    pub(crate) mode: Mode,
    pub(crate) allow_anonymous_pass_through: bool,
}

/// A flag combination §2.1 forbids, naming the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FlagError {
    #[error("--bind {0} is not loopback, so --advertise-address is required")]
    AdvertiseRequired(Ipv4Addr),
    #[error(
        "--bind {0}: clients reach a plain http daemon only at 127.0.0.1, so bind 127.0.0.1, or serve https there with --tls-cert and --tls-key"
    )]
    PlainHttpOnlyOn127(Ipv4Addr),
    /// The reason only: the address could carry a password in its user info.
    #[error("invalid value for '--advertise-address': {0}")]
    BadAdvertised(String),
    #[error("--advertise-address must be https when --tls-cert and --tls-key are given")]
    TlsNeedsHttps,
    #[error(
        "--advertise-address is https, so --tls-cert and --tls-key are required (relayd terminates TLS itself)"
    )]
    HttpsNeedsTls,
    #[error("--advertise-address must be https for a non-loopback host")]
    RemoteNeedsHttps,
    #[error(
        "--bind {0} is reachable from other machines, so relayd serves it only over https: give an https --advertise-address with --tls-cert and --tls-key"
    )]
    NetworkBindNeedsHttps(Ipv4Addr),
}

impl Cli {
    /// Parses the process's arguments; see [`Cli::from_args`].
    pub(crate) fn parse_args() -> Result<Cli, clap::Error> {
        Cli::from_args(std::env::args_os())
    }

    /// Parses a command line. Daemon flags and subcommands exclude each other, except
    /// `--state-dir`, which §2.1 places before `bindings` and `identity` (clap's
    /// `args_conflicts_with_subcommands` would refuse it there too), and the two flags that
    /// name the origin clients dial (the address, the port, and whether it has TLS), which
    /// `identity show` prints the pin for.
    pub(crate) fn from_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::parser::ValueSource;
        use clap::{CommandFactory as _, FromArgMatches as _};
        let mut command = Cli::command();
        let matches = command.try_get_matches_from_mut(args)?;
        if let Some((subcommand, _)) = matches.subcommand() {
            let allowed = |id: &str| {
                matches!(id, "state_dir" | "help" | "version")
                    || (subcommand == "identity"
                        && matches!(id, "advertise_address" | "port" | "tls_cert" | "tls_key"))
            };
            let conflict = command
                .get_arguments()
                .filter(|arg| !allowed(arg.get_id().as_str()))
                .find(|arg| {
                    matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine)
                });
            if let Some(arg) = conflict {
                let flag = arg.get_long().unwrap_or(arg.get_id().as_str()).to_owned();
                return Err(command.error(
                    clap::error::ErrorKind::ArgumentConflict,
                    format!("--{flag} cannot be used with the {subcommand} subcommand"),
                ));
            }
        }
        Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command))
    }

    /// The origin clients dial: `--advertise-address`, else the loopback bind and port,
    /// https when the daemon has TLS files. `serving` also checks the address against the
    /// TLS flags, which a daemon run needs and `identity show`, which only names the origin,
    /// does not.
    pub(crate) fn advertised(&self, serving: bool) -> Result<Advertised, FlagError> {
        let tls = self.tls_cert.is_some() && self.tls_key.is_some();
        let Some(text) = &self.advertise_address else {
            if !self.bind.is_loopback() {
                return Err(FlagError::AdvertiseRequired(self.bind));
            }
            // Clients dial plain http only at 127.0.0.1 (or localhost).
            if !tls && self.bind != Ipv4Addr::LOCALHOST {
                return Err(FlagError::PlainHttpOnlyOn127(self.bind));
            }
            return Ok(Advertised {
                https: tls,
                host: self.bind.to_string(),
                port: self.port,
            });
        };
        let address =
            DaemonAddress::parse(text).map_err(|e| FlagError::BadAdvertised(e.to_string()))?;
        let https = address.scheme() == Scheme::Https;
        if serving && tls && !https {
            return Err(FlagError::TlsNeedsHttps);
        }
        if serving && https && !tls {
            return Err(FlagError::HttpsNeedsTls);
        }
        if !address.is_loopback() && !https {
            return Err(FlagError::RemoteNeedsHttps);
        }
        // A loopback origin does not make a network listener private: route tokens and
        // registrations would cross the network in the clear.
        if !self.bind.is_loopback() && !https {
            return Err(FlagError::NetworkBindNeedsHttps(self.bind));
        }
        Ok(Advertised {
            https,
            host: address.host().to_ascii_lowercase(),
            port: address.port(),
        })
    }

    pub(crate) fn daemon_settings(&self) -> Result<DaemonSettings, FlagError> {
        let tls = self.tls_cert.clone().zip(self.tls_key.clone());
        let advertised = self.advertised(true)?;
        let mode = if self.pass_through {
            Mode::PassThrough
        } else if self.require_worker {
            Mode::RequireWorker
        } else {
            Mode::Managed
        };
        Ok(DaemonSettings {
            bind: self.bind,
            port: self.port,
            advertised,
            tls,
            mode,
            allow_anonymous_pass_through: self.allow_anonymous_pass_through,
        })
    }
}

/// The effective `max_tokens_per_identity`: flag > env > file (§2.1). An invalid value
/// from any source stops start-up.
pub(crate) fn max_tokens_per_identity(
    flag: Option<u8>,
    env: Option<&str>,
    file: u8,
) -> Result<u8, String> {
    // Checked even when the flag wins: a wrong setting left in the environment would
    // otherwise surface only once the flag is dropped.
    let env = match env.filter(|t| !t.trim().is_empty()) {
        None => None,
        Some(text) => match text.trim().parse::<u8>() {
            Ok(value) if (1..=64).contains(&value) => Some(value),
            _ => {
                return Err(format!(
                    "RELAY_DAEMON_MAX_TOKENS_PER_IDENTITY={text:?} must be between 1 and 64"
                ));
            }
        },
    };
    Ok(flag.or(env).unwrap_or(file))
}

#[cfg(test)]
mod tests;
