use std::path::PathBuf;

use super::*;

/// A system and a user file in a temporary directory; `None` leaves a file absent.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new(system: Option<&str>, user: Option<&str>) -> Files {
        let dir = tempfile::tempdir().unwrap();
        if let Some(text) = system {
            std::fs::write(dir.path().join("system.toml"), text).unwrap();
        }
        if let Some(text) = user {
            std::fs::write(dir.path().join("user.toml"), text).unwrap();
        }
        Files { dir }
    }

    fn system(&self) -> PathBuf {
        self.dir.path().join("system.toml")
    }

    fn user(&self) -> PathBuf {
        self.dir.path().join("user.toml")
    }

    fn load(&self) -> Result<Plugins, PluginConfigError> {
        Plugins::load(&self.system(), Some(&self.user()))
    }
}

fn load(system: &str) -> Result<Plugins, PluginConfigError> {
    Files::new(Some(system), None).load()
}

const ALLOW_USER: &str = "version = 1\n[settings]\nallow_user_components = true\n";

#[test]
fn a_missing_system_file_is_no_components() {
    let files = Files::new(
        None,
        Some("version = 1\n[[components]]\nkind = \"policy\"\n"),
    );
    let plugins = files.load().unwrap();
    assert!(plugins.components().is_empty());
    assert!(!plugins.allows_user_components());
    assert_eq!(plugins, Plugins::default());
}

#[test]
fn a_minimal_file_is_valid() {
    let plugins = load("version = 1\n").unwrap();
    assert!(plugins.components().is_empty());
    assert!(!plugins.allows_user_components());
}

#[test]
fn version_1_is_required() {
    let error = load("[settings]\nallow_user_components = false\n").unwrap_err();
    assert!(
        matches!(&error, PluginConfigError::Missing { field, .. } if field.key == "version"),
        "{error}"
    );
    let error = load("version = 2\n").unwrap_err();
    assert!(
        matches!(
            error,
            PluginConfigError::UnsupportedVersion { found: 2, .. }
        ),
        "{error}"
    );
    let error = load("version = \"1\"\n").unwrap_err();
    assert!(
        matches!(&error, PluginConfigError::WrongType { field, .. } if field.key == "version"),
        "{error}"
    );
    // The user file needs it too.
    let files = Files::new(Some(ALLOW_USER), Some(""));
    let error = files.load().unwrap_err();
    assert_eq!(error.path(), files.user());
    assert!(
        matches!(error, PluginConfigError::Missing { .. }),
        "{error}"
    );
}

#[test]
fn unknown_keys_are_errors_everywhere() {
    for (text, component, key) in [
        ("version = 1\nplugins = []\n", None, "plugins"),
        (
            "version = 1\n[settings]\nallow_user_component = true\n",
            None,
            "settings.allow_user_component",
        ),
        (
            "version = 1\n[[components]]\nkind = \"policy\"\nenabled = false\n[[components]]\nkind = \"policy\"\nenable = false\n",
            Some(2),
            "enable",
        ),
    ] {
        let error = load(text).unwrap_err();
        let PluginConfigError::UnknownKey { path, field } = &error else {
            panic!("{text}: {error}");
        };
        assert!(path.ends_with("system.toml"));
        assert_eq!(field.component, component, "{error}");
        assert_eq!(field.key, key, "{error}");
    }
    // In the user file as well.
    let files = Files::new(Some(ALLOW_USER), Some("version = 1\nextra = 1\n"));
    let error = files.load().unwrap_err();
    assert!(
        matches!(error, PluginConfigError::UnknownKey { .. }),
        "{error}"
    );
    assert_eq!(error.path(), files.user());
}

#[test]
fn settings_belong_to_the_system_file_only() {
    let files = Files::new(
        Some(ALLOW_USER),
        Some("version = 1\n[settings]\nallow_user_components = true\n"),
    );
    let error = files.load().unwrap_err();
    assert!(
        matches!(error, PluginConfigError::SettingsInUserFile { .. }),
        "{error}"
    );
    assert_eq!(error.path(), files.user());
    let error = load("version = 1\n[settings]\nallow_user_components = \"yes\"\n").unwrap_err();
    assert!(
        matches!(error, PluginConfigError::WrongType { .. }),
        "{error}"
    );
    let error = load("version = 1\nsettings = 3\n").unwrap_err();
    assert!(
        matches!(error, PluginConfigError::WrongType { .. }),
        "{error}"
    );
}

