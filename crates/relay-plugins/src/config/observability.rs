//! The observability component's configuration: sinks, OTLP export, prices.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::PluginConfigError;
use super::fields::Table;
use crate::{Price, PriceTable};

/// An observability component's configuration, validated.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ObservabilityConfig {
    /// Whether records carry content (prompts, tool input and output, bodies), redacted.
    pub capture_content: bool,
    pub sinks: Vec<Sink>,
    pub otlp: Option<OtlpConfig>,
    /// Prices by model name.
    pub prices: PriceTable,
}

/// Where ATOF records go.
#[derive(Debug, Clone, PartialEq)]
pub enum Sink {
    File(FileSink),
    Http(HttpSink),
}

/// `type = "file"`: JSON Lines appended to a file per user.
#[derive(Debug, Clone, PartialEq)]
pub struct FileSink {
    /// An absolute path; the sink checks it with [`check_sink_directory`].
    pub directory: PathBuf,
    /// A plain file name holding `{user}` or `{fingerprint}` (the only placeholders).
    pub filename: String,
}

/// `type = "http"`: batched JSON Lines POSTs to a collector.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpSink {
    pub url: String,
    /// Header name to value, sent as written.
    pub headers: BTreeMap<String, String>,
    /// Header name to the environment variable holding its value (for secrets).
    pub header_env: BTreeMap<String, String>,
    /// Records per POST at most.
    pub batch_max: usize,
    /// How long a record may wait for its batch to fill.
    pub flush_ms: u64,
    /// Per POST.
    pub timeout_ms: u64,
    /// Records held while the collector is slow or down; beyond, records are dropped and
    /// counted.
    pub queue: usize,
}

impl HttpSink {
    pub const DEFAULT_BATCH_MAX: usize = 100;
    pub const DEFAULT_FLUSH_MS: u64 = 1000;
    pub const DEFAULT_TIMEOUT_MS: u64 = 5000;
    pub const DEFAULT_QUEUE: usize = 10_000;
}

/// `[components.config.otlp]`: OTLP/HTTP trace export.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpConfig {
    /// The collector's traces URL (`…/v1/traces`).
    pub endpoint: String,
    pub service_name: String,
    pub headers: BTreeMap<String, String>,
    pub header_env: BTreeMap<String, String>,
}

impl OtlpConfig {
    pub const DEFAULT_SERVICE_NAME: &'static str = "relay-worker";
}

/// Variables a `header_env` may not name: `relay-mcp` keeps them from every worker, because
/// a worker is shared by the user's sessions (the route credential, and Claude Code's
/// headers that carry it). relay-plugins does not depend on `relay_identity::names`, where
/// they are defined, so relay-mcp's tests check the two agree.
pub const KEPT_FROM_WORKERS: [&str; 2] = ["RELAY_CLIENT_TOKEN", "ANTHROPIC_CUSTOM_HEADERS"];

impl ObservabilityConfig {
    /// The environment variables the http sinks' and the OTLP exporter's `header_env` name.
    pub fn header_env_variables(&self) -> impl Iterator<Item = &str> {
        self.header_env().map(|(_, variable)| variable)
    }

    /// Each `header_env` entry of the http sinks and the OTLP exporter: the header's name
    /// and the environment variable that holds its value.
    pub fn header_env(&self) -> impl Iterator<Item = (&str, &str)> {
        let sinks = self.sinks.iter().filter_map(|sink| match sink {
            Sink::Http(http) => Some(&http.header_env),
            Sink::File(_) => None,
        });
        sinks
            .chain(self.otlp.as_ref().map(|otlp| &otlp.header_env))
            .flat_map(|map| map.iter().map(|(h, v)| (h.as_str(), v.as_str())))
    }
}

/// What the file sink learnt about its directory (from `metadata`, following links).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectoryFacts {
    pub is_dir: bool,
    /// The permission bits, with the sticky bit (`0o1000`).
    pub mode: u32,
    /// The directory's owner.
    pub owner: u32,
    /// The user the worker runs as.
    pub euid: u32,
}

impl DirectoryFacts {
    /// The facts of a directory's `metadata`, for the worker's user `euid`. Where there are
    /// no unix modes, the directory's ACL is the operating system's business.
    pub fn of(metadata: &std::fs::Metadata, euid: u32) -> DirectoryFacts {
        let (mode, owner) = unix_mode_and_owner(metadata).unwrap_or((0o700, euid));
        DirectoryFacts {
            is_dir: metadata.is_dir(),
            mode,
            owner,
            euid,
        }
    }
}

