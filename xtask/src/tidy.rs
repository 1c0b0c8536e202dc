//! `cargo xtask tidy`: the dependency rules of SPEC §11 and the manifest rules of STYLE.md,
//! checked on the graph `cargo metadata` reports. It also runs as a test of this crate, so
//! `cargo test --workspace` enforces it.
//!
//! Loading ([`Workspace::load`]) is separate from the rule engine ([`check`]), which works on a
//! plain graph so the tests can hand-build graphs that break each rule.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    fmt,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use crate::command::{cargo, project_root};

/// Crates that do network or file IO, or drive an async runtime: none may be reachable from the
/// pure crates through normal dependencies.
const IO_CRATES: &[&str] = &[
    "tokio",
    "tokio-util",
    "tokio-rustls",
    "tokio-tungstenite",
    "tungstenite",
    "hyper",
    "hyper-util",
    "hyper-rustls",
    "h2",
    "rustls",
    "ring",
    "mio",
    "socket2",
    "rustix",
    "nix",
    "listenfd",
    "async-io",
    "async-std",
    "polling",
    "reqwest",
    "ureq",
];

/// The async and network stack, which `relay-identity` must not pull in (it may use `ring` and
/// `rustix` for its key store).
const ASYNC_NETWORK_CRATES: &[&str] = &[
    "tokio",
    "tokio-util",
    "tokio-rustls",
    "tokio-tungstenite",
    "tungstenite",
    "hyper",
    "hyper-util",
    "hyper-rustls",
    "h2",
    "mio",
    "socket2",
];

/// What the pure plugin crate must not reach: the async and network stack, the OS and
/// exporters. Unlike the broker it may use `ring`, for keyed hashes of redacted values.
const PLUGIN_FORBIDDEN: &[&str] = &[
    "tokio",
    "tokio-util",
    "tokio-rustls",
    "tokio-tungstenite",
    "tungstenite",
    "hyper",
    "hyper-util",
    "hyper-rustls",
    "h2",
    "rustls",
    "mio",
    "socket2",
    "rustix",
    "nix",
    "listenfd",
    "reqwest",
    "ureq",
    "opentelemetry",
    "opentelemetry_sdk",
    "opentelemetry-otlp",
    "opentelemetry-http",
    "opentelemetry-proto",
];

/// The exporters that only the worker links (through `relay-sinks`).
const OBSERVABILITY_EXPORTERS: &[&str] = &[
    "relay-sinks",
    "opentelemetry",
    "opentelemetry_sdk",
    "opentelemetry-otlp",
    "opentelemetry-http",
    "opentelemetry-proto",
];

/// Crates that must not appear anywhere in the graph, dev and build dependencies included:
/// TLS is rustls with ring only.
const BANNED_EVERYWHERE: &[&str] = &["aws-lc-rs", "aws-lc-sys", "openssl", "openssl-sys"];

/// What one library crate may depend on (normal dependencies, followed transitively).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LayerRule {
    pub(crate) krate: &'static str,
    /// The only workspace members it may reach.
    pub(crate) allowed_internal: &'static [&'static str],
    /// Crates it must not reach.
    pub(crate) forbidden: &'static [&'static str],
    /// Why, for the message.
    pub(crate) reason: &'static str,
}

