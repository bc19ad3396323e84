//! The error of the coordinator library (house style: one `thiserror` enum,
//! no `anyhow` outside the binary). Leaf failures that callers may tell
//! apart have their own variant; everything else is a [`Error::Message`].
//! [`Context`] adds a line of context, like `anyhow::Context`, so messages
//! read "what failed" then "caused by: why". Configuration and security
//! errors stay [`lazaret_core::Error`]s inside [`Error::Core`], and
//! [`Error::exit_status`] finds their exit status through any context.

use std::fmt::Display;
use std::path::PathBuf;

/// What went wrong in the coordinator, its podman and git calls, or the
/// files of a domain.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A failure described by this crate, with no underlying error.
    #[error("{0}")]
    Message(String),
    /// An I/O failure; [`Context`] names what was being done.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// An I/O failure on a named file or directory.
    #[error("cannot {action} {}", path.display())]
    Path {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// podman ran and failed; `stderr` is what it said.
    #[error("{what}: {stderr}")]
    Podman { what: String, stderr: String },
    /// A command (podman, a mount script) that did not finish within its
    /// bound (`lazaret_core::bounds`) and was killed.
    #[error("{what} did not finish within {} s; it was stopped", bound.as_secs())]
    TimedOut { what: String, bound: std::time::Duration },
    /// The host's git ran and failed; `stderr` is what it said.
    #[error("git {arguments} failed: {stderr}")]
    Git { arguments: String, stderr: String },
    /// A configuration, validation or security error (with its exit status).
    #[error(transparent)]
    Core(#[from] lazaret_core::Error),
    /// The header of the agent's git bundle.
    #[error(transparent)]
    Bundle(#[from] lazaret_core::git_bundle::BundleError),
    /// A number out of range in a helper's output.
    #[error(transparent)]
    Number(#[from] std::num::TryFromIntError),
    /// The domain's state store.
    #[error(transparent)]
    Store(#[from] lazaret_store::StoreError),
    /// JSON of a file or of a helper's answer.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// Building the Escalation Socket's TLS configuration.
    #[error(transparent)]
    Tls(#[from] rustls::Error),
    /// Generating or signing the Trust Anchor's certificates.
    #[error(transparent)]
    Certificate(#[from] rcgen::Error),
    /// Building the client-certificate verifier.
    #[error(transparent)]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// The Kubernetes backend: the cluster refused or failed a request.
    #[error(transparent)]
    Kube(#[from] lazaret_kube::Error),
    /// The domain's egress control (the Network Sidecar or the cluster's
    /// policy object) refused or failed a change.
    #[error(transparent)]
    Egress(#[from] EgressError),
    /// A blocking task that panicked or was cancelled.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
    /// `source`, seen from one level up.
    #[error("{context}")]
    Context {
        context: String,
        #[source]
        source: Box<Error>,
    },
}

/// Why the egress control refused or failed a request: its `Display`,
/// with its causes (`Error::chained`), is what a client is told.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// The domain started with an empty allowlist: no sidecar, no network.
    #[error("this domain has no Network Sidecar: its allowlist was empty when it started, so the sandbox has no network at all")]
    NoSidecar,
    /// The sidecar stopped; `reason` is what `domain/status` says of it.
    #[error("the sandbox has no working network: {reason}")]
    NoNetwork { reason: String },
    /// The sidecar's control socket failed or refused the request.
    #[error(transparent)]
    Sidecar(Box<Error>),
    /// The blocking task that called the control socket did not finish.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
    /// An entry that does not parse as an allow or deny entry.
    #[error("`{entry}`: {reason}")]
    BadEntry { entry: String, reason: String },
    /// A cluster's policy object cannot carve a name out of a wider allow.
    #[error(
        "`{entry}` is not an allow entry: on a cluster the policy object cannot carve it out of a wider one, so a deny removes \
         an allow entry exactly as written"
    )]
    NotAnAllowEntry { entry: String },
    /// A cluster's policy object has no expiry.
    #[error("timed entries (--for) are not supported on a cluster: the policy object has no expiry")]
    TimedOnCluster,
    /// A setting only the local Network Sidecar has (holds, protections,
    /// credential endpoints).
    #[error("the cluster's policy object has no such setting (it is the local Network Sidecar's)")]
    NotOnCluster,
    /// The profile's cluster egress is `none`.
    #[error(
        "profile `{profile}` has no egress on its cluster (egress = \"none\"): nothing can be allowed; Lazaret never opens it silently"
    )]
    NoClusterEgress { profile: String },
    /// The pod does not run yet.
    #[error("the domain's pod is not running yet; change the policy once it is")]
    PodNotRunning,
    /// The API server refused the new policy object (a refusal for safety
    /// stays one: [`EgressError::is_security_refusal`]).
    #[error("the cluster refused the new policy")]
    ClusterRefused(#[source] lazaret_kube::Error),
}

impl EgressError {
    /// The cluster refused for safety (`lazaret_core::exit_status::SECURITY_ABORT`).
    pub fn is_security_refusal(&self) -> bool {
        matches!(self, EgressError::ClusterRefused(error) if error.is_security_refusal())
    }
}

/// A result of the coordinator library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error that is just `message`.
    pub fn msg(message: impl Display) -> Error {
        Error::Message(message.to_string())
    }

    /// The exit status of a [`lazaret_core::Error`] at the bottom of this
    /// error, if there is one (a security abort stays 77 under any context).
    pub fn exit_status(&self) -> Option<u8> {
        match self {
            Error::Core(error) => Some(error.exit_status()),
            Error::Context { source, .. } => source.exit_status(),
            Error::Kube(error) if error.is_security_refusal() => Some(lazaret_core::exit_status::SECURITY_ABORT),
            Error::Egress(error) if error.is_security_refusal() => Some(lazaret_core::exit_status::SECURITY_ABORT),
            _ => None,
        }
    }

    /// This error and its causes on one line, joined with ": " (what
    /// `anyhow`'s `{:#}` printed): for logs, events and RPC messages.
    pub fn chained(&self) -> String {
        chained(self)
    }
}

/// `error` and its causes on one line, joined with ": ".
pub fn chained(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(error) = cause {
        text.push_str(": ");
        text.push_str(&error.to_string());
        cause = error.source();
    }
    text
}

/// Adds context to a failure, keeping the failure as its cause.
pub trait Context<T> {
    fn context<C: Display>(self, context: C) -> Result<T>;
    fn with_context<C: Display, F: FnOnce() -> C>(self, context: F) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn context<C: Display>(self, context: C) -> Result<T> {
        self.map_err(|error| Error::Context { context: context.to_string(), source: Box::new(error.into()) })
    }

    fn with_context<C: Display, F: FnOnce() -> C>(self, context: F) -> Result<T> {
        self.map_err(|error| Error::Context { context: context().to_string(), source: Box::new(error.into()) })
    }
}

/// A missing value becomes a [`Error::Message`] of the context.
impl<T> Context<T> for Option<T> {
    fn context<C: Display>(self, context: C) -> Result<T> {
        self.ok_or_else(|| Error::Message(context.to_string()))
    }

    fn with_context<C: Display, F: FnOnce() -> C>(self, context: F) -> Result<T> {
        self.ok_or_else(|| Error::Message(context().to_string()))
    }
}

/// Returns early with an [`Error::Message`] formatted like `format!`.
#[macro_export]
macro_rules! bail {
    ($($argument:tt)*) => {
        return Err($crate::Error::Message(format!($($argument)*)))
    };
}

/// An [`Error::Message`] formatted like `format!`.
#[macro_export]
macro_rules! format_err {
    ($($argument:tt)*) => {
        $crate::Error::Message(format!($($argument)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_keeps_the_cause_and_the_core_exit_status() {
        let core = lazaret_core::Error::security("directory", "shared".to_owned(), None);
        let status = core.exit_status();
        let error = Err::<(), _>(core).context("cannot start").context("outer").expect_err("error");
        assert_eq!(error.to_string(), "outer");
        assert_eq!(error.exit_status(), Some(status));
        assert!(error.chained().starts_with("outer: cannot start: "), "{}", error.chained());
        let io = Err::<(), _>(std::io::Error::other("gone")).context("cannot read x").expect_err("error");
        assert_eq!(io.chained(), "cannot read x: gone");
        assert_eq!(io.exit_status(), None);
        assert_eq!(None::<u8>.context("missing").expect_err("error").to_string(), "missing");
    }

    #[test]
    fn a_cluster_refusal_for_safety_stays_one_through_the_egress_control() {
        let refused = EgressError::ClusterRefused(lazaret_kube::Error::NoRuntimeClass("gvisor".into()));
        assert!(refused.is_security_refusal());
        let error = Err::<(), _>(refused).context("net allow").expect_err("error");
        assert_eq!(error.exit_status(), Some(lazaret_core::exit_status::SECURITY_ABORT));
        assert!(error.chained().contains("the cluster refused the new policy: RuntimeClass `gvisor`"), "{}", error.chained());
        let failed = EgressError::ClusterRefused(lazaret_kube::Error::Timeout("slow".into()));
        assert!(!failed.is_security_refusal());
        assert_eq!(Error::from(failed).exit_status(), None);
    }
}
