//! The credential endpoint against a real TLS origin on loopback (rustls on
//! both sides, certificates from a test CA): the key is added once and the
//! agent's copies dropped, `Host` is the origin's, one origin connection
//! serves a kept-alive client, a streamed answer arrives as it is sent,
//! sizes are bounded, a refused key is reported, and an origin whose
//! certificate the CA bundle does not vouch for is never sent the request.
//! (The sandbox side, in gVisor with the sidecar's namespace, is
//! `tests/e2e_network.rs`.)

// A test file: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lazaret_protocol::sidecar::{CredentialEndpoint, Secret, SidecarEvent};
use lazaret_sidecar::inject::Injector;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

const KEY: &str = "sk-loopback-test-key";

/// What the origin saw of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    connection: usize,
    line: String,
    host: String,
    keys: Vec<String>,
}

struct Origin {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// A TLS origin on 127.0.0.1 with a certificate for that address: `/stream`
/// sends three chunks 300 ms apart; a request without exactly the key gets 401.
fn origin(certificate: &str, key: &str) -> Origin {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(certificate.as_bytes()).collect::<Result<_, _>>().unwrap();
    let private = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for (number, stream) in listener.incoming().enumerate() {
            let (config, log) = (Arc::clone(&config), Arc::clone(&log));
            std::thread::spawn(move || {
                let tls = rustls::StreamOwned::new(rustls::ServerConnection::new(config).unwrap(), stream.unwrap());
                let mut reader = BufReader::new(tls);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let (mut host, mut keys, mut length) = (String::new(), Vec::new(), 0usize);
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).unwrap_or(0) == 0 {
                            return;
                        }
                        let header = header.trim_end();
                        if header.is_empty() {
                            break;
                        }
                        let (name, value) = header.split_once(':').unwrap();
                        match name.to_ascii_lowercase().as_str() {
                            "host" => host = value.trim().to_owned(),
                            "x-api-key" => keys.push(value.trim().to_owned()),
                            "content-length" => length = value.trim().parse().unwrap(),
                            _ => {}
                        }
                    }
                    let mut body = vec![0u8; length];
                    reader.read_exact(&mut body).unwrap();
                    let line = line.trim_end().to_owned();
                    let stream = line.contains("/stream");
                    let ok = keys == [KEY];
                    log.lock().unwrap().push(Seen { connection: number + 1, line, host, keys });
                    let out = reader.get_mut();
                    if !ok {
                        write!(out, "HTTP/1.1 401 Unauthorized\r\ncontent-length: 3\r\n\r\nno\n").unwrap();
                    } else if stream {
                        write!(out, "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n").unwrap();
                        for index in 1..=3 {
                            if index > 1 {
                                std::thread::sleep(Duration::from_millis(300));
                            }
                            let event = format!("data: {index}\n\n");
                            write!(out, "{:x}\r\n{event}\r\n", event.len()).unwrap();
                            out.flush().unwrap();
                        }
                        write!(out, "0\r\n\r\n").unwrap();
                    } else {
                        write!(out, "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\nok:", body.len() + 3).unwrap();
                        out.write_all(&body).unwrap();
                    }
                    out.flush().unwrap();
                }
            });
        }
    });
    Origin { port, seen }
}

/// One HTTP/1.1 exchange on `stream`: the status, the body, and when each
/// read of the body came (ms after the request was written).
fn exchange(reader: &mut BufReader<TcpStream>, request: &[u8]) -> (u16, String, Vec<u128>) {
    let sent = Instant::now();
    reader.get_mut().write_all(request).unwrap();
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    let code = status.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
    let (mut length, mut chunked) = (None, false);
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        let header = header.trim_end().to_ascii_lowercase();
        if header.is_empty() {
            break;
        }
        if let Some(value) = header.strip_prefix("content-length:") {
            length = Some(value.trim().parse::<usize>().unwrap());
        }
        chunked |= header == "transfer-encoding: chunked";
    }
    let (mut body, mut times) = (Vec::new(), Vec::new());
    while length.is_none_or(|length| body.len() < length) && !(chunked && body.ends_with(b"0\r\n\r\n")) {
        let available = reader.fill_buf().unwrap();
        if available.is_empty() {
            break;
        }
        let take = available.len().min(length.map_or(usize::MAX, |length| length - body.len()));
        body.extend_from_slice(&available[..take]);
        reader.consume(take);
        times.push(sent.elapsed().as_millis());
    }
    (code, String::from_utf8_lossy(&body).into_owned(), times)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn connect(port: u16) -> BufReader<TcpStream> {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    BufReader::new(stream)
}