pub(crate) const LAYER_RULES: &[LayerRule] = &[
    LayerRule {
        krate: "relay-proto",
        allowed_internal: &[],
        forbidden: IO_CRATES,
        reason: "SPEC §11: wire types only, no tokio, no IO",
    },
    LayerRule {
        krate: "relay-broker",
        allowed_internal: &["relay-proto"],
        forbidden: IO_CRATES,
        reason: "SPEC §11: a pure state machine that depends on relay-proto only",
    },
    LayerRule {
        krate: "relay-identity",
        allowed_internal: &[],
        forbidden: ASYNC_NETWORK_CRATES,
        reason: "SPEC §11: keys and tokens, no async runtime, no network",
    },
    LayerRule {
        krate: "relay-logging",
        allowed_internal: &["relay-proto"],
        forbidden: &[],
        reason: "SPEC §11: tracing set-up and the lifecycle events, over relay-proto's vocabulary only",
    },
    LayerRule {
        krate: "relay-plugins",
        allowed_internal: &["relay-proto"],
        forbidden: PLUGIN_FORBIDDEN,
        reason: "SPEC §11: the plugin logic is pure, no tokio, hyper, sockets or exporters",
    },
    LayerRule {
        krate: "relay-sinks",
        allowed_internal: &["relay-proto", "relay-plugins", "relay-logging"],
        forbidden: &[],
        reason: "SPEC §11: the observability IO, below the worker only",
    },
    LayerRule {
        krate: "relay-proxy",
        allowed_internal: &[
            "relay-proto",
            "relay-identity",
            "relay-broker",
            "relay-logging",
            "relay-plugins",
        ],
        forbidden: OBSERVABILITY_EXPORTERS,
        reason: "SPEC §11: relayd links relay-proxy, and relayd never links the observability exporters",
    },
    LayerRule {
        krate: "relayd",
        allowed_internal: DAEMON_SIDE,
        forbidden: OBSERVABILITY_EXPORTERS,
        reason: "SPEC §11: relayd never links relay-sinks or OpenTelemetry",
    },
    LayerRule {
        krate: "relay-mcp",
        allowed_internal: DAEMON_SIDE,
        forbidden: OBSERVABILITY_EXPORTERS,
        reason: "SPEC §11: only relay-worker links relay-sinks",
    },
    LayerRule {
        krate: "relay-hook",
        allowed_internal: DAEMON_SIDE,
        forbidden: OBSERVABILITY_EXPORTERS,
        reason: "SPEC §11: only relay-worker links relay-sinks",
    },
    LayerRule {
        krate: "relay-doctor",
        allowed_internal: DAEMON_SIDE,
        forbidden: OBSERVABILITY_EXPORTERS,
        reason: "SPEC §11: only relay-worker links relay-sinks",
    },
];

/// The libraries a binary other than the worker may link.
const DAEMON_SIDE: &[&str] = &[
    "relay-proto",
    "relay-identity",
    "relay-broker",
    "relay-proxy",
    "relay-logging",
    "relay-plugins",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum DepKind {
    Normal,
    Build,
    Dev,
}

impl fmt::Display for DepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DepKind::Normal => "normal",
            DepKind::Build => "build",
            DepKind::Dev => "dev",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CrateKind {
    /// Has a library target: others may depend on it.
    Library,
    /// Only binary targets: nothing may depend on it.
    Binary,
}

/// What tidy needs to know about a workspace member's manifest.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub(crate) kind: CrateKind,
    pub(crate) publish_false: bool,
    pub(crate) workspace_lints: bool,
    pub(crate) manifest: PathBuf,
}

#[derive(Debug, Clone)]
pub(crate) struct Package {
    pub(crate) name: String,
    /// Dependencies by package id, one entry per kind.
    pub(crate) deps: Vec<(String, DepKind)>,
    /// Set for workspace members.
    pub(crate) member: Option<Member>,
}

/// The resolved dependency graph, packages by id.
#[derive(Debug, Clone, Default)]
pub(crate) struct Workspace {
    pub(crate) packages: BTreeMap<String, Package>,
}

