//! The answers Relay writes itself (SPEC §3.6, §3.7): JSON error bodies, and the relay of
//! a provider's or worker's response. Shared by the daemon's front and the worker.

use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use relay_proto::{ErrorBody, ErrorKind};

use crate::body::{ResponseBody, StreamGuard};
use crate::conn::HeadVerdict;
use crate::headers;
use crate::upstream::{UpstreamBody, UpstreamError};

const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");

/// The declared `Content-Length`, when it parses.
pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    length(headers.get(header::CONTENT_LENGTH))
}

/// A `Content-Length` value, when it parses.
pub(crate) fn length(value: Option<&HeaderValue>) -> Option<u64> {
    value.and_then(|v| headers::decimal(v.as_bytes().trim_ascii()))
}

/// The answer to a head the framing watcher refused, `None` for a clean one: 400 for a
/// request with both `Content-Length` and `Transfer-Encoding`, or differing lengths (a
/// request-smuggling attempt, §3.6); 501 for a transfer coding other than `chunked`. The
/// watcher stops following a connection whose head it refused, so the server closes it
/// after this answer.
pub(crate) fn framing_refusal(verdict: HeadVerdict) -> Option<Response<ResponseBody>> {
    let (status, kind, message) = match verdict {
        HeadVerdict::Clean => return None,
        HeadVerdict::AmbiguousFraming => (
            StatusCode::BAD_REQUEST,
            ErrorKind::RelayBadRequest,
            "a request may not carry both Content-Length and Transfer-Encoding, or differing Content-Lengths",
        ),
        HeadVerdict::UnsupportedTransferCoding => (
            StatusCode::NOT_IMPLEMENTED,
            ErrorKind::RelayNotImplemented,
            "the only transfer coding accepted is chunked (use Content-Encoding for compression)",
        ),
    };
    Some(error(status, kind, message))
}

/// Marks an answer as the connection's last (`Connection: close`).
pub(crate) fn close_after<B>(res: &mut Response<B>) {
    res.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
}

