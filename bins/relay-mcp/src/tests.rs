use relay_identity::{MapEnv, names};

use super::{warn_no_worker_address, worker_hint};

fn remote() -> relay_identity::DaemonAddress {
    relay_identity::DaemonAddress::parse("https://10.0.0.1:8443").unwrap()
}

#[test]
fn a_worker_port_that_is_not_a_number_is_a_configuration_error_naming_it() {
    for port in ["8443x", "70000", "-1"] {
        let env = MapEnv::new().with(names::RELAY_WORKER_PORT, port);
        let error = worker_hint(&remote(), &env).unwrap_err();
        assert!(error.starts_with("RELAY_WORKER_PORT: "), "{error}");
        assert!(error.contains(port), "{error}");
    }
    let env = MapEnv::new()
        .with(names::RELAY_WORKER_PORT, "9443")
        .with(names::RELAY_WORKER_ADVERTISE_ADDRESS, "10.0.0.2");
    let hint = worker_hint(&remote(), &env).unwrap().unwrap();
    assert_eq!(hint.port, Some(9443));
    assert_eq!(worker_hint(&remote(), &MapEnv::new()).unwrap(), None);
    // Empty is unset.
    let env = MapEnv::new().with(names::RELAY_WORKER_PORT, "");
    assert_eq!(worker_hint(&remote(), &env).unwrap(), None);
}

/// An advertised address the daemon can never accept is a configuration error at start,
/// naming the variable: otherwise every worker is refused and relaunched with backoff for
/// as long as the session lasts, and the reason is only in the worker's log.
#[test]
fn an_advertised_address_the_daemon_always_refuses_is_a_configuration_error_naming_it() {
    for address in [
        "client.example.com",
        "[::1]",
        "::1",
        "::ffff:127.0.0.1",
        "fe80::1",
        "10.0.0.2:9443",
        "127.0.0.1",
        "127.0.0.2",
        "0.0.0.0",
        "169.254.10.1",
        "224.0.0.1",
        "255.255.255.255",
    ] {
        let env = MapEnv::new()
            .with(names::RELAY_WORKER_ADVERTISE_ADDRESS, address)
            .with(names::RELAY_WORKER_PORT, "9443");
        let error = worker_hint(&remote(), &env).unwrap_err();
        assert!(
            error.starts_with("RELAY_WORKER_ADVERTISE_ADDRESS: "),
            "{address}: {error}"
        );
        assert!(error.contains(address), "{error}");
    }
    // A port without an address would advertise 127.0.0.1, which a remote daemon refuses.
    let env = MapEnv::new().with(names::RELAY_WORKER_PORT, "9443");
    let error = worker_hint(&remote(), &env).unwrap_err();
    assert!(error.starts_with("RELAY_WORKER_PORT: "), "{error}");
    assert!(error.contains("RELAY_WORKER_ADVERTISE_ADDRESS"), "{error}");
    // Surrounding blanks are no error, and are not sent.
    let env = MapEnv::new().with(names::RELAY_WORKER_ADVERTISE_ADDRESS, " 10.0.0.2 ");
    let hint = worker_hint(&remote(), &env).unwrap().unwrap();
    assert_eq!(
        hint.advertise_address.as_ref().map(|a| a.as_str()),
        Some("10.0.0.2")
    );
    assert_eq!(hint.port, None);
}

/// No address for a remote daemon is no error, but the log says at once what will follow.
#[test]
fn a_remote_daemon_without_a_worker_address_is_warned_of_at_start() {
    let (capture, dispatch) = relay_logging::LogCapture::jsonl("warn");
    tracing::dispatcher::with_default(&dispatch, || warn_no_worker_address(&remote()));
    let line: serde_json::Value = serde_json::from_str(capture.contents().trim()).unwrap();
    assert_eq!(line["event"], "worker_address_missing", "{line}");
    assert_eq!(line["daemon"], "https://10.0.0.1:8443", "{line}");
    assert!(
        line["message"]
            .as_str()
            .unwrap()
            .starts_with("RELAY_WORKER_ADVERTISE_ADDRESS is not set"),
        "{line}"
    );
}

/// A local daemon runs its users' workers on loopback and ignores a hint, so the remote
/// variables, even ones a remote daemon would refuse, are no error beside it and send none.
#[test]
fn the_worker_variables_are_not_read_for_a_local_daemon() {
    let env = MapEnv::new()
        .with(names::RELAY_WORKER_ADVERTISE_ADDRESS, "127.0.0.1")
        .with(names::RELAY_WORKER_PORT, "9443");
    assert!(worker_hint(&remote(), &env).is_err());
    for local in ["http://127.0.0.1:47632", "http://localhost:47632"] {
        let daemon = relay_identity::DaemonAddress::parse(local).unwrap();
        assert_eq!(worker_hint(&daemon, &env).unwrap(), None, "{local}");
    }
}

/// The variables `header_env` may not name are the route credential and Claude Code's
/// header list, as relay-identity spells them: relay-plugins keeps its own copy.
#[test]
fn the_variables_kept_from_workers_are_relay_identitys() {
    assert_eq!(
        relay_proxy::plugins::KEPT_FROM_WORKERS,
        [names::RELAY_CLIENT_TOKEN, names::ANTHROPIC_CUSTOM_HEADERS]
    );
}

/// The worker gets the allow-listed variables and nothing else: `NO_PROXY` (so an egress
/// proxy leaves the hosts it exempts alone, as in relayd), never the route credential or
/// the harness's own proxy settings.
#[test]
fn the_worker_inherits_no_proxy_and_not_the_credential() {
    let env = MapEnv::new()
        .with(names::NO_PROXY, "127.0.0.1,localhost")
        .with(names::NO_PROXY_LOWER, "127.0.0.1")
        .with(names::HOME, "/home/ann")
        .with(names::RELAY_CLIENT_TOKEN, "secret")
        .with(
            names::ANTHROPIC_CUSTOM_HEADERS,
            "x-relay-client-token: secret",
        )
        .with("HTTPS_PROXY", "http://proxy.invalid:3128");
    let paths = relay_identity::StatePaths::from_base("/home/ann/.config/relay");
    let launcher = crate::launch::Launcher::new(&env, "http://127.0.0.1:47632".into(), &paths);
    let mut names: Vec<&str> = launcher.env.iter().map(|(name, _)| name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["HOME", "NO_PROXY", "no_proxy"]);
}
