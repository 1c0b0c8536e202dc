//! The policy component's configuration: `mode` and the ordered `rules`.

use regex::RegexBuilder;

use super::PluginConfigError;
use super::fields::Table;
use crate::policy::{
    Action, Agent, HookMatch, InputField, InputMatch, Matcher, Mode, ModelMatch, NamePattern,
    PolicyConfig, Route, Rule, is_blocking_event_name, is_hook_event,
};

/// The compiled size a rule's regex may reach (the regex crate's default is 10 MiB): a rule
/// runs on every hook, so it stays small.
pub(crate) const REGEX_SIZE_LIMIT: usize = 1 << 20;

const HOOK_KEYS: &[&str] = &["event", "agent", "tool", "input_field", "regex"];
const MODEL_KEYS: &[&str] = &["model", "route"];

pub(super) fn parse(config: &Table<'_>) -> Result<PolicyConfig, PluginConfigError> {
    config.only(&["mode", "rules"])?;
    let mode = match config.str("mode")? {
        None | Some("enforce") => Mode::Enforce,
        Some("dry_run") => Mode::DryRun,
        Some(_) => return Err(config.place.wrong("mode", "\"enforce\" or \"dry_run\"")),
    };
    let rules = config
        .tables("rules")?
        .iter()
        .map(parse_rule)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(PolicyConfig { mode, rules })
}

fn parse_rule(rule: &Table<'_>) -> Result<Rule, PluginConfigError> {
    let mut known = vec!["action", "reason"];
    known.extend(HOOK_KEYS);
    known.extend(MODEL_KEYS);
    rule.only(&known)?;
    let action = match rule.required_str("action")? {
        "deny" => Action::Deny,
        "allow" => Action::Allow,
        _ => return Err(rule.place.wrong("action", "\"deny\" or \"allow\"")),
    };
    let reason = match rule.str("reason")? {
        Some(reason) if !reason.trim().is_empty() => Some(reason.to_owned()),
        Some(_) if action == Action::Allow => None,
        _ if action == Action::Deny => {
            return Err(PluginConfigError::DenyWithoutReason {
                path: rule.place.path(),
                field: rule.place.field("reason"),
            });
        }
        _ => None,
    };
    let hook_key = HOOK_KEYS.iter().find(|k| rule.has(k));
    let model_key = MODEL_KEYS.iter().find(|k| rule.has(k));
    let matcher = match (hook_key, model_key) {
        (Some(_), Some(model_key)) => {
            return Err(PluginConfigError::Conflict {
                path: rule.place.path(),
                field: rule.place.field(model_key),
                other: "the hook fields (event, agent, tool, input_field, regex): a rule is about a hook or about a model request",
            });
        }
        (None, None) => return Err(rule.place.missing("event")),
        (Some(_), None) => Matcher::Hook(parse_hook(rule, action)?),
        (None, Some(_)) => Matcher::Model(parse_model(rule)?),
    };
    Ok(Rule {
        matcher,
        action,
        reason,
    })
}

fn parse_hook(rule: &Table<'_>, action: Action) -> Result<HookMatch, PluginConfigError> {
    let event = rule.required_str("event")?;
    if !is_hook_event(event) {
        return Err(rule.place.wrong(
            "event",
            "a hook event name such as PreToolUse, UserPromptSubmit or pi's tool_call",
        ));
    }
    if action == Action::Deny && !is_blocking_event_name(event) {
        return Err(PluginConfigError::DenyOnNonBlockingEvent {
            path: rule.place.path(),
            field: rule.place.field("event"),
        });
    }
    let agent = match rule.str("agent")? {
        None => None,
        Some(text) => Some(Agent::parse(text).ok_or_else(|| {
            rule.place
                .wrong("agent", "\"claude-code\", \"codex\" or \"pi\"")
        })?),
    };
    let tool = rule
        .str("tool")?
        .map(|text| name_pattern(rule, "tool", text))
        .transpose()?;
    let input = match (rule.str("input_field")?, rule.str("regex")?) {
        (None, None) => None,
        (Some(_), None) => return Err(rule.place.missing("regex")),
        (None, Some(_)) => return Err(rule.place.missing("input_field")),
        (Some(""), Some(_)) => {
            return Err(rule
                .place
                .wrong("input_field", "a key or a JSON pointer (/a/b)"));
        }
        (Some(field), Some(regex)) => Some(InputMatch {
            field: InputField::parse(field),
            regex: RegexBuilder::new(regex)
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|_| PluginConfigError::BadRegex {
                    path: rule.place.path(),
                    field: rule.place.field("regex"),
                })?,
        }),
    };
    Ok(HookMatch {
        event: event.to_owned(),
        agent,
        tool,
        input,
    })
}

fn parse_model(rule: &Table<'_>) -> Result<ModelMatch, PluginConfigError> {
    let model = rule
        .str("model")?
        .map(|text| name_pattern(rule, "model", text))
        .transpose()?;
    let route = match rule.str("route")? {
        None => None,
        Some(text) => Some(
            Route::parse(text)
                .ok_or_else(|| rule.place.wrong("route", "\"anthropic\" or \"openai\""))?,
        ),
    };
    Ok(ModelMatch { model, route })
}

fn name_pattern(rule: &Table<'_>, key: &str, text: &str) -> Result<NamePattern, PluginConfigError> {
    if text.is_empty() {
        return Err(rule.place.wrong(key, "a non-empty name or glob"));
    }
    NamePattern::parse(text).map_err(|_| PluginConfigError::BadGlob {
        path: rule.place.path(),
        field: rule.place.field(key),
    })
}
