//! The control socket's requests, read into checked values: the wire types
//! are [`lazaret_protocol::sidecar`] (one JSON object per line each way,
//! typed once for this sidecar and the coordinator); here each entry is
//! parsed (a CIDR, an address, one protocol and port of a host address, or
//! a DNS name pattern) and the sizes bounded, and a failure is a message
//! that names the bad value.
//!
//! A service entry is `ADDRESS/LEN SERVICE` with exactly one space
//! (`10.9.0.7/32 tcp/8081`, `fd00::7/128 udp/53`, `10.9.0.7/32 132`; the
//! protocol's [`Service`] grammar): only a host network (/32 or /128, or a
//! bare address, not IPv4-mapped) carries one, and never IP protocol 0,
//! which a policy rule cannot tell from every protocol. Its `Display` (the network normalised,
//! one space, the service) keys its timer and is what `entriesExpired` and
//! the policy report; it is allowed wherever an entry is (`allow`, `deny`,
//! `revoke`, `set`, with `forMs` too). Every success is
//! answered with the policy now in force (see `Enforcer::snapshot`), a
//! failure with [`SidecarReply::Error`], leaving the policy as it was.
//! A timed entry's life (`forMs`) is 1 ms to [`MAX_FOR_MS`], a hold at most
//! [`MAX_HOLD_MS`].

use lazaret_dns::{NamePattern, NamePolicy};
use std::time::Duration;

use lazaret_protocol::sidecar::{
    service_entry, CredentialEndpoint, PrivateAnswers, Service, SidecarReply, SidecarRequest, MAX_FOR_MS, MAX_HOLD_MS, MAX_ITEMS,
};

use crate::policy::{Cidr, Policy};

/// One allowlist or denylist entry; its `Display` is the normalised text
/// (lower case, host bits cleared) that keys its timer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Cidr(Cidr),
    /// One protocol and port of a host network (/32 or /128).
    Service(Cidr, Service),
    Name(NamePattern),
}

impl Entry {
    /// `ADDRESS/LEN SERVICE` (see the module's documentation), a CIDR or
    /// address, else a DNS name pattern; the error names the entry.
    pub fn parse(text: &str) -> Result<Entry, String> {
        let trimmed = text.trim();
        if trimmed.contains(char::is_whitespace) {
            return Entry::parse_service(trimmed);
        }
        let looks_like_address = text.contains(':') || text.contains('/') || text.trim().bytes().all(|b| b.is_ascii_digit() || b == b'.');
        if looks_like_address {
            Cidr::parse(text).map(Entry::Cidr)
        } else {
            NamePattern::parse(text).map(Entry::Name)
        }
    }

    fn parse_service(text: &str) -> Result<Entry, String> {
        let bad = |why: String| format!("{text:?} is not a host address with a protocol and port (10.9.0.7/32 tcp/8081): {why}");
        let (network, service) = text.split_once(' ').ok_or_else(|| bad("the two parts are separated by one space".to_owned()))?;
        if network.is_empty() || service.is_empty() || service.contains(char::is_whitespace) || network.contains(char::is_whitespace) {
            return Err(bad("the two parts are separated by exactly one space".to_owned()));
        }
        let cidr = Cidr::parse(network).map_err(bad)?;
        if Cidr::host(cidr.addr()) != cidr {
            return Err(bad(format!("{cidr} is a network; only a host address (/32 or /128) carries a protocol and port")));
        }
        if cidr.addr().to_canonical() != cidr.addr() {
            let v4 = cidr.addr().to_canonical();
            return Err(bad(format!("an IPv4-mapped address is routed as IPv4: write {v4}/32")));
        }
        let service = Service::parse(service).map_err(bad)?;
        if service.protocol() == 0 {
            return Err(bad("IP protocol 0 cannot be told apart from every protocol in a policy rule".to_owned()));
        }
        Ok(Entry::Service(cidr, service))
    }
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Entry::Cidr(c) => c.fmt(f),
            Entry::Service(c, service) => f.write_str(&service_entry(&c.to_string(), *service)),
            Entry::Name(n) => n.fmt(f),
        }
    }
}

/// A request with its values checked.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    /// Entries to allow, for this long if timed.
    Allow(Vec<Entry>, Option<Duration>),
    /// Entries to deny, for this long if timed.
    Deny(Vec<Entry>, Option<Duration>),
    /// Allow or deny entries to remove.
    Revoke(Vec<Entry>),
    /// How long a question for a name on no allow entry waits for one.
    Hold(Duration),
    Set(Policy, NamePolicy, PrivateAnswers),
    /// What stays out of reach (addresses and networks), and the host's networks.
    Protect(Vec<Cidr>, Vec<Cidr>),
    /// The credential endpoints, replaced (checked by `inject::Injector::set`).
    Credentials(Vec<CredentialEndpoint>),
    Show,
    Watch,
}

