//! Manual schema migrations: each step reads
//! the old tables, converts the values and writes the new tables inside one
//! write transaction, so a crash leaves either the old or the new layout.
//!
//! Layout history:
//! - v1: `sessions_v1`: session id (str) -> "pid|started_ms|ended_ms|exit" (str).
//! - v2: `sessions_v2`: sequence (u64) -> JSON session record (snake_case); `meta`.
//! - v3: adds `audit`: sequence (u64) -> JSON audit record; the chain hash
//!   was computed over the record re-serialised (see [`v3_hash`]).
//! - v4: `audit_v4`: sequence (u64) -> stored bytes, the chain hashing the
//!   bytes as stored; `audit_notes`; the head beside the store (see
//!   `audit.rs`); `sessions_v2` values become `lazaret_protocol::CompletedSession`
//!   (camelCase), the one definition of a completed session.

use lazaret_protocol::{AuditRecord, CompletedSession};
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use crate::audit::{Migration, AUDIT_NOTES, AUDIT_V4, GENESIS_HASH, MIGRATION_KEY};
use crate::{Result, Store, StoreError, META, SCHEMA_VERSION, SCHEMA_VERSION_KEY, SESSIONS_V2};

pub(crate) const SESSIONS_V1: TableDefinition<&str, &str> = TableDefinition::new("sessions_v1");
/// The v3 audit table (migration only).
pub(crate) const AUDIT_V3: TableDefinition<u64, &[u8]> = TableDefinition::new("audit");

/// Brings `store` to [`SCHEMA_VERSION`], one step at a time.
pub(crate) fn to_current(store: &Store) -> Result<()> {
    let mut version = store.schema_version()?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::TooNew { path: store.path().to_path_buf(), found: version });
    }
    if version == 0 {
        version = if has_v1_sessions(store)? { 1 } else { initialize(store)? };
    }
    if version == 1 {
        v1_to_v2(store)?;
        version = 2;
    }
    if version == 2 {
        v2_to_v3(store)?;
        version = 3;
    }
    if version == 3 {
        v3_to_v4(store)?;
    }
    Ok(())
}

fn has_v1_sessions(store: &Store) -> Result<bool> {
    let read = store.database().begin_read().map_err(|e| store.error(e))?;
    match read.open_table(SESSIONS_V1) {
        Ok(_) => Ok(true),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(false),
        Err(error) => Err(store.error(error)),
    }
}

/// v3 only adds the audit table.
fn v2_to_v3(store: &Store) -> Result<()> {
    let write = store.database().begin_write().map_err(|e| store.error(e))?;
    {
        write.open_table(AUDIT_V3).map_err(|e| store.error(e))?;
        let mut meta = write.open_table(META).map_err(|e| store.error(e))?;
        meta.insert(SCHEMA_VERSION_KEY, 3).map_err(|e| store.error(e))?;
    }
    write.commit().map_err(|e| store.error(e))?;
    Ok(())
}

/// The v3 chain hash of a stored v3 record: SHA-256 over the previous
/// hash, a newline and the record as v3 serialised it with `hash` empty.
/// v3 stored exactly that serialisation with the hash filled in, so
/// emptying the one `"hash":"<hex>"` member of the stored bytes gives it
/// back (agent text cannot contain `"hash":"` unescaped: JSON escapes its
/// quotes). `None`: no such member.
fn v3_hash(previous_hash: &str, stored: &[u8]) -> Option<String> {
    use sha2::{Digest, Sha256};
    let text = std::str::from_utf8(stored).ok()?;
    let start = text.find("\"hash\":\"")? + "\"hash\":\"".len();
    let end = start + text[start..].find('"')?;
    let unhashed = format!("{}{}", &text[..start], &text[end..]);
    let mut hasher = Sha256::new();
    hasher.update(previous_hash.as_bytes());
    hasher.update(b"\n");
    hasher.update(unhashed.as_bytes());
    Some(hasher.finalize().iter().map(|byte| format!("{byte:02x}")).collect())
}

/// Checks one v3 record against the v3 chain: `None` when it fits.
fn v3_problem(key: u64, position: u64, expected_previous: &str, record: &AuditRecord, stored: &[u8]) -> Option<String> {
    if record.sequence != key || key != position {
        Some(format!("record {key} is out of sequence (expected {position})"))
    } else if record.previous_hash != expected_previous {
        Some(format!("record {key} does not link to its predecessor"))
    } else if v3_hash(&record.previous_hash, stored).as_deref() != Some(record.hash.as_str()) {
        Some(format!("record {key} was modified after it was written"))
    } else {
        None
    }
}

