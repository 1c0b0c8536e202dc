use std::collections::BTreeSet;

use super::*;

/// Every `.rs` file below `dir`, tests left out: their variable names are examples (an
/// administrator's `header_env` names), not variables Relay reads.
fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or("");
        if name == "tests" || name == "tests.rs" {
            continue;
        }
        if path.is_dir() {
            rust_files(&path, files)?;
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    Ok(())
}

/// Every `"RELAY_…"` string literal in `text`.
fn relay_literals(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in text.match_indices("\"RELAY_") {
        let rest = &text[at + 1..];
        let end = rest
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(rest.len());
        if rest[end..].starts_with('"') {
            found.insert(rest[..end].to_owned());
        }
    }
    found
}

#[test]
fn the_environment_table_lists_every_relay_variable_the_code_names() -> Result<()> {
    let root = project_root()?;
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files)?;
    rust_files(&root.join("bins"), &mut files)?;
    let mut in_code = BTreeSet::new();
    for file in &files {
        in_code.extend(relay_literals(&fs::read_to_string(file)?));
    }
    assert!(in_code.contains("RELAY_CLIENT_TOKEN"), "{in_code:?}");
    let table: BTreeSet<String> = ENVIRONMENT
        .iter()
        .map(|(name, _, _)| (*name).to_owned())
        .collect();
    let missing: Vec<&String> = in_code.difference(&table).collect();
    assert!(
        missing.is_empty(),
        "add these to ENVIRONMENT in docs.rs: {missing:?}"
    );
    let stale: Vec<&String> = table
        .iter()
        .filter(|name| name.starts_with("RELAY_") && !in_code.contains(*name))
        .collect();
    assert!(stale.is_empty(), "no code reads these any more: {stale:?}");
    Ok(())
}

#[test]
fn the_environment_table_lists_every_name_of_relay_identity() -> Result<()> {
    let env = fs::read_to_string(project_root()?.join("crates/relay-identity/src/env.rs"))?;
    let names: Vec<&str> = env
        .lines()
        .filter_map(|line| line.trim().strip_prefix("pub const "))
        .filter(|rest| rest.contains(": &str = \""))
        .filter_map(|rest| rest.split('"').nth(1))
        .collect();
    assert!(names.len() > 10, "{names:?}");
    for name in names {
        assert!(
            ENVIRONMENT.iter().any(|(listed, _, _)| *listed == name),
            "{name} is missing from ENVIRONMENT in docs.rs"
        );
    }
    Ok(())
}

#[test]
fn relay_literals_are_found_only_whole() {
    let text = r#"const A: &str = "RELAY_LOG"; let b = "RELAY_LOG_FORMAT"; "RELAY_x" "NOT_RELAY_Y" RELAY_Z"#;
    let found: Vec<String> = relay_literals(text).into_iter().collect();
    assert_eq!(found, ["RELAY_LOG", "RELAY_LOG_FORMAT"]);
}

/// The `"/…"` literals of `PathClass::classify` in routes.rs.
fn classified_paths(routes: &str) -> Result<BTreeSet<String>> {
    let body = routes
        .split_once("pub fn classify(")
        .map(|(_, rest)| rest)
        .context("routes.rs has no `pub fn classify(`")?;
    // The function ends at the first line that closes an `impl` at column 0 or 4.
    let end = body
        .find("\n    }\n}")
        .context("cannot find the end of classify")?;
    let body = &body[..end];
    let mut paths = BTreeSet::new();
    for (at, _) in body.match_indices("\"/") {
        let rest = &body[at + 1..];
        if let Some(end) = rest.find('"') {
            paths.insert(rest[..end].to_owned());
        }
    }
    Ok(paths)
}

#[test]
fn the_endpoint_table_is_the_routes_table() -> Result<()> {
    let routes = fs::read_to_string(project_root()?.join("crates/relay-proxy/src/routes.rs"))?;
    let in_code = classified_paths(&routes)?;
    assert!(in_code.contains("/healthz"), "{in_code:?}");
    let table: BTreeSet<String> = ENDPOINTS
        .iter()
        .flat_map(|endpoint| endpoint.literals.iter().map(|lit| (*lit).to_owned()))
        .collect();
    assert_eq!(
        table, in_code,
        "ENDPOINTS in docs.rs differs from PathClass::classify"
    );
    Ok(())
}

#[test]
fn the_admin_endpoints_are_the_ones_the_admin_socket_routes() -> Result<()> {
    let protocol =
        fs::read_to_string(project_root()?.join("crates/relay-proxy/src/admin/protocol.rs"))?;
    let body = protocol
        .split_once("fn admin_route(")
        .map(|(_, rest)| rest)
        .context("protocol.rs has no admin_route")?;
    assert!(
        body.contains("[\"bindings\"] if method == Method::GET"),
        "GET /bindings"
    );
    assert!(
        body.contains("[\"bindings\", fingerprint, action]"),
        "POST /bindings/{{fp}}/{{action}}"
    );
    for action in ["\"revoke\"", "\"block\"", "\"unblock\""] {
        assert!(
            protocol.contains(action),
            "the admin protocol has no {action}"
        );
    }
    Ok(())
}

#[test]
fn every_lifecycle_event_is_read_with_its_level_message_and_fields() -> Result<()> {
    let source = fs::read_to_string(project_root()?.join(LIFECYCLE_SOURCE))?;
    let events = lifecycle_events(&source)?;
    let names = source.matches("{ .. } => \"").count();
    assert_eq!(events.len(), names, "one event per name of Lifecycle::name");
    let listening = events
        .iter()
        .find(|event| event.name == "daemon_listening")
        .context("daemon_listening")?;
    assert_eq!(listening.level, "info");
    assert_eq!(listening.message, "daemon is listening");
    assert!(
        listening.fields.contains(&"address".to_owned()),
        "{listening:?}"
    );
    assert!(
        listening.fields.contains(&"instance_id".to_owned()),
        "{listening:?}"
    );
    for event in &events {
        for level in event.level.split(" or ") {
            assert!(
                ["error", "warn", "info", "debug", "trace"].contains(&level),
                "{event:?}"
            );
        }
        assert!(!event.message.is_empty(), "{event:?}");
    }
    Ok(())
}

