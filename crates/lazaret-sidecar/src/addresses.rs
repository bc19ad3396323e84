//! Which addresses a DNS answer may open (attack review finding 17). An
//! allowlisted name stands for hosts out on the network, not for whatever its
//! DNS says: an answer (its own, or through a CNAME to a name the sidecar would
//! refuse, or rebound after a first harmless one) that points at the machine's
//! neighbourhood must not open it.
//!
//! - Never opened by a name: addresses that are no remote host at all (this
//!   network `0.0.0.0/8`, loopback, link-local, multicast, limited broadcast,
//!   IPv4-compatible IPv6 `::/96`, the IPv6 discard prefix).
//! - Internal: private (RFC 1918), CGNAT (`100.64.0.0/10`), ULA (`fc00::/7`),
//!   other special-purpose ranges (IETF protocol assignments, documentation,
//!   benchmarking, reserved `240.0.0.0/4`, site-local, NAT64 local use), IPv6
//!   forms that embed such an IPv4 address (NAT64 `64:ff9b::/96`, 6to4
//!   `2002::/16`), and the host's own networks (the prefixes of its
//!   interfaces, from the coordinator). A name opens these only where a CIDR
//!   allow covers them, or under `private_answers = "allow"`.
//!
//! IPv4-mapped IPv6 (`::ffff:a.b.c.d`) is routed as IPv4 and judged as such.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::policy::Cidr;