/// v4 stores each audit record as the bytes its chain hash covers. The v3
/// chain is verified on the way (its verdict is kept in `audit_notes` and
/// reported by every `audit verify`); the records are carried over as
/// found, re-chained, in one transaction; then the head is written beside
/// the store.
fn v3_to_v4(store: &Store) -> Result<()> {
    let corrupt = |key: u64, message: String| StoreError::CorruptRecord {
        path: store.path().to_path_buf(),
        key: format!("audit {key}"),
        message: format!("cannot migrate it to layout v4: {message}"),
    };
    let write = store.database().begin_write().map_err(|e| store.error(e))?;
    let mut migration = Migration { from_version: 3, records: 0, old_head: GENESIS_HASH.to_owned(), old_problem: None };
    let mut head = GENESIS_HASH.to_owned();
    {
        let old = write.open_table(AUDIT_V3).map_err(|e| store.error(e))?;
        let mut new = write.open_table(AUDIT_V4).map_err(|e| store.error(e))?;
        for entry in old.iter().map_err(|e| store.error(e))? {
            let (key, value) = entry.map_err(|e| store.error(e))?;
            let key = key.value();
            // v3's fields are today's, its outcomes and sources the words of
            // today's enums: the record reads as it is.
            let mut record: AuditRecord = serde_json::from_slice(value.value()).map_err(|error| corrupt(key, error.to_string()))?;
            migration.records += 1;
            if migration.old_problem.is_none() {
                match v3_problem(key, migration.records, &migration.old_head, &record, value.value()) {
                    Some(problem) => migration.old_problem = Some((key, problem)),
                    None => migration.old_head = record.hash.clone(),
                }
            }
            record.hash = String::new();
            record.sequence = migration.records;
            record.previous_hash = head;
            let (hash, stored) = crate::audit::encode(&record).map_err(|e| store.error(e))?;
            new.insert(migration.records, stored.as_slice()).map_err(|e| store.error(e))?;
            head = hash;
        }
    }
    sessions_to_camel_case(store, &write)?;
    write.delete_table(AUDIT_V3).map_err(|e| store.error(e))?;
    if migration.records > 0 {
        let bytes = serde_json::to_vec(&migration).map_err(|e| store.error(e))?;
        write.open_table(AUDIT_NOTES).map_err(|e| store.error(e))?.insert(MIGRATION_KEY, bytes.as_slice()).map_err(|e| store.error(e))?;
    }
    write.open_table(META).map_err(|e| store.error(e))?.insert(SCHEMA_VERSION_KEY, 4).map_err(|e| store.error(e))?;
    write.commit().map_err(|e| store.error(e))?;
    if migration.records > 0 {
        store.write_head(migration.records, &head)?;
    }
    Ok(())
}

/// Rewrites every `sessions_v2` value in the protocol's form (camelCase
/// keys; a value already in it is left as it is).
fn sessions_to_camel_case(store: &Store, write: &redb::WriteTransaction) -> Result<()> {
    let mut table = write.open_table(SESSIONS_V2).map_err(|e| store.error(e))?;
    let mut rows = Vec::new();
    for entry in table.iter().map_err(|e| store.error(e))? {
        let (key, value) = entry.map_err(|e| store.error(e))?;
        let corrupt = |message: String| StoreError::CorruptRecord {
            path: store.path().to_path_buf(),
            key: key.value().to_string(),
            message: format!("cannot migrate the session to layout v4: {message}"),
        };
        let old: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(value.value()).map_err(|error| corrupt(error.to_string()))?;
        let renamed: serde_json::Map<String, serde_json::Value> = old.into_iter().map(|(name, value)| (camel_case(&name), value)).collect();
        let session: CompletedSession = serde_json::from_value(renamed.into()).map_err(|error| corrupt(error.to_string()))?;
        rows.push((key.value(), serde_json::to_vec(&session).map_err(|e| store.error(e))?));
    }
    for (key, bytes) in rows {
        table.insert(key, bytes.as_slice()).map_err(|e| store.error(e))?;
    }
    Ok(())
}

/// `ended_at_ms` -> `endedAtMs`.
fn camel_case(name: &str) -> String {
    let mut words = name.split('_');
    let mut camel = words.next().unwrap_or_default().to_owned();
    for word in words {
        let mut characters = word.chars();
        if let Some(first) = characters.next() {
            camel.extend(first.to_uppercase());
            camel.push_str(characters.as_str());
        }
    }
    camel
}

/// A new, empty store.
fn initialize(store: &Store) -> Result<u64> {
    let write = store.database().begin_write().map_err(|e| store.error(e))?;
    {
        write.open_table(SESSIONS_V2).map_err(|e| store.error(e))?;
        write.open_table(AUDIT_V4).map_err(|e| store.error(e))?;
        let mut meta = write.open_table(META).map_err(|e| store.error(e))?;
        meta.insert(SCHEMA_VERSION_KEY, SCHEMA_VERSION).map_err(|e| store.error(e))?;
    }
    write.commit().map_err(|e| store.error(e))?;
    Ok(SCHEMA_VERSION)
}

