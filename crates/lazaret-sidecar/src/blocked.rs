//! Connections to addresses no entry covers, as questions for the human: the drop
//! link's packets arrive here from nfnetlink_log (`nft.rs` logs them to
//! [`LOG_GROUP`]), and each destination (address, protocol and port) becomes a
//! `connectBlocked` event while questions are held (`[network] ask`), so that the
//! coordinator offers that protocol and port of the address as a network request.
//! The packet itself was refused already; an `allow` of the service
//! (`10.9.0.7/32 tcp/8081`) opens it for the next try, and only it: another port of
//! the same address reaches the drop link again and is a question of its own.
//!
//! Only what opens a conversation is reported: a TCP SYN, a UDP datagram, an ICMP
//! echo request. Not the kernel's own answers to a peer (a reset, an ICMP error, a
//! SYN-ACK) nor the rest of a flow whose grant just ended: those would offer an
//! address nobody inside chose. Nor addresses that are no remote host at all
//! (loopback, link-local, multicast, broadcast, "this network"), nor what the policy
//! decides by name (an explicit deny, a protected address, an allowed one without a
//! route, a service that is an entry itself; `Enforcer::offers`: routing alone is not
//! trusted with it, since a sender that names its output interface gets past
//! `prohibit`), nor the same destination (address, protocol and port) again within
//! [`REPEAT_WINDOW`] (a client retrying; the coordinator counts repeats of a pending
//! request anyway).
//!
//! The messages are written and read by hand (`linux/netfilter/nfnetlink_log.h`),
//! as in `nft.rs`.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lazaret_protocol::sidecar::{Service, SidecarEvent};
use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

use crate::addresses::{classify, Class};
use crate::dns::Shared;
use crate::nft::{LOG_GROUP, LOG_SNAPLEN};

// linux/netlink.h, linux/netfilter/nfnetlink.h, linux/netfilter/nfnetlink_log.h
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLMSG_ERROR: u16 = 0x2;
const NFNL_SUBSYS_ULOG: u16 = 4;
const NFULNL_MSG_PACKET: u16 = 0;
const NFULNL_MSG_CONFIG: u16 = 1;
const NFULA_PAYLOAD: u16 = 9;
const NFULA_CFG_CMD: u16 = 1;
const NFULA_CFG_MODE: u16 = 2;
const NFULA_CFG_QTHRESH: u16 = 5;
const NFULNL_CFG_CMD_BIND: u8 = 1;
const NFULNL_COPY_PACKET: u8 = 2;
const NLA_TYPE_MASK: u16 = 0x3fff;
const IPPROTO_ICMP: u8 = 1;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const IPPROTO_ICMPV6: u8 = 58;
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;
const ICMP_ECHO_REQUEST: u8 = 8;
const ICMPV6_ECHO_REQUEST: u8 = 128;

/// A destination reported once is not reported again within this window.
pub const REPEAT_WINDOW: Duration = Duration::from_secs(2);
/// Destinations remembered for [`REPEAT_WINDOW`] at most; beyond that the oldest go.
const REMEMBERED: usize = 1024;

/// Where a logged packet was going.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Destination {
    pub address: IpAddr,
    /// The IP protocol number (IPv6: the first next header).
    pub protocol: u8,
    /// The destination port of TCP and UDP.
    pub port: Option<u16>,
    /// Whether the packet opens a conversation (see the module's documentation).
    pub opens: bool,
}

impl Destination {
    /// The packet's destination, from its first bytes (an IPv4 or IPv6 header and
    /// what follows); `None` for anything else or too short.
    pub fn of_packet(packet: &[u8]) -> Option<Destination> {
        let version = packet.first()? >> 4;
        let (address, protocol, transport) = match version {
            4 => {
                let header_length = usize::from(packet[0] & 0x0f) * 4;
                let address: [u8; 4] = packet.get(16..20)?.try_into().ok()?;
                (IpAddr::V4(Ipv4Addr::from(address)), *packet.get(9)?, header_length.max(20))
            }
            6 => {
                let address: [u8; 16] = packet.get(24..40)?.try_into().ok()?;
                (IpAddr::V6(Ipv6Addr::from(address)), *packet.get(6)?, 40)
            }
            _ => return None,
        };
        let port = match protocol {
            IPPROTO_TCP | IPPROTO_UDP => packet.get(transport + 2..transport + 4).map(|p| u16::from_be_bytes([p[0], p[1]])),
            _ => None,
        };
        let opens = match protocol {
            IPPROTO_TCP => packet.get(transport + 13).is_some_and(|flags| flags & (TCP_SYN | TCP_ACK) == TCP_SYN),
            IPPROTO_UDP => true,
            IPPROTO_ICMP => packet.get(transport) == Some(&ICMP_ECHO_REQUEST),
            IPPROTO_ICMPV6 => packet.get(transport) == Some(&ICMPV6_ECHO_REQUEST),
            _ => false,
        };
        Some(Destination { address: address.to_canonical(), protocol, port, opens })
    }

