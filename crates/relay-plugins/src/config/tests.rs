//! The typed component configurations: the issue's configuration and the documented
//! examples load as written; every refusal names the file, the component and the field.
//! (The file-level rules are also exercised through relay-proxy's reader, in its tests.)

use std::path::Path;

use expect_test::{Expect, expect};

use super::*;
use crate::policy::{Action, Agent, Matcher, Mode, Route};
use crate::redact::{Detector, RedactAction};
use crate::{Price, UsdPerMTok};

const SYSTEM: &str = "/etc/relay/plugins.toml";

fn parse(text: &str) -> Result<Plugins, PluginConfigError> {
    Plugins::parse(Some((Path::new(SYSTEM), text)), None)
}

/// The configuration of issue 11, verbatim.
const ISSUE_CONFIG: &str = r#"version = 1

[[components]]
kind = "observability"
enabled = true
[components.config]
capture_content = true
[[components.config.sinks]]
type = "file"
directory = "/var/log/relay/atof"
filename = "events-{user}.jsonl"

[[components]]
kind = "policy"
enabled = true
[components.config]
[[components.config.rules]]
event = "PreToolUse"
tool = "Bash"
input_field = "command"
regex = "rm -rf"
action = "deny"
reason = "destructive command"

[[components]]
kind = "pii_redaction"
enabled = true
[components.config]
detectors = ["email", "api_key"]
action = "redact"
"#;

#[test]
fn the_issue_configuration_loads_as_written() {
    let plugins = parse(ISSUE_CONFIG).unwrap();
    assert_eq!(plugins.enabled().count(), 3);
    let observability = plugins.observability().unwrap();
    assert!(observability.capture_content);
    assert_eq!(
        observability.sinks,
        [Sink::File(FileSink {
            directory: "/var/log/relay/atof".into(),
            filename: "events-{user}.jsonl".into(),
        })]
    );
    assert_eq!(observability.otlp, None);
    let policy = plugins.policy().unwrap();
    assert_eq!(policy.mode, Mode::Enforce);
    let [rule] = &policy.rules[..] else {
        panic!("{policy:?}");
    };
    assert_eq!(rule.action, Action::Deny);
    assert_eq!(rule.reason.as_deref(), Some("destructive command"));
    let Matcher::Hook(hook) = &rule.matcher else {
        panic!("{rule:?}");
    };
    assert_eq!(hook.event, "PreToolUse");
    assert_eq!(hook.tool.as_ref().map(|t| t.as_str()), Some("Bash"));
    let redaction = plugins.redaction().unwrap();
    assert_eq!(redaction.detectors, [Detector::Email, Detector::ApiKey]);
    assert_eq!(redaction.action, RedactAction::Redact);
    assert!(!redaction.redact_requests);
    assert!(redaction.custom.is_empty());
}

/// Every `toml` block of docs/plugins.md that starts with `version = 1` loads.
#[test]
fn the_documented_examples_load() {
    let doc = include_str!("../../../../docs/plugins.md");
    let mut examples = 0;
    let mut rest = doc;
    while let Some(start) = rest.find("```toml\n") {
        let block = &rest[start + 8..];
        let Some(end) = block.find("```") else { break };
        let text = &block[..end];
        rest = &block[end + 3..];
        if !text.starts_with("version = 1") {
            continue;
        }
        examples += 1;
        if let Err(error) = parse(text) {
            panic!("example {examples} of docs/plugins.md: {error}\n{text}");
        }
    }
    assert!(examples >= 4, "only {examples} examples found");
}

#[test]
fn defaults_of_each_kind() {
    let plugins = parse(
        "version = 1\n\
         [[components]]\nkind = \"observability\"\n\
         [[components]]\nkind = \"policy\"\n\
         [[components]]\nkind = \"pii_redaction\"\n",
    )
    .unwrap();
    assert_eq!(
        plugins.observability(),
        Some(&ObservabilityConfig::default())
    );
    assert_eq!(plugins.policy(), Some(&PolicyConfig::default()));
    assert_eq!(plugins.redaction(), Some(&RedactionConfig::default()));
    assert_eq!(RedactionConfig::default().detectors, Detector::ALL);
}

