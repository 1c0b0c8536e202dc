//! JSON bodies of the daemon's status endpoints (§3.1) and its error body (§3.6).
//!
//! None of these types has a field that could hold a credential, fingerprint, endpoint,
//! grant or session id: the status answers are public on loopback.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::vocabulary::{PassThroughReason, RouteMode, WorkerState};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeploymentMode {
    Managed,
    PassThrough,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    Ok,
    /// State cannot be written (§4.4); pass-through still serves.
    Degraded,
}

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub service: String,
    pub version: String,
    pub instance_id: Uuid,
    pub deployment_mode: DeploymentMode,
    pub status: HealthStatus,
}

/// `GET /_relay/v1/workers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerList {
    pub instance_id: Uuid,
    pub status: HealthStatus,
    /// Sorted.
    pub workers: Vec<Uuid>,
}

/// One worker in `GET /_relay/v1/workers/status` and `GET /_relay/v1/workers/<id>/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStatus {
    pub worker_id: Uuid,
    pub state: WorkerState,
    pub control_available: bool,
    pub reference_count: u32,
    pub in_flight: u32,
}

/// `GET /_relay/v1/workers/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStatusList {
    pub instance_id: Uuid,
    pub status: HealthStatus,
    /// Sorted by worker id.
    pub workers: Vec<WorkerStatus>,
}

/// A route's state as `GET /_relay/v1/route` reports it; `None` for an unbound credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteState {
    Empty,
    Activating,
    Ready,
    PassThrough,
    Recovering,
    Draining,
    None,
}

/// `GET /_relay/v1/route`: where the caller's own traffic goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteStatus {
    pub route_mode: RouteMode,
    pub reason: Option<PassThroughReason>,
    pub worker_id: Option<Uuid>,
    pub state: RouteState,
    pub control_available: Option<bool>,
    /// The route's sessions are connected from more than one address at once: another
    /// machine uses the same machine identity. Written only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub machine_identity_conflict: bool,
}

/// The `type` of every error body Relay writes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    RelayBadRequest,
    RelayUnauthorized,
    RelayCrossOrigin,
    RelayNotFound,
    RelayMethodNotAllowed,
    RelayPayloadTooLarge,
    RelayUnsupportedMediaType,
    RelayUnsupportedEncoding,
    RelayMisdirectedRequest,
    RelayUpgradeRequired,
    RelayNotImplemented,
    RelayTooManyRequests,
    RelayPolicyRejected,
    RelayUpstreamNotAllowed,
    RelayUpstreamUnreachable,
    RelayUpstreamTimeout,
    RelayWorkerFailed,
    RelayWorkerUnavailable,
    RelayInternal,
}

/// `{"error":{"type":…,"message":…}}`, with `reason` for policy rejections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    #[serde(rename = "type")]
    pub kind: ErrorKind,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ErrorBody {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                kind,
                message: message.into(),
                reason: None,
            },
        }
    }
}

#[cfg(test)]
mod tests;
