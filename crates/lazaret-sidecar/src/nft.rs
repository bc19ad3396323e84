//! The netfilter backstop: an nf_tables output filter that drops every packet this
//! namespace sends to a destination the policy does not allow.
//!
//! Policy routing alone is not enough for IPv4: when the sender names the output
//! interface itself (an `IP_PKTINFO` control message, which gVisor passes through to the
//! host), the kernel skips limited broadcast and link-local multicast past the rules,
//! and treats a `prohibit` verdict as "the destination must be on the link" and sends
//! anyway. This filter sees every locally sent packet after routing, whatever the
//! route, and accepts only: loopback, the sidecar's own marked upstream queries, IPv6
//! neighbour discovery, the services the rules allow, and destinations in the allowed
//! sets, which mirror the rules (`policy::allowed_ranges`). Everything else is dropped
//! (the sender gets `EPERM`).
//!
//! Services (one protocol and port of one address, `policy::service_verdicts`) live in
//! the regular chain `services`, which the output chain jumps to after the marked
//! queries and before the set lookups: one rule per service, `meta nfproto ipv4 ip daddr
//! X meta l4proto P th dport N accept` (IPv6: `ip6 daddr`; a protocol without ports
//! matches address and protocol only), or `drop` for a denied service, which so carves
//! its protocol and port out of an address the sets allow, as its `prohibit` rule does
//! before the CIDR rules. A packet no service rule matches comes back and meets the sets:
//! an allowed service never lets anything else of its address through.
//!
//! With the drop link ([`Nft::install_with_drop_link`]), what the unlisted table routes
//! there (a destination no entry covers, while questions are held) is first logged to
//! the sidecar ([`LOG_GROUP`], rate limited, the packet's first bytes) and TCP is
//! refused with a reset, so that `connect` fails at once instead of retrying a dropped
//! SYN; anything else is dropped as before.
//!
//! The messages are written by hand (the wire format of `linux/netfilter/nf_tables.h`)
//! so the sidecar stays a small static binary; each change is one atomic batch (both
//! sets and the `services` chain flushed and refilled together). [`read_batch`] reads a
//! batch back for the tests and the fuzz target `nft_policy`.

use std::io;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

use crate::policy::{AllowedRanges, ServiceVerdict, DNS_MARK};

const TABLE: &str = "lazaret";
const CHAIN: &str = "output";
/// The regular chain of the services' rules (see the module's documentation).
const SERVICES: &str = "services";
const SET_V4: &str = "allowed4";
const SET_V6: &str = "allowed6";

// linux/netlink.h, linux/netfilter/nfnetlink.h
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_CREATE: u16 = 0x400;
const NLMSG_ERROR: u16 = 0x2;
const NLA_F_NESTED: u16 = 0x8000;
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFPROTO_INET: u8 = 1;
const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;

// linux/netfilter/nf_tables.h
const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_DELTABLE: u16 = 2;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;
const NFT_MSG_DELRULE: u16 = 8;
const NFT_MSG_NEWSET: u16 = 9;
const NFT_MSG_NEWSETELEM: u16 = 12;
const NFT_MSG_DELSETELEM: u16 = 14;
const NFTA_TABLE_NAME: u16 = 1;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NF_INET_LOCAL_OUT: u32 = 3;
const NF_DROP: u32 = 0;
const NF_ACCEPT: u32 = 1;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_META_DREG: u16 = 1;
const NFTA_META_KEY: u16 = 2;
const NFT_META_MARK: u32 = 3;
const NFT_META_OIF: u32 = 5;
const NFT_META_NFPROTO: u32 = 15;
const NFT_META_L4PROTO: u32 = 16;
const NFTA_CMP_SREG: u16 = 1;
const NFTA_CMP_OP: u16 = 2;
const NFTA_CMP_DATA: u16 = 3;
const NFT_CMP_EQ: u32 = 0;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;
const NFTA_VERDICT_CHAIN: u16 = 2;
/// `NFT_JUMP` (-3) as the kernel reads a verdict code.
const NFT_JUMP: u32 = (-3i32) as u32;
const NFTA_PAYLOAD_DREG: u16 = 1;
const NFTA_PAYLOAD_BASE: u16 = 2;
const NFTA_PAYLOAD_OFFSET: u16 = 3;
const NFTA_PAYLOAD_LEN: u16 = 4;
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;
const NFTA_LOOKUP_SET: u16 = 1;
const NFTA_LOOKUP_SREG: u16 = 2;
const NFTA_IMMEDIATE_DREG: u16 = 1;
const NFTA_IMMEDIATE_DATA: u16 = 2;
const NFT_REG_VERDICT: u32 = 0;
const NFT_REG_1: u32 = 1;
const NFTA_SET_TABLE: u16 = 1;
const NFTA_SET_NAME: u16 = 2;
const NFTA_SET_FLAGS: u16 = 3;
const NFTA_SET_KEY_TYPE: u16 = 4;
const NFTA_SET_KEY_LEN: u16 = 5;
const NFTA_SET_ID: u16 = 10;
const NFT_SET_INTERVAL: u32 = 0x4;
const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
const NFTA_SET_ELEM_LIST_SET: u16 = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
const NFTA_SET_ELEM_KEY: u16 = 1;
const NFTA_SET_ELEM_FLAGS: u16 = 3;
const NFT_SET_ELEM_INTERVAL_END: u32 = 0x1;
/// nft's data type ids for `ipv4_addr` and `ipv6_addr` (informational for the kernel).
const TYPE_IPADDR: u32 = 7;
const TYPE_IP6ADDR: u32 = 8;
/// ICMPv6 neighbour discovery (133-136) and MLDv2 reports (143): the kernel's own.
const ICMPV6_KERNEL_TYPES: [u8; 5] = [133, 134, 135, 136, 143];
const IPPROTO_ICMPV6: u8 = 58;
const IPPROTO_TCP: u8 = 6;
/// Where the destination address and port are: IPv4 and IPv6 network headers, TCP/UDP.
const IPV4_DADDR: (u32, u32) = (16, 4);
const IPV6_DADDR: (u32, u32) = (24, 16);
const DPORT: (u32, u32) = (2, 2);
const NFTA_LIMIT_RATE: u16 = 1;
const NFTA_LIMIT_UNIT: u16 = 2;
const NFTA_LIMIT_BURST: u16 = 3;
const NFTA_LIMIT_TYPE: u16 = 4;
const NFT_LIMIT_PKTS: u32 = 0;
const NFTA_LOG_GROUP: u16 = 1;
const NFTA_LOG_SNAPLEN: u16 = 3;
const NFTA_REJECT_TYPE: u16 = 1;
const NFT_REJECT_TCP_RST: u32 = 1;

