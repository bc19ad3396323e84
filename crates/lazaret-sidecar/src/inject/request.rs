//! A client's request, checked and read whole before anything goes to the
//! origin: only `METHODS` (any other is refused before its body is read), a
//! path, HTTP/1.1 or 1.0, no upgrade, a body of at most `MAX_REQUEST_BODY`
//! held against the endpoints' shared `BODY_BUDGET`; and [`upstream_head`],
//! the head the origin gets, whose `Host` and credential come from the
//! configuration, never from the request.

use std::io::{self, BufRead, Read, Write};
use std::sync::atomic::Ordering;

use super::http::{is_token_byte, read_chunk_size, Head, Problem, HOP_BY_HOP};
use super::{Context, Target, BODY_BUDGET, MAX_HEAD, MAX_REQUEST_BODY, METHODS, METHOD_OVERRIDES};

/// A request as the sidecar forwards it.
pub(super) struct Request {
    pub(super) method: String,
    pub(super) target: String,
    /// HTTP/1.1 (else 1.0: one request per connection).
    pub(super) version_11: bool,
    pub(super) head: Head,
    pub(super) body: Vec<u8>,
    /// The client asked to close after this request.
    pub(super) close: bool,
    /// The request framed a body (`content-length` or chunked), even an
    /// empty one: the origin gets a `content-length` then.
    pub(super) framed: bool,
}

/// Bytes of request bodies counted against [`BODY_BUDGET`] while held.
pub(super) struct BodyBudget<'a> {
    pub(super) context: &'a Context,
    pub(super) held: usize,
}

impl BodyBudget<'_> {
    fn take(&mut self, bytes: usize) -> Result<(), Problem> {
        let before = self.context.bodies.fetch_add(bytes, Ordering::SeqCst);
        self.held += bytes;
        if before + bytes > BODY_BUDGET {
            return Err(Problem::new(503, "too many large requests at once; try again"));
        }
        Ok(())
    }
}

impl Drop for BodyBudget<'_> {
    fn drop(&mut self) {
        self.context.bodies.fetch_sub(self.held, Ordering::SeqCst);
    }
}

/// Checks a request head and reads its body.
pub(super) fn read_request(
    head: Head,
    client: &mut impl BufRead,
    out: &mut impl Write,
    budget: &mut BodyBudget<'_>,
) -> Result<Request, Problem> {
    let mut parts = head.first.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(Problem::new(400, "a request line is METHOD PATH HTTP/1.1"));
    };
    let version_11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        other => return Err(Problem::new(400, format!("{other:?}: only HTTP/1.1 and 1.0 are served"))),
    };
    if method.is_empty() || !method.bytes().all(is_token_byte) {
        return Err(Problem::new(400, "a request line is METHOD PATH HTTP/1.1, the method a token"));
    }
    // Before anything else is read: the request goes nowhere.
    if !METHODS.contains(&method) {
        return Err(Problem::new(
            405,
            format!("{method} is not a method this endpoint forwards: only {} go to the origin", METHODS.join(", ")),
        ));
    }
    if !target.starts_with('/') {
        return Err(Problem::new(400, "give a path (/v1/...): this endpoint forwards to its one origin, never elsewhere"));
    }
    if head.values("upgrade").next().is_some() {
        return Err(Problem::new(501, "protocol upgrades (WebSocket, h2c) do not go through a credential endpoint"));
    }
    let connection = head.tokens("connection");
    let close = !version_11 || connection.iter().any(|token| token == "close");
    let chunked = match head.tokens("transfer-encoding").as_slice() {
        [] => false,
        [only] if only == "chunked" => true,
        other => return Err(Problem::new(501, format!("transfer-encoding {other:?}: only chunked is taken"))),
    };
    let length = head.content_length().map_err(|message| Problem::new(400, message))?;
    if chunked && length.is_some() {
        return Err(Problem::new(400, "both content-length and transfer-encoding"));
    }
    let too_large = || Problem::new(413, format!("the request body is over {MAX_REQUEST_BODY} bytes"));
    // Refused before the client is told to send it.
    if length.is_some_and(|length| length > MAX_REQUEST_BODY as u64) {
        return Err(too_large());
    }
    let expects_body = chunked || length.is_some_and(|length| length > 0);
    if expects_body && head.tokens("expect").iter().any(|token| token == "100-continue") {
        out.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").map_err(|error| Problem::new(400, error.to_string()))?;
    }
    let mut body = Vec::new();
    let cut = |error: io::Error| Problem::new(400, format!("reading the request body: {error}"));
    if let Some(length) = length {
        let length = usize::try_from(length).ok().filter(|length| *length <= MAX_REQUEST_BODY).ok_or_else(too_large)?;
        budget.take(length)?;
        body.resize(length, 0);
        client.read_exact(&mut body).map_err(cut)?;
    } else if chunked {
        loop {
            let size = read_chunk_size(client).map_err(|message| Problem::new(400, message))?;
            if size == 0 {
                // Trailers are read and dropped.
                loop {
                    let mut line = Vec::new();
                    client.by_ref().take(MAX_HEAD as u64).read_until(b'\n', &mut line).map_err(cut)?;
                    if line.is_empty() || line == b"\r\n" || line == b"\n" {
                        break;
                    }
                }
                break;
            }
            let size = usize::try_from(size).ok().filter(|size| body.len() + size <= MAX_REQUEST_BODY).ok_or_else(too_large)?;
            budget.take(size)?;
            let start = body.len();
            body.resize(start + size, 0);
            client.read_exact(&mut body[start..]).map_err(cut)?;
            let mut crlf = [0u8; 2];
            client.read_exact(&mut crlf).map_err(cut)?;
            if &crlf != b"\r\n" {
                return Err(Problem::new(400, "a chunk not followed by CRLF"));
            }
        }
    }
    let framed = chunked || length.is_some();
    Ok(Request { method: method.to_owned(), target: target.to_owned(), version_11, head, body, close, framed })
}

