//! An error and its causes as one line of text, for answers and messages that a person
//! reads: the admin socket's `persist_error` and `relayd bindings`' stderr line.

use std::error::Error;

/// `error: cause: cause of the cause`, with any line break inside a message turned into a
/// space so the text stays one line.
pub fn error_chain(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text.replace('\n', " ")
}

#[cfg(test)]
mod tests;
