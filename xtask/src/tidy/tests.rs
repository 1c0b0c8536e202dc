use serde_json::json;

use super::*;

/// Builds graphs by crate name (names double as ids).
#[derive(Default)]
struct Graph {
    workspace: Workspace,
}

impl Graph {
    fn member(mut self, name: &str, kind: CrateKind) -> Graph {
        self.workspace.packages.insert(
            name.to_owned(),
            Package {
                name: name.to_owned(),
                deps: Vec::new(),
                member: Some(Member {
                    kind,
                    publish_false: true,
                    workspace_lints: true,
                    manifest: PathBuf::from(format!("/w/{name}/Cargo.toml")),
                }),
            },
        );
        self
    }

    fn external(mut self, name: &str) -> Graph {
        self.workspace.packages.insert(
            name.to_owned(),
            Package {
                name: name.to_owned(),
                deps: Vec::new(),
                member: None,
            },
        );
        self
    }

    fn dep(mut self, from: &str, to: &str, kind: DepKind) -> Graph {
        if !self.workspace.packages.contains_key(to) {
            self = self.external(to);
        }
        self.workspace
            .packages
            .get_mut(from)
            .unwrap()
            .deps
            .push((to.to_owned(), kind));
        self
    }

    fn normal(self, from: &str, to: &str) -> Graph {
        self.dep(from, to, DepKind::Normal)
    }

    fn edit_member(mut self, name: &str, edit: impl FnOnce(&mut Member)) -> Graph {
        let package = self.workspace.packages.get_mut(name).unwrap();
        edit(package.member.as_mut().unwrap());
        self
    }

    fn check(&self) -> Vec<Violation> {
        check(&self.workspace)
    }
}

/// The layout of SPEC §11 with the dependencies the crates really have.
fn good() -> Graph {
    use CrateKind::{Binary, Library};
    let mut graph = Graph::default();
    for library in [
        "relay-proto",
        "relay-identity",
        "relay-broker",
        "relay-proxy",
        "relay-logging",
        "relay-plugins",
        "relay-sinks",
        "relay-testkit",
        "relay-e2e",
    ] {
        graph = graph.member(library, Library);
    }
    for binary in [
        "relayd",
        "relay-mcp",
        "relay-worker",
        "relay-hook",
        "relay-doctor",
        "xtask",
    ] {
        graph = graph.member(binary, Binary);
    }
    graph = graph
        .normal("relay-proto", "serde")
        .normal("relay-proto", "uuid")
        .normal("uuid", "getrandom")
        .normal("getrandom", "libc")
        .dep("relay-proto", "proptest", DepKind::Dev)
        .normal("relay-identity", "ring")
        .normal("relay-identity", "rustix")
        .normal("relay-broker", "relay-proto")
        .normal("relay-logging", "tracing")
        .normal("relay-logging", "relay-proto")
        .normal("relay-plugins", "relay-proto")
        .normal("relay-plugins", "ring")
        .normal("relay-sinks", "relay-plugins")
        .normal("relay-sinks", "tokio")
        .normal("relay-sinks", "opentelemetry")
        .normal("relay-worker", "relay-sinks")
        .normal("relay-proxy", "relay-proto")
        .normal("relay-proxy", "relay-identity")
        .normal("relay-proxy", "relay-broker")
        .normal("relay-proxy", "relay-logging")
        .normal("relay-proxy", "tokio")
        .normal("relay-proxy", "hyper")
        .normal("relay-proxy", "rustls")
        .normal("rustls", "ring")
        .normal("tokio", "mio")
        .normal("relay-testkit", "tokio")
        .dep("relay-broker", "relay-testkit", DepKind::Dev)
        .dep("relay-proxy", "relay-testkit", DepKind::Dev)
        .normal("relay-e2e", "relay-testkit")
        .normal("xtask", "serde_json");
    for binary in [
        "relayd",
        "relay-mcp",
        "relay-worker",
        "relay-hook",
        "relay-doctor",
    ] {
        graph = graph
            .normal(binary, "relay-proxy")
            .normal(binary, "relay-logging");
    }
    graph
}

fn messages(violations: &[Violation]) -> Vec<String> {
    violations.iter().map(ToString::to_string).collect()
}

#[test]
fn the_good_layout_passes() {
    assert_eq!(messages(&good().check()), Vec::<String>::new());
}