/// A file's permission bits (with the sticky bit) and owner, where it has them.
#[cfg(unix)]
fn unix_mode_and_owner(metadata: &std::fs::Metadata) -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt as _;
    Some((metadata.mode() & 0o7777, metadata.uid()))
}

#[cfg(not(unix))]
fn unix_mode_and_owner(_metadata: &std::fs::Metadata) -> Option<(u32, u32)> {
    None
}

/// Why a sink directory is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SinkDirectoryProblem {
    #[error("not a directory")]
    NotADirectory,
    #[error("writable by other users without the sticky bit")]
    WritableByOthers,
    #[error("owned by another user, who could replace or remove the record file")]
    OwnedByAnotherUser,
}

/// The directory rule of SPEC §8.1: a directory writable by others is refused unless it has
/// the sticky bit (then nobody can replace another user's file in it). A directory that
/// another user owns (root excepted, who can replace anything anyway) is refused whatever
/// its mode: its owner may rename or remove any file in it, sticky or not, and may give
/// itself write access at will. Group write is allowed: a group of one's own (a user
/// private group) is the common case, and an administrator who shares a group with others
/// shares it on purpose.
pub fn check_sink_directory(facts: &DirectoryFacts) -> Result<(), SinkDirectoryProblem> {
    if !facts.is_dir {
        return Err(SinkDirectoryProblem::NotADirectory);
    }
    if facts.owner != 0 && facts.owner != facts.euid {
        return Err(SinkDirectoryProblem::OwnedByAnotherUser);
    }
    if facts.mode & 0o002 != 0 && facts.mode & 0o1000 == 0 {
        return Err(SinkDirectoryProblem::WritableByOthers);
    }
    Ok(())
}

/// The placeholder a file sink's `filename` holds for the worker's OS user name.
pub const USER_PLACEHOLDER: &str = "{user}";
/// The placeholder a file sink's `filename` holds for the route fingerprint.
pub const FINGERPRINT_PLACEHOLDER: &str = "{fingerprint}";

/// Why a file sink's `filename` gives no record file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FilenameProblem {
    #[error("must contain {{user}} or {{fingerprint}}")]
    PlaceholderMissing,
    #[error("is not a plain file name once substituted")]
    NotPlain,
}

/// The record file's name: `template` with `{user}` and `{fingerprint}` substituted. The
/// template must hold at least one of them, and the result must be one plain path component.
pub fn render_filename(
    template: &str,
    user: &str,
    fingerprint: &str,
) -> Result<String, FilenameProblem> {
    if !template.contains(USER_PLACEHOLDER) && !template.contains(FINGERPRINT_PLACEHOLDER) {
        return Err(FilenameProblem::PlaceholderMissing);
    }
    let name = template
        .replace(USER_PLACEHOLDER, user)
        .replace(FINGERPRINT_PLACEHOLDER, fingerprint);
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\0');
    if !plain {
        return Err(FilenameProblem::NotPlain);
    }
    Ok(name)
}

/// What is already where a file sink's record file goes (from `symlink_metadata`: the sink
/// opens it with `O_NOFOLLOW`, so a link there is not followed but refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordFileFacts {
    pub is_regular_file: bool,
    /// The permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// The file's owner.
    pub owner: u32,
    /// The user the worker runs as.
    pub euid: u32,
}

impl RecordFileFacts {
    /// The facts of a record file's `metadata`, for the worker's user `euid`.
    pub fn of(metadata: &std::fs::Metadata, euid: u32) -> RecordFileFacts {
        let (mode, owner) = unix_mode_and_owner(metadata).unwrap_or((0o600, euid));
        RecordFileFacts {
            is_regular_file: metadata.is_file(),
            mode,
            owner,
            euid,
        }
    }
}

/// Why an existing record file is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordFileProblem {
    #[error("not a regular file")]
    NotRegularFile,
    #[error("owned by another user")]
    NotOwnedByCurrentUser,
    #[error("readable or writable by group or others")]
    InsecurePermissions,
}

