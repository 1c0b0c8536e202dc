//! `relayd managed-bundle`: the harness wiring an administrator deploys read-only (SPEC §7.3,
//! §10.2).
//!
//! [`generate`] is a pure function from [`BundleOptions`] to the bundle's files, sorted by
//! path; [`check_bin_dir`] applies the rules for `--bin-dir`; [`write::write_bundle`] is the
//! thin shell that puts the files on disk without ever overwriting a different bundle. The
//! digest and the comparison live in `relay_identity::bundle`, which `relay-doctor` shares.

use relay_identity::DaemonAddress;
use relay_identity::bundle::{MANIFEST_PATH, bundle_digest, render_manifest};

mod render;
pub(crate) mod write;

/// The operating system a bundle is rendered for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Platform {
    Linux,
    Macos,
    Windows,
}

impl Platform {
    pub(crate) fn parse(text: &str) -> Option<Platform> {
        match text {
            "linux" => Some(Platform::Linux),
            "macos" => Some(Platform::Macos),
            "windows" => Some(Platform::Windows),
            _ => None,
        }
    }

    fn separator(self) -> char {
        if self == Platform::Windows { '\\' } else { '/' }
    }

    fn executable_suffix(self) -> &'static str {
        if self == Platform::Windows {
            ".exe"
        } else {
            ""
        }
    }
}

/// An agent whose wiring the bundle carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Agent {
    Claude,
    Codex,
    Pi,
}

impl Agent {
    pub(crate) fn parse(text: &str) -> Option<Agent> {
        match text {
            "claude" => Some(Agent::Claude),
            "codex" => Some(Agent::Codex),
            "pi" => Some(Agent::Pi),
            _ => None,
        }
    }
}

/// Everything a bundle depends on; nothing about the user, the run or the output folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BundleOptions {
    pub(crate) daemon_address: DaemonAddress,
    /// A bin directory that passed [`check_bin_dir`] (normalized: no trailing separator).
    pub(crate) bin_dir: BinDir,
    pub(crate) platform: Platform,
    pub(crate) agents: Vec<Agent>,
}

/// A checked `--bin-dir`, in the chosen platform's spelling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BinDir(String);

impl BinDir {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// One file of a bundle: its `/`-separated relative path and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BundleFile {
    pub(crate) path: String,
    pub(crate) bytes: Vec<u8>,
}

/// The files of the bundle for `options`, sorted by path bytes, the manifest
/// (`SHA256SUMS`) included.
pub(crate) fn generate(options: &BundleOptions) -> Vec<BundleFile> {
    let mut files = render::files(options);
    let manifest = render_manifest(files.iter().map(|f| (f.path.as_str(), f.bytes.as_slice())));
    files.push(BundleFile {
        path: MANIFEST_PATH.to_owned(),
        bytes: manifest.into_bytes(),
    });
    files.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    files.dedup_by(|a, b| a.path == b.path);
    files
}

/// The canonical SHA-256 of a bundle, as `relayd managed-bundle` prints it.
pub(crate) fn digest(files: &[BundleFile]) -> String {
    bundle_digest(files.iter().map(|f| (f.path.as_str(), f.bytes.as_slice())))
}

/// The environment values the `--bin-dir` rules look at besides the platform's fixed home
/// and temporary locations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BinDirEnv {
    /// The home directory of whoever runs the command (`HOME`, or `USERPROFILE` on Windows).
    pub(crate) home: Option<String>,
    /// The temporary directories named by `TMPDIR`, `TEMP` and `TMP`.
    pub(crate) temp: Vec<String>,
    /// Set only by Relay's own end-to-end tests through
    /// [`DANGEROUS_ALLOW_TEMP_BIN_DIR_ENV`]: lets the bin directory be a temporary one.
    pub(crate) dangerous_allow_temp: bool,
}

/// The environment variable, for Relay's end-to-end tests only, that lets `--bin-dir` lie in
/// a temporary directory (the tests install the binaries into one). A bundle pointing at a
/// temporary directory would run whatever any local user puts there, so production never
/// sets it; it relaxes no other rule.
pub(crate) const DANGEROUS_ALLOW_TEMP_BIN_DIR_ENV: &str =
    "RELAY_DANGEROUS_TEST_ONLY_ALLOW_TEMP_BIN_DIR";

