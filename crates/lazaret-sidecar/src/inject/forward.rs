//! One exchange with the origin: the request sent (on a kept connection,
//! again on a fresh one if the kept one closed before answering), the
//! answer's head searched for the key and passed back, and its body
//! streamed back as it arrives through the key search, in its framing
//! (a length, chunked, until the origin closes). An answer whose body the
//! search cannot read (a content coding, a transfer coding other than
//! chunked) is refused; nothing of an answer reaches the client before the
//! search lets it through.

use std::io::{self, BufRead, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;

use lazaret_protocol::sidecar::{SidecarEvent, WithheldPart};

use super::http::{read_chunk_size, read_head, Head, Problem, HOP_BY_HOP};
use super::origin::{connect, put_pooled, take_pooled};
use super::request::{upstream_head, Request};
use super::search::{BodyScan, Needles, Scanned};
use super::{Context, Target, Tls, MAX_HEAD, MAX_RESPONSE_BODY};

/// What may carry on after a response.
pub(super) enum Reuse {
    /// The client connection may take another request.
    Both,
    /// The response ran to the origin's close: the client connection closes too.
    Neither,
}

pub(super) enum Failure {
    /// Nothing was sent to the client yet: answer with this.
    Answer(Problem),
    /// Part of the response went out: the client connection is cut.
    Cut(String),
    /// The origin's answer carried the credential in `part`: the head
    /// was not sent, or the body was cut before it.
    Withheld { status: Option<u16>, part: WithheldPart },
}

/// Sends one request to the origin (on a kept connection, again on a fresh
/// one if the kept one was closed before answering) and passes the answer back.
pub(super) fn forward(request: &Request, target: &Target, out: &mut TcpStream, context: &Context) -> Result<Reuse, Failure> {
    let head = upstream_head(request, target);
    let (mut upstream, response) = {
        let kept = take_pooled(target);
        let mut attempt = |mut upstream: Tls| -> Result<(Tls, Head), (bool, Failure)> {
            let sent = upstream
                .get_mut()
                .write_all(&head)
                .and_then(|()| upstream.get_mut().write_all(&request.body))
                .and_then(|()| upstream.get_mut().flush());
            if let Err(error) = sent {
                return Err((true, Failure::Answer(Problem::new(502, format!("sending to {}: {error}", target.origin)))));
            }
            let response = read_response_head(&mut upstream, request, &target.needles, out)?;
            Ok((upstream, response))
        };
        let first = match kept {
            Some(kept) => match attempt(kept) {
                Ok(done) => Some(done),
                Err((true, _)) => None,
                Err((false, failure)) => return Err(failure),
            },
            None => None,
        };
        match first {
            Some(done) => done,
            None => attempt(connect(target).map_err(Failure::Answer)?).map_err(|(_, failure)| failure)?,
        }
    };
    target.stats.bytes_sent.fetch_add(request.body.len() as u64, Ordering::Relaxed);
    let status =
        response_status(&response.first).ok_or_else(|| Failure::Answer(Problem::new(502, "the origin's status line is malformed")))?;
    target.stats.classes[usize::from(status / 100 - 1).min(4)].fetch_add(1, Ordering::Relaxed);
    if status == 401 || status == 403 {
        target.stats.rejected.fetch_add(1, Ordering::Relaxed);
        (context.emit)(SidecarEvent::CredentialRejected { origin: target.origin.to_string(), status, suppressed: None });
    }
    if target.needles.in_head(&response.text()) {
        return Err(Failure::Withheld { status: Some(status), part: WithheldPart::Head });
    }
    let framing = response_framing(&response, request, status).map_err(Failure::Answer)?;
    if !matches!(framing, Framing::None) {
        searchable(&response).map_err(Failure::Answer)?;
    }
    let origin_keeps = response.first.starts_with("HTTP/1.1 ") && !response.tokens("connection").iter().any(|token| token == "close");
    let client_keeps = request.version_11 && !request.close && !matches!(framing, Framing::UntilClose);
    let mut head = format!("{}\r\n", response.first).into_bytes();
    let named = response.tokens("connection");
    for (name, value) in &response.headers {
        if !HOP_BY_HOP.contains(&name.as_str()) && !named.contains(name) {
            head.extend_from_slice(name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value);
            head.extend_from_slice(b"\r\n");
        }
    }
    if !client_keeps {
        head.extend_from_slice(b"connection: close\r\n");
    }
    head.extend_from_slice(b"\r\n");
    out.write_all(&head).map_err(|error| Failure::Cut(format!("the client went: {error}")))?;
    let mut scan = BodyScan::new(&target.needles);
    let received = relay_body(&mut upstream, out, &framing, &mut scan).map_err(|error| match error {
        Relay::Failed(message) => Failure::Cut(message),
        Relay::Withheld => Failure::Withheld { status: Some(status), part: WithheldPart::Body },
    })?;
    target.stats.bytes_received.fetch_add(received, Ordering::Relaxed);
    if origin_keeps && !matches!(framing, Framing::UntilClose) {
        put_pooled(target, upstream);
    }
    Ok(if client_keeps { Reuse::Both } else { Reuse::Neither })
}

/// The status code of a status line `HTTP/1.x NNN reason`.
fn response_status(first: &str) -> Option<u16> {
    let mut parts = first.splitn(3, ' ');
    let version = parts.next()?;
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return None;
    }
    let code = parts.next()?;
    if code.len() != 3 {
        return None;
    }
    code.parse().ok().filter(|code| (100..600).contains(code))
}

