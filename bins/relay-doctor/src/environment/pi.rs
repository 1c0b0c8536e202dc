//! pi: where Relay's extension is loaded from, and whether it can run.
//!
//! pi has no command hooks and no MCP: everything Relay does in a pi session goes through
//! the bundle's extension, which pi loads from the `extensions` list of its `settings.json`
//! or finds in its extensions directory. The extension names the daemon and the two
//! binaries it runs in the settings `relayd managed-bundle` filled in
//! ([`PiExtensionSettings`]).
//!
//! The files are found as pi 0.73 finds them: a listed file or directory (`~` for the home
//! directory, relative to pi's directory otherwise) and the extensions directory's `*.ts`
//! and `*/index.ts` (or what a directory's `package.json` names under `pi.extensions`),
//! each file once, then filtered by the list's patterns as pi filters them ([`Filters`]).
//! Differences left: pi's globs pass over names that start with a dot and take extended
//! patterns (`@(…)`), and pi skips what `.gitignore`-style files in the extensions
//! directory ignore, and, of one file reached twice, keeps only the first way's verdict.

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
    let entries: Vec<&str> = strings_at(settings.value.as_ref(), "/extensions").collect();
    let resolve = |entry: &str| dir.join(expand_home(entry.trim(), home.as_deref()));
    let filters = Filters::new(&entries, &dir);
    let mut files = Vec::new();
    for entry in entries.iter().filter(|entry| !Filters::is_pattern(entry)) {
        let path = resolve(entry);
        if path.exists() {
            files.extend(
                extension_files(&path)
                    .into_iter()
                    .filter(|file| filters.enables(file, true)),
            );
        } else if contains(entry.as_bytes(), b"relay") {
            problems.push(format!(
                "{} lists {}, which is not there: pi loads no extension from it",
                display(&settings.path),
                display(&path)
            ));
        }
    }
    files.extend(
        extension_files(&dir.join("extensions"))
            .into_iter()
            .filter(|file| filters.enables(file, false)),
    );
    let mut seen = BTreeSet::new();
    files.retain(|file| seen.insert(canonical(file)));

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
        [] => Check::skip(ID, format!("pi is not set up for Relay here: it loads no Relay extension from {} or its extensions directory, once the list's patterns are applied (a launch with -e leaves nothing to check)", display(&settings.path))),
        [one] => Check::ok(ID, format!("Relay's pi extension is installed ({one}), for the daemon at {}", addresses.iter().copied().collect::<Vec<_>>().join(", "))),
        _ => Check::warn(ID, format!("pi loads Relay's extension {} times ({}): every event reaches Relay as often, and each copy starts its own relay-mcp", paths.len(), paths.join(", ")))
            .next("keep one: take the path out of pi's extensions list, or remove the copy in its extensions directory"),
    }
    .with(details)
}

/// The patterns among pi's `extensions` entries, which decide which of the files found
/// are loaded, in pi's order: a glob (`*`, `?`) keeps only the listed files it matches
/// (extensions-directory files are not filtered by it), `!glob` takes matching files out,
/// `+path` puts one back, `-path` takes one out whatever else says. A glob matches a file
/// by its path relative to pi's directory, its name or its whole path (`*` stops at `/`);
/// `+` and `-` take the relative or the whole path exactly.
struct Filters {
    includes: Vec<globset::GlobMatcher>,
    excludes: Vec<globset::GlobMatcher>,
    force_in: Vec<String>,
    force_out: Vec<String>,
    base: PathBuf,
}

impl Filters {
    fn is_pattern(entry: &str) -> bool {
        entry.starts_with(['!', '+', '-']) || entry.contains(['*', '?'])
    }

    fn new(entries: &[&str], base: &Path) -> Filters {
        // A glob that does not compile matches nothing, as minimatch treats it.
        let glob = |pattern: &str| {
            globset::GlobBuilder::new(pattern)
                .literal_separator(true)
                .build()
                .ok()
                .map(|glob| glob.compile_matcher())
        };
        let exact = |path: &str| path.strip_prefix("./").unwrap_or(path).to_owned();
        let mut filters = Filters {
            includes: Vec::new(),
            excludes: Vec::new(),
            force_in: Vec::new(),
            force_out: Vec::new(),
            base: base.to_owned(),
        };
        for entry in entries.iter().copied().filter(|e| Filters::is_pattern(e)) {
            if let Some(path) = entry.strip_prefix('+') {
                filters.force_in.push(exact(path));
            } else if let Some(path) = entry.strip_prefix('-') {
                filters.force_out.push(exact(path));
            } else if let Some(pattern) = entry.strip_prefix('!') {
                filters.excludes.extend(glob(pattern));
            } else {
                filters.includes.extend(glob(entry));
            }
        }
        filters
    }

