//! HTTP/1.1 as the credential endpoints read and write it, in both
//! directions: a head ([`Head`]: read strictly, at most `MAX_HEAD` bytes and
//! `MAX_HEADERS` headers), a chunk-size line, the hop-by-hop headers never
//! passed on, and [`Problem`], an answer the sidecar gives itself (the
//! connection closes after it). Nothing here knows the credential.

use std::io::{self, BufRead, Read, Write};

use super::{MAX_CHUNK_LINE, MAX_HEAD, MAX_HEADERS, METHODS};

/// An error the sidecar answers itself, with `lazaret:` and the reason as
/// the body; the connection closes after it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Problem {
    pub(super) status: u16,
    pub(super) message: String,
}

impl Problem {
    pub(super) fn new(status: u16, message: impl Into<String>) -> Problem {
        Problem { status, message: message.into() }
    }

    pub(super) fn write(&self, out: &mut impl Write) -> io::Result<()> {
        let body = format!("lazaret: {}\n", self.message);
        let reason = match self.status {
            400 => "Bad Request",
            405 => "Method Not Allowed",
            413 => "Content Too Large",
            431 => "Request Header Fields Too Large",
            501 => "Not Implemented",
            502 => "Bad Gateway",
            503 => "Service Unavailable",
            504 => "Gateway Timeout",
            _ => "Error",
        };
        let allow = if self.status == 405 { format!("allow: {}\r\n", METHODS.join(", ")) } else { String::new() };
        write!(
            out,
            "HTTP/1.1 {} {reason}\r\n{allow}content-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            self.status,
            body.len()
        )?;
        out.flush()
    }
}

/// A request or response head: its first line and its headers (names in
/// lower case, values as sent).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Head {
    pub(super) first: String,
    pub(super) headers: Vec<(String, Vec<u8>)>,
}

impl Head {
    pub(super) fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers.iter().filter(move |(key, _)| key == name).map(|(_, value)| value.as_slice())
    }

    /// The comma-separated tokens of every `name` header, in lower case.
    pub(super) fn tokens(&self, name: &str) -> Vec<String> {
        self.values(name)
            .flat_map(|value| String::from_utf8_lossy(value).split(',').map(|token| token.trim().to_ascii_lowercase()).collect::<Vec<_>>())
            .filter(|token| !token.is_empty())
            .collect()
    }

    /// The head as text: its first line and every header, `name: value`,
    /// each line ending in CRLF.
    pub(super) fn text(&self) -> Vec<u8> {
        let mut text = format!("{}\r\n", self.first).into_bytes();
        for (name, value) in &self.headers {
            text.extend_from_slice(name.as_bytes());
            text.extend_from_slice(b": ");
            text.extend_from_slice(value);
            text.extend_from_slice(b"\r\n");
        }
        text
    }

    /// The one `content-length` (copies must agree), if any.
    pub(super) fn content_length(&self) -> Result<Option<u64>, String> {
        let mut length = None;
        for value in self.values("content-length") {
            let text = std::str::from_utf8(value).unwrap_or("").trim();
            if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) || text.len() > 19 {
                return Err(format!("content-length {:?} is not a number", String::from_utf8_lossy(value)));
            }
            let parsed: u64 = text.parse().map_err(|_| format!("content-length {text} is not a number"))?;
            if length.is_some_and(|known| known != parsed) {
                return Err("two different content-length headers".into());
            }
            length = Some(parsed);
        }
        Ok(length)
    }
}

/// Reads one head (lines up to an empty one): `None` at the end of the
/// stream before any byte of it.
pub(super) fn read_head(reader: &mut impl BufRead) -> io::Result<Option<Result<Head, Problem>>> {
    let mut text = Vec::new();
    loop {
        let mut line = Vec::new();
        let room = MAX_HEAD.saturating_sub(text.len()) as u64 + 1;
        let read = reader.by_ref().take(room).read_until(b'\n', &mut line)?;
        if read == 0 {
            if text.is_empty() {
                return Ok(None);
            }
            return Ok(Some(Err(Problem::new(400, "the connection ended inside a head"))));
        }
        if line.last() != Some(&b'\n') || text.len() + line.len() > MAX_HEAD {
            return Ok(Some(Err(Problem::new(431, format!("a head of more than {MAX_HEAD} bytes")))));
        }
        let blank = line == b"\r\n" || line == b"\n";
        if blank && text.is_empty() {
            continue;
        }
        if blank {
            return Ok(Some(parse_head(&text)));
        }
        text.extend_from_slice(&line);
    }
}

