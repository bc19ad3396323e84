//! Each step of the layout history, on stores written as each layout did.

use super::*;
use lazaret_protocol::sidecar::{AnswerRefusal, DnsRefusal, PrivateAnswers, WithheldPart};
use lazaret_protocol::{
    AuditEvent, AuditGrant, AuditRecord, CredentialUse, DecisionSource, EntryVerdict, EscalationAudit, GrantScope, Outcome, PolicyAction,
};
use redb::ReadableTableMetadata;

/// The escalation of a record that must be one.
fn escalation(record: &AuditRecord) -> &EscalationAudit {
    match &record.event {
        AuditEvent::Escalation(escalation) => escalation,
        other => panic!("not an escalation: {other:?}"),
    }
}

/// Writes a store exactly as the v1 layout did (no `meta` table).
fn write_v1_store(path: &std::path::Path) {
    let database = redb::Database::create(path).expect("create");
    let write = database.begin_write().expect("write");
    {
        let mut table = write.open_table(SESSIONS_V1).expect("table");
        table.insert("second", "12|2000|2500|").expect("insert");
        table.insert("first", "11|1000|1500|3").expect("insert");
    }
    write.commit().expect("commit");
}

#[test]
fn migrates_a_store_written_by_the_previous_layout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.redb");
    write_v1_store(&path);
    let store = Store::open(&path).expect("open migrates");
    assert_eq!(store.schema_version().expect("version"), crate::SCHEMA_VERSION);
    let sessions = store.sessions(10).expect("sessions");
    assert_eq!(sessions.len(), 2);
    assert_eq!(sessions[0].session_id, "first");
    assert_eq!(sessions[0].exit_status, Some(3));
    assert_eq!(sessions[0].end_reason, "exited");
    assert_eq!(sessions[1].session_id, "second");
    assert_eq!(sessions[1].exit_status, None);
    assert_eq!(sessions[1].end_reason, "disconnected");
    // The old table is gone, and new records continue the sequence.
    let read = store.database().begin_read().expect("read");
    assert!(matches!(read.open_table(SESSIONS_V1), Err(redb::TableError::TableDoesNotExist(_))));
    drop(read);
    store.record_session(&sessions[0]).expect("append");
    assert_eq!(store.sessions(10).expect("sessions").len(), 3);
}

#[test]
fn a_bad_v1_row_aborts_the_whole_migration() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.redb");
    write_v1_store(&path);
    {
        let database = redb::Database::create(&path).expect("open");
        let write = database.begin_write().expect("write");
        write.open_table(SESSIONS_V1).expect("table").insert("bad", "not-a-record").expect("insert");
        write.commit().expect("commit");
    }
    let error = Store::open(&path).expect_err("corrupt row");
    assert!(error.to_string().contains("not-a-record"), "{error}");
    // Nothing was half-migrated: the v1 table is intact.
    let database = redb::Database::create(&path).expect("open");
    let read = database.begin_read().expect("read");
    assert_eq!(read.open_table(SESSIONS_V1).expect("v1 intact").len().expect("len"), 3);
    assert!(matches!(read.open_table(SESSIONS_V2), Err(redb::TableError::TableDoesNotExist(_))));
}

/// A real store written by the v3 layout (a domain of the end-to-end
/// suite at commit 0374937: three auto-approved escalations).
const V3_FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v3-written-by-0374937.redb");

fn v3_copy() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.redb");
    std::fs::copy(V3_FIXTURE, &path).expect("copy the fixture");
    (dir, path)
}

