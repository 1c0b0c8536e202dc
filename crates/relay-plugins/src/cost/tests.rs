//! Exact costs per provider format, from the captured body through the usage parser to the
//! price table, with cache reads and (where the provider reports them) both cache-write
//! lifetimes. Each test also shows the figure the two classic mistakes would give, so a
//! regression to either is caught: dropping Anthropic's cache counts, and charging OpenAI's
//! cached tokens again on top of `input_tokens`.
//!
//! The prices are illustrative, written as an operator would in `plugins.toml`.

use expect_test::{Expect, expect};

use super::*;
use crate::usage::{BodyKind, UsageTap, WireFormat};

/// `docs/plugins.md`, whose "Usage and cost" example is the price table of these tests.
const PLUGINS_DOC: &str = include_str!("../../../../docs/plugins.md");

/// The first TOML block after the "Usage and cost" heading.
fn documented_example() -> &'static str {
    let section = PLUGINS_DOC
        .split_once("## Usage and cost")
        .map(|(_, rest)| rest)
        .unwrap_or("");
    section
        .split_once("```toml\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(block, _)| block)
        .unwrap_or("")
}

/// The documented table as the worker loads it: through the `plugins.toml` parser.
fn table() -> PriceTable {
    let path = std::path::Path::new("/etc/relay/plugins.toml");
    match crate::Plugins::parse(Some((path, documented_example())), None) {
        Ok(plugins) => match plugins.observability() {
            Some(config) => config.prices.clone(),
            None => panic!("the documented example should enable observability"),
        },
        Err(e) => panic!("the documented price table does not load: {e}"),
    }
}

#[test]
fn the_documented_price_table_loads() {
    let table = table();
    let key = |m: &str| table.lookup(m).map(|(k, _)| k.to_owned());
    assert_eq!(
        key("claude-sonnet-4-5-20250929"),
        Some("claude-sonnet-4-5".into())
    );
    assert_eq!(key("gpt-5"), Some("gpt-5".into()));
    assert_eq!(key("gpt-4.1"), Some("gpt-4.1".into()));
}

#[test]
fn the_response_model_prices_first_then_the_request_model() {
    let usage = Usage {
        uncached_input: 1_000_000,
        ..Usage::default()
    };
    let total = |resp, req| {
        table()
            .cost_for(resp, req, &usage)
            .map(|c| c.total.to_string())
    };
    assert_eq!(
        total(Some("gpt-5-2025-08-07"), Some("gpt-4.1")),
        Ok("1.25".into())
    );
    assert_eq!(total(Some("ft:custom"), Some("gpt-4.1")), Ok("2.00".into()));
    assert_eq!(total(None, Some("gpt-4.1")), Ok("2.00".into()));
    assert_eq!(
        total(Some("ft:custom"), Some("other")),
        Err(CostError::UnknownModel {
            model: "ft:custom".into()
        })
    );
}

fn render(cost: &Cost) -> String {
    format!(
        "input={} cache_read={} cache_write_5m={} cache_write_1h={} output={} reasoning={}\ntotal={} ({} pico-dollars)\n",
        cost.input,
        cost.cache_read,
        cost.cache_write_5m,
        cost.cache_write_1h,
        cost.output,
        cost.reasoning,
        cost.total,
        cost.total.picos(),
    )
}

fn check_cost(format: WireFormat, body: &[u8], expect: Expect) -> Cost {
    let report = UsageTap::read_body(format, BodyKind::EventStream, body);
    let (Some(usage), Some(model)) = (report.usage, report.response_model.clone()) else {
        panic!("no usage or model in {report:?}");
    };
    match table().cost(&model, &usage) {
        Ok(cost) => {
            expect.assert_eq(&render(&cost));
            cost
        }
        Err(e) => panic!("{e}"),
    }
}

fn usd(text: &str) -> Usd {
    // Dollars as a decimal with up to twelve places, for the expected figures.
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    let whole: u128 = whole.parse().unwrap_or(u128::MAX);
    let frac: u128 = format!("{frac:0<12}").parse().unwrap_or(u128::MAX);
    Usd::from_picos(whole * 1_000_000_000_000 + frac)
}

