//! `lazaret-escalate`: asks the host to run a command (Host Escalation).
//!
//! Runs inside the sandbox, as a static binary mounted read-only at
//! `/run/lazaret/bin`. It signs the argv it sends with the session's
//! delegated key (DECISIONS D9), talks mTLS to the coordinator over the
//! Escalation Socket, streams the host command's output back, and exits with
//! its status; a denial, timeout or refusal gives a distinct status and a
//! one-line reason on stderr.

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

const USAGE: &str = "\
lazaret-escalate: ask the host to run a command (Lazaret Host Escalation)

Usage: lazaret-escalate [--justification TEXT] -- PROGRAM ARGS...
       lazaret-escalate --version

The exact argv is signed and sent; the host runs it (in your project
directory on the host, never through a shell) if its policy allows it or a
human approves, denies or edits it. Output and exit status come back.
Exit status: the host command's, or 97 denied, 98 timed out, 99 refused.";

struct Arguments {
    justification: Option<String>,
    argv: Vec<String>,
}

enum Parsed {
    Run(Arguments),
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

fn random_hex(bytes: usize) -> Result<String, String> {
    let mut buffer = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut file| file.read_exact(&mut buffer))
        .map_err(|error| format!("cannot read /dev/urandom: {error}"))?;
    Ok(buffer.iter().map(|byte| format!("{byte:02x}")).collect())
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_millis() as u64).unwrap_or(0)
}

/// Builds the signed request from the session credential in the environment.
fn signed_request(arguments: &Arguments) -> Result<(SignedRequest, String), String> {
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
    let request_id = random_hex(16)?;
    let payload = RequestPayload {
        request_id: request_id.clone(),
        session_id,
        argv: arguments.argv.clone(),
        justification: arguments.justification.clone(),
        nonce: random_hex(16)?,
        timestamp_ms: now_ms(),
    };
    let payload = serde_json::to_string(&payload).map_err(|error| error.to_string())?;
    let signature = BASE64.encode(key.sign(payload.as_bytes()).to_bytes());
    Ok((
        SignedRequest { payload, signature, delegation: credential.delegation, delegation_signature: credential.delegation_signature },
        request_id,
    ))
}

fn tls_config() -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    let ca =
        CertificateDer::from_pem_file(paths::CA_CERTIFICATE).map_err(|error| format!("cannot read {}: {error}", paths::CA_CERTIFICATE))?;
    roots.add(ca).map_err(|error| format!("bad CA certificate: {error}"))?;
    let chain = vec![CertificateDer::from_pem_file(paths::CLIENT_CERTIFICATE)
        .map_err(|error| format!("cannot read {}: {error}", paths::CLIENT_CERTIFICATE))?];
    let key = PrivateKeyDer::from_pem_file(paths::CLIENT_KEY).map_err(|error| format!("cannot read {}: {error}", paths::CLIENT_KEY))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|error| error.to_string())?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|error| format!("bad client certificate: {error}"))
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

fn escalate(arguments: &Arguments) -> Result<u8, String> {
    let (request, _request_id) = signed_request(arguments)?;
    let config = tls_config()?;
    let server_name = ServerName::try_from(paths::SERVER_NAME).map_err(|error| error.to_string())?;
    let connection = rustls::ClientConnection::new(Arc::new(config), server_name).map_err(|error| error.to_string())?;
    let socket = UnixStream::connect(paths::SOCKET).map_err(|error| format!("cannot connect to {}: {error}", paths::SOCKET))?;
    let mut stream = rustls::StreamOwned::new(connection, socket);
    let body = serde_json::to_vec(&request).map_err(|error| error.to_string())?;
    stream.write_all(&encode_frame(&body)).and_then(|()| stream.flush()).map_err(|error| format!("sending the request: {error}"))?;
    let mut stdout = std::io::stdout();
    let mut stderr = std::io::stderr();
    loop {
        let Some(frame) = read_frame(&mut stream)? else {
            return Err("the coordinator closed the connection without an answer".to_owned());
        };
        match frame {
            ServerFrame::Pending { message, .. } => eprintln!("lazaret-escalate: {message}"),
            ServerFrame::Running { argv, decision, .. } => {
                if decision == "edited" {
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