#[test]
fn a_v3_store_written_by_the_previous_build_verifies_after_the_migration() {
    let (_dir, path) = v3_copy();
    {
        let database = redb::Database::open(&path).expect("open v3");
        let read = database.begin_read().expect("read");
        assert_eq!(read.open_table(META).expect("meta").get(SCHEMA_VERSION_KEY).expect("get").map(|v| v.value()), Some(3));
        assert_eq!(read.open_table(AUDIT_V3).expect("v3 audit").len().expect("len"), 3);
    }
    // v3 to v4 to v5, each step a transaction of its own.
    let store = Store::open(&path).expect("open migrates");
    assert_eq!(store.schema_version().expect("version"), 5);
    let verification = store.verify_audit().expect("verify");
    assert!(verification.intact, "{verification:?}");
    assert_eq!(verification.records, 3);
    assert_eq!(verification.notes.len(), 2, "{verification:?}");
    assert!(verification.notes[0].contains("3 records were migrated from layout v3") && verification.notes[0].contains("7769e83a"));
    assert!(verification.notes[1].contains("3 records were migrated from layout v4;"), "{verification:?}");
    let records = store.audit_records(10).expect("records");
    let argv: Vec<_> = records.iter().map(|record| escalation(record).requested_argv.join(" ")).collect();
    assert_eq!(argv, ["echo one", "echo two", "echo three"]);
    assert!(records.iter().all(|record| record.outcome == Outcome::Auto && record.decided_by == Some(DecisionSource::Policy)));
    assert!(records.iter().all(|record| escalation(record).client_request_id.is_some() && escalation(record).verified));
    assert!(records.iter().all(|record| escalation(record).executed_argv.as_ref().is_some_and(|argv| argv[0].ends_with("/echo"))));
    // Its sessions, stored in snake_case by v2 and v3, read in the protocol's form.
    let sessions = store.sessions(10).expect("sessions");
    let ends: Vec<(&str, Option<i32>)> = sessions.iter().map(|session| (session.end_reason.as_str(), session.exit_status)).collect();
    assert_eq!(ends, [("exited", Some(0)), ("disconnected", None)], "{sessions:?}");
    assert!(sessions[0].command.join(" ").contains("lazaret-escalate -- echo three"), "{sessions:?}");
    // The trail goes on from there, and removing its end is reported.
    let mut next = records[2].clone();
    next.event = AuditEvent::Escalation(EscalationAudit::request("after-migration", "s"));
    store.append_audit(next).expect("append");
    assert!(store.verify_audit().expect("verify").intact);
    let write = store.database().begin_write().expect("write");
    write.open_table(AUDIT_V5).expect("table").remove(4).expect("remove");
    write.commit().expect("commit");
    assert!(!store.verify_audit().expect("verify").intact);
}

#[test]
fn a_v3_chain_broken_before_the_migration_stays_reported() {
    let (_dir, path) = v3_copy();
    {
        let database = redb::Database::open(&path).expect("open v3");
        let write = database.begin_write().expect("write");
        {
            let mut table = write.open_table(AUDIT_V3).expect("v3 audit");
            let bytes = table.get(2).expect("get").expect("present").value().to_vec();
            let edited = String::from_utf8(bytes).expect("utf-8").replace("\"echo\",\"two\"", "\"echo\",\"2\"");
            table.insert(2, edited.as_bytes()).expect("insert");
        }
        write.commit().expect("commit");
    }
    let store = Store::open(&path).expect("open migrates");
    let verification = store.verify_audit().expect("verify");
    assert!(!verification.intact, "{verification:?}");
    assert_eq!(verification.problem_at, Some(2));
    assert!(verification.problem.as_deref().unwrap_or_default().contains("before the migration"), "{verification:?}");
    // Nothing was dropped: the edited record is there as found.
    assert_eq!(escalation(&store.audit_records(10).expect("records")[1]).requested_argv, ["echo", "2"]);
}

#[test]
fn v1_values_parse() {
    assert_eq!(parse_v1("s", "1|2|3|").map(|r| r.exit_status), Some(None));
    assert_eq!(parse_v1("s", "1|2|3|-1").map(|r| r.exit_status), Some(Some(-1)));
    assert!(parse_v1("s", "1|2").is_none());
    assert!(parse_v1("s", "x|2|3|").is_none());
}

/// The records of one of each kind, as the coordinator of layout v4 built
/// them (`network_audit_record` and its callers, the escalation server):
/// the same words, formats and fields, chain fields left empty.
mod written_by_v4 {
    use super::*;

    /// `network_audit_record`: a made-up id, the session `-`, verified.
    fn network(number: u64, outcome: Outcome, reason: Option<String>, decided_by: DecisionSource, argv: &[&str]) -> V4Record {
        let now = 1_796_000_000_000 + number;
        V4Record {
            sequence: 0,
            previous_hash: String::new(),
            hash: String::new(),
            request_id: format!("network-{now}-{number}"),
            client_request_id: None,
            session_id: "-".to_owned(),
            verified: true,
            outcome,
            reason,
            decided_by: Some(decided_by),
            justification: None,
            requested_argv: argv.iter().map(|word| (*word).to_owned()).collect(),
            executed_argv: None,
            exit_status: None,
            received_at_ms: now,
            decided_at_ms: Some(now),
            finished_at_ms: Some(now),
        }
    }

    /// `blank_record` and `request_record` of the escalation server.
    fn escalation(request_id: &str, client_request_id: Option<&str>, session_id: &str, received_at_ms: u64) -> V4Record {
        V4Record {
            sequence: 0,
            previous_hash: String::new(),
            hash: String::new(),
            request_id: request_id.to_owned(),
            client_request_id: client_request_id.map(str::to_owned),
            session_id: session_id.to_owned(),
            verified: false,
            outcome: Outcome::Rejected,
            reason: None,
            decided_by: None,
            justification: None,
            requested_argv: Vec::new(),
            executed_argv: None,
            exit_status: None,
            received_at_ms,
            decided_at_ms: None,
            finished_at_ms: None,
        }
    }

