//! Reading a component's `[components.config]` strictly: typed getters that name the field
//! in their errors, and a check that no key is left unknown.

use std::collections::BTreeMap;
use std::path::Path;

use super::{FieldPath, PluginConfigError};
use crate::UsdPerMTok;

/// Where a table sits: the file, the component and the dotted key prefix.
#[derive(Debug, Clone)]
pub(super) struct Place<'p> {
    pub(super) path: &'p Path,
    pub(super) component: usize,
    pub(super) prefix: String,
}

impl Place<'_> {
    pub(super) fn field(&self, key: &str) -> FieldPath {
        FieldPath::component(self.component, format!("{}.{key}", self.prefix))
    }

    fn child(&self, key: &str) -> Place<'_> {
        Place {
            path: self.path,
            component: self.component,
            prefix: format!("{}.{key}", self.prefix),
        }
    }

    pub(super) fn path(&self) -> std::path::PathBuf {
        self.path.to_owned()
    }

    pub(super) fn wrong(&self, key: &str, expected: &'static str) -> PluginConfigError {
        PluginConfigError::WrongType {
            path: self.path(),
            field: self.field(key),
            expected,
        }
    }

    pub(super) fn missing(&self, key: &str) -> PluginConfigError {
        PluginConfigError::Missing {
            path: self.path(),
            field: self.field(key),
        }
    }
}

/// A table of a component's configuration.
#[derive(Debug)]
pub(super) struct Table<'t> {
    table: &'t toml::Table,
    pub(super) place: Place<'t>,
}

impl<'t> Table<'t> {
    pub(super) fn new(table: &'t toml::Table, place: Place<'t>) -> Table<'t> {
        Table { table, place }
    }

    /// Refuses the first key not in `known`.
    pub(super) fn only(&self, known: &[&str]) -> Result<(), PluginConfigError> {
        match self.table.keys().find(|k| !known.contains(&k.as_str())) {
            Some(key) => Err(PluginConfigError::UnknownKey {
                path: self.place.path(),
                field: self.place.field(key),
            }),
            None => Ok(()),
        }
    }

    pub(super) fn has(&self, key: &str) -> bool {
        self.table.contains_key(key)
    }

    pub(super) fn str(&self, key: &str) -> Result<Option<&'t str>, PluginConfigError> {
        match self.table.get(key) {
            None => Ok(None),
            Some(toml::Value::String(text)) => Ok(Some(text)),
            Some(_) => Err(self.place.wrong(key, "a string")),
        }
    }

    pub(super) fn required_str(&self, key: &str) -> Result<&'t str, PluginConfigError> {
        self.str(key)?.ok_or_else(|| self.place.missing(key))
    }

    pub(super) fn bool(&self, key: &str) -> Result<Option<bool>, PluginConfigError> {
        match self.table.get(key) {
            None => Ok(None),
            Some(toml::Value::Boolean(value)) => Ok(Some(*value)),
            Some(_) => Err(self.place.wrong(key, "a boolean")),
        }
    }

    /// An integer in `min..=max`; `expected` says the range in words.
    pub(super) fn int(
        &self,
        key: &str,
        min: u64,
        max: u64,
        expected: &'static str,
    ) -> Result<Option<u64>, PluginConfigError> {
        match self.table.get(key) {
            None => Ok(None),
            Some(toml::Value::Integer(value)) => u64::try_from(*value)
                .ok()
                .filter(|v| (min..=max).contains(v))
                .map(Some)
                .ok_or_else(|| self.place.wrong(key, expected)),
            Some(_) => Err(self.place.wrong(key, expected)),
        }
    }

    /// A number (integer or float), finite and at least 0.
    /// A price in dollars per million tokens: a number or a decimal string, at most six
    /// decimals. A TOML float is read from its shortest decimal text, which is the text it
    /// was written as for every price with six decimals or fewer.
    pub(super) fn price(&self, key: &str) -> Result<Option<UsdPerMTok>, PluginConfigError> {
        let expected = "a price of at least 0 with at most six decimals";
        let text = match self.table.get(key) {
            None => return Ok(None),
            Some(toml::Value::Integer(value)) if *value >= 0 => value.to_string(),
            Some(toml::Value::Float(value)) if value.is_finite() && *value >= 0.0 => {
                value.to_string()
            }
            Some(toml::Value::String(text)) => text.clone(),
            Some(_) => return Err(self.place.wrong(key, expected)),
        };
        UsdPerMTok::parse(&text)
            .map(Some)
            .map_err(|_| self.place.wrong(key, expected))
    }

    pub(super) fn table(&self, key: &str) -> Result<Option<Table<'_>>, PluginConfigError> {
        match self.table.get(key) {
            None => Ok(None),
            Some(toml::Value::Table(table)) => Ok(Some(Table {
                table,
                place: self.place.child(key),
            })),
            Some(_) => Err(self.place.wrong(key, "a table")),
        }
    }

    /// An array of tables, each with its place (`key[n]`, counted from 1).
    pub(super) fn tables(&self, key: &str) -> Result<Vec<Table<'_>>, PluginConfigError> {
        let expected = "an array of tables";
        let entries = match self.table.get(key) {
            None => return Ok(Vec::new()),
            Some(toml::Value::Array(entries)) => entries,
            Some(_) => return Err(self.place.wrong(key, expected)),
        };
        entries
            .iter()
            .enumerate()
            .map(|(i, entry)| match entry {
                toml::Value::Table(table) => Ok(Table {
                    table,
                    place: self.place.child(&format!("{key}[{}]", i + 1)),
                }),
                _ => Err(self.place.wrong(key, expected)),
            })
            .collect()
    }

    /// An array of strings.
    pub(super) fn strings(&self, key: &str) -> Result<Option<Vec<&'t str>>, PluginConfigError> {
        let expected = "an array of strings";
        match self.table.get(key) {
            None => Ok(None),
            Some(toml::Value::Array(items)) => items
                .iter()
                .map(|item| item.as_str().ok_or_else(|| self.place.wrong(key, expected)))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(self.place.wrong(key, expected)),
        }
    }

    /// A table of strings (`headers`, `header_env`), in key order.
    pub(super) fn string_map(
        &self,
        key: &str,
    ) -> Result<BTreeMap<String, String>, PluginConfigError> {
        let expected = "a table of strings";
        match self.table.get(key) {
            None => Ok(BTreeMap::new()),
            Some(toml::Value::Table(table)) => table
                .iter()
                .map(|(k, v)| match v {
                    toml::Value::String(v) => Ok((k.clone(), v.clone())),
                    _ => Err(PluginConfigError::WrongType {
                        path: self.place.path(),
                        field: self.place.child(key).field(k),
                        expected,
                    }),
                })
                .collect(),
            Some(_) => Err(self.place.wrong(key, expected)),
        }
    }

    /// The names of the keys of a sub-table with the sub-tables themselves (`prices`).
    pub(super) fn entries(&self) -> impl Iterator<Item = (&'t str, &'t toml::Value)> {
        self.table.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub(super) fn child_table(
        &self,
        key: &'t str,
        value: &'t toml::Value,
    ) -> Result<Table<'_>, PluginConfigError> {
        match value {
            toml::Value::Table(table) => Ok(Table {
                table,
                place: self.place.child(&quote_key(key)),
            }),
            _ => Err(self.place.wrong(&quote_key(key), "a table")),
        }
    }
}

/// A key that is not a bare TOML key is shown quoted, as it is written (`prices."gpt-5.1"`).
fn quote_key(key: &str) -> String {
    if !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
}
