//! The bench's one HTTP client need: a `GET` on its own connection, for relayd's status endpoints and metrics, plain or over TLS.

use std::{
    io::{self, Read, Write},
    net::{SocketAddr, TcpStream},
    path::Path,
    time::Duration,
};

use rustls::pki_types::ServerName;

/// True when `GET /healthz` on `addr` is answered by relayd (and not some other process that took the port).
pub(super) fn is_relayd_healthy(addr: SocketAddr) -> bool {
    is_relayd(http_get(addr, "/healthz", None))
}

/// The same for a relayd serving HTTPS with a certificate that `trusted` holds.
pub(super) fn is_relayd_healthy_over_tls(addr: SocketAddr, trusted: &Path) -> bool {
    is_relayd(https_get(addr, "/healthz", trusted))
}

fn is_relayd(answer: io::Result<(u16, String)>) -> bool {
    answer.is_ok_and(|(status, body)| status == 200 && body.contains("\"service\":\"relayd\""))
}

/// One `GET` on its own connection (`Connection: close`), with the route credential when given; returns the status and the body.
pub(super) fn http_get(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> io::Result<(u16, String)> {
    get_on(connect(addr)?, addr, path, token)
}

/// One `GET` over TLS, the server checked against the certificates in `trusted` under its IP address.
fn https_get(addr: SocketAddr, path: &str, trusted: &Path) -> io::Result<(u16, String)> {
    let config = relay_testkit::tls::client_config(trusted).map_err(io::Error::other)?;
    let tls = rustls::ClientConnection::new(config, ServerName::IpAddress(addr.ip().into()))
        .map_err(io::Error::other)?;
    get_on(
        rustls::StreamOwned::new(tls, connect(addr)?),
        addr,
        path,
        None,
    )
}

fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    Ok(stream)
}

fn get_on(
    mut stream: impl Read + Write,
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> io::Result<(u16, String)> {
    let credential = token
        .map(|token| format!("x-relay-client-token: {token}\r\n"))
        .unwrap_or_default();
    // One write: one segment, or one TLS record, for the whole request.
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{credential}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    stream.flush()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    parse_response(&answer).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
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
