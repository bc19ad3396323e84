//! `lazaret diff` and `branch/diff`: the agent branch against its base,
//! computed by the host's hardened git in the host repository (the branch
//! is imported data there), and the agent's uncommitted changes, computed by
//! git inside the sandbox. Paths that make hosts run code are flagged (D4).

use lazaret_protocol::{BranchDiff, FileChange, PathWarning, UncommittedChanges};

use super::HostRepository;
use crate::error::Result;

/// Largest patch text returned; longer ones are cut with a note.
const MAX_PATCH_BYTES: usize = 4 << 20;

/// The agent branch's base (its merge base with the host's `HEAD`) and
/// head on the host; `None` while the branch has not reached the host.
pub fn endpoints(host: &HostRepository, branch: &str) -> Result<Option<(String, String)>> {
    Ok(host.resolve(&format!("refs/heads/{branch}"))?.map(|head| endpoints_at(host, head)))
}

/// The base of a commit of the agent branch (its merge base with the
/// host's `HEAD`) and the commit.
pub fn endpoints_at(host: &HostRepository, head: String) -> (String, String) {
    let base = host.git_text(&["merge-base", "HEAD", &head]).unwrap_or_else(|_| head.clone());
    (base, head)
}

/// The committed part, from the host repository, at the branch's head now.
pub fn committed(host: &HostRepository, branch: &str, with_patch: bool) -> Result<BranchDiff> {
    between(host, branch, endpoints(host, branch)?, with_patch)
}

/// The committed part at `head`, a commit the caller checked with
/// [`HostRepository::commit`] (a review shown again, or a merge pinned to
/// what was reviewed), whatever the branch points at now.
pub fn committed_at(host: &HostRepository, branch: &str, head: String, with_patch: bool) -> Result<BranchDiff> {
    between(host, branch, Some(endpoints_at(host, head)), with_patch)
}

fn between(host: &HostRepository, branch: &str, endpoints: Option<(String, String)>, with_patch: bool) -> Result<BranchDiff> {
    let mut diff = BranchDiff {
        branch: branch.to_owned(),
        base: None,
        head: None,
        files: Vec::new(),
        patch: String::new(),
        uncommitted: None,
        warnings: Vec::new(),
    };
    let Some((base, head)) = endpoints else { return Ok(diff) };
    let range = [base.as_str(), head.as_str()];
    diff.files = parse_changes(
        &host.git_text(&["diff", "--no-ext-diff", "--no-textconv", "--numstat", "-z", range[0], range[1]])?,
        &host.git_text(&["diff", "--no-ext-diff", "--name-status", "-z", range[0], range[1]])?,
    );
    if with_patch {
        diff.patch = cap(host.git_text(&["diff", "--no-ext-diff", "--no-textconv", "--no-color", range[0], range[1]])?);
    }
    diff.base = Some(base);
    diff.head = Some(head);
    diff.warnings = warnings(diff.files.iter().map(|file| file.path.as_str()));
    Ok(diff)
}

/// Adds the agent's uncommitted changes, read by git inside the sandbox.
pub async fn add_uncommitted(diff: &mut BranchDiff, inside: &crate::sandbox_exec::Inside<'_>, with_patch: bool) -> Result<()> {
    let script = "cd /workspace && git diff --no-ext-diff --numstat -z HEAD && printf '\\0\\036\\0' && \
                  git diff --no-ext-diff --name-status -z HEAD && printf '\\0\\036\\0' && \
                  git ls-files --others --exclude-standard -z && printf '\\0\\036\\0' && \
                  { [ \"$1\" = patch ] && git diff --no-ext-diff --no-color HEAD || true; }";
    let patch = if with_patch { "patch" } else { "no-patch" };
    let output = inside.shell(script, "lazaret-diff", &[patch], None, "git diff of the uncommitted changes").await?;
    if output.success != Some(true) {
        crate::bail!(
            "git inside the sandbox failed: {}",
            lazaret_core::terminal_text::block(String::from_utf8_lossy(&output.stderr).trim())
        );
    }
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let parts: Vec<&str> = text.split("\0\u{1e}\0").collect();
    let (numstat, name_status, untracked, patch) = (
        parts.first().copied().unwrap_or(""),
        parts.get(1).copied().unwrap_or(""),
        parts.get(2).copied().unwrap_or(""),
        parts.get(3).copied().unwrap_or(""),
    );
    let mut files = parse_changes(numstat, name_status);
    for path in untracked.split('\0').filter(|path| !path.is_empty()) {
        files.push(FileChange { path: path.to_owned(), status: "??".to_owned(), additions: None, deletions: None });
    }
    let mut all_warnings = warnings(files.iter().map(|file| file.path.as_str()));
    for warning in all_warnings.drain(..) {
        if !diff.warnings.iter().any(|known| known.path == warning.path) {
            diff.warnings.push(warning);
        }
    }
    diff.uncommitted = Some(UncommittedChanges { files, patch: cap(patch.to_owned()) });
    Ok(())
}

fn warnings<'a>(paths: impl Iterator<Item = &'a str>) -> Vec<PathWarning> {
    paths
        .filter_map(|path| {
            lazaret_core::host_code_files::warning_for(path).map(|reason| PathWarning { path: path.to_owned(), reason: reason.to_owned() })
        })
        .collect()
}

fn cap(mut patch: String) -> String {
    if patch.len() > MAX_PATCH_BYTES {
        let mut end = MAX_PATCH_BYTES;
        while !patch.is_char_boundary(end) {
            end -= 1;
        }
        patch.truncate(end);
        patch.push_str("\n[patch cut by lazaret at 4 MiB]\n");
    }
    patch
}

/// Joins `--numstat -z` and `--name-status -z` output into file changes.
fn parse_changes(numstat: &str, name_status: &str) -> Vec<FileChange> {
    let mut statuses = std::collections::HashMap::new();
    let mut fields = name_status.split('\0').filter(|field| !field.is_empty());
    while let Some(status) = fields.next() {
        let letter = status.chars().next().map(String::from).unwrap_or_default();
        let path = if letter == "R" || letter == "C" {
            let _from = fields.next();
            fields.next()
        } else {
            fields.next()
        };
        if let Some(path) = path {
            statuses.insert(path.to_owned(), letter);
        }
    }
    let mut files = Vec::new();
    let mut records = numstat.split('\0');
    while let Some(record) = records.next() {
        if record.is_empty() {
            continue;
        }
        let mut columns = record.splitn(3, '\t');
        let (Some(added), Some(deleted), Some(path)) = (columns.next(), columns.next(), columns.next()) else { continue };
        // A rename: the path column is empty and two NUL-separated paths follow.
        let path = if path.is_empty() {
            let _from = records.next();
            records.next().unwrap_or_default().to_owned()
        } else {
            path.to_owned()
        };
        let status = statuses.get(&path).cloned().unwrap_or_else(|| "M".to_owned());
        files.push(FileChange { path, status, additions: added.parse().ok(), deletions: deleted.parse().ok() });
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_numstat_and_name_status() {
        let numstat = "3\t1\tsrc/a.rs\0-\t-\tlogo.png\0";
        let name_status = "M\0src/a.rs\0A\0logo.png\0";
        let files = parse_changes(numstat, name_status);
        assert_eq!(files.len(), 2);
        assert_eq!((files[0].status.as_str(), files[0].additions, files[0].deletions), ("M", Some(3), Some(1)));
        assert_eq!((files[1].path.as_str(), files[1].status.as_str(), files[1].additions), ("logo.png", "A", None));
    }
}
