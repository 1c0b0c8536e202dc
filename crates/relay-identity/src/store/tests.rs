use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::*;

fn mode_of(path: &Path) -> u32 {
    fs::metadata(path).unwrap().mode() & 0o7777
}

#[test]
fn creates_missing_dirs_0700() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a/b/c");
    ensure_private_dir(&dir).unwrap();
    assert_eq!(mode_of(&dir), 0o700);
    assert_eq!(mode_of(&tmp.path().join("a/b")), 0o700);
    // A second call accepts what the first made.
    ensure_private_dir(&dir).unwrap();
}

#[test]
fn existing_dir_writable_by_others_is_refused_with_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shared");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, Permissions::from_mode(0o777)).unwrap();
    let err = ensure_private_dir(&dir).unwrap_err();
    assert!(matches!(
        err,
        StoreError::DirWritableByOthers { mode: 0o777, .. }
    ));
    let message = err.to_string();
    assert!(message.contains(&dir.display().to_string()), "{message}");
    assert!(message.contains("chmod 700"), "{message}");
}

#[test]
fn existing_readable_dir_is_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("readable");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, Permissions::from_mode(0o755)).unwrap();
    ensure_private_dir(&dir).unwrap();
}

#[test]
fn dir_of_another_user_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("theirs");
    fs::create_dir(&dir).unwrap();
    let owner = fs::metadata(&dir).unwrap().uid();
    let err = ensure_private_dir_for(&dir, owner + 1).unwrap_err();
    assert!(matches!(err, StoreError::DirNotOwned { .. }), "{err}");
    assert!(err.to_string().contains("chown"), "{err}");
}

#[test]
fn a_file_in_the_way_is_not_a_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("file");
    fs::write(&path, b"x").unwrap();
    assert!(matches!(
        ensure_private_dir(&path),
        Err(StoreError::NotADirectory { .. })
    ));
}

#[test]
fn write_atomic_replaces_and_sets_the_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("state.json");
    write_atomic(&path, b"one", 0o600).unwrap();
    write_atomic(&path, b"two", 0o600).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"two");
    assert_eq!(mode_of(&path), 0o600);
    let names: Vec<_> = fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "no temporary file is left behind");
}

#[test]
fn create_new_linked_never_replaces() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("once");
    assert!(create_new_linked(&path, b"first", 0o600).unwrap());
    assert!(!create_new_linked(&path, b"second", 0o600).unwrap());
    assert_eq!(fs::read(&path).unwrap(), b"first");
    assert_eq!(mode_of(&path), 0o600);
    let names: Vec<_> = fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "no temporary file is left behind");
}

#[test]
fn create_new_linked_has_one_winner_among_threads() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("race");
    let winners: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let path = &path;
                scope.spawn(move || create_new_linked(path, format!("{i}").as_bytes(), 0o600))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| usize::from(h.join().unwrap().unwrap()))
            .sum()
    });
    assert_eq!(winners, 1);
    let names: Vec<_> = fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(names.len(), 1);
}

#[test]
fn open_nofollow_refuses_a_symlink() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("target");
    fs::write(&target, b"x").unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let err = open_nofollow(&link).unwrap_err();
    assert!(is_symlink_error(&link, &err), "{err}");
    assert!(open_nofollow(&target).is_ok());
}

#[test]
fn read_bounded_reads_one_byte_past_the_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("big");
    fs::write(&path, [b'a'; 300]).unwrap();
    let mut file = File::open(&path).unwrap();
    assert_eq!(read_bounded(&mut file, 128).unwrap().len(), 129);
}
/// A file an administrator provides that every user could change is refused: it says
/// where Relay sends the agents' traffic or which daemon its clients trust. Judged from the
/// modes alone, so each case is tested as any user.
#[test]
fn a_file_every_user_could_change_is_not_trusted() {
    let dir = |mode, other_owner| DirFacts {
        dir: PathBuf::from("/etc/relay"),
        entry: PathBuf::from("/etc/relay/config.toml"),
        mode,
        other_owner,
    };
    let facts = |file_mode, dirs| TrustFacts {
        file: PathBuf::from("/etc/relay/config.toml"),
        file_mode,
        file_read_only: false,
        dirs,
    };
    let judge = |file_mode, dir_mode| unsafe_to_trust(&facts(file_mode, vec![dir(dir_mode, None)]));
    assert_eq!(judge(0o644, Some(0o755)), None);
    // Group write is the administrator's choice.
    assert_eq!(judge(0o664, Some(0o775)), None);
    assert_eq!(
        judge(0o666, Some(0o755)).unwrap(),
        "/etc/relay/config.toml is writable by every user, who could have changed it: chmod o-w it"
    );
    assert_eq!(
        judge(0o644, Some(0o777)).unwrap(),
        "/etc/relay is writable by every user, who could replace /etc/relay/config.toml there: chmod o-w /etc/relay"
    );
    // A sticky directory keeps others from replacing a file they do not own.
    assert_eq!(judge(0o644, Some(0o1777)), None);
    // But in one, a file another user owns may be theirs to have put there; elsewhere,
    // another owner (the service account's file, a bind mount) is the administrator's.
    let owned = |dir_mode| unsafe_to_trust(&facts(0o644, vec![dir(Some(dir_mode), Some(4242))]));
    assert!(owned(0o1777).unwrap().contains("belongs to uid 4242"));
    assert_eq!(owned(0o755), None);
    assert_eq!(owned(0o1775), None);
    // On a read-only mount no entry can be replaced through the directory; but a file
    // every user may write is refused all the same, as the mount may be only this
    // process's view of it.
    assert_eq!(judge(0o644, None), None);
    let read_only = unsafe_to_trust(&TrustFacts {
        file_read_only: true,
        ..facts(0o666, vec![dir(None, None)])
    });
    assert!(read_only.unwrap().contains("defaultMode 0644"));
    // Every entry on the way counts: a good file reached through a symlink that anyone
    // could have put in a world-writable directory, or that another user put in a sticky
    // one, is not trusted.
    let through = |link_dir| unsafe_to_trust(&facts(0o644, vec![dir(Some(0o755), None), link_dir]));
    assert!(through(dir(Some(0o777), None)).is_some());
    assert!(through(dir(Some(0o1777), Some(4242))).is_some());
    assert_eq!(through(dir(Some(0o1777), None)), None);
    assert_eq!(through(dir(Some(0o755), Some(4242))), None);
}

