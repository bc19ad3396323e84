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
//!
//! The ranges and their classes are `lazaret_dns::special`'s, the one
//! definition the cluster policy generator denies as well (issue 46); what
//! this module adds is the host's own networks.

use std::net::IpAddr;

use lazaret_dns::special::{special, RangeClass};

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

/// Judges `address` (canonical: `::ffff:a.b.c.d` is `a.b.c.d`). `host_networks`:
/// the prefixes of the host's interfaces.
pub fn classify(address: IpAddr, host_networks: &[Cidr]) -> Class {
    let address = address.to_canonical();
    let class = match special(address) {
        Some((RangeClass::Never, what)) => Class::Never(what),
        Some((RangeClass::Internal, what)) => Class::Internal(what),
        None => Class::Remote,
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