/// One broken rule, naming the crate and the dependency path at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Violation {
    Forbidden {
        krate: String,
        dependency: String,
        path: Vec<String>,
        reason: &'static str,
    },
    InternalNotAllowed {
        krate: String,
        dependency: String,
        allowed: &'static [&'static str],
        path: Vec<String>,
    },
    DependsOnBinary {
        krate: String,
        binary: String,
        kind: DepKind,
    },
    Banned {
        dependency: String,
        path: Vec<String>,
    },
    Publishable {
        krate: String,
        manifest: PathBuf,
    },
    NoWorkspaceLints {
        krate: String,
        manifest: PathBuf,
    },
    RuleForMissingCrate {
        krate: &'static str,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Forbidden {
                krate,
                dependency,
                path,
                reason,
            } => write!(
                f,
                "{krate} must not depend on {dependency} ({reason}); path: {}",
                path.join(" -> ")
            ),
            Violation::InternalNotAllowed {
                krate,
                dependency,
                allowed,
                path,
            } => {
                let allowed = if allowed.is_empty() {
                    "no workspace crate".to_owned()
                } else {
                    allowed.join(", ")
                };
                write!(
                    f,
                    "{krate} may depend on {allowed} among workspace crates, but reaches {dependency}; path: {}",
                    path.join(" -> ")
                )
            }
            Violation::DependsOnBinary {
                krate,
                binary,
                kind,
            } => write!(
                f,
                "{krate} depends on the binary crate {binary} ({kind} dependency); binaries compose the libraries and nothing depends on them"
            ),
            Violation::Banned { dependency, path } => {
                write!(
                    f,
                    "{dependency} is banned from the dependency graph (rustls with ring only)"
                )?;
                if path.is_empty() {
                    Ok(())
                } else {
                    write!(f, "; path: {}", path.join(" -> "))
                }
            }
            Violation::Publishable { krate, manifest } => write!(
                f,
                "{krate} is publishable: set `publish.workspace = true` (the workspace says false) in {}",
                manifest.display()
            ),
            Violation::NoWorkspaceLints { krate, manifest } => write!(
                f,
                "{krate} does not use the workspace lints: add `[lints]` with `workspace = true` to {}",
                manifest.display()
            ),
            Violation::RuleForMissingCrate { krate } => write!(
                f,
                "a dependency rule names {krate}, which is not a workspace member; update xtask/src/tidy.rs"
            ),
        }
    }
}

/// `cargo xtask tidy`.
pub(crate) fn run() -> Result<()> {
    let workspace = Workspace::load()?;
    let violations = check(&workspace);
    if violations.is_empty() {
        println!(
            "tidy: {} workspace members follow the dependency and manifest rules",
            workspace.members().count()
        );
        return Ok(());
    }
    for violation in &violations {
        eprintln!("tidy: {violation}");
    }
    bail!("tidy found {} violation(s)", violations.len())
}

/// Every rule, applied to `workspace`.
pub(crate) fn check(workspace: &Workspace) -> Vec<Violation> {
    let mut violations = Vec::new();
    for rule in LAYER_RULES {
        check_layer(workspace, rule, &mut violations);
    }
    check_binaries(workspace, &mut violations);
    check_banned(workspace, &mut violations);
    check_manifests(workspace, &mut violations);
    violations
}

fn check_layer(workspace: &Workspace, rule: &LayerRule, violations: &mut Vec<Violation>) {
    let Some((root_id, _)) = workspace.member_named(rule.krate) else {
        violations.push(Violation::RuleForMissingCrate { krate: rule.krate });
        return;
    };
    // Breadth-first over normal dependencies, so each reported path is a shortest one. The
    // search does not continue below a forbidden crate: its own dependencies add only noise.
    let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([root_id]);
    let mut seen = BTreeSet::from([root_id]);
    while let Some(id) = queue.pop_front() {
        let Some(package) = workspace.packages.get(id) else {
            continue;
        };
        for (dep_id, kind) in &package.deps {
            if *kind != DepKind::Normal || !seen.insert(dep_id.as_str()) {
                continue;
            }
            parent.insert(dep_id, id);
            let Some(dep) = workspace.packages.get(dep_id.as_str()) else {
                continue;
            };
            let path = || workspace.path_to(&parent, dep_id);
            if dep.member.is_some() && !rule.allowed_internal.contains(&dep.name.as_str()) {
                violations.push(Violation::InternalNotAllowed {
                    krate: rule.krate.to_owned(),
                    dependency: dep.name.clone(),
                    allowed: rule.allowed_internal,
                    path: path(),
                });
            }
            if rule.forbidden.contains(&dep.name.as_str()) {
                violations.push(Violation::Forbidden {
                    krate: rule.krate.to_owned(),
                    dependency: dep.name.clone(),
                    path: path(),
                    reason: rule.reason,
                });
                continue;
            }
            queue.push_back(dep_id);
        }
    }
}

