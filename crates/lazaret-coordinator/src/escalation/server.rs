//! The Escalation Socket: mTLS over a Unix socket bind-mounted into the
//! sandbox. Per connection: complete the handshake, check the client
//! certificate's identity against this sandbox before reading a byte of
//! payload, verify the signed request, decide, wait for a human if needed,
//! run, stream the output, audit.

use std::sync::Arc;
use std::time::Duration;

use lazaret_core::policy::{self, Decision, EscalationRequest};
use lazaret_core::time::now_ms;
use lazaret_protocol::escalation::{encode_frame, frame_length, RequestPayload, ServerFrame, SignedRequest};
use lazaret_protocol::{AuditEvent, AuditRecord, DecisionSource, EscalationAudit, Event, Outcome, PendingEscalation};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio_rustls::TlsAcceptor;

use super::{execute, verify, Answer, EscalationDomain, EscalationSettings};

/// How long a client has for the handshake and its request.
const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(10);

pub struct EscalationServer {
    pub acceptor: TlsAcceptor,
    /// The URI SAN the client certificate must carry.
    pub expected_identity: String,
    /// The domain's escalation policy, timeouts and identity.
    pub settings: EscalationSettings,
    /// Connections being served (handshake, request, wait, run).
    pub connections: Arc<tokio::sync::Semaphore>,
    /// Host commands running at once.
    pub running: Arc<tokio::sync::Semaphore>,
    /// Refusals of connections that never authenticated, summarised.
    pub refusals: std::sync::Mutex<super::limits::RefusalLog>,
}

impl EscalationServer {
    pub fn new(acceptor: TlsAcceptor, expected_identity: String, settings: EscalationSettings) -> EscalationServer {
        EscalationServer {
            acceptor,
            expected_identity,
            settings,
            connections: Arc::new(tokio::sync::Semaphore::new(super::limits::MAX_CONNECTIONS)),
            running: Arc::new(tokio::sync::Semaphore::new(super::limits::MAX_RUNNING_COMMANDS)),
            refusals: std::sync::Mutex::new(super::limits::RefusalLog::default()),
        }
    }

    /// Audits a refusal of an unauthenticated connection, or counts it for
    /// the window's summary (attack review finding 14: 3,000 junk
    /// connections wrote 3,000 records in 1.9 s).
    async fn refuse_unauthenticated(&self, domain: &impl EscalationDomain, kind: &str, detail: String, received_at_ms: u64) {
        let (audit_now, summaries) =
            self.refusals.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).note(kind, std::time::Instant::now());
        write_summaries(domain, summaries).await;
        if audit_now {
            domain.audit(refused_connections(1, detail, received_at_ms)).await;
        }
    }
}

impl EscalationServer {
    /// Writes the counts of a window that has not ended (at teardown).
    pub async fn write_remaining_refusals(&self, domain: &impl EscalationDomain) {
        let summaries = self.refusals.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).drain();
        write_summaries(domain, summaries).await;
    }
}

async fn write_summaries(domain: &impl EscalationDomain, summaries: Vec<(String, u64)>) {
    for (kind, count) in summaries {
        let reason = format!(
            "{count} more connections refused ({kind}) within {} s; counted, not recorded one by one",
            super::limits::REFUSAL_WINDOW.as_secs()
        );
        domain.audit(refused_connections(count, reason, now_ms())).await;
    }
}

pub async fn serve<D: EscalationDomain>(listener: UnixListener, server: Arc<EscalationServer>, domain: Arc<D>) {
    let mut backoff = lazaret_rpc::accept::Backoff::default();
    let mut flush = tokio::time::interval(super::limits::REFUSAL_WINDOW);
    loop {
        let stream = tokio::select! {
            stream = lazaret_rpc::accept::next(&listener, &mut backoff, "escalation") => stream,
            _ = flush.tick() => {
                let summaries = server.refusals.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).flush(std::time::Instant::now());
                write_summaries(&*domain, summaries).await;
                continue;
            }
        };
        // A cap on connections at once: past it a connection is closed
        // unread, and counted.
        let Ok(permit) = server.connections.clone().try_acquire_owned() else {
            drop(stream);
            let detail = format!("more than {} connections at once; closed unread", super::limits::MAX_CONNECTIONS);
            server.refuse_unauthenticated(&*domain, "too many connections", detail, now_ms()).await;
            continue;
        };
        let server = server.clone();
        let domain = domain.clone();
        tokio::spawn(async move {
            handle(stream, &server, &*domain).await;
            drop(permit);
        });
    }
}

