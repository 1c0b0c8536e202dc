//! `plugins.toml` (SPEC §8.1): which plugin components a worker runs, read strictly from
//! the system file and, only when the system file allows it, the user file. This module is
//! a pure function of the files' texts: the caller reads them (see [`Plugins::load_with`]).
//!
//! Rules: `version = 1` is required; every unknown key is an error, in both files;
//! `[settings]` (`allow_user_components`, default false) belongs to the system file only;
//! each `[[components]]` has a `kind` (`observability`, `policy` or `pii_redaction`), an
//! optional `enabled` (default true) and an optional `[components.config]` table; a system
//! component of a kind, enabled or not, shadows every user component of that kind; a
//! missing system file means no components. The configuration of every effective, enabled
//! component is then validated into its typed form ([`ComponentConfig`]); at most one
//! enabled component of each kind is effective. A disabled component's configuration is
//! kept as written and not validated, so a draft can be parked.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use relay_proto::{FailureReason, Text, WorkerActivationFailed};

use crate::policy::PolicyConfig;
use crate::redact::RedactionConfig;

mod fields;
mod observability;
mod policy;
mod redaction;

pub use observability::{
    DirectoryFacts, FINGERPRINT_PLACEHOLDER, FileSink, FilenameProblem, HttpSink,
    KEPT_FROM_WORKERS, ObservabilityConfig, OtlpConfig, RecordFileFacts, RecordFileProblem, Sink,
    SinkDirectoryProblem, SinkFiles, USER_PLACEHOLDER, check_record_file, check_sink_directory,
    render_filename,
};

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

/// A component's validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub enum ComponentConfig {
    Observability(ObservabilityConfig),
    Policy(PolicyConfig),
    PiiRedaction(RedactionConfig),
}

/// One `[[components]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Component {
    pub kind: ComponentKind,
    pub enabled: bool,
    /// `[components.config]` as written (empty when absent).
    pub config: toml::Table,
    /// The validated configuration: set for every effective, enabled component.
    pub validated: Option<ComponentConfig>,
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
    /// The key, dotted below the top level or the component (`settings.allow_user_components`,
    /// `config.rules[2].regex`; array positions are counted from 1).
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
/// where it applies the component (counted from 1) and the field. Only the messages
/// [`PluginConfigError::quotes_file_text`] names quote text from the file, which may hold
/// credentials.
#[derive(Debug, thiserror::Error)]
pub enum PluginConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: larger than {limit} bytes")]
    TooLarge { path: PathBuf, limit: u64 },
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
    #[error(
        "{path}: component {component} ({kind}): a second enabled component of this kind (component {first} of {first_path} is already enabled)"
    )]
    DuplicateKind {
        path: PathBuf,
        component: usize,
        kind: ComponentKind,
        first: usize,
        first_path: PathBuf,
    },
    #[error("{path}: {field}: not a valid regular expression, or larger than the size limit")]
    BadRegex { path: PathBuf, field: FieldPath },
    #[error("{path}: {field}: not a valid glob pattern")]
    BadGlob { path: PathBuf, field: FieldPath },
    #[error(
        "{path}: {field}: a deny rule needs an event that can block (PreToolUse, PermissionRequest, UserPromptSubmit, or pi's tool_call, user_bash)"
    )]
    DenyOnNonBlockingEvent { path: PathBuf, field: FieldPath },
    #[error("{path}: {field}: required for a deny rule")]
    DenyWithoutReason { path: PathBuf, field: FieldPath },
    #[error(
        "{path}: {field}: must contain {{user}} or {{fingerprint}}, so that users never share a file"
    )]
    FilenameWithoutIdentity { path: PathBuf, field: FieldPath },
    #[error("{path}: {field}: the directory is {problem}")]
    SinkDirectory {
        path: PathBuf,
        field: FieldPath,
        problem: SinkDirectoryProblem,
    },
    #[error("{path}: {field}: cannot inspect the directory: {source}")]
    SinkDirectoryUnreadable {
        path: PathBuf,
        field: FieldPath,
        #[source]
        source: std::io::Error,
    },
    /// The same words as the sink's own refusal when it opens the file.
    #[error("{path}: {field}: the record file {file} is {problem}")]
    RecordFile {
        path: PathBuf,
        field: FieldPath,
        file: PathBuf,
        problem: RecordFileProblem,
    },
    /// The file cannot be opened, or the directory lets the worker's user create none; the
    /// same words as the sink's own error when its open fails.
    #[error("{path}: {field}: cannot open the record file {file}: {source}")]
    RecordFileUnopenable {
        path: PathBuf,
        field: FieldPath,
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {field}: the record file name {problem}")]
    RecordFileName {
        path: PathBuf,
        field: FieldPath,
        problem: FilenameProblem,
    },
    #[error("{path}: {field}: cannot be used together with {other}")]
    Conflict {
        path: PathBuf,
        field: FieldPath,
        other: &'static str,
    },
}

