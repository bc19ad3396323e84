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
//! - v5: `audit_v5`: the same chain of typed records (`lazaret_protocol::AuditRecord`:
//!   the envelope and an event tagged by `type`); v4's argv-shaped records
//!   are read into their kinds ([`v4`]), re-chained, with a note in
//!   `audit_notes` (`migration-v4`).

mod v4;

use lazaret_protocol::CompletedSession;
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use crate::audit::{Migration, AUDIT_NOTES, AUDIT_V5, GENESIS_HASH};
use crate::{Result, Store, StoreError, META, SCHEMA_VERSION, SCHEMA_VERSION_KEY, SESSIONS_V2};
use v4::{V4Record, AUDIT_V4};

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
        version = 4;
    }
    if version == 4 {
        v4_to_v5(store)?;
    }
    finish_v5_head(store)
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
fn v3_problem(key: u64, position: u64, expected_previous: &str, record: &V4Record, stored: &[u8]) -> Option<String> {
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
    let mut migration = Migration { from_version: 3, records: 0, old_head: GENESIS_HASH.to_owned(), old_problem: None, kept_as_legacy: 0 };
    let mut head = GENESIS_HASH.to_owned();
    {
        let old = write.open_table(AUDIT_V3).map_err(|e| store.error(e))?;
        let mut new = write.open_table(AUDIT_V4).map_err(|e| store.error(e))?;
        for entry in old.iter().map_err(|e| store.error(e))? {
            let (key, value) = entry.map_err(|e| store.error(e))?;
            let key = key.value();
            // v3's fields are v4's, its outcomes and sources the words of
            // today's enums: the record reads as it is.
            let mut record: V4Record = serde_json::from_slice(value.value()).map_err(|error| corrupt(key, error.to_string()))?;
            migration.records += 1;
            if migration.old_problem.is_none() {
                match v3_problem(key, migration.records, &migration.old_head, &record, value.value()) {
                    Some(problem) => migration.old_problem = Some((Some(key), problem)),
                    None => migration.old_head = record.hash.clone(),
                }
            }
            record.hash = String::new();
            record.sequence = migration.records;
            record.previous_hash = head;
            let (hash, stored) = crate::audit::encode_json(&record).map_err(|e| store.error(e))?;
            new.insert(migration.records, stored.as_slice()).map_err(|e| store.error(e))?;
            head = hash;
        }
    }
    sessions_to_camel_case(store, &write)?;
    write.delete_table(AUDIT_V3).map_err(|e| store.error(e))?;
    if migration.records > 0 {
        let bytes = serde_json::to_vec(&migration).map_err(|e| store.error(e))?;
        let key = crate::audit::migration_key(3);
        write.open_table(AUDIT_NOTES).map_err(|e| store.error(e))?.insert(key.as_str(), bytes.as_slice()).map_err(|e| store.error(e))?;
    }
    write.open_table(META).map_err(|e| store.error(e))?.insert(SCHEMA_VERSION_KEY, 4).map_err(|e| store.error(e))?;
    write.commit().map_err(|e| store.error(e))?;
    if migration.records > 0 {
        store.write_head(migration.records, &head)?;
    }
    Ok(())
}

/// v5 stores typed records: each v4 record is read into its kind (or kept
/// as `legacy`), re-chained, in one transaction. The v4 chain and the head
/// beside the store are verified on the way, as `audit verify` did; the
/// verdict is kept in `audit_notes` and reported by every `audit verify`.
/// Then the head is moved to the new chain.
fn v4_to_v5(store: &Store) -> Result<()> {
    let corrupt = |key: u64, message: String| StoreError::CorruptRecord {
        path: store.path().to_path_buf(),
        key: format!("audit {key}"),
        message: format!("cannot migrate it to layout v5: {message}"),
    };
    let old_head = store.read_head();
    let write = store.database().begin_write().map_err(|e| store.error(e))?;
    let mut migration = Migration { from_version: 4, records: 0, old_head: GENESIS_HASH.to_owned(), old_problem: None, kept_as_legacy: 0 };
    let mut head = GENESIS_HASH.to_owned();
    {
        let old = write.open_table(AUDIT_V4).map_err(|e| store.error(e))?;
        let head_records = old_head.as_ref().ok().and_then(|head| head.as_ref().map(|head| head.records));
        let walked = crate::audit::walk(&old, head_records, v4::readable).map_err(|e| store.error(e))?;
        migration.old_head = walked.last_hash.clone();
        migration.old_problem = match walked.problem.clone() {
            Some((at, problem)) => Some((Some(at), problem)),
            None => crate::audit::judge_head(&old_head, &walked, &store.audit_head_path()).err(),
        };
        let mut new = write.open_table(AUDIT_V5).map_err(|e| store.error(e))?;
        for entry in old.iter().map_err(|e| store.error(e))? {
            let (key, value) = entry.map_err(|e| store.error(e))?;
            let key = key.value();
            let (_, json) = crate::audit::split(value.value()).map_err(|message| corrupt(key, message))?;
            let old_record: V4Record = serde_json::from_slice(json).map_err(|error| corrupt(key, error.to_string()))?;
            let (mut record, legacy) = v4::to_v5(old_record);
            migration.records += 1;
            migration.kept_as_legacy += u64::from(legacy);
            record.sequence = migration.records;
            record.previous_hash = head;
            let (hash, stored) = crate::audit::encode(&record).map_err(|e| store.error(e))?;
            new.insert(migration.records, stored.as_slice()).map_err(|e| store.error(e))?;
            head = hash;
        }
    }
    write.delete_table(AUDIT_V4).map_err(|e| store.error(e))?;
    if migration.records > 0 {
        let bytes = serde_json::to_vec(&migration).map_err(|e| store.error(e))?;
        let key = crate::audit::migration_key(4);
        write.open_table(AUDIT_NOTES).map_err(|e| store.error(e))?.insert(key.as_str(), bytes.as_slice()).map_err(|e| store.error(e))?;
    }
    write.open_table(META).map_err(|e| store.error(e))?.insert(SCHEMA_VERSION_KEY, 5).map_err(|e| store.error(e))?;
    write.commit().map_err(|e| store.error(e))?;
    if migration.records > 0 {
        store.write_head(migration.records, &head)?;
    }
    Ok(())
}

/// A crash between the v4 to v5 commit and the head's move leaves the v4
/// head beside the v5 store: the migration's note names that head (its
/// record count and last hash, which no v5 record hashes to), so the move
/// is made now. Any other head is left as it is.
fn finish_v5_head(store: &Store) -> Result<()> {
    let read = store.database().begin_read().map_err(|e| store.error(e))?;
    let Some(migration) = store.migrations(&read)?.into_iter().find(|migration| migration.from_version == 4 && migration.records > 0)
    else {
        return Ok(());
    };
    let left = matches!(store.read_head(), Ok(Some(head)) if head.records == migration.records && head.hash == migration.old_head);
    if !left {
        return Ok(());
    }
    let table = read.open_table(AUDIT_V5).map_err(|e| store.error(e))?;
    let Some(stored) = table.get(migration.records).map_err(|e| store.error(e))? else {
        return Ok(());
    };
    let hash = crate::audit::split(stored.value())
        .map_err(|message| StoreError::CorruptRecord {
            path: store.path().to_path_buf(),
            key: format!("audit {}", migration.records),
            message,
        })?
        .0
        .to_owned();
    drop(stored);
    drop(table);
    drop(read);
    store.write_head(migration.records, &hash)
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
        write.open_table(AUDIT_V5).map_err(|e| store.error(e))?;
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
mod tests;
