//! The DNS message format (RFC 1035), as far as the sidecar needs it: parse a
//! client's query, write the query it forwards upstream, parse the upstream's
//! answer (following CNAME chains), and write the reply the client gets.
//!
//! Queries from the sandbox are read strictly: one question, no answer or
//! authority records, at most one additional record (EDNS), no compression
//! pointers. Answers from upstream may use compression; every pointer must
//! point backwards, so parsing always ends.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const TYPE_A: u16 = 1;
pub const TYPE_CNAME: u16 = 5;
pub const TYPE_TXT: u16 = 16;
pub const TYPE_AAAA: u16 = 28;
pub const CLASS_IN: u16 = 1;

/// Longest name on the wire (RFC 1035 2.3.4), length octets included.
const MAX_NAME_WIRE: usize = 255;
/// Longest message the sidecar reads or writes over UDP (EDNS-sized).
pub const MAX_MESSAGE: usize = 4096;
/// Most CNAME hops followed in an answer.
const MAX_CNAME_HOPS: usize = 8;

const HEADER_LEN: usize = 12;
const FLAG_RESPONSE: u16 = 0x8000;
const FLAG_TRUNCATED: u16 = 0x0200;
const FLAG_RECURSION_DESIRED: u16 = 0x0100;
const FLAG_RECURSION_AVAILABLE: u16 = 0x0080;
const OPCODE_MASK: u16 = 0x7800;

/// Response codes the sidecar uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rcode {
    NoError = 0,
    FormatError = 1,
    ServerFailure = 2,
    NameError = 3,
    Refused = 5,
}

impl Rcode {
    fn from_wire(value: u16) -> Rcode {
        match value & 0xf {
            0 => Rcode::NoError,
            1 => Rcode::FormatError,
            3 => Rcode::NameError,
            5 => Rcode::Refused,
            _ => Rcode::ServerFailure,
        }
    }
}

/// Why a message did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    Truncated,
    NotAQuery,
    NotAResponse,
    UnsupportedOpcode,
    QuestionCount(u16),
    UnexpectedRecords,
    CompressedQuestion,
    BadLabel,
    NameTooLong,
    BadPointer,
    MismatchedAnswer,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            WireError::Truncated => "message truncated",
            WireError::NotAQuery => "not a query",
            WireError::NotAResponse => "not a response",
            WireError::UnsupportedOpcode => "opcode is not QUERY",
            WireError::QuestionCount(_) => "not exactly one question",
            WireError::UnexpectedRecords => "a query carries answer or authority records",
            WireError::CompressedQuestion => "compression pointer in a query",
            WireError::BadLabel => "bad label",
            WireError::NameTooLong => "name longer than 255 octets",
            WireError::BadPointer => "compression pointer does not point backwards",
            WireError::MismatchedAnswer => "answer does not match the question",
        };
        f.write_str(text)
    }
}

impl std::error::Error for WireError {}

pub type Result<T> = std::result::Result<T, WireError>;

/// One question: the name as raw labels (case preserved), type and class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Question {
    pub labels: Vec<Vec<u8>>,
    pub record_type: u16,
    pub class: u16,
}

impl Question {
    pub fn new(name: &str, record_type: u16) -> Question {
        let labels =
            name.trim_end_matches('.').split('.').filter(|label| !label.is_empty()).map(|label| label.as_bytes().to_vec()).collect();
        Question { labels, record_type, class: CLASS_IN }
    }

    /// The name in lower case, dot-separated; bytes outside printable ASCII
    /// (and `.`/`\` inside a label) are written `\DDD`, so a name never lies
    /// about its labels in a log or an audit record.
    pub fn name(&self) -> String {
        name_text(&self.labels)
    }

    fn same_as(&self, other: &Question) -> bool {
        self.record_type == other.record_type && self.class == other.class && self.name() == other.name()
    }
}

/// The `TYPE` mnemonic for logs and audit records.
pub fn type_name(record_type: u16) -> String {
    match record_type {
        TYPE_A => "A".into(),
        2 => "NS".into(),
        TYPE_CNAME => "CNAME".into(),
        6 => "SOA".into(),
        12 => "PTR".into(),
        15 => "MX".into(),
        TYPE_TXT => "TXT".into(),
        TYPE_AAAA => "AAAA".into(),
        33 => "SRV".into(),
        64 => "SVCB".into(),
        65 => "HTTPS".into(),
        255 => "ANY".into(),
        other => format!("TYPE{other}"),
    }
}

