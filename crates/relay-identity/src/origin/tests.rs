use proptest::prelude::*;

use super::*;

#[test]
fn origin_normalizes_case_port_and_slash() {
    let cases = [
        ("http://127.0.0.1:47632", "http://127.0.0.1:47632"),
        ("HTTP://LocalHost:47632/", "http://localhost:47632"),
        ("https://Relay.Example.COM", "https://relay.example.com:443"),
        ("http://example.com/", "http://example.com:80"),
        (
            "https://relay.example.com:08443",
            "https://relay.example.com:8443",
        ),
        ("https://[::1]:8443", "https://[::1]:8443"),
        ("https://[0:0::1]", "https://[::1]:443"),
        ("https://[2001:DB8::1]:1/", "https://[2001:db8::1]:1"),
    ];
    for (input, expected) in cases {
        let origin = Origin::parse(input).unwrap();
        assert_eq!(origin.to_string(), expected, "{input}");
    }
}

#[test]
fn localhost_and_loopback_ip_and_schemes_are_different_origins() {
    let a = Origin::parse("http://localhost:1").unwrap();
    let b = Origin::parse("http://127.0.0.1:1").unwrap();
    let c = Origin::parse("https://127.0.0.1:1").unwrap();
    assert_ne!(a, b);
    assert_ne!(b, c);
}

