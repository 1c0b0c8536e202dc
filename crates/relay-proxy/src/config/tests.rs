use std::io::Write;

use super::*;

fn file(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::File::create(&path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    path
}

fn sources(user: Option<PathBuf>, system: Option<PathBuf>) -> ConfigSources {
    ConfigSources {
        user_file: user,
        system_file: system,
    }
}

#[test]
fn missing_files_give_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::load_daemon(&sources(
        Some(dir.path().join("nope.toml")),
        Some(dir.path().join("nope2.toml")),
    ))
    .unwrap();
    assert_eq!(config, Config::default());
    assert_eq!(config.daemon.max_request_body_bytes, 33_554_432);
    assert_eq!(
        config.daemon.timers.reconnect_grace_secs.get(),
        Duration::from_secs(30)
    );
}

#[test]
fn the_system_file_wins_over_the_user_file_key_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let user = file(
        &dir,
        "user.toml",
        "[daemon]\nmax_routes = 10\nstatus_public = true\n[daemon.timers]\ndrain_secs = 5\n",
    );
    let system = file(
        &dir,
        "system.toml",
        "[daemon]\nmax_routes = 20\n[daemon.timers]\nping_secs = 0.5\n",
    );
    let config = Config::load_daemon(&sources(Some(user), Some(system))).unwrap();
    assert_eq!(config.daemon.max_routes, 20);
    assert!(config.daemon.status_public);
    assert_eq!(
        config.daemon.timers.drain_secs.get(),
        Duration::from_secs(5)
    );
    assert_eq!(
        config.daemon.timers.ping_secs.get(),
        Duration::from_millis(500)
    );
}

#[test]
fn the_daemon_refuses_unknown_keys_naming_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let system = file(&dir, "config.toml", "[daemon]\nmax_rotes = 10\n");
    let err = Config::load_daemon(&sources(None, Some(system.clone()))).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("config.toml"), "{message}");
    assert!(message.contains("daemon.max_rotes"), "{message}");
}

#[test]
fn bad_values_name_their_file() {
    let dir = tempfile::tempdir().unwrap();
    let system = file(&dir, "config.toml", "[daemon]\nmax_routes = \"many\"\n");
    let err = Config::load_daemon(&sources(None, Some(system))).unwrap_err();
    assert!(err.to_string().contains("config.toml"), "{err}");
}

/// A value that is the right type but wrong names the file it came from: the last file
/// that sets it, whose value is the one that counts.
#[test]
fn invalid_values_name_the_file_that_set_them() {
    let dir = tempfile::tempdir().unwrap();
    let user = file(&dir, "user.toml", "[daemon]\nmax_connections = 0\n");
    let system = file(&dir, "system.toml", "[daemon.timers]\nping_secs = 5\n");
    let err = Config::load_daemon(&sources(Some(user.clone()), Some(system.clone())))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "{}: daemon.max_connections: must be positive",
            user.display()
        )
    );
    let over = file(&dir, "over.toml", "[daemon]\nmax_connections = 0\n");
    let err = Config::load_daemon(&sources(Some(user), Some(over.clone())))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with(&format!("{}: ", over.display())), "{err}");
    let base = file(
        &dir,
        "client.toml",
        "[upstream]\nanthropic_base_url = \"https://api.anthropic.com/v1\"\n",
    );
    let err = Config::load_client(&sources(None, Some(base.clone())))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!("{}: upstream.anthropic_base_url", base.display())),
        "{err}"
    );
    let level = file(&dir, "level.toml", "[logging]\nlevel = \"loud\"\n");
    let err = Config::load_client(&sources(None, Some(level.clone())))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!("{}: logging.level: ", level.display())),
        "{err}"
    );
}

