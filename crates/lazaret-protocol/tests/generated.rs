//! The protocol as every other language sees it, generated from this crate
//! and checked in: the JSON Schema (`docs/protocol.schema.json`), the VS Code
//! extension's TypeScript (`vscode-extension/src/protocol.ts`) and the Neovim
//! plugin's LuaLS annotations and method table
//! (`editors/nvim/lua/lazaret/protocol.lua`).
//!
//! The wire types come from their schemars schemas ([`schema::definitions`]);
//! the methods are read from the `#[rpc]` trait in `src/api.rs` with `syn`,
//! so the trait stays the one definition. The tests fail when a checked-in
//! file differs from what this generates; regenerate with
//! `LAZARET_UPDATE_GENERATED=1 cargo test -p lazaret-protocol --test generated`.
//!
//! A second test keeps method names out of every other crate: clients call
//! the typed `LazaretApiClient` instead of writing `"escalation/respond"`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use lazaret_protocol::{schema, API_VERSION};
use serde_json::{json, Map, Value};

/// One method (or subscription) of the trait.
struct Method {
    /// The Rust name, e.g. `branch_file_contents`.
    rust_name: String,
    /// The wire name, e.g. `branch/fileContents`.
    name: String,
    doc: String,
    params: Vec<Param>,
    /// The result's schema (the item's, for a subscription).
    result: Value,
    subscription: Option<Subscription>,
}

struct Subscription {
    notification: String,
    unsubscribe: String,
}

struct Param {
    name: String,
    schema: Value,
    required: bool,
}

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn doc_of(attributes: &[syn::Attribute]) -> String {
    let mut lines = Vec::new();
    for attribute in attributes {
        if let syn::Meta::NameValue(value) = &attribute.meta {
            if value.path.is_ident("doc") {
                if let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(text), .. }) = &value.value {
                    lines.push(text.value().trim().to_owned());
                }
            }
        }
    }
    lines.join(" ")
}

/// One application error code of `error_code` in `src/lib.rs`.
struct ErrorCode {
    name: String,
    value: i64,
    doc: String,
}

/// The `error_code` module's constants, read from `src/lib.rs` (the one
/// definition), in their order there.
fn read_error_codes() -> Vec<ErrorCode> {
    let source = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).expect("read lib.rs");
    let file = syn::parse_file(&source).expect("parse lib.rs");
    let items = file
        .items
        .iter()
        .find_map(|item| match item {
            syn::Item::Mod(module) if module.ident == "error_code" => module.content.as_ref().map(|(_, items)| items),
            _ => None,
        })
        .expect("mod error_code in lib.rs");
    let mut codes = Vec::new();
    for item in items {
        let syn::Item::Const(constant) = item else { continue };
        let value = match &*constant.expr {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(int), .. }) => int.base10_parse::<i64>().expect("an integer code"),
            other => panic!("error_code::{}: not an integer literal: {}", constant.ident, quote::quote!(#other)),
        };
        codes.push(ErrorCode { name: constant.ident.to_string(), value, doc: doc_of(&constant.attrs) });
    }
    codes
}

