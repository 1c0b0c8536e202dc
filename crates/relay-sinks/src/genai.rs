//! Span names and attributes after the OpenTelemetry GenAI semantic conventions (the
//! release in [`GENAI_SEMCONV_VERSION`]) plus the OpenInference attributes that Phoenix and
//! Langfuse read. A pure mapping from plain facts: no IO, no clock.

use relay_plugins::{GENAI_SEMCONV_VERSION, Usage};

use crate::otlp::Attribute;

/// The GenAI operation of a span (`gen_ai.operation.name`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// A model request (`chat`); OpenInference kind `LLM`.
    Chat,
    /// A tool call (`execute_tool`); OpenInference kind `TOOL`.
    ExecuteTool,
    /// A harness session (`invoke_agent`); OpenInference kind `AGENT`.
    InvokeAgent,
}

impl Operation {
    /// The `gen_ai.operation.name` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Chat => "chat",
            Operation::ExecuteTool => "execute_tool",
            Operation::InvokeAgent => "invoke_agent",
        }
    }

    /// The `openinference.span.kind` value.
    pub fn openinference_kind(self) -> &'static str {
        match self {
            Operation::Chat => "LLM",
            Operation::ExecuteTool => "TOOL",
            Operation::InvokeAgent => "AGENT",
        }
    }
}

/// What is known about a scope when its span is exported. Every field but `operation` is
/// optional; what is absent is not emitted.
#[derive(Debug, Clone, Copy)]
pub struct GenAiFacts<'a> {
    /// The operation.
    pub operation: Operation,
    /// `gen_ai.provider.name`, e.g. `anthropic`, `openai`.
    pub provider: Option<&'a str>,
    /// `openai.api.type` of a request to one of OpenAI's APIs (`chat_completions`,
    /// `responses`).
    pub openai_api_type: Option<&'a str>,
    /// The model asked for.
    pub request_model: Option<&'a str>,
    /// The model that answered.
    pub response_model: Option<&'a str>,
    /// The provider's id of the answer.
    pub response_id: Option<&'a str>,
    /// Why generation stopped, per choice.
    pub finish_reasons: &'a [&'a str],
    /// The provider's host (`server.address`).
    pub server_address: Option<&'a str>,
    /// The provider's port (`server.port`).
    pub server_port: Option<u64>,
    /// The normalised usage of the exchange.
    pub usage: Option<&'a Usage>,
    /// The harness session id (`gen_ai.conversation.id`, OpenInference `session.id`).
    pub conversation_id: Option<&'a str>,
    /// The harness (`gen_ai.agent.name`), e.g. `claude-code`.
    pub agent_name: Option<&'a str>,
    /// The tool's name.
    pub tool_name: Option<&'a str>,
    /// The tool call id.
    pub tool_call_id: Option<&'a str>,
    /// The request asked for a streamed answer (`gen_ai.request.stream`, set only then).
    pub stream: bool,
    /// Seconds from the request to the answer's first chunk, for a streamed answer
    /// (`gen_ai.response.time_to_first_chunk`).
    pub time_to_first_chunk: Option<f64>,
}

impl<'a> GenAiFacts<'a> {
    /// Facts with only the operation.
    pub fn new(operation: Operation) -> Self {
        GenAiFacts {
            operation,
            provider: None,
            openai_api_type: None,
            request_model: None,
            response_model: None,
            response_id: None,
            finish_reasons: &[],
            server_address: None,
            server_port: None,
            usage: None,
            conversation_id: None,
            agent_name: None,
            tool_name: None,
            tool_call_id: None,
            stream: false,
            time_to_first_chunk: None,
        }
    }
}

/// The span name the conventions prescribe: `{operation} {model}` for a model request,
/// `execute_tool {tool}`, `invoke_agent {agent}`; the bare operation when the detail is
/// unknown.
pub fn span_name(facts: &GenAiFacts<'_>) -> String {
    let detail = match facts.operation {
        Operation::Chat => facts.request_model.or(facts.response_model),
        Operation::ExecuteTool => facts.tool_name,
        Operation::InvokeAgent => facts.agent_name,
    };
    match detail {
        Some(detail) => format!("{} {detail}", facts.operation.as_str()),
        None => facts.operation.as_str().to_owned(),
    }
}

/// The GenAI attributes of [`GENAI_SEMCONV_VERSION`] followed by the OpenInference ones,
/// in a fixed order.
pub fn genai_attributes(facts: &GenAiFacts<'_>) -> Vec<Attribute> {
    let mut out = Vec::with_capacity(24);
    out.push(Attribute::str(
        "gen_ai.operation.name",
        facts.operation.as_str(),
    ));
    let optional = [
        ("gen_ai.provider.name", facts.provider),
        ("gen_ai.request.model", facts.request_model),
        ("gen_ai.response.model", facts.response_model),
        ("gen_ai.response.id", facts.response_id),
        ("gen_ai.conversation.id", facts.conversation_id),
        ("gen_ai.agent.name", facts.agent_name),
        ("gen_ai.tool.name", facts.tool_name),
        ("gen_ai.tool.call.id", facts.tool_call_id),
        ("openai.api.type", facts.openai_api_type),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            out.push(Attribute::str(key, value));
        }
    }
    if let Some(address) = facts.server_address {
        out.push(Attribute::str("server.address", address));
    }
    if let Some(port) = facts.server_port {
        out.push(Attribute::int("server.port", port));
    }
    if facts.stream {
        out.push(Attribute::bool("gen_ai.request.stream", true));
        if let Some(seconds) = facts.time_to_first_chunk {
            out.push(Attribute::float(
                "gen_ai.response.time_to_first_chunk",
                seconds,
            ));
        }
    }
    if !facts.finish_reasons.is_empty() {
        out.push(Attribute::strs(
            "gen_ai.response.finish_reasons",
            facts.finish_reasons,
        ));
    }
    if let Some(usage) = facts.usage {
        for (key, value) in usage.genai_attributes() {
            out.push(Attribute::int(key, value));
        }
    }
    // OpenInference.
    out.push(Attribute::str(
        "openinference.span.kind",
        facts.operation.openinference_kind(),
    ));
    if let Some(model) = facts.response_model.or(facts.request_model) {
        out.push(Attribute::str("llm.model_name", model));
    }
    if let Some(provider) = facts.provider {
        out.push(Attribute::str("llm.provider", provider));
    }
    if let Some(usage) = facts.usage {
        let prompt = usage.genai_input_tokens();
        let completion = usage.genai_output_tokens();
        out.push(Attribute::int("llm.token_count.prompt", prompt));
        out.push(Attribute::int("llm.token_count.completion", completion));
        out.push(Attribute::int(
            "llm.token_count.total",
            prompt.saturating_add(completion),
        ));
        out.push(Attribute::int(
            "llm.token_count.prompt_details.cache_read",
            usage.cache_read,
        ));
        out.push(Attribute::int(
            "llm.token_count.prompt_details.cache_write",
            usage.cache_write(),
        ));
        if let Some(reasoning) = usage.reasoning {
            out.push(Attribute::int(
                "llm.token_count.completion_details.reasoning",
                reasoning,
            ));
        }
    }
    if let Some(tool) = facts.tool_name {
        out.push(Attribute::str("tool.name", tool));
    }
    if let Some(session) = facts.conversation_id {
        out.push(Attribute::str("session.id", session));
    }
    out
}

/// The conventions release followed, re-exported so that docs and spans cite one constant.
pub const SEMCONV_VERSION: &str = GENAI_SEMCONV_VERSION;

#[cfg(test)]
mod tests;
