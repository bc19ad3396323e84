//! The control protocol: one JSON object per line in, one JSON object per line out.
//!
//! Requests (exactly one key):
//! - `{"allow": "10.89.0.5/32"}` or `{"allow": ["10.89.0.5", "fd00::/64"]}`
//! - `{"deny": "10.89.0.5/32"}` (same shapes)
//! - `{"set": {"allow": [...], "deny": [...]}}`: replace the whole policy (reload)
//! - `{"show": true}`
//!
//! Every success answers with the policy now in force, as read back from the kernel:
//! `{"ok":true,"allow":[...],"deny":[...],"rules":N}`; a failure with
//! `{"ok":false,"error":"..."}` and leaves the policy as it was.

use serde_json::{json, Map, Value};

use crate::policy::{Cidr, Policy, Verdict};

/// Longest request line accepted, newline included.
pub const MAX_LINE: usize = 64 * 1024;
/// Most CIDRs in one request.
pub const MAX_ITEMS: usize = 4096;

#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Allow(Vec<Cidr>),
    Deny(Vec<Cidr>),
    Set(Policy),
    Show,
}

pub fn parse_command(line: &str) -> Result<Command, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(obj) = value else {
        return Err("a request is a JSON object".into());
    };
    if obj.len() != 1 {
        return Err("a request has exactly one of \"allow\", \"deny\", \"set\", \"show\"".into());
    }
    let Some((key, val)) = obj.into_iter().next() else {
        return Err("empty request".into());
    };
    match key.as_str() {
        "allow" => Ok(Command::Allow(cidrs(&val)?)),
        "deny" => Ok(Command::Deny(cidrs(&val)?)),
        "show" => match val {
            Value::Bool(true) => Ok(Command::Show),
            _ => Err("\"show\" takes true".into()),
        },
        "set" => {
            let Value::Object(set) = val else {
                return Err("\"set\" takes {\"allow\": [...], \"deny\": [...]}".into());
            };
            let mut policy = Policy::new();
            let mut denies = Vec::new();
            for (k, v) in set {
                match k.as_str() {
                    "allow" => cidrs(&v)?.into_iter().for_each(|c| policy.allow(c)),
                    "deny" => denies = cidrs(&v)?,
                    other => return Err(format!("unknown key in \"set\": {other:?}")),
                }
            }
            // Denies after allows, whatever the key order: a deny carves into an allow.
            denies.into_iter().for_each(|c| policy.deny(c));
            Ok(Command::Set(policy))
        }
        other => Err(format!("unknown request {other:?}")),
    }
}

fn cidrs(val: &Value) -> Result<Vec<Cidr>, String> {
    let items: Vec<&Value> = match val {
        Value::String(_) => vec![val],
        Value::Array(a) if a.len() <= MAX_ITEMS => a.iter().collect(),
        Value::Array(_) => return Err(format!("more than {MAX_ITEMS} entries")),
        _ => return Err("expected a CIDR string or an array of them".into()),
    };
    items
        .into_iter()
        .map(|v| match v {
            Value::String(s) => Cidr::parse(s).map_err(|e| {
                if looks_like_domain(s) {
                    format!("{e} (domain names need the sidecar's DNS resolver, which this build does not have)")
                } else {
                    e
                }
            }),
            _ => Err("expected a CIDR string".into()),
        })
        .collect()
}

fn looks_like_domain(s: &str) -> bool {
    s.contains('.')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '*')
        && s.chars().any(|c| c.is_ascii_alphabetic())
}

/// The answer to a successful request.
pub fn ok_response(policy: &Policy, rules: usize) -> String {
    let list = |v| Value::Array(policy.listed(v).iter().map(|c| Value::String(c.to_string())).collect());
    let mut obj = Map::new();
    obj.insert("ok".into(), Value::Bool(true));
    obj.insert("allow".into(), list(Verdict::Allow));
    obj.insert("deny".into(), list(Verdict::Deny));
    obj.insert("rules".into(), json!(rules));
    Value::Object(obj).to_string()
}

pub fn error_response(message: &str) -> String {
    json!({"ok": false, "error": message}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Cidr {
        Cidr::parse(s).unwrap()
    }

    #[test]
    fn parses_requests() {
        assert_eq!(parse_command(r#"{"allow":"10.89.0.5/32"}"#), Ok(Command::Allow(vec![c("10.89.0.5")])));
        assert_eq!(parse_command(r#"{"deny":["10.89.0.5","fd00::/64"]}"#), Ok(Command::Deny(vec![c("10.89.0.5"), c("fd00::/64")])));
        assert_eq!(parse_command(r#" {"show":true} "#), Ok(Command::Show));
        let Ok(Command::Set(p)) = parse_command(r#"{"set":{"deny":["10.1.0.0/16"],"allow":["10.0.0.0/8"]}}"#) else {
            panic!("set did not parse");
        };
        assert_eq!(p.listed(Verdict::Allow), vec![c("10.0.0.0/8")]);
        assert_eq!(p.listed(Verdict::Deny), vec![c("10.1.0.0/16")]);
        assert_eq!(parse_command(r#"{"set":{}}"#), Ok(Command::Set(Policy::new())));
    }

    #[test]
    fn refuses_bad_requests() {
        for bad in [
            "",
            "[]",
            "{}",
            r#"{"show":false}"#,
            r#"{"allow":"10.0.0.1","deny":"10.0.0.2"}"#,
            r#"{"allow":5}"#,
            r#"{"allow":[5]}"#,
            r#"{"allow":"10.0.0.1/40"}"#,
            r#"{"flush":true}"#,
            r#"{"set":{"allow":[],"other":[]}}"#,
            r#"{"set":[]}"#,
        ] {
            assert!(parse_command(bad).is_err(), "{bad:?} parsed");
        }
        let err = parse_command(r#"{"allow":"github.com"}"#).unwrap_err();
        assert!(err.contains("DNS"), "{err}");
    }

    #[test]
    fn responses_are_single_line_json() {
        let mut p = Policy::new();
        p.allow(c("10.0.0.0/8"));
        p.deny(c("10.1.0.0/16"));
        let r = ok_response(&p, 4);
        assert!(!r.contains('\n'));
        let v: Value = serde_json::from_str(&r).unwrap();
        assert_eq!(v["ok"], true);
        assert_eq!(v["allow"][0], "10.0.0.0/8");
        assert_eq!(v["deny"][0], "10.1.0.0/16");
        assert_eq!(v["rules"], 4);
        let e: Value = serde_json::from_str(&error_response("bad \"x\"\n")).unwrap();
        assert_eq!(e["ok"], false);
    }
}