/// The JSON Schema of a Rust type as written in the trait; the bool says
/// whether it is optional (`Option<T>`).
fn type_schema(ty: &syn::Type, definitions: &Map<String, Value>) -> (Value, bool) {
    let syn::Type::Path(path) = ty else { panic!("unsupported type in the trait: {}", quote::quote!(#ty)) };
    let segment = path.path.segments.last().expect("a type name");
    let inner = || match &segment.arguments {
        syn::PathArguments::AngleBracketed(arguments) => match arguments.args.first() {
            Some(syn::GenericArgument::Type(inner)) => inner.clone(),
            _ => panic!("{}: expected one type argument", segment.ident),
        },
        _ => panic!("{}: expected one type argument", segment.ident),
    };
    let name = segment.ident.to_string();
    match name.as_str() {
        "Option" => (type_schema(&inner(), definitions).0, false),
        "Vec" => (json!({"type": "array", "items": type_schema(&inner(), definitions).0}), true),
        "String" => (json!({"type": "string"}), true),
        "bool" => (json!({"type": "boolean"}), true),
        "u32" | "u64" | "usize" => (json!({"type": "integer", "minimum": 0}), true),
        "i32" | "i64" => (json!({"type": "integer"}), true),
        "RpcResult" => type_schema(&inner(), definitions),
        other => {
            assert!(definitions.contains_key(other), "{other} is used by the trait but missing from schema::definitions()");
            (json!({"$ref": format!("#/$defs/{other}")}), true)
        }
    }
}

/// `name = "x"` and `a = "x"`-style values of the `#[method(...)]` or
/// `#[subscription(...)]` attribute, as text.
fn attribute_text(attribute: &syn::Attribute) -> String {
    match &attribute.meta {
        syn::Meta::List(list) => list.tokens.to_string(),
        _ => String::new(),
    }
}

fn quoted_after(text: &str, key: &str) -> Option<String> {
    let start = text.find(key)? + key.len();
    let rest = &text[start..];
    let open = rest.find('"')?;
    let close = rest[open + 1..].find('"')?;
    Some(rest[open + 1..open + 1 + close].to_owned())
}

fn read_methods(definitions: &Map<String, Value>) -> Vec<Method> {
    let source = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api.rs")).expect("read api.rs");
    let file = syn::parse_file(&source).expect("parse api.rs");
    let api = file
        .items
        .iter()
        .find_map(|item| match item {
            syn::Item::Trait(api) if api.ident == "LazaretApi" => Some(api),
            _ => None,
        })
        .expect("trait LazaretApi in api.rs");
    let mut methods = Vec::new();
    for item in &api.items {
        let syn::TraitItem::Fn(function) = item else { continue };
        let rust_name = function.sig.ident.to_string();
        let attribute = function
            .attrs
            .iter()
            .find(|attribute| attribute.path().is_ident("method") || attribute.path().is_ident("subscription"))
            .unwrap_or_else(|| panic!("{rust_name} has neither #[method] nor #[subscription]"));
        let text = attribute_text(attribute);
        let name = quoted_after(&text, "name").unwrap_or_else(|| panic!("{rust_name}: no name"));
        let is_subscription = attribute.path().is_ident("subscription");
        if !is_subscription {
            assert!(text.contains("param_kind = map"), "{name}: clients must send parameters by name (param_kind = map)");
        }
        let mut params = Vec::new();
        for input in &function.sig.inputs {
            let syn::FnArg::Typed(typed) = input else { continue };
            let syn::Pat::Ident(ident) = &*typed.pat else { panic!("{name}: unsupported parameter pattern") };
            let rename = typed
                .attrs
                .iter()
                .find(|attribute| attribute.path().is_ident("argument"))
                .and_then(|attribute| quoted_after(&attribute_text(attribute), "rename"));
            let rust = ident.ident.to_string();
            let wire = rename.unwrap_or_else(|| rust.clone());
            assert!(!wire.contains('_'), "{name}: parameter {rust} needs #[argument(rename = \"camelCase\")]");
            let (schema, required) = type_schema(&typed.ty, definitions);
            params.push(Param { name: wire, schema, required });
        }
        let (result, subscription) = if is_subscription {
            let item =
                text.split("item =").nth(1).map(|rest| rest.trim().trim_end_matches(',').trim().to_owned()).expect("subscription item");
            let item_type: syn::Type = syn::parse_str(&item).expect("item type");
            let notification = text.split("=>").nth(1).and_then(|rest| quoted_after(rest, "")).expect("notification name");
            let unsubscribe = quoted_after(&text, "unsubscribe").expect("unsubscribe name");
            (type_schema(&item_type, definitions).0, Some(Subscription { notification, unsubscribe }))
        } else {
            let syn::ReturnType::Type(_, output) = &function.sig.output else { panic!("{name}: no result type") };
            (type_schema(output, definitions).0, None)
        };
        methods.push(Method { rust_name, name, doc: doc_of(&function.attrs), params, result, subscription });
    }
    methods
}

fn params_schema(method: &Method) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for param in &method.params {
        properties.insert(param.name.clone(), param.schema.clone());
        if param.required {
            required.push(Value::from(param.name.clone()));
        }
    }
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

fn schema_document(methods: &[Method], definitions: &Map<String, Value>) -> Value {
    let mut method_table = Map::new();
    let mut subscriptions = Map::new();
    for method in methods {
        match &method.subscription {
            None => {
                method_table.insert(
                    method.name.clone(),
                    json!({"description": method.doc, "params": params_schema(method), "result": method.result}),
                );
            }
            Some(subscription) => {
                subscriptions.insert(
                    method.name.clone(),
                    json!({
                        "description": method.doc,
                        "notification": subscription.notification,
                        "unsubscribe": subscription.unsubscribe,
                        "item": method.result,
                    }),
                );
            }
        }
    }
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Lazaret control protocol",
        "description": "Generated from crates/lazaret-protocol by its tests/generated.rs; do not edit. JSON-RPC 2.0 over the control socket, LSP framing; see docs/rpc.md.",
        "apiVersion": API_VERSION,
        "methods": method_table,
        "subscriptions": subscriptions,
        "$defs": definitions,
    })
}

fn pascal(text: &str) -> String {
    let mut out = String::new();
    let mut upper = true;
    for character in text.chars() {
        if character == '/' || character == '_' || character == '-' {
            upper = true;
        } else if upper {
            out.extend(character.to_uppercase());
            upper = false;
        } else {
            out.push(character);
        }
    }
    out
}

fn camel(text: &str) -> String {
    let pascal = pascal(text);
    let mut characters = pascal.chars();
    characters.next().map(|first| first.to_lowercase().chain(characters).collect()).unwrap_or_default()
}

/// The structs that flatten a tagged enum into their own fields, the name of
/// that enum (schemars inlines it, so the schema does not say), and the
/// comment above its union.
const FLATTENED: [(&str, &str, &str); 2] =
    [("SequencedEvent", "Event", "Every event kind."), ("AuditRecord", "AuditEvent", "Every kind of audit record.")];

/// A tagged union (`#[serde(tag = ...)]`): its variants, each named by its
/// tag's value. A union `name` has variants `<name><Value>`; an enum
/// flattened into a struct (events, `kind`, into `SequencedEvent`; audit
/// events, `type`, into `AuditRecord`) is named as in Rust (`Event`,
/// `AuditEvent`) and has variants `<Value><Enum>` (`SessionEndedEvent`,
/// `DnsRefusedAuditEvent`).
struct Tagged<'a> {
    union: String,
    doc: &'static str,
    variants: Vec<(String, &'a Value)>,
}

fn tagged<'a>(name: &str, schema: &'a Value) -> Option<Tagged<'a>> {
    let variants = schema["oneOf"].as_array()?;
    let tag = ["kind", "type"].into_iter().find(|tag| variants.iter().all(|variant| variant["properties"][tag]["const"].is_string()))?;
    let flattened = schema["properties"].as_object().is_some_and(|properties| !properties.is_empty());
    let (union, doc) = if flattened {
        let (_, union, doc) = FLATTENED
            .iter()
            .find(|(outer, _, _)| *outer == name)
            .unwrap_or_else(|| panic!("{name} flattens a tagged enum: name it in FLATTENED"));
        ((*union).to_owned(), *doc)
    } else {
        (name.to_owned(), "")
    };
    let variants = variants
        .iter()
        .map(|variant| {
            let value = pascal(variant["properties"][tag]["const"].as_str().unwrap_or_default());
            let variant_name = if flattened { format!("{value}{union}") } else { format!("{name}{value}") };
            (variant_name, variant)
        })
        .collect();
    Some(Tagged { union, doc, variants })
}