/// The head the origin gets: the request's own headers but for the
/// hop-by-hop ones, those the connection names, `Host`, the framing, the
/// method overrides, `Range` and `If-Range`, `Accept-Encoding` and every
/// copy of the credential's header; then `Host`, `accept-encoding:
/// identity` (the answer is searched for the key: its plain bytes), the
/// credential and the body's length.
pub(super) fn upstream_head(request: &Request, target: &Target) -> Vec<u8> {
    let named = request.head.tokens("connection");
    let mut head = format!("{} {} HTTP/1.1\r\nhost: {}\r\n", request.method, request.target, target.origin.authority()).into_bytes();
    for (name, value) in &request.head.headers {
        let dropped = HOP_BY_HOP.contains(&name.as_str())
            || named.contains(name)
            || matches!(
                name.as_str(),
                "host"
                    | "content-length"
                    | "transfer-encoding"
                    | "expect"
                    | "proxy-authorization"
                    | "accept-encoding"
                    | "range"
                    | "if-range"
            )
            || METHOD_OVERRIDES.contains(&name.as_str())
            || *name == target.header;
        if !dropped {
            head.extend_from_slice(name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value);
            head.extend_from_slice(b"\r\n");
        }
    }
    head.extend_from_slice(b"accept-encoding: identity\r\n");
    head.extend_from_slice(format!("{}: {}\r\n", target.header, target.value.expose()).as_bytes());
    if request.framed {
        head.extend_from_slice(format!("content-length: {}\r\n", request.body.len()).as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    head
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::http::read_head;
    use crate::inject::tests::{request, target};
    use lazaret_protocol::sidecar::Secret;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    #[test]
    fn the_origin_gets_the_configured_host_and_credential_and_no_copy_of_the_agents() {
        let target = target("x-api-key");
        let request = request(
            "POST /v1/messages?beta=true HTTP/1.1\r\nHost: attacker.test\r\nX-API-KEY: sk-fake\r\nx-api-key: sk-fake2\r\n\
             Connection: keep-alive, x-drop-me\r\nx-drop-me: 1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\
             Proxy-Authorization: Basic abc\r\nanthropic-version: 2023-06-01\r\nContent-Type: application/json\r\n\r\n",
            b"{}",
        );
        let sent = String::from_utf8(upstream_head(&request, &target)).unwrap();
        assert_eq!(
            sent,
            "POST /v1/messages?beta=true HTTP/1.1\r\nhost: api.example.test\r\nanthropic-version: 2023-06-01\r\n\
             content-type: application/json\r\naccept-encoding: identity\r\nx-api-key: sk-real\r\ncontent-length: 2\r\n\r\n"
        );
        let bearer = Target { value: Secret::new("Bearer sk-real".into()), ..self::target("authorization") };
        let sent =
            String::from_utf8(upstream_head(&self::request("GET /v1/models HTTP/1.1\r\nAuthorization: Bearer x\r\n\r\n", b""), &bearer))
                .unwrap();
        assert_eq!(
            sent,
            "GET /v1/models HTTP/1.1\r\nhost: api.example.test\r\naccept-encoding: identity\r\nauthorization: Bearer sk-real\r\n\r\n"
        );
    }

    #[test]
    fn no_override_range_or_encoding_of_the_agents_reaches_the_origin() {
        let target = target("x-api-key");
        let request = request(
            "POST /anything HTTP/1.1\r\nX-HTTP-Method-Override: TRACE\r\nX-HTTP-Method: TRACE\r\nX-Method-Override: TRACE\r\n\
             Accept-Encoding: gzip, br\r\nRange: bytes=10-20\r\nIf-Range: \"x\"\r\naccept: */*\r\n\r\n",
            b"",
        );
        let sent = String::from_utf8(upstream_head(&request, &target)).unwrap();
        assert_eq!(
            sent,
            "POST /anything HTTP/1.1\r\nhost: api.example.test\r\naccept: */*\r\naccept-encoding: identity\r\nx-api-key: sk-real\r\n\r\n"
        );
    }

    /// `read_request` on `text`, the body still unread in the stream after it.
    fn read(text: &str) -> (Result<Request, Problem>, Vec<u8>) {
        let context = Context { emit: Arc::new(|_| {}), bodies: AtomicUsize::new(0) };
        let mut budget = BodyBudget { context: &context, held: 0 };
        let mut stream = text.as_bytes();
        let head = match read_head(&mut stream) {
            Ok(Some(Ok(head))) => head,
            other => panic!("{text:?}: {other:?}"),
        };
        let mut out = Vec::new();
        let result = read_request(head, &mut stream, &mut out, &mut budget);
        (result, stream.to_vec())
    }

    #[test]
    fn only_the_methods_an_api_uses_are_forwarded() {
        for method in METHODS {
            let (result, _) = read(&format!("{method} /v1/x HTTP/1.1\r\ncontent-length: 2\r\n\r\n{{}}"));
            assert_eq!(result.map(|request| (request.method, request.body)).ok(), Some((method.to_owned(), b"{}".to_vec())), "{method}");
        }
        for method in ["TRACE", "TRACK", "CONNECT", "PROPFIND", "DEBUG", "get", "Post", "M-SEARCH", "X"] {
            let (result, unread) = read(&format!("{method} /v1/x HTTP/1.1\r\ncontent-length: 5\r\n\r\nhello"));
            let Err(problem) = result else { panic!("{method} was taken") };
            assert_eq!(problem.status, 405, "{method}: {problem:?}");
            assert!(problem.message.starts_with(&format!("{method} is not a method this endpoint forwards")), "{problem:?}");
            // Refused before its body was read: nothing of it goes anywhere.
            assert_eq!(unread, b"hello", "{method}");
            let mut answer = Vec::new();
            problem.write(&mut answer).unwrap();
            let answer = String::from_utf8(answer).unwrap();
            assert!(
                answer.starts_with("HTTP/1.1 405 Method Not Allowed\r\nallow: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS\r\n"),
                "{answer}"
            );
            assert!(answer.contains("connection: close\r\n"), "{answer}");
        }
        for bad in ["GE(T", "GET\"", "G/T"] {
            let (result, _) = read(&format!("{bad} /v1/x HTTP/1.1\r\n\r\n"));
            assert!(matches!(result, Err(Problem { status: 400, .. })), "{bad}");
        }
    }
}
