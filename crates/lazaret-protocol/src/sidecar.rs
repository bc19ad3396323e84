//! The Network Sidecar's control protocol: what the coordinator (and
//! `lazaret-sidecar ctl`) sends on the sidecar's control socket, what the
//! sidecar answers, and the events it streams to a watcher. One JSON object
//! per line each way, typed here once for both ends.
//!
//! Requests carry `type`: `allow`/`deny` add entries (a CIDR, an address, a
//! host address with one protocol and port, `10.9.0.7/32 tcp/8081`, see
//! [`service_entry`], or a DNS name pattern; `forMs` makes them end on
//! their own), `revoke` removes
//! entries, `hold` says how long a question for a name on no allow entry
//! waits for one, `set` replaces the whole policy, `protect` says what
//! stays out of reach under wide allows, `show` asks for the policy, `watch`
//! turns the connection into an event stream, `credentials` sets the
//! endpoints that add an API key outside the sandbox:
//!
//! ```text
//! --> {"type":"allow","entries":["10.89.0.5/32","*.npmjs.org"]}
//! <-- {"type":"policy","allow":["10.89.0.5/32","*.npmjs.org"],"deny":[],"learned":[],"upstreams":["10.255.255.53:53"],"rules":17,"privateAnswers":"refuse","holdMs":0,"expiring":[]}
//! --> {"type":"allow","entries":["grant.test"],"forMs":60000}
//! --> {"type":"watch"}
//! <-- {"type":"watching"}
//! <-- {"type":"dnsRefused","name":"example.org","recordType":"A","reason":"notAllowlisted","message":"the name is not on the allowlist"}
//! <-- {"type":"connectBlocked","address":"10.9.0.7","protocol":"tcp","port":8080}
//! ```
//!
//! A request that cannot be carried out is answered `{"type":"error","message":…}`
//! and leaves the policy as it was.

use serde::{Deserialize, Serialize};

use crate::NetworkPolicy;

/// Longest request line the sidecar accepts, newline included.
pub const MAX_LINE: usize = 64 * 1024;
/// Most entries (or addresses, or networks) in one request.
pub const MAX_ITEMS: usize = 4096;
/// Longest hold of a DNS question ([`SidecarRequest::Hold`]): shorter than
/// the usual resolver time-out, so a held question is answered, not retried.
pub const MAX_HOLD_MS: u64 = 30_000;
/// Longest life of a timed entry (`forMs`): a day.
pub const MAX_FOR_MS: u64 = 24 * 60 * 60 * 1000;

/// Whether an allowlisted DNS name's answer may open internal addresses
/// (private, CGNAT, ULA and other special-purpose ranges, the host's own
/// networks) that no CIDR entry allows: `[network] private_answers`. Refused
/// by default: an allowed name stands for hosts out on the network, not for
/// whatever its DNS says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum PrivateAnswers {
    #[default]
    Refuse,
    Allow,
}

impl PrivateAnswers {
    /// The configuration's spelling, and the wire's.
    pub fn as_str(self) -> &'static str {
        match self {
            PrivateAnswers::Refuse => "refuse",
            PrivateAnswers::Allow => "allow",
        }
    }

    /// `refuse` or `allow`; anything else is `None`.
    pub fn parse(text: &str) -> Option<PrivateAnswers> {
        [PrivateAnswers::Refuse, PrivateAnswers::Allow].into_iter().find(|value| value.as_str() == text)
    }
}