/// Every entry on the way to a provided file is judged, not only the file and the symlink
/// naming it: a directory or symlink another user could have put in a directory every
/// user may write makes the file theirs to choose. The layouts configuration management
/// builds (relative links with `..`, a linked `/etc`) are followed and trusted.
#[test]
fn every_entry_on_the_way_to_a_provided_file_is_judged() {
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let mode = |path: &Path, mode: u32| {
        fs::set_permissions(path, Permissions::from_mode(mode)).unwrap();
    };
    let trusted = |path: &Path| open_trusted(path).map(|file| file.is_some());
    let refusal = |path: &Path| open_trusted(path).unwrap_err().to_string();

    // Configuration management's layout: `etc` a link to `private/etc`, the file a
    // relative link with `..` into `opt`.
    fs::create_dir_all(root.join("private/etc/relay")).unwrap();
    fs::create_dir_all(root.join("opt/relay")).unwrap();
    fs::write(root.join("opt/relay/config.toml"), "x").unwrap();
    symlink("private/etc", root.join("etc")).unwrap();
    symlink(
        "../../../opt/relay/config.toml",
        root.join("private/etc/relay/config.toml"),
    )
    .unwrap();
    let provided = root.join("etc/relay/config.toml");
    assert!(trusted(&provided).unwrap());
    // A missing file in a real directory is no file; a link to nothing is refused, also
    // when what is missing is a directory in its target.
    assert!(!trusted(&root.join("etc/relay/plugins.toml")).unwrap());
    assert!(!trusted(&root.join("etc/nowhere/config.toml")).unwrap());
    symlink(root.join("gone/relay"), root.join("private/etc/dangling")).unwrap();
    let why = refusal(&root.join("etc/dangling/config.toml"));
    assert_eq!(
        why,
        format!(
            "{} is a symlink to {}, which does not exist",
            root.join("private/etc/dangling").display(),
            root.join("gone/relay").display()
        )
    );

    // The link named is the one whose target is missing, not the last one followed.
    fs::create_dir_all(root.join("srv/cfg")).unwrap();
    symlink(root.join("srv/cfg"), root.join("private/etc/cfg")).unwrap();
    symlink(
        "cfg/config.toml",
        root.join("private/etc/relay/missing.toml"),
    )
    .unwrap();
    symlink(
        "../cfg/config.toml",
        root.join("private/etc/relay/through.toml"),
    )
    .unwrap();
    for name in ["missing.toml", "through.toml"] {
        let why = refusal(&root.join("etc/relay").join(name));
        assert!(
            why.starts_with(&format!(
                "{} is a symlink to ",
                root.join("private/etc/relay").join(name).display()
            )),
            "{why}"
        );
    }

    // A directory on the way in which every user may write without the sticky bit: anyone
    // could replace the entry below it.
    mode(&root.join("opt"), 0o777);
    let why = refusal(&provided);
    assert!(
        why.contains("opt is writable by every user, who could replace"),
        "{why}"
    );
    mode(&root.join("opt"), 0o755);

    // A shared sticky directory: what root or this user put there is trusted; a
    // directory or a symlink another user put there, whatever it leads to, is not.
    let shared = root.join("shared");
    fs::create_dir(&shared).unwrap();
    mode(&shared, 0o1777);
    fs::create_dir_all(shared.join("theirs")).unwrap();
    fs::write(shared.join("theirs/config.toml"), "x").unwrap();
    symlink(root.join("opt/relay"), shared.join("link")).unwrap();
    assert!(trusted(&shared.join("theirs/config.toml")).unwrap());
    assert!(trusted(&shared.join("link/config.toml")).unwrap());
    if current_euid() == 0 {
        let theirs = Some(rustix::process::Uid::from_raw(4242));
        let give = |path: &Path| {
            rustix::fs::chownat(
                rustix::fs::CWD,
                path,
                theirs,
                None,
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            )
            .unwrap();
        };
        give(&shared.join("theirs"));
        let why = refusal(&shared.join("theirs/config.toml"));
        assert!(why.contains("theirs belongs to uid 4242"), "{why}");
        give(&shared.join("link"));
        // Unless the kernel refuses to follow such a link itself (`fs.protected_symlinks`).
        let why = refusal(&shared.join("link/config.toml"));
        assert!(
            why.contains("link belongs to uid 4242") || why.contains("os error 13"),
            "{why}"
        );
        // And through the administrator's own link to it.
        symlink(shared.join("link/config.toml"), root.join("opt/via")).unwrap();
        let why = refusal(&root.join("opt/via"));
        assert!(
            why.contains("link belongs to uid 4242") || why.contains("os error 13"),
            "{why}"
        );
    }

    // A loop is refused as the kernel refuses it.
    symlink("loop", root.join("loop")).unwrap();
    assert!(open_trusted(&root.join("loop")).is_err());
    // `..` after the file leads to its directory, which is not the file.
    let refused = refusal(&provided.join(".."));
    assert!(refused.contains("is not a regular file"), "{refused}");
}