/// The rule for an existing record file: a regular file of the worker's user that only
/// that user can read. A file that someone else created in a shared sticky directory would
/// otherwise receive the user's records, and a file others may read shows them.
pub fn check_record_file(facts: &RecordFileFacts) -> Result<(), RecordFileProblem> {
    if !facts.is_regular_file {
        return Err(RecordFileProblem::NotRegularFile);
    }
    if facts.owner != facts.euid {
        return Err(RecordFileProblem::NotOwnedByCurrentUser);
    }
    if facts.mode & 0o077 != 0 {
        return Err(RecordFileProblem::InsecurePermissions);
    }
    Ok(())
}

/// The file-system questions a file sink's check asks, answered by the caller, so that the
/// rules stay here and pure (the worker and `relay-doctor` answer them from the disk).
pub trait SinkFiles {
    /// The directory's metadata, following links.
    fn directory(&mut self, directory: &Path) -> std::io::Result<DirectoryFacts>;
    /// What is at `file`, without following a link; `None` when nothing is there.
    fn record_file(&mut self, file: &Path) -> std::io::Result<Option<RecordFileFacts>>;
    /// Whether the worker's user may open `file` for reading and writing; `Err` says why not.
    fn may_open(&mut self, file: &Path) -> std::io::Result<()>;
    /// Whether the worker's user may create a file in `directory`; `Err` says why not.
    fn may_create_in(&mut self, directory: &Path) -> std::io::Result<()>;
}

pub(super) fn parse(config: &Table<'_>) -> Result<ObservabilityConfig, PluginConfigError> {
    config.only(&["capture_content", "sinks", "otlp", "prices"])?;
    let capture_content = config.bool("capture_content")?.unwrap_or(false);
    let sinks = config
        .tables("sinks")?
        .iter()
        .map(parse_sink)
        .collect::<Result<Vec<_>, _>>()?;
    let otlp = config.table("otlp")?.map(|t| parse_otlp(&t)).transpose()?;
    let mut prices = BTreeMap::new();
    if let Some(table) = config.table("prices")? {
        for (model, value) in table.entries() {
            let price = table.child_table(model, value)?;
            prices.insert(model.to_owned(), parse_price(&price)?);
        }
    }
    Ok(ObservabilityConfig {
        capture_content,
        sinks,
        otlp,
        prices: PriceTable::new(prices),
    })
}

fn parse_sink(sink: &Table<'_>) -> Result<Sink, PluginConfigError> {
    match sink.required_str("type")? {
        "file" => {
            sink.only(&["type", "directory", "filename"])?;
            let directory = PathBuf::from(sink.required_str("directory")?);
            if !directory.is_absolute() {
                return Err(sink.place.wrong("directory", "an absolute path"));
            }
            let filename = sink.required_str("filename")?;
            check_filename(sink, filename)?;
            Ok(Sink::File(FileSink {
                directory,
                filename: filename.to_owned(),
            }))
        }
        "http" => {
            sink.only(&[
                "type",
                "url",
                "headers",
                "header_env",
                "batch_max",
                "flush_ms",
                "timeout_ms",
                "queue",
            ])?;
            let url = parse_url(sink, "url")?;
            let (headers, header_env) = parse_headers(sink)?;
            let batch_max = sink
                .int("batch_max", 1, 10_000, "an integer from 1 to 10000")?
                .map_or(HttpSink::DEFAULT_BATCH_MAX, |n| n as usize);
            let flush_ms = sink
                .int("flush_ms", 10, 60_000, "an integer from 10 to 60000")?
                .unwrap_or(HttpSink::DEFAULT_FLUSH_MS);
            let timeout_ms = sink
                .int("timeout_ms", 100, 60_000, "an integer from 100 to 60000")?
                .unwrap_or(HttpSink::DEFAULT_TIMEOUT_MS);
            let queue = sink
                .int("queue", 1, 1_000_000, "an integer from 1 to 1000000")?
                .map_or(HttpSink::DEFAULT_QUEUE, |n| n as usize);
            Ok(Sink::Http(HttpSink {
                url,
                headers,
                header_env,
                batch_max,
                flush_ms,
                timeout_ms,
                queue,
            }))
        }
        _ => Err(sink.place.wrong("type", "\"file\" or \"http\"")),
    }
}

