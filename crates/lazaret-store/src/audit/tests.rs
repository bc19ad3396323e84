//! The chain, the head beside the store, and what verification reports.

use lazaret_protocol::{AuditEvent, DecisionSource, EscalationAudit, Outcome};

use super::*;

fn record(request: &str) -> AuditRecord {
    let mut escalation = EscalationAudit::request(request, "s");
    escalation.verified = true;
    escalation.requested_argv = vec!["true".into()];
    escalation.executed_argv = Some(vec!["/bin/true".into()]);
    escalation.exit_status = Some(0);
    let mut record = AuditRecord::at(1, AuditEvent::Escalation(escalation), Outcome::Auto, DecisionSource::Policy, None);
    record.decided_at_ms = Some(2);
    record.finished_at_ms = Some(3);
    record
}

/// The request id of an escalation record.
fn request_id(record: &AuditRecord) -> &str {
    match &record.event {
        AuditEvent::Escalation(escalation) => &escalation.request_id,
        other => panic!("not an escalation: {other:?}"),
    }
}

fn store_with(requests: &[&str]) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("state.redb")).expect("open");
    for request in requests {
        store.append_audit(record(request)).expect("append");
    }
    (dir, store)
}

/// Changes the stored bytes of record `key` in place, as someone with
/// write access to the file would.
fn rewrite(store: &Store, key: u64, change: impl FnOnce(Vec<u8>) -> Vec<u8>) {
    let write = store.database().begin_write().expect("write");
    {
        let mut table = write.open_table(AUDIT_V5).expect("table");
        let bytes = table.get(key).expect("get").expect("present").value().to_vec();
        table.insert(key, change(bytes).as_slice()).expect("insert");
    }
    write.commit().expect("commit");
}

fn remove(store: &Store, key: u64) {
    let write = store.database().begin_write().expect("write");
    write.open_table(AUDIT_V5).expect("table").remove(key).expect("remove");
    write.commit().expect("commit");
}

fn replace_text(bytes: Vec<u8>, from: &str, to: &str) -> Vec<u8> {
    String::from_utf8(bytes).expect("utf-8").replacen(from, to, 1).into_bytes()
}

