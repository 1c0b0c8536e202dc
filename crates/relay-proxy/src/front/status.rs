//! The status endpoints of SPEC §3.1: `/healthz`, `/_relay/v1/workers*`,
//! `/_relay/v1/route` and `/metrics`, and who may see them.

use std::net::IpAddr;
use std::sync::atomic::Ordering;

use http::header::{self, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use relay_broker::Digest;
use relay_proto::{
    DeploymentMode, ErrorKind, Health, HealthStatus, PassThroughReason, RouteMode, RouteState,
    RouteStatus, WorkerList, WorkerStatus, WorkerStatusList,
};

use super::credential::{Credential, parse_credential};
use super::{Front, Mode};
use crate::answers::{error, json, no_store, not_found, unauthorized};
use crate::body::ResponseBody;
use crate::routes::PathClass;

impl Front {
    /// `/_relay/v1/workers`, `/_relay/v1/workers/status`, `/_relay/v1/workers/<id>/status`
    /// and `/metrics`: 404 to a peer that may not see them.
    pub(super) fn workers_or_metrics(
        &self,
        class: PathClass,
        peer: IpAddr,
        accept: header::GetAll<'_, HeaderValue>,
    ) -> Response<ResponseBody> {
        if !self.is_status_visible(peer) {
            return not_found();
        }
        let workers: Vec<WorkerStatus> = self
            .shell
            .as_ref()
            .map(|shell| shell.workers_view())
            .unwrap_or_default()
            .into_iter()
            .map(|w| WorkerStatus {
                worker_id: w.worker_id.as_uuid(),
                state: w.state,
                control_available: w.control_available,
                reference_count: w.reference_count,
                in_flight: w.in_flight,
            })
            .collect();
        match class {
            PathClass::Workers => json(&WorkerList {
                instance_id: self.options.instance_id,
                status: HealthStatus::Ok,
                workers: workers.iter().map(|w| w.worker_id).collect(),
            }),
            PathClass::WorkersStatus => json(&WorkerStatusList {
                instance_id: self.options.instance_id,
                status: HealthStatus::Ok,
                workers,
            }),
            PathClass::WorkerStatus(id) => {
                match workers.into_iter().find(|w| Some(w.worker_id) == id) {
                    Some(worker) => json(&worker),
                    None => error(
                        StatusCode::NOT_FOUND,
                        ErrorKind::RelayNotFound,
                        "worker not found",
                    ),
                }
            }
            _ => {
                let openmetrics = accepts_openmetrics(accept);
                let text = self.metrics.encode();
                let (text, content_type) = if openmetrics {
                    (text, OPENMETRICS)
                } else {
                    (crate::metrics::classic_text(&text), CLASSIC_TEXT)
                };
                let mut res = Response::new(ResponseBody::full(text));
                res.headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
                no_store(res)
            }
        }
    }

    pub(super) fn is_status_visible(&self, peer: IpAddr) -> bool {
        self.is_loopback_bind() || peer.is_loopback() || self.config().daemon.status_public
    }

    pub(super) fn health(&self) -> Response<ResponseBody> {
        json(&Health {
            service: "relayd".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            instance_id: self.options.instance_id,
            deployment_mode: match self.options.mode {
                Mode::PassThrough => DeploymentMode::PassThrough,
                Mode::Managed | Mode::RequireWorker => DeploymentMode::Managed,
            },
            status: if self.degraded.load(Ordering::Relaxed)
                || self.shell.as_ref().is_some_and(|shell| shell.is_degraded())
            {
                HealthStatus::Degraded
            } else {
                HealthStatus::Ok
            },
        })
    }

    pub(super) fn route_status(&self, headers: &HeaderMap) -> Response<ResponseBody> {
        let token = match parse_credential(headers) {
            Credential::Missing | Credential::Invalid => return unauthorized(),
            Credential::Token(token) => token,
        };
        let digest = Digest(*token.digest().as_bytes());
        let view = self
            .shell
            .as_ref()
            .and_then(|shell| shell.route_view(&digest));
        let Some(view) = view else {
            return json(&RouteStatus {
                route_mode: RouteMode::PassThrough,
                reason: Some(PassThroughReason::UnboundCredential),
                worker_id: None,
                state: RouteState::None,
                control_available: None,
                machine_identity_conflict: false,
            });
        };
        let reason = if view.worker_ready {
            None
        } else if self.options.mode == Mode::PassThrough {
            Some(PassThroughReason::ConfiguredPassThrough)
        } else if view.live_references == 0 {
            Some(PassThroughReason::NoLiveSession)
        } else {
            Some(PassThroughReason::WorkerUnavailable)
        };
        json(&RouteStatus {
            route_mode: if view.worker_ready {
                RouteMode::Worker
            } else {
                RouteMode::PassThrough
            },
            reason,
            worker_id: view.worker_id.map(|id| id.as_uuid()),
            state: view.state,
            control_available: view.control_available,
            machine_identity_conflict: view.identity_conflict,
        })
    }
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const CLASSIC_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether `/metrics` answers in OpenMetrics: when the scraper prefers it to the classic
/// text by its `Accept` weights (Prometheus asks for it first); a tie, or any other
/// client, gets the classic Prometheus text. Several `Accept` lines are one list, as
/// HTTP reads them; a line that is not text is passed over.
fn accepts_openmetrics(accept: header::GetAll<'_, HeaderValue>) -> bool {
    let lines: Vec<&str> = accept
        .iter()
        .filter_map(|value| value.to_str().ok())
        .collect();
    let accept = lines.join(",");
    let openmetrics = quality(&accept, "application", "openmetrics-text");
    openmetrics > 0.0 && openmetrics > quality(&accept, "text", "plain")
}

/// The weight `accept` gives `kind/subtype`: that of its most specific matching range
/// (`kind/subtype`, then `kind/*`, then `*/*`), 0 when none matches.
fn quality(accept: &str, kind: &str, subtype: &str) -> f32 {
    let mut best: Option<(u8, f32)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let Some((range_kind, range_subtype)) = parts.next().and_then(|m| m.split_once('/')) else {
            continue;
        };
        let specificity = match (range_kind.trim(), range_subtype.trim()) {
            ("*", "*") => 0,
            (k, "*") if k.eq_ignore_ascii_case(kind) => 1,
            (k, s) if k.eq_ignore_ascii_case(kind) && s.eq_ignore_ascii_case(subtype) => 2,
            _ => continue,
        };
        let q = parts
            .filter_map(|param| param.split_once('='))
            .find(|(name, _)| name.trim().eq_ignore_ascii_case("q"))
            .map_or(1.0, |(_, q)| {
                q.trim()
                    .parse::<f32>()
                    .ok()
                    .filter(|q| (0.0..=1.0).contains(q))
                    .unwrap_or(0.0)
            });
        if best
            .is_none_or(|(seen, seen_q)| specificity > seen || (specificity == seen && q > seen_q))
        {
            best = Some((specificity, q));
        }
    }
    best.map_or(0.0, |(_, q)| q)
}
