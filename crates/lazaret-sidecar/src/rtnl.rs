//! Synchronous rtnetlink for policy rules (`ip rule`), without an async runtime; and the
//! drop link with the unlisted table's routes (see `policy::unlisted_rules`).
//!
//! Rules that this sidecar installs carry the routing protocol [`RULE_PROTOCOL`], so a dump
//! tells them apart from the kernel's own (`local`, `main`, `default`) and from anything
//! podman added. A service rule (`policy::RuleSpec::service`) carries the IP protocol
//! (`FRA_IP_PROTO`) and, for TCP and UDP, the destination port as a range of one
//! (`FRA_DPORT_RANGE`); the kernel matches them against the flow a socket routes
//! (connect, or each datagram sent).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use netlink_packet_route::route::{RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage, RulePortRange};
use netlink_packet_route::{AddressFamily, IpProtocol, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use crate::policy::{sort_rules, subnet_broadcast, Cidr, RuleSpec, Service, Verdict, RT_TABLE_LOCAL, RT_TABLE_MAIN, RT_TABLE_UNLISTED};

/// `FRA_PROTOCOL` value marking this sidecar's rules (unassigned in `rtnetlink.h`).
pub const RULE_PROTOCOL: u8 = 0x4c;
/// The drop link: an `ifb` device (no `dummy` in every kernel) that discards whatever is
/// sent on it, with no neighbour resolution (`NOARP`). Packets routed to it pass the
/// netfilter output hook first, where `nft.rs` logs and refuses them.
pub const DROP_LINK: &str = "lzdrop";

pub struct Rtnl {
    socket: Socket,
    seq: u32,
}

impl Rtnl {
    pub fn open() -> io::Result<Rtnl> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        Ok(Rtnl { socket, seq: 0 })
    }

    /// Every rule (both families) that carries [`RULE_PROTOCOL`].
    pub fn dump_rules(&mut self) -> io::Result<Vec<RuleSpec>> {
        let mut out = Vec::new();
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut msg = RuleMessage::default();
            msg.header.family = family;
            let replies = match self.request(RouteNetlinkMessage::GetRule(msg), NLM_F_DUMP) {
                Ok(r) => r,
                // IPv6 compiled out or disabled: nothing of ours can be there.
                Err(e) if family == AddressFamily::Inet6 && e.raw_os_error() == Some(libc::EAFNOSUPPORT) => continue,
                Err(e) => return Err(e),
            };
            for reply in replies {
                if let RouteNetlinkMessage::NewRule(rule) = reply {
                    if let Some(spec) = spec_of(&rule) {
                        out.push(spec);
                    }
                }
            }
        }
        sort_rules(&mut out);
        Ok(out)
    }

    /// The directed broadcast addresses of this namespace's IPv4 subnets.
    pub fn ipv4_broadcasts(&mut self) -> io::Result<Vec<Ipv4Addr>> {
        let mut msg = AddressMessage::default();
        msg.header.family = AddressFamily::Inet;
        let mut out = Vec::new();
        for reply in self.request(RouteNetlinkMessage::GetAddress(msg), NLM_F_DUMP)? {
            let RouteNetlinkMessage::NewAddress(address) = reply else { continue };
            let mut broadcast = None;
            let mut local = None;
            for attribute in &address.attributes {
                match attribute {
                    AddressAttribute::Broadcast(b) => broadcast = Some(*b),
                    AddressAttribute::Local(IpAddr::V4(a)) | AddressAttribute::Address(IpAddr::V4(a)) => local = local.or(Some(*a)),
                    _ => {}
                }
            }
            let computed = local.and_then(|a| subnet_broadcast(a, address.header.prefix_len));
            for candidate in [broadcast, computed].into_iter().flatten() {
                if !candidate.is_loopback() && !out.contains(&candidate) {
                    out.push(candidate);
                }
            }
        }
        Ok(out)
    }

    /// Deletes the kernel's `lookup local` rule at priority 0 (both families), once the
    /// guard rules and the moved `lookup local` rule are in place. Gone already is fine.
    pub fn delete_priority_zero_local_rules(&mut self) -> io::Result<()> {
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut msg = RuleMessage::default();
            msg.header.family = family;
            msg.header.action = RuleAction::ToTable;
            msg.header.table = RT_TABLE_LOCAL as u8;
            msg.attributes.push(RuleAttribute::Table(RT_TABLE_LOCAL));
            msg.attributes.push(RuleAttribute::Priority(0));
            match self.request(RouteNetlinkMessage::DelRule(msg), NLM_F_ACK) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::EAFNOSUPPORT)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Creates [`DROP_LINK`] (or finds the one an earlier sidecar left), sets it up and
    /// routes everything in [`RT_TABLE_UNLISTED`] out of it, IPv4 and, where the
    /// namespace has it, IPv6; returns the link's index.
    pub fn ensure_drop_link(&mut self) -> io::Result<u32> {
        let mut create = LinkMessage::default();
        create.attributes.push(LinkAttribute::IfName(DROP_LINK.to_owned()));
        create.attributes.push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Ifb)]));
        match self.request(RouteNetlinkMessage::NewLink(create), NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL) {
            Err(e) if e.raw_os_error() != Some(libc::EEXIST) => return Err(with_context(e, "creating the drop link")),
            _ => {}
        }
        let mut get = LinkMessage::default();
        get.attributes.push(LinkAttribute::IfName(DROP_LINK.to_owned()));
        let link = self
            .request(RouteNetlinkMessage::GetLink(get), NLM_F_ACK)?
            .into_iter()
            .find_map(|reply| match reply {
                RouteNetlinkMessage::NewLink(link) => Some(link),
                _ => None,
            })
            .ok_or_else(|| io::Error::other(format!("the drop link {DROP_LINK} is not there after creating it")))?;
        // A link of that name that is no `ifb` (made by something else) would send.
        let is_ifb = link.attributes.iter().any(|attribute| {
            matches!(attribute, LinkAttribute::LinkInfo(infos) if infos.iter().any(|info| matches!(info, LinkInfo::Kind(InfoKind::Ifb))))
        });
        if !is_ifb {
            return Err(io::Error::other(format!("a link named {DROP_LINK} exists and is not an ifb link; not using it")));
        }
        let index = link.header.index;
        let mut up = LinkMessage::default();
        up.header.index = index;
        up.header.flags = LinkFlags::Up;
        up.header.change_mask = LinkFlags::Up;
        self.request(RouteNetlinkMessage::SetLink(up), NLM_F_ACK).map_err(|e| with_context(e, "setting the drop link up"))?;
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut route = RouteMessage::default();
            route.header.address_family = family;
            route.header.table = RT_TABLE_UNLISTED as u8;
            route.header.protocol = RouteProtocol::Static;
            route.header.scope = if family == AddressFamily::Inet { RouteScope::Link } else { RouteScope::Universe };
            route.header.kind = RouteType::Unicast;
            route.attributes.push(RouteAttribute::Table(RT_TABLE_UNLISTED));
            route.attributes.push(RouteAttribute::Oif(index));
            match self.request(RouteNetlinkMessage::NewRoute(route), NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE) {
                Ok(_) => {}
                // IPv6 compiled out or disabled: unlisted IPv6 destinations find no
                // route in the table and fall through to the catch-all `prohibit`.
                Err(_) if family == AddressFamily::Inet6 => {}
                Err(e) => return Err(with_context(e, "routing the unlisted table to the drop link")),
            }
        }
        Ok(index)
    }

    pub fn add_rule(&mut self, spec: &RuleSpec) -> io::Result<()> {
        let msg = message_of(spec);
        self.request(RouteNetlinkMessage::NewRule(msg), NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL).map(drop)
    }

    pub fn del_rule(&mut self, spec: &RuleSpec) -> io::Result<()> {
        let msg = message_of(spec);
        self.request(RouteNetlinkMessage::DelRule(msg), NLM_F_ACK).map(drop)
    }

    /// Sends one request and collects the replies: for a dump every message up to
    /// `NLMSG_DONE`, otherwise up to the acknowledgement. A kernel error becomes `Err`.
    fn request(&mut self, msg: RouteNetlinkMessage, flags: u16) -> io::Result<Vec<RouteNetlinkMessage>> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
        packet.finalize();
        let mut buf = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut buf);
        self.socket.send(&buf, 0)?;

        let mut replies = Vec::new();
        loop {
            let (data, _) = self.socket.recv_from_full()?;
            let mut offset = 0;
            while offset < data.len() {
                let bytes = &data[offset..];
                let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(bytes)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("netlink: {e}")))?;
                let len = reply.header.length as usize;
                if len == 0 {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "netlink: zero-length message"));
                }
                offset += (len + 3) & !3;
                if reply.header.sequence_number != seq {
                    continue; // a late answer to an earlier request
                }
                match reply.payload {
                    NetlinkPayload::Done(_) => return Ok(replies),
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            None => Ok(replies),
                            Some(_) => Err(e.to_io()),
                        };
                    }
                    NetlinkPayload::InnerMessage(m) => replies.push(m),
                    _ => {}
                }
            }
        }
    }
}

