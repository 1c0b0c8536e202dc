//! Scenario scripts on a virtual clock: each step feeds one input (or moves the clock) and
//! the transcript of outputs is compared with the expectation written beside it
//! (`UPDATE_EXPECT=1 cargo test -p relay-broker` rewrites them).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use expect_test::{Expect, expect};
use relay_proto::{Bytes32, Directive, FailureReason, Id, Message, Registered, Timers};

use super::*;
use crate::io::{Decision, ProbeOutcome, RequestKind, Ticket, Wait};

mod properties;

/// Deterministic "randomness": ids and secrets count up.
pub(super) struct Counter(u64);

impl Entropy for Counter {
    fn id(&mut self) -> Id {
        self.0 += 1;
        let mut bytes = [0u8; 16];
        bytes[8..].copy_from_slice(&self.0.to_be_bytes());
        Id(bytes)
    }

    fn secret(&mut self) -> Bytes32 {
        self.0 += 1;
        let mut bytes = [0u8; 32];
        bytes[24..].copy_from_slice(&self.0.to_be_bytes());
        Bytes32(bytes)
    }
}

fn short_id(id: &Id) -> String {
    format!(
        "#{}",
        u64::from_be_bytes(id.0[8..].try_into().unwrap_or([0; 8]))
    )
}

fn short_secret(secret: &Bytes32) -> String {
    format!(
        "${}",
        u64::from_be_bytes(secret.0[24..].try_into().unwrap_or([0; 8]))
    )
}

pub(super) fn fp(name: char) -> Fingerprint {
    Fingerprint([name as u8; 32])
}

fn fp_name(fp: &Fingerprint) -> String {
    (fp.0[0] as char).to_string()
}

pub(super) fn digest(name: &str) -> Digest {
    let mut bytes = [0u8; 32];
    bytes[..name.len()].copy_from_slice(name.as_bytes());
    Digest(bytes)
}

fn digest_name(digest: &Digest) -> String {
    digest
        .0
        .iter()
        .take_while(|b| **b != 0)
        .map(|b| *b as char)
        .collect()
}

pub(super) fn test_config() -> BrokerConfig {
    BrokerConfig {
        max_tokens_per_identity: 2,
        max_routes: 3,
        max_sessions_per_route: 3,
        max_requests_per_identity: 3,
        activation_wait: Duration::from_millis(2000),
        binding_tombstone: Duration::from_secs(3600),
        probe_interval: Duration::from_secs(30),
        activation_probe_retry: Duration::from_millis(250),
        bindings_flush: Duration::from_secs(300),
        timers: Timers::default(),
        ..BrokerConfig::default()
    }
}

/// A broker driven by a script, writing a transcript.
struct Scenario {
    broker: Broker,
    start: Instant,
    now: Instant,
    out: String,
    /// Grants seen on the wire: activation id → token.
    grants: Vec<(Id, Bytes32)>,
    /// Sessions seen: conn → (session id, resume token).
    sessions: HashMap<u64, (Id, Bytes32)>,
    /// Worker registrations: conn → worker id.
    workers: HashMap<u64, Id>,
    probes: HashMap<Id, u64>,
    tickets: Vec<Ticket>,
    auto_persist: bool,
    last_seq: u64,
}

impl Scenario {
    fn new() -> Scenario {
        Scenario::with(test_config())
    }

    fn with(config: BrokerConfig) -> Scenario {
        let start = Instant::now();
        let mut scenario = Scenario {
            broker: Broker::new(config, Box::new(Counter(0))),
            start,
            now: start,
            out: String::new(),
            grants: Vec::new(),
            sessions: HashMap::new(),
            workers: HashMap::new(),
            probes: HashMap::new(),
            tickets: Vec::new(),
            auto_persist: true,
            last_seq: 0,
        };
        scenario.broker.restore(start, PersistedState::default());
        scenario
    }

    fn step(&mut self, label: &str, input: Input) -> &mut Self {
        let _ = writeln!(self.out, "> {label}");
        self.broker.handle(self.now, input);
        self.drain();
        self
    }

    fn drain(&mut self) {
        loop {
            let mut acks = Vec::new();
            while let Some(output) = self.broker.poll_output() {
                let line = self.describe(&output);
                let _ = writeln!(self.out, "  {line}");
                if let Output::Persist { seq } = output {
                    self.last_seq = seq;
                    if self.auto_persist {
                        acks.push(seq);
                    }
                }
            }
            if acks.is_empty() {
                return;
            }
            for seq in acks {
                self.broker
                    .handle(self.now, Input::Persisted { seq, ok: true });
            }
        }
    }

    fn describe(&mut self, output: &Output) -> String {
        match output {
            Output::Send { conn, message } => {
                format!("c{} <- {}", conn.0, self.message(conn.0, message))
            }
            Output::Close { conn } => format!("close c{}", conn.0),
            Output::Probe {
                worker_id,
                probe,
                secret,
                ..
            } => {
                self.probes.insert(*worker_id, *probe);
                format!(
                    "probe {} with {}",
                    short_id(worker_id),
                    short_secret(secret)
                )
            }
            Output::Persist { .. } => "persist".to_owned(),
            Output::Forget { worker_id } => format!("forget {}", short_id(worker_id)),
            Output::Event(event) => format!("event {}", describe_event(event)),
        }
    }

    fn message(&mut self, conn: u64, message: &Message) -> String {
        match message {
            Message::Registered(Registered::Mcp {
                session_id,
                resume_token,
                directive,
                ..
            }) => {
                self.sessions.insert(conn, (*session_id, *resume_token));
                format!(
                    "Registered(session {}, {})",
                    short_id(session_id),
                    self.directive(directive)
                )
            }
            Message::Registered(Registered::Worker {
                worker_id,
                generation_secret,
                drain_deadline_ms,
                ..
            }) => {
                self.workers.insert(conn, *worker_id);
                format!(
                    "Registered(worker {}, {}{})",
                    short_id(worker_id),
                    short_secret(generation_secret),
                    drain_deadline_ms
                        .map(|d| format!(", drain {d}ms"))
                        .unwrap_or_default()
                )
            }
            Message::Refused(refused) => {
                let code = refused.reason().map_or("?", |r| r.as_str());
                if refused.text.as_str() == code {
                    format!("Refused({code})")
                } else {
                    format!("Refused({code}: {})", refused.text.as_str())
                }
            }
            Message::LaunchStatusIs(status) => format!(
                "LaunchStatusIs({} {})",
                short_id(&status.activation_id),
                status.outcome.as_str()
            ),
            Message::Drain { deadline_ms } => format!("Drain({deadline_ms}ms)"),
            Message::DaemonStopping { restart_expected } => {
                format!("DaemonStopping(restart {restart_expected})")
            }
            other => match other.as_directive() {
                Some(directive) => self.directive(&directive),
                None => format!("{:?}", other.kind()),
            },
        }
    }

    fn directive(&mut self, directive: &Directive) -> String {
        match directive {
            Directive::LaunchWorker(grant) => {
                self.grants
                    .push((grant.activation_id, grant.activation_token));
                format!(
                    "LaunchWorker(grant {} bind {:?}:{})",
                    short_id(&grant.activation_id),
                    grant.bind_ip,
                    grant.port
                )
            }
            Directive::WaitForWorker { retry_after_ms } => {
                format!("WaitForWorker({retry_after_ms}ms)")
            }
            Directive::ReuseWorker => "ReuseWorker".to_owned(),
            Directive::RouteReady => "RouteReady".to_owned(),
            Directive::UsePassThrough => "UsePassThrough".to_owned(),
        }
    }

    // ----- script verbs -----

    fn mcp(&mut self, conn: u64, route: char, token: &str) -> &mut Self {
        self.mcp_from(conn, route, token, IpAddr::V4(Ipv4Addr::LOCALHOST))
    }

    fn mcp_from(&mut self, conn: u64, route: char, token: &str, peer: IpAddr) -> &mut Self {
        let label = format!("mcp c{conn} registers {route} with {token}");
        self.mcp_registers(&label, conn, route, token, peer, None)
    }

    /// An MCP from `peer` whose environment names a remote worker at `advertise:port`.
    fn mcp_hinting(
        &mut self,
        conn: u64,
        route: char,
        token: &str,
        peer: IpAddr,
        advertise: &str,
        port: u16,
    ) -> &mut Self {
        let label = format!(
            "mcp c{conn} registers {route} with {token} from {peer}, hinting {advertise}:{port}"
        );
        let hint = WorkerHint {
            advertise_address: Some(Text::truncated(advertise)),
            port: Some(port),
        };
        self.mcp_registers(&label, conn, route, token, peer, Some(hint))
    }

    fn mcp_registers(
        &mut self,
        label: &str,
        conn: u64,
        route: char,
        token: &str,
        peer: IpAddr,
        hint: Option<WorkerHint>,
    ) -> &mut Self {
        self.step(
            label,
            Input::McpRegister {
                conn: ConnId(conn),
                fingerprint: fp(route),
                digest: digest(token),
                instance: Id([conn as u8; 16]),
                peer,
                hint,
            },
        )
    }

    fn resume(&mut self, conn: u64, old_conn: u64, route: char) -> &mut Self {
        let (session_id, resume_token) = self.sessions[&old_conn];
        self.step(
            &format!("mcp c{conn} resumes the session of c{old_conn}"),
            Input::McpResume {
                conn: ConnId(conn),
                fingerprint: fp(route),
                session_id,
                resume_token,
                peer: IpAddr::V4(Ipv4Addr::LOCALHOST),
            },
        )
    }

    fn release(&mut self, conn: u64) -> &mut Self {
        self.step(
            &format!("mcp c{conn} releases"),
            Input::McpRelease { conn: ConnId(conn) },
        )
    }

    fn drop_conn(&mut self, conn: u64) -> &mut Self {
        self.step(
            &format!("c{conn} drops"),
            Input::Disconnected {
                conn: ConnId(conn),
                reason: DisconnectReason::PeerClosed,
            },
        )
    }

    fn grant(&self, n: usize) -> (Id, Bytes32) {
        self.grants[n]
    }

    fn last_grant(&self) -> (Id, Bytes32) {
        *self.grants.last().expect("a grant was issued")
    }

    fn worker_with(&mut self, conn: u64, route: char, grant: (Id, Bytes32)) -> &mut Self {
        self.step(
            &format!(
                "worker c{conn} registers {route} with grant {}",
                short_id(&grant.0)
            ),
            Input::WorkerRegister {
                conn: ConnId(conn),
                fingerprint: fp(route),
                activation_id: grant.0,
                activation_token: grant.1,
                endpoint: format!("127.0.0.1:{}", 40000 + conn),
                certificate_sha256: Bytes32([conn as u8; 32]),
            },
        )
    }

    fn worker(&mut self, conn: u64, route: char) -> &mut Self {
        let grant = self.last_grant();
        self.worker_with(conn, route, grant)
    }

    fn ready(&mut self, conn: u64) -> &mut Self {
        self.step(
            &format!("worker c{conn} is ready"),
            Input::WorkerReportedReady { conn: ConnId(conn) },
        )
    }

    fn probe(&mut self, worker_conn: u64, outcome: ProbeOutcome) -> &mut Self {
        let worker = self.workers[&worker_conn];
        let probe = self.probes.get(&worker).copied().unwrap_or(0);
        self.step(
            &format!("probe of {} says {outcome:?}", short_id(&worker)),
            Input::ProbeResult {
                worker_id: worker,
                probe,
                outcome,
            },
        )
    }

    /// The connection to the worker of the last request's ticket failed before anything
    /// was written, as the shell reports it.
    fn unreachable(&mut self, outcome: ProbeOutcome) -> &mut Self {
        let ticket = self.tickets.pop().expect("a ticket");
        self.broker.worker_unreachable(self.now, ticket, outcome);
        self.out.push_str(&format!(
            "> the connection to the worker failed: {outcome:?}\n"
        ));
        self.drain();
        self
    }

    /// Register, launch, become ready: a route with a published worker.
    fn ready_route(&mut self, mcp: u64, route: char, token: &str, worker: u64) -> &mut Self {
        self.mcp(mcp, route, token)
            .worker(worker, route)
            .ready(worker)
            .probe(worker, ProbeOutcome::Ready)
    }

    fn advance(&mut self, ms: u64) -> &mut Self {
        self.now += Duration::from_millis(ms);
        let _ = writeln!(
            self.out,
            "> clock +{ms}ms (t={}ms)",
            self.now.duration_since(self.start).as_millis()
        );
        self.broker.handle_timeout(self.now);
        self.drain();
        self
    }

    fn known(&mut self, token: &str) -> &mut Self {
        let text = match self.broker.known_credential(&digest(token)) {
            Some(fingerprint) => format!("known {}", fp_name(&fingerprint)),
            None => "unknown".to_owned(),
        };
        let _ = writeln!(self.out, "> does the broker know {token}\n  = {text}");
        self
    }

    fn request(&mut self, token: &str, kind: RequestKind, waited: bool) -> &mut Self {
        let wait = if waited { Wait::Waited } else { Wait::Allowed };
        let decision = self
            .broker
            .begin_request(self.now, digest(token), kind, wait);
        let text = match &decision {
            Decision::Unbound => "unbound".to_owned(),
            Decision::Wait => "wait".to_owned(),
            Decision::Worker {
                ticket,
                worker_id,
                secret,
                ..
            } => {
                self.tickets.push(*ticket);
                format!(
                    "worker {} with {}",
                    short_id(worker_id),
                    short_secret(secret)
                )
            }
            Decision::PassThrough {
                ticket,
                reason,
                retry_after,
                ..
            } => {
                self.tickets.push(*ticket);
                format!(
                    "pass through ({}, retry after {}ms)",
                    reason.as_str(),
                    retry_after.as_millis()
                )
            }
            Decision::TooMany { .. } => "too many".to_owned(),
        };
        let _ = writeln!(
            self.out,
            "> {kind:?} request with {token}{}\n  = {text}",
            if waited { " (waited)" } else { "" }
        );
        self.drain();
        self
    }

