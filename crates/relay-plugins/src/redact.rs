//! The redactor (SPEC §8.1 pii_redaction): built-in detectors and custom regexes, each
//! behind a cheap prefilter, and three ways to replace what they find.
//!
//! A clean text costs one keyword scan (Aho-Corasick over every detector's trigger words)
//! and one byte scan for the detectors without a keyword (card numbers, IPv4 addresses);
//! it is returned borrowed, without allocating. Only the detectors whose trigger occurs run
//! their regex.
//!
//! Two entry points: [`Redactor::redact_str`] for record content, and
//! [`Redactor::redact_json_body`] for an outbound request body, which rewrites only the
//! JSON strings that hold a match and leaves every other byte as it was.
//!
//! The detectors stay in this file with the matching loop, a little past the usual size, so
//! that each pattern is read beside the prefilter bytes that must admit it.

use std::borrow::Cow;
use std::fmt;
use std::fmt::Write as _;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use regex::Regex;

mod json;

pub use json::{is_json_object, parse_value};

/// A built-in detector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Detector {
    Email,
    /// Provider and platform API keys: `sk-…` (OpenAI, Anthropic `sk-ant-…`), GitHub
    /// `ghp_…`/`github_pat_…`, Slack `xox?-…`, Google `AIza…` and `ya29.…`, and the tokens
    /// other platforms print on their own (GitLab, npm, PyPI, Hugging Face, Vault,
    /// DigitalOcean, Stripe's secret keys, SendGrid, Heroku, Shopify).
    ApiKey,
    /// The token after `Bearer `.
    BearerToken,
    Jwt,
    /// `AKIA…` and the other AWS key id prefixes.
    AwsAccessKeyId,
    /// A PEM private key block, from `-----BEGIN … PRIVATE KEY-----` to its end line (or
    /// the end of the text when cut off).
    PrivateKey,
    /// 13 to 19 digits, optionally grouped by spaces or dashes, passing the Luhn check.
    CreditCard,
    /// An IPv4 address.
    IpAddress,
}

impl Detector {
    pub const ALL: [Detector; 8] = [
        Detector::Email,
        Detector::ApiKey,
        Detector::BearerToken,
        Detector::Jwt,
        Detector::AwsAccessKeyId,
        Detector::PrivateKey,
        Detector::CreditCard,
        Detector::IpAddress,
    ];

    /// The detectors of credentials, which records never hold (SPEC §8.2): they redact
    /// records whatever a component's `detectors` lists.
    pub const CREDENTIALS: [Detector; 5] = [
        Detector::ApiKey,
        Detector::BearerToken,
        Detector::Jwt,
        Detector::AwsAccessKeyId,
        Detector::PrivateKey,
    ];

