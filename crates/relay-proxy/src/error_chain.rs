//! An error and its causes: as one line of text, for answers and messages that a person
//! reads (the admin socket's `persist_error` and `relayd bindings`' stderr line), and one
//! after another, for the code that looks for a cause of a kind.

use std::error::Error;

/// `error: cause: cause of the cause`, with any line break inside a message turned into a
/// space so the text stays one line. A cause whose text the error before it already quotes
/// (`cannot read {path}: {source}` with that source as its cause too) is not said twice.
pub fn error_chain(error: &(dyn Error + 'static)) -> String {
    let mut line = String::new();
    let mut before = String::new();
    for cause in causes(error) {
        let text = cause.to_string();
        if line.is_empty() || !before.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        before = text;
    }
    line.replace('\n', " ")
}

/// `error`, then its cause, the cause of that, and so on.
pub(crate) fn causes<'a>(
    error: &'a (dyn Error + 'static),
) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(error), |&error| error.source())
}

#[cfg(test)]
mod tests;
