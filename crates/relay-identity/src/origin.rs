//! Normalized origins (§4.3) and daemon addresses (§2.6), parsed by hand: the grammar Relay
//! accepts is small (scheme, host, port, an optional `/`), and a strict parser that refuses
//! everything else is easier to audit than a general URL parser.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::str::FromStr;

/// Why a string is not an acceptable origin or daemon address.
///
/// Messages never repeat the whole input, which could carry a password in its user info.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// No `scheme://`.
    #[error("not an absolute url: expected http://host:port or https://host:port")]
    NotAbsolute,
    /// A scheme other than http and https.
    #[error("scheme {scheme:?} is not supported: use http or https")]
    UnsupportedScheme {
        /// The scheme given.
        scheme: String,
    },
    /// `user@` or `user:password@` before the host.
    #[error("user info is not allowed in the address")]
    UserInfo,
    /// A path other than `/`.
    #[error("path {path:?} is not allowed: give only scheme, host and port")]
    Path {
        /// The path given.
        path: String,
    },
    /// A `?query`.
    #[error("a query is not allowed in the address")]
    Query,
    /// A `#fragment`.
    #[error("a fragment is not allowed in the address")]
    Fragment,
    /// Nothing between `://` and the port.
    #[error("the address has no host")]
    EmptyHost,
    /// A host that is neither a DNS name nor an IP address literal.
    #[error("invalid host {host:?}")]
    InvalidHost {
        /// The host given.
        host: String,
    },
    /// A port that is not a number from 1 to 65535.
    #[error("invalid port {port:?}: expected a number from 1 to 65535")]
    InvalidPort {
        /// The port given.
        port: String,
    },
    /// No explicit port.
    #[error("the address of {host} has no explicit port")]
    MissingPort {
        /// The host.
        host: String,
    },
    /// `0.0.0.0`.
    #[error("{host} is a bind address, not a daemon target")]
    BindAddress {
        /// The host.
        host: String,
    },
    /// An IPv6 literal.
    #[error("ipv6 address [{host}] is not supported: relayd binds ipv4 only")]
    Ipv6 {
        /// The address, without brackets.
        host: String,
    },
    /// Plain http to a host other than `127.0.0.1` and `localhost`.
    #[error("plain http is allowed only for 127.0.0.1 and localhost, not {host}: use https")]
    PlainHttpNotLoopback {
        /// The host.
        host: String,
    },
}

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Plain HTTP (loopback only for daemon addresses).
    Http,
    /// HTTP over TLS.
    Https,
}

impl Scheme {
    /// `http` or `https`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    /// 80 or 443.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    /// Whether this is https.
    pub fn is_tls(self) -> bool {
        self == Scheme::Https
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum HostKind {
    Domain,
    Ipv4(Ipv4Addr),
    Ipv6(Ipv6Addr),
}

/// A normalized origin: lowercase scheme and host, explicit port, no trailing slash (§4.3).
///
/// `Display` is the canonical text (`https://relay.example.com:443`), which pins are keyed by
/// and which the handshake transcript carries.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    scheme: Scheme,
    /// Lowercase DNS name or IP literal, without IPv6 brackets.
    host: String,
    kind: HostKind,
    port: u16,
}

impl Origin {
    /// Parses and normalizes an http or https origin. A missing port becomes the scheme's default;
    /// user info, a path other than `/`, a query or a fragment are refused.
    pub fn parse(text: &str) -> Result<Origin, AddressError> {
        let parts = parse_parts(text)?;
        let port = parts.port.unwrap_or_else(|| parts.scheme.default_port());
        Ok(Origin {
            scheme: parts.scheme,
            host: parts.host,
            kind: parts.kind,
            port,
        })
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The lowercase host (IPv6 literals without brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            HostKind::Ipv6(_) => write!(f, "{}://[{}]:{}", self.scheme, self.host, self.port),
            _ => write!(f, "{}://{}:{}", self.scheme, self.host, self.port),
        }
    }
}

impl fmt::Debug for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Origin({self})")
    }
}