/// The nfnetlink_log group the drop link's packets are logged to (`blocked.rs` reads it).
pub const LOG_GROUP: u16 = 0x4c5a;
/// Bytes of each logged packet: an IPv6 header (40) and the ports after it.
pub const LOG_SNAPLEN: u32 = 64;
/// Packets per second (and burst) logged from the drop link; more are refused unlogged.
const LOG_RATE: u64 = 100;

/// One netlink message under construction: header, `nfgenmsg`, attributes.
struct Message {
    buffer: Vec<u8>,
    nests: Vec<usize>,
}

impl Message {
    fn new(kind: u16, flags: u16, family: u8, resource: u16) -> Message {
        let mut buffer = Vec::with_capacity(256);
        buffer.extend_from_slice(&0u32.to_ne_bytes()); // length, set in `finish`
        buffer.extend_from_slice(&kind.to_ne_bytes());
        buffer.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
        buffer.extend_from_slice(&0u32.to_ne_bytes()); // sequence, set in `finish`
        buffer.extend_from_slice(&0u32.to_ne_bytes()); // port id
        buffer.push(family);
        buffer.push(0); // NFNETLINK_V0
        buffer.extend_from_slice(&resource.to_be_bytes());
        Message { buffer, nests: Vec::new() }
    }

    fn nftables(kind: u16, flags: u16) -> Message {
        Message::new((NFNL_SUBSYS_NFTABLES << 8) | kind, flags | NLM_F_ACK, NFPROTO_INET, 0)
    }

    fn put(&mut self, kind: u16, data: &[u8]) -> &mut Message {
        let length = 4 + data.len();
        self.buffer.extend_from_slice(&(length as u16).to_ne_bytes());
        self.buffer.extend_from_slice(&kind.to_ne_bytes());
        self.buffer.extend_from_slice(data);
        self.pad();
        self
    }

    fn pad(&mut self) {
        while !self.buffer.len().is_multiple_of(4) {
            self.buffer.push(0);
        }
    }

    fn string(&mut self, kind: u16, text: &str) -> &mut Message {
        let mut data = text.as_bytes().to_vec();
        data.push(0);
        self.put(kind, &data)
    }

    fn be32(&mut self, kind: u16, value: u32) -> &mut Message {
        self.put(kind, &value.to_be_bytes())
    }

    fn open(&mut self, kind: u16) -> &mut Message {
        self.nests.push(self.buffer.len());
        self.buffer.extend_from_slice(&0u16.to_ne_bytes());
        self.buffer.extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        self
    }

    fn close(&mut self) -> &mut Message {
        if let Some(start) = self.nests.pop() {
            let length = (self.buffer.len() - start) as u16;
            self.buffer[start..start + 2].copy_from_slice(&length.to_ne_bytes());
        }
        self
    }

    fn finish(mut self, sequence: u32) -> Vec<u8> {
        let length = self.buffer.len() as u32;
        self.buffer[0..4].copy_from_slice(&length.to_ne_bytes());
        self.buffer[8..12].copy_from_slice(&sequence.to_ne_bytes());
        self.buffer
    }

    // Expressions of a rule, each one `NFTA_LIST_ELEM { name, data { ... } }`.