#[test]
fn proto_reaching_tokio_transitively_is_reported_with_its_path() {
    let violations = good().normal("uuid", "tokio").check();
    assert_eq!(
        violations,
        [
            Violation::Forbidden {
                krate: "relay-proto".to_owned(),
                dependency: "tokio".to_owned(),
                path: vec!["relay-proto".into(), "uuid".into(), "tokio".into()],
                reason: LAYER_RULES[0].reason,
            },
            Violation::Forbidden {
                krate: "relay-broker".to_owned(),
                dependency: "tokio".to_owned(),
                path: vec![
                    "relay-broker".into(),
                    "relay-proto".into(),
                    "uuid".into(),
                    "tokio".into()
                ],
                reason: LAYER_RULES[1].reason,
            },
            Violation::Forbidden {
                krate: "relay-plugins".to_owned(),
                dependency: "tokio".to_owned(),
                path: vec![
                    "relay-plugins".into(),
                    "relay-proto".into(),
                    "uuid".into(),
                    "tokio".into()
                ],
                reason: LAYER_RULES[4].reason,
            },
        ]
    );
    let message = violations[0].to_string();
    assert!(
        message.starts_with("relay-proto must not depend on tokio"),
        "{message}"
    );
    assert!(
        message.ends_with("path: relay-proto -> uuid -> tokio"),
        "{message}"
    );
}

#[test]
fn every_io_crate_is_forbidden_to_proto_and_broker() {
    for forbidden in [
        "ring",
        "rustls",
        "hyper",
        "hyper-util",
        "tokio-tungstenite",
        "socket2",
        "mio",
    ] {
        for krate in ["relay-proto", "relay-broker"] {
            let violations = good().normal(krate, forbidden).check();
            assert!(
                violations.iter().any(|violation| matches!(
                    violation,
                    Violation::Forbidden { krate: k, dependency, .. } if k == krate && dependency == forbidden
                )),
                "{krate} -> {forbidden}: {:?}",
                messages(&violations)
            );
        }
    }
}

#[test]
fn dev_dependencies_do_not_count_for_the_layer_rules() {
    let violations = good()
        .dep("relay-proto", "tokio", DepKind::Dev)
        .dep("relay-broker", "relay-identity", DepKind::Dev)
        .check();
    assert_eq!(messages(&violations), Vec::<String>::new());
}

#[test]
fn broker_may_depend_on_proto_only() {
    let violations = good().normal("relay-broker", "relay-logging").check();
    assert_eq!(
        messages(&violations),
        [
            "relay-broker may depend on relay-proto among workspace crates, but reaches relay-logging; path: relay-broker -> relay-logging"
        ]
    );
}

#[test]
fn proto_identity_logging_and_plugins_reach_only_their_allowed_crates() {
    for (krate, internal) in [
        ("relay-proto", "relay-logging"),
        ("relay-identity", "relay-proto"),
        ("relay-logging", "relay-identity"),
        ("relay-plugins", "relay-broker"),
    ] {
        let violations = good().normal(krate, internal).check();
        assert!(
            violations.iter().any(|violation| matches!(
                violation,
                Violation::InternalNotAllowed { krate: k, dependency, .. } if k == krate && dependency == internal
            )),
            "{krate} -> {internal}: {:?}",
            messages(&violations)
        );
    }
}

#[test]
fn identity_must_not_reach_tokio_or_hyper() {
    let violations = good()
        .normal("relay-identity", "some-http-client")
        .normal("some-http-client", "hyper")
        .check();
    assert_eq!(
        messages(&violations),
        [
            "relay-identity must not depend on hyper (SPEC §11: keys and tokens, no async runtime, no network); path: relay-identity -> some-http-client -> hyper"
        ]
    );
    let violations = good().normal("relay-identity", "tokio").check();
    assert_eq!(violations.len(), 1, "{:?}", messages(&violations));
}

#[test]
fn nothing_depends_on_a_binary() {
    let violations = good()
        .normal("relay-proxy", "relayd")
        .dep("relay-mcp", "relay-worker", DepKind::Build)
        .check();
    let violations: Vec<Violation> = violations
        .into_iter()
        .filter(|violation| matches!(violation, Violation::DependsOnBinary { .. }))
        .collect();
    assert_eq!(
        violations,
        [
            Violation::DependsOnBinary {
                krate: "relay-mcp".to_owned(),
                binary: "relay-worker".to_owned(),
                kind: DepKind::Build,
            },
            Violation::DependsOnBinary {
                krate: "relay-proxy".to_owned(),
                binary: "relayd".to_owned(),
                kind: DepKind::Normal,
            },
        ]
    );
}