#[test]
fn the_user_file_is_read_only_when_the_system_file_allows_it() {
    // Not allowed (absent or false): the user file is not even parsed.
    for system in [
        "version = 1\n",
        "version = 1\n[settings]\nallow_user_components = false\n",
    ] {
        let files = Files::new(Some(system), Some("this is not toml ["));
        let plugins = files.load().unwrap();
        assert!(plugins.components().is_empty());
        assert!(!plugins.allows_user_components());
    }
    // Allowed: it is read, strictly.
    let files = Files::new(Some(ALLOW_USER), Some("this is not toml ["));
    let error = files.load().unwrap_err();
    assert!(matches!(error, PluginConfigError::Syntax { .. }), "{error}");
    assert_eq!(error.path(), files.user());
    // Allowed, and its components count.
    let files = Files::new(
        Some(ALLOW_USER),
        Some("version = 1\n[[components]]\nkind = \"observability\"\nenabled = false\n"),
    );
    let plugins = files.load().unwrap();
    assert!(plugins.allows_user_components());
    assert_eq!(plugins.components().len(), 1);
    assert_eq!(plugins.components()[0].source, PluginFile::User);
    assert_eq!(plugins.components()[0].file, files.user());
    // Allowed but absent, or no user file given: fine.
    let files = Files::new(Some(ALLOW_USER), None);
    assert!(files.load().unwrap().components().is_empty());
    assert!(
        Plugins::load(&files.system(), None)
            .unwrap()
            .components()
            .is_empty()
    );
}

#[test]
fn system_components_win_over_user_components_of_the_same_kind() {
    let system = format!(
        "{ALLOW_USER}[[components]]\nkind = \"policy\"\nenabled = false\n[components.config]\nowner = \"system\"\n"
    );
    let user = "version = 1\n\
        [[components]]\nkind = \"policy\"\nenabled = true\n\
        [[components]]\nkind = \"observability\"\nenabled = false\n[components.config]\nowner = \"user\"\n";
    let files = Files::new(Some(&system), Some(user));
    let plugins = files.load().unwrap();
    let kinds: Vec<_> = plugins
        .components()
        .iter()
        .map(|c| (c.kind, c.source, c.index))
        .collect();
    assert_eq!(
        kinds,
        [
            (ComponentKind::Policy, PluginFile::System, 1),
            (ComponentKind::Observability, PluginFile::User, 2),
        ]
    );
    assert_eq!(
        plugins.components()[0].config["owner"].as_str(),
        Some("system")
    );
    assert_eq!(
        plugins.components()[1].config["owner"].as_str(),
        Some("user")
    );
    // The shadowed user policy was enabled, but it is not effective, so it is no error.
    assert_eq!(plugins.enabled().count(), 0);
}

#[test]
fn components_are_parsed_with_their_defaults() {
    let plugins = load(
        "version = 1\n\
         [[components]]\nkind = \"observability\"\nenabled = false\n\
         [[components]]\nkind = \"pii_redaction\"\nenabled = false\n[components.config]\nredact_requests = true\n[components.config.detectors]\nemail = true\n",
    )
    .unwrap();
    let [first, second] = plugins.components() else {
        panic!("{plugins:?}");
    };
    assert_eq!(first.kind, ComponentKind::Observability);
    assert!(!first.enabled);
    assert!(first.config.is_empty());
    assert_eq!(first.index, 1);
    assert_eq!(second.kind, ComponentKind::PiiRedaction);
    assert_eq!(second.index, 2);
    assert_eq!(second.config["redact_requests"].as_bool(), Some(true));
    assert!(second.config["detectors"].is_table());
}

#[test]
fn component_fields_are_type_checked() {
    for (text, key) in [
        ("version = 1\n[[components]]\nenabled = false\n", "kind"),
        (
            "version = 1\n[[components]]\nkind = 3\nenabled = false\n",
            "kind",
        ),
        (
            "version = 1\n[[components]]\nkind = \"policy\"\nenabled = \"no\"\n",
            "enabled",
        ),
        (
            "version = 1\n[[components]]\nkind = \"policy\"\nenabled = false\nconfig = 1\n",
            "config",
        ),
    ] {
        let error = load(text).unwrap_err();
        let field = match &error {
            PluginConfigError::Missing { field, .. }
            | PluginConfigError::WrongType { field, .. } => field,
            other => panic!("{text}: {other}"),
        };
        assert_eq!(field.component, Some(1), "{error}");
        assert_eq!(field.key, key, "{error}");
    }
    let error = load("version = 1\ncomponents = [1]\n").unwrap_err();
    assert!(
        matches!(error, PluginConfigError::WrongType { .. }),
        "{error}"
    );
    let error = load("version = 1\n[components]\nkind = \"policy\"\n").unwrap_err();
    assert!(
        matches!(error, PluginConfigError::WrongType { .. }),
        "{error}"
    );
}