#[test]
fn the_endpoint_adds_the_key_for_its_origin_and_streams_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_certificate = ca_params.self_signed(&ca_key).unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca_certificate.pem()).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let server_key = rcgen::KeyPair::generate().unwrap();
    let server = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap().signed_by(&server_key, &issuer).unwrap();
    let good = origin(&server.pem(), &server_key.serialize_pem());
    let stranger_key = rcgen::KeyPair::generate().unwrap();
    let stranger = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap().self_signed(&stranger_key).unwrap();
    let untrusted = origin(&stranger.pem(), &stranger_key.serialize_pem());

    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    let injector = Injector::with_ca_bundle(Arc::new(move |event| sink.lock().unwrap().push(event)), dir.path().join("ca.pem"));
    let (port, wrong_port, untrusted_port) = (free_port(), free_port(), free_port());
    let endpoint = |origin: u16, port: u16, value: &str| CredentialEndpoint {
        origin: format!("https://127.0.0.1:{origin}"),
        port,
        header: "x-api-key".into(),
        value: Secret::new(value.into()),
    };
    injector
        .set(&[
            endpoint(good.port, port, KEY),
            endpoint(good.port, wrong_port, "sk-revoked"),
            endpoint(untrusted.port, untrusted_port, KEY),
        ])
        .unwrap();

    let mut client = connect(port);
    for _ in 0..3 {
        let (status, body, _) = exchange(
            &mut client,
            b"POST /v1/messages HTTP/1.1\r\nHost: evil.test\r\nx-api-key: agent-copy\r\nX-API-KEY: another\r\ncontent-length: 2\r\n\r\n{}",
        );
        assert_eq!((status, body.as_str()), (200, "ok:{}"));
    }
    let seen = good.seen.lock().unwrap().clone();
    let expected =
        Seen { connection: 1, line: "POST /v1/messages HTTP/1.1".into(), host: format!("127.0.0.1:{}", good.port), keys: vec![KEY.into()] };
    assert_eq!(seen, vec![expected; 3], "one origin connection, the origin's Host, the key once");

    let (status, body, times) = exchange(&mut client, b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, 200);
    assert!(body.contains("data: 1") && body.contains("data: 3"), "{body}");
    assert!(times[0] < 250 && *times.last().unwrap() >= 550, "each chunk as it came: {times:?}");

    let (status, body, _) = exchange(&mut client, b"GET http://elsewhere.test/ HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, 400, "{body}");
    let mut client = connect(port);
    let (status, body, _) =
        exchange(&mut client, b"POST /v1/messages HTTP/1.1\r\nHost: x\r\ncontent-length: 33554433\r\nexpect: 100-continue\r\n\r\n");
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("33554432"), "{body}");
    let mut client = connect(port);
    let (status, body, _) = exchange(&mut client, b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n");
    assert_eq!(status, 501, "{body}");

    let (status, _, _) = exchange(&mut connect(wrong_port), b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, 401);
    assert!(
        events.lock().unwrap().iter().any(|event| matches!(event, SidecarEvent::CredentialRejected { status: 401, origin, .. } if *origin == format!("https://127.0.0.1:{}", good.port))),
        "the refused key is reported"
    );
    let (status, body, _) = exchange(&mut connect(untrusted_port), b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("TLS"), "{body}");
    assert!(untrusted.seen.lock().unwrap().is_empty(), "the untrusted origin got no request");

    let status = injector.status();
    let mine = status.iter().find(|endpoint| endpoint.port == port).unwrap();
    assert_eq!((mine.status_2xx, mine.status_4xx, mine.failed, mine.bytes_sent), (4, 0, 3, 6), "{mine:?}");
    let wrong = status.iter().find(|endpoint| endpoint.port == wrong_port).unwrap();
    assert_eq!((wrong.status_4xx, wrong.rejected), (1, 1), "{wrong:?}");
    assert!(!format!("{status:?}").contains(KEY), "the status holds no key");

    injector.set(&[]).unwrap();
    let (status, body, _) = exchange(&mut connect(port), b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, 503, "an endpoint no longer configured answers 503: {body}");
    assert!(injector.status().is_empty());
}
