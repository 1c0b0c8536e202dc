//! The MCP side of `relay-mcp` (SPEC §6): newline-delimited JSON-RPC 2.0 on stdin and stdout.
//!
//! [`Server`] is the pure core: one input line in, at most one output line out, no IO and no clock.
//! [`serve`] is the thin async shell: it reads bounded lines, writes and flushes each answer, and holds `initialize` answers until the route is settled or `max_wait` has passed.
//! Relay offers no tools: the server exists so that the harness starts `relay-mcp` once per session and keeps it alive.
//! Nothing here writes anything but JSON-RPC responses to stdout.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

#[cfg(test)]
mod tests;

/// The longest line accepted on stdin, not counting its `\n` (SPEC §6: at most 1 MiB per line).
pub(crate) const MAX_LINE_BYTES: usize = 1024 * 1024;

/// The name `initialize` reports in `serverInfo`.
const SERVER_NAME: &str = "relay";

/// Sent if a response cannot be serialized, which our response types never cause.
const INTERNAL_ERROR_LINE: &[u8] =
    b"{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32603,\"message\":\"internal error\"}}\n";

/// A JSON-RPC request id, echoed back exactly as parsed.
///
/// Numbers keep the form `serde_json` parsed them in: integers that fit `i64`/`u64` round-trip exactly.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub(crate) enum Id {
    Number(serde_json::Number),
    String(String),
    /// The id of every error answer whose request id could not be read (MCP refuses it in
    /// a request).
    Null,
}

/// The MCP protocol revisions `initialize` can agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProtocolVersion {
    V2025_11_25,
    V2025_06_18,
    V2025_03_26,
}

impl ProtocolVersion {
    /// The revision answered when the client asks for one we do not know.
    pub(crate) const LATEST: ProtocolVersion = ProtocolVersion::V2025_11_25;

    /// Echoes a revision we support, and offers [`ProtocolVersion::LATEST`] for anything else.
    pub(crate) fn negotiate(requested: &str) -> ProtocolVersion {
        match requested {
            "2025-11-25" => ProtocolVersion::V2025_11_25,
            "2025-06-18" => ProtocolVersion::V2025_06_18,
            "2025-03-26" => ProtocolVersion::V2025_03_26,
            _ => ProtocolVersion::LATEST,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ProtocolVersion::V2025_11_25 => "2025-11-25",
            ProtocolVersion::V2025_06_18 => "2025-06-18",
            ProtocolVersion::V2025_03_26 => "2025-03-26",
        }
    }
}

/// An `initialize` request whose answer the caller holds back; answer it with [`Server::initialize_response`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PendingInitialize {
    pub(crate) id: Id,
    pub(crate) protocol_version: ProtocolVersion,
}

/// What one input line asks the caller to write.
#[derive(Debug, PartialEq)]
pub(crate) enum Reply {
    /// Nothing: a notification, a blank line, or a response from the client.
    None,
    /// One complete response line, ending in `\n`.
    Some(Vec<u8>),
    /// A valid `initialize` the caller asked to defer ([`Server::set_defer_initialize`]).
    Defer(PendingInitialize),
}

