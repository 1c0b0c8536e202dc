//! Header policy (SPEC §3.2, §3.5): what is forwarded, what is Relay's own, and how the
//! route credential and provider credentials are recognised.

//!
//! Every `x-relay-*` header name is defined here once; relay-hook uses
//! [`CLIENT_TOKEN_NAME`] too.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// The route credential header. The daemon consumes it; it never reaches a worker or a
/// provider.
pub const CLIENT_TOKEN: HeaderName = HeaderName::from_static(CLIENT_TOKEN_NAME);
/// [`CLIENT_TOKEN`] as text, for clients that name it in their own errors.
pub const CLIENT_TOKEN_NAME: &str = "x-relay-client-token";
/// A caller-selected upstream base (pi); passed to the worker, stripped before providers.
pub const UPSTREAM_BASE_URL: HeaderName = HeaderName::from_static("x-relay-upstream-base-url");
/// pi's session id for requests that carry none of their own.
pub const SESSION_ID: HeaderName = HeaderName::from_static("x-relay-session-id");
/// The per-generation secret the daemon presents to its worker.
pub const WORKER_SECRET: HeaderName = HeaderName::from_static("x-relay-worker-secret");
/// On the worker's own 401 for a secret it refuses, so the daemon tells it from a
/// provider's 401, which it relays as it is. Never reaches a client: the daemon answers
/// that refusal itself.
pub const WORKER_REFUSED: HeaderName = HeaderName::from_static("x-relay-worker-refused");
/// On a worker's answer to a provider failure (502, 504), the failure's reason, so the
/// daemon logs it as `worker_request_failed`; the daemon removes it before the client sees
/// the answer.
pub const WORKER_UPSTREAM_FAILED: HeaderName =
    HeaderName::from_static("x-relay-worker-upstream-failed");

/// Headers that carry a provider credential of the caller's own. Names, not text, so
/// that looking them up parses nothing: these are checked on every model request.
const PROVIDER_CREDENTIALS: [HeaderName; 4] = [
    header::AUTHORIZATION,
    HeaderName::from_static("x-api-key"),
    HeaderName::from_static("api-key"),
    HeaderName::from_static("anthropic-api-key"),
];

const ANTHROPIC_VERSION: HeaderName = HeaderName::from_static("anthropic-version");
const CHATGPT_ACCOUNT_ID: HeaderName = HeaderName::from_static("chatgpt-account-id");

/// Headers that say a request came through a proxy.
const FORWARDING: [HeaderName; 3] = [
    header::FORWARDED,
    HeaderName::from_static("x-forwarded-for"),
    header::VIA,
];

/// Where a header map is about to go, which decides whether Relay's own headers stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Toward {
    /// The daemon's own worker: `x-relay-upstream-base-url` and `x-relay-session-id` pass.
    Worker,
    /// A model provider: every `x-relay-*` header is removed.
    Provider,
}

/// A decimal number of digits only, as HTTP writes a length or a port: `None` when empty,
/// when any byte is not a digit (a sign too, which `str::parse` would take), or past
/// `u64`. Also cheaper than `str::parse`, which is generic over the radix, and needs no
/// UTF-8 check first.
pub(crate) fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// Readies the headers of a request for forwarding, in place: drops hop-by-hop headers,
/// names listed in `Connection`, `host`, `content-length` (outgoing framing comes from the
/// body), `expect` (Relay answers `100-continue` itself), and Relay's own headers as
/// `toward` requires. Every other header stays unchanged, multi-values and all.
///
/// Nothing is copied: a dropped header's place is taken by the last one, so headers of
/// different names may change order (which means nothing in HTTP); the values of one name
/// keep theirs.
pub fn strip_request_headers(headers: &mut HeaderMap, toward: Toward) {
    // Nearly every request carries the first two; `expect` is rare, so it is looked for
    // in the pass over the names rather than looked up.
    headers.remove(header::HOST);
    headers.remove(header::CONTENT_LENGTH);
    remove_hop_by_hop(headers, |name, text| {
        name == header::EXPECT
            || (is_relay_header(text) && !(toward == Toward::Worker && passes_to_worker(name)))
    });
}

