//! The State Anchor of a domain whose sandbox is a pod on a cluster
//! (issue 32): `state diff` and `state reset` for the persistent
//! directories that live in its `Sandbox`'s volume claim.
//!
//! There is no overlay there to read: each directory is a copy of the
//! image's, made by the pod's seeding init container
//! (`lazaret_kube::objects`) once per seed epoch. So the host keeps, in the
//! Domain Root, per persistent directory named `<name>` ([`dir_name`]):
//! - `<name>_pod_epoch`: its seed epoch (`lazaret state reset` draws a new
//!   one; the seeding container seeds a part again when its marker names
//!   another epoch or directory);
//! - `<name>_pod_base.json`: its listing as seeded, taken once the pod is
//!   ready and before any session joins, and only when the seeding
//!   container says (its termination message) that it seeded that part in
//!   this very pod: nothing of the agent has run in it since. A part it did
//!   not seed keeps the base recorded with it; one without is "unknown"
//!   (a claim this Domain Root did not see seeded), which `diff` says,
//!   naming `state reset`;
//! - `<name>_pod_latest.json`: the listing taken at each teardown, before
//!   the pod goes.
//!
//! `diff` compares the base with the pod's listing now (while it runs) or
//! with the latest one: `A` added, `M` modified (kind, size, times, mode,
//! owner or link target; a directory by kind, mode and owner, as locally),
//! `D` deleted (the top of a deleted tree only). The image is not
//! consulted again (the copy does not follow a rebuilt image), so there is
//! no `M!`/`D!`. A listing comes from `lazaret-escalate --list-state` in
//! the pod.
//!
//! Invariant: what a listing says is the pod's word, as untrusted as the
//! pod: parsed strictly and lazily (never more than [`MAX_ENTRIES`]
//! records held, [`MAX_LISTING_BYTES`] read), its fields cut short in
//! errors, its paths the agent's names (escaped wherever shown).

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
use crate::private_dirs::{remove_if_present, replace_private};

/// The lister in the pod (installed with the escalation client).
pub const LISTER: &str = "/run/lazaret/bin/lazaret-escalate";
/// Fields of one listing record (see `lazaret-escalate`'s `list`).
const FIELDS: usize = 10;
/// The most a listing may print.
const MAX_LISTING_BYTES: u64 = 128 << 20;
/// The most paths a listing may name, over all directories.
const MAX_ENTRIES: usize = 1_000_000;
/// How long a listing may take (`state/diff` waits this long).
pub const LISTING_TIME: Duration = Duration::from_secs(120);
/// A pod's field, as an error shows it.
const SHOWN_FIELD: usize = 64;
const LISTING_VERSION: u32 = 1;

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

/// A stored listing (`<name>_pod_base.json`, `<name>_pod_latest.json`).
#[derive(Debug, Serialize, Deserialize)]
struct StoredListing {
    version: u32,
    entries: Listing,
}

#[derive(Clone, Copy)]
enum Kept {
    Base,
    Latest,
}

fn kept_path(domain_dir: &Path, dir: &Path, kept: Kept) -> Result<PathBuf> {
    let suffix = match kept {
        Kept::Base => "base",
        Kept::Latest => "latest",
    };
    Ok(domain_dir.join(format!("{}_pod_{suffix}.json", dir_name(dir)?)))
}

fn epoch_path(domain_dir: &Path, dir: &Path) -> Result<PathBuf> {
    Ok(domain_dir.join(format!("{}_pod_epoch", dir_name(dir)?)))
}

