use relay_proto::{Bytes32, Id, Message, Registered, Timers};

use super::*;

/// A binary frame as a server sends it (unmasked) or a client does (masked).
fn frame(payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = vec![0x82];
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        len @ 0..=125 => out.push(mask_bit | len as u8),
        len @ 126..=65535 => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        len => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    match mask {
        None => out.extend_from_slice(payload),
        Some(mask) => {
            out.extend_from_slice(&mask);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        }
    }
    out
}

#[test]
fn masked_and_long_frames_decode_to_messages() {
    let registered = Message::Registered(Registered::Worker {
        worker_id: Id([7; 16]),
        generation_secret: Bytes32([9; 32]),
        drain_deadline_ms: None,
        timers: Timers::default(),
    });
    let encoded = relay_proto::encode(&registered).unwrap();
    let mut wire = frame(&encoded, None);
    wire.extend(frame(
        &relay_proto::encode(&Message::Ready).unwrap(),
        Some([1, 2, 3, 4]),
    ));
    wire.extend(frame(&[0u8; 300], None));
    wire.extend_from_slice(&[0x82, 0x05, 1]);
    let decoded = messages(&wire);
    assert_eq!(decoded, vec![registered.clone(), Message::Ready]);
    assert_eq!(
        frames(&wire).len(),
        3,
        "the cut frame at the end is dropped"
    );
    assert_eq!(secrets(&registered), vec![("generation secret", [9; 32])]);
}

#[test]
fn an_upgrade_exchange_is_a_control_session() {
    let mut sent =
        b"GET /_relay/control/v1/worker HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n".to_vec();
    sent.extend(frame(
        &relay_proto::encode(&Message::Stopping).unwrap(),
        Some([9, 9, 9, 9]),
    ));
    let mut received = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n".to_vec();
    received.extend(frame(&relay_proto::encode(&Message::Ready).unwrap(), None));
    let other = Exchange {
        sent: b"GET /healthz HTTP/1.1\r\n\r\n".to_vec(),
        received: Vec::new(),
    };
    let sessions = control_sessions(&[Exchange { sent, received }, other]);
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].path, "/_relay/control/v1/worker");
    assert_eq!(sessions[0].from_client, vec![Message::Stopping]);
    assert_eq!(sessions[0].from_daemon, vec![Message::Ready]);
}
