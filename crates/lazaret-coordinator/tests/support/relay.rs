//! A domain's Escalation Socket on this machine and the relay to it from a
//! pod on the test cluster, set up as the coordinator will for a cluster
//! profile: the real server with a Trust Anchor, the real static
//! `lazaret-escalate` and its TLS bundle sent into the pod over exec stdin,
//! and `lazaret-escalate --relay` started over one long-lived exec. Shared
//! by the cluster suite (`tests/cluster.rs`) and the bench
//! (`examples/relay_bench.rs`), each including this file as a module.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use lazaret_coordinator::escalation::server::{self, EscalationServer};
use lazaret_coordinator::escalation::trust_anchor::{self, TrustAnchor};
use lazaret_coordinator::escalation::verify::delegate;
use lazaret_coordinator::escalation::{relay, Broker, EscalationSettings};
use lazaret_kube::cluster::{Cluster, ExecGuard, ExecOutput};
use lazaret_protocol::AuditRecord;
use tokio_rustls::TlsAcceptor;

/// Where the client's bundle goes in the pod (`/run/lazaret`, memory-backed).
pub const INSTALL_BUNDLE: &str = "mkdir -p /run/lazaret/tls && umask 077 && cat > /run/lazaret/tls/bundle.pem";

/// The coordinator's side of escalation for one domain, as the server
/// sees it: one live session, the queue, and what was audited.
pub struct OneSession {
    pub session_id: String,
    pub session_key: ed25519_dalek::VerifyingKey,
    pub broker: Broker,
    pub records: Mutex<Vec<AuditRecord>>,
}

impl lazaret_coordinator::escalation::EscalationDomain for OneSession {
    fn session_public_key(&self, session_id: &str) -> Option<ed25519_dalek::VerifyingKey> {
        (session_id == self.session_id).then_some(self.session_key)
    }

    fn broker(&self) -> &Broker {
        &self.broker
    }

    fn emit(&self, _event: lazaret_protocol::Event) {}

    fn audit(&self, record: AuditRecord) -> impl std::future::Future<Output = ()> + Send {
        self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(record);
        std::future::ready(())
    }

    fn revoked_auto_approve_rules(&self) -> Vec<usize> {
        Vec::new()
    }
}

/// 32 random bytes (a key).
pub fn random_bytes() -> [u8; 32] {
    let hex = lazaret_test_support::cluster::random_hex(32);
    let mut bytes = [0u8; 32];
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[index * 2..index * 2 + 2], 16).expect("hex");
    }
    bytes
}

/// A session credential as `lazaret run` hands it to the command inside:
/// base64 of its JSON, delegated by `session_key`.
pub fn credential(session_key: &ed25519_dalek::SigningKey, session_id: &str) -> String {
    let issued = delegate::issue(session_key, session_id, random_bytes(), lazaret_core::time::now_ms() + 3_600_000);
    base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&issued).expect("json"))
}

/// The client's TLS bundle: a certificate for `identity` signed by
/// `signer`, trusting the coordinator's CA `trusted`.
pub fn bundle(signer: &TrustAnchor, trusted: &TrustAnchor, identity: &str, dir: &Path) -> Vec<u8> {
    let credentials = signer.client_credentials(identity).expect("client credentials");
    trust_anchor::write_credentials(dir, trusted.ca_pem(), &credentials).expect("write");
    std::fs::read(dir.join(trust_anchor::bundle_location().1)).expect("bundle")
}

/// `lazaret-escalate -- ARGV` in the pod, the session id and credential
/// given over stdin (never on a command line the API server sees).
pub async fn escalate(cluster: &Cluster, pod: &str, session_id: &str, credential: &str, argv: &[&str]) -> ExecOutput {
    let script = "IFS= read -r id; IFS= read -r credential; \
                  LAZARET_SESSION_ID=$id LAZARET_SESSION_CREDENTIAL=$credential exec /run/lazaret/bin/lazaret-escalate -- \"$@\"";
    let mut command = vec!["sh", "-c", script, "escalate"];
    command.extend_from_slice(argv);
    cluster.exec(pod, &command, format!("{session_id}\n{credential}\n").as_bytes()).await.expect("exec")
}

