use std::os::unix::fs::PermissionsExt as _;

use relay_identity::{MapEnv, Origin, SigningKey, format_pin};

use super::*;
use crate::report::Status;
use crate::wiring::tests::{DAEMON, bin_dir, bundle_hooks};

const TOKEN: &str = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("xdg")).unwrap();
        fs::create_dir_all(dir.path().join("system")).unwrap();
        Fixture { dir }
    }

    fn env(&self) -> MapEnv {
        MapEnv::new()
            .with(names::XDG_CONFIG_HOME, self.dir.path().join("xdg"))
            .with(
                names::RELAY_SYSTEM_CONFIG_DIR,
                self.dir.path().join("system"),
            )
    }

    fn relay(&self) -> PathBuf {
        self.dir.path().join("xdg/relay")
    }

    fn system(&self) -> PathBuf {
        self.dir.path().join("system")
    }

    fn write(&self, path: &Path, text: &str, mode: u32) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    fn private_dir(&self, path: &Path, mode: u32) {
        fs::create_dir_all(path).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }
}

fn euid() -> u32 {
    store::current_euid()
}

fn token(value: &str) -> RouteToken {
    RouteToken::parse(value).unwrap()
}

#[test]
fn state_dir_is_judged_by_existence_owner_and_mode() {
    let f = Fixture::new();
    let env = f.env();
    assert_eq!(state_dir(&Inputs::new(&env, euid())).status, Status::Warn);
    let dir = f.relay().join("daemon");
    f.private_dir(&dir, 0o755);
    let open = state_dir(&Inputs::new(&env, euid()));
    assert_eq!(open.status, Status::Fail);
    assert!(open.next_step.unwrap().contains("chmod 700"));
    f.private_dir(&dir, 0o700);
    assert_eq!(state_dir(&Inputs::new(&env, euid())).status, Status::Ok);
    let other = state_dir(&Inputs::new(&env, euid() + 1));
    assert_eq!(other.status, Status::Fail);
    assert!(other.summary.contains("not by this user"));
}

#[test]
fn the_machine_key_is_judged_as_relay_mcp_reads_it() {
    let f = Fixture::new();
    let env = f.env();
    let check = || machine_identity(&Inputs::new(&env, euid()));
    assert_eq!(check().status, Status::Skip);
    assert_eq!(check().details["present"], false);
    let file = f.relay().join("daemon/machine-identity.pk8");
    let (key, _) = SigningKey::load_or_create(&file).unwrap();
    let usable = check();
    assert_eq!(usable.status, Status::Ok);
    assert_eq!(usable.details["fingerprint"], key.fingerprint().to_string());
    // relay-mcp refuses a key others can read, and so does the doctor.
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    let open = check();
    assert_eq!(open.status, Status::Fail);
    assert!(open.summary.contains("chmod 600"), "{}", open.summary);
    fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(&file, b"not a key").unwrap();
    assert_eq!(check().status, Status::Fail);
}

#[test]
fn no_base_directory_fails_the_state_and_token_checks() {
    let env = MapEnv::new();
    let inputs = Inputs::new(&env, euid());
    assert_eq!(state_dir(&inputs).status, Status::Fail);
    assert_eq!(resolve_token(&inputs).check.status, Status::Fail);
}

#[test]
fn a_valid_env_token_wins_and_its_source_is_reported() {
    let f = Fixture::new();
    let env = f.env().with(names::RELAY_CLIENT_TOKEN, TOKEN);
    let resolved = resolve_token(&Inputs::new(&env, euid()));
    assert_eq!(resolved.check.status, Status::Ok);
    assert_eq!(resolved.check.details["source"], "env");
    assert!(!resolved.check.summary.contains(TOKEN));
}

#[test]
fn an_invalid_env_token_without_a_file_fails_with_its_reason_code() {
    let f = Fixture::new();
    let env = f.env().with(names::RELAY_CLIENT_TOKEN, "not-a-token");
    let resolved = resolve_token(&Inputs::new(&env, euid()));
    assert_eq!(resolved.check.status, Status::Fail);
    assert_eq!(resolved.check.details["skipped"][0]["source"], "env");
    assert_eq!(
        resolved.check.details["skipped"][0]["reason"],
        "invalid_contents"
    );
    assert!(!resolved.check.summary.contains("not-a-token"));
}