/// A `--bin-dir` rule that was broken; the message names the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BinDirError {
    #[error("--bin-dir {0:?} must be an absolute path")]
    NotAbsolute(String),
    #[error("--bin-dir {0:?} must not contain spaces")]
    Space(String),
    #[error("--bin-dir {path:?} must not contain the shell metacharacter {character:?}")]
    ShellMetacharacter { path: String, character: char },
    #[error("--bin-dir {0:?} must not contain \".\" or \"..\" components or empty ones")]
    NotNormal(String),
    #[error(
        "--bin-dir {path:?} must be outside home directories (it is under {home}): every user runs these binaries"
    )]
    UnderHome { path: String, home: String },
    #[error(
        "--bin-dir {path:?} must be outside temporary directories (it is under {temp}): other users can write there"
    )]
    UnderTemp { path: String, temp: String },
}

/// Applies the rules for `--bin-dir` on `platform`: absolute, no spaces or shell
/// metacharacters, no `.`/`..`/empty components, outside home and temporary directories.
/// Returns the directory without a trailing separator (Windows paths with backslashes).
pub(crate) fn check_bin_dir(
    platform: Platform,
    text: &str,
    env: &BinDirEnv,
) -> Result<BinDir, BinDirError> {
    let owned = || text.to_owned();
    if text.chars().any(char::is_whitespace) {
        return Err(BinDirError::Space(owned()));
    }
    let windows = platform == Platform::Windows;
    let normalized = if windows {
        text.replace('/', "\\")
    } else {
        text.to_owned()
    };
    let (root, rest) = if windows {
        let bytes = normalized.as_bytes();
        let drive = bytes.len() >= 3
            && bytes[0].is_ascii_alphabetic()
            && bytes[1] == b':'
            && bytes[2] == b'\\';
        if !drive {
            return Err(BinDirError::NotAbsolute(owned()));
        }
        normalized.split_at(3)
    } else {
        if !normalized.starts_with('/') {
            return Err(BinDirError::NotAbsolute(owned()));
        }
        normalized.split_at(1)
    };
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+');
    let separator = platform.separator();
    if let Some(character) = rest.chars().find(|&c| c != separator && !allowed(c)) {
        return Err(BinDirError::ShellMetacharacter {
            path: owned(),
            character,
        });
    }
    let rest = rest.strip_suffix(separator).unwrap_or(rest);
    let components: Vec<&str> = if rest.is_empty() {
        Vec::new()
    } else {
        rest.split(separator).collect()
    };
    if components
        .iter()
        .any(|c| c.is_empty() || *c == "." || *c == "..")
    {
        return Err(BinDirError::NotNormal(owned()));
    }
    let path = format!("{root}{}", components.join(&separator.to_string()));

    let (homes, temps) = fixed_locations(platform);
    let mut homes: Vec<String> = homes.iter().map(|h| (*h).to_owned()).collect();
    let mut temps: Vec<String> = temps.iter().map(|t| (*t).to_owned()).collect();
    homes.extend(env.home.iter().filter(|h| !h.is_empty()).cloned());
    temps.extend(env.temp.iter().filter(|t| !t.is_empty()).cloned());
    let case_insensitive = platform != Platform::Linux;
    if let Some(home) = homes
        .iter()
        .find(|home| is_within(&path, home, separator, case_insensitive))
    {
        return Err(BinDirError::UnderHome {
            path,
            home: home.clone(),
        });
    }
    // Per-user application data is a home directory wherever it was moved to.
    if windows && components.iter().any(|c| c.eq_ignore_ascii_case("AppData")) {
        return Err(BinDirError::UnderHome {
            path,
            home: "AppData".to_owned(),
        });
    }
    let temp = temps
        .iter()
        .find(|temp| is_within(&path, temp, separator, case_insensitive));
    if let Some(temp) = temp.filter(|_| !env.dangerous_allow_temp) {
        return Err(BinDirError::UnderTemp {
            path,
            temp: temp.clone(),
        });
    }
    Ok(BinDir(path))
}

