//! `branch/fileContents`: one path of the agent's work for a diff editor,
//! at the branch's base and head (read by the host's hardened git from the
//! imported objects: nothing is checked out) and in the sandbox's working
//! tree (read inside the sandbox: the agent wrote it). Every side is capped
//! at [`MAX_FILE_TEXT`]; binary content is flagged, never sent.

use std::io::Read;
use std::process::Stdio;

use lazaret_protocol::{FileContents, FileVersion, MAX_FILE_TEXT};

use super::HostRepository;
use crate::cleanup::LogFailure;
use crate::error::{Context, Result};

/// Longest path accepted, in bytes.
const MAX_PATH: usize = 4096;

/// Why a client's `path` is not a plain path relative to the workspace;
/// each message names the path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathRefusal {
    #[error("`path` is empty: name a file relative to the workspace")]
    Empty,
    #[error("`path` is {length} bytes long; at most {MAX_PATH}")]
    TooLong { length: usize },
    #[error("path {0:?} contains control characters")]
    ControlCharacters(String),
    #[error("path {0:?} is absolute; name a file relative to the workspace")]
    Absolute(String),
    #[error("path {0:?} has an empty, `.` or `..` component")]
    NotPlain(String),
    #[error("path {0:?} is inside a .git directory")]
    InsideGit(String),
}

/// Refuses what is not a plain path relative to the workspace: absolute
/// paths, `.`/`..`/empty components, `.git` (in any case), control
/// characters.
pub fn check_path(path: &str) -> std::result::Result<(), PathRefusal> {
    if path.is_empty() {
        return Err(PathRefusal::Empty);
    }
    if path.len() > MAX_PATH {
        return Err(PathRefusal::TooLong { length: path.len() });
    }
    if path.chars().any(char::is_control) {
        return Err(PathRefusal::ControlCharacters(path.to_owned()));
    }
    if path.starts_with('/') {
        return Err(PathRefusal::Absolute(path.to_owned()));
    }
    for component in path.split('/') {
        if component.is_empty() || component == "." || component == ".." {
            return Err(PathRefusal::NotPlain(path.to_owned()));
        }
        if component.eq_ignore_ascii_case(".git") {
            return Err(PathRefusal::InsideGit(path.to_owned()));
        }
    }
    Ok(())
}

fn absent() -> FileVersion {
    FileVersion { exists: false, binary: false, truncated: false, size: 0, text: None }
}

/// The text of `bytes` (the first `bytes.len()` of `size`), or a binary
/// marker: NUL bytes or invalid UTF-8 (a character cut at the cap is fine).
pub fn version_of(bytes: &[u8], size: u64) -> FileVersion {
    let truncated = (bytes.len() as u64) < size;
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => Some(text),
        // Cut inside a character at the cap: keep what is whole.
        Err(error) if truncated && error.error_len().is_none() => std::str::from_utf8(&bytes[..error.valid_up_to()]).ok(),
        Err(_) => None,
    };
    match text.filter(|text| !text.contains('\0')) {
        Some(text) => FileVersion { exists: true, binary: false, truncated, size, text: Some(text.to_owned()) },
        None => FileVersion { exists: true, binary: true, truncated: false, size, text: None },
    }
}

/// `path` at `commit` in the host repository.
fn committed_version(host: &HostRepository, commit: &str, path: &str) -> Result<FileVersion> {
    // `<commit>:<path>` names the path literally (no pathspec magic).
    let answer = host.batch_check("%(objecttype) %(objectname) %(objectsize)", &[format!("{commit}:{path}")])?;
    let fields: Vec<&str> = answer.split_whitespace().collect();
    let (kind, object, size) = match fields.as_slice() {
        [kind, object, size] => (*kind, *object, size.parse::<u64>().unwrap_or(0)),
        // `<commit>:<path> missing`
        _ => return Ok(absent()),
    };
    if kind != "blob" {
        // A directory or a submodule: there is no file text to show.
        return Ok(FileVersion { exists: true, binary: true, truncated: false, size: 0, text: None });
    }
    let mut reader = host
        .command()
        .args(["cat-file", "blob", object])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot run git cat-file")?;
    let mut bytes = Vec::new();
    if let Some(stdout) = reader.stdout.take() {
        stdout.take(MAX_FILE_TEXT as u64).read_to_end(&mut bytes).context("cannot read a blob from git")?;
    }
    // Whatever is left unread (past the cap) is not wanted.
    reader.kill().log_failure("stopping git cat-file");
    reader.wait().log_failure("reaping git cat-file");
    Ok(version_of(&bytes, size))
}

