//! Rewriting the string literals of a JSON text in place: the lexer only finds strings (a
//! quote outside a string opens one, a backslash escapes the next byte, a quote closes it),
//! so keys, numbers, whitespace and order are copied byte for byte.

use std::borrow::Cow;
use std::collections::HashSet;

use serde_json::Value;

use super::{BodyRedaction, Redactor, Replacements, Triggered};

pub(super) fn redact_strings<'a>(
    redactor: &Redactor,
    body: &'a [u8],
    triggered: Triggered,
) -> BodyRedaction<'a> {
    // Validating costs a parse without building anything, and only bodies where a
    // prefilter fired pay it.
    // A body that is JSON but for a few bytes that are not UTF-8 keeps its structure: its
    // strings are redacted by their UTF-8 parts, as is a body that is not JSON at all.
    let is_json = serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok()
        || (std::str::from_utf8(body).is_err()
            && serde_json::from_str::<serde::de::IgnoredAny>(&String::from_utf8_lossy(body))
                .is_ok());
    if !is_json {
        // Not a JSON body: there is no string structure to keep, so it is redacted as text
        // rather than let through.
        return redact_as_text(redactor, body, 0, None, Replacements::default(), triggered);
    }
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    let mut replaced = Replacements::default();
    let mut at = 0;
    // Found the first time a string would change.
    let mut signed: Option<HashSet<String>> = None;
    while let Some(open) = memchr::memchr(b'"', &body[at..]).map(|i| at + i) {
        let Some((close, escaped)) = string_end(body, open + 1) else {
            // A string that never closes: the rest is redacted as text.
            return redact_as_text(
                redactor,
                body,
                open,
                Some((out, copied)),
                replaced,
                triggered,
            );
        };
        let raw = &body[open + 1..close];
        at = close + 1;
        let Some(rewritten) = redact_literal(redactor, raw, escaped, triggered) else {
            continue;
        };
        let signed = signed.get_or_insert_with(|| provider_signed(body));
        if !signed.is_empty() && is_one_of(signed, raw, escaped) {
            continue;
        }
        let (literal, more) = rewritten;
        let out = out.get_or_insert_with(|| Vec::with_capacity(body.len() + 64));
        out.extend_from_slice(&body[copied..open + 1]);
        out.extend_from_slice(&literal);
        copied = close;
        replaced.merge(more);
    }
    match out {
        None => BodyRedaction {
            body: Cow::Borrowed(body),
            replaced,
        },
        Some(mut out) => {
            out.extend_from_slice(&body[copied..]);
            BodyRedaction {
                body: Cow::Owned(out),
                replaced,
            }
        }
    }
}

/// The string values of `body` that the provider generated and checks when they come back
/// in a later request: the text and signature of the thinking blocks in Anthropic assistant
/// turns (`messages[].content[]`), the data of their redacted thinking, and the encrypted
/// content of OpenAI reasoning items (`input[]`). A changed one is refused (400), which
/// would end the agent's turn; and what they hold came from the provider, so sending it
/// back as it was discloses nothing the provider has not seen. Only those places count: a
/// block of the same shape in a user turn is redacted like any other string.
fn provider_signed(body: &[u8]) -> HashSet<String> {
    let mut found = HashSet::new();
    let mentions = |word: &[u8]| memchr::memmem::find(body, word).is_some();
    if !mentions(b"thinking") && !mentions(b"reasoning") {
        return found;
    }
    // A body with bytes that are not UTF-8 is read as the lexer reads it.
    let Some(document) =
        parse_value(body).or_else(|| parse_value(String::from_utf8_lossy(body).as_bytes()))
    else {
        return found;
    };
    let items = |key: &str| {
        document
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
    };
    let assistant_blocks = items("messages")
        .filter(|message| message.get("role").and_then(Value::as_str) == Some("assistant"))
        .filter_map(|message| message.get("content").and_then(Value::as_array))
        .flatten();
    for item in assistant_blocks.chain(items("input")) {
        let signed: &[&str] = match item.get("type").and_then(Value::as_str) {
            Some("thinking") => &["thinking", "signature"],
            Some("redacted_thinking") => &["data"],
            Some("reasoning") => &["encrypted_content"],
            _ => &[],
        };
        for name in signed {
            if let Some(Value::String(text)) = item.get(*name) {
                found.insert(text.clone());
            }
        }
    }
    found
}

