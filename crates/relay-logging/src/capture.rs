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