/// Why a line got an error answer instead of a result; each maps to one JSON-RPC error code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RpcError {
    /// Our own words rather than `serde_json`'s, which are not all lowercase.
    #[error("parse error: {reason} at column {column}")]
    Parse { reason: &'static str, column: usize },
    #[error("invalid request: line longer than {limit} bytes")]
    LineTooLong { limit: usize },
    #[error("invalid request: batches are not supported since mcp 2025-06-18")]
    Batch,
    #[error("invalid request: a message must be a json object, got {kind}")]
    NotAnObject { kind: &'static str },
    #[error("invalid request: \"jsonrpc\" must be \"2.0\"")]
    WrongVersion,
    #[error("invalid request: \"id\" must be a string or an integer, got {kind}")]
    BadId { kind: &'static str },
    #[error("invalid request: \"method\" must be a string")]
    MissingMethod,
    #[error("invalid request: \"params\" must be an object or an array, got {kind}")]
    BadParams { kind: &'static str },
    #[error("method not found: {method}")]
    MethodNotFound { method: String },
    #[error("invalid params: initialize needs a string params.protocolVersion")]
    MissingProtocolVersion,
}

impl RpcError {
    /// The JSON-RPC 2.0 error code for this error.
    pub(crate) fn code(&self) -> i64 {
        match self {
            RpcError::Parse { .. } => -32700,
            RpcError::LineTooLong { .. }
            | RpcError::Batch
            | RpcError::NotAnObject { .. }
            | RpcError::WrongVersion
            | RpcError::BadId { .. }
            | RpcError::MissingMethod
            | RpcError::BadParams { .. } => -32600,
            RpcError::MethodNotFound { .. } => -32601,
            RpcError::MissingProtocolVersion => -32602,
        }
    }
}

/// The MCP server core: turns one input line into at most one output line, without IO.
#[derive(Debug, Default)]
pub(crate) struct Server {
    defer_initialize: bool,
}

impl Server {
    /// A server that answers `initialize` at once.
    pub(crate) fn new() -> Server {
        Server::default()
    }

    /// While set, a valid `initialize` yields [`Reply::Defer`] instead of its answer.
    pub(crate) fn set_defer_initialize(&mut self, defer: bool) {
        self.defer_initialize = defer;
    }

    /// Handles one line read from stdin, without its `\n`.
    pub(crate) fn handle_line(&mut self, line: &[u8]) -> Reply {
        // A blank line carries no message; the stdio transport never sends one, and a stray newline is not worth an error.
        if line.iter().all(u8::is_ascii_whitespace) {
            return Reply::None;
        }
        let message = match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(message)) => message,
            Ok(Value::Array(_)) => return Reply::Some(error_line(&Id::Null, &RpcError::Batch)),
            Ok(other) => {
                let error = RpcError::NotAnObject {
                    kind: kind_of(&other),
                };
                return Reply::Some(error_line(&Id::Null, &error));
            }
            Err(error) => {
                let reason = match error.classify() {
                    serde_json::error::Category::Eof => "the line ends inside a json value",
                    serde_json::error::Category::Syntax
                    | serde_json::error::Category::Data
                    | serde_json::error::Category::Io => "invalid json",
                };
                let error = RpcError::Parse {
                    reason,
                    column: error.column(),
                };
                return Reply::Some(error_line(&Id::Null, &error));
            }
        };
        match self.handle_message(&message) {
            Ok(reply) => reply,
            Err((id, error)) => Reply::Some(error_line(&id, &error)),
        }
    }

    /// The answer to an over-long line, which is never parsed (its id cannot be known).
    pub(crate) fn line_too_long_response() -> Vec<u8> {
        error_line(
            &Id::Null,
            &RpcError::LineTooLong {
                limit: MAX_LINE_BYTES,
            },
        )
    }

    /// The `initialize` answer line for `id`, agreeing on `protocol_version`.
    pub(crate) fn initialize_response(id: &Id, protocol_version: ProtocolVersion) -> Vec<u8> {
        result_line(
            id,
            &InitializeResult {
                protocol_version: protocol_version.as_str(),
                capabilities: Capabilities {
                    tools: EmptyObject {},
                },
                server_info: ServerInfo {
                    name: SERVER_NAME,
                    version: env!("CARGO_PKG_VERSION"),
                },
            },
        )
    }

    fn handle_message(&mut self, message: &Map<String, Value>) -> Result<Reply, (Id, RpcError)> {
        // We never send requests, so a response from the client (an id, no method, and a
        // result or an error) answers nothing of ours; answering it, even for an id MCP
        // refuses in requests (JSON-RPC's parse-error answers carry id null), would risk an
        // endless exchange of errors.
        if message.contains_key("id")
            && !message.contains_key("method")
            && (message.contains_key("result") || message.contains_key("error"))
        {
            return Ok(Reply::None);
        }
        let id = match message.get("id") {
            None => None,
            // MCP narrows JSON-RPC's ids to strings and integers, never null.
            Some(Value::Number(number)) if number.is_i64() || number.is_u64() => {
                Some(Id::Number(number.clone()))
            }
            Some(Value::String(string)) => Some(Id::String(string.clone())),
            Some(other) => {
                let kind = kind_of(other);
                return Err((Id::Null, RpcError::BadId { kind }));
            }
        };
        // Invalid messages are answered with the id when it could be read, even without one
        // (JSON-RPC 2.0 answers an invalid request with id null).
        let error_id = id.clone().unwrap_or(Id::Null);
        if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err((error_id, RpcError::WrongVersion));
        }
        let Some(Value::String(method)) = message.get("method") else {
            return Err((error_id, RpcError::MissingMethod));
        };
        let params = match message.get("params") {
            None => None,
            Some(params @ (Value::Object(_) | Value::Array(_))) => Some(params),
            Some(other) => {
                let kind = kind_of(other);
                return Err((error_id, RpcError::BadParams { kind }));
            }
        };
        // A notification never gets an answer, whatever its method.
        let Some(id) = id else {
            return Ok(Reply::None);
        };
        match method.as_str() {
            "initialize" => {
                let Some(requested) = params
                    .and_then(|params| params.get("protocolVersion"))
                    .and_then(Value::as_str)
                else {
                    return Err((id, RpcError::MissingProtocolVersion));
                };
                let protocol_version = ProtocolVersion::negotiate(requested);
                if self.defer_initialize {
                    Ok(Reply::Defer(PendingInitialize {
                        id,
                        protocol_version,
                    }))
                } else {
                    Ok(Reply::Some(Server::initialize_response(
                        &id,
                        protocol_version,
                    )))
                }
            }
            "ping" => Ok(Reply::Some(result_line(&id, &EmptyObject {}))),
            // Relay has no tools, so there is never a next page and a cursor changes nothing.
            "tools/list" => Ok(Reply::Some(result_line(
                &id,
                &ToolsListResult { tools: [] },
            ))),
            _ => Err((
                id,
                RpcError::MethodNotFound {
                    method: method.clone(),
                },
            )),
        }
    }
}

