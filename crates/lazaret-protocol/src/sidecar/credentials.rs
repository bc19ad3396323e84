//! The credential endpoints of the sidecar control protocol
//! (`credentials`, DECISIONS D18): an endpoint as the coordinator sends it
//! ([`CredentialEndpoint`]), its origin checked ([`Origin`]: `https://` and a
//! host, nothing else), the header a key may go in and the value it may
//! have, and [`Secret`], which is on the wire but never in `Debug` output.
//! The checks name what is wrong without repeating a key.

use serde::{Deserialize, Serialize};

/// Where the coordinator mounts the host's CA bundle (PEM) into the
/// sidecar, read-only: credential origins are checked against it.
pub const CA_BUNDLE_IN_SIDECAR: &str = "/etc/lazaret/ca-bundle.pem";

/// Most credential endpoints of one sidecar.
pub const MAX_CREDENTIALS: usize = 16;

/// One origin whose credential the sidecar adds ([`SidecarRequest::Credentials`](super::SidecarRequest::Credentials)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CredentialEndpoint {
    /// `https://host` or `https://host:port`: no path, query or user.
    pub origin: String,
    /// The loopback port the sandbox reaches it on.
    pub port: u16,
    /// The header to set, e.g. `x-api-key` or `authorization`.
    pub header: String,
    /// The header's whole value (`Bearer ` included where the scheme wants it).
    pub value: Secret,
}

/// A credential endpoint's origin, checked: `https://` and a host (a DNS
/// name, an IPv4 address or a bracketed IPv6 address) with an optional port;
/// no user, path, query or fragment (one trailing `/` is taken).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// Lower case; an IPv6 address without its brackets.
    pub host: String,
    pub port: u16,
}

impl Origin {
    /// The origin in `text`, or why it is not one (naming it).
    pub fn parse(text: &str) -> Result<Origin, String> {
        let bad = |why: &str| format!("{text:?} is not an https origin: {why}");
        let rest = text.strip_prefix("https://").ok_or_else(|| bad("it must start with https://"))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#']) {
            return Err(bad("no path, query or fragment (the endpoint forwards every path of the origin)"));
        }
        if rest.contains('@') {
            return Err(bad("no user name or password"));
        }
        let (host, port) = match rest.strip_prefix('[') {
            Some(bracketed) => {
                let (address, after) = bracketed.split_once(']').ok_or_else(|| bad("an unclosed ["))?;
                address.parse::<std::net::Ipv6Addr>().map_err(|_| bad("not an IPv6 address in [ ]"))?;
                (address.to_owned(), after.strip_prefix(':'))
            }
            None => match rest.rsplit_once(':') {
                Some((host, port)) => (host.to_owned(), Some(port)),
                None => (rest.to_owned(), None),
            },
        };
        let port = match port {
            None => 443,
            Some(port) => port.parse::<u16>().ok().filter(|port| *port > 0).ok_or_else(|| bad("the port is not 1 to 65535"))?,
        };
        let host = host.to_ascii_lowercase();
        let is_address = host.parse::<std::net::IpAddr>().is_ok();
        let is_name = !host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            });
        if !is_address && !is_name {
            return Err(bad("the host is neither a DNS name nor an IP address"));
        }
        Ok(Origin { host, port })
    }

    /// `host` or `host:port` as `Host` and the origin are written
    /// (443 left out, an IPv6 address in brackets).
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        if self.port == 443 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "https://{}", self.authority())
    }
}

/// Headers a credential may not be put in: the ones that frame a request,
/// route it or belong to one connection.
pub const RESERVED_HEADERS: [&str; 12] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "expect",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
];

/// A header name a credential can go in (an HTTP token that is not
/// [`RESERVED_HEADERS`]), in lower case; else why not.
pub fn credential_header(name: &str) -> Result<String, String> {
    let is_token = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !is_token {
        return Err(format!("{name:?} is not an HTTP header name"));
    }
    let lower = name.to_ascii_lowercase();
    if RESERVED_HEADERS.contains(&lower.as_str()) {
        return Err(format!("{name:?} frames or routes the request; a credential cannot go in it"));
    }
    Ok(lower)
}

/// Longest credential header value.
pub const MAX_CREDENTIAL_LENGTH: usize = 8192;

/// Whether `value` can be sent as a header value: 1 to
/// [`MAX_CREDENTIAL_LENGTH`] visible ASCII characters or spaces, not
/// starting or ending with a space. Says why not without repeating the value.
pub fn check_credential_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("the credential is empty".into());
    }
    if value.len() > MAX_CREDENTIAL_LENGTH {
        return Err(format!("the credential is {} bytes, more than {MAX_CREDENTIAL_LENGTH}", value.len()));
    }
    if let Some(position) = value.bytes().position(|b| !(b == b' ' || b.is_ascii_graphic())) {
        return Err(format!("the credential has a control or non-ASCII character at byte {position} (a trailing newline from a file?)"));
    }
    if value.starts_with(' ') || value.ends_with(' ') {
        return Err("the credential starts or ends with a space".into());
    }
    Ok(())
}

/// A credential on its way to the sidecar: written on the wire as the
/// plain string, but never by `Debug`, so that no log line carries it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    /// The value itself: only for the header the sidecar writes.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "Secret(<{} bytes>)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_headers_and_values_are_checked() {
        let origin = Origin::parse("https://API.Anthropic.com").unwrap();
        assert_eq!(origin, Origin { host: "api.anthropic.com".into(), port: 443 });
        assert_eq!(origin.to_string(), "https://api.anthropic.com");
        assert_eq!(Origin::parse("https://api.test:8443/").unwrap().authority(), "api.test:8443");
        assert_eq!(Origin::parse("https://10.0.0.7").unwrap().host, "10.0.0.7");
        let v6 = Origin::parse("https://[fd00::7]:9443").unwrap();
        assert_eq!((v6.host.as_str(), v6.port, v6.authority()), ("fd00::7", 9443, "[fd00::7]:9443".to_owned()));
        for bad in [
            "http://api.test",
            "api.test",
            "https://api.test/v1",
            "https://api.test?x=1",
            "https://user@api.test",
            "https://api.test:0",
            "https://api.test:70000",
            "https://",
            "https://bad_name.test",
            "https://-a.test",
            "https://[fd00::7",
            "https://[nope]",
        ] {
            let error = Origin::parse(bad).unwrap_err();
            assert!(error.contains(bad), "{bad}: {error}");
        }
        assert_eq!(credential_header("X-Api-Key").unwrap(), "x-api-key");
        assert_eq!(credential_header("Authorization").unwrap(), "authorization");
        for bad in ["", "x api", "host", "Content-Length", "Proxy-Authorization", "x:y"] {
            assert!(credential_header(bad).is_err(), "{bad}");
        }
        assert!(check_credential_value("Bearer sk-ant-123").is_ok());
        for bad in ["", "sk\n", "sk\r\nx-evil: 1", " sk", "sk ", "s\u{e9}"] {
            let error = check_credential_value(bad).unwrap_err();
            assert!(!error.contains("sk-"), "{error}");
        }
        assert!(check_credential_value(&"k".repeat(MAX_CREDENTIAL_LENGTH + 1)).is_err());
    }
}
