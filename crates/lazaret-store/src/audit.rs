//! The tamper-evident escalation audit trail: one record per escalation
//! request (verified or not), chained by SHA-256 so that editing, removing
//! or reordering a stored record is detected by [`Store::verify_audit`].

use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{Result, Store, StoreError};

/// Sequence number -> JSON [`AuditRecord`].
pub(crate) const AUDIT: TableDefinition<u64, &[u8]> = TableDefinition::new("audit");

/// The hash that precedes the first record.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    pub sequence: u64,
    pub previous_hash: String,
    /// SHA-256 over `previous_hash` and this record with `hash` empty.
    pub hash: String,
    /// Minted by the coordinator for each request.
    pub request_id: String,
    /// The id the requesting client chose (a correlation value, written by
    /// the agent). Left out of the JSON when absent, so records stored
    /// before it existed hash as they did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_request_id: Option<String>,
    /// The session the request claimed; `verified` says whether its
    /// signature checked out.
    pub session_id: String,
    pub verified: bool,
    /// `rejected`, `auto`, `approved`, `edited`, `denied`, `aborted` or `timedOut`.
    pub outcome: String,
    pub reason: Option<String>,
    /// `policy`, `terminal`, `editor:<name>`, `rpc:<client>` or `timeout`.
    pub decided_by: Option<String>,
    pub justification: Option<String>,
    pub requested_argv: Vec<String>,
    /// What ran (differs from the request when edited).
    pub executed_argv: Option<Vec<String>>,
    pub exit_status: Option<i32>,
    pub received_at_ms: u64,
    pub decided_at_ms: Option<u64>,
    pub finished_at_ms: Option<u64>,
}

impl AuditRecord {
    /// The chain hash of this record given its predecessor's hash.
    pub fn compute_hash(&self) -> String {
        let mut unhashed = self.clone();
        unhashed.hash = String::new();
        let json = serde_json::to_vec(&unhashed).unwrap_or_default();
        let mut hasher = Sha256::new();
        hasher.update(self.previous_hash.as_bytes());
        hasher.update(b"\n");
        hasher.update(&json);
        hasher.finalize().iter().map(|byte| format!("{byte:02x}")).collect()
    }
}

/// The outcome of [`Store::verify_audit`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditVerification {
    pub records: u64,
    /// The first record that does not fit the chain, and why.
    pub first_problem: Option<(u64, String)>,
}

impl Store {
    /// Appends `record`, filling in its sequence number and chain hashes.
    pub fn append_audit(&self, mut record: AuditRecord) -> Result<AuditRecord> {
        let write = self.database().begin_write().map_err(|e| self.error(e))?;
        {
            let mut table = write.open_table(AUDIT).map_err(|e| self.error(e))?;
            let last = table.last().map_err(|e| self.error(e))?.map(|(key, value)| (key.value(), value.value().to_vec()));
            let (sequence, previous_hash) = match last {
                Some((key, bytes)) => {
                    let previous: AuditRecord = serde_json::from_slice(&bytes).map_err(|error| StoreError::CorruptRecord {
                        path: self.path().to_path_buf(),
                        key: format!("audit {key}"),
                        message: error.to_string(),
                    })?;
                    (key + 1, previous.hash)
                }
                None => (1, GENESIS_HASH.to_owned()),
            };
            record.sequence = sequence;
            record.previous_hash = previous_hash;
            record.hash = record.compute_hash();
            let bytes = serde_json::to_vec(&record).map_err(|e| self.error(e))?;
            table.insert(sequence, bytes.as_slice()).map_err(|e| self.error(e))?;
        }
        write.commit().map_err(|e| self.error(e))?;
        Ok(record)
    }

    /// The most recent `limit` audit records, oldest first.
    pub fn audit_records(&self, limit: usize) -> Result<Vec<AuditRecord>> {
        self.audit_records_before(None, limit)
    }