#[test]
fn an_unknown_kind_is_an_error_naming_the_component() {
    let error = load(
        "version = 1\n[[components]]\nkind = \"policy\"\nenabled = false\n[[components]]\nkind = \"telemetry\"\nenabled = false\n",
    )
    .unwrap_err();
    let PluginConfigError::UnknownKind { field, kind, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(field.component, Some(2));
    assert_eq!(kind, "telemetry");
    assert!(error.to_string().contains("component 2, `kind`"), "{error}");
}

/// One enabled component of each kind (relay-plugins' own tests load the file and
/// every documented example; this one checks the worker's reading of the file).
const EVERY_KIND: &str = "version = 1\n[[components]]\nkind = \"observability\"\n[components.config]\ncapture_content = true\n[[components]]\nkind = \"policy\"\n[[components.config.rules]]\nevent = \"PreToolUse\"\ntool = \"Bash\"\naction = \"deny\"\nreason = \"no shell\"\n[[components]]\nkind = \"pii_redaction\"\n";

#[test]
fn enabled_components_load_and_are_effective() {
    let plugins = load(EVERY_KIND).unwrap();
    let kinds: Vec<&str> = plugins.enabled().map(|c| c.kind.as_str()).collect();
    assert_eq!(kinds, ["observability", "policy", "pii_redaction"]);
    let config = plugins.config();
    assert!(config.observability().unwrap().capture_content);
    assert_eq!(config.policy().unwrap().rules.len(), 1);
    assert!(!config.redaction().unwrap().redact_requests);
    // An enabled, effective user component too.
    let files = Files::new(
        Some(ALLOW_USER),
        Some("version = 1\n[[components]]\nkind = \"observability\"\n"),
    );
    let plugins = files.load().unwrap();
    assert_eq!(plugins.enabled().count(), 1);
}

#[test]
fn syntax_errors_name_the_line_but_never_quote_the_file() {
    let text = "version = 1\n[[components]]\nkind = \"observability\"\nenabled = false\n[components.config]\nheaders = { authorization = \"Bearer sk-secret-value\" \n";
    let error = load(text).unwrap_err();
    let PluginConfigError::Syntax { line, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(*line, 6, "{error}");
    assert!(!error.to_string().contains("sk-secret-value"), "{error}");
}

#[test]
fn an_unreadable_file_is_an_error() {
    let files = Files::new(None, None);
    std::fs::create_dir(files.system()).unwrap();
    let error = files.load().unwrap_err();
    assert!(matches!(error, PluginConfigError::Read { .. }), "{error}");
}

#[test]
fn the_activation_failure_carries_the_diagnostic() {
    let error = load("version = 1\n[[components]]\nkind = \"policy\"\n[components.config]\nmode = \"sometimes\"\n").unwrap_err();
    let message = error.to_activation_failed();
    assert_eq!(message.failure_reason.as_str(), "plugin_config_invalid");
    assert_eq!(message.diagnostic.as_str(), error.to_string());
    assert!(message.diagnostic.as_str().contains("system.toml"));
    // A very long path is cut to the protocol's limit.
    let long = PluginConfigError::SettingsInUserFile {
        path: PathBuf::from("/".to_owned() + &"d".repeat(5000)),
    };
    assert_eq!(
        long.to_activation_failed().diagnostic.as_str().len(),
        relay_proto::MAX_TEXT_BYTES
    );
}

#[test]
fn a_file_larger_than_the_limit_is_refused_unread() {
    let padding = format!("# {}\n", "x".repeat(MAX_PLUGIN_FILE_BYTES as usize));
    let files = Files::new(Some(&format!("version = 1\n{padding}")), None);
    let error = files.load().unwrap_err();
    assert!(
        matches!(error, PluginConfigError::TooLarge { .. }),
        "{error}"
    );
    assert_eq!(error.path(), files.system());
}

#[test]
fn an_invalid_enabled_component_names_its_field() {
    // An invalid one names its field first.
    let error = load(
        "version = 1\n[[components]]\nkind = \"policy\"\n[components.config]\nmode = \"sometimes\"\n",
    )
    .unwrap_err();
    assert!(
        error.to_string().contains("component 1, `config.mode`"),
        "{error}"
    );
}

/// The policy file is read as `config.toml` is: one every user could change, or a FIFO in
/// its place, is refused rather than read (or waited on).
#[test]
fn a_plugins_file_others_could_change_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let files = Files::new(Some("version = 1\n"), None);
    std::fs::set_permissions(files.system(), std::fs::Permissions::from_mode(0o666)).unwrap();
    let error = files.load().unwrap_err().to_string();
    assert!(error.contains("writable by every user"), "{error}");
    std::fs::remove_file(files.system()).unwrap();
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        files.system(),
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    let error = files.load().unwrap_err().to_string();
    assert!(error.contains("not a regular file"), "{error}");
}