/// Readies the headers of a response for the client, in place: drops hop-by-hop headers,
/// names listed in `Connection`, and Relay's own headers, which only Relay may set (so a
/// provider cannot forge the marks a worker puts on its own answers); `content-length`
/// stays (the body is relayed byte for byte, so the length is still true, and HEAD answers
/// need it), unless `transfer-encoding` framed the body instead. Nothing is copied: a
/// response that carries none of them costs no allocation.
pub fn strip_response_headers(headers: &mut HeaderMap) {
    remove_hop_by_hop(headers, |_, text| is_relay_header(text));
}

/// Removes the hop-by-hop headers, the names `Connection` lists, and the names `also`
/// picks (given each name and its text). The usual headers, which carry none of them, cost
/// one pass over their names, each read as text once.
fn remove_hop_by_hop(headers: &mut HeaderMap, also: impl Fn(&HeaderName, &str) -> bool) {
    let dropped: Vec<HeaderName> = headers
        .keys()
        .filter(|name| {
            let text = name.as_str();
            is_hop_by_hop(text) || also(name, text)
        })
        .cloned()
        .collect();
    if dropped.is_empty() {
        return;
    }
    // A message framed by `Transfer-Encoding` has that framing, whatever `Content-Length`
    // says (RFC 9112): forwarded without the encoding, the length would cut the body short.
    // (relayd refuses a request with both, and drops a request's length anyway; a
    // provider's answer may carry both.)
    if dropped.contains(&header::TRANSFER_ENCODING) {
        headers.remove(header::CONTENT_LENGTH);
    }
    // `Connection` is itself hop-by-hop, so the names it lists can only be here with it.
    for name in connection_tokens(headers) {
        headers.remove(name);
    }
    for name in dropped {
        headers.remove(name);
    }
}

/// Joins the `Cookie` fields an HTTP/2 client may split a cookie list into, as they must be
/// before the request goes on over HTTP/1.1 (RFC 9113): one field, the values in order,
/// separated by `; `.
pub fn join_cookies(headers: &mut HeaderMap) {
    let cookies = headers.get_all(header::COOKIE);
    if cookies.iter().nth(1).is_none() {
        return;
    }
    let mut joined = Vec::new();
    for value in cookies {
        if !joined.is_empty() {
            joined.extend_from_slice(b"; ");
        }
        joined.extend_from_slice(value.as_bytes());
    }
    if let Ok(joined) = HeaderValue::from_bytes(&joined) {
        headers.insert(header::COOKIE, joined);
    }
}

/// Hop-by-hop headers (RFC 9110 §7.6.1) plus every `proxy-*` one: never forwarded.
fn is_hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection" | "keep-alive" | "te" | "trailer" | "transfer-encoding" | "upgrade"
    ) || name.starts_with("proxy-")
}

fn is_relay_header(name: &str) -> bool {
    name.starts_with("x-relay-")
}

fn passes_to_worker(name: &HeaderName) -> bool {
    name == UPSTREAM_BASE_URL || name == SESSION_ID
}

/// Header names listed in `Connection`. Read as bytes, so a token that is not a header
/// name (a byte outside ASCII, say) hides none of the others on its line. Names that are
/// hop-by-hop themselves go anyway, so they cost no `HeaderName` and no look-up: nearly
/// every client lists `keep-alive`.
fn connection_tokens(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|value| value.as_bytes().split(|b| *b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|token| !names_hop_by_hop(token))
        .filter_map(|token| HeaderName::from_bytes(token).ok())
        .collect()
}

