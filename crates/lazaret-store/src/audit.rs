//! The tamper-evident audit trail: one record per escalation request
//! (verified or not) and per network change or refusal, chained by SHA-256.
//!
//! Layout (v4): `audit_v4` maps the sequence number to the record's stored
//! bytes, `<hash>\n<json>`, where `<json>` is the [`AuditRecord`] as written
//! with `hash` empty, and `<hash>` is the SHA-256 (hex) of exactly those
//! JSON bytes. The JSON carries `sequence` and `previousHash`, so the hash
//! covers the link. Verification hashes the stored bytes, never a
//! re-serialisation: a field added to the record later, or one this build
//! does not know, never changes what an old record hashes to.
//!
//! The head (record count and last hash) is also kept beside the store
//! (`<store>.audit-head`, rewritten after every append), so removing
//! records from the end of the chain, which leaves an intact chain, is
//! reported by [`Store::verify_audit`]. What verification proves, and what
//! it cannot, is in docs/security.md ("The audit trail").

use std::path::{Path, PathBuf};

use lazaret_protocol::{AuditRecord, AuditVerification};
use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{Result, Store, StoreError};

/// Sequence number -> stored bytes (`<hash>\n<json>`).
pub(crate) const AUDIT_V4: TableDefinition<u64, &[u8]> = TableDefinition::new("audit_v4");
/// Notes about the trail itself: `migration` -> JSON [`Migration`].
pub(crate) const AUDIT_NOTES: TableDefinition<&str, &[u8]> = TableDefinition::new("audit_notes");
pub(crate) const MIGRATION_KEY: &str = "migration";

/// The hash that precedes the first record.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// How an older layout's trail was carried into this one (written once,
/// by the migration, and reported by every verification).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Migration {
    pub from_version: u64,
    pub records: u64,
    /// The old chain's last hash.
    pub old_head: String,
    /// The first record of the old chain that did not verify, and why;
    /// the records were carried over as they were found.
    pub old_problem: Option<(u64, String)>,
}

/// The chain's head as kept beside the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Head {
    records: u64,
    hash: String,
}

/// SHA-256 of `bytes`, lower-case hex.
fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The stored bytes of `record` (its `hash` is ignored) and their hash.
pub(crate) fn encode(record: &AuditRecord) -> serde_json::Result<(String, Vec<u8>)> {
    let mut body = record.clone();
    body.hash = String::new();
    let json = serde_json::to_vec(&body)?;
    let hash = sha256_hex(&json);
    let mut stored = Vec::with_capacity(hash.len() + 1 + json.len());
    stored.extend_from_slice(hash.as_bytes());
    stored.push(b'\n');
    stored.extend_from_slice(&json);
    Ok((hash, stored))
}

/// Splits stored bytes into the hash they were stored with and the JSON.
fn split(stored: &[u8]) -> std::result::Result<(&str, &[u8]), String> {
    let newline = stored.iter().position(|&byte| byte == b'\n').ok_or("it has no hash line")?;
    let (hash, json) = (&stored[..newline], &stored[newline + 1..]);
    let hash = std::str::from_utf8(hash).map_err(|_| "its hash line is not text")?;
    if hash.len() != 64 || !hash.bytes().all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte)) {
        return Err("its hash line is not a SHA-256".to_owned());
    }
    Ok((hash, json))
}

/// The record in `stored`, with `hash` as stored.
fn decode(stored: &[u8]) -> std::result::Result<AuditRecord, String> {
    let (hash, json) = split(stored)?;
    let mut record: AuditRecord = serde_json::from_slice(json).map_err(|error| format!("it is not an audit record: {error}"))?;
    if !record.hash.is_empty() {
        return Err("its JSON carries a hash of its own".to_owned());
    }
    record.hash = hash.to_owned();
    Ok(record)
}

/// `<store file>.audit-head`, beside the store.
fn head_path(store: &Path) -> PathBuf {
    let mut name = store.file_name().map(|name| name.to_os_string()).unwrap_or_default();
    name.push(".audit-head");
    store.with_file_name(name)
}

