//! Content (prompts, tool input and output, bodies) on its way into a record: redacted, then
//! bounded.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

/// Rewrites secrets out of text before it enters a record.
///
/// The recorder requires one and runs every piece of content through it, even content the
/// worker says it has already redacted, so a caller that forgets cannot leak what the
/// redaction component would have caught. Redacting an already redacted text must leave it
/// as it is (the redactor's replacements must not themselves match).
pub trait Redactor: Send + Sync {
    fn redact<'a>(&self, text: &'a str) -> Cow<'a, str>;
}

impl<F> Redactor for F
where
    F: for<'a> Fn(&'a str) -> Cow<'a, str> + Send + Sync,
{
    fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self(text)
    }
}

/// The redactor for a worker with no `pii_redaction` component: content passes unchanged.
/// Named for what it gives up, so its use stands out.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoRedaction;

impl Redactor for NoRedaction {
    fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        Cow::Borrowed(text)
    }
}

/// Redacts then truncates one text field; `true` when it was cut.
pub(super) fn text(redactor: &dyn Redactor, raw: &str, max_bytes: usize) -> (Value, bool) {
    let redacted = redact_text(redactor, raw);
    let (kept, cut) = truncate(&redacted, max_bytes);
    (Value::String(kept.to_owned()), cut)
}

/// A text as a record holds it: through the redactor, then without the credentials free
/// text names ([`hide_named_in_text`]) and without anything shaped like a route token
/// ([`hide_token_shaped`]).
pub(super) fn redact_text<'a>(redactor: &dyn Redactor, raw: &'a str) -> Cow<'a, str> {
    let redacted = redactor.redact(raw);
    let named = then(redacted, hide_named_in_text);
    then(named, hide_token_shaped)
}

/// `step` applied to `text`: still borrowed when neither changed it, and an owned text that
/// `step` left alone is kept, not copied.
fn then<'a>(text: Cow<'a, str>, step: fn(&str) -> Cow<'_, str>) -> Cow<'a, str> {
    match text {
        Cow::Borrowed(text) => step(text),
        Cow::Owned(text) => {
            let changed = match step(&text) {
                Cow::Owned(changed) => Some(changed),
                Cow::Borrowed(_) => None,
            };
            Cow::Owned(changed.unwrap_or(text))
        }
    }
}

/// The length of Relay's route token: 32 random bytes in base64url without padding.
const ROUTE_TOKEN_LEN: usize = 43;

