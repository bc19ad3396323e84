//! Container image references: just enough parsing to tell whether an image
//! is pinned (by digest or by a tag other than `latest`).

/// How an image reference is pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pinning {
    Digest,
    Tag(String),
    Latest,
    Unpinned,
}

/// Validates the reference's shape; returns how it is pinned.
pub fn pinning(reference: &str) -> Result<Pinning, String> {
    if reference.is_empty() || reference.chars().any(|c| c.is_whitespace() || c.is_control()) || reference.starts_with('-') {
        return Err(format!("`{reference}` is not a valid image reference"));
    }
    if let Some((_, digest)) = reference.split_once('@') {
        let valid = digest.strip_prefix("sha256:").is_some_and(|hex| hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()));
        return if valid {
            Ok(Pinning::Digest)
        } else {
            Err(format!("`{reference}` has a malformed digest (expected @sha256:<64 hex digits>)"))
        };
    }
    let last_component = reference.rsplit('/').next().unwrap_or(reference);
    match last_component.split_once(':') {
        Some((_, "latest")) => Ok(Pinning::Latest),
        Some((_, "")) => Err(format!("`{reference}` has an empty tag")),
        Some((_, tag)) => Ok(Pinning::Tag(tag.to_owned())),
        None => Ok(Pinning::Unpinned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_references() {
        assert_eq!(pinning("debian:12"), Ok(Pinning::Tag("12".into())));
        assert_eq!(pinning("localhost:5000/img"), Ok(Pinning::Unpinned));
        assert_eq!(pinning("localhost:5000/img:1.2"), Ok(Pinning::Tag("1.2".into())));
        assert_eq!(pinning("img:latest"), Ok(Pinning::Latest));
        assert_eq!(pinning(&format!("img@sha256:{}", "a".repeat(64))), Ok(Pinning::Digest));
        assert!(pinning("img@sha256:abc").is_err());
        assert!(pinning("bad image").is_err());
        assert!(pinning("").is_err());
    }
}
