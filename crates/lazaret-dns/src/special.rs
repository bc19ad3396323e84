//! The special address ranges: one definition for both egress enforcers
//! (issue 46). The Network Sidecar judges a DNS answer with it
//! (`crates/lazaret-sidecar/src/addresses.rs`), and the cluster policy
//! generator (`crates/lazaret-kube/src/egress.rs`) denies what it lists, so
//! the two cannot drift apart; `crates/lazaret-kube/tests/one_policy.rs`
//! checks both against the same destinations.
//!
//! - [`RangeClass::Never`]: no remote host at all (this network, loopback,
//!   link-local, multicast, broadcast, IPv4-compatible IPv6, the discard
//!   prefix). A name's answer never opens these, not even under a CIDR allow
//!   or `private_answers = "allow"`.
//! - [`RangeClass::Internal`]: private, CGNAT, ULA and the other
//!   special-purpose ranges. A name's answer opens these only where a CIDR
//!   allow covers them (locally also under `private_answers = "allow"`).
//!
//! An IPv6 address that carries an IPv4 address through NAT64
//! (`64:ff9b::/96`) or 6to4 (`2002::/16`) is of the class of the address it
//! carries ([`special`]); a cluster policy denies those forms as ranges of
//! their own ([`cluster_denied`]). IPv4-mapped IPv6 (`::ffff:a.b.c.d`) is
//! routed as IPv4 and judged as such.
//!
//! No I/O and no dependencies, like the rest of the crate: the sidecar links
//! it into a static binary.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What a special range is, as far as a name's answer opening it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RangeClass {
    /// Never a remote host: never opened by a name.
    Never,
    /// Internal: opened by a name only where a CIDR allow covers it.
    Internal,
}

/// An address prefix: its first address (host bits zero) and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix {
    first: IpAddr,
    len: u8,
}

fn mask32(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len.min(32))).unwrap_or(0)
}

fn mask128(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len.min(128))).unwrap_or(0)
}

impl Prefix {
    /// `octets/len`; the table's entries are written with their host bits zero
    /// (checked by a test).
    pub const fn v4(octets: [u8; 4], len: u8) -> Prefix {
        Prefix { first: IpAddr::V4(Ipv4Addr::new(octets[0], octets[1], octets[2], octets[3])), len }
    }

    /// The IPv6 prefix whose first address is `bits`.
    pub const fn v6(bits: u128, len: u8) -> Prefix {
        Prefix { first: IpAddr::V6(Ipv6Addr::from_bits(bits)), len }
    }

    /// The prefix of `len` bits around `address` (host bits cleared), or
    /// `None` if `len` is longer than the family's.
    pub fn new(address: IpAddr, len: u8) -> Option<Prefix> {
        match address {
            IpAddr::V4(v4) if len <= 32 => Some(Prefix { first: IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask32(len))), len }),
            IpAddr::V6(v6) if len <= 128 => Some(Prefix { first: IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask128(len))), len }),
            _ => None,
        }
    }

    pub fn first(&self) -> IpAddr {
        self.first
    }

    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// Whether `address` lies in this prefix (the same family only: an
    /// IPv4-mapped address is not in an IPv4 prefix, canonicalise it first).
    pub fn contains(&self, address: IpAddr) -> bool {
        match (self.first, address) {
            (IpAddr::V4(first), IpAddr::V4(address)) => u32::from(address) & mask32(self.len) == u32::from(first),
            (IpAddr::V6(first), IpAddr::V6(address)) => u128::from(address) & mask128(self.len) == u128::from(first),
            _ => false,
        }
    }

    /// Whether every address of `other` lies in this prefix.
    pub fn covers(&self, other: &Prefix) -> bool {
        self.len <= other.len && self.contains(other.first)
    }

    /// The NAT64 form of an IPv4 prefix (`64:ff9b::a.b.c.d/96+len`, RFC 6052).
    pub fn nat64(&self) -> Option<Prefix> {
        match self.first {
            IpAddr::V4(v4) => Some(Prefix::v6(NAT64_BITS | u128::from(u32::from(v4)), 96 + self.len)),
            IpAddr::V6(_) => None,
        }
    }

    /// The 6to4 form of an IPv4 prefix (`2002:aabb:ccdd::/16+len`, RFC 3056).
    pub fn six_to_four(&self) -> Option<Prefix> {
        match self.first {
            IpAddr::V4(v4) => Some(Prefix::v6(SIX_TO_FOUR_BITS | (u128::from(u32::from(v4)) << 80), 16 + self.len)),
            IpAddr::V6(_) => None,
        }
    }
}