/// The type a variant extends (`$ref`: a newtype variant's struct).
fn extended(variant: &Value) -> Option<&str> {
    variant["$ref"].as_str().map(|reference| reference.trim_start_matches("#/$defs/"))
}

/// Generates both targets from the same walk over the schema.
trait Emitter {
    fn reference(&self, name: &str) -> String;
    fn null(&self) -> &'static str;
    fn string(&self) -> &'static str;
    fn integer(&self) -> &'static str;
    fn boolean(&self) -> &'static str;
    fn array(&self, item: &str) -> String;
    fn literal(&self, value: &str) -> String {
        format!("\"{value}\"")
    }

    fn types(&self, schema: &Value) -> Vec<String> {
        if let Some(reference) = schema["$ref"].as_str() {
            return vec![self.reference(reference.trim_start_matches("#/$defs/"))];
        }
        if let Some(constant) = schema["const"].as_str() {
            return vec![self.literal(constant)];
        }
        if let Some(values) = schema["enum"].as_array() {
            return values.iter().map(|value| self.literal(value.as_str().expect("string enum"))).collect();
        }
        if let Some(variants) = schema["oneOf"].as_array().or(schema["anyOf"].as_array()) {
            return variants.iter().flat_map(|variant| self.types(variant)).collect();
        }
        let kinds: Vec<&str> = match &schema["type"] {
            Value::String(kind) => vec![kind.as_str()],
            Value::Array(kinds) => kinds.iter().filter_map(Value::as_str).collect(),
            other => panic!("unsupported schema (no type): {other} in {schema}"),
        };
        kinds
            .into_iter()
            .map(|kind| match kind {
                "null" => self.null().to_owned(),
                "string" => self.string().to_owned(),
                "integer" | "number" => self.integer().to_owned(),
                "boolean" => self.boolean().to_owned(),
                "array" => {
                    let items = self.types(&schema["items"]);
                    self.array(&if items.len() == 1 { items[0].clone() } else { format!("({})", items.join(" | ")) })
                }
                other => panic!("unsupported schema type {other} in {schema}"),
            })
            .collect()
    }

