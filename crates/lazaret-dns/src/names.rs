//! The name allowlist: which questions the sidecar forwards upstream. Anything
//! it refuses never leaves the sandbox's network namespace, so DNS cannot carry
//! data out beyond what the allowlist itself spells:
//!
//! - only `A` and `AAAA` questions of class `IN` (no `TXT`, `ANY`, ...);
//! - every label is letters, digits and hyphens;
//! - `github.com` allows exactly that name; `*.npmjs.org` allows names below
//!   `npmjs.org` (not `npmjs.org` itself) with at most
//!   [`MAX_WILDCARD_LABELS`] labels of at most [`MAX_WILDCARD_LABEL`] octets
//!   in the part the `*` stands for, so a wildcard is not a bulk channel to
//!   the zone's name servers;
//! - a deny entry (`lazaret net deny name`) wins over every allow entry.
//!
//! Examples (checked in the tests below):
//! `*.npmjs.org` allows `registry.npmjs.org` and `a.b.npmjs.org`, refuses
//! `npmjs.org`, a 40-octet label and `a.b.c.d.npmjs.org`.

use std::collections::BTreeSet;
use std::fmt;

use crate::wire::{type_name, Question, CLASS_IN, TYPE_A, TYPE_AAAA};

/// The record types served (class `IN`): every other question is refused
/// unsent. The cluster's DNS proxy cannot filter types (docs/cluster.md).
pub const SERVED_RECORD_TYPES: [u16; 2] = [TYPE_A, TYPE_AAAA];

/// Most labels a `*` may stand for.
pub const MAX_WILDCARD_LABELS: usize = 3;
/// Longest label a `*` may stand for, in octets.
pub const MAX_WILDCARD_LABEL: usize = 32;

/// Why a question is not forwarded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    RecordType(u16),
    BadCharacters,
    /// Not a name an allow entry could hold (one label, a label that starts
    /// or ends with a hyphen, over 253 octets, or a last label of digits:
    /// an IPv4 address): refused at once, never held or offered (D19).
    NotAName,
    NotAllowlisted,
    Denied(String),
    LongLabel(usize),
    TooManyLabels(usize),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::RecordType(t) => write!(f, "record type {} is not served (only A and AAAA)", type_name(*t)),
            Refusal::BadCharacters => write!(f, "a label has characters other than letters, digits and hyphens"),
            Refusal::NotAName => write!(
                f,
                "not a DNS name an allow entry can hold (one label, a hyphen at a label's edge, too long, or an address written as a name)"
            ),
            Refusal::NotAllowlisted => write!(f, "the name is not on the allowlist"),
            Refusal::Denied(pattern) => write!(f, "the name is denied by `{pattern}`"),
            Refusal::LongLabel(length) => {
                write!(f, "a label of {length} octets under a wildcard (at most {MAX_WILDCARD_LABEL})")
            }
            Refusal::TooManyLabels(count) => {
                write!(f, "{count} labels under a wildcard (at most {MAX_WILDCARD_LABELS})")
            }
        }
    }
}

/// `github.com` or `*.npmjs.org`, lower case, without a trailing dot.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NamePattern {
    wildcard: bool,
    base: String,
}

impl NamePattern {
    /// Parses an allowlist entry; the error names the entry.
    pub fn parse(text: &str) -> Result<NamePattern, String> {
        let lower = text.to_ascii_lowercase();
        let name = lower.strip_suffix('.').unwrap_or(&lower);
        let (wildcard, base) = match name.strip_prefix("*.") {
            Some(base) => (true, base),
            None => (false, name),
        };
        let invalid = || format!("`{text}` is not a DNS name (expected e.g. github.com or *.npmjs.org)");
        if base.len() > 253 || !base.contains('.') || !base.split('.').all(is_hostname_label) {
            return Err(invalid());
        }
        // No top-level domain is all digits (RFC 3696 2): such a "name" is an
        // address (`10.0.0.1`), and an entry must never be read as both.
        if base.rsplit('.').next().is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit())) {
            return Err(format!("`{text}` is an address, not a DNS name (write an address as a CIDR entry: 10.0.0.1/32)"));
        }
        Ok(NamePattern { wildcard, base: base.to_owned() })
    }

    pub fn is_wildcard(&self) -> bool {
        self.wildcard
    }

    /// How many labels the `*` stands for when this pattern matches `name`
    /// (0 for an exact pattern), or `None`.
    fn matched_labels<'a>(&self, name: &'a str) -> Option<Vec<&'a str>> {
        if !self.wildcard {
            return (name == self.base).then(Vec::new);
        }
        let prefix = name.strip_suffix(self.base.as_str())?.strip_suffix('.')?;
        if prefix.is_empty() {
            return None;
        }
        Some(prefix.split('.').collect())
    }
}