impl std::fmt::Display for PrivateAnswers {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// A request on the sidecar's control socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase", deny_unknown_fields)]
pub enum SidecarRequest {
    /// Adds entries to the allowlist (CIDRs, addresses, an address's
    /// service as [`service_entry`] writes it, DNS name patterns).
    /// With `forMs` they end on their own after that many milliseconds:
    /// the sidecar removes them then (what they opened closes, established
    /// flows included, as a revoke does) and reports
    /// [`SidecarEvent::EntriesExpired`].
    Allow {
        entries: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        for_ms: Option<u64>,
    },
    /// Adds entries to the denylist: holes in wider allows, and names
    /// refused at once (never held). `forMs` as for `allow`.
    Deny {
        entries: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        for_ms: Option<u64>,
    },
    /// Removes allow or deny entries exactly as written (timed or not):
    /// what an allow opened closes at once, established flows included. An
    /// entry that is neither is an error naming it, and nothing changes.
    Revoke { entries: Vec<String> },
    /// How long a DNS question for a name on no allow entry waits for one
    /// (an `allow` of the name answers the very question) before it is
    /// refused; `0`, the default, refuses at once. Each held question is
    /// reported as [`SidecarEvent::DnsHeld`]. At most [`MAX_HOLD_MS`].
    Hold { ms: u64 },
    /// Replaces the whole policy (a reload). Denies carve into allows,
    /// whatever their order.
    Set {
        #[serde(default)]
        allow: Vec<String>,
        #[serde(default)]
        deny: Vec<String>,
        #[serde(default)]
        private_answers: PrivateAnswers,
    },
    /// What stays out of reach under wide allows: addresses and networks
    /// (`addresses`, e.g. the host's own, and rootless podman's user-mode
    /// network), and the networks of the host's interfaces (`networks`: a
    /// name's answer does not open them). Replaces what was protected before.
    Protect {
        #[serde(default)]
        addresses: Vec<String>,
        #[serde(default)]
        networks: Vec<String>,
    },
    /// Replaces the credential endpoints: for each, the sidecar serves plain
    /// HTTP/1.1 on `127.0.0.1:<port>` of the namespace and forwards every
    /// request over TLS to `origin` only, with `header` set to `value`
    /// (whatever copy of it the request carried is dropped). An empty list
    /// closes them all. Answered with the policy, whose `credentials` list
    /// the endpoints (never a value). At most [`MAX_CREDENTIALS`].
    Credentials { endpoints: Vec<CredentialEndpoint> },
    /// The policy in force. (Variants without fields are written `{}` so
    /// that unknown fields are refused in them too.)
    Show {},
    /// Answered [`SidecarReply::Watching`], then [`SidecarEvent`]s, one per
    /// line, until the client goes.
    Watch {},
}

/// Where the coordinator mounts the host's CA bundle (PEM) into the
/// sidecar, read-only: credential origins are checked against it.
pub const CA_BUNDLE_IN_SIDECAR: &str = "/etc/lazaret/ca-bundle.pem";

/// Most credential endpoints of one sidecar.
pub const MAX_CREDENTIALS: usize = 16;

/// One origin whose credential the sidecar adds ([`SidecarRequest::Credentials`]).
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

/// The sidecar's answer to one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum SidecarReply {
    /// The request was carried out; the policy in force now.
    Policy(NetworkPolicy),
    /// The connection is an event stream from now on.
    Watching,
    /// Nothing changed; `message` says why.
    Error { message: String },
}

/// Why the sidecar refused a DNS question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum DnsRefusal {
    /// Not a DNS question the sidecar can read.
    Malformed,
    /// A record type other than A and AAAA.
    RecordType,
    /// A label with characters other than letters, digits and hyphens.
    BadCharacters,
    /// Not a name an allow entry could hold (one label, a hyphen at a
    /// label's edge, over 253 octets, an address written as a name): refused
    /// at once, never held or asked about.
    NotAName,
    /// The name is on no allow entry.
    NotAllowlisted,
    /// A deny entry covers the name (or an alias in its answer).
    Denied,
    /// A label under a wildcard longer than the sidecar takes.
    LongLabel,
    /// More labels than the sidecar takes under a wildcard.
    TooManyLabels,
}

impl DnsRefusal {
    /// The wire's spelling, for messages and audit records.
    pub fn as_str(self) -> &'static str {
        match self {
            DnsRefusal::Malformed => "malformed",
            DnsRefusal::RecordType => "recordType",
            DnsRefusal::BadCharacters => "badCharacters",
            DnsRefusal::NotAName => "notAName",
            DnsRefusal::NotAllowlisted => "notAllowlisted",
            DnsRefusal::Denied => "denied",
            DnsRefusal::LongLabel => "longLabel",
            DnsRefusal::TooManyLabels => "tooManyLabels",
        }
    }

    /// The refusal whose wire word is `text`, if any.
    pub fn parse(text: &str) -> Option<DnsRefusal> {
        [
            DnsRefusal::Malformed,
            DnsRefusal::RecordType,
            DnsRefusal::BadCharacters,
            DnsRefusal::NotAName,
            DnsRefusal::NotAllowlisted,
            DnsRefusal::Denied,
            DnsRefusal::LongLabel,
            DnsRefusal::TooManyLabels,
        ]
        .into_iter()
        .find(|refusal| refusal.as_str() == text)
    }
}

