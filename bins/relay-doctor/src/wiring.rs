//! What an agent's configuration files say about Relay, read as the agent reads them: the
//! `relay-hook` command of each hook event, the `relay-mcp` servers, the daemon address
//! each names, and what is wrong with them against what the managed bundle wires.
//!
//! Finding the word `relay-hook` in a file is not enough: a file that no longer parses, a
//! hook event left out, a blocking event switched to `--fail-open`, a binary that is not
//! there or hooks that name another daemon all look installed and leave a gap.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use relay_identity::bundle::BLOCKING_HOOK_EVENTS;
use relay_identity::{Env, names, store};
use serde_json::Value;

/// Larger files are not read for Relay's entries.
const MAX_AGENT_FILE_BYTES: u64 = 1024 * 1024;

/// One agent file as its agent would load it.
pub(crate) struct AgentFile {
    pub(crate) path: PathBuf,
    /// The parsed file; `None` when it is missing, unreadable or does not parse.
    pub(crate) value: Option<Value>,
    /// Why a file that names a Relay binary cannot be used: it does not parse, and the
    /// agent skips it whole.
    pub(crate) problem: Option<String>,
    /// Whether the file's bytes name `relay-hook` or `relay-mcp`.
    pub(crate) names_relay: bool,
}

impl AgentFile {
    /// Reads `path` (symbolic links followed, as the agents follow them) as JSON, or as TOML
    /// when its name ends in `.toml`.
    pub(crate) fn load(path: &Path) -> AgentFile {
        let mut file = AgentFile {
            path: path.to_owned(),
            value: None,
            problem: None,
            names_relay: false,
        };
        // A file far too large to be one of Relay's is passed over. One this user may not
        // read is a problem whoever's it is: the agent, run by this user, cannot read it
        // either, and runs without what it holds.
        let bytes = match read(path) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return file,
            Err(err) => {
                file.problem = Some(format!(
                    "{} cannot be read by this user ({err}), so the agent runs without it: keep it readable by every user (0644)",
                    display(path)
                ));
                return file;
            }
        };
        file.names_relay = contains(&bytes, b"relay-hook") || contains(&bytes, b"relay-mcp");
        let parsed = if path.extension().is_some_and(|ext| ext == "toml") {
            std::str::from_utf8(&bytes)
                .map_err(|_| "is not UTF-8".to_owned())
                .and_then(|text| {
                    toml::from_str::<toml::Value>(text).map_err(|err| {
                        format!("is not valid TOML ({})", first_line(&err.to_string()))
                    })
                })
                .and_then(|value| serde_json::to_value(value).map_err(|err| err.to_string()))
        } else {
            serde_json::from_slice::<Value>(&bytes)
                .map_err(|err| format!("is not valid JSON ({err})"))
        };
        match parsed {
            Ok(value) => file.value = Some(value),
            // Another tool's broken file is not Relay's to report.
            Err(problem) if file.names_relay => {
                file.problem = Some(format!("{} {problem}", self::display(path)));
            }
            Err(_) => {}
        }
        file
    }
}

/// A regular file's bytes, at most [`MAX_AGENT_FILE_BYTES`]; `None` when there is none, or
/// not a regular file, or a larger one; an error only when this user may not read it.
/// Symbolic links are followed, as the agents follow them; a FIFO is not waited on.
pub(crate) fn read(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let opened = fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path);
    let mut opened = match opened {
        Ok(opened) => opened,
        Err(err) if err.kind() == std::io::ErrorKind::PermissionDenied => return Err(err),
        Err(_) => return Ok(None),
    };
    if !opened.metadata().is_ok_and(|meta| meta.is_file()) {
        return Ok(None);
    }
    let bytes = store::read_bounded(&mut opened, MAX_AGENT_FILE_BYTES)?;
    Ok((bytes.len() as u64 <= MAX_AGENT_FILE_BYTES).then_some(bytes))
}

pub(crate) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default().trim()
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

