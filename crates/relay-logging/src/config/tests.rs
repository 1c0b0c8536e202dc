use super::*;

fn resolve(
    file: (Option<&str>, Option<&str>),
    env: (Option<&str>, Option<&str>),
    flag: (Option<&str>, Option<&str>),
) -> Result<LogConfig, LogConfigError> {
    LogConfig::resolve(
        file.0,
        file.1,
        env.0,
        env.1,
        flag.0,
        flag.1,
        LogConfig::daemon_default(),
    )
}

fn config(level: &str, format: LogFormat) -> LogConfig {
    LogConfig {
        level: level.to_owned(),
        format,
    }
}

#[test]
fn defaults_apply_when_nothing_is_given() {
    let resolved = resolve((None, None), (None, None), (None, None)).unwrap();
    assert_eq!(resolved, config("info", LogFormat::Jsonl));
    let client = LogConfig::resolve(
        None,
        None,
        None,
        None,
        None,
        None,
        LogConfig::client_default(),
    );
    assert_eq!(client.unwrap(), config("warn", LogFormat::Human));
}

#[test]
fn file_overrides_defaults() {
    let resolved = resolve((Some("debug"), Some("human")), (None, None), (None, None)).unwrap();
    assert_eq!(resolved, config("debug", LogFormat::Human));
}

#[test]
fn env_overrides_file() {
    let resolved = resolve(
        (Some("debug"), Some("human")),
        (Some("relay=trace,hyper=warn"), Some("jsonl")),
        (None, None),
    )
    .unwrap();
    assert_eq!(resolved, config("relay=trace,hyper=warn", LogFormat::Jsonl));
}

#[test]
fn flags_override_env() {
    let resolved = resolve(
        (Some("debug"), Some("jsonl")),
        (Some("trace"), Some("jsonl")),
        (Some("error"), Some("human")),
    )
    .unwrap();
    assert_eq!(resolved, config("error", LogFormat::Human));
}

#[test]
fn level_and_format_resolve_independently() {
    let resolved = resolve((None, Some("human")), (Some("warn"), None), (None, None)).unwrap();
    assert_eq!(resolved, config("warn", LogFormat::Human));
}

#[test]
fn blank_env_values_count_as_unset() {
    let resolved = resolve(
        (Some("debug"), Some("human")),
        (Some(""), Some("  ")),
        (None, None),
    )
    .unwrap();
    assert_eq!(resolved, config("debug", LogFormat::Human));
}

#[test]
fn values_are_trimmed_and_levels_are_case_insensitive() {
    let resolved = resolve(
        (None, None),
        (Some(" WARN "), Some(" human\n")),
        (None, None),
    )
    .unwrap();
    assert_eq!(resolved, config("WARN", LogFormat::Human));
}

#[test]
fn invalid_format_names_its_source() {
    let cases = [
        (
            resolve((None, Some("json")), (None, None), (None, None)),
            LogOrigin::File,
            "config file",
        ),
        (
            resolve((None, None), (None, Some("pretty")), (None, None)),
            LogOrigin::Env,
            "RELAY_LOG_FORMAT",
        ),
        (
            resolve((None, None), (None, None), (None, Some("JSONL"))),
            LogOrigin::Flag,
            "--log-format",
        ),
    ];
    for (result, expected_origin, named) in cases {
        let error = result.unwrap_err();
        match &error {
            LogConfigError::InvalidFormat { origin, .. } => assert_eq!(*origin, expected_origin),
            other => panic!("expected InvalidFormat, got {other:?}"),
        }
        let message = error.to_string();
        assert!(message.contains(named), "{message:?} should name {named}");
        assert!(message.contains("\"human\" or \"jsonl\""), "{message}");
    }
}

#[test]
fn invalid_filter_names_its_source() {
    let cases = [
        (
            resolve((Some("relay=verbose"), None), (None, None), (None, None)),
            LogOrigin::File,
            "config file",
        ),
        (
            resolve((None, None), (Some("verbose"), None), (None, None)),
            LogOrigin::Env,
            "RELAY_LOG",
        ),
        (
            resolve((None, None), (None, None), (Some("info,,debug"), None)),
            LogOrigin::Flag,
            "--log-level",
        ),
    ];
    for (result, expected_origin, named) in cases {
        let error = result.unwrap_err();
        match &error {
            LogConfigError::InvalidLevel { origin, .. } => assert_eq!(*origin, expected_origin),
            other => panic!("expected InvalidLevel, got {other:?}"),
        }
        let message = error.to_string();
        assert!(message.contains(named), "{message:?} should name {named}");
    }
}

#[test]
fn a_bare_word_must_be_a_level() {
    let error = resolve((None, None), (Some("relay_proxy"), None), (None, None)).unwrap_err();
    assert!(error.to_string().contains("is not a level"), "{error}");
    for level in ["off", "error", "warn", "info", "debug", "trace", "Info"] {
        assert!(
            resolve((None, None), (Some(level), None), (None, None)).is_ok(),
            "{level}"
        );
    }
    assert!(
        resolve(
            (None, None),
            (Some("relay_proxy=trace"), None),
            (None, None)
        )
        .is_ok()
    );
}

#[test]
fn an_empty_level_from_a_file_or_flag_is_an_error() {
    let error = resolve((Some(""), None), (None, None), (None, None)).unwrap_err();
    assert!(matches!(
        error,
        LogConfigError::InvalidLevel {
            origin: LogOrigin::File,
            ..
        }
    ));
    let error = resolve((None, None), (None, None), (None, Some(""))).unwrap_err();
    assert!(matches!(
        error,
        LogConfigError::InvalidFormat {
            origin: LogOrigin::Flag,
            ..
        }
    ));
}

#[test]
fn an_overridden_invalid_value_is_still_reported() {
    let error = resolve((Some("loud"), None), (None, None), (Some("info"), None)).unwrap_err();
    assert!(matches!(
        error,
        LogConfigError::InvalidLevel {
            origin: LogOrigin::File,
            ..
        }
    ));
}

#[test]
fn an_invalid_default_is_reported_as_the_default() {
    let defaults = config("chatty", LogFormat::Jsonl);
    let error =
        LogConfig::resolve(None, None, None, None, Some("info"), None, defaults).unwrap_err();
    assert!(matches!(
        error,
        LogConfigError::InvalidLevel {
            origin: LogOrigin::Default,
            ..
        }
    ));
}

#[test]
fn format_names_round_trip() {
    for format in [LogFormat::Human, LogFormat::Jsonl] {
        assert_eq!(LogFormat::from_name(format.as_str()), Some(format));
        assert_eq!(format.to_string(), format.as_str());
    }
    assert_eq!(LogFormat::from_name("json"), None);
}

#[test]
fn env_variable_names_are_the_spec_names() {
    assert_eq!(ENV_LOG, "RELAY_LOG");
    assert_eq!(ENV_LOG_FORMAT, "RELAY_LOG_FORMAT");
}

#[test]
fn trace_never_reaches_the_websocket_frame_logs() {
    use tracing_subscriber::layer::SubscriberExt as _;
    let config = LogConfig {
        level: "trace".into(),
        format: LogFormat::Jsonl,
    };
    let filter = config.filter().unwrap();
    let subscriber = tracing_subscriber::registry().with(filter);
    tracing::subscriber::with_default(subscriber, || {
        assert!(!tracing::enabled!(target: "tungstenite::protocol", tracing::Level::TRACE));
        assert!(!tracing::enabled!(target: "tokio_tungstenite", tracing::Level::TRACE));
        assert!(tracing::enabled!(target: "relay_proxy::front", tracing::Level::TRACE));
    });
}