#[test]
fn origin_refuses_what_is_not_an_origin() {
    let cases = [
        ("127.0.0.1:47632", AddressError::NotAbsolute),
        ("", AddressError::NotAbsolute),
        ("//host:1", AddressError::NotAbsolute),
        (
            "ftp://host:1",
            AddressError::UnsupportedScheme {
                scheme: "ftp".into(),
            },
        ),
        ("http://user:secret@host:1", AddressError::UserInfo),
        // A password holding `/`, `?` or `#`: refused as user info, the tail never quoted.
        ("https://u:pa/ss@host:1", AddressError::UserInfo),
        ("https://u:pa?ss@host:1", AddressError::UserInfo),
        ("https://u:pa#ss@host:1", AddressError::UserInfo),
        (
            "http://host:1/v1",
            AddressError::Path { path: "/v1".into() },
        ),
        ("http://host:1//", AddressError::Path { path: "//".into() }),
        ("http://host:1/?", AddressError::Query),
        ("http://host:1?a=b", AddressError::Query),
        ("http://host:1#", AddressError::Fragment),
        ("http://:1", AddressError::EmptyHost),
        ("http://", AddressError::EmptyHost),
        (
            "http://host:",
            AddressError::InvalidPort { port: "".into() },
        ),
        (
            "http://host:0",
            AddressError::InvalidPort { port: "0".into() },
        ),
        (
            "http://host:65536",
            AddressError::InvalidPort {
                port: "65536".into(),
            },
        ),
        (
            "http://host:+1",
            AddressError::InvalidPort { port: "+1".into() },
        ),
        (
            "http://127.1:1",
            AddressError::InvalidHost {
                host: "127.1".into(),
            },
        ),
        (
            "http://0x7f.0.0.1:1",
            AddressError::InvalidHost {
                host: "0x7f.0.0.1".into(),
            },
        ),
        (
            "http://127.0.0.01:1",
            AddressError::InvalidHost {
                host: "127.0.0.01".into(),
            },
        ),
        (
            "http://example.com.:1",
            AddressError::InvalidHost {
                host: "example.com.".into(),
            },
        ),
        (
            "http://ex ample.com:1",
            AddressError::InvalidHost {
                host: "ex ample.com".into(),
            },
        ),
        (
            "http://exämple.com:1",
            AddressError::InvalidHost {
                host: "exämple.com".into(),
            },
        ),
        (
            "http://a:b:1",
            AddressError::InvalidHost { host: "a:b".into() },
        ),
        (
            "http://[::1:1",
            AddressError::InvalidHost {
                host: "[::1:1".into(),
            },
        ),
        (
            "http://[fe80::1%eth0]:1",
            AddressError::InvalidHost {
                host: "[fe80::1%eth0]:1".into(),
            },
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(Origin::parse(input), Err(expected), "{input:?}");
    }
}

#[test]
fn errors_never_repeat_a_password() {
    for input in [
        "http://user:hunter2@host:1",
        "https://user:hunter2@[::1]:1/x",
        "user:hunter2@host:1",
    ] {
        let err = DaemonAddress::parse(input).unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}

#[test]
fn daemon_address_accepts_the_cases_of_section_2_6() {
    let cases = [
        ("http://127.0.0.1:47632", "http://127.0.0.1:47632"),
        ("http://127.0.0.1:47632/", "http://127.0.0.1:47632"),
        ("http://localhost:47632", "http://localhost:47632"),
        ("HTTP://LOCALHOST:47632/", "http://localhost:47632"),
        ("https://localhost:8443", "https://localhost:8443"),
        (
            "https://relay.example.com:8443",
            "https://relay.example.com:8443",
        ),
        (
            "https://Relay.Example.com:443/",
            "https://relay.example.com:443",
        ),
        ("https://10.1.2.3:8443", "https://10.1.2.3:8443"),
    ];
    for (input, expected) in cases {
        let address = DaemonAddress::parse(input).unwrap();
        assert_eq!(address.to_string(), expected, "{input}");
        assert_eq!(address.origin().to_string(), expected, "{input}");
        assert_eq!(input.parse::<DaemonAddress>(), Ok(address));
    }
}

#[test]
fn daemon_address_refuses_the_cases_of_section_2_6() {
    let cases = [
        (
            "http://127.0.0.1",
            AddressError::MissingPort {
                host: "127.0.0.1".into(),
            },
        ),
        (
            "https://relay.example.com/",
            AddressError::MissingPort {
                host: "relay.example.com".into(),
            },
        ),
        ("http://me@127.0.0.1:1", AddressError::UserInfo),
        (
            "http://127.0.0.1:1/relay",
            AddressError::Path {
                path: "/relay".into(),
            },
        ),
        ("http://127.0.0.1:1/?x", AddressError::Query),
        ("http://127.0.0.1:1/#x", AddressError::Fragment),
        (
            "http://0.0.0.0:47632",
            AddressError::BindAddress {
                host: "0.0.0.0".into(),
            },
        ),
        (
            "https://0.0.0.0:8443",
            AddressError::BindAddress {
                host: "0.0.0.0".into(),
            },
        ),
        (
            "http://[::1]:47632",
            AddressError::Ipv6 { host: "::1".into() },
        ),
        (
            "https://[2001:db8::1]:8443",
            AddressError::Ipv6 {
                host: "2001:db8::1".into(),
            },
        ),
        (
            "http://relay.example.com:8080",
            AddressError::PlainHttpNotLoopback {
                host: "relay.example.com".into(),
            },
        ),
        (
            "http://10.0.0.1:47632",
            AddressError::PlainHttpNotLoopback {
                host: "10.0.0.1".into(),
            },
        ),
        (
            "http://127.0.0.2:47632",
            AddressError::PlainHttpNotLoopback {
                host: "127.0.0.2".into(),
            },
        ),
        (
            "ws://127.0.0.1:47632",
            AddressError::UnsupportedScheme {
                scheme: "ws".into(),
            },
        ),
        ("127.0.0.1:47632", AddressError::NotAbsolute),
        ("/relative", AddressError::NotAbsolute),
        (" http://127.0.0.1:1", AddressError::NotAbsolute),
        (
            "http://127.0.0.1:1 ",
            AddressError::InvalidPort { port: "1 ".into() },
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(DaemonAddress::parse(input), Err(expected), "{input:?}");
    }
    assert_eq!(
        DaemonAddress::parse("http://0.0.0.0:1")
            .unwrap_err()
            .to_string(),
        "0.0.0.0 is a bind address, not a daemon target"
    );
}

#[test]
fn localhost_connects_to_127_0_0_1_never_to_ipv6() {
    let address = DaemonAddress::parse("http://localhost:47632").unwrap();
    assert_eq!(
        address.connect_addr(),
        Some("127.0.0.1:47632".parse().unwrap())
    );
    assert_eq!(address.connect_host(), "127.0.0.1");
    assert_eq!(address.host(), "localhost");
    assert!(address.is_loopback());
    assert!(!address.is_tls());
    assert_eq!(address.port(), 47632);
    assert_eq!(address.scheme(), Scheme::Http);
}

#[test]
fn ip_hosts_have_a_socket_address_and_names_do_not() {
    let ip = DaemonAddress::parse("https://10.1.2.3:8443").unwrap();
    assert_eq!(ip.connect_addr(), Some("10.1.2.3:8443".parse().unwrap()));
    assert!(!ip.is_loopback());
    let name = DaemonAddress::parse("https://relay.example.com:8443").unwrap();
    assert_eq!(name.connect_addr(), None);
    assert_eq!(name.connect_host(), "relay.example.com");
    assert!(name.is_tls());
}

#[test]
fn ws_url_uses_the_same_origin() {
    let plain = DaemonAddress::parse("http://localhost:47632/").unwrap();
    assert_eq!(
        plain.ws_url("/_relay/control/v1/mcp"),
        "ws://localhost:47632/_relay/control/v1/mcp"
    );
    let tls = DaemonAddress::parse("https://Relay.Example.com:8443").unwrap();
    assert_eq!(
        tls.ws_url("_relay/control/v1/worker"),
        "wss://relay.example.com:8443/_relay/control/v1/worker"
    );
}

#[test]
fn origin_serde_is_its_normalized_text() {
    let origin = Origin::parse("HTTPS://Example.com").unwrap();
    let json = serde_json::to_string(&origin).unwrap();
    assert_eq!(json, "\"https://example.com:443\"");
    assert_eq!(serde_json::from_str::<Origin>(&json).unwrap(), origin);
    assert!(serde_json::from_str::<Origin>("\"ftp://x:1\"").is_err());
}

fn url_like() -> impl Strategy<Value = String> {
    let scheme = prop::sample::select(vec!["http", "https", "HTTP", "HttpS", "ftp", ""]);
    let host = prop_oneof![
        "[a-zA-Z0-9._-]{0,20}",
        (0u8..=255, 0u8..=255, 0u8..=255, 0u8..=255)
            .prop_map(|(a, b, c, d)| format!("{a}.{b}.{c}.{d}")),
        any::<[u16; 8]>().prop_map(|segments| {
            let ip = std::net::Ipv6Addr::from(segments);
            format!("[{ip}]")
        }),
        Just("LOCALHOST".to_owned()),
    ];
    let port = prop_oneof![
        Just(String::new()),
        "[0-9]{1,6}".prop_map(|p| format!(":{p}")),
    ];
    let tail = prop::sample::select(vec!["", "/", "/x", "?", "#"]);
    (scheme, host, port, tail).prop_map(|(s, h, p, t)| format!("{s}://{h}{p}{t}"))
}

proptest! {
    #[test]
    fn origin_normalization_is_idempotent(input in prop_oneof![url_like(), ".{0,40}"]) {
        if let Ok(origin) = Origin::parse(&input) {
            let text = origin.to_string();
            let again = Origin::parse(&text);
            prop_assert_eq!(again.as_ref(), Ok(&origin));
            prop_assert_eq!(again.map(|o| o.to_string()), Ok(text));
        }
    }

    #[test]
    fn a_daemon_address_origin_reparses_to_itself(input in url_like()) {
        if let Ok(address) = DaemonAddress::parse(&input) {
            let text = address.to_string();
            prop_assert_eq!(DaemonAddress::parse(&text), Ok(address.clone()));
            prop_assert_eq!(Origin::parse(&text), Ok(address.origin().clone()));
        }
    }
}