/// One hook command that runs `relay-hook`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HookCommand {
    pub(crate) program: String,
    /// The agent it speaks for (`claude`, `codex`), its first argument.
    pub(crate) agent: Option<String>,
    pub(crate) fail_open: bool,
    pub(crate) daemon_address: Option<String>,
}

/// A configured MCP server that runs `relay-mcp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Server {
    pub(crate) program: String,
    pub(crate) daemon_address: Option<String>,
}

/// Relay's entries in one agent's files.
#[derive(Debug, Default)]
pub(crate) struct Wiring {
    /// Hook event → the `relay-hook` commands it runs.
    pub(crate) hooks: BTreeMap<String, Vec<HookCommand>>,
    pub(crate) servers: Vec<Server>,
    /// The model base URLs the files point at the daemon: Claude Code's
    /// `env.ANTHROPIC_BASE_URL`, Codex's `model_providers.relay.base_url` (without `/v1`).
    pub(crate) base_urls: Vec<String>,
}

impl Wiring {
    /// Adds the `relay-hook` commands of a file's `hooks` table (`hooks.<Event>[].hooks[]
    /// .command`, the shape Claude Code's settings and Codex's `hooks.json` and inline
    /// `[hooks]` tables share) and the `relay-mcp` servers of its `servers_key` table.
    pub(crate) fn add(&mut self, value: &Value, servers_key: &str) {
        if let Some(events) = value.get("hooks").and_then(Value::as_object) {
            for (event, groups) in events {
                let commands = groups
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|group| group.get("hooks").and_then(Value::as_array))
                    .flatten()
                    .filter_map(|handler| handler.get("command").and_then(Value::as_str))
                    .filter_map(hook_command);
                for command in commands {
                    self.hooks.entry(event.clone()).or_default().push(command);
                }
            }
        }
        let base_urls = [
            value.pointer("/env/ANTHROPIC_BASE_URL"),
            value.pointer("/model_providers/relay/base_url"),
        ];
        for url in base_urls.into_iter().flatten().filter_map(Value::as_str) {
            let url = url.trim_end_matches('/');
            self.base_urls
                .push(url.strip_suffix("/v1").unwrap_or(url).to_owned());
        }
        if let Some(servers) = value.get(servers_key).and_then(Value::as_object) {
            for (name, server) in servers {
                let Some(program) = server.get("command").and_then(Value::as_str) else {
                    continue;
                };
                // The bundle names its server `relay`: whatever that one runs is judged.
                if !is_named(program, "relay-mcp") && name != "relay" {
                    continue;
                }
                let args: Vec<&str> = server
                    .get("args")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                self.servers.push(Server {
                    program: program.to_owned(),
                    daemon_address: daemon_address(&args),
                });
            }
        }
    }

    pub(crate) fn has_hooks(&self) -> bool {
        !self.hooks.is_empty()
    }

    /// How many `relay-hook` commands, over every event.
    pub(crate) fn hook_count(&self) -> usize {
        self.hooks.values().map(Vec::len).sum()
    }

    /// What is wrong with the hooks against the events the bundle wires for `agent`.
    pub(crate) fn hook_problems(&self, agent: &str, events: &[(&str, bool)]) -> Vec<String> {
        let mut problems = Vec::new();
        let missing: Vec<&str> = events
            .iter()
            .map(|&(event, _)| event)
            .filter(|event| !self.hooks.contains_key(*event))
            .collect();
        if !missing.is_empty() {
            problems.push(format!(
                "no Relay hook for {}: those events never reach Relay",
                missing.join(", ")
            ));
        }
        let other_agent: BTreeSet<&str> = self
            .commands()
            .filter(|(_, command)| command.agent.as_deref() != Some(agent))
            .map(|(event, _)| event)
            .collect();
        if !other_agent.is_empty() {
            problems.push(format!(
                "the hook of {} does not run `relay-hook {agent}`: the daemon would read the event as another agent's",
                join(&other_agent)
            ));
        }
        let fail_open: BTreeSet<&str> = self
            .commands()
            .filter(|(event, command)| command.fail_open && BLOCKING_HOOK_EVENTS.contains(event))
            .map(|(event, _)| event)
            .collect();
        if !fail_open.is_empty() {
            problems.push(format!(
                "the hook of {} runs with --fail-open: while the daemon cannot be asked, what policy would refuse goes ahead",
                join(&fail_open)
            ));
        }
        problems
    }

    /// Binaries that are not there, and daemon addresses that disagree (among the hooks,
    /// the servers, the files' base URLs and `base_url`, one the environment sets).
    pub(crate) fn install_problems(&self, env: &impl Env, base_url: Option<&str>) -> Vec<String> {
        let programs: BTreeSet<&str> = self
            .commands()
            .map(|(_, command)| command.program.as_str())
            .chain(self.servers.iter().map(|server| server.program.as_str()))
            .collect();
        let mut problems: Vec<String> = programs
            .into_iter()
            .filter_map(|program| program_problem(program, env))
            .collect();
        let addresses: BTreeSet<&str> = self
            .commands()
            .filter_map(|(_, command)| command.daemon_address.as_deref())
            .chain(
                self.servers
                    .iter()
                    .filter_map(|s| s.daemon_address.as_deref()),
            )
            .chain(self.base_urls.iter().map(String::as_str))
            .chain(base_url)
            .map(|address| address.trim_end_matches('/'))
            .collect();
        if addresses.len() > 1 {
            problems.push(format!(
                "they name more than one daemon address ({}): hooks, MCP server and model requests must reach the same daemon, spelled the same way",
                join(&addresses)
            ));
        }
        problems
    }

    fn commands(&self) -> impl Iterator<Item = (&str, &HookCommand)> {
        self.hooks
            .iter()
            .flat_map(|(event, commands)| commands.iter().map(move |c| (event.as_str(), c)))
    }
}