/// `text` with every word that has the shape of a Relay route token written
/// `[REDACTED:credential]`, so a token printed on its own (`echo $RELAY_CLIENT_TOKEN`, `cat`
/// of the token file) stays out of records even with no name before it.
///
/// The shape: exactly 43 base64url characters between characters that are not, mixing
/// upper and lower case, and ending in one of the sixteen characters that close a canonical
/// encoding of 32 bytes. Random 32-byte secrets of other kinds look the same and go too;
/// words, identifiers, hex digests and UUIDs do not. Linear in the text, and it allocates
/// only when it hides something.
fn hide_token_shaped(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let mut out = String::new();
    let (mut copied, mut at) = (0, 0);
    while at < bytes.len() {
        if !is_base64url(bytes[at]) {
            at += 1;
            continue;
        }
        let start = at;
        while at < bytes.len() && is_base64url(bytes[at]) {
            at += 1;
        }
        if is_token_shaped(&bytes[start..at]) {
            out.push_str(&text[copied..start]);
            out.push_str(CREDENTIAL_FIELD);
            copied = at;
        }
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

fn is_base64url(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_')
}

/// See [`hide_token_shaped`].
fn is_token_shaped(word: &[u8]) -> bool {
    // The last of 43 characters carries 4 bits of the 32 bytes and 2 zero bits.
    const LAST: &[u8; 16] = b"AEIMQUYcgkosw048";
    word.len() == ROUTE_TOKEN_LEN
        && word.last().is_some_and(|last| LAST.contains(last))
        && word.iter().any(u8::is_ascii_uppercase)
        && word.iter().any(u8::is_ascii_lowercase)
}

/// Free text (a tool's output of `env` or `cat .env`, a command line, a header block) with
/// every value that a name says is a credential replaced, as a JSON field of that name
/// would be: `GITHUB_TOKEN=…`, `PGPASSWORD="…"`, `password: …`, `x-relay-client-token: …`,
/// `--password=…` and `--password …`, `password => '…'`, `token := "…"`; a YAML block scalar
/// under such a name; the text of an XML element named for one (`<password>…</password>`)
/// and the value of an `<add key="…" value="…" />` whose key is one; `key` and `sig` in a
/// URL's query; a URL's password (`postgres://app:…@db`), curl's `-u user:…`, a `.netrc`
/// password and the password after `-p` of sshpass, a registry login or a MySQL client.
/// A value is what a quote opens and closes. Unquoted, after `:` at the start of a line (a
/// header, YAML) it is the rest of the line; elsewhere it ends at a blank, and also at the
/// quote that opened just before the name (`"PASSWORD=…"`) or, in a query string, at `&`;
/// an authentication scheme (`Basic`, `Bearer`, …) takes the word after it along.
/// Applied twice it changes nothing more. Linear in the text: a name inside a value already
/// hidden is not looked at again.
fn hide_named_in_text(text: &str) -> Cow<'_, str> {
    let (Some(named), Some(after_user), Some(spaced), Some(password_flag), Some(element)) =
        (&*NAMED, &*AFTER_USER, &*SPACED, &*PASSWORD_FLAG, &*ELEMENT)
    else {
        return Cow::Borrowed(text);
    };
    let mut hidden: Vec<(usize, usize)> = Vec::new();
    let mut hidden_to = 0;
    // Where the line of the last name looked at starts, found going forward only.
    let (mut line_start, mut scanned_to) = (0, 0);
    for found in named.find_iter(text) {
        if found.start() < hidden_to {
            continue;
        }
        let head = found.as_str();
        let name_end = head
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
            .unwrap_or(head.len());
        let name = &head[..name_end];
        let before = text[..found.start()].chars().next_back();
        let in_query = matches!(before, Some('?' | '&'));
        // `tokens` alone, a credential as a JSON field's whole name, is a count in prose
        // and in printed usage (`Input tokens: 1234`).
        let named = !name.eq_ignore_ascii_case("tokens") && names_a_credential(name);
        // `key` and `sig` alone are credentials in a URL's query (`?key=…`, a shared
        // access signature's `&sig=…`), and ordinary words elsewhere.
        let in_query_named =
            in_query && ["key", "sig"].iter().any(|n| name.eq_ignore_ascii_case(n));
        if !(named || in_query_named) {
            continue;
        }
        // A hash the redactor left (`[HASH:api_key:0123456789ab]`) names the detector that
        // found a value, and what follows is the hash: hidden, equal values would no longer
        // correlate, and the bracket would be left open. Only that exact shape is passed
        // over, so text cannot borrow it to keep a value.
        if text[..found.start()].ends_with(HASH_OPENING) && is_left_hash(&text[found.end()..]) {
            continue;
        }
        let rest = &text[found.end()..];
        // `token == expected`: a comparison, not a value.
        if rest.starts_with('=') {
            continue;
        }
        if let Some(newline) = text[scanned_to..found.start()].rfind('\n') {
            line_start = scanned_to + newline + 1;
        }
        scanned_to = found.start();
        let by_colon = head.trim_end_matches([' ', '\t']).ends_with(':');
        let indent = &text[line_start..found.start()];
        let end = if by_colon && indent.trim().is_empty() {
            End::LineEnd
        } else {
            End::Blank {
                quote: before.filter(|c| matches!(c, '"' | '\'')),
                ampersand: in_query,
            }
        };
        let mut len = value_len(rest, end);
        if matches!(end, End::LineEnd) && is_block_indicator(&rest[..len]) {
            len += block_len(&rest[len..], indent.len());
        }
        if len > 0 {
            hidden.push((found.end(), found.end() + len));
            hidden_to = found.end() + len;
        }
    }
    for caps in after_user.captures_iter(text) {
        if let Some(value) = caps.get(1).or_else(|| caps.get(2)) {
            hidden.push((value.start(), value.end()));
        }
    }
    for value in spaced
        .captures_iter(text)
        .chain(password_flag.captures_iter(text))
        .filter_map(|caps| caps.get(1))
    {
        let len = value_len(&text[value.start()..], End::blank());
        hidden.push((value.start(), value.start() + len));
    }
    for caps in element.captures_iter(text) {
        let (name, value) = match (caps.get(1), caps.get(2), caps.get(3)) {
            (Some(open), Some(value), Some(close)) if open.as_str() == close.as_str() => {
                // The name without its namespace prefix (`ns:password`).
                let name = open.as_str();
                (name.rsplit(':').next().unwrap_or(name), value)
            }
            (Some(_), _, _) => continue,
            _ => match (caps.get(4), caps.get(5)) {
                (Some(name), Some(value)) => (name.as_str(), value),
                _ => continue,
            },
        };
        if names_a_credential(name) && !value.as_str().trim().is_empty() {
            hidden.push((value.start(), value.end()));
        }
    }
    if hidden.is_empty() {
        return Cow::Borrowed(text);
    }
    hidden.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end) in hidden {
        if start < at {
            // Within one already hidden: it hides on to the further end.
            at = at.max(end);
            continue;
        }
        out.push_str(&text[at..start]);
        out.push_str(CREDENTIAL_FIELD);
        at = end;
    }
    out.push_str(&text[at..]);
    Cow::Owned(out)
}

