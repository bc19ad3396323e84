//! The control protocol: one JSON object per line in, one JSON object per line out.
//!
//! Requests (exactly one key); an entry is a CIDR, an address or a DNS name pattern:
//! - `{"allow": "10.89.0.5/32"}` or `{"allow": ["10.89.0.5", "fd00::/64", "*.npmjs.org"]}`
//! - `{"deny": "10.89.0.5/32"}` (same shapes)
//! - `{"set": {"allow": [...], "deny": [...], "private": "allow"|"refuse"}}`: replace
//!   the whole policy (reload); `private` is whether a name's answer may open internal
//!   addresses no CIDR allow covers (default `refuse`, see `addresses.rs`)
//! - `{"protect": {"addresses": [...], "networks": [...]}}`: what stays out of reach
//!   under wide allows (addresses, or CIDRs such as rootless podman's user-mode
//!   network) and the prefixes of the host's interfaces, now (the coordinator
//!   refreshes them)
//! - `{"show": true}`
//! - `{"watch": true}`: answers `{"ok":true,"watching":true}`, then streams events, one
//!   JSON object per line, until the client goes: `{"event":"dnsRefused",...}`,
//!   `{"event":"dnsAnswerRefused",...}` and `{"event":"dnsResolved",...}` (see
//!   `events.rs`, `dns.rs`).
//!
//! Every other success answers with the policy now in force (see `Enforcer::snapshot`):
//! `{"ok":true,"allow":[...],"deny":[...],"learned":[...],"upstreams":[...],"rules":N,"privateAnswers":"refuse"}`;
//! a failure with `{"ok":false,"error":"..."}` and leaves the policy as it was.

use lazaret_dns::{NamePattern, NamePolicy};
use serde_json::{json, Value};

use crate::enforcer::PrivateAnswers;
use crate::policy::{Cidr, Policy};

/// Longest request line accepted, newline included.
pub const MAX_LINE: usize = 64 * 1024;
/// Most CIDRs in one request.
pub const MAX_ITEMS: usize = 4096;

/// One allowlist entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Cidr(Cidr),
    Name(NamePattern),
}

impl Entry {
    /// A CIDR or address, else a DNS name pattern; the error names the entry.
    pub fn parse(text: &str) -> Result<Entry, String> {
        let looks_like_address = text.contains(':') || text.contains('/') || text.trim().bytes().all(|b| b.is_ascii_digit() || b == b'.');
        if looks_like_address {
            Cidr::parse(text).map(Entry::Cidr)
        } else {
            NamePattern::parse(text).map(Entry::Name)
        }
    }
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Entry::Cidr(c) => c.fmt(f),
            Entry::Name(n) => n.fmt(f),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Allow(Vec<Entry>),
    Deny(Vec<Entry>),
    Set(Policy, NamePolicy, PrivateAnswers),
    /// What stays out of reach (addresses and networks), and the host's networks.
    Protect(Vec<Cidr>, Vec<Cidr>),
    Show,
    Watch,
}

pub fn parse_command(line: &str) -> Result<Command, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(obj) = value else {
        return Err("a request is a JSON object".into());
    };
    if obj.len() != 1 {
        return Err("a request has exactly one of \"allow\", \"deny\", \"set\", \"protect\", \"show\", \"watch\"".into());
    }
    let Some((key, val)) = obj.into_iter().next() else {
        return Err("empty request".into());
    };
    match key.as_str() {
        "allow" => Ok(Command::Allow(entries(&val)?)),
        "deny" => Ok(Command::Deny(entries(&val)?)),
        "show" => match val {
            Value::Bool(true) => Ok(Command::Show),
            _ => Err("\"show\" takes true".into()),
        },
        "watch" => match val {
            Value::Bool(true) => Ok(Command::Watch),
            _ => Err("\"watch\" takes true".into()),
        },
        "set" => {
            let Value::Object(set) = val else {
                return Err("\"set\" takes {\"allow\": [...], \"deny\": [...], \"private\": \"refuse\"|\"allow\"}".into());
            };
            let (mut allows, mut denies, mut private) = (Vec::new(), Vec::new(), PrivateAnswers::default());
            for (k, v) in set {
                match k.as_str() {
                    "allow" => allows = entries(&v)?,
                    "deny" => denies = entries(&v)?,
                    "private" => private = PrivateAnswers::parse(v.as_str().ok_or("\"private\" takes \"refuse\" or \"allow\"")?)?,
                    other => return Err(format!("unknown key in \"set\": {other:?}")),
                }
            }
            // Denies after allows, whatever the key order: a deny carves into an allow.
            let (mut policy, mut names) = (Policy::new(), NamePolicy::new());
            for entry in allows {
                match entry {
                    Entry::Cidr(c) => policy.allow(c),
                    Entry::Name(n) => names.allow(n),
                }
            }
            for entry in denies {
                match entry {
                    Entry::Cidr(c) => policy.deny(c),
                    Entry::Name(n) => names.deny(n),
                }
            }
            Ok(Command::Set(policy, names, private))
        }
        "protect" => {
            let Value::Object(protect) = val else {
                return Err("\"protect\" takes {\"addresses\": [...], \"networks\": [...]}".into());
            };
            let (mut addresses, mut networks) = (Vec::new(), Vec::new());
            for (k, v) in protect {
                let items = strings(&v, &k)?;
                match k.as_str() {
                    "addresses" => addresses = items.iter().map(|a| Cidr::parse(a)).collect::<Result<_, _>>()?,
                    "networks" => networks = items.iter().map(|n| Cidr::parse(n)).collect::<Result<_, _>>()?,
                    other => return Err(format!("unknown key in \"protect\": {other:?}")),
                }
            }
            Ok(Command::Protect(addresses, networks))
        }
        other => Err(format!("unknown request {other:?}")),
    }
}