    /// A page of the trail: the `limit` most recent records whose sequence
    /// is below `before` (all, without it), oldest first. Paging backwards
    /// passes the first sequence of the previous page.
    pub fn audit_records_before(&self, before: Option<u64>, limit: usize) -> Result<Vec<AuditRecord>> {
        let read = self.database().begin_read().map_err(|e| self.error(e))?;
        let table = match read.open_table(AUDIT) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(error) => return Err(self.error(error)),
        };
        let mut records = Vec::new();
        let upper = before.unwrap_or(u64::MAX);
        for entry in table.range(..upper).map_err(|e| self.error(e))?.rev().take(limit) {
            let (key, value) = entry.map_err(|e| self.error(e))?;
            let record = serde_json::from_slice(value.value()).map_err(|error| StoreError::CorruptRecord {
                path: self.path().to_path_buf(),
                key: format!("audit {}", key.value()),
                message: error.to_string(),
            })?;
            records.push(record);
        }
        records.reverse();
        Ok(records)
    }

    /// Walks the whole chain: every record must hash to its stored hash,
    /// link to its predecessor's, and carry consecutive sequence numbers.
    pub fn verify_audit(&self) -> Result<AuditVerification> {
        let read = self.database().begin_read().map_err(|e| self.error(e))?;
        let table = match read.open_table(AUDIT) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(AuditVerification { records: 0, first_problem: None }),
            Err(error) => return Err(self.error(error)),
        };
        let mut expected_previous = GENESIS_HASH.to_owned();
        let mut count = 0;
        for entry in table.iter().map_err(|e| self.error(e))? {
            let (key, value) = entry.map_err(|e| self.error(e))?;
            let key = key.value();
            count += 1;
            let problem = match serde_json::from_slice::<AuditRecord>(value.value()) {
                Err(error) => Some(format!("record {key} is not valid JSON: {error}")),
                Ok(record) if record.sequence != key || key != count => Some(format!("record {key} is out of sequence (expected {count})")),
                Ok(record) if record.previous_hash != expected_previous => {
                    Some(format!("record {key} does not link to its predecessor (a record was removed or changed)"))
                }
                Ok(record) if record.compute_hash() != record.hash => Some(format!("record {key} was modified after it was written")),
                Ok(record) => {
                    expected_previous = record.hash;
                    None
                }
            };
            if let Some(problem) = problem {
                return Ok(AuditVerification { records: count, first_problem: Some((key, problem)) });
            }
        }
        Ok(AuditVerification { records: count, first_problem: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(request: &str) -> AuditRecord {
        AuditRecord {
            sequence: 0,
            previous_hash: String::new(),
            hash: String::new(),
            request_id: request.into(),
            client_request_id: None,
            session_id: "s".into(),
            verified: true,
            outcome: "auto".into(),
            reason: None,
            decided_by: Some("policy".into()),
            justification: None,
            requested_argv: vec!["true".into()],
            executed_argv: Some(vec!["/bin/true".into()]),
            exit_status: Some(0),
            received_at_ms: 1,
            decided_at_ms: Some(2),
            finished_at_ms: Some(3),
        }
    }

    #[test]
    fn pages_walk_back_without_gaps_or_overlap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("state.redb")).expect("open");
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
    fn the_chain_verifies_and_detects_an_edit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.redb");
        let store = Store::open(&path).expect("open");
        for request in ["a", "b", "c"] {
            store.append_audit(record(request)).expect("append");
        }
        assert_eq!(store.verify_audit().expect("verify"), AuditVerification { records: 3, first_problem: None });
        // Edit record 2 in place, as an attacker with file access would.
        let write = store.database().begin_write().expect("write");
        {
            let mut table = write.open_table(AUDIT).expect("table");
            let bytes = table.get(2).expect("get").expect("present").value().to_vec();
            let mut edited: AuditRecord = serde_json::from_slice(&bytes).expect("json");
            edited.outcome = "denied".into();
            table.insert(2, serde_json::to_vec(&edited).expect("json").as_slice()).expect("insert");
        }
        write.commit().expect("commit");
        let verification = store.verify_audit().expect("verify");
        assert_eq!(verification.first_problem.map(|(key, _)| key), Some(2));
    }

    #[test]
    fn removing_a_record_breaks_the_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("state.redb")).expect("open");
        for request in ["a", "b", "c"] {
            store.append_audit(record(request)).expect("append");
        }
        let write = store.database().begin_write().expect("write");
        write.open_table(AUDIT).expect("table").remove(3).expect("remove");
        write.commit().expect("commit");
        assert!(store.verify_audit().expect("verify").first_problem.is_none(), "removing the tail is only detectable by count");
        let write = store.database().begin_write().expect("write");
        write.open_table(AUDIT).expect("table").remove(1).expect("remove");
        write.commit().expect("commit");
        assert!(store.verify_audit().expect("verify").first_problem.is_some());
    }
}