    fn expression(&mut self, name: &str) -> &mut Message {
        self.open(NFTA_LIST_ELEM).string(NFTA_EXPR_NAME, name).open(NFTA_EXPR_DATA)
    }

    fn end_expression(&mut self) -> &mut Message {
        self.close().close()
    }

    fn meta(&mut self, key: u32) -> &mut Message {
        self.expression("meta").be32(NFTA_META_KEY, key).be32(NFTA_META_DREG, NFT_REG_1).end_expression()
    }

    fn equals(&mut self, value: &[u8]) -> &mut Message {
        self.expression("cmp").be32(NFTA_CMP_SREG, NFT_REG_1).be32(NFTA_CMP_OP, NFT_CMP_EQ);
        self.open(NFTA_CMP_DATA).put(NFTA_DATA_VALUE, value).close();
        self.end_expression()
    }

    fn payload(&mut self, base: u32, offset: u32, length: u32) -> &mut Message {
        self.expression("payload")
            .be32(NFTA_PAYLOAD_DREG, NFT_REG_1)
            .be32(NFTA_PAYLOAD_BASE, base)
            .be32(NFTA_PAYLOAD_OFFSET, offset)
            .be32(NFTA_PAYLOAD_LEN, length)
            .end_expression()
    }

    fn lookup(&mut self, set: &str) -> &mut Message {
        self.expression("lookup").string(NFTA_LOOKUP_SET, set).be32(NFTA_LOOKUP_SREG, NFT_REG_1).end_expression()
    }

    /// `limit rate PER/second burst PER packets`: continues for packets within the rate.
    fn limit(&mut self, per_second: u64) -> &mut Message {
        self.expression("limit")
            .put(NFTA_LIMIT_RATE, &per_second.to_be_bytes())
            .put(NFTA_LIMIT_UNIT, &1u64.to_be_bytes())
            .be32(NFTA_LIMIT_BURST, per_second as u32)
            .be32(NFTA_LIMIT_TYPE, NFT_LIMIT_PKTS)
            .end_expression()
    }

    /// `log group GROUP snaplen LEN` (nfnetlink_log); the rule goes on.
    fn log(&mut self, group: u16, snaplen: u32) -> &mut Message {
        self.expression("log").put(NFTA_LOG_GROUP, &group.to_be_bytes()).be32(NFTA_LOG_SNAPLEN, snaplen).end_expression()
    }

    /// `reject with tcp reset` (a verdict: the packet is dropped).
    fn reset(&mut self) -> &mut Message {
        self.expression("reject").be32(NFTA_REJECT_TYPE, NFT_REJECT_TCP_RST).end_expression()
    }

    fn accept(&mut self) -> &mut Message {
        self.verdict(NF_ACCEPT, None)
    }

    fn drop_packet(&mut self) -> &mut Message {
        self.verdict(NF_DROP, None)
    }

    /// `jump CHAIN`: the chain's rules, then back here unless one decided.
    fn jump(&mut self, chain: &str) -> &mut Message {
        self.verdict(NFT_JUMP, Some(chain))
    }

