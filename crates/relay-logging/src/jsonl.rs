//! The JSON-lines event format of SPEC §10.3: one flat object per line.
//!
//! The keys come in a fixed order (`timestamp`, `level`, `target`, `event`, `message`, then the
//! event's fields in the order they were recorded) so that a person reading the raw file sees the
//! time first. Spans are not written: lifecycle events carry everything they need as fields.

use std::fmt;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;
use tracing::{Event, Level, Subscriber, field::Field};
use tracing_subscriber::{
    fmt::{
        FmtContext, FormatEvent, FormatFields,
        format::Writer,
        time::{FormatTime, SystemTime},
    },
    registry::LookupSpan,
};

/// Keys the format itself writes; a field with one of these names is written as `field_<name>`
/// so that no line ever has a duplicate key.
const RESERVED: [&str; 4] = ["timestamp", "level", "target", "message"];

/// Fields that `tracing-log` adds to records of the `log` crate; `log.target` replaces the
/// generic `log` target, the others are dropped.
const LOG_TARGET_FIELD: &str = "log.target";
const LOG_FIELD_PREFIX: &str = "log.";

/// Formats events as JSON lines.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut timestamp = String::with_capacity(32);
        // SystemTime writes RFC 3339 in UTC with microseconds: 2026-11-30T01:08:00.123456Z.
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;

        let metadata = event.metadata();
        let mut fields = FieldCollector::default();
        event.record(&mut fields);

        let line = Line {
            timestamp: &timestamp,
            level: level_name(*metadata.level()),
            target: fields.log_target.as_deref().unwrap_or(metadata.target()),
            event: fields.event.as_ref(),
            message: fields.message.as_deref().unwrap_or(""),
            fields: &fields.fields,
        };
        let json = serde_json::to_string(&line).map_err(|_| fmt::Error)?;
        writer.write_str(&json)?;
        writer.write_char('\n')
    }
}

/// The level as written in both formats' JSON: lowercase.
pub(crate) fn level_name(level: Level) -> &'static str {
    match level {
        Level::ERROR => "error",
        Level::WARN => "warn",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

struct Line<'a> {
    timestamp: &'a str,
    level: &'static str,
    target: &'a str,
    event: Option<&'a Value>,
    message: &'a str,
    fields: &'a [(String, Value)],
}

impl Serialize for Line<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("timestamp", self.timestamp)?;
        map.serialize_entry("level", self.level)?;
        map.serialize_entry("target", self.target)?;
        if let Some(event) = self.event {
            map.serialize_entry("event", event)?;
        }
        map.serialize_entry("message", self.message)?;
        for (key, value) in self.fields {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

#[derive(Default)]
struct FieldCollector {
    message: Option<String>,
    event: Option<Value>,
    log_target: Option<String>,
    fields: Vec<(String, Value)>,
}

impl FieldCollector {
    fn insert(&mut self, field: &Field, value: Value) {
        let name = field.name();
        match name {
            "message" => {
                self.message = Some(match value {
                    Value::String(text) => text,
                    other => other.to_string(),
                });
            }
            "event" => self.event = Some(value),
            LOG_TARGET_FIELD => {
                if let Value::String(text) = value {
                    self.log_target = Some(text);
                }
            }
            _ if name.starts_with(LOG_FIELD_PREFIX) => {}
            _ => {
                let key = if RESERVED.contains(&name) {
                    format!("field_{name}")
                } else {
                    name.to_owned()
                };
                // A name recorded twice keeps its last value and its first position.
                match self
                    .fields
                    .iter_mut()
                    .find(|(existing, _)| *existing == key)
                {
                    Some((_, slot)) => *slot = value,
                    None => self.fields.push((key, value)),
                }
            }
        }
    }
}

impl tracing::field::Visit for FieldCollector {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.insert(field, Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.insert(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.insert(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.insert(field, Value::from(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.insert(field, Value::from(value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.insert(field, Value::from(value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.insert(field, Value::from(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests;