fn name_text(labels: &[Vec<u8>]) -> String {
    let mut out = String::new();
    for (index, label) in labels.iter().enumerate() {
        if index > 0 {
            out.push('.');
        }
        for &byte in label {
            let lower = byte.to_ascii_lowercase();
            if lower.is_ascii_graphic() && lower != b'.' && lower != b'\\' {
                out.push(char::from(lower));
            } else {
                out.push_str(&format!("\\{byte:03}"));
            }
        }
    }
    out
}

/// A client's query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    pub id: u16,
    pub recursion_desired: bool,
    pub question: Question,
}

fn read_u16(packet: &[u8], at: usize) -> Result<u16> {
    let bytes = packet.get(at..at + 2).ok_or(WireError::Truncated)?;
    Ok(u16::from_be_bytes([bytes[0], bytes[1]]))
}

fn read_u32(packet: &[u8], at: usize) -> Result<u32> {
    let bytes = packet.get(at..at + 4).ok_or(WireError::Truncated)?;
    Ok(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// Reads a name at `at`; returns its labels and the offset after it (after
/// the first pointer, if any). Pointers are followed only when allowed, and
/// only backwards.
fn read_name(packet: &[u8], at: usize, allow_pointers: bool) -> Result<(Vec<Vec<u8>>, usize)> {
    let mut labels = Vec::new();
    let mut position = at;
    let mut end = None;
    let mut wire_length = 0usize;
    loop {
        let length = *packet.get(position).ok_or(WireError::Truncated)? as usize;
        match length & 0xc0 {
            0x00 => {
                wire_length += length + 1;
                if wire_length > MAX_NAME_WIRE {
                    return Err(WireError::NameTooLong);
                }
                if length == 0 {
                    return Ok((labels, end.unwrap_or(position + 1)));
                }
                let label = packet.get(position + 1..position + 1 + length).ok_or(WireError::Truncated)?;
                labels.push(label.to_vec());
                position += 1 + length;
            }
            0xc0 => {
                if !allow_pointers {
                    return Err(WireError::CompressedQuestion);
                }
                let target = (read_u16(packet, position)? & 0x3fff) as usize;
                if target >= position {
                    return Err(WireError::BadPointer);
                }
                end.get_or_insert(position + 2);
                position = target;
            }
            _ => return Err(WireError::BadLabel),
        }
    }
}

fn write_name(out: &mut Vec<u8>, labels: &[Vec<u8>]) {
    for label in labels {
        out.push(label.len() as u8);
        out.extend_from_slice(label);
    }
    out.push(0);
}

fn write_header(out: &mut Vec<u8>, id: u16, flags: u16, counts: [u16; 4]) {
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    for count in counts {
        out.extend_from_slice(&count.to_be_bytes());
    }
}

fn write_question(out: &mut Vec<u8>, question: &Question) {
    write_name(out, &question.labels);
    out.extend_from_slice(&question.record_type.to_be_bytes());
    out.extend_from_slice(&question.class.to_be_bytes());
}

/// Parses a query from the sandbox.
pub fn parse_query(packet: &[u8]) -> Result<Query> {
    if packet.len() < HEADER_LEN {
        return Err(WireError::Truncated);
    }
    let id = read_u16(packet, 0)?;
    let flags = read_u16(packet, 2)?;
    if flags & FLAG_RESPONSE != 0 {
        return Err(WireError::NotAQuery);
    }
    if flags & OPCODE_MASK != 0 {
        return Err(WireError::UnsupportedOpcode);
    }
    let questions = read_u16(packet, 4)?;
    if questions != 1 {
        return Err(WireError::QuestionCount(questions));
    }
    if read_u16(packet, 6)? != 0 || read_u16(packet, 8)? != 0 || read_u16(packet, 10)? > 1 {
        return Err(WireError::UnexpectedRecords);
    }
    let (labels, after) = read_name(packet, HEADER_LEN, false)?;
    let record_type = read_u16(packet, after)?;
    let class = read_u16(packet, after + 2)?;
    Ok(Query { id, recursion_desired: flags & FLAG_RECURSION_DESIRED != 0, question: Question { labels, record_type, class } })
}

/// The query the sidecar sends upstream: a fresh id, recursion desired, the
/// question re-encoded from its labels (nothing else of the client's bytes).
pub fn encode_query(id: u16, question: &Question) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    write_header(&mut out, id, FLAG_RECURSION_DESIRED, [1, 0, 0, 0]);
    write_question(&mut out, question);
    out
}

/// A reply to `query` with `rcode` and address records owned by the
/// question's name (CNAME chains flattened). Stops adding records before the
/// reply would exceed 512 octets, the size every client accepts.
pub fn encode_reply(query: &Query, rcode: Rcode, answers: &[(IpAddr, u32)]) -> Vec<u8> {
    let mut records = Vec::new();
    let mut count = 0u16;
    let question_length = HEADER_LEN + query.question.labels.iter().map(|label| label.len() + 1).sum::<usize>() + 5;
    for (address, ttl) in answers {
        let (record_type, data): (u16, Vec<u8>) = match address {
            IpAddr::V4(v4) => (TYPE_A, v4.octets().to_vec()),
            IpAddr::V6(v6) => (TYPE_AAAA, v6.octets().to_vec()),
        };
        if record_type != query.question.record_type {
            continue;
        }
        let mut record = vec![0xc0, HEADER_LEN as u8];
        record.extend_from_slice(&record_type.to_be_bytes());
        record.extend_from_slice(&CLASS_IN.to_be_bytes());
        record.extend_from_slice(&ttl.to_be_bytes());
        record.extend_from_slice(&(data.len() as u16).to_be_bytes());
        record.extend_from_slice(&data);
        if question_length + records.len() + record.len() > 512 {
            break;
        }
        records.extend_from_slice(&record);
        count += 1;
    }
    let mut flags = FLAG_RESPONSE | FLAG_RECURSION_AVAILABLE | rcode as u16;
    if query.recursion_desired {
        flags |= FLAG_RECURSION_DESIRED;
    }
    let mut out = Vec::with_capacity(question_length + records.len());
    write_header(&mut out, query.id, flags, [1, count, 0, 0]);
    write_question(&mut out, &query.question);
    out.extend_from_slice(&records);
    out
}

/// A bare error reply for a packet that did not parse as a query: the
/// client's id, no question. `None` when not even the id is there, or the
/// packet claims to be a response (never answer those: no reflection loops).
pub fn encode_error(packet: &[u8], rcode: Rcode) -> Option<Vec<u8>> {
    let id = read_u16(packet, 0).ok()?;
    if read_u16(packet, 2).ok()? & FLAG_RESPONSE != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(HEADER_LEN);
    write_header(&mut out, id, FLAG_RESPONSE | rcode as u16, [0, 0, 0, 0]);
    Some(out)
}

/// What one resource record holds, as far as the sidecar cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordData {
    Address(IpAddr),
    Alias(String),
    Other,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub owner: String,
    pub record_type: u16,
    pub ttl: u32,
    pub data: RecordData,
}