    /// Ends every request, as the shell does: a draining worker left idle with a launch
    /// waiting ends its drain.
    fn end_all(&mut self) -> &mut Self {
        let _ = writeln!(self.out, "> every request ends");
        for ticket in std::mem::take(&mut self.tickets) {
            if let Some(fp) = self.broker.end_request(ticket) {
                self.broker.end_drain_for_launch(self.now, fp);
            }
        }
        self.drain();
        self
    }

    fn status(&mut self) -> &mut Self {
        let workers = self.broker.workers();
        let _ = writeln!(self.out, "> status");
        if workers.is_empty() {
            let _ = writeln!(self.out, "  = no workers");
        }
        for w in workers {
            let _ = writeln!(
                self.out,
                "  = {} {:?} control={} refs={} in_flight={}",
                short_id(&w.worker_id),
                w.state,
                w.control_available,
                w.reference_count,
                w.in_flight
            );
        }
        self
    }

    fn check(&mut self, expect: Expect) {
        expect.assert_eq(&self.out);
        self.out.clear();
    }
}

fn describe_event(event: &Event) -> String {
    match event {
        Event::RegistrationRefused {
            role,
            reason,
            fingerprint,
            ..
        } => format!(
            "control_registration_refused {} {} {}",
            role.as_str(),
            reason.as_str(),
            fingerprint.as_ref().map(fp_name).unwrap_or_default()
        ),
        Event::MachineIdentityConflict {
            fingerprint,
            peer,
            other_peer,
        } => {
            format!(
                "machine_identity_conflict {} {peer} {other_peer}",
                fp_name(fingerprint)
            )
        }
        Event::CredentialEvicted {
            fingerprint,
            digest,
        } => {
            format!(
                "route_credential_evicted {} {}",
                fp_name(fingerprint),
                digest_name(digest)
            )
        }
        Event::RouteEvicted { fingerprint } => format!("route_evicted {}", fp_name(fingerprint)),
        Event::TombstonesDropped { dropped, limit } => {
            format!("credential_tombstones_dropped {dropped} of {limit}")
        }
        Event::McpAdded {
            fingerprint,
            references,
            ..
        } => {
            format!("mcp_added {} refs={references}", fp_name(fingerprint))
        }
        Event::McpRemoved {
            fingerprint,
            references,
            reason,
            ..
        } => {
            format!(
                "mcp_removed {} refs={references} {reason:?}",
                fp_name(fingerprint)
            )
        }
        Event::McpConnected { fingerprint, .. } => {
            format!("mcp_control_connected {}", fp_name(fingerprint))
        }
        Event::McpReconnected { fingerprint, .. } => {
            format!("mcp_control_reconnected {}", fp_name(fingerprint))
        }
        Event::McpDisconnected {
            fingerprint,
            reason,
            ..
        } => format!("mcp_control_disconnected {} {reason}", fp_name(fingerprint)),
        Event::WorkerStaged {
            fingerprint,
            activation_id,
            ..
        } => {
            format!(
                "worker_staged {} {}",
                fp_name(fingerprint),
                short_id(activation_id)
            )
        }
        Event::WorkerStartupPending {
            fingerprint,
            elapsed,
            ..
        } => {
            format!(
                "worker_startup_pending {} {}ms",
                fp_name(fingerprint),
                elapsed.as_millis()
            )
        }
        Event::WorkerAdded {
            fingerprint,
            worker_id,
            startup_elapsed,
            ..
        } => format!(
            "worker_added {} {} {}ms",
            fp_name(fingerprint),
            short_id(worker_id),
            startup_elapsed.as_millis()
        ),
        Event::WorkerReady {
            fingerprint,
            worker_id,
        } => {
            format!(
                "worker_ready {} {}",
                fp_name(fingerprint),
                short_id(worker_id)
            )
        }
        Event::WorkerRelaunchRequested {
            fingerprint,
            attempt,
        } => {
            format!(
                "worker_relaunch_requested {} attempt={attempt}",
                fp_name(fingerprint)
            )
        }
        Event::WorkerActivationFailed {
            fingerprint,
            reason,
            retry_after,
            ..
        } => format!(
            "worker_activation_failed {} {reason} retry_after={}ms",
            fp_name(fingerprint),
            retry_after.as_millis()
        ),
        Event::WorkerActivationCancelled {
            fingerprint,
            activation_id,
            ..
        } => format!(
            "worker_activation_cancelled {} {}",
            fp_name(fingerprint),
            short_id(activation_id)
        ),
        Event::WorkerControlConnected {
            fingerprint,
            worker_id,
            ..
        } => {
            format!(
                "worker_control_connected {} {}",
                fp_name(fingerprint),
                short_id(worker_id)
            )
        }
        Event::WorkerControlReconnected {
            fingerprint,
            worker_id,
            ..
        } => {
            format!(
                "worker_control_reconnected {} {}",
                fp_name(fingerprint),
                short_id(worker_id)
            )
        }
        Event::WorkerControlDisconnected {
            fingerprint,
            worker_id,
            ..
        } => {
            format!(
                "worker_control_disconnected {} {}",
                fp_name(fingerprint),
                short_id(worker_id)
            )
        }
        Event::WorkerControlLost {
            fingerprint,
            worker_id,
        } => {
            format!(
                "worker_control_lost {} {}",
                fp_name(fingerprint),
                short_id(worker_id)
            )
        }
        Event::WorkerReadinessFailed {
            fingerprint,
            worker_id,
            ..
        } => {
            format!(
                "worker_readiness_failed {} {}",
                fp_name(fingerprint),
                short_id(worker_id)
            )
        }
        Event::WorkerRecoveryStarted {
            fingerprint,
            worker_id,
        } => {
            format!(
                "worker_recovery_started {} {}",
                fp_name(fingerprint),
                short_id(worker_id)
            )
        }
        Event::WorkerRecoveryFailed {
            fingerprint,
            worker_id,
        } => {
            format!(
                "worker_recovery_failed {} {}",
                fp_name(fingerprint),
                short_id(worker_id)
            )
        }
        Event::WorkerDrainStarted {
            fingerprint,
            worker_id,
            ..
        } => {
            format!(
                "worker_drain_started {} {}",
                fp_name(fingerprint),
                short_id(worker_id)
            )
        }
        Event::WorkerRemoved {
            fingerprint,
            worker_id,
            reason,
        } => format!(
            "worker_removed {} {} {reason:?}",
            fp_name(fingerprint),
            short_id(worker_id)
        ),
    }
}

// ----- scenarios ---------------------------------------------------------------------------

#[test]
fn happy_path_first_mcp_launches_and_the_worker_is_published_after_its_probe() {
    let mut s = Scenario::new();
    s.mcp(1, 'A', "a1")
        .request("a1", RequestKind::Model, false)
        .request("a1", RequestKind::Model, true)
        .worker(2, 'A')
        .ready(2)
        .request("a1", RequestKind::Hook, true)
        .end_all()
        .probe(2, ProbeOutcome::Ready)
        .request("a1", RequestKind::Model, false)
        .status()
        .request("zz", RequestKind::Model, false);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > Model request with a1
          = wait
        > Model request with a1 (waited)
          = pass through (worker_unavailable, retry after 1000ms)
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > Hook request with a1 (waited)
          = pass through (worker_unavailable, retry after 1000ms)
        > every request ends
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > Model request with a1
          = worker #5 with $6
        > status
          = #5 Ready control=true refs=1 in_flight=1
        > Model request with zz
          = unbound
    "#]]);
}