#[test]
fn anthropic_messages_with_cache_reads_and_both_write_lifetimes() {
    let cost = check_cost(
        WireFormat::AnthropicMessages,
        br#"event: message_start
data: {"type":"message_start","message":{"model":"claude-sonnet-4-5-20250929","usage":{"input_tokens":120,"cache_read_input_tokens":30000,"cache_creation_input_tokens":5000,"cache_creation":{"ephemeral_5m_input_tokens":2000,"ephemeral_1h_input_tokens":3000},"output_tokens":1}}}

event: message_delta
data: {"type":"message_delta","usage":{"output_tokens":850}}

event: message_stop
data: {"type":"message_stop"}

"#,
        expect![[r#"
            input=0.00036 cache_read=0.009 cache_write_5m=0.0075 cache_write_1h=0.018 output=0.01275 reasoning=0.00
            total=0.04761 (47610000000 pico-dollars)
        "#]],
    );
    // 120 × $3 + 30000 × $0.30 + 2000 × $3.75 + 3000 × $6 + 850 × $15, per million tokens.
    assert_eq!(cost.total, usd("0.04761"));
    // Missing the cache (pricing only `input_tokens`) would give $0.01311, 3.6× too little;
    // pricing every input token at the input price would give $0.11811, 2.5× too much.
    assert_ne!(cost.total, usd("0.01311"));
    assert_ne!(cost.total, usd("0.11811"));
}

#[test]
fn openai_responses_with_cache_reads() {
    let cost = check_cost(
        WireFormat::OpenAiResponses,
        br#"event: response.completed
data: {"type":"response.completed","response":{"model":"gpt-5-2025-08-07","usage":{"input_tokens":40000,"input_tokens_details":{"cached_tokens":32000},"output_tokens":1500,"output_tokens_details":{"reasoning_tokens":1200}}}}

"#,
        expect![[r#"
            input=0.01 cache_read=0.004 cache_write_5m=0.00 cache_write_1h=0.00 output=0.015 reasoning=0.00
            total=0.029 (29000000000 pico-dollars)
        "#]],
    );
    // 8000 uncached × $1.25 + 32000 cached × $0.125 + 1500 output (reasoning included) × $10.
    assert_eq!(cost.total, usd("0.029"));
    // Charging the cached tokens again on top of input_tokens would give $0.069 (2.4×).
    assert_ne!(cost.total, usd("0.069"));
}

#[test]
fn openai_chat_completions_with_cache_reads_and_a_reasoning_price() {
    let body = b"data: {\"model\":\"gpt-4.1-2025-04-14\",\"choices\":[],\"usage\":{\"prompt_tokens\":1500,\"prompt_tokens_details\":{\"cached_tokens\":1024},\"completion_tokens\":300,\"completion_tokens_details\":{\"reasoning_tokens\":120}}}\n\ndata: [DONE]\n\n";
    let cost = check_cost(
        WireFormat::OpenAiChatCompletions,
        body,
        expect![[r#"
            input=0.000952 cache_read=0.000512 cache_write_5m=0.00 cache_write_1h=0.00 output=0.0024 reasoning=0.00
            total=0.003864 (3864000000 pico-dollars)
        "#]],
    );
    assert_eq!(cost.total, usd("0.003864"));
    assert_ne!(cost.total, usd("0.006912"), "cached tokens charged twice");

    // With its own reasoning price, reasoning leaves the output bucket instead of being
    // charged twice.
    let report = UsageTap::read_body(
        WireFormat::OpenAiChatCompletions,
        BodyKind::EventStream,
        body,
    );
    let usage = report.usage.unwrap_or_default();
    let price = Price {
        reasoning: Some(UsdPerMTok::from_micros(4_000_000)),
        ..table()
            .lookup("gpt-4.1")
            .map(|(_, p)| p.clone())
            .unwrap_or_else(|| panic!("gpt-4.1"))
    };
    let cost = price.cost(&usage).unwrap_or_default();
    expect![[r#"
        input=0.000952 cache_read=0.000512 cache_write_5m=0.00 cache_write_1h=0.00 output=0.00144 reasoning=0.00048
        total=0.003384 (3384000000 pico-dollars)
    "#]]
    .assert_eq(&render(&cost));
}

#[test]
fn a_bucket_with_tokens_and_no_price_is_an_error_not_a_zero() {
    let usage = Usage {
        uncached_input: 10,
        cache_write_1h: 5,
        output: 1,
        ..Usage::default()
    };
    assert_eq!(
        table().cost("gpt-5", &usage),
        Err(CostError::MissingPrice {
            model: "gpt-5".into(),
            bucket: Bucket::CacheWrite1h,
            tokens: 5
        })
    );
    assert_eq!(
        table().cost("mistral-large", &usage),
        Err(CostError::UnknownModel {
            model: "mistral-large".into()
        })
    );
}

#[test]
fn models_are_found_exactly_or_by_the_longest_dated_prefix() {
    let mut models = BTreeMap::new();
    let p = |input| Price {
        input: UsdPerMTok::from_micros(input),
        cache_read: None,
        cache_write_5m: None,
        cache_write_1h: None,
        output: UsdPerMTok::from_micros(0),
        reasoning: None,
    };
    models.insert("gpt-5".to_owned(), p(1));
    models.insert("gpt-5-mini".to_owned(), p(2));
    let table = PriceTable::new(models);
    let key = |m: &str| table.lookup(m).map(|(k, _)| k.to_owned());
    assert_eq!(key("gpt-5"), Some("gpt-5".into()));
    assert_eq!(key("gpt-5-2025-08-07"), Some("gpt-5".into()));
    assert_eq!(key("gpt-5-mini-2025-08-07"), Some("gpt-5-mini".into()));
    assert_eq!(key("gpt-50"), None);
    assert_eq!(key("gpt"), None);
}

#[test]
fn prices_are_exact_decimals() {
    let parse = |t: &str| UsdPerMTok::parse(t).map(UsdPerMTok::micros);
    assert_eq!(parse("15"), Ok(15_000_000));
    assert_eq!(parse("0.30"), Ok(300_000));
    assert_eq!(parse(".5"), Ok(500_000));
    assert_eq!(parse("3.750000"), Ok(3_750_000));
    assert_eq!(parse("0.000001"), Ok(1));
    assert!(matches!(
        parse("0.0000001"),
        Err(PriceError::TooPrecise { .. })
    ));
    for bad in ["", ".", "-1", "1e3", "1.2.3", "abc", " 1"] {
        assert!(
            matches!(parse(bad), Err(PriceError::NotADecimal { .. })),
            "{bad:?}"
        );
    }
    // TOML floats that have no exact binary form still give the decimal that was written.
    #[derive(serde::Deserialize)]
    struct P {
        p: UsdPerMTok,
    }
    for (text, micros) in [
        ("0.1", 100_000),
        ("0.3", 300_000),
        ("1.1", 1_100_000),
        ("7", 7_000_000),
    ] {
        let parsed: Result<P, _> = toml::from_str(&format!("p = {text}"));
        assert_eq!(parsed.map(|p| p.p.micros()).ok(), Some(micros), "{text}");
    }
    assert!(toml::from_str::<P>("p = -1").is_err());
    assert!(toml::from_str::<Price>("input = 1\noutput = 2\ncache_reed = 1").is_err());
    assert_eq!(UsdPerMTok::from_micros(3_750_000).to_string(), "3.75");
}

#[test]
fn a_session_sums_exactly_and_counts_what_it_could_not_price() {
    // A million requests of 1 token at $0.30 per million: $0.30 exactly, where f64 drifts.
    let price = match toml::from_str::<Price>("input = 0.3\noutput = 0") {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    let one = Usage {
        uncached_input: 1,
        ..Usage::default()
    };
    let mut session = SessionCost::default();
    let cost = price.cost(&one).unwrap_or_default();
    for _ in 0..1_000_000 {
        session.record(&one, Some(&cost));
    }
    session.record(&one, None);
    assert_eq!(session.total.to_string(), "0.30");
    assert_eq!(
        (session.priced_requests, session.unpriced_requests),
        (1_000_000, 1)
    );
    assert_eq!(session.usage.uncached_input, 1_000_001);
    assert_eq!(session.total.micros_rounded(), 300_000);
    assert_eq!(
        serde_json::to_string(&session.total).ok(),
        Some("\"0.30\"".to_owned())
    );
}
