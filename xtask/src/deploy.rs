//! `cargo xtask deploy-check`: the service files in `deploy/` (SPEC §10.1), checked with the
//! real tools where Debian has them and against the keys each service manager requires.
//!
//! - systemd: `systemd-analyze verify` on every unit, and `systemd-analyze security
//!   --offline=yes` on the system unit, whose exposure score is printed and must be at most
//!   [`MAX_EXPOSURE`]. systemd-analyze is installed from the Debian package `systemd` when it
//!   is missing.
//! - launchd: each plist is parsed by python3's `plistlib` and its keys are checked here.
//! - Task Scheduler: each task XML is parsed by python3's `xml.etree` (well-formed or a
//!   failure) and its elements are checked here; the launcher script is checked for what it
//!   must do.
//!
//! The checks themselves are pure functions of the files' text or parsed values, so they are
//! unit-tested in `deploy/tests.rs`; [`run`] only runs the tools and feeds them.
//!
//! One file for the three service managers, past the usual size, because each check is a
//! short list of required keys whose reasons are best read together with the others.

use std::{
    fs, io,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use crate::command::project_root;

/// The highest `systemd-analyze security` exposure accepted for the system unit (SPEC §10.1).
const MAX_EXPOSURE: f64 = 3.0;
/// Where the Linux units expect the binaries; replaced by a stub for `verify` (see
/// [`stage_units`]).
const LINUX_RELAYD: &str = "/opt/relay/bin/relayd";
/// The daemon's loopback port, held by the socket units and the launchd `Sockets` entry.
const DAEMON_PORT: &str = "47632";
/// The launchd label of both plists.
const LAUNCHD_LABEL: &str = "org.relay.relayd";
/// The Task Scheduler XML namespace.
const TASK_NAMESPACE: &str = "http://schemas.microsoft.com/windows/2004/02/mit/task";
/// The launcher script the tasks start.
const LAUNCHER: &str = "relayd-launcher.ps1";

/// Prints a plist as JSON (dates and data do not occur in ours; `default=str` keeps any).
const PLIST_TO_JSON: &str = "import json, plistlib, sys\n\
with open(sys.argv[1], 'rb') as f:\n    \
value = plistlib.load(f)\n\
print(json.dumps(value, default=str))\n";

/// Prints an XML document as a JSON tree of `{tag, ns, attrs, text, children}`; a document
/// that is not well-formed makes python3 exit non-zero.
const XML_TO_JSON: &str = "import json, sys, xml.etree.ElementTree as ET\n\
def node(e):\n    \
ns, tag = '', e.tag\n    \
if tag.startswith('{'):\n        \
ns, tag = tag[1:].split('}', 1)\n    \
return {'tag': tag, 'ns': ns, 'attrs': dict(e.attrib), 'text': (e.text or '').strip(),\n            \
'children': [node(c) for c in e]}\n\
print(json.dumps(node(ET.parse(sys.argv[1]).getroot())))\n";

/// Which of the two variants of a service file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Runs under a service account, started at boot.
    System,
    /// Runs as one user, started at their login.
    User,
}