/// `10.0.0.0/8`, `fc00::/7`. IPv6 is always written in hexadecimal groups,
/// never with the dotted tail the standard library writes for
/// `::ffff:a.b.c.d` (Cilium's CRD pattern for a CIDR refuses that form).
impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.first {
            IpAddr::V4(v4) => write!(f, "{v4}/{}", self.len),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => {
                    let [a, b, c, d] = v4.octets();
                    write!(f, "::ffff:{:x}:{:x}/{}", u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d]), self.len)
                }
                None => write!(f, "{v6}/{}", self.len),
            },
        }
    }
}

/// One special range: where it is, its class, how messages name it (the
/// sidecar's refusals quote it), and why it is special.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecialRange {
    pub prefix: Prefix,
    pub class: RangeClass,
    /// What it is, e.g. `loopback 127.0.0.0/8`.
    pub what: &'static str,
    /// Why a name must not open it (short).
    pub why: &'static str,
}

const fn range(prefix: Prefix, class: RangeClass, what: &'static str, why: &'static str) -> SpecialRange {
    SpecialRange { prefix, class, what, why }
}

use RangeClass::{Internal, Never};

/// Every special range. The first that covers an address names it, a
/// [`RangeClass::Never`] range before an internal one
/// (`255.255.255.255` lies in `240.0.0.0/4`).
pub const SPECIAL_RANGES: [SpecialRange; 30] = [
    range(Prefix::v4([0, 0, 0, 0], 8), Never, "\"this network\" 0.0.0.0/8", "RFC 1122: no destination; 0.0.0.0 is the local host"),
    range(Prefix::v4([127, 0, 0, 0], 8), Never, "loopback 127.0.0.0/8", "the machine itself"),
    range(
        Prefix::v4([169, 254, 0, 0], 16),
        Never,
        "link-local 169.254.0.0/16",
        "RFC 3927: the link; cloud metadata services (169.254.169.254)",
    ),
    range(Prefix::v4([224, 0, 0, 0], 4), Never, "multicast 224.0.0.0/4", "a group on the link, not a host"),
    range(Prefix::v4([255, 255, 255, 255], 32), Never, "broadcast 255.255.255.255", "everyone on the link"),
    range(Prefix::v4([10, 0, 0, 0], 8), Internal, "private network 10.0.0.0/8", "RFC 1918: the machine's or the cluster's neighbours"),
    range(Prefix::v4([172, 16, 0, 0], 12), Internal, "private network 172.16.0.0/12", "RFC 1918"),
    range(Prefix::v4([192, 168, 0, 0], 16), Internal, "private network 192.168.0.0/16", "RFC 1918"),
    range(Prefix::v4([100, 64, 0, 0], 10), Internal, "shared (CGNAT) network 100.64.0.0/10", "RFC 6598: a provider's inside"),
    range(Prefix::v4([192, 0, 0, 0], 24), Internal, "IETF protocol assignments 192.0.0.0/24", "RFC 6890: DS-Lite, NAT64 discovery"),
    range(Prefix::v4([192, 0, 2, 0], 24), Internal, "documentation network 192.0.2.0/24", "RFC 5737: no public host"),
    range(Prefix::v4([198, 51, 100, 0], 24), Internal, "documentation network 198.51.100.0/24", "RFC 5737: no public host"),
    range(Prefix::v4([203, 0, 113, 0], 24), Internal, "documentation network 203.0.113.0/24", "RFC 5737: no public host"),
    range(Prefix::v4([198, 18, 0, 0], 15), Internal, "benchmarking network 198.18.0.0/15", "RFC 2544: lab networks"),
    range(Prefix::v4([192, 88, 99, 0], 24), Internal, "6to4 relay anycast 192.88.99.0/24", "RFC 7526: deprecated relays"),
    range(Prefix::v4([240, 0, 0, 0], 4), Internal, "reserved network 240.0.0.0/4", "RFC 1112: reserved, used inside some networks"),
    range(Prefix::v6(1, 128), Never, "loopback ::1", "the machine itself"),
    range(Prefix::v6(0, 128), Never, "unspecified ::", "no destination; the local host"),
    range(Prefix::v6(0, 96), Never, "IPv4-compatible IPv6 ::/96", "deprecated (RFC 4291); carries any IPv4 address"),
    range(Prefix::v6(0xfe80 << 112, 10), Never, "link-local fe80::/10", "the link"),
    range(Prefix::v6(0xff00 << 112, 8), Never, "multicast ff00::/8", "a group, not a host"),
    range(Prefix::v6(0x0100 << 112, 64), Never, "discard-only 100::/64", "RFC 6666: a sink"),
    range(Prefix::v6(0xffff << 32, 96), Never, "IPv4-mapped ::ffff:0:0/96", "routed as IPv4: judged as the IPv4 address it maps"),
    range(Prefix::v6(0xfc00 << 112, 7), Internal, "unique local network fc00::/7", "RFC 4193: IPv6's private networks"),
    range(Prefix::v6(0xfec0 << 112, 10), Internal, "site-local network fec0::/10", "RFC 3879: deprecated private networks"),
    range(Prefix::v6(0x2001_0db8 << 96, 32), Internal, "documentation network 2001:db8::/32", "RFC 3849: no public host"),
    range(Prefix::v6(0x3fff << 112, 20), Internal, "documentation network 3fff::/20", "RFC 9637: no public host"),
    range(Prefix::v6(0x2001_0002 << 96, 48), Internal, "benchmarking network 2001:2::/48", "RFC 5180: lab networks"),
    range(Prefix::v6((0x0064_ff9b << 96) | (1 << 80), 48), Internal, "local-use NAT64 64:ff9b:1::/48", "RFC 8215: a local translator"),
    range(Prefix::v6(0xffff << 48, 96), Internal, "IPv4-translated ::ffff:0:0:0/96", "RFC 2765: an IPv4 host through a translator"),
];

