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
//!
//! The parts: `http` (heads, chunk sizes and the answers the sidecar gives
//! itself, in both directions), `request` (a client's request checked and
//! read whole, and the head the origin gets), `forward` (one exchange with
//! the origin, its answer streamed back), `search` (the key searched for in
//! what comes back) and `origin` (connections to the origin); this file
//! holds the endpoints, their listeners and each client connection.

mod forward;
mod http;
mod origin;
mod request;
mod search;

use crate::lock;
use std::collections::HashMap;
use std::io::{self, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lazaret_protocol::sidecar::{
    check_credential_value, credential_header, CredentialEndpoint, Origin, Secret, SidecarEvent, WithheldPart,
    CA_BUNDLE_IN_SIDECAR as CA_BUNDLE, MAX_CREDENTIALS,
};
use lazaret_protocol::CredentialEndpointStatus;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use forward::{forward, Failure, Reuse};
use http::{read_head, Problem};
use request::{read_request, BodyBudget, Request};
use search::Needles;

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

#[cfg(test)]
mod tests {
    use super::*;
    use http::Head;

    pub(super) fn head(text: &str) -> Head {
        match read_head(&mut text.as_bytes()) {
            Ok(Some(Ok(head))) => head,
            other => panic!("{text:?}: {other:?}"),
        }
    }

    pub(super) fn target(header: &str) -> Target {
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

    pub(super) fn request(text: &str, body: &[u8]) -> Request {
        let head = head(text);
        let close = head.tokens("connection").contains(&"close".to_owned());
        let mut parts = head.first.split(' ');
        let method = parts.next().unwrap().to_owned();
        let target = parts.next().unwrap().to_owned();
        let framed = head.content_length().ok().flatten().is_some() || !head.tokens("transfer-encoding").is_empty();
        Request { method, target, version_11: true, head, body: body.to_vec(), close, framed }
    }

    pub(super) const KEY: &str = "sk-real-key-123";

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