impl PluginConfigError {
    /// The file at fault.
    pub fn path(&self) -> &Path {
        match self {
            PluginConfigError::Read { path, .. }
            | PluginConfigError::TooLarge { path, .. }
            | PluginConfigError::Syntax { path, .. }
            | PluginConfigError::UnknownKey { path, .. }
            | PluginConfigError::Missing { path, .. }
            | PluginConfigError::WrongType { path, .. }
            | PluginConfigError::UnsupportedVersion { path, .. }
            | PluginConfigError::SettingsInUserFile { path }
            | PluginConfigError::UnknownKind { path, .. }
            | PluginConfigError::DuplicateKind { path, .. }
            | PluginConfigError::BadRegex { path, .. }
            | PluginConfigError::BadGlob { path, .. }
            | PluginConfigError::DenyOnNonBlockingEvent { path, .. }
            | PluginConfigError::DenyWithoutReason { path, .. }
            | PluginConfigError::FilenameWithoutIdentity { path, .. }
            | PluginConfigError::SinkDirectory { path, .. }
            | PluginConfigError::SinkDirectoryUnreadable { path, .. }
            | PluginConfigError::RecordFile { path, .. }
            | PluginConfigError::RecordFileUnopenable { path, .. }
            | PluginConfigError::RecordFileName { path, .. }
            | PluginConfigError::Conflict { path, .. } => path,
        }
    }