#[test]
fn lifecycle_parsing_takes_inline_and_multi_line_arms() -> Result<()> {
    let source = r#"
    pub fn name(&self) -> &'static str {
        match self {
            Lifecycle::A { .. } => "a_happened",
            Lifecycle::B { .. } => "b_happened",
        }
    }
    pub fn emit(&self) {
        match *self {
            Lifecycle::B { x } => match x {
                0 => lifecycle_event!(WARN, name, "b"; x = %x,),
                _ => {
                    lifecycle_event!(ERROR, name, "b";
                        x = %x,
                        w,
                    )
                }
            },
            Lifecycle::A {
                y,
                z,
            } => lifecycle_event!(INFO, name, "a";
                y,
                z = z
                    .as_str(),
            ),
        }
    }
    "#;
    let events = lifecycle_events(source)?;
    let expected = [
        Event {
            name: "a_happened".into(),
            level: "info".into(),
            message: "a".into(),
            fields: vec!["y".into(), "z".into()],
        },
        Event {
            name: "b_happened".into(),
            level: "warn or error".into(),
            message: "b".into(),
            fields: vec!["x".into(), "w".into()],
        },
    ];
    assert_eq!(events, expected);
    assert!(lifecycle_events("no emit here").is_err());
    Ok(())
}

#[test]
fn subcommands_are_the_command_names_without_help() {
    let help = "About\n\nUsage: relayd [OPTIONS] [COMMAND]\n\nCommands:\n  bindings  Persisted\n  config    Configuration\n            that wraps\n  help      Print this\n\nOptions:\n  -h, --help  Print help\n";
    assert_eq!(subcommands(help), ["bindings", "config"]);
    assert!(subcommands("Usage: relay-mcp\n\nOptions:\n  -h\n").is_empty());
}

#[test]
fn config_keys_carry_their_section() {
    let defaults = "[upstream]\nopenai_base_url = \"https://api.openai.com/v1\"\n\n[daemon.timers]\ndrain_secs = 120\n";
    assert_eq!(
        config_keys(defaults),
        [
            (
                "upstream.openai_base_url".to_owned(),
                "\"https://api.openai.com/v1\"".to_owned()
            ),
            ("daemon.timers.drain_secs".to_owned(), "120".to_owned()),
        ]
    );
}

#[test]
fn the_reference_says_it_is_generated_and_lists_every_part() {
    let helps = [Help {
        command: "relayd".into(),
        text: "Usage: relayd\n".into(),
    }];
    let config = [("daemon.timers.drain_secs".to_owned(), "120".to_owned())];
    let events = [Event {
        name: "daemon_listening".into(),
        level: "info".into(),
        message: "daemon is listening".into(),
        fields: vec!["address".into()],
    }];
    let out = render(&helps, &config, &events);
    let head: String = out.lines().take(4).collect::<Vec<_>>().join("\n");
    assert!(head.contains("generated by `cargo xtask docs`"), "{head}");
    assert!(head.contains("cargo xtask docs --check"), "{head}");
    for part in [
        "### `relayd`",
        "| `RELAY_CLIENT_TOKEN` |",
        "| `daemon.timers.drain_secs` | `120` |",
        "| GET | `/healthz` |",
        "| `daemon_listening` | info | daemon is listening | `address` |",
    ] {
        assert!(out.contains(part), "{part} missing from:\n{out}");
    }
}

/// The checked-in reference is current for the parts that need no binary.
#[test]
fn the_checked_in_reference_lists_every_event_and_endpoint() -> Result<()> {
    let root = project_root()?;
    let reference = fs::read_to_string(root.join(REFERENCE))?;
    let events = lifecycle_events(&fs::read_to_string(root.join(LIFECYCLE_SOURCE))?)?;
    for event in events {
        assert!(
            reference.contains(&format!("| `{}` |", event.name)),
            "{REFERENCE} lacks {}: run `cargo xtask docs`",
            event.name
        );
    }
    for (name, _, _) in ENVIRONMENT {
        assert!(
            reference.contains(&format!("| `{name}` |")),
            "{REFERENCE} lacks {name}"
        );
    }
    Ok(())
}

#[test]
fn the_provider_failure_events_are_the_names_rate_limit_declares() -> Result<()> {
    let source = fs::read_to_string(project_root()?.join(PROVIDER_FAILURE_SOURCE))?;
    let events = provider_failure_events(&source)?;
    let names: Vec<&str> = events.iter().map(|event| event.name.as_str()).collect();
    let declared = source
        .split_once("pub const NAMES")
        .and_then(|(_, rest)| rest.split_once("];"))
        .map(|(names, _)| names)
        .context("rate_limit.rs has no ProviderFailure::NAMES")?;
    let declared: Vec<&str> = declared.split('"').skip(1).step_by(2).collect();
    assert_eq!(names, declared);
    for event in &events {
        assert_eq!(event.level, "warn", "{event:?}");
        assert!(!event.message.is_empty(), "{event:?}");
        assert!(event.fields.contains(&"reason".to_owned()), "{event:?}");
        assert!(!event.fields.contains(&"target".to_owned()), "{event:?}");
    }
    assert_eq!(
        snake_case("WorkerCommunicationFailed"),
        "worker_communication_failed"
    );
    Ok(())
}
