//! Steps 4 to 6 of SPEC §7.1 as pure functions: what a daemon answer means, and what the
//! process prints and exits with for each outcome.
//!
//! Relay only ever denies or stays silent (SPEC §7.2), so stdout is never taken from the
//! daemon: a 2xx answer means "go on", and what is printed is the agent's silent answer of
//! [`Agent::silent_answer`]. Whatever a body says (an impostor on the daemon port answering
//! `permissionDecision: "allow"` or `additionalContext`, say) cannot reach the agent.

use std::fmt;
use std::io;
use std::time::Duration;

use bytes::Bytes;
use hyper::StatusCode;
use relay_identity::DaemonAddress;

use crate::cli::{Agent, FailurePolicy};

/// The `error.type` of a 503 that proves nothing was forwarded, so it may be retried.
const WORKER_UNAVAILABLE: &str = "relay_worker_unavailable";
/// The `error.type` of a policy block.
const POLICY_REJECTED: &str = "relay_policy_rejected";
/// Printed for a policy block whose body gives neither a reason nor a message.
const UNKNOWN_REASON: &str = "blocked by relay policy";
/// The most of a policy reason printed, in characters; a longer one is cut and says so.
const REASON_CHARS: usize = 1000;
/// Ends a reason cut at [`REASON_CHARS`].
const REASON_CUT: &str = " [reason cut at 1000 characters]";
/// The line for a blocking event refused because there is no usable credential under an
/// explicit `--fail-closed` (SPEC §7.1 step 2), word for word.
pub(crate) const NO_CREDENTIAL: &str =
    "relay-hook: no Relay credential (run relay-doctor token ensure)";

/// Everything that makes the hook fall back to its failure policy (step 6). Messages never
/// contain the route credential or the payload.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    /// stdin held more than the limit.
    #[error("the hook payload is larger than {limit} bytes and was not sent")]
    PayloadTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// `RELAY_HOOK_TIMEOUT_MS` is set to something that is not a timeout.
    #[error("{source}")]
    TimeoutSetting {
        /// What is wrong with it.
        source: crate::cli::TimeoutEnvError,
    },
    /// stdin was still open when the timeout ran out: the daemon was never asked.
    #[error(
        "the hook payload took longer than {} ms to arrive on stdin and was not sent",
        timeout.as_millis()
    )]
    PayloadLate {
        /// The timeout that ran out.
        timeout: Duration,
    },
    /// stdin could not be read.
    #[error("cannot read the hook payload from stdin: {source}")]
    Stdin {
        /// The read error.
        source: io::Error,
    },
    /// The TLS client configuration could not be built (e.g. a bad `RELAY_EXTRA_CA_FILE`).
    #[error("cannot set up tls toward {address}: {source}")]
    TlsConfig {
        /// The daemon.
        address: DaemonAddress,
        /// What went wrong.
        source: relay_proxy::tls::TlsError,
    },
    /// The daemon's host name did not resolve.
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        /// The host name.
        host: String,
        /// The resolver's error.
        source: io::Error,
    },
    /// No TCP connection could be made.
    #[error("relay daemon at {address} is unreachable: {source}")]
    Connect {
        /// The daemon.
        address: DaemonAddress,
        /// The last connect error.
        source: io::Error,
    },
    /// The TLS handshake failed (e.g. an untrusted certificate).
    #[error(
        "tls handshake with relay daemon at {address} failed: {}",
        relay_proxy::tls::describe_handshake_error(source)
    )]
    TlsHandshake {
        /// The daemon.
        address: DaemonAddress,
        /// The handshake error.
        source: io::Error,
    },
    /// The HTTP exchange broke (connection reset, malformed answer, …).
    #[error("http exchange with relay daemon at {address} failed: {source}")]
    Http {
        /// The daemon.
        address: DaemonAddress,
        /// hyper's error.
        source: hyper::Error,
    },
    /// No complete answer within the timeout.
    #[error("relay daemon at {address} did not answer within {} ms", timeout.as_millis())]
    Timeout {
        /// The daemon.
        address: DaemonAddress,
        /// The timeout that ran out.
        timeout: Duration,
    },
    /// Every attempt within the timeout got 503 `relay_worker_unavailable`.
    #[error(
        "relay worker still unavailable after {attempts} attempts within {} ms (503 relay_worker_unavailable)",
        timeout.as_millis()
    )]
    WorkerUnavailable {
        /// How many 503 answers arrived.
        attempts: u32,
        /// The timeout that ran out.
        timeout: Duration,
    },
    /// Any status that is neither 2xx, a retryable 503 nor a policy block.
    #[error("relay daemon answered {status}{}", ErrorType(error_type.as_deref()))]
    Status {
        /// The status.
        status: StatusCode,
        /// `error.type` of the body, when it has one.
        error_type: Option<String>,
    },
    /// The answer body is over the limit.
    #[error("relay daemon's answer is larger than {limit} bytes")]
    AnswerTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// A 2xx body that is neither empty nor a JSON object: printing it could make the agent
    /// read arbitrary text as hook output.
    #[error("relay daemon answered {status} with a body that is not a JSON object")]
    AnswerNotJson {
        /// The status.
        status: StatusCode,
    },
    /// The runtime could not be built (out of file descriptors, …).
    #[error("cannot start the i/o runtime: {source}")]
    Runtime {
        /// The error.
        source: io::Error,
    },
    /// A header value could not be encoded (never expected: every value is checked ASCII).
    #[error("cannot encode the {name} header")]
    HeaderValue {
        /// The header name.
        name: &'static str,
    },
    /// The answer could not be written.
    #[error("cannot write the answer to stdout: {source}")]
    Stdout {
        /// The write error.
        source: io::Error,
    },
}