/// Where an unquoted value ends.
#[derive(Clone, Copy)]
enum End {
    /// At the line's end.
    LineEnd,
    /// At a blank, or at this quote, or at `&` in a query string.
    Blank {
        quote: Option<char>,
        ampersand: bool,
    },
}

impl End {
    fn blank() -> End {
        End::Blank {
            quote: None,
            ampersand: false,
        }
    }
}

/// Authentication schemes whose next word is the credential (`Authorization: Basic …`).
const AUTH_SCHEMES: [&str; 6] = ["basic", "bearer", "digest", "token", "negotiate", "ntlm"];

/// The longest quoted value hidden to its closing quote, in bytes and in lines: a 4096-bit
/// RSA key in PEM is about 3.3 KB on 52 lines.
const MAX_QUOTED_VALUE: usize = 8 * 1024;
const MAX_QUOTED_LINES: usize = 64;

/// How long the value at the start of `rest` is: see [`hide_named_in_text`].
fn value_len(rest: &str, end: End) -> usize {
    if rest.starts_with(CREDENTIAL_FIELD) {
        return CREDENTIAL_FIELD.len();
    }
    match (rest.chars().next(), end) {
        (Some(quote @ ('"' | '\'')), _) => {
            // To the closing quote, a backslash escaping the next character, over as many
            // lines as the value spans (a key kept in a `.env` file); a quote that does not
            // close within `MAX_QUOTED_LINES` lines and `MAX_QUOTED_VALUE` bytes hides only
            // the rest of its line, so a stray one does not hide the whole text, and a text
            // of many such quotes is still read in linear time.
            let mut escaped = false;
            let mut line_end = None;
            let mut lines = 0;
            for (at, c) in rest.char_indices().skip(1) {
                if at > MAX_QUOTED_VALUE {
                    break;
                }
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == '\n' {
                    line_end.get_or_insert(at);
                    lines += 1;
                    if lines > MAX_QUOTED_LINES {
                        break;
                    }
                } else if c == quote {
                    return at + 1;
                }
            }
            line_end.unwrap_or_else(|| rest.find('\n').unwrap_or(rest.len()))
        }
        (_, End::LineEnd) => rest.find(['\r', '\n']).unwrap_or(rest.len()),
        (_, End::Blank { quote, ampersand }) => {
            let word = |from: usize| {
                from + rest[from..]
                    .find(|c: char| {
                        c.is_whitespace() || Some(c) == quote || (ampersand && c == '&')
                    })
                    .unwrap_or(rest.len() - from)
            };
            let first = word(0);
            let scheme = AUTH_SCHEMES
                .iter()
                .any(|s| rest[..first].eq_ignore_ascii_case(s));
            let after =
                first + rest[first..].len() - rest[first..].trim_start_matches([' ', '\t']).len();
            if scheme && after > first && after < rest.len() {
                word(after)
            } else {
                first
            }
        }
    }
}

