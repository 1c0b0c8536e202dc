//! The forwarding prologue of a model request (SPEC §3.2, §3.6), shared by the daemon's
//! front and the worker: the checks a model request must pass before it may be sent
//! anywhere, and the request ready to forward when it passes them.
//!
//! It is written in two steps because the worker looks at its own state between them
//! (503 while it does not accept model requests): [`Prologue::shape`] is what the path
//! and method allow, [`Prologue::target`] is the body limit and the upstream. Both read
//! the request's headers from one [`ModelHeaders`] pass. Nothing here reads the body.

use std::time::Duration;

use http::request::Parts;
use http::{Method, Request, Response, StatusCode};
use relay_proto::ErrorKind;

use crate::answers::{
    error, length, payload_too_large, unsupported_media_type, upstream_not_allowed,
};
use crate::body::{ClientBody, RequestBody, ResponseBody};
use crate::config::UpstreamConfig;
use crate::headers::{self, ModelHeaders};
use crate::routes::{ModelFamily, TargetError, UpstreamTarget, upstream_target};

/// The rules one side applies to model requests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Prologue<'a> {
    /// Where model requests go (`[upstream]`).
    pub upstream: &'a UpstreamConfig,
    /// The largest model request body, declared or streamed.
    pub max_body_bytes: u64,
    /// A stream with no byte for this long is aborted.
    pub stream_idle: Duration,
    /// True on the daemon: a POST must say `application/json` (415). The worker only
    /// ever receives what the daemon already checked.
    pub require_json: bool,
}

/// Why a model request is answered before it is forwarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// A WebSocket upgrade on a Responses path (426).
    UpgradeRequired,
    /// A Responses path asked with another method than POST (405).
    MethodNotAllowed,
    /// A POST whose body is not `application/json` (415).
    UnsupportedMediaType,
    /// A declared `Content-Length` over the limit (413).
    TooLarge { limit: u64 },
    /// `x-relay-upstream-base-url` that is not text or not allowed (400).
    UpstreamNotAllowed,
    /// The upstream URL could not be built from the request's path (400).
    BadPath,
}

impl Refused {
    /// The answer the client gets.
    pub(crate) fn answer(&self) -> Response<ResponseBody> {
        match self {
            // Plain HTTP/1.1 is the protocol this path takes.
            Refused::UpgradeRequired => crate::answers::upgrade_required(
                "HTTP/1.1",
                "WebSocket is not supported here; use HTTP streaming",
            ),
            Refused::MethodNotAllowed => method_not_allowed("POST"),
            Refused::UnsupportedMediaType => unsupported_media_type(),
            Refused::TooLarge { limit } => payload_too_large(*limit),
            Refused::UpstreamNotAllowed => upstream_not_allowed(),
            Refused::BadPath => error(
                StatusCode::BAD_REQUEST,
                ErrorKind::RelayBadRequest,
                "bad request path",
            ),
        }
    }
}

/// The request to send a provider: the client's method and headers, readied for a
/// provider, and the provider's `uri`. Nothing else of the client's head (its version, the
/// extensions its connection attached) goes along. The head is reused, not copied.
pub(crate) fn provider_request(
    mut parts: Parts,
    body: RequestBody,
    uri: http::Uri,
) -> Request<RequestBody> {
    headers::strip_request_headers(&mut parts.headers, headers::Toward::Provider);
    parts.uri = uri;
    parts.version = http::Version::default();
    parts.extensions.clear();
    Request::from_parts(parts, body)
}

/// 405 `relay_method_not_allowed`, with the `Allow` header HTTP asks for.
pub(crate) fn method_not_allowed(allow: &'static str) -> Response<ResponseBody> {
    let mut res = error(
        StatusCode::METHOD_NOT_ALLOWED,
        ErrorKind::RelayMethodNotAllowed,
        "method not allowed on this path",
    );
    res.headers_mut()
        .insert(http::header::ALLOW, http::HeaderValue::from_static(allow));
    res
}

/// A model request that passed the prologue: its head, its body (empty for GET and
/// HEAD, otherwise streamed under the limit and the idle timer) and its upstream.
#[derive(Debug)]
pub(crate) struct Checked {
    pub parts: Parts,
    pub body: RequestBody,
    pub target: UpstreamTarget,
}

impl Prologue<'_> {
    /// What the path and method allow: 426 for a WebSocket upgrade (HTTP/1.1 `Upgrade:
    /// websocket`, or an HTTP/2 extended CONNECT) and 405 for another method than POST on a
    /// Responses path, then 415 when JSON is required. `found` is read from `req`'s headers.
    pub(crate) fn shape<B>(
        &self,
        req: &Request<B>,
        found: &ModelHeaders<'_>,
        responses: bool,
    ) -> Result<(), Refused> {
        if responses && (req.method() == Method::CONNECT || found.websocket) {
            return Err(Refused::UpgradeRequired);
        }
        if responses && req.method() != Method::POST {
            return Err(Refused::MethodNotAllowed);
        }
        if self.require_json && req.method() == Method::POST && !found.is_json() {
            return Err(Refused::UnsupportedMediaType);
        }
        Ok(())
    }

    /// The declared length against the limit (413), then the upstream of §3.2: a
    /// caller-selected base only from `allowed_base_urls` (400). `found` is read from
    /// `req`'s headers.
    pub(crate) fn target<B>(
        &self,
        req: &Request<B>,
        found: &ModelHeaders<'_>,
        family: ModelFamily,
    ) -> Result<UpstreamTarget, Refused> {
        let limit = self.max_body_bytes;
        if length(found.content_length).is_some_and(|len| len > limit) {
            return Err(Refused::TooLarge { limit });
        }
        let selected = match found.upstream_base_url {
            None => None,
            // Two selectors name no one base, whichever a reader would take.
            Some(_) if found.upstream_base_urls > 1 => return Err(Refused::UpstreamNotAllowed),
            Some(value) => Some(value.to_str().map_err(|_| Refused::UpstreamNotAllowed)?),
        };
        upstream_target(self.upstream, family, found, selected, req.uri()).map_err(|e| match e {
            TargetError::NotAllowed(_) => Refused::UpstreamNotAllowed,
            TargetError::BadUri => Refused::BadPath,
        })
    }

    /// The request split into its head and a forwarding body: GET and HEAD send none.
    pub(crate) fn checked(&self, req: Request<ClientBody>, target: UpstreamTarget) -> Checked {
        let (parts, incoming) = req.into_parts();
        let body = if parts.method == Method::GET || parts.method == Method::HEAD {
            RequestBody::empty()
        } else {
            RequestBody::streaming(incoming, self.max_body_bytes, self.stream_idle)
        };
        Checked {
            parts,
            body,
            target,
        }
    }
}

#[cfg(test)]
mod tests;
