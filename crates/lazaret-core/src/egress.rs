//! Egress allowlist entries: CIDRs and, beyond
//! it, DNS names with an optional `*.` wildcard label.

use std::net::IpAddr;

use ipnet::IpNet;

/// Whether an allowlisted DNS name's answer may open internal addresses
/// that no CIDR entry allows (`[network] private_answers`): the Network
/// Sidecar's wire type, which is also the configuration's.
pub use lazaret_protocol::sidecar::PrivateAnswers;

/// One validated `allow_egress` entry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "camelCase")]
pub enum EgressRule {
    Cidr(IpNet),
    Domain(String),
}

impl std::fmt::Display for EgressRule {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EgressRule::Cidr(net) => write!(formatter, "{net}"),
            EgressRule::Domain(name) => write!(formatter, "{name}"),
        }
    }
}

impl std::str::FromStr for EgressRule {
    type Err = String;

    /// Parses `10.0.0.0/8`, `2001:db8::/32`, a bare address (a /32 or /128),
    /// `github.com` or `*.npmjs.org`. Host bits set in a CIDR are an error,
    /// since they usually mean a typo in the prefix length.
    fn from_str(text: &str) -> Result<EgressRule, String> {
        let looks_like_address = text.contains(':') || text.contains('/') || text.chars().all(|c| c.is_ascii_digit() || c == '.');
        if looks_like_address {
            return parse_cidr(text).map(EgressRule::Cidr);
        }
        parse_domain(text).map(EgressRule::Domain)
    }
}

fn parse_cidr(text: &str) -> Result<IpNet, String> {
    if let Ok(address) = text.parse::<IpAddr>() {
        return Ok(IpNet::from(address));
    }
    let net: IpNet = text.parse().map_err(|_| format!("`{text}` is not a valid CIDR (expected e.g. 10.0.0.0/8 or 2001:db8::/32)"))?;
    if net.trunc() != net {
        return Err(format!("`{text}` has host bits set; did you mean {}?", net.trunc()));
    }
    Ok(net)
}

/// One validation for names, shared with the Network Sidecar that enforces
/// them (`lazaret_dns::NamePattern`).
fn parse_domain(text: &str) -> Result<String, String> {
    lazaret_dns::NamePattern::parse(text)
        .map(|pattern| pattern.to_string())
        .map_err(|_| format!("`{text}` is neither a CIDR nor a DNS name (expected e.g. github.com or *.npmjs.org)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_cidrs_addresses_and_names() {
        let cases = [
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("192.168.1.7", "192.168.1.7/32"),
            ("2001:db8::/32", "2001:db8::/32"),
            ("::1", "::1/128"),
            ("GitHub.com", "github.com"),
            ("*.npmjs.org", "*.npmjs.org"),
            ("registry.npmjs.org.", "registry.npmjs.org"),
        ];
        for (input, expected) in cases {
            let rule: EgressRule = input.parse().expect(input);
            assert_eq!(rule.to_string(), expected);
        }
    }

    #[test]
    fn rejects_bad_entries_naming_them() {
        for input in ["10.0.0.0/33", "10.0.0.1/8", "300.1.1.1", "1.2.3", "localhost", "*", "a..b", "-a.com", "foo bar.com", "*.*.com", ""] {
            let error = input.parse::<EgressRule>().expect_err(input);
            assert!(error.contains(&format!("`{input}`")), "{error}");
        }
    }
}
