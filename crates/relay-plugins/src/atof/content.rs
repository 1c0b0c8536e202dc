//! Content (prompts, tool input and output, bodies) on its way into a record: redacted, then
//! bounded.

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
    let redacted = redactor.redact(raw);
    let (kept, cut) = truncate(&redacted, max_bytes);
    (Value::String(kept.to_owned()), cut)
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
        Value::String(s) => Value::String(redactor.redact(s).into_owned()),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| redact_value(redactor, item))
                .collect(),
        ),
        Value::Object(fields) => {
            // A header given as `{"name": "Authorization", "value": "…"}`.
            let named = fields
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(names_a_credential);
            Value::Object(
                fields
                    .iter()
                    .map(|(k, v)| {
                        let v = if names_a_credential(k) || (named && k == "value") {
                            hide_text(v)
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

/// Every string in `value` replaced: it sits under a name that says it is a credential.
/// Numbers and booleans stay (`"access_token_count": 3` is not a secret, and a count under
/// such a name rarely is).
fn hide_text(value: &Value) -> Value {
    match value {
        Value::String(_) => Value::String(CREDENTIAL_FIELD.to_owned()),
        Value::Array(items) => Value::Array(items.iter().map(hide_text).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), hide_text(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// True for a field whose name says it holds a credential, as a header, a setting or an
/// environment variable does: its text is one whatever it looks like, so no detector has
/// to recognise its form (a Basic credential, a cookie, a vendor's key, Relay's own route
/// token). Case, and `-` against `_`, do not matter.
fn names_a_credential(name: &str) -> bool {
    const NAMES: [&str; 7] = [
        "apikey",
        "api_key",
        "token",
        "secret",
        "password",
        "passwd",
        "credential",
    ];
    const ENDINGS: [&str; 12] = [
        "authorization",
        "cookie",
        "_api_key",
        "_apikey",
        "_token",
        "_secret",
        "_password",
        "_passwd",
        "_access_key",
        "_private_key",
        "_credential",
        "_credentials",
    ];
    if name.len() > 64 {
        return false;
    }
    let name: String = name
        .chars()
        .map(|c| {
            if c == '-' {
                '_'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    NAMES.contains(&name.as_str()) || ENDINGS.iter().any(|ending| name.ends_with(ending))
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

pub(super) fn bounded_id(id: &str) -> &str {
    truncate(id, MAX_ID_BYTES).0
}