    fn verdict(&mut self, code: u32, chain: Option<&str>) -> &mut Message {
        self.expression("immediate").be32(NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
        self.open(NFTA_IMMEDIATE_DATA).open(NFTA_DATA_VERDICT).be32(NFTA_VERDICT_CODE, code);
        if let Some(chain) = chain {
            self.string(NFTA_VERDICT_CHAIN, chain);
        }
        self.close().close();
        self.end_expression()
    }
}

/// The rules for the drop link `ifindex`: log (within the rate), then reset TCP.
fn drop_link_rules(ifindex: u32) -> Vec<Message> {
    vec![
        rule(|m| {
            m.meta(NFT_META_OIF).equals(&ifindex.to_ne_bytes()).limit(LOG_RATE).log(LOG_GROUP, LOG_SNAPLEN);
        }),
        rule(|m| {
            m.meta(NFT_META_OIF).equals(&ifindex.to_ne_bytes()).meta(NFT_META_L4PROTO).equals(&[IPPROTO_TCP]).reset();
        }),
    ]
}

/// A rule of the output chain: `build` adds its expressions.
fn rule(build: impl FnOnce(&mut Message)) -> Message {
    rule_in(CHAIN, build)
}

/// A rule appended to `chain`: `build` adds its expressions.
fn rule_in(chain: &str, build: impl FnOnce(&mut Message)) -> Message {
    let mut message = Message::nftables(NFT_MSG_NEWRULE, NLM_F_CREATE | 0x800 /* NLM_F_APPEND */);
    message.string(NFTA_RULE_TABLE, TABLE).string(NFTA_RULE_CHAIN, chain).open(NFTA_RULE_EXPRESSIONS);
    build(&mut message);
    message.close();
    message
}

/// The `services` chain's rule for `verdict`: its address, protocol and (TCP, UDP) port,
/// then accept or drop.
fn service_rule(verdict: &ServiceVerdict) -> Message {
    rule_in(SERVICES, |m| {
        match verdict.address {
            std::net::IpAddr::V4(address) => {
                m.meta(NFT_META_NFPROTO).equals(&[NFPROTO_IPV4]);
                m.payload(NFT_PAYLOAD_NETWORK_HEADER, IPV4_DADDR.0, IPV4_DADDR.1).equals(&address.octets());
            }
            std::net::IpAddr::V6(address) => {
                m.meta(NFT_META_NFPROTO).equals(&[NFPROTO_IPV6]);
                m.payload(NFT_PAYLOAD_NETWORK_HEADER, IPV6_DADDR.0, IPV6_DADDR.1).equals(&address.octets());
            }
        }
        m.meta(NFT_META_L4PROTO).equals(&[verdict.service.protocol()]);
        if let Some(port) = verdict.service.port() {
            m.payload(NFT_PAYLOAD_TRANSPORT_HEADER, DPORT.0, DPORT.1).equals(&port.to_be_bytes());
        }
        if verdict.allow {
            m.accept();
        } else {
            m.drop_packet();
        }
    })
}

/// Deletes every rule of `chain` (a `DELRULE` naming the chain and no rule).
fn flush_chain(chain: &str) -> Message {
    let mut message = Message::nftables(NFT_MSG_DELRULE, 0);
    message.string(NFTA_RULE_TABLE, TABLE).string(NFTA_RULE_CHAIN, chain);
    message
}

/// The set elements of `ranges` (start inclusive, end exclusive, `None`: to the top).
fn elements(set: &str, ranges: &[(Vec<u8>, Option<Vec<u8>>)]) -> Message {
    let mut message = Message::nftables(NFT_MSG_NEWSETELEM, NLM_F_CREATE);
    message.string(NFTA_SET_ELEM_LIST_TABLE, TABLE).string(NFTA_SET_ELEM_LIST_SET, set).open(NFTA_SET_ELEM_LIST_ELEMENTS);
    for (start, end) in ranges {
        message.open(NFTA_LIST_ELEM).open(NFTA_SET_ELEM_KEY).put(NFTA_DATA_VALUE, start).close().close();
        if let Some(end) = end {
            message.open(NFTA_LIST_ELEM).open(NFTA_SET_ELEM_KEY).put(NFTA_DATA_VALUE, end).close();
            message.be32(NFTA_SET_ELEM_FLAGS, NFT_SET_ELEM_INTERVAL_END).close();
        }
    }
    message.close();
    message
}

fn flush(set: &str) -> Message {
    let mut message = Message::nftables(NFT_MSG_DELSETELEM, 0);
    message.string(NFTA_SET_ELEM_LIST_TABLE, TABLE).string(NFTA_SET_ELEM_LIST_SET, set);
    message
}

/// Set elements per `NEWSETELEM` message: an attribute's length is 16 bits,
/// so one message with every range of a full learned table (4,096 addresses,
/// 64 bytes each for IPv6) would wrap its elements' nest length.
pub const MAX_RANGES_PER_MESSAGE: usize = 256;

/// The messages that make the allowed sets hold exactly `ranges` and the
/// `services` chain exactly `services`: both sets and the chain flushed, then
/// the sets' elements in messages of at most [`MAX_RANGES_PER_MESSAGE`] ranges
/// and one rule per service (one batch, so one transaction).
fn replace_messages(ranges: &AllowedRanges, services: &[ServiceVerdict]) -> Vec<Message> {
    let v4: Vec<(Vec<u8>, Option<Vec<u8>>)> =
        ranges.v4.iter().map(|(start, end)| (start.to_be_bytes().to_vec(), end.map(|e| e.to_be_bytes().to_vec()))).collect();
    let v6: Vec<(Vec<u8>, Option<Vec<u8>>)> =
        ranges.v6.iter().map(|(start, end)| (start.to_be_bytes().to_vec(), end.map(|e| e.to_be_bytes().to_vec()))).collect();
    let mut messages = vec![flush(SET_V4), flush(SET_V6), flush_chain(SERVICES)];
    messages.extend(v4.chunks(MAX_RANGES_PER_MESSAGE).map(|chunk| elements(SET_V4, chunk)));
    messages.extend(v6.chunks(MAX_RANGES_PER_MESSAGE).map(|chunk| elements(SET_V6, chunk)));
    messages.extend(services.iter().map(service_rule));
    messages
}

/// One nfnetlink batch of `messages`, numbered from `first`: the bytes, the
/// sequence numbers to be acknowledged, and the last number used.
fn encode_batch(messages: Vec<Message>, first: u32) -> (Vec<u8>, Vec<u32>, u32) {
    let mut out = Vec::new();
    let mut next = first;
    out.extend(Message::new(NFNL_MSG_BATCH_BEGIN, 0, 0, NFNL_SUBSYS_NFTABLES).finish(next));
    let mut expected = Vec::new();
    for message in messages {
        next = next.wrapping_add(1);
        expected.push(next);
        out.extend(message.finish(next));
    }
    next = next.wrapping_add(1);
    out.extend(Message::new(NFNL_MSG_BATCH_END, 0, 0, NFNL_SUBSYS_NFTABLES).finish(next));
    (out, expected, next)
}

/// The batch [`Nft::replace`] sends for `ranges` and `services`, numbered
/// from 1 (for tests and fuzzing: the builder without the socket).
pub fn replace_batch(ranges: &AllowedRanges, services: &[ServiceVerdict]) -> Vec<u8> {
    encode_batch(replace_messages(ranges, services), 1).0
}

/// What a batch carries, read back by [`read_batch`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadBatch {
    /// The set element keys (`NFTA_DATA_VALUE` in `NEWSETELEM` messages), in order.
    pub keys: Vec<Vec<u8>>,
    /// What the batch empties, in order: `set NAME` (a `DELSETELEM` without
    /// elements) and `chain NAME` (a `DELRULE` without a rule).
    pub flushed: Vec<String>,
    /// The rules it adds: the chain, and each expression as text (`meta 15`,
    /// `cmp 0a090007`, `payload 1 16 4`, `lookup allowed4`, `accept`, `drop`,
    /// `jump services`; an expression of another kind by its name).
    pub rules: Vec<(String, Vec<String>)>,
}