    fn union(&self, schema: &Value) -> String {
        self.types(schema).join(" | ")
    }
}

struct TypeScript;

impl Emitter for TypeScript {
    fn reference(&self, name: &str) -> String {
        name.to_owned()
    }
    fn null(&self) -> &'static str {
        "null"
    }
    fn string(&self) -> &'static str {
        "string"
    }
    fn integer(&self) -> &'static str {
        "number"
    }
    fn boolean(&self) -> &'static str {
        "boolean"
    }
    fn array(&self, item: &str) -> String {
        format!("{item}[]")
    }
}

fn ts_comment(out: &mut String, indent: &str, text: Option<&str>) {
    if let Some(text) = text.filter(|text| !text.is_empty()) {
        out.push_str(&format!("{indent}/** {} */\n", text.replace("*/", "* /").replace('\n', " ")));
    }
}

fn ts_fields(out: &mut String, schema: &Value) {
    let required: BTreeSet<&str> =
        schema["required"].as_array().map(|names| names.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    if let Some(properties) = schema["properties"].as_object() {
        for (name, property) in properties {
            ts_comment(out, "  ", property["description"].as_str());
            let optional = if required.contains(name.as_str()) { "" } else { "?" };
            out.push_str(&format!("  {name}{optional}: {};\n", TypeScript.union(property)));
        }
    }
}

fn typescript(methods: &[Method], definitions: &Map<String, Value>, codes: &[ErrorCode]) -> String {
    let mut out = String::from(
        "// Generated from crates/lazaret-protocol by its tests/generated.rs; do not edit.\n\
         // Regenerate: LAZARET_UPDATE_GENERATED=1 cargo test -p lazaret-protocol --test generated\n\
         /* eslint-disable */\n\n",
    );
    out.push_str(&format!(
        "/** The API version these types describe (`domain/status`.apiVersion). */\nexport const API_VERSION = {API_VERSION};\n\n"
    ));
    out.push_str("/** The coordinator's application error codes (`error.code`; docs/rpc.md). */\nexport const ERROR_CODE = {\n");
    for code in codes {
        ts_comment(&mut out, "  ", Some(&code.doc));
        out.push_str(&format!("  {}: {},\n", code.name, code.value));
    }
    out.push_str("} as const;\n\n");
    for (name, schema) in definitions {
        ts_comment(&mut out, "", schema["description"].as_str());
        if let Some(Tagged { union, doc, variants }) = tagged(name, schema) {
            // A tagged enum (flattened into `name`, for events and audit
            // records): one interface per variant.
            if union != *name {
                out.push_str(&format!("export type {name} = {{\n"));
                ts_fields(&mut out, schema);
                out.push_str(&format!("}} & {union};\n\n"));
                ts_comment(&mut out, "", Some(doc));
            }
            let names: Vec<&str> = variants.iter().map(|(variant_name, _)| variant_name.as_str()).collect();
            out.push_str(&format!("export type {union} =\n  | {};\n\n", names.join("\n  | ")));
            for (variant_name, variant) in &variants {
                ts_comment(&mut out, "", variant["description"].as_str());
                match extended(variant) {
                    Some(base) => out.push_str(&format!("export interface {variant_name} extends {base} {{\n")),
                    None => out.push_str(&format!("export interface {variant_name} {{\n")),
                }
                ts_fields(&mut out, variant);
                out.push_str("}\n\n");
            }
        } else if schema["type"] == "object" {
            out.push_str(&format!("export interface {name} {{\n"));
            ts_fields(&mut out, schema);
            out.push_str("}\n\n");
        } else {
            out.push_str(&format!("export type {name} = {};\n\n", TypeScript.union(schema)));
        }
    }
    for method in methods.iter().filter(|method| method.subscription.is_none()) {
        ts_comment(&mut out, "", Some(&format!("Parameters of `{}`.", method.name)));
        out.push_str(&format!("export interface {}Params {{\n", pascal(&method.name)));
        ts_fields(&mut out, &params_schema(method));
        out.push_str("}\n\n");
    }
    out.push_str("/** Every method: its parameters (sent by name) and its result. */\nexport interface Methods {\n");
    for method in methods.iter().filter(|method| method.subscription.is_none()) {
        ts_comment(&mut out, "  ", Some(&method.doc));
        out.push_str(&format!(
            "  \"{}\": {{ params: {}Params; result: {} }};\n",
            method.name,
            pascal(&method.name),
            TypeScript.union(&method.result)
        ));
    }
    out.push_str("}\n\n/** Method names by their camelCase Rust name. */\nexport const METHODS = {\n");
    for method in methods.iter().filter(|method| method.subscription.is_none()) {
        out.push_str(&format!("  {}: \"{}\",\n", camel(&method.rust_name), method.name));
    }
    out.push_str("} as const;\n\n");
    for method in methods {
        if let Some(subscription) = &method.subscription {
            out.push_str(&format!(
                "/** {} */\nexport const SUBSCRIPTION = {{\n  subscribe: \"{}\",\n  notification: \"{}\",\n  unsubscribe: \"{}\",\n}} as const;\n\n",
                method.doc, method.name, subscription.notification, subscription.unsubscribe
            ));
            out.push_str(&format!(
                "/** The params of a `{}` notification. */\nexport interface EventNotification {{\n  subscription: string;\n  result: {};\n}}\n",
                subscription.notification,
                TypeScript.union(&method.result)
            ));
        }
    }
    out
}

struct Lua;

impl Emitter for Lua {
    fn reference(&self, name: &str) -> String {
        format!("lazaret.{name}")
    }
    fn null(&self) -> &'static str {
        "nil"
    }
    fn string(&self) -> &'static str {
        "string"
    }
    fn integer(&self) -> &'static str {
        "integer"
    }
    fn boolean(&self) -> &'static str {
        "boolean"
    }
    fn array(&self, item: &str) -> String {
        format!("{item}[]")
    }
    fn literal(&self, value: &str) -> String {
        format!("'{value}'")
    }
}