/// An upstream resolver's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub id: u16,
    pub rcode: Rcode,
    pub truncated: bool,
    pub question: Question,
    pub answers: Vec<Record>,
}

/// Parses an upstream answer and checks it answers `question` under `id`.
pub fn parse_response(packet: &[u8], id: u16, question: &Question) -> Result<Response> {
    if packet.len() < HEADER_LEN {
        return Err(WireError::Truncated);
    }
    let flags = read_u16(packet, 2)?;
    if flags & FLAG_RESPONSE == 0 {
        return Err(WireError::NotAResponse);
    }
    let questions = read_u16(packet, 4)?;
    if questions != 1 {
        return Err(WireError::QuestionCount(questions));
    }
    let answer_count = read_u16(packet, 6)?;
    let (labels, mut position) = read_name(packet, HEADER_LEN, true)?;
    let asked = Question { labels, record_type: read_u16(packet, position)?, class: read_u16(packet, position + 2)? };
    position += 4;
    if read_u16(packet, 0)? != id || !asked.same_as(question) {
        return Err(WireError::MismatchedAnswer);
    }
    let mut answers = Vec::new();
    for _ in 0..answer_count {
        let (owner, after) = read_name(packet, position, true)?;
        let record_type = read_u16(packet, after)?;
        let class = read_u16(packet, after + 2)?;
        let ttl = read_u32(packet, after + 4)?;
        let length = read_u16(packet, after + 8)? as usize;
        let start = after + 10;
        let data = packet.get(start..start + length).ok_or(WireError::Truncated)?;
        let data = match (record_type, class, length) {
            (TYPE_A, CLASS_IN, 4) => RecordData::Address(IpAddr::V4(Ipv4Addr::new(data[0], data[1], data[2], data[3]))),
            (TYPE_AAAA, CLASS_IN, 16) => {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(data);
                RecordData::Address(IpAddr::V6(Ipv6Addr::from(octets)))
            }
            (TYPE_CNAME, CLASS_IN, _) => RecordData::Alias(name_text(&read_name(packet, start, true)?.0)),
            _ => RecordData::Other,
        };
        answers.push(Record { owner: name_text(&owner), record_type, ttl, data });
        position = start + length;
    }
    Ok(Response { id, rcode: Rcode::from_wire(flags), truncated: flags & FLAG_TRUNCATED != 0, question: asked, answers })
}