fn with_context(error: io::Error, what: &str) -> io::Error {
    io::Error::new(error.kind(), format!("{what}: {error}"))
}

fn message_of(spec: &RuleSpec) -> RuleMessage {
    let mut msg = RuleMessage::default();
    msg.header.family = if spec.dst.is_ipv4() { AddressFamily::Inet } else { AddressFamily::Inet6 };
    msg.header.dst_len = spec.dst.prefix_len();
    match spec.verdict {
        Verdict::Allow => {
            msg.header.action = RuleAction::ToTable;
            msg.header.table = RT_TABLE_MAIN as u8;
            msg.attributes.push(RuleAttribute::Table(RT_TABLE_MAIN));
        }
        Verdict::Deny => msg.header.action = RuleAction::Prohibit,
        Verdict::Local => {
            msg.header.action = RuleAction::ToTable;
            msg.header.table = RT_TABLE_LOCAL as u8;
            msg.attributes.push(RuleAttribute::Table(RT_TABLE_LOCAL));
        }
        Verdict::Unlisted => {
            msg.header.action = RuleAction::ToTable;
            msg.header.table = RT_TABLE_UNLISTED as u8;
            msg.attributes.push(RuleAttribute::Table(RT_TABLE_UNLISTED));
        }
    }
    if spec.local_only {
        msg.attributes.push(RuleAttribute::Iifname("lo".to_owned()));
    }
    if !spec.dst.is_default() {
        msg.attributes.push(RuleAttribute::Destination(spec.dst.addr()));
    }
    if spec.mark != 0 {
        msg.attributes.push(RuleAttribute::FwMark(spec.mark));
        msg.attributes.push(RuleAttribute::FwMask(u32::MAX));
    }
    if let Some(service) = spec.service {
        msg.attributes.push(RuleAttribute::IpProtocol(IpProtocol::from(service.protocol())));
        if let Some(port) = service.port() {
            msg.attributes.push(RuleAttribute::DestinationPortRange(RulePortRange { start: port, end: port }));
        }
    }
    msg.attributes.push(RuleAttribute::Priority(spec.priority));
    msg.attributes.push(RuleAttribute::Protocol(RouteProtocol::Other(RULE_PROTOCOL)));
    msg
}

