//! The tamper-evident audit trail: one record per escalation request
//! (verified or not), per refused connection to the Escalation Socket, and
//! per network change, request, grant or refusal, chained by SHA-256.
//!
//! Layout (v5): `audit_v5` maps the sequence number to the record's stored
//! bytes, `<hash>\n<json>`, where `<json>` is the [`AuditRecord`] as written
//! with `hash` empty (its envelope and its typed event, `type`), and
//! `<hash>` is the SHA-256 (hex) of exactly those JSON bytes. The JSON
//! carries `sequence` and `previousHash`, so the hash covers the link.
//! Verification hashes the stored bytes, never a re-serialisation: a field
//! added to the record later, or one this build does not know, never
//! changes what an old record hashes to. Layout v4 stored the same chain of
//! argv-shaped records (`audit_v4`, read only by the migration).
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

/// Sequence number -> stored bytes (`<hash>\n<json>`), the JSON a typed
/// [`AuditRecord`].
pub(crate) const AUDIT_V5: TableDefinition<u64, &[u8]> = TableDefinition::new("audit_v5");
/// Notes about the trail itself: one JSON [`Migration`] per migration that
/// carried records over (`migration` for v3 to v4, `migration-v4` for v4 to
/// v5).
pub(crate) const AUDIT_NOTES: TableDefinition<&str, &[u8]> = TableDefinition::new("audit_notes");
/// The key of the notes of migrations.
const MIGRATION_PREFIX: &str = "migration";

/// The `audit_notes` key of the migration from layout `from_version`.
pub(crate) fn migration_key(from_version: u64) -> String {
    // The v3 to v4 note was the only one, under the bare prefix.
    if from_version == 3 {
        MIGRATION_PREFIX.to_owned()
    } else {
        format!("{MIGRATION_PREFIX}-v{from_version}")
    }
}

/// The hash that precedes the first record.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// How an older layout's trail was carried into the next one (written once,
/// by the migration, and reported by every verification).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Migration {
    pub from_version: u64,
    pub records: u64,
    /// The old chain's last hash (its last verified one, when it was broken).
    pub old_head: String,
    /// The first record of the old chain that did not verify (none when the
    /// head beside the store was the problem: missing, unreadable), and
    /// why; the records were carried over as they were found.
    pub old_problem: Option<(Option<u64>, String)>,
    /// Records the migration could read as no kind of the new layout, kept
    /// with every field as they were (v4 to v5: `legacy`).
    #[serde(default)]
    pub kept_as_legacy: u64,
}

impl Migration {
    /// What every verification says of it when the old chain verified.
    fn note(&self) -> String {
        let legacy = match self.kept_as_legacy {
            0 => String::new(),
            kept => format!(" ({kept} of no known kind kept as `legacy` records, every field as it was)"),
        };
        format!(
            "{} records were migrated from layout v{}{legacy}; the old chain verified up to its head {}",
            self.records, self.from_version, self.old_head
        )
    }
}

/// The chain's head as kept beside the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Head {
    pub records: u64,
    pub hash: String,
}

/// The fields of the chain, which every layout's record carries.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Link {
    sequence: u64,
    previous_hash: String,
    #[serde(default)]
    hash: String,
}

/// One walk over a chain table.
#[derive(Debug)]
pub(crate) struct Walk {
    /// Records read, up to and including a broken one.
    pub records: u64,
    /// The hash of the last record that verified.
    pub last_hash: String,
    /// The hash of the record the head names, when the walk got there.
    pub hash_at_head: Option<String>,
    /// The first record that breaks the chain, and why.
    pub problem: Option<(u64, String)>,
}

/// Walks `table` from the first record: every record's JSON must hash to
/// its stored hash, be readable as the layout's record (`readable`), link
/// to its predecessor and carry consecutive sequence numbers from 1. Stops
/// at the first break.
pub(crate) fn walk(
    table: &impl ReadableTable<u64, &'static [u8]>,
    head_records: Option<u64>,
    readable: impl Fn(&[u8]) -> std::result::Result<(), String>,
) -> std::result::Result<Walk, redb::StorageError> {
    let mut walked = Walk { records: 0, last_hash: GENESIS_HASH.to_owned(), hash_at_head: None, problem: None };
    for entry in table.iter()? {
        let (key, value) = entry?;
        let key = key.value();
        walked.records += 1;
        match check_link(key, walked.records, &walked.last_hash, value.value(), &readable) {
            Ok(hash) => walked.last_hash = hash,
            Err(problem) => {
                walked.problem = Some((key, problem));
                return Ok(walked);
            }
        }
        if Some(key) == head_records {
            walked.hash_at_head = Some(walked.last_hash.clone());
        }
    }
    Ok(walked)
}

/// What the head beside the store says of a walked, unbroken chain: a
/// note, or the break (the record it points at, if any, and why).
pub(crate) fn judge_head(
    head: &std::io::Result<Option<Head>>,
    walked: &Walk,
    path: &Path,
) -> std::result::Result<Option<String>, (Option<u64>, String)> {
    let records = walked.records;
    match head {
        Err(error) => Err((None, format!("cannot read the head beside the store ({}): {error}", path.display()))),
        Ok(None) if records == 0 => Ok(None),
        Ok(None) => Err((
            None,
            format!("the head beside the store ({}) is missing, so removing records from the end cannot be ruled out", path.display()),
        )),
        Ok(Some(head)) if head.records > records => Err((
            Some(records + 1),
            format!(
                "the last {} record(s) were removed: the head beside the store ({}) was written at record {}, the store ends at {records}",
                head.records - records,
                path.display(),
                head.records
            ),
        )),
        Ok(Some(head)) if walked.hash_at_head.as_deref() != Some(head.hash.as_str()) && head.records > 0 => Err((
            Some(head.records),
            format!("record {} is not the one the head beside the store ({}) was written for", head.records, path.display()),
        )),
        Ok(Some(head)) if head.records < records => Ok(Some(format!(
            "the head beside the store is {} record(s) behind (written after each record: a crash came between); the next record brings it up to date",
            records - head.records
        ))),
        Ok(Some(_)) => Ok(None),
    }
}

