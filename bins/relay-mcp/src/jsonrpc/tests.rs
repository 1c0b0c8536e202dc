use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, BufReader, DuplexStream, ReadBuf};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::*;

const CLAUDE_CODE_SESSION: &str = include_str!("../../tests/fixtures/claude-code-initialize.jsonl");
const CODEX_SESSION: &str = include_str!("../../tests/fixtures/codex-initialize.jsonl");

/// Parses one response line, checking that it is exactly one line.
fn parse_line(bytes: &[u8]) -> Value {
    assert_eq!(bytes.last(), Some(&b'\n'), "a response ends in a newline");
    let body = &bytes[..bytes.len() - 1];
    assert!(!body.contains(&b'\n'), "a response is one line");
    let value: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(value["jsonrpc"], "2.0");
    value
}

fn answer(server: &mut Server, line: &str) -> Value {
    match server.handle_line(line.as_bytes()) {
        Reply::Some(bytes) => parse_line(&bytes),
        other => panic!("expected an answer to {line}, got {other:?}"),
    }
}

/// Checks an error answer and returns its id.
fn error_id(server: &mut Server, line: &str, code: i64) -> Value {
    let value = answer(server, line);
    assert_eq!(value["error"]["code"], code, "{line} -> {value}");
    let message = value["error"]["message"].as_str().unwrap();
    // House style: lowercase, no trailing period (field names such as protocolVersion keep their case).
    assert!(
        message.starts_with(|c: char| c.is_ascii_lowercase()),
        "{message}"
    );
    assert!(!message.ends_with('.'), "{message}");
    assert!(value.get("result").is_none());
    value["id"].clone()
}

fn initialize_line(id: u64, version: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
    .to_string()
}

fn expected_initialize(id: Value, version: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {
        "protocolVersion": version,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "relay", "version": env!("CARGO_PKG_VERSION")}}})
}

#[test]
fn initialize_echoes_supported_versions_and_offers_the_latest_otherwise() {
    let mut server = Server::new();
    for version in ["2025-11-25", "2025-06-18", "2025-03-26"] {
        let value = answer(&mut server, &initialize_line(7, version));
        assert_eq!(value, expected_initialize(json!(7), version));
    }
    for version in ["2024-11-05", "2026-07-28", "", "latest"] {
        let value = answer(&mut server, &initialize_line(8, version));
        assert_eq!(value, expected_initialize(json!(8), "2025-11-25"));
    }
}

#[test]
fn initialize_without_a_string_protocol_version_is_invalid_params() {
    let mut server = Server::new();
    for line in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":20251125}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":null}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":["2025-11-25"]}"#,
    ] {
        assert_eq!(error_id(&mut server, line, -32602), json!(1), "{line}");
    }
}