    fn words(argv: &[&str]) -> Vec<String> {
        argv.iter().map(|word| (*word).to_owned()).collect()
    }

    /// One of each kind, in the order the kinds are checked.
    pub(super) fn records() -> Vec<V4Record> {
        let sidecar = DecisionSource::NetworkSidecar;
        let cli = || DecisionSource::rpc("cli");
        let mut records = Vec::new();
        // 1. A connection refused before it made a request; 2. a window's summary.
        let mut refused = escalation("-", None, "-", 1_796_000_000_001);
        refused.reason = Some("reading the request: early eof".to_owned());
        records.push(refused);
        let mut summary = escalation("-", None, "-", 1_796_000_000_002);
        summary.reason = Some("2999 more connections refused (tls) within 10 s; counted, not recorded one by one".to_owned());
        records.push(summary);
        // 3. A forged request, refused.
        let mut forged = escalation("0123456789abcdef0123456789abcdef", Some("agent-7"), "feedfeedfeedfeed", 1_796_000_000_003);
        forged.reason = Some("the delegation signature does not verify".to_owned());
        forged.requested_argv = words(&["rm", "-rf", "/"]);
        forged.justification = Some("trust me".to_owned());
        records.push(forged);
        // 4. An auto-approved run; 5. a denial by a human.
        let mut auto =
            escalation("c102c341eaf674c820a23d7dfdba9270", Some("agent-8"), "a98dc688481839dc94ec367c41b22429", 1_796_000_000_004);
        auto.verified = true;
        auto.outcome = Outcome::Auto;
        auto.decided_by = Some(DecisionSource::Policy);
        auto.requested_argv = words(&["echo", "ok"]);
        auto.executed_argv = Some(words(&["/usr/bin/echo", "ok"]));
        auto.exit_status = Some(0);
        auto.decided_at_ms = Some(1_796_000_000_005);
        auto.finished_at_ms = Some(1_796_000_000_006);
        records.push(auto);
        let mut denied =
            escalation("66e906c6a5b5279dde4e04b4437dfa8f", Some("agent-9"), "a98dc688481839dc94ec367c41b22429", 1_796_000_000_007);
        denied.verified = true;
        denied.outcome = Outcome::Denied;
        denied.decided_by = Some(DecisionSource::rpc("vscode"));
        denied.reason = Some("not in this repository".to_owned());
        denied.requested_argv = words(&["rm", "-rf", "build"]);
        denied.decided_at_ms = Some(1_796_000_000_008);
        denied.finished_at_ms = Some(1_796_000_000_008);
        records.push(denied);
        // 6, 7. `sidecar_event`: refused questions and answers.
        records.push(network(
            6,
            Outcome::DnsRefused,
            Some("recordType: record type TXT is not served (only A and AAAA)".to_owned()),
            sidecar.clone(),
            &["dns", "evil.example", "TXT", "(+12 refusals not recorded: rate limit)"],
        ));
        records.push(network(
            7,
            Outcome::DnsAnswerRefused,
            Some("privateAddress: 10.0.0.1 is a private address; 127.0.0.1 is never a remote host".to_owned()),
            sidecar.clone(),
            &["dns", "rebind.example", "A", "10.0.0.1", "127.0.0.1"],
        ));
        // 8, 9, 10. The credential endpoints.
        records.push(network(
            8,
            Outcome::CredentialRejected,
            Some("https://api.example answered 401: the key may be revoked or wrong".to_owned()),
            sidecar.clone(),
            &["credential", "https://api.example", "401"],
        ));
        records.push(network(
            9,
            Outcome::CredentialWithheld,
            Some("https://api.example's answer (-) to POST carried the key in its body: its body was cut before the key (the connection closed)".to_owned()),
            sidecar.clone(),
            &["credential", "https://api.example", "POST", "-", "body", "(+2 events not recorded: rate limit)"],
        ));
        let mut used = network(
            10,
            Outcome::CredentialUse,
            None,
            sidecar.clone(),
            &[
                "credential-use",
                "https://api.example",
                "1xx=0 2xx=5 3xx=0 4xx=1 5xx=0 rejected=1 failed=2 sent=300B received=4096B withheld=0",
                "https://other.example:8443",
                "1xx=1 2xx=0 3xx=2 4xx=0 5xx=3 rejected=0 failed=0 sent=0B received=12B withheld=1",
            ],
        );
        used.session_id = "f742a361d8ba74a012b08f5c71c0ced8".to_owned();
        records.push(used);
        // 11, 12, 13. `net allow`, a `net deny` that did not take, `net reload`.
        let rpc = DecisionSource::Rpc { client: None };
        records.push(network(11, Outcome::NetworkAllowed, None, rpc.clone(), &["net", "allow", "10.213.199.12/32"]));
        records.push(network(
            12,
            Outcome::Rejected,
            Some("the Network Sidecar stopped".to_owned()),
            rpc.clone(),
            &["net", "deny", "*.npmjs.org"],
        ));
        records.push(network(
            13,
            Outcome::NetworkReloaded,
            None,
            rpc,
            &["net", "reload", "github.com", "10.0.0.0/8", "private_answers=refuse"],
        ));
        // 14, 15. Network requests asked: a name, an address's service.
        let mut asked = network(
            14,
            Outcome::NetworkAsked,
            Some("no allow entry covers it; waiting for a human".to_owned()),
            sidecar.clone(),
            &["network", "grant.test", "AAAA"],
        );
        asked.request_id = "net-7bcb4d9849c9e142".to_owned();
        records.push(asked);
        let mut connection = network(
            15,
            Outcome::NetworkAsked,
            Some(
                "no entry covers the address's protocol and port: the connection was refused; asking a human whether to allow it"
                    .to_owned(),
            ),
            sidecar.clone(),
            &["network", "10.213.20.13/32", "tcp/8081"],
        );
        connection.request_id = "net-0d0d0d0d0d0d0d0d".to_owned();
        records.push(connection);
        // 16, 17. The queue full, and the count of what followed.
        records.push(network(
            16,
            Outcome::NetworkQueueFull,
            Some("32 network requests are pending, as many as a domain takes: burst-33.test was refused without asking (later ones are counted in the next record)".to_owned()),
            DecisionSource::Policy,
            &["network", "burst-33.test", "A"],
        ));
        records.push(network(
            17,
            Outcome::NetworkQueueFull,
            Some("967 more destinations were refused without asking while the queue was full".to_owned()),
            DecisionSource::Policy,
            &["network", "queue"],
        ));
        // 18, 19. Answers: a service allowed for some minutes, every port refused for the session.
        let mut granted = network(
            18,
            Outcome::NetworkGranted,
            Some("allowed for 15 min".to_owned()),
            cli(),
            &["network", "10.213.20.13/32 tcp/8081", "allow", "15 min"],
        );
        granted.request_id = "net-0d0d0d0d0d0d0d0d".to_owned();
        records.push(granted);
        let mut refused = network(
            19,
            Outcome::NetworkRefused,
            Some("refused for this session".to_owned()),
            cli(),
            &["network", "10.213.20.14/32", "deny", "this session", "every port"],
        );
        refused.request_id = "net-1e1e1e1e1e1e1e1e".to_owned();
        records.push(refused);
        // 20, 21. Expired: a request nobody answered, a grant's minutes.
        let mut unanswered = network(
            20,
            Outcome::NetworkExpired,
            Some("nobody answered within 10 minutes".to_owned()),
            DecisionSource::Timeout,
            &["network", "grant.test", "A", "AAAA"],
        );
        unanswered.request_id = "net-2f2f2f2f2f2f2f2f".to_owned();
        records.push(unanswered);
        records.push(network(
            21,
            Outcome::NetworkExpired,
            Some("allowed for 15 min ended".to_owned()),
            DecisionSource::Timeout,
            &["network", "10.213.20.13/32 tcp/8081", "allow", "15 min"],
        ));
        // 22, 23. Revoked: a grant for the profile, an auto-approve rule.
        records.push(network(
            22,
            Outcome::NetworkRevoked,
            Some("allowed for the profile revoked".to_owned()),
            cli(),
            &["network", "grant.test", "allow", "the profile"],
        ));
        records.push(network(
            23,
            Outcome::NetworkRevoked,
            Some("revoked for this run of the domain (the configuration file is unchanged)".to_owned()),
            DecisionSource::rpc("neovim"),
            &["auto_approve", "cargo check *"],
        ));
        // 24, 25. Shapes no v4 writer made: kept as they are.
        records.push(network(24, Outcome::NetworkAllowed, None, DecisionSource::Rpc { client: None }, &["net", "sideways", "x"]));
        records.push(network(
            25,
            Outcome::DnsRefused,
            Some("tooFar: a refusal this build never heard of".to_owned()),
            DecisionSource::NetworkSidecar,
            &["dns", "far.example", "A"],
        ));
        records
    }
}