/// A name and what separates it from its value. The patterns are constants, which the
/// tests compile.
/// The name may close a quote and an index (`os.environ["API_KEY"] = …`); the separator is
/// `=`, `:`, `=>` (Ruby, PHP, Perl) or `:=` (Go, Pascal, make).
static NAMED: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r#"[A-Za-z][A-Za-z0-9_.-]*["']?\]?[ \t]*(?:=>|:=|[=:])[ \t]*"#).ok()
});
/// The password after a user: a URL's (`scheme://user:…@`, the user may be empty) and curl's
/// (`-u user:…`, `--user=user:…`, `-uuser:…`).
static AFTER_USER: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:]*:([^\s/?#@]+)@|(?:^|[ \t])(?:-u|--user)[ =]*[^\s:]+:(\S+)",
    )
    .ok()
});
/// A value after a blank: a command-line flag named for a credential (`--password …`), and
/// a `.netrc` password (`machine … password …`, or a line of its own).
static SPACED: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?m)(?:(?:^|[ \t])--(?:password|passwd|token|secret|api-key|api_key|access-token|auth-token)|^[ \t]*(?:(?:machine|default|login|account)[ \t][^\n]*?[ \t])?password)[ \t]+([^\s:=-]\S*)",
    )
    .ok()
});

/// The password a command takes after `-p`: sshpass's and a registry login's (`docker login
/// -p …`), and the MySQL clients' when it is attached (`mysql -p…`; `-p` alone asks for it).
static PASSWORD_FLAG: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?:\b(?:sshpass|(?:docker|podman|buildah|nerdctl)[ \t]+login)\b[^\n|;&]*?[ \t]-p[ \t]*|\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mariadb|mariadb-dump)\b[^\n|;&]*?[ \t]-p)([^\s-])",
    )
    .ok()
});
/// An XML element and its text (`<password>…</password>`, Maven's settings), or a setting
/// given as attributes (`<add key="ClearTextPassword" value="…" />`, NuGet's and .NET's):
/// the caller checks that a closing tag is the opening one's, and that the name is a
/// credential's.
static ELEMENT: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r#"<([A-Za-z][A-Za-z0-9_.:-]*)(?:[ \t][^<>]*)?>([^<]*)</([A-Za-z][A-Za-z0-9_.:-]*)>|\b(?:key|name)[ \t]*=[ \t]*"([^"<>]*)"[ \t]+value[ \t]*=[ \t]*"([^"]*)""#,
    )
    .ok()
});

/// A YAML block scalar's header (`|`, `>-`, `|2+`): the value is on the lines below.
fn is_block_indicator(value: &str) -> bool {
    let mut chars = value.trim_end().chars();
    matches!(chars.next(), Some('|' | '>')) && chars.all(|c| matches!(c, '-' | '+' | '1'..='9'))
}

/// How far the lines of a block scalar run in `rest` (which starts at the end of the line
/// of its header): every line indented further than the name's `indent`, and the blank lines
/// between them; it ends before the line break that follows the last of them.
fn block_len(rest: &str, indent: usize) -> usize {
    let mut len = 0;
    let mut at = 0;
    while at < rest.len() {
        let line_start = at + rest[at..].find('\n').map_or(rest.len() - at, |n| n + 1);
        if line_start >= rest.len() {
            break;
        }
        let line_end = rest[line_start..]
            .find('\n')
            .map_or(rest.len(), |n| line_start + n);
        let line = rest[line_start..line_end].trim_end_matches('\r');
        let content = line.trim_start_matches([' ', '\t']);
        if !content.is_empty() {
            if line.len() - content.len() <= indent {
                break;
            }
            len = line_start + line.len();
        }
        at = line_end;
    }
    len
}

/// Redacts every string (keys too) of a JSON value; when its serialisation exceeds
/// `max_bytes` it becomes a string holding the first `max_bytes` of that serialisation.
/// Redaction runs before the cut, so a secret is never halved into something the redactor
/// no longer recognises.
pub(super) fn json(redactor: &dyn Redactor, raw: &Value, max_bytes: usize) -> (Value, bool) {
    let redacted = redact_value(redactor, raw);
    let serialised = redacted.to_string();
    if serialised.len() <= max_bytes {
        return (redacted, false);
    }
    let (kept, _) = truncate(&serialised, max_bytes);
    (Value::String(kept.to_owned()), true)
}