/// Reads a batch back (for tests and fuzzing): checks that every message
/// and attribute, nested ones too, fits its container, and says what the
/// batch carries (see [`ReadBatch`]).
pub fn read_batch(batch: &[u8]) -> Result<ReadBatch, String> {
    let mut read = ReadBatch::default();
    let mut offset = 0;
    while offset < batch.len() {
        let header = batch.get(offset..offset + 20).ok_or(format!("message header past the end at {offset}"))?;
        let length = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let kind = u16::from_ne_bytes([header[4], header[5]]);
        let body = batch
            .get(offset + 20..offset + length)
            .filter(|_| length >= 20 && length.is_multiple_of(4))
            .ok_or(format!("message of {length} bytes at {offset}"))?;
        check_attributes(body)?;
        if kind >> 8 == NFNL_SUBSYS_NFTABLES {
            read_message(kind & 0xff, body, &mut read)?;
        }
        offset += length;
    }
    Ok(read)
}

/// Every attribute of `data` (nested ones too) fits its container.
fn check_attributes(data: &[u8]) -> Result<(), String> {
    for (kind, payload) in attributes(data)? {
        if kind & NLA_F_NESTED != 0 {
            check_attributes(payload)?;
        }
    }
    Ok(())
}

/// The attributes of `data`: (type with its flags, payload).
fn attributes(data: &[u8]) -> Result<Vec<(u16, &[u8])>, String> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < data.len() {
        let header = data.get(offset..offset + 4).ok_or(format!("attribute header past the end at {offset}"))?;
        let length = u16::from_ne_bytes([header[0], header[1]]) as usize;
        let kind = u16::from_ne_bytes([header[2], header[3]]);
        let payload = data
            .get(offset + 4..offset + length)
            .filter(|_| length >= 4)
            .ok_or(format!("attribute of {length} bytes at {offset} of {}", data.len()))?;
        out.push((kind, payload));
        offset += (length + 3) & !3;
    }
    Ok(out)
}

/// The payload of the first attribute of type `kind` (flags aside).
fn find(data: &[u8], kind: u16) -> Result<Option<&[u8]>, String> {
    Ok(attributes(data)?.into_iter().find(|(found, _)| found & !NLA_F_NESTED == kind).map(|(_, payload)| payload))
}

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data.strip_suffix(&[0]).unwrap_or(data)).into_owned()
}

