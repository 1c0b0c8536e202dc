use std::io::Write as _;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use super::{FileSink, render_filename, write_whole};
use crate::config::FileSinkConfig;
use crate::error::SinkError;
use relay_plugins::config::{FilenameProblem, RecordFileProblem, SinkDirectoryProblem};

fn config(directory: &Path) -> FileSinkConfig {
    FileSinkConfig {
        directory: directory.to_path_buf(),
        filename: "events-{user}.jsonl".to_owned(),
        queue_capacity: 16,
    }
}

#[test]
fn the_file_name_needs_a_placeholder_and_stays_one_component() {
    assert_eq!(
        render_filename("events-{user}.jsonl", "alice", "fp1").ok(),
        Some("events-alice.jsonl".to_owned())
    );
    assert_eq!(
        render_filename("{fingerprint}-{user}.jsonl", "alice", "fp1").ok(),
        Some("fp1-alice.jsonl".to_owned())
    );
    assert!(matches!(
        render_filename("events.jsonl", "alice", "fp1"),
        Err(SinkError::Filename {
            problem: FilenameProblem::PlaceholderMissing,
            ..
        })
    ));
    for user in ["../../etc/x", "..", "a/b", ""] {
        assert!(
            matches!(
                render_filename("{user}", user, "fp1"),
                Err(SinkError::Filename {
                    problem: FilenameProblem::NotPlain,
                    ..
                })
            ),
            "{user:?}"
        );
    }
}

#[test]
fn records_are_appended_to_a_0600_file() -> Result<(), Box<dyn std::error::Error>> {
    let temp = tempfile::tempdir()?;
    let path = temp.path().join("events-alice.jsonl");
    {
        let mut sink = FileSink::open(&config(temp.path()), "alice", "fp1")?;
        sink.write_record(b"{\"n\":1}")?;
        sink.write_record(b"{\"n\":2}\n")?;
    }
    let mut sink = FileSink::open(&config(temp.path()), "alice", "fp1")?;
    sink.write_record(b"{\"n\":3}")?;
    assert_eq!(
        std::fs::read_to_string(&path)?,
        "{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n"
    );
    let mode = std::fs::metadata(&path)?.permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    Ok(())
}

#[test]
fn a_symlink_in_place_of_the_file_is_refused() -> Result<(), Box<dyn std::error::Error>> {
    let temp = tempfile::tempdir()?;
    let victim = temp.path().join("victim");
    std::fs::write(&victim, "untouched")?;
    symlink(&victim, temp.path().join("events-alice.jsonl"))?;
    let opened = FileSink::open(&config(temp.path()), "alice", "fp1");
    assert!(
        matches!(opened, Err(SinkError::OpenFile { .. })),
        "{opened:?}"
    );
    assert_eq!(std::fs::read_to_string(&victim)?, "untouched");
    Ok(())
}

#[test]
fn a_directory_writable_by_others_is_refused() -> Result<(), Box<dyn std::error::Error>> {
    let temp = tempfile::tempdir()?;
    std::fs::set_permissions(temp.path(), std::fs::Permissions::from_mode(0o777))?;
    let opened = FileSink::open(&config(temp.path()), "alice", "fp1");
    assert!(
        matches!(
            opened,
            Err(SinkError::DirectoryUnsafe {
                reason: SinkDirectoryProblem::WritableByOthers,
                ..
            })
        ),
        "{opened:?}"
    );
    assert!(!temp.path().join("events-alice.jsonl").exists());
    // With the sticky bit, as /tmp has, the directory is fine.
    std::fs::set_permissions(temp.path(), std::fs::Permissions::from_mode(0o1777))?;
    FileSink::open(&config(temp.path()), "alice", "fp1")?;
    Ok(())
}

#[test]
fn a_file_planted_readable_by_others_is_refused() -> Result<(), Box<dyn std::error::Error>> {
    // In a shared sticky directory someone may create our file first, readable by all.
    let temp = tempfile::tempdir()?;
    let planted = temp.path().join("events-alice.jsonl");
    std::fs::write(&planted, "")?;
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o644))?;
    let opened = FileSink::open(&config(temp.path()), "alice", "fp1");
    assert!(
        matches!(
            opened,
            Err(SinkError::FileUnsafe {
                reason: RecordFileProblem::InsecurePermissions,
                ..
            })
        ),
        "{opened:?}"
    );
    Ok(())
}

#[test]
fn a_missing_directory_is_an_error() {
    let opened = FileSink::open(&config(Path::new("/nonexistent/relay")), "alice", "fp1");
    assert!(matches!(opened, Err(SinkError::DirectoryMetadata { .. })));
}

/// After a write cut short (a full disk), the next record starts on a line of its own: the
/// cut part is one unreadable line, not glued to a record; and no empty line is added when
/// the file already ends a line (another writer ended it).
#[test]
fn a_record_after_one_cut_short_starts_its_own_line() -> Result<(), Box<dyn std::error::Error>> {
    let temp = tempfile::tempdir()?;
    let path = temp.path().join("events-alice.jsonl");
    let mut sink = FileSink::open(&config(temp.path()), "alice", "fp1")?;
    sink.write_record(b"{\"n\":1}")?;
    // What a full disk leaves behind: the start of the next line.
    sink.file.write_all(b"{\"n\":")?;
    sink.line_open = true;
    sink.write_record(b"{\"n\":3}")?;
    assert_eq!(
        std::fs::read_to_string(&path)?,
        "{\"n\":1}\n{\"n\":\n{\"n\":3}\n"
    );
    assert!(!sink.line_open);
    let mut other = std::fs::OpenOptions::new().append(true).open(&path)?;
    sink.file.write_all(b"{\"n\":")?;
    other.write_all(b"4}\n")?;
    sink.line_open = true;
    sink.write_record(b"{\"n\":5}")?;
    assert!(std::fs::read_to_string(&path)?.ends_with("{\"n\":4}\n{\"n\":5}\n"));
    Ok(())
}

/// A writer that takes `room` bytes and then fails as a full disk does.
struct FullAfter {
    room: usize,
    taken: Vec<u8>,
}

impl std::io::Write for FullAfter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.room == 0 {
            return Err(std::io::Error::from_raw_os_error(28));
        }
        let n = bytes.len().min(self.room).min(3);
        self.room -= n;
        self.taken.extend_from_slice(&bytes[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_short_write_says_how_much_it_wrote() {
    let mut full = FullAfter {
        room: 7,
        taken: Vec::new(),
    };
    let (written, result) = write_whole(&mut full, b"{\"n\":1234}\n");
    assert_eq!(written, 7);
    assert_eq!(full.taken, b"{\"n\":12");
    assert_eq!(result.unwrap_err().raw_os_error(), Some(28));
    let mut roomy = FullAfter {
        room: 100,
        taken: Vec::new(),
    };
    assert_eq!(write_whole(&mut roomy, b"{}\n").0, 3);
}