#[test]
fn invalid_values_name_their_key() {
    let dir = tempfile::tempdir().unwrap();
    for (text, key) in [
        (
            "[daemon]\nmax_tokens_per_identity = 65\n",
            "daemon.max_tokens_per_identity",
        ),
        (
            "[daemon]\nmax_tokens_per_identity = 0\n",
            "daemon.max_tokens_per_identity",
        ),
        (
            "[upstream]\nanthropic_base_url = \"https://api.anthropic.com/v1\"\n",
            "upstream.anthropic_base_url",
        ),
        (
            "[daemon.timers]\ndrain_secs = 0\n",
            "daemon.timers.drain_secs",
        ),
        (
            "[daemon.logging]\nstderr_format = \"xml\"\n",
            "daemon.logging.stderr_format",
        ),
        (
            "[daemon.logging]\nlevel = \"verbose\"\n",
            "daemon.logging.level",
        ),
        // The workers' own table, which they would refuse.
        ("[logging]\nlevel = \"loud\"\n", "logging.level"),
        // Settings that would switch a protection off, or contradict another.
        (
            "[daemon]\nmax_control_sessions_per_ip = 0\n",
            "daemon.max_control_sessions_per_ip",
        ),
        (
            "[daemon]\nbinding_tombstone_days = 0\n",
            "daemon.binding_tombstone_days",
        ),
        (
            "[daemon.timers]\nreconnect_first_ms = 5000\nreconnect_cap_ms = 100\n",
            "daemon.timers.reconnect_first_ms",
        ),
        (
            "[daemon.timers]\nretry_base_ms = 100000\nretry_cap_secs = 1\n",
            "daemon.timers.retry_base_ms",
        ),
        // A capture of nothing marks every record's usage unknown and truncated.
        (
            "[worker]\nobservation_capture_bytes = 0\n",
            "worker.observation_capture_bytes",
        ),
        (
            "[worker]\nobservation_total_bytes = 0\n",
            "worker.observation_total_bytes",
        ),
    ] {
        let system = file(&dir, "config.toml", text);
        let err = Config::load_daemon(&sources(None, Some(system.clone()))).unwrap_err();
        assert!(err.to_string().contains(key), "{text}: {err}");
        // The workers read the same files, skipping the daemon's tables, and refuse the
        // same values in theirs.
        if !key.starts_with("daemon.") {
            let err = Config::load_client(&sources(None, Some(system))).unwrap_err();
            assert!(err.to_string().contains(key), "{text}: {err}");
        }
    }
    let system = file(
        &dir,
        "config.toml",
        "[upstream]\nopenai_base_url = \"ftp://x\"\n",
    );
    let err = Config::load_daemon(&sources(None, Some(system))).unwrap_err();
    assert!(err.to_string().contains("http or https"), "{err}");
    // A duration of the wrong type says what it should be.
    for value in ["\"ten\"", "-3", "true"] {
        let system = file(
            &dir,
            "config.toml",
            &format!("[upstream]\nconnect_timeout_secs = {value}\n"),
        );
        let err = Config::load_daemon(&sources(None, Some(system))).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("a non-negative number of seconds")
                && text.contains("upstream.connect_timeout_secs"),
            "{value}: {text}"
        );
    }
}

/// What is not a configuration file is refused by name, and never read without end or
/// waited on: a FIFO, a directory, a device, a file past a megabyte, a symlink to nothing.
#[test]
fn only_a_regular_file_of_bounded_size_is_read_as_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let refused = |why: &str| {
        let err = Config::load_daemon(&sources(None, Some(path.clone())))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("config.toml") && err.contains(why),
            "{why}: {err}"
        );
    };
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &path,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    refused("not a regular file");
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    refused("not a regular file");
    std::fs::remove_dir(&path).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
    refused("not a regular file");
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &path).unwrap();
    refused("nowhere, which does not exist");
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, format!("# {}\n", "x".repeat(1 << 20))).unwrap();
    refused("larger than 1048576 bytes");
    // A symlink to a real file is read as that file.
    let real = dir.path().join("real.toml");
    std::fs::write(&real, "[daemon]\nmax_routes = 7\n").unwrap();
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(&real, &path).unwrap();
    let config = Config::load_daemon(&sources(None, Some(path.clone()))).unwrap();
    assert_eq!(config.daemon.max_routes, 7);
}

