//! pi: where Relay's extension is loaded from, and whether it can run.
//!
//! pi has no command hooks and no MCP: everything Relay does in a pi session goes through
//! the bundle's extension, which pi loads from the `extensions` list of its `settings.json`
//! or finds in its extensions directory. The extension names the daemon and the two
//! binaries it runs in the settings `relayd managed-bundle` filled in
//! ([`PiExtensionSettings`]).
//!
//! The files are found as pi 0.73 finds them, for the cases an installation uses: a listed
//! file or directory (`~` for the home directory, relative to pi's directory otherwise), the
//! extensions directory's `*.ts` and `*/index.ts`, a listed `!path` or `-path` taking one of
//! them out, each file once. Other patterns (globs) are passed over.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use relay_identity::bundle::{PI_EXTENSION_MARKER, PiExtensionSettings};
use relay_identity::{Env, names};
use serde_json::{Value, json};

use super::display;
use crate::report::Check;
use crate::wiring::{AgentFile, contains, program_problem, read};

/// pi's own directory variable (its default is `~/.pi/agent`).
const PI_CODING_AGENT_DIR: &str = "PI_CODING_AGENT_DIR";

/// Relay's pi extension, as pi would load it for this user.
pub(crate) fn pi(env: &impl Env) -> Check {
    const ID: &str = "pi";
    let home = env.non_empty(names::HOME).map(PathBuf::from);
    let dir = env
        .non_empty(PI_CODING_AGENT_DIR)
        .map(|dir| expand_home(&dir.to_string_lossy(), home.as_deref()))
        .or_else(|| home.as_ref().map(|home| home.join(".pi/agent")));
    let Some(dir) = dir else {
        return Check::skip(
            ID,
            "neither PI_CODING_AGENT_DIR nor HOME is set, so there are no pi settings to read",
        );
    };
    let settings = AgentFile::load(&dir.join("settings.json"));
    let mut problems: Vec<String> = settings.problem.iter().cloned().collect();
    // Relay's extension is listed by path, which names no Relay binary: a settings file
    // that no longer parses is Relay's concern when it names Relay at all.
    let unparsed = settings.value.is_none() && settings.problem.is_none();
    if unparsed
        && read(&settings.path)
            .ok()
            .flatten()
            .is_some_and(|bytes| contains(&bytes, b"relay"))
    {
        problems.push(format!(
            "{} is not valid JSON, so pi loads none of the extensions it lists",
            display(&settings.path)
        ));
    }
    let entries: Vec<&str> = settings
        .value
        .as_ref()
        .and_then(|v| v.get("extensions"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let resolve = |entry: &str| dir.join(expand_home(entry, home.as_deref()));
    let mut files = Vec::new();
    let mut excluded = BTreeSet::new();
    for entry in entries {
        if let Some(path) = entry.strip_prefix(['!', '-']) {
            excluded.insert(canonical(&resolve(path)));
        } else if entry.starts_with('+') || entry.contains(['*', '?']) {
            // A pattern: which files it takes is pi's to work out.
        } else {
            let path = resolve(entry);
            if path.exists() {
                files.extend(extension_files(&path));
            } else if contains(entry.as_bytes(), b"relay") {
                problems.push(format!(
                    "{} lists {}, which is not there: pi loads no extension from it",
                    display(&settings.path),
                    display(&path)
                ));
            }
        }
    }
    files.extend(extension_files(&dir.join("extensions")));
    let mut seen = BTreeSet::new();
    files.retain(|file| {
        let file = canonical(file);
        !excluded.contains(&file) && seen.insert(file)
    });

    let mut extensions: Vec<(PathBuf, Option<PiExtensionSettings>)> = Vec::new();
    for path in files {
        match read(&path) {
            Ok(Some(bytes)) if bytes.starts_with(PI_EXTENSION_MARKER.as_bytes()) => {
                let settings = std::str::from_utf8(&bytes)
                    .ok()
                    .and_then(PiExtensionSettings::from_source);
                extensions.push((path, settings));
            }
            Ok(_) => {}
            Err(err) => problems.push(format!(
                "{} cannot be read by this user ({err}), so pi runs without it",
                display(&path)
            )),
        }
    }
    for (path, settings) in &extensions {
        match settings {
            None => problems.push(format!(
                "{} is Relay's extension, but its settings cannot be read (was it edited?)",
                display(path)
            )),
            Some(settings) => problems.extend(
                [&settings.relay_mcp, &settings.relay_hook]
                    .into_iter()
                    .filter_map(|program| program_problem(program, env))
                    .map(|problem| format!("{} runs {problem}", display(path))),
            ),
        }
    }
    let addresses: BTreeSet<&str> = extensions
        .iter()
        .filter_map(|(_, settings)| settings.as_ref())
        .map(|settings| settings.daemon_address.as_str())
        .collect();
    if addresses.len() > 1 {
        problems.push(format!(
            "the copies of Relay's extension name different daemons: {}",
            addresses.iter().copied().collect::<Vec<_>>().join(", ")
        ));
    }
    let paths: Vec<String> = extensions.iter().map(|(path, _)| display(path)).collect();
    let details = json!({
        "settings_file": display(&settings.path),
        "extensions": paths,
        "daemon_address": addresses.first(),
        "problems": problems,
    });
    if !problems.is_empty() {
        return Check::fail(ID, format!("Relay's pi extension is broken: {}", problems.join("; ")))
            .next("install the bundle's pi/extension-v1/index.ts again and list it in pi's settings as docs/harnesses.md says, or fix what is named")
            .with(details);
    }
    match paths.as_slice() {
        [] => Check::skip(ID, format!("pi is not set up for Relay here: {} lists no Relay extension and none is in its extensions directory (a launch with -e leaves nothing to check)", display(&settings.path))),
        [one] => Check::ok(ID, format!("Relay's pi extension is installed ({one}), for the daemon at {}", addresses.iter().copied().collect::<Vec<_>>().join(", "))),
        _ => Check::warn(ID, format!("pi loads Relay's extension {} times ({}): every event reaches Relay as often, and each copy starts its own relay-mcp", paths.len(), paths.join(", ")))
            .next("keep one: take the path out of pi's extensions list, or remove the copy in its extensions directory"),
    }
    .with(details)
}

/// `path` with a leading `~` read as the home directory, as pi reads it.
fn expand_home(path: &str, home: Option<&Path>) -> PathBuf {
    match (path.strip_prefix('~'), home) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
            home.join(rest.trim_start_matches('/'))
        }
        _ => PathBuf::from(path),
    }
}

/// The file itself, or what pi loads from a directory: its `index.ts` (or `index.js`),
/// else each `*.ts` or `*.js` in it and each of its directories' `index.ts` (or `.js`),
/// leaving out names that start with a dot and `node_modules`.
fn extension_files(path: &Path) -> Vec<PathBuf> {
    if !path.is_dir() {
        return path.exists().then(|| path.to_owned()).into_iter().collect();
    }
    if let Some(index) = index_file(path) {
        return vec![index];
    }
    let Ok(entries) = fs::read_dir(path) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            !name.starts_with('.') && name != "node_modules"
        })
        .filter_map(|entry| {
            let path = entry.path();
            if path.is_dir() {
                index_file(&path)
            } else {
                path.extension()
                    .is_some_and(|ext| ext == "ts" || ext == "js")
                    .then_some(path)
            }
        })
        .collect();
    found.sort();
    found
}

fn index_file(dir: &Path) -> Option<PathBuf> {
    ["index.ts", "index.js"]
        .iter()
        .map(|name| dir.join(name))
        .find(|file| file.is_file())
}

/// The path with its links resolved, to tell two spellings of one file apart; the path
/// itself when it cannot be resolved.
fn canonical(path: &Path) -> PathBuf {
    fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
}