/// SHA-256 of `bytes`, lower-case hex.
fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The stored bytes of `record` (its `hash` is ignored) and their hash.
pub(crate) fn encode(record: &AuditRecord) -> serde_json::Result<(String, Vec<u8>)> {
    let mut body = record.clone();
    body.hash = String::new();
    encode_json(&body)
}

/// The stored bytes of a record of any layout, given with `hash` empty, and
/// their hash.
pub(crate) fn encode_json(body: &impl Serialize) -> serde_json::Result<(String, Vec<u8>)> {
    let json = serde_json::to_vec(body)?;
    let hash = sha256_hex(&json);
    let mut stored = Vec::with_capacity(hash.len() + 1 + json.len());
    stored.extend_from_slice(hash.as_bytes());
    stored.push(b'\n');
    stored.extend_from_slice(&json);
    Ok((hash, stored))
}

/// Splits stored bytes into the hash they were stored with and the JSON.
pub(crate) fn split(stored: &[u8]) -> std::result::Result<(&str, &[u8]), String> {
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
    let mut record = readable(json)?;
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

    pub(crate) fn read_head(&self) -> std::io::Result<Option<Head>> {
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
            let mut table = write.open_table(AUDIT_V5).map_err(|e| self.error(e))?;
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
        let table = match read.open_table(AUDIT_V5) {
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
    /// beside the store; each migration from an older layout is reported.
    pub fn verify_audit(&self) -> Result<AuditVerification> {
        let read = self.database().begin_read().map_err(|e| self.error(e))?;
        let head = self.read_head();
        let head_records = head.as_ref().ok().and_then(|head| head.as_ref().map(|head| head.records));
        let walked = match read.open_table(AUDIT_V5) {
            Ok(table) => walk(&table, head_records, |json| readable(json).map(|_| ())).map_err(|e| self.error(e))?,
            Err(redb::TableError::TableDoesNotExist(_)) => {
                Walk { records: 0, last_hash: GENESIS_HASH.to_owned(), hash_at_head: None, problem: None }
            }
            Err(error) => return Err(self.error(error)),
        };
        let mut verification =
            AuditVerification { records: walked.records, intact: true, problem_at: None, problem: None, notes: Vec::new() };
        if let Some((at, problem)) = walked.problem.clone() {
            return Ok(broken(verification, Some(at), problem));
        }
        for migration in self.migrations(&read)? {
            match &migration.old_problem {
                Some((at, problem)) => {
                    let problem =
                        format!("before the migration from layout v{} the old chain was already broken: {problem}", migration.from_version);
                    return Ok(broken(verification, *at, problem));
                }
                None => verification.notes.push(migration.note()),
            }
        }
        match judge_head(&head, &walked, &self.audit_head_path()) {
            Ok(note) => {
                verification.notes.extend(note);
                Ok(verification)
            }
            Err((at, problem)) => Ok(broken(verification, at, problem)),
        }
    }

    /// Every migration note, oldest layout first.
    pub(crate) fn migrations(&self, read: &redb::ReadTransaction) -> Result<Vec<Migration>> {
        let table = match read.open_table(AUDIT_NOTES) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(error) => return Err(self.error(error)),
        };
        let mut migrations = Vec::new();
        for entry in table.iter().map_err(|e| self.error(e))? {
            let (key, value) = entry.map_err(|e| self.error(e))?;
            if !key.value().starts_with(MIGRATION_PREFIX) {
                continue;
            }
            let migration: Migration = serde_json::from_slice(value.value()).map_err(|error| StoreError::CorruptRecord {
                path: self.path().to_path_buf(),
                key: format!("audit_notes {}", key.value()),
                message: error.to_string(),
            })?;
            migrations.push(migration);
        }
        migrations.sort_by_key(|migration| migration.from_version);
        Ok(migrations)
    }
}

/// The record in a stored JSON of this layout.
fn readable(json: &[u8]) -> std::result::Result<AuditRecord, String> {
    serde_json::from_slice(json).map_err(|error| format!("it is not an audit record: {error}"))
}

/// Checks one stored record against its position and predecessor; returns
/// its hash.
fn check_link(
    key: u64,
    position: u64,
    expected_previous: &str,
    stored: &[u8],
    readable: &impl Fn(&[u8]) -> std::result::Result<(), String>,
) -> std::result::Result<String, String> {
    let (hash, json) = split(stored).map_err(|why| format!("record {key} is not a stored audit record: {why}"))?;
    if sha256_hex(json) != hash {
        return Err(format!("record {key} was modified after it was written"));
    }
    let link: Link = serde_json::from_slice(json)
        .map_err(|error| format!("record {key} is not a stored audit record: it is not an audit record: {error}"))?;
    if !link.hash.is_empty() {
        return Err(format!("record {key} is not a stored audit record: its JSON carries a hash of its own"));
    }
    readable(json).map_err(|why| format!("record {key} is not a stored audit record: {why}"))?;
    if link.sequence != key || key != position {
        return Err(format!("record {key} is out of sequence (expected {position})"));
    }
    if link.previous_hash != expected_previous {
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