/// Writes a store of layout v4 holding `records`, chained and with its head
/// beside it, as the v4 store wrote them.
fn write_v4_store(path: &std::path::Path, records: Vec<V4Record>) {
    let database = redb::Database::create(path).expect("create");
    let write = database.begin_write().expect("write");
    let mut head = GENESIS_HASH.to_owned();
    let count = records.len() as u64;
    {
        write.open_table(META).expect("meta").insert(SCHEMA_VERSION_KEY, 4).expect("version");
        write.open_table(SESSIONS_V2).expect("sessions");
        let mut table = write.open_table(AUDIT_V4).expect("audit");
        for (index, mut record) in records.into_iter().enumerate() {
            record.sequence = index as u64 + 1;
            record.previous_hash = head;
            let (hash, stored) = crate::audit::encode_json(&record).expect("encode");
            table.insert(record.sequence, stored.as_slice()).expect("insert");
            head = hash;
        }
    }
    write.commit().expect("commit");
    drop(database);
    let head = crate::audit::Head { records: count, hash: head };
    let mut head_path = path.as_os_str().to_owned();
    head_path.push(".audit-head");
    std::fs::write(head_path, serde_json::to_vec(&head).expect("json")).expect("head");
}

#[test]
fn every_kind_the_v4_coordinator_wrote_is_read_into_its_typed_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.redb");
    let written = written_by_v4::records();
    write_v4_store(&path, written.clone());
    let store = Store::open(&path).expect("open migrates");
    assert_eq!(store.schema_version().expect("version"), 5);
    let verification = store.verify_audit().expect("verify");
    assert!(verification.intact, "{verification:?}");
    assert_eq!(verification.records, 25);
    assert_eq!(verification.notes.len(), 1, "{verification:?}");
    assert!(
        verification.notes[0].starts_with("25 records were migrated from layout v4 (2 of no known kind kept as `legacy` records"),
        "{verification:?}"
    );
    let records = store.audit_records(100).expect("records");
    assert_eq!(records.len(), written.len());
    // The envelope is carried over as it was (the reason of a DNS refusal
    // loses the refusal's word, which is its own field now).
    for (record, old) in records.iter().zip(&written) {
        assert_eq!(
            (record.outcome, &record.decided_by, record.received_at_ms, record.decided_at_ms, record.finished_at_ms),
            (old.outcome, &old.decided_by, old.received_at_ms, old.decided_at_ms, old.finished_at_ms),
            "{record:?}"
        );
        if !matches!(record.event, AuditEvent::DnsRefused { .. } | AuditEvent::DnsAnswerRefused { .. }) {
            assert_eq!(record.reason, old.reason, "{record:?}");
        }
    }
    let events: Vec<&AuditEvent> = records.iter().map(|record| &record.event).collect();
    assert_eq!(*events[0], AuditEvent::ConnectionRefused { connections: 1 });
    assert_eq!(*events[1], AuditEvent::ConnectionRefused { connections: 2999 });
    assert_eq!(
        *events[2],
        AuditEvent::Escalation(EscalationAudit {
            request_id: "0123456789abcdef0123456789abcdef".into(),
            client_request_id: Some("agent-7".into()),
            session_id: "feedfeedfeedfeed".into(),
            verified: false,
            justification: Some("trust me".into()),
            requested_argv: vec!["rm".into(), "-rf".into(), "/".into()],
            executed_argv: None,
            exit_status: None,
        })
    );
    let auto = escalation(&records[3]);
    assert_eq!(
        (auto.verified, auto.exit_status, auto.executed_argv.as_deref()),
        (true, Some(0), Some(&["/usr/bin/echo".to_owned(), "ok".to_owned()][..]))
    );
    assert_eq!(escalation(&records[4]).requested_argv, ["rm", "-rf", "build"]);
    assert_eq!(
        *events[5],
        AuditEvent::DnsRefused {
            name: "evil.example".into(),
            record_type: "TXT".into(),
            refusal: DnsRefusal::RecordType,
            suppressed: Some(12)
        }
    );
    assert_eq!(records[5].reason.as_deref(), Some("record type TXT is not served (only A and AAAA)"));
    assert_eq!(
        *events[6],
        AuditEvent::DnsAnswerRefused {
            name: "rebind.example".into(),
            record_type: "A".into(),
            addresses: vec!["10.0.0.1".into(), "127.0.0.1".into()],
            refusal: AnswerRefusal::PrivateAddress,
            suppressed: None,
        }
    );
    assert_eq!(records[6].reason.as_deref(), Some("10.0.0.1 is a private address; 127.0.0.1 is never a remote host"));
    assert_eq!(*events[7], AuditEvent::CredentialRejected { origin: "https://api.example".into(), status: 401, suppressed: None });
    assert_eq!(
        *events[8],
        AuditEvent::CredentialWithheld {
            origin: "https://api.example".into(),
            method: "POST".into(),
            status: None,
            part: WithheldPart::Body,
            suppressed: Some(2),
        }
    );
    assert_eq!(
        *events[9],
        AuditEvent::CredentialUse {
            session_id: "f742a361d8ba74a012b08f5c71c0ced8".into(),
            endpoints: vec![
                CredentialUse {
                    origin: "https://api.example".into(),
                    status_1xx: 0,
                    status_2xx: 5,
                    status_3xx: 0,
                    status_4xx: 1,
                    status_5xx: 0,
                    rejected: 1,
                    failed: 2,
                    bytes_sent: 300,
                    bytes_received: 4096,
                    withheld: 0,
                },
                CredentialUse {
                    origin: "https://other.example:8443".into(),
                    status_1xx: 1,
                    status_2xx: 0,
                    status_3xx: 2,
                    status_4xx: 0,
                    status_5xx: 3,
                    rejected: 0,
                    failed: 0,
                    bytes_sent: 0,
                    bytes_received: 12,
                    withheld: 1,
                },
            ],
        }
    );
    assert_eq!(
        *events[10],
        AuditEvent::PolicyChanged { action: PolicyAction::Allow, entries: vec!["10.213.199.12/32".into()], private_answers: None }
    );
    assert_eq!(
        *events[11],
        AuditEvent::PolicyChanged { action: PolicyAction::Deny, entries: vec!["*.npmjs.org".into()], private_answers: None }
    );
    assert_eq!(records[11].outcome, Outcome::Rejected);
    assert_eq!(
        *events[12],
        AuditEvent::PolicyChanged {
            action: PolicyAction::Reload,
            entries: vec!["github.com".into(), "10.0.0.0/8".into()],
            private_answers: Some(PrivateAnswers::Refuse),
        }
    );
    assert_eq!(
        *events[13],
        AuditEvent::NetworkAsked {
            request_id: "net-7bcb4d9849c9e142".into(),
            destination: "grant.test".into(),
            record_type: Some("AAAA".into()),
            service: None
        }
    );
    assert_eq!(
        *events[14],
        AuditEvent::NetworkAsked {
            request_id: "net-0d0d0d0d0d0d0d0d".into(),
            destination: "10.213.20.13/32".into(),
            record_type: None,
            service: Some("tcp/8081".into()),
        }
    );
    assert_eq!(
        *events[15],
        AuditEvent::NetworkQueueFull {
            destination: Some("burst-33.test".into()),
            record_type: Some("A".into()),
            service: None,
            more_refused: None
        }
    );
    assert_eq!(*events[16], AuditEvent::NetworkQueueFull { destination: None, record_type: None, service: None, more_refused: Some(967) });
    let service_grant = AuditGrant {
        id: None,
        destination: "10.213.20.13/32".into(),
        service: Some("tcp/8081".into()),
        every_port: false,
        verdict: EntryVerdict::Allow,
        scope: GrantScope::Minutes { minutes: 15 },
    };
    assert_eq!(*events[17], AuditEvent::NetworkAnswered { request_id: "net-0d0d0d0d0d0d0d0d".into(), grant: service_grant.clone() });
    assert_eq!(
        *events[18],
        AuditEvent::NetworkAnswered {
            request_id: "net-1e1e1e1e1e1e1e1e".into(),
            grant: AuditGrant {
                id: None,
                destination: "10.213.20.14/32".into(),
                service: None,
                every_port: true,
                verdict: EntryVerdict::Deny,
                scope: GrantScope::Session,
            },
        }
    );
    assert_eq!(
        *events[19],
        AuditEvent::NetworkRequestExpired {
            request_id: "net-2f2f2f2f2f2f2f2f".into(),
            destination: "grant.test".into(),
            record_types: vec!["A".into(), "AAAA".into()],
            service: None,
        }
    );
    assert_eq!(*events[20], AuditEvent::GrantExpired { grant: service_grant });
    assert_eq!(
        *events[21],
        AuditEvent::GrantRevoked {
            grant: AuditGrant {
                id: None,
                destination: "grant.test".into(),
                service: None,
                every_port: false,
                verdict: EntryVerdict::Allow,
                scope: GrantScope::Profile,
            },
        }
    );
    assert_eq!(*events[22], AuditEvent::AutoApproveRevoked { rule_id: None, entry: "cargo check *".into() });
    // What no v4 writer wrote is kept, every field as it was.
    for (record, old) in records[23..].iter().zip(&written[23..]) {
        assert_eq!(
            record.event,
            AuditEvent::Legacy(EscalationAudit {
                request_id: old.request_id.clone(),
                client_request_id: None,
                session_id: "-".into(),
                verified: true,
                justification: None,
                requested_argv: old.requested_argv.clone(),
                executed_argv: None,
                exit_status: None,
            })
        );
    }
    // No made-up id and no `-` session survives outside `legacy`.
    for record in &records[..23] {
        let json = serde_json::to_string(record).expect("json");
        assert!(!json.contains("\"network-") && !json.contains("\"sessionId\":\"-\"") && !json.contains("\"requestId\":\"-\""), "{json}");
    }
}