/// Reads one request line.
pub fn parse_command(line: &str) -> Result<Command, String> {
    let request: SidecarRequest = serde_json::from_str(line).map_err(|e| format!("not a control request: {e}"))?;
    Ok(match request {
        SidecarRequest::Allow { entries: items, for_ms } => Command::Allow(entries(&items, "entries")?, life(for_ms)?),
        SidecarRequest::Deny { entries: items, for_ms } => Command::Deny(entries(&items, "entries")?, life(for_ms)?),
        SidecarRequest::Revoke { entries: items } => Command::Revoke(entries(&items, "entries")?),
        SidecarRequest::Hold { ms } => {
            if ms > MAX_HOLD_MS {
                return Err(format!("a hold of {ms} ms is longer than {MAX_HOLD_MS} ms"));
            }
            Command::Hold(Duration::from_millis(ms))
        }
        SidecarRequest::Show {} => Command::Show,
        SidecarRequest::Watch {} => Command::Watch,
        SidecarRequest::Set { allow, deny, private_answers } => {
            // Denies after allows: a deny carves into an allow.
            let (mut policy, mut names) = (Policy::new(), NamePolicy::new());
            for entry in entries(&allow, "allow")? {
                match entry {
                    Entry::Cidr(c) => policy.allow(c),
                    Entry::Service(c, service) => policy.allow_service(c.addr(), service),
                    Entry::Name(n) => names.allow(n),
                }
            }
            for entry in entries(&deny, "deny")? {
                match entry {
                    Entry::Cidr(c) => policy.deny(c),
                    Entry::Service(c, service) => policy.deny_service(c.addr(), service),
                    Entry::Name(n) => names.deny(n),
                }
            }
            Command::Set(policy, names, private_answers)
        }
        SidecarRequest::Protect { addresses, networks } => Command::Protect(cidrs(&addresses, "addresses")?, cidrs(&networks, "networks")?),
        SidecarRequest::Credentials { endpoints } => Command::Credentials(endpoints),
    })
}

/// A timed entry's life: `forMs` from 1 to [`MAX_FOR_MS`].
fn life(for_ms: Option<u64>) -> Result<Option<Duration>, String> {
    match for_ms {
        None => Ok(None),
        Some(ms) if (1..=MAX_FOR_MS).contains(&ms) => Ok(Some(Duration::from_millis(ms))),
        Some(ms) => Err(format!("forMs {ms} is out of range (1 to {MAX_FOR_MS})")),
    }
}

/// At most [`MAX_ITEMS`] entries (`key` names them in errors).
fn entries(items: &[String], key: &str) -> Result<Vec<Entry>, String> {
    bounded(items, key)?.iter().map(|item| Entry::parse(item)).collect()
}

/// At most [`MAX_ITEMS`] CIDRs or addresses.
fn cidrs(items: &[String], key: &str) -> Result<Vec<Cidr>, String> {
    bounded(items, key)?.iter().map(|item| Cidr::parse(item)).collect()
}

fn bounded<'a>(items: &'a [String], key: &str) -> Result<&'a [String], String> {
    if items.len() > MAX_ITEMS {
        return Err(format!("more than {MAX_ITEMS} entries in {key:?}"));
    }
    Ok(items)
}

/// The answer line of a failed request.
pub fn error_response(message: &str) -> String {
    reply_line(&SidecarReply::Error { message: message.to_owned() })
}

