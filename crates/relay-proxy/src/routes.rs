//! The daemon's HTTP paths (SPEC §3.1–§3.4), classified by method and path, and the
//! upstream URL rules of §3.2.

use std::borrow::Cow;

use http::{Method, Uri};

use crate::config::{BaseUrl, DEFAULT_OPENAI_BASE_URL, UpstreamConfig};
use crate::headers::ModelHeaders;

/// A provider API family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    Anthropic,
    OpenAi,
}

impl Family {
    /// The `route` field of request log events.
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Anthropic => "anthropic",
            Family::OpenAi => "openai",
        }
    }
}

/// The harness a hook route serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Agent {
    ClaudeCode,
    Codex,
    Pi,
}

impl Agent {
    pub fn as_str(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
            Agent::Codex => "codex",
            Agent::Pi => "pi",
        }
    }

    /// The same harness in the plugins' vocabulary.
    pub fn plugin_agent(self) -> relay_plugins::Agent {
        match self {
            Agent::ClaudeCode => relay_plugins::Agent::ClaudeCode,
            Agent::Codex => relay_plugins::Agent::Codex,
            Agent::Pi => relay_plugins::Agent::Pi,
        }
    }

    /// True for the events that open a harness session, which the harness sends while its
    /// MCP server is still registering (§3.5): they wait for the session's worker.
    pub fn is_opening_event(self, event: &str) -> bool {
        match self {
            Agent::ClaudeCode | Agent::Codex => {
                matches!(event, "SessionStart" | "UserPromptSubmit")
            }
            Agent::Pi => matches!(event, "session_start" | "input"),
        }
    }

    /// The answer when no worker takes the hook (§3.4).
    pub fn pass_through_answer(self) -> &'static [u8] {
        match self {
            Agent::ClaudeCode => br#"{"continue":true}"#,
            Agent::Codex | Agent::Pi => b"{}",
        }
    }
}

/// What a request asks for, by its method and path alone: the class of an HTTP path,
/// not a route in the broker's sense (a fingerprint's worker or pass-through).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathClass {
    /// `HEAD /`, answered locally (Claude Code probes it).
    HeadRoot,
    Healthz,
    Workers,
    WorkersStatus,
    /// `/_relay/v1/workers/<id>/status`; `None` when the id is not a UUID.
    WorkerStatus(Option<uuid::Uuid>),
    RouteStatus,
    Metrics,
    ControlMcp,
    ControlWorker,
    /// A provider request. `responses` marks the Responses paths, which answer WebSocket
    /// probes with 426.
    Model {
        family: ModelFamily,
        responses: bool,
    },
    Hook(Agent),
    /// The path exists, but not for this method; `allow` is the `Allow` header's value.
    MethodNotAllowed {
        allow: &'static str,
    },
    NotFound,
}

/// How a model request's family is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelFamily {
    Fixed(Family),
    /// `/backend-api/codex/responses`: always the ChatGPT Codex base.
    ChatGptCodex,
    /// `GET /v1/models`: Anthropic when the request carries `anthropic-version`.
    Models,
}

