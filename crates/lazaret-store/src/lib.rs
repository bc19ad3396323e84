//! `lazaret-store`: the passive, ACID state store of one domain, a redb file in the Domain Root.
//!
//! Only the Session Coordinator opens it; redb's file lock makes a second
//! opener fail with [`StoreError::AlreadyOpen`] instead of corrupting it.
//! The store keeps completed sessions; it tracks nothing live.
//! Schema changes are manual, versioned table copies inside one write
//! transaction: see [`migrate`]. Escalations and network changes are
//! audited in a hash chain (`audit.rs`) of `lazaret_protocol::AuditRecord`.

mod audit;
mod migrate;

use std::path::{Path, PathBuf};

use lazaret_protocol::CompletedSession;
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

pub use audit::GENESIS_HASH;

/// The layout this build writes.
pub const SCHEMA_VERSION: u64 = 5;

/// `meta`: "schema_version" -> version number.
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub(crate) const SCHEMA_VERSION_KEY: &str = "schema_version";
/// Completed sessions, keyed by a sequence number; values are JSON
/// [`CompletedSession`] (camelCase since layout v4).
pub(crate) const SESSIONS_V2: TableDefinition<u64, &[u8]> = TableDefinition::new("sessions_v2");

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the state store {path} is already open in another process (the domain's Session Coordinator); ask it through `lazaret status` or `lazaret sessions` instead")]
    AlreadyOpen { path: PathBuf },
    #[error("state store {path}: {message}")]
    Database { path: PathBuf, message: String },
    #[error("state store {path} has schema version {found}, newer than this build understands ({SCHEMA_VERSION}); upgrade Lazaret")]
    TooNew { path: PathBuf, found: u64 },
    #[error("state store {path}: corrupt record {key}: {message}")]
    CorruptRecord { path: PathBuf, key: String, message: String },
    #[error(
        "the audit head {path} was not updated (the record itself is stored; `lazaret audit verify` reports the head as behind): {message}"
    )]
    AuditHead { path: PathBuf, message: String },
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// An open state store. Every method does blocking I/O: async callers run
/// them on the blocking thread pool.
pub struct Store {
    database: Database,
    path: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Store").field("path", &self.path).finish()
    }
}

/// redb's page cache. Its default (1 GiB) let a long-running coordinator
/// grow with its audit trail (the soak benchmark: +9 MiB over 10,000
/// escalations); the store is small and written once per record, and the
/// kernel's page cache serves the rest.
const CACHE_BYTES: usize = 1 << 20;

impl Store {
    /// Opens (creating if needed) the store at `path` and migrates it to
    /// [`SCHEMA_VERSION`].
    pub fn open(path: &Path) -> Result<Store> {
        let database = redb::Builder::new().set_cache_size(CACHE_BYTES).create(path).map_err(|error| match error {
            redb::DatabaseError::DatabaseAlreadyOpen => StoreError::AlreadyOpen { path: path.to_path_buf() },
            other => StoreError::Database { path: path.to_path_buf(), message: other.to_string() },
        })?;
        let store = Store { database, path: path.to_path_buf() };
        migrate::to_current(&store)?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn error(&self, error: impl std::fmt::Display) -> StoreError {
        StoreError::Database { path: self.path.clone(), message: error.to_string() }
    }

    pub(crate) fn database(&self) -> &Database {
        &self.database
    }

    pub fn schema_version(&self) -> Result<u64> {
        let read = self.database.begin_read().map_err(|e| self.error(e))?;
        let table = match read.open_table(META) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
            Err(error) => return Err(self.error(error)),
        };
        Ok(table.get(SCHEMA_VERSION_KEY).map_err(|e| self.error(e))?.map(|value| value.value()).unwrap_or(0))
    }

    /// Appends a completed session; returns its sequence number.
    pub fn record_session(&self, record: &CompletedSession) -> Result<u64> {
        let bytes = serde_json::to_vec(record).map_err(|e| self.error(e))?;
        let write = self.database.begin_write().map_err(|e| self.error(e))?;
        let key = {
            let mut table = write.open_table(SESSIONS_V2).map_err(|e| self.error(e))?;
            let next = table.last().map_err(|e| self.error(e))?.map(|(key, _)| key.value() + 1).unwrap_or(1);
            table.insert(next, bytes.as_slice()).map_err(|e| self.error(e))?;
            next
        };
        write.commit().map_err(|e| self.error(e))?;
        Ok(key)
    }

    /// The most recent `limit` completed sessions, oldest first.
    pub fn sessions(&self, limit: usize) -> Result<Vec<CompletedSession>> {
        let read = self.database.begin_read().map_err(|e| self.error(e))?;
        let table = match read.open_table(SESSIONS_V2) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(error) => return Err(self.error(error)),
        };
        let total = table.len().map_err(|e| self.error(e))?;
        let skip = usize::try_from(total).unwrap_or(usize::MAX).saturating_sub(limit);
        let mut records = Vec::new();
        for entry in table.iter().map_err(|e| self.error(e))?.skip(skip) {
            let (key, value) = entry.map_err(|e| self.error(e))?;
            let record = serde_json::from_slice(value.value()).map_err(|error| StoreError::CorruptRecord {
                path: self.path.clone(),
                key: key.value().to_string(),
                message: error.to_string(),
            })?;
            records.push(record);
        }
        Ok(records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> CompletedSession {
        CompletedSession {
            session_id: id.into(),
            pid: 42,
            command: vec!["sh".into()],
            started_at_ms: 1_000,
            ended_at_ms: 2_000,
            exit_status: Some(0),
            end_reason: "exited".into(),
        }
    }

    #[test]
    fn records_round_trip_in_order_and_survive_reopening() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.redb");
        {
            let store = Store::open(&path).expect("open");
            assert_eq!(store.schema_version().expect("version"), SCHEMA_VERSION);
            for id in ["a", "b", "c"] {
                store.record_session(&record(id)).expect("record");
            }
        }
        let store = Store::open(&path).expect("reopen");
        let ids: Vec<String> = store.sessions(10).expect("sessions").into_iter().map(|r| r.session_id).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        let last: Vec<String> = store.sessions(2).expect("sessions").into_iter().map(|r| r.session_id).collect();
        assert_eq!(last, ["b", "c"]);
    }

    #[test]
    fn a_second_opener_gets_a_clear_error_and_the_store_stays_intact() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.redb");
        let store = Store::open(&path).expect("open");
        store.record_session(&record("kept")).expect("record");
        let error = Store::open(&path).expect_err("second open must fail");
        assert!(matches!(error, StoreError::AlreadyOpen { .. }), "{error}");
        assert!(error.to_string().contains("already open"), "{error}");
        assert_eq!(store.sessions(10).expect("sessions")[0].session_id, "kept");
    }
}
