//! Frames over a WebSocket: one binary message per control message, at most 256 KiB.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use relay_proto::{Frame, FrameError, MAX_FRAME_BYTES, Message};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message as WsMessage};

/// WebSocket limits of §5.1: messages and frames of at most 256 KiB, a small write buffer.
pub fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(MAX_FRAME_BYTES))
        .max_frame_size(Some(MAX_FRAME_BYTES))
        .write_buffer_size(0)
        .max_write_buffer_size(MAX_FRAME_BYTES * 2)
}

/// Why a control transport stopped.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("the peer closed the session")]
    Closed,
    #[error("the session failed")]
    WebSocket(#[from] tungstenite::Error),
    #[error("the peer sent a text frame")]
    TextFrame,
    #[error("undecodable frame")]
    Frame(#[from] FrameError),
    #[error("no message in time")]
    Timeout,
}

/// A control session's WebSocket, speaking `relay-proto` frames.
#[derive(Debug)]
pub struct Transport<S> {
    ws: WebSocketStream<S>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Transport<S> {
    pub fn new(ws: WebSocketStream<S>) -> Transport<S> {
        Transport { ws }
    }

    pub async fn send(&mut self, message: &Message) -> Result<(), TransportError> {
        let bytes = relay_proto::encode(message)?;
        self.ws.send(WsMessage::Binary(bytes.into())).await?;
        Ok(())
    }

    /// The next control frame. WebSocket pings are answered by the library; pongs and
    /// pings are reported as `Ok(None)` so callers can count them as liveness.
    pub async fn recv(&mut self) -> Result<Option<Frame>, TransportError> {
        match self.ws.next().await {
            None => Err(TransportError::Closed),
            Some(Err(e)) => Err(TransportError::WebSocket(e)),
            Some(Ok(WsMessage::Binary(bytes))) => Ok(Some(relay_proto::decode(&bytes)?)),
            Some(Ok(WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Frame(_))) => Ok(None),
            Some(Ok(WsMessage::Close(_))) => Err(TransportError::Closed),
            Some(Ok(WsMessage::Text(_))) => Err(TransportError::TextFrame),
        }
    }

    /// Like [`Transport::recv`], but with no frame at all (pings included) for `silence`
    /// the session counts as dropped (§5.1, non-loopback clients).
    pub async fn recv_alive(
        &mut self,
        silence: Option<Duration>,
    ) -> Result<Option<Frame>, TransportError> {
        match silence {
            None => self.recv().await,
            Some(limit) => tokio::time::timeout(limit, self.recv())
                .await
                .unwrap_or(Err(TransportError::Timeout)),
        }
    }

    /// The next control frame within `limit`, skipping liveness frames.
    pub async fn recv_within(&mut self, limit: Duration) -> Result<Frame, TransportError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, self.recv()).await {
                Err(_) => return Err(TransportError::Timeout),
                Ok(Ok(Some(frame))) => return Ok(frame),
                Ok(Ok(None)) => continue,
                Ok(Err(e)) => return Err(e),
            }
        }
    }

    pub async fn ping(&mut self) -> Result<(), TransportError> {
        self.ws.send(WsMessage::Ping(Default::default())).await?;
        Ok(())
    }

    /// Ends the session as a client that is done with it: a normal close, so the daemon
    /// reads a closed session rather than a broken one.
    pub async fn finish(&mut self, reason: &'static str) {
        self.close(CloseCode::Normal, reason).await;
    }

    /// Closes with a code and a short reason; errors are irrelevant at this point.
    pub async fn close(&mut self, code: CloseCode, reason: &'static str) {
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        let _ = self.ws.close(Some(frame)).await;
    }
}