/// [`is_hop_by_hop`] for a name in any case. A name longer than the longest hop-by-hop one
/// (`transfer-encoding`) can only be one under `proxy-`.
fn names_hop_by_hop(token: &[u8]) -> bool {
    let mut lower = [0u8; "transfer-encoding".len()];
    match lower.get_mut(..token.len()) {
        Some(lower) => {
            lower.copy_from_slice(token);
            lower.make_ascii_lowercase();
            std::str::from_utf8(lower).is_ok_and(is_hop_by_hop)
        }
        None => token[.."proxy-".len()].eq_ignore_ascii_case(b"proxy-"),
    }
}

/// Marks the caller's credentials and cookies so that HPACK never indexes them: one HTTP/2
/// connection to a provider carries the requests of every user of the machine, and a
/// secret in its compression table could be guessed at by another user from the sizes of
/// what is sent (RFC 7541, section 7.1.3).
pub fn never_index_credentials(headers: &mut HeaderMap) {
    // One pass over the headers costs less than a look-up for each name.
    for (name, value) in headers.iter_mut() {
        if *name == header::COOKIE || PROVIDER_CREDENTIALS.contains(name) {
            value.set_sensitive(true);
        }
    }
}

/// True when the request carries a provider credential of its own.
pub fn has_provider_credential(headers: &HeaderMap) -> bool {
    PROVIDER_CREDENTIALS
        .iter()
        .any(|name| headers.contains_key(name))
}

/// True when the request says it came through a proxy: such a request never gets the
/// daemon's keys.
pub fn has_forwarding_headers(headers: &HeaderMap) -> bool {
    FORWARDING.iter().any(|name| headers.contains_key(name))
}

/// The route credential as the request carries it.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub enum CredentialHeader<'a> {
    #[default]
    Missing,
    /// Present more than once: always refused, whatever the values.
    Duplicated,
    Present(&'a HeaderValue),
}

impl<'a> CredentialHeader<'a> {
    /// What the request carries once `value`, one more credential line, is counted too.
    fn and(self, value: &'a HeaderValue) -> CredentialHeader<'a> {
        match self {
            CredentialHeader::Missing => CredentialHeader::Present(value),
            _ => CredentialHeader::Duplicated,
        }
    }
}

/// Says which case it is, never the credential.
impl std::fmt::Debug for CredentialHeader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CredentialHeader::Missing => "Missing",
            CredentialHeader::Duplicated => "Duplicated",
            CredentialHeader::Present(_) => "Present(..)",
        })
    }
}

pub fn credential_header(headers: &HeaderMap) -> CredentialHeader<'_> {
    headers
        .get_all(CLIENT_TOKEN)
        .iter()
        .fold(CredentialHeader::Missing, CredentialHeader::and)
}

/// The headers the checks of a model request read, found in one pass over the request's
/// headers instead of a hashed look-up each: a model request's checks read eight of them.
/// Each is the first value, as a look-up would give it.
#[derive(Clone, Copy, Default)]
pub struct ModelHeaders<'a> {
    pub content_type: Option<&'a HeaderValue>,
    /// How many `Content-Type` lines there are: more than one names no media type.
    pub content_types: usize,
    pub content_length: Option<&'a HeaderValue>,
    /// An `Upgrade` value that names `websocket`.
    pub websocket: bool,
    pub upstream_base_url: Option<&'a HeaderValue>,
    /// How many `x-relay-upstream-base-url` lines there are: more than one selects no base.
    pub upstream_base_urls: usize,
    pub client_token: CredentialHeader<'a>,
    pub authorization: Option<&'a HeaderValue>,
    pub anthropic_version: bool,
    pub chatgpt_account_id: bool,
}

/// Shows whether each credential is there, never its value.
impl std::fmt::Debug for ModelHeaders<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelHeaders")
            .field("content_type", &self.content_type)
            .field("content_types", &self.content_types)
            .field("content_length", &self.content_length)
            .field("websocket", &self.websocket)
            .field("upstream_base_url", &self.upstream_base_url)
            .field("upstream_base_urls", &self.upstream_base_urls)
            .field("client_token", &self.client_token)
            .field("authorization", &self.authorization.is_some())
            .field("anthropic_version", &self.anthropic_version)
            .field("chatgpt_account_id", &self.chatgpt_account_id)
            .finish()
    }
}