/// Parses a v1 value `"pid|started_ms|ended_ms|exit"` (`exit` may be empty).
pub(crate) fn parse_v1(session_id: &str, value: &str) -> Option<CompletedSession> {
    let mut fields = value.split('|');
    let pid = fields.next()?.parse().ok()?;
    let started_at_ms = fields.next()?.parse().ok()?;
    let ended_at_ms = fields.next()?.parse().ok()?;
    let exit_status = match fields.next()? {
        "" => None,
        text => Some(text.parse().ok()?),
    };
    Some(CompletedSession {
        session_id: session_id.to_owned(),
        pid,
        command: Vec::new(),
        started_at_ms,
        ended_at_ms,
        exit_status,
        end_reason: if exit_status.is_some() { "exited".into() } else { "disconnected".into() },
    })
}

fn v1_to_v2(store: &Store) -> Result<()> {
    let write = store.database().begin_write().map_err(|e| store.error(e))?;
    {
        let old = write.open_table(SESSIONS_V1).map_err(|e| store.error(e))?;
        let mut rows: Vec<CompletedSession> = Vec::new();
        for entry in old.iter().map_err(|e| store.error(e))? {
            let (key, value) = entry.map_err(|e| store.error(e))?;
            let record = parse_v1(key.value(), value.value()).ok_or_else(|| StoreError::CorruptRecord {
                path: store.path().to_path_buf(),
                key: key.value().to_owned(),
                message: format!("cannot migrate v1 value `{}`", value.value()),
            })?;
            rows.push(record);
        }
        drop(old);
        rows.sort_by_key(|record| (record.started_at_ms, record.session_id.clone()));
        let mut new = write.open_table(SESSIONS_V2).map_err(|e| store.error(e))?;
        for (index, record) in rows.iter().enumerate() {
            let bytes = serde_json::to_vec(record).map_err(|e| store.error(e))?;
            new.insert(index as u64 + 1, bytes.as_slice()).map_err(|e| store.error(e))?;
        }
        drop(new);
        write.delete_table(SESSIONS_V1).map_err(|e| store.error(e))?;
        let mut meta = write.open_table(META).map_err(|e| store.error(e))?;
        meta.insert(SCHEMA_VERSION_KEY, 2).map_err(|e| store.error(e))?;
    }
    write.commit().map_err(|e| store.error(e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_protocol::{DecisionSource, Outcome};
    use redb::ReadableTableMetadata;

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
        let store = Store::open(&path).expect("open migrates");
        assert_eq!(store.schema_version().expect("version"), 4);
        let verification = store.verify_audit().expect("verify");
        assert!(verification.intact, "{verification:?}");
        assert_eq!(verification.records, 3);
        assert!(
            verification.notes.iter().any(|note| note.contains("migrated from layout v3") && note.contains("7769e83a")),
            "{verification:?}"
        );
        let records = store.audit_records(10).expect("records");
        let argv: Vec<_> = records.iter().map(|record| record.requested_argv.join(" ")).collect();
        assert_eq!(argv, ["echo one", "echo two", "echo three"]);
        assert!(records.iter().all(|record| record.outcome == Outcome::Auto && record.decided_by == Some(DecisionSource::Policy)));
        assert!(records.iter().all(|record| record.client_request_id.is_some()));
        // Its sessions, stored in snake_case by v2 and v3, read in the protocol's form.
        let sessions = store.sessions(10).expect("sessions");
        let ends: Vec<(&str, Option<i32>)> = sessions.iter().map(|session| (session.end_reason.as_str(), session.exit_status)).collect();
        assert_eq!(ends, [("exited", Some(0)), ("disconnected", None)], "{sessions:?}");
        assert!(sessions[0].command.join(" ").contains("lazaret-escalate -- echo three"), "{sessions:?}");
        // The trail goes on from there, and removing its end is reported.
        let mut next = records[2].clone();
        next.request_id = "after-migration".into();
        store.append_audit(next).expect("append");
        assert!(store.verify_audit().expect("verify").intact);
        let write = store.database().begin_write().expect("write");
        write.open_table(AUDIT_V4).expect("table").remove(4).expect("remove");
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
        assert_eq!(store.audit_records(10).expect("records")[1].requested_argv, ["echo", "2"]);
    }

    #[test]
    fn v1_values_parse() {
        assert_eq!(parse_v1("s", "1|2|3|").map(|r| r.exit_status), Some(None));
        assert_eq!(parse_v1("s", "1|2|3|-1").map(|r| r.exit_status), Some(Some(-1)));
        assert!(parse_v1("s", "1|2").is_none());
        assert!(parse_v1("s", "x|2|3|").is_none());
    }
}