/// A plain file name, no directory part, with `{user}` or `{fingerprint}` and no other
/// placeholder.
fn check_filename(sink: &Table<'_>, filename: &str) -> Result<(), PluginConfigError> {
    if filename.is_empty()
        || filename == "."
        || filename == ".."
        || filename.contains(['/', '\\', '\0'])
    {
        return Err(sink
            .place
            .wrong("filename", "a file name without a directory part"));
    }
    let without = filename.replace("{user}", "").replace("{fingerprint}", "");
    if without.contains(['{', '}']) {
        return Err(sink.place.wrong(
            "filename",
            "a file name whose only placeholders are {user} and {fingerprint}",
        ));
    }
    if without.len() == filename.len() {
        return Err(PluginConfigError::FilenameWithoutIdentity {
            path: sink.place.path(),
            field: sink.place.field("filename"),
        });
    }
    Ok(())
}

fn parse_url(table: &Table<'_>, key: &str) -> Result<String, PluginConfigError> {
    let url = table.required_str(key)?;
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.contains(char::is_whitespace) => {
            // A user and password would not be sent (no sink turns them into a header), and
            // the HTTP client's debug lines name the authority whole.
            let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
            if authority.contains('@') {
                return Err(table.place.wrong(
                    key,
                    "a URL without a user or password (put a credential in headers or header_env)",
                ));
            }
            Ok(url.to_owned())
        }
        _ => Err(table.place.wrong(key, "an http:// or https:// URL")),
    }
}

type Headers = BTreeMap<String, String>;

fn parse_headers(table: &Table<'_>) -> Result<(Headers, Headers), PluginConfigError> {
    let headers = table.string_map("headers")?;
    let header_env = table.string_map("header_env")?;
    for (name, value) in &headers {
        let field = format!("headers.{name}");
        if !is_header_name(name) {
            return Err(table.place.wrong(&field, "keyed by a valid header name"));
        }
        if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
            return Err(table
                .place
                .wrong(&field, "a header value without control characters"));
        }
    }
    for (name, variable) in &header_env {
        let field = format!("header_env.{name}");
        if !is_header_name(name) {
            return Err(table.place.wrong(&field, "keyed by a valid header name"));
        }
        if !is_env_name(variable) {
            return Err(table.place.wrong(
                &field,
                "an environment variable name (letters, digits and _, not starting with a digit)",
            ));
        }
        // Without case: Windows looks variables up that way.
        if KEPT_FROM_WORKERS
            .iter()
            .any(|kept| kept.eq_ignore_ascii_case(variable))
        {
            return Err(table.place.wrong(
                &field,
                "a variable other than RELAY_CLIENT_TOKEN and ANTHROPIC_CUSTOM_HEADERS, which never reach a worker",
            ));
        }
        if headers.keys().any(|h| h.eq_ignore_ascii_case(name)) {
            return Err(PluginConfigError::Conflict {
                path: table.place.path(),
                field: table.place.field(&field),
                other: "the same header in `headers`",
            });
        }
    }
    Ok((headers, header_env))
}

fn parse_otlp(otlp: &Table<'_>) -> Result<OtlpConfig, PluginConfigError> {
    otlp.only(&["endpoint", "service_name", "headers", "header_env"])?;
    let endpoint = parse_url(otlp, "endpoint")?;
    let service_name = match otlp.str("service_name")? {
        None => OtlpConfig::DEFAULT_SERVICE_NAME.to_owned(),
        Some("") => return Err(otlp.place.wrong("service_name", "a non-empty string")),
        Some(name) => name.to_owned(),
    };
    let (headers, header_env) = parse_headers(otlp)?;
    Ok(OtlpConfig {
        endpoint,
        service_name,
        headers,
        header_env,
    })
}

fn parse_price(price: &Table<'_>) -> Result<Price, PluginConfigError> {
    price.only(&[
        "input",
        "output",
        "cache_read",
        "cache_write_5m",
        "cache_write_1h",
        "reasoning",
    ])?;
    Ok(Price {
        input: price
            .price("input")?
            .ok_or_else(|| price.place.missing("input"))?,
        output: price
            .price("output")?
            .ok_or_else(|| price.place.missing("output"))?,
        cache_read: price.price("cache_read")?,
        cache_write_5m: price.price("cache_write_5m")?,
        cache_write_1h: price.price("cache_write_1h")?,
        reasoning: price.price("reasoning")?,
    })
}

/// An HTTP token (RFC 9110 `tchar`s).
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}
