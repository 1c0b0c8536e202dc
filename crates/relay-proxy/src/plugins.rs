//! `plugins.toml` (SPEC §8.1): which plugin components a worker runs, read strictly from
//! the system file and, only when the system file allows it, the user file.
//!
//! Rules: `version = 1` is required; every unknown key is an error, in both files;
//! `[settings]` (`allow_user_components`, default false) belongs to the system file only;
//! each `[[components]]` has a `kind` (`observability`, `policy` or `pii_redaction`), an
//! optional `enabled` (default true) and an optional `[components.config]` table; a system
//! component of a kind, enabled or not, shadows every user component of that kind; a
//! missing system file means no components. No component is implemented by this worker
//! version yet, so an enabled one is refused rather than ignored: ignoring a policy would
//! let traffic through unchecked.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use relay_proto::{FailureReason, Text, WorkerActivationFailed};

/// The failure reason a worker reports for every error here (§5.6, §10.3).
pub const FAILURE_REASON: FailureReason = FailureReason::PluginConfigInvalid;

/// What a component does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ComponentKind {
    Observability,
    Policy,
    PiiRedaction,
}

impl ComponentKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ComponentKind::Observability => "observability",
            ComponentKind::Policy => "policy",
            ComponentKind::PiiRedaction => "pii_redaction",
        }
    }

    fn parse(text: &str) -> Option<ComponentKind> {
        match text {
            "observability" => Some(ComponentKind::Observability),
            "policy" => Some(ComponentKind::Policy),
            "pii_redaction" => Some(ComponentKind::PiiRedaction),
            _ => None,
        }
    }
}

impl fmt::Display for ComponentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which of the two files a component came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginFile {
    System,
    User,
}

/// One `[[components]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Component {
    pub kind: ComponentKind,
    pub enabled: bool,
    /// `[components.config]`, validated by the component itself (empty when absent).
    pub config: toml::Table,
    pub source: PluginFile,
    pub file: PathBuf,
    /// Position among the file's `[[components]]`, counted from 1.
    pub index: usize,
}

/// The effective plugin configuration of a worker.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plugins {
    components: Vec<Component>,
    allow_user_components: bool,
}

/// Where in a file an error is: a top-level key, or a key of the n-th component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    /// The component's position among the file's `[[components]]`, counted from 1.
    pub component: Option<usize>,
    /// The key, dotted below the top level or the component (`settings.allow_user_components`).
    pub key: String,
}

impl FieldPath {
    fn top(key: impl Into<String>) -> FieldPath {
        FieldPath {
            component: None,
            key: key.into(),
        }
    }

    fn component(index: usize, key: impl Into<String>) -> FieldPath {
        FieldPath {
            component: Some(index),
            key: key.into(),
        }
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.component {
            None => write!(f, "`{}`", self.key),
            Some(index) => write!(f, "component {index}, `{}`", self.key),
        }
    }
}

/// Why a worker's plugin configuration was refused. Every message names the file, and
/// where it applies the component (counted from 1) and the field. Messages never quote
/// values from the file, which may hold credentials.
#[derive(Debug, thiserror::Error)]
pub enum PluginConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not valid TOML at line {line}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{path}: {field}: unknown key")]
    UnknownKey { path: PathBuf, field: FieldPath },
    #[error("{path}: {field}: required")]
    Missing { path: PathBuf, field: FieldPath },
    #[error("{path}: {field}: must be {expected}")]
    WrongType {
        path: PathBuf,
        field: FieldPath,
        expected: &'static str,
    },
    #[error("{path}: `version`: {found} is not supported (this worker reads version 1)")]
    UnsupportedVersion { path: PathBuf, found: i64 },
    #[error("{path}: `settings`: allowed only in the system plugins.toml")]
    SettingsInUserFile { path: PathBuf },
    #[error(
        "{path}: {field}: unknown component kind {kind:?} (expected observability, policy or pii_redaction)"
    )]
    UnknownKind {
        path: PathBuf,
        field: FieldPath,
        kind: String,
    },
    #[error("{path}: component {component} ({kind}) is not supported by this worker version")]
    NotSupported {
        path: PathBuf,
        component: usize,
        kind: ComponentKind,
    },
}

