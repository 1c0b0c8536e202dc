//! One ATOF 0.1 record and its JSON line (SPEC §8.2).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;
use uuid::Uuid;

/// The envelope version every record carries.
pub const ATOF_VERSION: &str = "0.1";

/// ATOF's categories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    Agent,
    Llm,
    Tool,
    Guardrail,
    Custom,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Agent => "agent",
            Category::Llm => "llm",
            Category::Tool => "tool",
            Category::Guardrail => "guardrail",
            Category::Custom => "custom",
        }
    }
}

/// Whether a scope record opens or closes its scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeCategory {
    Start,
    End,
}

impl ScopeCategory {
    pub fn as_str(self) -> &'static str {
        match self {
            ScopeCategory::Start => "start",
            ScopeCategory::End => "end",
        }
    }
}

/// The fields that differ between a scope record and a mark.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordKind {
    Scope {
        scope_category: ScopeCategory,
        category: Category,
        /// Sorted.
        attributes: Vec<&'static str>,
        category_profile: Option<Value>,
    },
    Mark {
        category: Category,
        category_profile: Option<Value>,
    },
}

/// `data_schema`: names the shape of `data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataSchema {
    pub name: &'static str,
    pub version: &'static str,
}

/// One ATOF record, plain data; [`Record::to_json_line`] gives its wire form.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub kind: RecordKind,
    /// A v7 uuid; a scope's start and end share it.
    pub uuid: Uuid,
    pub parent_uuid: Option<Uuid>,
    pub timestamp: SystemTime,
    pub name: String,
    /// Always a JSON object.
    pub data: Value,
    pub data_schema: Option<DataSchema>,
    pub metadata: Option<Value>,
}

impl Record {
    /// Is this the start of a scope?
    pub fn is_start(&self) -> bool {
        matches!(
            self.kind,
            RecordKind::Scope {
                scope_category: ScopeCategory::Start,
                ..
            }
        )
    }

    /// Is this the end of a scope?
    pub fn is_end(&self) -> bool {
        matches!(
            self.kind,
            RecordKind::Scope {
                scope_category: ScopeCategory::End,
                ..
            }
        )
    }

    /// The record as one line of JSON, without the trailing newline.
    pub fn to_json_line(&self) -> String {
        // Cannot fail: see `write_json_line`.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Appends the record and a newline to `out`, as a JSON Lines sink writes it.
    pub fn write_json_line(&self, out: &mut Vec<u8>) {
        // Serialising a map of strings and JSON values into a Vec cannot fail: every key is a
        // string and a `Value` never holds a non-finite float.
        if serde_json::to_writer(&mut *out, self).is_ok() {
            out.push(b'\n');
        }
    }
}

impl Serialize for Record {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        let (kind, category, profile) = match &self.kind {
            RecordKind::Scope {
                category,
                category_profile,
                ..
            } => ("scope", category, category_profile),
            RecordKind::Mark {
                category,
                category_profile,
            } => ("mark", category, category_profile),
        };
        map.serialize_entry("kind", kind)?;
        map.serialize_entry("atof_version", ATOF_VERSION)?;
        map.serialize_entry("uuid", &self.uuid)?;
        map.serialize_entry("parent_uuid", &self.parent_uuid)?;
        map.serialize_entry("timestamp", &rfc3339_micros(self.timestamp))?;
        map.serialize_entry("name", &self.name)?;
        if let RecordKind::Scope {
            scope_category,
            attributes,
            ..
        } = &self.kind
        {
            map.serialize_entry("scope_category", scope_category.as_str())?;
            map.serialize_entry("category", category.as_str())?;
            map.serialize_entry("attributes", attributes)?;
        } else {
            map.serialize_entry("category", category.as_str())?;
        }
        map.serialize_entry("category_profile", profile)?;
        map.serialize_entry("data", &self.data)?;
        map.serialize_entry(
            "data_schema",
            &self.data_schema.map(
                |schema| serde_json::json!({ "name": schema.name, "version": schema.version }),
            ),
        )?;
        map.serialize_entry("metadata", &self.metadata)?;
        map.end()
    }
}

/// RFC 3339 in UTC with exactly six fractional digits: `2026-12-01T19:24:02.123456Z`.
/// A time outside what the calendar type holds is written as the epoch: the clock is the
/// caller's, and a record with a wrong date is better than no record.
pub(super) fn rfc3339_micros(at: SystemTime) -> String {
    let nanos: i128 = match at.duration_since(UNIX_EPOCH) {
        Ok(after) => i128::try_from(after.as_nanos()).unwrap_or(0),
        Err(before) => i128::try_from(before.duration().as_nanos()).map_or(0, |n| -n),
    };
    let dt = time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        dt.year(),
        u8::from(dt.month()),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second(),
        dt.microsecond()
    )
}

/// A v7 uuid from the record's time and ten bytes of the caller's randomness.
pub(super) fn uuid_v7(at: SystemTime, random: &[u8; 10]) -> Uuid {
    let millis = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    uuid::Builder::from_unix_timestamp_millis(millis, random).into_uuid()
}
