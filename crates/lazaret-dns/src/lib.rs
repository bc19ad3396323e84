//! DNS for the Network Sidecar: the wire codec (`wire`), the name allowlist
//! with its exfiltration limits and the record types served (`names`), and
//! the special address ranges a name's answer may not open (`special`), the
//! one definition the sidecar and the cluster policy generator share. Pure
//! functions over byte slices and strings, no I/O, no dependencies: the
//! sidecar links it into a static binary and feeds it packets that the
//! sandbox wrote, so every parser here is bounded and fuzzed
//! (`fuzz/fuzz_targets/dns_query.rs`).

pub mod names;
pub mod special;
pub mod wire;

pub use names::{NamePattern, NamePolicy, Refusal};
pub use wire::{Query, Question, Rcode, Response, WireError};