/// An agent chose its request ids before D16, and can name its session: a
/// request shaped like a network record is still an escalation (or kept),
/// never read as a network event.
#[test]
fn an_escalation_shaped_like_a_network_record_is_not_read_as_one() {
    let mut forged = written_by_v4::records()[5].clone();
    forged.session_id = "a98dc688481839dc94ec367c41b22429".into();
    let (record, legacy) = v4::to_v5(forged.clone());
    assert!(legacy && matches!(record.event, AuditEvent::Legacy(_)), "{record:?}");
    forged.outcome = Outcome::Denied;
    let (record, legacy) = v4::to_v5(forged);
    assert!(!legacy, "{record:?}");
    assert_eq!(escalation(&record).requested_argv, ["dns", "evil.example", "TXT", "(+12 refusals not recorded: rate limit)"]);
}

/// A real store written by the v4 layout (a domain of `e2e_network`'s
/// `a_refusal_is_remembered_and_grants_are_listed_kept_and_revoked` at
/// commit 4b16a83, followed by a TXT and a one-label question, `net allow`,
/// `net deny` and `net reload`): 94 records, with its head.
const V4_FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v4-written-by-4b16a83.redb");

fn v4_copy() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.redb");
    std::fs::copy(V4_FIXTURE, &path).expect("copy the fixture");
    std::fs::copy(format!("{V4_FIXTURE}.audit-head"), dir.path().join("state.redb.audit-head")).expect("copy its head");
    (dir, path)
}