pub(crate) fn run() -> Result<()> {
    let deploy = project_root()?.join("deploy");
    ensure_systemd_analyze()?;
    ensure_python3()?;

    let systemd = deploy.join("systemd");
    let system_unit = read(&systemd.join("system/relayd.service"))?;
    let user_unit = read(&systemd.join("user/relayd.service"))?;
    let system_socket = read(&systemd.join("system/relayd.socket"))?;
    let user_socket = read(&systemd.join("user/relayd.socket"))?;
    let keys = read(&systemd.join("system/relayd.service.d/provider-keys.conf"))?;
    let mut problems = Vec::new();
    problems.extend(prefixed(
        "systemd/system/relayd.service",
        check_service(&system_unit, Scope::System),
    ));
    problems.extend(prefixed(
        "systemd/user/relayd.service",
        check_service(&user_unit, Scope::User),
    ));
    problems.extend(prefixed(
        "systemd/system/relayd.socket",
        check_socket(&system_socket),
    ));
    if user_socket != system_socket {
        problems.push(
            "systemd/user/relayd.socket: differs from systemd/system/relayd.socket".to_owned(),
        );
    }
    problems.extend(prefixed(
        "systemd/system/relayd.service.d/provider-keys.conf",
        check_key_drop_in(&keys),
    ));

    let staging = Staging::new()?;
    let staged = stage_units(&systemd, staging.path())?;
    problems.extend(verify_units(&staged, staging.path())?);
    let exposure = security_exposure(&staged.system_unit)?;
    println!(
        "systemd-analyze security: relayd.service exposure {exposure:.1} (at most {MAX_EXPOSURE:.1})"
    );
    if exposure > MAX_EXPOSURE {
        problems.push(format!(
            "systemd/system/relayd.service: exposure {exposure:.1} is above {MAX_EXPOSURE:.1}"
        ));
    }

    for (file, scope) in [
        ("launchd/org.relay.relayd.daemon.plist", Scope::System),
        ("launchd/org.relay.relayd.agent.plist", Scope::User),
    ] {
        let value = python_json(PLIST_TO_JSON, &deploy.join(file))?;
        problems.extend(prefixed(file, check_plist(&value, scope)));
    }
    for (file, scope) in [
        ("windows/relayd-system-task.xml", Scope::System),
        ("windows/relayd-user-task.xml", Scope::User),
    ] {
        let tree = python_json(XML_TO_JSON, &deploy.join(file))?;
        problems.extend(prefixed(file, check_task(&tree, scope)));
    }
    let launcher = format!("windows/{LAUNCHER}");
    problems.extend(prefixed(
        &launcher,
        check_launcher(&read(&deploy.join(&launcher))?),
    ));

    if !problems.is_empty() {
        bail!(
            "deploy/ has {} problem(s):\n  {}",
            problems.len(),
            problems.join("\n  ")
        );
    }
    println!("deploy-check: every service file in deploy/ passed");
    Ok(())
}

fn read(path: &Path) -> Result<String> {
    fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

fn prefixed(file: &str, problems: Vec<String>) -> impl Iterator<Item = String> + '_ {
    problems
        .into_iter()
        .map(move |problem| format!("{file}: {problem}"))
}

// ---------------------------------------------------------------------------------------------
// The tools.

/// Installs systemd-analyze from Debian's `systemd` package when it is missing; `apt-get
/// update` only when the first install fails (an old or empty package list).
fn ensure_systemd_analyze() -> Result<()> {
    if probe(Command::new("systemd-analyze").arg("--version")) {
        return Ok(());
    }
    println!("\n==> systemd-analyze is missing: apt-get install -y systemd");
    let install = || {
        let mut command = Command::new("apt-get");
        command
            .args(["install", "-y", "--no-install-recommends", "systemd"])
            .env("DEBIAN_FRONTEND", "noninteractive");
        command
    };
    if !runs(&mut install()) {
        println!("==> the install failed: apt-get update, then again");
        if !runs(Command::new("apt-get").arg("update")) || !runs(&mut install()) {
            bail!("cannot install systemd-analyze (Debian package systemd) with apt-get");
        }
    }
    if !probe(Command::new("systemd-analyze").arg("--version")) {
        bail!("systemd-analyze still does not run after installing the systemd package");
    }
    Ok(())
}

fn ensure_python3() -> Result<()> {
    if probe(Command::new("python3").arg("--version")) {
        return Ok(());
    }
    bail!(
        "python3 is missing: deploy-check parses the plists and task XML with it (apt-get install -y python3)"
    )
}

/// Whether the command starts and exits 0 (its output is shown).
fn runs(command: &mut Command) -> bool {
    command.status().is_ok_and(|status| status.success())
}

/// Whether a tool is there: the command starts and exits 0 (its output is dropped).
fn probe(command: &mut Command) -> bool {
    command.output().is_ok_and(|output| output.status.success())
}

fn output_text(output: &Output) -> String {
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    text
}