#[test]
fn mcps_joining_an_activating_a_ready_and_a_pass_through_route() {
    let mut s = Scenario::new();
    s.mcp(1, 'A', "a1")
        .mcp(2, 'A', "a1")
        .worker(3, 'A')
        .ready(3)
        .probe(3, ProbeOutcome::Ready);
    s.mcp(4, 'A', "a2").status();
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > mcp c2 registers A with a1
          event mcp_control_connected A
          event mcp_added A refs=2
          c2 <- Registered(session #5, WaitForWorker(1000ms))
        > worker c3 registers A with grant #3
          c3 <- Registered(worker #7, $8)
          event worker_control_connected A #7
        > worker c3 is ready
          probe #7 with $8
        > probe of #7 says Ready
          event worker_added A #7 0ms
          event worker_ready A #7
          c1 <- RouteReady
          c2 <- RouteReady
          persist
        > mcp c4 registers A with a2
          persist
          event mcp_control_connected A
          event mcp_added A refs=3
          c4 <- Registered(session #9, ReuseWorker)
          c4 <- RouteReady
        > status
          = #7 Ready control=true refs=3 in_flight=0
    "#]]);
    let mut s = Scenario::new();
    s.mcp(1, 'A', "a1").step(
        "owner reports a launch it does not hold failed",
        Input::McpActivationFailed {
            conn: ConnId(1),
            activation_id: Id([0; 16]),
            reason: FailureReason::Unknown,
        },
    );
    let (grant, _) = s.last_grant();
    s.step(
        "owner reports the launch failed",
        Input::McpActivationFailed {
            conn: ConnId(1),
            activation_id: grant,
            reason: FailureReason::WorkerProcessSpawnFailed,
        },
    )
    .mcp(2, 'A', "a1")
    .request("a1", RequestKind::Model, false);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > owner reports a launch it does not hold failed
        > owner reports the launch failed
          event worker_activation_failed A worker_process_spawn_failed retry_after=1000ms
          c1 <- UsePassThrough
        > mcp c2 registers A with a1
          event mcp_control_connected A
          event mcp_added A refs=2
          c2 <- Registered(session #5, UsePassThrough)
        > Model request with a1
          = pass through (worker_unavailable, retry after 1000ms)
    "#]]);
}

/// A worker with an invalid plugin configuration sends `ActivationFailed` and exits 78 at
/// once; its MCP's `WorkerExited` travels on another connection and may be read first. The
/// reason its exit status gives is the one logged, and the worker's own report, read after,
/// changes nothing.
#[test]
fn an_exit_reported_before_the_workers_own_failure_still_names_the_plugins() {
    let mut s = Scenario::new();
    s.mcp(1, 'A', "a1").worker(2, 'A');
    let grant = s.last_grant().0;
    s.step(
        "its MCP saw the child exit 78",
        Input::McpWorkerExited {
            conn: ConnId(1),
            activation_id: grant,
            reason: FailureReason::PluginConfigInvalid,
        },
    )
    .step(
        "the worker's own report arrives",
        Input::WorkerActivationFailed {
            conn: ConnId(2),
            reason: FailureReason::PluginConfigInvalid,
        },
    );
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > its MCP saw the child exit 78
          forget #5
          c2 <- Refused(generation_revoked)
          close c2
          event worker_activation_failed A plugin_config_invalid retry_after=1000ms
          c1 <- UsePassThrough
        > the worker's own report arrives
    "#]]);
}

#[test]
fn activation_failures_back_off_1_2_4_seconds_and_success_resets_the_delay() {
    let mut s = Scenario::new();
    s.mcp(1, 'A', "a1").worker(2, 'A').step(
        "worker says its plugins are invalid",
        Input::WorkerActivationFailed {
            conn: ConnId(2),
            reason: FailureReason::PluginConfigInvalid,
        },
    );
    s.advance(999).advance(1);
    let grant = s.last_grant();
    s.worker_with(3, 'A', grant)
        .step(
            "its MCP saw the child exit",
            Input::McpWorkerExited {
                conn: ConnId(1),
                activation_id: grant.0,
                reason: FailureReason::WorkerExitedBeforeReady,
            },
        )
        .advance(2000);
    let grant = s.last_grant();
    s.step(
        "the MCP could not spawn it",
        Input::McpActivationFailed {
            conn: ConnId(1),
            activation_id: grant.0,
            reason: FailureReason::WorkerExecutableResolutionFailed,
        },
    )
    .request("a1", RequestKind::Model, false)
    .advance(4000)
    .worker(4, 'A')
    .ready(4)
    .probe(4, ProbeOutcome::Ready);
    // A crash relaunches at once; the relaunched worker dying before it serves waits the
    // delay, which started again at 1 s after the success.
    let grant = s.last_grant().0;
    s.step(
        "the worker's MCP sees it exit",
        Input::McpWorkerExited {
            conn: ConnId(1),
            activation_id: grant,
            reason: FailureReason::WorkerExitedBeforeReady,
        },
    )
    .worker(5, 'A')
    .ready(5)
    .probe(5, ProbeOutcome::Ready);
    let grant = s.last_grant().0;
    s.step(
        "the relaunched worker's MCP sees it exit too",
        Input::McpWorkerExited {
            conn: ConnId(1),
            activation_id: grant,
            reason: FailureReason::WorkerExitedBeforeReady,
        },
    );
    // A crash loop (ready, then dead before serving) keeps doubling the delay: becoming
    // ready does not forgive it, serving a request does.
    s.advance(1000)
        .worker(6, 'A')
        .ready(6)
        .probe(6, ProbeOutcome::Ready);
    let grant = s.last_grant().0;
    s.step(
        "ready once more, it dies before serving again",
        Input::McpWorkerExited {
            conn: ConnId(1),
            activation_id: grant,
            reason: FailureReason::WorkerExitedBeforeReady,
        },
    );
    s.advance(2000)
        .worker(7, 'A')
        .ready(7)
        .probe(7, ProbeOutcome::Ready)
        .request("a1", RequestKind::Model, false);
    let grant = s.last_grant().0;
    s.step(
        "after serving a request it crashes: relaunched at once",
        Input::McpWorkerExited {
            conn: ConnId(1),
            activation_id: grant,
            reason: FailureReason::WorkerExitedBeforeReady,
        },
    );
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker says its plugins are invalid
          forget #5
          c2 <- Refused(generation_revoked)
          close c2
          event worker_activation_failed A plugin_config_invalid retry_after=1000ms
          c1 <- UsePassThrough
        > clock +999ms (t=999ms)
        > clock +1ms (t=1000ms)
          event worker_relaunch_requested A attempt=1
          event worker_staged A #7
          c1 <- LaunchWorker(grant #7 bind [127, 0, 0, 1]:0)
        > worker c3 registers A with grant #7
          c3 <- Registered(worker #9, $10)
          event worker_control_connected A #9
        > its MCP saw the child exit
          forget #9
          c3 <- Refused(generation_revoked)
          close c3
          event worker_activation_failed A worker_exited_before_ready retry_after=2000ms
          c1 <- UsePassThrough
        > clock +2000ms (t=3000ms)
          event worker_relaunch_requested A attempt=2
          event worker_staged A #11
          c1 <- LaunchWorker(grant #11 bind [127, 0, 0, 1]:0)
        > the MCP could not spawn it
          event worker_activation_failed A worker_executable_resolution_failed retry_after=4000ms
          c1 <- UsePassThrough
        > Model request with a1
          = pass through (worker_unavailable, retry after 4000ms)
        > clock +4000ms (t=7000ms)
          event worker_relaunch_requested A attempt=3
          event worker_staged A #13
          c1 <- LaunchWorker(grant #13 bind [127, 0, 0, 1]:0)
        > worker c4 registers A with grant #13
          c4 <- Registered(worker #15, $16)
          event worker_control_connected A #15
        > worker c4 is ready
          probe #15 with $16
        > probe of #15 says Ready
          event worker_added A #15 0ms
          event worker_ready A #15
          c1 <- RouteReady
          persist
        > the worker's MCP sees it exit
          forget #15
          event worker_removed A #15 Crashed
          persist
          c4 <- Refused(generation_revoked)
          close c4
          event worker_staged A #17
          c1 <- LaunchWorker(grant #17 bind [127, 0, 0, 1]:0)
        > worker c5 registers A with grant #17
          c5 <- Registered(worker #19, $20)
          event worker_control_connected A #19
        > worker c5 is ready
          probe #19 with $20
        > probe of #19 says Ready
          event worker_added A #19 0ms
          event worker_ready A #19
          c1 <- RouteReady
          persist
        > the relaunched worker's MCP sees it exit too
          forget #19
          event worker_removed A #19 Crashed
          persist
          c5 <- Refused(generation_revoked)
          close c5
          event worker_activation_failed A worker_exited_before_serving retry_after=1000ms
          c1 <- UsePassThrough
        > clock +1000ms (t=8000ms)
          event worker_relaunch_requested A attempt=1
          event worker_staged A #21
          c1 <- LaunchWorker(grant #21 bind [127, 0, 0, 1]:0)
        > worker c6 registers A with grant #21
          c6 <- Registered(worker #23, $24)
          event worker_control_connected A #23
        > worker c6 is ready
          probe #23 with $24
        > probe of #23 says Ready
          event worker_added A #23 0ms
          event worker_ready A #23
          c1 <- RouteReady
          persist
        > ready once more, it dies before serving again
          forget #23
          event worker_removed A #23 Crashed
          persist
          c6 <- Refused(generation_revoked)
          close c6
          event worker_activation_failed A worker_exited_before_serving retry_after=2000ms
          c1 <- UsePassThrough
        > clock +2000ms (t=10000ms)
          event worker_relaunch_requested A attempt=2
          event worker_staged A #25
          c1 <- LaunchWorker(grant #25 bind [127, 0, 0, 1]:0)
        > worker c7 registers A with grant #25
          c7 <- Registered(worker #27, $28)
          event worker_control_connected A #27
        > worker c7 is ready
          probe #27 with $28
        > probe of #27 says Ready
          event worker_added A #27 0ms
          event worker_ready A #27
          c1 <- RouteReady
          persist
        > Model request with a1
          = worker #27 with $28
        > after serving a request it crashes: relaunched at once
          forget #27
          event worker_removed A #27 Crashed
          persist
          c7 <- Refused(generation_revoked)
          close c7
          event worker_staged A #29
          c1 <- LaunchWorker(grant #29 bind [127, 0, 0, 1]:0)
    "#]]);
}

#[test]
fn a_grant_owner_leaving_hands_a_fresh_grant_to_another_mcp_and_late_messages_are_ignored() {
    let mut s = Scenario::new();
    s.mcp(1, 'A', "a1").mcp(2, 'A', "a1");
    let first = s.last_grant();
    s.drop_conn(1);
    // The cancelled grant's worker registers late: refused.
    s.worker_with(3, 'A', first)
        .worker(4, 'A')
        .ready(4)
        .probe(4, ProbeOutcome::Ready);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > mcp c2 registers A with a1
          event mcp_control_connected A
          event mcp_added A refs=2
          c2 <- Registered(session #5, WaitForWorker(1000ms))
        > c1 drops
          event mcp_control_disconnected A peer_closed
          event worker_activation_cancelled A #3
          event worker_staged A #7
          c2 <- LaunchWorker(grant #7 bind [127, 0, 0, 1]:0)
        > worker c3 registers A with grant #3
          event control_registration_refused worker grant_unknown A
          c3 <- Refused(grant_unknown)
          close c3
        > worker c4 registers A with grant #7
          c4 <- Registered(worker #9, $10)
          event worker_control_connected A #9
        > worker c4 is ready
          probe #9 with $10
        > probe of #9 says Ready
          event worker_added A #9 0ms
          event worker_ready A #9
          c2 <- RouteReady
          persist
    "#]]);
    // With nobody else connected the route waits for the first MCP that connects or resumes.
    let mut s = Scenario::new();
    s.mcp(1, 'A', "a1").release(1);
    let grant = s.grant(0).0;
    s.step(
        "it asks about its launch on the released connection",
        Input::McpLaunchStatus {
            conn: ConnId(1),
            activation_id: grant,
        },
    );
    s.mcp(2, 'A', "a1").drop_conn(2).resume(3, 2, 'A');
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > mcp c1 releases
          event mcp_removed A refs=0 Released
          event worker_activation_cancelled A #3
        > it asks about its launch on the released connection
          c1 <- LaunchStatusIs(#3 cancelled)
        > mcp c2 registers A with a1
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #7
          c2 <- Registered(session #5, LaunchWorker(grant #7 bind [127, 0, 0, 1]:0))
        > c2 drops
          event mcp_control_disconnected A peer_closed
          event worker_activation_cancelled A #7
        > mcp c3 resumes the session of c2
          event mcp_control_reconnected A
          event worker_staged A #9
          c3 <- Registered(session #5, LaunchWorker(grant #9 bind [127, 0, 0, 1]:0))
    "#]]);
}

#[test]
fn readiness_probe_failing_through_the_startup_progress_time_fails_the_activation() {
    let mut config = test_config();
    config.timers.startup_progress_ms = 1000;
    let mut s = Scenario::with(config);
    s.mcp(1, 'A', "a1")
        .worker(2, 'A')
        .ready(2)
        .probe(2, ProbeOutcome::Failed)
        .advance(250);
    s.probe(2, ProbeOutcome::Failed)
        .advance(750)
        .probe(2, ProbeOutcome::Failed);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Failed
        > clock +250ms (t=250ms)
          probe #5 with $6
        > probe of #5 says Failed
        > clock +750ms (t=1000ms)
          probe #5 with $6
          event worker_startup_pending A 1000ms
        > probe of #5 says Failed
          forget #5
          c2 <- Refused(generation_revoked: generation_revoked: the daemon could not reach this worker at the endpoint it registered (readiness_probe_failed); for a remote daemon, let inbound connections from the daemon reach RELAY_WORKER_ADVERTISE_ADDRESS:RELAY_WORKER_PORT on this machine (firewall, NAT, VPN))
          close c2
          event worker_activation_failed A readiness_probe_failed retry_after=1000ms
          c1 <- UsePassThrough
    "#]]);
}

#[test]
fn startup_without_deadline_logs_progress() {
    let mut config = test_config();
    config.timers.startup_progress_ms = 1000;
    let mut s = Scenario::with(config);
    s.mcp(1, 'A', "a1")
        .advance(1000)
        .advance(1000)
        .request("a1", RequestKind::Model, true);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > clock +1000ms (t=1000ms)
          event worker_startup_pending A 1000ms
        > clock +1000ms (t=2000ms)
          event worker_startup_pending A 2000ms
        > Model request with a1 (waited)
          = pass through (worker_unavailable, retry after 1000ms)
    "#]]);
}

#[test]
fn the_last_mcp_leaving_an_unpublished_route_empties_it() {
    let mut s = Scenario::new();
    s.mcp(1, 'A', "a1").worker(2, 'A').release(1);
    let grant = s.grant(0);
    s.step(
        "it asks about its launch",
        Input::McpLaunchStatus {
            conn: ConnId(1),
            activation_id: grant.0,
        },
    )
    .request("a1", RequestKind::Model, false);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > mcp c1 releases
          event mcp_removed A refs=0 Released
          forget #5
          c2 <- Refused(generation_revoked)
          close c2
          event worker_activation_cancelled A #3
        > it asks about its launch
          c1 <- LaunchStatusIs(#3 cancelled)
        > Model request with a1
          = pass through (no_live_session, retry after 1000ms)
    "#]]);
    let mut s = Scenario::new();
    s.mcp(1, 'A', "a1");
    let grant = s.grant(0).0;
    s.step(
        "launch fails",
        Input::McpActivationFailed {
            conn: ConnId(1),
            activation_id: grant,
            reason: FailureReason::WorkerExitedBeforeReady,
        },
    )
    .release(1)
    .advance(5000);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > launch fails
          event worker_activation_failed A worker_exited_before_ready retry_after=1000ms
          c1 <- UsePassThrough
        > mcp c1 releases
          event mcp_removed A refs=0 Released
        > clock +5000ms (t=5000ms)
    "#]]);
}

#[test]
fn a_control_drop_means_recovering_and_the_same_worker_resumes_after_a_fresh_probe() {
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2)
        .drop_conn(2)
        .request("a1", RequestKind::Model, false)
        .status()
        .mcp(3, 'A', "a1")
        .probe(2, ProbeOutcome::Failed);
    let worker = s.workers[&2];
    s.step(
        "the worker resumes",
        Input::WorkerResume {
            conn: ConnId(4),
            fingerprint: fp('A'),
            worker_id: worker,
            certificate_sha256: Bytes32([2; 32]),
        },
    );
    s.workers.insert(4, worker);
    s.probe(4, ProbeOutcome::Ready)
        .request("a1", RequestKind::Model, false);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > c2 drops
          event worker_control_disconnected A #5
          event worker_control_lost A #5
          event worker_recovery_started A #5
          probe #5 with $6
        > Model request with a1
          = pass through (worker_unavailable, retry after 1000ms)
        > status
          = #5 Recovering control=false refs=1 in_flight=0
        > mcp c3 registers A with a1
          event mcp_control_connected A
          event mcp_added A refs=2
          c3 <- Registered(session #7, WaitForWorker(1000ms))
        > probe of #5 says Failed
        > the worker resumes
          forget #5
          c4 <- Registered(worker #5, $9)
          probe #5 with $9
        > probe of #5 says Ready
          event worker_control_reconnected A #5
          event worker_ready A #5
          c1 <- RouteReady
          c3 <- RouteReady
          persist
        > Model request with a1
          = worker #5 with $9
    "#]]);
}

#[test]
fn evidence_of_death_relaunches_at_once_and_backs_off_only_when_it_dies_again_before_serving() {
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2)
        .request("a1", RequestKind::Model, false);
    let grant = s.grant(0).0;
    s.step(
        "its MCP sees it exit",
        Input::McpWorkerExited {
            conn: ConnId(1),
            activation_id: grant,
            reason: FailureReason::WorkerExitedBeforeReady,
        },
    )
    .worker(3, 'A')
    .ready(3)
    .probe(3, ProbeOutcome::Ready);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > Model request with a1
          = worker #5 with $6
        > its MCP sees it exit
          forget #5
          event worker_removed A #5 Crashed
          persist
          c2 <- Refused(generation_revoked)
          close c2
          event worker_staged A #7
          c1 <- LaunchWorker(grant #7 bind [127, 0, 0, 1]:0)
        > worker c3 registers A with grant #7
          c3 <- Registered(worker #9, $10)
          event worker_control_connected A #9
        > worker c3 is ready
          probe #9 with $10
        > probe of #9 says Ready
          event worker_added A #9 0ms
          event worker_ready A #9
          c1 <- RouteReady
          persist
    "#]]);
    // A control drop, then the endpoint refuses: also death.
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2)
        .request("a1", RequestKind::Model, false)
        .drop_conn(2)
        .probe(2, ProbeOutcome::Gone);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > Model request with a1
          = worker #5 with $6
        > c2 drops
          event worker_control_disconnected A #5
          event worker_control_lost A #5
          event worker_recovery_started A #5
          probe #5 with $6
        > probe of #5 says Gone
          forget #5
          event worker_removed A #5 Crashed
          persist
          event worker_staged A #7
          c1 <- LaunchWorker(grant #7 bind [127, 0, 0, 1]:0)
    "#]]);
    // A worker that never served and dies: relaunched at once all the same. The relaunched
    // one dying again before it serves waits the backoff, so a worker that crashes as soon
    // as it is ready is not relaunched in a loop.
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2);
    let grant = s.grant(0).0;
    s.step(
        "its MCP sees it exit",
        Input::McpWorkerExited {
            conn: ConnId(1),
            activation_id: grant,
            reason: FailureReason::WorkerExitedBeforeReady,
        },
    )
    .worker(3, 'A')
    .ready(3)
    .probe(3, ProbeOutcome::Ready);
    let grant = s.last_grant().0;
    s.step(
        "the relaunched worker exits before serving too",
        Input::McpWorkerExited {
            conn: ConnId(1),
            activation_id: grant,
            reason: FailureReason::WorkerExitedBeforeReady,
        },
    );
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > its MCP sees it exit
          forget #5
          event worker_removed A #5 Crashed
          persist
          c2 <- Refused(generation_revoked)
          close c2
          event worker_staged A #7
          c1 <- LaunchWorker(grant #7 bind [127, 0, 0, 1]:0)
        > worker c3 registers A with grant #7
          c3 <- Registered(worker #9, $10)
          event worker_control_connected A #9
        > worker c3 is ready
          probe #9 with $10
        > probe of #9 says Ready
          event worker_added A #9 0ms
          event worker_ready A #9
          c1 <- RouteReady
          persist
        > the relaunched worker exits before serving too
          forget #9
          event worker_removed A #9 Crashed
          persist
          c3 <- Refused(generation_revoked)
          close c3
          event worker_activation_failed A worker_exited_before_serving retry_after=1000ms
          c1 <- UsePassThrough
    "#]]);
}

#[test]
fn two_failed_readiness_probes_and_an_expired_recovery_relaunch() {
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2)
        .advance(30_000)
        .probe(2, ProbeOutcome::Failed)
        .advance(250)
        .probe(2, ProbeOutcome::Failed)
        .request("a1", RequestKind::Model, false)
        .advance(30_000);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > clock +30000ms (t=30000ms)
          probe #5 with $6
        > probe of #5 says Failed
        > clock +250ms (t=30250ms)
          probe #5 with $6
        > probe of #5 says Failed
          event worker_readiness_failed A #5
          event worker_recovery_started A #5
        > Model request with a1
          = pass through (worker_unavailable, retry after 1000ms)
        > clock +30000ms (t=60250ms)
          probe #5 with $6
          event worker_recovery_failed A #5
          forget #5
          event worker_removed A #5 Revoked
          persist
          c2 <- Refused(generation_revoked)
          close c2
          event worker_staged A #7
          c1 <- LaunchWorker(grant #7 bind [127, 0, 0, 1]:0)
    "#]]);
}

#[test]
fn the_last_release_drains_and_a_new_session_waits_for_a_fresh_worker() {
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2)
        .request("a1", RequestKind::Model, false)
        .release(1)
        .status()
        .request("a1", RequestKind::Model, false)
        .request("a1", RequestKind::Hook, false)
        .status()
        .mcp(3, 'A', "a1")
        .request("a1", RequestKind::Model, false)
        .end_all()
        .status()
        .step(
            "the worker says it stops",
            Input::WorkerStopping { conn: ConnId(2) },
        )
        .drop_conn(2)
        .worker(4, 'A')
        .ready(4)
        .probe(4, ProbeOutcome::Ready);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > Model request with a1
          = worker #5 with $6
        > mcp c1 releases
          event mcp_removed A refs=0 Released
          c2 <- Drain(120000ms)
          event worker_drain_started A #5
          persist
        > status
          = #5 Draining control=true refs=0 in_flight=1
        > Model request with a1
          = pass through (no_live_session, retry after 1000ms)
        > Hook request with a1
          = worker #5 with $6
        > status
          = #5 Draining control=true refs=0 in_flight=2
        > mcp c3 registers A with a1
          event mcp_control_connected A
          event mcp_added A refs=1
          c3 <- Registered(session #7, WaitForWorker(1000ms))
        > Model request with a1
          = too many
        > every request ends
          forget #5
          event worker_removed A #5 Drained
          persist
          c2 <- Refused(generation_revoked: drained: a new session of the route starts its own worker)
          close c2
          event worker_staged A #9
          c3 <- LaunchWorker(grant #9 bind [127, 0, 0, 1]:0)
        > status
          = no workers
        > the worker says it stops
        > c2 drops
        > worker c4 registers A with grant #9
          c4 <- Registered(worker #11, $12)
          event worker_control_connected A #11
        > worker c4 is ready
          probe #11 with $12
        > probe of #11 says Ready
          event worker_added A #11 0ms
          event worker_ready A #11
          c3 <- RouteReady
          persist
    "#]]);
}

/// A session that registers while the route's worker drains with nothing in flight gets a
/// worker of its own at once: its first requests wait for it, as on a first start, instead
/// of passing by policy and records while the old worker waits out its quiet time. A hook
/// in flight on the old worker holds the launch until it ends; meanwhile model requests
/// wait, and hooks that do not open a session still go to the draining worker (§3.5).
#[test]
fn a_session_registering_while_the_worker_drains_gets_its_own_worker_at_once() {
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2)
        .release(1)
        .mcp(3, 'A', "a1")
        .request("a1", RequestKind::Model, false)
        .request("a1", RequestKind::Hook, false)
        .worker(4, 'A')
        .ready(4)
        .probe(4, ProbeOutcome::Ready)
        .request("a1", RequestKind::Model, false)
        .release(3)
        .request("a1", RequestKind::Hook, false)
        .mcp(5, 'A', "a1")
        .request("a1", RequestKind::Model, false)
        .request("a1", RequestKind::Hook, false)
        .end_all();
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > mcp c1 releases
          event mcp_removed A refs=0 Released
          c2 <- Drain(120000ms)
          event worker_drain_started A #5
          persist
        > mcp c3 registers A with a1
          event mcp_control_connected A
          event mcp_added A refs=1
          forget #5
          event worker_removed A #5 Drained
          persist
          c2 <- Refused(generation_revoked: drained: a new session of the route starts its own worker)
          close c2
          event worker_staged A #9
          c3 <- Registered(session #7, LaunchWorker(grant #9 bind [127, 0, 0, 1]:0))
        > Model request with a1
          = wait
        > Hook request with a1
          = wait
        > worker c4 registers A with grant #9
          c4 <- Registered(worker #11, $12)
          event worker_control_connected A #11
        > worker c4 is ready
          probe #11 with $12
        > probe of #11 says Ready
          event worker_added A #11 0ms
          event worker_ready A #11
          c3 <- RouteReady
          persist
        > Model request with a1
          = worker #11 with $12
        > mcp c3 releases
          event mcp_removed A refs=0 Released
          c4 <- Drain(120000ms)
          event worker_drain_started A #11
          persist
        > Hook request with a1
          = worker #11 with $12
        > mcp c5 registers A with a1
          event mcp_control_connected A
          event mcp_added A refs=1
          c5 <- Registered(session #13, WaitForWorker(1000ms))
        > Model request with a1
          = wait
        > Hook request with a1
          = worker #11 with $12
        > every request ends
          forget #11
          event worker_removed A #11 Drained
          persist
          c4 <- Refused(generation_revoked: drained: a new session of the route starts its own worker)
          close c4
          event worker_staged A #15
          c5 <- LaunchWorker(grant #15 bind [127, 0, 0, 1]:0)
    "#]]);
}

/// A hook that opens a session, on a route whose worker drains, belongs to a new session
/// whose MCP is likely registering (Claude Code posts `SessionStart` first): it waits, and
/// reaches the new session's worker, so the session's records are not split between two
/// workers. Waited in vain, it goes to the draining worker; a closing hook goes there at once.
#[test]
fn an_opening_hook_on_a_draining_route_waits_for_the_new_session() {
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2)
        .release(1)
        .request("a1", RequestKind::Hook, false)
        .request("a1", RequestKind::OpeningHook, false)
        .request("a1", RequestKind::OpeningHook, true)
        .end_all()
        .mcp(3, 'A', "a1")
        .request("a1", RequestKind::OpeningHook, false);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > mcp c1 releases
          event mcp_removed A refs=0 Released
          c2 <- Drain(120000ms)
          event worker_drain_started A #5
          persist
        > Hook request with a1
          = worker #5 with $6
        > OpeningHook request with a1
          = wait
        > OpeningHook request with a1 (waited)
          = worker #5 with $6
        > every request ends
        > mcp c3 registers A with a1
          event mcp_control_connected A
          event mcp_added A refs=1
          forget #5
          event worker_removed A #5 Drained
          persist
          c2 <- Refused(generation_revoked: drained: a new session of the route starts its own worker)
          close c2
          event worker_staged A #9
          c3 <- Registered(session #7, LaunchWorker(grant #9 bind [127, 0, 0, 1]:0))
        > OpeningHook request with a1
          = wait
    "#]]);
}

#[test]
fn a_draining_worker_that_never_exits_is_revoked_after_drain_plus_grace() {
    let mut config = test_config();
    config.timers.drain_ms = 1000;
    config.timers.reconnect_grace_ms = 500;
    let mut s = Scenario::with(config);
    // A hook on the draining worker that never ends keeps the drain from ending early.
    s.ready_route(1, 'A', "a1", 2)
        .release(1)
        .request("a1", RequestKind::Hook, false)
        .mcp(3, 'A', "a1")
        .advance(1499)
        .advance(1);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > mcp c1 releases
          event mcp_removed A refs=0 Released
          c2 <- Drain(1000ms)
          event worker_drain_started A #5
          persist
        > Hook request with a1
          = worker #5 with $6
        > mcp c3 registers A with a1
          event mcp_control_connected A
          event mcp_added A refs=1
          c3 <- Registered(session #7, WaitForWorker(1000ms))
        > clock +1499ms (t=1499ms)
        > clock +1ms (t=1500ms)
          forget #5
          event worker_removed A #5 DrainTimeout
          persist
          c2 <- Refused(generation_revoked)
          close c2
          event worker_staged A #9
          c3 <- LaunchWorker(grant #9 bind [127, 0, 0, 1]:0)
    "#]]);
}

#[test]
fn an_mcp_in_its_grace_keeps_its_reference_then_loses_it() {
    let mut config = test_config();
    config.timers.reconnect_grace_ms = 1000;
    let mut s = Scenario::with(config);
    s.ready_route(1, 'A', "a1", 2)
        .drop_conn(1)
        .request("a1", RequestKind::Model, false)
        .status()
        .advance(1000)
        .status();
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > c1 drops
          event mcp_control_disconnected A peer_closed
        > Model request with a1
          = worker #5 with $6
        > status
          = #5 Ready control=true refs=1 in_flight=1
        > clock +1000ms (t=1000ms)
          event mcp_removed A refs=0 GraceExpired
          c2 <- Drain(120000ms)
          event worker_drain_started A #5
          persist
        > status
          = #5 Draining control=true refs=0 in_flight=1
    "#]]);
}

#[test]
fn grants_are_single_use_and_bound_to_their_identity() {
    let mut s = Scenario::new();
    s.mcp(1, 'A', "a1");
    let grant = s.last_grant();
    s.worker_with(2, 'B', grant)
        .worker_with(3, 'A', (grant.0, Bytes32([9; 32])))
        .worker_with(4, 'A', (Id([7; 16]), grant.1))
        .worker_with(5, 'A', grant)
        .worker_with(6, 'A', grant);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers B with grant #3
          event control_registration_refused worker grant_identity_mismatch B
          c2 <- Refused(grant_identity_mismatch)
          close c2
        > worker c3 registers A with grant #3
          event control_registration_refused worker grant_unknown A
          c3 <- Refused(grant_unknown)
          close c3
        > worker c4 registers A with grant #506381209866536711
          event control_registration_refused worker grant_unknown A
          c4 <- Refused(grant_unknown)
          close c4
        > worker c5 registers A with grant #3
          c5 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c6 registers A with grant #3
          event control_registration_refused worker grant_replayed A
          c6 <- Refused(grant_replayed)
          close c6
    "#]]);
}

#[test]
fn pass_through_mode_binds_but_issues_no_grant_and_refuses_workers() {
    let mut s = Scenario::with(BrokerConfig {
        pass_through: true,
        ..test_config()
    });
    s.mcp(1, 'A', "a1")
        .worker_with(2, 'A', (Id([1; 16]), Bytes32([1; 32])))
        .request("a1", RequestKind::Model, false);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          c1 <- Registered(session #1, UsePassThrough)
        > worker c2 registers A with grant #72340172838076673
          event control_registration_refused worker pass_through_mode A
          c2 <- Refused(pass_through_mode)
          close c2
        > Model request with a1
          = pass through (configured_pass_through, retry after 1000ms)
    "#]]);
}

#[test]
fn token_limit_evicts_the_idle_oldest_and_refuses_when_all_are_live() {
    let mut s = Scenario::new();
    s.mcp(1, 'A', "a1")
        .mcp(2, 'A', "a2")
        .release(1)
        .mcp(3, 'A', "a3")
        .request("a1", RequestKind::Model, false);
    s.mcp(4, 'A', "a4");
    // The evicted digest stays a tombstone: another identity cannot take it, the same one can.
    s.mcp(5, 'B', "a1").mcp(6, 'B', "a2");
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > mcp c2 registers A with a2
          persist
          event mcp_control_connected A
          event mcp_added A refs=2
          c2 <- Registered(session #5, WaitForWorker(1000ms))
        > mcp c1 releases
          event mcp_removed A refs=1 Released
          event worker_activation_cancelled A #3
          event worker_staged A #7
          c2 <- LaunchWorker(grant #7 bind [127, 0, 0, 1]:0)
        > mcp c3 registers A with a3
          event route_credential_evicted A a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=2
          c3 <- Registered(session #9, WaitForWorker(1000ms))
        > Model request with a1
          = unbound
        > mcp c4 registers A with a4
          event control_registration_refused mcp token_limit A
          c4 <- Refused(token_limit)
          close c4
        > mcp c5 registers B with a1
          event control_registration_refused mcp credential_bound_elsewhere B
          c5 <- Refused(credential_bound_elsewhere)
          close c5
        > mcp c6 registers B with a2
          event control_registration_refused mcp credential_bound_elsewhere B
          c6 <- Refused(credential_bound_elsewhere)
          close c6
    "#]]);
}

/// A credential registered again is the most recently registered: an eviction takes the
/// one whose last registration is oldest, not the one bound first.
#[test]
fn a_token_registered_again_is_evicted_last() {
    let mut s = Scenario::new();
    s.mcp(1, 'A', "a1")
        .mcp(2, 'A', "a2")
        .release(1)
        .release(2)
        .mcp(3, 'A', "a1")
        .release(3)
        .mcp(4, 'A', "a3")
        .request("a1", RequestKind::Model, false)
        .request("a2", RequestKind::Model, false);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > mcp c2 registers A with a2
          persist
          event mcp_control_connected A
          event mcp_added A refs=2
          c2 <- Registered(session #5, WaitForWorker(1000ms))
        > mcp c1 releases
          event mcp_removed A refs=1 Released
          event worker_activation_cancelled A #3
          event worker_staged A #7
          c2 <- LaunchWorker(grant #7 bind [127, 0, 0, 1]:0)
        > mcp c2 releases
          event mcp_removed A refs=0 Released
          event worker_activation_cancelled A #7
        > mcp c3 registers A with a1
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #11
          c3 <- Registered(session #9, LaunchWorker(grant #11 bind [127, 0, 0, 1]:0))
        > mcp c3 releases
          event mcp_removed A refs=0 Released
          event worker_activation_cancelled A #11
        > mcp c4 registers A with a3
          event route_credential_evicted A a2
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #15
          c4 <- Registered(session #13, LaunchWorker(grant #15 bind [127, 0, 0, 1]:0))
        > Model request with a1
          = wait
        > Model request with a2
          = unbound
    "#]]);
}

/// After a restart, whose state keeps each binding's last use but not the order of
/// registration, the least recently used idle credential is the one an eviction takes.
#[test]
fn after_a_restart_the_least_recently_used_token_is_evicted_first() {
    let mut s = Scenario::new();
    s.mcp(1, 'A', "a1").mcp(2, 'A', "a2").release(1).release(2);
    s.advance(1_000).request("a1", RequestKind::Model, false);
    let snapshot = s.broker.snapshot();
    let mut s = Scenario::new();
    s.broker.restore(s.now, snapshot);
    s.mcp(3, 'A', "a3")
        .request("a1", RequestKind::Model, false)
        .request("a2", RequestKind::Model, false);
    s.check(expect![[r#"
        > mcp c3 registers A with a3
          event route_credential_evicted A a2
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c3 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > Model request with a1
          = wait
        > Model request with a2
          = unbound
    "#]]);
}

#[test]
fn route_table_evicts_the_least_recently_used_idle_route() {
    let mut s = Scenario::new();
    s.mcp(1, 'A', "a1")
        .release(1)
        .mcp(2, 'B', "b1")
        .release(2)
        .mcp(3, 'C', "c1");
    s.mcp(4, 'D', "d1")
        .request("a1", RequestKind::Model, false)
        .mcp(5, 'E', "e1");
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > mcp c1 releases
          event mcp_removed A refs=0 Released
          event worker_activation_cancelled A #3
        > mcp c2 registers B with b1
          persist
          event mcp_control_connected B
          event mcp_added B refs=1
          event worker_staged B #7
          c2 <- Registered(session #5, LaunchWorker(grant #7 bind [127, 0, 0, 1]:0))
        > mcp c2 releases
          event mcp_removed B refs=0 Released
          event worker_activation_cancelled B #7
        > mcp c3 registers C with c1
          persist
          event mcp_control_connected C
          event mcp_added C refs=1
          event worker_staged C #11
          c3 <- Registered(session #9, LaunchWorker(grant #11 bind [127, 0, 0, 1]:0))
        > mcp c4 registers D with d1
          event route_evicted A
          persist
          persist
          event mcp_control_connected D
          event mcp_added D refs=1
          event worker_staged D #15
          c4 <- Registered(session #13, LaunchWorker(grant #15 bind [127, 0, 0, 1]:0))
        > Model request with a1
          = unbound
        > mcp c5 registers E with e1
          event route_evicted B
          persist
          persist
          event mcp_control_connected E
          event mcp_added E refs=1
          event worker_staged E #19
          c5 <- Registered(session #17, LaunchWorker(grant #19 bind [127, 0, 0, 1]:0))
    "#]]);
}

/// A route whose registration is still being written is not idle: evicting it would let
/// the write land on a route the table no longer counts, with its token a tombstone.
#[test]
fn a_route_whose_registration_is_being_written_is_not_evicted() {
    let mut config = test_config();
    config.max_routes = 1;
    let mut s = Scenario::with(config);
    s.auto_persist = false;
    s.mcp(1, 'A', "a1");
    let write = s.last_seq;
    s.mcp(2, 'B', "b1");
    s.step(
        "the state write lands",
        Input::Persisted {
            seq: write,
            ok: true,
        },
    )
    .request("a1", RequestKind::Model, false);
    assert_eq!(s.broker.routes.len(), 1);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
        > mcp c2 registers B with b1
          event control_registration_refused mcp route_table_full B
          c2 <- Refused(route_table_full)
          close c2
        > the state write lands
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > Model request with a1
          = wait
    "#]]);
}

#[test]
fn session_limit_and_identity_conflict() {
    let mut s = Scenario::new();
    let conflict = |s: &Scenario| {
        s.broker
            .route_view(&digest("a1"))
            .unwrap()
            .identity_conflict
    };
    s.mcp(1, 'A', "a1").mcp(2, 'A', "a1");
    // Two sessions from one address are one machine's.
    assert!(!conflict(&s));
    s.mcp_from(3, 'A', "a1", IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)));
    // The route's answer says so while both addresses are connected, for the doctor.
    assert!(conflict(&s));
    s.mcp(4, 'A', "a1");
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > mcp c2 registers A with a1
          event mcp_control_connected A
          event mcp_added A refs=2
          c2 <- Registered(session #5, WaitForWorker(1000ms))
        > mcp c3 registers A with a1
          event machine_identity_conflict A 10.0.0.9 127.0.0.1
          event mcp_control_connected A
          event mcp_added A refs=3
          c3 <- Registered(session #7, WaitForWorker(1000ms))
        > mcp c4 registers A with a1
          event control_registration_refused mcp session_limit A
          c4 <- Refused(session_limit)
          close c4
    "#]]);
    s.drop_conn(3);
    assert!(!conflict(&s));
}

#[test]
fn revoke_and_block_end_the_route() {
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2)
        .step(
            "relayd bindings revoke A",
            Input::Revoke {
                fingerprint: fp('A'),
                block: false,
            },
        )
        .request("a1", RequestKind::Model, false)
        .status()
        .mcp(3, 'A', "a1")
        .step(
            "relayd bindings block A",
            Input::Revoke {
                fingerprint: fp('A'),
                block: true,
            },
        )
        .mcp(4, 'A', "a1")
        .step(
            "relayd bindings unblock A",
            Input::Unblock {
                fingerprint: fp('A'),
            },
        )
        .mcp(5, 'A', "a1");
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > relayd bindings revoke A
          c1 <- Refused(revoked)
          close c1
          event mcp_removed A refs=0 Revoked
          c2 <- Drain(120000ms)
          forget #5
          event worker_removed A #5 Revoked
          persist
          persist
        > Model request with a1
          = unbound
        > status
          = no workers
        > mcp c3 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #9
          c3 <- Registered(session #7, LaunchWorker(grant #9 bind [127, 0, 0, 1]:0))
        > relayd bindings block A
          c3 <- Refused(blocked)
          close c3
          event mcp_removed A refs=0 Revoked
          event worker_activation_cancelled A #9
          persist
        > mcp c4 registers A with a1
          event control_registration_refused mcp blocked A
          c4 <- Refused(blocked)
          close c4
        > relayd bindings unblock A
          persist
        > mcp c5 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #13
          c5 <- Registered(session #11, LaunchWorker(grant #13 bind [127, 0, 0, 1]:0))
    "#]]);
}

#[test]
fn a_restart_restores_bindings_and_the_generation_resumes_once_a_reference_returns() {
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2);
    let snapshot = s.broker.snapshot();
    let worker = s.workers[&2];
    s.out.clear();
    // A new daemon instance.
    let mut s = Scenario::new();
    s.broker.restore(s.now, snapshot);
    s.request("a1", RequestKind::Model, false)
        .end_all()
        .status();
    s.step(
        "the worker resumes",
        Input::WorkerResume {
            conn: ConnId(10),
            fingerprint: fp('A'),
            worker_id: worker,
            certificate_sha256: Bytes32([2; 32]),
        },
    );
    s.workers.insert(10, worker);
    s.probe(10, ProbeOutcome::Ready)
        .request("a1", RequestKind::Model, false)
        .end_all()
        .mcp(11, 'A', "a1")
        .probe(10, ProbeOutcome::Ready)
        .request("a1", RequestKind::Model, false)
        .mcp(12, 'B', "a1");
    s.check(expect![[r#"
        > Model request with a1
          = pass through (no_live_session, retry after 1000ms)
          probe #5 with $0
        > every request ends
        > status
          = #5 Recovering control=false refs=0 in_flight=0
        > the worker resumes
          forget #5
          c10 <- Registered(worker #5, $1)
          probe #5 with $1
        > probe of #5 says Ready
        > Model request with a1
          = pass through (no_live_session, retry after 1000ms)
        > every request ends
        > mcp c11 registers A with a1
          event mcp_control_connected A
          event mcp_added A refs=1
          probe #5 with $1
          c11 <- Registered(session #2, WaitForWorker(1000ms))
        > probe of #5 says Ready
          event worker_control_reconnected A #5
          event worker_ready A #5
          c11 <- RouteReady
          persist
        > Model request with a1
          = worker #5 with $1
        > mcp c12 registers B with a1
          event control_registration_refused mcp credential_bound_elsewhere B
          c12 <- Refused(credential_bound_elsewhere)
          close c12
    "#]]);
}

/// A worker that was draining when the daemon stopped is probed at start like any other:
/// one that died meanwhile is removed at once, not shown as draining for the grace.
#[test]
fn a_restored_draining_generation_found_dead_is_removed_at_once() {
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2).release(1);
    let snapshot = s.broker.snapshot();
    assert!(snapshot.generations[0].draining);
    let worker = s.workers[&2];
    let mut s = Scenario::new();
    s.broker.restore(s.now, snapshot);
    s.workers.insert(2, worker);
    s.advance(0).probe(2, ProbeOutcome::Gone);
    s.check(expect![[r#"
        > clock +0ms (t=0ms)
          probe #5 with $0
        > probe of #5 says Gone
          forget #5
          event worker_removed A #5 Drained
          persist
    "#]]);
}

#[test]
fn a_restored_generation_not_resumed_in_the_grace_is_revoked() {
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2);
    let snapshot = s.broker.snapshot();
    let worker = s.workers[&2];
    let mut s = Scenario::new();
    s.broker.restore(s.now, snapshot);
    s.advance(30_000).step(
        "the worker resumes too late",
        Input::WorkerResume {
            conn: ConnId(10),
            fingerprint: fp('A'),
            worker_id: worker,
            certificate_sha256: Bytes32([2; 32]),
        },
    );
    s.check(expect![[r#"
        > clock +30000ms (t=30000ms)
          probe #5 with $0
          event worker_recovery_failed A #5
          forget #5
          event worker_removed A #5 Revoked
          persist
        > the worker resumes too late
          event control_registration_refused worker generation_revoked A
          c10 <- Refused(generation_revoked)
          close c10
    "#]]);
}

#[test]
fn a_resume_with_a_wrong_token_or_certificate_is_refused() {
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2).drop_conn(1).drop_conn(2);
    let (session, _) = s.sessions[&1];
    let worker = s.workers[&2];
    s.step(
        "resume with a guessed token",
        Input::McpResume {
            conn: ConnId(3),
            fingerprint: fp('A'),
            session_id: session,
            resume_token: Bytes32([0; 32]),
            peer: IpAddr::V4(Ipv4Addr::LOCALHOST),
        },
    )
    .step(
        "resume as another identity",
        Input::WorkerResume {
            conn: ConnId(4),
            fingerprint: fp('B'),
            worker_id: worker,
            certificate_sha256: Bytes32([2; 32]),
        },
    )
    .step(
        "resume with another certificate",
        Input::WorkerResume {
            conn: ConnId(5),
            fingerprint: fp('A'),
            worker_id: worker,
            certificate_sha256: Bytes32([3; 32]),
        },
    );
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > c1 drops
          event mcp_control_disconnected A peer_closed
        > c2 drops
          event worker_control_disconnected A #5
          event worker_control_lost A #5
          event worker_recovery_started A #5
          probe #5 with $6
        > resume with a guessed token
          event control_registration_refused mcp session_unknown A
          c3 <- Refused(session_unknown)
          close c3
        > resume as another identity
          event control_registration_refused worker generation_revoked B
          c4 <- Refused(generation_revoked)
          close c4
        > resume with another certificate
          event control_registration_refused worker generation_revoked A
          c5 <- Refused(generation_revoked)
          close c5
    "#]]);
}

#[test]
fn launch_status_answers_from_the_grant_ledger() {
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2).mcp(3, 'A', "a1").release(1);
    let published = s.grant(0).0;
    s.step(
        "asks about its published launch",
        Input::McpLaunchStatus {
            conn: ConnId(1),
            activation_id: published,
        },
    )
    .step(
        "asks about an unknown launch",
        Input::McpLaunchStatus {
            conn: ConnId(3),
            activation_id: Id([42; 16]),
        },
    );
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > mcp c3 registers A with a1
          event mcp_control_connected A
          event mcp_added A refs=2
          c3 <- Registered(session #7, ReuseWorker)
          c3 <- RouteReady
        > mcp c1 releases
          event mcp_removed A refs=1 Released
        > asks about its published launch
          c1 <- LaunchStatusIs(#3 published)
        > asks about an unknown launch
          c3 <- LaunchStatusIs(#3038287259199220266 unknown)
    "#]]);
}

#[test]
fn a_registration_waits_for_its_binding_to_be_durable() {
    let mut s = Scenario::new();
    s.auto_persist = false;
    s.mcp(1, 'A', "a1");
    let seq = s.last_seq;
    s.step("the state write fails", Input::Persisted { seq, ok: false })
        .request("a1", RequestKind::Model, false)
        .mcp(2, 'A', "a1");
    let seq = s.last_seq;
    s.step(
        "the state write succeeds",
        Input::Persisted { seq, ok: true },
    );
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
        > the state write fails
          event control_registration_refused mcp state_unavailable A
          c1 <- Refused(state_unavailable)
          close c1
        > Model request with a1
          = unbound
        > mcp c2 registers A with a1
          persist
          event mcp_control_connected A
        > the state write succeeds
          event mcp_added A refs=1
          event worker_staged A #5
          c2 <- Registered(session #3, LaunchWorker(grant #5 bind [127, 0, 0, 1]:0))
    "#]]);
}

/// An MCP that leaves while its first registration is being written: a failed write still
/// undoes the binding it made, so the credential is unbound again, not bound to a route no
/// session ever joined; a write that lands keeps it, as it would for a later registration.
#[test]
fn a_registration_whose_mcp_left_is_undone_when_its_write_fails() {
    let mut s = Scenario::new();
    s.auto_persist = false;
    s.mcp(1, 'A', "a1").drop_conn(1);
    let seq = s.last_seq;
    s.step("the state write fails", Input::Persisted { seq, ok: false })
        .request("a1", RequestKind::Model, false)
        .mcp(2, 'B', "b1")
        .drop_conn(2);
    let seq = s.last_seq;
    s.step(
        "the state write succeeds",
        Input::Persisted { seq, ok: true },
    )
    .request("b1", RequestKind::Model, false);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
        > c1 drops
        > the state write fails
        > Model request with a1
          = unbound
        > mcp c2 registers B with b1
          persist
          event mcp_control_connected B
        > c2 drops
        > the state write succeeds
        > Model request with b1
          = pass through (no_live_session, retry after 1000ms)
    "#]]);
}

/// Between a first registration and its state write the credential is bound but its
/// session has not joined the route: requests wait, as for the worker about to start,
/// instead of passing through unobserved; one that has waited its time passes through, and
/// so, without waiting, do the next ones until the write ends (a stuck disk).
#[test]
fn requests_during_a_first_registrations_state_write_wait_for_its_worker() {
    let mut s = Scenario::new();
    s.auto_persist = false;
    s.mcp(1, 'A', "a1")
        .request("a1", RequestKind::Model, false)
        .request("a1", RequestKind::Hook, false)
        .request("a1", RequestKind::Model, true)
        .request("a1", RequestKind::Model, false);
    let seq = s.last_seq;
    s.step(
        "the state write succeeds",
        Input::Persisted { seq, ok: true },
    )
    .request("a1", RequestKind::Model, false);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
        > Model request with a1
          = wait
        > Hook request with a1
          = wait
        > Model request with a1 (waited)
          = pass through (no_live_session, retry after 1000ms)
        > Model request with a1
          = pass through (no_live_session, retry after 1000ms)
        > the state write succeeds
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > Model request with a1
          = wait
    "#]]);
}

#[test]
fn a_credential_is_known_once_registered_even_before_its_binding_is_durable() {
    let mut s = Scenario::new();
    s.auto_persist = false;
    s.known("a1").mcp(1, 'A', "a1").known("a1");
    let seq = s.last_seq;
    s.step("the state write fails", Input::Persisted { seq, ok: false })
        .known("a1")
        .mcp(2, 'A', "a1");
    let seq = s.last_seq;
    s.step(
        "the state write succeeds",
        Input::Persisted { seq, ok: true },
    )
    .known("a1")
    .known("b1")
    .step(
        "revoke A",
        Input::Revoke {
            fingerprint: fp('A'),
            block: false,
        },
    )
    .known("a1");
    s.check(expect![[r#"
        > does the broker know a1
          = unknown
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
        > does the broker know a1
          = known A
        > the state write fails
          event control_registration_refused mcp state_unavailable A
          c1 <- Refused(state_unavailable)
          close c1
        > does the broker know a1
          = unknown
        > mcp c2 registers A with a1
          persist
          event mcp_control_connected A
        > the state write succeeds
          event mcp_added A refs=1
          event worker_staged A #5
          c2 <- Registered(session #3, LaunchWorker(grant #5 bind [127, 0, 0, 1]:0))
        > does the broker know a1
          = known A
        > does the broker know b1
          = unknown
        > revoke A
          c2 <- Refused(revoked)
          close c2
          event mcp_removed A refs=0 Revoked
          event worker_activation_cancelled A #5
          persist
        > does the broker know a1
          = unknown
    "#]]);
}

#[test]
fn requests_over_the_per_identity_limit_are_refused() {
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2)
        .request("a1", RequestKind::Model, false)
        .request("a1", RequestKind::Hook, false)
        .request("a1", RequestKind::Model, false)
        .request("a1", RequestKind::Model, false)
        .status()
        .end_all()
        .request("a1", RequestKind::Model, false);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > Model request with a1
          = worker #5 with $6
        > Hook request with a1
          = worker #5 with $6
        > Model request with a1
          = worker #5 with $6
        > Model request with a1
          = too many
        > status
          = #5 Ready control=true refs=1 in_flight=3
        > every request ends
        > Model request with a1
          = worker #5 with $6
    "#]]);
}

/// A hung worker with requests failing to reach it faster than its probes answer: the
/// failures do not restart the probe in flight, whose result still counts, so two failed
/// probes take the route to Recovering as without traffic.
#[test]
fn requests_failing_to_reach_a_hung_worker_do_not_restart_its_probe() {
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2)
        .advance(30_000)
        .request("a1", RequestKind::Model, false)
        .unreachable(ProbeOutcome::Failed)
        .request("a1", RequestKind::Model, false)
        .unreachable(ProbeOutcome::Failed)
        .probe(2, ProbeOutcome::Failed)
        .advance(250)
        .request("a1", RequestKind::Model, false)
        .unreachable(ProbeOutcome::Failed)
        .probe(2, ProbeOutcome::Failed)
        .request("a1", RequestKind::Model, false);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > clock +30000ms (t=30000ms)
          probe #5 with $6
        > Model request with a1
          = worker #5 with $6
        > the connection to the worker failed: Failed
        > Model request with a1
          = worker #5 with $6
        > the connection to the worker failed: Failed
        > probe of #5 says Failed
        > clock +250ms (t=30250ms)
          probe #5 with $6
        > Model request with a1
          = worker #5 with $6
        > the connection to the worker failed: Failed
        > probe of #5 says Failed
          event worker_readiness_failed A #5
          event worker_recovery_started A #5
        > Model request with a1
          = pass through (worker_unavailable, retry after 1000ms)
    "#]]);
}

#[test]
fn a_worker_unreachable_before_the_request_was_written_is_told_to_the_broker() {
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2)
        .request("a1", RequestKind::Model, false);
    let ticket = s.tickets.pop().expect("a ticket");
    s.broker
        .worker_unreachable(s.now, ticket, ProbeOutcome::Gone);
    s.out
        .push_str("> the connection to the worker was refused\n");
    s.drain();
    s.status();
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > Model request with a1
          = worker #5 with $6
        > the connection to the worker was refused
          forget #5
          event worker_removed A #5 Crashed
          persist
          c2 <- Refused(generation_revoked)
          close c2
          event worker_staged A #7
          c1 <- LaunchWorker(grant #7 bind [127, 0, 0, 1]:0)
        > status
          = no workers
    "#]]);
}

#[test]
fn daemon_stopping_is_sent_to_every_session() {
    let mut s = Scenario::new();
    // The sessions it then closes are not losses: no recovery, nothing persisted again, and
    // the MCP's says why it ended.
    s.ready_route(1, 'A', "a1", 2)
        .step("relayd stops", Input::DaemonStopping)
        .drop_conn(1)
        .drop_conn(2);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > relayd stops
          c1 <- DaemonStopping(restart true)
          c2 <- DaemonStopping(restart true)
          persist
        > c1 drops
          event mcp_control_disconnected A daemon_stopping
        > c2 drops
    "#]]);
}

#[test]
fn an_opening_hook_waits_for_its_session_instead_of_bypassing_the_worker() {
    let mut s = Scenario::new();
    // First session of this identity: the credential is not bound yet.
    s.request("a1", RequestKind::OpeningHook, false)
        .request("a1", RequestKind::Hook, false)
        .request("a1", RequestKind::OpeningHook, true)
        .mcp(1, 'A', "a1")
        .request("a1", RequestKind::OpeningHook, false)
        .worker(2, 'A')
        .ready(2)
        .probe(2, ProbeOutcome::Ready)
        .request("a1", RequestKind::OpeningHook, false)
        .end_all()
        .release(1)
        .step(
            "the worker says it stops",
            Input::WorkerStopping { conn: ConnId(2) },
        );
    // A later session: bound, but no live reference yet.
    s.request("a1", RequestKind::OpeningHook, false)
        .request("a1", RequestKind::Model, false)
        .request("a1", RequestKind::OpeningHook, true)
        // That wait was in vain: later prompts do not wait until an MCP registers again.
        .request("a1", RequestKind::OpeningHook, false)
        .end_all()
        .mcp(3, 'A', "a1")
        .release(3)
        .request("a1", RequestKind::OpeningHook, false);
    // The same for a credential that is not bound: a second opening hook does not wait.
    s.request("b1", RequestKind::OpeningHook, false)
        .request("b1", RequestKind::OpeningHook, true)
        .request("b1", RequestKind::OpeningHook, false);
    s.check(expect![[r#"
        > OpeningHook request with a1
          = wait
        > Hook request with a1
          = unbound
        > OpeningHook request with a1 (waited)
          = unbound
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > OpeningHook request with a1
          = wait
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > OpeningHook request with a1
          = worker #5 with $6
        > every request ends
        > mcp c1 releases
          event mcp_removed A refs=0 Released
          c2 <- Drain(120000ms)
          event worker_drain_started A #5
          persist
        > the worker says it stops
          forget #5
          event worker_removed A #5 Drained
          persist
        > OpeningHook request with a1
          = wait
        > Model request with a1
          = pass through (no_live_session, retry after 1000ms)
        > OpeningHook request with a1 (waited)
          = pass through (no_live_session, retry after 1000ms)
        > OpeningHook request with a1
          = pass through (no_live_session, retry after 1000ms)
        > every request ends
        > mcp c3 registers A with a1
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #9
          c3 <- Registered(session #7, LaunchWorker(grant #9 bind [127, 0, 0, 1]:0))
        > mcp c3 releases
          event mcp_removed A refs=0 Released
          event worker_activation_cancelled A #9
        > OpeningHook request with a1
          = wait
        > OpeningHook request with b1
          = wait
        > OpeningHook request with b1 (waited)
          = unbound
        > OpeningHook request with b1
          = unbound
    "#]]);
}

/// An opening hook decided at once because there was no room to wait did not wait in vain:
/// the next one still waits for its MCP.
#[test]
fn an_opening_hook_that_could_not_wait_does_not_count_as_waiting_in_vain() {
    let mut s = Scenario::new();
    let now = s.now;
    for token in ["c1", "a1"] {
        if token == "a1" {
            // Bound, with no live session.
            s.mcp(1, 'A', "a1").release(1);
        }
        let at_once = s.broker.begin_request(
            now,
            digest(token),
            RequestKind::OpeningHook,
            Wait::NotAllowed,
        );
        assert!(
            matches!(at_once, Decision::Unbound | Decision::PassThrough { .. }),
            "{token}: {at_once:?}"
        );
        if let Decision::PassThrough { ticket, .. } = at_once {
            s.broker.end_request(ticket);
        }
        let next =
            s.broker
                .begin_request(now, digest(token), RequestKind::OpeningHook, Wait::Allowed);
        assert_eq!(next, Decision::Wait, "{token}");
    }
}

// ----- the fault rules of issue 5, as scripts (the e2e tests run them with processes) -----

/// A worker's own control session resuming as the same generation.
fn resume_worker(s: &mut Scenario, conn: u64, old_conn: u64, route: char) {
    let worker = s.workers[&old_conn];
    s.step(
        &format!("worker c{conn} resumes the generation of c{old_conn}"),
        Input::WorkerResume {
            conn: ConnId(conn),
            fingerprint: fp(route),
            worker_id: worker,
            certificate_sha256: Bytes32([old_conn as u8; 32]),
        },
    );
    s.workers.insert(conn, worker);
}

#[test]
fn a_worker_control_cut_shorter_than_the_grace_resumes_the_same_generation() {
    let mut config = test_config();
    config.timers.reconnect_grace_ms = 5000;
    let mut s = Scenario::with(config);
    s.ready_route(1, 'A', "a1", 2)
        .drop_conn(2)
        .probe(2, ProbeOutcome::Failed)
        .request("a1", RequestKind::Model, false)
        .end_all()
        .advance(4000);
    resume_worker(&mut s, 3, 2, 'A');
    s.probe(3, ProbeOutcome::Ready)
        .advance(2000)
        .request("a1", RequestKind::Model, false)
        .status();
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > c2 drops
          event worker_control_disconnected A #5
          event worker_control_lost A #5
          event worker_recovery_started A #5
          probe #5 with $6
        > probe of #5 says Failed
        > Model request with a1
          = pass through (worker_unavailable, retry after 1000ms)
        > every request ends
        > clock +4000ms (t=4000ms)
          probe #5 with $6
        > worker c3 resumes the generation of c2
          forget #5
          c3 <- Registered(worker #5, $7)
          probe #5 with $7
        > probe of #5 says Ready
          event worker_control_reconnected A #5
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > clock +2000ms (t=6000ms)
        > Model request with a1
          = worker #5 with $7
        > status
          = #5 Ready control=true refs=1 in_flight=1
    "#]]);
}

#[test]
fn a_worker_control_cut_longer_than_the_grace_revokes_the_generation_and_relaunches_at_once() {
    let mut config = test_config();
    config.timers.reconnect_grace_ms = 5000;
    let mut s = Scenario::with(config);
    s.ready_route(1, 'A', "a1", 2)
        .drop_conn(2)
        .probe(2, ProbeOutcome::Failed)
        .advance(4999)
        .advance(1);
    resume_worker(&mut s, 3, 2, 'A');
    let first = s.grant(0).0;
    s.step(
        "its MCP sees the old worker exit",
        Input::McpWorkerExited {
            conn: ConnId(1),
            activation_id: first,
            reason: FailureReason::WorkerExitedBeforeReady,
        },
    )
    .worker(4, 'A')
    .ready(4)
    .probe(4, ProbeOutcome::Ready)
    .request("a1", RequestKind::Model, false)
    .status();
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > c2 drops
          event worker_control_disconnected A #5
          event worker_control_lost A #5
          event worker_recovery_started A #5
          probe #5 with $6
        > probe of #5 says Failed
        > clock +4999ms (t=4999ms)
          probe #5 with $6
        > clock +1ms (t=5000ms)
          event worker_recovery_failed A #5
          forget #5
          event worker_removed A #5 Revoked
          persist
          event worker_staged A #7
          c1 <- LaunchWorker(grant #7 bind [127, 0, 0, 1]:0)
        > worker c3 resumes the generation of c2
          event control_registration_refused worker generation_revoked A
          c3 <- Refused(generation_revoked)
          close c3
        > its MCP sees the old worker exit
        > worker c4 registers A with grant #7
          c4 <- Registered(worker #9, $10)
          event worker_control_connected A #9
        > worker c4 is ready
          probe #9 with $10
        > probe of #9 says Ready
          event worker_added A #9 0ms
          event worker_ready A #9
          c1 <- RouteReady
          persist
        > Model request with a1
          = worker #9 with $10
        > status
          = #9 Ready control=true refs=1 in_flight=1
    "#]]);
}

#[test]
fn a_worker_killed_mid_request_is_relaunched_once_whichever_evidence_comes_first() {
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2)
        .request("a1", RequestKind::Model, false)
        .drop_conn(2);
    let first = s.grant(0).0;
    s.step(
        "its MCP sees the worker killed",
        Input::McpWorkerExited {
            conn: ConnId(1),
            activation_id: first,
            reason: FailureReason::WorkerExitedBeforeReady,
        },
    )
    .probe(2, ProbeOutcome::Gone)
    .status()
    .end_all()
    .worker(3, 'A')
    .ready(3)
    .probe(3, ProbeOutcome::Ready)
    .status();
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > Model request with a1
          = worker #5 with $6
        > c2 drops
          event worker_control_disconnected A #5
          event worker_control_lost A #5
          event worker_recovery_started A #5
          probe #5 with $6
        > its MCP sees the worker killed
          forget #5
          event worker_removed A #5 Crashed
          persist
          event worker_staged A #7
          c1 <- LaunchWorker(grant #7 bind [127, 0, 0, 1]:0)
        > probe of #5 says Gone
        > status
          = no workers
        > every request ends
        > worker c3 registers A with grant #7
          c3 <- Registered(worker #9, $10)
          event worker_control_connected A #9
        > worker c3 is ready
          probe #9 with $10
        > probe of #9 says Ready
          event worker_added A #9 0ms
          event worker_ready A #9
          c1 <- RouteReady
          persist
        > status
          = #9 Ready control=true refs=1 in_flight=0
    "#]]);
}

#[test]
fn a_draining_worker_stuck_with_a_request_is_revoked_after_drain_plus_grace() {
    let mut config = test_config();
    config.timers.drain_ms = 2000;
    config.timers.reconnect_grace_ms = 1000;
    let mut s = Scenario::with(config);
    s.ready_route(1, 'A', "a1", 2)
        .request("a1", RequestKind::Model, false)
        .release(1)
        .mcp(3, 'A', "a1")
        .request("a1", RequestKind::Model, false)
        .status()
        .advance(2999)
        .advance(1)
        .step(
            "the stuck worker says it stops, too late",
            Input::WorkerStopping { conn: ConnId(2) },
        )
        .end_all()
        .worker(4, 'A')
        .ready(4)
        .probe(4, ProbeOutcome::Ready)
        .status();
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > Model request with a1
          = worker #5 with $6
        > mcp c1 releases
          event mcp_removed A refs=0 Released
          c2 <- Drain(2000ms)
          event worker_drain_started A #5
          persist
        > mcp c3 registers A with a1
          event mcp_control_connected A
          event mcp_added A refs=1
          c3 <- Registered(session #7, WaitForWorker(1000ms))
        > Model request with a1
          = wait
        > status
          = #5 Draining control=true refs=1 in_flight=1
        > clock +2999ms (t=2999ms)
        > clock +1ms (t=3000ms)
          forget #5
          event worker_removed A #5 DrainTimeout
          persist
          c2 <- Refused(generation_revoked)
          close c2
          event worker_staged A #9
          c3 <- LaunchWorker(grant #9 bind [127, 0, 0, 1]:0)
        > the stuck worker says it stops, too late
        > every request ends
        > worker c4 registers A with grant #9
          c4 <- Registered(worker #11, $12)
          event worker_control_connected A #11
        > worker c4 is ready
          probe #11 with $12
        > probe of #11 says Ready
          event worker_added A #11 0ms
          event worker_ready A #11
          c3 <- RouteReady
          persist
        > status
          = #11 Ready control=true refs=1 in_flight=0
    "#]]);
}

#[test]
fn with_four_live_tokens_a_fifth_is_refused_and_an_idle_one_is_evicted_first() {
    let mut s = Scenario::with(BrokerConfig {
        max_tokens_per_identity: 4,
        max_sessions_per_route: 8,
        ..test_config()
    });
    s.mcp(1, 'A', "t1")
        .release(1)
        .mcp(2, 'A', "t2")
        .mcp(3, 'A', "t3")
        .mcp(4, 'A', "t4")
        .mcp(5, 'A', "t5")
        .request("t1", RequestKind::Model, false)
        .mcp(6, 'A', "t6")
        .release(3)
        .mcp(7, 'A', "t6")
        .request("t3", RequestKind::Model, false)
        .mcp(8, 'B', "t1")
        .mcp(9, 'A', "t1");
    s.check(expect![[r#"
        > mcp c1 registers A with t1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > mcp c1 releases
          event mcp_removed A refs=0 Released
          event worker_activation_cancelled A #3
        > mcp c2 registers A with t2
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #7
          c2 <- Registered(session #5, LaunchWorker(grant #7 bind [127, 0, 0, 1]:0))
        > mcp c3 registers A with t3
          persist
          event mcp_control_connected A
          event mcp_added A refs=2
          c3 <- Registered(session #9, WaitForWorker(1000ms))
        > mcp c4 registers A with t4
          persist
          event mcp_control_connected A
          event mcp_added A refs=3
          c4 <- Registered(session #11, WaitForWorker(1000ms))
        > mcp c5 registers A with t5
          event route_credential_evicted A t1
          persist
          event mcp_control_connected A
          event mcp_added A refs=4
          c5 <- Registered(session #13, WaitForWorker(1000ms))
        > Model request with t1
          = unbound
        > mcp c6 registers A with t6
          event control_registration_refused mcp token_limit A
          c6 <- Refused(token_limit)
          close c6
        > mcp c3 releases
          event mcp_removed A refs=3 Released
        > mcp c7 registers A with t6
          event route_credential_evicted A t3
          persist
          event mcp_control_connected A
          event mcp_added A refs=4
          c7 <- Registered(session #15, WaitForWorker(1000ms))
        > Model request with t3
          = unbound
        > mcp c8 registers B with t1
          event control_registration_refused mcp credential_bound_elsewhere B
          c8 <- Refused(credential_bound_elsewhere)
          close c8
        > mcp c9 registers A with t1
          event control_registration_refused mcp token_limit A
          c9 <- Refused(token_limit)
          close c9
    "#]]);
}

#[test]
fn backoff_doubles_up_to_the_cap_and_starts_again_after_a_published_worker() {
    let mut config = test_config();
    config.timers.retry_cap_ms = 3000;
    let mut s = Scenario::with(config);
    s.mcp(1, 'A', "a1");
    for wait in [1000, 2000, 3000, 3000] {
        let grant = s.last_grant().0;
        s.step(
            "the launch fails",
            Input::McpActivationFailed {
                conn: ConnId(1),
                activation_id: grant,
                reason: FailureReason::WorkerExitedBeforeReady,
            },
        )
        .advance(wait);
    }
    s.worker(2, 'A').ready(2).probe(2, ProbeOutcome::Ready);
    let grant = s.last_grant().0;
    s.step(
        "it crashes, and is relaunched at once",
        Input::McpWorkerExited {
            conn: ConnId(1),
            activation_id: grant,
            reason: FailureReason::WorkerExitedBeforeReady,
        },
    );
    let grant = s.last_grant().0;
    s.step(
        "the relaunch fails",
        Input::McpActivationFailed {
            conn: ConnId(1),
            activation_id: grant,
            reason: FailureReason::WorkerExitedBeforeReady,
        },
    );
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > the launch fails
          event worker_activation_failed A worker_exited_before_ready retry_after=1000ms
          c1 <- UsePassThrough
        > clock +1000ms (t=1000ms)
          event worker_relaunch_requested A attempt=1
          event worker_staged A #5
          c1 <- LaunchWorker(grant #5 bind [127, 0, 0, 1]:0)
        > the launch fails
          event worker_activation_failed A worker_exited_before_ready retry_after=2000ms
          c1 <- UsePassThrough
        > clock +2000ms (t=3000ms)
          event worker_relaunch_requested A attempt=2
          event worker_staged A #7
          c1 <- LaunchWorker(grant #7 bind [127, 0, 0, 1]:0)
        > the launch fails
          event worker_activation_failed A worker_exited_before_ready retry_after=3000ms
          c1 <- UsePassThrough
        > clock +3000ms (t=6000ms)
          event worker_relaunch_requested A attempt=3
          event worker_staged A #9
          c1 <- LaunchWorker(grant #9 bind [127, 0, 0, 1]:0)
        > the launch fails
          event worker_activation_failed A worker_exited_before_ready retry_after=3000ms
          c1 <- UsePassThrough
        > clock +3000ms (t=9000ms)
          event worker_relaunch_requested A attempt=4
          event worker_staged A #11
          c1 <- LaunchWorker(grant #11 bind [127, 0, 0, 1]:0)
        > worker c2 registers A with grant #11
          c2 <- Registered(worker #13, $14)
          event worker_control_connected A #13
        > worker c2 is ready
          probe #13 with $14
        > probe of #13 says Ready
          event worker_added A #13 0ms
          event worker_ready A #13
          c1 <- RouteReady
          persist
        > it crashes, and is relaunched at once
          forget #13
          event worker_removed A #13 Crashed
          persist
          c2 <- Refused(generation_revoked)
          close c2
          event worker_staged A #15
          c1 <- LaunchWorker(grant #15 bind [127, 0, 0, 1]:0)
        > the relaunch fails
          event worker_activation_failed A worker_exited_before_ready retry_after=1000ms
          c1 <- UsePassThrough
    "#]]);
}

#[test]
fn after_a_restart_the_mcp_may_come_back_before_its_worker() {
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2);
    let snapshot = s.broker.snapshot();
    let worker = s.workers[&2];
    let mut s = Scenario::new();
    s.broker.restore(s.now, snapshot);
    s.mcp(10, 'A', "a1")
        .request("a1", RequestKind::Model, false)
        .end_all()
        .step(
            "the worker resumes",
            Input::WorkerResume {
                conn: ConnId(11),
                fingerprint: fp('A'),
                worker_id: worker,
                certificate_sha256: Bytes32([2; 32]),
            },
        );
    s.workers.insert(11, worker);
    s.probe(11, ProbeOutcome::Ready)
        .request("a1", RequestKind::Model, false)
        .status();
    s.check(expect![[r#"
        > mcp c10 registers A with a1
          probe #5 with $0
          event mcp_control_connected A
          event mcp_added A refs=1
          c10 <- Registered(session #1, WaitForWorker(1000ms))
        > Model request with a1
          = pass through (worker_unavailable, retry after 1000ms)
        > every request ends
        > the worker resumes
          forget #5
          c11 <- Registered(worker #5, $3)
          probe #5 with $3
        > probe of #5 says Ready
          event worker_control_reconnected A #5
          event worker_ready A #5
          c10 <- RouteReady
          persist
        > Model request with a1
          = worker #5 with $3
        > status
          = #5 Ready control=true refs=1 in_flight=1
    "#]]);
    // The worker does not come back within the grace: the waiting MCP launches a new one.
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2);
    let snapshot = s.broker.snapshot();
    let mut s = Scenario::new();
    s.broker.restore(s.now, snapshot);
    s.mcp(10, 'A', "a1").advance(30_000);
    s.check(expect![[r#"
        > mcp c10 registers A with a1
          probe #5 with $0
          event mcp_control_connected A
          event mcp_added A refs=1
          c10 <- Registered(session #1, WaitForWorker(1000ms))
        > clock +30000ms (t=30000ms)
          event worker_recovery_failed A #5
          forget #5
          event worker_removed A #5 Revoked
          persist
          event worker_staged A #3
          c10 <- LaunchWorker(grant #3 bind [127, 0, 0, 1]:0)
    "#]]);
    // The worker died with the daemon: the probe made at the restore finds its port refused
    // (or someone else's certificate), and the MCP launches a new one without waiting.
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2);
    let snapshot = s.broker.snapshot();
    let worker = s.workers[&2];
    let mut s = Scenario::new();
    s.broker.restore(s.now, snapshot);
    s.workers.insert(2, worker);
    s.mcp(10, 'A', "a1").probe(2, ProbeOutcome::Gone);
    s.check(expect![[r#"
        > mcp c10 registers A with a1
          probe #5 with $0
          event mcp_control_connected A
          event mcp_added A refs=1
          c10 <- Registered(session #1, WaitForWorker(1000ms))
        > probe of #5 says Gone
          forget #5
          event worker_removed A #5 Crashed
          persist
          event worker_staged A #3
          c10 <- LaunchWorker(grant #3 bind [127, 0, 0, 1]:0)
    "#]]);
    // A live worker fails that probe (it has no valid secret yet): nothing is probed again
    // until it resumes, which probes anyway.
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2);
    let snapshot = s.broker.snapshot();
    let worker = s.workers[&2];
    let mut s = Scenario::new();
    s.broker.restore(s.now, snapshot);
    s.workers.insert(2, worker);
    s.mcp(10, 'A', "a1")
        .probe(2, ProbeOutcome::Failed)
        .advance(1_000);
    s.check(expect![[r#"
        > mcp c10 registers A with a1
          probe #5 with $0
          event mcp_control_connected A
          event mcp_added A refs=1
          c10 <- Registered(session #1, WaitForWorker(1000ms))
        > probe of #5 says Failed
        > clock +1000ms (t=1000ms)
    "#]]);
}

#[test]
fn revoking_a_recovering_or_draining_route_empties_it_without_a_launch() {
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2).drop_conn(2).step(
        "relayd bindings revoke A",
        Input::Revoke {
            fingerprint: fp('A'),
            block: false,
        },
    );
    resume_worker(&mut s, 3, 2, 'A');
    s.request("a1", RequestKind::Model, false).status();
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > c2 drops
          event worker_control_disconnected A #5
          event worker_control_lost A #5
          event worker_recovery_started A #5
          probe #5 with $6
        > relayd bindings revoke A
          c1 <- Refused(revoked)
          close c1
          event mcp_removed A refs=0 Revoked
          forget #5
          event worker_removed A #5 Revoked
          persist
          persist
        > worker c3 resumes the generation of c2
          event control_registration_refused worker generation_revoked A
          c3 <- Refused(generation_revoked)
          close c3
        > Model request with a1
          = unbound
        > status
          = no workers
    "#]]);
    // A hook still on the draining worker keeps the route draining with a launch pending.
    let mut s = Scenario::new();
    s.ready_route(1, 'A', "a1", 2)
        .release(1)
        .request("a1", RequestKind::Hook, false)
        .mcp(3, 'A', "a1")
        .step(
            "relayd bindings revoke A",
            Input::Revoke {
                fingerprint: fp('A'),
                block: false,
            },
        )
        .step(
            "the drained worker stops",
            Input::WorkerStopping { conn: ConnId(2) },
        )
        .status()
        .advance(200_000);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > mcp c1 releases
          event mcp_removed A refs=0 Released
          c2 <- Drain(120000ms)
          event worker_drain_started A #5
          persist
        > Hook request with a1
          = worker #5 with $6
        > mcp c3 registers A with a1
          event mcp_control_connected A
          event mcp_added A refs=1
          c3 <- Registered(session #7, WaitForWorker(1000ms))
        > relayd bindings revoke A
          c3 <- Refused(revoked)
          close c3
          event mcp_removed A refs=0 Revoked
          c2 <- Drain(120000ms)
          forget #5
          event worker_removed A #5 Revoked
          persist
          persist
        > the drained worker stops
        > status
          = no workers
        > clock +200000ms (t=200000ms)
    "#]]);
}

#[test]
fn a_revived_tombstone_survives_a_failed_state_write() {
    let mut s = Scenario::new();
    s.mcp(1, 'A', "a1").step(
        "relayd bindings revoke A",
        Input::Revoke {
            fingerprint: fp('A'),
            block: false,
        },
    );
    s.auto_persist = false;
    s.mcp(2, 'A', "a1");
    let seq = s.last_seq;
    s.step("the state write fails", Input::Persisted { seq, ok: false });
    s.auto_persist = true;
    // The tombstone still keeps the revoked token from another identity.
    s.mcp(3, 'B', "a1");
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > relayd bindings revoke A
          c1 <- Refused(revoked)
          close c1
          event mcp_removed A refs=0 Revoked
          event worker_activation_cancelled A #3
          persist
        > mcp c2 registers A with a1
          persist
          event mcp_control_connected A
        > the state write fails
          event control_registration_refused mcp state_unavailable A
          c2 <- Refused(state_unavailable)
          close c2
        > mcp c3 registers B with a1
          event control_registration_refused mcp credential_bound_elsewhere B
          c3 <- Refused(credential_bound_elsewhere)
          close c3
    "#]]);
}

#[test]
fn a_refused_registration_changes_nothing() {
    let mut config = test_config();
    config.max_sessions_per_route = 2;
    let mut s = Scenario::with(config);
    s.mcp(1, 'A', "a1").mcp(2, 'A', "a2").release(1);
    // Two sessions are live again; a third, with a new token, is refused for the session
    // limit before the idle token a1 is evicted for it.
    s.mcp(3, 'A', "a1")
        .mcp(4, 'A', "a3")
        .request("a1", RequestKind::Model, false);
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > mcp c2 registers A with a2
          persist
          event mcp_control_connected A
          event mcp_added A refs=2
          c2 <- Registered(session #5, WaitForWorker(1000ms))
        > mcp c1 releases
          event mcp_removed A refs=1 Released
          event worker_activation_cancelled A #3
          event worker_staged A #7
          c2 <- LaunchWorker(grant #7 bind [127, 0, 0, 1]:0)
        > mcp c3 registers A with a1
          event mcp_control_connected A
          event mcp_added A refs=2
          c3 <- Registered(session #9, WaitForWorker(1000ms))
        > mcp c4 registers A with a3
          event control_registration_refused mcp session_limit A
          c4 <- Refused(session_limit)
          close c4
        > Model request with a1
          = wait
    "#]]);
}

#[test]
fn expired_tombstones_ended_grants_and_retired_generations_are_forgotten() {
    let mut config = test_config();
    config.binding_tombstone = Duration::from_secs(60);
    config.bindings_flush = Duration::from_secs(300);
    let mut s = Scenario::with(config);
    s.ready_route(1, 'A', "a1", 2)
        .step(
            "relayd bindings revoke A",
            Input::Revoke {
                fingerprint: fp('A'),
                block: false,
            },
        )
        .drop_conn(2);
    assert_eq!(s.broker.bindings().len(), 1);
    assert!(!s.broker.grants.is_empty());
    assert!(!s.broker.generations.is_empty());
    s.advance(300_000);
    assert!(s.broker.bindings().is_empty());
    assert!(s.broker.grants.is_empty());
    assert!(s.broker.generations.is_empty());
    s.check(expect![[r#"
        > mcp c1 registers A with a1
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > worker c2 registers A with grant #3
          c2 <- Registered(worker #5, $6)
          event worker_control_connected A #5
        > worker c2 is ready
          probe #5 with $6
        > probe of #5 says Ready
          event worker_added A #5 0ms
          event worker_ready A #5
          c1 <- RouteReady
          persist
        > relayd bindings revoke A
          c1 <- Refused(revoked)
          close c1
          event mcp_removed A refs=0 Revoked
          c2 <- Drain(120000ms)
          forget #5
          event worker_removed A #5 Revoked
          persist
          persist
        > c2 drops
        > clock +300000ms (t=300000ms)
          persist
    "#]]);
}

#[test]
fn tombstones_per_identity_are_capped() {
    let mut s = Scenario::new();
    // Token limit 2, so at most 8 tombstones: mint 12 tokens, each evicting the last.
    for n in 0..12 {
        s.mcp(100 + n, 'A', &format!("t{n}")).release(100 + n);
    }
    let tombstones = s.broker.bindings().iter().filter(|b| b.tombstone).count();
    assert_eq!(tombstones, 8);
    s.out.clear();
}

/// The attack: identities cost nothing to mint, so a local process registers a token under
/// one fresh identity after another and lets the full route table evict each route. Every
/// eviction leaves a tombstone for 30 days, and every state write copies them all: the table
/// must stop growing at its overall cap (3 routes × 8 per identity here), dropping the
/// oldest, while the newest keep refusing other identities.
#[test]
fn minting_identities_cannot_grow_the_tombstones_without_bound() {
    let mut s = Scenario::new();
    let minted: Vec<char> = ('a'..='z').chain('0'..='9').collect();
    for (n, id) in minted.iter().enumerate() {
        s.mcp(100 + n as u64, *id, &format!("m{n}"))
            .release(100 + n as u64);
        s.advance(1_000);
    }
    let tombstones = s.broker.bindings().iter().filter(|b| b.tombstone).count();
    assert_eq!(tombstones, 24);
    assert_eq!(s.broker.bindings.tombstones(), 24);
    assert!(
        s.out
            .contains("event credential_tombstones_dropped 1 of 24")
    );
    // The 33 evicted routes left 33 tombstones: the first 9 were dropped, the rest stand.
    // A takes a dropped one (its route evicts one more, which drops m9); B may not take m10.
    s.out.clear();
    s.mcp(1, 'A', "m8").mcp(2, 'B', "m10");
    s.check(expect![[r#"
        > mcp c1 registers A with m8
          event route_evicted 7
          event credential_tombstones_dropped 1 of 24
          persist
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #147
          c1 <- Registered(session #145, LaunchWorker(grant #147 bind [127, 0, 0, 1]:0))
        > mcp c2 registers B with m10
          event control_registration_refused mcp credential_bound_elsewhere B
          c2 <- Refused(credential_bound_elsewhere)
          close c2
    "#]]);
}

/// A state file written before there was an overall cap, or under larger limits, is
/// trimmed when the daemon starts, said in the log, and written again.
#[test]
fn a_restored_state_over_the_caps_is_trimmed_and_written_again() {
    let mut s = Scenario::new();
    let now = s.now;
    let tombstone = |n: u8| PersistedBinding {
        digest: digest(&format!("m{n}")),
        fingerprint: Fingerprint([n; 32]),
        last_use: now,
        tombstone_until: Some(now + Duration::from_secs(u64::from(n) + 60)),
    };
    s.broker.restore(
        now,
        PersistedState {
            bindings: (1..=30).map(tombstone).collect(),
            ..PersistedState::default()
        },
    );
    assert_eq!(s.broker.bindings().len(), 30);
    let _ = writeln!(s.out, "> the daemon trims what it restored");
    s.broker.trim_tombstones();
    s.drain();
    assert_eq!(s.broker.bindings().len(), 24);
    assert!(s.broker.bindings.index_holds());
    // The six that end first went.
    let kept = |name: &str| s.broker.bindings().iter().any(|b| b.digest == digest(name));
    assert!(!kept("m6") && kept("m7") && kept("m30"));
    s.check(expect![[r#"
        > the daemon trims what it restored
          event credential_tombstones_dropped 6 of 24
          persist
    "#]]);
}

/// A token whose registration is still being written is not idle either: evicted for the
/// same identity's next token, it would be a tombstone when its MCP is told it is
/// registered, and the identity's own cap could then drop it for another to bind.
#[test]
fn a_token_whose_registration_is_being_written_is_not_evicted() {
    let mut config = test_config();
    config.max_tokens_per_identity = 1;
    let mut s = Scenario::with(config);
    s.auto_persist = false;
    s.mcp(1, 'B', "t1");
    let write = s.last_seq;
    s.mcp(2, 'B', "x1");
    s.step(
        "the state write lands",
        Input::Persisted {
            seq: write,
            ok: true,
        },
    )
    .request("t1", RequestKind::Model, false);
    s.check(expect![[r#"
        > mcp c1 registers B with t1
          persist
          event mcp_control_connected B
        > mcp c2 registers B with x1
          event control_registration_refused mcp token_limit B
          c2 <- Refused(token_limit)
          close c2
        > the state write lands
          event mcp_added B refs=1
          event worker_staged B #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > Model request with t1
          = wait
    "#]]);
}

/// A remote MCP's hint puts its worker on every interface at the hinted port; the same hint
/// from a session on the daemon's loopback is ignored, because a worker of a loopback
/// session is accepted on 127.0.0.1 only: honoured, it had every worker refused and
/// relaunched for the whole session, each listening on every interface of the machine.
#[test]
fn a_worker_hint_counts_only_for_a_remote_session() {
    let mut s = Scenario::new();
    s.mcp_hinting(
        1,
        'A',
        "a1",
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        "10.77.1.2",
        9443,
    )
    .mcp_hinting(
        2,
        'B',
        "b1",
        IpAddr::V4(Ipv4Addr::new(10, 77, 1, 2)),
        "10.77.1.2",
        9443,
    );
    s.check(expect![[r#"
        > mcp c1 registers A with a1 from 127.0.0.1, hinting 10.77.1.2:9443
          persist
          event mcp_control_connected A
          event mcp_added A refs=1
          event worker_staged A #3
          c1 <- Registered(session #1, LaunchWorker(grant #3 bind [127, 0, 0, 1]:0))
        > mcp c2 registers B with b1 from 10.77.1.2, hinting 10.77.1.2:9443
          persist
          event mcp_control_connected B
          event mcp_added B refs=1
          event worker_staged B #7
          c2 <- Registered(session #5, LaunchWorker(grant #7 bind [0, 0, 0, 0]:9443))
    "#]]);
}