#[test]
fn a_v4_store_written_by_the_previous_build_verifies_after_the_migration() {
    let (_dir, path) = v4_copy();
    {
        let database = redb::Database::open(&path).expect("open v4");
        let read = database.begin_read().expect("read");
        assert_eq!(read.open_table(META).expect("meta").get(SCHEMA_VERSION_KEY).expect("get").map(|v| v.value()), Some(4));
        assert_eq!(read.open_table(AUDIT_V4).expect("v4 audit").len().expect("len"), 94);
    }
    let store = Store::open(&path).expect("open migrates");
    assert_eq!(store.schema_version().expect("version"), 5);
    let verification = store.verify_audit().expect("verify");
    assert!(verification.intact, "{verification:?}");
    assert_eq!(verification.records, 94);
    assert_eq!(
        verification.notes,
        ["94 records were migrated from layout v4; the old chain verified up to its head 7f731492f5c5f33eb1752b0f1adfb64c3595ac50de0e13bf8aea2ce3ccb99a78"]
    );
    {
        let read = store.database().begin_read().expect("read");
        assert!(matches!(read.open_table(AUDIT_V4), Err(redb::TableError::TableDoesNotExist(_))), "the v4 table is gone");
    }
    let records = store.audit_records(1000).expect("records");
    let count = |kind: &str| records.iter().filter(|record| serde_json::to_value(record).expect("json")["type"] == kind).count();
    assert_eq!(
        [count("networkAsked"), count("networkAnswered"), count("grantRevoked"), count("policyChanged"), count("dnsRefused")],
        [3, 2, 2, 3, 84]
    );
    assert_eq!(count("legacy"), 0, "every record of the real store is of a known kind");
    assert_eq!(
        records[0].event,
        AuditEvent::NetworkAsked {
            request_id: "net-f6bea40a00a869bc".into(),
            destination: "deny.test".into(),
            record_type: Some("A".into()),
            service: None
        }
    );
    let refusal = AuditGrant {
        id: None,
        destination: "deny.test".into(),
        service: None,
        every_port: false,
        verdict: EntryVerdict::Deny,
        scope: GrantScope::Session,
    };
    assert_eq!(records[1].event, AuditEvent::NetworkAnswered { request_id: "net-f6bea40a00a869bc".into(), grant: refusal.clone() });
    assert_eq!((records[1].outcome, &records[1].decided_by), (Outcome::NetworkRefused, &Some(DecisionSource::rpc("cli"))));
    assert_eq!(
        records[80].event,
        AuditEvent::DnsRefused { name: "deny.test".into(), record_type: "A".into(), refusal: DnsRefusal::Denied, suppressed: Some(7) }
    );
    assert_eq!(records[80].reason.as_deref(), Some("the name is denied by `deny.test`"));
    assert_eq!(records[81].event, AuditEvent::GrantRevoked { grant: refusal });
    assert_eq!(
        records[86].event,
        AuditEvent::NetworkAnswered {
            request_id: "net-7bcb4d9849c9e142".into(),
            grant: AuditGrant {
                id: None,
                destination: "grant.test".into(),
                service: None,
                every_port: false,
                verdict: EntryVerdict::Allow,
                scope: GrantScope::Profile,
            },
        }
    );
    assert_eq!(
        records[88].event,
        AuditEvent::DnsRefused { name: "grant.test".into(), record_type: "TXT".into(), refusal: DnsRefusal::RecordType, suppressed: None }
    );
    assert!(matches!(&records[89].event, AuditEvent::DnsRefused { name, refusal: DnsRefusal::NotAName, .. } if name == "wpad"));
    assert_eq!(
        records[93].event,
        AuditEvent::PolicyChanged { action: PolicyAction::Reload, entries: Vec::new(), private_answers: Some(PrivateAnswers::Allow) }
    );
    // Sessions are untouched, and the trail goes on from there.
    assert!(!store.sessions(10).expect("sessions").is_empty());
    let mut next = records[93].clone();
    next.event = AuditEvent::ConnectionRefused { connections: 1 };
    store.append_audit(next).expect("append");
    let verification = store.verify_audit().expect("verify");
    assert!(verification.intact && verification.records == 95, "{verification:?}");
}