#[test]
fn tools_list_is_empty_and_ping_is_an_empty_object() {
    let mut server = Server::new();
    let tools = answer(
        &mut server,
        r#"{"jsonrpc":"2.0","id":"a","method":"tools/list"}"#,
    );
    assert_eq!(
        tools,
        json!({"jsonrpc": "2.0", "id": "a", "result": {"tools": []}})
    );
    let paged = answer(
        &mut server,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":"x"}}"#,
    );
    assert_eq!(paged["result"], json!({"tools": []}));
    let ping = answer(&mut server, r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#);
    assert_eq!(ping, json!({"jsonrpc": "2.0", "id": 3, "result": {}}));
}

#[test]
fn notifications_get_no_output() {
    let mut server = Server::new();
    for line in [
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
        r#"{"jsonrpc":"2.0","method":"no/such/method"}"#,
        r#"{"jsonrpc":"2.0","method":"initialize"}"#,
        r#"{"jsonrpc":"2.0","method":"ping"}"#,
    ] {
        assert_eq!(server.handle_line(line.as_bytes()), Reply::None, "{line}");
    }
}

#[test]
fn unknown_methods_are_not_found() {
    let mut server = Server::new();
    for method in [
        "resources/list",
        "tools/call",
        "prompts/list",
        "notifications/initialized",
    ] {
        let line = json!({"jsonrpc": "2.0", "id": 5, "method": method}).to_string();
        let value = answer(&mut server, &line);
        assert_eq!(value["error"]["code"], -32601);
        assert_eq!(value["id"], 5);
        assert!(value["error"]["message"].as_str().unwrap().contains(method));
    }
}

#[test]
fn malformed_json_is_a_parse_error_with_id_null_and_the_server_goes_on() {
    let mut server = Server::new();
    for line in [
        "{",
        "not json",
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"} trailing"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping",}"#,
        "{\"jsonrpc\":\"2.0\",\"id\":\"\u{1}\",\"method\":\"ping\"}",
    ] {
        assert_eq!(error_id(&mut server, line, -32700), Value::Null, "{line}");
    }
    // Invalid UTF-8 inside a string.
    let mut bytes = br#"{"jsonrpc":"2.0","id":""#.to_vec();
    bytes.extend_from_slice(&[0xff, 0xfe]);
    bytes.extend_from_slice(br#"","method":"ping"}"#);
    let Reply::Some(line) = server.handle_line(&bytes) else {
        panic!("invalid utf-8 must be answered");
    };
    assert_eq!(parse_line(&line)["error"]["code"], -32700);
    // Nesting deeper than the parser allows is refused, not a stack overflow.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(error_id(&mut server, &deep, -32700), Value::Null);
    let ping = answer(&mut server, r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#);
    assert_eq!(ping["result"], json!({}));
}

#[test]
fn wrong_jsonrpc_version_is_an_invalid_request_answered_with_the_id() {
    let mut server = Server::new();
    for line in [
        r#"{"id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":2.0,"id":1,"method":"ping"}"#,
        r#"{"jsonrpc":null,"id":1,"method":"ping"}"#,
    ] {
        assert_eq!(error_id(&mut server, line, -32600), json!(1), "{line}");
    }
    // An invalid message without an id is still answered, with id null.
    let line = r#"{"jsonrpc":"1.0","method":"notifications/initialized"}"#;
    assert_eq!(error_id(&mut server, line, -32600), Value::Null);
}

#[test]
fn missing_or_non_string_method_is_an_invalid_request() {
    let mut server = Server::new();
    for (line, id) in [
        (r#"{"jsonrpc":"2.0","id":1}"#, json!(1)),
        (r#"{"jsonrpc":"2.0","id":"x","method":1}"#, json!("x")),
        (r#"{"jsonrpc":"2.0","id":2,"method":null}"#, json!(2)),
        (r#"{"jsonrpc":"2.0","method":["ping"]}"#, Value::Null),
        (r#"{"jsonrpc":"2.0"}"#, Value::Null),
    ] {
        assert_eq!(error_id(&mut server, line, -32600), id, "{line}");
    }
}

#[test]
fn ids_other_than_string_or_integer_are_invalid_requests_with_id_null() {
    let mut server = Server::new();
    for id in [
        "true",
        "false",
        "{}",
        r#"{"a":1}"#,
        "[1]",
        "null",
        "1.5",
        "1e3",
        "128446744073709551615",
    ] {
        let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        assert_eq!(error_id(&mut server, &line, -32600), Value::Null, "{line}");
    }
}

#[test]
fn string_and_integer_ids_are_echoed_exactly() {
    let mut server = Server::new();
    for id in [
        "0",
        "-1",
        "18446744073709551615",
        "-9223372036854775808",
        r#""abc""#,
        r#""""#,
        r#""line\nbreak""#,
        r#""\u00e9\ud83d\ude00""#,
    ] {
        let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        let Reply::Some(bytes) = server.handle_line(line.as_bytes()) else {
            panic!("{line} must be answered");
        };
        let value = parse_line(&bytes);
        let sent: Value = serde_json::from_str(id).unwrap();
        assert_eq!(value["id"], sent, "{line}");
        assert_eq!(value["result"], json!({}));
    }
}

#[test]
fn params_must_be_structured() {
    let mut server = Server::new();
    for params in ["1", r#""x""#, "true", "null"] {
        let line = format!(r#"{{"jsonrpc":"2.0","id":4,"method":"ping","params":{params}}}"#);
        assert_eq!(error_id(&mut server, &line, -32600), json!(4), "{line}");
    }
    // The message names what was sent.
    for (params, kind) in [
        ("3", "an integer"),
        ("-1", "an integer"),
        ("1.5", "a number that"),
    ] {
        let line = format!(r#"{{"jsonrpc":"2.0","id":4,"method":"ping","params":{params}}}"#);
        let message = answer(&mut server, &line)["error"]["message"].clone();
        assert!(
            message
                .as_str()
                .is_some_and(|m| m.contains(&format!("got {kind}"))),
            "{line}: {message}"
        );
    }
    let array = answer(
        &mut server,
        r#"{"jsonrpc":"2.0","id":4,"method":"ping","params":[]}"#,
    );
    assert_eq!(array["result"], json!({}));
}

#[test]
fn batches_and_other_non_objects_are_invalid_requests_with_id_null() {
    let mut server = Server::new();
    for line in [
        "[]",
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"}]"#,
        "42",
        r#""ping""#,
        "null",
        "true",
    ] {
        assert_eq!(error_id(&mut server, line, -32600), Value::Null, "{line}");
    }
}

#[test]
fn blank_lines_and_client_responses_get_no_output() {
    let mut server = Server::new();
    for line in [
        "",
        " ",
        "\r",
        "\t \r",
        r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":"s","error":{"code":-1,"message":"no"}}"#,
        // A client's answer to a line it could not parse carries id null; answering it
        // would start an exchange of errors.
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}"#,
        r#"{"jsonrpc":"2.0","id":1.5,"result":{}}"#,
    ] {
        assert_eq!(server.handle_line(line.as_bytes()), Reply::None, "{line:?}");
    }
    // A request ending in `\r` (a CRLF client) is still a request.
    let ping = answer(
        &mut server,
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r",
    );
    assert_eq!(ping["result"], json!({}));
}

#[test]
fn deferred_initialize_is_answered_like_an_immediate_one() {
    let mut deferring = Server::new();
    deferring.set_defer_initialize(true);
    let line = initialize_line(3, "2025-06-18");
    let Reply::Defer(pending) = deferring.handle_line(line.as_bytes()) else {
        panic!("initialize must be deferred");
    };
    assert_eq!(
        pending,
        PendingInitialize {
            id: Id::Number(3.into()),
            protocol_version: ProtocolVersion::V2025_06_18,
        }
    );
    let mut immediate = Server::new();
    assert_eq!(
        immediate.handle_line(line.as_bytes()),
        Reply::Some(Server::initialize_response(
            &pending.id,
            pending.protocol_version
        ))
    );
    // Everything else is still answered at once, and invalid initializes are errors, not deferrals.
    let ping = answer(
        &mut deferring,
        r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#,
    );
    assert_eq!(ping["result"], json!({}));
    let bad = r#"{"jsonrpc":"2.0","id":5,"method":"initialize","params":{}}"#;
    assert_eq!(error_id(&mut deferring, bad, -32602), json!(5));
    deferring.set_defer_initialize(false);
    assert!(matches!(
        deferring.handle_line(line.as_bytes()),
        Reply::Some(_)
    ));
}

#[test]
fn line_too_long_response_is_an_invalid_request_with_id_null() {
    let value = parse_line(&Server::line_too_long_response());
    assert_eq!(value["id"], Value::Null);
    assert_eq!(value["error"]["code"], -32600);
    assert!(
        value["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1048576")
    );
}

/// Replays a captured session line by line and checks every answer.
fn replay(session: &str, expected_version: &str) {
    let mut server = Server::new();
    let mut answered = 0;
    for line in session.lines() {
        let request: Value = serde_json::from_str(line).unwrap();
        match server.handle_line(line.as_bytes()) {
            Reply::None => assert!(request.get("id").is_none(), "{line} needs an answer"),
            Reply::Some(bytes) => {
                answered += 1;
                let value = parse_line(&bytes);
                assert_eq!(value["id"], request["id"]);
                match request["method"].as_str().unwrap() {
                    "initialize" => {
                        assert_eq!(
                            value,
                            expected_initialize(request["id"].clone(), expected_version)
                        );
                    }
                    "tools/list" => assert_eq!(value["result"], json!({"tools": []})),
                    other => panic!("the fixture has an unexpected request {other}"),
                }
            }
            Reply::Defer(pending) => panic!("nothing asked to defer, got {pending:?}"),
        }
    }
    assert_eq!(answered, 2, "initialize and tools/list");
}

#[test]
fn claude_code_session_replays() {
    replay(CLAUDE_CODE_SESSION, "2025-11-25");
}

#[test]
fn codex_session_replays() {
    replay(CODEX_SESSION, "2025-06-18");
}

/// An endless source of `a` bytes (or `len` of them, then `tail`, then the end of input, or never
/// anything again when `stall` is set), generated on demand so that a test can send gigabytes.
struct Filler {
    len: usize,
    tail: Vec<u8>,
    stall: bool,
}

impl AsyncRead for Filler {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        const CHUNK: [u8; 8192] = [b'a'; 8192];
        if self.len > 0 {
            let n = self.len.min(buf.remaining()).min(CHUNK.len());
            buf.put_slice(&CHUNK[..n]);
            self.len -= n;
        } else if !self.tail.is_empty() {
            let n = self.tail.len().min(buf.remaining());
            buf.put_slice(&self.tail[..n]);
            self.tail.drain(..n);
        } else if self.stall {
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }
}

async fn read_all_lines<R: AsyncBufRead + Unpin>(reader: &mut LineReader<R>) -> Vec<Line> {
    let mut lines = Vec::new();
    while let Some(line) = reader.next_line().await.unwrap() {
        lines.push(line);
    }
    lines
}

#[tokio::test]
async fn line_reader_enforces_the_limit_per_line() {
    let input = b"12345\n123456\n1234567\n\n123\n1234567890".as_slice();
    let mut reader = LineReader::new(BufReader::with_capacity(4, input), 6);
    assert_eq!(
        read_all_lines(&mut reader).await,
        vec![
            Line::Complete(b"12345".to_vec()),
            Line::Complete(b"123456".to_vec()),
            Line::TooLong,
            Line::Complete(Vec::new()),
            Line::Complete(b"123".to_vec()),
            Line::TooLong,
        ]
    );
    let input = b"abc".as_slice();
    let mut reader = LineReader::new(BufReader::new(input), 6);
    assert_eq!(
        read_all_lines(&mut reader).await,
        vec![Line::Complete(b"abc".to_vec())],
        "a last line without newline still counts"
    );
}

#[test]
fn line_reader_holds_at_most_the_limit_while_an_endless_line_arrives() {
    let filler = Filler {
        len: 64 * MAX_LINE_BYTES,
        tail: Vec::new(),
        stall: true,
    };
    let mut reader = LineReader::new(BufReader::new(filler), MAX_LINE_BYTES);
    {
        let mut next = pin!(reader.next_line());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(next.as_mut().poll(&mut cx).is_pending());
    }
    assert!(reader.overflowed);
    assert!(reader.partial.capacity() <= MAX_LINE_BYTES);
    let Filler { len, .. } = reader.inner.get_ref();
    assert_eq!(*len, 0, "all 64 MiB were read and dropped");
}

struct Harness {
    stdin: Option<DuplexStream>,
    stdout: BufReader<DuplexStream>,
    task: JoinHandle<io::Result<()>>,
    started: Instant,
}

impl Harness {
    fn start(settled: impl Future<Output = ()> + Send + 'static, max_wait: Duration) -> Harness {
        let (stdin, server_stdin) = tokio::io::duplex(64 * 1024);
        let (server_stdout, stdout) = tokio::io::duplex(64 * 1024);
        let started = Instant::now();
        let task = tokio::spawn(serve(
            BufReader::new(server_stdin),
            server_stdout,
            settled,
            max_wait,
        ));
        Harness {
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
            task,
            started,
        }
    }

    async fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
    }

    async fn recv(&mut self) -> Value {
        let mut line = Vec::new();
        self.stdout.read_until(b'\n', &mut line).await.unwrap();
        parse_line(&line)
    }

    /// Closes stdin, waits for `serve` to return, and gives back everything it wrote since the last `recv`.
    async fn finish(mut self) -> Vec<u8> {
        drop(self.stdin.take());
        self.task.await.unwrap().unwrap();
        let mut rest = Vec::new();
        self.stdout.read_to_end(&mut rest).await.unwrap();
        rest
    }
}

fn ping(id: u64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string()
}

#[tokio::test(start_paused = true)]
async fn serve_answers_other_requests_while_initialize_waits_for_settled() {
    let (settle, settled) = oneshot::channel::<()>();
    let mut harness = Harness::start(
        async {
            let _ = settled.await;
        },
        Duration::from_secs(5),
    );
    harness.send(&ping(1)).await;
    assert_eq!(
        harness.recv().await["id"],
        1,
        "requests before initialize are answered"
    );
    harness.send(&initialize_line(2, "2025-06-18")).await;
    harness.send(&ping(3)).await;
    assert_eq!(
        harness.recv().await["id"],
        3,
        "initialize is held, ping is not"
    );
    // Nothing more comes out for a while: the paused clock jumps to this timeout.
    let more = tokio::time::timeout(Duration::from_secs(4), harness.recv()).await;
    assert!(
        more.is_err(),
        "initialize answered before settled: {more:?}"
    );
    settle.send(()).unwrap();
    assert_eq!(
        harness.recv().await,
        expected_initialize(json!(2), "2025-06-18")
    );
    assert!(harness.started.elapsed() < Duration::from_secs(5));
    // Once settled, a later initialize is answered at once.
    harness.send(&initialize_line(4, "2025-11-25")).await;
    assert_eq!(
        harness.recv().await,
        expected_initialize(json!(4), "2025-11-25")
    );
    assert!(harness.finish().await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn serve_answers_initialize_by_max_wait_when_never_settled() {
    let (capture, dispatch) = relay_logging::LogCapture::jsonl("info");
    let _logging = tracing::dispatcher::set_default(&dispatch);
    let max_wait = Duration::from_secs(5);
    let mut harness = Harness::start(std::future::pending(), max_wait);
    harness.send(&initialize_line(1, "2025-11-25")).await;
    harness.send(&initialize_line(2, "2024-11-05")).await;
    assert_eq!(
        harness.recv().await,
        expected_initialize(json!(1), "2025-11-25")
    );
    assert_eq!(harness.started.elapsed(), max_wait);
    assert_eq!(
        harness.recv().await,
        expected_initialize(json!(2), "2025-11-25")
    );
    harness.send(&initialize_line(3, "2025-03-26")).await;
    assert_eq!(
        harness.recv().await,
        expected_initialize(json!(3), "2025-03-26")
    );
    assert_eq!(
        harness.started.elapsed(),
        max_wait,
        "answered at once after the wait"
    );
    assert!(harness.finish().await.is_empty());
    // Answered without a decided route, and said so once.
    let logged = capture.contents();
    assert_eq!(
        logged
            .matches(r#""event":"mcp_initialize_unsettled""#)
            .count(),
        1,
        "{logged}"
    );
}

#[tokio::test(start_paused = true)]
async fn serve_counts_max_wait_from_its_start() {
    let max_wait = Duration::from_secs(5);
    let mut harness = Harness::start(std::future::pending(), max_wait);
    harness.send(&ping(1)).await;
    assert_eq!(harness.recv().await["id"], 1);
    tokio::time::advance(Duration::from_secs(3)).await;
    harness.send(&initialize_line(2, "2025-11-25")).await;
    assert_eq!(harness.recv().await["id"], 2);
    assert_eq!(harness.started.elapsed(), max_wait);
    harness.finish().await;
}

#[tokio::test(start_paused = true)]
async fn serve_answers_at_once_when_settled_before_initialize() {
    let mut harness = Harness::start(std::future::ready(()), Duration::from_secs(5));
    harness.send(&initialize_line(1, "2025-06-18")).await;
    assert_eq!(
        harness.recv().await,
        expected_initialize(json!(1), "2025-06-18")
    );
    assert_eq!(harness.started.elapsed(), Duration::ZERO);
    harness.finish().await;
}

#[tokio::test(start_paused = true)]
async fn serve_answers_a_held_initialize_at_once_at_eof_and_returns() {
    let mut harness = Harness::start(std::future::pending(), Duration::from_secs(5));
    harness.send(&initialize_line(1, "2025-11-25")).await;
    harness.send(&ping(2)).await;
    assert_eq!(harness.recv().await["id"], 2, "ping is not held");
    let started = harness.started;
    let rest = harness.finish().await;
    assert_eq!(
        parse_line(&rest),
        expected_initialize(json!(1), "2025-11-25"),
        "every request gets its answer, the held one too"
    );
    assert_eq!(started.elapsed(), Duration::ZERO, "without waiting");
}

#[tokio::test(start_paused = true)]
async fn serve_writes_only_json_lines_whatever_it_reads() {
    let mut harness = Harness::start(std::future::ready(()), Duration::from_secs(5));
    let inputs = [
        "",
        "garbage",
        "{",
        "[]",
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"1.0","id":2,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"nope"}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"initialize"}"#,
        r#"{"jsonrpc":"2.0","id":"line\nbreak","method":"ping"}"#,
        "\u{0}\u{1}\u{7f}",
    ];
    for input in inputs {
        harness.send(input).await;
    }
    let output = harness.finish().await;
    assert_eq!(output.last(), Some(&b'\n'));
    let lines: Vec<&[u8]> = output.split_inclusive(|&byte| byte == b'\n').collect();
    // Every input but the blank line and the notification is answered, in order.
    assert_eq!(lines.len(), inputs.len() - 2);
    let codes: Vec<Value> = lines
        .iter()
        .map(|line| parse_line(line)["error"]["code"].clone())
        .collect();
    assert_eq!(
        codes,
        [
            -32700, -32700, -32600, -32600, -32600, -32600, -32601, -32602
        ]
        .into_iter()
        .map(Value::from)
        .chain([Value::Null]) // the ping with an escaped newline in its id succeeds
        .chain([json!(-32700)])
        .collect::<Vec<_>>()
    );
}

#[tokio::test(start_paused = true)]
async fn serve_rejects_an_over_long_line_and_goes_on() {
    // Exactly the limit is accepted: a ping padded with spaces to 1 MiB.
    let request = ping(1);
    let padded = format!("{request}{}", " ".repeat(MAX_LINE_BYTES - request.len()));
    let mut input = padded.into_bytes();
    input.push(b'\n');
    // 8 MiB without a newline, then a ping that must still be answered.
    let filler = Filler {
        len: 8 * MAX_LINE_BYTES,
        tail: format!("\n{}\n", ping(2)).into_bytes(),
        stall: false,
    };
    let stdin = BufReader::new(input.as_slice().chain(filler));
    let mut stdout = Vec::new();
    serve(
        stdin,
        &mut stdout,
        std::future::ready(()),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    let lines: Vec<Value> = stdout
        .split_inclusive(|&byte| byte == b'\n')
        .map(parse_line)
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0], json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
    assert_eq!(lines[1]["error"]["code"], -32600);
    assert_eq!(lines[1]["id"], Value::Null);
    assert_eq!(lines[2], json!({"jsonrpc": "2.0", "id": 2, "result": {}}));
}

#[tokio::test(start_paused = true)]
async fn serve_replays_the_captured_sessions_with_the_deferral() {
    for (session, version) in [
        (CLAUDE_CODE_SESSION, "2025-11-25"),
        (CODEX_SESSION, "2025-06-18"),
    ] {
        let (settle, settled) = oneshot::channel::<()>();
        let mut harness = Harness::start(
            async {
                let _ = settled.await;
            },
            Duration::from_secs(5),
        );
        let mut lines = session.lines();
        // The clients wait for the initialize answer before they send anything else.
        harness.send(lines.next().unwrap()).await;
        settle.send(()).unwrap();
        assert_eq!(harness.recv().await, expected_initialize(json!(0), version));
        for line in lines {
            harness.send(line).await;
        }
        let tools = harness.recv().await;
        assert_eq!(
            tools,
            json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}})
        );
        assert!(harness.finish().await.is_empty());
    }
}