    /// Whether the message quotes text from the file: a TOML syntax error's own words, and
    /// an unknown component kind. A reader that shows messages to others elides those.
    pub fn quotes_file_text(&self) -> bool {
        match self {
            PluginConfigError::Syntax { .. } | PluginConfigError::UnknownKind { .. } => true,
            PluginConfigError::Read { .. }
            | PluginConfigError::TooLarge { .. }
            | PluginConfigError::UnknownKey { .. }
            | PluginConfigError::Missing { .. }
            | PluginConfigError::WrongType { .. }
            | PluginConfigError::UnsupportedVersion { .. }
            | PluginConfigError::SettingsInUserFile { .. }
            | PluginConfigError::DuplicateKind { .. }
            | PluginConfigError::BadRegex { .. }
            | PluginConfigError::BadGlob { .. }
            | PluginConfigError::DenyOnNonBlockingEvent { .. }
            | PluginConfigError::DenyWithoutReason { .. }
            | PluginConfigError::FilenameWithoutIdentity { .. }
            | PluginConfigError::SinkDirectory { .. }
            | PluginConfigError::SinkDirectoryUnreadable { .. }
            | PluginConfigError::RecordFile { .. }
            | PluginConfigError::RecordFileUnopenable { .. }
            | PluginConfigError::RecordFileName { .. }
            | PluginConfigError::Conflict { .. } => false,
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
    /// Parses the system file and, when it sets `allow_user_components = true`, the user
    /// file, each read through `read` (which answers `Ok(None)` for a missing file). The
    /// user file is not read at all unless the system file allows it. A missing system file
    /// is no components; any other problem is an error.
    pub fn load_with(
        system_file: &Path,
        user_file: Option<&Path>,
        mut read: impl FnMut(&Path) -> Result<Option<String>, PluginConfigError>,
    ) -> Result<Plugins, PluginConfigError> {
        let Some(text) = read(system_file)? else {
            return Ok(Plugins::default());
        };
        let system = parse_file(system_file, &text, PluginFile::System)?;
        let mut components = system.components;
        if system.allow_user_components
            && let Some(user_file) = user_file
            && let Some(text) = read(user_file)?
        {
            let user = parse_file(user_file, &text, PluginFile::User)?;
            let system_kinds: HashSet<ComponentKind> = components.iter().map(|c| c.kind).collect();
            components.extend(
                user.components
                    .into_iter()
                    .filter(|c| !system_kinds.contains(&c.kind)),
            );
        }
        validate_enabled(&mut components)?;
        Ok(Plugins {
            components,
            allow_user_components: system.allow_user_components,
        })
    }

    /// [`Plugins::load_with`] over texts already in memory: `(path, text)` per file, `None`
    /// for a missing one.
    pub fn parse(
        system: Option<(&Path, &str)>,
        user: Option<(&Path, &str)>,
    ) -> Result<Plugins, PluginConfigError> {
        let Some((system_file, system_text)) = system else {
            return Ok(Plugins::default());
        };
        Plugins::load_with(system_file, user.map(|(path, _)| path), |path| {
            Ok(if path == system_file {
                Some(system_text.to_owned())
            } else {
                user.map(|(_, text)| text.to_owned())
            })
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

    /// Checks every file sink of the enabled observability component as the sink will find
    /// it when it opens its record file: the directory ([`check_sink_directory`]), then the
    /// record file named by `filename` for `user` and `fingerprint` (`None` when not known
    /// yet, as before the first session made the machine key): an existing file must pass
    /// [`check_record_file`] and be one the user may open for reading and writing; when
    /// there is none, or its name is not known, the user must be able to create one in the
    /// directory. The worker runs this before it starts any sink, and `relay-doctor` runs it
    /// to say whether the worker would start; each error names the component and the field,
    /// in the sink's own words about the file. The sink checks the file it opened again.
    pub fn check_file_sinks(
        &self,
        user: &str,
        fingerprint: Option<&str>,
        files: &mut impl SinkFiles,
    ) -> Result<(), PluginConfigError> {
        for sink in self.file_sinks() {
            let directory = &sink.config.directory;
            sink.check_directory(files.directory(directory))?;
            let filename = &sink.config.filename;
            let name = match fingerprint {
                Some(fingerprint) => Some(render_filename(filename, user, fingerprint)),
                None if filename.contains(FINGERPRINT_PLACEHOLDER) => None,
                None => Some(render_filename(filename, user, "")),
            };
            let name = name
                .transpose()
                .map_err(|problem| PluginConfigError::RecordFileName {
                    path: sink.component.file.clone(),
                    field: sink.field("filename"),
                    problem,
                })?;
            // Without the name, the file is one the worker will create (the fingerprint is
            // new): it is shown with its placeholder.
            let file = directory.join(name.as_deref().unwrap_or(filename));
            let unopenable = |field, source| PluginConfigError::RecordFileUnopenable {
                path: sink.component.file.clone(),
                field: sink.field(field),
                file: file.clone(),
                source,
            };
            let found = match name {
                Some(_) => files
                    .record_file(&file)
                    .map_err(|source| unopenable("filename", source))?,
                None => None,
            };
            match found {
                Some(facts) => {
                    check_record_file(&facts).map_err(|problem| PluginConfigError::RecordFile {
                        path: sink.component.file.clone(),
                        field: sink.field("filename"),
                        file: file.clone(),
                        problem,
                    })?;
                    files
                        .may_open(&file)
                        .map_err(|source| unopenable("filename", source))?;
                }
                None => files
                    .may_create_in(directory)
                    .map_err(|source| unopenable("directory", source))?,
            }
        }
        Ok(())
    }

    /// The file sinks of the enabled observability component, with their positions.
    fn file_sinks(&self) -> impl Iterator<Item = FileSinkAt<'_>> {
        self.enabled().flat_map(|component| {
            let sinks = match &component.validated {
                Some(ComponentConfig::Observability(config)) => config.sinks.as_slice(),
                _ => &[],
            };
            sinks
                .iter()
                .enumerate()
                .filter_map(move |(position, sink)| match sink {
                    Sink::File(config) => Some(FileSinkAt {
                        component,
                        position,
                        config,
                    }),
                    Sink::Http(_) => None,
                })
        })
    }

    /// The enabled observability component's configuration.
    pub fn observability(&self) -> Option<&ObservabilityConfig> {
        self.enabled().find_map(|c| match &c.validated {
            Some(ComponentConfig::Observability(config)) => Some(config),
            _ => None,
        })
    }

    /// The environment variables the enabled observability component's `header_env` tables
    /// name, each once: `relay-mcp` passes these, beside its allow-list, to the worker it
    /// starts, which reads the collectors' secrets from them.
    pub fn header_env_variables(&self) -> BTreeSet<&str> {
        self.observability()
            .map(|o| o.header_env_variables().collect())
            .unwrap_or_default()
    }

    /// The enabled policy component's configuration.
    pub fn policy(&self) -> Option<&PolicyConfig> {
        self.enabled().find_map(|c| match &c.validated {
            Some(ComponentConfig::Policy(config)) => Some(config),
            _ => None,
        })
    }

    /// The enabled pii_redaction component's configuration.
    pub fn redaction(&self) -> Option<&RedactionConfig> {
        self.enabled().find_map(|c| match &c.validated {
            Some(ComponentConfig::PiiRedaction(config)) => Some(config),
            _ => None,
        })
    }
}

/// Validates each effective, enabled component's configuration, and refuses a second
/// enabled component of a kind (two policies would leave it unclear which decides).
fn validate_enabled(components: &mut [Component]) -> Result<(), PluginConfigError> {
    let mut first_of_kind: Vec<(ComponentKind, usize, PathBuf)> = Vec::new();
    for component in components.iter_mut().filter(|c| c.enabled) {
        if let Some((_, first, first_path)) =
            first_of_kind.iter().find(|(k, _, _)| *k == component.kind)
        {
            return Err(PluginConfigError::DuplicateKind {
                path: component.file.clone(),
                component: component.index,
                kind: component.kind,
                first: *first,
                first_path: first_path.clone(),
            });
        }
        first_of_kind.push((component.kind, component.index, component.file.clone()));
        let at = fields::Table::new(
            &component.config,
            fields::Place {
                path: &component.file,
                component: component.index,
                prefix: "config".to_owned(),
            },
        );
        component.validated = Some(match component.kind {
            ComponentKind::Observability => {
                ComponentConfig::Observability(observability::parse(&at)?)
            }
            ComponentKind::Policy => ComponentConfig::Policy(policy::parse(&at)?),
            ComponentKind::PiiRedaction => ComponentConfig::PiiRedaction(redaction::parse(&at)?),
        });
    }
    Ok(())
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
        validated: None,
        source,
        file: path.to_owned(),
        index,
    })
}

/// The parser's message and the line, without the snippet of the file that the parser's
/// own `Display` shows: the file may hold credentials (header values).
fn syntax_error(path: &Path, text: &str, error: &toml::de::Error) -> PluginConfigError {
    let (line, message) = toml_syntax_error(text, error);
    PluginConfigError::Syntax {
        path: path.to_owned(),
        line,
        message,
    }
}

/// A TOML syntax error as Relay's configuration errors give it: the line it is on (0 when
/// the parser names none) and the parser's message on one line, never the snippet of the
/// file that the parser's own `Display` quotes. `config.toml`'s loader uses it too.
pub fn toml_syntax_error(text: &str, error: &toml::de::Error) -> (usize, String) {
    let line = error.span().map_or(0, |span| {
        let before = &text.as_bytes()[..span.start.min(text.len())];
        before.iter().filter(|b| **b == b'\n').count() + 1
    });
    (line, error.message().trim_end().replace('\n', " "))
}

/// A file sink of a component, where its errors point.
struct FileSinkAt<'a> {
    component: &'a Component,
    /// Counted from 0.
    position: usize,
    config: &'a FileSink,
}

impl FileSinkAt<'_> {
    fn field(&self, key: &str) -> FieldPath {
        FieldPath::component(
            self.component.index,
            format!("config.sinks[{}].{key}", self.position + 1),
        )
    }

    /// The directory rule, on the facts `inspected` gave.
    fn check_directory(
        &self,
        inspected: std::io::Result<DirectoryFacts>,
    ) -> Result<(), PluginConfigError> {
        let facts = inspected.map_err(|source| PluginConfigError::SinkDirectoryUnreadable {
            path: self.component.file.clone(),
            field: self.field("directory"),
            source,
        })?;
        check_sink_directory(&facts).map_err(|problem| PluginConfigError::SinkDirectory {
            path: self.component.file.clone(),
            field: self.field("directory"),
            problem,
        })
    }
}

#[cfg(test)]
mod tests;