impl PluginConfigError {
    /// The file at fault.
    pub fn path(&self) -> &Path {
        match self {
            PluginConfigError::Read { path, .. }
            | PluginConfigError::Syntax { path, .. }
            | PluginConfigError::UnknownKey { path, .. }
            | PluginConfigError::Missing { path, .. }
            | PluginConfigError::WrongType { path, .. }
            | PluginConfigError::UnsupportedVersion { path, .. }
            | PluginConfigError::SettingsInUserFile { path }
            | PluginConfigError::UnknownKind { path, .. }
            | PluginConfigError::NotSupported { path, .. } => path,
        }
    }

    /// The message a worker sends before exiting: `plugin_config_invalid` with this error
    /// as the diagnostic, cut to the protocol's text limit.
    pub fn to_activation_failed(&self) -> WorkerActivationFailed {
        WorkerActivationFailed {
            failure_reason: Text::truncated(FAILURE_REASON.as_str()),
            diagnostic: Text::truncated(&self.to_string()),
        }
    }
}

impl Plugins {
    /// Reads the system file and, when it sets `allow_user_components = true`, the user
    /// file. A missing file is no components; any other problem is an error.
    pub fn load(
        system_file: &Path,
        user_file: Option<&Path>,
    ) -> Result<Plugins, PluginConfigError> {
        let Some(text) = read_optional(system_file)? else {
            return Ok(Plugins::default());
        };
        let system = parse_file(system_file, &text, PluginFile::System)?;
        let mut components = system.components;
        if system.allow_user_components
            && let Some(user_file) = user_file
            && let Some(text) = read_optional(user_file)?
        {
            let user = parse_file(user_file, &text, PluginFile::User)?;
            let system_kinds: HashSet<ComponentKind> = components.iter().map(|c| c.kind).collect();
            components.extend(
                user.components
                    .into_iter()
                    .filter(|c| !system_kinds.contains(&c.kind)),
            );
        }
        refuse_enabled(&components)?;
        Ok(Plugins {
            components,
            allow_user_components: system.allow_user_components,
        })
    }

    /// The effective components: the system file's in order, then the user file's that no
    /// system component shadows.
    pub fn components(&self) -> &[Component] {
        &self.components
    }

    /// The enabled components, in order.
    pub fn enabled(&self) -> impl Iterator<Item = &Component> {
        self.components.iter().filter(|c| c.enabled)
    }

    /// What the system file's `[settings] allow_user_components` says.
    pub fn allows_user_components(&self) -> bool {
        self.allow_user_components
    }
}

/// Until components exist (a later issue), an enabled one cannot be honoured, and a
/// silently ignored policy would let traffic through unchecked.
fn refuse_enabled(components: &[Component]) -> Result<(), PluginConfigError> {
    match components.iter().find(|c| c.enabled) {
        Some(c) => Err(PluginConfigError::NotSupported {
            path: c.file.clone(),
            component: c.index,
            kind: c.kind,
        }),
        None => Ok(()),
    }
}

fn read_optional(path: &Path) -> Result<Option<String>, PluginConfigError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PluginConfigError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// One file, checked on its own.
struct ParsedFile {
    allow_user_components: bool,
    components: Vec<Component>,
}

