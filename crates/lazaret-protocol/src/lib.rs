//! `lazaret-protocol`: the JSON-RPC 2.0 API between the Session Coordinator
//! and its clients (the `lazaret` CLI, the VS Code extension, the Neovim
//! plugin), defined once as a jsonrpsee `#[rpc]` trait ([`api`]), and the
//! wire types it carries. The server side is implemented by the coordinator,
//! the typed client (`LazaretApiClient`) is what the CLI calls, and the
//! TypeScript and Lua declarations of the editor clients are generated from
//! this crate (`tests/generated.rs`).
//!
//! Wire conventions: method names are `<resource>/<method>`, fields are
//! camelCase, parameters are by name, messages are framed LSP-style
//! (`Content-Length: N\r\n\r\n`), see `docs/rpc.md`. Nothing else in
//! Lazaret knows these names.
//!
//! Three more wire formats live here, built without the `rpc` feature: the
//! `escalation` module is what `lazaret-escalate` sends from inside the
//! sandbox, the `relay` module the frames that carry a pod's Escalation
//! Socket connections over one exec stream (the Kubernetes backend), the
//! `sidecar` module the Network Sidecar's control protocol (spoken by the
//! coordinator and `lazaret-sidecar`).

#[cfg(feature = "rpc")]
pub mod api;
pub mod escalation;
pub mod relay;
pub mod sidecar;
mod types;

#[cfg(feature = "schema")]
pub mod schema;

#[cfg(feature = "rpc")]
pub use api::*;
pub use types::*;

/// Version of this API; bumped on incompatible changes.
pub const API_VERSION: u32 = 2;

/// Application error codes (JSON-RPC reserves -32768..-32000).
pub mod error_code {
    /// The domain is tearing down; start a new session (the CLI retries).
    pub const SHUTTING_DOWN: i32 = 1001;
    /// The sandbox container could not be started; `message` says why.
    pub const SANDBOX_FAILED: i32 = 1002;
    /// The session id is unknown or belongs to another connection.
    pub const UNKNOWN_SESSION: i32 = 1003;
    /// The request was well-formed but its values are not acceptable.
    pub const INVALID_VALUE: i32 = 1004;
    /// The state store failed.
    pub const STORE_FAILED: i32 = 1005;
    /// A git operation failed; `message` has git's reason.
    pub const GIT_FAILED: i32 = 1006;
    /// The escalation is unknown or was already answered.
    pub const ESCALATION_NOT_PENDING: i32 = 1007;
    /// The domain has no Network Sidecar (empty allowlist) or it refused.
    pub const NETWORK_FAILED: i32 = 1008;
    /// The sandbox is not running (for methods that read inside it).
    pub const SANDBOX_NOT_RUNNING: i32 = 1009;
    /// The network request is unknown or was already answered.
    pub const NETWORK_REQUEST_NOT_PENDING: i32 = 1010;
    /// The rule or grant is unknown (revoked already, or expired).
    pub const RULE_NOT_FOUND: i32 = 1011;
}

/// Where a domain's sockets live under the socket directory, and the
/// framing spoken on the control socket (for `lazaret editor-info`).
pub mod socket {
    /// `<socket_dir>/<domainHash>/control.sock`
    pub const CONTROL_SOCKET_FILE: &str = "control.sock";
    /// `<socket_dir>/<domainHash>/escalate.sock`
    pub const ESCALATION_SOCKET_FILE: &str = "escalate.sock";
    /// The framing of the control socket, as `lazaret editor-info` names it.
    pub const FRAMING: &str = "Content-Length";
}
