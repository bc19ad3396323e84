//! `lazaret-rpc`: the control socket's transport. LSP-style framing
//! (`framing`), a jsonrpsee dispatcher over a `UnixListener` with a
//! `SO_PEERCRED` uid check (`server`; jsonrpsee has no Unix transport), the
//! typed client (`client`: jsonrpsee's async client, on which
//! `lazaret-protocol`'s generated `LazaretApiClient` methods are called) and the accept loop with backoff
//! that every coordinator socket uses (`accept`).
//!
//! It knows framing and transport only: no method name, no wire type.

pub mod accept;
pub mod client;
pub mod framing;
pub mod server;

/// A failed connection or call.
pub use client::Error;

/// A result of a control-socket call.
pub type Result<T, E = Error> = std::result::Result<T, E>;