/// One answer line (without its newline).
pub fn reply_line(reply: &SidecarReply) -> String {
    // Serialising these types cannot fail (no maps with non-string keys).
    serde_json::to_string(reply).unwrap_or_else(|_| r#"{"type":"error","message":"cannot write the answer"}"#.to_owned())
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
        assert_eq!(parse_command(r#"{"type":"allow","entries":["10.89.0.5/32"]}"#), Ok(Command::Allow(vec![c("10.89.0.5")], None)));
        assert_eq!(
            parse_command(r#"{"type":"deny","entries":["10.89.0.5","fd00::/64","*.npmjs.org"]}"#),
            Ok(Command::Deny(vec![c("10.89.0.5"), c("fd00::/64"), c("*.npmjs.org")], None))
        );
        assert_eq!(
            parse_command(r#"{"type":"allow","entries":["Grant.test"],"forMs":60000}"#),
            Ok(Command::Allow(vec![c("grant.test")], Some(Duration::from_secs(60))))
        );
        assert_eq!(
            parse_command(&format!(r#"{{"type":"deny","entries":["10.0.0.0/8"],"forMs":{MAX_FOR_MS}}}"#)),
            Ok(Command::Deny(vec![c("10.0.0.0/8")], Some(Duration::from_millis(MAX_FOR_MS))))
        );
        assert_eq!(
            parse_command(r#"{"type":"allow","entries":["a.test"],"forMs":1}"#),
            Ok(Command::Allow(vec![c("a.test")], Some(Duration::from_millis(1))))
        );
        assert_eq!(
            parse_command(r#"{"type":"revoke","entries":["10.0.2.9/24","A.test"]}"#),
            Ok(Command::Revoke(vec![c("10.0.2.0/24"), c("a.test")]))
        );
        assert_eq!(parse_command(r#"{"type":"hold","ms":0}"#), Ok(Command::Hold(Duration::ZERO)));
        assert_eq!(
            parse_command(&format!(r#"{{"type":"hold","ms":{MAX_HOLD_MS}}}"#)),
            Ok(Command::Hold(Duration::from_millis(MAX_HOLD_MS)))
        );
        assert!(matches!(c("GitHub.com"), Entry::Name(_)));
        assert_eq!(c("GitHub.com").to_string(), "github.com");
        assert_eq!(parse_command(r#" {"type":"show"} "#), Ok(Command::Show));
        assert_eq!(parse_command(r#"{"type":"watch"}"#), Ok(Command::Watch));
        let Ok(Command::Set(p, names, _)) =
            parse_command(r#"{"type":"set","deny":["10.1.0.0/16","x.allowed.test"],"allow":["10.0.0.0/8","*.allowed.test"]}"#)
        else {
            panic!("set did not parse");
        };
        assert_eq!(p.listed(Verdict::Allow), vec![Cidr::parse("10.0.0.0/8").unwrap()]);
        assert_eq!(p.listed(Verdict::Deny), vec![Cidr::parse("10.1.0.0/16").unwrap()]);
        assert_eq!(names.allowed().map(|n| n.to_string()).collect::<Vec<_>>(), ["*.allowed.test"]);
        assert_eq!(names.denied().map(|n| n.to_string()).collect::<Vec<_>>(), ["x.allowed.test"]);
        assert_eq!(parse_command(r#"{"type":"set"}"#), Ok(Command::Set(Policy::new(), NamePolicy::new(), PrivateAnswers::Refuse)));
        assert_eq!(
            parse_command(
                &serde_json::to_string(&SidecarRequest::Set { allow: vec![], deny: vec![], private_answers: PrivateAnswers::Allow })
                    .unwrap()
            ),
            Ok(Command::Set(Policy::new(), NamePolicy::new(), PrivateAnswers::Allow))
        );
        assert_eq!(
            parse_command(
                r#"{"type":"protect","addresses":["10.88.0.1","fe80::1","10.0.2.9/24"],"networks":["10.88.0.7/16","2001:db8:1::/48"]}"#
            ),
            Ok(Command::Protect(
                vec![Cidr::parse("10.88.0.1").unwrap(), Cidr::parse("fe80::1").unwrap(), Cidr::parse("10.0.2.0/24").unwrap()],
                vec![Cidr::parse("10.88.0.0/16").unwrap(), Cidr::parse("2001:db8:1::/48").unwrap()]
            ))
        );
        assert_eq!(parse_command(r#"{"type":"protect"}"#), Ok(Command::Protect(vec![], vec![])));
    }

    #[test]
    fn refuses_bad_requests() {
        for bad in [
            "",
            "[]",
            "{}",
            r#"{"show":true}"#,
            r#"{"type":"show","extra":1}"#,
            r#"{"type":"allow","entries":"10.0.0.1"}"#,
            r#"{"type":"allow","entries":[5]}"#,
            r#"{"type":"allow","entries":["10.0.0.1/40"]}"#,
            r#"{"type":"allow","entries":["localhost"]}"#,
            r#"{"type":"allow","entries":["*.*.com"]}"#,
            r#"{"type":"flush"}"#,
            r#"{"type":"set","allow":[],"other":[]}"#,
            r#"{"type":"protect","addresses":["10.0.0.0/40"]}"#,
            r#"{"type":"protect","addresses":"10.0.0.1"}"#,
            r#"{"type":"protect","networks":["nope"]}"#,
            r#"{"type":"protect","routes":[]}"#,
        ] {
            assert!(parse_command(bad).is_err(), "{bad:?} parsed");
        }
        let error = parse_command(r#"{"type":"allow","entries":["bad_name.com"]}"#).unwrap_err();
        assert!(error.contains("bad_name.com"), "{error}");
        let error = parse_command(r#"{"type":"revoke","entries":["a.test","10.0.0.1/33"]}"#).unwrap_err();
        assert!(error.contains("10.0.0.1/33"), "{error}");
        for (request, value) in [
            (r#"{"type":"allow","entries":["a.test"],"forMs":0}"#.to_owned(), "0".to_owned()),
            (format!(r#"{{"type":"deny","entries":["a.test"],"forMs":{}}}"#, MAX_FOR_MS + 1), (MAX_FOR_MS + 1).to_string()),
            (format!(r#"{{"type":"hold","ms":{}}}"#, MAX_HOLD_MS + 1), (MAX_HOLD_MS + 1).to_string()),
            (r#"{"type":"hold","ms":18446744073709551615}"#.to_owned(), u64::MAX.to_string()),
        ] {
            let error = parse_command(&request).unwrap_err();
            assert!(error.contains(&value), "{request}: {error}");
        }
        let many = format!(r#"{{"type":"deny","entries":[{}]}}"#, vec![r#""10.0.0.1""#; MAX_ITEMS + 1].join(","));
        assert!(parse_command(&many).unwrap_err().contains("more than"), "more than {MAX_ITEMS} entries");
    }

    #[test]
    fn a_service_entry_is_one_protocol_and_port_of_a_host_address() {
        let entry = c("10.9.0.7/32 tcp/8081");
        assert_eq!(entry, Entry::Service(Cidr::parse("10.9.0.7").unwrap(), Service::parse("tcp/8081").unwrap()));
        assert_eq!(entry.to_string(), "10.9.0.7/32 tcp/8081");
        for (text, normalised) in [
            ("10.9.0.7 tcp/8081", "10.9.0.7/32 tcp/8081"),
            ("fd00:0::7/128 udp/53", "fd00::7/128 udp/53"),
            ("fd00::7 132", "fd00::7/128 132"),
            (" 10.9.0.7/32 udp/9999 ", "10.9.0.7/32 udp/9999"),
        ] {
            assert_eq!(c(text).to_string(), normalised, "{text:?}");
        }
        assert_eq!(
            parse_command(r#"{"type":"allow","entries":["10.9.0.7/32 tcp/8081"],"forMs":5000}"#),
            Ok(Command::Allow(vec![entry.clone()], Some(Duration::from_secs(5))))
        );
        assert_eq!(parse_command(r#"{"type":"deny","entries":["10.9.0.7/32 tcp/8081"]}"#), Ok(Command::Deny(vec![entry.clone()], None)));
        assert_eq!(parse_command(r#"{"type":"revoke","entries":["10.9.0.7/32 tcp/8081"]}"#), Ok(Command::Revoke(vec![entry])));
        let Ok(Command::Set(policy, _, _)) =
            parse_command(r#"{"type":"set","allow":["10.9.0.7/32 tcp/8081","10.0.0.0/8"],"deny":["10.9.0.8/32 udp/53"]}"#)
        else {
            panic!("set did not parse");
        };
        let address = |text: &str| text.parse::<std::net::IpAddr>().unwrap();
        assert_eq!(policy.listed_services(Verdict::Allow), [(address("10.9.0.7"), Service::parse("tcp/8081").unwrap())]);
        assert_eq!(policy.listed_services(Verdict::Deny), [(address("10.9.0.8"), Service::parse("udp/53").unwrap())]);
        assert_eq!(policy.listed(Verdict::Allow), [Cidr::parse("10.0.0.0/8").unwrap()]);
        for (bad, named) in [
            ("10.9.0.0/24 tcp/8081", "is a network"),
            ("0.0.0.0/0 tcp/80", "is a network"),
            ("fd00::/64 udp/53", "is a network"),
            ("10.9.0.7/32  tcp/8081", "exactly one space"),
            ("10.9.0.7/32 tcp/8081 udp/53", "exactly one space"),
            ("10.9.0.7/32 tcp", "tcp/8080"),
            ("10.9.0.7/32 tcp/0", "port 0"),
            ("10.9.0.7/32 tcp/65536", "over 65535"),
            ("10.9.0.7/32 6", "tcp/PORT"),
            ("10.9.0.7/32 0", "protocol 0"),
            ("10.9.0.7/33 tcp/80", "too long"),
            ("::ffff:10.9.0.7/128 tcp/80", "write 10.9.0.7/32"),
            ("grant.test tcp/443", "not an IP address"),
            ("*.npmjs.org tcp/443", "not an IP address"),
        ] {
            let request = format!(r#"{{"type":"allow","entries":["10.0.0.1","{bad}"]}}"#);
            let error = parse_command(&request).expect_err(bad);
            assert!(error.contains(&format!("{bad:?}")), "the error names the entry: {bad:?}: {error}");
            assert!(error.contains(named), "{bad:?}: {error}");
        }
        let error = Entry::parse("10.9.0.7/32\ttcp/8081").expect_err("a tab");
        assert!(error.contains("one space") && error.contains(r#""10.9.0.7/32\ttcp/8081""#), "{error}");
    }

    #[test]
    fn errors_are_single_line_replies() {
        let line = error_response("bad \"x\"\n");
        assert!(!line.contains('\n'), "{line}");
        assert_eq!(serde_json::from_str::<SidecarReply>(&line).unwrap(), SidecarReply::Error { message: "bad \"x\"\n".into() });
    }
}
