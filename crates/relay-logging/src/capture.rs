//! An in-memory log sink for tests.

#![expect(
    clippy::disallowed_methods,
    reason = "test support: a panic here fails the test that caused it, so a poisoned lock is read as is"
)]

use std::{
    io,
    sync::{Arc, Mutex, PoisonError},
};

use tracing_subscriber::fmt::MakeWriter;

/// A cloneable in-memory writer: hand a clone to [`subscriber`](crate::subscriber), read the
/// lines back with [`LogCapture::contents`]. Meant for tests of this and other crates.
#[derive(Debug, Clone, Default)]
pub struct LogCapture {
    buffer: Arc<Mutex<Vec<u8>>>,
}

impl LogCapture {
    /// An empty capture.
    pub fn new() -> LogCapture {
        LogCapture::default()
    }

    /// A capture, and a subscriber writing JSON lines at `level` into it: what a test that
    /// reads the events it caused sets as its default.
    ///
    /// # Panics
    ///
    /// When `level` is not a level or filter, which only a test can pass here.
    #[expect(
        clippy::expect_used,
        reason = "test support: a bad level is the test's own error"
    )]
    pub fn jsonl(level: &str) -> (LogCapture, tracing::Dispatch) {
        let capture = LogCapture::new();
        let config = crate::LogConfig {
            level: level.to_owned(),
            format: crate::LogFormat::Jsonl,
        };
        let dispatch = crate::subscriber(&config, capture.clone()).expect("a valid log level");
        (capture, dispatch)
    }

    /// Everything written so far, decoded lossily as UTF-8.
    pub fn contents(&self) -> String {
        let buffer = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&buffer).into_owned()
    }
}

impl io::Write for LogCapture {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let mut buffer = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        buffer.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogCapture {
    type Writer = LogCapture;

    fn make_writer(&'a self) -> LogCapture {
        self.clone()
    }
}