/// What an answered address is, as far as a name opening it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// A host out on some network.
    Remote,
    /// Private, CGNAT, ULA or another special-purpose range (what it is, e.g.
    /// `private network 10.0.0.0/8`).
    Internal(&'static str),
    /// One of the host's own networks.
    HostNetwork(Cidr),
    /// Never a remote host (what it is, e.g. `loopback 127.0.0.0/8`).
    Never(&'static str),
}

/// IPv4 ranges no name may open: (first address, prefix length, what it is).
const NEVER_V4: [([u8; 4], u8, &str); 5] = [
    ([0, 0, 0, 0], 8, "\"this network\" 0.0.0.0/8"),
    ([127, 0, 0, 0], 8, "loopback 127.0.0.0/8"),
    ([169, 254, 0, 0], 16, "link-local 169.254.0.0/16"),
    ([224, 0, 0, 0], 4, "multicast 224.0.0.0/4"),
    ([255, 255, 255, 255], 32, "broadcast 255.255.255.255"),
];

/// IPv4 ranges a name opens only where a CIDR allow covers them, or under the switch.
const INTERNAL_V4: [([u8; 4], u8, &str); 11] = [
    ([10, 0, 0, 0], 8, "private network 10.0.0.0/8"),
    ([172, 16, 0, 0], 12, "private network 172.16.0.0/12"),
    ([192, 168, 0, 0], 16, "private network 192.168.0.0/16"),
    ([100, 64, 0, 0], 10, "shared (CGNAT) network 100.64.0.0/10"),
    ([192, 0, 0, 0], 24, "IETF protocol assignments 192.0.0.0/24"),
    ([192, 0, 2, 0], 24, "documentation network 192.0.2.0/24"),
    ([198, 51, 100, 0], 24, "documentation network 198.51.100.0/24"),
    ([203, 0, 113, 0], 24, "documentation network 203.0.113.0/24"),
    ([198, 18, 0, 0], 15, "benchmarking network 198.18.0.0/15"),
    ([192, 88, 99, 0], 24, "6to4 relay anycast 192.88.99.0/24"),
    ([240, 0, 0, 0], 4, "reserved network 240.0.0.0/4"),
];

/// IPv6 ranges no name may open.
const NEVER_V6: [(u128, u8, &str); 5] = [
    (0, 96, "IPv4-compatible IPv6 ::/96"),
    (0xfe80 << 112, 10, "link-local fe80::/10"),
    (0xff00 << 112, 8, "multicast ff00::/8"),
    (0x0100 << 112, 64, "discard-only 100::/64"),
    (0xffff << 32, 96, "IPv4-mapped ::ffff:0:0/96"),
];

/// IPv6 ranges a name opens only where a CIDR allow covers them, or under the switch.
const INTERNAL_V6: [(u128, u8, &str); 7] = [
    (0xfc00 << 112, 7, "unique local network fc00::/7"),
    (0xfec0 << 112, 10, "site-local network fec0::/10"),
    (0x2001_0db8 << 96, 32, "documentation network 2001:db8::/32"),
    (0x3fff << 112, 20, "documentation network 3fff::/20"),
    (0x2001_0002 << 96, 48, "benchmarking network 2001:2::/48"),
    ((0x0064_ff9b << 96) | (1 << 80), 48, "local-use NAT64 64:ff9b:1::/48"),
    (0xffff << 48, 96, "IPv4-translated ::ffff:0:0:0/96"),
];

const NAT64: u128 = 0x0064_ff9b << 96;
const SIX_TO_FOUR: u128 = 0x2002 << 112;

fn in_v4(address: Ipv4Addr, (first, length, _): &([u8; 4], u8, &str)) -> bool {
    let mask = if *length == 0 { 0 } else { u32::MAX << (32 - u32::from(*length)) };
    u32::from(address) & mask == u32::from(Ipv4Addr::from(*first))
}

fn in_v6(address: Ipv6Addr, (first, length, _): &(u128, u8, &str)) -> bool {
    let mask = if *length == 0 { 0 } else { u128::MAX << (128 - u32::from(*length)) };
    u128::from(address) & mask == *first
}

/// Judges `address` (canonical: `::ffff:a.b.c.d` is `a.b.c.d`). `host_networks`:
/// the prefixes of the host's interfaces.
pub fn classify(address: IpAddr, host_networks: &[Cidr]) -> Class {
    let address = address.to_canonical();
    let class = match address {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    };
    if class != Class::Remote {
        return class;
    }
    let host = Cidr::host(address);
    host_networks
        .iter()
        .filter(|network| network.contains(&host))
        .max_by_key(|network| network.prefix_len())
        .map_or(class, |n| Class::HostNetwork(*n))
}

fn classify_v4(address: Ipv4Addr) -> Class {
    if let Some((_, _, what)) = NEVER_V4.iter().find(|range| in_v4(address, range)) {
        return Class::Never(what);
    }
    if let Some((_, _, what)) = INTERNAL_V4.iter().find(|range| in_v4(address, range)) {
        return Class::Internal(what);
    }
    Class::Remote
}

fn classify_v6(address: Ipv6Addr) -> Class {
    let value = u128::from(address);
    if address.is_unspecified() || address.is_loopback() {
        return Class::Never(if address.is_loopback() { "loopback ::1" } else { "unspecified ::" });
    }
    if let Some((_, _, what)) = NEVER_V6.iter().find(|range| in_v6(address, range)) {
        return Class::Never(what);
    }
    if let Some((_, _, what)) = INTERNAL_V6.iter().find(|range| in_v6(address, range)) {
        return Class::Internal(what);
    }
    // Forms that reach an IPv4 address through a translator or a tunnel: as
    // internal as the address they carry.
    let embedded = if value >> 32 == NAT64 >> 32 {
        Some(Ipv4Addr::from(value as u32))
    } else if value >> 112 == SIX_TO_FOUR >> 112 {
        Some(Ipv4Addr::from((value >> 80) as u32))
    } else {
        None
    };
    match embedded.map(classify_v4) {
        Some(Class::Remote) | None => Class::Remote,
        Some(Class::Never(_)) => Class::Never("IPv6 form (NAT64 or 6to4) of an address no name may open"),
        Some(_) => Class::Internal("IPv6 form (NAT64 or 6to4) of an internal IPv4 address"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(text: &str) -> Class {
        classify(text.parse().unwrap(), &[Cidr::parse("192.0.2.128/25").unwrap(), Cidr::parse("2001:db9:1::/48").unwrap()])
    }

    #[test]
    fn addresses_that_are_no_remote_host_are_never_opened() {
        for never in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "169.254.169.254",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "::",
            "::1",
            "::10.0.0.1",
            "::8.8.8.8",
            "::0.0.0.2",
            "fe80::1",
            "ff02::1",
            "100::1",
            "::ffff:127.0.0.1",
            "::ffff:0.0.0.0",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:0001::1",
        ] {
            assert!(matches!(class(never), Class::Never(_)), "{never}: {:?}", class(never));
        }
    }

    #[test]
    fn private_and_special_purpose_ranges_are_internal() {
        for internal in [
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.127.255.255",
            "192.0.0.8",
            "198.18.0.1",
            "198.19.255.255",
            "203.0.113.5",
            "240.0.0.1",
            "255.255.255.254",
            "::ffff:10.0.0.1",
            "fd00::1",
            "fc00::1",
            "fec0::1",
            "2001:db8::1",
            "64:ff9b::10.0.0.1",
            "64:ff9b:1::1",
            "2002:0a00:0001::1",
            "2002:c0a8:0101::1",
        ] {
            assert!(matches!(class(internal), Class::Internal(_)), "{internal}: {:?}", class(internal));
        }
        assert_eq!(class("10.1.2.3"), Class::Internal("private network 10.0.0.0/8"));
    }

    #[test]
    fn the_hosts_networks_are_internal_too() {
        assert_eq!(class("192.0.2.200"), Class::Internal("documentation network 192.0.2.0/24"), "the fixed ranges come first");
        let networks = [Cidr::parse("93.184.0.0/16").unwrap(), Cidr::parse("93.184.216.0/24").unwrap()];
        assert_eq!(classify("93.184.216.34".parse().unwrap(), &networks), Class::HostNetwork(networks[1]), "the narrowest");
        assert_eq!(class("2001:db9:1::5"), Class::HostNetwork(Cidr::parse("2001:db9:1::/48").unwrap()));
        assert_eq!(class("::ffff:93.184.216.34"), Class::Remote);
    }

    #[test]
    fn remote_hosts_are_remote() {
        for remote in [
            "1.1.1.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.0",
            "172.32.0.1",
            "198.20.0.1",
            "2606:4700::1111",
            "64:ff9b::808:808",
            "2002:0808:0808::1",
        ] {
            assert_eq!(class(remote), Class::Remote, "{remote}");
        }
    }
}