impl FromStr for Origin {
    type Err = AddressError;

    fn from_str(text: &str) -> Result<Origin, AddressError> {
        Origin::parse(text)
    }
}

impl serde::Serialize for Origin {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Origin {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Origin, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(deserializer)?;
        Origin::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A `--daemon-address` that passed every rule of §2.6. `Display` is its normalized origin.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct DaemonAddress {
    origin: Origin,
}

impl DaemonAddress {
    /// Parses an absolute http or https URL with an explicit port and no user info, path (other
    /// than `/`), query or fragment. `0.0.0.0` and IPv6 literals are refused, and plain http is
    /// allowed only for `127.0.0.1` and `localhost`.
    pub fn parse(text: &str) -> Result<DaemonAddress, AddressError> {
        let parts = parse_parts(text)?;
        match parts.kind {
            HostKind::Ipv6(_) => return Err(AddressError::Ipv6 { host: parts.host }),
            HostKind::Ipv4(ip) if ip.is_unspecified() => {
                return Err(AddressError::BindAddress { host: parts.host });
            }
            _ => {}
        }
        let Some(port) = parts.port else {
            return Err(AddressError::MissingPort { host: parts.host });
        };
        if parts.scheme == Scheme::Http && !is_plain_http_host(&parts.host) {
            return Err(AddressError::PlainHttpNotLoopback { host: parts.host });
        }
        Ok(DaemonAddress {
            origin: Origin {
                scheme: parts.scheme,
                host: parts.host,
                kind: parts.kind,
                port,
            },
        })
    }

    /// The normalized origin: what the client pins and puts in `Hello`.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.origin.scheme
    }

    /// The lowercase host as given (`localhost` stays `localhost`): the TLS server name.
    pub fn host(&self) -> &str {
        &self.origin.host
    }

    /// The explicit port.
    pub fn port(&self) -> u16 {
        self.origin.port
    }

    /// Whether the scheme is https.
    pub fn is_tls(&self) -> bool {
        self.origin.scheme.is_tls()
    }

    /// Whether the host is `localhost` or an IPv4 loopback address.
    pub fn is_loopback(&self) -> bool {
        match self.origin.kind {
            HostKind::Ipv4(ip) => ip.is_loopback(),
            HostKind::Domain => self.origin.host == "localhost",
            HostKind::Ipv6(_) => false,
        }
    }

    /// The socket address to connect to when the host is an IP address or `localhost`
    /// (which is `127.0.0.1`, never `::1`); `None` for a DNS name, see
    /// [`DaemonAddress::connect_host`].
    pub fn connect_addr(&self) -> Option<SocketAddr> {
        match self.origin.kind {
            HostKind::Ipv4(ip) => Some(SocketAddr::V4(SocketAddrV4::new(ip, self.origin.port))),
            HostKind::Domain if self.origin.host == "localhost" => Some(SocketAddr::V4(
                SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.origin.port),
            )),
            _ => None,
        }
    }

    /// The host to connect to: `127.0.0.1` for `localhost`, otherwise the host itself.
    pub fn connect_host(&self) -> &str {
        if self.origin.host == "localhost" {
            "127.0.0.1"
        } else {
            &self.origin.host
        }
    }

    /// The control-session URL on the same origin: `ws://` or `wss://` followed by `path`.
    pub fn ws_url(&self, path: &str) -> String {
        let scheme = if self.is_tls() { "wss" } else { "ws" };
        let slash = if path.starts_with('/') { "" } else { "/" };
        format!(
            "{scheme}://{}:{}{slash}{path}",
            self.origin.host, self.origin.port
        )
    }
}

impl fmt::Display for DaemonAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.origin.fmt(f)
    }
}

impl fmt::Debug for DaemonAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DaemonAddress({})", self.origin)
    }
}

impl FromStr for DaemonAddress {
    type Err = AddressError;

