//! `lazaret-coordinator`: the Session Coordinator of one domain, as a
//! library the `lazaret` binary calls ([`run`]) and whose parts its commands
//! use (`lazaret doctor` starts with the coordinator's own podman arguments,
//! `lazaret state` reads the State Anchor, `lazaret diff` the agent branch).
//!
//! - `coordinator`: the main loop, the in-memory domain and its JSON-RPC
//!   API; the top level, which no other module imports.
//! - `backend`: the sandbox, a local container (`podman run` in
//!   `backend::sandbox`) or a pod, seeing its domain only through
//!   `backend::BackendDomain`.
//! - `escalation`: Host Escalation, coordinator side.
//! - `git_sentry`: the agent's repository and branch.
//! - `sidecar_container`: the Network Sidecar, coordinator side (its image,
//!   container, control socket and events); `credentials`: the keys its
//!   credential endpoints add.
//! - `state_anchor`: persistent directories on fuse-overlayfs.
//! - `podman`, `runsc`, `helper_binaries`: the programs it starts;
//!   `bounded_process`: each host-side process run with a bound.
//! - `resource_limits`: how the profile's resource limits are enforced here.
//! - `domain_lock`, `private_dirs`: the lockfile and private directories.
//! - `memory`: free memory handed back at the coordinator's quiet points.
//!
//! It installs no tracing subscriber and knows nothing of the command line.

pub mod backend;
pub mod bounded_process;
pub mod cleanup;
pub mod coordinator;
pub mod credentials;
pub mod domain_lock;
pub mod error;

pub mod escalation;
pub mod exec_target;
pub mod git_sentry;
pub mod helper_binaries;
pub mod memory;
pub mod network_requests;
pub mod podman;
pub mod private_dirs;
pub mod resource_limits;
pub mod runsc;
pub mod sandbox_exec;
pub mod sidecar_container;
pub mod state_anchor;

pub use backend::WorkspaceMode;
pub use coordinator::api::EgressReloader;
pub use coordinator::{run, LOG_FILE, STORE_FILE};
pub use error::{Context, Error, Result};
