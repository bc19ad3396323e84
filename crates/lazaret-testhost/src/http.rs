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
//! `/v1/messages/count_tokens` a count); a POST to `/v1/responses` answers as
//! the OpenAI Responses API streams (Codex), with the same text; any other
//! path a small JSON body.
//! A missing or wrong key gets 401.
//!
//! Attacks on the key (what an origin might do that the sidecar must keep
//! from the sandbox), answered whatever the key: a TRACE reflects the
//! request as it arrived (`message/http`, as a server with TRACE enabled
//! does); `/headers` echoes the request's headers as JSON
//! (`{"headers":{"name":"value",...}}`; `/headers?chunk=N` sends that in
//! chunks of N bytes 20 ms apart); `/token` echoes the HEADER's value
//! without its first word (a Bearer token alone); `/echo-header` puts the
//! HEADER's value in a response header (`x-echo`); `/gzip` answers with
//! `content-encoding: gzip`. `X-HTTP-Method-Override`, `X-HTTP-Method` and
//! `X-Method-Override` are honoured (the method they name is used, and
//! `override METHOD` printed). A request with `Accept-Encoding` prints
//! `accept-encoding VALUE`.
//!
//! `/bench` answers a small JSON body (as any other path); `/bench-stream`
//! answers 50 chunks 10 ms apart, each `t=NANOS` with the origin's wall clock
//! when it was written. `http-bench ADDRESS:PORT HOST [--tls CA] [-H
//! NAME:VALUE]... [--requests N]` is their client: it connects to
//! ADDRESS:PORT (with `--tls`, TLS to HOST checked against the PEM file CA;
//! without, plain HTTP as to the sidecar's endpoint), sends N requests for
//! `/bench` on one connection (after one not counted) and then one for
//! `/bench-stream`, and prints `request_us_p50=.. request_us_p99=..`
//! (request sent to first byte of the answer), `chunk_us_p50=..
//! chunk_us_p99=..` (origin's clock at the write to this side's clock at the
//! read) and `first_chunk_us=..` (request sent to the first chunk read).
//!
//! `test-certs DIR NAME...`: a CA made for the test (`DIR/ca.pem`, its key
//! never written) and for each NAME a certificate for the DNS name NAME signed
//! by it (`DIR/NAME.pem`, `DIR/NAME.key`), for `https-api` and for the
//! `ca_bundle` a test gives the sidecar.
//!
//! `http-probe PORT PATH [-H NAME:VALUE]... [--times N] [--body-bytes N]
//! [--expect yes] [--method METHOD] [--save FILE]`: sends N requests
//! (default 1) one after another on one
//! connection to 127.0.0.1:PORT with `Host: evil.test` and the given headers
//! (with `--expect yes`, `Expect: 100-continue`, and the body only after a
//! 100 answer; the method is POST with a body, GET without, unless
//! `--method` says), and prints
//! `status CODE`, `chunk +MSms BYTES` for each read of a body (time since
//! the request was sent), `body TEXT` (the first 300 bytes, one line),
//! `cut` when the connection ended before the body did, and,
//! when the server closes, `closed`. With `--save`, every byte read from
//! the connection (heads and bodies) is appended to FILE as it came.

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
            // Chunks go out as they are written (the streaming benchmark).
            let _ = stream.set_nodelay(true);
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
        let overridden = headers
            .iter()
            .find(|(key, _)| matches!(key.as_str(), "x-http-method-override" | "x-http-method" | "x-method-override"))
            .map(|(_, value)| value.to_ascii_uppercase());
        if let Some(overridden) = &overridden {
            println!("override {overridden}");
        }
        if let Some(encoding) = value("accept-encoding") {
            println!("accept-encoding {encoding}");
        }
        let _ = std::io::stdout().flush();
        let method = overridden.as_deref().unwrap_or(method);
        let out = reader.get_mut();
        if method == "TRACE" {
            // As a server with TRACE enabled: the request as it arrived.
            let mut reflected = format!("{first}\r\n");
            for (name, value) in &headers {
                reflected.push_str(&format!("{name}: {value}\r\n"));
            }
            reflected.push_str("\r\n");
            write!(
                out,
                "HTTP/1.1 200 OK\r\ncontent-type: message/http\r\ncontent-length: {}\r\n\r\n{reflected}",
                reflected.len() + body.len()
            )?;
            out.write_all(&body)?;
        } else if path == "/headers" || path.starts_with("/headers?") {
            let fields: Vec<String> =
                headers.iter().map(|(name, value)| format!("\"{}\":\"{}\"", json_escape(name), json_escape(value))).collect();
            let echo = format!("{{\"headers\":{{{}}}}}\n", fields.join(","));
            let chunk: usize = path.split_once("?chunk=").and_then(|(_, size)| size.parse().ok()).unwrap_or(0);
            if chunk == 0 {
                write!(out, "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{echo}", echo.len())?;
            } else {
                write!(out, "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")?;
                for piece in echo.as_bytes().chunks(chunk) {
                    write!(out, "{:x}\r\n", piece.len())?;
                    out.write_all(piece)?;
                    write!(out, "\r\n")?;
                    out.flush()?;
                    std::thread::sleep(Duration::from_millis(20));
                }
                write!(out, "0\r\n\r\n")?;
            }
        } else if path == "/token" {
            let given = value(header).unwrap_or("");
            let token = given.split_once(' ').map_or(given, |(_, rest)| rest.trim_start());
            let body = format!("{{\"token\":\"{}\"}}", json_escape(token));
            write!(out, "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len())?;
        } else if path == "/echo-header" {
            let given = value(header).unwrap_or("");
            write!(out, "HTTP/1.1 200 OK\r\nx-echo: {given}\r\ncontent-type: text/plain\r\ncontent-length: 3\r\n\r\nok\n")?;
        } else if path == "/gzip" {
            write!(out, "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-encoding: gzip\r\ncontent-length: 4\r\n\r\nzzzz")?;
        } else if key != "ok" {
            let body = r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
            write!(out, "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len())?;
        } else if path == "/bench-stream" {
            bench_stream(out)?;
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
        } else if method == "POST" && path.starts_with("/v1/responses") {
            responses_api(out)?;
        } else {
            let body = format!(r#"{{"ok":true,"path":"{path}","received":{length}}}"#);
            write!(out, "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len())?;
        }
        out.flush()?;
    }
    Ok(())
}

/// `text` as the inside of a JSON string.
fn json_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => escaped.push_str("\\\""),
            '\\' => escaped.push_str("\\\\"),
            c if (c as u32) < 0x20 => escaped.push_str(&format!("\\u{:04x}", c as u32)),
            c => escaped.push(c),
        }
    }
    escaped
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

