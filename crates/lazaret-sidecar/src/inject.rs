//! Credential endpoints (the `credentials` request): the sidecar holds each
//! API origin's key and adds it to requests for that origin only, so the key
//! never enters the sandbox.
//!
//! For each endpoint the sidecar listens on `127.0.0.1:<port>` of the
//! namespace it shares with the sandbox (runsc `network=host`: the sandbox's
//! loopback is this one) and serves plain HTTP/1.1. A request is read whole
//! (head at most [`MAX_HEAD`], body at most [`MAX_REQUEST_BODY`], in memory,
//! so that a kept-alive origin connection the origin closed meanwhile can be
//! retried); `Host`, the hop-by-hop headers and every copy of the
//! credential's header are dropped; `Host` and the header are set from the
//! configuration, never from the request; and it goes over TLS to the origin
//! alone: its address from this sidecar's own resolver (127.0.0.1:53, so the
//! allowlist applies exactly as to a question of the sandbox), SNI the
//! origin's host, the certificate checked against the host's CA bundle
//! (`CA_BUNDLE_IN_SIDECAR`, mounted read-only). The answer is passed back as it
//! arrives (each read is written at once but for bytes that could begin the
//! key, below: server-sent events and chunked streams are not buffered; a
//! chunked body goes out as one chunk per read), at most
//! [`MAX_RESPONSE_BODY`]. Origin
//! connections are kept alive and reused. No async runtime: one thread per
//! client connection, at most [`MAX_CONNECTIONS`] per endpoint.
//!
//! The key never comes back (docs/decisions.md D19): an origin that reflects
//! a request (`TRACE`, an echo of the headers) would hand it to the sandbox.
//! So only the methods an API uses ([`METHODS`]) are forwarded, anything
//! else is answered 405 and never sent; the method-override headers
//! ([`METHOD_OVERRIDES`]) and `Range` (a byte range of a reflection would
//! split the key over answers) are dropped; and every answer is searched
//! for the credential ([`Needles`]: the header's whole value, and its
//! secret without a leading auth-scheme word such as `Bearer `). A head
//! (or an interim 1xx) that carries it, in any letter case, is never sent:
//! 502; a body is searched as it streams, de-chunked, holding back only the
//! bytes that could begin a match ([`BodyScan`]), and cut before the match
//! (the client connection closes; never part of a key), as is a chunked
//! body whose trailers carry it. So that the search sees
//! the plain bytes, the origin is asked for `accept-encoding: identity` and
//! an answer with another content coding (or a transfer coding other than
//! chunked) is refused, 502. Each withheld answer is reported
//! ([`SidecarEvent::CredentialWithheld`]: an audit record) and counted.
//! What the search cannot see is a key the origin transforms (encodes,
//! escapes, splits) before reflecting it.
//!
//! The credential lives in this process's memory only: it came on the
//! control socket, and nothing here writes it anywhere but into the header
//! of a request to its origin (no message, log line or event carries it).

use crate::lock;
use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lazaret_dns::wire::{encode_query, parse_response, Question, Rcode, MAX_MESSAGE, TYPE_A, TYPE_AAAA};
use lazaret_protocol::sidecar::{
    check_credential_value, credential_header, CredentialEndpoint, Origin, Secret, SidecarEvent, WithheldPart,
    CA_BUNDLE_IN_SIDECAR as CA_BUNDLE, MAX_CREDENTIALS,
};
use lazaret_protocol::CredentialEndpointStatus;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// Longest request or response head, request line and headers together.
pub const MAX_HEAD: usize = 64 * 1024;
/// Most headers in one head.
const MAX_HEADERS: usize = 128;
/// Largest request body (the largest request the model APIs take is 32 MB).
pub const MAX_REQUEST_BODY: usize = 32 * 1024 * 1024;
/// Request bodies held in memory at once, all endpoints together; a request
/// past it is answered 503 (the sandbox cannot grow the sidecar at will).
const BODY_BUDGET: usize = 128 * 1024 * 1024;
/// Largest response body passed back.
pub const MAX_RESPONSE_BODY: u64 = 1024 * 1024 * 1024;
/// Client connections served at once per endpoint.
pub const MAX_CONNECTIONS: usize = 32;
/// A client connection with no request for this long is closed.
const CLIENT_IDLE: Duration = Duration::from_secs(120);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for the origin's next bytes (a model may think a while
/// before its first token).
const ORIGIN_READ_TIMEOUT: Duration = Duration::from_secs(600);
const ORIGIN_WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the sidecar's own resolver may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Idle origin connections kept per endpoint, and for how long.
const POOL_SIZE: usize = 4;
const POOL_IDLE: Duration = Duration::from_secs(30);
/// A chunk-size line of a chunked response, at most.
const MAX_CHUNK_LINE: u64 = 1024;
/// The methods forwarded: those an API uses. Any other (`TRACE`, `TRACK`,
/// `CONNECT`, WebDAV's, any token) is answered 405 and never sent.
pub const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
/// Headers that ask an origin to take another method than the request
/// line's: dropped, so that a POST cannot become a TRACE at the origin.
pub const METHOD_OVERRIDES: [&str; 3] = ["x-http-method-override", "x-http-method", "x-method-override"];

