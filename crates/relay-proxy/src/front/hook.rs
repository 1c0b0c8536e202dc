//! The hook routes (SPEC §3.4): the media type, the body and its event name, the
//! credential decision, then the worker or the agent's pass-through answer.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::body::ClientBody;
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use relay_broker::RequestKind;
use relay_proto::{ErrorKind, PassThroughReason};
use tokio::sync::{Semaphore, SemaphorePermit};

use super::credential::{Refusal, Routed, parse_credential};
use super::to_worker::WorkerResult;
use super::{Answer, Front, Mode};
use crate::answers::{
    close_after, content_length, error, no_store, payload_too_large, retry_later,
    unsupported_media_type, worker_unavailable,
};
use crate::body::{RequestBody, ResponseBody};
use crate::headers::{self, Toward};
use crate::metrics::{Destination, RouteLabel};
use crate::per_address::{Hold, PerAddress};
use crate::routes::Agent;

impl Front {
    pub(super) async fn hook(
        self: Arc<Self>,
        req: Request<ClientBody>,
        agent: Agent,
        peer: IpAddr,
    ) -> Answer {
        let local = |res| Answer::new(res, RouteLabel::Hook, Destination::Local);
        if !headers::is_json_media_type(req.headers()) {
            return local(unsupported_media_type());
        }
        // The credential first (SPEC §3.5): every refusal that does not depend on the
        // event is answered before a byte of the body is read.
        let credential = parse_credential(req.headers());
        // `None`: decided once the body names the event. A bound credential whose route has
        // no live session yet (Claude Code sends SessionStart before its MCP server
        // connects) keeps its decision provisionally, refusal or not: an opening event
        // decides again and waits for that session; any other event keeps it. Only a caller
        // the broker knows gets this far before its body is read.
        let early = if self.decision_needs_event(&credential) {
            None
        } else {
            let decision = self.decide(&credential, RequestKind::Hook).await;
            if let Err(refusal) = &decision
                && !awaits_session(&decision)
            {
                return local(refusal.answer());
            }
            Some(decision)
        };
        let limit = self.config().daemon.max_hook_body_bytes;
        if content_length(req.headers()).is_some_and(|len| len > limit) {
            return local(payload_too_large(limit));
        }
        let _buffered = match self.hook_buffer.reserve(req.headers(), limit, peer).await {
            Ok(room) => room,
            Err(full) => return local(full.answer()),
        };
        let (parts, incoming) = req.into_parts();
        // The body holds its room in the budget while it arrives, so it must arrive in the
        // time a request head may take: a caller who stalls does not keep the room.
        let within = self.config().daemon.timers.header_read_timeout_secs.get();
        let body = match tokio::time::timeout(within, read_limited(incoming, limit)).await {
            Ok(Ok(body)) => body,
            Ok(Err(res)) => return local(res),
            Err(_) => return local(body_too_slow(within)),
        };
        let Some(event) = hook_event(&body) else {
            return local(error(
                StatusCode::BAD_REQUEST,
                ErrorKind::RelayBadRequest,
                "a hook body must be a JSON object",
            ));
        };
        let opening = event.is_some_and(|name| agent.is_opening_event(name));
        // An opening event whose route awaits its session gives its early decision back
        // (`filter` drops it, and its ticket, before the wait) and decides again; one that
        // already waited for an activating route does not wait again.
        let decision = match early.filter(|early| !(opening && awaits_session(early))) {
            Some(decision) => decision,
            None if opening => self.decide(&credential, RequestKind::OpeningHook).await,
            None => self.decide(&credential, RequestKind::Hook).await,
        };
        let routed = match decision {
            Ok(routed) => routed,
            Err(refusal) => return local(refusal.answer()),
        };
        let (reason, fingerprint) = match routed {
            Routed::Worker {
                target: worker,
                fingerprint,
                ticket,
            } => {
                let mut req = Request::new(RequestBody::full(body));
                *req.method_mut() = Method::POST;
                *req.uri_mut() = parts.uri;
                *req.headers_mut() = parts.headers;
                headers::strip_request_headers(req.headers_mut(), Toward::Worker);
                match self.send_to_worker(&worker, fingerprint, "hook", req).await {
                    WorkerResult::Answered(res, waited) => {
                        let broke_off =
                            self.worker_broke_off("hook", fingerprint, worker.worker_id);
                        return self.relayed(
                            res,
                            waited,
                            RouteLabel::Hook,
                            Destination::Worker,
                            false,
                            Some(ticket),
                            broke_off,
                        );
                    }
                    WorkerResult::Failed(res, waited) => {
                        return Answer::new(res, RouteLabel::Hook, Destination::Worker)
                            .waited(waited);
                    }
                    // 503: relay-hook asks again within its timeout, by when the route has
                    // moved on.
                    WorkerResult::Refused(waited) => {
                        let answer = worker_unavailable(Duration::from_secs(1));
                        return Answer::new(answer, RouteLabel::Hook, Destination::Worker)
                            .waited(waited);
                    }
                    WorkerResult::NotSent(_, outcome) => {
                        ticket.unreachable(outcome);
                        if self.options.mode == Mode::RequireWorker {
                            return local(worker_unavailable(Duration::from_secs(1)));
                        }
                        (
                            Some(PassThroughReason::WorkerConnectFailed),
                            Some(fingerprint),
                        )
                    }
                }
            }
            Routed::PassThrough {
                reason,
                credentialed,
                fingerprint,
                ..
            } => (credentialed.then_some(reason), fingerprint),
        };
        if let Some(reason) = reason {
            self.log_pass_through("hook", reason, fingerprint);
        }
        let mut res = Response::new(ResponseBody::full(Bytes::from_static(
            agent.pass_through_answer(),
        )));
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Answer::new(no_store(res), RouteLabel::Hook, Destination::PassThrough)
    }
}

