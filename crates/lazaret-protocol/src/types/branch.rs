//! What the agent changed: the agent branch's files and diff, a file's two
//! versions, and the State Anchor's changed paths.

use serde::{Deserialize, Serialize};

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct FileChange {
    pub path: String,
    /// git's status letter: `A`, `M`, `D`, `R`, `T`, or `??` (untracked).
    pub status: String,
    /// `None` for binary files.
    pub additions: Option<u64>,
    pub deletions: Option<u64>,
}

/// A changed file that makes hosts run code (DECISIONS D4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PathWarning {
    pub path: String,
    pub reason: String,
}

/// The agent's uncommitted changes inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct UncommittedChanges {
    pub files: Vec<FileChange>,
    pub patch: String,
}

/// The agent branch against its base on the host, plus the agent's
/// uncommitted changes when the sandbox runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct BranchDiff {
    /// `lazaret/agent-<profile>`.
    pub branch: String,
    /// The host commit the agent branch started from (merge base with the
    /// host's `HEAD`); `None` while the branch does not exist on the host.
    pub base: Option<String>,
    /// The agent branch's commit on the host.
    pub head: Option<String>,
    pub files: Vec<FileChange>,
    pub patch: String,
    /// `None` when the sandbox is not running.
    pub uncommitted: Option<UncommittedChanges>,
    pub warnings: Vec<PathWarning>,
}

/// One side of a file for a diff editor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct FileVersion {
    /// Whether the path exists on this side.
    pub exists: bool,
    /// NUL bytes or invalid UTF-8: `text` is `None`.
    pub binary: bool,
    /// `text` holds only the first `MAX_FILE_TEXT` bytes.
    pub truncated: bool,
    /// Size in bytes (0 when absent).
    pub size: u64,
    pub text: Option<String>,
}

/// Largest text of one [`FileVersion`], in bytes.
pub const MAX_FILE_TEXT: usize = 1 << 20;

/// The answer to `branch/fileContents`: one path at the agent branch's
/// base, at its head on the host, and in the sandbox's working tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct FileContents {
    pub path: String,
    /// The base commit the diff starts from (`BranchDiff.base`).
    pub base_commit: Option<String>,
    /// The agent branch's commit on the host (`BranchDiff.head`).
    pub head_commit: Option<String>,
    pub base: FileVersion,
    pub head: FileVersion,
    /// The file in the sandbox's `/workspace`, uncommitted changes
    /// included. Written by the agent: treat as untrusted. `None` when the
    /// sandbox is not running or the workspace is mounted directly.
    pub working: Option<FileVersion>,
}

/// How a path under a persistent directory differs from the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum StateChangeKind {
    /// `A`: not in the image.
    Added,
    /// `M`: the agent's version hides the image's.
    Modified,
    /// `M!`: modified, and the image changed this path since; the agent's
    /// version wins.
    ModifiedConflict,
    /// `D`: deleted; the image still has it.
    Deleted,
    /// `D!`: deleted, and the image changed this path since.
    DeletedConflict,
}

impl StateChangeKind {
    /// The one- or two-letter code `lazaret state diff` prints.
    pub fn code(self) -> &'static str {
        match self {
            StateChangeKind::Added => "A",
            StateChangeKind::Modified => "M",
            StateChangeKind::ModifiedConflict => "M!",
            StateChangeKind::Deleted => "D",
            StateChangeKind::DeletedConflict => "D!",
        }
    }
}

/// One change of the agent in a persistent directory (the State Anchor).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StateChange {
    /// The persistent directory (container path).
    pub dir: String,
    /// The changed path (container path; the agent chose it).
    pub path: String,
    pub kind: StateChangeKind,
}
