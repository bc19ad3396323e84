//! `lazaret-escalate`: asks the host to run a command (Host Escalation).
//!
//! Runs inside the sandbox, as a static binary mounted read-only at
//! `/run/lazaret/bin`. It signs the argv it sends with the session's
//! delegated key (DECISIONS D9), talks mTLS to the coordinator over the
//! Escalation Socket, streams the host command's output back, and exits with
//! its status; a denial, timeout or refusal gives a distinct status and a
//! one-line reason on stderr. With `--relay` ([`relay`]) it is instead the
//! Escalation Socket inside a pod on a cluster, relaying to the coordinator;
//! with `--list-state` ([`list`]) it lists a pod's persistent directories.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use lazaret_protocol::escalation::{
    encode_frame, exit_status, frame_length, paths, RequestPayload, ServerFrame, SessionCredential, SignedRequest, CREDENTIAL_VARIABLE,
    SESSION_ID_VARIABLE,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

mod arena;
mod list;
mod relay;

#[global_allocator]
static ALLOCATOR: arena::Arena = arena::Arena::new();

const USAGE: &str = "\
lazaret-escalate: ask the host to run a command (Lazaret Host Escalation)

Usage: lazaret-escalate [--justification TEXT] -- PROGRAM ARGS...
       lazaret-escalate --version
       lazaret-escalate --relay
       lazaret-escalate --list-state DIR...

The exact argv is signed and sent; the host runs it (in your project
directory on the host, never through a shell) if its policy allows it or a
human approves, denies or edits it. Output and exit status come back.
Exit status: the host command's, or 97 denied, 98 timed out, 99 refused.

--relay serves the Escalation Socket inside a pod on a cluster and carries
its connections over stdin and stdout to the coordinator, which starts it;
it holds no secret (TLS and the signed request run end to end).

--list-state prints the facts of every path under each DIR (NUL-separated
records) for the coordinator's `lazaret state diff` of a pod.";
struct Arguments {
    justification: Option<String>,
    argv: Vec<String>,
}

enum Parsed {
    Run(Arguments),
    Relay,
    ListState(Vec<String>),
    Exit(u8),
}

fn parse_arguments() -> Parsed {
    let mut arguments = std::env::args().skip(1);
    let mut justification = None;
    while let Some(argument) = arguments.next() {
        match argument.as_str() {
            "--version" | "-V" => {
                println!("lazaret-escalate {} (commit {})", env!("CARGO_PKG_VERSION"), env!("LAZARET_GIT_COMMIT"));
                return Parsed::Exit(0);
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                return Parsed::Exit(0);
            }
            "--justification" | "-j" => justification = arguments.next(),
            "--relay" => return Parsed::Relay,
            "--list-state" => return Parsed::ListState(arguments.collect()),
            "--" => {
                let argv: Vec<String> = arguments.collect();
                if argv.is_empty() {
                    break;
                }
                return Parsed::Run(Arguments { justification, argv });
            }
            other => {
                eprintln!("lazaret-escalate: unexpected argument `{other}` (put the command after `--`)\n\n{USAGE}");
                return Parsed::Exit(2);
            }
        }
    }
    eprintln!("{USAGE}");
    Parsed::Exit(2)
}

fn main() -> ExitCode {
    let arguments = match parse_arguments() {
        Parsed::Run(arguments) => arguments,
        Parsed::Relay => {
            return match relay::run() {
                Ok(()) => ExitCode::SUCCESS,
                Err(reason) => {
                    eprintln!("lazaret-escalate: {reason}");
                    ExitCode::FAILURE
                }
            }
        }
        Parsed::ListState(dirs) => {
            return match list::run(&dirs) {
                Ok(()) => ExitCode::SUCCESS,
                Err(reason) => {
                    eprintln!("lazaret-escalate: {reason}");
                    ExitCode::FAILURE
                }
            }
        }
        Parsed::Exit(status) => return ExitCode::from(status),
    };
    match escalate(&arguments) {
        Ok(status) => ExitCode::from(status),
        Err(reason) => {
            eprintln!("lazaret-escalate: refused: {reason}");
            ExitCode::from(exit_status::REFUSED)
        }
    }
}