/// Whether a decision taken before the body was read is the one an opening event must take
/// again: the credential is bound, but its route has no live session yet.
fn awaits_session(decision: &Result<Routed, Refusal>) -> bool {
    matches!(
        decision,
        Ok(Routed::PassThrough {
            reason: PassThroughReason::NoLiveSession,
            ..
        }) | Err(Refusal::Unavailable {
            reason: Some(PassThroughReason::NoLiveSession),
            ..
        })
    )
}

/// The hook bodies buffered at once across the daemon, in bytes (SPEC §3.6 bounds one
/// body; this bounds them all, so that many slow bodies cannot grow the daemon without
/// limit). A body reserves its declared length, or the whole per-body limit when it has
/// none, before its first byte is read, and keeps the reservation until its answer.
///
/// One remote peer address may hold at most a quarter of the budget (and always room for
/// one body at the limit), so that a caller who keeps starting slow bodies from one address
/// leaves room for everyone else. Loopback callers are not counted per address: every local
/// user shares 127.0.0.1, so a share would let one of them lock out the others.
#[derive(Debug)]
pub(super) struct HookBuffer {
    bytes: Semaphore,
    capacity: u64,
    /// The bytes each remote peer address holds now.
    held: Arc<PerAddress>,
}

/// The default budget: sixteen bodies of the default 1 MiB limit at once.
pub(super) const DEFAULT_HOOK_BUFFER_BYTES: u64 = 16 * 1024 * 1024;

/// How long a hook body waits for room in the budget before it is answered 429.
const HOOK_BUFFER_WAIT: Duration = Duration::from_secs(1);

/// Why a hook body found no room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NoRoom {
    /// The caller's address holds its whole share: 429.
    PeerShare,
    /// The daemon's budget stayed full for [`HOOK_BUFFER_WAIT`]: 429 too, the status that
    /// goes with `relay_too_many_requests` (a 503 says `relay_worker_unavailable` or
    /// `relay_unauthorized`, and only the first is worth a hook's retry).
    Budget,
}