/// A response on its way back to the client: hop-by-hop headers dropped,
/// `X-Accel-Buffering: no` on SSE unless the sender set it (§3.3), `Cache-Control:
/// no-store` forced on model lists (§3.2), and `guard` held until the body ends.
pub(crate) fn relay_response(
    res: Response<UpstreamBody>,
    models: bool,
    idle: Duration,
    guard: Box<dyn StreamGuard>,
) -> Response<ResponseBody> {
    let (mut parts, body) = res.into_parts();
    // The answer is relayd's own message, in the client's version: an HTTP/1.0 provider's
    // version would make hyper end an HTTP/1.1 client's answer by closing the connection,
    // where a chunked answer says where it ends.
    parts.version = http::Version::HTTP_11;
    headers::strip_response_headers(&mut parts.headers);
    if headers::is_event_stream(&parts.headers) {
        // A name, not text: text would be parsed and hashed twice for every stream.
        parts
            .headers
            .entry(X_ACCEL_BUFFERING)
            .or_insert(HeaderValue::from_static("no"));
    }
    if models {
        parts
            .headers
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    Response::from_parts(parts, ResponseBody::forward(body, idle, Some(guard)))
}

pub(crate) fn json<T: serde::Serialize>(value: &T) -> Response<ResponseBody> {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut res = Response::new(ResponseBody::full(body));
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    no_store(res)
}

pub(crate) fn no_store(mut res: Response<ResponseBody>) -> Response<ResponseBody> {
    res.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

/// 426 naming in `Upgrade` the protocol the request must be made in (RFC 9110 requires
/// one), with the `upgrade` connection option that keeps intermediaries from passing it on.
pub(crate) fn upgrade_required(protocol: &'static str, message: &str) -> Response<ResponseBody> {
    let mut res = error(
        StatusCode::UPGRADE_REQUIRED,
        ErrorKind::RelayUpgradeRequired,
        message,
    );
    let headers = res.headers_mut();
    headers.insert(header::UPGRADE, HeaderValue::from_static(protocol));
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    res
}

/// A JSON error body (§3.6).
pub(crate) fn error(status: StatusCode, kind: ErrorKind, message: &str) -> Response<ResponseBody> {
    let mut res = json(&ErrorBody::new(kind, message));
    *res.status_mut() = status;
    res
}

/// An error body that tells the client to try again in `secs` seconds (every 503 and 429
/// carries one, §3.5).
pub(crate) fn retry_later(
    status: StatusCode,
    kind: ErrorKind,
    message: &str,
    secs: u64,
) -> Response<ResponseBody> {
    let mut res = error(status, kind, message);
    res.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    res
}

pub(crate) fn not_found() -> Response<ResponseBody> {
    // An SDK shows only the message: it must say that Relay, not the provider, answered.
    error(
        StatusCode::NOT_FOUND,
        ErrorKind::RelayNotFound,
        "relayd does not relay this method and path: it relays the providers' model routes and the agents' hook events",
    )
}

pub(crate) fn unauthorized() -> Response<ResponseBody> {
    error(
        StatusCode::UNAUTHORIZED,
        ErrorKind::RelayUnauthorized,
        "a valid x-relay-client-token is required",
    )
}

/// 401 in strict mode for a well-formed token no route holds: the token is fine, the
/// session that registers it is missing.
pub(crate) fn unbound_token() -> Response<ResponseBody> {
    error(
        StatusCode::UNAUTHORIZED,
        ErrorKind::RelayUnauthorized,
        "this x-relay-client-token is bound to no route: a harness session's relay-mcp registers it with the daemon (or, if it was registered, it has been revoked)",
    )
}

pub(crate) fn worker_unavailable(retry_after: Duration) -> Response<ResponseBody> {
    // Rounded up, at least one second (§3.5).
    let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
    retry_later(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::RelayWorkerUnavailable,
        "no worker is ready for this route",
        secs.max(1),
    )
}

pub(crate) fn worker_failed() -> Response<ResponseBody> {
    error(
        StatusCode::BAD_GATEWAY,
        ErrorKind::RelayWorkerFailed,
        "the worker failed before answering",
    )
}

pub(crate) fn unsupported_media_type() -> Response<ResponseBody> {
    error(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ErrorKind::RelayUnsupportedMediaType,
        "the body must be application/json",
    )
}

/// 413, the connection's last: the rest of the body is not read, so no request can follow
/// it on an HTTP/1 connection, and the header says so.
pub(crate) fn payload_too_large(limit: u64) -> Response<ResponseBody> {
    let mut res = too_large_once_decoded(limit);
    close_after(&mut res);
    res
}

/// 413 for a body read whole that is over the limit once decoded: the connection may
/// carry the next request.
pub(crate) fn too_large_once_decoded(limit: u64) -> Response<ResponseBody> {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::RelayPayloadTooLarge,
        &format!("the body exceeds the limit of {limit} bytes"),
    )
}

pub(crate) fn upstream_not_allowed() -> Response<ResponseBody> {
    error(
        StatusCode::BAD_REQUEST,
        ErrorKind::RelayUpstreamNotAllowed,
        "the selected upstream is not in upstream.allowed_base_urls",
    )
}

/// The client's upload stopped arriving (408) or broke off (400): its fault, not the
/// provider's or the worker's. The connection's last either way: the body was not read to
/// its end.
fn request_body_failed(idle: bool) -> Response<ResponseBody> {
    let mut res = if idle {
        error(
            StatusCode::REQUEST_TIMEOUT,
            ErrorKind::RelayBadRequest,
            "the request body stopped arriving",
        )
    } else {
        error(
            StatusCode::BAD_REQUEST,
            ErrorKind::RelayBadRequest,
            "the request body could not be read",
        )
    };
    close_after(&mut res);
    res
}

pub(crate) fn upstream_error(failure: &UpstreamError) -> Response<ResponseBody> {
    match failure {
        UpstreamError::BodyTooLarge { limit } => payload_too_large(*limit),
        UpstreamError::RequestBody { idle } => request_body_failed(*idle),
        UpstreamError::ConnectTimeout | UpstreamError::ResponseHeadTimeout => error(
            StatusCode::GATEWAY_TIMEOUT,
            ErrorKind::RelayUpstreamTimeout,
            "the provider did not answer in time",
        ),
        UpstreamError::Unreachable(_) => error(
            StatusCode::BAD_GATEWAY,
            ErrorKind::RelayUpstreamUnreachable,
            "the provider could not be reached",
        ),
        // Before or after the request reached the provider (which is why it is never sent
        // again): the words claim neither, unless what came back was read and was no answer.
        UpstreamError::Failed(failure) => {
            let unreadable = crate::error_chain::causes(&**failure)
                .find_map(|cause| cause.downcast_ref::<hyper::Error>())
                .filter(|e| e.is_parse() || e.is_parse_too_large());
            let message = match unreadable {
                Some(e) if e.is_parse_too_large() => {
                    "the provider answered with a head larger than relayd reads"
                }
                Some(_) => "the provider answered with something that is not a valid HTTP answer",
                None => "the connection to the provider failed before it answered",
            };
            error(
                StatusCode::BAD_GATEWAY,
                ErrorKind::RelayUpstreamUnreachable,
                message,
            )
        }
        // As the limit of requests in flight per route answers.
        UpstreamError::NoRoom => retry_later(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::RelayTooManyRequests,
            "too many connections to providers and workers are open at once",
            1,
        ),
    }
}
