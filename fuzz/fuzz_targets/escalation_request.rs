//! Fuzzes what a hostile sandbox controls on the Escalation Socket: the
//! request frame (decoded exactly as the coordinator does) and the argv the
//! policy engine then judges. Invariants checked: nothing panics; a request
//! with a forbidden character never auto-approves; an auto-approval always
//! has a rule that is a token prefix of the request.
#![no_main]

use lazaret_core::policy::{self, Decision, EscalationRequest};
use lazaret_protocol::escalation::{frame_length, RequestPayload, SignedRequest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() >= 4 {
        let _ = frame_length([data[0], data[1], data[2], data[3]]);
    }
    let argv: Vec<String> = match serde_json::from_slice::<SignedRequest>(data) {
        Ok(signed) => match serde_json::from_str::<RequestPayload>(&signed.payload) {
            Ok(payload) => payload.argv,
            Err(_) => return,
        },
        // Also treat the input as a NUL-separated argv, so the policy engine
        // sees arbitrary words even when the JSON is not well-formed.
        Err(_) => String::from_utf8_lossy(data).split('\0').map(str::to_owned).collect(),
    };
    if argv.is_empty() {
        return;
    }
    let rules: Vec<policy::AutoApproveRule> =
        ["cargo check *", "npm test", "make *", "ls"].iter().filter_map(|entry| policy::parse_auto_approve_entry(entry).ok()).collect();
    let _ = policy::parse_auto_approve_entry(&argv.join(" "));
    let _ = policy::display_command(&argv);
    let _ = policy::risk_notes(&argv);
    match policy::decide(&EscalationRequest { argv: argv.clone() }, &rules) {
        Decision::AutoApprove { rule_index } => {
            assert!(argv.iter().all(|word| policy::has_forbidden_characters(word).is_none()), "forbidden character auto-approved: {argv:?}");
            let rule = &rules[rule_index];
            let words = &rule.argv;
            assert!(words.len() <= argv.len() && words[..] == argv[..words.len()], "not a token prefix: {words:?} / {argv:?}");
            assert!(rule.trailing_arguments || words.len() == argv.len(), "an exact rule approved more: {words:?} / {argv:?}");
            for extra in &argv[words.len()..] {
                assert!(policy::path_out_of_project_note(extra).is_none(), "a path out of the project auto-approved: {argv:?}");
            }
        }
        Decision::NeedsHuman { .. } => {}
    }
});