/// Two random 16-byte values as hex (the request id and the nonce), from
/// one call of the kernel's generator (`getrandom`, through the TLS
/// provider: no file to open).
fn request_id_and_nonce(provider: &rustls::crypto::CryptoProvider) -> Result<(String, String), String> {
    let mut buffer = [0u8; 32];
    provider.secure_random.fill(&mut buffer).map_err(|_| "the kernel's random generator failed".to_owned())?;
    let hex = |bytes: &[u8]| bytes.iter().map(|byte| format!("{byte:02x}")).collect::<String>();
    Ok((hex(&buffer[..16]), hex(&buffer[16..])))
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_millis() as u64).unwrap_or(0)
}

/// Builds the signed request from the session credential in the environment.
fn signed_request(arguments: &Arguments, provider: &rustls::crypto::CryptoProvider) -> Result<(SignedRequest, String), String> {
    let session_id =
        std::env::var(SESSION_ID_VARIABLE).map_err(|_| format!("{SESSION_ID_VARIABLE} is not set: run inside a `lazaret run` session"))?;
    let encoded =
        std::env::var(CREDENTIAL_VARIABLE).map_err(|_| format!("{CREDENTIAL_VARIABLE} is not set: run inside a `lazaret run` session"))?;
    let credential: SessionCredential = BASE64
        .decode(encoded.trim())
        .ok()
        .and_then(|json| serde_json::from_slice(&json).ok())
        .ok_or_else(|| format!("{CREDENTIAL_VARIABLE} is malformed"))?;
    let secret: [u8; 32] = BASE64
        .decode(&credential.delegated_secret_key)
        .ok()
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or_else(|| "the delegated key in the credential is malformed".to_owned())?;
    let key = SigningKey::from_bytes(&secret);
    let (request_id, nonce) = request_id_and_nonce(provider)?;
    let payload = RequestPayload {
        request_id: request_id.clone(),
        session_id,
        argv: arguments.argv.clone(),
        justification: arguments.justification.clone(),
        nonce,
        timestamp_ms: now_ms(),
    };
    let payload = serde_json::to_string(&payload).map_err(|error| error.to_string())?;
    let signature = BASE64.encode(key.sign(payload.as_bytes()).to_bytes());
    Ok((
        SignedRequest { payload, signature, delegation: credential.delegation, delegation_signature: credential.delegation_signature },
        request_id,
    ))
}

/// The client's key, its certificate and the CA certificate, from the
/// bundle the coordinator writes in that order (`paths::CLIENT_BUNDLE`).
fn parse_bundle(bundle: &[u8]) -> Result<(PrivateKeyDer<'static>, Vec<CertificateDer<'static>>, CertificateDer<'static>), String> {
    let key = PrivateKeyDer::from_pem_slice(bundle).map_err(|error| format!("no private key: {error}"))?;
    let certificates: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(bundle).collect::<Result<_, _>>().map_err(|error| format!("bad certificate: {error}"))?;
    match <[CertificateDer<'static>; 2]>::try_from(certificates) {
        Ok([client, ca]) => Ok((key, vec![client], ca)),
        Err(certificates) => {
            Err(format!("expected the client certificate and the CA certificate, found {} certificates", certificates.len()))
        }
    }
}

fn tls_config(provider: Arc<rustls::crypto::CryptoProvider>) -> Result<rustls::ClientConfig, String> {
    // Open and read: no `statx` for a size hint (each call is a trip through
    // the Sentry); the file is under 2 KiB.
    let mut bundle = Vec::with_capacity(4096);
    std::fs::File::open(paths::CLIENT_BUNDLE)
        .and_then(|mut file| file.read_to_end(&mut bundle))
        .map_err(|error| format!("cannot read {}: {error}", paths::CLIENT_BUNDLE))?;
    let (key, chain, ca) = parse_bundle(&bundle).map_err(|error| format!("{}: {error}", paths::CLIENT_BUNDLE))?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).map_err(|error| format!("bad CA certificate: {error}"))?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|error| error.to_string())?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|error| format!("bad client certificate: {error}"))?;
    // One connection per process: nothing to resume, so no ticket is kept
    // (the coordinator sends none either).
    config.resumption = rustls::client::Resumption::disabled();
    Ok(config)
}

fn read_frame(stream: &mut impl Read) -> Result<Option<ServerFrame>, String> {
    let mut prefix = [0u8; 4];
    match stream.read_exact(&mut prefix) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(format!("reading from the coordinator: {error}")),
    }
    let length = frame_length(prefix).ok_or("the coordinator sent an oversized frame")?;
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).map_err(|error| format!("reading from the coordinator: {error}"))?;
    serde_json::from_slice(&body).map(Some).map_err(|error| format!("bad frame from the coordinator: {error}"))
}