impl Response {
    /// The addresses of the question's type that the question's name leads
    /// to through the answer's CNAME chain, each with the smallest TTL on its
    /// path. Records of other owners are ignored: an upstream cannot widen
    /// the allowlist with unrelated names.
    pub fn addresses(&self) -> Vec<(IpAddr, u32)> {
        let chain = self.chain_with_ttls();
        let mut out: Vec<(IpAddr, u32)> = Vec::new();
        for record in &self.answers {
            let RecordData::Address(address) = record.data else { continue };
            if record.record_type != self.question.record_type {
                continue;
            }
            if let Some((_, path_ttl)) = chain.iter().find(|(name, _)| *name == record.owner) {
                if !out.iter().any(|(known, _)| *known == address) {
                    out.push((address, record.ttl.min(*path_ttl)));
                }
            }
        }
        out
    }

    /// The question's name and the aliases its CNAME chain leads through, in order.
    pub fn chain(&self) -> Vec<String> {
        self.chain_with_ttls().into_iter().map(|(name, _)| name).collect()
    }

    fn chain_with_ttls(&self) -> Vec<(String, u32)> {
        let mut chain = vec![(self.question.name(), u32::MAX)];
        for _ in 0..MAX_CNAME_HOPS {
            let (current, ttl) = chain[chain.len() - 1].clone();
            let next = self.answers.iter().find_map(|record| match &record.data {
                RecordData::Alias(target) if record.owner == current => Some((target.clone(), ttl.min(record.ttl))),
                _ => None,
            });
            match next {
                Some(link) if !chain.iter().any(|(name, _)| *name == link.0) => chain.push(link),
                _ => break,
            }
        }
        chain
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query_packet(name: &str, record_type: u16) -> Vec<u8> {
        encode_query(0x1234, &Question::new(name, record_type))
    }

    /// An upstream-style answer with a compressed CNAME chain.
    fn upstream_answer(id: u16, question: &Question, records: &[(&str, u16, u32, Vec<u8>)]) -> Vec<u8> {
        let mut out = Vec::new();
        write_header(&mut out, id, FLAG_RESPONSE | FLAG_RECURSION_AVAILABLE, [1, records.len() as u16, 0, 0]);
        write_question(&mut out, question);
        for (owner, record_type, ttl, data) in records {
            if *owner == question.name() {
                out.extend_from_slice(&[0xc0, 12]);
            } else {
                write_name(&mut out, &Question::new(owner, 0).labels);
            }
            out.extend_from_slice(&record_type.to_be_bytes());
            out.extend_from_slice(&CLASS_IN.to_be_bytes());
            out.extend_from_slice(&ttl.to_be_bytes());
            out.extend_from_slice(&(data.len() as u16).to_be_bytes());
            out.extend_from_slice(data);
        }
        out
    }

    fn name_bytes(name: &str) -> Vec<u8> {
        let mut out = Vec::new();
        write_name(&mut out, &Question::new(name, 0).labels);
        out
    }

    #[test]
    fn queries_round_trip() {
        let packet = query_packet("Registry.NPMjs.org.", TYPE_AAAA);
        let query = parse_query(&packet).expect("parses");
        assert_eq!(query.id, 0x1234);
        assert!(query.recursion_desired);
        assert_eq!(query.question.name(), "registry.npmjs.org");
        assert_eq!(query.question.record_type, TYPE_AAAA);
        assert_eq!(type_name(TYPE_TXT), "TXT");
        assert_eq!(type_name(4242), "TYPE4242");
    }

    #[test]
    fn strange_bytes_in_labels_are_escaped_in_names() {
        let question =
            Question { labels: vec![b"a.b".to_vec(), vec![0, b'X', 0xff], b"test".to_vec()], record_type: TYPE_A, class: CLASS_IN };
        assert_eq!(question.name(), "a\\046b.\\000x\\255.test");
    }

    #[test]
    fn malformed_queries_are_rejected() {
        let good = query_packet("example.test", TYPE_A);
        assert_eq!(parse_query(&good[..11]), Err(WireError::Truncated));
        assert_eq!(parse_query(&good[..good.len() - 1]), Err(WireError::Truncated));
        let mut response = good.clone();
        response[2] |= 0x80;
        assert_eq!(parse_query(&response), Err(WireError::NotAQuery));
        let mut two_questions = good.clone();
        two_questions[5] = 2;
        assert_eq!(parse_query(&two_questions), Err(WireError::QuestionCount(2)));
        let mut with_answer = good.clone();
        with_answer[7] = 1;
        assert_eq!(parse_query(&with_answer), Err(WireError::UnexpectedRecords));
        let mut compressed = good[..12].to_vec();
        compressed.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1]);
        assert_eq!(parse_query(&compressed), Err(WireError::CompressedQuestion));
        let mut long = good[..12].to_vec();
        for _ in 0..5 {
            long.push(63);
            long.extend_from_slice(&[b'a'; 63]);
        }
        long.extend_from_slice(&[0, 0, 1, 0, 1]);
        assert_eq!(parse_query(&long), Err(WireError::NameTooLong));
        let mut bad_label = good[..12].to_vec();
        bad_label.extend_from_slice(&[0x41, b'a', 0, 0, 1, 0, 1]);
        assert_eq!(parse_query(&bad_label), Err(WireError::BadLabel));
    }

    #[test]
    fn replies_carry_the_question_and_matching_addresses() {
        let query = parse_query(&query_packet("allowed.test", TYPE_A)).expect("query");
        let answers = [("10.1.2.3".parse().expect("ip"), 60), ("fd00::1".parse().expect("ip"), 60), ("10.1.2.4".parse().expect("ip"), 30)];
        let reply = encode_reply(&query, Rcode::NoError, &answers);
        let parsed = parse_response(&reply, query.id, &query.question).expect("parses");
        assert_eq!(parsed.rcode, Rcode::NoError);
        assert_eq!(parsed.addresses(), vec![(answers[0].0, 60), (answers[2].0, 30)]);
        let refused = encode_reply(&query, Rcode::Refused, &[]);
        let parsed = parse_response(&refused, query.id, &query.question).expect("parses");
        assert_eq!(parsed.rcode, Rcode::Refused);
        assert!(parsed.answers.is_empty());
    }

    #[test]
    fn replies_stay_within_512_octets() {
        let query = parse_query(&query_packet("many.test", TYPE_A)).expect("query");
        let answers: Vec<(IpAddr, u32)> = (0..100u8).map(|n| (IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)), 60)).collect();
        let reply = encode_reply(&query, Rcode::NoError, &answers);
        assert!(reply.len() <= 512, "{}", reply.len());
        assert!(parse_response(&reply, query.id, &query.question).expect("parses").answers.len() > 20);
    }

    #[test]
    fn error_replies_never_answer_responses() {
        let packet = query_packet("x.test", TYPE_A);
        let reply = encode_error(&packet, Rcode::FormatError).expect("reply");
        assert_eq!(&reply[..2], &packet[..2]);
        assert_eq!(reply[3] & 0xf, 1);
        let mut response = packet.clone();
        response[2] |= 0x80;
        assert_eq!(encode_error(&response, Rcode::FormatError), None);
        assert_eq!(encode_error(&[1], Rcode::FormatError), None);
    }

    #[test]
    fn cname_chains_are_followed_and_strangers_ignored() {
        let question = Question::new("www.allowed.test", TYPE_A);
        let packet = upstream_answer(
            7,
            &question,
            &[
                ("www.allowed.test", TYPE_CNAME, 300, name_bytes("edge.cdn.test")),
                ("edge.cdn.test", TYPE_A, 20, vec![10, 9, 8, 7]),
                ("elsewhere.test", TYPE_A, 600, vec![10, 6, 6, 6]),
                ("www.allowed.test", TYPE_TXT, 600, b"\x03abc".to_vec()),
            ],
        );
        let response = parse_response(&packet, 7, &question).expect("parses");
        assert_eq!(response.addresses(), vec![("10.9.8.7".parse().expect("ip"), 20)]);
        assert_eq!(response.chain(), ["www.allowed.test", "edge.cdn.test"]);
        assert_eq!(parse_response(&packet, 8, &question), Err(WireError::MismatchedAnswer));
        assert_eq!(parse_response(&packet, 7, &Question::new("other.test", TYPE_A)), Err(WireError::MismatchedAnswer));
    }

    #[test]
    fn compression_loops_are_rejected() {
        let question = Question::new("a.test", TYPE_A);
        let mut packet = upstream_answer(1, &question, &[]);
        packet[7] = 1;
        let at = packet.len();
        packet.extend_from_slice(&[0xc0, at as u8]);
        packet.extend_from_slice(&[0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 1, 2, 3, 4]);
        assert_eq!(parse_response(&packet, 1, &question), Err(WireError::BadPointer));
    }
}
