//! One protocol and port of an address ([`Service`], `tcp/8081`, `udp/53`,
//! or a protocol number alone), which an address grant is scoped to, and
//! the entry text that names it with its host network
//! ([`service_entry`], `10.9.0.7/32 tcp/8081`). Written one way and read
//! strictly: TCP and UDP always carry a port and are never numbers.

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