/// Reads the origin's answer head; informational answers (1xx) go to the
/// client as they come (their status line alone), unless they carry the
/// credential. An error says whether a retry on a fresh connection is safe
/// (nothing at all came back).
fn read_response_head(upstream: &mut Tls, request: &Request, needles: &Needles, out: &mut TcpStream) -> Result<Head, (bool, Failure)> {
    let bad = |retry: bool, message: String| (retry, Failure::Answer(Problem::new(502, message)));
    let mut first = true;
    loop {
        let head = match read_head(upstream) {
            Ok(Some(Ok(head))) => head,
            Ok(Some(Err(problem))) => return Err(bad(false, format!("the origin's answer: {}", problem.message))),
            Ok(None) => return Err(bad(first, "the origin closed the connection without answering".into())),
            Err(error) => {
                let retry = first && !matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut);
                return Err(bad(retry, format!("reading the origin's answer: {error}")));
            }
        };
        first = false;
        match response_status(&head.first) {
            Some(101) => return Err(bad(false, "the origin switched protocols".into())),
            Some(status) if status < 200 && needles.in_head(&head.text()) => {
                return Err((false, Failure::Withheld { status: Some(status), part: WithheldPart::Head }));
            }
            Some(status) if status < 200 => {
                if request.version_11 {
                    let _ = out.write_all(format!("{}\r\n\r\n", head.first).as_bytes());
                }
            }
            _ => return Ok(head),
        }
    }
}

/// How a response body ends.
enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

fn response_framing(response: &Head, request: &Request, status: u16) -> Result<Framing, Problem> {
    if request.method == "HEAD" || status == 204 || status == 304 {
        return Ok(Framing::None);
    }
    let encodings = response.tokens("transfer-encoding");
    if !encodings.is_empty() {
        if encodings.last().map(String::as_str) == Some("chunked") {
            return Ok(Framing::Chunked);
        }
        return Ok(Framing::UntilClose);
    }
    match response.content_length().map_err(|message| Problem::new(502, format!("the origin's answer: {message}")))? {
        Some(length) if length > MAX_RESPONSE_BODY => {
            Err(Problem::new(502, format!("the origin's answer is {length} bytes, over {MAX_RESPONSE_BODY}")))
        }
        Some(length) => Ok(Framing::Length(length)),
        None => Ok(Framing::UntilClose),
    }
}

