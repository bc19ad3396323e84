//! The State Anchor of a domain whose sandbox is a pod on a cluster
//! (issue 32): `state diff` and `state reset` for the persistent
//! directories that live in its `Sandbox`'s volume claim.
//!
//! There is no overlay there to read: each directory is a copy of the
//! image's, made once by the pod's seeding init container
//! (`lazaret_kube::objects`). So the host records, in the Domain Root, per
//! persistent directory named `<name>` ([`dir_name`]), `<name>_pod.json`:
//! - `base`: the listing of the directory as seeded, taken once the pod is
//!   ready and before any session joins (nothing of the agent has run);
//! - `latest`: the listing taken at each teardown, before the pod goes;
//! - `epoch`: the seed epoch (`lazaret state reset` raises it; the seeding
//!   container seeds a directory again when its marker holds another).
//!
//! `diff` compares the base with the pod's listing now (while it runs) or
//! with the latest one: `A` added, `M` modified (kind, size, times, mode,
//! owner or link target; a directory by kind, mode and owner, as locally),
//! `D` deleted (the top of a deleted tree only). The image is not
//! consulted again (the copy does not follow a rebuilt image), so there is
//! no `M!`/`D!`. A listing comes from `lazaret-escalate --list-state`
//! in the pod, bounded in bytes and entries.
//!
//! Invariant: what a listing says is the pod's word, as untrusted as the
//! pod; it is parsed strictly, bounded, and its paths are the agent's names
//! (escaped wherever they are shown). The base is taken before the agent
//! runs, so what the agent did since is measured against the image's copy.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lazaret_kube::cluster::Cluster;
use serde::{Deserialize, Serialize};

use super::classify::{is_runtime_file, ChangeKind, StateChange};
use super::listing::{parse_find_time, Fingerprint};
use super::names::{dir_name, escape_bytes, unescape_bytes};
use crate::error::{Context, Result};

/// The lister in the pod (installed with the escalation client).
pub const LISTER: &str = "/run/lazaret/bin/lazaret-escalate";
/// Fields of one listing record (see `lazaret-escalate`'s `list`).
const FIELDS: usize = 10;
/// The most a listing may print.
const MAX_LISTING_BYTES: u64 = 256 << 20;
/// The most paths a listing may name, over all directories.
const MAX_ENTRIES: usize = 1_000_000;
/// How long a listing may take.
const LISTING_TIME: Duration = Duration::from_secs(120);
const RECORD_VERSION: u32 = 1;

/// What a listing says of one path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Facts {
    #[serde(flatten)]
    fingerprint: Fingerprint,
    ctime_sec: i64,
    ctime_nsec: u32,
}

/// Escaped relative path ([`escape_bytes`]) -> its facts.
type Listing = BTreeMap<String, Facts>;

/// `<name>_pod.json`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    version: u32,
    epoch: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    base: Option<Listing>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    latest: Option<Listing>,
}

fn record_path(domain_dir: &Path, dir: &Path) -> Result<PathBuf> {
    Ok(domain_dir.join(format!("{}_pod.json", dir_name(dir)?)))
}

