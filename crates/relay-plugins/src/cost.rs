//! Cost per request and per session from an optional price table, in exact integer
//! arithmetic.
//!
//! Prices are written as US dollars per million tokens (as providers publish them) and held
//! as micro-dollars per million tokens, which is the same number as pico-dollars per token:
//! a cost is then `tokens × price` in pico-dollars (10⁻¹² USD), exact, with no rounding
//! anywhere, and session sums are exact too. A price with more than six decimals is refused
//! at load rather than rounded.
//!
//! A usage bucket with tokens but no price is an error ([`CostError::MissingPrice`]), never a
//! silent zero: an under-reported cost is the failure this module exists to prevent.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use crate::usage::Usage;

/// An exact amount of US dollars, in pico-dollars (10⁻¹² USD).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Usd(u128);

impl Usd {
    /// Nothing.
    pub const ZERO: Usd = Usd(0);

    /// From pico-dollars.
    pub const fn from_picos(picos: u128) -> Self {
        Self(picos)
    }

    /// In pico-dollars.
    pub const fn picos(self) -> u128 {
        self.0
    }

    /// Rounded to whole micro-dollars, half away from zero (for sinks that want an integer).
    pub const fn micros_rounded(self) -> u128 {
        self.0.saturating_add(500_000) / 1_000_000
    }

    /// The sum; saturates instead of wrapping.
    pub const fn saturating_add(self, other: Usd) -> Usd {
        Usd(self.0.saturating_add(other.0))
    }
}

/// Dollars with as many decimals as needed (at least two, at most twelve): `0.0105`, `3.00`.
impl fmt::Display for Usd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / PICOS_PER_USD;
        let frac = self.0 % PICOS_PER_USD;
        let digits = format!("{frac:012}");
        let trimmed = digits.trim_end_matches('0');
        let shown = if trimmed.len() < 2 {
            &digits[..2]
        } else {
            trimmed
        };
        write!(f, "{whole}.{shown}")
    }
}

/// Serialised as its decimal string, so no consumer sees a rounded float.
impl serde::Serialize for Usd {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

const PICOS_PER_USD: u128 = 1_000_000_000_000;

/// A price in US dollars per million tokens, held exactly as micro-dollars per million tokens
/// (= pico-dollars per token). In TOML it is a number (`3.75`) or a string (`"3.75"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct UsdPerMTok(u64);

impl UsdPerMTok {
    /// From micro-dollars per million tokens (pico-dollars per token).
    pub const fn from_micros(micros: u64) -> Self {
        Self(micros)
    }

    /// Micro-dollars per million tokens (pico-dollars per token).
    pub const fn micros(self) -> u64 {
        self.0
    }

    /// Parses a plain decimal (`15`, `0.30`, `3.75`) with at most six decimals.
    pub fn parse(text: &str) -> Result<Self, PriceError> {
        let bad = || PriceError::NotADecimal {
            text: text.to_owned(),
        };
        let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
        if whole.is_empty() && frac.is_empty()
            || !whole.bytes().all(|b| b.is_ascii_digit())
            || !frac.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(bad());
        }
        let frac = frac.trim_end_matches('0');
        if frac.len() > 6 {
            return Err(PriceError::TooPrecise {
                text: text.to_owned(),
            });
        }
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| bad())?
        };
        let frac_micros: u64 = if frac.is_empty() {
            0
        } else {
            // At most six digits, padded on the right to micro-units.
            format!("{frac:0<6}").parse().map_err(|_| bad())?
        };
        whole
            .checked_mul(1_000_000)
            .and_then(|w| w.checked_add(frac_micros))
            .map(Self)
            .ok_or_else(bad)
    }

    fn times(self, tokens: u64) -> Usd {
        Usd(u128::from(self.0) * u128::from(tokens))
    }
}

impl fmt::Display for UsdPerMTok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let frac = format!("{:06}", self.0 % 1_000_000);
        let frac = frac.trim_end_matches('0');
        if frac.is_empty() {
            write!(f, "{}", self.0 / 1_000_000)
        } else {
            write!(f, "{}.{frac}", self.0 / 1_000_000)
        }
    }
}

