use serde::Deserialize;

use super::{DeliveryConfig, SinkConfig, SinksConfig};

#[derive(Debug, Deserialize)]
struct Doc {
    components: Component,
}

#[derive(Debug, Deserialize)]
struct Component {
    config: SinksConfig,
}

/// The TOML block of the `## Sinks` section of docs/plugins.md.
fn documented_example() -> Option<&'static str> {
    let docs = include_str!("../../../../docs/plugins.md");
    let section = docs.split_once("\n## Sinks\n")?.1;
    let block = section.split_once("```toml\n")?.1;
    Some(block.split_once("```")?.0)
}

#[test]
fn the_documented_example_loads() -> Result<(), Box<dyn std::error::Error>> {
    let example = documented_example().ok_or("no toml block in the Sinks section")?;
    let doc: Doc = toml::from_str(example)?;
    let config = doc.components.config;
    assert_eq!(config.sinks.len(), 2);
    assert!(matches!(&config.sinks[0], SinkConfig::File(f) if f.filename == "events-{user}.jsonl"));
    let SinkConfig::Http(http) = &config.sinks[1] else {
        return Err("the second sink is not http".into());
    };
    assert_eq!(http.delivery, DeliveryConfig::default());
    assert_eq!(
        http.header_env.get("authorization").map(String::as_str),
        Some("RELAY_COLLECTOR_AUTHORIZATION")
    );
    let otlp = config.otlp.ok_or("no otlp")?;
    assert_eq!(otlp.service_name, "relay-worker");
    assert_eq!(otlp.delivery, DeliveryConfig::default());
    Ok(())
}

#[test]
fn the_issue_file_sink_loads_with_defaults() -> Result<(), toml::de::Error> {
    let config: SinksConfig = toml::from_str(
        r#"
        [[sinks]]
        type = "file"
        directory = "/var/log/relay/atof"
        filename = "events-{user}.jsonl"
        "#,
    )?;
    assert!(matches!(&config.sinks[0], SinkConfig::File(f) if f.queue_capacity == 4096));
    assert_eq!(config.otlp, None);
    Ok(())
}

#[test]
fn unknown_keys_and_kinds_are_refused() {
    for bad in [
        "[[sinks]]\ntype = \"file\"\ndirectory = \"/d\"\nfilename = \"{user}\"\nmode = 1\n",
        "[[sinks]]\ntype = \"http\"\nurl = \"http://c/\"\nbatch = 3\n",
        "[[sinks]]\ntype = \"syslog\"\n",
        "[otlp]\nendpoint = \"http://c\"\nservice = \"x\"\n",
        "sinkz = []\n",
    ] {
        assert!(toml::from_str::<SinksConfig>(bad).is_err(), "{bad}");
    }
}
