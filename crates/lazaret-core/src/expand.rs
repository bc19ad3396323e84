//! Token and tilde expansion.
//!
//! Exactly five tokens exist: `{profile_name}`, `{profile_dir}`,
//! `{domain_hash}`, `{domain_dir}` and `{workspace_dir}`. Any other use of a
//! brace is an error, so a typo never silently becomes a literal directory.
//! A tilde expands only as the very first character (`~` or `~/...`).
//! Expansion is a single pass: substituted values are never re-scanned.

use std::path::Path;

/// The token names, in the order the documentation lists them.
pub const TOKEN_NAMES: [&str; 5] = ["profile_name", "profile_dir", "domain_hash", "domain_dir", "workspace_dir"];

/// Values for the five tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenValues {
    pub profile_name: String,
    pub profile_dir: String,
    pub domain_hash: String,
    pub domain_dir: String,
    pub workspace_dir: String,
}

impl TokenValues {
    fn get(&self, name: &str) -> Option<&str> {
        match name {
            "profile_name" => Some(&self.profile_name),
            "profile_dir" => Some(&self.profile_dir),
            "domain_hash" => Some(&self.domain_hash),
            "domain_dir" => Some(&self.domain_dir),
            "workspace_dir" => Some(&self.workspace_dir),
            _ => None,
        }
    }
}

/// Why a string could not be expanded. The caller adds the field and location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpandError {
    UnknownToken(String),
    UnterminatedToken(String),
    StrayBrace(char),
    TildeUser(String),
}

impl std::fmt::Display for ExpandError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExpandError::UnknownToken(token) => write!(
                formatter,
                "unknown expansion token `{token}`; the only tokens are {}",
                TOKEN_NAMES.map(|name| format!("{{{name}}}")).join(", ")
            ),
            ExpandError::UnterminatedToken(rest) => write!(formatter, "unterminated expansion token at `{rest}`"),
            ExpandError::StrayBrace(brace) => write!(formatter, "stray `{brace}`: braces are only allowed around expansion tokens"),
            ExpandError::TildeUser(text) => {
                write!(formatter, "`{text}`: `~user` is not supported, only `~` or `~/...` (the current user's home)")
            }
        }
    }
}

/// Checks token syntax without values: every `{...}` names one of the five
/// tokens. Used at configuration load, before a workspace is known.
pub fn check_tokens(text: &str) -> Result<(), ExpandError> {
    scan(text, &mut |_| Some(String::new())).map(|_| ())
}

/// Expands tokens, and a leading tilde when `home` is given.
pub fn expand(text: &str, values: &TokenValues, home: Option<&Path>) -> Result<String, ExpandError> {
    let (prefix, rest) = match home {
        Some(home) => split_tilde(text, home)?,
        None => (String::new(), text),
    };
    let expanded = scan(rest, &mut |name| values.get(name).map(str::to_owned))?;
    Ok(prefix + &expanded)
}

fn split_tilde<'a>(text: &'a str, home: &Path) -> Result<(String, &'a str), ExpandError> {
    let Some(after) = text.strip_prefix('~') else {
        return Ok((String::new(), text));
    };
    if after.is_empty() || after.starts_with('/') {
        Ok((home.to_string_lossy().into_owned(), after))
    } else {
        Err(ExpandError::TildeUser(text.to_owned()))
    }
}

fn scan(text: &str, lookup: &mut dyn FnMut(&str) -> Option<String>) -> Result<String, ExpandError> {
    let mut output = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(index) = rest.find(['{', '}']) {
        output.push_str(&rest[..index]);
        let tail = &rest[index..];
        if tail.starts_with('}') {
            return Err(ExpandError::StrayBrace('}'));
        }
        let Some(close) = tail.find('}') else {
            return Err(ExpandError::UnterminatedToken(tail.to_owned()));
        };
        let name = &tail[1..close];
        if name.contains('{') {
            return Err(ExpandError::StrayBrace('{'));
        }
        match lookup(name) {
            Some(value) if TOKEN_NAMES.contains(&name) => output.push_str(&value),
            _ => return Err(ExpandError::UnknownToken(format!("{{{name}}}"))),
        }
        rest = &tail[close + 1..];
    }
    output.push_str(rest);
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> TokenValues {
        TokenValues {
            profile_name: "claude".into(),
            profile_dir: "/data/claude".into(),
            domain_hash: "0123456789ab".into(),
            domain_dir: "/data/domains/0123456789ab".into(),
            workspace_dir: "/home/u/project".into(),
        }
    }

    #[test]
    fn expands_each_token() {
        let home = Path::new("/home/u");
        let cases = [
            ("{profile_dir}/cache", "/data/claude/cache"),
            ("/x/{profile_name}-{domain_hash}", "/x/claude-0123456789ab"),
            ("{domain_dir}", "/data/domains/0123456789ab"),
            ("{workspace_dir}/sub", "/home/u/project/sub"),
            ("~/notes", "/home/u/notes"),
            ("~", "/home/u"),
            ("some/path/~", "some/path/~"),
            ("/a~b", "/a~b"),
        ];
        for (input, expected) in cases {
            assert_eq!(expand(input, &values(), Some(home)).as_deref(), Ok(expected), "{input}");
        }
    }

    #[test]
    fn rejects_unknown_and_malformed_tokens() {
        let home = Path::new("/home/u");
        let cases = [
            ("{nope}", ExpandError::UnknownToken("{nope}".into())),
            ("{}", ExpandError::UnknownToken("{}".into())),
            ("{HOME}", ExpandError::UnknownToken("{HOME}".into())),
            ("/a/{profile_dir", ExpandError::UnterminatedToken("{profile_dir".into())),
            ("/a}", ExpandError::StrayBrace('}')),
            ("{{profile_dir}}", ExpandError::StrayBrace('{')),
            ("~root/x", ExpandError::TildeUser("~root/x".into())),
        ];
        for (input, expected) in cases {
            assert_eq!(expand(input, &values(), Some(home)), Err(expected.clone()), "{input}");
        }
        assert!(check_tokens("{nope}").is_err());
        assert!(check_tokens("{domain_dir}/x").is_ok());
    }

    #[test]
    fn home_is_not_rescanned() {
        let expanded = expand("~/x", &values(), Some(Path::new("/weird/{nope}")));
        assert_eq!(expanded.as_deref(), Ok("/weird/{nope}/x"));
    }
}