/// One line read by [`LineReader`].
#[derive(Debug, PartialEq)]
pub(crate) enum Line {
    /// The bytes of a line, without its `\n`.
    Complete(Vec<u8>),
    /// A line longer than the limit; its bytes were discarded as they arrived.
    TooLong,
}

/// Splits a byte stream into lines of at most `limit` bytes, holding at most `limit` bytes at a time.
///
/// [`LineReader::next_line`] is cancel-safe: the partial line lives in the reader, not in the future,
/// so `serve` can race it against the initialize deadline without losing input.
#[derive(Debug)]
pub(crate) struct LineReader<R> {
    inner: R,
    limit: usize,
    partial: Vec<u8>,
    overflowed: bool,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    pub(crate) fn new(inner: R, limit: usize) -> LineReader<R> {
        LineReader {
            inner,
            limit,
            partial: Vec::new(),
            overflowed: false,
        }
    }

    /// The next line, or `None` at the end of the input.
    /// A last line without `\n` still counts as a line.
    pub(crate) async fn next_line(&mut self) -> io::Result<Option<Line>> {
        loop {
            // The only await point: nothing is consumed before it returns.
            let available = self.inner.fill_buf().await?;
            if available.is_empty() {
                if std::mem::take(&mut self.overflowed) {
                    return Ok(Some(Line::TooLong));
                }
                if self.partial.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(Line::Complete(std::mem::take(&mut self.partial))));
            }
            let newline = available.iter().position(|&byte| byte == b'\n');
            let content = newline.unwrap_or(available.len());
            if !self.overflowed {
                if self.partial.len() + content > self.limit {
                    self.overflowed = true;
                    // Give the memory back at once rather than at the end of the line.
                    self.partial = Vec::new();
                } else {
                    self.partial.extend_from_slice(&available[..content]);
                }
            }
            let Some(newline) = newline else {
                self.inner.consume(content);
                continue;
            };
            self.inner.consume(newline + 1);
            let line = std::mem::take(&mut self.partial);
            return Ok(Some(if std::mem::take(&mut self.overflowed) {
                Line::TooLong
            } else {
                Line::Complete(line)
            }));
        }
    }
}