    /// The protocol and port as an entry names them (`None`: TCP or UDP without a port,
    /// cut off by the snap length).
    pub fn service(&self) -> Option<Service> {
        Service::new(self.protocol, self.port).ok()
    }

    /// The event for this destination.
    pub fn event(&self) -> SidecarEvent {
        let protocol = match self.protocol {
            IPPROTO_TCP => "tcp".to_owned(),
            IPPROTO_UDP => "udp".to_owned(),
            other => other.to_string(),
        };
        SidecarEvent::ConnectBlocked { address: self.address.to_string(), protocol, port: self.port, suppressed: None }
    }
}

/// A destination as [`Recent`] tells them apart: address, protocol, port.
type Reported = (IpAddr, u8, Option<u16>);

/// Which destinations were reported lately (see [`REPEAT_WINDOW`]).
#[derive(Default)]
pub struct Recent {
    reported: HashMap<Reported, Instant>,
}

impl Recent {
    /// Whether `destination` is to be reported at `now` (and, if so, remembers it).
    pub fn report(&mut self, destination: &Destination, now: Instant) -> bool {
        let key = (destination.address, destination.protocol, destination.port);
        if self.reported.get(&key).is_some_and(|at| now.duration_since(*at) < REPEAT_WINDOW) {
            return false;
        }
        if self.reported.len() >= REMEMBERED {
            self.reported.retain(|_, at| now.duration_since(*at) < REPEAT_WINDOW);
            if self.reported.len() >= REMEMBERED {
                if let Some(oldest) = self.reported.iter().min_by_key(|(_, at)| **at).map(|(address, _)| *address) {
                    self.reported.remove(&oldest);
                }
            }
        }
        self.reported.insert(key, now);
        true
    }
}

/// Whether a connection to `address` may be offered to the human at all.
pub fn offerable(address: IpAddr) -> bool {
    !matches!(classify(address, &[]), Class::Never(_))
}

/// The nfnetlink_log socket bound to [`LOG_GROUP`].
pub struct Log {
    socket: Socket,
}

impl Log {
    /// Binds [`LOG_GROUP`] and asks for the packets' first [`LOG_SNAPLEN`] bytes.
    pub fn open() -> io::Result<Log> {
        let mut socket = Socket::new(NETLINK_NETFILTER)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        let mut log = Log { socket };
        let mut bind = config_message(1);
        put(&mut bind, NFULA_CFG_CMD, &[NFULNL_CFG_CMD_BIND]);
        log.configure(bind)?;
        let mut mode = config_message(2);
        let mut data = LOG_SNAPLEN.to_be_bytes().to_vec();
        data.extend([NFULNL_COPY_PACKET, 0]);
        put(&mut mode, NFULA_CFG_MODE, &data);
        // Each packet at once (the default waits for 100 of them, or a second).
        put(&mut mode, NFULA_CFG_QTHRESH, &1u32.to_be_bytes());
        log.configure(mode)?;
        Ok(log)
    }