/// A JSON document as agents write it. serde_json refuses a lone UTF-16 surrogate escape
/// (`\ud83d`, from a tool output cut in the middle of an emoji, which JavaScript's
/// `JSON.stringify` writes as it is), and with it the whole document; here such a string
/// reads with U+FFFD in its place, as the lexer above decodes it. `None` for anything else
/// that is not JSON, invalid UTF-8 included.
pub fn parse_value(body: &[u8]) -> Option<Value> {
    serde_json::from_slice::<Value>(body)
        .ok()
        .or_else(|| serde_json::from_slice::<Value>(&strings_reescaped(body)?).ok())
}

/// Whether [`parse_value`] reads `body` as a JSON object, found without building the value:
/// the same reading (serde_json's, nesting limit and numbers included, then with lone
/// surrogates replaced), so a check made without the value agrees with one made with it.
pub fn is_json_object(body: &[u8]) -> bool {
    let object = |body: &[u8]| serde_json::from_slice::<Skipped>(body).is_ok_and(|s| s.object);
    object(body) || strings_reescaped(body).is_some_and(|body| object(&body))
}

/// A JSON value read as `Value` reads it (through `deserialize_any`, where serde_json counts
/// the nesting) and dropped as it goes; `object` when it was an object.
struct Skipped {
    object: bool,
}

impl<'de> serde::Deserialize<'de> for Skipped {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Skipped, D::Error> {
        deserializer.deserialize_any(SkippedVisitor)
    }
}

struct SkippedVisitor;

impl<'de> serde::de::Visitor<'de> for SkippedVisitor {
    type Value = Skipped;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Skipped, E> {
        Ok(Skipped { object: false })
    }

    fn visit_i64<E>(self, _: i64) -> Result<Skipped, E> {
        Ok(Skipped { object: false })
    }

    fn visit_u64<E>(self, _: u64) -> Result<Skipped, E> {
        Ok(Skipped { object: false })
    }

    fn visit_f64<E>(self, _: f64) -> Result<Skipped, E> {
        Ok(Skipped { object: false })
    }

    fn visit_str<E>(self, _: &str) -> Result<Skipped, E> {
        Ok(Skipped { object: false })
    }

    fn visit_unit<E>(self) -> Result<Skipped, E> {
        Ok(Skipped { object: false })
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Skipped, A::Error> {
        while seq.next_element::<Skipped>()?.is_some() {}
        Ok(Skipped { object: false })
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Skipped, A::Error> {
        while map.next_entry::<Skipped, Skipped>()?.is_some() {}
        Ok(Skipped { object: true })
    }
}

/// `body` with every string literal that holds an escape decoded by [`unescape`] (a lone
/// surrogate becomes U+FFFD) and escaped again; `None` when a literal never closes.
fn strings_reescaped(body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(body.len());
    let (mut copied, mut at) = (0, 0);
    while let Some(open) = memchr::memchr(b'"', &body[at..]).map(|i| at + i) {
        let (close, escaped) = string_end(body, open + 1)?;
        if escaped {
            let value = unescape(std::str::from_utf8(&body[open + 1..close]).ok()?)?;
            out.extend_from_slice(&body[copied..=open]);
            out.extend_from_slice(escape(&value).as_bytes());
            copied = close;
        }
        at = close + 1;
    }
    out.extend_from_slice(&body[copied..]);
    Some(out)
}

/// Whether the string literal `raw` (its content, `escaped` when it holds a backslash) has
/// one of the values in `set`.
fn is_one_of(set: &HashSet<String>, raw: &[u8], escaped: bool) -> bool {
    let raw = String::from_utf8_lossy(raw);
    if escaped {
        unescape(&raw).is_some_and(|value| set.contains(&value))
    } else {
        set.contains(&*raw)
    }
}

/// Whether `body` holds a `\u` escape that may spell part of a trigger: one of a printable
/// ASCII character (`\u0020` to `\u007f`), or any at all when a keyword is non-ASCII.
/// Control characters (`\u001b` in tool output) cannot, and do not count.
pub(super) fn may_hide_a_trigger(body: &[u8], non_ascii_keywords: bool) -> bool {
    memchr::memmem::find_iter(body, b"\\u").any(|at| {
        let hex = &body[at + 2..body.len().min(at + 6)];
        non_ascii_keywords
            || (hex.len() == 4 && hex[..2] == *b"00" && (b'2'..=b'7').contains(&hex[2]))
    })
}

/// Redacts `body[from..]` as plain text after what was already built.
fn redact_as_text<'a>(
    redactor: &Redactor,
    body: &'a [u8],
    from: usize,
    built: Option<(Option<Vec<u8>>, usize)>,
    mut replaced: Replacements,
    triggered: Triggered,
) -> BodyRedaction<'a> {
    let (out, copied) = built.unwrap_or((None, 0));
    let tail = redact_text(redactor, &body[from..], triggered);
    match (out, tail) {
        (None, None) => BodyRedaction {
            body: Cow::Borrowed(body),
            replaced,
        },
        (out, tail) => {
            let mut out = out.unwrap_or_else(|| Vec::with_capacity(body.len() + 64));
            out.extend_from_slice(&body[copied..from]);
            match tail {
                Some((text, more)) => {
                    out.extend_from_slice(&text);
                    replaced.merge(more);
                }
                None => out.extend_from_slice(&body[from..]),
            }
            BodyRedaction {
                body: Cow::Owned(out),
                replaced,
            }
        }
    }
}

