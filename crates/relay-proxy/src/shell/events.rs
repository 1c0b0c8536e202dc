//! The hop from a broker event to its log line (SPEC §10.3): the broker decides the event
//! and its reasons (the shared vocabulary of `relay-proto`); this module only moves the
//! fields into a [`Lifecycle`] value, writing ids as UUIDs, fingerprints and digests as hex
//! and durations as milliseconds, and adds what the shell knows and the broker does not:
//! the peer address of a connection and the configured timers and limits.

use std::net::IpAddr;
use std::time::Duration;

use relay_broker::Event;
use relay_logging::Lifecycle as L;
use relay_proto::Id;

use super::Shell;

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn uuid(id: &Id) -> uuid::Uuid {
    id.as_uuid()
}

impl Shell {
    /// Writes one broker event to the log (and counts a refusal in `/metrics`).
    pub(super) fn log(&self, event: &Event) {
        match event {
            Event::RegistrationRefused {
                conn,
                role,
                reason,
                fingerprint,
            } => {
                self.metrics.record_refusal(reason.as_str());
                let fingerprint = fingerprint.map(|f| f.to_hex());
                L::ControlRegistrationRefused {
                    role: *role,
                    reason: *reason,
                    peer: self.peer_of(*conn).unwrap_or(IpAddr::from([0, 0, 0, 0])),
                    fingerprint: fingerprint.as_deref(),
                }
                .emit();
            }
            Event::MachineIdentityConflict {
                fingerprint,
                peer,
                other_peer,
            } => L::MachineIdentityConflict {
                fingerprint: &fingerprint.to_hex(),
                peer: *peer,
                other_peer: *other_peer,
            }
            .emit(),
            Event::CredentialEvicted {
                fingerprint,
                digest,
            } => L::RouteCredentialEvicted {
                fingerprint: &fingerprint.to_hex(),
                credential_digest: &digest.to_hex(),
                max_tokens_per_identity: u32::try_from(self.max_tokens_per_identity)
                    .unwrap_or(u32::MAX),
            }
            .emit(),
            Event::RouteEvicted { fingerprint } => L::RouteEvicted {
                fingerprint: &fingerprint.to_hex(),
                max_routes: self.max_routes as u64,
            }
            .emit(),
            Event::TombstonesDropped { dropped, limit } => L::CredentialTombstonesDropped {
                dropped: *dropped as u64,
                max_tombstones: *limit as u64,
            }
            .emit(),
            Event::McpAdded {
                fingerprint,
                instance,
                references,
            } => L::McpAdded {
                fingerprint: &fingerprint.to_hex(),
                instance_id: uuid(instance),
                references: *references,
            }
            .emit(),
            Event::McpRemoved {
                fingerprint,
                instance,
                references,
                reason,
            } => L::McpRemoved {
                fingerprint: &fingerprint.to_hex(),
                instance_id: uuid(instance),
                references: *references,
                reason: *reason,
            }
            .emit(),
            Event::McpConnected {
                fingerprint,
                instance,
                peer,
            } => L::McpControlConnected {
                fingerprint: &fingerprint.to_hex(),
                instance_id: uuid(instance),
                peer: *peer,
            }
            .emit(),
            Event::McpReconnected {
                fingerprint,
                instance,
                disconnected,
            } => L::McpControlReconnected {
                fingerprint: &fingerprint.to_hex(),
                instance_id: uuid(instance),
                disconnected_ms: ms(*disconnected),
            }
            .emit(),
            Event::McpDisconnected {
                fingerprint,
                instance,
                reason,
            } => L::McpControlDisconnected {
                fingerprint: &fingerprint.to_hex(),
                instance_id: uuid(instance),
                reason: *reason,
            }
            .emit(),
            Event::WorkerStaged {
                fingerprint,
                activation_id,
                owner_instance,
                attempt,
            } => L::WorkerStaged {
                fingerprint: &fingerprint.to_hex(),
                activation_id: uuid(activation_id),
                owner_instance_id: uuid(owner_instance),
                attempt: *attempt,
            }
            .emit(),
            Event::WorkerStartupPending {
                fingerprint,
                activation_id,
                elapsed,
            } => L::WorkerStartupPending {
                fingerprint: &fingerprint.to_hex(),
                activation_id: activation_id.as_ref().map(uuid),
                elapsed_ms: ms(*elapsed),
            }
            .emit(),
            Event::WorkerAdded {
                fingerprint,
                worker_id,
                activation_id,
                startup_elapsed,
            } => L::WorkerAdded {
                fingerprint: &fingerprint.to_hex(),
                worker_id: uuid(worker_id),
                activation_id: activation_id.as_ref().map(uuid),
                startup_elapsed_ms: ms(*startup_elapsed),
            }
            .emit(),
            Event::WorkerReady {
                fingerprint,
                worker_id,
            } => L::WorkerReady {
                fingerprint: &fingerprint.to_hex(),
                worker_id: uuid(worker_id),
            }
            .emit(),
            Event::WorkerRelaunchRequested {
                fingerprint,
                attempt,
            } => L::WorkerRelaunchRequested {
                fingerprint: &fingerprint.to_hex(),
                attempt: *attempt,
            }
            .emit(),
            Event::WorkerActivationFailed {
                fingerprint,
                activation_id,
                reason,
                retry_after,
                attempt,
            } => L::WorkerActivationFailed {
                fingerprint: &fingerprint.to_hex(),
                activation_id: activation_id.as_ref().map(uuid),
                failure_reason: *reason,
                retry_after_ms: ms(*retry_after),
                attempt: *attempt,
            }
            .emit(),
            Event::WorkerActivationCancelled {
                fingerprint,
                activation_id,
                reason,
            } => L::WorkerActivationCancelled {
                fingerprint: &fingerprint.to_hex(),
                activation_id: uuid(activation_id),
                reason: *reason,
            }
            .emit(),
            Event::WorkerControlConnected {
                conn,
                fingerprint,
                worker_id,
            } => L::WorkerControlConnected {
                fingerprint: &fingerprint.to_hex(),
                worker_id: uuid(worker_id),
                peer: self.peer_of(*conn).unwrap_or(IpAddr::from([127, 0, 0, 1])),
            }
            .emit(),
            Event::WorkerControlReconnected {
                fingerprint,
                worker_id,
                disconnected,
            } => L::WorkerControlReconnected {
                fingerprint: &fingerprint.to_hex(),
                worker_id: uuid(worker_id),
                disconnected_ms: ms(*disconnected),
            }
            .emit(),
            Event::WorkerControlDisconnected {
                fingerprint,
                worker_id,
                reason,
            } => L::WorkerControlDisconnected {
                fingerprint: &fingerprint.to_hex(),
                worker_id: uuid(worker_id),
                reason: *reason,
            }
            .emit(),
            Event::WorkerControlLost {
                fingerprint,
                worker_id,
            } => L::WorkerControlLost {
                fingerprint: &fingerprint.to_hex(),
                worker_id: uuid(worker_id),
                reconnect_grace_ms: ms(self.grace),
            }
            .emit(),
            Event::WorkerReadinessFailed {
                fingerprint,
                worker_id,
                consecutive_failures,
            } => L::WorkerReadinessFailed {
                fingerprint: &fingerprint.to_hex(),
                worker_id: uuid(worker_id),
                consecutive_failures: *consecutive_failures,
            }
            .emit(),
            Event::WorkerRecoveryStarted {
                fingerprint,
                worker_id,
            } => L::WorkerRecoveryStarted {
                fingerprint: &fingerprint.to_hex(),
                worker_id: uuid(worker_id),
                reconnect_grace_ms: ms(self.grace),
            }
            .emit(),
            Event::WorkerRecoveryFailed {
                fingerprint,
                worker_id,
            } => L::WorkerRecoveryFailed {
                fingerprint: &fingerprint.to_hex(),
                worker_id: uuid(worker_id),
                elapsed_ms: ms(self.grace),
            }
            .emit(),
            Event::WorkerDrainStarted {
                fingerprint,
                worker_id,
                in_flight,
            } => L::WorkerDrainStarted {
                fingerprint: &fingerprint.to_hex(),
                worker_id: uuid(worker_id),
                drain_ms: ms(self.drain),
                in_flight: u64::from(*in_flight),
            }
            .emit(),
            Event::WorkerRemoved {
                fingerprint,
                worker_id,
                reason,
            } => L::WorkerRemoved {
                fingerprint: &fingerprint.to_hex(),
                worker_id: uuid(worker_id),
                reason: *reason,
            }
            .emit(),
        }
    }
}