    fn configure(&mut self, mut message: Vec<u8>) -> io::Result<()> {
        let length = message.len() as u32;
        message[0..4].copy_from_slice(&length.to_ne_bytes());
        self.socket.send(&message, 0)?;
        loop {
            let (data, _) = self.socket.recv_from_full()?;
            for (kind, body) in messages(&data) {
                if kind == NLMSG_ERROR && body.len() >= 4 {
                    let code = i32::from_ne_bytes([body[0], body[1], body[2], body[3]]);
                    return if code == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(-code)) };
                }
            }
        }
    }

    /// The destinations of the next logged packets (blocks until there are some).
    pub fn read(&mut self) -> io::Result<Vec<Destination>> {
        let (data, _) = self.socket.recv_from_full()?;
        let mut out = Vec::new();
        for (kind, body) in messages(&data) {
            if kind != (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET {
                continue;
            }
            // nfgenmsg (4 bytes), then attributes.
            if let Some(payload) = body.get(4..).and_then(|attributes| attribute(attributes, NFULA_PAYLOAD)) {
                out.extend(Destination::of_packet(payload));
            }
        }
        Ok(out)
    }
}

/// Reads logged packets until the socket fails; reports each offerable destination
/// while questions are held. If the log fails for good, the sidecar goes back to
/// the `prohibit` catch-all: nothing would be offered any more.
pub fn serve(mut log: Log, shared: Arc<Shared>) {
    let mut recent = Recent::default();
    loop {
        let destinations = match log.read() {
            Ok(destinations) => destinations,
            // The kernel dropped messages for a full receive buffer: read on.
            Err(error) if error.raw_os_error() == Some(libc::ENOBUFS) => continue,
            Err(error) => {
                eprintln!(
                    "lazaret-sidecar: blocked connections are no longer reported ({error}); unlisted destinations are prohibited again"
                );
                if let Err(error) = shared.enforcer().stop_using_drop_link() {
                    eprintln!("lazaret-sidecar: could not put the prohibit catch-all back: {error}");
                }
                return;
            }
        };
        let offered: Vec<Destination> = {
            let enforcer = shared.enforcer();
            if enforcer.state().hold.is_zero() {
                continue;
            }
            destinations.into_iter().filter(|d| d.opens && offerable(d.address) && enforcer.offers(d.address, d.service())).collect()
        };
        for destination in offered {
            if recent.report(&destination, Instant::now()) {
                let service = destination.service().map(|service| format!(" {service}")).unwrap_or_default();
                eprintln!("lazaret-sidecar: blocked a connection to {}{service} (no entry covers it)", destination.address);
                shared.events.emit(destination.event());
            }
        }
    }
}