/// A new request's id: random, minted here for every request that gets
/// past authentication (DECISIONS D16). The id the client sent is only a
/// correlation value: an agent that reused a pending request's id ended
/// both requests, and could have named the id of a request it wanted a
/// link in an editor to answer.
fn mint_request_id() -> Result<String, Unreadable> {
    lazaret_core::ids::random_hex(16).map_err(Unreadable::NoRequestId)
}

/// Why no request could be taken from a connection: its `Display` is the
/// reason the audit trail and the client get.
#[derive(Debug, thiserror::Error)]
enum Unreadable {
    #[error("reading the request: {0}")]
    Read(std::io::Error),
    #[error("request frame too large")]
    TooLarge,
    #[error("malformed request: {0}")]
    Malformed(serde_json::Error),
    #[error("the coordinator could not make a request id: {0}")]
    NoRequestId(std::io::Error),
}

/// The record of `connections` connections that never made a request.
fn refused_connections(connections: u64, reason: String, received_at_ms: u64) -> AuditRecord {
    AuditRecord {
        sequence: 0,
        previous_hash: String::new(),
        hash: String::new(),
        event: AuditEvent::ConnectionRefused { connections },
        outcome: Outcome::Rejected,
        reason: Some(reason),
        decided_by: None,
        received_at_ms,
        decided_at_ms: None,
        finished_at_ms: None,
    }
}

/// An escalation's audit record while it is decided and run: the request's
/// own fields and the record's envelope, written as one [`AuditRecord`].
struct Draft {
    escalation: EscalationAudit,
    outcome: Outcome,
    reason: Option<String>,
    decided_by: Option<DecisionSource>,
    received_at_ms: u64,
    decided_at_ms: Option<u64>,
    finished_at_ms: Option<u64>,
}

impl Draft {
    /// The record as it stands (its chain fields are the store's).
    fn record(self) -> AuditRecord {
        AuditRecord {
            sequence: 0,
            previous_hash: String::new(),
            hash: String::new(),
            event: AuditEvent::Escalation(self.escalation),
            outcome: self.outcome,
            reason: self.reason,
            decided_by: self.decided_by,
            received_at_ms: self.received_at_ms,
            decided_at_ms: self.decided_at_ms,
            finished_at_ms: self.finished_at_ms,
        }
    }
}

async fn send(stream: &mut (impl AsyncWrite + Unpin), frame: &ServerFrame) {
    send_after(stream, None, frame).await;
}

/// Sends `held` (if any) and `frame` in one write: one TLS record, one
/// wake-up of the client inside the sandbox (each costs it a trip through
/// the Sentry).
async fn send_after(stream: &mut (impl AsyncWrite + Unpin), held: Option<ServerFrame>, frame: &ServerFrame) {
    let mut bytes = Vec::new();
    for frame in held.iter().chain([frame]) {
        if let Ok(body) = serde_json::to_vec(frame) {
            bytes.extend_from_slice(&encode_frame(&body));
        }
    }
    let _ = stream.write_all(&bytes).await;
    let _ = stream.flush().await;
}

