//! The credential endpoint's test hosts: `https-api`, an HTTPS origin that
//! checks the key it is given, and `http-probe`, the client a test runs in
//! the sandbox against the sidecar's endpoint.
//!
//! `https-api PORT CERT KEY HEADER EXPECTED`: TLS with the PEM certificate
//! chain CERT and private key KEY, HTTP/1.1 with keep-alive. For every
//! request it prints `request conn=N METHOD PATH host=HOST key=ok|bad|missing
//! copies=C body=B` (N counts TLS connections from 1; C is how many HEADER
//! headers came; the key itself is never printed). Paths: `/stream` answers
//! `data: 1`, `data: 2`, `data: 3` as chunks one second apart;
//! `/v1/messages` answers as the Anthropic Messages API would, with the text
//! `LAZARET-OK` (server-sent events when the body asks for `"stream":true`;
//! `/v1/messages/count_tokens` a count); any other path a small JSON body.
//! A missing or wrong key gets 401.
//!
//! `test-certs DIR NAME...`: a CA made for the test (`DIR/ca.pem`, its key
//! never written) and for each NAME a certificate for the DNS name NAME signed
//! by it (`DIR/NAME.pem`, `DIR/NAME.key`), for `https-api` and for the
//! `ca_bundle` a test gives the sidecar.
//!
//! `http-probe PORT PATH [-H NAME:VALUE]... [--times N] [--body-bytes N]
//! [--expect yes]`: sends N requests (default 1) one after another on one
//! connection to 127.0.0.1:PORT with `Host: evil.test` and the given headers
//! (with `--expect yes`, `Expect: 100-continue`, and the body only after a
//! 100 answer), and prints
//! `status CODE`, `chunk +MSms BYTES` for each read of a body (time since
//! the request was sent), `body TEXT` (the first 300 bytes, one line) and,
//! when the server closes, `closed`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub fn https_api(args: &[String]) -> Result<(), String> {
    let [port, cert, key, header, expected] = args else {
        return Err("usage: https-api PORT CERT KEY HEADER EXPECTED".into());
    };
    let port: u16 = port.parse().map_err(|_| format!("bad port {port:?}"))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|error| format!("{cert}: {error}"))?
        .collect::<Result<_, _>>()
        .map_err(|error| format!("{cert}: {error}"))?;
    let private = PrivateKeyDer::from_pem_file(key).map_err(|error| format!("{key}: {error}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| error.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|error| error.to_string())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let config = Arc::new(config);
    let listener = TcpListener::bind(("::", port)).or_else(|_| TcpListener::bind(("0.0.0.0", port))).map_err(|error| error.to_string())?;
    println!("listening");
    let _ = std::io::stdout().flush();
    let connections = Arc::new(AtomicU64::new(0));
    let (header, expected) = (Arc::new(header.to_ascii_lowercase()), Arc::new(expected.clone()));
    for stream in listener.incoming().flatten() {
        let number = connections.fetch_add(1, Ordering::SeqCst) + 1;
        let (config, header, expected) = (Arc::clone(&config), Arc::clone(&header), Arc::clone(&expected));
        std::thread::spawn(move || {
            let Ok(connection) = rustls::ServerConnection::new(config) else { return };
            let tls = rustls::StreamOwned::new(connection, stream);
            let _ = serve_api(tls, number, &header, &expected);
        });
    }
    Ok(())
}

/// A head's first line and its headers (names in lower case).
type Head = (String, Vec<(String, String)>);

fn read_head(reader: &mut impl BufRead) -> std::io::Result<Option<Head>> {
    let mut first = String::new();
    if reader.read_line(&mut first)? == 0 {
        return Ok(None);
    }
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        let line = line.trim_end();
        if line.is_empty() {
            return Ok(Some((first.trim_end().to_owned(), headers)));
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
}

fn serve_api(
    tls: rustls::StreamOwned<rustls::ServerConnection, TcpStream>,
    number: u64,
    header: &str,
    expected: &str,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(tls);
    while let Some((first, headers)) = read_head(&mut reader)? {
        let value = |name: &str| headers.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str());
        let length: usize = value("content-length").and_then(|length| length.parse().ok()).unwrap_or(0);
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body)?;
        let copies = headers.iter().filter(|(key, _)| key == header).count();
        let key = match value(header) {
            None => "missing",
            Some(given) if given == expected && copies == 1 => "ok",
            Some(_) => "bad",
        };
        let mut parts = first.split(' ');
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        println!("request conn={number} {method} {path} host={} key={key} copies={copies} body={length}", value("host").unwrap_or("-"));
        let _ = std::io::stdout().flush();
        let out = reader.get_mut();
        if key != "ok" {
            let body = r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
            write!(out, "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len())?;
        } else if path == "/stream" {
            write!(out, "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")?;
            for index in 1..=3 {
                if index > 1 {
                    std::thread::sleep(Duration::from_secs(1));
                }
                let event = format!("data: {index}\n\n");
                write!(out, "{:x}\r\n{event}\r\n", event.len())?;
                out.flush()?;
            }
            write!(out, "0\r\n\r\n")?;
        } else if path.starts_with("/v1/messages") {
            messages_api(out, path, &body)?;
        } else {
            let body = format!(r#"{{"ok":true,"path":"{path}","received":{length}}}"#);
            write!(out, "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len())?;
        }
        out.flush()?;
    }
    Ok(())
}

/// The model's answer, as the Messages API gives it.
const ANSWER: &str = "LAZARET-OK";

/// An answer of the Anthropic Messages API: a count for `count_tokens`, the
/// event stream when the request asks for one, else the message as JSON.
fn messages_api(out: &mut impl Write, path: &str, request: &[u8]) -> std::io::Result<()> {
    let json = |out: &mut dyn Write, body: &str| {
        write!(out, "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len())
    };
    if path.contains("count_tokens") {
        return json(out, r#"{"input_tokens":1}"#);
    }
    let usage = r#""usage":{"input_tokens":1,"output_tokens":1}"#;
    let wants_stream = String::from_utf8_lossy(request).replace(' ', "").contains("\"stream\":true");
    if !wants_stream {
        let body = format!(
            r#"{{"id":"msg_lzt","type":"message","role":"assistant","model":"claude-test","content":[{{"type":"text","text":"{ANSWER}"}}],"stop_reason":"end_turn","stop_sequence":null,{usage}}}"#
        );
        return json(out, &body);
    }
    write!(out, "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")?;
    let events = [
        (
            "message_start",
            format!(
                r#"{{"type":"message_start","message":{{"id":"msg_lzt","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,{usage}}}}}"#
            ),
        ),
        ("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.to_owned()),
        ("content_block_delta", format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{ANSWER}"}}}}"#)),
        ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#.to_owned()),
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":1}}"#.to_owned(),
        ),
        ("message_stop", r#"{"type":"message_stop"}"#.to_owned()),
    ];
    for (name, data) in events {
        let event = format!("event: {name}\ndata: {data}\n\n");
        write!(out, "{:x}\r\n{event}\r\n", event.len())?;
        out.flush()?;
    }
    write!(out, "0\r\n\r\n")
}

pub fn http_probe(args: &[String]) -> Result<(), String> {
    let port: u16 = args.first().and_then(|port| port.parse().ok()).ok_or("usage: http-probe PORT PATH [options]")?;
    let path = args.get(1).ok_or("missing PATH")?;
    let (mut headers, mut times, mut body_bytes, mut expect) = (Vec::new(), 1usize, None::<usize>, false);
    let mut rest = args[2..].iter();
    while let Some(option) = rest.next() {
        let value = rest.next().ok_or(format!("{option} needs a value"))?;
        match option.as_str() {
            "-H" => headers.push(value.clone()),
            "--times" => times = value.parse().map_err(|_| format!("bad --times {value:?}"))?,
            "--body-bytes" => body_bytes = Some(value.parse().map_err(|_| format!("bad --body-bytes {value:?}"))?),
            "--expect" => expect = value == "yes",
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|error| format!("connect 127.0.0.1:{port}: {error}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(20))).map_err(|error| error.to_string())?;
    let mut out = stream.try_clone().map_err(|error| error.to_string())?;
    let mut reader = BufReader::new(stream);
    for _ in 0..times {
        let method = if body_bytes.is_some() { "POST" } else { "GET" };
        let mut request = format!("{method} {path} HTTP/1.1\r\nHost: evil.test\r\n");
        for header in &headers {
            request.push_str(header);
            request.push_str("\r\n");
        }
        if let Some(bytes) = body_bytes {
            request.push_str(&format!("content-length: {bytes}\r\n"));
            if expect {
                request.push_str("expect: 100-continue\r\n");
            }
        }
        request.push_str("\r\n");
        let sent = Instant::now();
        let body = vec![b'x'; body_bytes.unwrap_or(0)];
        if let Err(error) = out.write_all(request.as_bytes()) {
            println!("write-error {error}");
        }
        let mut head = None;
        if expect && body_bytes.is_some() {
            head = read_head(&mut reader).map_err(|error| error.to_string())?;
            if head.as_ref().is_some_and(|(first, _)| first.split(' ').nth(1) == Some("100")) {
                println!("continue");
                head = None;
            }
        }
        if head.is_none() {
            if let Err(error) = out.write_all(&body) {
                println!("write-error {error}");
            }
            head = read_head(&mut reader).map_err(|error| error.to_string())?;
        }
        let Some((first, response_headers)) = head else {
            println!("closed");
            return Ok(());
        };
        println!("status {}", first.split(' ').nth(1).unwrap_or("?"));
        let value = |name: &str| response_headers.iter().find(|(key, _)| key == name).map(|(_, value)| value.clone());
        let chunked = value("transfer-encoding").is_some_and(|encoding| encoding.contains("chunked"));
        let length: Option<usize> = value("content-length").and_then(|length| length.parse().ok());
        let mut body = Vec::new();
        loop {
            if let Some(length) = length {
                if body.len() >= length {
                    break;
                }
            }
            if chunked && body.ends_with(b"0\r\n\r\n") {
                break;
            }
            let available = match reader.fill_buf() {
                Ok(available) => available,
                Err(error) => {
                    println!("read-error {error}");
                    break;
                }
            };
            if available.is_empty() {
                break;
            }
            let take = match length {
                Some(length) => available.len().min(length - body.len()),
                None => available.len(),
            };
            println!("chunk +{}ms {take}", sent.elapsed().as_millis());
            body.extend_from_slice(&available[..take]);
            reader.consume(take);
        }
        let text: String = String::from_utf8_lossy(&body).chars().take(300).map(|c| if c.is_control() { ' ' } else { c }).collect();
        println!("body {text}");
        if value("connection").is_some_and(|connection| connection.eq_ignore_ascii_case("close")) {
            println!("closed");
            return Ok(());
        }
    }
    Ok(())
}

pub fn test_certs(args: &[String]) -> Result<(), String> {
    let [dir, names @ ..] = args else {
        return Err("usage: test-certs DIR NAME...".into());
    };
    if names.is_empty() {
        return Err("usage: test-certs DIR NAME...".into());
    }
    let dir = std::path::Path::new(dir);
    std::fs::create_dir_all(dir).map_err(|error| format!("{}: {error}", dir.display()))?;
    let write = |name: String, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|error| format!("{}: {error}", path.display()))
    };
    let ca_key = rcgen::KeyPair::generate().map_err(|error| error.to_string())?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(|error| error.to_string())?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, "lazaret test CA");
    let ca = params.self_signed(&ca_key).map_err(|error| error.to_string())?;
    write("ca.pem".into(), ca.pem())?;
    let issuer = rcgen::Issuer::new(params, ca_key);
    for name in names {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(format!("{name:?} is not a DNS name"));
        }
        let key = rcgen::KeyPair::generate().map_err(|error| error.to_string())?;
        let certificate = rcgen::CertificateParams::new(vec![name.clone()])
            .and_then(|params| params.signed_by(&key, &issuer))
            .map_err(|error| format!("{name}: {error}"))?;
        write(format!("{name}.pem"), certificate.pem())?;
        write(format!("{name}.key"), key.serialize_pem())?;
    }
    Ok(())
}
