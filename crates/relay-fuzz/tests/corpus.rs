//! Every fuzz target over every file of its seed corpus (`corpus/<target>/`), so the corpora
//! run with the workspace tests, and every known crash in `crashes/<target>/` stays a crash
//! until its fix lands (then its file moves to the corpus).

use std::path::Path;

use relay_fuzz::engine::{load_corpus, run_one};
use relay_fuzz::{TARGETS, target};

fn dir(kind: &str, name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(kind).join(name)
}

#[test]
fn every_target_passes_its_whole_corpus() {
    let mut failures = Vec::new();
    for (name, function) in TARGETS {
        let files = load_corpus(&dir("corpus", name)).unwrap();
        assert!(!files.is_empty(), "the {name} corpus is empty");
        for (path, bytes) in files {
            if let Err(panic) = run_one(*function, &bytes) {
                failures.push(format!(
                    "{name} {}: {} ({})",
                    path.display(),
                    panic.message,
                    panic.location
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_corpus_and_crash_directory_names_a_target() {
    for kind in ["corpus", "crashes"] {
        let Ok(entries) = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(kind))
        else {
            continue;
        };
        for entry in entries {
            let entry = entry.unwrap();
            if entry.path().is_dir() {
                let name = entry.file_name().into_string().unwrap();
                assert!(target(&name).is_some(), "{kind}/{name} is no target");
            }
        }
    }
}

/// A reproducer kept in `crashes/` documents a bug whose fix is not in this tree: it must
/// still fail, so the day it passes it is moved into the corpus.
#[test]
fn every_known_crash_still_crashes() {
    for (name, function) in TARGETS {
        for (path, bytes) in load_corpus(&dir("crashes", name)).unwrap() {
            if path.extension().is_some_and(|e| e == "txt" || e == "md") {
                continue;
            }
            assert!(
                run_one(*function, &bytes).is_err(),
                "{} passes now: move it into corpus/{name}/",
                path.display()
            );
        }
    }
}
