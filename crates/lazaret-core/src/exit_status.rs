//! Process exit statuses shared by every Lazaret binary.
//!
//! `lazaret run` passes the inner command's status through, so these only
//! apply to Lazaret's own failures.

/// A general failure (runtime missing, podman error, I/O).
pub const FAILURE: u8 = 1;
/// Bad command-line usage (clap uses 2 as well).
pub const USAGE: u8 = 2;
/// `lazaret merge --expect COMMIT`: the agent branch is no longer at the
/// commit that was reviewed; nothing was merged.
pub const BRANCH_MOVED: u8 = 3;
/// A security abort (DECISIONS D8): path traversal, a lockfile owned by
/// another user, a protected path in a volume. Nothing was created.
pub const SECURITY_ABORT: u8 = 77;
/// An invalid configuration (unknown key, bad value). Nothing was created.
pub const CONFIG_INVALID: u8 = 78;
