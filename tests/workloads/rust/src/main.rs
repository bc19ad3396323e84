//! A small file indexer: the Rust workload of `tests/bench workloads`.
//!
//! Hashes every file under a directory (SHA-256), keeps the digests in a redb
//! database and prints a JSON summary. Its dependencies (serde with derive,
//! serde_json, sha2, redb, thiserror) are vendored and built offline.

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, TableDefinition};
use serde::Serialize;
use sha2::{Digest, Sha256};

const DIGESTS: TableDefinition<&str, &[u8]> = TableDefinition::new("digests");

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("database: {0}")]
    Database(String),
}

#[derive(Serialize)]
struct Summary {
    files: usize,
    bytes: u64,
    digest_of_digests: String,
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), Error> {
    let entries = std::fs::read_dir(dir).map_err(|source| Error::Read { path: dir.into(), source })?;
    for entry in entries {
        let path = entry.map_err(|source| Error::Read { path: dir.into(), source })?.path();
        if path.is_dir() {
            walk(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

fn run(root: &Path, database: &Path) -> Result<Summary, Error> {
    let mut files = Vec::new();
    walk(root, &mut files)?;
    files.sort();
    let db = Database::create(database).map_err(|e| Error::Database(e.to_string()))?;
    let write = db.begin_write().map_err(|e| Error::Database(e.to_string()))?;
    let mut bytes = 0;
    {
        let mut table = write.open_table(DIGESTS).map_err(|e| Error::Database(e.to_string()))?;
        for path in &files {
            let data = std::fs::read(path).map_err(|source| Error::Read { path: path.clone(), source })?;
            bytes += data.len() as u64;
            let digest = Sha256::digest(&data);
            table.insert(path.to_string_lossy().as_ref(), digest.as_slice()).map_err(|e| Error::Database(e.to_string()))?;
        }
    }
    write.commit().map_err(|e| Error::Database(e.to_string()))?;
    let read = db.begin_read().map_err(|e| Error::Database(e.to_string()))?;
    let table = read.open_table(DIGESTS).map_err(|e| Error::Database(e.to_string()))?;
    let mut all = Sha256::new();
    for path in &files {
        if let Some(digest) = table.get(path.to_string_lossy().as_ref()).map_err(|e| Error::Database(e.to_string()))? {
            all.update(digest.value());
        }
    }
    let digest_of_digests = all.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok(Summary { files: files.len(), bytes, digest_of_digests })
}

fn main() {
    let mut args = std::env::args_os().skip(1);
    let root = PathBuf::from(args.next().unwrap_or_else(|| "src".into()));
    let database = PathBuf::from(args.next().unwrap_or_else(|| "target/index.redb".into()));
    match run(&root, &database) {
        Ok(summary) => println!("{}", serde_json::to_string(&summary).unwrap_or_default()),
        Err(error) => {
            eprintln!("workload: {error}");
            std::process::exit(1);
        }
    }
}
