//! The `file` sink (SPEC §8.1): JSON Lines appended to a per-user or per-route file,
//! created 0600 without following a symlink, in a directory nobody else can swap files in.

use relay_plugins::config::{
    DirectoryFacts, RecordFileFacts, check_record_file, check_sink_directory,
};
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::config::FileSinkConfig;
use crate::drops::Counters;
use crate::error::SinkError;
use crate::sinks::Msg;

pub use relay_plugins::config::{FINGERPRINT_PLACEHOLDER, USER_PLACEHOLDER};

/// Substitutes `{user}` and `{fingerprint}` with `relay_plugins::config::render_filename`,
/// the rule activation checks with.
pub fn render_filename(template: &str, user: &str, fingerprint: &str) -> Result<String, SinkError> {
    relay_plugins::config::render_filename(template, user, fingerprint).map_err(|problem| {
        SinkError::Filename {
            filename: template.to_owned(),
            problem,
        }
    })
}

/// An open record file.
#[derive(Debug)]
pub(crate) struct FileSink {
    path: PathBuf,
    file: File,
    /// Reused to add the newline, so that a record is one `write`.
    line: Vec<u8>,
    /// A failed write may have left part of a line: the next record starts on a line of
    /// its own unless the file already ends one.
    line_open: bool,
}

impl FileSink {
    /// Checks the directory, then opens (or creates, 0600) the file for appending without
    /// following a symlink, and checks what was opened.
    pub(crate) fn open(
        config: &FileSinkConfig,
        user: &str,
        fingerprint: &str,
    ) -> Result<Self, SinkError> {
        let name = render_filename(&config.filename, user, fingerprint)?;
        let directory = &config.directory;
        let metadata =
            std::fs::metadata(directory).map_err(|source| SinkError::DirectoryMetadata {
                directory: directory.clone(),
                source,
            })?;
        let euid = rustix::process::geteuid().as_raw();
        check_sink_directory(&DirectoryFacts::of(&metadata, euid)).map_err(|reason| {
            SinkError::DirectoryUnsafe {
                directory: directory.clone(),
                reason,
            }
        })?;
        let path = directory.join(name);
        let file = open_append_nofollow(&path).map_err(|source| SinkError::OpenFile {
            path: path.clone(),
            source,
        })?;
        let metadata = file.metadata().map_err(|source| SinkError::OpenFile {
            path: path.clone(),
            source,
        })?;
        check_record_file(&RecordFileFacts::of(&metadata, euid)).map_err(|reason| {
            SinkError::FileUnsafe {
                path: path.clone(),
                reason,
            }
        })?;
        Ok(FileSink {
            path,
            file,
            line: Vec::new(),
            line_open: false,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record as one write, adding the newline if it lacks one, so that
    /// records of concurrent writers never interleave. After a write cut short (a full
    /// disk), the next record starts on a line of its own, so the cut part is one unreadable
    /// line and not glued to a record. (Truncating the cut part away could race with
    /// another writer appending a whole record after it.)
    pub(crate) fn write_record(&mut self, record: &[u8]) -> io::Result<()> {
        self.line.clear();
        if self.line_open && !ends_a_line(&self.file) {
            self.line.push(b'\n');
        }
        self.line.extend_from_slice(record);
        if !record.ends_with(b"\n") {
            self.line.push(b'\n');
        }
        let (written, result) = write_whole(&mut self.file, &self.line);
        match result {
            Ok(()) => self.line_open = false,
            Err(_) if written > 0 => self.line_open = true,
            Err(_) => {}
        }
        result
    }

    /// The writer's loop, on its own thread: file writes never run on the async runtime.
    pub(crate) fn run(mut self, mut rx: mpsc::Receiver<Msg<Bytes>>, counters: Arc<Counters>) {
        while let Some(msg) = rx.blocking_recv() {
            match msg {
                Msg::Item(record) => match self.write_record(&record) {
                    Ok(()) => counters.add_written(1),
                    Err(_) => counters.add_dropped(1, "write_failed"),
                },
                Msg::Flush(ack) => {
                    let _ = ack.send(());
                }
                Msg::Shutdown(ack) => {
                    let _ = ack.send(());
                    return;
                }
            }
        }
    }
}

/// Writes all of `line`, as `write_all` does, and says how much was written when it fails.
fn write_whole(out: &mut impl Write, line: &[u8]) -> (usize, io::Result<()>) {
    let mut written = 0;
    while written < line.len() {
        match out.write(&line[written..]) {
            Ok(0) => return (written, Err(io::ErrorKind::WriteZero.into())),
            Ok(n) => written += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return (written, Err(err)),
        }
    }
    (written, Ok(()))
}

/// Whether `file` is empty or its last byte ends a line.
fn ends_a_line(file: &File) -> bool {
    use std::os::unix::fs::FileExt as _;
    let Ok(len) = file.metadata().map(|meta| meta.len()) else {
        return false;
    };
    let mut last = [0];
    len == 0 || (file.read_exact_at(&mut last, len - 1).is_ok() && last == *b"\n")
}

/// `O_APPEND | O_CREAT` with mode 0600 (read too, to see whether a line a full disk cut short
/// was ended since), `O_NOFOLLOW` (a symlink fails with `ELOOP`),
/// `O_NONBLOCK` (a FIFO planted there does not hang the open; it then fails the regular-file
/// check) and `O_CLOEXEC`.
fn open_append_nofollow(path: &Path) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDWR
        | OFlags::APPEND
        | OFlags::CREATE
        | OFlags::NOFOLLOW
        | OFlags::NONBLOCK
        | OFlags::CLOEXEC;
    let fd = rustix::fs::open(path, flags, Mode::from_raw_mode(0o600))?;
    Ok(File::from(fd))
}

#[cfg(test)]
mod tests;