/// The [`RuleSpec`] of a dumped rule, if it is one of ours and of a shape we install.
fn spec_of(rule: &RuleMessage) -> Option<RuleSpec> {
    let mut dst = None;
    let mut priority = 0;
    let mut ours = false;
    let mut mark = 0;
    let mut local_only = false;
    let mut table = u32::from(rule.header.table);
    let mut protocol = None;
    let mut ports = None;
    for attr in &rule.attributes {
        match attr {
            RuleAttribute::Destination(a) => dst = Some(*a),
            RuleAttribute::Priority(p) => priority = *p,
            RuleAttribute::Protocol(p) => ours = u8::from(*p) == RULE_PROTOCOL,
            RuleAttribute::Table(t) => table = *t,
            RuleAttribute::FwMark(m) => mark = *m,
            RuleAttribute::Iifname(name) => local_only = name == "lo",
            RuleAttribute::IpProtocol(p) => protocol = Some(u8::from(*p)),
            RuleAttribute::DestinationPortRange(range) => ports = Some(*range),
            _ => {}
        }
    }
    if !ours {
        return None;
    }
    // Protocol 0 is "every protocol" to the kernel (it never dumps it); a port needs a
    // protocol; only ranges of one port are ours.
    let service = match (protocol, ports) {
        (None | Some(0), None) => None,
        (Some(protocol), None) => Some(Service::new(protocol, None).ok()?),
        (Some(protocol), Some(range)) if protocol != 0 && range.start == range.end => Some(Service::new(protocol, Some(range.start)).ok()?),
        _ => return None,
    };
    let addr = match (dst, rule.header.family) {
        (Some(a), _) => a,
        (None, AddressFamily::Inet) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        (None, AddressFamily::Inet6) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        (None, _) => return None,
    };
    let verdict = match rule.header.action {
        RuleAction::ToTable if table == RT_TABLE_MAIN => Verdict::Allow,
        RuleAction::ToTable if table == RT_TABLE_LOCAL => Verdict::Local,
        RuleAction::ToTable if table == RT_TABLE_UNLISTED => Verdict::Unlisted,
        RuleAction::Prohibit => Verdict::Deny,
        _ => return None,
    };
    Some(RuleSpec { dst: Cidr::new(addr, rule.header.dst_len)?, verdict, priority, mark, local_only, service })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;

    #[test]
    fn messages_round_trip_through_the_dump_parser() {
        let mut p = Policy::new();
        p.allow(Cidr::parse("10.213.0.10").unwrap());
        p.deny(Cidr::parse("10.213.0.10").unwrap());
        p.allow(Cidr::parse("10.0.0.0/8").unwrap());
        p.deny(Cidr::parse("10.9.0.0/16").unwrap());
        p.allow(Cidr::parse("fd00::/64").unwrap());
        let mut rules = p.rules();
        rules.push(RuleSpec {
            dst: Cidr::parse("10.213.0.53").unwrap(),
            verdict: Verdict::Allow,
            priority: crate::policy::UPSTREAM_PRIORITY,
            mark: crate::policy::DNS_MARK,
            local_only: false,
            service: None,
        });
        rules.extend(crate::policy::guard_rules(&[Ipv4Addr::new(10, 213, 5, 255)]));
        let denied = [Cidr::parse("192.0.2.0/24").unwrap()];
        rules.extend(crate::policy::unlisted_rules(&p.rules(), &denied));
        for spec in rules {
            let msg = message_of(&spec);
            assert_eq!(spec_of(&msg), Some(spec), "{spec}");
        }
    }

    #[test]
    fn service_rules_round_trip_with_their_protocol_and_port() {
        let mut p = Policy::new();
        let address = |text: &str| text.parse::<IpAddr>().unwrap();
        let service = |text: &str| Service::parse(text).unwrap();
        p.allow_service(address("10.9.0.7"), service("tcp/8081"));
        p.allow_service(address("10.9.0.7"), service("udp/65535"));
        p.deny_service(address("10.9.0.7"), service("tcp/1"));
        p.allow_service(address("fd00::7"), service("132"));
        p.deny_service(address("fd00::7"), service("udp/53"));
        let services: Vec<RuleSpec> = p.rules().into_iter().filter(|rule| rule.service.is_some()).collect();
        assert_eq!(services.len(), 5);
        for spec in services {
            let msg = message_of(&spec);
            let protocol = msg.attributes.iter().find_map(|a| match a {
                RuleAttribute::IpProtocol(p) => Some(u8::from(*p)),
                _ => None,
            });
            assert_eq!(protocol, spec.service.map(|s| s.protocol()), "{spec}");
            let port = msg.attributes.iter().find_map(|a| match a {
                RuleAttribute::DestinationPortRange(range) => Some((range.start, range.end)),
                _ => None,
            });
            assert_eq!(port, spec.service.and_then(|s| s.port()).map(|port| (port, port)), "{spec}");
            assert_eq!(spec_of(&msg), Some(spec), "{spec}");
        }
        // Shapes this sidecar never installs are not taken for its own.
        let mut spec = Policy::new();
        spec.allow_service(address("10.9.0.7"), service("tcp/80"));
        let rule = spec.rules().into_iter().find(|rule| rule.service.is_some()).unwrap();
        let mut range = message_of(&rule);
        for attribute in range.attributes.iter_mut() {
            if let RuleAttribute::DestinationPortRange(ports) = attribute {
                ports.end = 90;
            }
        }
        assert_eq!(spec_of(&range), None, "a range of ports");
        let mut no_port = message_of(&rule);
        no_port.attributes.retain(|a| !matches!(a, RuleAttribute::DestinationPortRange(_)));
        assert_eq!(spec_of(&no_port), None, "tcp without a port");
    }

    #[test]
    fn foreign_rules_are_ignored() {
        let mut msg = RuleMessage::default();
        msg.header.family = AddressFamily::Inet;
        msg.header.action = RuleAction::ToTable;
        msg.header.table = 255;
        msg.attributes.push(RuleAttribute::Table(255));
        assert_eq!(spec_of(&msg), None);
    }
}