    /// Whether pi loads `file`, found through a listed entry (`listed`) or in the
    /// extensions directory.
    fn enables(&self, file: &Path, listed: bool) -> bool {
        let relative = relative_path(&self.base, file);
        let whole = file.to_string_lossy();
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        let any = |globs: &[globset::GlobMatcher]| {
            globs.iter().any(|glob| {
                glob.is_match(&relative)
                    || glob.is_match(name.as_ref())
                    || glob.is_match(whole.as_ref())
            })
        };
        let exactly = |paths: &[String]| paths.iter().any(|p| *p == relative || *p == whole);
        let mut enabled = !listed || self.includes.is_empty() || any(&self.includes);
        if any(&self.excludes) {
            enabled = false;
        }
        if exactly(&self.force_in) {
            enabled = true;
        }
        if exactly(&self.force_out) {
            enabled = false;
        }
        enabled
    }
}

/// `path` relative to `base`, with `..` where it lies outside it, as Node's
/// `path.relative` gives it.
fn relative_path(base: &Path, path: &Path) -> String {
    let base: Vec<_> = base.components().collect();
    let path: Vec<_> = path.components().collect();
    let common = base.iter().zip(&path).take_while(|(a, b)| a == b).count();
    let ups = std::iter::repeat_n("..".to_owned(), base.len() - common);
    let downs = path[common..]
        .iter()
        .map(|c| c.as_os_str().to_string_lossy().into_owned());
    ups.chain(downs).collect::<Vec<_>>().join("/")
}

/// `path` with a leading `~` read as the home directory, as pi reads it (`~x` too is
/// `x` in the home directory).
fn expand_home(path: &str, home: Option<&Path>) -> PathBuf {
    match (path.strip_prefix('~'), home) {
        (Some(rest), Some(home)) => home.join(rest.trim_start_matches('/')),
        _ => PathBuf::from(path),
    }
}

/// The file itself, or what pi loads from a directory: what its own entries name
/// ([`directory_entries`]), else each `*.ts` or `*.js` in it and what each of its
/// directories' entries name, leaving out names that start with a dot and `node_modules`.
fn extension_files(path: &Path) -> Vec<PathBuf> {
    if !path.is_dir() {
        return path.exists().then(|| path.to_owned()).into_iter().collect();
    }
    if let Some(entries) = directory_entries(path) {
        return entries;
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
        .flat_map(|entry| {
            let path = entry.path();
            if path.is_dir() {
                directory_entries(&path).unwrap_or_default()
            } else {
                let script = path
                    .extension()
                    .is_some_and(|ext| ext == "ts" || ext == "js");
                script.then_some(path).into_iter().collect()
            }
        })
        .collect();
    found.sort();
    found
}

/// The strings of the array at `pointer` in a JSON document, as pi reads such a list:
/// nothing when there is no array there, and entries that are not strings passed over.
fn strings_at<'a>(document: Option<&'a Value>, pointer: &str) -> impl Iterator<Item = &'a str> {
    document
        .and_then(|d| d.pointer(pointer))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// The extensions a directory names itself, as pi reads them: the existing files its
/// `package.json` lists under `pi.extensions`, else its `index.ts`, else its `index.js`.
fn directory_entries(dir: &Path) -> Option<Vec<PathBuf>> {
    let manifest = fs::read(dir.join("package.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
    let listed: Vec<PathBuf> = strings_at(manifest.as_ref(), "/pi/extensions")
        .map(|entry| dir.join(entry))
        .filter(|path| path.exists())
        .collect();
    if !listed.is_empty() {
        return Some(listed);
    }
    ["index.ts", "index.js"]
        .iter()
        .map(|name| dir.join(name))
        .find(|file| file.is_file())
        .map(|index| vec![index])
}

/// The path with its links resolved, to tell two spellings of one file apart; the path
/// itself when it cannot be resolved.
fn canonical(path: &Path) -> PathBuf {
    fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
}