/// The NAT64 well-known prefix `64:ff9b::/96` (RFC 6052).
pub const NAT64: Prefix = Prefix::v6(NAT64_BITS, 96);
/// The 6to4 prefix `2002::/16` (RFC 3056).
pub const SIX_TO_FOUR: Prefix = Prefix::v6(SIX_TO_FOUR_BITS, 16);
/// IPv4-mapped IPv6 `::ffff:0:0/96`.
pub const IPV4_MAPPED: Prefix = Prefix::v6(0xffff << 32, 96);

const NAT64_BITS: u128 = 0x0064_ff9b << 96;
const SIX_TO_FOUR_BITS: u128 = 0x2002 << 112;

/// The IPv4 address an IPv6 address carries through NAT64 or 6to4.
pub fn embedded_ipv4(address: Ipv6Addr) -> Option<Ipv4Addr> {
    let value = u128::from(address);
    if NAT64.contains(IpAddr::V6(address)) {
        Some(Ipv4Addr::from(value as u32))
    } else if SIX_TO_FOUR.contains(IpAddr::V6(address)) {
        Some(Ipv4Addr::from((value >> 80) as u32))
    } else {
        None
    }
}

/// The first range of `class` that covers `address` (as written).
fn find(address: IpAddr, class: RangeClass) -> Option<&'static SpecialRange> {
    SPECIAL_RANGES.iter().find(|range| range.class == class && range.prefix.contains(address))
}

