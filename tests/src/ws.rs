//! Reading control sessions back from the bytes a [`crate::Tap`] forwarded: the HTTP
//! upgrade, then WebSocket frames (RFC 6455 §5.2) carrying `relay-proto` messages. A test
//! uses it to learn the secrets the daemon handed out (grants, generation secrets, resume
//! tokens) without any hook into the binaries, and then looks for them in the logs.

use relay_proto::Message;

use crate::tap::Exchange;

/// The messages of one control session, in order, per direction.
#[derive(Debug, Clone, Default)]
pub struct ControlCapture {
    /// The upgrade request's path (`/_relay/control/v1/mcp` or `…/worker`).
    pub path: String,
    pub from_client: Vec<Message>,
    pub from_daemon: Vec<Message>,
}

/// The control sessions among `exchanges` (connections whose request is an upgrade on a
/// `/_relay/control/` path).
pub fn control_sessions(exchanges: &[Exchange]) -> Vec<ControlCapture> {
    exchanges.iter().filter_map(control_session).collect()
}

fn control_session(exchange: &Exchange) -> Option<ControlCapture> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    let httparse::Status::Complete(request_len) = request.parse(&exchange.sent).ok()? else {
        return None;
    };
    let path = request.path?.to_owned();
    if !path.starts_with("/_relay/control/") {
        return None;
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    let response_len = match response.parse(&exchange.received) {
        Ok(httparse::Status::Complete(len)) if response.code == Some(101) => len,
        _ => {
            return Some(ControlCapture {
                path,
                ..ControlCapture::default()
            });
        }
    };
    Some(ControlCapture {
        path,
        from_client: messages(&exchange.sent[request_len..]),
        from_daemon: messages(&exchange.received[response_len..]),
    })
}

/// The `relay-proto` messages in a run of WebSocket frames; parsing stops at the first
/// incomplete or undecodable frame.
pub fn messages(bytes: &[u8]) -> Vec<Message> {
    frames(bytes)
        .into_iter()
        .filter(|(opcode, _)| *opcode == OPCODE_BINARY)
        .filter_map(|(_, payload)| relay_proto::decode(&payload).ok())
        .map(|frame| frame.message)
        .collect()
}

const OPCODE_CONTINUATION: u8 = 0x0;
const OPCODE_BINARY: u8 = 0x2;

/// Whole messages as `(opcode, payload)`: fragments joined, client masks removed.
pub(crate) fn frames(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    let mut partial: Option<(u8, Vec<u8>)> = None;
    while let Some((fin, opcode, payload, used)) = frame(bytes) {
        bytes = &bytes[used..];
        match (opcode, partial.take()) {
            (OPCODE_CONTINUATION, Some((first, mut joined))) => {
                joined.extend_from_slice(&payload);
                if fin {
                    out.push((first, joined));
                } else {
                    partial = Some((first, joined));
                }
            }
            (OPCODE_CONTINUATION, None) => return out,
            (opcode, _) if fin => out.push((opcode, payload)),
            (opcode, _) => partial = Some((opcode, payload)),
        }
    }
    out
}

/// One frame: FIN, opcode, unmasked payload, bytes used.
fn frame(bytes: &[u8]) -> Option<(bool, u8, Vec<u8>, usize)> {
    let first = *bytes.first()?;
    let second = *bytes.get(1)?;
    let fin = first & 0x80 != 0;
    let opcode = first & 0x0F;
    let masked = second & 0x80 != 0;
    let (len, mut at) = match second & 0x7F {
        126 => (
            u64::from(u16::from_be_bytes(bytes.get(2..4)?.try_into().ok()?)),
            4,
        ),
        127 => (u64::from_be_bytes(bytes.get(2..10)?.try_into().ok()?), 10),
        short => (u64::from(short), 2),
    };
    let mask: Option<[u8; 4]> = if masked {
        let mask = bytes.get(at..at + 4)?.try_into().ok()?;
        at += 4;
        Some(mask)
    } else {
        None
    };
    let len = usize::try_from(len).ok()?;
    let mut payload = bytes.get(at..at.checked_add(len)?)?.to_vec();
    if let Some(mask) = mask {
        for (i, byte) in payload.iter_mut().enumerate() {
            *byte ^= mask[i % 4];
        }
    }
    Some((fin, opcode, payload, at + len))
}

/// Every secret a control message carries, labelled: route credentials, resume tokens,
/// activation tokens and generation secrets.
pub fn secrets(message: &Message) -> Vec<(&'static str, [u8; 32])> {
    match message {
        Message::RegisterMcp(register) => vec![("route credential", register.fields.credential.0)],
        Message::ResumeMcp(resume) => vec![("resume token", resume.fields.resume_token.0)],
        Message::RegisterWorker(register) => {
            vec![("activation token", register.fields.activation_token.0)]
        }
        Message::LaunchWorker(grant) => vec![("activation token", grant.activation_token.0)],
        Message::Registered(relay_proto::Registered::Mcp {
            resume_token,
            directive,
            ..
        }) => {
            let mut found = vec![("resume token", resume_token.0)];
            if let relay_proto::Directive::LaunchWorker(grant) = directive {
                found.push(("activation token", grant.activation_token.0));
            }
            found
        }
        Message::Registered(relay_proto::Registered::Worker {
            generation_secret, ..
        }) => vec![("generation secret", generation_secret.0)],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests;