fn be32_of(data: Option<&[u8]>) -> Option<u32> {
    data.and_then(|data| data.try_into().ok()).map(u32::from_be_bytes)
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Adds what one nf_tables message (`kind`, its attributes after the headers) carries to `read`.
fn read_message(kind: u16, attributes: &[u8], read: &mut ReadBatch) -> Result<(), String> {
    match kind {
        NFT_MSG_NEWSETELEM => {
            let Some(list) = find(attributes, NFTA_SET_ELEM_LIST_ELEMENTS)? else { return Ok(()) };
            for (_, element) in self::attributes(list)? {
                if let Some(key) = find(element, NFTA_SET_ELEM_KEY)? {
                    read.keys.extend(find(key, NFTA_DATA_VALUE)?.map(<[u8]>::to_vec));
                }
            }
        }
        NFT_MSG_DELSETELEM if find(attributes, NFTA_SET_ELEM_LIST_ELEMENTS)?.is_none() => {
            read.flushed.push(format!("set {}", find(attributes, NFTA_SET_ELEM_LIST_SET)?.map(text).unwrap_or_default()));
        }
        NFT_MSG_DELRULE => {
            read.flushed.push(format!("chain {}", find(attributes, NFTA_RULE_CHAIN)?.map(text).unwrap_or_default()));
        }
        NFT_MSG_NEWRULE => {
            let chain = find(attributes, NFTA_RULE_CHAIN)?.map(text).unwrap_or_default();
            let mut expressions = Vec::new();
            for (_, expression) in self::attributes(find(attributes, NFTA_RULE_EXPRESSIONS)?.unwrap_or_default())? {
                let name = find(expression, NFTA_EXPR_NAME)?.map(text).unwrap_or_default();
                let data = find(expression, NFTA_EXPR_DATA)?.unwrap_or_default();
                expressions.push(match name.as_str() {
                    "meta" => format!("meta {}", be32_of(find(data, NFTA_META_KEY)?).unwrap_or(u32::MAX)),
                    "cmp" => {
                        let value = find(data, NFTA_CMP_DATA)?.map(|value| find(value, NFTA_DATA_VALUE)).transpose()?.flatten();
                        format!("cmp {}", hex(value.unwrap_or_default()))
                    }
                    "payload" => {
                        let field = |kind| be32_of(find(data, kind).ok().flatten()).unwrap_or(u32::MAX);
                        format!("payload {} {} {}", field(NFTA_PAYLOAD_BASE), field(NFTA_PAYLOAD_OFFSET), field(NFTA_PAYLOAD_LEN))
                    }
                    "lookup" => format!("lookup {}", find(data, NFTA_LOOKUP_SET)?.map(text).unwrap_or_default()),
                    "immediate" => {
                        let verdict = find(data, NFTA_IMMEDIATE_DATA)?.map(|value| find(value, NFTA_DATA_VERDICT)).transpose()?.flatten();
                        let verdict = verdict.unwrap_or_default();
                        match be32_of(find(verdict, NFTA_VERDICT_CODE)?) {
                            Some(NF_ACCEPT) => "accept".to_owned(),
                            Some(NF_DROP) => "drop".to_owned(),
                            Some(NFT_JUMP) => format!("jump {}", find(verdict, NFTA_VERDICT_CHAIN)?.map(text).unwrap_or_default()),
                            code => format!("verdict {code:?}"),
                        }
                    }
                    _ => name,
                });
            }
            read.rules.push((chain, expressions));
        }
        _ => {}
    }
    Ok(())
}

/// The output chain's rules, in order: loopback, the marked upstream queries, the
/// jump to `services` (before the sets: a denied service carves into an address they
/// allow), the sets, IPv6 neighbour discovery, then `last` (the drop link's rules).
fn output_rules(last: Vec<Message>) -> Vec<Message> {
    let loopback_ifindex = 1u32;
    let mut rules = vec![
        rule(|m| {
            m.meta(NFT_META_OIF).equals(&loopback_ifindex.to_ne_bytes()).accept();
        }),
        rule(|m| {
            m.meta(NFT_META_MARK).equals(&DNS_MARK.to_ne_bytes()).accept();
        }),
        // Before the sets: a denied service carves into an address they allow.
        rule(|m| {
            m.jump(SERVICES);
        }),
        rule(|m| {
            m.meta(NFT_META_NFPROTO)
                .equals(&[NFPROTO_IPV4])
                .payload(NFT_PAYLOAD_NETWORK_HEADER, IPV4_DADDR.0, IPV4_DADDR.1)
                .lookup(SET_V4)
                .accept();
        }),
        rule(|m| {
            m.meta(NFT_META_NFPROTO)
                .equals(&[NFPROTO_IPV6])
                .payload(NFT_PAYLOAD_NETWORK_HEADER, IPV6_DADDR.0, IPV6_DADDR.1)
                .lookup(SET_V6)
                .accept();
        }),
    ];
    for icmp_type in ICMPV6_KERNEL_TYPES {
        rules.push(rule(|m| {
            m.meta(NFT_META_L4PROTO).equals(&[IPPROTO_ICMPV6]).payload(NFT_PAYLOAD_TRANSPORT_HEADER, 0, 1).equals(&[icmp_type]).accept();
        }));
    }
    rules.extend(last);
    rules
}

pub struct Nft {
    socket: Socket,
    sequence: u32,
}

impl Nft {
    pub fn open() -> io::Result<Nft> {
        let mut socket = Socket::new(NETLINK_NETFILTER)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        Ok(Nft { socket, sequence: 0 })
    }

    /// Creates the table, its two sets, the `services` chain and the output chain
    /// (policy drop) with its accept rules; the sets and `services` start empty, so
    /// nothing but loopback, the marked upstream queries and neighbour discovery leaves
    /// until [`Nft::replace`].
    pub fn install(&mut self) -> io::Result<()> {
        self.install_rules(Vec::new())
    }

    /// As [`Nft::install`], and what leaves on the drop link (`ifindex`) is logged to
    /// [`LOG_GROUP`] (at most `LOG_RATE` packets a second) and refused: TCP with a
    /// reset, the rest dropped by the chain's policy.
    pub fn install_with_drop_link(&mut self, ifindex: u32) -> io::Result<()> {
        self.install_rules(drop_link_rules(ifindex))
    }

    fn install_rules(&mut self, last: Vec<Message>) -> io::Result<()> {
        // A table of an earlier sidecar in this namespace goes first (ENOENT is fine).
        let mut delete = Message::nftables(NFT_MSG_DELTABLE, 0);
        delete.string(NFTA_TABLE_NAME, TABLE);
        match self.batch(vec![delete]) {
            Err(error) if error.raw_os_error() != Some(libc::ENOENT) => return Err(error),
            _ => {}
        }

        let mut table = Message::nftables(NFT_MSG_NEWTABLE, NLM_F_CREATE);
        table.string(NFTA_TABLE_NAME, TABLE);
        let mut chain = Message::nftables(NFT_MSG_NEWCHAIN, NLM_F_CREATE);
        chain.string(NFTA_CHAIN_TABLE, TABLE).string(NFTA_CHAIN_NAME, CHAIN).string(NFTA_CHAIN_TYPE, "filter");
        chain.open(NFTA_CHAIN_HOOK).be32(NFTA_HOOK_HOOKNUM, NF_INET_LOCAL_OUT).be32(NFTA_HOOK_PRIORITY, 0).close();
        chain.be32(NFTA_CHAIN_POLICY, NF_DROP);
        // A regular chain (no hook): only the output chain's jump leads there.
        let mut services = Message::nftables(NFT_MSG_NEWCHAIN, NLM_F_CREATE);
        services.string(NFTA_CHAIN_TABLE, TABLE).string(NFTA_CHAIN_NAME, SERVICES);
        let mut messages = vec![table, chain, services];
        for (id, (name, key_type, key_length)) in [(SET_V4, TYPE_IPADDR, 4), (SET_V6, TYPE_IP6ADDR, 16)].into_iter().enumerate() {
            let mut set = Message::nftables(NFT_MSG_NEWSET, NLM_F_CREATE);
            set.string(NFTA_SET_TABLE, TABLE)
                .string(NFTA_SET_NAME, name)
                .be32(NFTA_SET_FLAGS, NFT_SET_INTERVAL)
                .be32(NFTA_SET_KEY_TYPE, key_type)
                .be32(NFTA_SET_KEY_LEN, key_length)
                .be32(NFTA_SET_ID, id as u32 + 1);
            messages.push(set);
        }
        self.batch(messages)?;

        self.batch(output_rules(last))
    }

    /// Makes the allowed sets hold exactly `ranges` and the `services` chain exactly
    /// `services`, in one atomic batch.
    pub fn replace(&mut self, ranges: &AllowedRanges, services: &[ServiceVerdict]) -> io::Result<()> {
        self.batch(replace_messages(ranges, services))
    }

    /// Sends `messages` as one transaction and waits for each acknowledgement.
    fn batch(&mut self, messages: Vec<Message>) -> io::Result<()> {
        let (out, mut expected, last) = encode_batch(messages, self.sequence.wrapping_add(1));
        self.sequence = last;
        self.socket.send(&out, 0)?;

        while !expected.is_empty() {
            let (data, _) = self.socket.recv_from_full()?;
            let mut offset = 0;
            while offset + 16 <= data.len() {
                let length = u32::from_ne_bytes([data[offset], data[offset + 1], data[offset + 2], data[offset + 3]]) as usize;
                let kind = u16::from_ne_bytes([data[offset + 4], data[offset + 5]]);
                let sequence = u32::from_ne_bytes([data[offset + 8], data[offset + 9], data[offset + 10], data[offset + 11]]);
                if length < 16 || offset + length > data.len() {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "nf_tables: malformed answer"));
                }
                if kind == NLMSG_ERROR && length >= 20 {
                    let code = i32::from_ne_bytes([data[offset + 16], data[offset + 17], data[offset + 18], data[offset + 19]]);
                    if code != 0 {
                        return Err(io::Error::from_raw_os_error(-code));
                    }
                    expected.retain(|s| *s != sequence);
                }
                offset += (length + 3) & !3;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_learned_table_is_sent_in_messages_whose_nests_fit() {
        let ranges = AllowedRanges {
            v4: (0..4096u32).map(|n| (0x0a00_0000 + 2 * n, Some(0x0a00_0001 + 2 * n))).collect(),
            v6: (0..4096u128).map(|n| (n << 64, Some((n << 64) + 1))).collect(),
        };
        let keys = read_batch(&replace_batch(&ranges, &[])).expect("well-formed").keys;
        assert_eq!(keys.len(), 2 * (4096 + 4096), "every range's start and end, once");
        assert_eq!(keys[0], 0x0a00_0000u32.to_be_bytes());
        assert_eq!(keys[keys.len() - 1], ((4095u128 << 64) + 1).to_be_bytes());
    }

    #[test]
    fn services_are_rules_of_their_chain_flushed_and_refilled_with_the_sets() {
        use crate::policy::Service;
        let ranges = AllowedRanges { v4: vec![(0x0a00_0000, Some(0x0b00_0000))], v6: vec![] };
        let services = [
            ServiceVerdict { address: "10.9.0.7".parse().unwrap(), service: Service::parse("tcp/8081").unwrap(), allow: true },
            ServiceVerdict { address: "10.1.2.3".parse().unwrap(), service: Service::parse("udp/53").unwrap(), allow: false },
            ServiceVerdict { address: "fd00::7".parse().unwrap(), service: Service::parse("132").unwrap(), allow: true },
        ];
        let read = read_batch(&replace_batch(&ranges, &services)).expect("well-formed");
        assert_eq!(read.flushed, ["set allowed4", "set allowed6", "chain services"], "everything is replaced in the one batch");
        assert_eq!(read.keys, [0x0a00_0000u32.to_be_bytes(), 0x0b00_0000u32.to_be_bytes()], "the service addresses are no set elements");
        let rules: Vec<(&str, Vec<&str>)> =
            read.rules.iter().map(|(chain, expressions)| (chain.as_str(), expressions.iter().map(String::as_str).collect())).collect();
        assert_eq!(
            rules,
            [
                (
                    "services",
                    vec!["meta 15", "cmp 02", "payload 1 16 4", "cmp 0a090007", "meta 16", "cmp 06", "payload 2 2 2", "cmp 1f91", "accept"]
                ),
                (
                    "services",
                    vec!["meta 15", "cmp 02", "payload 1 16 4", "cmp 0a010203", "meta 16", "cmp 11", "payload 2 2 2", "cmp 0035", "drop"]
                ),
                (
                    "services",
                    vec!["meta 15", "cmp 0a", "payload 1 24 16", "cmp fd000000000000000000000000000007", "meta 16", "cmp 84", "accept"]
                ),
            ]
        );
        let empty = read_batch(&replace_batch(&AllowedRanges::default(), &[])).expect("well-formed");
        assert_eq!(empty, ReadBatch { flushed: read.flushed.clone(), ..ReadBatch::default() }, "an empty policy empties all three");
    }

    #[test]
    fn the_output_chain_jumps_to_the_services_after_the_marked_queries_and_before_the_sets() {
        let read = read_batch(&encode_batch(output_rules(drop_link_rules(7)), 1).0).expect("well-formed");
        let rules: Vec<String> = read.rules.iter().map(|(chain, expressions)| format!("{chain}: {}", expressions.join(", "))).collect();
        let mark = hex(&DNS_MARK.to_ne_bytes());
        assert_eq!(
            rules[..5],
            [
                format!("output: meta 5, cmp {}, accept", hex(&1u32.to_ne_bytes())),
                format!("output: meta 3, cmp {mark}, accept"),
                "output: jump services".to_owned(),
                "output: meta 15, cmp 02, payload 1 16 4, lookup allowed4, accept".to_owned(),
                "output: meta 15, cmp 0a, payload 1 24 16, lookup allowed6, accept".to_owned(),
            ]
        );
        assert_eq!(rules.len(), 5 + ICMPV6_KERNEL_TYPES.len() + 2, "then neighbour discovery and the drop link's two: {rules:#?}");
        assert!(rules.last().is_some_and(|rule| rule.ends_with("reject")), "{rules:#?}");
    }

    #[test]
    fn a_cut_batch_is_refused() {
        let batch = replace_batch(&AllowedRanges { v4: vec![(1, Some(2))], v6: vec![] }, &[]);
        assert!(read_batch(&batch[..batch.len() - 4]).is_err());
        let mut wrong = batch.clone();
        // The first message's first attribute (after the 20-byte headers of the
        // batch-begin message and the flush): a length past the message's end.
        let first_attribute = 20 + 20;
        wrong[first_attribute..first_attribute + 2].copy_from_slice(&400u16.to_ne_bytes());
        assert!(read_batch(&wrong).is_err());
    }

    #[test]
    fn attributes_are_aligned_and_nests_carry_their_length() {
        let mut message = Message::nftables(NFT_MSG_NEWTABLE, 0);
        message.string(NFTA_TABLE_NAME, "abc").open(NFTA_CHAIN_HOOK).be32(NFTA_HOOK_HOOKNUM, 3).close();
        let bytes = message.finish(7);
        assert_eq!(bytes.len() % 4, 0);
        assert_eq!(u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize, bytes.len());
        assert_eq!(u32::from_ne_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]), 7);
        // header 16 + nfgenmsg 4, then "abc\0" (8 bytes with its header), then the nest.
        let nest = 20 + 8;
        assert_eq!(u16::from_ne_bytes([bytes[nest], bytes[nest + 1]]), 4 + 8);
        assert_eq!(u16::from_ne_bytes([bytes[nest + 2], bytes[nest + 3]]), NFTA_CHAIN_HOOK | NLA_F_NESTED);
        assert_eq!(&bytes[nest + 8..nest + 12], &3u32.to_be_bytes());
    }
}