impl PathClass {
    pub fn classify(method: &Method, path: &str) -> PathClass {
        // The status routes answer HEAD as GET, without the body (hyper leaves it out), as
        // monitors expect of any GET resource.
        let read = (method == Method::GET || method == Method::HEAD, "GET, HEAD");
        let get = (method == Method::GET, "GET");
        let post = (method == Method::POST, "POST");
        let only = |(ok, allow): (bool, &'static str), route: PathClass| {
            if ok {
                route
            } else {
                PathClass::MethodNotAllowed { allow }
            }
        };
        match path {
            "/" if method == Method::HEAD => PathClass::HeadRoot,
            "/healthz" => only(read, PathClass::Healthz),
            "/metrics" => only(read, PathClass::Metrics),
            "/_relay/v1/workers" => only(read, PathClass::Workers),
            "/_relay/v1/workers/status" => only(read, PathClass::WorkersStatus),
            "/_relay/v1/route" => only(read, PathClass::RouteStatus),
            "/_relay/control/v1/mcp" => only(get, PathClass::ControlMcp),
            "/_relay/control/v1/worker" => only(get, PathClass::ControlWorker),
            "/v1/messages" | "/v1/messages/count_tokens" => only(
                post,
                PathClass::Model {
                    family: ModelFamily::Fixed(Family::Anthropic),
                    responses: false,
                },
            ),
            "/v1/responses" | "/responses" => PathClass::Model {
                family: ModelFamily::Fixed(Family::OpenAi),
                responses: true,
            },
            "/backend-api/codex/responses" => PathClass::Model {
                family: ModelFamily::ChatGptCodex,
                responses: true,
            },
            "/v1/chat/completions" | "/chat/completions" => only(
                post,
                PathClass::Model {
                    family: ModelFamily::Fixed(Family::OpenAi),
                    responses: false,
                },
            ),
            "/v1/models" | "/models" => only(
                get,
                PathClass::Model {
                    family: ModelFamily::Models,
                    responses: false,
                },
            ),
            "/hooks/claude-code" => only(post, PathClass::Hook(Agent::ClaudeCode)),
            "/hooks/codex" => only(post, PathClass::Hook(Agent::Codex)),
            "/hooks/pi" => only(post, PathClass::Hook(Agent::Pi)),
            _ => match path
                .strip_prefix("/_relay/v1/workers/")
                .and_then(|rest| rest.strip_suffix("/status"))
            {
                Some(id) => only(
                    read,
                    PathClass::WorkerStatus(uuid::Uuid::try_parse(id).ok()),
                ),
                None => PathClass::NotFound,
            },
        }
    }
}

/// Where a model request goes upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTarget {
    pub family: Family,
    pub uri: Uri,
    /// Which base the destination is: the daemon's keys only ever go to the configured
    /// base of their own family (§3.2).
    pub base: UpstreamBase,
}

/// The base a model request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamBase {
    /// The configured base of the request's family: `openai_base_url` or
    /// `anthropic_base_url`.
    Configured,
    /// `chatgpt_codex_base_url` (`/backend-api/codex/responses`, or a ChatGPT sign-in).
    ChatGptCodex,
    /// A base the caller selected with `x-relay-upstream-base-url`.
    Selected,
}

/// Why a model request has no upstream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("upstream base {0:?} is not in upstream.allowed_base_urls")]
    NotAllowed(String),
    #[error("the upstream URL could not be built")]
    BadUri,
}