impl fmt::Display for NamePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.wildcard {
            write!(f, "*.{}", self.base)
        } else {
            f.write_str(&self.base)
        }
    }
}

fn is_hostname_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

/// Allowed and denied name patterns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamePolicy {
    allow: BTreeSet<NamePattern>,
    deny: BTreeSet<NamePattern>,
}

impl NamePolicy {
    pub fn new() -> NamePolicy {
        NamePolicy::default()
    }

    pub fn allow(&mut self, pattern: NamePattern) {
        self.deny.remove(&pattern);
        self.allow.insert(pattern);
    }

    /// Removes the allow entry of exactly this pattern and records the deny, which
    /// wins over every allow entry, narrower or wider, until the same pattern is
    /// allowed again.
    pub fn deny(&mut self, pattern: NamePattern) {
        self.allow.remove(&pattern);
        self.deny.insert(pattern);
    }

    /// Removes the allow or deny entry of exactly this pattern; whether there was one.
    pub fn remove(&mut self, pattern: &NamePattern) -> bool {
        let allowed = self.allow.remove(pattern);
        let denied = self.deny.remove(pattern);
        allowed || denied
    }

    /// Whether exactly this pattern is an allow entry.
    pub fn has_allow(&self, pattern: &NamePattern) -> bool {
        self.allow.contains(pattern)
    }

    /// Whether exactly this pattern is a deny entry.
    pub fn has_deny(&self, pattern: &NamePattern) -> bool {
        self.deny.contains(pattern)
    }

    pub fn allowed(&self) -> impl Iterator<Item = &NamePattern> {
        self.allow.iter()
    }

    pub fn denied(&self) -> impl Iterator<Item = &NamePattern> {
        self.deny.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.allow.is_empty()
    }

    /// The deny entry that matches `name` (lower case), if any.
    pub fn denial(&self, name: &str) -> Option<&NamePattern> {
        self.deny.iter().find(|pattern| pattern.matched_labels(name).is_some())
    }

