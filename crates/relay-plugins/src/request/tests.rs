use super::*;

#[test]
fn model_and_stream_are_read_from_the_top_level_only() {
    let facts = RequestFacts::read(
        br#"{"messages":[{"role":"user","content":"hi","model":"inner"}],"model":"claude-sonnet-4-5","stream":true}"#,
    );
    assert_eq!(facts.model.as_deref(), Some("claude-sonnet-4-5"));
    assert!(facts.stream);
    let facts = RequestFacts::read(br#"{"model":"gpt-5"}"#);
    assert_eq!(
        facts,
        RequestFacts {
            model: Some("gpt-5".to_owned()),
            model_unclear: false,
            stream: false
        }
    );
}

/// A repeated `model` is read as most JSON readers read it, the last one, and is unclear
/// when the values differ or one is not a string; escapes in a field's name are undone
/// first. A `stream` of another type is false, not a reason to lose the model.
#[test]
fn a_model_named_twice_or_not_as_text_is_unclear() {
    for (body, model, unclear) in [
        (&br#"{"model":"a","model":"b"}"#[..], Some("b"), true),
        (
            br#"{"model":"b","stream":true,"model":"a"}"#,
            Some("a"),
            true,
        ),
        (br#"{"model":"a","mod\u0065l":"b"}"#, Some("b"), true),
        (br#"{"model":null,"model":"b"}"#, Some("b"), true),
        (br#"{"model":"b","model":1}"#, None, true),
        (br#"{"model":"b","model":{}}"#, None, true),
        (br#"{"model":"b","model":["b"]}"#, None, true),
        (br#"{"model":7}"#, None, true),
        (br#"{"model":"a","Model":"b"}"#, Some("b"), true),
        (br#"{"MODEL":"b"}"#, Some("b"), false),
        (br#"{"model":"a","model":"a"}"#, Some("a"), false),
        (br#"{"mod\u0065l":"a"}"#, Some("a"), false),
        (br#"{"model":"a","stream":1}"#, Some("a"), false),
        (br#"{"model":"a","stream":"true"}"#, Some("a"), false),
        (br#"{"messages":[]}"#, None, false),
        (b"\xef\xbb\xbf{\"model\":\"a\"}", None, true),
        (b"not json", None, true),
        (b"[1,2]", None, true),
        (b"", None, true),
    ] {
        let facts = RequestFacts::read(body);
        let text = String::from_utf8_lossy(body);
        assert_eq!(facts.model.as_deref(), model, "{text}");
        assert_eq!(facts.model_unclear, unclear, "{text}");
    }
    assert!(RequestFacts::read(br#"{"model":"a","stream":false,"stream":true}"#).stream);
    assert!(RequestFacts::read(br#"{"model":"a","stream":false,"Stream":true}"#).stream);
}

#[test]
fn the_last_user_message_of_each_format() {
    let anthropic = br#"{"messages":[
        {"role":"user","content":"first"},
        {"role":"assistant","content":[{"type":"text","text":"ok"}]},
        {"role":"user","content":[
            {"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"ls output"}]},
            {"type":"text","text":"and now this"}]}]}"#;
    assert_eq!(
        last_user_text(WireFormat::AnthropicMessages, anthropic).as_deref(),
        Some("ls output\nand now this")
    );
    let responses = br#"{"input":[
        {"role":"user","content":[{"type":"input_text","text":"hello"}]},
        {"type":"function_call","call_id":"c1","name":"shell","arguments":"{}"},
        {"type":"function_call_output","call_id":"c1","output":"total 0"}]}"#;
    assert_eq!(
        last_user_text(WireFormat::OpenAiResponses, responses).as_deref(),
        Some("total 0")
    );
    assert_eq!(
        last_user_text(WireFormat::OpenAiResponses, br#"{"input":"just text"}"#).as_deref(),
        Some("just text")
    );
    let chat = br#"{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"q"}]}]}"#;
    assert_eq!(
        last_user_text(WireFormat::OpenAiChatCompletions, chat).as_deref(),
        Some("q")
    );
}

#[test]
fn no_user_text_is_none() {
    assert_eq!(
        last_user_text(WireFormat::AnthropicMessages, br#"{"messages":[]}"#),
        None
    );
    assert_eq!(
        last_user_text(
            WireFormat::OpenAiChatCompletions,
            br#"{"messages":[{"role":"user","content":""}]}"#
        ),
        None
    );
    assert_eq!(last_user_text(WireFormat::OpenAiResponses, b"{"), None);
}