impl std::fmt::Display for DnsRefusal {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// Why addresses in an allowed name's answer were not opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum AnswerRefusal {
    /// Never a remote host: loopback, link-local, multicast, broadcast,
    /// `0.0.0.0/8`, IPv4-compatible IPv6.
    SpecialAddress,
    /// Private, CGNAT, ULA or another internal range no CIDR entry allows
    /// (with `private_answers = "refuse"`).
    PrivateAddress,
    /// On one of the host's networks (likewise).
    HostNetwork,
    /// A CIDR deny entry covers it.
    DeniedAddress,
    /// One of the host's own addresses.
    HostAddress,
}

impl AnswerRefusal {
    /// The wire's spelling, for messages and audit records.
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerRefusal::SpecialAddress => "specialAddress",
            AnswerRefusal::PrivateAddress => "privateAddress",
            AnswerRefusal::HostNetwork => "hostNetwork",
            AnswerRefusal::DeniedAddress => "deniedAddress",
            AnswerRefusal::HostAddress => "hostAddress",
        }
    }

    /// The refusal whose wire word is `text`, if any.
    pub fn parse(text: &str) -> Option<AnswerRefusal> {
        [
            AnswerRefusal::SpecialAddress,
            AnswerRefusal::PrivateAddress,
            AnswerRefusal::HostNetwork,
            AnswerRefusal::DeniedAddress,
            AnswerRefusal::HostAddress,
        ]
        .into_iter()
        .find(|refusal| refusal.as_str() == text)
    }
}

impl std::fmt::Display for AnswerRefusal {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// What the sidecar streams to a watcher. `suppressed`: how many events
/// before this one the rate limit dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum SidecarEvent {
    /// A DNS question was refused (`name` and `record_type` are empty when
    /// the question could not be read).
    DnsRefused {
        name: String,
        record_type: String,
        reason: DnsRefusal,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suppressed: Option<u64>,
    },
    /// An allowed name's answer pointed at `addresses` the sidecar left
    /// closed and out of the reply; `reason` is the first one's.
    DnsAnswerRefused {
        name: String,
        record_type: String,
        addresses: Vec<String>,
        reason: AnswerRefusal,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suppressed: Option<u64>,
    },
    /// An allowed name resolved; `addresses` are open now.
    DnsResolved {
        name: String,
        record_type: String,
        addresses: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suppressed: Option<u64>,
    },
    /// A question for a name on no allow entry is held for up to `holdMs`
    /// ([`SidecarRequest::Hold`]): an allow of the name in that time
    /// answers it; otherwise it is refused (`dnsRefused`, `notAllowlisted`).
    /// Nothing about it went upstream. `holdMs` 0: not held after all (too
    /// many questions are held already), refused at once.
    DnsHeld {
        name: String,
        record_type: String,
        hold_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suppressed: Option<u64>,
    },
    /// Timed entries (`forMs`) whose time ran out were removed. Never
    /// dropped by the rate limit.
    EntriesExpired { allow: Vec<String>, deny: Vec<String> },
    /// The `dnsResolved` events (`answered`) and `dnsRefused` events of
    /// reason `denied` (`denied`) the rate limit dropped since the last
    /// tally, counted per name, so that a grant's or a refusal's hits are
    /// exact under a flood. At most [`TALLY_NAMES`] names per tally (drops
    /// for further names are only in `suppressed`). Sent at most four times
    /// a second, past the limit, and only when something was dropped.
    DnsTally { answered: Vec<NameCount>, denied: Vec<NameCount> },
    /// The sandbox opened a connection (or sent a datagram) straight to an
    /// address that no entry covers, while questions are held
    /// ([`SidecarRequest::Hold`] above 0): the connection failed at once
    /// (TCP is reset, anything else dropped), and an `allow` of the
    /// address opens it for the next try. `protocol` is `tcp`, `udp` or the
    /// IP protocol number; `port` the destination port of TCP and UDP.
    /// Addresses that are never a remote host (loopback, link-local,
    /// multicast, broadcast) and explicit denies are never reported.
    ConnectBlocked {
        address: String,
        protocol: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        port: Option<u16>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suppressed: Option<u64>,
    },
    /// The origin of a credential endpoint answered 401 or 403 to a request
    /// that carried the credential: usually a revoked or wrong key.
    CredentialRejected {
        origin: String,
        status: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suppressed: Option<u64>,
    },
    /// The origin of a credential endpoint answered a request (`method`)
    /// with the credential in `part` of its answer (an echo, a reflection):
    /// a head that carried it was never sent (the client got a 502), a body
    /// was cut before it and the client connection closed. `status`: the
    /// origin's, when its status line could be read. Never the credential.
    CredentialWithheld {
        origin: String,
        method: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
        part: WithheldPart,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        suppressed: Option<u64>,
    },
}