#[test]
fn http_sinks_otlp_and_prices() {
    let plugins = parse(
        r#"version = 1
[[components]]
kind = "observability"
[[components.config.sinks]]
type = "http"
url = "https://collector.example.com/atof"
headers = { "x-team" = "platform" }
header_env = { authorization = "RELAY_COLLECTOR_AUTH" }
batch_max = 50
[[components.config.sinks]]
type = "http"
url = "https://second.example.com/atof/team@example?owner=a@b"
header_env = { authorization = "RELAY_COLLECTOR_AUTH", "x-key" = "RELAY_SECOND_KEY" }
[components.config.otlp]
endpoint = "http://127.0.0.1:4318/v1/traces"
header_env = { "x-honeycomb-team" = "RELAY_OTLP_KEY" }
[components.config.prices."claude-sonnet-4-5"]
input = 3
output = 15.0
cache_read = 0.3
"#,
    )
    .unwrap();
    assert_eq!(
        plugins
            .header_env_variables()
            .into_iter()
            .collect::<Vec<_>>(),
        ["RELAY_COLLECTOR_AUTH", "RELAY_OTLP_KEY", "RELAY_SECOND_KEY"]
    );
    let config = plugins.observability().unwrap();
    let [Sink::Http(http), Sink::Http(second)] = &config.sinks[..] else {
        panic!("{config:?}");
    };
    // An @ past the authority is no user or password.
    assert_eq!(
        second.url,
        "https://second.example.com/atof/team@example?owner=a@b"
    );
    assert_eq!(http.batch_max, 50);
    assert_eq!(http.flush_ms, HttpSink::DEFAULT_FLUSH_MS);
    assert_eq!(http.timeout_ms, HttpSink::DEFAULT_TIMEOUT_MS);
    assert_eq!(http.queue, HttpSink::DEFAULT_QUEUE);
    assert_eq!(http.headers["x-team"], "platform");
    assert_eq!(http.header_env["authorization"], "RELAY_COLLECTOR_AUTH");
    let otlp = config.otlp.as_ref().unwrap();
    assert_eq!(otlp.service_name, OtlpConfig::DEFAULT_SERVICE_NAME);
    let (_, price) = config.prices.lookup("claude-sonnet-4-5").unwrap();
    assert_eq!(
        *price,
        Price {
            input: UsdPerMTok::from_micros(3_000_000),
            output: UsdPerMTok::from_micros(15_000_000),
            cache_read: Some(UsdPerMTok::from_micros(300_000)),
            cache_write_5m: None,
            cache_write_1h: None,
            reasoning: None,
        }
    );
}

#[test]
fn policy_rules_of_every_shape() {
    let plugins = parse(
        r#"version = 1
[[components]]
kind = "policy"
[components.config]
mode = "dry_run"
[[components.config.rules]]
event = "PreToolUse"
agent = "codex"
tool = "mcp__github__*"
action = "allow"
[[components.config.rules]]
event = "user_bash"
input_field = "/command"
regex = "(?i)curl .*\\| *sh"
action = "deny"
reason = "no piping downloads into a shell"
[[components.config.rules]]
route = "openai"
model = "gpt-5*"
action = "allow"
"#,
    )
    .unwrap();
    let policy = plugins.policy().unwrap();
    assert_eq!(policy.mode, Mode::DryRun);
    let Matcher::Hook(first) = &policy.rules[0].matcher else {
        panic!()
    };
    assert_eq!(first.agent, Some(Agent::Codex));
    assert!(first.tool.as_ref().is_some_and(|t| t.is_glob()));
    let Matcher::Model(third) = &policy.rules[2].matcher else {
        panic!()
    };
    assert_eq!(third.route, Some(Route::OpenAi));
}

