//! JSON Schema of the control socket's wire types (schemars), the source
//! the editor clients' TypeScript and Lua declarations are generated from
//! (`tests/generated.rs`). The method table itself is read from the
//! `#[rpc]` trait in `api.rs` by that generator, so neither is written
//! twice.

use schemars::generate::SchemaSettings;
use serde_json::Value;

use crate::types::*;

/// The `$defs` of every type that crosses the control socket, keyed by
/// type name (draft 2020-12).
pub fn definitions() -> serde_json::Map<String, Value> {
    let mut generator = SchemaSettings::draft2020_12().into_generator();
    // The roots: everything a method takes or returns, the event stream,
    // and `lazaret editor-info --json`. Types they contain come along.
    generator.subschema_for::<RegisterResult>();
    generator.subschema_for::<DomainStatus>();
    generator.subschema_for::<CompletedSession>();
    generator.subschema_for::<AuditRecord>();
    generator.subschema_for::<AuditVerification>();
    generator.subschema_for::<BranchDiff>();
    generator.subschema_for::<FileContents>();
    generator.subschema_for::<StateChange>();
    generator.subschema_for::<NetworkPolicy>();
    generator.subschema_for::<PendingEscalation>();
    generator.subschema_for::<Decision>();
    generator.subschema_for::<PendingItem>();
    generator.subschema_for::<NetworkDecision>();
    generator.subschema_for::<GrantScope>();
    generator.subschema_for::<Rules>();
    generator.subschema_for::<SequencedEvent>();
    generator.subschema_for::<EditorInfo>();
    generator.subschema_for::<StatusReport>();
    let mut definitions = serde_json::Map::new();
    for (name, schema) in generator.definitions() {
        definitions.insert(name.clone(), schema.clone());
    }
    definitions
}
