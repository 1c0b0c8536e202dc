//! A test-only control client: the real client code of `relay-proxy` with a machine key of
//! the test's own, so a test can hold what only `relay-mcp` and `relay-worker` normally
//! see (a launch grant, a generation secret) and replay or misuse it; and [`RawHandshake`],
//! which builds the handshake frames by hand so a test can sign over the wrong transcript.
//!
//! It is how an attacker with the daemon's address but without the victim's key would
//! talk to the daemon; nothing here is a back door into relayd.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use relay_identity::{DaemonAddress, HandshakeFields, PinStore, PublicKey, SigningKey, Transcript};
use relay_proto::{
    Bytes32, Challenge, Hello, Id, Message, RegisterMcpFields, RegisterWorkerFields, Registered,
    Role, SUPPORTED_PROTOCOLS, Text,
};
use relay_proxy::control::client::{ClientIdentity, ConnectError, Registration, Session, connect};
use relay_proxy::control::{MCP_PATH, Transport, WORKER_PATH, ws_config};
use tokio::net::TcpStream;

use crate::error::Error;

/// How long one registration may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A control client with its own machine identity.
#[derive(Debug, Clone)]
pub struct ControlClient {
    identity: ClientIdentity,
}

impl ControlClient {
    /// A client with a fresh machine key that pins the daemon in `pins_dir`.
    pub fn new(daemon_address: &str, pins_dir: &Path) -> Result<ControlClient, Error> {
        ControlClient::with_key(daemon_address, pins_dir, Arc::new(SigningKey::generate()?))
    }

    /// A client with the machine key `key` (another client's, to present its identity).
    pub fn with_key(
        daemon_address: &str,
        pins_dir: &Path,
        key: Arc<SigningKey>,
    ) -> Result<ControlClient, Error> {
        let daemon =
            DaemonAddress::parse(daemon_address).map_err(|error| Error::DaemonAddress {
                address: daemon_address.to_owned(),
                reason: error.to_string(),
            })?;
        Ok(ControlClient {
            identity: ClientIdentity {
                daemon,
                key,
                pins: Arc::new(PinStore::new(pins_dir, None)),
                tls: None,
                instance_id: Id::from(uuid::Uuid::now_v7()),
            },
        })
    }

    pub fn key(&self) -> &Arc<SigningKey> {
        &self.identity.key
    }

    /// The 12-character fingerprint prefix the daemon's log events carry.
    pub fn fingerprint_prefix(&self) -> String {
        self.identity.key.fingerprint().short()
    }

    /// Registers as an MCP with the route credential `token`.
    pub async fn register_mcp(
        &self,
        token: &relay_identity::RouteToken,
    ) -> Result<(Session, Registered), ConnectError> {
        let fields = RegisterMcpFields {
            credential: Bytes32(*token.expose_bytes()),
            worker_hint: None,
        };
        connect(&self.identity, Registration::Mcp(fields), CONNECT_TIMEOUT).await
    }

    /// Registers as a worker with `fields` (a grant, an endpoint, a certificate digest).
    pub async fn register_worker(
        &self,
        fields: RegisterWorkerFields,
    ) -> Result<(Session, Registered), ConnectError> {
        connect(
            &self.identity,
            Registration::Worker(fields),
            CONNECT_TIMEOUT,
        )
        .await
    }
}

/// The worker registration fields for `grant`.
pub fn worker_fields(
    grant: &relay_proto::Grant,
    endpoint: SocketAddr,
    certificate_sha256: [u8; 32],
) -> RegisterWorkerFields {
    RegisterWorkerFields {
        activation_id: grant.activation_id,
        activation_token: grant.activation_token,
        endpoint: Text::truncated(&endpoint.to_string()),
        certificate_sha256: Bytes32(certificate_sha256),
    }
}

/// A control handshake driven frame by frame.
#[derive(Debug)]
pub struct RawHandshake {
    transport: Transport<TcpStream>,
    role: Role,
    key: Arc<SigningKey>,
    client_nonce: [u8; 32],
}

impl RawHandshake {
    /// Opens a control session for `role` on the daemon at `addr` and sends `Hello` naming
    /// `target_origin`; returns the daemon's first answer (`Challenge` or `Refused`).
    pub async fn start(
        addr: SocketAddr,
        role: Role,
        key: Arc<SigningKey>,
        target_origin: &str,
    ) -> Result<(RawHandshake, Message), Error> {
        let path = match role {
            Role::Mcp => MCP_PATH,
            Role::Worker => WORKER_PATH,
        };
        RawHandshake::start_on(addr, path, role, key, target_origin).await
    }

    /// Like [`RawHandshake::start`], but on `path` whatever the role says.
    pub async fn start_on(
        addr: SocketAddr,
        path: &str,
        role: Role,
        key: Arc<SigningKey>,
        target_origin: &str,
    ) -> Result<(RawHandshake, Message), Error> {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|source| Error::Connect { addr, source })?;
        let url = format!("ws://{addr}{path}");
        let (ws, _) = tokio_tungstenite::client_async_with_config(url, tcp, Some(ws_config()))
            .await
            .map_err(|source| Error::ControlDial { addr, source })?;
        let mut transport = Transport::new(ws);
        let nonce = relay_identity::Secret32::generate().map_err(|_| Error::Random)?;
        let client_nonce = *nonce.as_bytes();
        let hello = Hello {
            role,
            protocols: SUPPORTED_PROTOCOLS,
            binary_version: Text::truncated("relay-e2e"),
            instance_id: Id::from(uuid::Uuid::now_v7()),
            machine_key: relay_proto::PublicKey(*key.public_key().as_bytes()),
            client_nonce: Bytes32(client_nonce),
            target_origin: Text::truncated(target_origin),
        };
        transport.send(&Message::Hello(hello)).await?;
        let mut handshake = RawHandshake {
            transport,
            role,
            key,
            client_nonce,
        };
        let answer = handshake.recv().await?;
        Ok((handshake, answer))
    }

    /// The transcript of this handshake for `challenge` as the client would compute it,
    /// but with `target_origin` and `daemon_key` as given.
    pub fn transcript(
        &self,
        challenge: &Challenge,
        target_origin: &str,
        daemon_key: PublicKey,
    ) -> Transcript {
        Transcript::new(&HandshakeFields {
            target_origin,
            role: self.role.transcript_byte(),
            selected_protocol: challenge.selected_protocol,
            challenge_id: challenge.challenge_id.0,
            client_nonce: self.client_nonce,
            daemon_nonce: challenge.daemon_nonce.0,
            client_key: self.key.public_key(),
            daemon_key,
        })
    }

    pub fn key(&self) -> &Arc<SigningKey> {
        &self.key
    }

    /// A `RegisterMcp` for `token`, signed with this handshake's key over `transcript`.
    pub fn register_mcp(
        &self,
        transcript: &Transcript,
        token: &relay_identity::RouteToken,
    ) -> Message {
        let fields = RegisterMcpFields {
            credential: Bytes32(*token.expose_bytes()),
            worker_hint: None,
        };
        let signed = relay_proxy::control::client::encode_fields(&fields);
        Message::RegisterMcp(relay_proto::RegisterMcp {
            signature: relay_proto::Signature(transcript.sign_registration(&self.key, &signed)),
            fields,
        })
    }

    pub async fn send(&mut self, message: &Message) -> Result<(), Error> {
        Ok(self.transport.send(message).await?)
    }

    /// The next control message from the daemon.
    pub async fn recv(&mut self) -> Result<Message, Error> {
        Ok(self.transport.recv_within(CONNECT_TIMEOUT).await?.message)
    }
}