#[test]
fn aws_lc_and_openssl_are_banned_even_as_dev_dependencies() {
    let violations = good()
        .normal("rustls", "aws-lc-rs")
        .normal("aws-lc-rs", "aws-lc-sys")
        .dep("relay-e2e", "native-tls", DepKind::Dev)
        .normal("native-tls", "openssl-sys")
        .check();
    let messages = messages(&violations);
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert!(messages.contains(
        &"aws-lc-rs is banned from the dependency graph (rustls with ring only); path: relay-proxy -> rustls -> aws-lc-rs".to_owned()
    ), "{messages:?}");
    assert!(messages.contains(
        &"aws-lc-sys is banned from the dependency graph (rustls with ring only); path: relay-proxy -> rustls -> aws-lc-rs -> aws-lc-sys".to_owned()
    ), "{messages:?}");
    assert!(messages.contains(
        &"openssl-sys is banned from the dependency graph (rustls with ring only); path: relay-e2e -> native-tls -> openssl-sys".to_owned()
    ), "{messages:?}");
}

#[test]
fn every_member_is_unpublished_and_uses_the_workspace_lints() {
    let violations = good()
        .edit_member("relay-hook", |member| member.publish_false = false)
        .edit_member("relay-testkit", |member| member.workspace_lints = false)
        .check();
    assert_eq!(
        messages(&violations),
        [
            "relay-hook is publishable: set `publish.workspace = true` (the workspace says false) in /w/relay-hook/Cargo.toml",
            "relay-testkit does not use the workspace lints: add `[lints]` with `workspace = true` to /w/relay-testkit/Cargo.toml",
        ]
    );
}

#[test]
fn a_rule_for_a_crate_that_is_gone_is_reported() {
    let mut graph = good();
    graph.workspace.packages.remove("relay-logging");
    for package in graph.workspace.packages.values_mut() {
        package.deps.retain(|(id, _)| id != "relay-logging");
    }
    assert_eq!(
        graph.check(),
        [Violation::RuleForMissingCrate {
            krate: "relay-logging"
        }]
    );
}

#[test]
fn workspace_lints_are_read_from_the_manifest_text() {
    let yes = [
        "[package]\nname = \"a\"\n\n[lints]\nworkspace = true\n",
        "[lints]\n  workspace=true   # shared\n",
        "lints.workspace = true\n[package]\nname = \"a\"\n",
        "lints = { workspace = true }\n",
    ];
    for manifest in yes {
        assert!(has_workspace_lints(manifest), "{manifest:?}");
    }
    let no = [
        "[package]\nname = \"a\"\n",
        "[package]\nworkspace = true\n",
        "[lints]\n# workspace = true\n",
        "[lints]\nworkspace = false\n",
        "[lints.rust]\nworkspace = true\n",
        "[dependencies]\nlints.workspace = true\n",
    ];
    for manifest in no {
        assert!(!has_workspace_lints(manifest), "{manifest:?}");
    }
}

#[test]
fn metadata_is_read_into_the_graph() {
    let metadata = json!({
        "workspace_members": ["path+file:///w/a#0.1.0", "path+file:///w/b#0.1.0"],
        "packages": [
            {
                "id": "path+file:///w/a#0.1.0", "name": "a", "publish": [],
                "manifest_path": "/w/a/Cargo.toml",
                "targets": [{"kind": ["lib"]}, {"kind": ["test"]}]
            },
            {
                "id": "path+file:///w/b#0.1.0", "name": "b", "publish": null,
                "manifest_path": "/w/b/Cargo.toml",
                "targets": [{"kind": ["bin"]}]
            },
            {
                "id": "registry+https://github.com/rust-lang/crates.io-index#c@1.0.0", "name": "c",
                "publish": null, "manifest_path": "/registry/c/Cargo.toml",
                "targets": [{"kind": ["lib"]}]
            }
        ],
        "resolve": {
            "nodes": [
                {
                    "id": "path+file:///w/a#0.1.0",
                    "deps": [{
                        "pkg": "registry+https://github.com/rust-lang/crates.io-index#c@1.0.0",
                        "dep_kinds": [{"kind": null, "target": null}, {"kind": "dev", "target": null}]
                    }]
                },
                {
                    "id": "path+file:///w/b#0.1.0",
                    "deps": [{
                        "pkg": "path+file:///w/a#0.1.0",
                        "dep_kinds": [{"kind": "build", "target": null}]
                    }]
                },
                {"id": "registry+https://github.com/rust-lang/crates.io-index#c@1.0.0", "deps": []}
            ]
        }
    });
    let workspace = Workspace::from_metadata(&metadata, |manifest| {
        Ok(if manifest == Path::new("/w/a/Cargo.toml") {
            "[lints]\nworkspace = true\n".to_owned()
        } else {
            "[package]\nname = \"b\"\n".to_owned()
        })
    })
    .unwrap();

    let a = &workspace.packages["path+file:///w/a#0.1.0"];
    let a_member = a.member.as_ref().unwrap();
    assert_eq!(a_member.kind, CrateKind::Library);
    assert!(a_member.publish_false && a_member.workspace_lints);
    let c_id = "registry+https://github.com/rust-lang/crates.io-index#c@1.0.0";
    assert_eq!(
        a.deps,
        [
            (c_id.to_owned(), DepKind::Normal),
            (c_id.to_owned(), DepKind::Dev)
        ]
    );

    let b = &workspace.packages["path+file:///w/b#0.1.0"];
    let b_member = b.member.as_ref().unwrap();
    assert_eq!(b_member.kind, CrateKind::Binary);
    assert!(!b_member.publish_false && !b_member.workspace_lints);
    assert_eq!(
        b.deps,
        [("path+file:///w/a#0.1.0".to_owned(), DepKind::Build)]
    );

    assert!(workspace.packages[c_id].member.is_none());
    assert_eq!(workspace.members().count(), 2);
}