impl<'de> Deserialize<'de> for UsdPerMTok {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = UsdPerMTok;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a price in US dollars per million tokens, such as 3.75")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                UsdPerMTok::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                UsdPerMTok::parse(&v.to_string()).map_err(E::custom)
            }
            // A TOML float arrives as f64; its shortest round-trip decimal is what the
            // operator wrote (`0.3` stays "0.3"), and that text is parsed exactly.
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
                UsdPerMTok::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                UsdPerMTok::parse(v.trim()).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// A price that could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PriceError {
    /// Not a non-negative decimal number.
    #[error("{text:?} is not a price in dollars per million tokens (a non-negative decimal)")]
    NotADecimal {
        /// What was written.
        text: String,
    },
    /// More than six decimals: it would have to be rounded.
    #[error("{text:?} has more than six decimals")]
    TooPrecise {
        /// What was written.
        text: String,
    },
}

/// The prices of one model, in dollars per million tokens. `input` and `output` are
/// required; a cache price is needed only when the model reports tokens in that bucket;
/// reasoning tokens are billed as output unless `reasoning` is set.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Uncached input tokens.
    pub input: UsdPerMTok,
    /// Input tokens read from the cache.
    #[serde(default)]
    pub cache_read: Option<UsdPerMTok>,
    /// Input tokens written to the cache with the 5-minute lifetime.
    #[serde(default)]
    pub cache_write_5m: Option<UsdPerMTok>,
    /// Input tokens written to the cache with the 1-hour lifetime.
    #[serde(default)]
    pub cache_write_1h: Option<UsdPerMTok>,
    /// Output tokens.
    pub output: UsdPerMTok,
    /// Reasoning tokens, when they are billed apart from the other output tokens.
    #[serde(default)]
    pub reasoning: Option<UsdPerMTok>,
}

/// A usage bucket that a price may lack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    /// `cache_read`.
    CacheRead,
    /// `cache_write_5m`.
    CacheWrite5m,
    /// `cache_write_1h`.
    CacheWrite1h,
}

impl Bucket {
    /// The price table key.
    pub fn key(self) -> &'static str {
        match self {
            Self::CacheRead => "cache_read",
            Self::CacheWrite5m => "cache_write_5m",
            Self::CacheWrite1h => "cache_write_1h",
        }
    }
}

impl fmt::Display for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// The cost of one request, by bucket; `total` is their exact sum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Cost {
    /// Uncached input.
    pub input: Usd,
    /// Cache reads.
    pub cache_read: Usd,
    /// Cache writes, 5-minute lifetime.
    pub cache_write_5m: Usd,
    /// Cache writes, 1-hour lifetime.
    pub cache_write_1h: Usd,
    /// Output, reasoning included unless reasoning has its own price.
    pub output: Usd,
    /// Reasoning, when it has its own price (else zero: it is in `output`).
    pub reasoning: Usd,
    /// The sum of the above.
    pub total: Usd,
}

/// Why a request has no cost.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CostError {
    /// The price table has no entry for the model.
    #[error("no price for model {model:?}")]
    UnknownModel {
        /// The model looked up.
        model: String,
    },
    /// The model's entry has no price for a bucket that has tokens.
    #[error("model {model:?} used {tokens} {bucket} tokens but its price entry has no {bucket}")]
    MissingPrice {
        /// The price table key that matched.
        model: String,
        /// The bucket without a price.
        bucket: Bucket,
        /// How many tokens it had.
        tokens: u64,
    },
}

/// A bucket with tokens but no price in a model's entry.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
#[error("{tokens} {bucket} tokens but no {bucket} price")]
pub struct MissingPrice {
    /// The bucket without a price.
    pub bucket: Bucket,
    /// How many tokens it had.
    pub tokens: u64,
}

