//! Connections to an endpoint's origin: its addresses from the sidecar's
//! own resolver (127.0.0.1:53, so the allowlist decides as for a question of
//! the sandbox), then TCP and TLS checked against the CA bundle, the
//! handshake done; and the idle ones kept, at most `POOL_SIZE` per endpoint
//! for `POOL_IDLE`.

use std::io::{self, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::Instant;

use lazaret_dns::wire::{encode_query, parse_response, Question, Rcode, MAX_MESSAGE, TYPE_A, TYPE_AAAA};
use rustls::pki_types::ServerName;

use super::http::Problem;
use super::{Target, Tls, CONNECT_TIMEOUT, ORIGIN_READ_TIMEOUT, ORIGIN_WRITE_TIMEOUT, POOL_IDLE, POOL_SIZE, RESOLVE_TIMEOUT};
use crate::lock;

pub(super) fn take_pooled(target: &Target) -> Option<Tls> {
    let mut pool = lock(&target.pool);
    while let Some((upstream, since)) = pool.pop() {
        if since.elapsed() < POOL_IDLE {
            return Some(upstream);
        }
    }
    None
}

pub(super) fn put_pooled(target: &Target, upstream: Tls) {
    let mut pool = lock(&target.pool);
    pool.retain(|(_, since)| since.elapsed() < POOL_IDLE);
    if pool.len() < POOL_SIZE {
        pool.push((upstream, Instant::now()));
    }
}

/// A new TLS connection to the origin, the handshake done (so that a
/// certificate problem is named as one).
pub(super) fn connect(target: &Target) -> Result<Tls, Problem> {
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
