//! The backend's errors: each names the object or value at fault.

/// What went wrong talking to the cluster or with what it holds.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig could not be read or names no usable context.
    #[error("kubeconfig: {0}")]
    Config(String),
    /// The API server refused or failed a request.
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// The domain's `Sandbox` already exists: another coordinator holds the
    /// domain (creating it is the lock).
    #[error("Sandbox {namespace}/{name} already exists: another coordinator holds this domain")]
    Held { namespace: String, name: String },
    /// The profile's RuntimeClass does not run gVisor.
    #[error("RuntimeClass `{name}` has handler `{handler}`, not gVisor (runsc); Lazaret refuses to run a sandbox without it")]
    NotGvisor { name: String, handler: String },
    /// The profile's RuntimeClass does not exist.
    #[error("RuntimeClass `{0}` does not exist on the cluster; install gVisor's (handler runsc) or name the one that runs it")]
    NoRuntimeClass(String),
    /// Waited too long for the cluster.
    #[error("{0}")]
    Timeout(String),
    /// An exec stream failed.
    #[error("exec in {pod}: {message}")]
    Exec { pod: String, message: String },
}

impl Error {
    /// The cluster cannot give the sandbox gVisor: a refusal for safety
    /// (`lazaret_core::exit_status::SECURITY_ABORT`), not a failure.
    pub fn is_security_refusal(&self) -> bool {
        matches!(self, Error::NotGvisor { .. } | Error::NoRuntimeClass(_))
    }

    pub(crate) fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let what = what.into();
        move |source| Error::Api { what, source }
    }
}