/// The v4 chain is verified before it is carried over, head included: a
/// record removed from its end, or one edited, is reported after the
/// migration as it was before.
#[test]
fn a_v4_chain_broken_before_the_migration_stays_reported() {
    let (_dir, path) = v4_copy();
    {
        let database = redb::Database::open(&path).expect("open v4");
        let write = database.begin_write().expect("write");
        write.open_table(AUDIT_V4).expect("v4 audit").remove(94).expect("remove");
        write.commit().expect("commit");
    }
    let store = Store::open(&path).expect("open migrates");
    let verification = store.verify_audit().expect("verify");
    assert!(!verification.intact, "{verification:?}");
    assert_eq!((verification.records, verification.problem_at), (93, Some(94)));
    let problem = verification.problem.unwrap_or_default();
    assert!(problem.contains("before the migration from layout v4") && problem.contains("the last 1 record(s) were removed"), "{problem}");
    drop(store);

    let (_dir, path) = v4_copy();
    {
        let database = redb::Database::open(&path).expect("open v4");
        let write = database.begin_write().expect("write");
        {
            let mut table = write.open_table(AUDIT_V4).expect("v4 audit");
            let bytes = table.get(87).expect("get").expect("present").value().to_vec();
            let edited = String::from_utf8(bytes).expect("utf-8").replace("\"the profile\"", "\"this session\"");
            table.insert(87, edited.as_bytes()).expect("insert");
        }
        write.commit().expect("commit");
    }
    let store = Store::open(&path).expect("open migrates");
    let verification = store.verify_audit().expect("verify");
    assert!(!verification.intact, "{verification:?}");
    assert_eq!(verification.problem_at, Some(87));
    assert!(verification.problem.unwrap_or_default().contains("record 87 was modified after it was written"));
    // Nothing was dropped: the edited record is there as found, typed.
    let edited = &store.audit_records(1000).expect("records")[86];
    assert!(matches!(&edited.event, AuditEvent::NetworkAnswered { grant, .. } if grant.scope == GrantScope::Session), "{edited:?}");
}

