//! The header of a git bundle written by the agent (untrusted input): which
//! commits it assumes the receiver has, which refs it carries, and where the
//! pack data starts. The host parses it itself so that it decides what a
//! bundle may carry before any git touches the data (DECISIONS D13).
//!
//! Format (git's `gitformat-bundle`): `# v2 git bundle` or `# v3 git bundle`,
//! then (v3 only) capability lines `@key=value`, prerequisite lines
//! `-<oid> <comment>`, reference lines `<oid> <refname>`, an empty line, and
//! a pack starting with `PACK`.

/// A parsed bundle header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleHeader {
    /// Commits the receiver must already have (object ids, lower-case hex).
    pub prerequisites: Vec<String>,
    /// `(object id, refname)` in the order written.
    pub refs: Vec<(String, String)>,
    /// Byte offset of the pack data.
    pub pack_offset: usize,
}

/// Why a bundle was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    #[error("not a git bundle (no `# v2 git bundle` or `# v3 git bundle` line)")]
    Signature,
    #[error("the bundle header has no end (no empty line before the pack)")]
    Unterminated,
    #[error("the bundle header has more than {MAX_HEADER_LINES} lines")]
    TooManyLines,
    #[error("line {line} of the bundle header is not valid: {reason}")]
    Line { line: usize, reason: String },
    #[error("the bundle carries no pack data")]
    NoPack,
}

/// Header lines a bundle of one branch can need: a few prerequisites and refs.
pub const MAX_HEADER_LINES: usize = 4096;
const MAX_LINE: usize = 4096;

impl BundleHeader {
    pub fn parse(bytes: &[u8]) -> Result<BundleHeader, BundleError> {
        let version3 = if bytes.starts_with(b"# v2 git bundle\n") {
            false
        } else if bytes.starts_with(b"# v3 git bundle\n") {
            true
        } else {
            return Err(BundleError::Signature);
        };
        let mut offset = "# v2 git bundle\n".len();
        let mut header = BundleHeader { prerequisites: Vec::new(), refs: Vec::new(), pack_offset: 0 };
        let mut seen_prerequisite_or_ref = false;
        for number in 2.. {
            if number > MAX_HEADER_LINES {
                return Err(BundleError::TooManyLines);
            }
            let rest = &bytes[offset..];
            let window = &rest[..rest.len().min(MAX_LINE + 1)];
            let Some(end) = window.iter().position(|&byte| byte == b'\n') else {
                return Err(if window.len() > MAX_LINE {
                    BundleError::Line { line: number, reason: format!("longer than {MAX_LINE} bytes") }
                } else {
                    BundleError::Unterminated
                });
            };
            let line = &rest[..end];
            offset += end + 1;
            let bad = |reason: &str| BundleError::Line { line: number, reason: reason.to_owned() };
            if line.is_empty() {
                break;
            }
            let line = std::str::from_utf8(line).map_err(|_| bad("not UTF-8"))?;
            if let Some(capability) = line.strip_prefix('@') {
                if !version3 || seen_prerequisite_or_ref {
                    return Err(bad("a capability outside a v3 header's start"));
                }
                // Only full SHA-1 bundles: a filter would make a partial one.
                if capability != "object-format=sha1" {
                    return Err(bad(&format!("unsupported capability @{capability}")));
                }
                continue;
            }
            seen_prerequisite_or_ref = true;
            if let Some(prerequisite) = line.strip_prefix('-') {
                let oid = prerequisite.split(' ').next().unwrap_or("");
                check_oid(oid).map_err(|reason| bad(&reason))?;
                header.prerequisites.push(oid.to_owned());
            } else {
                let (oid, name) = line.split_once(' ').ok_or_else(|| bad("a reference line is `<oid> <refname>`"))?;
                check_oid(oid).map_err(|reason| bad(&reason))?;
                check_refname(name).map_err(|reason| bad(&reason))?;
                header.refs.push((oid.to_owned(), name.to_owned()));
            }
        }
        if !bytes[offset..].starts_with(b"PACK") {
            return Err(BundleError::NoPack);
        }
        header.pack_offset = offset;
        Ok(header)
    }
}

impl BundleHeader {
    /// Reads just the header from the start of `reader` (the pack stays
    /// unread but for its 4-byte signature) and parses it: the same answer as
    /// [`BundleHeader::parse`] on the whole bundle, with at most
    /// `MAX_HEADER_LINES` lines of `MAX_LINE` bytes held in memory.
    pub fn read(reader: &mut impl std::io::BufRead) -> std::io::Result<Result<BundleHeader, BundleError>> {
        use std::io::{BufRead, Read};
        let mut prefix = Vec::new();
        for _ in 0..MAX_HEADER_LINES {
            let start = prefix.len();
            // One byte more than a line may have, so an overlong line is seen as such.
            let read = reader.by_ref().take(MAX_LINE as u64 + 2).read_until(b'\n', &mut prefix)?;
            let line = &prefix[start..];
            if read == 0 || line.last() != Some(&b'\n') || line == b"\n" {
                break;
            }
        }
        let mut signature = Vec::with_capacity(4);
        reader.by_ref().take(4).read_to_end(&mut signature)?;
        prefix.extend_from_slice(&signature);
        Ok(BundleHeader::parse(&prefix))
    }
}

fn check_oid(oid: &str) -> Result<(), String> {
    if oid.len() == 40 && oid.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(())
    } else {
        Err(format!("{oid:?} is not a lower-case 40-digit object id"))
    }
}