/// Where an origin's answer carried the credential of its endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum WithheldPart {
    /// The status line or a header (of the answer or of an interim 1xx).
    Head,
    /// The body, or a trailer of a chunked body.
    Body,
}

impl WithheldPart {
    /// The wire word (`head`, `body`).
    pub fn as_str(self) -> &'static str {
        match self {
            WithheldPart::Head => "head",
            WithheldPart::Body => "body",
        }
    }

    /// The part whose wire word is `text`, if any.
    pub fn parse(text: &str) -> Option<WithheldPart> {
        [WithheldPart::Head, WithheldPart::Body].into_iter().find(|part| part.as_str() == text)
    }
}

impl std::fmt::Display for WithheldPart {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// The transport of a direct connection, which an address grant is scoped
/// to: a grant opens exactly the protocol and port the request showed, and
/// "every port" is a separate, wider answer (docs/decisions.md D19).
/// Written `tcp/8081`, `udp/53`, or an IP protocol number alone (`132`) for
/// a protocol without ports; TCP and UDP always carry a port (1 to 65535),
/// and are never written as numbers (`6`, `17`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Service {
    protocol: u8,
    port: Option<u16>,
}

impl Service {
    /// IP protocol numbers of TCP and UDP.
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;

    /// TCP or UDP with `port` (1 to 65535), or another protocol without a
    /// port; else why not.
    pub fn new(protocol: u8, port: Option<u16>) -> Result<Service, String> {
        let ported = matches!(protocol, Service::TCP | Service::UDP);
        if protocol == 0 {
            // A policy rule of protocol 0 matches every protocol.
            return Err("IP protocol 0 is not one protocol".to_owned());
        }
        match port {
            Some(0) => Err("port 0 is not a destination port".to_owned()),
            Some(_) if !ported => Err(format!("IP protocol {protocol} has no ports")),
            None if ported => Err(format!("{} needs a port", if protocol == Service::TCP { "tcp" } else { "udp" })),
            port => Ok(Service { protocol, port }),
        }
    }

    /// `tcp/PORT`, `udp/PORT` or a protocol number other than 6 and 17;
    /// the error names the text.
    pub fn parse(text: &str) -> Result<Service, String> {
        let bad = |why: &str| format!("{text:?} is not a protocol and port (tcp/8080, udp/53 or an IP protocol number): {why}");
        let digits = |part: &str| !part.is_empty() && part.len() <= 5 && part.bytes().all(|b| b.is_ascii_digit());
        let (protocol, port) = match text.split_once('/') {
            Some(("tcp", port)) if digits(port) => (Service::TCP, Some(port.parse::<u16>().map_err(|_| bad("the port is over 65535"))?)),
            Some(("udp", port)) if digits(port) => (Service::UDP, Some(port.parse::<u16>().map_err(|_| bad("the port is over 65535"))?)),
            Some(_) => return Err(bad("expected tcp/PORT or udp/PORT")),
            None if digits(text) && text.len() <= 3 => {
                let protocol = text.parse::<u8>().map_err(|_| bad("protocol numbers go to 255"))?;
                if matches!(protocol, Service::TCP | Service::UDP) {
                    return Err(bad("write tcp/PORT or udp/PORT"));
                }
                (protocol, None)
            }
            None => return Err(bad("expected tcp/PORT, udp/PORT or a number")),
        };
        Service::new(protocol, port).map_err(|why| bad(&why))
    }

    /// The IP protocol number.
    pub fn protocol(&self) -> u8 {
        self.protocol
    }

    /// The destination port (TCP and UDP).
    pub fn port(&self) -> Option<u16> {
        self.port
    }
}