/// `sh -c SCRIPT` in the pod, which must exit 0.
async fn shell(cluster: &Cluster, pod: &str, script: &str, stdin: &[u8]) {
    let output = cluster.exec(pod, &["sh", "-c", script], stdin).await.expect("exec");
    assert_eq!(output.code, Some(0), "`{script}`: {}", String::from_utf8_lossy(&output.stderr));
}

/// The Escalation Socket of one domain and its relay from one pod.
pub struct Relay {
    pub anchor: TrustAnchor,
    pub identity: String,
    pub session_key: ed25519_dalek::SigningKey,
    pub session_id: String,
    pub domain: Arc<OneSession>,
    /// The bundle the pod holds.
    pub good_bundle: Vec<u8>,
    guard: ExecGuard,
    task: tokio::task::JoinHandle<lazaret_coordinator::Result<()>>,
}

impl Relay {
    /// Serves the domain's Escalation Socket in `root` (its auto-approve
    /// list `rules`), installs the client in `pod` and starts the relay;
    /// returns once the relay serves the socket in the pod.
    pub async fn start(cluster: &Cluster, pod: &str, domain_hash: &str, root: &Path, rules: &[String]) -> Relay {
        let anchor = TrustAnchor::generate().expect("trust anchor");
        let identity = trust_anchor::sandbox_identity("default", domain_hash, "relay");
        let good_bundle = bundle(&anchor, &anchor, &identity, &root.join("tls"));
        let settings = EscalationSettings {
            domain_hash: domain_hash.to_owned(),
            profile: "default".into(),
            workspace: root.to_path_buf(),
            auto_approve_rules: rules.iter().map(|entry| lazaret_core::policy::parse_auto_approve_entry(entry).expect("rule")).collect(),
            approval_timeout: Duration::from_secs(120),
            command_timeout: Duration::from_secs(30),
        };
        let server = Arc::new(EscalationServer::new(TlsAcceptor::from(anchor.server_config().expect("tls")), identity.clone(), settings));
        let socket = root.join("escalate.sock");
        let listener = tokio::net::UnixListener::bind(&socket).expect("bind");
        let session_key = ed25519_dalek::SigningKey::from_bytes(&random_bytes());
        let session_id = "relay-session".to_owned();
        let domain = Arc::new(OneSession {
            session_id: session_id.clone(),
            session_key: session_key.verifying_key(),
            broker: Broker::default(),
            records: Mutex::default(),
        });
        tokio::spawn(server::serve(listener, server, domain.clone()));
        let client = lazaret_coordinator::helper_binaries::find("lazaret-escalate").expect("the static lazaret-escalate (scripts/build)");
        let binary = std::fs::read(&client).expect("read lazaret-escalate");
        shell(
            cluster,
            pod,
            "mkdir -p /run/lazaret/bin && cat > /run/lazaret/bin/lazaret-escalate && chmod 755 /run/lazaret/bin/lazaret-escalate",
            &binary,
        )
        .await;
        shell(cluster, pod, INSTALL_BUNDLE, &good_bundle).await;
        let attached = cluster.exec_attached(pod, &["/run/lazaret/bin/lazaret-escalate", "--relay"]).await.expect("relay");
        let guard = attached.guard;
        let task = tokio::spawn(relay::serve(attached.stdout, attached.stdin, socket));
        for _ in 0..100 {
            if cluster.exec(pod, &["test", "-S", "/run/lazaret/escalate.sock"], b"").await.expect("exec").code == Some(0) {
                return Relay { anchor, identity, session_key, session_id, domain, good_bundle, guard, task };
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the relay does not serve the Escalation Socket in the pod");
    }

    /// A credential of the live session.
    pub fn credential(&self) -> String {
        credential(&self.session_key, &self.session_id)
    }

    /// Ends the relay's exec; the host side must end cleanly with it.
    pub async fn stop(self) {
        drop(self.guard);
        tokio::time::timeout(Duration::from_secs(30), self.task).await.expect("the relay ends").expect("task").expect("a clean end");
    }
}