    /// The name in the configuration and in replacements.
    pub fn as_str(self) -> &'static str {
        match self {
            Detector::Email => "email",
            Detector::ApiKey => "api_key",
            Detector::BearerToken => "bearer_token",
            Detector::Jwt => "jwt",
            Detector::AwsAccessKeyId => "aws_access_key_id",
            Detector::PrivateKey => "private_key",
            Detector::CreditCard => "credit_card",
            Detector::IpAddress => "ip_address",
        }
    }

    pub fn parse(text: &str) -> Option<Detector> {
        Detector::ALL.into_iter().find(|d| d.as_str() == text)
    }

    /// The regex; `group` 1 when only part of the match is secret.
    fn pattern(self) -> &'static str {
        match self {
            Detector::Email => r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}",
            Detector::ApiKey => {
                concat!(
                    r"(?-u:\b)(?:sk-[A-Za-z0-9_-]{12,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35}",
                    r"|glpat-[A-Za-z0-9_-]{20,}|npm_[A-Za-z0-9]{36}|pypi-[A-Za-z0-9_-]{50,}|hf_[A-Za-z0-9]{30,}",
                    r"|hv[sbr]\.[A-Za-z0-9_-]{24,}|ya29\.[A-Za-z0-9_-]{20,}|do[opr]_v1_[a-f0-9]{64}",
                    r"|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}|SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}",
                    r"|HRKU-[A-Za-z0-9_-]{20,}|shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}|whsec_[A-Za-z0-9+/=]{24,})",
                )
            }
            Detector::BearerToken => r"(?:Bearer|bearer|BEARER)[ \t]+([A-Za-z0-9._~+/-]{8,}=*)",
            Detector::Jwt => r"eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*",
            Detector::AwsAccessKeyId => {
                r"(?-u:\b)(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?-u:\b)"
            }
            // Also a PGP key block (`PRIVATE KEY BLOCK`, `SECRET KEY BLOCK`) and SSH.com's
            // `---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----`.
            Detector::PrivateKey => concat!(
                r"-----BEGIN[A-Z0-9 ]*(?:PRIVATE|SECRET) KEY[A-Z ]*-----(?s:.*?)(?:-----END[A-Z0-9 ]*(?:PRIVATE|SECRET) KEY[A-Z ]*-----|\z)",
                r"|---- BEGIN[A-Z0-9 ]*PRIVATE KEY ----(?s:.*?)(?:---- END[A-Z0-9 ]*PRIVATE KEY ----|\z)",
            ),
            // Card numbers start with 2 to 6 (Mastercard, American Express and Diners,
            // Visa, Mastercard, Discover and UnionPay); a millisecond timestamp (`17…`) or a
            // nil UUID's zeros that pass the Luhn check are not one.
            Detector::CreditCard => r"(?-u:\b)[2-6](?:[ -]?[0-9]){12,18}(?-u:\b)",
            Detector::IpAddress => {
                r"(?-u:\b)(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(?-u:\b)"
            }
        }
    }

    fn group(self) -> usize {
        match self {
            Detector::BearerToken => 1,
            _ => 0,
        }
    }

    fn prefilter(self) -> Prefilter {
        match self {
            Detector::Email => Prefilter::AtSign,
            Detector::ApiKey => Prefilter::Keywords(&[
                "sk-",
                "ghp_",
                "gho_",
                "ghu_",
                "ghs_",
                "ghr_",
                "github_pat_",
                "xoxa-",
                "xoxb-",
                "xoxp-",
                "xoxr-",
                "xoxs-",
                "xapp-",
                "AIza",
                "glpat-",
                "npm_",
                "pypi-",
                "hf_",
                "hvs.",
                "hvb.",
                "hvr.",
                "ya29.",
                "dop_v1_",
                "doo_v1_",
                "dor_v1_",
                "sk_live_",
                "sk_test_",
                "rk_live_",
                "rk_test_",
                "SG.",
                "HRKU-",
                "shpat_",
                "shpca_",
                "shppa_",
                "shpss_",
                "whsec_",
            ]),
            Detector::BearerToken => Prefilter::Keywords(&["Bearer", "bearer", "BEARER"]),
            Detector::Jwt => Prefilter::Keywords(&["eyJ"]),
            Detector::AwsAccessKeyId => Prefilter::Keywords(&[
                "AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA",
            ]),
            Detector::PrivateKey => Prefilter::Keywords(&["-----BEGIN", "---- BEGIN"]),
            Detector::CreditCard => Prefilter::DigitRun,
            Detector::IpAddress => Prefilter::DigitDotDigit,
        }
    }
}

impl fmt::Display for Detector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

enum Prefilter {
    /// Any of these words must occur.
    Keywords(&'static [&'static str]),
    /// An `@` must occur.
    AtSign,
    /// At least 13 digits in a row, single spaces or dashes allowed between them.
    DigitRun,
    /// Digits joined by at least three dots.
    DigitDotDigit,
}

/// How a match is replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RedactAction {
    /// `[REDACTED:<detector>]`.
    #[default]
    Redact,
    /// `[HASH:<detector>:<12 hex digits>]`: HMAC-SHA256 under the worker generation's key,
    /// so equal values correlate within a generation without being readable.
    Hash,
    /// The first and last two characters kept, the rest `*` (all `*` below 8 characters).
    Mask,
}

impl RedactAction {
    pub fn as_str(self) -> &'static str {
        match self {
            RedactAction::Redact => "redact",
            RedactAction::Hash => "hash",
            RedactAction::Mask => "mask",
        }
    }
}

/// An organisation's own detector: a regex that runs only where one of its keywords occurs.
#[derive(Debug, Clone)]
pub struct CustomDetector {
    /// Lowercase letters, digits and `_`; used in replacements.
    pub name: String,
    pub regex: Regex,
    /// Each match must contain one of them (compared ignoring ASCII case): a text without
    /// any is not searched.
    pub keywords: Vec<String>,
}