/// Completes the handshake and sends `request` in the same write as the
/// client's last handshake flight: one system call (a trip to the Sentry)
/// fewer, and the coordinator reads the request with the handshake's end.
fn handshake_and_send(connection: &mut rustls::ClientConnection, socket: &mut UnixStream, request: &[u8]) -> Result<(), String> {
    let failed = |error: std::io::Error| format!("TLS handshake with the coordinator: {error}");
    while connection.is_handshaking() {
        while connection.wants_write() {
            connection.write_tls(socket).map_err(failed)?;
        }
        if connection.read_tls(socket).map_err(failed)? == 0 {
            return Err("the coordinator closed the connection during the TLS handshake".to_owned());
        }
        connection.process_new_packets().map_err(|error| format!("TLS handshake with the coordinator: {error}"))?;
    }
    // rustls takes at most its buffer limit (64 KiB) of plaintext at a time;
    // a larger request goes out in turns.
    let mut rest = request;
    while !rest.is_empty() {
        let taken = connection.writer().write(rest).map_err(|error| format!("sending the request: {error}"))?;
        rest = &rest[taken..];
        if taken == 0 && !connection.wants_write() {
            return Err("sending the request: the TLS connection takes no more data".to_owned());
        }
        while connection.wants_write() {
            connection.write_tls(socket).map_err(|error| format!("sending the request: {error}"))?;
        }
    }
    Ok(())
}

fn escalate(arguments: &Arguments) -> Result<u8, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let (request, _request_id) = signed_request(arguments, &provider)?;
    let config = tls_config(provider)?;
    let server_name = ServerName::try_from(paths::SERVER_NAME).map_err(|error| error.to_string())?;
    let mut connection = rustls::ClientConnection::new(Arc::new(config), server_name).map_err(|error| error.to_string())?;
    let mut socket = UnixStream::connect(paths::SOCKET).map_err(|error| format!("cannot connect to {}: {error}", paths::SOCKET))?;
    let body = serde_json::to_vec(&request).map_err(|error| error.to_string())?;
    handshake_and_send(&mut connection, &mut socket, &encode_frame(&body))?;
    let mut stream = rustls::StreamOwned::new(connection, socket);
    let mut stdout = std::io::stdout();
    let mut stderr = std::io::stderr();
    loop {
        let Some(frame) = read_frame(&mut stream)? else {
            return Err("the coordinator closed the connection without an answer".to_owned());
        };
        match frame {
            ServerFrame::Pending { message, .. } => eprintln!("lazaret-escalate: {message}"),
            ServerFrame::Running { argv, decision, .. } => {
                if decision == lazaret_protocol::Outcome::Edited {
                    eprintln!("lazaret-escalate: the request was edited; running: {}", argv.join(" "));
                }
            }
            ServerFrame::Stdout { data } => {
                let bytes = BASE64.decode(data).unwrap_or_default();
                let _ = stdout.write_all(&bytes).and_then(|()| stdout.flush());
            }
            ServerFrame::Stderr { data } => {
                let bytes = BASE64.decode(data).unwrap_or_default();
                let _ = stderr.write_all(&bytes).and_then(|()| stderr.flush());
            }
            ServerFrame::Exit { status } => return Ok(u8::try_from(status.clamp(0, 255)).unwrap_or(255)),
            ServerFrame::Denied { reason } => {
                eprintln!("lazaret-escalate: denied: {reason}");
                return Ok(exit_status::DENIED);
            }
            ServerFrame::TimedOut { reason } => {
                eprintln!("lazaret-escalate: timed out: {reason}");
                return Ok(exit_status::TIMED_OUT);
            }
            ServerFrame::Refused { reason } => return Err(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_without_its_key_or_with_a_certificate_missing_is_refused_by_name() {
        let certificate = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let error = parse_bundle(certificate.repeat(2).as_bytes()).expect_err("refused");
        assert!(error.starts_with("no private key"), "{error}");
        let key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        let error = parse_bundle(format!("{key}{certificate}").as_bytes()).expect_err("refused");
        assert!(error.contains("found 1 certificates"), "{error}");
        let (_, chain, _) = parse_bundle(format!("{key}{certificate}{certificate}").as_bytes()).expect("key and two certificates");
        assert_eq!(chain.len(), 1, "the client's own certificate is its chain");
    }
}