fn check_binaries(workspace: &Workspace, violations: &mut Vec<Violation>) {
    for (_, package) in workspace.members() {
        for (dep_id, kind) in &package.deps {
            let Some(dep) = workspace.packages.get(dep_id) else {
                continue;
            };
            if dep.member.as_ref().map(|member| member.kind) == Some(CrateKind::Binary) {
                violations.push(Violation::DependsOnBinary {
                    krate: package.name.clone(),
                    binary: dep.name.clone(),
                    kind: *kind,
                });
            }
        }
    }
}

fn check_banned(workspace: &Workspace, violations: &mut Vec<Violation>) {
    let banned: Vec<&str> = workspace
        .packages
        .iter()
        .filter(|(_, package)| BANNED_EVERYWHERE.contains(&package.name.as_str()))
        .map(|(id, _)| id.as_str())
        .collect();
    if banned.is_empty() {
        return;
    }
    // One breadth-first search from every member over every kind of dependency.
    let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
    let mut seen: BTreeSet<&str> = workspace.members().map(|(id, _)| id).collect();
    let mut queue: VecDeque<&str> = seen.iter().copied().collect();
    while let Some(id) = queue.pop_front() {
        let Some(package) = workspace.packages.get(id) else {
            continue;
        };
        for (dep_id, _) in &package.deps {
            if seen.insert(dep_id.as_str()) {
                parent.insert(dep_id, id);
                queue.push_back(dep_id);
            }
        }
    }
    for id in banned {
        let path = if seen.contains(id) {
            workspace.path_to(&parent, id)
        } else {
            Vec::new()
        };
        violations.push(Violation::Banned {
            dependency: workspace.name_of(id).to_owned(),
            path,
        });
    }
}

fn check_manifests(workspace: &Workspace, violations: &mut Vec<Violation>) {
    for (_, package) in workspace.members() {
        let Some(member) = &package.member else {
            continue;
        };
        if !member.publish_false {
            violations.push(Violation::Publishable {
                krate: package.name.clone(),
                manifest: member.manifest.clone(),
            });
        }
        if !member.workspace_lints {
            violations.push(Violation::NoWorkspaceLints {
                krate: package.name.clone(),
                manifest: member.manifest.clone(),
            });
        }
    }
}