#[test]
fn metadata_without_a_resolve_graph_is_an_error() {
    let metadata = json!({"workspace_members": [], "packages": [], "resolve": null});
    let error = Workspace::from_metadata(&metadata, |_| Ok(String::new())).unwrap_err();
    assert!(error.to_string().contains("resolve"), "{error:#}");
}

/// The real check: `cargo test --workspace` fails when the workspace breaks a rule.
#[test]
fn the_workspace_follows_the_rules() {
    let workspace = Workspace::load().unwrap();
    let violations = messages(&check(&workspace));
    assert!(violations.is_empty(), "tidy:\n{}", violations.join("\n"));
    assert!(
        workspace.members().count() >= 12,
        "expected the members of SPEC §11, got {:?}",
        workspace
            .members()
            .map(|(_, package)| &package.name)
            .collect::<Vec<_>>()
    );
}

#[test]
fn only_the_worker_links_the_sinks_and_opentelemetry() {
    for (krate, exporter) in [
        ("relayd", "relay-sinks"),
        ("relay-proxy", "relay-sinks"),
        ("relay-mcp", "relay-sinks"),
        ("relayd", "opentelemetry"),
    ] {
        let violations = good().normal(krate, exporter).check();
        assert!(
            violations.iter().any(|violation| matches!(
                violation,
                Violation::Forbidden { krate: k, dependency, .. } if k == krate && dependency == exporter
            )),
            "{krate} -> {exporter}: {:?}",
            messages(&violations)
        );
    }
}

#[test]
fn the_plugin_core_stays_pure() {
    let violations = good()
        .normal("relay-plugins", "some-exporter")
        .normal("some-exporter", "tokio")
        .check();
    assert_eq!(
        messages(&violations),
        [
            "relay-plugins must not depend on tokio (SPEC §11: the plugin logic is pure, no tokio, hyper, sockets or exporters); path: relay-plugins -> some-exporter -> tokio"
        ]
    );
}

/// Every `tracing` line at info or above in the shipped code names its `event`, so that an
/// operator's query on `event` finds each line they may act on (docs/logging.md lists the
/// names). Tests, the test kit and the fuzzer are tools and may log as they like.
#[test]
fn every_log_line_at_info_or_above_names_its_event() {
    let root = crate::command::project_root().unwrap();
    let mut files = Vec::new();
    for dir in ["crates", "bins"] {
        collect_rust_files(&root.join(dir), &mut files);
    }
    let mut missing = Vec::new();
    for file in files {
        let path = file.to_string_lossy();
        if ["/tests", "tests.rs", "relay-testkit", "relay-fuzz"]
            .iter()
            .any(|skip| path.contains(skip))
        {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for level in ["tracing::info!(", "tracing::warn!(", "tracing::error!("] {
            for (at, _) in text.match_indices(level) {
                let args = &text[at + level.len()..];
                let mut depth = 1usize;
                let end = args
                    .char_indices()
                    .find(|(_, c)| {
                        match c {
                            '(' => depth += 1,
                            ')' => depth -= 1,
                            _ => {}
                        }
                        depth == 0
                    })
                    .map_or(args.len(), |(end, _)| end);
                if !args[..end].contains("event") {
                    let line = text[..at].lines().count() + 1;
                    missing.push(format!("{path}:{line}"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "log lines without an event: {missing:?}"
    );
}

fn collect_rust_files(dir: &std::path::Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}