/// ` (relay_unauthorized)` after a status, or nothing.
struct ErrorType<'a>(Option<&'a str>);

impl fmt::Display for ErrorType<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(kind) => write!(f, " ({kind})"),
            None => Ok(()),
        }
    }
}

/// What one daemon answer means.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// 2xx with an empty or JSON object body: go on silently. The body itself is not kept.
    Proceed,
    /// 503 `relay_worker_unavailable`: nothing was forwarded, ask again later.
    RetryLater,
    /// 403 `relay_policy_rejected`, with the reason to print.
    PolicyRejected(String),
    /// Anything else.
    Failure(Failure),
}

/// Reads one answer (steps 4 and 5). A 2xx body that is neither empty nor a JSON object is
/// not what a Relay daemon sends, so it is a failure rather than a silent go-ahead.
pub(crate) fn judge(status: StatusCode, body: Bytes) -> Verdict {
    if status.is_success() {
        return if is_empty_or_object(&body) {
            Verdict::Proceed
        } else {
            Verdict::Failure(Failure::AnswerNotJson { status })
        };
    }
    let error = ErrorBody::parse(&body);
    match (status, error.kind.as_deref()) {
        (StatusCode::SERVICE_UNAVAILABLE, Some(WORKER_UNAVAILABLE)) => Verdict::RetryLater,
        (StatusCode::FORBIDDEN, Some(POLICY_REJECTED)) => Verdict::PolicyRejected(
            error
                .reason
                .or(error.message)
                .map_or_else(|| UNKNOWN_REASON.to_owned(), |reason| printable(&reason)),
        ),
        _ => Verdict::Failure(Failure::Status {
            status,
            error_type: error.kind,
        }),
    }
}