/// A config message for [`LOG_GROUP`], numbered `sequence` (length set when sent).
fn config_message(sequence: u32) -> Vec<u8> {
    let mut message = Vec::with_capacity(48);
    message.extend_from_slice(&0u32.to_ne_bytes());
    message.extend_from_slice(&((NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG).to_ne_bytes());
    message.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    message.extend_from_slice(&sequence.to_ne_bytes());
    message.extend_from_slice(&0u32.to_ne_bytes());
    message.push(libc::AF_UNSPEC as u8);
    message.push(0); // NFNETLINK_V0
    message.extend_from_slice(&LOG_GROUP.to_be_bytes());
    message
}

fn put(message: &mut Vec<u8>, kind: u16, data: &[u8]) {
    message.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
    message.extend_from_slice(&kind.to_ne_bytes());
    message.extend_from_slice(data);
    while !message.len().is_multiple_of(4) {
        message.push(0);
    }
}

/// The netlink messages in `data`: (type, body after the 16-byte header).
fn messages(data: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut offset = 0;
    while let Some(header) = data.get(offset..offset + 16) {
        let length = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let kind = u16::from_ne_bytes([header[4], header[5]]);
        let Some(body) = data.get(offset + 16..offset + length).filter(|_| length >= 16) else { break };
        out.push((kind, body));
        offset += (length + 3) & !3;
    }
    out
}

/// The first attribute of `kind` in `attributes`.
fn attribute(attributes: &[u8], kind: u16) -> Option<&[u8]> {
    let mut offset = 0;
    while let Some(header) = attributes.get(offset..offset + 4) {
        let length = usize::from(u16::from_ne_bytes([header[0], header[1]]));
        let found = u16::from_ne_bytes([header[2], header[3]]) & NLA_TYPE_MASK;
        let data = attributes.get(offset + 4..offset + length).filter(|_| length >= 4)?;
        if found == kind {
            return Some(data);
        }
        offset += (length + 3) & !3;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_tcp(destination: [u8; 4], port: u16) -> Vec<u8> {
        ipv4_tcp_flags(destination, port, TCP_SYN)
    }

    fn ipv4_tcp_flags(destination: [u8; 4], port: u16, flags: u8) -> Vec<u8> {
        let mut packet = vec![0x45, 0, 0, 60, 0, 0, 0x40, 0, 64, IPPROTO_TCP, 0, 0, 10, 88, 0, 2];
        packet.extend(destination);
        packet.extend(40000u16.to_be_bytes());
        packet.extend(port.to_be_bytes());
        packet.extend([0; 16]);
        packet[20 + 13] = flags;
        packet
    }

    #[test]
    fn destinations_are_read_from_ipv4_and_ipv6_headers() {
        assert_eq!(
            Destination::of_packet(&ipv4_tcp([10, 9, 0, 7], 8080)),
            Some(Destination { address: "10.9.0.7".parse().unwrap(), protocol: IPPROTO_TCP, port: Some(8080), opens: true })
        );
        let mut v6 = vec![0x60, 0, 0, 0, 0, 8, IPPROTO_UDP, 64];
        v6.extend("fd00::1".parse::<Ipv6Addr>().unwrap().octets());
        v6.extend("fd00::7".parse::<Ipv6Addr>().unwrap().octets());
        v6.extend(5353u16.to_be_bytes());
        v6.extend(53u16.to_be_bytes());
        assert_eq!(
            Destination::of_packet(&v6),
            Some(Destination { address: "fd00::7".parse().unwrap(), protocol: IPPROTO_UDP, port: Some(53), opens: true })
        );
        // IPv4-mapped is the IPv4 address it is; another protocol has no port.
        let mut mapped = v6.clone();
        mapped[6] = 47;
        mapped[24..40].copy_from_slice(&"::ffff:10.9.0.7".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(
            Destination::of_packet(&mapped),
            Some(Destination { address: "10.9.0.7".parse().unwrap(), protocol: 47, port: None, opens: false })
        );
        // Truncated or not IP: nothing.
        assert_eq!(Destination::of_packet(&ipv4_tcp([10, 9, 0, 7], 80)[..19]), None);
        assert_eq!(Destination::of_packet(&[0x20; 40]), None);
        assert_eq!(Destination::of_packet(&[]), None);
        let cut = &ipv4_tcp([10, 9, 0, 7], 80)[..21];
        assert_eq!(Destination::of_packet(cut).map(|d| (d.port, d.opens)), Some((None, false)), "past the snap length: unknown");
    }

    #[test]
    fn only_what_opens_a_conversation_is_reported() {
        let opens = |packet: &[u8]| Destination::of_packet(packet).is_some_and(|d| d.opens);
        assert!(opens(&ipv4_tcp_flags([10, 9, 0, 7], 80, TCP_SYN)));
        for answer in [TCP_SYN | TCP_ACK, TCP_ACK, 0x04 /* RST */, 0x04 | TCP_ACK, 0x01 | TCP_ACK /* FIN */] {
            assert!(!opens(&ipv4_tcp_flags([10, 9, 0, 7], 80, answer)), "flags {answer:#x}");
        }
        let icmp = |kind: u8| {
            let mut packet = ipv4_tcp([10, 9, 0, 7], 80);
            packet[9] = IPPROTO_ICMP;
            packet[20] = kind;
            packet
        };
        assert!(opens(&icmp(ICMP_ECHO_REQUEST)));
        assert!(!opens(&icmp(3)), "an ICMP error is the kernel's answer to a peer");
        assert!(!opens(&icmp(0)), "an echo reply too");
        let mut v6 = vec![0x60, 0, 0, 0, 0, 8, IPPROTO_ICMPV6, 64];
        v6.extend([0; 32]);
        v6.extend([ICMPV6_ECHO_REQUEST, 0, 0, 0]);
        assert!(opens(&v6));
        v6[40] = 1; // destination unreachable
        assert!(!opens(&v6));
    }

    #[test]
    fn events_name_the_protocol_and_port() {
        let event = Destination { address: "10.9.0.7".parse().unwrap(), protocol: IPPROTO_TCP, port: Some(8080), opens: true }.event();
        assert_eq!(
            serde_json::to_string(&event).unwrap(),
            r#"{"type":"connectBlocked","address":"10.9.0.7","protocol":"tcp","port":8080}"#
        );
        let event = Destination { address: "fd00::7".parse().unwrap(), protocol: 132, port: None, opens: false }.event();
        assert_eq!(serde_json::to_string(&event).unwrap(), r#"{"type":"connectBlocked","address":"fd00::7","protocol":"132"}"#);
    }

    #[test]
    fn a_destination_is_reported_once_per_window_and_each_port_is_its_own() {
        let mut recent = Recent::default();
        let start = Instant::now();
        let to =
            |address: &str, protocol: u8, port: Option<u16>| Destination { address: address.parse().unwrap(), protocol, port, opens: true };
        let first = to("10.9.0.7", IPPROTO_TCP, Some(8081));
        assert!(recent.report(&first, start));
        assert!(!recent.report(&first, start + Duration::from_millis(500)));
        assert!(recent.report(&to("10.9.0.8", IPPROTO_TCP, Some(8081)), start));
        assert!(recent.report(&to("10.9.0.7", IPPROTO_TCP, Some(8080)), start), "another port: another question");
        assert!(recent.report(&to("10.9.0.7", IPPROTO_UDP, Some(8081)), start), "another protocol too");
        assert!(!recent.report(&to("10.9.0.7", IPPROTO_UDP, Some(8081)), start));
        assert!(recent.report(&first, start + REPEAT_WINDOW));
        // A flood of distinct destinations keeps the memory bounded.
        for n in 0..5000u32 {
            let flood =
                Destination { address: IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n)), protocol: IPPROTO_TCP, port: Some(80), opens: true };
            recent.report(&flood, start + REPEAT_WINDOW);
        }
        for port in 1..3000u16 {
            recent.report(&to("10.9.0.7", IPPROTO_TCP, Some(port)), start + REPEAT_WINDOW);
        }
        assert!(recent.reported.len() <= REMEMBERED);
    }

    #[test]
    fn a_destination_names_its_service() {
        let service = |protocol: u8, port: Option<u16>| {
            Destination { address: "10.9.0.7".parse().unwrap(), protocol, port, opens: true }.service().map(|s| s.to_string())
        };
        assert_eq!(service(IPPROTO_TCP, Some(8081)).as_deref(), Some("tcp/8081"));
        assert_eq!(service(IPPROTO_UDP, Some(9999)).as_deref(), Some("udp/9999"));
        assert_eq!(service(IPPROTO_ICMP, None).as_deref(), Some("1"));
        assert_eq!(service(IPPROTO_TCP, None), None, "cut before its port");
        assert_eq!(service(IPPROTO_TCP, Some(0)), None);
    }

    #[test]
    fn only_remote_hosts_are_offered() {
        for never in ["127.0.0.1", "169.254.169.254", "224.0.0.1", "255.255.255.255", "0.0.0.0", "::1", "fe80::1", "ff02::1"] {
            assert!(!offerable(never.parse().unwrap()), "{never}");
        }
        for offered in ["10.9.0.7", "192.168.1.5", "8.8.8.8", "fd00::7", "2001:db8::1"] {
            assert!(offerable(offered.parse().unwrap()), "{offered}");
        }
    }

    #[test]
    fn logged_packets_are_found_among_the_attributes() {
        let packet = ipv4_tcp([10, 9, 0, 7], 8080);
        let mut attributes = Vec::new();
        put(&mut attributes, 1, &[0, 0x08, 3, 0]); // NFULA_PACKET_HDR
        put(&mut attributes, 5, &7u32.to_be_bytes()); // NFULA_IFINDEX_OUTDEV
        put(&mut attributes, NFULA_PAYLOAD, &packet);
        assert_eq!(attribute(&attributes, NFULA_PAYLOAD), Some(&packet[..]));
        assert_eq!(attribute(&attributes, 12), None);
        assert_eq!(attribute(&attributes[..10], NFULA_PAYLOAD), None, "a cut attribute is not read past its end");
        let mut message = config_message(9);
        message.extend([2, 0, 0, 0]);
        let length = message.len() as u32;
        message[0..4].copy_from_slice(&length.to_ne_bytes());
        let read = messages(&message);
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].0, (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG);
        assert_eq!(&read[0].1[2..4], &LOG_GROUP.to_be_bytes(), "the group is the resource id, big-endian");
    }
}