/// Redacts `bytes` as text; `None` when nothing matched. Bytes that are not UTF-8 do not
/// hide what is around them: each run of valid UTF-8 is redacted on its own, and the invalid
/// bytes between the runs are kept as they are.
fn redact_text(
    redactor: &Redactor,
    bytes: &[u8],
    triggered: Triggered,
) -> Option<(Vec<u8>, Replacements)> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return redactor
            .redact_triggered(text, triggered)
            .map(|(text, replaced)| (text.into_bytes(), replaced));
    }
    let mut out = Vec::with_capacity(bytes.len() + 64);
    let mut replaced = Replacements::default();
    for chunk in bytes.utf8_chunks() {
        match redactor.redact_triggered(chunk.valid(), triggered) {
            Some((text, more)) => {
                out.extend_from_slice(text.as_bytes());
                replaced.merge(more);
            }
            None => out.extend_from_slice(chunk.valid().as_bytes()),
        }
        out.extend_from_slice(chunk.invalid());
    }
    (!replaced.is_empty()).then_some((out, replaced))
}

/// The closing quote of the string whose content starts at `from`, and whether it holds a
/// backslash; `None` when it never closes.
fn string_end(body: &[u8], from: usize) -> Option<(usize, bool)> {
    let mut escaped = false;
    let mut at = from;
    loop {
        let i = at + memchr::memchr2(b'"', b'\\', &body[at..])?;
        if body[i] == b'"' {
            return Some((i, escaped));
        }
        escaped = true;
        at = i + 2;
        if at > body.len() {
            return None;
        }
    }
}

/// The new content of one string literal (without its quotes), or `None` when unchanged.
fn redact_literal(
    redactor: &Redactor,
    raw: &[u8],
    escaped: bool,
    triggered: Triggered,
) -> Option<(Vec<u8>, Replacements)> {
    if !escaped {
        // A literal without escapes is its own value, and every replacement is JSON-safe.
        let here = triggered & redactor.triggered(raw);
        if here == 0 {
            return None;
        }
        return redact_text(redactor, raw, here);
    }
    // Bytes that are not UTF-8 in an escaped literal read as U+FFFD, as a lenient parser
    // reads them; they are only rewritten so when a secret beside them is.
    let value = unescape(&String::from_utf8_lossy(raw))?;
    let here = triggered & redactor.triggered(value.as_bytes());
    if here == 0 {
        return None;
    }
    let (text, replaced) = redactor.redact_triggered(&value, here)?;
    Some((escape(&text).into_bytes(), replaced))
}

/// Decodes a JSON string's content; `None` on an invalid escape (the literal is left alone).
fn unescape(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '"' => out.push('"'),
            '\\' => out.push('\\'),
            '/' => out.push('/'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'u' => {
                let first = hex4(&mut chars)?;
                if (0xD800..0xDC00).contains(&first) {
                    // A high surrogate must be followed by `\u` and a low one.
                    let mut ahead = chars.clone();
                    if ahead.next() == Some('\\') && ahead.next() == Some('u') {
                        let second = hex4(&mut ahead)?;
                        if (0xDC00..0xE000).contains(&second) {
                            chars = ahead;
                            let code = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
                            out.push(char::from_u32(code)?);
                            continue;
                        }
                    }
                    out.push('\u{FFFD}');
                } else {
                    out.push(char::from_u32(first).unwrap_or('\u{FFFD}'));
                }
            }
            _ => return None,
        }
    }
    Some(out)
}

fn hex4(chars: &mut std::str::Chars<'_>) -> Option<u32> {
    let mut value = 0;
    for _ in 0..4 {
        value = value * 16 + chars.next()?.to_digit(16)?;
    }
    Some(value)
}

/// Encodes a string's content for JSON: quotes, backslashes and control characters
/// escaped, everything else as UTF-8.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out
}