fn lua_fields(out: &mut String, schema: &Value) {
    let required: BTreeSet<&str> =
        schema["required"].as_array().map(|names| names.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    if let Some(properties) = schema["properties"].as_object() {
        for (name, property) in properties {
            let types: Vec<String> = Lua.types(property).into_iter().filter(|kind| kind != "nil").collect();
            let optional = if required.contains(name.as_str()) && !Lua.types(property).contains(&"nil".to_owned()) { "" } else { "?" };
            let description = property["description"].as_str().map(|text| format!(" {}", text.replace('\n', " "))).unwrap_or_default();
            out.push_str(&format!("---@field {name}{optional} {}{description}\n", types.join("|")));
        }
    }
}

fn lua(methods: &[Method], definitions: &Map<String, Value>, codes: &[ErrorCode]) -> String {
    let mut out = String::from(
        "--- Generated from crates/lazaret-protocol by its tests/generated.rs; do not edit.\n\
         --- Regenerate: LAZARET_UPDATE_GENERATED=1 cargo test -p lazaret-protocol --test generated\n\
         --- The control protocol's method names and API version, and LuaLS annotations of its wire types.\n\n",
    );
    for (name, schema) in definitions {
        if let Some(Tagged { union, variants, .. }) = tagged(name, schema) {
            out.push_str(&format!(
                "---@alias lazaret.{union} {}\n\n",
                variants.iter().map(|(variant_name, _)| format!("lazaret.{variant_name}")).collect::<Vec<_>>().join("|")
            ));
            for (variant_name, variant) in &variants {
                match extended(variant) {
                    Some(base) => out.push_str(&format!("---@class lazaret.{variant_name} : lazaret.{base}\n")),
                    None => out.push_str(&format!("---@class lazaret.{variant_name}\n")),
                }
                if union != *name {
                    lua_fields(&mut out, schema);
                }
                lua_fields(&mut out, variant);
                out.push('\n');
            }
            if union != *name {
                out.push_str(&format!("---@alias lazaret.{name} lazaret.{union}\n\n"));
            }
        } else if schema["type"] == "object" {
            out.push_str(&format!("---@class lazaret.{name}\n"));
            lua_fields(&mut out, schema);
            out.push('\n');
        } else {
            out.push_str(&format!("---@alias lazaret.{name} {}\n\n", Lua.union(schema)));
        }
    }
    out.push_str(&format!("local M = {{}}\n\n--- The API version these declarations describe.\nM.API_VERSION = {API_VERSION}\n\n--- Method names by their Rust name.\nM.methods = {{\n"));
    for method in methods.iter().filter(|method| method.subscription.is_none()) {
        out.push_str(&format!("  {} = '{}',\n", method.rust_name, method.name));
    }
    out.push_str("}\n\n--- The coordinator's application error codes (`err.code`; docs/rpc.md).\nM.error_code = {\n");
    for code in codes {
        out.push_str(&format!("  --- {}\n  {} = {},\n", code.doc, code.name, code.value));
    }
    out.push_str("}\n\n");
    for method in methods {
        if let Some(subscription) = &method.subscription {
            out.push_str(&format!(
                "--- The event subscription.\nM.subscription = {{\n  subscribe = '{}',\n  notification = '{}',\n  unsubscribe = '{}',\n}}\n\n",
                method.name, subscription.notification, subscription.unsubscribe
            ));
        }
    }
    out.push_str("return M\n");
    out
}

/// Compares `path` with `expected`, or writes it under
/// `LAZARET_UPDATE_GENERATED=1`.
fn check_generated(path: &str, expected: &str) -> Option<String> {
    let file = repository_root().join(path);
    if std::env::var_os("LAZARET_UPDATE_GENERATED").is_some() {
        std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
        std::fs::write(&file, expected).expect("write generated file");
        return None;
    }
    let actual = std::fs::read_to_string(&file).unwrap_or_default();
    (actual != expected).then(|| format!("{path} is stale"))
}

#[test]
fn generated_declarations_are_fresh() {
    let definitions = schema::definitions();
    let methods = read_methods(&definitions);
    assert!(methods.len() >= 17, "read only {} methods from api.rs", methods.len());
    let codes = read_error_codes();
    assert!(codes.len() >= 9, "read only {} error codes from lib.rs", codes.len());
    let document = serde_json::to_string_pretty(&schema_document(&methods, &definitions)).expect("json") + "\n";
    let stale: Vec<String> = [
        check_generated("docs/protocol.schema.json", &document),
        check_generated("vscode-extension/src/protocol.ts", &typescript(&methods, &definitions, &codes)),
        check_generated("editors/nvim/lua/lazaret/protocol.lua", &lua(&methods, &definitions, &codes)),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert!(
        stale.is_empty(),
        "{}: regenerate with LAZARET_UPDATE_GENERATED=1 cargo test -p lazaret-protocol --test generated, and commit the result",
        stale.join(", ")
    );
}

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
}

/// The acceptance rule of the protocol: no crate but this one writes a
/// method name, nor a camelCase field name of the control protocol or the
/// Network Sidecar's, as a string literal.
#[test]
fn no_other_crate_spells_the_wire_by_hand() {
    let definitions = schema::definitions();
    let methods = read_methods(&definitions);
    let mut names: BTreeSet<String> = BTreeSet::new();
    for method in &methods {
        names.insert(method.name.clone());
        if let Some(subscription) = &method.subscription {
            names.insert(subscription.notification.clone());
            names.insert(subscription.unsubscribe.clone());
        }
    }
    let mut fields: BTreeSet<String> = BTreeSet::new();
    let mut collect = |schema: &Value| {
        let mut stack = vec![schema.clone()];
        while let Some(value) = stack.pop() {
            if let Some(properties) = value["properties"].as_object() {
                fields.extend(properties.keys().filter(|key| key.chars().any(char::is_uppercase)).cloned());
            }
            match value {
                Value::Object(map) => stack.extend(map.into_values()),
                Value::Array(items) => stack.extend(items),
                _ => {}
            }
        }
    };
    for schema in definitions.values() {
        collect(schema);
    }
    for method in &methods {
        collect(&params_schema(method));
    }
    let mut files = Vec::new();
    let crates = repository_root().join("crates");
    // The end-to-end suites' support speaks the wire by hand on purpose, as
    // the suites in tests/ do: it checks what a client outside Rust sees.
    for entry in std::fs::read_dir(&crates).expect("crates").flatten() {
        if entry.file_name() != "lazaret-protocol" && entry.file_name() != "lazaret-test-support" {
            rust_files(&entry.path(), &mut files);
        }
    }
    assert!(files.len() > 20, "found only {} source files under {}", files.len(), crates.display());
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read");
        for name in names.iter().chain(fields.iter()) {
            if text.contains(&format!("\"{name}\"")) {
                found.push(format!("{}: \"{name}\"", file.strip_prefix(&crates).unwrap_or(file).display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "wire names written by hand outside lazaret-protocol (use the typed client and types):\n{}",
        found.join("\n")
    );
}