impl Price {
    /// The cost of `usage` at these prices.
    pub fn cost(&self, usage: &Usage) -> Result<Cost, MissingPrice> {
        let priced = |price: Option<UsdPerMTok>, tokens: u64, bucket| match (price, tokens) {
            (_, 0) => Ok(Usd::ZERO),
            (Some(p), n) => Ok(p.times(n)),
            (None, tokens) => Err(MissingPrice { bucket, tokens }),
        };
        let input = self.input.times(usage.uncached_input);
        let cache_read = priced(self.cache_read, usage.cache_read, Bucket::CacheRead)?;
        let cache_write_5m = priced(
            self.cache_write_5m,
            usage.cache_write_5m,
            Bucket::CacheWrite5m,
        )?;
        let cache_write_1h = priced(
            self.cache_write_1h,
            usage.cache_write_1h,
            Bucket::CacheWrite1h,
        )?;
        let (output, reasoning) = match self.reasoning {
            None => (self.output.times(usage.output), Usd::ZERO),
            Some(r) => {
                let reasoning = usage.reasoning.unwrap_or(0).min(usage.output);
                (
                    self.output.times(usage.output - reasoning),
                    r.times(reasoning),
                )
            }
        };
        let total = [
            cache_read,
            cache_write_5m,
            cache_write_1h,
            output,
            reasoning,
        ]
        .into_iter()
        .fold(input, Usd::saturating_add);
        Ok(Cost {
            input,
            cache_read,
            cache_write_5m,
            cache_write_1h,
            output,
            reasoning,
            total,
        })
    }
}

/// The optional `[components.config.prices]` table: model name → prices.
///
/// A model is found by its exact name, else by the longest entry that is a prefix of it
/// followed by `-`, so `claude-sonnet-4-5` also prices `claude-sonnet-4-5-20250929`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct PriceTable {
    models: BTreeMap<String, Price>,
}

impl PriceTable {
    /// A table from its entries.
    pub fn new(models: BTreeMap<String, Price>) -> Self {
        Self { models }
    }

    /// True when no model is priced: costs are not asked for.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    /// The entry that prices `model`, with its key.
    pub fn lookup(&self, model: &str) -> Option<(&str, &Price)> {
        if let Some((key, price)) = self.models.get_key_value(model) {
            return Some((key, price));
        }
        self.models
            .iter()
            .filter(|(key, _)| {
                model
                    .strip_prefix(key.as_str())
                    .is_some_and(|rest| rest.starts_with('-'))
            })
            .max_by_key(|(key, _)| key.len())
            .map(|(key, price)| (key.as_str(), price))
    }

    /// The cost of one request to `model` (the response model when the body named one, else
    /// the request's).
    pub fn cost(&self, model: &str, usage: &Usage) -> Result<Cost, CostError> {
        let (key, price) = self.lookup(model).ok_or_else(|| CostError::UnknownModel {
            model: model.to_owned(),
        })?;
        price
            .cost(usage)
            .map_err(|MissingPrice { bucket, tokens }| CostError::MissingPrice {
                model: key.to_owned(),
                bucket,
                tokens,
            })
    }

    /// The cost of one exchange: priced by the response model when the table knows it, else
    /// by the request's model (a provider may answer with a dated name the table lacks, or
    /// name no model at all).
    pub fn cost_for(
        &self,
        response_model: Option<&str>,
        request_model: Option<&str>,
        usage: &Usage,
    ) -> Result<Cost, CostError> {
        let known = [response_model, request_model]
            .into_iter()
            .flatten()
            .find(|model| self.lookup(model).is_some());
        match known {
            Some(model) => self.cost(model, usage),
            None => Err(CostError::UnknownModel {
                model: response_model.or(request_model).unwrap_or("").to_owned(),
            }),
        }
    }
}

/// The running totals of one session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SessionCost {
    /// The usage of every request with usage.
    pub usage: Usage,
    /// The exact sum of the priced requests' costs.
    pub total: Usd,
    /// Requests that had a cost.
    pub priced_requests: u64,
    /// Requests with usage but no cost (no price for the model or a bucket): `total` leaves
    /// them out, so a non-zero count says the total is a lower bound.
    pub unpriced_requests: u64,
}

impl SessionCost {
    /// Adds one request's usage and, if it could be priced, its cost.
    pub fn record(&mut self, usage: &Usage, cost: Option<&Cost>) {
        self.usage.add(usage);
        match cost {
            Some(cost) => {
                self.total = self.total.saturating_add(cost.total);
                self.priced_requests += 1;
            }
            None => self.unpriced_requests += 1,
        }
    }
}

#[cfg(test)]
mod tests;