impl std::fmt::Display for Service {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.protocol, self.port) {
            (Service::TCP, Some(port)) => write!(formatter, "tcp/{port}"),
            (Service::UDP, Some(port)) => write!(formatter, "udp/{port}"),
            (protocol, _) => write!(formatter, "{protocol}"),
        }
    }
}

/// The sidecar entry of one service of an address's host network:
/// `10.9.0.7/32 tcp/8081` (the network, one space, the service). Allowed,
/// it opens that protocol and port of the address and nothing else; denied,
/// it refuses exactly that. The sidecar takes it wherever an entry goes
/// (`allow`, `deny`, `revoke`, `set`, with `forMs` too) and reports it back
/// as this text (policy, `entriesExpired`); it refuses one whose network is
/// not a host (/32, /128) or is IPv4-mapped, and IP protocol 0 (a policy
/// rule cannot tell it from every protocol). Where it meets a CIDR entry,
/// a deny wins: a service allow opens nothing while an explicit CIDR deny
/// decides the address (or the address is protected), and a service deny
/// closes its protocol and port under a CIDR allow.
pub fn service_entry(network: &str, service: Service) -> String {
    format!("{network} {service}")
}

/// How many names one [`SidecarEvent::DnsTally`] counts at most.
pub const TALLY_NAMES: usize = 1024;

/// A name and how many times something happened to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NameCount {
    pub name: String,
    pub count: u64,
}

