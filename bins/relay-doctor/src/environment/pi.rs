//! pi: where Relay's extension is loaded from, and whether it can run.
//!
//! pi has no command hooks and no MCP: everything Relay does in a pi session goes through
//! the bundle's extension, which pi loads from the `extensions` list of its `settings.json`
//! or from its extensions directory. The extension names the daemon and the two binaries
//! it runs in a settings object `relayd managed-bundle` fills in.

use std::fs;
use std::path::{Path, PathBuf};

use relay_identity::Env;
use relay_identity::bundle::PI_EXTENSION_MARKER;
use serde_json::{Value, json};

use super::{agent_dir, display};
use crate::report::Check;
use crate::wiring::{AgentFile, contains, program_problem, read};

/// pi's own directory variable (its default is `~/.pi/agent`).
const PI_CODING_AGENT_DIR: &str = "PI_CODING_AGENT_DIR";

/// The settings the bundle filled into one copy of the extension.
struct Extension {
    path: PathBuf,
    daemon_address: Option<String>,
    programs: Vec<String>,
}

/// Relay's pi extension, as pi would load it for this user.
pub(crate) fn pi(env: &impl Env) -> Check {
    const ID: &str = "pi";
    let Some(dir) = agent_dir(env, PI_CODING_AGENT_DIR, ".pi/agent") else {
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
    let listed: Vec<PathBuf> = settings
        .value
        .as_ref()
        .and_then(|v| v.get("extensions"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|entry| entry_file(&dir, entry))
        .collect();
    let mut extensions = Vec::new();
    for path in listed
        .iter()
        .chain(&in_extensions_dir(&dir.join("extensions")))
    {
        match read(path) {
            Ok(Some(bytes)) if bytes.starts_with(PI_EXTENSION_MARKER.as_bytes()) => {
                extensions.push(extension(path, &bytes));
            }
            Ok(Some(_)) => {}
            // A listed file that is gone: pi cannot load it, and if it was Relay's, nothing
            // of Relay's runs.
            Ok(None)
                if listed.contains(path)
                    && contains(path.as_os_str().as_encoded_bytes(), b"relay") =>
            {
                problems.push(format!(
                    "{} lists {}, which is not there: pi loads no Relay extension from it",
                    display(&settings.path),
                    display(path)
                ));
            }
            Ok(None) => {}
            Err(err) => problems.push(format!(
                "{} cannot be read by this user ({err}), so pi runs without it",
                display(path)
            )),
        }
    }
    for extension in &extensions {
        match &extension.daemon_address {
            None => problems.push(format!(
                "{} is Relay's extension, but its settings cannot be read (was it edited?)",
                display(&extension.path)
            )),
            Some(_) => problems.extend(
                extension
                    .programs
                    .iter()
                    .filter_map(|program| program_problem(program, env))
                    .map(|problem| format!("{} runs {problem}", display(&extension.path))),
            ),
        }
    }
    let mut addresses: Vec<&str> = extensions
        .iter()
        .filter_map(|e| e.daemon_address.as_deref())
        .collect();
    addresses.sort_unstable();
    addresses.dedup();
    if addresses.len() > 1 {
        problems.push(format!(
            "the copies of Relay's extension name different daemons: {}",
            addresses.join(", ")
        ));
    }
    let details = json!({
        "settings_file": display(&settings.path),
        "extensions": extensions.iter().map(|e| display(&e.path)).collect::<Vec<_>>(),
        "daemon_address": addresses.first(),
        "problems": problems,
    });
    if !problems.is_empty() {
        return Check::fail(ID, format!("Relay's pi extension is broken: {}", problems.join("; ")))
            .next("install the bundle's pi/extension-v1/index.ts again and list it in pi's settings as docs/harnesses.md says, or fix what is named")
            .with(details);
    }
    match extensions.as_slice() {
        [] => Check::skip(ID, format!("pi is not set up for Relay here: {} lists no Relay extension and none is in its extensions directory (a launch with -e leaves nothing to check)", display(&settings.path)))
            .with(details),
        [one] => Check::ok(ID, format!("Relay's pi extension is installed ({}), for the daemon at {}", display(&one.path), addresses.join(", ")))
            .with(details),
        _ => Check::warn(ID, format!("pi loads Relay's extension {} times ({}): every event reaches Relay as often, and each copy starts its own relay-mcp", extensions.len(), extensions.iter().map(|e| display(&e.path)).collect::<Vec<_>>().join(", ")))
            .next("keep one: take the path out of pi's extensions list, or remove the copy in its extensions directory")
            .with(details),
    }
}

/// The file pi loads for one `extensions` entry: the entry itself, relative to pi's
/// directory when it is not absolute, or its `index.ts` when it is a directory.
fn entry_file(dir: &Path, entry: &str) -> PathBuf {
    let path = dir.join(entry);
    if path.is_dir() {
        path.join("index.ts")
    } else {
        path
    }
}

/// The extensions pi finds by itself: `<dir>/*.ts` and `<dir>/*/index.ts`.
fn in_extensions_dir(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter_map(|path| {
            if path.is_dir() {
                Some(path.join("index.ts"))
            } else {
                path.extension()
                    .is_some_and(|ext| ext == "ts")
                    .then_some(path)
            }
        })
        .collect();
    found.sort();
    found
}

/// The settings object `relayd managed-bundle` wrote into the extension
/// (`const BUNDLE: {…} = {"daemonAddress": …, "relayMcp": …, "relayHook": …};`).
fn extension(path: &Path, bytes: &[u8]) -> Extension {
    let settings = std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| text.split_once("const BUNDLE:"))
        .and_then(|(_, rest)| rest.split_once('='))
        .and_then(|(_, value)| {
            serde_json::Deserializer::from_str(value)
                .into_iter::<Value>()
                .next()
                .and_then(Result::ok)
        });
    let text = |key: &str| {
        settings
            .as_ref()
            .and_then(|s| s.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    Extension {
        path: path.to_owned(),
        daemon_address: text("daemonAddress"),
        programs: ["relayMcp", "relayHook"]
            .iter()
            .filter_map(|key| text(key))
            .collect(),
    }
}