impl PartialEq for CustomDetector {
    fn eq(&self, other: &CustomDetector) -> bool {
        self.name == other.name
            && self.regex.as_str() == other.regex.as_str()
            && self.keywords == other.keywords
    }
}

/// A pii_redaction component's configuration, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct RedactionConfig {
    pub detectors: Vec<Detector>,
    pub custom: Vec<CustomDetector>,
    pub action: RedactAction,
    /// Also rewrite outbound request bodies (records are always redacted).
    pub redact_requests: bool,
}

impl Default for RedactionConfig {
    fn default() -> RedactionConfig {
        RedactionConfig {
            detectors: Detector::ALL.to_vec(),
            custom: Vec::new(),
            action: RedactAction::Redact,
            redact_requests: false,
        }
    }
}

impl RedactionConfig {
    /// The configuration records are redacted with: this one, plus any credential detector
    /// its `detectors` leaves out, since records never hold a credential.
    pub fn for_records(&self) -> RedactionConfig {
        let mut records = self.clone();
        for detector in Detector::CREDENTIALS {
            if !records.detectors.contains(&detector) {
                records.detectors.push(detector);
            }
        }
        records
    }
}

/// The most custom detectors a component may have (the prefilter tracks detectors in a
/// 128-bit set).
pub const MAX_CUSTOM_DETECTORS: usize = 64;

/// How many matches each detector replaced; empty (and unallocated) when nothing was.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replacements {
    counts: Vec<(Arc<str>, usize)>,
}

impl Replacements {
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// `(detector name, count)` in the order detectors are configured.
    pub fn iter(&self) -> impl Iterator<Item = (&str, usize)> {
        self.counts.iter().map(|(name, n)| (&**name, *n))
    }

    pub fn total(&self) -> usize {
        self.counts.iter().map(|(_, n)| n).sum()
    }

    fn add(&mut self, name: &Arc<str>, n: usize) {
        match self.counts.iter_mut().find(|(k, _)| Arc::ptr_eq(k, name)) {
            Some((_, count)) => *count += n,
            None => self.counts.push((Arc::clone(name), n)),
        }
    }

    fn merge(&mut self, other: Replacements) {
        for (name, n) in other.counts {
            self.add(&name, n);
        }
    }
}

/// A redacted request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyRedaction<'a> {
    /// Borrowed when nothing matched; otherwise the rewritten body (its length changed: the
    /// worker fixes `content-length`).
    pub body: Cow<'a, [u8]>,
    pub replaced: Replacements,
}

struct Compiled {
    name: Arc<str>,
    regex: Regex,
    group: usize,
    luhn: bool,
}

/// Set bits: detectors whose prefilter fired.
type Triggered = u128;

/// The redactor of one worker generation.
pub struct Redactor {
    detectors: Vec<Compiled>,
    /// The built-in detectors' keywords, case-sensitive (so the automaton's prefilter looks
    /// for few, rare byte sequences), and the custom ones, ignoring ASCII case.
    builtin_words: Option<KeywordSet>,
    custom_words: Option<KeywordSet>,
    /// Detectors behind the byte prefilters.
    at_sign: Triggered,
    digit_run: Triggered,
    digit_dot_digit: Triggered,
    action: RedactAction,
    key: ring::hmac::Key,
    /// Whether a custom keyword holds a non-ASCII character (which any `\u` escape may spell).
    non_ascii_keywords: bool,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field(
                "detectors",
                &self.detectors.iter().map(|d| &*d.name).collect::<Vec<_>>(),
            )
            .field("action", &self.action)
            .finish_non_exhaustive()
    }
}

/// Keywords in one automaton, each carrying the detectors it triggers.
struct KeywordSet {
    automaton: AhoCorasick,
    /// Per pattern: its detectors and those of every keyword that is a prefix of it.
    owner: Vec<Triggered>,
    /// Every detector behind one of these keywords.
    all: Triggered,
}