/// Serves MCP until stdin ends: answers every line at once, except `initialize`, which waits until
/// `settled` resolves or `max_wait` has passed since the call, whichever comes first.
///
/// Every answer is one line ending in `\n`, flushed on its own.
/// Deferred `initialize` answers are written, in arrival order, as soon as the wait ends; one that
/// arrives after that is answered at once.
/// At the end of stdin it returns at once, even with an `initialize` still unanswered: a client
/// that closed our stdin has ended the session.
pub(crate) async fn serve<R, W>(
    stdin: R,
    mut stdout: W,
    settled: impl Future<Output = ()>,
    max_wait: Duration,
) -> io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    enum Event {
        Line(Option<Line>),
        Release(&'static str),
    }

    let mut reader = LineReader::new(stdin, MAX_LINE_BYTES);
    let mut server = Server::new();
    server.set_defer_initialize(true);
    let mut settled = pin!(settled);
    let mut deadline = pin!(tokio::time::sleep(max_wait));
    let mut pending: Vec<PendingInitialize> = Vec::new();
    let mut holding = true;

    loop {
        let event = if holding {
            tokio::select! {
                biased;
                () = &mut settled => Event::Release("settled"),
                () = &mut deadline => Event::Release("max_wait"),
                line = reader.next_line() => Event::Line(line?),
            }
        } else {
            Event::Line(reader.next_line().await?)
        };
        match event {
            Event::Release(reason) => {
                tracing::debug!(reason, deferred = pending.len(), "mcp initialize released");
                // Held the whole time, yet the route is still undecided (a draining route's
                // next worker, say): the harness gets its answer with a reason in the log,
                // and `daemon_mcp_ready` or `daemon_mcp_pass_through` follows when it is.
                if reason == "max_wait" && !pending.is_empty() {
                    tracing::info!(
                        event = "mcp_initialize_unsettled",
                        waited_ms = u64::try_from(max_wait.as_millis()).unwrap_or(u64::MAX),
                        "answered initialize before the route was decided: until it is, this session's requests pass through, or get 503 from a daemon that requires a worker"
                    );
                }
                holding = false;
                server.set_defer_initialize(false);
                answer_held(&mut pending, &mut stdout).await?;
            }
            Event::Line(None) => {
                // The client closed our stdin, which ends the session; every request it sent
                // still gets its one answer, at once (a client that writes its requests and
                // then closes, as a pipe does, reads the answer to `initialize` too). An
                // answer nobody reads any more is nobody's failure.
                let _ = answer_held(&mut pending, &mut stdout).await;
                return Ok(());
            }
            Event::Line(Some(Line::TooLong)) => {
                write_line(&mut stdout, &Server::line_too_long_response()).await?;
            }
            Event::Line(Some(Line::Complete(line))) => match server.handle_line(&line) {
                Reply::None => {}
                Reply::Some(answer) => write_line(&mut stdout, &answer).await?,
                Reply::Defer(init) => pending.push(init),
            },
        }
    }
}

/// Writes the answers of the held `initialize` requests, in the order they came.
async fn answer_held<W: AsyncWrite + Unpin>(
    pending: &mut Vec<PendingInitialize>,
    stdout: &mut W,
) -> io::Result<()> {
    for init in pending.drain(..) {
        let answer = Server::initialize_response(&init.id, init.protocol_version);
        write_line(stdout, &answer).await?;
    }
    Ok(())
}

async fn write_line<W: AsyncWrite + Unpin>(stdout: &mut W, line: &[u8]) -> io::Result<()> {
    stdout.write_all(line).await?;
    stdout.flush().await
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number that is not a 64-bit integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[derive(Serialize)]
struct Success<'a, T> {
    jsonrpc: &'static str,
    id: &'a Id,
    result: &'a T,
}

#[derive(Serialize)]
struct Failure<'a> {
    jsonrpc: &'static str,
    id: &'a Id,
    error: ErrorObject,
}

#[derive(Serialize)]
struct ErrorObject {
    code: i64,
    message: String,
}

#[derive(Serialize)]
struct EmptyObject {}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InitializeResult {
    protocol_version: &'static str,
    capabilities: Capabilities,
    server_info: ServerInfo,
}

#[derive(Serialize)]
struct Capabilities {
    tools: EmptyObject,
}

#[derive(Serialize)]
struct ServerInfo {
    name: &'static str,
    version: &'static str,
}

#[derive(Serialize)]
struct ToolsListResult {
    tools: [EmptyObject; 0],
}

fn result_line<T: Serialize>(id: &Id, result: &T) -> Vec<u8> {
    to_line(&Success {
        jsonrpc: "2.0",
        id,
        result,
    })
}

fn error_line(id: &Id, error: &RpcError) -> Vec<u8> {
    to_line(&Failure {
        jsonrpc: "2.0",
        id,
        error: ErrorObject {
            code: error.code(),
            message: error.to_string(),
        },
    })
}

/// Compact JSON never contains a raw newline (`serde_json` escapes control characters in strings),
/// so the `\n` appended here is the only one in the line.
fn to_line<T: Serialize>(message: &T) -> Vec<u8> {
    match serde_json::to_vec(message) {
        Ok(mut line) => {
            line.push(b'\n');
            line
        }
        Err(_) => INTERNAL_ERROR_LINE.to_vec(),
    }
}