/// Each configuration's outcome: the error message, or `ok`.
fn check(cases: &[&str], expect: Expect) {
    let mut out = String::new();
    for case in cases {
        let text = format!("version = 1\n{case}");
        let line = match parse(&text) {
            Ok(_) => "ok".to_owned(),
            Err(error) => error.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    expect.assert_eq(&out);
}

const OBS: &str = "[[components]]\nkind = \"observability\"\n[components.config]\n";
const POLICY: &str = "[[components]]\nkind = \"policy\"\n[components.config]\n";
const PII: &str = "[[components]]\nkind = \"pii_redaction\"\n[components.config]\n";

#[test]
fn observability_refusals_name_component_field_and_file() {
    let cases: Vec<String> = [
        "capture = true\n",
        "capture_content = 1\n",
        "[[components.config.sinks]]\ntype = \"file\"\ndirectory = \"/var/log/relay\"\nfilename = \"events.jsonl\"\n",
        "[[components.config.sinks]]\ntype = \"file\"\ndirectory = \"/var/log/relay\"\nfilename = \"{date}-{user}.jsonl\"\n",
        "[[components.config.sinks]]\ntype = \"file\"\ndirectory = \"/var/log/relay\"\nfilename = \"../{user}.jsonl\"\n",
        "[[components.config.sinks]]\ntype = \"file\"\ndirectory = \"relative\"\nfilename = \"{user}.jsonl\"\n",
        "[[components.config.sinks]]\ntype = \"file\"\ndirectory = \"/d\"\nfilename = \"{user}\"\nmode = \"0644\"\n",
        "[[components.config.sinks]]\ntype = \"syslog\"\n",
        "[[components.config.sinks]]\ndirectory = \"/d\"\n",
        "[[components.config.sinks]]\ntype = \"http\"\nurl = \"ftp://collector\"\n",
        "[[components.config.sinks]]\ntype = \"http\"\nurl = \"https://user:secret@collector/x\"\n",
        "[components.config.otlp]\nendpoint = \"http://token@127.0.0.1:4318\"\n",
        "[[components.config.sinks]]\ntype = \"http\"\nurl = \"https://c\"\nbatch_max = 0\n",
        "[[components.config.sinks]]\ntype = \"http\"\nurl = \"https://c\"\nheaders = { \"bad header\" = \"x\" }\n",
        "[[components.config.sinks]]\ntype = \"http\"\nurl = \"https://c\"\nheader_env = { authorization = \"1NOT_A_NAME\" }\n",
        "[[components.config.sinks]]\ntype = \"http\"\nurl = \"https://c\"\nheaders = { authorization = \"x\" }\nheader_env = { Authorization = \"TOKEN\" }\n",
        "[[components.config.sinks]]\ntype = \"http\"\nurl = \"https://c\"\nheader_env = { authorization = \"RELAY_CLIENT_TOKEN\" }\n",
        "[components.config.otlp]\nendpoint = \"https://c\"\nheader_env = { \"x-headers\" = \"ANTHROPIC_CUSTOM_HEADERS\" }\n",
        "[[components.config.sinks]]\ntype = \"http\"\nurl = \"https://c\"\nheader_env = { x = \"relay_client_token\" }\n",
        "[components.config.otlp]\nendpoint = \"https://c\"\nprotocol = \"grpc\"\n",
        "[components.config.otlp]\nservice_name = \"relay\"\n",
        "[components.config.prices.\"gpt-5.1\"]\ninput = 1.25\n",
        "[components.config.prices.\"gpt-5.1\"]\ninput = -1\noutput = 10\n",
        "[components.config.prices]\nflat = 3\n",
    ]
    .iter()
    .map(|case| format!("{OBS}{case}"))
    .collect();
    check(
        &cases.iter().map(String::as_str).collect::<Vec<_>>(),
        expect![[r#"
            /etc/relay/plugins.toml: component 1, `config.capture`: unknown key
            /etc/relay/plugins.toml: component 1, `config.capture_content`: must be a boolean
            /etc/relay/plugins.toml: component 1, `config.sinks[1].filename`: must contain {user} or {fingerprint}, so that users never share a file
            /etc/relay/plugins.toml: component 1, `config.sinks[1].filename`: must be a file name whose only placeholders are {user} and {fingerprint}
            /etc/relay/plugins.toml: component 1, `config.sinks[1].filename`: must be a file name without a directory part
            /etc/relay/plugins.toml: component 1, `config.sinks[1].directory`: must be an absolute path
            /etc/relay/plugins.toml: component 1, `config.sinks[1].mode`: unknown key
            /etc/relay/plugins.toml: component 1, `config.sinks[1].type`: must be "file" or "http"
            /etc/relay/plugins.toml: component 1, `config.sinks[1].type`: required
            /etc/relay/plugins.toml: component 1, `config.sinks[1].url`: must be an http:// or https:// URL
            /etc/relay/plugins.toml: component 1, `config.sinks[1].url`: must be a URL without a user or password (put a credential in headers or header_env)
            /etc/relay/plugins.toml: component 1, `config.otlp.endpoint`: must be a URL without a user or password (put a credential in headers or header_env)
            /etc/relay/plugins.toml: component 1, `config.sinks[1].batch_max`: must be an integer from 1 to 10000
            /etc/relay/plugins.toml: component 1, `config.sinks[1].headers.bad header`: must be keyed by a valid header name
            /etc/relay/plugins.toml: component 1, `config.sinks[1].header_env.authorization`: must be an environment variable name (letters, digits and _, not starting with a digit)
            /etc/relay/plugins.toml: component 1, `config.sinks[1].header_env.Authorization`: cannot be used together with the same header in `headers`
            /etc/relay/plugins.toml: component 1, `config.sinks[1].header_env.authorization`: must be a variable other than RELAY_CLIENT_TOKEN and ANTHROPIC_CUSTOM_HEADERS, which never reach a worker
            /etc/relay/plugins.toml: component 1, `config.otlp.header_env.x-headers`: must be a variable other than RELAY_CLIENT_TOKEN and ANTHROPIC_CUSTOM_HEADERS, which never reach a worker
            /etc/relay/plugins.toml: component 1, `config.sinks[1].header_env.x`: must be a variable other than RELAY_CLIENT_TOKEN and ANTHROPIC_CUSTOM_HEADERS, which never reach a worker
            /etc/relay/plugins.toml: component 1, `config.otlp.protocol`: unknown key
            /etc/relay/plugins.toml: component 1, `config.otlp.endpoint`: required
            /etc/relay/plugins.toml: component 1, `config.prices."gpt-5.1".output`: required
            /etc/relay/plugins.toml: component 1, `config.prices."gpt-5.1".input`: must be a price of at least 0 with at most six decimals
            /etc/relay/plugins.toml: component 1, `config.prices.flat`: must be a table
        "#]],
    );
}

#[test]
fn policy_refusals_name_component_field_and_file() {
    let cases: Vec<String> = [
        "mode = \"audit\"\n",
        "[[components.config.rules]]\nevent = \"PreToolUse\"\naction = \"deny\"\n",
        "[[components.config.rules]]\nevent = \"PreToolUse\"\naction = \"deny\"\nreason = \"  \"\n",
        "[[components.config.rules]]\nevent = \"PostToolUse\"\naction = \"deny\"\nreason = \"too late\"\n",
        "[[components.config.rules]]\nevent = \"Stop\"\naction = \"deny\"\nreason = \"keep going\"\n",
        "[[components.config.rules]]\nevent = \"tool_result\"\naction = \"deny\"\nreason = \"r\"\n",
        "[[components.config.rules]]\nevent = \"PostToolUse\"\naction = \"allow\"\n",
        "[[components.config.rules]]\nevent = \"PreToolUse\"\ntool = \"Bash\"\ninput_field = \"command\"\nregex = \"rm (-rf\"\naction = \"deny\"\nreason = \"r\"\n",
        "[[components.config.rules]]\nevent = \"PreToolUse\"\ninput_field = \"command\"\naction = \"deny\"\nreason = \"r\"\n",
        "[[components.config.rules]]\nevent = \"PreToolUse\"\nregex = \"x\"\naction = \"deny\"\nreason = \"r\"\n",
        "[[components.config.rules]]\nevent = \"PreTooluse\"\naction = \"allow\"\n",
        "[[components.config.rules]]\nevent = \"PreToolUse\"\ntool = \"mcp__[\"\naction = \"allow\"\n",
        "[[components.config.rules]]\nevent = \"PreToolUse\"\nmodel = \"gpt-5\"\naction = \"allow\"\n",
        "[[components.config.rules]]\nroute = \"bedrock\"\naction = \"allow\"\n",
        "[[components.config.rules]]\nmodel = \"*\"\naction = \"block\"\n",
        "[[components.config.rules]]\nmodel = \"*\"\n",
        "[[components.config.rules]]\naction = \"allow\"\n",
        "[[components.config.rules]]\nevent = \"PreToolUse\"\nagent = \"cursor\"\naction = \"allow\"\n",
        "[[components.config.rules]]\nevent = \"PreToolUse\"\ncomment = \"x\"\naction = \"allow\"\n",
        "[[components.config.rules]]\nmodel = \"claude-*\"\naction = \"allow\"\n[[components.config.rules]]\nmodel = \"*\"\naction = \"deny\"\n",
    ]
    .iter()
    .map(|case| format!("{POLICY}{case}"))
    .collect();
    check(
        &cases.iter().map(String::as_str).collect::<Vec<_>>(),
        expect![[r#"
            /etc/relay/plugins.toml: component 1, `config.mode`: must be "enforce" or "dry_run"
            /etc/relay/plugins.toml: component 1, `config.rules[1].reason`: required for a deny rule
            /etc/relay/plugins.toml: component 1, `config.rules[1].reason`: required for a deny rule
            /etc/relay/plugins.toml: component 1, `config.rules[1].event`: a deny rule needs an event that can block (PreToolUse, PermissionRequest, UserPromptSubmit, or pi's tool_call, user_bash)
            /etc/relay/plugins.toml: component 1, `config.rules[1].event`: a deny rule needs an event that can block (PreToolUse, PermissionRequest, UserPromptSubmit, or pi's tool_call, user_bash)
            /etc/relay/plugins.toml: component 1, `config.rules[1].event`: a deny rule needs an event that can block (PreToolUse, PermissionRequest, UserPromptSubmit, or pi's tool_call, user_bash)
            ok
            /etc/relay/plugins.toml: component 1, `config.rules[1].regex`: not a valid regular expression, or larger than the size limit
            /etc/relay/plugins.toml: component 1, `config.rules[1].regex`: required
            /etc/relay/plugins.toml: component 1, `config.rules[1].input_field`: required
            /etc/relay/plugins.toml: component 1, `config.rules[1].event`: must be a hook event name such as PreToolUse, UserPromptSubmit or pi's tool_call
            /etc/relay/plugins.toml: component 1, `config.rules[1].tool`: not a valid glob pattern
            /etc/relay/plugins.toml: component 1, `config.rules[1].model`: cannot be used together with the hook fields (event, agent, tool, input_field, regex): a rule is about a hook or about a model request
            /etc/relay/plugins.toml: component 1, `config.rules[1].route`: must be "anthropic" or "openai"
            /etc/relay/plugins.toml: component 1, `config.rules[1].action`: must be "deny" or "allow"
            /etc/relay/plugins.toml: component 1, `config.rules[1].action`: required
            /etc/relay/plugins.toml: component 1, `config.rules[1].event`: required
            /etc/relay/plugins.toml: component 1, `config.rules[1].agent`: must be "claude-code", "codex" or "pi"
            /etc/relay/plugins.toml: component 1, `config.rules[1].comment`: unknown key
            /etc/relay/plugins.toml: component 1, `config.rules[2].reason`: required for a deny rule
        "#]],
    );
}

#[test]
fn redaction_refusals_name_component_field_and_file() {
    let cases: Vec<String> = [
        "detectors = [\"email\", \"phone\"]\n",
        "detectors = \"email\"\n",
        "action = \"drop\"\n",
        "redact_requests = \"yes\"\n",
        "[[components.config.custom]]\nname = \"employee_id\"\nregex = \"EMP-[0-9]{6\"\nkeywords = [\"EMP-\"]\n",
        "[[components.config.custom]]\nname = \"employee_id\"\nregex = \"EMP-[0-9]{6}\"\n",
        "[[components.config.custom]]\nname = \"employee_id\"\nregex = \"EMP-[0-9]{6}\"\nkeywords = []\n",
        "[[components.config.custom]]\nname = \"Employee ID\"\nregex = \"EMP-[0-9]{6}\"\nkeywords = [\"EMP-\"]\n",
        "[[components.config.custom]]\nname = \"email\"\nregex = \"x\"\nkeywords = [\"x\"]\n",
        "[[components.config.custom]]\nname = \"a\"\nregex = \"x\"\nkeywords = [\"x\"]\n[[components.config.custom]]\nname = \"a\"\nregex = \"y\"\nkeywords = [\"y\"]\n",
        "[[components.config.custom]]\nname = \"a\"\nregex = \"x\"\nkeywords = [\"x\"]\nflags = \"i\"\n",
        "[[components.config.custom]]\nname = \"a\"\nregex = \"x\"\nkeywords = [\"say \\\"x\"]\n",
        "[[components.config.custom]]\nname = \"a\"\nregex = \"x{1000}{1000}{1000}\"\nkeywords = [\"x\"]\n",
        "[[components.config.custom]]\nname = \"employee_id\"\nregex = \"EMP-[0-9]{6}\"\nkeywords = [\"EMP-\"]\n",
    ]
    .iter()
    .map(|case| format!("{PII}{case}"))
    .collect();
    check(
        &cases.iter().map(String::as_str).collect::<Vec<_>>(),
        expect![[r#"
            /etc/relay/plugins.toml: component 1, `config.detectors`: must be a list of email, api_key, bearer_token, jwt, aws_access_key_id, private_key, credit_card, ip_address
            /etc/relay/plugins.toml: component 1, `config.detectors`: must be an array of strings
            /etc/relay/plugins.toml: component 1, `config.action`: must be "redact", "hash" or "mask"
            /etc/relay/plugins.toml: component 1, `config.redact_requests`: must be a boolean
            /etc/relay/plugins.toml: component 1, `config.custom[1].regex`: not a valid regular expression, or larger than the size limit
            /etc/relay/plugins.toml: component 1, `config.custom[1].keywords`: required
            /etc/relay/plugins.toml: component 1, `config.custom[1].keywords`: must be a non-empty list of non-empty strings
            /etc/relay/plugins.toml: component 1, `config.custom[1].name`: must be up to 64 lowercase letters, digits and _
            /etc/relay/plugins.toml: component 1, `config.custom[1].name`: must be a name no other detector has
            /etc/relay/plugins.toml: component 1, `config.custom[2].name`: must be a name no other detector has
            /etc/relay/plugins.toml: component 1, `config.custom[1].flags`: unknown key
            /etc/relay/plugins.toml: component 1, `config.custom[1].keywords`: must be keywords without quotes, backslashes or control characters
            /etc/relay/plugins.toml: component 1, `config.custom[1].regex`: not a valid regular expression, or larger than the size limit
            ok
        "#]],
    );
}

#[test]
fn two_enabled_components_of_a_kind_are_refused() {
    check(
        &[
            "[[components]]\nkind = \"policy\"\n[[components]]\nkind = \"policy\"\n",
            "[[components]]\nkind = \"policy\"\n[[components]]\nkind = \"policy\"\nenabled = false\n",
        ],
        expect![[r#"
            /etc/relay/plugins.toml: component 2 (policy): a second enabled component of this kind (component 1 of /etc/relay/plugins.toml is already enabled)
            ok
        "#]],
    );
}

#[test]
fn disabled_and_shadowed_components_are_not_validated() {
    let plugins = parse(
        "version = 1\n[settings]\nallow_user_components = true\n\
         [[components]]\nkind = \"policy\"\nenabled = false\n[components.config]\nrules = \"draft\"\n",
    )
    .unwrap();
    assert_eq!(plugins.components()[0].validated, None);
    assert_eq!(plugins.policy(), None);
    // A user policy shadowed by the system one is not validated either.
    let user = "version = 1\n[[components]]\nkind = \"policy\"\n[components.config]\nmode = 3\n";
    let plugins = Plugins::parse(
        Some((
            Path::new(SYSTEM),
            "version = 1\n[settings]\nallow_user_components = true\n[[components]]\nkind = \"policy\"\n",
        )),
        Some((Path::new("/home/u/.config/relay/plugins.toml"), user)),
    )
    .unwrap();
    assert_eq!(plugins.policy(), Some(&PolicyConfig::default()));
    // An effective user component is, and its errors name the user file.
    let error = Plugins::parse(
        Some((
            Path::new(SYSTEM),
            "version = 1\n[settings]\nallow_user_components = true\n",
        )),
        Some((Path::new("/home/u/.config/relay/plugins.toml"), user)),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "/home/u/.config/relay/plugins.toml: component 1, `config.mode`: must be a string"
    );
}

/// Header values may be credentials: no error quotes one, whatever is wrong around it.
#[test]
fn errors_never_quote_values() {
    let secret = "Bearer sk-live-0123456789abcdef";
    for case in [
        format!(
            "{OBS}[[components.config.sinks]]\ntype = \"http\"\nurl = \"https://c\"\nheaders = {{ authorization = \"{secret}\\n\" }}\n"
        ),
        format!("{OBS}[[components.config.sinks]]\ntype = \"http\"\nurl = \"{secret}\"\n"),
        format!(
            "{OBS}[components.config.otlp]\nendpoint = \"https://c\"\nheaders = {{ authorization = 7 }}\nservice_name = \"{secret}\"\nextra = \"{secret}\"\n"
        ),
        format!(
            "{PII}[[components.config.custom]]\nname = \"k\"\nregex = \"{secret}(\"\nkeywords = [\"x\"]\n"
        ),
    ] {
        let error = parse(&format!("version = 1\n{case}")).unwrap_err();
        let message = error.to_string();
        assert!(!message.contains("sk-live"), "{message}");
        assert!(message.starts_with(SYSTEM), "{message}");
        assert!(message.contains("component 1, `config."), "{message}");
        assert!(
            !error
                .to_activation_failed()
                .diagnostic
                .as_str()
                .contains("sk-live")
        );
    }
}

#[test]
fn sink_directories_writable_by_others_need_the_sticky_bit() {
    let dir = |mode| DirectoryFacts {
        is_dir: true,
        mode,
        owner: 0,
        euid: 0,
    };
    assert_eq!(check_sink_directory(&dir(0o755)), Ok(()));
    assert_eq!(check_sink_directory(&dir(0o700)), Ok(()));
    assert_eq!(check_sink_directory(&dir(0o775)), Ok(()));
    assert_eq!(check_sink_directory(&dir(0o1777)), Ok(()));
    assert_eq!(
        check_sink_directory(&dir(0o777)),
        Err(SinkDirectoryProblem::WritableByOthers)
    );
    assert_eq!(
        check_sink_directory(&dir(0o703)),
        Err(SinkDirectoryProblem::WritableByOthers)
    );
    assert_eq!(
        check_sink_directory(&DirectoryFacts {
            is_dir: false,
            mode: 0o600,
            owner: 0,
            euid: 0,
        }),
        Err(SinkDirectoryProblem::NotADirectory)
    );
    // Another user's directory is theirs: they could replace or remove the record file,
    // sticky bit or not, and make it writable at will.
    for mode in [0o755, 0o1755, 0o555, 0o700] {
        let theirs = DirectoryFacts {
            is_dir: true,
            mode,
            owner: 1000,
            euid: 0,
        };
        assert_eq!(
            check_sink_directory(&theirs),
            Err(SinkDirectoryProblem::OwnedByAnotherUser),
            "{mode:o}"
        );
    }
}

#[test]
fn sink_directories_are_checked_with_errors_naming_the_field() {
    let plugins = parse(
        "version = 1\n[[components]]\nkind = \"observability\"\n\
         [[components.config.sinks]]\ntype = \"http\"\nurl = \"https://c\"\n\
         [[components.config.sinks]]\ntype = \"file\"\ndirectory = \"/var/log/relay\"\nfilename = \"{user}.jsonl\"\n",
    )
    .unwrap();
    let mut asked = Vec::new();
    let mut inspect = |mode| {
        asked.clear();
        plugins.check_file_sinks(
            "alice",
            None,
            &mut Directories(|dir: &Path| {
                asked.push(dir.to_owned());
                Ok(DirectoryFacts {
                    is_dir: true,
                    mode,
                    owner: 0,
                    euid: 0,
                })
            }),
        )
    };
    assert!(inspect(0o1777).is_ok());
    let error = inspect(0o777).unwrap_err();
    assert_eq!(asked, [std::path::PathBuf::from("/var/log/relay")]);
    assert_eq!(
        error.to_string(),
        "/etc/relay/plugins.toml: component 1, `config.sinks[2].directory`: the directory is writable by other users without the sticky bit"
    );
    let error = plugins
        .check_file_sinks(
            "alice",
            None,
            &mut Directories(|_: &Path| Err(std::io::ErrorKind::NotFound.into())),
        )
        .unwrap_err();
    assert!(
        matches!(error, PluginConfigError::SinkDirectoryUnreadable { .. }),
        "{error}"
    );
    // Nothing to check without an observability component.
    assert!(
        parse("version = 1\n")
            .unwrap()
            .check_file_sinks(
                "alice",
                None,
                &mut Directories(|_: &Path| panic!("no sink"))
            )
            .is_ok()
    );
}

/// A disk of which only directories are asked about, through `inspect`: no record file is
/// there yet, and one may be created.
struct Directories<F>(F);

impl<F: FnMut(&Path) -> std::io::Result<DirectoryFacts>> SinkFiles for Directories<F> {
    fn directory(&mut self, directory: &Path) -> std::io::Result<DirectoryFacts> {
        (self.0)(directory)
    }
    fn record_file(&mut self, _: &Path) -> std::io::Result<Option<RecordFileFacts>> {
        Ok(None)
    }
    fn may_open(&mut self, _: &Path) -> std::io::Result<()> {
        Ok(())
    }
    fn may_create_in(&mut self, _: &Path) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn record_files_must_be_private_regular_files_of_the_user() {
    let file = |is_regular_file, mode, owner| RecordFileFacts {
        is_regular_file,
        mode,
        owner,
        euid: 1000,
    };
    assert_eq!(check_record_file(&file(true, 0o600, 1000)), Ok(()));
    assert_eq!(check_record_file(&file(true, 0o400, 1000)), Ok(()));
    assert_eq!(
        check_record_file(&file(true, 0o644, 1000)),
        Err(RecordFileProblem::InsecurePermissions)
    );
    assert_eq!(
        check_record_file(&file(true, 0o606, 1000)),
        Err(RecordFileProblem::InsecurePermissions)
    );
    assert_eq!(
        check_record_file(&file(true, 0o600, 1001)),
        Err(RecordFileProblem::NotOwnedByCurrentUser)
    );
    // A link, a FIFO or a directory in its place.
    assert_eq!(
        check_record_file(&file(false, 0o600, 1000)),
        Err(RecordFileProblem::NotRegularFile)
    );
}

#[test]
fn record_file_names_are_rendered_into_one_plain_component() {
    assert_eq!(
        render_filename("e-{user}.jsonl", "alice", "fp1"),
        Ok("e-alice.jsonl".to_owned())
    );
    assert_eq!(
        render_filename("{fingerprint}-{user}", "alice", "fp1"),
        Ok("fp1-alice".to_owned())
    );
    assert_eq!(
        render_filename("e.jsonl", "alice", "fp1"),
        Err(FilenameProblem::PlaceholderMissing)
    );
    for user in ["..", "a/b", ""] {
        assert_eq!(
            render_filename("{user}", user, "fp1"),
            Err(FilenameProblem::NotPlain),
            "{user}"
        );
    }
}

/// The disk as a test describes it: one directory, at most one file in it, and the
/// answers access(2) would give.
struct Disk {
    directory: DirectoryFacts,
    file: Option<RecordFileFacts>,
    may_open: Option<i32>,
    may_create: Option<i32>,
    asked: Vec<String>,
}

impl Disk {
    /// A private directory of user 1000, with nothing in it, where the user may create.
    fn new() -> Disk {
        Disk {
            directory: DirectoryFacts {
                is_dir: true,
                mode: 0o700,
                owner: 1000,
                euid: 1000,
            },
            file: None,
            may_open: None,
            may_create: None,
            asked: Vec::new(),
        }
    }

    fn with_file(mut self, mode: u32, owner: u32) -> Disk {
        self.file = Some(RecordFileFacts {
            is_regular_file: true,
            mode,
            owner,
            euid: 1000,
        });
        self
    }
}

fn answer(errno: Option<i32>) -> std::io::Result<()> {
    errno.map_or(Ok(()), |errno| {
        Err(std::io::Error::from_raw_os_error(errno))
    })
}

impl SinkFiles for Disk {
    fn directory(&mut self, directory: &Path) -> std::io::Result<DirectoryFacts> {
        self.asked
            .push(format!("directory {}", directory.display()));
        Ok(self.directory)
    }
    fn record_file(&mut self, file: &Path) -> std::io::Result<Option<RecordFileFacts>> {
        self.asked.push(format!("file {}", file.display()));
        Ok(self.file)
    }
    fn may_open(&mut self, file: &Path) -> std::io::Result<()> {
        self.asked.push(format!("open {}", file.display()));
        answer(self.may_open)
    }
    fn may_create_in(&mut self, directory: &Path) -> std::io::Result<()> {
        self.asked
            .push(format!("create in {}", directory.display()));
        answer(self.may_create)
    }
}

const EACCES: i32 = 13;

fn file_sink_plugins(filename: &str) -> Plugins {
    parse(&format!(
        "version = 1\n[[components]]\nkind = \"observability\"\n\
         [[components.config.sinks]]\ntype = \"http\"\nurl = \"https://c\"\n\
         [[components.config.sinks]]\ntype = \"file\"\ndirectory = \"/var/log/relay\"\nfilename = \"{filename}\"\n",
    ))
    .unwrap()
}

/// The worker opens its record file after this check, and `relay-doctor` runs it to say
/// whether the worker will start: what the sink would refuse, the check refuses, in the
/// sink's words, naming the component and the field.
#[test]
fn file_sinks_are_checked_as_the_sink_will_open_its_record_file() {
    let plugins = file_sink_plugins("e-{user}.jsonl");
    let check = |disk: &mut Disk| plugins.check_file_sinks("alice", Some("fp1"), disk);

    let mut fresh = Disk::new();
    assert!(check(&mut fresh).is_ok());
    assert_eq!(
        fresh.asked,
        [
            "directory /var/log/relay",
            "file /var/log/relay/e-alice.jsonl",
            "create in /var/log/relay",
        ]
    );

    // A directory of the user's own that the user may not write to (mode 0500): the open
    // would fail with EACCES, so the check does, though the directory itself is safe.
    let mut read_only = Disk {
        may_create: Some(EACCES),
        ..Disk::new()
    };
    assert_eq!(
        check(&mut read_only).unwrap_err().to_string(),
        "/etc/relay/plugins.toml: component 1, `config.sinks[2].directory`: cannot open the record file /var/log/relay/e-alice.jsonl: Permission denied (os error 13)"
    );

    // An existing file that others may read: the worker would refuse it.
    let mut shared = Disk::new().with_file(0o644, 1000);
    assert_eq!(
        check(&mut shared).unwrap_err().to_string(),
        "/etc/relay/plugins.toml: component 1, `config.sinks[2].filename`: the record file /var/log/relay/e-alice.jsonl is readable or writable by group or others"
    );
    let mut theirs = Disk::new().with_file(0o600, 1001);
    assert!(matches!(
        check(&mut theirs).unwrap_err(),
        PluginConfigError::RecordFile {
            problem: RecordFileProblem::NotOwnedByCurrentUser,
            ..
        }
    ));
    let mut link = Disk::new();
    link.file = Some(RecordFileFacts {
        is_regular_file: false,
        mode: 0o777,
        owner: 1000,
        euid: 1000,
    });
    assert!(matches!(
        check(&mut link).unwrap_err(),
        PluginConfigError::RecordFile {
            problem: RecordFileProblem::NotRegularFile,
            ..
        }
    ));
    // The user's own private file that the user may not write (mode 0400).
    let mut read_only_file = Disk {
        may_open: Some(EACCES),
        ..Disk::new().with_file(0o400, 1000)
    };
    assert_eq!(
        check(&mut read_only_file).unwrap_err().to_string(),
        "/etc/relay/plugins.toml: component 1, `config.sinks[2].filename`: cannot open the record file /var/log/relay/e-alice.jsonl: Permission denied (os error 13)"
    );

    // An existing usable file needs no write access to the directory: the open creates
    // nothing.
    let mut kept = Disk {
        may_create: Some(EACCES),
        ..Disk::new().with_file(0o600, 1000)
    };
    assert!(check(&mut kept).is_ok());
    assert!(!kept.asked.iter().any(|a| a.starts_with("create")));

    // The directory rule comes first, with its own words.
    let mut open_dir = Disk::new();
    open_dir.directory.mode = 0o777;
    assert!(matches!(
        check(&mut open_dir).unwrap_err(),
        PluginConfigError::SinkDirectory { .. }
    ));
}

/// Before the first session made the machine key, the fingerprint is not known: a file
/// named for it will be new, so only the directory's write access can be judged.
#[test]
fn a_record_file_named_for_an_unknown_fingerprint_needs_a_writable_directory() {
    let plugins = file_sink_plugins("e-{fingerprint}.jsonl");
    let mut disk = Disk {
        may_create: Some(EACCES),
        ..Disk::new()
    };
    let error = plugins
        .check_file_sinks("alice", None, &mut disk)
        .unwrap_err();
    assert_eq!(
        disk.asked,
        ["directory /var/log/relay", "create in /var/log/relay"]
    );
    assert_eq!(
        error.to_string(),
        "/etc/relay/plugins.toml: component 1, `config.sinks[2].directory`: cannot open the record file /var/log/relay/e-{fingerprint}.jsonl: Permission denied (os error 13)"
    );
    // A name without the fingerprint is known, and its file looked at.
    let mut disk = Disk::new().with_file(0o644, 1000);
    assert!(
        file_sink_plugins("e-{user}.jsonl")
            .check_file_sinks("alice", None, &mut disk)
            .is_err()
    );
}