/// Whether the search for the credential can see the body's plain bytes:
/// no content coding but `identity`, no transfer coding but `chunked`.
/// (The head was searched already: nothing quoted here carries the key.)
fn searchable(response: &Head) -> Result<(), Problem> {
    let coded: Vec<String> = response.tokens("content-encoding").into_iter().filter(|token| token != "identity").collect();
    if !coded.is_empty() {
        return Err(Problem::new(
            502,
            format!(
                "the origin's answer has content-encoding {}, which the sidecar cannot search for the key \
                 (it asks the origin for identity); refused",
                coded.join(", ")
            ),
        ));
    }
    let transfer = response.tokens("transfer-encoding");
    if !transfer.is_empty() && transfer != ["chunked"] {
        return Err(Problem::new(
            502,
            format!("the origin's answer has transfer-encoding {}: only chunked can be searched for the key; refused", transfer.join(", ")),
        ));
    }
    Ok(())
}

/// How a relayed body ended early.
enum Relay {
    /// The origin or the client failed.
    Failed(String),
    /// The body carried the credential: cut before it.
    Withheld,
}

/// Passes a response body on as it arrives, through `scan`: each read is
/// written at once but for the bytes that could begin the credential
/// (chunked bodies are de-chunked for the search and sent again as one
/// chunk per read). The number of body bytes.
fn relay_body(upstream: &mut impl BufRead, out: &mut impl Write, framing: &Framing, scan: &mut BodyScan<'_>) -> Result<u64, Relay> {
    let origin = |error: io::Error| Relay::Failed(format!("reading the origin's answer: {error}"));
    let client = |error: io::Error| Relay::Failed(format!("the client went: {error}"));
    match framing {
        Framing::None => Ok(0),
        Framing::Length(length) => {
            pass(upstream, Some(*length), scan, &mut |bytes: &[u8]| out.write_all(bytes))?;
            out.write_all(scan.finish()).map_err(client)?;
            Ok(*length)
        }
        Framing::UntilClose => {
            let total = pass(upstream, None, scan, &mut |bytes: &[u8]| out.write_all(bytes))?;
            out.write_all(scan.finish()).map_err(client)?;
            Ok(total)
        }
        Framing::Chunked => {
            let mut total = 0u64;
            loop {
                let size = read_chunk_size(upstream).map_err(|message| Relay::Failed(format!("the origin's answer: {message}")))?;
                if size == 0 {
                    write_chunk(out, scan.finish()).map_err(client)?;
                    let mut trailers = Vec::new();
                    loop {
                        let room = (MAX_HEAD.saturating_sub(trailers.len()) + 1) as u64;
                        let start = trailers.len();
                        upstream.by_ref().take(room).read_until(b'\n', &mut trailers).map_err(origin)?;
                        if trailers.last() != Some(&b'\n') || trailers.len() > MAX_HEAD {
                            return Err(Relay::Failed("the origin's trailers do not end".into()));
                        }
                        if matches!(&trailers[start..], b"\r\n" | b"\n") {
                            break;
                        }
                    }
                    if scan.needles.in_head(&trailers) {
                        return Err(Relay::Withheld);
                    }
                    let mut end = b"0\r\n".to_vec();
                    end.extend_from_slice(&trailers);
                    out.write_all(&end).map_err(client)?;
                    return Ok(total);
                }
                total += size;
                if total > MAX_RESPONSE_BODY {
                    return Err(Relay::Failed(format!("the origin's answer went over {MAX_RESPONSE_BODY} bytes")));
                }
                pass(upstream, Some(size), scan, &mut |bytes: &[u8]| write_chunk(out, bytes))?;
                let mut crlf = Vec::new();
                upstream.by_ref().take(2).read_until(b'\n', &mut crlf).map_err(origin)?;
                if !matches!(crlf.as_slice(), b"\r\n" | b"\n") {
                    return Err(Relay::Failed("the origin's answer: a chunk not followed by CRLF".into()));
                }
            }
        }
    }
}

