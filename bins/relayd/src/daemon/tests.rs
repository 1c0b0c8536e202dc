use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use relay_identity::{MapEnv, names};
use relay_proxy::config::Config;
use relay_proxy::control::daemon::check_endpoint;

use super::{CERTIFICATE_CHECK, own_addresses, provider_keys, runtime_threads, watch_certificate};

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

#[test]
fn the_bind_address_an_ip_advertised_host_and_every_interface_are_own() {
    let interfaces = [
        v4(127, 0, 0, 1),
        v4(192, 168, 1, 20),
        v4(10, 0, 0, 5),
        IpAddr::V6(Ipv4Addr::new(172, 16, 0, 9).to_ipv6_mapped()),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ];
    let own = own_addresses(Ipv4Addr::UNSPECIFIED, "203.0.113.4", &interfaces);
    for ip in [
        v4(0, 0, 0, 0),
        v4(203, 0, 113, 4),
        v4(192, 168, 1, 20),
        v4(10, 0, 0, 5),
        v4(172, 16, 0, 9),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ] {
        assert!(own.contains(&ip), "{ip} missing from {own:?}");
    }
    let mut sorted = own.clone();
    sorted.dedup();
    assert_eq!(sorted.len(), own.len(), "no duplicates: {own:?}");
}

#[test]
fn a_host_name_adds_nothing_and_a_bracketed_ipv6_literal_counts() {
    let own = own_addresses(Ipv4Addr::new(10, 0, 0, 5), "relay.example", &[]);
    assert_eq!(own, vec![v4(10, 0, 0, 5)]);
    let own = own_addresses(Ipv4Addr::new(10, 0, 0, 5), "[2001:db8::1]", &[]);
    assert!(own.contains(&"2001:db8::1".parse().unwrap_or(v4(0, 0, 0, 0))));
}

/// The attack: another user on the daemon's own host reaches it over a LAN interface (so
/// the peer is not loopback) and names that interface's address, its own peer address, as
/// the worker endpoint. With the interfaces among the daemon's own addresses it is refused.
#[test]
fn a_remote_worker_cannot_name_an_interface_address_of_the_daemon_host() {
    let lan = v4(192, 168, 1, 20);
    let networks = ["192.168.1.0/24".parse().unwrap_or_else(|_| unreachable!())];
    let before = own_addresses(Ipv4Addr::UNSPECIFIED, "relay.example", &[]);
    assert!(
        check_endpoint("192.168.1.20:47700", lan, &networks, &before).is_ok(),
        "without the interfaces the daemon's host passes for a remote worker"
    );
    let own = own_addresses(Ipv4Addr::UNSPECIFIED, "relay.example", &[lan]);
    assert!(check_endpoint("192.168.1.20:47700", lan, &networks, &own).is_err());
    assert!(check_endpoint("192.168.1.20:47700", v4(192, 168, 1, 30), &networks, &own).is_err());
    // Another host of the network is still a fine worker.
    assert!(check_endpoint("192.168.1.30:47700", v4(192, 168, 1, 30), &networks, &own).is_ok());
}

/// A key that systemd's `LoadCredential=` placed in the service's credentials directory is
/// group-readable through an ACL: read from there, refused anywhere else, and refused in a
/// directory below the credentials directory.
#[test]
fn a_key_file_in_the_services_credentials_directory_is_checked_as_systemd_writes_it() {
    use std::os::unix::fs::PermissionsExt as _;
    let credentials = tempfile::tempdir().unwrap();
    let write = |path: &std::path::Path| {
        std::fs::write(path, "sk-from-systemd\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o440)).unwrap();
    };
    let key = credentials.path().join("openai-api-key");
    write(&key);
    let nested = credentials.path().join("sub");
    std::fs::create_dir(&nested).unwrap();
    write(&nested.join("openai-api-key"));
    let with_file = |file: &std::path::Path| {
        let mut config = Config::default();
        config.upstream.openai_api_key_file = file.display().to_string();
        config
    };
    let systemd = MapEnv::new().with(names::CREDENTIALS_DIRECTORY, credentials.path());

    let keys = provider_keys(&with_file(&key), &systemd).unwrap();
    assert_eq!(keys.openai.unwrap(), "Bearer sk-from-systemd");
    for (file, env) in [
        (key.clone(), MapEnv::new()),
        (nested.join("openai-api-key"), systemd.clone()),
    ] {
        let refused = provider_keys(&with_file(&file), &env).unwrap_err();
        assert!(refused.contains("insecure_permissions"), "{refused}");
    }
}

/// What `warn` logs at warning level and above, as JSON lines.
fn warnings_of(warn: impl FnOnce()) -> String {
    let (capture, dispatch) = relay_logging::LogCapture::jsonl("warn");
    tracing::dispatcher::with_default(&dispatch, warn);
    capture.contents()
}

/// A TLS key every user can read is said at start; one shared with a group is not.
#[test]
fn a_tls_key_others_can_read_is_warned_about() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key.pem");
    std::fs::write(&key, "not read here").unwrap();
    let logged = |mode: u32| {
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
        warnings_of(|| super::warn_if_others_can_read(&key))
    };
    let open = logged(0o644);
    assert!(open.contains("tls_key_readable_by_others"), "{open}");
    assert!(open.contains("0644"), "{open}");
    assert_eq!(logged(0o640), "");
    assert_eq!(logged(0o600), "");
}