/// One transaction: a record the migration cannot read at all leaves the v4
/// layout as it was; and a crash between the commit and the head's move
/// (the v4 head still beside the store) is finished at the next open.
#[test]
fn the_v4_migration_is_all_or_nothing_and_its_head_follows() {
    let (_dir, path) = v4_copy();
    {
        let database = redb::Database::open(&path).expect("open v4");
        let write = database.begin_write().expect("write");
        write.open_table(AUDIT_V4).expect("v4 audit").insert(95, b"not a record".as_slice()).expect("insert");
        write.commit().expect("commit");
    }
    let error = Store::open(&path).expect_err("an unreadable record");
    assert!(error.to_string().contains("audit 95") && error.to_string().contains("layout v5"), "{error}");
    {
        let database = redb::Database::open(&path).expect("open");
        let read = database.begin_read().expect("read");
        assert_eq!(read.open_table(META).expect("meta").get(SCHEMA_VERSION_KEY).expect("get").map(|v| v.value()), Some(4));
        assert_eq!(read.open_table(AUDIT_V4).expect("v4 intact").len().expect("len"), 95);
        assert!(matches!(read.open_table(AUDIT_V5), Err(redb::TableError::TableDoesNotExist(_))));
    }

    let (dir, path) = v4_copy();
    let v4_head = std::fs::read(dir.path().join("state.redb.audit-head")).expect("v4 head");
    drop(Store::open(&path).expect("open migrates"));
    std::fs::write(dir.path().join("state.redb.audit-head"), &v4_head).expect("the v4 head back, as a crash leaves it");
    let store = Store::open(&path).expect("open again");
    let verification = store.verify_audit().expect("verify");
    assert!(verification.intact, "{verification:?}");
    assert_ne!(std::fs::read(dir.path().join("state.redb.audit-head")).expect("head"), v4_head);
}