/// Chunks of `/bench-stream`, and the time between them.
const BENCH_CHUNKS: usize = 50;
const BENCH_GAP: Duration = Duration::from_millis(10);

/// `/bench-stream`: BENCH_CHUNKS chunks BENCH_GAP apart, each `t=NANOS\n`
/// with the wall clock (CLOCK_REALTIME, ns) just before it is written.
fn bench_stream(out: &mut impl Write) -> std::io::Result<()> {
    write!(out, "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")?;
    out.flush()?;
    for index in 0..BENCH_CHUNKS {
        if index > 0 {
            std::thread::sleep(BENCH_GAP);
        }
        let event = format!("t={}\n", wall_nanos());
        write!(out, "{:x}\r\n{event}\r\n", event.len())?;
        out.flush()?;
    }
    write!(out, "0\r\n\r\n")
}

fn wall_nanos() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|elapsed| elapsed.as_nanos()).unwrap_or(0)
}

/// An answer of the OpenAI Responses API (what Codex asks): the event stream
/// of a response whose one output is an assistant message with the text
/// `LAZARET-OK`.
fn responses_api(out: &mut impl Write) -> std::io::Result<()> {
    write!(out, "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")?;
    let usage = r#""usage":{"input_tokens":1,"input_tokens_details":null,"output_tokens":1,"output_tokens_details":null,"total_tokens":2}"#;
    let events = [
        ("response.created", r#"{"type":"response.created","response":{"id":"resp_lzt"}}"#.to_owned()),
        (
            "response.output_item.done",
            format!(
                r#"{{"type":"response.output_item.done","output_index":0,"item":{{"type":"message","role":"assistant","id":"msg_lzt","content":[{{"type":"output_text","text":"{ANSWER}"}}]}}}}"#
            ),
        ),
        ("response.completed", format!(r#"{{"type":"response.completed","response":{{"id":"resp_lzt",{usage}}}}}"#)),
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
    let (mut method, mut save) = (None::<String>, None::<std::fs::File>);
    let mut rest = args[2..].iter();
    while let Some(option) = rest.next() {
        let value = rest.next().ok_or(format!("{option} needs a value"))?;
        match option.as_str() {
            "-H" => headers.push(value.clone()),
            "--times" => times = value.parse().map_err(|_| format!("bad --times {value:?}"))?,
            "--body-bytes" => body_bytes = Some(value.parse().map_err(|_| format!("bad --body-bytes {value:?}"))?),
            "--expect" => expect = value == "yes",
            "--method" => method = Some(value.clone()),
            "--save" => {
                let file = std::fs::OpenOptions::new().create(true).append(true).open(value);
                save = Some(file.map_err(|error| format!("{value}: {error}"))?);
            }
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|error| format!("connect 127.0.0.1:{port}: {error}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(20))).map_err(|error| error.to_string())?;
    let mut out = stream.try_clone().map_err(|error| error.to_string())?;
    let mut reader = BufReader::new(Saving { stream, save });
    for _ in 0..times {
        let method = method.as_deref().unwrap_or(if body_bytes.is_some() { "POST" } else { "GET" });
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
        let bodiless = method == "HEAD" || matches!(first.split(' ').nth(1), Some("204" | "304"));
        loop {
            if bodiless {
                break;
            }
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
                if length.is_some() || chunked {
                    println!("cut");
                }
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

/// The probe's connection: every byte read is also appended to the
/// `--save` file, if any.
struct Saving {
    stream: TcpStream,
    save: Option<std::fs::File>,
}

impl Read for Saving {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        let read = self.stream.read(buffer)?;
        if let Some(save) = &mut self.save {
            save.write_all(&buffer[..read])?;
        }
        Ok(read)
    }
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

/// A connection of `http-bench`: plain TCP, or TLS that the client does itself.
trait Connection: Read + Write {}
impl<T: Read + Write> Connection for T {}

/// `http-bench ADDRESS:PORT HOST [--tls CA] [-H NAME:VALUE]... [--requests N]`:
/// the streaming benchmark's client (see the module's documentation).
pub fn http_bench(args: &[String]) -> Result<(), String> {
    let usage = "usage: http-bench ADDRESS:PORT HOST [--tls CA] [-H NAME:VALUE]... [--requests N]";
    let [target, host, rest @ ..] = args else { return Err(usage.into()) };
    let (mut headers, mut requests, mut ca) = (Vec::new(), 50usize, None::<String>);
    let mut rest = rest.iter();
    while let Some(option) = rest.next() {
        let value = rest.next().ok_or(format!("{option} needs a value"))?;
        match option.as_str() {
            "-H" => headers.push(value.clone()),
            "--requests" => requests = value.parse().map_err(|_| format!("bad --requests {value:?}"))?,
            "--tls" => ca = Some(value.clone()),
            other => return Err(format!("unknown option {other:?}; {usage}")),
        }
    }
    let tcp = TcpStream::connect(target.as_str()).map_err(|error| format!("connect {target}: {error}"))?;
    tcp.set_nodelay(true).map_err(|error| error.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(20))).map_err(|error| error.to_string())?;
    let stream: Box<dyn Connection> = match ca {
        None => Box::new(tcp),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for certificate in CertificateDer::pem_file_iter(&ca).map_err(|error| format!("{ca}: {error}"))? {
                roots.add(certificate.map_err(|error| format!("{ca}: {error}"))?).map_err(|error| format!("{ca}: {error}"))?;
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|error| error.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
            let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|error| format!("{host}: {error}"))?;
            let connection = rustls::ClientConnection::new(Arc::new(config), name).map_err(|error| error.to_string())?;
            Box::new(rustls::StreamOwned::new(connection, tcp))
        }
    };
    let mut stream = BufReader::new(stream);
    let request = |path: &str| {
        let mut text = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n");
        for header in &headers {
            text.push_str(header);
            text.push_str("\r\n");
        }
        text + "\r\n"
    };
    // Requests one after another on one kept connection (the first one, which
    // also does the TLS handshake when there is one, is not counted).
    let mut first_byte = Vec::with_capacity(requests);
    for index in 0..=requests {
        let sent = Instant::now();
        stream.get_mut().write_all(request("/bench").as_bytes()).map_err(|error| format!("write: {error}"))?;
        stream.get_mut().flush().map_err(|error| format!("write: {error}"))?;
        stream.fill_buf().map_err(|error| format!("read: {error}"))?;
        let elapsed = sent.elapsed();
        let (first, response) = read_head(&mut stream).map_err(|error| format!("read: {error}"))?.ok_or("closed")?;
        if first.split(' ').nth(1) != Some("200") {
            return Err(format!("/bench answered {first:?}"));
        }
        let length: usize = response.iter().find(|(key, _)| key == "content-length").and_then(|(_, value)| value.parse().ok()).unwrap_or(0);
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).map_err(|error| format!("read: {error}"))?;
        if index > 0 {
            first_byte.push(elapsed.as_micros());
        }
    }
    // One streamed answer: how long after the origin wrote each chunk (its
    // wall clock) it was read here (this side's wall clock).
    let sent = Instant::now();
    stream.get_mut().write_all(request("/bench-stream").as_bytes()).map_err(|error| format!("write: {error}"))?;
    let (first, _) = read_head(&mut stream).map_err(|error| format!("read: {error}"))?.ok_or("closed")?;
    if first.split(' ').nth(1) != Some("200") {
        return Err(format!("/bench-stream answered {first:?}"));
    }
    let mut chunk_delay = Vec::new();
    let mut first_chunk = None;
    loop {
        let mut size = String::new();
        stream.read_line(&mut size).map_err(|error| format!("read: {error}"))?;
        let size = usize::from_str_radix(size.trim(), 16).map_err(|_| format!("bad chunk size {size:?}"))?;
        let mut data = vec![0u8; size + 2];
        stream.read_exact(&mut data).map_err(|error| format!("read: {error}"))?;
        if size == 0 {
            break;
        }
        let now = wall_nanos();
        first_chunk.get_or_insert_with(|| sent.elapsed().as_micros());
        for line in String::from_utf8_lossy(&data[..size]).lines() {
            if let Some(stamp) = line.strip_prefix("t=").and_then(|stamp| stamp.parse::<u128>().ok()) {
                chunk_delay.push(now.saturating_sub(stamp) / 1000);
            }
        }
    }
    let percentile = |values: &mut Vec<u128>, p: usize| {
        values.sort_unstable();
        values.get((values.len().saturating_sub(1)) * p / 100).copied().unwrap_or(0)
    };
    println!(
        "request_us_p50={} request_us_p99={} chunk_us_p50={} chunk_us_p99={} first_chunk_us={} chunks={}",
        percentile(&mut first_byte, 50),
        percentile(&mut first_byte, 99),
        percentile(&mut chunk_delay, 50),
        percentile(&mut chunk_delay, 99),
        first_chunk.unwrap_or(0),
        chunk_delay.len()
    );
    Ok(())
}
