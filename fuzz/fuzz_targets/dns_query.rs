//! Fuzzes what a hostile sandbox controls on the sidecar's resolver: the query
//! packet, and (as if an upstream were hostile too) the answer. Invariants
//! checked: nothing panics; a question the name policy lets through is an
//! A/AAAA question of plain labels under the allowlist; a reply to any parsed
//! query parses back with the same question; addresses taken from an answer
//! are of the question's type.
#![no_main]

use lazaret_dns::wire::{encode_error, encode_reply, parse_query, parse_response, TYPE_A, TYPE_AAAA};
use lazaret_dns::{NamePattern, NamePolicy, Question, Rcode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = encode_error(data, Rcode::FormatError);
    let mut policy = NamePolicy::new();
    for pattern in ["allowed.test", "*.wild.test"] {
        if let Ok(pattern) = NamePattern::parse(pattern) {
            policy.allow(pattern);
        }
    }
    if let Ok(query) = parse_query(data) {
        let question = &query.question;
        if policy.check(question).is_ok() {
            assert!(matches!(question.record_type, TYPE_A | TYPE_AAAA));
            let name = question.name();
            assert!(name == "allowed.test" || name.ends_with(".wild.test"), "{name}");
            assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'), "{name}");
        }
        let reply = encode_reply(&query, Rcode::NoError, &[("10.0.0.1".parse().unwrap(), 60), ("fd00::1".parse().unwrap(), 60)]);
        let parsed = parse_response(&reply, query.id, question).expect("our own reply parses");
        assert_eq!(parsed.question.name(), question.name());
    }
    for record_type in [TYPE_A, TYPE_AAAA] {
        let question = Question::new("allowed.test", record_type);
        let id = if data.len() >= 2 { u16::from_be_bytes([data[0], data[1]]) } else { 0 };
        if let Ok(response) = parse_response(data, id, &question) {
            for (address, _) in response.addresses() {
                assert_eq!(address.is_ipv4(), record_type == TYPE_A);
            }
        }
    }
});