impl Workspace {
    /// Runs `cargo metadata` in the workspace root and reads every member's manifest.
    pub(crate) fn load() -> Result<Workspace> {
        let mut command: Command = cargo(["metadata", "--format-version", "1"])?;
        let output = command.output().context("running cargo metadata")?;
        if !output.status.success() {
            bail!(
                "cargo metadata failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let metadata: Value =
            serde_json::from_slice(&output.stdout).context("parsing cargo metadata output")?;
        Workspace::from_metadata(&metadata, |manifest| {
            std::fs::read_to_string(manifest)
                .with_context(|| format!("reading {}", manifest.display()))
        })
        .with_context(|| {
            format!(
                "reading the cargo metadata of {}",
                project_root().map_or_else(
                    |_| "the workspace".to_owned(),
                    |root| root.display().to_string()
                )
            )
        })
    }

    /// Builds the graph from `cargo metadata --format-version 1` output; `read_manifest` returns
    /// the text of a member's `Cargo.toml`.
    pub(crate) fn from_metadata(
        metadata: &Value,
        read_manifest: impl Fn(&Path) -> Result<String>,
    ) -> Result<Workspace> {
        let members: BTreeSet<&str> = array(metadata, "workspace_members")?
            .iter()
            .map(|id| id.as_str().context("a workspace member id is not a string"))
            .collect::<Result<_>>()?;
        let resolve = metadata
            .get("resolve")
            .filter(|resolve| !resolve.is_null())
            .context("cargo metadata has no `resolve` graph")?;
        let mut deps_by_id: BTreeMap<&str, Vec<(String, DepKind)>> = BTreeMap::new();
        for node in array(resolve, "nodes")? {
            let mut deps = Vec::new();
            for dep in array(node, "deps")? {
                let dep_id = string(dep, "pkg")?;
                for dep_kind in array(dep, "dep_kinds")? {
                    let kind = match dep_kind.get("kind").and_then(Value::as_str) {
                        None => DepKind::Normal,
                        Some("build") => DepKind::Build,
                        Some("dev") => DepKind::Dev,
                        Some(other) => bail!("unknown dependency kind {other:?} of {dep_id}"),
                    };
                    if !deps.contains(&(dep_id.to_owned(), kind)) {
                        deps.push((dep_id.to_owned(), kind));
                    }
                }
            }
            deps_by_id.insert(string(node, "id")?, deps);
        }

        let mut packages = BTreeMap::new();
        for package in array(metadata, "packages")? {
            let id = string(package, "id")?;
            let name = string(package, "name")?;
            let member = if members.contains(id) {
                let manifest = PathBuf::from(string(package, "manifest_path")?);
                let manifest_text = read_manifest(&manifest)?;
                Some(Member {
                    kind: crate_kind(package)?,
                    // `publish = false` appears as an empty list of allowed registries.
                    publish_false: package
                        .get("publish")
                        .and_then(Value::as_array)
                        .is_some_and(Vec::is_empty),
                    workspace_lints: has_workspace_lints(&manifest_text),
                    manifest,
                })
            } else {
                None
            };
            packages.insert(
                id.to_owned(),
                Package {
                    name: name.to_owned(),
                    deps: deps_by_id.remove(id).unwrap_or_default(),
                    member,
                },
            );
        }
        Ok(Workspace { packages })
    }

    pub(crate) fn members(&self) -> impl Iterator<Item = (&str, &Package)> {
        self.packages
            .iter()
            .filter(|(_, package)| package.member.is_some())
            .map(|(id, package)| (id.as_str(), package))
    }

    fn member_named(&self, name: &str) -> Option<(&str, &Package)> {
        self.members().find(|(_, package)| package.name == name)
    }

    fn name_of<'a>(&'a self, id: &'a str) -> &'a str {
        self.packages
            .get(id)
            .map_or(id, |package| package.name.as_str())
    }

    /// The crate names from the search root to `id`, following `parent`.
    fn path_to(&self, parent: &BTreeMap<&str, &str>, id: &str) -> Vec<String> {
        let mut path = vec![self.name_of(id).to_owned()];
        let mut current = id;
        while let Some(&previous) = parent.get(current) {
            path.push(self.name_of(previous).to_owned());
            current = previous;
            if path.len() > self.packages.len() {
                break;
            }
        }
        path.reverse();
        path
    }
}

fn crate_kind(package: &Value) -> Result<CrateKind> {
    let mut has_library = false;
    let mut has_binary = false;
    for target in array(package, "targets")? {
        for kind in array(target, "kind")? {
            match kind.as_str() {
                Some("lib" | "rlib" | "dylib" | "cdylib" | "staticlib" | "proc-macro") => {
                    has_library = true;
                }
                Some("bin") => has_binary = true,
                _ => {}
            }
        }
    }
    Ok(if has_binary && !has_library {
        CrateKind::Binary
    } else {
        CrateKind::Library
    })
}

/// Whether a manifest has `[lints]` with `workspace = true` (or the dotted or inline forms).
/// A line-level reading, enough for the manifests of this workspace; no TOML dependency.
pub(crate) fn has_workspace_lints(manifest: &str) -> bool {
    let mut table = String::new();
    for line in manifest.lines() {
        let line = line.split_once('#').map_or(line, |(code, _)| code).trim();
        if let Some(header) = line.strip_prefix('[') {
            table = header.trim_end_matches(']').trim().to_owned();
            continue;
        }
        let compact: String = line.chars().filter(|c| !c.is_whitespace()).collect();
        let found = match table.as_str() {
            "lints" => compact == "workspace=true",
            "" => compact == "lints.workspace=true" || compact == "lints={workspace=true}",
            _ => false,
        };
        if found {
            return true;
        }
    }
    false
}

fn array<'a>(value: &'a Value, key: &str) -> Result<&'a Vec<Value>> {
    value
        .get(key)
        .and_then(Value::as_array)
        .with_context(|| format!("cargo metadata: `{key}` is missing or not a list"))
}

fn string<'a>(value: &'a Value, key: &str) -> Result<&'a str> {
    value
        .get(key)
        .and_then(Value::as_str)
        .with_context(|| format!("cargo metadata: `{key}` is missing or not a string"))
}

#[cfg(test)]
mod tests;
