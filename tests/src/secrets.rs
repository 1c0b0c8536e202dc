//! Looking for secrets in logs (STYLE: "a test searches every log a test run produced for
//! the secrets it used"). A secret is searched in every form a careless log line could
//! give it: raw bytes, hex, base64 and base64url with and without padding, and the two
//! ways Rust's `Debug` prints bytes (`b"…\x0b…"` escapes and `[11, 22, …]` lists); each
//! form is looked for in the raw log bytes and in the decoded string values of each JSON
//! line (where backslashes are doubled on the wire).

use std::fmt::Write as _;
use std::path::Path;

use base64::Engine as _;
use serde_json::Value;

/// The secrets a test knows, each with a label for the failure message.
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    /// `(label, form name, bytes to look for)`.
    needles: Vec<(String, &'static str, Vec<u8>)>,
}

/// A secret found in a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leak {
    pub secret: String,
    pub form: &'static str,
    pub log: String,
    /// The text around the first occurrence, the secret itself replaced by `«secret»`.
    pub context: String,
}

impl std::fmt::Display for Leak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}) in {}: …{}…",
            self.secret, self.form, self.log, self.context
        )
    }
}

/// How much text around a leak its report shows.
const CONTEXT_BYTES: usize = 120;

impl Secrets {
    pub fn new() -> Secrets {
        Secrets::default()
    }

    /// A secret given as text (a route token as the harness sends it).
    pub fn add_text(&mut self, label: &str, text: &str) {
        self.needles
            .push((label.to_owned(), "text", text.as_bytes().to_vec()));
    }

    /// A binary secret, in all the forms listed in the module docs.
    pub fn add_bytes(&mut self, label: &str, bytes: &[u8]) {
        for (form, needle) in forms(bytes) {
            if !self
                .needles
                .iter()
                .any(|(l, f, n)| l == label && *f == form && *n == needle)
            {
                self.needles.push((label.to_owned(), form, needle));
            }
        }
    }

    /// A PKCS#8 Ed25519 key file: the whole document, and the 32-byte private seed inside.
    pub fn add_key_file(&mut self, label: &str, path: &Path) -> std::io::Result<()> {
        let document = std::fs::read(path)?;
        self.add_bytes(&format!("{label} (PKCS#8 document)"), &document);
        if let Some(seed) = ed25519_seed(&document) {
            self.add_bytes(&format!("{label} (private seed)"), seed);
        }
        Ok(())
    }

    /// How many distinct secrets are registered.
    pub fn len(&self) -> usize {
        let mut labels: Vec<&str> = self.needles.iter().map(|(l, _, _)| l.as_str()).collect();
        labels.sort_unstable();
        labels.dedup();
        labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// Every secret found in `bytes`, the log named `log`.
    pub fn find_in(&self, log: &str, bytes: &[u8]) -> Vec<Leak> {
        let decoded = decoded_strings(bytes);
        let mut leaks = Vec::new();
        for (label, form, needle) in &self.needles {
            if leaks
                .iter()
                .any(|leak: &Leak| leak.secret == *label && leak.log == log)
            {
                continue;
            }
            let found = std::iter::once(bytes)
                .chain(decoded.iter().map(String::as_bytes))
                .find_map(|text| context(text, needle));
            if let Some(context) = found {
                leaks.push(Leak {
                    secret: label.clone(),
                    form,
                    log: log.to_owned(),
                    context,
                });
            }
        }
        leaks
    }
}

/// The text around the first occurrence of `needle` in `haystack`, with the needle
/// replaced, or `None` when it does not occur.
fn context(haystack: &[u8], needle: &[u8]) -> Option<String> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return None;
    }
    let at = haystack
        .windows(needle.len())
        .position(|window| window == needle)?;
    let start = at.saturating_sub(CONTEXT_BYTES);
    let end = (at + needle.len() + CONTEXT_BYTES).min(haystack.len());
    Some(format!(
        "{}«secret»{}",
        String::from_utf8_lossy(&haystack[start..at]),
        String::from_utf8_lossy(&haystack[at + needle.len()..end])
    ))
}

/// Every form of `bytes` a log line might hold.
pub(crate) fn forms(bytes: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    vec![
        ("raw", bytes.to_vec()),
        ("hex", hex::encode(bytes).into_bytes()),
        ("HEX", hex::encode_upper(bytes).into_bytes()),
        ("base64", STANDARD.encode(bytes).into_bytes()),
        (
            "base64 unpadded",
            STANDARD_NO_PAD.encode(bytes).into_bytes(),
        ),
        ("base64url", URL_SAFE.encode(bytes).into_bytes()),
        (
            "base64url unpadded",
            URL_SAFE_NO_PAD.encode(bytes).into_bytes(),
        ),
        ("Debug of bytes::Bytes", bytes_debug(bytes).into_bytes()),
        (
            "escape_ascii",
            bytes.escape_ascii().to_string().into_bytes(),
        ),
        ("Debug of [u8]", format!("{bytes:?}").into_bytes()),
    ]
}

/// The inside of `bytes::Bytes`'s `Debug` (`b"…"`), which `tungstenite` and `hyper` use for
/// payloads.
fn bytes_debug(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 4);
    for &byte in bytes {
        match byte {
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b'\\' | b'"' => {
                out.push('\\');
                out.push(char::from(byte));
            }
            b'\0' => out.push_str("\\0"),
            0x20..=0x7e => out.push(char::from(byte)),
            _ => {
                let _ = write!(out, "\\x{byte:02x}");
            }
        }
    }
    out
}

/// The 32-byte seed of a PKCS#8 Ed25519 document as ring writes it: the octet string
/// `04 20 <seed>` wrapped in `04 22`.
fn ed25519_seed(document: &[u8]) -> Option<&[u8]> {
    let at = document
        .windows(4)
        .position(|window| window == [0x04, 0x22, 0x04, 0x20])?;
    document.get(at + 4..at + 36)
}

/// The string values (at any depth) of every line of `bytes` that is a JSON value.
fn decoded_strings(bytes: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    for line in bytes.split(|&byte| byte == b'\n') {
        if let Ok(value) = serde_json::from_slice::<Value>(line) {
            collect_strings(&value, &mut out);
        }
    }
    out
}

fn collect_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(text) => out.push(text.clone()),
        Value::Array(items) => items.iter().for_each(|item| collect_strings(item, out)),
        Value::Object(fields) => fields.values().for_each(|item| collect_strings(item, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests;