impl<'a> ModelHeaders<'a> {
    pub fn read(headers: &'a HeaderMap) -> ModelHeaders<'a> {
        let mut found = ModelHeaders::default();
        for (name, value) in headers {
            if name == header::CONTENT_TYPE {
                found.content_types += 1;
                found.content_type.get_or_insert(value);
            } else if name == header::CONTENT_LENGTH {
                found.content_length.get_or_insert(value);
            } else if name == header::AUTHORIZATION {
                found.authorization.get_or_insert(value);
            } else if name == header::UPGRADE {
                found.websocket |= names_websocket(value);
            } else if name == CLIENT_TOKEN {
                found.client_token = found.client_token.and(value);
            } else if name == UPSTREAM_BASE_URL {
                found.upstream_base_urls += 1;
                found.upstream_base_url.get_or_insert(value);
            } else if name == ANTHROPIC_VERSION {
                found.anthropic_version = true;
            } else if name == CHATGPT_ACCOUNT_ID {
                found.chatgpt_account_id = true;
            }
        }
        found
    }

    /// True when the media type is `application/json`, parameters allowed (§3.6).
    pub fn is_json(&self) -> bool {
        self.content_types == 1 && media_type_is(self.content_type, b"application/json")
    }
}

/// True when the media type is `application/json`, parameters allowed (§3.6). A request
/// with two `Content-Type` lines has none: the provider might read the other one.
pub fn is_json_media_type(headers: &HeaderMap) -> bool {
    let mut lines = headers.get_all(header::CONTENT_TYPE).iter();
    let first = lines.next();
    lines.next().is_none() && media_type_is(first, b"application/json")
}

/// Every `Content-Encoding` line's codings in order, as one list joined with `,` (`None`:
/// there is none). HTTP reads several lines as one list, and so do providers, so reading
/// the first alone would leave codings undone. A value that is not text is kept as text
/// no coding is named by, so it cannot be taken for no coding at all.
pub fn content_codings(headers: &HeaderMap) -> Option<std::borrow::Cow<'_, str>> {
    let mut lines = headers.get_all(header::CONTENT_ENCODING).iter();
    let mut codings = String::from_utf8_lossy(lines.next()?.as_bytes());
    for line in lines {
        let codings = codings.to_mut();
        codings.push(',');
        codings.push_str(&String::from_utf8_lossy(line.as_bytes()));
    }
    Some(codings)
}

/// True for an SSE response, which gets `X-Accel-Buffering: no` if absent (§3.3).
pub fn is_event_stream(headers: &HeaderMap) -> bool {
    media_type_is(headers.get(header::CONTENT_TYPE), b"text/event-stream")
}

/// True when the first `Content-Type` is visible ASCII and its type and subtype, without
/// parameters and surrounding whitespace, are `essence` in any case. Compared as bytes:
/// this runs on every request and every response.
fn media_type_is(content_type: Option<&HeaderValue>, essence: &[u8]) -> bool {
    let Some(value) = content_type else {
        return false;
    };
    let bytes = value.as_bytes();
    // Trimming only shortens, so a shorter value cannot name it; the usual value is the
    // essence alone, which is visible ASCII by being equal to it.
    if bytes.len() < essence.len() {
        return false;
    }
    if bytes.eq_ignore_ascii_case(essence) {
        return true;
    }
    if value.to_str().is_err() {
        return false;
    }
    let end = bytes.iter().position(|b| *b == b';').unwrap_or(bytes.len());
    bytes[..end].trim_ascii().eq_ignore_ascii_case(essence)
}

/// True when an `Upgrade` value asks for a WebSocket.
fn names_websocket(upgrade: &HeaderValue) -> bool {
    upgrade
        .to_str()
        .is_ok_and(|t| t.to_ascii_lowercase().contains("websocket"))
}

#[cfg(test)]
mod tests;