/// Runs a python3 script on `file` and parses what it prints as JSON.
fn python_json(script: &str, file: &Path) -> Result<Value> {
    let output = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(file)
        .output()
        .context("running python3")?;
    if !output.status.success() {
        bail!(
            "{} does not parse: {}",
            file.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    serde_json::from_slice(&output.stdout)
        .with_context(|| format!("reading python3's JSON for {}", file.display()))
}

/// A temporary directory removed when dropped.
struct Staging(PathBuf);

impl Staging {
    fn new() -> Result<Staging> {
        let path = std::env::temp_dir().join(format!("relay-deploy-check-{}", std::process::id()));
        if path.exists() {
            fs::remove_dir_all(&path).with_context(|| format!("removing {}", path.display()))?;
        }
        fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Staging(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The unit copies `verify` and `security` read.
#[derive(Debug)]
struct StagedUnits {
    system_unit: PathBuf,
    system: Vec<PathBuf>,
    user: Vec<PathBuf>,
}

/// Copies the units under `staging`, with [`LINUX_RELAYD`] replaced by an executable stub.
///
/// `systemd-analyze verify` fails a unit whose `ExecStart=` binary does not exist, and a CI
/// machine has no `/opt/relay/bin/relayd`. Its `--root=` option would need the whole tree
/// (the unit search path, /etc, the binary) under that root, so instead the check verifies a
/// copy whose only difference is the binary's path, pointing at a stub that exists. The
/// drop-in directory is copied along: verify loads `relayd.service.d/` beside the unit.
fn stage_units(systemd: &Path, staging: &Path) -> Result<StagedUnits> {
    let stub = staging.join("bin/relayd");
    fs::create_dir_all(staging.join("bin"))?;
    fs::write(&stub, "#!/bin/sh\nexit 0\n")?;
    make_executable(&stub)?;
    let stub_text = stub
        .to_str()
        .context("the temporary directory's path is not UTF-8")?;
    let copy = |scope: &str| -> Result<Vec<PathBuf>> {
        let mut units = Vec::new();
        for relative in ["relayd.service", "relayd.socket"] {
            let text = read(&systemd.join(scope).join(relative))?;
            let target = staging.join(scope).join(relative);
            fs::create_dir_all(staging.join(scope))?;
            fs::write(&target, text.replace(LINUX_RELAYD, stub_text))?;
            units.push(target);
        }
        let drop_ins = systemd.join(scope).join("relayd.service.d");
        if drop_ins.is_dir() {
            let target = staging.join(scope).join("relayd.service.d");
            fs::create_dir_all(&target)?;
            for entry in fs::read_dir(&drop_ins)? {
                let entry = entry?;
                fs::copy(entry.path(), target.join(entry.file_name()))?;
            }
        }
        Ok(units)
    };
    let system = copy("system")?;
    let user = copy("user")?;
    Ok(StagedUnits {
        system_unit: system[0].clone(),
        system,
        user,
    })
}

#[cfg(unix)]
fn make_executable(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
}

#[cfg(not(unix))]
fn make_executable(_path: &Path) -> io::Result<()> {
    Ok(())
}

/// `systemd-analyze verify` on the system units, and `--user verify` on the user units (a user
/// manager needs `XDG_RUNTIME_DIR`, given a private directory here). verify exits 0 on
/// warnings such as an unknown key, so any line it prints about our files is a problem too.
fn verify_units(staged: &StagedUnits, staging: &Path) -> Result<Vec<String>> {
    let runtime = staging.join("runtime");
    fs::create_dir_all(&runtime)?;
    let mut problems = Vec::new();
    for (label, user, units) in [
        ("systemd/system", false, &staged.system),
        ("systemd/user", true, &staged.user),
    ] {
        let mut command = Command::new("systemd-analyze");
        if user {
            command.arg("--user").env("XDG_RUNTIME_DIR", &runtime);
        }
        command.arg("verify").args(units);
        println!(
            "\n==> systemd-analyze{} verify {label}/relayd.service {label}/relayd.socket",
            if user { " --user" } else { "" }
        );
        let output = command.output().context("running systemd-analyze verify")?;
        let text = output_text(&output);
        print!("{text}");
        let staged_dir = staging.to_string_lossy();
        problems.extend(verify_problems(
            label,
            output.status.success(),
            &text,
            &staged_dir,
        ));
    }
    Ok(problems)
}

/// The problems in one `systemd-analyze verify` run: a failure, and every line that names a
/// staged file or a relayd unit (warnings do not change its exit status).
pub(crate) fn verify_problems(
    label: &str,
    success: bool,
    text: &str,
    staged_dir: &str,
) -> Vec<String> {
    let mut problems: Vec<String> = text
        .lines()
        .filter(|line| line.contains(staged_dir) || line.contains("relayd."))
        .map(|line| {
            format!(
                "{label}: systemd-analyze verify: {}",
                line.replace(staged_dir, "")
            )
        })
        .collect();
    if !success && problems.is_empty() {
        problems.push(format!(
            "{label}: systemd-analyze verify failed: {}",
            text.trim()
        ));
    }
    problems
}

fn security_exposure(unit: &Path) -> Result<f64> {
    println!("\n==> systemd-analyze security --offline=yes systemd/system/relayd.service");
    let output = Command::new("systemd-analyze")
        .args(["security", "--offline=yes"])
        .arg(unit)
        .output()
        .context("running systemd-analyze security")?;
    let text = output_text(&output);
    if !output.status.success() {
        bail!(
            "systemd-analyze security failed ({}): {}",
            output.status,
            text.trim()
        );
    }
    parse_exposure(&text).with_context(|| {
        format!("no \"Overall exposure level\" in the output of systemd-analyze security:\n{text}")
    })
}

// ---------------------------------------------------------------------------------------------
// The checks: pure functions of text and parsed values.

/// The exposure score from `systemd-analyze security` output, from its line
/// `→ Overall exposure level for relayd.service: 1.4 OK 🙂`.
pub(crate) fn parse_exposure(output: &str) -> Option<f64> {
    let line = output
        .lines()
        .find(|line| line.contains("Overall exposure level for"))?;
    let (_, rest) = line.rsplit_once(": ")?;
    rest.split_whitespace().next()?.parse().ok()
}

/// The `key=value` settings of a unit file with their section, in order (comments and blank
/// lines skipped; systemd's line continuations do not occur in ours).
pub(crate) fn unit_settings(text: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut settings = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
        } else if let Some((key, value)) = line.split_once('=') {
            settings.push((
                section.clone(),
                key.trim().to_owned(),
                value.trim().to_owned(),
            ));
        }
    }
    settings
}

fn has_setting(
    settings: &[(String, String, String)],
    section: &str,
    key: &str,
    value: &str,
) -> bool {
    settings
        .iter()
        .any(|(s, k, v)| s == section && k == key && v == value)
}

/// What SPEC §10.1 requires of a service unit.
pub(crate) fn check_service(text: &str, scope: Scope) -> Vec<String> {
    let settings = unit_settings(text);
    let mut required: Vec<(&str, &str, &str)> = vec![
        ("Unit", "Requires", "relayd.socket"),
        ("Service", "ExecStart", LINUX_RELAYD),
        ("Service", "UMask", "0077"),
        ("Service", "TimeoutStopSec", "150"),
        ("Service", "Restart", "on-failure"),
        ("Service", "LimitNOFILE", "65536"),
        ("Service", "NoNewPrivileges", "yes"),
    ];
    if scope == Scope::System {
        required.extend([
            ("Service", "User", "relay"),
            (
                "Service",
                "Environment",
                "XDG_CONFIG_HOME=/var/lib/relay/.config",
            ),
            ("Service", "StateDirectory", "relay"),
            ("Service", "ProtectSystem", "strict"),
            ("Service", "ProtectHome", "yes"),
            ("Service", "PrivateTmp", "yes"),
        ]);
    }
    let mut problems: Vec<String> = required
        .into_iter()
        .filter(|(section, key, value)| !has_setting(&settings, section, key, value))
        .map(|(section, key, value)| format!("[{section}] lacks {key}={value}"))
        .collect();
    if scope == Scope::User && settings.iter().any(|(_, key, _)| key == "User") {
        problems.push("a user unit must not set User=".to_owned());
    }
    problems.extend(no_route_token(&settings));
    problems
}

/// A unit must never hand a route credential to the daemon.
fn no_route_token(settings: &[(String, String, String)]) -> Option<String> {
    settings
        .iter()
        .any(|(_, _, value)| value.contains("RELAY_CLIENT_TOKEN"))
        .then(|| "must not mention RELAY_CLIENT_TOKEN".to_owned())
}

/// The socket unit holds the daemon's loopback port.
pub(crate) fn check_socket(text: &str) -> Vec<String> {
    let settings = unit_settings(text);
    let listen = format!("127.0.0.1:{DAEMON_PORT}");
    let mut problems = Vec::new();
    if !has_setting(&settings, "Socket", "ListenStream", &listen) {
        problems.push(format!("[Socket] lacks ListenStream={listen}"));
    }
    if settings
        .iter()
        .any(|(_, key, value)| key == "Accept" && value != "no")
    {
        problems.push("relayd takes one listening socket: Accept= must be no".to_owned());
    }
    problems
}

/// The provider-key drop-in passes both key files through `LoadCredential=`.
pub(crate) fn check_key_drop_in(text: &str) -> Vec<String> {
    let settings = unit_settings(text);
    ["openai-api-key", "anthropic-api-key"]
        .into_iter()
        .filter(|id| {
            !settings.iter().any(|(section, key, value)| {
                section == "Service"
                    && key == "LoadCredential"
                    && value.starts_with(&format!("{id}:/"))
            })
        })
        .map(|id| format!("[Service] lacks LoadCredential={id}:<absolute path>"))
        .collect()
}

/// What SPEC §10.1 requires of a launchd plist, given as JSON.
pub(crate) fn check_plist(plist: &Value, scope: Scope) -> Vec<String> {
    let mut problems = Vec::new();
    let mut expect = |ok: bool, problem: &str| {
        if !ok {
            problems.push(problem.to_owned());
        }
    };
    expect(
        plist["Label"].as_str() == Some(LAUNCHD_LABEL),
        &format!("Label must be {LAUNCHD_LABEL}"),
    );
    let program = plist["ProgramArguments"][0].as_str().unwrap_or_default();
    expect(
        program.starts_with('/') && program.ends_with("/relayd"),
        "ProgramArguments must start with the absolute path of relayd",
    );
    expect(
        plist["KeepAlive"].as_bool() == Some(true) || plist["KeepAlive"].is_object(),
        "KeepAlive must be true or a dictionary",
    );
    expect(
        plist["ThrottleInterval"].as_i64() == Some(5),
        "ThrottleInterval must be 5",
    );
    expect(
        plist["ExitTimeOut"].as_i64() == Some(150),
        "ExitTimeOut must be 150",
    );
    expect(
        plist["Umask"].as_i64() == Some(63),
        "Umask must be 63 (0077)",
    );
    let environment = &plist["EnvironmentVariables"];
    expect(
        environment["XDG_CONFIG_HOME"]
            .as_str()
            .is_some_and(|path| path.starts_with('/')),
        "EnvironmentVariables must set an absolute XDG_CONFIG_HOME",
    );
    expect(
        environment.get("RELAY_CLIENT_TOKEN").is_none(),
        "EnvironmentVariables must not carry RELAY_CLIENT_TOKEN",
    );
    // relayd takes a passed socket only the systemd way (LISTEN_FDS); it cannot ask launchd
    // for one (launch_activate_socket), so a Sockets entry would hold the port relayd binds.
    expect(
        plist.get("Sockets").is_none(),
        "Sockets must be absent: relayd binds 127.0.0.1:47632 itself under launchd",
    );
    expect(
        plist["ProcessType"].as_str() != Some("Background"),
        "ProcessType must not be Background: launchd throttles it, and relayd is on every request's path",
    );
    let account = plist["UserName"].as_str();
    match scope {
        Scope::System => expect(
            account.is_some_and(|name| name != "root"),
            "a LaunchDaemon must run under its own UserName, not root",
        ),
        Scope::User => expect(account.is_none(), "a LaunchAgent must not set UserName"),
    }
    problems
}

/// The children of a JSON XML node named `tag`.
fn children<'a>(node: &'a Value, tag: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    node["children"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(move |child| child["tag"].as_str() == Some(tag))
}

fn child<'a>(node: &'a Value, tag: &'a str) -> Option<&'a Value> {
    children(node, tag).next()
}

fn text_of(node: Option<&Value>) -> &str {
    node.and_then(|node| node["text"].as_str())
        .unwrap_or_default()
}

/// What Task Scheduler requires of a task definition, and what Relay's tasks need, given the
/// XML as a JSON tree.
pub(crate) fn check_task(task: &Value, scope: Scope) -> Vec<String> {
    let mut problems = Vec::new();
    let mut expect = |ok: bool, problem: &str| {
        if !ok {
            problems.push(problem.to_owned());
        }
    };
    expect(
        task["tag"].as_str() == Some("Task") && task["ns"].as_str() == Some(TASK_NAMESPACE),
        &format!("the root element must be Task in the namespace {TASK_NAMESPACE}"),
    );
    expect(
        task["attrs"]["version"].as_str().is_some(),
        "Task must carry its schema version",
    );
    for required in ["Triggers", "Principals", "Settings", "Actions"] {
        expect(
            children(task, required).count() == 1,
            &format!("Task must have exactly one {required} element"),
        );
    }
    let trigger = match scope {
        Scope::System => "BootTrigger",
        Scope::User => "LogonTrigger",
    };
    let triggers = child(task, "Triggers");
    expect(
        triggers.is_some_and(|triggers| child(triggers, trigger).is_some()),
        &format!("Triggers must hold a {trigger}"),
    );
    let principal = child(task, "Principals").and_then(|principals| child(principals, "Principal"));
    let user_id = text_of(principal.and_then(|p| child(p, "UserId")));
    let group_id = text_of(principal.and_then(|p| child(p, "GroupId")));
    expect(
        principal.is_some() && (user_id.is_empty() != group_id.is_empty()),
        "Principals must hold one Principal with a UserId or a GroupId",
    );
    expect(
        text_of(principal.and_then(|p| child(p, "RunLevel"))) == "LeastPrivilege",
        "the Principal must run with RunLevel LeastPrivilege",
    );
    if scope == Scope::System {
        expect(
            user_id == "S-1-5-19"
                && text_of(principal.and_then(|p| child(p, "LogonType"))) == "ServiceAccount",
            "the system task must run as LOCAL SERVICE (S-1-5-19, LogonType ServiceAccount)",
        );
    }
    let settings = child(task, "Settings");
    let setting = |name: &str| text_of(settings.and_then(|s| child(s, name))).to_owned();
    expect(
        setting("ExecutionTimeLimit") == "PT0S",
        "Settings must have ExecutionTimeLimit PT0S (a daemon has no time limit)",
    );
    expect(
        setting("MultipleInstancesPolicy") == "IgnoreNew",
        "Settings must have MultipleInstancesPolicy IgnoreNew",
    );
    expect(
        setting("DisallowStartIfOnBatteries") == "false"
            && setting("StopIfGoingOnBatteries") == "false",
        "Settings must let the task start and keep running on batteries",
    );
    expect(
        settings.is_some_and(|s| child(s, "RestartOnFailure").is_some()),
        "Settings must restart the task on failure",
    );
    let exec = child(task, "Actions").and_then(|actions| child(actions, "Exec"));
    let command = text_of(exec.and_then(|e| child(e, "Command")));
    let arguments = text_of(exec.and_then(|e| child(e, "Arguments")));
    let scope_argument = match scope {
        Scope::System => "-Scope System",
        Scope::User => "-Scope User",
    };
    expect(
        command.to_ascii_lowercase().ends_with("powershell.exe")
            && arguments.contains(LAUNCHER)
            && arguments.contains(scope_argument),
        &format!("Actions must run {LAUNCHER} {scope_argument} with powershell.exe"),
    );
    expect(
        !arguments.contains("RELAY_CLIENT_TOKEN"),
        "Actions must not mention RELAY_CLIENT_TOKEN",
    );
    problems
}

/// The launcher script does the three things SPEC §10.1 asks of it.
pub(crate) fn check_launcher(text: &str) -> Vec<String> {
    [
        ("$env:XDG_CONFIG_HOME =", "must set XDG_CONFIG_HOME"),
        (
            "Remove-Item -Path Env:RELAY_CLIENT_TOKEN",
            "must remove RELAY_CLIENT_TOKEN from its environment",
        ),
        (
            "EnvironmentVariables.Remove('RELAY_CLIENT_TOKEN')",
            "must remove RELAY_CLIENT_TOKEN from relayd's environment",
        ),
        ("$MaxLogBytes = 10MB", "must rotate the log over 10 MB"),
        ("exit $process.ExitCode", "must exit with relayd's status"),
    ]
    .into_iter()
    .filter(|(needle, _)| !text.contains(needle))
    .map(|(_, problem)| problem.to_owned())
    .collect()
}

#[cfg(test)]
mod tests;
