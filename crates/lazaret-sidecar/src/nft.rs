//! The netfilter backstop: an nf_tables output filter that drops every packet this
//! namespace sends to a destination the policy does not allow.
//!
//! Policy routing alone is not enough for IPv4: when the sender names the output
//! interface itself (an `IP_PKTINFO` control message, which gVisor passes through to the
//! host), the kernel skips limited broadcast and link-local multicast past the rules,
//! and treats a `prohibit` verdict as "the destination must be on the link" and sends
//! anyway. This filter sees every locally sent packet after routing, whatever the
//! route, and accepts only: loopback, the sidecar's own marked upstream queries, IPv6
//! neighbour discovery, and destinations in the allowed sets, which mirror the rules
//! (`policy::allowed_ranges`). Everything else is dropped (the sender gets `EPERM`).
//!
//! With the drop link ([`Nft::install_with_drop_link`]), what the unlisted table routes
//! there (a destination no entry covers, while questions are held) is first logged to
//! the sidecar ([`LOG_GROUP`], rate limited, the packet's first bytes) and TCP is
//! refused with a reset, so that `connect` fails at once instead of retrying a dropped
//! SYN; anything else is dropped as before.
//!
//! The messages are written by hand (the wire format of `linux/netfilter/nf_tables.h`)
//! so the sidecar stays a small static binary; each change is one atomic batch.

use std::io;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};

use crate::policy::{AllowedRanges, DNS_MARK};

const TABLE: &str = "lazaret";
const CHAIN: &str = "output";
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
        self.expression("immediate").be32(NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
        self.open(NFTA_IMMEDIATE_DATA).open(NFTA_DATA_VERDICT).be32(NFTA_VERDICT_CODE, NF_ACCEPT).close().close();
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
    let mut message = Message::nftables(NFT_MSG_NEWRULE, NLM_F_CREATE | 0x800 /* NLM_F_APPEND */);
    message.string(NFTA_RULE_TABLE, TABLE).string(NFTA_RULE_CHAIN, CHAIN).open(NFTA_RULE_EXPRESSIONS);
    build(&mut message);
    message.close();
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

/// The messages that make the allowed sets hold exactly `ranges`: both sets
/// flushed, then their elements in messages of at most
/// [`MAX_RANGES_PER_MESSAGE`] ranges (one batch, so one transaction).
fn replace_messages(ranges: &AllowedRanges) -> Vec<Message> {
    let v4: Vec<(Vec<u8>, Option<Vec<u8>>)> =
        ranges.v4.iter().map(|(start, end)| (start.to_be_bytes().to_vec(), end.map(|e| e.to_be_bytes().to_vec()))).collect();
    let v6: Vec<(Vec<u8>, Option<Vec<u8>>)> =
        ranges.v6.iter().map(|(start, end)| (start.to_be_bytes().to_vec(), end.map(|e| e.to_be_bytes().to_vec()))).collect();
    let mut messages = vec![flush(SET_V4), flush(SET_V6)];
    messages.extend(v4.chunks(MAX_RANGES_PER_MESSAGE).map(|chunk| elements(SET_V4, chunk)));
    messages.extend(v6.chunks(MAX_RANGES_PER_MESSAGE).map(|chunk| elements(SET_V6, chunk)));
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

/// The batch [`Nft::replace`] sends for `ranges`, numbered from 1 (for tests
/// and fuzzing: the builder without the socket).
pub fn replace_batch(ranges: &AllowedRanges) -> Vec<u8> {
    encode_batch(replace_messages(ranges), 1).0
}

/// Reads a batch back (for tests and fuzzing): checks that every message
/// and attribute, nested ones too, fits its container, and returns the set
/// element keys (`NFTA_DATA_VALUE` of 4 or 16 bytes inside nests) in order.
pub fn set_element_keys(batch: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    fn walk(data: &[u8], nested: bool, keys: &mut Vec<Vec<u8>>) -> Result<(), String> {
        let mut offset = 0;
        while offset < data.len() {
            let header = data.get(offset..offset + 4).ok_or(format!("attribute header past the end at {offset}"))?;
            let length = u16::from_ne_bytes([header[0], header[1]]) as usize;
            let kind = u16::from_ne_bytes([header[2], header[3]]);
            let payload = data
                .get(offset + 4..offset + length)
                .filter(|_| length >= 4)
                .ok_or(format!("attribute of {length} bytes at {offset} of {}", data.len()))?;
            if kind & NLA_F_NESTED != 0 {
                walk(payload, true, keys)?;
            } else if nested && kind == NFTA_DATA_VALUE && matches!(payload.len(), 4 | 16) {
                keys.push(payload.to_vec());
            }
            offset += (length + 3) & !3;
        }
        Ok(())
    }
    let mut keys = Vec::new();
    let mut offset = 0;
    while offset < batch.len() {
        let header = batch.get(offset..offset + 20).ok_or(format!("message header past the end at {offset}"))?;
        let length = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let body = batch
            .get(offset + 20..offset + length)
            .filter(|_| length >= 20 && length.is_multiple_of(4))
            .ok_or(format!("message of {length} bytes at {offset}"))?;
        walk(body, false, &mut keys)?;
        offset += length;
    }
    Ok(keys)
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

    /// Creates the table, its two sets and the output chain (policy drop) with its
    /// accept rules; the sets start empty, so nothing but loopback, the marked upstream
    /// queries and neighbour discovery leaves until [`Nft::replace`].
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
        let mut messages = vec![table, chain];
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

        let loopback_ifindex = 1u32;
        let mut rules = vec![
            rule(|m| {
                m.meta(NFT_META_OIF).equals(&loopback_ifindex.to_ne_bytes()).accept();
            }),
            rule(|m| {
                m.meta(NFT_META_MARK).equals(&DNS_MARK.to_ne_bytes()).accept();
            }),
            rule(|m| {
                m.meta(NFT_META_NFPROTO).equals(&[NFPROTO_IPV4]).payload(NFT_PAYLOAD_NETWORK_HEADER, 16, 4).lookup(SET_V4).accept();
            }),
            rule(|m| {
                m.meta(NFT_META_NFPROTO).equals(&[NFPROTO_IPV6]).payload(NFT_PAYLOAD_NETWORK_HEADER, 24, 16).lookup(SET_V6).accept();
            }),
        ];
        for icmp_type in ICMPV6_KERNEL_TYPES {
            rules.push(rule(|m| {
                m.meta(NFT_META_L4PROTO)
                    .equals(&[IPPROTO_ICMPV6])
                    .payload(NFT_PAYLOAD_TRANSPORT_HEADER, 0, 1)
                    .equals(&[icmp_type])
                    .accept();
            }));
        }
        rules.extend(last);
        self.batch(rules)
    }

    /// Makes the allowed sets hold exactly `ranges`, in one atomic batch.
    pub fn replace(&mut self, ranges: &AllowedRanges) -> io::Result<()> {
        self.batch(replace_messages(ranges))
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
        let keys = set_element_keys(&replace_batch(&ranges)).expect("well-formed");
        assert_eq!(keys.len(), 2 * (4096 + 4096), "every range's start and end, once");
        assert_eq!(keys[0], 0x0a00_0000u32.to_be_bytes());
        assert_eq!(keys[keys.len() - 1], ((4095u128 << 64) + 1).to_be_bytes());
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