/// Reads `length` bytes (or to the end of the stream) and sends what
/// `scan` releases of each read; the number read.
fn pass(
    upstream: &mut impl BufRead,
    length: Option<u64>,
    scan: &mut BodyScan<'_>,
    send: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> Result<u64, Relay> {
    let mut read = 0u64;
    loop {
        let left = length.map(|length| length - read);
        if left == Some(0) {
            return Ok(read);
        }
        let available = upstream.fill_buf().map_err(|error| Relay::Failed(format!("reading the origin's answer: {error}")))?;
        if available.is_empty() {
            return match length {
                Some(_) => Err(Relay::Failed("the origin closed the connection in the middle of its answer".into())),
                None => Ok(read),
            };
        }
        let take = match left {
            Some(left) => available.len().min(usize::try_from(left).unwrap_or(usize::MAX)),
            None => available.len(),
        };
        read += take as u64;
        if length.is_none() && read > MAX_RESPONSE_BODY {
            return Err(Relay::Failed(format!("the origin's answer went over {MAX_RESPONSE_BODY} bytes")));
        }
        let scanned = scan.push(&available[..take]);
        upstream.consume(take);
        match scanned {
            Scanned::Clean(bytes) => send(bytes).map_err(|error| Relay::Failed(format!("the client went: {error}")))?,
            Scanned::Found(before) => {
                // What came before the credential goes out; the credential never.
                let _ = send(before);
                return Err(Relay::Withheld);
            }
        }
    }
}

/// Writes `bytes` as one chunk (nothing when empty: an empty chunk would end the body).
fn write_chunk(out: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    let mut chunk = format!("{:x}\r\n", bytes.len()).into_bytes();
    chunk.extend_from_slice(bytes);
    chunk.extend_from_slice(b"\r\n");
    out.write_all(&chunk)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::tests::{head, request, KEY};
    use std::io::BufReader;

    #[test]
    fn an_answer_whose_body_cannot_be_searched_is_refused() {
        for coded in
            ["content-encoding: gzip", "content-encoding: identity, br", "transfer-encoding: gzip, chunked", "transfer-encoding: identity"]
        {
            let problem = searchable(&head(&format!("HTTP/1.1 200 OK\r\n{coded}\r\n\r\n"))).unwrap_err();
            assert_eq!(problem.status, 502, "{coded}");
            assert!(problem.message.contains("cannot search") || problem.message.contains("only chunked"), "{problem:?}");
        }
        for plain in ["content-encoding: identity", "transfer-encoding: chunked", "content-type: text/plain"] {
            assert_eq!(searchable(&head(&format!("HTTP/1.1 200 OK\r\n{plain}\r\n\r\n"))), Ok(()), "{plain}");
        }
    }

    /// Relays `body` (read in pieces of `piece` bytes) as `framing`: what
    /// the client got, and whether the key ended it.
    fn relay(body: &[u8], piece: usize, framing: Framing) -> (Vec<u8>, bool) {
        let needles = Needles::new(KEY);
        let mut scan = BodyScan::new(&needles);
        let mut upstream = BufReader::with_capacity(piece, body);
        let mut out = Vec::new();
        match relay_body(&mut upstream, &mut out, &framing, &mut scan) {
            Ok(_) => (out, false),
            Err(Relay::Withheld) => (out, true),
            Err(Relay::Failed(message)) => panic!("{message}"),
        }
    }

    /// The bytes of a chunked body.
    fn dechunk(mut body: &[u8]) -> Vec<u8> {
        let mut plain = Vec::new();
        loop {
            let size = read_chunk_size(&mut body).unwrap();
            if size == 0 {
                return plain;
            }
            let size = usize::try_from(size).unwrap();
            plain.extend_from_slice(&body[..size]);
            assert_eq!(&body[size..size + 2], b"\r\n");
            body = &body[size + 2..];
        }
    }

    #[test]
    fn a_chunked_body_is_searched_across_chunks_and_cut_before_the_key() {
        let echo = format!(r#"{{"headers":{{"host":"api.example.test","x-api-key":"{KEY}"}}}}"#);
        let before = &echo[..echo.find(KEY).unwrap()];
        for (chunk, piece) in [(7, 64), (7, 3), (1, 5), (100, 2)] {
            let mut chunked = Vec::new();
            for part in echo.as_bytes().chunks(chunk) {
                chunked.extend_from_slice(format!("{:x};ext=1\r\n", part.len()).as_bytes());
                chunked.extend_from_slice(part);
                chunked.extend_from_slice(b"\r\n");
            }
            chunked.extend_from_slice(b"0\r\n\r\n");
            let (out, withheld) = relay(&chunked, piece, Framing::Chunked);
            assert!(withheld, "chunks of {chunk}, reads of {piece}");
            assert!(!out.ends_with(b"0\r\n\r\n"), "the body is not ended as if whole");
            let mut out = out;
            out.extend_from_slice(b"0\r\n\r\n");
            assert_eq!(dechunk(&out), before.as_bytes(), "chunks of {chunk}, reads of {piece}");
        }
        // A clean chunked body, a near miss and trailers, passes whole.
        let clean = b"5\r\nsk-re\r\n9\r\nal-key-12\r\n4\r\n4 ok\r\n0\r\nx-trailer: 1\r\n\r\n";
        let (out, withheld) = relay(clean, 4, Framing::Chunked);
        assert!(!withheld);
        assert!(out.ends_with(b"0\r\nx-trailer: 1\r\n\r\n"), "{}", String::from_utf8_lossy(&out));
        assert_eq!(dechunk(&out), b"sk-real-key-124 ok");
        // A trailer that carries the key: the body never ends.
        let (out, withheld) = relay(format!("2\r\nok\r\n0\r\nx-echo: {KEY}\r\n\r\n").as_bytes(), 8, Framing::Chunked);
        assert!(withheld && !String::from_utf8_lossy(&out).contains("x-echo"), "{}", String::from_utf8_lossy(&out));
    }

    #[test]
    fn a_body_of_known_length_or_until_close_is_cut_before_the_key() {
        let body = format!("HTTP trace: x-api-key: {KEY}\r\n");
        let before = &body[..body.find(KEY).unwrap()];
        for piece in [1, 4, 1000] {
            let length = Framing::Length(body.len() as u64);
            assert_eq!(relay(body.as_bytes(), piece, length), (before.as_bytes().to_vec(), true), "reads of {piece}");
            assert_eq!(relay(body.as_bytes(), piece, Framing::UntilClose), (before.as_bytes().to_vec(), true), "reads of {piece}");
        }
        // The key as the last bytes of the body.
        let last = format!("ends with {KEY}");
        assert_eq!(relay(last.as_bytes(), 3, Framing::Length(last.len() as u64)), (b"ends with ".to_vec(), true));
        // A near miss at the end goes out whole, of either framing.
        let near = b"ends with sk-real-key-12";
        assert_eq!(relay(near, 3, Framing::Length(near.len() as u64)), (near.to_vec(), false));
        assert_eq!(relay(near, 5, Framing::UntilClose), (near.to_vec(), false));
    }

    #[test]
    fn response_framing_follows_the_rfc() {
        let get = request("GET / HTTP/1.1\r\n\r\n", b"");
        let head_request = request("HEAD / HTTP/1.1\r\n\r\n", b"");
        let framing = |text: &str, request: &Request| {
            let response = head(text);
            let status = response_status(&response.first).unwrap();
            response_framing(&response, request, status)
        };
        assert!(matches!(framing("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", &get), Ok(Framing::Length(5))));
        assert!(matches!(framing("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n", &get), Ok(Framing::Chunked)));
        assert!(matches!(framing("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n", &get), Ok(Framing::UntilClose)));
        assert!(matches!(framing("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", &head_request), Ok(Framing::None)));
        assert!(matches!(framing("HTTP/1.1 304 Not Modified\r\ncontent-length: 5\r\n\r\n", &get), Ok(Framing::None)));
        assert!(framing("HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n", &get).is_err());
        assert!(framing(&format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", MAX_RESPONSE_BODY + 1), &get).is_err());
        assert_eq!(response_status("HTTP/1.1 401 Unauthorized"), Some(401));
        for bad in ["HTTP/2 200", "HTTP/1.1 20 OK", "HTTP/1.1 abc", "ICY 200 OK", "HTTP/1.1 700 x"] {
            assert_eq!(response_status(bad), None, "{bad}");
        }
    }
}
