//! The pii_redaction component's configuration: detectors, custom regexes, action.

use regex::RegexBuilder;

use super::PluginConfigError;
use super::fields::Table;
use super::policy::REGEX_SIZE_LIMIT;
use crate::redact::{
    CustomDetector, Detector, MAX_CUSTOM_DETECTORS, RedactAction, RedactionConfig,
};

pub(super) fn parse(config: &Table<'_>) -> Result<RedactionConfig, PluginConfigError> {
    config.only(&["detectors", "custom", "action", "redact_requests"])?;
    let detectors = match config.strings("detectors")? {
        // Absent: every built-in detector.
        None => Detector::ALL.to_vec(),
        Some(names) => {
            let mut detectors = Vec::new();
            for name in names {
                let detector = Detector::parse(name).ok_or_else(|| {
                    config.place.wrong(
                        "detectors",
                        "a list of email, api_key, bearer_token, jwt, aws_access_key_id, private_key, credit_card, ip_address",
                    )
                })?;
                if !detectors.contains(&detector) {
                    detectors.push(detector);
                }
            }
            detectors
        }
    };
    let action = match config.str("action")? {
        None | Some("redact") => RedactAction::Redact,
        Some("hash") => RedactAction::Hash,
        Some("mask") => RedactAction::Mask,
        Some(_) => {
            return Err(config
                .place
                .wrong("action", "\"redact\", \"hash\" or \"mask\""));
        }
    };
    let redact_requests = config.bool("redact_requests")?.unwrap_or(false);
    let entries = config.tables("custom")?;
    if entries.len() > MAX_CUSTOM_DETECTORS {
        return Err(config.place.wrong("custom", "at most 64 custom detectors"));
    }
    let mut custom: Vec<CustomDetector> = Vec::new();
    for entry in &entries {
        entry.only(&["name", "regex", "keywords"])?;
        let name = entry.required_str("name")?;
        if name.is_empty()
            || name.len() > 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(entry
                .place
                .wrong("name", "up to 64 lowercase letters, digits and _"));
        }
        if Detector::parse(name).is_some() || custom.iter().any(|c| c.name == name) {
            return Err(entry.place.wrong("name", "a name no other detector has"));
        }
        let regex = RegexBuilder::new(entry.required_str("regex")?)
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|_| PluginConfigError::BadRegex {
                path: entry.place.path(),
                field: entry.place.field("regex"),
            })?;
        let keywords = entry
            .strings("keywords")?
            .ok_or_else(|| entry.place.missing("keywords"))?;
        if keywords.is_empty() || keywords.iter().any(|k| k.is_empty()) {
            return Err(entry
                .place
                .wrong("keywords", "a non-empty list of non-empty strings"));
        }
        // A quote, backslash or control character is escaped in a JSON body, where the
        // prefilter, which scans the raw bytes, would not see the keyword.
        if keywords
            .iter()
            .any(|k| k.chars().any(|c| c == '"' || c == '\\' || c.is_control()))
        {
            return Err(entry.place.wrong(
                "keywords",
                "keywords without quotes, backslashes or control characters",
            ));
        }
        custom.push(CustomDetector {
            name: name.to_owned(),
            regex,
            keywords: keywords.into_iter().map(str::to_owned).collect(),
        });
    }
    Ok(RedactionConfig {
        detectors,
        custom,
        action,
        redact_requests,
    })
}