/// The committed sides of `path`: at the merge base and at the agent
/// branch's head (both absent while the branch has not reached the host).
pub fn committed(host: &HostRepository, branch: &str, path: &str) -> Result<FileContents> {
    committed_between(host, super::diff::endpoints(host, branch)?, path)
}

/// The committed sides of `path` at `base` and `head`, commits the caller
/// checked with [`HostRepository::commit`]: what a review names, whatever
/// the branch points at now (DECISIONS D16).
pub fn committed_at(host: &HostRepository, base: String, head: String, path: &str) -> Result<FileContents> {
    committed_between(host, Some((base, head)), path)
}

fn committed_between(host: &HostRepository, endpoints: Option<(String, String)>, path: &str) -> Result<FileContents> {
    let Some((base, head)) = endpoints else {
        return Ok(FileContents {
            path: path.to_owned(),
            base_commit: None,
            head_commit: None,
            base: absent(),
            head: absent(),
            working: None,
        });
    };
    Ok(FileContents {
        path: path.to_owned(),
        base: committed_version(host, &base, path)?,
        head: committed_version(host, &head, path)?,
        base_commit: Some(base),
        head_commit: Some(head),
        working: None,
    })
}

/// `path` in the sandbox's `/workspace`, read inside the sandbox by its own
/// `wc` and `head` (which the agent may have replaced: the output is capped
/// and parsed defensively, and whatever it says is the agent's word).
pub async fn working(inside: &crate::sandbox_exec::Inside<'_>, path: &str) -> Result<FileVersion> {
    let script = "f=\"/workspace/$1\"; if [ -f \"$f\" ]; then wc -c < \"$f\" && head -c \"$2\" \"$f\"; \
                  elif [ -e \"$f\" ] || [ -L \"$f\" ]; then echo other; else echo absent; fi";
    let most = MAX_FILE_TEXT.to_string();
    let output =
        inside.shell(script, "lazaret-file", &[path, &most], Some(MAX_FILE_TEXT + 64), "reading a file inside the sandbox").await?;
    if output.success == Some(false) {
        crate::bail!("reading {path:?} inside the sandbox failed");
    }
    let newline = output.stdout.iter().position(|byte| *byte == b'\n').unwrap_or(output.stdout.len());
    let header = String::from_utf8_lossy(&output.stdout[..newline]).trim().to_owned();
    let body = output.stdout.get(newline + 1..).unwrap_or_default();
    match header.as_str() {
        "absent" => Ok(absent()),
        "other" => Ok(FileVersion { exists: true, binary: true, truncated: false, size: 0, text: None }),
        size => {
            let size: u64 = size.parse().map_err(|_| crate::format_err!("reading {path:?} inside the sandbox gave no size"))?;
            let body = &body[..body.len().min(MAX_FILE_TEXT)];
            Ok(version_of(body, size.max(body.len() as u64)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths_pass() {
        for good in ["src/lib.rs", "README.md", ".envrc", ".vscode/tasks.json", "a b/c", "gitx/.gitignore"] {
            assert_eq!(check_path(good), Ok(()), "{good}");
        }
        for bad in ["", "/etc/passwd", "../x", "a/../b", "./a", "a//b", "a/", ".git/config", "x/.GIT/hooks/pre-commit", "a\nb", "a\0b"] {
            let error = check_path(bad).expect_err(bad).to_string();
            assert!(bad.is_empty() || bad.contains(['\n', '\0']) || error.contains(bad), "{error} names {bad:?}");
        }
        assert!(check_path(&"a/".repeat(3000)).is_err());
    }

    #[test]
    fn text_binary_and_cut_characters() {
        assert_eq!(version_of(b"hi\n", 3).text.as_deref(), Some("hi\n"));
        let binary = version_of(b"a\0b", 3);
        assert!(binary.binary && binary.text.is_none() && binary.size == 3);
        assert!(version_of(&[0xff, 0xfe], 2).binary, "invalid UTF-8 is binary");
        // "é" is two bytes; cut after the first at the cap: text, truncated.
        let cut = version_of(&[b'a', 0xc3], 10);
        assert_eq!((cut.text.as_deref(), cut.truncated, cut.binary), (Some("a"), true, false));
        // The same bytes as a whole file are not text.
        assert!(version_of(&[b'a', 0xc3], 2).binary);
    }
}