async fn handle<D: EscalationDomain>(stream: UnixStream, server: &EscalationServer, domain: &D) {
    let received_at_ms = now_ms();
    let tls = match tokio::time::timeout(REQUEST_READ_TIMEOUT, server.acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(error)) => {
            server.refuse_unauthenticated(domain, "TLS handshake failed", format!("TLS handshake failed: {error}"), received_at_ms).await;
            return;
        }
        Err(_) => {
            server.refuse_unauthenticated(domain, "TLS handshake timed out", "TLS handshake timed out".to_owned(), received_at_ms).await;
            return;
        }
    };
    let mut tls = tls;
    // Identity first: nothing of the payload is parsed before this holds.
    let identities: Vec<String> = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|leaf| super::trust_anchor::uri_sans(leaf))
        .unwrap_or_default();
    if !identities.contains(&server.expected_identity) {
        let detail = format!("client certificate identity {identities:?} is not this sandbox's");
        server.refuse_unauthenticated(domain, "foreign client certificate", detail, received_at_ms).await;
        send(&mut tls, &ServerFrame::Refused { reason: "this certificate does not belong to this sandbox".to_owned() }).await;
        return;
    }
    let signed = match tokio::time::timeout(REQUEST_READ_TIMEOUT, read_request(&mut tls)).await {
        Ok(Ok(signed)) => signed,
        Ok(Err(unreadable)) => {
            let reason = unreadable.to_string();
            server.refuse_unauthenticated(domain, "unreadable request", reason.clone(), received_at_ms).await;
            send(&mut tls, &ServerFrame::Refused { reason }).await;
            return;
        }
        Err(_) => {
            server.refuse_unauthenticated(domain, "no request in time", "no request within 10 s".to_owned(), received_at_ms).await;
            return;
        }
    };
    let request_id = match mint_request_id() {
        Ok(request_id) => request_id,
        Err(unreadable) => {
            let reason = unreadable.to_string();
            server.refuse_unauthenticated(domain, "no request id", reason.clone(), received_at_ms).await;
            send(&mut tls, &ServerFrame::Refused { reason }).await;
            return;
        }
    };
    let verified = {
        let mut guard = domain.broker().replay_guard.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        verify::verify(&signed, |session_id| domain.session_public_key(session_id), now_ms(), &mut guard)
    };
    let payload = match verified {
        Ok(payload) => payload,
        Err(refusal) => {
            let reason = refusal.to_string();
            let (session_id, client_request_id) = verify::claimed_session(&signed);
            let mut record = request_record(&request_id, &client_request_id, &session_id, received_at_ms);
            record.reason = Some(reason.clone());
            if let Ok(payload) = serde_json::from_str::<RequestPayload>(&signed.payload) {
                record.escalation.requested_argv = payload.argv;
                record.escalation.justification = payload.justification;
            }
            tracing::warn!(%reason, "escalation request refused");
            domain.audit(record.record()).await;
            send(&mut tls, &ServerFrame::Refused { reason }).await;
            return;
        }
    };
    if let Some(reason) = super::limits::oversize(&payload) {
        let mut record = request_record(&request_id, &payload.request_id, &payload.session_id, received_at_ms);
        record.escalation.verified = true;
        record.escalation.requested_argv = payload.argv;
        record.escalation.justification = payload.justification;
        record.reason = Some(reason.clone());
        domain.audit(record.record()).await;
        send(&mut tls, &ServerFrame::Refused { reason }).await;
        return;
    }
    decide_and_run(&mut tls, server, domain, Request { id: request_id, payload }, received_at_ms).await;
}

/// The record of a request: its minted id and the one its client chose;
/// rejected, until decided otherwise.
fn request_record(request_id: &str, client_request_id: &str, session_id: &str, received_at_ms: u64) -> Draft {
    let mut escalation = EscalationAudit::request(request_id, session_id);
    escalation.client_request_id = Some(client_request_id.to_owned());
    Draft {
        escalation,
        outcome: Outcome::Rejected,
        reason: None,
        decided_by: None,
        received_at_ms,
        decided_at_ms: None,
        finished_at_ms: None,
    }
}

/// A verified request and the id the coordinator minted for it.
struct Request {
    id: String,
    payload: RequestPayload,
}