#[test]
fn pages_walk_back_without_gaps_or_overlap() {
    let (_dir, store) = store_with(&[]);
    assert!(store.audit_records_before(None, 10).expect("empty").is_empty());
    for index in 0..7 {
        store.append_audit(record(&format!("r{index}"))).expect("append");
    }
    let sequences = |records: Vec<AuditRecord>| records.iter().map(|record| record.sequence).collect::<Vec<_>>();
    assert_eq!(sequences(store.audit_records_before(None, 3).expect("page")), [5, 6, 7]);
    assert_eq!(sequences(store.audit_records_before(Some(5), 3).expect("page")), [2, 3, 4]);
    assert_eq!(sequences(store.audit_records_before(Some(2), 3).expect("page")), [1]);
    assert!(store.audit_records_before(Some(1), 3).expect("page").is_empty());
    assert_eq!(sequences(store.audit_records(100).expect("all")), [1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn records_read_back_as_written_and_the_chain_links_them() {
    let (_dir, store) = store_with(&["a", "b"]);
    let records = store.audit_records(10).expect("records");
    assert_eq!(records[0].previous_hash, GENESIS_HASH);
    assert_eq!(records[1].previous_hash, records[0].hash);
    assert_eq!(request_id(&records[1]), "b");
    assert_eq!(records[1].decided_by, Some(DecisionSource::Policy));
    let verification = store.verify_audit().expect("verify");
    assert!(verification.intact, "{verification:?}");
    assert_eq!(verification.records, 2);
    assert!(verification.notes.is_empty(), "{verification:?}");
}

#[test]
fn an_edited_record_is_reported() {
    let (_dir, store) = store_with(&["a", "b", "c"]);
    rewrite(&store, 2, |bytes| replace_text(bytes, "\"outcome\":\"auto\"", "\"outcome\":\"denied\""));
    let verification = store.verify_audit().expect("verify");
    assert!(!verification.intact);
    assert_eq!(verification.problem_at, Some(2));
    assert!(verification.problem.as_deref().unwrap_or_default().contains("modified"), "{verification:?}");
}

#[test]
fn an_edited_last_record_with_its_hash_recomputed_is_reported_by_the_head() {
    let (_dir, store) = store_with(&["a", "b", "c"]);
    rewrite(&store, 3, |bytes| {
        let (_, json) = split(&bytes).expect("stored");
        let json = replace_text(json.to_vec(), "\"outcome\":\"auto\"", "\"outcome\":\"denied\"");
        let mut stored = sha256_hex(&json).into_bytes();
        stored.push(b'\n');
        stored.extend(json);
        stored
    });
    let verification = store.verify_audit().expect("verify");
    assert!(!verification.intact, "{verification:?}");
    assert_eq!(verification.problem_at, Some(3));
    assert!(verification.problem.as_deref().unwrap_or_default().contains("head"), "{verification:?}");
}

#[test]
fn removing_the_last_record_is_reported() {
    let (_dir, store) = store_with(&["a", "b", "c"]);
    remove(&store, 3);
    let verification = store.verify_audit().expect("verify");
    assert!(!verification.intact, "{verification:?}");
    assert_eq!(verification.records, 2);
    assert_eq!(verification.problem_at, Some(3));
    assert!(verification.problem.as_deref().unwrap_or_default().contains("the last 1 record(s) were removed"), "{verification:?}");
    // Appending after the removal does not hide it: the head stays as
    // evidence, and the new record 3 is not the one it was written for.
    store.append_audit(record("d")).expect("append");
    let verification = store.verify_audit().expect("verify");
    assert!(!verification.intact, "{verification:?}");
    assert_eq!(verification.problem_at, Some(3));
}

#[test]
fn removing_a_record_in_the_middle_breaks_the_link() {
    let (_dir, store) = store_with(&["a", "b", "c"]);
    remove(&store, 1);
    let verification = store.verify_audit().expect("verify");
    assert!(!verification.intact);
    assert_eq!(verification.problem_at, Some(2));
}

#[test]
fn a_missing_head_is_reported_and_a_head_behind_is_a_note() {
    let (_dir, store) = store_with(&["a", "b"]);
    let head = std::fs::read(store.audit_head_path()).expect("head written beside the store");
    std::fs::remove_file(store.audit_head_path()).expect("remove head");
    let verification = store.verify_audit().expect("verify");
    assert!(!verification.intact);
    assert!(verification.problem.as_deref().unwrap_or_default().contains("missing"), "{verification:?}");
    // The head as it was after record 2, then record 3 appended and the
    // head put back (a crash between the record and its head).
    store.append_audit(record("c")).expect("append");
    std::fs::write(store.audit_head_path(), head).expect("old head");
    let verification = store.verify_audit().expect("verify");
    assert!(verification.intact, "{verification:?}");
    assert_eq!(verification.notes.len(), 1, "{verification:?}");
    assert!(verification.notes[0].contains("1 record(s) behind"), "{verification:?}");
}

#[test]
fn a_field_this_build_does_not_know_still_verifies() {
    // A later build adds a field: this build reads the record, and its
    // hash still covers exactly the stored bytes.
    let (_dir, store) = store_with(&[]);
    let mut first = record("a");
    first.sequence = 1;
    first.previous_hash = GENESIS_HASH.to_owned();
    let mut json = serde_json::to_value(first).expect("json");
    json["addedLater"] = serde_json::json!({"x": [1, 2]});
    let json = serde_json::to_vec(&json).expect("bytes");
    let hash = sha256_hex(&json);
    let mut stored = hash.clone().into_bytes();
    stored.push(b'\n');
    stored.extend(json);
    let write = store.database().begin_write().expect("write");
    write.open_table(AUDIT_V5).expect("table").insert(1, stored.as_slice()).expect("insert");
    write.commit().expect("commit");
    store.write_head(1, &hash).expect("head");
    store.append_audit(record("b")).expect("append after it");
    let verification = store.verify_audit().expect("verify");
    assert!(verification.intact, "{verification:?}");
    assert_eq!(verification.records, 2);
    assert_eq!(request_id(&store.audit_records(10).expect("records")[0]), "a");
}
