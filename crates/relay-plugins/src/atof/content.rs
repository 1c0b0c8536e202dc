//! Content (prompts, tool input and output, bodies) on its way into a record: redacted, then
//! bounded.

mod named;

use std::borrow::Cow;

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

/// A text as a record holds it: without its URLs' passwords
/// ([`named::hide_url_passwords`], first, so that no detector takes part of one), through
/// the redactor, then without the other credentials free text names
/// ([`named::hide_named_in_text`]) and without anything shaped like a route token
/// ([`hide_token_shaped`]).
pub(super) fn redact_text<'a>(redactor: &dyn Redactor, raw: &'a str) -> Cow<'a, str> {
    let passwordless = named::hide_url_passwords(raw);
    let redacted = then(passwordless, |text| redactor.redact(text));
    let named = then(redacted, named::hide_named_in_text);
    then(named, hide_token_shaped)
}

/// `step` applied to `text`: still borrowed when neither changed it, and an owned text that
/// `step` left alone is kept, not copied.
fn then<'a>(text: Cow<'a, str>, step: impl Fn(&str) -> Cow<'_, str>) -> Cow<'a, str> {
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
        // Padding after it makes it standard base64 (a `go.sum` hash), which a token is not.
        if is_token_shaped(&bytes[start..at]) && bytes.get(at) != Some(&b'=') {
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
const CREDENTIAL_PARTS: [&[u8]; 11] = [
    b"key",
    b"secure",
    b"dockerconfig",
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
pub(super) const CREDENTIAL_WORDS: [&str; 41] = [
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
    // AWS Secrets Manager's fields for a secret's value.
    "secret_string",
    "secret_binary",
    // Vault's AppRole secret, Azure's secure values and account keys.
    "secret_id",
    "secure_value",
    "master_key",
    // A kubeconfig's and a Kubernetes secret's keys.
    "key_data",
    "privatekey",
    "tls_key",
    "dockerconfigjson",
    // A registry's token in `~/.docker/config.json`, and Yarn's `npmAuthIdent`.
    "identitytoken",
    "auth_ident",
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