fn join(items: &BTreeSet<&str>) -> String {
    items.iter().copied().collect::<Vec<_>>().join(", ")
}

/// A hook command line that runs `relay-hook`. The agents hand the line to a shell, so it
/// is split into words as a shell would when it holds quotes, and what an administrator
/// may put before the program is passed over: variable assignments
/// (`RELAY_HOOK_TIMEOUT_MS=8000 relay-hook …`), the [`WRAPPERS`] with their options
/// (`exec`, `env`, `timeout 20`, `nohup`, `nice`, `command`), and a shell run with `-c`
/// (`sh -c '…'`, `bash -lc "…"`), whose script is read the same way. A line
/// without quotes, or with one a shell would not close, is read by its spaces alone.
fn hook_command(line: &str) -> Option<HookCommand> {
    hook_command_at(line, 0)
}

/// How many `sh -c` a line may nest before the doctor stops reading into it.
const MAX_SHELL_NESTING: usize = 4;

fn hook_command_at(line: &str, depth: usize) -> Option<HookCommand> {
    // A line without quotes is split at its spaces alone, and so is one whose shell reading
    // finds no command, so that a Windows path's backslashes stay as they are (cmd and
    // PowerShell do not read them as escapes).
    let spaced = || {
        line.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    match line
        .contains(['\'', '"'])
        .then(|| shlex::split(line))
        .flatten()
    {
        Some(words) => command_in(&words, depth).or_else(|| command_in(&spaced(), depth)),
        None => command_in(&spaced(), depth),
    }
}

/// The `relay-hook` command a line split into `words` runs, if any.
fn command_in(words: &[String], depth: usize) -> Option<HookCommand> {
    let is_assignment = |word: &str| {
        word.split_once('=').is_some_and(|(name, _)| {
            name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    let mut start = 0;
    while let Some(word) = words.get(start) {
        if is_assignment(word) {
            start += 1;
            continue;
        }
        let Some((name, with_value, operands)) =
            WRAPPERS.iter().find(|(name, ..)| is_named(word, name))
        else {
            break;
        };
        start += 1;
        // The wrapper's options, then the operands it takes before the command.
        while let Some(option) = words.get(start).filter(|w| w.starts_with('-')) {
            // `command -v` and `-V` only say where a program is: they run nothing.
            if *name == "command" && matches!(option.as_str(), "-v" | "-V") {
                return None;
            }
            start += if with_value.contains(&option.as_str()) {
                2
            } else {
                1
            };
            if option == "--" {
                break;
            }
        }
        start += operands;
    }
    let (program, args) = words.get(start..)?.split_first()?;
    if SHELLS.iter().any(|shell| is_named(program, shell)) {
        return shell_script(args).and_then(|script| {
            (depth < MAX_SHELL_NESTING)
                .then(|| hook_command_at(script, depth + 1))
                .flatten()
        });
    }
    if !is_named(program, "relay-hook") {
        return None;
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Some(HookCommand {
        program: program.clone(),
        agent: args
            .first()
            .filter(|arg| !arg.starts_with('-'))
            .map(|arg| (*arg).to_owned()),
        fail_open: args.contains(&"--fail-open"),
        daemon_address: daemon_address(&args),
    })
}

/// Programs that run the rest of their line as a command, as administrators put them
/// before one: each one's options that take a value, and how many operands follow the
/// options before the command (`timeout`'s duration).
const WRAPPERS: [(&str, &[&str], usize); 6] = [
    ("env", &["-u", "--unset", "-C", "--chdir"], 0),
    ("exec", &["-a"], 0),
    ("nohup", &[], 0),
    ("command", &[], 0),
    ("nice", &["-n", "--adjustment"], 0),
    ("timeout", &["-s", "--signal", "-k", "--kill-after"], 1),
];

/// The shells a hook line may run Relay's command through with `-c`.
const SHELLS: [&str; 5] = ["sh", "bash", "dash", "zsh", "ksh"];

/// The script of a shell's command line: the first word after the options, when one of
/// them (`-c`, or a cluster such as `-lc` or `-ec`) says the script is given as a word.
/// Long options (`--norc`) are passed over, and `-o`/`+o` with the option they name.
fn shell_script(args: &[String]) -> Option<&str> {
    let mut takes_script = false;
    let mut words = args.iter();
    while let Some(word) = words.next() {
        let options = word.strip_prefix(['-', '+']).filter(|o| !o.is_empty());
        match options {
            Some(long) if long.starts_with(['-', '+']) => {}
            Some(cluster) => {
                takes_script |= word.starts_with('-') && cluster.contains('c');
                if cluster.contains(['o', 'O']) {
                    words.next();
                }
            }
            None => return takes_script.then_some(word.as_str()),
        }
    }
    None
}

/// Whether `program`'s file name is `name` (with `.exe` on Windows paths).
fn is_named(program: &str, name: &str) -> bool {
    let file = program.rsplit(['/', '\\']).next().unwrap_or(program);
    file == name || file.strip_suffix(".exe") == Some(name)
}

/// The value of `--daemon-address` among `args`, either spelling.
fn daemon_address(args: &[&str]) -> Option<String> {
    args.iter().enumerate().find_map(|(i, arg)| {
        if *arg == "--daemon-address" {
            args.get(i + 1).map(|value| (*value).to_owned())
        } else {
            arg.strip_prefix("--daemon-address=").map(str::to_owned)
        }
    })
}

/// Why `program` cannot run: an absolute path that is missing or not an executable file, or
/// a bare name not found on this environment's `PATH`.
pub(crate) fn program_problem(program: &str, env: &impl Env) -> Option<String> {
    let executable = |path: &Path| {
        fs::metadata(path)
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    };
    if program.contains(['/', '\\']) {
        let path = Path::new(program);
        return match fs::metadata(path) {
            Err(_) => Some(format!("{program} does not exist")),
            Ok(_) if !executable(path) => Some(format!("{program} is not an executable file")),
            Ok(_) => None,
        };
    }
    let on_path = env
        .non_empty(names::PATH)
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| executable(&dir.join(program))));
    (!on_path).then(|| format!("{program} is not on PATH"))
}

#[cfg(test)]
pub(crate) mod tests;
