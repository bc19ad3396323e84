//! The control socket's transport: LSP-style framing, a jsonrpsee dispatcher
//! over `UnixStream` (server side, used by the coordinator) and a small
//! framed client (used by the CLI).

pub mod client;
pub mod framing;
pub mod server;