/// A reason as one line of plain text: the agent shows it to the user and the model, and
/// whoever holds the daemon's port writes it, so control characters (a terminal's escape
/// sequences, line breaks) become spaces and a reason past [`REASON_CHARS`] is cut, saying so.
fn printable(reason: &str) -> String {
    let mut chars = reason.chars();
    let mut line: String = chars
        .by_ref()
        .take(REASON_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if chars.next().is_some() {
        line.push_str(REASON_CUT);
    }
    line
}

/// An empty body (nothing to say) or one JSON object, surrounded by JSON whitespace.
fn is_empty_or_object(body: &[u8]) -> bool {
    let trimmed = body.trim_ascii();
    trimmed.is_empty()
        || (trimmed.starts_with(b"{")
            && serde_json::from_slice::<serde::de::IgnoredAny>(trimmed).is_ok())
}

/// The parts of `{"error":{"type","reason","message"}}` that matter; anything else is absent.
#[derive(Debug, Default)]
struct ErrorBody {
    kind: Option<String>,
    reason: Option<String>,
    message: Option<String>,
}

impl ErrorBody {
    fn parse(body: &[u8]) -> ErrorBody {
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
            return ErrorBody::default();
        };
        let field = |name: &str| {
            value
                .get("error")
                .and_then(|error| error.get(name))
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        ErrorBody {
            kind: field("type"),
            reason: field("reason").filter(|reason| !reason.is_empty()),
            message: field("message").filter(|message| !message.is_empty()),
        }
    }
}

/// How the exchange ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Go on: print the agent's silent answer, exit 0. A 2xx from the daemon and the
    /// pass-through without a credential both end here.
    Silent,
    /// A policy block with its reason.
    PolicyRejected(String),
    /// Fall back to the failure policy.
    Failure(Failure),
    /// No usable route credential, so the daemon was not contacted (step 2): the silent
    /// answer, except for a blocking event under an explicit `--fail-closed`.
    NoCredential,
}

/// What the process prints and its exit status.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Exit {
    /// The exit status.
    pub(crate) code: u8,
    /// What stdout gets: only ever the agent's silent answer, a constant, so nothing the
    /// daemon sent can be printed.
    pub(crate) stdout: Option<&'static str>,
    /// One line for stderr, without its newline.
    pub(crate) stderr: Option<String>,
}

/// The exit for each outcome (steps 2, 4, 5 and 6). Exit 2 is produced only for blocking
/// events: elsewhere it means something else to the agent.
pub(crate) fn exit_for(
    outcome: Outcome,
    agent: Agent,
    event: Option<&str>,
    policy: FailurePolicy,
) -> Exit {
    let is_blocking = agent.is_blocking_event(event);
    let event_label = event.unwrap_or("event");
    match outcome {
        Outcome::Silent => Exit {
            code: 0,
            stdout: Some(agent.silent_answer()),
            stderr: None,
        },
        // Only the explicit flag: a managed deployment writes `--fail-closed` on its blocking
        // hooks so that a missing token never lets a tool run unchecked, while a hand-wired
        // hook without the flag keeps answering for a user Relay is not set up for.
        Outcome::NoCredential if policy == FailurePolicy::Closed && is_blocking => Exit {
            code: 2,
            stdout: None,
            stderr: Some(NO_CREDENTIAL.to_owned()),
        },
        Outcome::NoCredential => Exit {
            code: 0,
            stdout: Some(agent.silent_answer()),
            stderr: None,
        },
        // The reason alone: the agent shows stderr to the model or the user as the block's
        // explanation. A policy may deny only blocking events (SPEC §7.2); a rejection of any
        // other event still stops with the reason, as an error rather than a block.
        Outcome::PolicyRejected(reason) => Exit {
            code: if is_blocking { 2 } else { 1 },
            stdout: None,
            stderr: Some(reason),
        },
        Outcome::Failure(failure) => {
            let closed = match policy {
                FailurePolicy::Open => false,
                FailurePolicy::Closed => true,
                FailurePolicy::Default => is_blocking,
            };
            let (code, consequence) = match (closed, is_blocking) {
                (true, true) => (2, format!("{event_label} blocked: relay-hook fails closed")),
                (true, false) => (1, "relay-hook fails closed".to_owned()),
                (false, _) => (0, "continuing: relay-hook fails open".to_owned()),
            };
            Exit {
                code,
                stdout: None,
                stderr: Some(format!("relay-hook: {failure} ({consequence})")),
            }
        }
    }
}

#[cfg(test)]
mod tests;