/// The same, through the loader, on real files.
#[test]
fn a_world_writable_configuration_file_is_refused_at_load() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, "[daemon]\nmax_routes = 7\n").unwrap();
    let load = || Config::load_daemon(&sources(None, Some(path.clone())));
    let mode = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    mode(&path, 0o666);
    let err = load().unwrap_err().to_string();
    assert!(
        err.contains("config.toml") && err.contains("writable by every user"),
        "{err}"
    );
    mode(&path, 0o644);
    mode(dir.path(), 0o777);
    let err = load().unwrap_err().to_string();
    assert!(
        err.contains(&format!("chmod o-w {}", dir.path().display())),
        "{err}"
    );
    mode(dir.path(), 0o1777);
    assert_eq!(load().unwrap().daemon.max_routes, 7);
    // A symlink is judged by the directory it is in as well as by the file's: one that
    // configuration management put in a directory only it may write is followed, but in a
    // directory every user may write, anyone could have put it there, pointing at a file
    // of their own.
    mode(dir.path(), 0o755);
    let links = tempfile::tempdir().unwrap();
    mode(links.path(), 0o755);
    let link = links.path().join("config.toml");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let via_link = || Config::load_daemon(&sources(None, Some(link.clone())));
    assert_eq!(via_link().unwrap().daemon.max_routes, 7);
    mode(links.path(), 0o777);
    let err = via_link().unwrap_err().to_string();
    assert!(err.contains("who could replace"), "{err}");
}

/// A duration past a year is refused at load: a value near the largest integer made every
/// connection's first timer overflow the clock and panic, with the daemon up.
#[test]
fn durations_past_a_year_are_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let load = |text: &str| {
        let system = file(&dir, "config.toml", text);
        Config::load_daemon(&sources(None, Some(system)))
    };
    for (text, key) in [
        (
            "[daemon.timers]\nheader_read_timeout_secs = 9223372036854775807\n",
            "daemon.timers.header_read_timeout_secs",
        ),
        (
            "[daemon]\nkeepalive_idle_secs = 31536001\n",
            "daemon.keepalive_idle_secs",
        ),
        (
            "[upstream]\nresponse_timeout_secs = 1e300\n",
            "upstream.response_timeout_secs",
        ),
        (
            "[daemon.timers]\nreconnect_cap_ms = 9223372036854775807\n",
            "daemon.timers.reconnect_cap_ms",
        ),
        (
            "[daemon]\nactivation_wait_ms = 31536000001\n",
            "daemon.activation_wait_ms",
        ),
    ] {
        let err = load(text).unwrap_err().to_string();
        assert!(err.contains(key) && err.contains("a year"), "{text}: {err}");
    }
    let year = load("[daemon]\nkeepalive_idle_secs = 31536000\n[daemon.timers]\nreconnect_cap_ms = 31536000000\n").unwrap();
    assert_eq!(year.daemon.keepalive_idle_secs.get(), MAX_DURATION);
}

#[test]
fn clients_skip_daemon_tables_and_warn_about_other_unknown_keys() {
    let dir = tempfile::tempdir().unwrap();
    let system = file(
        &dir,
        "config.toml",
        "[daemon]\nfuture_key = 1\n[daemon.timers]\nnew_timer = 2\n[logging]\nlevel = \"debug\"\ncolour = true\n",
    );
    let (config, ignored) = Config::load_client(&sources(None, Some(system.clone()))).unwrap();
    assert_eq!(config.logging.level, "debug");
    assert_eq!(
        ignored,
        vec![IgnoredKey {
            path: system,
            key: "logging.colour".into()
        }]
    );
}

#[test]
fn defaults_print_and_parse_back() {
    let text = Config::defaults_toml();
    assert!(text.contains("max_request_body_bytes = 33554432"), "{text}");
    assert!(text.contains("[daemon.timers]"), "{text}");
    assert!(text.contains("max_connections_per_ip = 256"), "{text}");
    let parsed: Config = toml::from_str(&text).unwrap();
    assert_eq!(parsed, Config::default());
}