type Tls = BufReader<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>;

/// What an endpoint's connections report back to the control side.
pub type Emit = Arc<dyn Fn(SidecarEvent) + Send + Sync>;

/// Every credential endpoint of this sidecar.
pub struct Injector {
    ports: Mutex<HashMap<u16, Arc<Port>>>,
    context: Arc<Context>,
    /// The CA certificates (PEM) origins are checked against.
    ca_bundle: std::path::PathBuf,
}

/// What every connection shares.
struct Context {
    emit: Emit,
    /// Bytes of request bodies held now.
    bodies: AtomicUsize,
}

/// One listening port; its target changes with each `credentials` request
/// (`None`: no longer configured, answered 503).
struct Port {
    target: Mutex<Option<Arc<Target>>>,
    connections: AtomicUsize,
}

struct Target {
    origin: Origin,
    header: String,
    value: Secret,
    /// The forms of `value` no answer may carry.
    needles: Needles,
    tls: Arc<rustls::ClientConfig>,
    pool: Mutex<Vec<(Tls, Instant)>>,
    stats: Arc<Stats>,
}

#[derive(Default)]
struct Stats {
    classes: [AtomicU64; 5],
    rejected: AtomicU64,
    failed: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
    withheld: AtomicU64,
}

impl Injector {
    /// Endpoints checked against the CA bundle the coordinator mounts.
    pub fn new(emit: Emit) -> Injector {
        Injector::with_ca_bundle(emit, std::path::PathBuf::from(CA_BUNDLE))
    }

    /// Endpoints checked against the CA certificates in `ca_bundle`.
    pub fn with_ca_bundle(emit: Emit, ca_bundle: std::path::PathBuf) -> Injector {
        Injector { ports: Mutex::new(HashMap::new()), context: Arc::new(Context { emit, bodies: AtomicUsize::new(0) }), ca_bundle }
    }

