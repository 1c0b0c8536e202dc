use std::path::PathBuf;
use std::time::SystemTime;

use rustls::pki_types::CertificateDer;

use super::*;

/// A self-signed certificate naming `names`, valid from `from` to `to` (years), and its key.
struct Pair {
    cert: String,
    key: String,
    der: CertificateDer<'static>,
}

fn pair(names: &[&str], years: (i32, i32)) -> Pair {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .unwrap();
    params.not_before = rcgen::date_time_ymd(years.0, 1, 1);
    params.not_after = rcgen::date_time_ymd(years.1, 1, 1);
    let cert = params.self_signed(&key).unwrap();
    Pair {
        cert: cert.pem(),
        key: key.serialize_pem(),
        der: cert.der().clone(),
    }
}

/// Valid now, for years to come.
fn valid(names: &[&str]) -> Pair {
    pair(names, (2020, 2090))
}

struct Files {
    dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
}

impl Files {
    fn new() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        Files { dir, cert, key }
    }

    /// Rewrites both files in place, as `cp` or an editor would.
    fn write(&self, pair: &Pair) {
        std::fs::write(&self.cert, &pair.cert).unwrap();
        std::fs::write(&self.key, &pair.key).unwrap();
    }

    fn served(&self, host: &str) -> Arc<ServedCertificate> {
        ServedCertificate::from_files(&self.cert, &self.key, host).unwrap()
    }
}

/// Files holding `pair`, and the certificate served from them for `relay.test`.
fn serving(pair: &Pair) -> (Files, Arc<ServedCertificate>) {
    let files = Files::new();
    files.write(pair);
    let served = files.served("relay.test");
    (files, served)
}

fn served_leaf(served: &ServedCertificate) -> CertificateDer<'static> {
    served.chain().into_iter().next().unwrap()
}

/// `seconds` into the year `year`.
fn at(year: i32, seconds: u64) -> SystemTime {
    let start = rcgen::date_time_ymd(year, 1, 1).unix_timestamp();
    std::time::UNIX_EPOCH + std::time::Duration::from_secs(u64::try_from(start).unwrap() + seconds)
}

fn reload(served: &ServedCertificate) -> Reload {
    served.reload_if_changed(SystemTime::now())
}