impl KeywordSet {
    fn new(words: &[(&str, Triggered)], ignore_case: bool) -> Option<KeywordSet> {
        let fold = |w: &str| {
            if ignore_case {
                w.to_ascii_lowercase()
            } else {
                w.to_owned()
            }
        };
        let mut patterns: Vec<String> = Vec::new();
        let mut own: Vec<Triggered> = Vec::new();
        for (word, bit) in words {
            let word = fold(word);
            match patterns.iter().position(|p| *p == word) {
                Some(at) => own[at] |= bit,
                None => {
                    patterns.push(word);
                    own.push(*bit);
                }
            }
        }
        if patterns.is_empty() {
            return None;
        }
        // Leftmost-longest reports, at each position, the longest keyword only: a keyword
        // that is a prefix of it occurs there too, so it carries that keyword's detectors.
        let owner: Vec<Triggered> = patterns
            .iter()
            .map(|long| {
                patterns
                    .iter()
                    .zip(&own)
                    .filter(|(short, _)| long.starts_with(short.as_str()))
                    .fold(0, |acc, (_, bits)| acc | bits)
            })
            .collect();
        let automaton = AhoCorasickBuilder::new()
            .ascii_case_insensitive(ignore_case)
            .match_kind(MatchKind::LeftmostLongest)
            .build(&patterns)
            .ok()?;
        Some(KeywordSet {
            automaton,
            all: owner.iter().fold(0, |acc, b| acc | b),
            owner,
        })
    }

    /// The detectors whose keywords occur in `bytes`: a leftmost search (which uses the
    /// automaton's fast prefilter), restarted one byte after each match so that keywords
    /// overlapping it are seen too, until every detector is found or the text ends.
    fn scan(&self, bytes: &[u8]) -> Triggered {
        let mut set = 0;
        let mut at = 0;
        while let Some(found) = self
            .automaton
            .find(aho_corasick::Input::new(bytes).range(at..))
        {
            set |= self.owner[found.pattern().as_usize()];
            if set == self.all {
                break;
            }
            at = found.start() + 1;
        }
        set
    }
}

/// At most this many passes: a replacement can uncover a match that an overlapping one hid.
const MAX_PASSES: usize = 4;

