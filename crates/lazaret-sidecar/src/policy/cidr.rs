//! An IPv4 or IPv6 network in CIDR notation ([`Cidr`]): parsed strictly
//! (a bare address is a host, /32 or /128), its host bits always cleared, so
//! that two spellings of one network are one value.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An IPv4 or IPv6 network in CIDR notation, with host bits cleared.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Cidr {
    pub(super) addr: IpAddr,
    pub(super) len: u8,
}

impl Cidr {
    /// Builds a CIDR, clearing host bits. `None` if `len` is too long for the family.
    pub fn new(addr: IpAddr, len: u8) -> Option<Cidr> {
        let max = max_len(&addr);
        if len > max {
            return None;
        }
        Some(Cidr { addr: mask(addr, len), len })
    }

    /// The first and last address of the network, as numbers of its family.
    pub fn bounds(&self) -> (u128, u128) {
        let (value, bits) = match self.addr {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32u32),
            IpAddr::V6(v6) => (u128::from(v6), 128u32),
        };
        let host_bits = bits - u32::from(self.len);
        let span = if host_bits == 128 { u128::MAX } else { (1u128 << host_bits) - 1 };
        (value, value | span)
    }

    /// The network holding exactly `addr`.
    pub fn host(addr: IpAddr) -> Cidr {
        Cidr { addr, len: max_len(&addr) }
    }

    /// Parses `a.b.c.d/n`, `x::y/n`, or a bare address (a host: /32 or /128).
    /// Host bits are cleared (`10.0.0.5/24` is `10.0.0.0/24`).
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let text = text.trim();
        if text.is_empty() || text.len() > 64 {
            return Err(format!("not a CIDR: {text:?}"));
        }
        let (addr_text, len_text) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (text, None),
        };
        let addr: IpAddr = addr_text.parse().map_err(|_| format!("not an IP address: {addr_text:?}"))?;
        let len = match len_text {
            None => max_len(&addr),
            Some(l) => {
                if l.is_empty() || l.len() > 3 || !l.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(format!("bad prefix length in {text:?}"));
                }
                l.parse::<u8>().map_err(|_| format!("bad prefix length in {text:?}"))?
            }
        };
        Cidr::new(addr, len).ok_or_else(|| format!("prefix length {len} too long in {text:?}"))
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }

    /// The whole address space of the family (`0.0.0.0/0` or `::/0`).
    pub fn is_default(&self) -> bool {
        self.len == 0
    }

    /// Whether `other` lies inside `self` (equal counts).
    pub fn contains(&self, other: &Cidr) -> bool {
        self.addr.is_ipv4() == other.addr.is_ipv4() && self.len <= other.len && mask(other.addr, self.len) == self.addr
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

pub(super) fn max_len(addr: &IpAddr) -> u8 {
    if addr.is_ipv4() {
        32
    } else {
        128
    }
}

fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = if len == 0 { 0 } else { u128::MAX << (128 - u32::from(len)) };
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests::c;

    #[test]
    fn parses_and_normalizes() {
        assert_eq!(c("10.0.0.5").to_string(), "10.0.0.5/32");
        assert_eq!(c("10.0.0.5/24").to_string(), "10.0.0.0/24");
        assert_eq!(c(" 0.0.0.0/0 ").to_string(), "0.0.0.0/0");
        assert_eq!(c("fd00::1").to_string(), "fd00::1/128");
        assert_eq!(c("fd00:1:2:3::7/48").to_string(), "fd00:1:2::/48");
        assert_eq!(c("::/0").to_string(), "::/0");
        assert!(c("::/0").is_default());
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "10.0.0.1/33",
            "fd00::/129",
            "10.0.0/8",
            "10.0.0.1/",
            "10.0.0.1/+8",
            "10.0.0.1/-1",
            "example.com",
            "10.0.0.1/8/8",
            "1.2.3.4 /8",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn containment() {
        assert!(c("10.0.0.0/8").contains(&c("10.1.2.3")));
        assert!(c("10.0.0.0/8").contains(&c("10.0.0.0/8")));
        assert!(!c("10.1.0.0/16").contains(&c("10.0.0.0/8")));
        assert!(!c("0.0.0.0/0").contains(&c("::1")));
        assert!(c("::/0").contains(&c("fd00::1")));
    }
}