fn load(domain_dir: &Path, dir: &Path) -> Result<Record> {
    let path = record_path(domain_dir, dir)?;
    match std::fs::read(&path) {
        Ok(bytes) => {
            let record: Record = serde_json::from_slice(&bytes).with_context(|| format!("{} is malformed", path.display()))?;
            if record.version != RECORD_VERSION {
                crate::bail!("{} has version {}, this Lazaret reads {RECORD_VERSION}", path.display(), record.version);
            }
            Ok(record)
        }
        Err(error) if error.kind() == ErrorKind::NotFound => Ok(Record { version: RECORD_VERSION, ..Record::default() }),
        Err(error) => Err(error).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn save(domain_dir: &Path, dir: &Path, record: &Record) -> Result<()> {
    let path = record_path(domain_dir, dir)?;
    let temporary = path.with_extension("json.tmp");
    std::fs::write(&temporary, serde_json::to_vec(record)?).with_context(|| format!("cannot write {}", temporary.display()))?;
    std::fs::rename(&temporary, &path).with_context(|| format!("cannot write {}", path.display()))
}

/// Each directory's seed epoch, for the pod's seeding container.
pub fn epochs(domain_dir: &Path, dirs: &[PathBuf]) -> Result<Vec<u64>> {
    dirs.iter().map(|dir| Ok(load(domain_dir, dir)?.epoch)).collect()
}

/// The listings are forgotten (a new claim: seeded afresh, its base taken
/// at the start); the epochs stay.
pub fn forget_listings(domain_dir: &Path, dirs: &[PathBuf]) -> Result<()> {
    for dir in dirs {
        let mut record = load(domain_dir, dir)?;
        if record.base.is_some() || record.latest.is_some() {
            record.base = None;
            record.latest = None;
            save(domain_dir, dir, &record)?;
        }
    }
    Ok(())
}

/// `lazaret domain rm`: the claim is gone, and with it what was recorded.
pub fn remove_records(domain_dir: &Path, dirs: &[PathBuf]) -> Result<()> {
    for dir in dirs {
        let path = record_path(domain_dir, dir)?;
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(error) if error.kind() == ErrorKind::NotFound => {}
            Err(error) => return Err(error).with_context(|| format!("cannot remove {}", path.display())),
        }
    }
    Ok(())
}

/// `lazaret state reset` (the domain is not running; the caller holds its
/// lock): the directories' epochs are raised, so the next start seeds them
/// again from the image, and what was recorded of them is forgotten.
pub fn reset(domain_dir: &Path, dirs: &[PathBuf]) -> Result<()> {
    for dir in dirs {
        let record = load(domain_dir, dir)?;
        save(domain_dir, dir, &Record { version: RECORD_VERSION, epoch: record.epoch + 1, base: None, latest: None })?;
    }
    Ok(())
}

/// At the start, before any session: the base of each directory that has
/// none (a new claim, or one seeded again after a reset).
pub async fn record_base(cluster: &Cluster, pod: &str, domain_dir: &Path, dirs: &[PathBuf]) -> Result<()> {
    let mut records = Vec::new();
    for dir in dirs {
        records.push(load(domain_dir, dir)?);
    }
    let missing: Vec<usize> = (0..dirs.len()).filter(|&index| records[index].base.is_none()).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let wanted: Vec<PathBuf> = missing.iter().map(|&index| dirs[index].clone()).collect();
    let listings = list(cluster, pod, &wanted).await?;
    for (index, listing) in missing.into_iter().zip(listings) {
        records[index].base = Some(listing);
        save(domain_dir, &dirs[index], &records[index])?;
    }
    Ok(())
}

/// At teardown, before the pod goes: the latest listing of every directory.
pub async fn record_latest(cluster: &Cluster, pod: &str, domain_dir: &Path, dirs: &[PathBuf]) -> Result<()> {
    let listings = list(cluster, pod, dirs).await?;
    for (dir, listing) in dirs.iter().zip(listings) {
        let mut record = load(domain_dir, dir)?;
        record.latest = Some(listing);
        save(domain_dir, dir, &record)?;
    }
    Ok(())
}

/// `state diff` while the pod runs: its listing now against the base.
pub async fn diff_live(cluster: &Cluster, pod: &str, domain_dir: &Path, dirs: &[PathBuf]) -> Result<Vec<StateChange>> {
    let listings = list(cluster, pod, dirs).await?;
    let mut changes = Vec::new();
    for (dir, listing) in dirs.iter().zip(listings) {
        let Some(base) = load(domain_dir, dir)?.base else {
            crate::bail!("no listing of {} as seeded was recorded at the domain's start (see the coordinator's log)", dir.display());
        };
        changes.extend(compare(dir, &base, &listing));
    }
    Ok(changes)
}

/// `state diff` while the domain is down: the listing its last teardown
/// took against the base; nothing for a directory not listed since it was
/// seeded (or reset).
pub fn diff_recorded(domain_dir: &Path, dirs: &[PathBuf]) -> Result<Vec<StateChange>> {
    let mut changes = Vec::new();
    for dir in dirs {
        if let Record { base: Some(base), latest: Some(latest), .. } = load(domain_dir, dir)? {
            changes.extend(compare(dir, &base, &latest));
        }
    }
    Ok(changes)
}

/// Runs the lister in the pod over `dirs`: one listing per directory.
async fn list(cluster: &Cluster, pod: &str, dirs: &[PathBuf]) -> Result<Vec<Listing>> {
    let mut command = vec![LISTER.to_owned(), "--list-state".to_owned()];
    command.extend(dirs.iter().map(|dir| dir.display().to_string()));
    let command: Vec<&str> = command.iter().map(String::as_str).collect();
    let mut output = Vec::new();
    let run = cluster.exec_streaming(pod, &command, tokio::io::empty(), &mut output, MAX_LISTING_BYTES);
    let status = tokio::time::timeout(LISTING_TIME, run)
        .await
        .map_err(|_| crate::Error::TimedOut { what: format!("listing the persistent directories in Pod {pod}"), bound: LISTING_TIME })??;
    if status.code != Some(0) {
        crate::bail!(
            "listing the persistent directories in Pod {pod} failed: {}",
            lazaret_core::terminal_text::block(String::from_utf8_lossy(&status.stderr).trim())
        );
    }
    parse(&output, dirs.len())
}

/// The lister's records, one listing per directory. Strict: a malformed
/// record, an index out of range, a path that is not a plain relative one,
/// or more than [`MAX_ENTRIES`] paths is an error.
fn parse(output: &[u8], dirs: usize) -> Result<Vec<Listing>> {
    let mut fields: Vec<&[u8]> = output.split(|&byte| byte == 0).collect();
    if fields.last().is_some_and(|last| last.is_empty()) {
        fields.pop();
    }
    let records = fields.chunks_exact(FIELDS);
    if !records.remainder().is_empty() {
        crate::bail!("the pod's listing is malformed ({} fields)", fields.len());
    }
    if records.len() > MAX_ENTRIES {
        crate::bail!("the persistent directories hold more than {MAX_ENTRIES} paths; `state diff` does not list so many");
    }
    let text = |field: &[u8]| String::from_utf8_lossy(field).into_owned();
    let number = |field: &[u8], radix: u32| -> Result<u64> {
        u64::from_str_radix(&text(field), radix).map_err(|_| crate::format_err!("unexpected number {:?} in the pod's listing", text(field)))
    };
    let mut listings = vec![Listing::new(); dirs];
    for record in records {
        let index = usize::try_from(number(record[0], 10)?)?;
        let listing = listings.get_mut(index).ok_or_else(|| crate::format_err!("the pod's listing names directory {index}"))?;
        let kind = match record[1] {
            [kind] if b"fdlcbps?".contains(kind) => char::from(*kind),
            other => crate::bail!("unexpected kind {:?} in the pod's listing", text(other)),
        };
        let (mtime_sec, mtime_nsec) = parse_find_time(&text(record[3]))?;
        let (ctime_sec, ctime_nsec) = parse_find_time(&text(record[4]))?;
        if record[9].split(|&byte| byte == b'/').any(|segment| matches!(segment, b"" | b"." | b"..")) {
            crate::bail!("unexpected path {} in the pod's listing", escape_bytes(record[9]));
        }
        let fingerprint = Fingerprint {
            kind,
            size: number(record[2], 10)?,
            mtime_sec,
            mtime_nsec,
            mode: u32::try_from(number(record[5], 8)?)?,
            uid: u32::try_from(number(record[6], 10)?)?,
            gid: u32::try_from(number(record[7], 10)?)?,
            target: if kind == 'l' { escape_bytes(record[8]) } else { String::new() },
            sha256: None,
        };
        listing.insert(escape_bytes(record[9]), Facts { fingerprint, ctime_sec, ctime_nsec });
    }
    Ok(listings)
}

/// What changed in `dir` from `base` to `current`, sorted by path.
fn compare(dir: &Path, base: &Listing, current: &Listing) -> Vec<StateChange> {
    let shown = |key: &str| dir.join(std::ffi::OsStr::from_bytes(&unescape_bytes(key).unwrap_or_else(|| key.as_bytes().to_vec())));
    let mut changes = Vec::new();
    for (key, now) in current {
        let kind = match base.get(key) {
            None => Some(ChangeKind::Added),
            Some(was) if was.fingerprint.kind != now.fingerprint.kind => Some(ChangeKind::Modified),
            // A directory's times follow its entries, which are listed
            // themselves.
            Some(was) if now.fingerprint.kind == 'd' => {
                let owner = |facts: &Facts| (facts.fingerprint.mode, facts.fingerprint.uid, facts.fingerprint.gid);
                (owner(was) != owner(now)).then_some(ChangeKind::Modified)
            }
            Some(was) => (was != now).then_some(ChangeKind::Modified),
        };
        if let Some(kind) = kind {
            changes.push(StateChange { dir: dir.to_path_buf(), path: shown(key), kind });
        }
    }
    for key in base.keys().filter(|key| !current.contains_key(*key)) {
        // Only the top of a deleted tree, as an overlay's whiteout shows it.
        let parent_deleted = key.rsplit_once('/').is_some_and(|(parent, _)| base.contains_key(parent) && !current.contains_key(parent));
        if !parent_deleted {
            changes.push(StateChange { dir: dir.to_path_buf(), path: shown(key), kind: ChangeKind::Deleted });
        }
    }
    changes.retain(|change| !is_runtime_file(&change.path));
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One record; `times` is (mtime, ctime).
    fn record(index: usize, kind: char, size: u64, times: (&str, &str), mode: &str, target: &str, path: &[u8]) -> Vec<u8> {
        let (mtime, ctime) = times;
        let mut bytes =
            format!("{index}\0{kind}\0{size}\0{mtime}\0{ctime}\0{mode}\0{uid}\0{gid}\0{target}\0", uid = 0, gid = 0).into_bytes();
        bytes.extend_from_slice(path);
        bytes.push(0);
        bytes
    }

    fn listing(records: &[Vec<u8>]) -> Listing {
        parse(&records.concat(), 1).expect("parse").remove(0)
    }

    fn codes(changes: &[StateChange]) -> Vec<String> {
        changes.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn added_modified_deleted_as_an_overlay_would_show_them() {
        let base = listing(&[
            record(0, 'd', 4096, ("1.0", "1.0"), "755", "", b"bin"),
            record(0, 'l', 16, ("1.0", "1.0"), "777", "/usr/bin/busybox", b"bin/ls"),
            record(0, 'l', 16, ("1.0", "1.0"), "777", "/usr/bin/busybox", b"bin/stat"),
            record(0, 'd', 4096, ("1.0", "1.0"), "755", "", b"share"),
            record(0, 'f', 3, ("1.0", "1.0"), "644", "", b"share/a"),
            record(0, 'f', 3, ("1.0", "1.0"), "644", "", b"share/b"),
            record(0, 'f', 3, ("1.0", "1.0"), "644", "", b"kept"),
        ]);
        let now = listing(&[
            // Its times changed with its entries: not a change of its own.
            record(0, 'd', 4096, ("9.0", "9.0"), "755", "", b"bin"),
            record(0, 'l', 16, ("1.0", "1.0"), "777", "/usr/bin/busybox", b"bin/ls"),
            // The same metadata but a new ctime: rewritten, times set back.
            record(0, 'f', 3, ("1.0", "5.0"), "644", "", b"kept"),
            record(0, 'f', 9, ("5.0", "5.0"), "600", "", b"tool\n%marker"),
        ]);
        let changes = compare(Path::new("/usr/local"), &base, &now);
        assert_eq!(codes(&changes), ["D  /usr/local/bin/stat", "M  /usr/local/kept", "D  /usr/local/share", "A  /usr/local/tool\n%marker"]);
        assert!(compare(Path::new("/usr/local"), &base, &base).is_empty(), "a listing equals itself");
        let mode = listing(&[record(0, 'd', 4096, ("1.0", "1.0"), "700", "", b"bin")]);
        assert_eq!(
            codes(&compare(Path::new("/x"), &listing(&[record(0, 'd', 4096, ("1.0", "1.0"), "755", "", b"bin")]), &mode)),
            ["M  /x/bin"]
        );
        let relinked = listing(&[record(0, 'l', 16, ("1.0", "1.0"), "777", "/bin/true", b"bin/ls")]);
        let was = listing(&[record(0, 'l', 16, ("1.0", "1.0"), "777", "/usr/bin/busybox", b"bin/ls")]);
        assert_eq!(codes(&compare(Path::new("/x"), &was, &relinked)), ["M  /x/bin/ls"]);
    }

    #[test]
    fn a_hostile_listing_is_refused() {
        for bad in [
            record(0, 'f', 1, ("1.0", "1.0"), "644", "", b"../../etc/passwd"),
            record(0, 'f', 1, ("1.0", "1.0"), "644", "", b"/etc/passwd"),
            record(0, 'f', 1, ("1.0", "1.0"), "644", "", b"a/./b"),
            record(0, 'f', 1, ("1.0", "1.0"), "644", "", b""),
            record(1, 'f', 1, ("1.0", "1.0"), "644", "", b"a"),
            record(0, 'x', 1, ("1.0", "1.0"), "644", "", b"a"),
            record(0, 'f', 1, ("soon", "1.0"), "644", "", b"a"),
            record(0, 'f', 1, ("1.0", "1.0"), "9", "", b"a"),
        ] {
            assert!(parse(&bad, 1).is_err(), "{}", escape_bytes(&bad));
        }
        assert!(parse(b"0\0f\0", 1).is_err(), "a cut record");
    }

    #[test]
    fn records_follow_the_epochs() {
        let domain = tempfile::tempdir().expect("tempdir");
        let dirs = [PathBuf::from("/usr/local"), PathBuf::from("/root")];
        assert_eq!(epochs(domain.path(), &dirs).expect("epochs"), [0, 0]);
        let base = listing(&[record(0, 'f', 3, ("1.0", "1.0"), "644", "", b"a")]);
        let latest = listing(&[record(0, 'f', 3, ("1.0", "1.0"), "644", "", b"b")]);
        for dir in &dirs {
            save(domain.path(), dir, &Record { version: RECORD_VERSION, epoch: 0, base: Some(base.clone()), latest: Some(latest.clone()) })
                .expect("save");
        }
        assert_eq!(codes(&diff_recorded(domain.path(), &dirs[..1]).expect("diff")), ["D  /usr/local/a", "A  /usr/local/b"]);
        reset(domain.path(), &dirs[..1]).expect("reset");
        assert_eq!(epochs(domain.path(), &dirs).expect("epochs"), [1, 0]);
        assert!(diff_recorded(domain.path(), &dirs[..1]).expect("diff").is_empty(), "nothing recorded since the reset");
        assert_eq!(diff_recorded(domain.path(), &dirs[1..]).expect("diff").len(), 2, "the other directory keeps its record");
        forget_listings(domain.path(), &dirs).expect("forget");
        assert!(diff_recorded(domain.path(), &dirs).expect("diff").is_empty());
        assert_eq!(epochs(domain.path(), &dirs).expect("epochs"), [1, 0], "a new claim keeps the epochs");
        remove_records(domain.path(), &dirs).expect("remove");
        assert_eq!(std::fs::read_dir(domain.path()).expect("list").count(), 0);
    }
}