/// A conservative subset of git's refname rules: `refs/...`, no `..`, no
/// control characters, spaces or the characters git forbids.
fn check_refname(name: &str) -> Result<(), String> {
    let forbidden = |c: char| c.is_control() || matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\');
    let valid = name.starts_with("refs/")
        && !name.contains("..")
        && !name.contains("@{")
        && !name.contains("//")
        && !name.ends_with('/')
        && !name.ends_with('.')
        && !name.ends_with(".lock")
        && !name.chars().any(forbidden)
        && name.split('/').all(|component| !component.is_empty() && !component.starts_with('.'));
    if valid {
        Ok(())
    } else {
        Err(format!("{name:?} is not a valid refname"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "1111111111111111111111111111111111111111";
    const B: &str = "2222222222222222222222222222222222222222";

    #[test]
    fn a_v2_bundle_of_one_branch_with_a_prerequisite() {
        let bytes = format!("# v2 git bundle\n-{A} initial\n{B} refs/heads/lazaret/agent-default\n\nPACK\0\0\0\x02");
        let header = BundleHeader::parse(bytes.as_bytes()).expect("parse");
        assert_eq!(header.prerequisites, vec![A.to_owned()]);
        assert_eq!(header.refs, vec![(B.to_owned(), "refs/heads/lazaret/agent-default".to_owned())]);
        assert_eq!(&bytes.as_bytes()[header.pack_offset..header.pack_offset + 4], b"PACK");
    }

    #[test]
    fn a_v3_bundle_takes_only_the_sha1_capability() {
        let ok = format!("# v3 git bundle\n@object-format=sha1\n{B} refs/heads/x\n\nPACK");
        assert!(BundleHeader::parse(ok.as_bytes()).is_ok());
        let filtered = format!("# v3 git bundle\n@filter=blob:none\n{B} refs/heads/x\n\nPACK");
        assert!(matches!(BundleHeader::parse(filtered.as_bytes()), Err(BundleError::Line { line: 2, .. })));
        let late = format!("# v3 git bundle\n{B} refs/heads/x\n@object-format=sha1\n\nPACK");
        assert!(BundleHeader::parse(late.as_bytes()).is_err());
        let in_v2 = format!("# v2 git bundle\n@object-format=sha1\n{B} refs/heads/x\n\nPACK");
        assert!(BundleHeader::parse(in_v2.as_bytes()).is_err());
    }

    #[test]
    fn malformed_headers_are_refused_with_the_line() {
        for (text, line) in [
            (format!("# v2 git bundle\n{B}refs/heads/x\n\nPACK"), 2),
            ("# v2 git bundle\nABCDEF0123456789ABCDEF0123456789ABCDEF01 refs/heads/x\n\nPACK".to_owned(), 2),
            (format!("# v2 git bundle\n{B} HEAD\n\nPACK"), 2),
            (format!("# v2 git bundle\n{B} refs/heads/../x\n\nPACK"), 2),
            (format!("# v2 git bundle\n{B} refs/heads/x\x1b[2K\n\nPACK"), 2),
            (format!("# v2 git bundle\n-{A}\n{B} refs/heads/a b\n\nPACK"), 3),
            ("# v2 git bundle\n-xyz c\n\nPACK".to_owned(), 2),
        ] {
            match BundleHeader::parse(text.as_bytes()) {
                Err(BundleError::Line { line: got, .. }) => assert_eq!(got, line, "{text:?}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
        assert_eq!(BundleHeader::parse(b"# v4 git bundle\n"), Err(BundleError::Signature));
        assert_eq!(BundleHeader::parse(format!("# v2 git bundle\n{B} refs/heads/x\n").as_bytes()), Err(BundleError::Unterminated));
        assert_eq!(BundleHeader::parse(format!("# v2 git bundle\n{B} refs/heads/x\n\nNOPE").as_bytes()), Err(BundleError::NoPack));
        let long = format!("# v2 git bundle\n{B} refs/heads/{}\n\nPACK", "a".repeat(5000));
        assert!(matches!(BundleHeader::parse(long.as_bytes()), Err(BundleError::Line { .. })));
    }

    #[test]
    fn reading_the_header_from_a_stream_agrees_with_parsing_the_whole_bundle() {
        let long = format!("# v2 git bundle\n{B} refs/heads/{}\n\nPACK", "a".repeat(5000));
        let many = format!("# v2 git bundle\n{}\nPACK", format!("-{A} c\n").repeat(MAX_HEADER_LINES + 1));
        for text in [
            format!("# v2 git bundle\n-{A} initial\n{B} refs/heads/lazaret/agent-default\n\nPACK\0\0\0\x02 and a pack"),
            format!("# v3 git bundle\n@object-format=sha1\n{B} refs/heads/x\n\nPACK"),
            format!("# v2 git bundle\n{B} refs/heads/x\n"),
            format!("# v2 git bundle\n{B} refs/heads/x\n\nNOPE"),
            format!("# v2 git bundle\n{B} refs/heads/x\n\nPA"),
            "# v4 git bundle\n".to_owned(),
            String::new(),
            long,
            many,
        ] {
            let mut reader = std::io::BufReader::with_capacity(7, text.as_bytes());
            let streamed = BundleHeader::read(&mut reader).expect("read");
            assert_eq!(streamed, BundleHeader::parse(text.as_bytes()), "{:?}", &text[..text.len().min(80)]);
        }
    }
}