async fn read_request(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> Result<SignedRequest, Unreadable> {
    let mut prefix = [0u8; 4];
    stream.read_exact(&mut prefix).await.map_err(Unreadable::Read)?;
    let length = frame_length(prefix).ok_or(Unreadable::TooLarge)?;
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.map_err(Unreadable::Read)?;
    serde_json::from_slice(&body).map_err(Unreadable::Malformed)
}

/// What a request was decided to do: run `argv`, or end with `frame`.
enum Verdict {
    Run { argv: Vec<String>, outcome: Outcome, decided_by: DecisionSource },
    End { outcome: Outcome, decided_by: DecisionSource, frame: ServerFrame },
}

impl Verdict {
    fn refused(reason: String) -> Verdict {
        Verdict::End { outcome: Outcome::Rejected, decided_by: DecisionSource::Policy, frame: ServerFrame::Refused { reason } }
    }
}

/// A verified request: the policy decides, or a human does; then the
/// command runs, or the refusal is sent; either way it is audited.
async fn decide_and_run<D: EscalationDomain>(
    tls: &mut (impl AsyncWrite + tokio::io::AsyncRead + Unpin),
    server: &EscalationServer,
    domain: &D,
    request: Request,
    received_at_ms: u64,
) {
    let mut record = request_record(&request.id, &request.payload.request_id, &request.payload.session_id, received_at_ms);
    record.escalation.verified = true;
    record.escalation.requested_argv = request.payload.argv.clone();
    record.escalation.justification = request.payload.justification.clone();
    let revoked = domain.revoked_auto_approve_rules();
    let rules: Vec<_> = server
        .settings
        .auto_approve_rules
        .iter()
        .enumerate()
        .filter(|(index, _)| !revoked.contains(index))
        .map(|(_, rule)| rule.clone())
        .collect();
    let verdict = match policy::decide(&EscalationRequest { argv: request.payload.argv.clone() }, &rules) {
        Decision::AutoApprove { .. } => {
            Verdict::Run { argv: request.payload.argv.clone(), outcome: Outcome::Auto, decided_by: DecisionSource::Policy }
        }
        Decision::NeedsHuman { reasons } => ask_human(tls, server, domain, &request, reasons, &mut record).await,
    };
    match verdict {
        Verdict::End { outcome, decided_by, frame } => finish_without_running(tls, domain, record, outcome, decided_by, frame).await,
        Verdict::Run { argv, outcome, decided_by } => {
            record.decided_at_ms.get_or_insert_with(now_ms);
            record.outcome = outcome;
            record.decided_by = Some(decided_by.clone());
            domain.emit(Event::EscalationResolved { request_id: request.id.clone(), outcome, decided_by, argv: Some(argv.clone()) });
            run(tls, server, domain, record, argv).await;
        }
    }
}

/// Why this session or domain may not add a request to the queue the
/// human reads (a sandbox cannot fill it).
fn queue_full<D: EscalationDomain>(domain: &D, session_id: &str) -> Option<String> {
    let pending = domain.broker().pending();
    let of_session = pending.iter().filter(|escalation| escalation.session_id == session_id).count();
    if of_session >= super::limits::MAX_PENDING_PER_SESSION {
        Some(format!(
            "this session already has {of_session} requests waiting for a human (at most {})",
            super::limits::MAX_PENDING_PER_SESSION
        ))
    } else if pending.len() >= super::limits::MAX_PENDING_PER_DOMAIN {
        Some(format!(
            "{} requests already wait for a human in this domain (at most {})",
            pending.len(),
            super::limits::MAX_PENDING_PER_DOMAIN
        ))
    } else {
        None
    }
}

/// The request as every client's queue shows it.
fn pending_escalation(settings: &EscalationSettings, request: &Request, reasons: Vec<String>, received_at_ms: u64) -> PendingEscalation {
    let payload = &request.payload;
    PendingEscalation {
        request_id: request.id.clone(),
        domain_hash: settings.domain_hash.clone(),
        profile: settings.profile.clone(),
        session_id: payload.session_id.clone(),
        argv: payload.argv.clone(),
        display: policy::display_command(&payload.argv),
        justification: payload.justification.clone(),
        cwd: settings.workspace.display().to_string(),
        reasons,
        risk_notes: policy::risk_notes(&payload.argv),
        received_at_ms,
        expires_at_ms: received_at_ms + settings.approval_timeout.as_millis() as u64,
    }
}

/// Queues the request for a human and waits for the first answer, the
/// approval time-out, or the requester hanging up.
async fn ask_human<D: EscalationDomain>(
    tls: &mut (impl AsyncWrite + tokio::io::AsyncRead + Unpin),
    server: &EscalationServer,
    domain: &D,
    request: &Request,
    reasons: Vec<String>,
    record: &mut Draft,
) -> Verdict {
    if let Some(reason) = queue_full(domain, &request.payload.session_id) {
        return Verdict::refused(reason);
    }
    let timeout = server.settings.approval_timeout;
    let escalation = pending_escalation(&server.settings, request, reasons, record.received_at_ms);
    if let Some(reason) = super::limits::too_large_to_show(&escalation) {
        return Verdict::refused(reason);
    }
    let answer = domain.broker().add(escalation.clone());
    domain.emit(Event::EscalationPending { escalation });
    let message = "waiting for a human to approve this request on the host".to_owned();
    send(tls, &ServerFrame::Pending { request_id: request.id.clone(), message }).await;
    let answer = tokio::select! {
        answer = answer => answer.ok(),
        _ = tokio::time::sleep(timeout) => None,
        // The client hung up: nobody is waiting for the answer any
        // more, so the request leaves every client's queue now.
        _ = wait_for_hangup(tls) => {
            domain.broker().withdraw(&request.id);
            Some(Answer::Deny { reason: "the requesting process went away".to_owned(), decided_by: DecisionSource::Client })
        }
    };
    record.decided_at_ms = Some(now_ms());
    match answer {
        Some(Answer::Approve { decided_by }) => Verdict::Run { argv: request.payload.argv.clone(), outcome: Outcome::Approved, decided_by },
        Some(Answer::Edit { argv, decided_by }) => Verdict::Run { argv, outcome: Outcome::Edited, decided_by },
        Some(Answer::Deny { reason, decided_by }) => {
            Verdict::End { outcome: Outcome::Denied, decided_by, frame: ServerFrame::Denied { reason } }
        }
        Some(Answer::Abort { decided_by }) => {
            let frame = ServerFrame::Denied { reason: "the session was aborted on the host".to_owned() };
            Verdict::End { outcome: Outcome::Aborted, decided_by, frame }
        }
        None => {
            domain.broker().withdraw(&request.id);
            let reason = format!("nobody approved the request within {} s", timeout.as_secs());
            Verdict::End { outcome: Outcome::TimedOut, decided_by: DecisionSource::Timeout, frame: ServerFrame::TimedOut { reason } }
        }
    }
}

/// Runs a decided request's `argv` on the host, streams its output and
/// audits it.
async fn run<D: EscalationDomain>(
    tls: &mut (impl AsyncWrite + Unpin),
    server: &EscalationServer,
    domain: &D,
    mut record: Draft,
    argv: Vec<String>,
) {
    let settings = &server.settings;
    let host_path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".to_owned());
    // Resolve on the host's PATH: nothing in the request can pick the file.
    let program = match policy::resolve_program(&argv[0], &host_path, &|path: &std::path::Path| is_executable_file(path)) {
        Ok(program) => program,
        Err(error) => {
            record.reason = Some(error.to_string());
            record.finished_at_ms = Some(now_ms());
            domain.audit(record.record()).await;
            send(tls, &ServerFrame::Denied { reason: error.to_string() }).await;
            return;
        }
    };
    let mut executed = vec![program.display().to_string()];
    executed.extend(argv[1..].iter().cloned());
    record.escalation.executed_argv = Some(executed);
    // `Running` goes out with the command's first output or its end (an
    // auto-approved `true` answers in one write, not two); the client
    // reports only an edit from it, so an edit is sent at once.
    let running_frame =
        ServerFrame::Running { request_id: record.escalation.request_id.clone(), argv: argv.clone(), decision: record.outcome };
    let held = if record.outcome == Outcome::Edited {
        send(tls, &running_frame).await;
        None
    } else {
        Some(running_frame)
    };
    // A cap on host commands running at once (finding 6: ten `cat /dev/zero`
    // ran side by side, each allowed 600 s).
    let Ok(running) = server.running.clone().try_acquire_owned() else {
        let reason = format!(
            "{} host commands of this sandbox are already running (at most that many at once)",
            super::limits::MAX_RUNNING_COMMANDS
        );
        record.escalation.executed_argv = None;
        record.reason = Some(reason.clone());
        record.finished_at_ms = Some(now_ms());
        domain.audit(record.record()).await;
        send(tls, &ServerFrame::Refused { reason }).await;
        return;
    };
    let command_timeout = settings.command_timeout;
    let tls_cell = tokio::sync::Mutex::new((&mut *tls, held));
    let finished = execute::run(&program, &argv[1..], &settings.workspace, &host_path, command_timeout, |frame| {
        let tls_cell = &tls_cell;
        async move {
            let mut guard = tls_cell.lock().await;
            let (stream, held) = &mut *guard;
            let held = held.take();
            send_after(&mut **stream, held, &frame).await;
        }
    })
    .await;
    // The command is over: its slot frees before the client hears so, or a
    // client's next request could find its own slot still taken.
    drop(running);
    let (tls, held) = tls_cell.into_inner();
    record.finished_at_ms = Some(now_ms());
    let last = last_frame(finished, command_timeout, &mut record);
    send_after(tls, held, &last).await;
    domain.emit(Event::EscalationFinished { request_id: record.escalation.request_id.clone(), exit_status: record.escalation.exit_status });
    domain.audit(record.record()).await;
}

/// The frame that ends a run, with the record completed to match.
fn last_frame(finished: crate::Result<execute::Finished>, command_timeout: Duration, record: &mut Draft) -> ServerFrame {
    match finished {
        Ok(finished) if finished.timed_out => {
            record.reason = Some(format!("killed after {} s", command_timeout.as_secs()));
            ServerFrame::TimedOut { reason: format!("the host command ran longer than {} s and was killed", command_timeout.as_secs()) }
        }
        Ok(finished) => {
            record.escalation.exit_status = finished.exit_status;
            ServerFrame::Exit { status: finished.exit_status.unwrap_or(255) }
        }
        Err(error) => {
            record.reason = Some(format!("could not run: {error}"));
            ServerFrame::Denied { reason: format!("could not run the command on the host: {error}") }
        }
    }
}

async fn finish_without_running(
    tls: &mut (impl AsyncWrite + Unpin),
    domain: &impl EscalationDomain,
    mut record: Draft,
    outcome: Outcome,
    decided_by: DecisionSource,
    frame: ServerFrame,
) {
    record.outcome = outcome;
    record.decided_by = Some(decided_by.clone());
    if let ServerFrame::Denied { reason } | ServerFrame::TimedOut { reason } | ServerFrame::Refused { reason } = &frame {
        record.reason = Some(reason.clone());
    }
    record.finished_at_ms = Some(now_ms());
    domain.emit(Event::EscalationResolved { request_id: record.escalation.request_id.clone(), outcome, decided_by, argv: None });
    domain.audit(record.record()).await;
    send(tls, &frame).await;
}

/// Resolves when the client closes its side (a read returns EOF or fails).
async fn wait_for_hangup(stream: &mut (impl tokio::io::AsyncRead + Unpin)) {
    let mut byte = [0u8; 1];
    loop {
        match stream.read(&mut byte).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

fn is_executable_file(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}
