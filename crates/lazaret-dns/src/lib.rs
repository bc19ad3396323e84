//! DNS for the Network Sidecar: the wire codec (`wire`) and the name
//! allowlist with its exfiltration limits (`names`). Pure functions over byte
//! slices and strings, no I/O, no dependencies: the sidecar links it into a
//! static binary and feeds it packets that the sandbox wrote, so every parser
//! here is bounded and fuzzed (`fuzz/fuzz_targets/dns_query.rs`).

pub mod names;
pub mod wire;

pub use names::{NamePattern, NamePolicy, Refusal};
pub use wire::{Query, Question, Rcode, Response, WireError};
