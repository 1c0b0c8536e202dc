//! Relay's wire types: the control-session messages of SPEC §5.6 with their frame
//! envelope, and the JSON bodies of the daemon's status endpoints and errors (§3.1, §3.6).
//!
//! This crate only describes bytes. It opens no socket, reads no clock, holds no key and
//! never signs anything: signatures are opaque 64-byte values here and are made and checked
//! in `relay-identity`. Decoding is total: any input yields a [`Message`] or a typed
//! [`FrameError`], never a panic, and nothing is allocated beyond what the (bounded) input
//! holds.
//!
//! Key types: [`Message`] (every control message), [`Frame`] (a decoded envelope),
//! [`FrameError`], [`RefusedCode`], and the status bodies [`Health`], [`WorkerStatus`] and
//! [`RouteStatus`].
//! It also holds the shared vocabulary of reasons (`vocabulary`): every reason, role and
//! state the broker decides and the logs write, each defined once with its spelling.

mod frame;
mod message;
mod status;
mod types;
mod vocabulary;

pub use frame::{
    Frame, FrameError, FrameHeader, HEADER_LEN, MAGIC, MAX_FRAME_BYTES, PROTOCOL_VERSION,
    SUPPORTED_PROTOCOLS, decode, encode, encode_versioned,
};
pub use message::{
    Challenge, Directive, Grant, Hello, Kind, LaunchOutcome, LaunchStatusIs, McpActivationFailed,
    Message, Refused, RefusedCode, RegisterMcp, RegisterMcpFields, RegisterWorker,
    RegisterWorkerFields, Registered, ResumeMcp, ResumeMcpFields, ResumeWorker, ResumeWorkerFields,
    Timers, WorkerActivationFailed, WorkerExited, WorkerHint,
};
pub use status::{
    DeploymentMode, ErrorBody, ErrorDetail, ErrorKind, Health, HealthStatus, RouteState,
    RouteStatus, WorkerList, WorkerStatus, WorkerStatusList,
};
pub use types::{
    Bytes32, Id, MAX_TEXT_BYTES, ProtocolRange, PublicKey, Role, Signature, Text, TextTooLong,
};
pub use vocabulary::{
    ActivationCancelReason, DisconnectReason, FailureReason, McpDisconnectReason, McpRemovedReason,
    PassThroughReason, RouteMode, WORKER_EXIT_PLUGIN_CONFIG_INVALID, WorkerDisconnectReason,
    WorkerRemovedReason, WorkerState,
};