#[test]
fn an_unsafe_token_file_is_skipped_with_the_reason_code_the_clients_use() {
    let f = Fixture::new();
    f.private_dir(&f.relay(), 0o700);
    f.write(
        &f.relay().join(".client-token"),
        &format!("{TOKEN}\n"),
        0o644,
    );
    let env = f.env();
    let resolved = resolve_token(&Inputs::new(&env, euid()));
    assert_eq!(resolved.check.status, Status::Fail);
    assert_eq!(
        resolved.check.details["skipped"][0]["reason"],
        "insecure_permissions"
    );
    assert!(resolved.check.next_step.unwrap().contains(".client-token"));

    fs::set_permissions(
        f.relay().join(".client-token"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let resolved = resolve_token(&Inputs::new(&env, euid()));
    assert_eq!(resolved.check.status, Status::Ok);
    assert_eq!(resolved.check.details["source"], "file");
}

#[test]
fn token_header_lines_are_found_case_insensitively() {
    let headers = format!("X-Other: a\nX-Relay-Client-Token:  {TOKEN} \n\nbad line");
    assert_eq!(token_headers(&headers), vec![TOKEN]);
    assert!(token_headers("").is_empty());
}

fn with_token(source: CredentialSource) -> TokenCheck {
    TokenCheck {
        token: Some((token(TOKEN), source)),
        check: Check::ok("token", "t"),
    }
}

#[test]
fn custom_headers_must_carry_exactly_the_resolved_token() {
    let only_file = custom_headers(&MapEnv::new(), &with_token(CredentialSource::File));
    assert_eq!(only_file.status, Status::Warn);
    assert!(
        only_file
            .summary
            .contains("the token file alone covers MCP and hooks, not model traffic")
    );

    let same = MapEnv::new().with(
        names::ANTHROPIC_CUSTOM_HEADERS,
        format!("x-relay-client-token: {TOKEN}"),
    );
    let ok = custom_headers(&same, &with_token(CredentialSource::Env));
    assert_eq!(ok.status, Status::Ok);
    assert_eq!(ok.details["matches"], true);

    let other = "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let differs = MapEnv::new().with(
        names::ANTHROPIC_CUSTOM_HEADERS,
        format!("x-relay-client-token: {other}"),
    );
    let fail = custom_headers(&differs, &with_token(CredentialSource::Env));
    assert_eq!(fail.status, Status::Fail);
    assert!(!fail.summary.contains(other) && !fail.summary.contains(TOKEN));

    let twice = MapEnv::new().with(
        names::ANTHROPIC_CUSTOM_HEADERS,
        format!("x-relay-client-token: {TOKEN}\nx-relay-client-token: {TOKEN}"),
    );
    let fail = custom_headers(&twice, &with_token(CredentialSource::Env));
    assert_eq!(fail.status, Status::Fail);
    assert_eq!(fail.details["token_headers"], 2);
}

#[test]
fn pins_are_listed_by_origin_and_a_bad_pin_file_fails() {
    let f = Fixture::new();
    let env = f.env();
    let inputs = Inputs::new(&env, euid());
    assert_eq!(trust_pins(&inputs).status, Status::Ok);

    let origin = Origin::parse("http://127.0.0.1:47632").unwrap();
    let key = SigningKey::generate().unwrap().public_key();
    let pins = f.relay().join("daemon/pins");
    let store = PinStore::new(&pins, None);
    f.write(&store.pin_file(&origin), &format_pin(&origin, &key), 0o600);
    let listed = trust_pins(&inputs);
    assert_eq!(listed.status, Status::Ok);
    assert_eq!(listed.details["origins"][0], "http://127.0.0.1:47632");

    f.write(&pins.join("0123"), &format_pin(&origin, &key), 0o600);
    let misnamed = trust_pins(&inputs);
    assert_eq!(misnamed.status, Status::Fail);
    assert!(misnamed.summary.contains("under another name"));
    fs::remove_file(pins.join("0123")).unwrap();

    f.write(&store.pin_file(&origin), "origin nonsense\n", 0o600);
    let corrupt = trust_pins(&inputs);
    assert_eq!(corrupt.status, Status::Fail);
    assert!(corrupt.next_step.unwrap().contains("remove"));
}

#[test]
fn a_provisioned_daemon_key_is_reported_with_its_origin() {
    let f = Fixture::new();
    let env = f.env();
    let inputs = Inputs::new(&env, euid());
    let absent = provisioned_key(&inputs);
    assert_eq!(absent.status, Status::Ok);
    assert_eq!(absent.details["present"], false);

    let origin = Origin::parse("https://relay.example.com:8443").unwrap();
    let key = SigningKey::generate().unwrap().public_key();
    f.write(
        &f.system().join("daemon-identity.pub"),
        &format_pin(&origin, &key),
        0o644,
    );
    let present = provisioned_key(&inputs);
    assert_eq!(present.status, Status::Ok);
    assert_eq!(present.details["origin"], "https://relay.example.com:8443");

    f.write(&f.system().join("daemon-identity.pub"), "garbage", 0o644);
    assert_eq!(provisioned_key(&inputs).status, Status::Fail);
}

#[test]
fn config_errors_fail_without_quoting_values_and_unknown_keys_warn() {
    let f = Fixture::new();
    let env = f.env();
    let inputs = Inputs::new(&env, euid());
    assert_eq!(config(&inputs).status, Status::Ok);

    f.write(
        &f.system().join("config.toml"),
        "[upstream]\nmystery_key = 1\n",
        0o644,
    );
    let unknown = config(&inputs);
    assert_eq!(unknown.status, Status::Warn, "{unknown:?}");
    assert_eq!(
        unknown.details["ignored_keys"][0]["key"],
        "upstream.mystery_key"
    );
    // relayd reads the file too, and refuses what the clients only warn about.
    assert!(
        unknown.summary.contains("relayd refuses it"),
        "{}",
        unknown.summary
    );
    assert!(unknown.details["daemon_refuses"].is_string(), "{unknown:?}");

    // A `[daemon]` value the clients skip still stops relayd; its value is not shown.
    let secret = "zzz-not-a-number";
    f.write(
        &f.system().join("config.toml"),
        &format!("[daemon]\nmax_connections = \"{secret}\"\n"),
        0o644,
    );
    let daemon = config(&inputs);
    assert_eq!(daemon.status, Status::Warn, "{daemon:?}");
    assert_eq!(daemon.details["ignored_keys"], json!([]));
    assert!(
        daemon.summary.contains("max_connections"),
        "{}",
        daemon.summary
    );
    assert!(!format!("{daemon:?}").contains(secret), "{daemon:?}");

    let secret = "hunter2-proxy-password";
    f.write(
        &f.system().join("config.toml"),
        &format!("[upstream]\nproxy_url = \"http://u:{secret}@proxy:3128\" x\n"),
        0o644,
    );
    let syntax = config(&inputs);
    assert_eq!(syntax.status, Status::Fail);
    assert!(syntax.summary.contains("line 2"), "{}", syntax.summary);
    assert!(!syntax.summary.contains(secret), "{}", syntax.summary);

    f.write(
        &f.system().join("config.toml"),
        &format!("[upstream]\nconnect_timeout_secs = \"{secret}\"\n"),
        0o644,
    );
    let typed = config(&inputs);
    assert_eq!(typed.status, Status::Fail);
    assert!(!typed.summary.contains(secret), "{}", typed.summary);
}

#[test]
fn plugins_are_validated_and_the_effective_components_listed() {
    let f = Fixture::new();
    let env = f.env();
    let inputs = Inputs::new(&env, euid());
    let none = plugins(&inputs);
    assert_eq!(none.status, Status::Ok);
    assert_eq!(none.details["enabled"], json!([]));

    f.write(
        &f.system().join("plugins.toml"),
        "version = 1\n[[components]]\nkind = \"policy\"\nenabled = false\n",
        0o644,
    );
    let disabled = plugins(&inputs);
    assert_eq!(disabled.status, Status::Ok, "{disabled:?}");
    assert_eq!(disabled.details["components"], 1);
    assert_eq!(disabled.details["enabled"], json!([]));

    f.write(
        &f.system().join("plugins.toml"),
        "version = 1\n[[components]]\nkind = \"policy\"\nsurprise = 1\n",
        0o644,
    );
    let invalid = plugins(&inputs);
    assert_eq!(invalid.status, Status::Fail);
    assert!(
        invalid.summary.contains("plugins.toml"),
        "{}",
        invalid.summary
    );
    assert!(invalid.summary.contains("surprise"), "{}", invalid.summary);
    // The values a field would take are shown; only the file's own text is elided.
    f.write(
        &f.system().join("plugins.toml"),
        "version = 1\n[[components]]\nkind = \"policy\"\n[[components.config.rules]]\nevent = \"PreToolUse\"\naction = \"block\"\n",
        0o644,
    );
    let wrong = plugins(&inputs);
    assert!(
        wrong.summary.contains(r#"must be "deny" or "allow""#),
        "{}",
        wrong.summary
    );
    f.write(
        &f.system().join("plugins.toml"),
        "version = 1\n[[components]]\nkind = \"sk-secret-kind\"\n",
        0o644,
    );
    let unknown = plugins(&inputs);
    assert!(
        !unknown.summary.contains("sk-secret-kind"),
        "{}",
        unknown.summary
    );
    // A file the worker may not trust is not a field to correct: the next step says so.
    f.write(&f.system().join("plugins.toml"), "version = 1\n", 0o666);
    let untrusted = plugins(&inputs);
    assert_eq!(untrusted.status, Status::Fail);
    assert!(
        untrusted.summary.contains("writable by every user"),
        "{}",
        untrusted.summary
    );
    assert!(
        untrusted
            .next_step
            .as_deref()
            .is_some_and(|n| n.starts_with("fix what the message names")),
        "{untrusted:?}"
    );

    // The issue's configuration is valid, and every component listed, once its sink
    // directory is safe; a directory anyone may write to without the sticky bit is named.
    let sinks = f.dir.path().join("atof");
    std::fs::create_dir(&sinks).unwrap();
    let config = format!(
        "version = 1\n[[components]]\nkind = \"observability\"\n[components.config]\ncapture_content = true\n[[components.config.sinks]]\ntype = \"file\"\ndirectory = \"{}\"\nfilename = \"events-{{user}}.jsonl\"\n[[components]]\nkind = \"policy\"\n[[components.config.rules]]\nevent = \"PreToolUse\"\ntool = \"Bash\"\ninput_field = \"command\"\nregex = \"rm -rf\"\naction = \"deny\"\nreason = \"destructive command\"\n[[components]]\nkind = \"pii_redaction\"\n[components.config]\ndetectors = [\"email\", \"api_key\"]\naction = \"redact\"\n",
        sinks.display()
    );
    f.write(&f.system().join("plugins.toml"), &config, 0o644);
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&sinks, std::fs::Permissions::from_mode(0o700)).unwrap();
    let valid = plugins(&inputs);
    assert_eq!(valid.status, Status::Ok, "{valid:?}");
    assert!(
        valid.summary.contains(
            "observability (system file), policy (system file), pii_redaction (system file)"
        ),
        "{}",
        valid.summary
    );
    std::fs::set_permissions(&sinks, std::fs::Permissions::from_mode(0o777)).unwrap();
    let unsafe_dir = plugins(&inputs);
    assert_eq!(unsafe_dir.status, Status::Fail);
    assert!(
        unsafe_dir
            .summary
            .contains("component 1, `config.sinks[1].directory`"),
        "{}",
        unsafe_dir.summary
    );
    assert!(
        unsafe_dir.summary.contains("sticky"),
        "{}",
        unsafe_dir.summary
    );
}

/// The worker refuses an existing record file that others may read, or that is not a plain
/// file; the doctor names it in the worker's words, by the name the worker gives it (for
/// this user, and for the machine key's fingerprint once there is one).
#[test]
fn a_record_file_the_worker_would_refuse_fails_the_plugins_check() {
    let f = Fixture::new();
    let env = f.env();
    let inputs = Inputs::new(&env, euid());
    let sinks = f.dir.path().join("atof");
    f.private_dir(&sinks, 0o700);
    let configure = |filename: &str| {
        f.write(
            &f.system().join("plugins.toml"),
            &format!(
                "version = 1\n[[components]]\nkind = \"observability\"\n[[components.config.sinks]]\ntype = \"file\"\ndirectory = \"{}\"\nfilename = \"{filename}\"\n",
                sinks.display()
            ),
            0o644,
        );
    };
    configure("e-{user}.jsonl");
    let record = sinks.join(format!("e-{}.jsonl", sink_user_name(|_| None)));
    assert_eq!(plugins(&inputs).status, Status::Ok);
    // Checking created nothing.
    assert!(!record.exists());

    f.write(&record, "", 0o644);
    let shared = plugins(&inputs);
    assert_eq!(shared.status, Status::Fail, "{shared:?}");
    assert!(
        shared.summary.contains(&format!(
            "component 1, `config.sinks[1].filename`: the record file {} is readable or writable by group or others",
            record.display()
        )),
        "{}",
        shared.summary
    );
    assert!(
        shared
            .next_step
            .as_deref()
            .is_some_and(|n| n.contains("chmod 600")),
        "{shared:?}"
    );
    fs::set_permissions(&record, fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(plugins(&inputs).status, Status::Ok);

    // A directory where the record file would be: not a regular file.
    fs::remove_file(&record).unwrap();
    fs::create_dir(&record).unwrap();
    let not_a_file = plugins(&inputs);
    assert_eq!(not_a_file.status, Status::Fail);
    assert!(
        not_a_file.summary.contains("is not a regular file"),
        "{}",
        not_a_file.summary
    );

    // Named for the fingerprint: judged once the machine key exists, by its fingerprint.
    configure("e-{fingerprint}.jsonl");
    assert_eq!(plugins(&inputs).status, Status::Ok);
    let (key, _) =
        SigningKey::load_or_create(&f.relay().join("daemon/machine-identity.pk8")).unwrap();
    let by_fingerprint = sinks.join(format!("e-{}.jsonl", key.fingerprint()));
    f.write(&by_fingerprint, "", 0o640);
    let shared = plugins(&inputs);
    assert_eq!(shared.status, Status::Fail);
    assert!(
        shared
            .summary
            .contains(&by_fingerprint.display().to_string()),
        "{}",
        shared.summary
    );
}

/// A collector's secret named by `header_env` must be in the environment relay-mcp hands
/// the worker: without it the worker cannot start its sinks, refuses to start, and every
/// session passes through, though the file itself is valid.
#[test]
fn a_header_env_variable_this_environment_lacks_fails_the_plugins_check() {
    let f = Fixture::new();
    f.write(
        &f.system().join("plugins.toml"),
        "version = 1\n[[components]]\nkind = \"observability\"\n[[components.config.sinks]]\ntype = \"http\"\nurl = \"https://collector.example/v1/records\"\nheader_env = { authorization = \"RELAY_TEST_COLLECTOR_KEY\" }\n",
        0o644,
    );
    let env = f.env();
    let inputs = Inputs::new(&env, euid());
    // Unset here: relay-mcp's environment may still have it, so a warning.
    let unset = plugins(&inputs);
    assert_eq!(unset.status, Status::Warn, "{unset:?}");
    assert!(
        unset.summary.contains("RELAY_TEST_COLLECTOR_KEY"),
        "{}",
        unset.summary
    );
    assert_eq!(
        unset.details["header_env_unset"],
        json!(["RELAY_TEST_COLLECTOR_KEY"])
    );
    assert!(
        unset
            .next_step
            .as_deref()
            .unwrap_or_default()
            .contains("env_vars"),
        "{unset:?}"
    );

    let secret = "Bearer collector-secret-value";
    let env = f.env().with("RELAY_TEST_COLLECTOR_KEY", secret);
    let inputs = Inputs::new(&env, euid());
    let set = plugins(&inputs);
    assert_eq!(set.status, Status::Ok, "{set:?}");
    assert!(!format!("{set:?}").contains(secret));

    // Set to something no header can carry (a key read from a file with a Windows line
    // end): the worker refuses it, and the value is not shown.
    let env = f
        .env()
        .with("RELAY_TEST_COLLECTOR_KEY", format!("{secret}\r"));
    let inputs = Inputs::new(&env, euid());
    let unusable = plugins(&inputs);
    assert_eq!(unusable.status, Status::Fail, "{unusable:?}");
    assert!(
        unusable
            .summary
            .contains("RELAY_TEST_COLLECTOR_KEY (the authorization header)"),
        "{}",
        unusable.summary
    );
    assert!(!format!("{unusable:?}").contains(secret));
}

fn ca_pem(f: &Fixture, name: &str) -> PathBuf {
    let cert = rcgen::generate_simple_self_signed(vec!["relay.test".to_owned()]).unwrap();
    let path = f.dir.path().join(name);
    f.write(&path, &cert.cert.pem(), 0o644);
    path
}

#[test]
fn ca_variables_must_name_readable_pem_files() {
    let f = Fixture::new();
    assert_eq!(ca_variables(&MapEnv::new())[0].status, Status::Ok);

    let missing = MapEnv::new().with(names::RELAY_EXTRA_CA_FILE, f.dir.path().join("nope.pem"));
    assert_eq!(ca_variables(&missing)[0].status, Status::Fail);

    let junk = f.dir.path().join("junk.pem");
    f.write(&junk, "not a certificate", 0o644);
    let junk_env = MapEnv::new().with("NODE_EXTRA_CA_CERTS", &junk);
    assert_eq!(ca_variables(&junk_env)[0].status, Status::Fail);

    let pem = ca_pem(&f, "ca.pem");
    let relay_only = MapEnv::new().with(names::RELAY_EXTRA_CA_FILE, &pem);
    let warn = &ca_variables(&relay_only)[0];
    assert_eq!(warn.status, Status::Warn, "{warn:?}");
    assert!(warn.summary.contains("NODE_EXTRA_CA_CERTS"));

    let all = relay_only
        .with("NODE_EXTRA_CA_CERTS", &pem)
        .with(names::SSL_CERT_FILE, &pem);
    assert_eq!(ca_variables(&all)[0].status, Status::Ok);
}

#[test]
fn a_proxy_needs_no_proxy_for_loopback() {
    assert_eq!(no_proxy(&MapEnv::new()).status, Status::Ok);
    let proxy = MapEnv::new().with("HTTPS_PROXY", "http://user:pw-secret@proxy:3128");
    let fail = no_proxy(&proxy);
    assert_eq!(fail.status, Status::Fail);
    assert!(!fail.summary.contains("pw-secret"));
    assert_eq!(fail.details["missing"], json!(["127.0.0.1", "localhost"]));
    let partial = proxy.clone().with("no_proxy", "localhost");
    assert_eq!(no_proxy(&partial).details["missing"], json!(["127.0.0.1"]));
    let fixed = proxy.with("NO_PROXY", "example.com, 127.0.0.1,LOCALHOST");
    assert_eq!(no_proxy(&fixed).status, Status::Ok);
}

/// A log variable the clients refuse stops relay-mcp at start: the doctor fails it, without
/// repeating its value.
#[test]
fn log_variables_are_read_as_the_clients_read_them() {
    let unset = log_variables(&MapEnv::new());
    assert_eq!(unset.status, Status::Ok, "{unset:?}");
    let blank = log_variables(&MapEnv::new().with(names::RELAY_LOG, "  "));
    assert_eq!(blank.details["set"], json!([]), "{blank:?}");
    let good = log_variables(&MapEnv::new().with(names::RELAY_LOG, "relay=debug,info"));
    assert_eq!(good.status, Status::Ok, "{good:?}");
    assert_eq!(good.details["set"], json!(["RELAY_LOG"]));
    for env in [
        MapEnv::new().with(names::RELAY_LOG, "bogus-level-xyz"),
        MapEnv::new().with(names::RELAY_LOG_FORMAT, "bogus-format-xyz"),
    ] {
        let bad = log_variables(&env);
        assert_eq!(bad.status, Status::Fail, "{bad:?}");
        assert!(!bad.summary.contains("bogus"), "{bad:?}");
        assert!(bad.next_step.is_some());
    }
}

/// Relay's Codex hooks count where Codex runs them unasked: its system directory. In the
/// user's `CODEX_HOME` alone they wait for the user's review, which is a warning; hooks
/// that are not whole fail, and the MCP server without hooks is a warning.
#[test]
fn codex_hooks_are_judged_by_the_layer_they_are_in() {
    let fixture = Fixture::new();
    let bin = bin_dir();
    let codex_home = fixture.dir.path().join("codex-home");
    let system = fixture.dir.path().join("etc-codex");
    let env = fixture.env().with(names::CODEX_HOME, &codex_home);
    let mut inputs = Inputs::new(&env, euid());
    inputs.codex_system_dir = system.clone();
    // The check fails, and says `why`.
    let fails_with = |why: &str| {
        let check = codex_hooks(&inputs);
        assert_eq!(check.status, Status::Fail, "{check:?}");
        assert!(check.summary.contains(why), "{check:?}");
    };
    let hooks =
        json!({ "hooks": bundle_hooks(bin.path(), "codex", &CODEX_HOOK_EVENTS) }).to_string();

    let none = codex_hooks(&inputs);
    assert_eq!(none.status, Status::Skip, "{none:?}");

    // Another tool's hooks are not Relay's.
    fixture.write(&codex_home.join("hooks.json"), r#"{"hooks":{}}"#, 0o600);
    assert_eq!(codex_hooks(&inputs).status, Status::Skip);

    fixture.write(&codex_home.join("hooks.json"), &hooks, 0o600);
    let user_only = codex_hooks(&inputs);
    assert_eq!(user_only.status, Status::Warn, "{user_only:?}");
    assert!(user_only.next_step.is_some());
    assert_eq!(
        user_only.details["user_files"],
        json!([codex_home.join("hooks.json").display().to_string()])
    );

    fixture.write(&system.join("hooks.json"), &hooks, 0o644);
    let both = codex_hooks(&inputs);
    assert_eq!(both.status, Status::Warn, "{both:?}");
    assert!(both.summary.contains("twice"), "{both:?}");

    fs::remove_file(codex_home.join("hooks.json")).unwrap();
    let system_only = codex_hooks(&inputs);
    assert_eq!(system_only.status, Status::Ok, "{system_only:?}");
    assert_eq!(
        system_only.details["system_files"],
        json!([system.join("hooks.json").display().to_string()])
    );

    // Inline [hooks] in the managed layer count too, together with hooks.json.
    let mut split = bundle_hooks(bin.path(), "codex", &CODEX_HOOK_EVENTS);
    split.as_object_mut().unwrap().remove("Stop");
    fixture.write(
        &system.join("hooks.json"),
        &json!({ "hooks": split }).to_string(),
        0o644,
    );
    fails_with("no Relay hook for Stop");
    fixture.write(
        &system.join("managed_config.toml"),
        &format!(
            "[[hooks.Stop]]\n[[hooks.Stop.hooks]]\ntype = \"command\"\ncommand = \"{} codex --daemon-address {DAEMON}\"\n\n[mcp_servers.relay]\ncommand = \"{}\"\nargs = [\"--daemon-address\", \"{DAEMON}\"]\n",
            bin.path().join("relay-hook").display(),
            bin.path().join("relay-mcp").display(),
        ),
        0o644,
    );
    let whole = codex_hooks(&inputs);
    assert_eq!(whole.status, Status::Ok, "{whole:?}");
    // The model provider pointed at another daemon than the hooks, then at the same one.
    let config = std::fs::read_to_string(system.join("managed_config.toml")).unwrap();
    let provider_at = |base: &str| {
        let text = format!(
            "model_provider = \"relay\"\n{config}\n[model_providers.relay]\nbase_url = \"{base}/v1\"\n"
        );
        fixture.write(&system.join("managed_config.toml"), &text, 0o644);
        codex_hooks(&inputs)
    };
    provider_at("http://127.0.0.1:1");
    fails_with("more than one daemon address");
    assert_eq!(provider_at(DAEMON).status, Status::Ok);
    // The user switches hooks off; the managed layer's pin turns them back on.
    fixture.write(
        &codex_home.join("config.toml"),
        "[features]\nhooks = false\n",
        0o600,
    );
    fails_with("switches Codex's hooks off");
    let managed = std::fs::read_to_string(system.join("managed_config.toml")).unwrap();
    fixture.write(
        &system.join("managed_config.toml"),
        &format!("{managed}\n[features]\nhooks = true\n"),
        0o644,
    );
    let pinned = codex_hooks(&inputs);
    assert_eq!(pinned.status, Status::Ok, "{pinned:?}");
    fs::remove_file(codex_home.join("config.toml")).unwrap();

    // The MCP server without the hooks: Codex is set up, its policy hooks are missing.
    fs::remove_file(system.join("hooks.json")).unwrap();
    fixture.write(
        &system.join("managed_config.toml"),
        &format!(
            "[mcp_servers.relay]\ncommand = \"{}\"\n",
            bin.path().join("relay-mcp").display()
        ),
        0o644,
    );
    let server_only = codex_hooks(&inputs);
    assert_eq!(server_only.status, Status::Warn, "{server_only:?}");
    assert!(
        server_only.summary.contains("no Relay hooks"),
        "{server_only:?}"
    );

    // A file that names Relay but no longer parses: Codex would not run it.
    fixture.write(&system.join("hooks.json"), r#"{"hooks": relay-hook"#, 0o644);
    fails_with("is not valid JSON");
}

/// Claude Code is Relay's for every user when its managed files carry both the hooks and
/// the server; half an install, or the plugin beside it, is a warning; an install that
/// looks whole but is not (a file that does not parse, an event left out, a binary that is
/// not there, another daemon) fails.
#[test]
fn claude_code_is_judged_by_its_managed_files_and_the_users_plugin() {
    let fixture = Fixture::new();
    let bin = bin_dir();
    let config_dir = fixture.dir.path().join("claude-config");
    let system = fixture.dir.path().join("etc-claude-code");
    let env = fixture.env().with(names::CLAUDE_CONFIG_DIR, &config_dir);
    let mut inputs = Inputs::new(&env, euid());
    inputs.claude_system_dir = system.clone();
    let hooks = bundle_hooks(bin.path(), "claude", &CLAUDE_HOOK_EVENTS);
    let settings = json!({ "env": { "ANTHROPIC_BASE_URL": DAEMON }, "hooks": hooks }).to_string();
    let servers = json!({ "mcpServers": { "relay": {
        "type": "stdio",
        "command": bin.path().join("relay-mcp"),
        "args": ["--daemon-address", DAEMON],
    } } })
    .to_string();

    let none = claude_code(&inputs);
    assert_eq!(none.status, Status::Skip, "{none:?}");

    fixture.write(&system.join("managed-settings.json"), &settings, 0o644);
    let hooks_only = claude_code(&inputs);
    assert_eq!(hooks_only.status, Status::Warn, "{hooks_only:?}");
    assert!(hooks_only.summary.contains("no worker"), "{hooks_only:?}");

    fixture.write(&system.join("managed-mcp.json"), &servers, 0o644);
    let both = claude_code(&inputs);
    assert_eq!(both.status, Status::Ok, "{both:?}");
    assert_eq!(both.details["hooks"], true);
    assert_eq!(both.details["mcp_server"], true);

    let broken = |settings: &serde_json::Value, what: &str| {
        fixture.write(
            &system.join("managed-settings.json"),
            &settings.to_string(),
            0o644,
        );
        let check = claude_code(&inputs);
        assert_eq!(check.status, Status::Fail, "{what}: {check:?}");
        assert!(check.next_step.is_some(), "{what}");
        check.details["problems"].to_string()
    };
    let mut no_prompt = hooks.clone();
    no_prompt
        .as_object_mut()
        .unwrap()
        .remove("UserPromptSubmit");
    let problems = broken(
        &json!({ "env": { "ANTHROPIC_BASE_URL": DAEMON }, "hooks": no_prompt }),
        "an event left out",
    );
    assert!(
        problems.contains("no Relay hook for UserPromptSubmit"),
        "{problems}"
    );
    let problems = broken(&json!({ "hooks": hooks }), "no base URL");
    assert!(problems.contains("ANTHROPIC_BASE_URL"), "{problems}");
    let other_port =
        json!({ "env": { "ANTHROPIC_BASE_URL": "http://127.0.0.1:1" }, "hooks": hooks });
    let problems = broken(&other_port, "another daemon");
    assert!(
        problems.contains("more than one daemon address"),
        "{problems}"
    );
    fixture.write(
        &system.join("managed-settings.json"),
        r#"{"hooks": relay-hook"#,
        0o644,
    );
    assert_eq!(
        claude_code(&inputs).status,
        Status::Fail,
        "a file that does not parse"
    );
    fixture.write(&system.join("managed-settings.json"), &settings, 0o644);
    fs::remove_file(bin.path().join("relay-mcp")).unwrap();
    let gone = claude_code(&inputs);
    assert_eq!(gone.status, Status::Fail, "{gone:?}");
    assert!(
        gone.summary.contains("relay-mcp does not exist"),
        "{gone:?}"
    );
    bin_dir_again(bin.path());

    fixture.write(
        &config_dir.join("plugins").join("installed_plugins.json"),
        r#"{"version":2,"plugins":{"relay@relay":[{"scope":"user"}]}}"#,
        0o600,
    );
    let twice = claude_code(&inputs);
    assert_eq!(twice.status, Status::Warn, "{twice:?}");
    assert!(twice.summary.contains("twice"), "{twice:?}");

    fs::remove_file(system.join("managed-settings.json")).unwrap();
    let server_only = claude_code(&inputs);
    assert_eq!(server_only.status, Status::Warn, "{server_only:?}");
    assert!(server_only.next_step.is_some());
}

/// Puts an executable `relay-mcp` back in `dir`.
fn bin_dir_again(dir: &Path) {
    let path = dir.join("relay-mcp");
    fs::write(&path, "#!/bin/sh\n").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// Relay's pi extension is found where pi loads it from (its settings' `extensions` list or
/// its extensions directory, read as pi reads them), by the bundle's first line, and judged
/// by what it would run.
#[test]
fn pi_is_judged_by_the_extension_it_loads() {
    use relay_identity::bundle::{PI_EXTENSION_MARKER, PiExtensionSettings};
    let fixture = Fixture::new();
    let bin = bin_dir();
    let home = fixture.dir.path().join("home");
    let pi_dir = home.join(".pi/agent");
    let env = fixture.env().with(names::HOME, &home);
    let extension = |relay_mcp: &Path| {
        let settings = PiExtensionSettings {
            daemon_address: DAEMON.to_owned(),
            relay_hook: bin.path().join("relay-hook").display().to_string(),
            relay_mcp: relay_mcp.display().to_string(),
        };
        format!(
            "{PI_EXTENSION_MARKER}\nconst BUNDLE: {{ daemonAddress: string }} =\n  {};\n",
            settings.to_literal()
        )
    };
    let deployed_dir = home.join("relay/pi/extension-v1");
    let deployed = deployed_dir.join("index.ts");
    let settings = pi_dir.join("settings.json");
    let list = |entries: &[&str]| {
        fixture.write(
            &settings,
            &json!({ "extensions": entries }).to_string(),
            0o644,
        );
        pi::pi(&env)
    };

    let none = pi::pi(&env);
    assert_eq!(none.status, Status::Skip, "{none:?}");
    // Another extension is not Relay's.
    fixture.write(
        &pi_dir.join("extensions/other.ts"),
        "export default () => {};\n",
        0o644,
    );
    assert_eq!(pi::pi(&env).status, Status::Skip);

    fixture.write(&deployed, &extension(&bin.path().join("relay-mcp")), 0o644);
    // A file by its path, `~`, or its directory, as pi reads each (spaces trimmed).
    for entry in [
        deployed.display().to_string(),
        "~/relay/pi/extension-v1/index.ts".to_owned(),
        deployed_dir.display().to_string(),
        " ~relay/pi/extension-v1 ".to_owned(),
    ] {
        let ok = list(&[&entry]);
        assert_eq!(ok.status, Status::Ok, "{entry}: {ok:?}");
        assert_eq!(ok.details["daemon_address"], DAEMON);
    }

    // A directory whose package.json names its extensions is read for those alone.
    let manifest = deployed_dir.join("package.json");
    fixture.write(&manifest, r#"{"pi":{"extensions":["./other.ts"]}}"#, 0o644);
    fixture.write(
        &deployed_dir.join("other.ts"),
        "export default () => {};\n",
        0o644,
    );
    let named = list(&[&deployed_dir.display().to_string()]);
    assert_eq!(named.status, Status::Skip, "{named:?}");
    fixture.write(&manifest, r#"{"pi":{"extensions":["./index.ts"]}}"#, 0o644);
    assert_eq!(
        list(&[&deployed_dir.display().to_string()]).status,
        Status::Ok
    );
    fs::remove_file(&manifest).unwrap();

    // Also in the extensions directory: loaded twice; listed and found there, once; taken
    // out with `!`, not at all.
    let copy = pi_dir.join("extensions/relay/index.ts");
    fixture.write(&copy, &extension(&bin.path().join("relay-mcp")), 0o644);
    let twice = list(&[&deployed.display().to_string()]);
    assert_eq!(twice.status, Status::Warn, "{twice:?}");
    assert!(twice.summary.contains("2 times"), "{}", twice.summary);
    assert_eq!(list(&["extensions/relay"]).status, Status::Ok);
    assert_eq!(list(&["!extensions/relay/index.ts"]).status, Status::Skip);
    // The list's patterns, as pi applies them: a glob keeps the listed files it matches
    // (by relative path, name or whole path; `*` stops at `/`), `!` takes out, `+` puts
    // back, `-` takes out whatever else says.
    let deployed_entry = deployed.display().to_string();
    let only = |entries: &[&str]| {
        let check = list(entries);
        let loaded = check.details["extensions"].as_array().cloned();
        (check.status, loaded.map(|l| l.len()).unwrap_or(0))
    };
    assert_eq!(only(&[&deployed_entry, "*.ts"]), (Status::Warn, 2));
    assert_eq!(
        only(&[&deployed_entry, "extensions/*/other.ts"]),
        (Status::Ok, 1),
        "the listed file is left out; the directory's copy is not filtered by a glob"
    );
    assert_eq!(only(&["!**/relay/**"]), (Status::Skip, 0));
    assert_eq!(only(&["!extensions/*"]), (Status::Ok, 1));
    assert_eq!(
        only(&["!**/relay/**", "+extensions/relay/index.ts"]),
        (Status::Ok, 1)
    );
    assert_eq!(
        only(&["+extensions/relay/index.ts", "-extensions/relay/index.ts"]),
        (Status::Skip, 0)
    );
    assert_eq!(
        only(&[&deployed_entry, &format!("-{deployed_entry}"), "!index.ts"]),
        (Status::Skip, 0)
    );
    fs::remove_file(&copy).unwrap();

    // A binary it runs is gone.
    fixture.write(
        &deployed,
        &extension(&bin.path().join("gone/relay-mcp")),
        0o644,
    );
    let missing = list(&[&deployed.display().to_string()]);
    assert_eq!(missing.status, Status::Fail, "{missing:?}");
    assert!(
        missing.summary.contains("does not exist"),
        "{}",
        missing.summary
    );

    // Edited past reading, listed but gone, or a settings file that no longer parses.
    fixture.write(&deployed, PI_EXTENSION_MARKER, 0o644);
    assert_eq!(pi::pi(&env).status, Status::Fail);
    fs::remove_file(&deployed).unwrap();
    let gone = pi::pi(&env);
    assert_eq!(gone.status, Status::Fail, "{gone:?}");
    assert!(gone.summary.contains("not there"), "{}", gone.summary);
    let listed = json!({ "extensions": [deployed] }).to_string();
    fixture.write(&settings, &format!("{listed},"), 0o644);
    let unparsed = pi::pi(&env);
    assert_eq!(unparsed.status, Status::Fail, "{unparsed:?}");
    assert!(
        unparsed.summary.contains("not valid JSON"),
        "{}",
        unparsed.summary
    );
}