fn load(domain_dir: &Path, dir: &Path, kept: Kept) -> Result<Option<Listing>> {
    let path = kept_path(domain_dir, dir, kept)?;
    match std::fs::read(&path) {
        Ok(bytes) => {
            let stored: StoredListing = serde_json::from_slice(&bytes).with_context(|| format!("{} is malformed", path.display()))?;
            if stored.version != LISTING_VERSION {
                crate::bail!("{} has version {}, this Lazaret reads {LISTING_VERSION}", path.display(), stored.version);
            }
            Ok(Some(stored.entries))
        }
        Err(error) if error.kind() == ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn save(domain_dir: &Path, dir: &Path, kept: Kept, entries: Listing) -> Result<()> {
    let path = kept_path(domain_dir, dir, kept)?;
    replace_private(&path, &serde_json::to_vec(&StoredListing { version: LISTING_VERSION, entries })?)
}

fn forget(domain_dir: &Path, dir: &Path, kept: Kept) -> Result<()> {
    remove_if_present(&kept_path(domain_dir, dir, kept)?)
}

/// Each directory's seed epoch (0 until a reset), for the pod's seeding
/// container.
pub fn epochs(domain_dir: &Path, dirs: &[PathBuf]) -> Result<Vec<u64>> {
    dirs.iter()
        .map(|dir| {
            let path = epoch_path(domain_dir, dir)?;
            match std::fs::read_to_string(&path) {
                Ok(text) => text.trim().parse().map_err(|_| crate::format_err!("{} is malformed", path.display())),
                Err(error) if error.kind() == ErrorKind::NotFound => Ok(0),
                Err(error) => Err(error).with_context(|| format!("cannot read {}", path.display())),
            }
        })
        .collect()
}

/// `lazaret domain rm`: the claim is gone, and with it what was recorded.
pub fn remove_records(domain_dir: &Path, dirs: &[PathBuf]) -> Result<()> {
    for dir in dirs {
        forget(domain_dir, dir, Kept::Base)?;
        forget(domain_dir, dir, Kept::Latest)?;
        remove_if_present(&epoch_path(domain_dir, dir)?)?;
    }
    Ok(())
}

/// `lazaret state reset` (the domain is not running; the caller holds its
/// lock): each directory gets a new random epoch, so the next start seeds
/// it again from the image, and what was recorded of it is forgotten.
pub fn reset(domain_dir: &Path, dirs: &[PathBuf]) -> Result<()> {
    let current = epochs(domain_dir, dirs)?;
    for (dir, current) in dirs.iter().zip(current) {
        let mut epoch = current;
        while epoch == current {
            let random = lazaret_core::ids::random_hex(8).context("cannot draw a seed epoch")?;
            epoch = u64::from_str_radix(&random, 16).map_err(|_| crate::format_err!("a malformed random value"))?;
        }
        forget(domain_dir, dir, Kept::Base)?;
        forget(domain_dir, dir, Kept::Latest)?;
        replace_private(&epoch_path(domain_dir, dir)?, epoch.to_string().as_bytes())?;
    }
    Ok(())
}

/// At the start, before any session: the base of each directory the pod's
/// seeding container seeded (`seeded`: their indices), replacing what was
/// recorded of the part before. The others keep theirs, or have none.
pub async fn record_base(cluster: &Cluster, pod: &str, domain_dir: &Path, dirs: &[PathBuf], seeded: &[usize]) -> Result<()> {
    let wanted: Vec<PathBuf> = seeded.iter().filter_map(|&index| dirs.get(index).cloned()).collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let listings = list(cluster, pod, &wanted).await?;
    for (dir, listing) in wanted.iter().zip(listings) {
        forget(domain_dir, dir, Kept::Latest)?;
        save(domain_dir, dir, Kept::Base, listing)?;
    }
    Ok(())
}

/// At teardown, before the pod goes: the latest listing of every directory.
pub async fn record_latest(cluster: &Cluster, pod: &str, domain_dir: &Path, dirs: &[PathBuf]) -> Result<()> {
    let listings = list(cluster, pod, dirs).await?;
    for (dir, listing) in dirs.iter().zip(listings) {
        save(domain_dir, dir, Kept::Latest, listing)?;
    }
    Ok(())
}

/// What the persistent directories held as seeded, for [`diff_live`].
#[derive(Debug)]
pub struct Bases(Vec<Listing>);

/// The bases of `dirs`; an error naming the first directory without one.
pub fn bases(domain_dir: &Path, dirs: &[PathBuf]) -> Result<Bases> {
    let bases: Result<Vec<Listing>> = dirs
        .iter()
        .map(|dir| {
            load(domain_dir, dir, Kept::Base)?.ok_or_else(|| {
                crate::format_err!(
                    "what {dir} held as seeded is unknown (its part of the claim was not seeded while this machine watched, or \
                     could not be listed then): `lazaret state reset --dir {dir}` has the next start seed it again from the image",
                    dir = dir.display()
                )
            })
        })
        .collect();
    Ok(Bases(bases?))
}

/// `state diff` while the pod runs: its listing of `dirs` now against
/// their `bases`.
pub async fn diff_live(cluster: &Cluster, pod: &str, dirs: &[PathBuf], bases: Bases) -> Result<Vec<StateChange>> {
    let listings = list(cluster, pod, dirs).await?;
    Ok(dirs.iter().zip(bases.0).zip(listings).flat_map(|((dir, base), listing)| compare(dir, &base, &listing)).collect())
}

/// `state diff` while the domain is down: the listing its last teardown
/// took against the base. Nothing for a directory with neither (never
/// started, or reset since); an error for one with only one of them.
pub fn diff_recorded(domain_dir: &Path, dirs: &[PathBuf]) -> Result<Vec<StateChange>> {
    let mut changes = Vec::new();
    for dir in dirs {
        match (load(domain_dir, dir, Kept::Base)?, load(domain_dir, dir, Kept::Latest)?) {
            (None, None) => {}
            (Some(base), Some(latest)) => changes.extend(compare(dir, &base, &latest)),
            (Some(_), None) => crate::bail!(
                "{} was not listed at the domain's last teardown (it failed, or the coordinator was killed): run the domain for a \
                 diff of the pod as it is",
                dir.display()
            ),
            (None, Some(_)) => {
                bases(domain_dir, std::slice::from_ref(dir))?;
            }
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

/// A pod's field as an error shows it: escaped, and cut short.
fn shown(field: &[u8]) -> String {
    let cut = &field[..field.len().min(SHOWN_FIELD)];
    let ellipsis = if field.len() > SHOWN_FIELD { "..." } else { "" };
    format!("`{}{ellipsis}`", escape_bytes(cut))
}

/// The lister's records, one listing per directory, read one record at a
/// time. Strict: a malformed or cut record, an index out of range, a path
/// that is not a plain relative one, one listed twice, or more than
/// [`MAX_ENTRIES`] records is an error.
fn parse(output: &[u8], dirs: usize) -> Result<Vec<Listing>> {
    parse_at_most(output, dirs, MAX_ENTRIES)
}

fn parse_at_most(output: &[u8], dirs: usize, max_entries: usize) -> Result<Vec<Listing>> {
    let body = output.strip_suffix(b"\0").unwrap_or(output);
    let mut fields = body.split(|&byte| byte == 0);
    let mut listings = vec![Listing::new(); dirs];
    let mut records = 0usize;
    let number = |field: &[u8], radix: u32| -> Result<u64> {
        std::str::from_utf8(field)
            .ok()
            .and_then(|text| u64::from_str_radix(text, radix).ok())
            .ok_or_else(|| crate::format_err!("unexpected number {} in the pod's listing", shown(field)))
    };
    let time = |field: &[u8]| -> Result<(i64, u32)> {
        std::str::from_utf8(field)
            .ok()
            .and_then(|text| parse_find_time(text).ok())
            .ok_or_else(|| crate::format_err!("unexpected time {} in the pod's listing", shown(field)))
    };
    if body.is_empty() {
        return Ok(listings);
    }
    loop {
        let mut record: [&[u8]; FIELDS] = [&[]; FIELDS];
        for (index, slot) in record.iter_mut().enumerate() {
            *slot = match fields.next() {
                Some(field) => field,
                None if index == 0 => return Ok(listings),
                None => crate::bail!("the pod's listing ends within a record"),
            };
        }
        records += 1;
        if records > max_entries {
            crate::bail!("the persistent directories hold more than {max_entries} paths; `state diff` does not list so many");
        }
        let index = usize::try_from(number(record[0], 10)?)?;
        let listing = listings.get_mut(index).ok_or_else(|| crate::format_err!("the pod's listing names directory {index}"))?;
        let kind = match record[1] {
            [kind] if b"fdlcbps?".contains(kind) => char::from(*kind),
            other => crate::bail!("unexpected kind {} in the pod's listing", shown(other)),
        };
        let (mtime_sec, mtime_nsec) = time(record[3])?;
        let (ctime_sec, ctime_nsec) = time(record[4])?;
        let path = record[9];
        if path.split(|&byte| byte == b'/').any(|segment| matches!(segment, b"" | b"." | b"..")) {
            crate::bail!("unexpected path {} in the pod's listing", shown(path));
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
        if listing.insert(escape_bytes(path), Facts { fingerprint, ctime_sec, ctime_nsec }).is_some() {
            crate::bail!("the pod's listing names {} twice", shown(path));
        }
    }
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
    fn a_flood_of_fields_or_records_is_refused_without_holding_it() {
        // 2 MiB of empty fields: refused at the first record, not collected.
        assert!(parse(&vec![0u8; 2 << 20], 1).is_err());
        let one = record(0, 'f', 1, ("1.0", "1.0"), "644", "", b"a");
        assert!(parse(&[one.clone(), one].concat(), 1).is_err(), "a path listed twice");
        // A kind of 1 MiB.
        let mut bad_kind = b"0\0".to_vec();
        bad_kind.extend(vec![b'k'; 1 << 20]);
        bad_kind.extend_from_slice(b"\x001\x001.0\x001.0\x00644\x000\x000\x00\x00a\x00");
        let error = parse(&bad_kind, 1).expect_err("a long kind").to_string();
        assert!(error.len() < 200, "the pod's field is cut short: {} bytes", error.len());
        assert!(parse(b"", 1).expect("empty").iter().all(BTreeMap::is_empty), "an empty listing");
    }

    #[test]
    fn more_than_the_most_paths_is_refused() {
        let mut output = Vec::new();
        for index in 0..=10 {
            output.extend(record(0, 'f', 1, ("1.0", "1.0"), "644", "", format!("f{index}").as_bytes()));
        }
        let error = parse_at_most(&output, 1, 10).expect_err("too many").to_string();
        assert!(error.contains("more than 10 paths"), "{error}");
        assert_eq!(parse_at_most(&output, 1, 11).expect("as many as allowed")[0].len(), 11);
    }

    #[test]
    fn records_follow_the_epochs() {
        let domain = tempfile::tempdir().expect("tempdir");
        let dirs = [PathBuf::from("/usr/local"), PathBuf::from("/root")];
        assert_eq!(epochs(domain.path(), &dirs).expect("epochs"), [0, 0]);
        let base = listing(&[record(0, 'f', 3, ("1.0", "1.0"), "644", "", b"a")]);
        let latest = listing(&[record(0, 'f', 3, ("1.0", "1.0"), "644", "", b"b")]);
        for dir in &dirs {
            save(domain.path(), dir, Kept::Base, base.clone()).expect("save");
            save(domain.path(), dir, Kept::Latest, latest.clone()).expect("save");
        }
        assert_eq!(codes(&diff_recorded(domain.path(), &dirs[..1]).expect("diff")), ["D  /usr/local/a", "A  /usr/local/b"]);
        reset(domain.path(), &dirs[..1]).expect("reset");
        let after = epochs(domain.path(), &dirs).expect("epochs");
        assert!(after[0] != 0 && after[1] == 0, "a reset draws a new epoch for its directory only: {after:?}");
        assert!(diff_recorded(domain.path(), &dirs[..1]).expect("diff").is_empty(), "nothing recorded since the reset");
        let unknown = diff_live_bases(domain.path(), &dirs[..1]);
        assert!(unknown.contains("state reset --dir /usr/local"), "{unknown}");
        assert_eq!(diff_recorded(domain.path(), &dirs[1..]).expect("diff").len(), 2, "the other directory keeps its records");
        forget(domain.path(), &dirs[1], Kept::Latest).expect("forget");
        let unlisted = diff_recorded(domain.path(), &dirs[1..]).expect_err("no latest listing").to_string();
        assert!(unlisted.contains("not listed at the domain's last teardown"), "{unlisted}");
        remove_records(domain.path(), &dirs).expect("remove");
        assert_eq!(std::fs::read_dir(domain.path()).expect("list").count(), 0);
    }

    /// What `diff_live` says before it lists anything, for directories
    /// without a base.
    fn diff_live_bases(domain_dir: &Path, dirs: &[PathBuf]) -> String {
        bases(domain_dir, dirs).expect_err("no base").to_string()
    }
}