impl SidecarEvent {
    /// Records that the rate limit dropped `count` events before this one.
    pub fn set_suppressed(&mut self, count: u64) {
        match self {
            SidecarEvent::DnsRefused { suppressed, .. }
            | SidecarEvent::DnsAnswerRefused { suppressed, .. }
            | SidecarEvent::DnsResolved { suppressed, .. }
            | SidecarEvent::DnsHeld { suppressed, .. }
            | SidecarEvent::ConnectBlocked { suppressed, .. }
            | SidecarEvent::CredentialRejected { suppressed, .. }
            | SidecarEvent::CredentialWithheld { suppressed, .. } => *suppressed = Some(count),
            SidecarEvent::EntriesExpired { .. } | SidecarEvent::DnsTally { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(line: &str) -> Result<SidecarRequest, serde_json::Error> {
        serde_json::from_str(line)
    }

    #[test]
    fn services_are_written_one_way_and_read_strictly() {
        for (text, protocol, port) in [("tcp/8081", 6, Some(8081)), ("udp/53", 17, Some(53)), ("132", 132, None), ("1", 1, None)] {
            let service = Service::parse(text).expect(text);
            assert_eq!((service.protocol(), service.port()), (protocol, port), "{text}");
            assert_eq!(service.to_string(), text);
        }
        for bad in
            ["", "tcp", "tcp/", "tcp/0", "tcp/65536", "tcp/+80", "tcp/80 ", "TCP/80", "6", "17", "256", "132/5", "sctp/5", "udp/-1", "1e3"]
        {
            assert!(Service::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Service::new(Service::TCP, None).is_err());
        assert!(Service::new(1, Some(7)).is_err());
        let service = Service::parse("tcp/8081").expect("tcp");
        assert_eq!(service_entry("10.9.0.7/32", service), "10.9.0.7/32 tcp/8081");
    }

    #[test]
    fn requests_read_as_documented() {
        assert_eq!(
            request(r#"{"type":"allow","entries":["10.89.0.5/32","*.npmjs.org"]}"#).unwrap(),
            SidecarRequest::Allow { entries: vec!["10.89.0.5/32".into(), "*.npmjs.org".into()], for_ms: None }
        );
        assert_eq!(
            request(r#"{"type":"allow","entries":["grant.test"],"forMs":60000}"#).unwrap(),
            SidecarRequest::Allow { entries: vec!["grant.test".into()], for_ms: Some(60_000) }
        );
        assert_eq!(request(r#"{"type":"hold","ms":10000}"#).unwrap(), SidecarRequest::Hold { ms: 10_000 });
        assert_eq!(
            request(r#"{"type":"revoke","entries":["grant.test"]}"#).unwrap(),
            SidecarRequest::Revoke { entries: vec!["grant.test".into()] }
        );
        assert_eq!(
            request(r#"{"type":"set"}"#).unwrap(),
            SidecarRequest::Set { allow: vec![], deny: vec![], private_answers: PrivateAnswers::Refuse }
        );
        assert_eq!(
            request(r#"{"type":"set","privateAnswers":"allow","deny":["10.1.0.0/16"]}"#).unwrap(),
            SidecarRequest::Set { allow: vec![], deny: vec!["10.1.0.0/16".into()], private_answers: PrivateAnswers::Allow }
        );
        assert_eq!(request(r#"{"type":"show"}"#).unwrap(), SidecarRequest::Show {});
        assert_eq!(request(r#"{"type":"watch"}"#).unwrap(), SidecarRequest::Watch {});
        assert_eq!(serde_json::to_string(&SidecarRequest::Show {}).unwrap(), r#"{"type":"show"}"#);
    }

    #[test]
    fn unknown_types_fields_and_values_are_refused() {
        for bad in [
            r#"{}"#,
            r#"{"type":"flush"}"#,
            r#"{"allow":["10.0.0.1"]}"#,
            r#"{"type":"allow"}"#,
            r#"{"type":"allow","entries":"10.0.0.1"}"#,
            r#"{"type":"allow","entries":[5]}"#,
            r#"{"type":"allow","entries":[],"extra":1}"#,
            r#"{"type":"set","private":"allow"}"#,
            r#"{"type":"set","privateAnswers":"yes"}"#,
            r#"{"type":"protect","routes":[]}"#,
            r#"{"type":"show","all":true}"#,
            r#"{"type":"hold"}"#,
            r#"{"type":"hold","ms":-1}"#,
            r#"{"type":"revoke","entries":["a.test"],"forMs":5}"#,
            r#"{"type":"allow","entries":["a.test"],"forMs":"5"}"#,
        ] {
            assert!(request(bad).is_err(), "{bad} was read");
        }
    }

    #[test]
    fn a_secret_is_on_the_wire_but_never_in_debug_output() {
        let credentials = SidecarRequest::Credentials {
            endpoints: vec![CredentialEndpoint {
                origin: "https://api.example.test".into(),
                port: 17400,
                header: "authorization".into(),
                value: Secret::new("Bearer sk-live-123".into()),
            }],
        };
        let line = serde_json::to_string(&credentials).unwrap();
        assert!(line.contains(r#""value":"Bearer sk-live-123""#), "{line}");
        let debug = format!("{credentials:?}");
        assert!(!debug.contains("sk-live-123") && debug.contains("18 bytes"), "{debug}");
        assert!(request(r#"{"type":"credentials","endpoints":[{"origin":"https://a.test","port":1,"header":"x","value":"v","extra":1}]}"#)
            .is_err());
    }

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

    #[test]
    fn spellings_are_the_wires() {
        use DnsRefusal as D;
        for reason in [D::Malformed, D::RecordType, D::BadCharacters, D::NotAllowlisted, D::Denied, D::LongLabel, D::TooManyLabels] {
            assert_eq!(serde_json::to_value(reason).unwrap(), reason.as_str());
        }
        use AnswerRefusal as A;
        for reason in [A::SpecialAddress, A::PrivateAddress, A::HostNetwork, A::DeniedAddress, A::HostAddress] {
            assert_eq!(serde_json::to_value(reason).unwrap(), reason.as_str());
        }
        for answers in [PrivateAnswers::Refuse, PrivateAnswers::Allow] {
            assert_eq!(serde_json::to_value(answers).unwrap(), answers.as_str());
            assert_eq!(PrivateAnswers::parse(answers.as_str()), Some(answers));
        }
    }

    #[test]
    fn every_request_reply_and_event_reads_back_as_written() {
        let requests = [
            SidecarRequest::Deny { entries: vec!["x.test".into()], for_ms: None },
            SidecarRequest::Deny { entries: vec!["x.test".into()], for_ms: Some(1) },
            SidecarRequest::Protect { addresses: vec!["10.0.2.0/24".into()], networks: vec!["10.88.0.0/16".into()] },
            SidecarRequest::Set { allow: vec!["0.0.0.0/0".into()], deny: vec![], private_answers: PrivateAnswers::Allow },
            SidecarRequest::Credentials {
                endpoints: vec![CredentialEndpoint {
                    origin: "https://api.example.test".into(),
                    port: 17400,
                    header: "x-api-key".into(),
                    value: Secret::new("sk-test".into()),
                }],
            },
        ];
        for value in requests {
            assert_eq!(request(&serde_json::to_string(&value).unwrap()).unwrap(), value);
        }
        let policy = NetworkPolicy {
            allow: vec!["a.test".into()],
            deny: vec![],
            learned: vec![],
            upstreams: vec!["10.255.255.53:53".into()],
            rules: 3,
            private_answers: PrivateAnswers::Refuse,
            hold_ms: 10_000,
            expiring: vec![crate::ExpiringEntry { entry: "grant.test".into(), verdict: crate::EntryVerdict::Allow, expires_in_ms: 59_000 }],
            credentials: vec![crate::CredentialEndpointStatus {
                origin: "https://api.example.test".into(),
                port: 17400,
                header: "x-api-key".into(),
                status_2xx: 3,
                rejected: 1,
                status_4xx: 1,
                ..Default::default()
            }],
        };
        for value in [SidecarReply::Policy(policy), SidecarReply::Watching, SidecarReply::Error { message: "no".into() }] {
            let line = serde_json::to_string(&value).unwrap();
            assert_eq!(serde_json::from_str::<SidecarReply>(&line).unwrap(), value, "{line}");
        }
        let mut event = SidecarEvent::DnsRefused {
            name: "example.org".into(),
            record_type: "A".into(),
            reason: DnsRefusal::NotAllowlisted,
            message: "the name is not on the allowlist".into(),
            suppressed: None,
        };
        assert_eq!(
            serde_json::to_string(&event).unwrap(),
            r#"{"type":"dnsRefused","name":"example.org","recordType":"A","reason":"notAllowlisted","message":"the name is not on the allowlist"}"#
        );
        event.set_suppressed(7);
        let line = serde_json::to_string(&event).unwrap();
        assert!(line.ends_with(r#","suppressed":7}"#), "{line}");
        assert_eq!(serde_json::from_str::<SidecarEvent>(&line).unwrap(), event);
        let expired = SidecarEvent::EntriesExpired { allow: vec!["grant.test".into()], deny: vec![] };
        let mut copy = expired.clone();
        copy.set_suppressed(3);
        assert_eq!(copy, expired, "expiries carry no count: they are never dropped");
        assert_eq!(serde_json::to_string(&expired).unwrap(), r#"{"type":"entriesExpired","allow":["grant.test"],"deny":[]}"#);
        let held = SidecarEvent::DnsHeld { name: "grant.test".into(), record_type: "A".into(), hold_ms: 10_000, suppressed: None };
        assert_eq!(serde_json::to_string(&held).unwrap(), r#"{"type":"dnsHeld","name":"grant.test","recordType":"A","holdMs":10000}"#);
        let blocked =
            SidecarEvent::ConnectBlocked { address: "10.9.0.7".into(), protocol: "tcp".into(), port: Some(8080), suppressed: None };
        assert_eq!(
            serde_json::to_string(&blocked).unwrap(),
            r#"{"type":"connectBlocked","address":"10.9.0.7","protocol":"tcp","port":8080}"#
        );
        let line = r#"{"type":"connectBlocked","address":"fd00::7","protocol":"47"}"#;
        let read: SidecarEvent = serde_json::from_str(line).unwrap();
        assert_eq!(read, SidecarEvent::ConnectBlocked { address: "fd00::7".into(), protocol: "47".into(), port: None, suppressed: None });
        let mut withheld = SidecarEvent::CredentialWithheld {
            origin: "https://api.example.test".into(),
            method: "GET".into(),
            status: Some(200),
            part: WithheldPart::Body,
            suppressed: None,
        };
        assert_eq!(
            serde_json::to_string(&withheld).unwrap(),
            r#"{"type":"credentialWithheld","origin":"https://api.example.test","method":"GET","status":200,"part":"body"}"#
        );
        withheld.set_suppressed(2);
        let line = serde_json::to_string(&withheld).unwrap();
        assert!(line.ends_with(r#""part":"body","suppressed":2}"#), "{line}");
        let line = r#"{"type":"credentialWithheld","origin":"https://a.test","method":"POST","part":"head"}"#;
        let read: SidecarEvent = serde_json::from_str(line).unwrap();
        assert_eq!(
            read,
            SidecarEvent::CredentialWithheld {
                origin: "https://a.test".into(),
                method: "POST".into(),
                status: None,
                part: WithheldPart::Head,
                suppressed: None
            }
        );
    }
}