fn redact_value(redactor: &dyn Redactor, value: &Value) -> Value {
    match value {
        Value::String(s) => Value::String(redact_text(redactor, s).into_owned()),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| redact_value(redactor, item))
                .collect(),
        ),
        Value::Object(fields) => {
            // A header or a variable given as `{"name": "Authorization", "value": "…"}`
            // (or `key`, in any case).
            let named = fields.iter().any(|(k, v)| {
                (k.eq_ignore_ascii_case("name") || k.eq_ignore_ascii_case("key"))
                    && v.as_str().is_some_and(names_a_credential)
            });
            Value::Object(
                fields
                    .iter()
                    .map(|(k, v)| {
                        let v = if names_a_credential(k)
                            || (named && k.eq_ignore_ascii_case("value"))
                        {
                            hide_text(redactor, v)
                        } else {
                            redact_value(redactor, v)
                        };
                        (redactor.redact(k).into_owned(), v)
                    })
                    .collect::<Map<String, Value>>(),
            )
        }
        other => other.clone(),
    }
}

/// What a text field named for a credential holds in a record.
const CREDENTIAL_FIELD: &str = "[REDACTED:credential]";
/// How the redactor's `hash` action opens what it leaves (see `redact.rs`).
const HASH_OPENING: &str = "[HASH:";

