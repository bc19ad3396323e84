//! Manual schema migrations: each step reads
//! the old tables, converts the values and writes the new tables inside one
//! write transaction, so a crash leaves either the old or the new layout.
//!
//! Layout history:
//! - v1: `sessions_v1`: session id (str) -> "pid|started_ms|ended_ms|exit" (str).
//! - v2: `sessions_v2`: sequence (u64) -> JSON [`SessionRecord`]; `meta`.
//! - v3: adds `audit`: sequence (u64) -> JSON `AuditRecord` (hash chain).

use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use crate::{Result, SessionRecord, Store, StoreError, META, SCHEMA_VERSION, SCHEMA_VERSION_KEY, SESSIONS_V2};

pub(crate) const SESSIONS_V1: TableDefinition<&str, &str> = TableDefinition::new("sessions_v1");

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
        write.open_table(crate::audit::AUDIT).map_err(|e| store.error(e))?;
        let mut meta = write.open_table(META).map_err(|e| store.error(e))?;
        meta.insert(SCHEMA_VERSION_KEY, 3).map_err(|e| store.error(e))?;
    }
    write.commit().map_err(|e| store.error(e))?;
    Ok(())
}

/// A new, empty store.
fn initialize(store: &Store) -> Result<u64> {
    let write = store.database().begin_write().map_err(|e| store.error(e))?;
    {
        write.open_table(SESSIONS_V2).map_err(|e| store.error(e))?;
        write.open_table(crate::audit::AUDIT).map_err(|e| store.error(e))?;
        let mut meta = write.open_table(META).map_err(|e| store.error(e))?;
        meta.insert(SCHEMA_VERSION_KEY, SCHEMA_VERSION).map_err(|e| store.error(e))?;
    }
    write.commit().map_err(|e| store.error(e))?;
    Ok(SCHEMA_VERSION)
}

/// Parses a v1 value `"pid|started_ms|ended_ms|exit"` (`exit` may be empty).
pub(crate) fn parse_v1(session_id: &str, value: &str) -> Option<SessionRecord> {
    let mut fields = value.split('|');
    let pid = fields.next()?.parse().ok()?;
    let started_at_ms = fields.next()?.parse().ok()?;
    let ended_at_ms = fields.next()?.parse().ok()?;
    let exit_status = match fields.next()? {
        "" => None,
        text => Some(text.parse().ok()?),
    };
    Some(SessionRecord {
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
        let mut rows: Vec<SessionRecord> = Vec::new();
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

    #[test]
    fn v1_values_parse() {
        assert_eq!(parse_v1("s", "1|2|3|").map(|r| r.exit_status), Some(None));
        assert_eq!(parse_v1("s", "1|2|3|-1").map(|r| r.exit_status), Some(Some(-1)));
        assert!(parse_v1("s", "1|2").is_none());
        assert!(parse_v1("s", "x|2|3|").is_none());
    }
}