    /// Whether `question` may be forwarded upstream.
    pub fn check(&self, question: &Question) -> Result<(), Refusal> {
        if question.class != CLASS_IN || !SERVED_RECORD_TYPES.contains(&question.record_type) {
            return Err(Refusal::RecordType(question.record_type));
        }
        if question.labels.is_empty() || !question.labels.iter().all(|label| label.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-'))
        {
            return Err(Refusal::BadCharacters);
        }
        let name = question.name();
        if NamePattern::parse(&name).is_err() {
            return Err(Refusal::NotAName);
        }
        self.check_name(&name)
    }

    /// Whether the (lower-case, LDH) `name` is allowed.
    pub fn check_name(&self, name: &str) -> Result<(), Refusal> {
        if let Some(denied) = self.denial(name) {
            return Err(Refusal::Denied(denied.to_string()));
        }
        let mut refusal = Refusal::NotAllowlisted;
        for pattern in &self.allow {
            let Some(labels) = pattern.matched_labels(name) else { continue };
            if labels.len() > MAX_WILDCARD_LABELS {
                refusal = Refusal::TooManyLabels(labels.len());
            } else if let Some(long) = labels.iter().map(|label| label.len()).find(|length| *length > MAX_WILDCARD_LABEL) {
                refusal = Refusal::LongLabel(long);
            } else {
                return Ok(());
            }
        }
        Err(refusal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::TYPE_TXT;

    fn pattern(text: &str) -> NamePattern {
        NamePattern::parse(text).expect(text)
    }

    fn policy(allow: &[&str]) -> NamePolicy {
        let mut policy = NamePolicy::new();
        allow.iter().for_each(|p| policy.allow(pattern(p)));
        policy
    }

    #[test]
    fn patterns_parse_and_name_bad_entries() {
        assert_eq!(pattern("GitHub.com.").to_string(), "github.com");
        assert_eq!(pattern("*.npmjs.org").to_string(), "*.npmjs.org");
        for bad in [
            "",
            " github.com",
            "*",
            "localhost",
            "*.com",
            "a..b",
            "-a.com",
            "a_b.com",
            "*.*.com",
            "a.*.com",
            "10.0.0.1/8 x",
            "10.0.0.1",
            "1.2.3",
            "*.10.0.0.1",
            "x.1",
        ] {
            let error = NamePattern::parse(bad).expect_err(bad);
            assert!(error.contains(&format!("`{bad}`")), "{error}");
        }
    }

    #[test]
    fn the_documented_examples_hold() {
        let policy = policy(&["*.npmjs.org", "github.com"]);
        assert_eq!(policy.check_name("registry.npmjs.org"), Ok(()));
        assert_eq!(policy.check_name("a.b.npmjs.org"), Ok(()));
        assert_eq!(policy.check_name("github.com"), Ok(()));
        assert_eq!(policy.check_name("npmjs.org"), Err(Refusal::NotAllowlisted));
        assert_eq!(policy.check_name("api.github.com"), Err(Refusal::NotAllowlisted));
        assert_eq!(policy.check_name("evilnpmjs.org"), Err(Refusal::NotAllowlisted));
        assert_eq!(policy.check_name(&format!("{}.npmjs.org", "a".repeat(40))), Err(Refusal::LongLabel(40)));
        assert_eq!(policy.check_name("a.b.c.d.npmjs.org"), Err(Refusal::TooManyLabels(4)));
    }

    #[test]
    fn only_address_questions_with_plain_labels_pass() {
        let policy = policy(&["github.com"]);
        assert_eq!(policy.check(&Question::new("github.com", TYPE_A)), Ok(()));
        assert_eq!(policy.check(&Question::new("GitHub.com", TYPE_AAAA)), Ok(()));
        assert_eq!(policy.check(&Question::new("github.com", TYPE_TXT)), Err(Refusal::RecordType(TYPE_TXT)));
        let mut chaos = Question::new("github.com", TYPE_A);
        chaos.class = 3;
        assert!(policy.check(&chaos).is_err());
        let binary = Question { labels: vec![vec![0x00, 0xff], b"github".to_vec(), b"com".to_vec()], record_type: TYPE_A, class: CLASS_IN };
        assert_eq!(policy.check(&binary), Err(Refusal::BadCharacters));
        assert_eq!(policy.check(&Question::new("", TYPE_A)), Err(Refusal::BadCharacters));
    }

    /// D19: a question whose name no allow entry could hold is refused at
    /// once (never `NotAllowlisted`, which a hold would offer to a human).
    #[test]
    fn addresses_and_malformed_names_are_not_names() {
        let policy = policy(&["github.com"]);
        let long = format!("{}.test", ["a".repeat(63), "a".repeat(63), "a".repeat(63), "a".repeat(60)].join("."));
        assert!(long.len() > 253);
        for name in ["10.231.11.53", "169.254.169.254", "0177.0.0.1", "wpad", "-x.test", "x-.test", "1.2.3", long.as_str()] {
            assert_eq!(policy.check(&Question::new(name, TYPE_A)), Err(Refusal::NotAName), "{name}");
        }
        assert_eq!(policy.check(&Question::new("0x7f.test", TYPE_A)), Err(Refusal::NotAllowlisted), "a name, only unlisted");
    }

    #[test]
    fn deny_entries_win_over_narrower_and_wider_allows() {
        let mut policy = policy(&["*.example.test"]);
        policy.deny(pattern("evil.example.test"));
        assert_eq!(policy.check_name("evil.example.test"), Err(Refusal::Denied("evil.example.test".into())));
        assert_eq!(policy.check_name("good.example.test"), Ok(()));
        // A wider deny beats a narrower allow, whatever the order.
        policy.allow(pattern("a.example.test"));
        policy.deny(pattern("*.example.test"));
        assert!(policy.allowed().all(|allowed| allowed.to_string() == "a.example.test"));
        assert_eq!(policy.check_name("a.example.test"), Err(Refusal::Denied("*.example.test".into())));
        policy.allow(pattern("evil.example.test"));
        assert_eq!(policy.check_name("evil.example.test"), Err(Refusal::Denied("*.example.test".into())));
        policy.allow(pattern("*.example.test"));
        assert_eq!(policy.check_name("evil.example.test"), Ok(()), "allowing exactly the denied pattern lifts it");
    }

    #[test]
    fn remove_takes_out_exactly_the_pattern_allowed_or_denied() {
        let mut policy = policy(&["*.example.test", "a.example.test"]);
        policy.deny(pattern("evil.example.test"));
        assert!(policy.has_allow(&pattern("a.example.test")) && policy.has_deny(&pattern("evil.example.test")));
        assert!(!policy.remove(&pattern("b.example.test")), "not an entry");
        assert!(!policy.remove(&pattern("example.test")), "not an entry either: the wildcard does not stand for it");
        assert!(policy.remove(&pattern("evil.example.test")));
        assert_eq!(policy.check_name("evil.example.test"), Ok(()), "the deny is gone, the wildcard allows it again");
        assert!(policy.remove(&pattern("*.example.test")));
        assert_eq!(policy.check_name("evil.example.test"), Err(Refusal::NotAllowlisted));
        assert_eq!(policy.check_name("a.example.test"), Ok(()), "the other allow stays");
        assert!(!policy.has_allow(&pattern("*.example.test")) && !policy.has_deny(&pattern("evil.example.test")));
        assert!(!policy.remove(&pattern("*.example.test")), "removed once");
    }
}