fn entries(val: &Value) -> Result<Vec<Entry>, String> {
    let items: Vec<&Value> = match val {
        Value::String(_) => vec![val],
        Value::Array(a) if a.len() <= MAX_ITEMS => a.iter().collect(),
        Value::Array(_) => return Err(format!("more than {MAX_ITEMS} entries")),
        _ => return Err("expected an entry (CIDR or DNS name) or an array of them".into()),
    };
    items
        .into_iter()
        .map(|v| match v {
            Value::String(s) => Entry::parse(s),
            _ => Err("expected an entry (CIDR or DNS name) as a string".into()),
        })
        .collect()
}

/// An array of at most [`MAX_ITEMS`] strings (`key` names it in errors).
fn strings<'a>(val: &'a Value, key: &str) -> Result<Vec<&'a str>, String> {
    match val {
        Value::Array(a) if a.len() <= MAX_ITEMS => {
            a.iter().map(|v| v.as_str().ok_or_else(|| format!("{key:?} takes an array of strings"))).collect()
        }
        Value::Array(_) => Err(format!("more than {MAX_ITEMS} entries in {key:?}")),
        _ => Err(format!("{key:?} takes an array of strings")),
    }
}

pub fn error_response(message: &str) -> String {
    json!({"ok": false, "error": message}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Verdict;

    fn c(s: &str) -> Entry {
        Entry::parse(s).unwrap()
    }

    #[test]
    fn parses_requests() {
        assert_eq!(parse_command(r#"{"allow":"10.89.0.5/32"}"#), Ok(Command::Allow(vec![c("10.89.0.5")])));
        assert_eq!(
            parse_command(r#"{"deny":["10.89.0.5","fd00::/64","*.npmjs.org"]}"#),
            Ok(Command::Deny(vec![c("10.89.0.5"), c("fd00::/64"), c("*.npmjs.org")]))
        );
        assert!(matches!(c("GitHub.com"), Entry::Name(_)));
        assert_eq!(c("GitHub.com").to_string(), "github.com");
        assert_eq!(parse_command(r#" {"show":true} "#), Ok(Command::Show));
        assert_eq!(parse_command(r#"{"watch":true}"#), Ok(Command::Watch));
        let Ok(Command::Set(p, names, _)) =
            parse_command(r#"{"set":{"deny":["10.1.0.0/16","x.allowed.test"],"allow":["10.0.0.0/8","*.allowed.test"]}}"#)
        else {
            panic!("set did not parse");
        };
        assert_eq!(p.listed(Verdict::Allow), vec![Cidr::parse("10.0.0.0/8").unwrap()]);
        assert_eq!(p.listed(Verdict::Deny), vec![Cidr::parse("10.1.0.0/16").unwrap()]);
        assert_eq!(names.allowed().map(|n| n.to_string()).collect::<Vec<_>>(), ["*.allowed.test"]);
        assert_eq!(names.denied().map(|n| n.to_string()).collect::<Vec<_>>(), ["x.allowed.test"]);
        assert_eq!(parse_command(r#"{"set":{}}"#), Ok(Command::Set(Policy::new(), NamePolicy::new(), PrivateAnswers::Refuse)));
        assert_eq!(
            parse_command(r#"{"set":{"private":"allow"}}"#),
            Ok(Command::Set(Policy::new(), NamePolicy::new(), PrivateAnswers::Allow))
        );
        assert_eq!(
            parse_command(
                r#"{"protect":{"addresses":["10.88.0.1","fe80::1","10.0.2.9/24"],"networks":["10.88.0.7/16","2001:db8:1::/48"]}}"#
            ),
            Ok(Command::Protect(
                vec![Cidr::parse("10.88.0.1").unwrap(), Cidr::parse("fe80::1").unwrap(), Cidr::parse("10.0.2.0/24").unwrap()],
                vec![Cidr::parse("10.88.0.0/16").unwrap(), Cidr::parse("2001:db8:1::/48").unwrap()]
            ))
        );
        assert_eq!(parse_command(r#"{"protect":{}}"#), Ok(Command::Protect(vec![], vec![])));
    }

    #[test]
    fn refuses_bad_requests() {
        for bad in [
            "",
            "[]",
            "{}",
            r#"{"show":false}"#,
            r#"{"watch":1}"#,
            r#"{"allow":"10.0.0.1","deny":"10.0.0.2"}"#,
            r#"{"allow":5}"#,
            r#"{"allow":[5]}"#,
            r#"{"allow":"10.0.0.1/40"}"#,
            r#"{"allow":"localhost"}"#,
            r#"{"allow":"*.*.com"}"#,
            r#"{"flush":true}"#,
            r#"{"set":{"allow":[],"other":[]}}"#,
            r#"{"set":[]}"#,
            r#"{"set":{"private":"yes"}}"#,
            r#"{"set":{"private":true}}"#,
            r#"{"protect":[]}"#,
            r#"{"protect":{"addresses":["10.0.0.0/40"]}}"#,
            r#"{"protect":{"addresses":"10.0.0.1"}}"#,
            r#"{"protect":{"networks":["nope"]}}"#,
            r#"{"protect":{"routes":[]}}"#,
        ] {
            assert!(parse_command(bad).is_err(), "{bad:?} parsed");
        }
        let error = parse_command(r#"{"allow":"bad_name.com"}"#).unwrap_err();
        assert!(error.contains("bad_name.com"), "{error}");
    }

    #[test]
    fn errors_are_single_line_json() {
        let e: Value = serde_json::from_str(&error_response("bad \"x\"\n")).unwrap();
        assert_eq!(e["ok"], false);
    }
}