    fn from_str(text: &str) -> Result<DaemonAddress, AddressError> {
        DaemonAddress::parse(text)
    }
}

fn is_plain_http_host(host: &str) -> bool {
    host == "127.0.0.1" || host == "localhost"
}

struct Parts {
    scheme: Scheme,
    host: String,
    kind: HostKind,
    port: Option<u16>,
}

fn parse_parts(text: &str) -> Result<Parts, AddressError> {
    let (scheme, rest) = text.split_once("://").ok_or(AddressError::NotAbsolute)?;
    let scheme = if scheme.eq_ignore_ascii_case("http") {
        Scheme::Http
    } else if scheme.eq_ignore_ascii_case("https") {
        Scheme::Https
    } else if !scheme.is_empty()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
    {
        return Err(AddressError::UnsupportedScheme {
            scheme: scheme.to_owned(),
        });
    } else {
        return Err(AddressError::NotAbsolute);
    };

    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    // An `@` after a `/`, `?` or `#` is most likely a password holding one of them: the
    // error must not quote what follows.
    if authority.contains('@') || tail.contains('@') {
        return Err(AddressError::UserInfo);
    }
    if tail.contains('?') {
        return Err(AddressError::Query);
    }
    if tail.contains('#') {
        return Err(AddressError::Fragment);
    }
    if !tail.is_empty() && tail != "/" {
        return Err(AddressError::Path {
            path: tail.to_owned(),
        });
    }

    let (host, kind, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (literal, after) =
            bracketed
                .split_once(']')
                .ok_or_else(|| AddressError::InvalidHost {
                    host: authority.to_owned(),
                })?;
        let ip = Ipv6Addr::from_str(literal).map_err(|_| AddressError::InvalidHost {
            host: authority.to_owned(),
        })?;
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(port) => Some(parse_port(port)?),
                None => {
                    return Err(AddressError::InvalidHost {
                        host: authority.to_owned(),
                    });
                }
            },
        };
        (ip.to_string(), HostKind::Ipv6(ip), port)
    } else {
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(parse_port(port)?)),
            None => (authority, None),
        };
        let (host, kind) = normalize_host(host)?;
        (host, kind, port)
    };
    Ok(Parts {
        scheme,
        host,
        kind,
        port,
    })
}

fn parse_port(text: &str) -> Result<u16, AddressError> {
    let invalid = || AddressError::InvalidPort {
        port: text.to_owned(),
    };
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    match text.parse::<u16>() {
        Ok(0) | Err(_) => Err(invalid()),
        Ok(port) => Ok(port),
    }
}

/// Lowercases a DNS name or IPv4 literal and refuses anything a resolver could read in more than
/// one way (`127.1`, `0x7f.0.0.1`, `example.com.`).
fn normalize_host(text: &str) -> Result<(String, HostKind), AddressError> {
    if text.is_empty() {
        return Err(AddressError::EmptyHost);
    }
    let invalid = || AddressError::InvalidHost {
        host: text.to_owned(),
    };
    let host = text.to_ascii_lowercase();
    if host.len() > 253
        || !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        return Err(invalid());
    }
    let labels: Vec<&str> = host.split('.').collect();
    if labels
        .iter()
        .any(|l| l.is_empty() || l.len() > 63 || l.starts_with('-') || l.ends_with('-'))
    {
        return Err(invalid());
    }
    let last = labels.last().copied().unwrap_or_default();
    let numeric = last.bytes().all(|b| b.is_ascii_digit())
        || last
            .strip_prefix("0x")
            .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()));
    if numeric {
        // The last label is a number, so resolvers read the host as an IPv4 address; accept
        // only the dotted-quad spelling that std parses (no octal, hex or short forms).
        let ip = Ipv4Addr::from_str(&host).map_err(|_| invalid())?;
        return Ok((ip.to_string(), HostKind::Ipv4(ip)));
    }
    Ok((host, HostKind::Domain))
}

#[cfg(test)]
mod tests;
