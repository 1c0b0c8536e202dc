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
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(_) if names_a_credential(k) => {
                            Value::String(CREDENTIAL_FIELD.to_owned())
                        }
                        v => redact_value(redactor, v),
                    };
                    (redactor.redact(k).into_owned(), v)
                })
                .collect::<Map<String, Value>>(),
        ),
        other => other.clone(),
    }
}

/// What a text field named for a credential holds in a record.
const CREDENTIAL_FIELD: &str = "[REDACTED:credential]";

/// True for a field whose name says it holds a credential, as a header or a setting: its
/// text is one whatever it looks like, so no detector has to recognise its form (a Basic
/// credential, a cookie, a vendor's key). Case and `-` or `_` do not matter.
fn names_a_credential(name: &str) -> bool {
    const NAMES: [&str; 18] = [
        "authorization",
        "proxy_authorization",
        "cookie",
        "set_cookie",
        "x_api_key",
        "api_key",
        "apikey",
        "x_goog_api_key",
        "x_auth_token",
        "auth_token",
        "access_token",
        "refresh_token",
        "id_token",
        "session_token",
        "x_amz_security_token",
        "client_secret",
        "password",
        "passwd",
    ];
    name.len() <= 24
        && NAMES.iter().any(|known| {
            known.len() == name.len()
                && known
                    .bytes()
                    .zip(name.bytes())
                    .all(|(k, n)| k == n.to_ascii_lowercase() || (k == b'_' && n == b'-'))
        })
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
