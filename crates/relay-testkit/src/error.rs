//! The one error type of the crate's public surface, and the error a response body raises on purpose.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// What can go wrong when starting the stand-in, waiting on what it recorded, or loading a fixture request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("binding the stand-in to {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("reading the stand-in's bound address")]
    LocalAddr {
        #[source]
        source: io::Error,
    },
    #[error("{got} of {wanted} requests recorded after {timeout:?}")]
    RequestsTimedOut {
        wanted: usize,
        got: usize,
        timeout: Duration,
    },
    #[error("request {id} was not recorded within {timeout:?}")]
    RequestNotRecorded { id: u64, timeout: Duration },
    #[error("the client of request {id} was still connected after {timeout:?}")]
    ClientStillConnected { id: u64, timeout: Duration },
    #[error("condition on the recorded requests not met within {timeout:?}")]
    ConditionTimedOut { timeout: Duration },
    #[error("no fixture request named {name:?}")]
    UnknownFixture { name: String },
    #[error("fixture request {name} is not valid json")]
    MalformedFixture {
        name: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("fixture request {name} has an invalid method {method:?}")]
    FixtureMethod { name: String, method: String },
    #[error("building an http request from fixture {name} against {base_url}")]
    FixtureToRequest {
        name: String,
        base_url: String,
        #[source]
        source: http::Error,
    },
}

/// The error a response body yields when `Behaviour::fail_after_bytes` is reached, so hyper aborts the connection.
#[derive(Debug, thiserror::Error)]
#[error("stand-in body failure injected after {after_bytes} bytes")]
pub(crate) struct InjectedFailure {
    pub(crate) after_bytes: usize,
}