/// Whether `rest` starts with the rest of what the `hash` action leaves: 12 lowercase hex
/// digits and the closing bracket.
fn is_left_hash(rest: &str) -> bool {
    rest.as_bytes().get(..13).is_some_and(|left| {
        left[12] == b']'
            && left[..12]
                .iter()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// The value of a field named for a credential: every text in it replaced, however deep.
/// One exception: a JSON Schema (a tool's input schema naming an `api_key` parameter,
/// say) describes a field rather than holding one, and is walked field by field instead.
/// Numbers and booleans stay.
fn hide_text(redactor: &dyn Redactor, value: &Value) -> Value {
    match value {
        Value::String(_) => Value::String(CREDENTIAL_FIELD.to_owned()),
        Value::Array(items) => Value::Array(items.iter().map(|v| hide_text(redactor, v)).collect()),
        Value::Object(fields) if is_schema(fields) => redact_value(redactor, value),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| (redactor.redact(k).into_owned(), hide_text(redactor, v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// True for an object that reads as a JSON Schema: a `type` naming a JSON type, or
/// `properties`.
fn is_schema(fields: &Map<String, Value>) -> bool {
    const TYPES: [&str; 7] = [
        "string", "object", "array", "number", "integer", "boolean", "null",
    ];
    fields.get("properties").is_some_and(Value::is_object)
        || fields
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| TYPES.contains(&t))
}

/// True for a field whose name says it holds a credential, as a header, a setting or an
/// environment variable does: its text is one whatever it looks like, so no detector has
/// to recognise its form (a Basic credential, a cookie, a vendor's key, Relay's own route
/// token). The name is read in words whatever its case and separators (`accessToken`,
/// `ACCESS_TOKEN`, `access-token` and `AWSSecretKey` are read as words), without a
/// trailing number or version (`API_KEY_2`, `token_v2`).
fn names_a_credential(name: &str) -> bool {
    // Most names hold none of the parts of the words below (every `"field":` of a JSON
    // document, every name free text holds): they are passed over without being read in
    // words, which allocates.
    let bytes = name.as_bytes();
    if !CREDENTIAL_PARTS.iter().any(|part| {
        bytes
            .windows(part.len())
            .any(|w| w.eq_ignore_ascii_case(part))
    }) {
        return false;
    }
    let name = words(name);
    // `tokens` alone: as an ending it is a count's name (`max_tokens`).
    name == "tokens"
        || CREDENTIAL_WORDS
            .iter()
            .any(|w| name == *w || name.strip_suffix(w).is_some_and(|rest| rest.ends_with('_')))
        || CREDENTIAL_ENDINGS
            .iter()
            .any(|ending| name.ends_with(ending))
}

/// A part of every word of [`CREDENTIAL_WORDS`] and [`CREDENTIAL_ENDINGS`].
const CREDENTIAL_PARTS: [&[u8]; 9] = [
    b"key",
    b"token",
    b"secret",
    b"pass",
    b"pwd",
    b"auth",
    b"credential",
    b"cookie",
    b"connection",
];

/// Whole names, and the words a name may end in: `secret_key` matches `SECRET_KEY` and
/// `STRIPE_SECRET_KEY`.
pub(super) const CREDENTIAL_WORDS: [&str; 30] = [
    "apikey",
    "api_key",
    "api_keys",
    "token",
    "secret",
    "secrets",
    "password",
    "passwords",
    "passwd",
    "pwd",
    "pass",
    "passphrase",
    "auth",
    "authtoken",
    "apitoken",
    "accesstoken",
    "secretkey",
    "credential",
    "credentials",
    "secret_key",
    "secret_key_base",
    "private_key",
    "access_key",
    "signing_key",
    "subscription_key",
    "functions_key",
    "auth_key",
    "account_key",
    "encryption_key",
    "connection_string",
];
/// Endings that need no word boundary before them.
pub(super) const CREDENTIAL_ENDINGS: [&str; 5] =
    ["authorization", "cookie", "password", "passwd", "secret"];

/// `name` lowercased, its words joined by `_`, without a trailing number or version: a
/// `-`, `.` or space is a word boundary, and so is a capital after a lower-case letter or
/// a digit, or a capital that starts a word after an acronym (`AWSSecret` reads
/// `aws_secret`).
fn words(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::with_capacity(name.len() + 4);
    for (at, &c) in chars.iter().enumerate() {
        if matches!(c, '-' | '_' | '.' | ' ') {
            if !out.is_empty() && !out.ends_with('_') {
                out.push('_');
            }
            continue;
        }
        let before = at.checked_sub(1).map(|i| chars[i]);
        let after = chars.get(at + 1);
        let starts_word = c.is_ascii_uppercase()
            && before.is_some_and(|b| {
                b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || (b.is_ascii_uppercase() && after.is_some_and(char::is_ascii_lowercase))
            });
        if starts_word && !out.ends_with('_') {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    // `api_key_2`, `api_key2`, `token_v2`: the number says which one, not what it is.
    loop {
        let trimmed = out.trim_end_matches(|c: char| c.is_ascii_digit());
        let trimmed = match trimmed
            .strip_suffix("_v")
            .or_else(|| trimmed.strip_suffix('v'))
        {
            Some(rest) if trimmed.len() < out.len() => rest,
            _ => trimmed,
        };
        let trimmed = trimmed.trim_end_matches('_');
        if trimmed.len() == out.len() || trimmed.is_empty() {
            return out;
        }
        out.truncate(trimmed.len());
    }
}

/// The longest prefix of at most `max_bytes` that ends on a character boundary.
pub(super) fn truncate(text: &str, max_bytes: usize) -> (&str, bool) {
    if text.len() <= max_bytes {
        return (text, false);
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

/// Identifiers (session ids, tool names, model names, event names) are not content, but
/// they come from the harness too: each is kept to this many bytes so a hostile payload
/// cannot make the recorder's state or a record large.
pub(super) const MAX_ID_BYTES: usize = 256;

/// An identifier as records hold it: through the content filter ([`redact_text`]), then, if
/// longer than [`MAX_ID_BYTES`], its start, `…` and the first 16 hex digits of the SHA-256
/// of the whole, so two long ids that share a start stay two ids and the cut shows.
pub(super) fn id_text<'a>(redactor: &dyn Redactor, raw: &'a str) -> Cow<'a, str> {
    let filtered = redact_text(redactor, raw);
    if filtered.len() <= MAX_ID_BYTES {
        return filtered;
    }
    const DIGEST_HEX: usize = 16;
    let digest = ring::digest::digest(&ring::digest::SHA256, filtered.as_bytes());
    let hex: String = digest.as_ref()[..DIGEST_HEX / 2]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let (start, _) = truncate(&filtered, MAX_ID_BYTES - '…'.len_utf8() - DIGEST_HEX);
    Cow::Owned(format!("{start}…{hex}"))
}

pub(super) fn bounded_id(id: &str) -> &str {
    truncate(id, MAX_ID_BYTES).0
}