fn parse_head(text: &[u8]) -> Result<Head, Problem> {
    let bad = |message: String| Problem::new(400, message);
    let mut lines = text.split(|b| *b == b'\n').map(|line| line.strip_suffix(b"\r").unwrap_or(line)).filter(|line| !line.is_empty());
    let first = lines.next().ok_or_else(|| bad("an empty head".into()))?;
    if !first.iter().all(|b| *b == b' ' || b.is_ascii_graphic()) {
        return Err(bad("the first line has a control or non-ASCII character".into()));
    }
    let first = String::from_utf8_lossy(first).into_owned();
    let mut headers = Vec::new();
    for line in lines {
        if headers.len() == MAX_HEADERS {
            return Err(Problem::new(431, format!("more than {MAX_HEADERS} headers")));
        }
        if line.starts_with(b" ") || line.starts_with(b"\t") {
            return Err(bad("a folded header line".into()));
        }
        let colon = line.iter().position(|b| *b == b':').ok_or_else(|| bad("a header line without a colon".into()))?;
        let name = &line[..colon];
        if name.is_empty() || !name.iter().copied().all(is_token_byte) {
            return Err(bad(format!("{:?} is not a header name", String::from_utf8_lossy(name))));
        }
        let value = line[colon + 1..].trim_ascii();
        if value.iter().any(|b| (*b < 0x20 && *b != b'\t') || *b == 0x7f) {
            return Err(bad("a header value with a control character".into()));
        }
        headers.push((String::from_utf8_lossy(name).to_ascii_lowercase(), value.to_vec()));
    }
    Ok(Head { first, headers })
}

/// A byte of an HTTP token (a method, a header name).
pub(super) fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// Headers that belong to one connection or that the sidecar writes itself:
/// never passed on in either direction.
pub(super) const HOP_BY_HOP: [&str; 7] = ["connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade", "proxy-authenticate"];

/// A chunk-size line's size (extensions ignored).
pub(super) fn read_chunk_size(reader: &mut impl BufRead) -> Result<u64, String> {
    let mut line = Vec::new();
    reader.by_ref().take(MAX_CHUNK_LINE).read_until(b'\n', &mut line).map_err(|error| error.to_string())?;
    if line.last() != Some(&b'\n') {
        return Err("a chunk-size line that does not end".into());
    }
    let text = String::from_utf8_lossy(&line);
    let size = text.trim_end().split(';').next().unwrap_or("").trim();
    if size.is_empty() || size.len() > 15 {
        return Err(format!("chunk size {size:?}"));
    }
    u64::from_str_radix(size, 16).map_err(|_| format!("chunk size {size:?} is not hexadecimal"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::tests::head;

    #[test]
    fn heads_are_read_strictly_and_bounded() {
        let read = head("\r\nPOST /v1/messages HTTP/1.1\r\nHost: evil.test\r\nX-Api-Key:  sk-fake \r\n\r\nbody");
        assert_eq!(read.first, "POST /v1/messages HTTP/1.1");
        assert_eq!(read.headers, vec![("host".into(), b"evil.test".to_vec()), ("x-api-key".into(), b"sk-fake".to_vec())]);
        assert!(read_head(&mut &b""[..]).unwrap().is_none());
        for (bad, status) in [
            ("GET / HTTP/1.1\r\nx-a: 1\r\n", 400),
            ("GET / HTTP/1.1\r\n folded\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nno colon\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nbad name: 1\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nx: a\rb\r\n\r\n", 400),
            ("GET /a\rb HTTP/1.1\r\n\r\n", 400),
            ("GET /\x00 HTTP/1.1\r\n\r\n", 400),
        ] {
            match read_head(&mut bad.as_bytes()) {
                Ok(Some(Err(problem))) => assert_eq!(problem.status, status, "{bad:?}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        let long = format!("GET / HTTP/1.1\r\nx: {}\r\n\r\n", "a".repeat(MAX_HEAD));
        assert!(matches!(read_head(&mut long.as_bytes()), Ok(Some(Err(Problem { status: 431, .. })))));
        let many = format!("GET / HTTP/1.1\r\n{}\r\n", "x: 1\r\n".repeat(MAX_HEADERS + 1));
        assert!(matches!(read_head(&mut many.as_bytes()), Ok(Some(Err(Problem { status: 431, .. })))));
    }

    #[test]
    fn chunk_sizes_are_hexadecimal_and_bounded() {
        assert_eq!(read_chunk_size(&mut &b"1a;ext=1\r\n"[..]), Ok(26));
        assert_eq!(read_chunk_size(&mut &b"0\r\n"[..]), Ok(0));
        for bad in [&b"\r\n"[..], b"zz\r\n", b"10", b"ffffffffffffffff\r\n"] {
            assert!(read_chunk_size(&mut &bad[..]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_problem_is_a_complete_closing_response() {
        let mut out = Vec::new();
        Problem::new(413, "the request body is over 5 bytes").write(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 413 Content Too Large\r\n"), "{text}");
        assert!(text.contains("connection: close\r\n") && text.ends_with("\r\n\r\nlazaret: the request body is over 5 bytes\n"), "{text}");
        let body = text.split("\r\n\r\n").nth(1).unwrap();
        assert!(text.contains(&format!("content-length: {}\r\n", body.len())), "{text}");
    }
}