fn parse_file(
    path: &Path,
    text: &str,
    source: PluginFile,
) -> Result<ParsedFile, PluginConfigError> {
    let table: toml::Table = toml::from_str(text).map_err(|e| syntax_error(path, text, &e))?;
    let wrong = |field: FieldPath, expected: &'static str| PluginConfigError::WrongType {
        path: path.to_owned(),
        field,
        expected,
    };
    if let Some(key) = table
        .keys()
        .find(|k| !matches!(k.as_str(), "version" | "settings" | "components"))
    {
        return Err(PluginConfigError::UnknownKey {
            path: path.to_owned(),
            field: FieldPath::top(key.as_str()),
        });
    }
    match table.get("version") {
        None => {
            return Err(PluginConfigError::Missing {
                path: path.to_owned(),
                field: FieldPath::top("version"),
            });
        }
        Some(toml::Value::Integer(1)) => {}
        Some(toml::Value::Integer(found)) => {
            return Err(PluginConfigError::UnsupportedVersion {
                path: path.to_owned(),
                found: *found,
            });
        }
        Some(_) => return Err(wrong(FieldPath::top("version"), "an integer")),
    }
    let mut allow_user_components = false;
    if let Some(settings) = table.get("settings") {
        if source == PluginFile::User {
            return Err(PluginConfigError::SettingsInUserFile {
                path: path.to_owned(),
            });
        }
        let toml::Value::Table(settings) = settings else {
            return Err(wrong(FieldPath::top("settings"), "a table"));
        };
        for (key, value) in settings {
            match (key.as_str(), value) {
                ("allow_user_components", toml::Value::Boolean(allow)) => {
                    allow_user_components = *allow;
                }
                ("allow_user_components", _) => {
                    return Err(wrong(
                        FieldPath::top("settings.allow_user_components"),
                        "a boolean",
                    ));
                }
                (other, _) => {
                    return Err(PluginConfigError::UnknownKey {
                        path: path.to_owned(),
                        field: FieldPath::top(format!("settings.{other}")),
                    });
                }
            }
        }
    }
    let mut components = Vec::new();
    if let Some(entries) = table.get("components") {
        let toml::Value::Array(entries) = entries else {
            return Err(wrong(FieldPath::top("components"), "an array of tables"));
        };
        for (position, entry) in entries.iter().enumerate() {
            components.push(parse_component(path, source, position + 1, entry)?);
        }
    }
    Ok(ParsedFile {
        allow_user_components,
        components,
    })
}

fn parse_component(
    path: &Path,
    source: PluginFile,
    index: usize,
    entry: &toml::Value,
) -> Result<Component, PluginConfigError> {
    let wrong = |key: &str, expected: &'static str| PluginConfigError::WrongType {
        path: path.to_owned(),
        field: FieldPath::component(index, key),
        expected,
    };
    let toml::Value::Table(entry) = entry else {
        return Err(PluginConfigError::WrongType {
            path: path.to_owned(),
            field: FieldPath::top("components"),
            expected: "an array of tables",
        });
    };
    if let Some(key) = entry
        .keys()
        .find(|k| !matches!(k.as_str(), "kind" | "enabled" | "config"))
    {
        return Err(PluginConfigError::UnknownKey {
            path: path.to_owned(),
            field: FieldPath::component(index, key.as_str()),
        });
    }
    let kind = match entry.get("kind") {
        None => {
            return Err(PluginConfigError::Missing {
                path: path.to_owned(),
                field: FieldPath::component(index, "kind"),
            });
        }
        Some(toml::Value::String(text)) => {
            ComponentKind::parse(text).ok_or_else(|| PluginConfigError::UnknownKind {
                path: path.to_owned(),
                field: FieldPath::component(index, "kind"),
                kind: text.chars().take(64).collect(),
            })?
        }
        Some(_) => return Err(wrong("kind", "a string")),
    };
    let enabled = match entry.get("enabled") {
        None => true,
        Some(toml::Value::Boolean(enabled)) => *enabled,
        Some(_) => return Err(wrong("enabled", "a boolean")),
    };
    let config = match entry.get("config") {
        None => toml::Table::new(),
        Some(toml::Value::Table(config)) => config.clone(),
        Some(_) => return Err(wrong("config", "a table")),
    };
    Ok(Component {
        kind,
        enabled,
        config,
        source,
        file: path.to_owned(),
        index,
    })
}

/// The parser's message and the line, without the snippet of the file that the parser's
/// own `Display` shows: the file may hold credentials (header values).
fn syntax_error(path: &Path, text: &str, error: &toml::de::Error) -> PluginConfigError {
    let line = error.span().map_or(0, |span| {
        let before = &text.as_bytes()[..span.start.min(text.len())];
        before.iter().filter(|b| **b == b'\n').count() + 1
    });
    PluginConfigError::Syntax {
        path: path.to_owned(),
        line,
        message: error.message().trim_end().replace('\n', " "),
    }
}

#[cfg(test)]
mod tests;
