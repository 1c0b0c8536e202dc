//! An error and its causes: as one line of text, for answers and messages that a person
//! reads (the admin socket's `persist_error` and `relayd bindings`' stderr line), and one
//! after another, for the code that looks for a cause of a kind.

use std::error::Error;

/// `error: cause: cause of the cause`, with any line break inside a message turned into a
/// space so the text stays one line.
pub fn error_chain(error: &(dyn Error + 'static)) -> String {
    causes(error)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
        .replace('\n', " ")
}

/// `error`, then its cause, the cause of that, and so on.
pub(crate) fn causes<'a>(
    error: &'a (dyn Error + 'static),
) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(error), |&error| error.source())
}

#[cfg(test)]
mod tests;