impl Redactor {
    /// `hash_key` is the worker generation's secret for the `hash` action (any length; 32
    /// random bytes expected).
    pub fn new(config: &RedactionConfig, hash_key: &[u8]) -> Redactor {
        let mut detectors = Vec::new();
        let mut builtin_words: Vec<(&str, Triggered)> = Vec::new();
        let mut custom_words: Vec<(&str, Triggered)> = Vec::new();
        let mut at_sign = 0;
        let mut digit_run = 0;
        let mut digit_dot_digit = 0;
        let mut seen = Vec::new();
        for detector in &config.detectors {
            if seen.contains(detector) {
                continue;
            }
            seen.push(*detector);
            // The built-in patterns are constants that the tests compile.
            let Ok(regex) = Regex::new(detector.pattern()) else {
                continue;
            };
            let bit: Triggered = 1 << detectors.len();
            match detector.prefilter() {
                Prefilter::Keywords(words) => builtin_words.extend(words.iter().map(|w| (*w, bit))),
                Prefilter::AtSign => at_sign |= bit,
                Prefilter::DigitRun => digit_run |= bit,
                Prefilter::DigitDotDigit => digit_dot_digit |= bit,
            }
            detectors.push(Compiled {
                name: Arc::from(detector.as_str()),
                regex,
                group: detector.group(),
                luhn: *detector == Detector::CreditCard,
            });
        }
        for custom in config.custom.iter().take(MAX_CUSTOM_DETECTORS) {
            let bit: Triggered = 1 << detectors.len();
            custom_words.extend(custom.keywords.iter().map(|w| (w.as_str(), bit)));
            detectors.push(Compiled {
                name: Arc::from(custom.name.as_str()),
                regex: custom.regex.clone(),
                group: 0,
                luhn: false,
            });
        }
        Redactor {
            detectors,
            builtin_words: KeywordSet::new(&builtin_words, false),
            custom_words: KeywordSet::new(&custom_words, true),
            at_sign,
            digit_run,
            digit_dot_digit,
            action: config.action,
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, hash_key),
            non_ascii_keywords: config
                .custom
                .iter()
                .flat_map(|c| &c.keywords)
                .any(|k| !k.is_ascii()),
        }
    }

    /// Redacts `text`, borrowed back when nothing matched.
    pub fn redact_str<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.redact_str_counted(text).0
    }

    /// Redacts `text` and says what was replaced.
    pub fn redact_str_counted<'a>(&self, text: &'a str) -> (Cow<'a, str>, Replacements) {
        let triggered = self.triggered(text.as_bytes());
        if triggered == 0 {
            return (Cow::Borrowed(text), Replacements::default());
        }
        match self.redact_triggered(text, triggered) {
            Some((text, replaced)) => (Cow::Owned(text), replaced),
            None => (Cow::Borrowed(text), Replacements::default()),
        }
    }

    /// Redacts the strings of a JSON request body in place: only string literals holding a
    /// match change (a string with escapes is re-escaped as a whole), and the bytes around
    /// them stay identical; the JSON is never re-serialised. A body that is not UTF-8 is
    /// searched by its UTF-8 parts only where a detector's trigger occurs.
    pub fn redact_json_body<'a>(&self, body: &'a [u8]) -> BodyRedaction<'a> {
        // A `\u` escape can spell a trigger (`\u0040` is `@`) that the scan of the raw bytes
        // cannot see: then every detector is a candidate, and each string decides on its
        // decoded value.
        let triggered = if json::may_hide_a_trigger(body, self.non_ascii_keywords) {
            self.all()
        } else {
            self.triggered(body)
        };
        if triggered == 0 {
            return BodyRedaction {
                body: Cow::Borrowed(body),
                replaced: Replacements::default(),
            };
        }
        json::redact_strings(self, body, triggered)
    }

    fn all(&self) -> Triggered {
        match self.detectors.len() {
            0 => 0,
            n => Triggered::MAX >> (Triggered::BITS as usize - n),
        }
    }

    /// The detectors whose prefilter fires on `bytes`.
    fn triggered(&self, bytes: &[u8]) -> Triggered {
        let mut set: Triggered = 0;
        for words in [&self.builtin_words, &self.custom_words]
            .into_iter()
            .flatten()
        {
            set |= words.scan(bytes);
        }
        if self.at_sign != 0 && memchr::memchr(b'@', bytes).is_some() {
            set |= self.at_sign;
        }
        if self.digit_run != 0 && has_digit_run(bytes, 13) {
            set |= self.digit_run;
        }
        if self.digit_dot_digit != 0 && has_dotted_quad(bytes) {
            set |= self.digit_dot_digit;
        }
        set
    }

    /// Runs the triggered detectors until nothing matches (or `MAX_PASSES`); `None` when
    /// nothing matched at all.
    fn redact_triggered(&self, text: &str, triggered: Triggered) -> Option<(String, Replacements)> {
        let (mut current, mut replaced) = self.pass(text, triggered)?;
        for _ in 1..MAX_PASSES {
            let again = self.triggered(current.as_bytes());
            match self.pass(&current, again) {
                Some((next, more)) => {
                    current = next;
                    replaced.merge(more);
                }
                None => break,
            }
        }
        Some((current, replaced))
    }

    /// One pass: every triggered detector's matches on `text`, overlaps resolved (the
    /// earliest start wins, then the longest, then the detector listed first).
    fn pass(&self, text: &str, triggered: Triggered) -> Option<(String, Replacements)> {
        let mut spans: Vec<(usize, usize, usize)> = Vec::new();
        for (index, detector) in self.detectors.iter().enumerate() {
            if triggered & (1 << index) == 0 {
                continue;
            }
            find_spans(detector, text, |start, end| spans.push((start, end, index)));
        }
        if spans.is_empty() {
            return None;
        }
        spans.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
        let mut out = String::with_capacity(text.len() + 32);
        let mut replaced = Replacements::default();
        let mut at = 0;
        for (start, end, index) in spans {
            if start < at {
                continue;
            }
            out.push_str(&text[at..start]);
            let detector = &self.detectors[index];
            self.replacement(&detector.name, &text[start..end], &mut out);
            replaced.add(&detector.name, 1);
            at = end;
        }
        out.push_str(&text[at..]);
        Some((out, replaced))
    }

    /// Appends the replacement for `value`; every replacement is safe inside a JSON string
    /// (ASCII letters, digits, `[`, `]`, `:`, `_`, `*`, or characters of `value` itself).
    fn replacement(&self, name: &str, value: &str, out: &mut String) {
        match self.action {
            RedactAction::Redact => {
                let _ = write!(out, "[REDACTED:{name}]");
            }
            RedactAction::Hash => {
                let tag = ring::hmac::sign(&self.key, value.as_bytes());
                let _ = write!(out, "[HASH:{name}:");
                for byte in &tag.as_ref()[..6] {
                    let _ = write!(out, "{byte:02x}");
                }
                out.push(']');
            }
            RedactAction::Mask => mask(value, out),
        }
    }
}