    /// Replaces the endpoints. Everything is checked, the CA bundle read and
    /// every new port bound before anything changes; on an error nothing did.
    /// An endpoint whose origin, port and header stay keeps its counts and
    /// its origin connections only if its value stays too.
    pub fn set(&self, endpoints: &[CredentialEndpoint]) -> Result<(), String> {
        if endpoints.len() > MAX_CREDENTIALS {
            return Err(format!("{} credential endpoints, more than {MAX_CREDENTIALS}", endpoints.len()));
        }
        let mut checked = Vec::new();
        for endpoint in endpoints {
            let origin = Origin::parse(&endpoint.origin)?;
            let header = credential_header(&endpoint.header).map_err(|error| format!("{}: {error}", endpoint.origin))?;
            check_credential_value(endpoint.value.expose()).map_err(|error| format!("{}: {error}", endpoint.origin))?;
            if endpoint.port < 1024 {
                return Err(format!("{}: port {} is below 1024", endpoint.origin, endpoint.port));
            }
            if checked.iter().any(|(_, _, port): &(Origin, String, u16)| *port == endpoint.port) {
                return Err(format!("port {} is given to two credential endpoints", endpoint.port));
            }
            checked.push((origin, header, endpoint.port));
        }
        let tls = if endpoints.is_empty() { None } else { Some(tls_config(&self.ca_bundle)?) };
        let mut ports = lock(&self.ports);
        let mut bound = Vec::new();
        for (_, _, port) in &checked {
            if !ports.contains_key(port) {
                let address = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), *port);
                bound.push((*port, TcpListener::bind(address).map_err(|error| format!("cannot listen on {address}: {error}"))?));
            }
        }
        for (port, listener) in bound {
            let state = Arc::new(Port { target: Mutex::new(None), connections: AtomicUsize::new(0) });
            ports.insert(port, Arc::clone(&state));
            let context = Arc::clone(&self.context);
            std::thread::spawn(move || serve_port(listener, state, context));
        }
        for (port, state) in ports.iter() {
            let wanted = checked.iter().zip(endpoints).find(|((_, _, listed), _)| listed == port);
            let mut target = lock(&state.target);
            *target = match (wanted, &tls) {
                (Some(((origin, header, _), endpoint)), Some(tls)) => {
                    let same = target.as_ref().filter(|old| old.origin == *origin && old.header == *header && old.value == endpoint.value);
                    let stats = target
                        .as_ref()
                        .filter(|old| old.origin == *origin && old.header == *header)
                        .map(|old| Arc::clone(&old.stats))
                        .unwrap_or_default();
                    match same {
                        Some(old) => Some(Arc::clone(old)),
                        None => Some(Arc::new(Target {
                            origin: origin.clone(),
                            header: header.clone(),
                            value: endpoint.value.clone(),
                            needles: Needles::new(endpoint.value.expose()),
                            tls: Arc::clone(tls),
                            pool: Mutex::new(Vec::new()),
                            stats,
                        })),
                    }
                }
                _ => None,
            };
        }
        Ok(())
    }

    /// The endpoints in force and what went through them, by port.
    pub fn status(&self) -> Vec<CredentialEndpointStatus> {
        let ports = lock(&self.ports);
        let mut list: Vec<CredentialEndpointStatus> = ports
            .iter()
            .filter_map(|(port, state)| {
                let target = lock(&state.target).clone()?;
                let stats = &target.stats;
                let class = |index: usize| stats.classes[index].load(Ordering::Relaxed);
                Some(CredentialEndpointStatus {
                    origin: target.origin.to_string(),
                    port: *port,
                    header: target.header.clone(),
                    status_1xx: class(0),
                    status_2xx: class(1),
                    status_3xx: class(2),
                    status_4xx: class(3),
                    status_5xx: class(4),
                    rejected: stats.rejected.load(Ordering::Relaxed),
                    failed: stats.failed.load(Ordering::Relaxed),
                    bytes_sent: stats.bytes_sent.load(Ordering::Relaxed),
                    bytes_received: stats.bytes_received.load(Ordering::Relaxed),
                    withheld: stats.withheld.load(Ordering::Relaxed),
                })
            })
            .collect();
        list.sort_by_key(|status| status.port);
        list
    }
}