/// Resolves the upstream of a model request per §3.2: family, ChatGPT sign-in rerouting,
/// a caller-selected base (only from `allowed_base_urls`), and the URL joining rule.
/// The request's query is kept verbatim, and so is its path where the base adds nothing to it.
pub fn upstream_target(
    config: &UpstreamConfig,
    family: ModelFamily,
    headers: &ModelHeaders<'_>,
    selected_base: Option<&str>,
    request: &Uri,
) -> Result<UpstreamTarget, TargetError> {
    let path = request.path();
    let family_kind = match family {
        ModelFamily::Fixed(f) => f,
        ModelFamily::ChatGptCodex => Family::OpenAi,
        ModelFamily::Models if headers.anthropic_version => Family::Anthropic,
        ModelFamily::Models => Family::OpenAi,
    };
    let configured = match family_kind {
        Family::Anthropic => &config.anthropic_base_url,
        Family::OpenAi => &config.openai_base_url,
    };
    // The family's configured base may be named too (pi names its provider's base on every
    // request): it is where the request would go anyway. It still counts as selected for
    // the rules that care (no daemon key, no ChatGPT routing).
    let selected = match selected_base {
        Some(text) => {
            let base = BaseUrl::parse(text).map_err(|_| TargetError::NotAllowed(text.into()))?;
            if base != *configured && !config.allowed_base_urls.contains(&base) {
                return Err(TargetError::NotAllowed(text.into()));
            }
            Some(base)
        }
        None => None,
    };
    let chatgpt = family == ModelFamily::ChatGptCodex
        || (family_kind == Family::OpenAi
            && selected.is_none()
            && config.openai_base_url.as_str() == DEFAULT_OPENAI_BASE_URL
            && headers.chatgpt_account_id
            && headers.authorization.is_some_and(is_bearer_jwt));
    let (base, joined_path) = if chatgpt {
        let rest = path
            .strip_prefix("/backend-api/codex")
            .or_else(|| path.strip_prefix("/v1"))
            .unwrap_or(path);
        (
            &config.chatgpt_codex_base_url,
            concat(config.chatgpt_codex_base_url.path(), rest),
        )
    } else {
        let base = selected.as_ref().unwrap_or(configured);
        let joined = match family_kind {
            Family::Anthropic => {
                // `/models` is OpenAI's spelling; Anthropic serves models under /v1.
                let path = if path == "/models" {
                    "/v1/models"
                } else {
                    path
                };
                concat(base.path(), path)
            }
            Family::OpenAi if selected.is_some() => join_selected_openai(base.path(), path),
            Family::OpenAi => join_openai(base.path(), path),
        };
        (base, joined)
    };
    // The base's scheme and authority are shared, not reparsed, and so is the request's
    // own path and query when the joined path is the request's (the usual bases, `/v1`
    // and none, make it so): only a new path is parsed.
    let path_and_query = match request.path_and_query() {
        Some(same) if joined_path == path => same.clone(),
        _ => {
            let mut text = joined_path.into_owned();
            if let Some(query) = request.query() {
                text.push('?');
                text.push_str(query);
            }
            http::uri::PathAndQuery::try_from(text).map_err(|_| TargetError::BadUri)?
        }
    };
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(
        base.uri()
            .scheme()
            .cloned()
            .unwrap_or(http::uri::Scheme::HTTPS),
    );
    parts.authority = base.uri().authority().cloned();
    parts.path_and_query = Some(path_and_query);
    let uri = http::Uri::from_parts(parts).map_err(|_| TargetError::BadUri)?;
    Ok(UpstreamTarget {
        family: family_kind,
        uri,
        base: if chatgpt {
            UpstreamBase::ChatGptCodex
        } else if selected.is_some() {
            UpstreamBase::Selected
        } else {
            UpstreamBase::Configured
        },
    })
}

/// The OpenAI joining rule: a base ending in `/v1` and a path starting with `/v1/` share
/// one `/v1`; if neither has it, it is inserted; otherwise they are concatenated.
fn join_openai<'a>(base_path: &str, path: &'a str) -> Cow<'a, str> {
    match (base_path.strip_suffix("/v1"), path.starts_with("/v1/")) {
        (Some(before_v1), true) => concat(before_v1, path),
        (None, false) => Cow::Owned(format!("{base_path}/v1{path}")),
        _ => concat(base_path, path),
    }
}

/// A base the caller named (pi's provider base) is the one it would call without Relay,
/// with its own path after it: a `/v1` both carry is given once, and none is added, so an
/// OpenAI-compatible base such as `…/v1beta/openai` gets `…/v1beta/openai/chat/completions`.
fn join_selected_openai<'a>(base_path: &str, path: &'a str) -> Cow<'a, str> {
    match (base_path.strip_suffix("/v1"), path.starts_with("/v1/")) {
        (Some(before_v1), true) => concat(before_v1, path),
        _ => concat(base_path, path),
    }
}

/// `Bearer eyJ…`: a JWT as a bearer credential, the scheme's name in any case and any number
/// of spaces after it (RFC 9110).
fn is_bearer_jwt(value: &http::HeaderValue) -> bool {
    let value = value.as_bytes();
    value.split_at_checked(6).is_some_and(|(scheme, rest)| {
        let token = rest.trim_ascii_start();
        scheme.eq_ignore_ascii_case(b"bearer")
            && token.len() < rest.len()
            && token.starts_with(b"eyJ")
    })
}

/// `base_path` then `path`, borrowing `path` when the base adds nothing.
fn concat<'a>(base_path: &str, path: &'a str) -> Cow<'a, str> {
    if base_path.is_empty() {
        Cow::Borrowed(path)
    } else {
        Cow::Owned(format!("{base_path}{path}"))
    }
}

#[cfg(test)]
mod tests;