#[test]
fn url_errors_never_quote_a_password_or_a_query() {
    for (text, kept) in [
        (
            "http://relay:s3cret-pass@proxy.internal:3128",
            "\"http://…@proxy.internal:3128\"",
        ),
        (
            "https://collector/in?key=s3cret-pass",
            "\"https://collector/in?…\"",
        ),
        ("ftp://user:s3cret-pass@host/", "\"ftp://…@host/\""),
        // A password may hold the characters that end an authority.
        (
            "http://relay:s3cret/pa?ss#@proxy:3128",
            "\"http://…@proxy:3128\"",
        ),
        ("http:/relay:s3cret-pass@proxy", "\"…@proxy\""),
        // No URL holds a blank: what follows one is not shown.
        ("notaurl s3cret-pass", "\"notaurl…\""),
    ] {
        let error = BaseUrl::parse(text).unwrap_err();
        assert!(!error.contains("s3cret"), "{error}");
        assert!(error.contains(kept), "{error}");
    }
}

/// An error in the file names its file, line and key, never the text on the line: a
/// credential pasted into the wrong file must not reach a terminal or a log from here.
#[test]
fn config_errors_never_quote_the_file() {
    let dir = tempfile::tempdir().unwrap();
    for (text, expected) in [
        (
            "[daemon]\nport = 47632\nheader = \"Bearer sk-s3cret-pass\n",
            "line 3",
        ),
        (
            "[daemon]\nallowed_origins = [\"https://u:s3cret-pass@example.com/x\"]\n",
            "\"https://…@example.com/x\"",
        ),
    ] {
        let system = file(&dir, "config.toml", text);
        let err = Config::load_daemon(&sources(None, Some(system))).unwrap_err();
        let err = err.to_string();
        assert!(!err.contains("s3cret"), "{err}");
        assert!(err.contains(expected), "{err}");
    }
}

/// A value of the wrong type is not repeated in the error either.
#[test]
fn type_errors_never_quote_the_value() {
    let dir = tempfile::tempdir().unwrap();
    for text in [
        "[daemon]\nport = \"sk-s3cret-pass\"\n",
        "[upstream]\ndaemon_keys = \"sk-s3cret-pass\"\n",
    ] {
        let system = file(&dir, "config.toml", text);
        let err = Config::load_daemon(&sources(None, Some(system)))
            .unwrap_err()
            .to_string();
        assert!(!err.contains("s3cret"), "{err}");
        assert!(err.contains("config.toml"), "{err}");
    }
}

#[test]
fn quoted_values_are_elided() {
    assert_eq!(
        elide_quoted("invalid type: string \"sk-1\", expected `u64` 'x"),
        "invalid type: string \"…\", expected `u64` '…"
    );
    // serde names an enum setting's wrong value in backticks; the expected ones stay.
    assert_eq!(
        elide_quoted("unknown variant `SECRETVALUE`, expected `bound_only` or `any_local`"),
        "unknown variant `…`, expected `bound_only` or `any_local`"
    );
}

#[test]
fn base_urls_are_normalized() {
    let url = BaseUrl::parse("HTTPS://API.Example.COM:8443/v1/").unwrap();
    assert_eq!(url.as_str(), "https://api.example.com:8443/v1");
    assert_eq!(url.path(), "/v1");
    assert_eq!(BaseUrl::parse("http://127.0.0.1:9").unwrap().path(), "");
    assert!(BaseUrl::parse("https://user:pw@example.com").is_err());
    assert!(BaseUrl::parse("https://example.com/?q=1").is_err());
    assert!(BaseUrl::parse("example.com").is_err());
}

#[test]
fn timers_go_on_the_wire_in_milliseconds() {
    let timers = TimersConfig {
        drain_secs: Secs(Duration::from_millis(1500)),
        ..TimersConfig::default()
    };
    let wire = timers.to_wire();
    assert_eq!(wire.drain_ms, 1500);
    assert_eq!(wire.reconnect_first_ms, 250);
    assert_eq!(
        TimersConfig::default().to_wire(),
        relay_proto::Timers::default()
    );
}

/// `max_connections_per_ip` is not in SPEC §8; its default is written in the front's docs,
/// and this keeps the two in step.
#[test]
fn the_documented_per_address_connection_cap_is_the_default() {
    let docs = include_str!("../../../../docs/daemon-front.md");
    let written = format!(
        "`[daemon] max_connections_per_ip` (default {})",
        DaemonConfig::default().max_connections_per_ip
    );
    assert!(
        docs.contains(&written),
        "docs/daemon-front.md lacks {written}"
    );
}