impl Store {
    fn corrupt(&self, key: u64, message: String) -> StoreError {
        StoreError::CorruptRecord { path: self.path().to_path_buf(), key: format!("audit {key}"), message }
    }

    /// The head file beside this store.
    pub fn audit_head_path(&self) -> PathBuf {
        head_path(self.path())
    }

    fn read_head(&self) -> std::io::Result<Option<Head>> {
        let path = self.audit_head_path();
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidData, error.to_string())),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Replaces the head file (a new file renamed over the old one, so a
    /// reader sees the old head or the new one).
    pub(crate) fn write_head(&self, records: u64, hash: &str) -> Result<()> {
        let path = self.audit_head_path();
        let head_error = |error: std::io::Error| StoreError::AuditHead { path: path.clone(), message: error.to_string() };
        let bytes = serde_json::to_vec(&Head { records, hash: hash.to_owned() }).map_err(|e| self.error(e))?;
        let partial = path.with_extension("audit-head.partial");
        std::fs::write(&partial, bytes).map_err(head_error)?;
        std::fs::rename(&partial, &path).map_err(head_error)
    }

    /// Appends `record`, filling in its sequence number and chain hashes,
    /// then moves the head beside the store to it. A head that is ahead of
    /// the store (records were removed) is left as it is: it is the
    /// evidence [`Store::verify_audit`] reports.
    pub fn append_audit(&self, mut record: AuditRecord) -> Result<AuditRecord> {
        let write = self.database().begin_write().map_err(|e| self.error(e))?;
        {
            let mut table = write.open_table(AUDIT_V4).map_err(|e| self.error(e))?;
            let last = table.last().map_err(|e| self.error(e))?.map(|(key, value)| (key.value(), value.value().to_vec()));
            let (sequence, previous_hash) = match last {
                Some((key, stored)) => (key + 1, split(&stored).map_err(|message| self.corrupt(key, message))?.0.to_owned()),
                None => (1, GENESIS_HASH.to_owned()),
            };
            record.sequence = sequence;
            record.previous_hash = previous_hash;
            let (hash, stored) = encode(&record).map_err(|e| self.error(e))?;
            record.hash = hash;
            table.insert(sequence, stored.as_slice()).map_err(|e| self.error(e))?;
        }
        write.commit().map_err(|e| self.error(e))?;
        let ahead = matches!(self.read_head(), Ok(Some(head)) if head.records >= record.sequence);
        if !ahead {
            self.write_head(record.sequence, &record.hash)?;
        }
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
        let table = match read.open_table(AUDIT_V4) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(error) => return Err(self.error(error)),
        };
        let mut records = Vec::new();
        let upper = before.unwrap_or(u64::MAX);
        for entry in table.range(..upper).map_err(|e| self.error(e))?.rev().take(limit) {
            let (key, value) = entry.map_err(|e| self.error(e))?;
            records.push(decode(value.value()).map_err(|message| self.corrupt(key.value(), message))?);
        }
        records.reverse();
        Ok(records)
    }

    /// Walks the whole chain: every record's stored JSON must hash to its
    /// stored hash, link to its predecessor's, and carry consecutive
    /// sequence numbers from 1; the last record must be the head kept
    /// beside the store; a migration from an older layout is reported.
    pub fn verify_audit(&self) -> Result<AuditVerification> {
        let read = self.database().begin_read().map_err(|e| self.error(e))?;
        let mut verification = AuditVerification { records: 0, intact: true, problem_at: None, problem: None, notes: Vec::new() };
        let head = self.read_head();
        let head_records = head.as_ref().ok().and_then(|head| head.as_ref().map(|head| head.records));
        let mut hash_at_head = None;
        match read.open_table(AUDIT_V4) {
            Ok(table) => {
                let mut expected_previous = GENESIS_HASH.to_owned();
                for entry in table.iter().map_err(|e| self.error(e))? {
                    let (key, value) = entry.map_err(|e| self.error(e))?;
                    let key = key.value();
                    verification.records += 1;
                    match check_link(key, verification.records, &expected_previous, value.value()) {
                        Ok(hash) => expected_previous = hash,
                        Err(problem) => return Ok(broken(verification, Some(key), problem)),
                    }
                    if Some(key) == head_records {
                        hash_at_head = Some(expected_previous.clone());
                    }
                }
            }
            Err(redb::TableError::TableDoesNotExist(_)) => {}
            Err(error) => return Err(self.error(error)),
        }
        if let Some(migration) = self.migration(&read)? {
            match migration.old_problem {
                Some((at, problem)) => {
                    let problem =
                        format!("before the migration from layout v{} the old chain was already broken: {problem}", migration.from_version);
                    return Ok(broken(verification, Some(at), problem));
                }
                None => verification.notes.push(format!(
                    "{} records were migrated from layout v{}; the old chain verified up to its head {}",
                    migration.records, migration.from_version, migration.old_head
                )),
            }
        }
        let path = self.audit_head_path();
        let records = verification.records;
        match head {
            Err(error) => Ok(broken(verification, None, format!("cannot read the head beside the store ({}): {error}", path.display()))),
            Ok(None) if records == 0 => Ok(verification),
            Ok(None) => Ok(broken(
                verification,
                None,
                format!(
                    "the head beside the store ({}) is missing, so removing records from the end cannot be ruled out",
                    path.display()
                ),
            )),
            Ok(Some(head)) if head.records > records => Ok(broken(
                verification,
                Some(records + 1),
                format!(
                    "the last {} record(s) were removed: the head beside the store ({}) was written at record {}, the store ends at {records}",
                    head.records - records,
                    path.display(),
                    head.records
                ),
            )),
            Ok(Some(head)) if hash_at_head.as_deref() != Some(head.hash.as_str()) && head.records > 0 => Ok(broken(
                verification,
                Some(head.records),
                format!("record {} is not the one the head beside the store ({}) was written for", head.records, path.display()),
            )),
            Ok(Some(head)) => {
                if head.records < records {
                    verification.notes.push(format!(
                        "the head beside the store is {} record(s) behind (written after each record: a crash came between); the next record brings it up to date",
                        records - head.records
                    ));
                }
                Ok(verification)
            }
        }
    }

    fn migration(&self, read: &redb::ReadTransaction) -> Result<Option<Migration>> {
        let table = match read.open_table(AUDIT_NOTES) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(error) => return Err(self.error(error)),
        };
        let Some(value) = table.get(MIGRATION_KEY).map_err(|e| self.error(e))? else {
            return Ok(None);
        };
        serde_json::from_slice(value.value()).map(Some).map_err(|error| StoreError::CorruptRecord {
            path: self.path().to_path_buf(),
            key: format!("audit_notes {MIGRATION_KEY}"),
            message: error.to_string(),
        })
    }
}

/// Checks one stored record against its position and predecessor; returns
/// its hash.
fn check_link(key: u64, position: u64, expected_previous: &str, stored: &[u8]) -> std::result::Result<String, String> {
    let (hash, json) = split(stored).map_err(|why| format!("record {key} is not a stored audit record: {why}"))?;
    if sha256_hex(json) != hash {
        return Err(format!("record {key} was modified after it was written"));
    }
    let record = decode(stored).map_err(|why| format!("record {key} is not a stored audit record: {why}"))?;
    if record.sequence != key || key != position {
        return Err(format!("record {key} is out of sequence (expected {position})"));
    }
    if record.previous_hash != expected_previous {
        return Err(format!("record {key} does not link to its predecessor (a record was removed or changed)"));
    }
    Ok(hash.to_owned())
}

fn broken(mut verification: AuditVerification, at: Option<u64>, problem: String) -> AuditVerification {
    verification.intact = false;
    verification.problem_at = at;
    verification.problem = Some(problem);
    verification
}

#[cfg(test)]
mod tests;