/// The class of `address` and what it is, if it is special: the table (an
/// IPv4-mapped address judged as its IPv4 address), then the NAT64 and 6to4
/// forms, as special as the IPv4 address they carry. `None`: a remote host.
pub fn special(address: IpAddr) -> Option<(RangeClass, &'static str)> {
    let address = address.to_canonical();
    if let Some(range) = find(address, Never).or_else(|| find(address, Internal)) {
        return Some((range.class, range.what));
    }
    let IpAddr::V6(v6) = address else { return None };
    match special(IpAddr::V4(embedded_ipv4(v6)?))? {
        (Never, _) => Some((Never, "IPv6 form (NAT64 or 6to4) of an address no name may open")),
        (Internal, _) => Some((Internal, "IPv6 form (NAT64 or 6to4) of an internal IPv4 address")),
    }
}

/// How a range appears in a cluster policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// The range as the table has it.
    Itself,
    /// The NAT64 form of an IPv4 range.
    Nat64,
    /// The 6to4 form of an IPv4 range.
    SixToFour,
}

/// One prefix a cluster policy denies: a special range or one of its forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeniedPrefix {
    pub prefix: Prefix,
    pub form: Form,
    pub range: &'static SpecialRange,
}

/// Every prefix a policy object must deny so that its enforcer refuses what
/// the sidecar refuses a name's answer: each special range, and for each IPv4
/// range its NAT64 and 6to4 forms (of the same class), in table order.
///
/// Left out, as nothing would change: a range that another of the same
/// class covers (`::1/128` and `::/128` lie in `::/96`), and IPv4-mapped
/// IPv6 (`::ffff:0:0/96`). A connection to `::ffff:a.b.c.d` leaves as IPv4 to
/// `a.b.c.d` (the sidecar judges it so too), where the IPv4 ranges decide;
/// no packet carries such a destination. Written into a policy, the prefix
/// could do harm: Go's `net.ParseCIDR`, which Cilium's
/// `ComputeResultantCIDRSet` uses, gives an `IPNet` that prints and matches
/// as `0.0.0.0/0`, a deny of all IPv4.
pub fn cluster_denied() -> Vec<DeniedPrefix> {
    let mut denied = Vec::new();
    for range in SPECIAL_RANGES.iter() {
        let covered = SPECIAL_RANGES.iter().any(|other| {
            other != range && other.class == range.class && other.prefix.covers(&range.prefix) && other.prefix != range.prefix
        });
        if covered || IPV4_MAPPED.covers(&range.prefix) {
            continue;
        }
        denied.push(DeniedPrefix { prefix: range.prefix, form: Form::Itself, range });
        for (form, prefix) in [(Form::Nat64, range.prefix.nat64()), (Form::SixToFour, range.prefix.six_to_four())] {
            if let Some(prefix) = prefix {
                denied.push(DeniedPrefix { prefix, form, range });
            }
        }
    }
    denied
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn the_table_is_written_with_host_bits_zero() {
        for range in SPECIAL_RANGES.iter() {
            assert_eq!(Prefix::new(range.prefix.first(), range.prefix.prefix_len()), Some(range.prefix), "{}", range.what);
            assert!(
                range.what.contains(&range.prefix.to_string().replace("/32", "").replace("/128", "")),
                "{} names {}",
                range.what,
                range.prefix
            );
        }
    }

    #[test]
    fn prefixes_contain_cover_and_embed() {
        let ten = Prefix::v4([10, 0, 0, 0], 8);
        assert!(ten.contains(ip("10.255.0.1")) && !ten.contains(ip("11.0.0.1")) && !ten.contains(ip("::ffff:10.0.0.1")));
        assert!(ten.covers(&Prefix::v4([10, 1, 0, 0], 16)) && !Prefix::v4([10, 1, 0, 0], 16).covers(&ten));
        assert_eq!(ten.nat64().map(|p| p.to_string()).as_deref(), Some("64:ff9b::a00:0/104"));
        assert_eq!(ten.six_to_four().map(|p| p.to_string()).as_deref(), Some("2002:a00::/24"));
        assert_eq!(Prefix::v4([255, 255, 255, 255], 32).six_to_four().map(|p| p.to_string()).as_deref(), Some("2002:ffff:ffff::/48"));
        assert_eq!(IPV4_MAPPED.to_string(), "::ffff:0:0/96", "hexadecimal, never ::ffff:0.0.0.0");
        assert_eq!(Prefix::new(ip("::ffff:10.1.2.3"), 104).map(|p| p.to_string()).as_deref(), Some("::ffff:a00:0/104"));
        assert_eq!(Prefix::new(ip("10.1.2.3"), 33), None);
        assert_eq!(embedded_ipv4("64:ff9b::808:808".parse().unwrap()), Some(Ipv4Addr::new(8, 8, 8, 8)));
        assert_eq!(embedded_ipv4("2002:0a00:0001::1".parse().unwrap()), Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(embedded_ipv4("64:ff9b:1::1".parse().unwrap()), None);
    }

    #[test]
    fn addresses_are_judged_by_the_table_and_their_embedded_form() {
        assert_eq!(special(ip("169.254.169.254")), Some((Never, "link-local 169.254.0.0/16")));
        assert_eq!(special(ip("255.255.255.255")), Some((Never, "broadcast 255.255.255.255")), "never before internal");
        assert_eq!(special(ip("255.255.255.254")), Some((Internal, "reserved network 240.0.0.0/4")));
        assert_eq!(special(ip("::ffff:10.0.0.1")), Some((Internal, "private network 10.0.0.0/8")), "mapped: as IPv4");
        assert_eq!(special(ip("::1")), Some((Never, "loopback ::1")));
        assert_eq!(special(ip("::")), Some((Never, "unspecified ::")));
        assert!(matches!(special(ip("64:ff9b::7f00:1")), Some((Never, _))));
        assert!(matches!(special(ip("2002:c0a8:0101::1")), Some((Internal, _))));
        for remote in ["1.1.1.1", "64:ff9b::808:808", "2002:0808:0808::1", "2606:4700::1111"] {
            assert_eq!(special(ip(remote)), None, "{remote}");
        }
    }

    /// Every special address is refused by some denied prefix of its class,
    /// as written on the wire (IPv4-mapped as IPv4), and no public address is.
    #[test]
    fn the_cluster_denies_cover_every_special_address_and_nothing_else() {
        let denied = cluster_denied();
        // The strictest deny that covers the address as it goes on the wire.
        let deny_of = |address: IpAddr| {
            let classes: Vec<RangeClass> =
                denied.iter().filter(|d| d.prefix.contains(address.to_canonical())).map(|d| d.range.class).collect();
            [Never, Internal].into_iter().find(|class| classes.contains(class))
        };
        for range in SPECIAL_RANGES.iter() {
            for address in [range.prefix.first(), last(&range.prefix)] {
                assert_eq!(deny_of(address), special(address).map(|(class, _)| class), "{address} ({})", range.what);
                if let IpAddr::V4(v4) = address {
                    let nat64 = IpAddr::V6(Ipv6Addr::from(NAT64_BITS | u128::from(u32::from(v4))));
                    assert_eq!(deny_of(nat64), special(address).map(|(class, _)| class), "{nat64}");
                }
            }
        }
        for public in ["1.1.1.1", "8.8.8.8", "64:ff9b::808:808", "2002:0808:0808::1", "2606:4700::1111", "::ffff:1.1.1.1"] {
            assert_eq!(deny_of(ip(public)), None, "{public}");
        }
        assert!(denied.iter().all(|d| !IPV4_MAPPED.covers(&d.prefix)), "no IPv4-mapped prefix");
        assert!(!denied.iter().any(|d| d.prefix == Prefix::v6(1, 128)), "::1 lies in ::/96");
        assert_eq!(denied.len(), 16 * 3 + 11);
    }

    fn last(prefix: &Prefix) -> IpAddr {
        match prefix.first() {
            IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(u32::from(v4) | !mask32(prefix.prefix_len()))),
            IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) | !mask128(prefix.prefix_len()))),
        }
    }
}
