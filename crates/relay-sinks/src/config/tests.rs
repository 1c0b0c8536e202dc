use std::path::Path;

use super::{DeliveryConfig, SinkConfig, SinksConfig};

/// The sinks `plugins.toml` text configures, as the worker builds them.
fn sinks_of(text: &str) -> SinksConfig {
    let plugins =
        relay_plugins::Plugins::parse(Some((Path::new("/etc/relay/plugins.toml"), text)), None)
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
    SinksConfig::from_component(plugins.observability().expect("an observability component"))
}

/// The first TOML block of the observability section of docs/plugins.md.
fn documented_example() -> &'static str {
    let docs = include_str!("../../../../docs/plugins.md");
    let section = docs
        .split_once("\n## observability\n")
        .map_or("", |(_, s)| s);
    let block = section.split_once("```toml\n").map_or("", |(_, b)| b);
    block.split_once("```").map_or("", |(b, _)| b)
}

#[test]
fn the_documented_sinks_keep_their_settings() {
    let config = sinks_of(documented_example());
    assert_eq!(config.sinks.len(), 2);
    assert!(
        matches!(&config.sinks[0], SinkConfig::File(f) if f.filename == "events-{fingerprint}.jsonl")
    );
    let SinkConfig::Http(http) = &config.sinks[1] else {
        panic!("the second sink is not http: {config:?}");
    };
    assert_eq!(http.delivery.batch_max_items, 200);
    assert_eq!(http.delivery.batch_max_delay_ms, 500);
    assert_eq!(http.delivery.timeout_ms, 3000);
    assert_eq!(http.delivery.queue_capacity, 50000);
    assert_eq!(
        http.delivery.max_attempts,
        DeliveryConfig::default().max_attempts
    );
    assert_eq!(
        http.header_env.get("authorization").map(String::as_str),
        Some("RELAY_COLLECTOR_AUTHORIZATION")
    );
    let otlp = config.otlp.expect("otlp");
    assert_eq!(otlp.service_name, "relay");
    assert_eq!(otlp.delivery, DeliveryConfig::default());
}

#[test]
fn the_issue_file_sink_gets_the_default_queue() {
    let config = sinks_of(
        "version = 1\n[[components]]\nkind = \"observability\"\n[[components.config.sinks]]\ntype = \"file\"\ndirectory = \"/var/log/relay/atof\"\nfilename = \"events-{user}.jsonl\"\n",
    );
    assert!(matches!(&config.sinks[0], SinkConfig::File(f) if f.queue_capacity == 4096));
    assert_eq!(config.otlp, None);
}
