//! The bench's one HTTP client need: a plain `GET` on its own connection, for relayd's status endpoints and metrics.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

/// True when `GET /healthz` on `addr` is answered by relayd (and not some other process that took the port).
pub(super) fn is_relayd_healthy(addr: SocketAddr) -> bool {
    http_get(addr, "/healthz", None)
        .is_ok_and(|(status, body)| status == 200 && body.contains("\"service\":\"relayd\""))
}

/// One `GET` on its own connection (`Connection: close`), with the route credential when given; returns the status and the body.
pub(super) fn http_get(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let credential = token
        .map(|token| format!("x-relay-client-token: {token}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{credential}Connection: close\r\n\r\n"
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    parse_response(&answer).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not an HTTP/1.1 answer to GET {path}"),
        )
    })
}

/// The status and body of a whole HTTP/1.1 response read until the connection closed; a chunked body is joined.
pub(super) fn parse_response(answer: &str) -> Option<(u16, String)> {
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()?
        .strip_prefix("HTTP/1.1 ")?
        .get(..3)?
        .parse()
        .ok()?;
    let chunked = lines.any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.eq_ignore_ascii_case("transfer-encoding")
                && value.trim().eq_ignore_ascii_case("chunked")
        })
    });
    if !chunked {
        return Some((status, body.to_owned()));
    }
    let mut joined = String::new();
    let mut rest = body;
    loop {
        let (size, after) = rest.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some((status, joined));
        }
        joined.push_str(after.get(..size)?);
        rest = after.get(size..)?.strip_prefix("\r\n")?;
    }
}