/// The home and temporary locations every machine of `platform` has.
fn fixed_locations(platform: Platform) -> (&'static [&'static str], &'static [&'static str]) {
    match platform {
        Platform::Linux => (
            &["/home", "/root"],
            &["/tmp", "/var/tmp", "/dev/shm", "/run/user"],
        ),
        Platform::Macos => (
            &["/Users", "/var/root", "/private/var/root"],
            &[
                "/tmp",
                "/private/tmp",
                "/var/tmp",
                "/private/var/tmp",
                "/var/folders",
                "/private/var/folders",
            ],
        ),
        Platform::Windows => (
            &["C:\\Users", "C:\\Documents"],
            &["C:\\Windows\\Temp", "C:\\Temp", "C:\\Tmp"],
        ),
    }
}

/// Whether `path` is `dir` or below it, comparing whole components.
fn is_within(path: &str, dir: &str, separator: char, case_insensitive: bool) -> bool {
    let normalize = |s: &str| {
        let s = if separator == '\\' {
            s.replace('/', "\\")
        } else {
            s.to_owned()
        };
        let s = s.trim_end_matches(separator).to_owned();
        if case_insensitive {
            s.to_ascii_lowercase()
        } else {
            s
        }
    };
    let (path, dir) = (normalize(path), normalize(dir));
    if dir.is_empty() {
        return false;
    }
    // On Windows the fixed locations say C:, but any drive letter has the same folders.
    let (path, dir) = if separator == '\\' && path.len() >= 2 && dir.len() >= 2 {
        (path[2..].to_owned(), dir[2..].to_owned())
    } else {
        (path, dir)
    };
    path == dir
        || path
            .strip_prefix(&dir)
            .is_some_and(|rest| rest.starts_with(separator))
}

/// `relayd managed-bundle`: validates, generates, writes, prints the digest. Exit 0 when
/// the bundle was written or was already there, 1 when a different one is in the way or
/// writing failed, 64 when a flag breaks a rule.
pub(crate) fn run(
    output: &std::path::Path,
    daemon_address: &DaemonAddress,
    bin_dir: &str,
    platform: &str,
    agents: &[String],
) -> std::process::ExitCode {
    use std::process::ExitCode;
    let Some(platform) = Platform::parse(platform) else {
        return relay_logging::usage_exit(
            "relayd",
            &format!("--platform {platform:?} is not linux, macos or windows"),
        );
    };
    let mut parsed = Vec::new();
    for agent in agents {
        match Agent::parse(agent) {
            Some(agent) => parsed.push(agent),
            None => {
                return relay_logging::usage_exit(
                    "relayd",
                    &format!("--agent {agent:?} is not claude, codex or pi"),
                );
            }
        }
    }
    let env = BinDirEnv::from_process(platform);
    let bin_dir = match check_bin_dir(platform, bin_dir, &env) {
        Ok(bin_dir) => bin_dir,
        Err(error) => return relay_logging::usage_exit("relayd", &error),
    };
    let options = BundleOptions {
        daemon_address: daemon_address.clone(),
        bin_dir,
        platform,
        agents: parsed,
    };
    let files = generate(&options);
    match write::write_bundle(output, &files) {
        Ok(_) => {
            for (dir, mode) in write::hidden_by(output) {
                relay_logging::say!(
                    "relayd: warning: {} is not searchable by every user (mode {mode:04o}): agents run by other users will not find the bundle",
                    dir.display()
                );
            }
            crate::print_stdout(&format!("{}\n", digest(&files)))
        }
        Err(error) => {
            relay_logging::say!("relayd: {error}");
            ExitCode::FAILURE
        }
    }
}

impl BinDirEnv {
    /// The values of this process's environment that the rules look at.
    fn from_process(platform: Platform) -> BinDirEnv {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let home = if platform == Platform::Windows {
            var("USERPROFILE")
        } else {
            var("HOME")
        };
        BinDirEnv {
            home,
            temp: ["TMPDIR", "TEMP", "TMP"]
                .iter()
                .filter_map(|n| var(n))
                .collect(),
            dangerous_allow_temp: var(DANGEROUS_ALLOW_TEMP_BIN_DIR_ENV).as_deref() == Some("1"),
        }
    }
}

#[cfg(test)]
mod tests;