#[test]
fn a_renewed_certificate_is_served_from_the_look_after_it_is_written() {
    let first = valid(&["relay.test"]);
    let (files, served) = serving(&first);
    assert_eq!(served_leaf(&served), first.der);
    assert!(matches!(reload(&served), Reload::Unchanged));

    let renewed = valid(&["relay.test"]);
    files.write(&renewed);
    match reload(&served) {
        Reload::Served { problems } => assert!(problems.is_empty(), "{problems:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(served_leaf(&served), renewed.der);
    let digest = ring::digest::digest(&ring::digest::SHA256, &renewed.der);
    assert_eq!(served.sha256_hex(), hex::encode(digest.as_ref()));
    // Read once: the next look finds nothing new.
    assert!(matches!(reload(&served), Reload::Unchanged));
}

#[test]
fn files_swapped_in_through_links_are_seen() {
    // As certbot keeps them: `live/` links to numbered files in `archive/`, and a renewal
    // points the links at new files.
    let files = Files::new();
    let archive = files.dir.path().join("archive");
    std::fs::create_dir(&archive).unwrap();
    let link = |pair: &Pair, n: u32| {
        let write = |name: &str, text: &str| -> PathBuf {
            let path = archive.join(format!("{name}{n}.pem"));
            std::fs::write(&path, text).unwrap();
            path
        };
        for (target, live) in [
            (write("cert", &pair.cert), &files.cert),
            (write("key", &pair.key), &files.key),
        ] {
            let fresh = live.with_extension("new");
            std::os::unix::fs::symlink(target, &fresh).unwrap();
            std::fs::rename(&fresh, live).unwrap();
        }
    };
    let first = valid(&["relay.test"]);
    link(&first, 1);
    let served = files.served("relay.test");
    let renewed = valid(&["relay.test"]);
    link(&renewed, 2);
    assert!(matches!(reload(&served), Reload::Served { .. }));
    assert_eq!(served_leaf(&served), renewed.der);
}

#[test]
fn a_key_that_is_not_the_certificates_keeps_the_current_one_until_the_files_change_again() {
    let first = valid(&["relay.test"]);
    let (files, served) = serving(&first);

    // A renewal caught between its two files: the new certificate beside the old key.
    let renewed = valid(&["relay.test"]);
    std::fs::write(&files.cert, &renewed.cert).unwrap();
    match reload(&served) {
        Reload::Kept(Kept::Unreadable(TlsError::KeyMismatch { .. })) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(served_leaf(&served), first.der);
    // Not read again, nor reported again, while the files stay as they are.
    assert!(matches!(reload(&served), Reload::Unchanged));

    std::fs::write(&files.key, &renewed.key).unwrap();
    assert!(matches!(reload(&served), Reload::Served { .. }));
    assert_eq!(served_leaf(&served), renewed.der);
}

#[test]
fn files_that_cannot_be_read_keep_the_current_certificate() {
    let first = valid(&["relay.test"]);
    let (files, served) = serving(&first);
    let assert_kept = |served: &ServedCertificate| {
        assert!(
            matches!(reload(served), Reload::Kept(Kept::Unreadable(_))),
            "taken"
        );
        assert_eq!(served_leaf(served), first.der);
    };

    std::fs::remove_file(&files.key).unwrap();
    assert_kept(&served);
    // Reported once while it stays missing.
    assert!(matches!(reload(&served), Reload::Unchanged));
    for (cert, key) in [(first.cert.as_str(), "not a key"), ("", first.key.as_str())] {
        std::fs::write(&files.cert, cert).unwrap();
        std::fs::write(&files.key, key).unwrap();
        assert_kept(&served);
    }
    // A device that never ends, then a file too large: each reported.
    std::fs::remove_file(&files.key).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &files.key).unwrap();
    assert_kept(&served);
    std::fs::remove_file(&files.key).unwrap();
    std::fs::write(&files.key, vec![b'A'; 5 << 20]).unwrap();
    assert_kept(&served);

    // Put back as they were: nothing changed, so nothing is served anew.
    files.write(&first);
    assert!(matches!(reload(&served), Reload::Unchanged));
    // And the same failure again is a new one to report.
    std::fs::remove_file(&files.key).unwrap();
    assert_kept(&served);
    let renewed = valid(&["relay.test"]);
    files.write(&renewed);
    assert!(matches!(reload(&served), Reload::Served { .. }));
    assert_eq!(served_leaf(&served), renewed.der);
}

/// A FIFO in a file's place would block the read until something wrote to it, and with it
/// every later look and the daemon's exit: it is refused unopened.
#[test]
fn a_fifo_in_a_files_place_is_refused_without_waiting_for_a_writer() {
    let first = valid(&["relay.test"]);
    let (files, served) = serving(&first);
    std::fs::remove_file(&files.key).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&files.key)
        .status()
        .unwrap();
    assert!(made.success());
    match reload(&served) {
        Reload::Kept(Kept::Unreadable(TlsError::NotAFile { path })) => assert_eq!(path, files.key),
        other => panic!("{other:?}"),
    }
    assert_eq!(served_leaf(&served), first.der);
}

/// A certificate refused for the clock is judged again at every look, not only when its
/// files change: it is served once it is valid, or once the current one is refused too.
#[test]
fn a_certificate_refused_for_the_clock_is_served_once_clients_would_take_it() {
    // The new certificate is valid from 2032.
    for (current_until, early, then) in [
        // Valid a minute after it was refused, while the current one still is.
        (2040, at(2031, 0), at(2032, 60)),
        // Not valid yet, but the current one has expired meanwhile.
        (2031, at(2030, 0), at(2031, 60)),
    ] {
        let (files, served) = serving(&pair(&["relay.test"], (2020, current_until)));
        let renewed = pair(&["relay.test"], (2032, 2090));
        files.write(&renewed);
        match served.reload_if_changed(early) {
            Reload::Kept(Kept::RefusedByClients(problems)) => {
                assert_eq!(problems, ["it is not valid yet"]);
            }
            other => panic!("{other:?}"),
        }
        // Reported once.
        assert!(matches!(served.reload_if_changed(early), Reload::Unchanged));
        assert!(matches!(
            served.reload_if_changed(then),
            Reload::Served { .. }
        ));
        assert_eq!(served_leaf(&served), renewed.der);
    }
}

#[test]
fn a_certificate_clients_would_refuse_does_not_replace_one_they_accept() {
    let first = valid(&["relay.test"]);
    let (files, served) = serving(&first);

    for wrong in [
        valid(&["other.test"]),
        pair(&["relay.test"], (2020, 2021)),
        pair(&["relay.test"], (2090, 2091)),
    ] {
        files.write(&wrong);
        match reload(&served) {
            Reload::Kept(Kept::RefusedByClients(problems)) => {
                assert_eq!(problems.len(), 1, "{problems:?}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(served_leaf(&served), first.der);
    }
}

#[test]
fn a_certificate_clients_would_refuse_replaces_one_they_refuse_too() {
    // An expired certificate, replaced by one for the wrong host: both refused, so the files
    // are served as they say, as at the daemon's start, and the problems are reported.
    let (files, served) = serving(&pair(&["relay.test"], (2020, 2021)));
    let wrong_host = valid(&["other.test"]);
    files.write(&wrong_host);
    match reload(&served) {
        Reload::Served { problems } => {
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(
                problems[0].contains("does not name relay.test"),
                "{problems:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(served_leaf(&served), wrong_host.der);
}

#[test]
fn a_start_with_a_key_that_is_not_the_certificates_is_refused() {
    let files = Files::new();
    std::fs::write(&files.cert, valid(&["relay.test"]).cert).unwrap();
    std::fs::write(&files.key, valid(&["relay.test"]).key).unwrap();
    let error = ServedCertificate::from_files(&files.cert, &files.key, "relay.test").unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "the private key in {} is not the key of the first certificate in {}, which must be the server's own",
            files.key.display(),
            files.cert.display()
        )
    );
}

/// `--tls-cert <(…)`: a pipe given at start is read to its end, served, and not looked at
/// again (it has nothing more to give).
#[test]
fn pipes_given_at_start_are_served_and_not_looked_at_again() {
    use std::io::Write as _;
    use std::os::fd::AsRawFd as _;
    let first = valid(&["relay.test"]);
    let (cert_read, mut cert_write) = std::io::pipe().unwrap();
    let (key_read, mut key_write) = std::io::pipe().unwrap();
    cert_write.write_all(first.cert.as_bytes()).unwrap();
    key_write.write_all(first.key.as_bytes()).unwrap();
    drop((cert_write, key_write));
    let fd = |read: &std::io::PipeReader| PathBuf::from(format!("/dev/fd/{}", read.as_raw_fd()));
    let served =
        ServedCertificate::from_files(&fd(&cert_read), &fd(&key_read), "relay.test").unwrap();
    assert_eq!(served_leaf(&served), first.der);
    assert!(matches!(reload(&served), Reload::Unchanged));
    assert_eq!(served_leaf(&served), first.der);
}

/// A renewal that never came: the certificate served, its files unchanged, expires while
/// relayd runs, and that is reported once.
#[test]
fn a_served_certificate_that_expires_is_reported_once() {
    let first = pair(&["relay.test"], (2020, 2031));
    let (_files, served) = serving(&first);
    assert!(matches!(
        served.reload_if_changed(at(2030, 0)),
        Reload::Unchanged
    ));
    match served.reload_if_changed(at(2032, 0)) {
        Reload::ServedRefused { problems } => assert_eq!(problems, ["it has expired"]),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        served.reload_if_changed(at(2033, 0)),
        Reload::Unchanged
    ));
    assert_eq!(served_leaf(&served), first.der);
}