/// The TLS client configuration: the host's CA bundle, TLS 1.2 and 1.3,
/// HTTP/1.1 by ALPN.
fn tls_config(ca_bundle: &std::path::Path) -> Result<Arc<rustls::ClientConfig>, String> {
    let pem = std::fs::read(ca_bundle).map_err(|error| format!("cannot read the CA bundle {}: {error}", ca_bundle.display()))?;
    let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok).collect();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certificates);
    if added == 0 {
        return Err(format!("the CA bundle {} holds no certificate rustls can use", ca_bundle.display()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("TLS: {error}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn serve_port(listener: TcpListener, port: Arc<Port>, context: Arc<Context>) {
    for stream in listener.incoming() {
        let mut stream = match stream {
            Ok(stream) => stream,
            Err(error) => {
                eprintln!("lazaret-sidecar: credential endpoint: accept: {error}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if port.connections.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            port.connections.fetch_sub(1, Ordering::SeqCst);
            let problem = Problem::new(503, format!("more than {MAX_CONNECTIONS} connections to this endpoint at once"));
            let _ = problem.write(&mut stream);
            continue;
        }
        let (port, context) = (Arc::clone(&port), Arc::clone(&context));
        std::thread::spawn(move || {
            if let Err(error) = serve_client(stream, &port, &context) {
                if !matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::BrokenPipe) {
                    eprintln!("lazaret-sidecar: credential endpoint: {error}");
                }
            }
            port.connections.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// An error the sidecar answers itself, with `lazaret:` and the reason as
/// the body; the connection closes after it.
#[derive(Debug, PartialEq, Eq)]
struct Problem {
    status: u16,
    message: String,
}

impl Problem {
    fn new(status: u16, message: impl Into<String>) -> Problem {
        Problem { status, message: message.into() }
    }

    fn write(&self, out: &mut impl Write) -> io::Result<()> {
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
struct Head {
    first: String,
    headers: Vec<(String, Vec<u8>)>,
}

impl Head {
    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers.iter().filter(move |(key, _)| key == name).map(|(_, value)| value.as_slice())
    }

    /// The comma-separated tokens of every `name` header, in lower case.
    fn tokens(&self, name: &str) -> Vec<String> {
        self.values(name)
            .flat_map(|value| String::from_utf8_lossy(value).split(',').map(|token| token.trim().to_ascii_lowercase()).collect::<Vec<_>>())
            .filter(|token| !token.is_empty())
            .collect()
    }

    /// The head as text: its first line and every header, `name: value`,
    /// each line ending in CRLF.
    fn text(&self) -> Vec<u8> {
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
    fn content_length(&self) -> Result<Option<u64>, String> {
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
fn read_head(reader: &mut impl BufRead) -> io::Result<Option<Result<Head, Problem>>> {
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
fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// Headers that belong to one connection or that the sidecar writes itself:
/// never passed on in either direction.
const HOP_BY_HOP: [&str; 7] = ["connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade", "proxy-authenticate"];

/// A request as the sidecar forwards it.
struct Request {
    method: String,
    target: String,
    /// HTTP/1.1 (else 1.0: one request per connection).
    version_11: bool,
    head: Head,
    body: Vec<u8>,
    /// The client asked to close after this request.
    close: bool,
    /// The request framed a body (`content-length` or chunked), even an
    /// empty one: the origin gets a `content-length` then.
    framed: bool,
}

/// Bytes of request bodies counted against [`BODY_BUDGET`] while held.
struct BodyBudget<'a> {
    context: &'a Context,
    held: usize,
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
fn read_request(head: Head, client: &mut impl BufRead, out: &mut impl Write, budget: &mut BodyBudget<'_>) -> Result<Request, Problem> {
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

/// A chunk-size line's size (extensions ignored).
fn read_chunk_size(reader: &mut impl BufRead) -> Result<u64, String> {
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

/// The head the origin gets: the request's own headers but for the
/// hop-by-hop ones, those the connection names, `Host`, the framing, the
/// method overrides, `Range` and `If-Range`, `Accept-Encoding` and every
/// copy of the credential's header; then `Host`, `accept-encoding:
/// identity` (the answer is searched for the key: its plain bytes), the
/// credential and the body's length.
fn upstream_head(request: &Request, target: &Target) -> Vec<u8> {
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

fn serve_client(stream: TcpStream, port: &Port, context: &Context) -> io::Result<()> {
    stream.set_read_timeout(Some(CLIENT_IDLE))?;
    stream.set_nodelay(true)?;
    let mut out = stream.try_clone()?;
    let mut client = BufReader::with_capacity(64 * 1024, stream);
    loop {
        let head = match read_head(&mut client)? {
            None => return Ok(()),
            Some(Ok(head)) => head,
            Some(Err(problem)) => return problem.write(&mut out),
        };
        let Some(target) = lock(&port.target).clone() else {
            return Problem::new(503, "no credential endpoint is configured on this port any more").write(&mut out);
        };
        let mut budget = BodyBudget { context, held: 0 };
        let request = match read_request(head, &mut client, &mut out, &mut budget) {
            Ok(request) => request,
            Err(problem) => {
                target.stats.failed.fetch_add(1, Ordering::Relaxed);
                return problem.write(&mut out);
            }
        };
        match forward(&request, &target, &mut out, context) {
            Ok(Reuse::Both) if !request.close => continue,
            Ok(_) => return Ok(()),
            Err(Failure::Answer(problem)) => {
                // A message quoting the origin's answer must not carry the key either.
                if target.needles.in_head(problem.message.as_bytes()) {
                    return withhold(&request, &target, context, None, WithheldPart::Head, &mut out);
                }
                target.stats.failed.fetch_add(1, Ordering::Relaxed);
                eprintln!("lazaret-sidecar: credential endpoint for {}: {}", target.origin, problem.message);
                return problem.write(&mut out);
            }
            Err(Failure::Cut(message)) => {
                target.stats.failed.fetch_add(1, Ordering::Relaxed);
                let message = if target.needles.in_head(message.as_bytes()) { "the origin's answer ended badly" } else { message.as_str() };
                eprintln!("lazaret-sidecar: credential endpoint for {}: {message}", target.origin);
                return Ok(());
            }
            Err(Failure::Withheld { status, part }) => return withhold(&request, &target, context, status, part, &mut out),
        }
    }
}

/// An answer that carried the credential: counted, reported, and the head
/// answered 502 in its place, or (the head already sent) the connection
/// closed. The credential itself is in no message.
fn withhold(
    request: &Request,
    target: &Target,
    context: &Context,
    status: Option<u16>,
    part: WithheldPart,
    out: &mut TcpStream,
) -> io::Result<()> {
    target.stats.withheld.fetch_add(1, Ordering::Relaxed);
    (context.emit)(SidecarEvent::CredentialWithheld {
        origin: target.origin.to_string(),
        method: request.method.clone(),
        status,
        part,
        suppressed: None,
    });
    let status = status.map(|status| format!(" ({status})")).unwrap_or_default();
    let what = format!("the origin's answer{status} to {} carried the credential in its {part}", request.method);
    eprintln!("lazaret-sidecar: credential endpoint for {}: {what}: withheld", target.origin);
    match part {
        WithheldPart::Head => Problem::new(502, format!("{what}, so it was withheld: the key never goes to the sandbox")).write(out),
        WithheldPart::Body => Ok(()),
    }
}

/// What may carry on after a response.
enum Reuse {
    /// The client connection may take another request.
    Both,
    /// The response ran to the origin's close: the client connection closes too.
    Neither,
}

enum Failure {
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
fn forward(request: &Request, target: &Target, out: &mut TcpStream, context: &Context) -> Result<Reuse, Failure> {
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

/// The forms of an endpoint's credential that no answer may carry: the
/// header's whole value and, when it starts with an auth-scheme word
/// (`Bearer `, `Basic `), the secret after it. (No `Debug`: it holds the key.)
struct Needles {
    forms: Vec<Vec<u8>>,
    /// The same in ASCII lower case, for heads.
    lower: Vec<Vec<u8>>,
}

impl Needles {
    fn new(value: &str) -> Needles {
        let mut forms = vec![value.as_bytes().to_vec()];
        if let Some((scheme, secret)) = value.split_once(' ') {
            let secret = secret.trim_start_matches(' ');
            if !scheme.is_empty() && scheme.bytes().all(is_token_byte) && !secret.is_empty() {
                forms.push(secret.as_bytes().to_vec());
            }
        }
        forms.retain(|form| !form.is_empty());
        let lower = forms.iter().map(|form| form.to_ascii_lowercase()).collect();
        Needles { forms, lower }
    }

    /// Where the first form found in `haystack` begins.
    fn find(&self, haystack: &[u8]) -> Option<usize> {
        self.forms.iter().filter_map(|form| position(haystack, form)).min()
    }

    /// Whether `text` (a head, trailers, a message) carries a form, in any
    /// letter case (header names are sent in lower case).
    fn in_head(&self, text: &[u8]) -> bool {
        let text = text.to_ascii_lowercase();
        self.lower.iter().any(|form| position(&text, form).is_some())
    }

    /// How many bytes at the end of `data` could be the beginning of a
    /// form (the longest such suffix, shorter than the form).
    fn partial(&self, data: &[u8]) -> usize {
        let mut longest = 0;
        for form in &self.forms {
            let reach = data.len().min(form.len() - 1);
            let from = data.len() - reach;
            // The earliest start that fits is the longest suffix.
            if let Some(start) = (from..data.len()).find(|start| form.starts_with(&data[*start..])) {
                longest = longest.max(data.len() - start);
            }
        }
        longest
    }
}

/// Where `needle` first occurs in `haystack`.
fn position(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    if haystack.len() < needle.len() {
        return None;
    }
    (0..=haystack.len() - needle.len()).find(|at| haystack[*at] == first && haystack[*at..].starts_with(needle))
}

/// A body passing through: what may be sent of each read.
struct BodyScan<'a> {
    needles: &'a Needles,
    /// Bytes read and not yet dropped: the first `released` were sent, the
    /// rest held back (they could begin the credential).
    window: Vec<u8>,
    released: usize,
}

/// What of a read may be sent.
#[derive(Debug, PartialEq, Eq)]
enum Scanned<'s> {
    /// These bytes; the rest is held back until the next read shows
    /// whether it is the credential.
    Clean(&'s [u8]),
    /// The credential begins after these bytes: send them and end.
    Found(&'s [u8]),
}

impl<'a> BodyScan<'a> {
    fn new(needles: &'a Needles) -> BodyScan<'a> {
        BodyScan { needles, window: Vec::new(), released: 0 }
    }

    fn push(&mut self, data: &[u8]) -> Scanned<'_> {
        self.window.drain(..self.released);
        self.released = 0;
        self.window.extend_from_slice(data);
        if let Some(at) = self.needles.find(&self.window) {
            // Nor the start of another copy just before it.
            let clean = at - self.needles.partial(&self.window[..at]);
            self.window.truncate(clean);
            self.released = clean;
            return Scanned::Found(&self.window[..clean]);
        }
        self.released = self.window.len() - self.needles.partial(&self.window);
        Scanned::Clean(&self.window[..self.released])
    }

    /// The body ended: what was held back (no credential can complete now).
    fn finish(&mut self) -> &[u8] {
        self.window.drain(..self.released);
        self.released = self.window.len();
        &self.window
    }
}

fn take_pooled(target: &Target) -> Option<Tls> {
    let mut pool = lock(&target.pool);
    while let Some((upstream, since)) = pool.pop() {
        if since.elapsed() < POOL_IDLE {
            return Some(upstream);
        }
    }
    None
}

fn put_pooled(target: &Target, upstream: Tls) {
    let mut pool = lock(&target.pool);
    pool.retain(|(_, since)| since.elapsed() < POOL_IDLE);
    if pool.len() < POOL_SIZE {
        pool.push((upstream, Instant::now()));
    }
}

/// A new TLS connection to the origin, the handshake done (so that a
/// certificate problem is named as one).
fn connect(target: &Target) -> Result<Tls, Problem> {
    let origin = &target.origin;
    let addresses = resolve(&origin.host)?;
    let mut last = None;
    let mut stream = None;
    for address in &addresses {
        match TcpStream::connect_timeout(&SocketAddr::new(*address, origin.port), CONNECT_TIMEOUT) {
            Ok(connected) => {
                stream = Some(connected);
                break;
            }
            Err(error) => last = Some(format!("{address}: {error}")),
        }
    }
    let Some(stream) = stream else {
        return Err(Problem::new(502, format!("cannot connect to {origin}: {}", last.unwrap_or_default())));
    };
    let setup = |error: io::Error| Problem::new(502, format!("connecting to {origin}: {error}"));
    stream.set_read_timeout(Some(ORIGIN_READ_TIMEOUT)).map_err(setup)?;
    stream.set_write_timeout(Some(ORIGIN_WRITE_TIMEOUT)).map_err(setup)?;
    stream.set_nodelay(true).map_err(setup)?;
    let name = ServerName::try_from(origin.host.clone()).map_err(|error| Problem::new(502, format!("{origin}: {error}")))?;
    let connection = rustls::ClientConnection::new(Arc::clone(&target.tls), name)
        .map_err(|error| Problem::new(502, format!("TLS with {origin}: {error}")))?;
    let mut tls = rustls::StreamOwned::new(connection, stream);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock).map_err(|error| Problem::new(502, format!("TLS with {origin}: {error}")))?;
    }
    Ok(BufReader::with_capacity(64 * 1024, tls))
}

/// The origin's addresses from this sidecar's own resolver, IPv4 first: the
/// allowlist decides as for any question of the sandbox, and opens them.
fn resolve(host: &str) -> Result<Vec<IpAddr>, Problem> {
    if let Ok(address) = host.parse::<IpAddr>() {
        return Ok(vec![address]);
    }
    let mut addresses = Vec::new();
    let mut refusal = None;
    for record_type in [TYPE_A, TYPE_AAAA] {
        match ask(host, record_type) {
            Ok(found) => addresses.extend(found),
            Err(message) => refusal = Some(message),
        }
    }
    if addresses.is_empty() {
        let why = refusal.unwrap_or_else(|| "no address".into());
        return Err(Problem::new(502, format!("cannot resolve {host}: {why}")));
    }
    Ok(addresses)
}

fn ask(host: &str, record_type: u16) -> Result<Vec<IpAddr>, String> {
    let question = Question::new(host, record_type);
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|error| error.to_string())?;
    socket.connect(crate::dns::LISTEN).map_err(|error| error.to_string())?;
    socket.set_read_timeout(Some(RESOLVE_TIMEOUT)).map_err(|error| error.to_string())?;
    let id = crate::dns::random_id().map_err(|error| error.to_string())?;
    socket.send(&encode_query(id, &question)).map_err(|error| error.to_string())?;
    let mut buffer = vec![0u8; MAX_MESSAGE];
    let deadline = Instant::now() + RESOLVE_TIMEOUT;
    while Instant::now() < deadline {
        let length = socket.recv(&mut buffer).map_err(|error| format!("the sidecar's resolver did not answer: {error}"))?;
        let Ok(response) = parse_response(&buffer[..length], id, &question) else { continue };
        return match response.rcode {
            Rcode::NoError => Ok(response.addresses().into_iter().map(|(address, _)| address).collect()),
            Rcode::Refused => Err("the network policy refuses the name (is it still on the allowlist?)".into()),
            Rcode::NameError => Err("no such name".into()),
            other => Err(format!("the resolver answered {other:?}")),
        };
    }
    Err("the sidecar's resolver did not answer".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Head {
        match read_head(&mut text.as_bytes()) {
            Ok(Some(Ok(head))) => head,
            other => panic!("{text:?}: {other:?}"),
        }
    }

    fn target(header: &str) -> Target {
        Target {
            origin: Origin::parse("https://api.example.test").unwrap(),
            header: header.into(),
            value: Secret::new("sk-real".into()),
            needles: Needles::new("sk-real"),
            tls: tls_for_tests(),
            pool: Mutex::new(Vec::new()),
            stats: Arc::default(),
        }
    }

    fn tls_for_tests() -> Arc<rustls::ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Arc::new(
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth(),
        )
    }

    fn request(text: &str, body: &[u8]) -> Request {
        let head = head(text);
        let close = head.tokens("connection").contains(&"close".to_owned());
        let mut parts = head.first.split(' ');
        let method = parts.next().unwrap().to_owned();
        let target = parts.next().unwrap().to_owned();
        let framed = head.content_length().ok().flatten().is_some() || !head.tokens("transfer-encoding").is_empty();
        Request { method, target, version_11: true, head, body: body.to_vec(), close, framed }
    }

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

    const KEY: &str = "sk-real-key-123";

    /// Pushes `reads` through a scan for KEY: what was sent, and whether the
    /// key was found (nothing held back is sent then).
    fn scan(needles: &Needles, reads: &[&[u8]]) -> (Vec<u8>, bool) {
        let mut scan = BodyScan::new(needles);
        let mut sent = Vec::new();
        for read in reads {
            match scan.push(read) {
                Scanned::Clean(bytes) => sent.extend_from_slice(bytes),
                Scanned::Found(before) => {
                    sent.extend_from_slice(before);
                    return (sent, true);
                }
            }
        }
        sent.extend_from_slice(scan.finish());
        (sent, false)
    }

    #[test]
    fn the_key_is_found_across_reads_and_nothing_of_it_is_sent() {
        let needles = Needles::new(KEY);
        let body = format!(r#"{{"headers":{{"x-api-key":"{KEY}","accept":"*/*"}}}}"#);
        let before = &body[..body.find(KEY).unwrap()];
        // Split at every point, and one byte per read.
        for split in 0..=body.len() {
            let (sent, found) = scan(&needles, &[&body.as_bytes()[..split], &body.as_bytes()[split..]]);
            assert!(found, "split at {split}");
            assert_eq!(sent, before.as_bytes(), "split at {split}");
        }
        let bytes: Vec<&[u8]> = body.as_bytes().chunks(1).collect();
        assert_eq!(scan(&needles, &bytes), (before.as_bytes().to_vec(), true));
        // Only what could begin the key is held back: the bytes before it
        // went out with their read.
        let mut held = BodyScan::new(&needles);
        assert_eq!(held.push(b"data: 1\n\nx sk-real"), Scanned::Clean(b"data: 1\n\nx "));
        assert_eq!(held.push(b"-k"), Scanned::Clean(b""));
        assert_eq!(held.push(b"ey-123 and on"), Scanned::Found(b""));
        // The key at the very end of the body.
        assert_eq!(scan(&needles, &[b"tail: ", &KEY.as_bytes()[..5], &KEY.as_bytes()[5..]]), (b"tail: ".to_vec(), true));
        // A copy that begins just before another: neither is sent.
        assert_eq!(scan(&needles, &[format!("a sk-{KEY}").as_bytes()]), (b"a ".to_vec(), true));
    }

    #[test]
    fn a_near_miss_is_held_only_until_it_misses_and_then_sent_intact() {
        let needles = Needles::new(KEY);
        let mut held = BodyScan::new(&needles);
        assert_eq!(held.push(b"event: x\ndata: sk-real-key-1"), Scanned::Clean(b"event: x\ndata: "));
        assert_eq!(held.push(b"24\n\n"), Scanned::Clean(b"sk-real-key-124\n\n"));
        assert_eq!(held.finish(), b"");
        // A prefix of the key at the very end of the body goes out at its end.
        let body = b"all of it, then sk-real-key-12";
        for split in 0..=body.len() {
            assert_eq!(scan(&needles, &[&body[..split], &body[split..]]), (body.to_vec(), false), "split at {split}");
        }
        // Ordinary streams are not held at all.
        let mut stream = BodyScan::new(&needles);
        assert_eq!(stream.push(b"data: {\"text\":\"hi\"}\n\n"), Scanned::Clean(b"data: {\"text\":\"hi\"}\n\n"));
    }

    #[test]
    fn a_schemes_secret_is_searched_alone_too() {
        let bearer = Needles::new("Bearer sk-tok-456");
        assert_eq!(scan(&bearer, &[b"{\"token\":\"sk-tok", b"-456\"}"]), (b"{\"token\":\"".to_vec(), true));
        assert_eq!(scan(&bearer, &[b"auth: Bearer sk-tok-456"]), (b"auth: ".to_vec(), true));
        let basic = Needles::new("Basic dXNlcjpwYXNz");
        assert!(scan(&basic, &[b"dXNlcjpwYXNz"]).1);
        // Without a scheme word, the value alone.
        let plain = Needles::new("sk-plain");
        assert_eq!(plain.forms.len(), 1);
        assert!(!scan(&plain, &[b"Bearer and sk-plai and more"]).1);
    }

    #[test]
    fn a_head_that_carries_the_key_is_found_in_any_letter_case() {
        let needles = Needles::new("Bearer sk-Tok-456");
        assert!(needles.in_head(&head("HTTP/1.1 200 OK\r\nX-Echo: Bearer sk-Tok-456\r\n\r\n").text()));
        assert!(needles.in_head(&head("HTTP/1.1 200 OK\r\nsk-tok-456: 1\r\n\r\n").text()));
        assert!(needles.in_head(&head("HTTP/1.1 200 SK-TOK-456\r\n\r\n").text()));
        assert!(!needles.in_head(&head("HTTP/1.1 200 OK\r\nx-echo: sk-tok-45\r\ncontent-length: 6\r\n\r\n").text()));
    }

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

    #[test]
    fn endpoints_are_checked_before_anything_changes() {
        let injector = Injector::new(Arc::new(|_| {}));
        let endpoint = |origin: &str, port: u16, header: &str, value: &str| CredentialEndpoint {
            origin: origin.into(),
            port,
            header: header.into(),
            value: Secret::new(value.into()),
        };
        for (bad, names) in [
            (vec![endpoint("http://a.test", 17400, "x-api-key", "k")], "http://a.test"),
            (vec![endpoint("https://a.test", 17400, "host", "k")], "host"),
            (vec![endpoint("https://a.test", 80, "x-api-key", "k")], "80"),
            (vec![endpoint("https://a.test", 17400, "x-api-key", "k\r\nx: 1")], "control"),
            (vec![endpoint("https://a.test", 17400, "x", "k"), endpoint("https://b.test", 17400, "x", "k")], "17400"),
        ] {
            let error = injector.set(&bad).unwrap_err();
            assert!(error.contains(names), "{error}");
            assert!(!error.contains("k\r\n"), "{error}");
        }
        assert!(injector.status().is_empty());
        assert!(injector.set(&[]).is_ok());
    }
}
