use super::*;

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::from_args(std::iter::once("relayd").chain(args.iter().copied()))
}

#[test]
fn state_dir_goes_before_or_after_the_bindings_subcommand() {
    let fp = "ab".repeat(32);
    for args in [
        vec!["--state-dir", "/srv/relay", "bindings", "revoke", &fp],
        vec!["bindings", "--state-dir", "/srv/relay", "revoke", &fp],
        vec!["bindings", "revoke", &fp, "--state-dir", "/srv/relay"],
    ] {
        let cli = parse(&args).unwrap();
        assert_eq!(
            cli.state_dir.as_deref(),
            Some(std::path::Path::new("/srv/relay"))
        );
        assert!(matches!(
            cli.command,
            Some(Command::Bindings {
                command: BindingsCommand::Revoke { ref fingerprint }
            }) if *fingerprint == fp
        ));
    }
    let cli = parse(&["bindings", "list"]).unwrap();
    assert!(cli.state_dir.is_none());
}

#[test]
fn daemon_flags_do_not_go_with_a_subcommand() {
    for args in [
        vec!["--port", "5000", "bindings", "list"],
        vec!["--pass-through", "bindings", "list"],
        vec!["--bind", "127.0.0.1", "identity", "show"],
    ] {
        let error = parse(&args).unwrap_err();
        assert_eq!(error.kind(), clap::error::ErrorKind::ArgumentConflict);
        assert!(error.to_string().contains("cannot be used with"), "{error}");
    }
    // A daemon run with its flags still parses.
    let cli = parse(&["--port", "5000", "--state-dir", "/srv/relay"]).unwrap();
    assert_eq!(cli.port, 5000);
    assert!(cli.command.is_none());
}

#[test]
fn identity_show_takes_the_origin_its_pin_is_for() {
    let remote = parse(&[
        "--advertise-address",
        "https://Relay.Example.com:8443",
        "identity",
        "show",
    ])
    .unwrap();
    // No TLS files are needed to name the origin.
    let origin = |cli: &Cli| cli.advertised(false).unwrap().origin();
    assert_eq!(origin(&remote), "https://relay.example.com:8443");
    let port = parse(&["--port", "5000", "identity", "show"]).unwrap();
    assert_eq!(origin(&port), "http://127.0.0.1:5000");
    // A loopback daemon with its own certificate is dialled over https.
    let tls = parse(&[
        "--port",
        "8443",
        "--tls-cert",
        "/etc/relay/cert.pem",
        "--tls-key",
        "/etc/relay/key.pem",
        "identity",
        "show",
    ])
    .unwrap();
    assert_eq!(origin(&tls), "https://127.0.0.1:8443");
    let default = parse(&["identity", "show"]).unwrap();
    assert_eq!(origin(&default), "http://127.0.0.1:47632");
    // Only `identity` takes them.
    let error = parse(&["--port", "5000", "bindings", "list"]).unwrap_err();
    assert_eq!(error.kind(), clap::error::ErrorKind::ArgumentConflict);
    let error = parse(&[
        "--advertise-address",
        "https://relay.example.com:8443",
        "config",
        "defaults",
    ])
    .unwrap_err();
    assert_eq!(error.kind(), clap::error::ErrorKind::ArgumentConflict);
}

/// Clients dial plain http only at 127.0.0.1: another loopback address serves https, or
/// names the origin clients dial.
#[test]
fn another_loopback_bind_needs_tls_or_an_advertised_origin() {
    let other = parse(&["--bind", "127.0.0.2"]).unwrap();
    assert_eq!(
        other.advertised(true).unwrap_err(),
        FlagError::PlainHttpOnlyOn127(Ipv4Addr::new(127, 0, 0, 2))
    );
    let tls = parse(&[
        "--bind",
        "127.0.0.2",
        "--tls-cert",
        "/etc/relay/cert.pem",
        "--tls-key",
        "/etc/relay/key.pem",
    ])
    .unwrap();
    assert_eq!(
        tls.advertised(true).unwrap().origin(),
        "https://127.0.0.2:47632"
    );
    let named = parse(&[
        "--bind",
        "127.0.0.2",
        "--advertise-address",
        "http://localhost:47632",
    ])
    .unwrap();
    assert_eq!(
        named.advertised(true).unwrap().origin(),
        "http://localhost:47632"
    );
}

/// A listener other machines can reach serves https, whatever origin it advertises: a
/// loopback one would let route tokens and registrations cross the network in the clear.
#[test]
fn a_network_bind_never_serves_plain_http() {
    for bind in ["0.0.0.0", "10.200.77.1"] {
        for origin in ["http://127.0.0.1:47632", "http://localhost:47632"] {
            let plain = parse(&["--bind", bind, "--advertise-address", origin]).unwrap();
            assert_eq!(
                plain.advertised(true).unwrap_err(),
                FlagError::NetworkBindNeedsHttps(bind.parse().unwrap()),
                "{bind} {origin}"
            );
        }
        let tls = parse(&[
            "--bind",
            bind,
            "--advertise-address",
            "https://relay.example.com:8443",
            "--tls-cert",
            "/etc/relay/cert.pem",
            "--tls-key",
            "/etc/relay/key.pem",
        ])
        .unwrap();
        assert_eq!(
            tls.advertised(true).unwrap().origin(),
            "https://relay.example.com:8443"
        );
    }
}

#[test]
fn bindings_commands_need_their_fingerprint() {
    for args in [
        vec!["bindings", "revoke"],
        vec!["bindings", "block"],
        vec!["bindings", "unblock"],
        vec!["bindings"],
        vec!["bindings", "list", "extra"],
    ] {
        assert!(parse(&args).is_err(), "{args:?}");
    }
}

/// `--help` speaks to users: no specification section numbers, in any subcommand.
#[test]
fn help_cites_no_specification_sections() {
    use clap::CommandFactory as _;
    fn check(command: &mut clap::Command, path: &str) {
        let help = command.render_long_help().to_string();
        assert!(!help.contains('§'), "{path} --help: {help}");
        let names: Vec<String> = command
            .get_subcommands()
            .map(|sub| sub.get_name().to_owned())
            .collect();
        for name in names {
            if let Some(sub) = command.find_subcommand_mut(&name) {
                check(sub, &format!("{path} {name}"));
            }
        }
    }
    check(&mut Cli::command(), "relayd");
}

#[test]
fn managed_bundle_parses_repeated_agents() {
    let cli = parse(&[
        "managed-bundle",
        "--output",
        "/srv/bundle",
        "--daemon-address",
        "http://127.0.0.1:47632",
        "--bin-dir",
        "/opt/relay/bin",
        "--platform",
        "windows",
        "--agent",
        "pi",
        "--agent",
        "claude",
    ])
    .unwrap();
    assert!(matches!(
        cli.command,
        Some(Command::ManagedBundle { ref agent, ref platform, .. })
            if agent == &["pi", "claude"] && platform == "windows"
    ));
    let error = parse(&[
        "managed-bundle",
        "--output",
        "/srv/bundle",
        "--daemon-address",
        "http://127.0.0.1:47632",
        "--bin-dir",
        "/opt/relay/bin",
        "--platform",
        "linux",
    ])
    .unwrap_err();
    assert!(error.to_string().contains("--agent"), "{error}");
}