/// Finds the detector's matches, checking card numbers with Luhn: a candidate that fails is
/// retried from its next character, so a valid number inside a longer run is still found.
fn find_spans(detector: &Compiled, text: &str, mut found: impl FnMut(usize, usize)) {
    let mut at = 0;
    while at <= text.len() {
        let Some(caps) = detector.regex.captures_at(text, at) else {
            break;
        };
        let Some(whole) = caps.get(0) else { break };
        let span = caps.get(detector.group).unwrap_or(whole);
        if detector.luhn && !luhn(span.as_str()) {
            at = next_char(text, whole.start());
            continue;
        }
        if span.start() < span.end() {
            found(span.start(), span.end());
        }
        at = if whole.end() > whole.start() {
            whole.end()
        } else {
            next_char(text, whole.end())
        };
    }
}

fn next_char(text: &str, at: usize) -> usize {
    text[at..]
        .chars()
        .next()
        .map_or(text.len() + 1, |c| at + c.len_utf8())
}

/// The Luhn check over the digits of `text` (13 to 19 of them).
pub fn luhn(text: &str) -> bool {
    let digits = text.bytes().filter(u8::is_ascii_digit);
    let mut sum = 0u32;
    let mut count = 0;
    for (i, digit) in digits.rev().enumerate() {
        let mut d = u32::from(digit - b'0');
        if i % 2 == 1 {
            d *= 2;
            if d > 9 {
                d -= 9;
            }
        }
        sum += d;
        count += 1;
    }
    (13..=19).contains(&count) && sum.is_multiple_of(10)
}

fn mask(value: &str, out: &mut String) {
    let n = value.chars().count();
    if n < 8 {
        out.extend(std::iter::repeat_n('*', n));
        return;
    }
    for (i, c) in value.chars().enumerate() {
        out.push(if i < 2 || i >= n - 2 { c } else { '*' });
    }
}

/// Whether `bytes` holds `min` digits in a row, allowing one space or dash between two.
/// Such a run spans at least `min` bytes of digits, spaces and dashes, so only every
/// `min`-th byte is looked at until one of them is such a byte.
fn has_digit_run(bytes: &[u8], min: usize) -> bool {
    let in_class = |b: u8| b.is_ascii_digit() || b == b' ' || b == b'-';
    let min = min.max(1);
    let mut checked_to = 0;
    let mut at = min - 1;
    while at < bytes.len() {
        if at >= checked_to && in_class(bytes[at]) {
            let mut start = at;
            while start > checked_to && in_class(bytes[start - 1]) {
                start -= 1;
            }
            let mut end = at + 1;
            while end < bytes.len() && in_class(bytes[end]) {
                end += 1;
            }
            if end - start >= min && digit_run_in(&bytes[start..end], min) {
                return true;
            }
            checked_to = end;
        }
        at += min;
    }
    false
}

fn digit_run_in(bytes: &[u8], min: usize) -> bool {
    let mut run = 0;
    let mut separator = false;
    for &b in bytes {
        if b.is_ascii_digit() {
            run += 1;
            separator = false;
            if run >= min {
                return true;
            }
        } else if run > 0 && !separator {
            separator = true;
        } else {
            run = 0;
            separator = false;
        }
    }
    false
}

/// Whether `bytes` holds a dotted quad shape: digits and three dots between digits.
fn has_dotted_quad(bytes: &[u8]) -> bool {
    let is_part = |b: u8| b.is_ascii_digit() || b == b'.';
    let mut checked_to = 0;
    for at in memchr::memchr_iter(b'.', bytes) {
        if at < checked_to
            || at == 0
            || !bytes[at - 1].is_ascii_digit()
            || !bytes.get(at + 1).is_some_and(u8::is_ascii_digit)
        {
            continue;
        }
        let mut start = at;
        while start > checked_to && is_part(bytes[start - 1]) {
            start -= 1;
        }
        let mut end = at + 1;
        while end < bytes.len() && is_part(bytes[end]) {
            end += 1;
        }
        let span = &bytes[start..end];
        let between_digits = span
            .windows(3)
            .filter(|w| w[1] == b'.' && w[0].is_ascii_digit() && w[2].is_ascii_digit())
            .count();
        if between_digits >= 3 {
            return true;
        }
        checked_to = end;
    }
    false
}

#[cfg(test)]
mod tests;
