use std::path::Path;

use serde_json::json;

use super::*;

fn deploy_file(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

#[test]
fn the_exposure_score_is_read_from_the_overall_line() {
    let output = "  NAME                      DESCRIPTION                     EXPOSURE\n\
✗ IPAddressDeny=            Service does not define an IP address allow list     0.2\n\
✓ UMask=                    Files created by service are accessible only by …\n\
\n\
→ Overall exposure level for relayd.service: 1.4 OK 🙂\n";
    assert_eq!(parse_exposure(output), Some(1.4));
    assert_eq!(
        parse_exposure("→ Overall exposure level for x.service: 9.6 UNSAFE 😨"),
        Some(9.6)
    );
    assert_eq!(
        parse_exposure("→ Overall exposure level for a: b.service: 10.0 UNSAFE"),
        Some(10.0)
    );
    for bad in [
        "",
        "✗ IPAddressDeny= 0.2",
        "→ Overall exposure level for relayd.service: OK",
        "→ Overall exposure level for relayd.service:",
    ] {
        assert_eq!(parse_exposure(bad), None, "{bad:?}");
    }
}

#[test]
fn unit_settings_keep_sections_and_skip_comments() {
    let text = "# c\n[Unit]\nRequires=relayd.socket\n; c\n\n[Service]\nEnvironment=A=b=c\n  UMask = 0077 \n";
    assert_eq!(
        unit_settings(text),
        [
            (
                "Unit".to_owned(),
                "Requires".to_owned(),
                "relayd.socket".to_owned()
            ),
            (
                "Service".to_owned(),
                "Environment".to_owned(),
                "A=b=c".to_owned()
            ),
            ("Service".to_owned(), "UMask".to_owned(), "0077".to_owned()),
        ]
    );
}

#[test]
fn the_shipped_units_pass_their_checks() {
    assert_eq!(
        check_service(&deploy_file("systemd/system/relayd.service"), Scope::System),
        Vec::<String>::new()
    );
    assert_eq!(
        check_service(&deploy_file("systemd/user/relayd.service"), Scope::User),
        Vec::<String>::new()
    );
    assert_eq!(
        check_socket(&deploy_file("systemd/system/relayd.socket")),
        Vec::<String>::new()
    );
    assert_eq!(
        deploy_file("systemd/system/relayd.socket"),
        deploy_file("systemd/user/relayd.socket")
    );
    assert_eq!(
        check_key_drop_in(&deploy_file(
            "systemd/system/relayd.service.d/provider-keys.conf"
        )),
        Vec::<String>::new()
    );
    assert_eq!(
        check_launcher(&deploy_file("windows/relayd-launcher.ps1")),
        Vec::<String>::new()
    );
}

#[test]
fn a_unit_that_drops_a_required_setting_is_refused() {
    let good = deploy_file("systemd/system/relayd.service");
    for (line, problem) in [
        ("UMask=0077", "[Service] lacks UMask=0077"),
        ("TimeoutStopSec=150", "[Service] lacks TimeoutStopSec=150"),
        (
            "ProtectSystem=strict",
            "[Service] lacks ProtectSystem=strict",
        ),
        ("User=relay", "[Service] lacks User=relay"),
        (
            "Environment=XDG_CONFIG_HOME=/var/lib/relay/.config",
            "[Service] lacks Environment=XDG_CONFIG_HOME=/var/lib/relay/.config",
        ),
        (
            "Requires=relayd.socket",
            "[Unit] lacks Requires=relayd.socket",
        ),
    ] {
        let text = good.replace(&format!("{line}\n"), "# removed\n");
        assert_ne!(text, good, "{line} is not in the unit");
        assert_eq!(
            check_service(&text, Scope::System),
            [problem.to_owned()],
            "{line}"
        );
    }
    // The setting in the wrong section does not count.
    let moved = good
        .replace("UMask=0077\n", "")
        .replace("[Install]\n", "[Install]\nUMask=0077\n");
    assert_eq!(
        check_service(&moved, Scope::System),
        ["[Service] lacks UMask=0077"]
    );
    // A token handed to the daemon is refused.
    let leaky = good.replace(
        "[Service]\n",
        "[Service]\nEnvironment=RELAY_CLIENT_TOKEN=x\n",
    );
    assert_eq!(
        check_service(&leaky, Scope::System),
        ["must not mention RELAY_CLIENT_TOKEN"]
    );
    // A user unit does not switch accounts.
    let user = deploy_file("systemd/user/relayd.service")
        .replace("[Service]\n", "[Service]\nUser=relay\n");
    assert_eq!(
        check_service(&user, Scope::User),
        ["a user unit must not set User="]
    );
}

#[test]
fn a_socket_on_another_address_or_with_accept_is_refused() {
    let good = deploy_file("systemd/system/relayd.socket");
    let wide = good.replace("127.0.0.1:47632", "0.0.0.0:47632");
    assert_eq!(
        check_socket(&wide),
        ["[Socket] lacks ListenStream=127.0.0.1:47632"]
    );
    let accept = good.replace("Accept=no", "Accept=yes");
    assert_eq!(
        check_socket(&accept),
        ["relayd takes one listening socket: Accept= must be no"]
    );
    let keys = "[Service]\nLoadCredential=openai-api-key:/etc/relay/credentials/openai-api-key\n";
    assert_eq!(
        check_key_drop_in(keys),
        ["[Service] lacks LoadCredential=anthropic-api-key:<absolute path>"]
    );
}

#[test]
fn verify_output_about_our_units_is_a_problem_even_on_exit_0() {
    let staged = "/tmp/relay-deploy-check-1";
    assert!(verify_problems("systemd/system", true, "", staged).is_empty());
    // Lines about other units are not ours to fix.
    assert!(verify_problems("systemd/system", true, "foo.service: odd\n", staged).is_empty());
    assert_eq!(
        verify_problems(
            "systemd/system",
            true,
            "/tmp/relay-deploy-check-1/system/relayd.service:20: Unknown key 'Bogus' in section [Service], ignoring.\n",
            staged
        ),
        [
            "systemd/system: systemd-analyze verify: /system/relayd.service:20: Unknown key 'Bogus' in section [Service], ignoring."
        ]
    );
    assert_eq!(
        verify_problems(
            "systemd/user",
            false,
            "Failed to initialize manager\n",
            staged
        ),
        ["systemd/user: systemd-analyze verify failed: Failed to initialize manager"]
    );
}

fn daemon_plist() -> Value {
    json!({
        "Label": "org.relay.relayd",
        "ProgramArguments": ["/usr/local/relay/bin/relayd"],
        "UserName": "_relay",
        "EnvironmentVariables": {"XDG_CONFIG_HOME": "/Library/Application Support/Relay/.config"},
        "KeepAlive": {"SuccessfulExit": false},
        "ThrottleInterval": 5,
        "ExitTimeOut": 150,
        "Umask": 63,
    })
}

#[test]
fn a_plist_with_every_required_key_passes() {
    assert_eq!(
        check_plist(&daemon_plist(), Scope::System),
        Vec::<String>::new()
    );
    let mut agent = daemon_plist();
    agent.as_object_mut().unwrap().remove("UserName");
    agent["KeepAlive"] = json!(true);
    assert_eq!(check_plist(&agent, Scope::User), Vec::<String>::new());
}

#[test]
fn a_plist_missing_or_changing_a_key_is_refused() {
    let cases: [(&str, Value, &str); 7] = [
        ("ThrottleInterval", json!(10), "ThrottleInterval must be 5"),
        ("ExitTimeOut", json!(null), "ExitTimeOut must be 150"),
        ("Umask", json!(77), "Umask must be 63 (0077)"),
        (
            "KeepAlive",
            json!(false),
            "KeepAlive must be true or a dictionary",
        ),
        (
            "EnvironmentVariables",
            json!({"XDG_CONFIG_HOME": "~/.config"}),
            "EnvironmentVariables must set an absolute XDG_CONFIG_HOME",
        ),
        (
            "Sockets",
            json!({"Listeners": {"SockNodeName": "127.0.0.1", "SockServiceName": "47632"}}),
            "Sockets must be absent: relayd binds 127.0.0.1:47632 itself under launchd",
        ),
        (
            "UserName",
            json!("root"),
            "a LaunchDaemon must run under its own UserName, not root",
        ),
    ];
    for (key, value, problem) in cases {
        let mut plist = daemon_plist();
        plist[key] = value;
        assert_eq!(
            check_plist(&plist, Scope::System),
            [problem.to_owned()],
            "{key}"
        );
    }
    let mut throttled = daemon_plist();
    throttled["ProcessType"] = json!("Background");
    assert_eq!(
        check_plist(&throttled, Scope::System),
        [
            "ProcessType must not be Background: launchd throttles it, and relayd is on every request's path"
        ]
    );
    let mut leaky = daemon_plist();
    leaky["EnvironmentVariables"]["RELAY_CLIENT_TOKEN"] = json!("x");
    assert_eq!(
        check_plist(&leaky, Scope::System),
        ["EnvironmentVariables must not carry RELAY_CLIENT_TOKEN"]
    );
    assert_eq!(
        check_plist(&daemon_plist(), Scope::User),
        ["a LaunchAgent must not set UserName"]
    );
}

/// A JSON XML node as the python3 helper prints it.
fn node(tag: &str, text: &str, children: Vec<Value>) -> Value {
    json!({"tag": tag, "ns": "", "attrs": {}, "text": text, "children": children})
}

fn leaf(tag: &str, text: &str) -> Value {
    node(tag, text, Vec::new())
}

fn system_task() -> Value {
    let mut task = node(
        "Task",
        "",
        vec![
            node(
                "Triggers",
                "",
                vec![node("BootTrigger", "", vec![leaf("Enabled", "true")])],
            ),
            node(
                "Principals",
                "",
                vec![node(
                    "Principal",
                    "",
                    vec![
                        leaf("UserId", "S-1-5-19"),
                        leaf("LogonType", "ServiceAccount"),
                        leaf("RunLevel", "LeastPrivilege"),
                    ],
                )],
            ),
            node(
                "Settings",
                "",
                vec![
                    leaf("MultipleInstancesPolicy", "IgnoreNew"),
                    leaf("DisallowStartIfOnBatteries", "false"),
                    leaf("StopIfGoingOnBatteries", "false"),
                    leaf("ExecutionTimeLimit", "PT0S"),
                    node(
                        "RestartOnFailure",
                        "",
                        vec![leaf("Interval", "PT1M"), leaf("Count", "3")],
                    ),
                ],
            ),
            node(
                "Actions",
                "",
                vec![node(
                    "Exec",
                    "",
                    vec![
                        leaf(
                            "Command",
                            r"C:\Windows\System32\WindowsPowerShell\v1.0\powershell.exe",
                        ),
                        leaf(
                            "Arguments",
                            r#"-File "C:\ProgramData\Relay\bin\relayd-launcher.ps1" -Scope System"#,
                        ),
                    ],
                )],
            ),
        ],
    );
    task["ns"] = json!(TASK_NAMESPACE);
    task["attrs"] = json!({"version": "1.2"});
    task
}

#[test]
fn a_task_with_every_required_element_passes() {
    assert_eq!(
        check_task(&system_task(), Scope::System),
        Vec::<String>::new()
    );
}

#[test]
fn a_task_missing_an_element_is_refused() {
    for (index, name) in ["Triggers", "Principals", "Settings", "Actions"]
        .into_iter()
        .enumerate()
    {
        let mut task = system_task();
        task["children"].as_array_mut().unwrap().remove(index);
        let problems = check_task(&task, Scope::System);
        assert!(
            problems.contains(&format!("Task must have exactly one {name} element")),
            "{name}: {problems:?}"
        );
    }
    let mut task = system_task();
    task["ns"] = json!("");
    assert_eq!(
        check_task(&task, Scope::System),
        [format!(
            "the root element must be Task in the namespace {TASK_NAMESPACE}"
        )]
    );
    // The system task at logon, or the user task at boot, is the wrong trigger.
    let problems = check_task(&system_task(), Scope::User);
    assert!(
        problems.contains(&"Triggers must hold a LogonTrigger".to_owned()),
        "{problems:?}"
    );
    let mut task = system_task();
    task["children"][2]["children"][3]["text"] = json!("PT72H");
    assert_eq!(
        check_task(&task, Scope::System),
        ["Settings must have ExecutionTimeLimit PT0S (a daemon has no time limit)"]
    );
    let mut task = system_task();
    task["children"][1]["children"][0]["children"][0]["text"] = json!("S-1-5-18");
    assert_eq!(
        check_task(&task, Scope::System),
        ["the system task must run as LOCAL SERVICE (S-1-5-19, LogonType ServiceAccount)"]
    );
}

#[test]
fn a_launcher_that_leaves_the_token_or_never_rotates_is_refused() {
    let good = deploy_file("windows/relayd-launcher.ps1");
    let keeps_token = good.replace("Remove-Item -Path Env:RELAY_CLIENT_TOKEN", "# no");
    assert_eq!(
        check_launcher(&keeps_token),
        ["must remove RELAY_CLIENT_TOKEN from its environment"]
    );
    let no_rotation = good.replace("$MaxLogBytes = 10MB", "$MaxLogBytes = 1GB");
    assert_eq!(
        check_launcher(&no_rotation),
        ["must rotate the log over 10 MB"]
    );
}

/// The shipped launchd and Task Scheduler files, parsed by the same python3 helpers
/// deploy-check uses.
#[test]
fn the_shipped_plists_and_tasks_pass_their_checks() {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    for (file, scope) in [
        ("launchd/org.relay.relayd.daemon.plist", Scope::System),
        ("launchd/org.relay.relayd.agent.plist", Scope::User),
    ] {
        let plist = python_json(PLIST_TO_JSON, &deploy.join(file)).unwrap();
        assert_eq!(check_plist(&plist, scope), Vec::<String>::new(), "{file}");
    }
    for (file, scope) in [
        ("windows/relayd-system-task.xml", Scope::System),
        ("windows/relayd-user-task.xml", Scope::User),
    ] {
        let task = python_json(XML_TO_JSON, &deploy.join(file)).unwrap();
        assert_eq!(check_task(&task, scope), Vec::<String>::new(), "{file}");
    }
}

#[test]
fn a_task_that_is_not_well_formed_xml_is_refused() {
    let dir = std::env::temp_dir().join(format!("relay-deploy-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("broken.xml");
    std::fs::write(&file, "<Task><Triggers></Task>").unwrap();
    let err = python_json(XML_TO_JSON, &file).unwrap_err();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(err.to_string().contains("does not parse"), "{err:#}");
}
