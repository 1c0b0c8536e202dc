//! A tiny ordered JSON tree, written with the separators of the captured fixture streams (`", "` and `": "`).
//!
//! serde_json's `Value` sorts object keys (the workspace does not enable `preserve_order`), and the streams must keep the key order the harnesses accepted, so the answers are built with this instead.

use std::fmt::Write as _;

#[derive(Debug, Clone)]
pub(crate) enum Doc {
    Null,
    Int(u64),
    Str(String),
    /// JSON text inserted as is (already valid JSON).
    Raw(String),
    Arr(Vec<Doc>),
    Obj(Vec<(&'static str, Doc)>),
}

pub(crate) fn s(text: &str) -> Doc {
    Doc::Str(text.to_owned())
}

pub(crate) fn obj<const N: usize>(fields: [(&'static str, Doc); N]) -> Doc {
    Doc::Obj(fields.into())
}

pub(crate) fn arr<const N: usize>(items: [Doc; N]) -> Doc {
    Doc::Arr(items.into())
}

impl Doc {
    pub(crate) fn write(&self, out: &mut String) {
        match self {
            Doc::Null => out.push_str("null"),
            Doc::Int(n) => {
                let _ = write!(out, "{n}");
            }
            Doc::Str(text) => write_str(text, out),
            Doc::Raw(text) => out.push_str(text),
            Doc::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Doc::Obj(fields) => {
                out.push('{');
                for (i, (key, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_str(key, out);
                    out.push_str(": ");
                    value.write(out);
                }
                out.push('}');
            }
        }
    }

    pub(crate) fn to_text(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }
}

/// Writes `text` as a JSON string literal (non-ASCII stays UTF-8, which JSON allows).
pub(crate) fn write_str(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Removes the whitespace between the tokens of valid JSON text, keeping strings (and so key order and escapes) untouched.
pub(crate) fn minify(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !c.is_ascii_whitespace() {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests;