/// A certificate clients will refuse is said at start, with why; a fit one is not.
#[test]
fn a_certificate_clients_will_refuse_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("cert.pem");
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["relay.test".to_owned()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    std::fs::write(&cert, params.self_signed(&key).unwrap().pem()).unwrap();
    let logged = |host: &str| warnings_of(|| super::warn_if_clients_will_refuse(&cert, host));
    let expired = logged("relay.test");
    assert!(
        expired.contains("tls_certificate_refused_by_clients"),
        "{expired}"
    );
    assert!(expired.contains("it has expired"), "{expired}");
    let elsewhere = logged("relay.example.com");
    assert!(
        elsewhere.contains("does not name relay.example.com"),
        "{elsewhere}"
    );

    let mut params = rcgen::CertificateParams::new(vec!["relay.test".to_owned()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2090, 1, 1);
    std::fs::write(&cert, params.self_signed(&key).unwrap().pem()).unwrap();
    assert_eq!(logged("relay.test"), "");
}

#[test]
fn plain_http_on_loopback_runs_one_event_loop_and_https_a_thread_per_cpu() {
    assert_eq!(runtime_threads(Ipv4Addr::LOCALHOST, false).get(), 1);
    assert_eq!(runtime_threads(Ipv4Addr::new(127, 0, 0, 2), false).get(), 1);
    let every_cpu = std::num::NonZeroUsize::MAX;
    // HTTPS on loopback is reached from other machines through a tunnel.
    assert_eq!(runtime_threads(Ipv4Addr::LOCALHOST, true), every_cpu);
    assert_eq!(runtime_threads(Ipv4Addr::new(10, 0, 0, 5), true), every_cpu);
    assert_eq!(runtime_threads(Ipv4Addr::UNSPECIFIED, true), every_cpu);
}

/// Waits on the paused clock, which does not move on while a look runs off the event loop,
/// for the next look `looks` reports (true when it served new files), within three looks:
/// what it did, and how long it took to come.
async fn next_look(
    looks: &mut tokio::sync::mpsc::UnboundedReceiver<bool>,
) -> (bool, std::time::Duration) {
    let start = tokio::time::Instant::now();
    let served = tokio::time::timeout(CERTIFICATE_CHECK * 3, looks.recv())
        .await
        .expect("no look within three checks")
        .expect("the watch ended");
    (served, start.elapsed())
}

/// The served certificate's files are looked at once per check: a renewal is served from
/// the first look after it, and never before a look.
#[tokio::test(start_paused = true)]
async fn a_renewed_certificate_is_served_from_the_next_look_at_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let write = || {
        let generated = rcgen::generate_simple_self_signed(vec!["relay.test".to_owned()]).unwrap();
        std::fs::write(&cert, generated.cert.pem()).unwrap();
        std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
        generated.cert.der().clone()
    };
    let first = write();
    let served =
        relay_proxy::tls::ServedCertificate::from_files(&cert, &key, "relay.test").unwrap();
    let leaf = || served.chain()[0].clone();
    let (looked, mut looks) = tokio::sync::mpsc::unbounded_channel();
    let report = move |_: &relay_proxy::tls::ServedCertificate, reload| {
        let _ = looked.send(matches!(reload, relay_proxy::tls::Reload::Served { .. }));
    };
    let watching = tokio::spawn(watch_certificate(served.clone(), CERTIFICATE_CHECK, report));
    let second = std::time::Duration::from_secs(1);
    let renewed = write();
    assert_ne!(renewed, first);
    assert_eq!(leaf(), first);
    // Served at the first look, a minute after the watch began, and not before; then at
    // the next, a minute later.
    let at_a_look = CERTIFICATE_CHECK - second..CERTIFICATE_CHECK + second;
    let (served_new, took) = next_look(&mut looks).await;
    assert!(served_new && at_a_look.contains(&took), "{took:?}");
    assert_eq!(leaf(), renewed);
    let again = write();
    let (served_new, took) = next_look(&mut looks).await;
    assert!(served_new && at_a_look.contains(&took), "{took:?}");
    assert_eq!(leaf(), again);
    watching.abort();
}