impl NoRoom {
    fn answer(self) -> Response<ResponseBody> {
        match self {
            NoRoom::PeerShare => retry_later(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorKind::RelayTooManyRequests,
                "too many hook bodies are being received from this address at once",
                1,
            ),
            NoRoom::Budget => retry_later(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorKind::RelayTooManyRequests,
                "too many hook bodies are being received at once",
                1,
            ),
        }
    }
}

/// One body's room in a [`HookBuffer`], given back when dropped.
#[derive(Debug)]
struct HookRoom<'a> {
    _permit: SemaphorePermit<'a>,
    /// Its bytes counted against a remote peer address.
    _share: Option<Hold>,
}

impl HookBuffer {
    pub(super) fn new(capacity: u64) -> HookBuffer {
        // A semaphore holds at most `usize::MAX >> 3` permits.
        let capacity = capacity.min(u64::from(u32::MAX));
        HookBuffer {
            bytes: Semaphore::new(usize::try_from(capacity).unwrap_or(usize::MAX >> 3)),
            capacity,
            held: PerAddress::new("hook bodies per address"),
        }
    }

    /// Room for one body of at most `limit` bytes from `peer`, waiting at most
    /// [`HOOK_BUFFER_WAIT`] for the daemon's budget; a remote address over its share is
    /// refused at once.
    async fn reserve(
        &self,
        headers: &HeaderMap,
        limit: u64,
        peer: IpAddr,
    ) -> Result<HookRoom<'_>, NoRoom> {
        let want = content_length(headers)
            .unwrap_or(limit)
            .min(limit)
            .min(self.capacity);
        let share = if peer.is_loopback() {
            None
        } else {
            // A quarter of the budget, or one body at the limit when that is more.
            let share = (self.capacity / 4).max(limit).min(self.capacity);
            Some(self.held.hold(peer, want, share).ok_or(NoRoom::PeerShare)?)
        };
        let want = u32::try_from(want).unwrap_or(u32::MAX);
        match tokio::time::timeout(HOOK_BUFFER_WAIT, self.bytes.acquire_many(want)).await {
            Ok(Ok(permit)) => Ok(HookRoom {
                _permit: permit,
                _share: share,
            }),
            // Dropping `share` gives the address its bytes back.
            Ok(Err(_)) | Err(_) => Err(NoRoom::Budget),
        }
    }
}

/// 408 for a hook body that did not arrive within `within`; the rest of it is not read, so
/// the connection closes.
fn body_too_slow(within: Duration) -> Response<ResponseBody> {
    let mut res = error(
        StatusCode::REQUEST_TIMEOUT,
        ErrorKind::RelayBadRequest,
        &format!(
            "the hook body did not arrive within {} s",
            within.as_secs_f64()
        ),
    );
    close_after(&mut res);
    res
}

/// Reads a whole body of at most `limit` bytes, or answers 413.
pub(super) async fn read_limited(
    body: ClientBody,
    limit: u64,
) -> Result<Bytes, Response<ResponseBody>> {
    let limited = http_body_util::Limited::new(body, usize::try_from(limit).unwrap_or(usize::MAX));
    match limited.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(payload_too_large(limit))
        }
        Err(_) => Err(error(
            StatusCode::BAD_REQUEST,
            ErrorKind::RelayBadRequest,
            "the request body could not be read",
        )),
    }
}

/// The `hook_event_name` of a hook body, `Some(None)` for an object without one, and `None`
/// when the body is not a JSON object.
pub(super) fn hook_event(body: &[u8]) -> Option<Option<&str>> {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow, default)]
        hook_event_name: Option<&'a str>,
    }
    // What the worker reads as an object, nesting limit, numbers and all, so that a body is
    // refused or taken the same whether a worker is ready or not.
    if !relay_plugins::is_json_object(body) {
        return None;
    }
    // A name with escapes cannot be borrowed, and a body whose strings hold a lone
    // surrogate reads only as the worker reads it: either is then no event Relay waits for.
    let head = std::str::from_utf8(body)
        .ok()
        .and_then(|text| serde_json::from_str::<Head<'_>>(text).ok());
    Some(head.and_then(|head| head.hook_event_name))
}

#[cfg(test)]
mod tests;
