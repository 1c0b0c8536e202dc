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

/// The value of a field named for a credential: its text, and the text of a list under it,
/// replaced. An object under it is walked as any other, field by field and name by name
/// (`"credentials": {"AccessKeyId": …, "SecretAccessKey": …}`, or a tool schema's
/// `"api_key": {"type": "string"}`), and numbers and booleans stay.
fn hide_text(redactor: &dyn Redactor, value: &Value) -> Value {
    match value {
        Value::String(_) => Value::String(CREDENTIAL_FIELD.to_owned()),
        Value::Array(items) => Value::Array(items.iter().map(|v| hide_text(redactor, v)).collect()),
        other => redact_value(redactor, other),
    }
}

/// True for a field whose name says it holds a credential, as a header, a setting or an
/// environment variable does: its text is one whatever it looks like, so no detector has
/// to recognise its form (a Basic credential, a cookie, a vendor's key, Relay's own route
/// token). The name is read in words, whatever its case and separators: `accessToken`,
/// `ACCESS_TOKEN` and `access-token` are one name.
fn names_a_credential(name: &str) -> bool {
    const NAMES: [&str; 15] = [
        "apikey",
        "api_key",
        "api_keys",
        "token",
        "tokens",
        "secret",
        "secrets",
        "password",
        "passwords",
        "passwd",
        "pwd",
        "pass",
        "auth",
        "credential",
        "credentials",
    ];
    const ENDINGS: [&str; 21] = [
        "authorization",
        "cookie",
        "password",
        "passwd",
        "secret",
        "secrets",
        "_pwd",
        "_pass",
        "_token",
        "_tokens",
        "_api_key",
        "_api_keys",
        "_apikey",
        "_secret_key",
        "_private_key",
        "_access_key",
        "_signing_key",
        "_subscription_key",
        "_functions_key",
        "_credential",
        "_credentials",
    ];
    let name = words(name);
    NAMES.contains(&name.as_str()) || ENDINGS.iter().any(|ending| name.ends_with(ending))
}

/// `name` lowercased, its words joined by `_`: a `-`, `.` or space is one, and so is the
/// start of a capital after a lower-case letter or a digit (`SecretAccessKey`).
fn words(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    let mut after_lower = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.' | ' ') {
            out.push('_');
            after_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && after_lower {
            out.push('_');
        }
        after_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        out.push(c.to_ascii_lowercase());
    }
    out
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
