//! The API calls of the backend, through the `kube` client: the
//! runtime-class check, the domain's `Sandbox` created as its lock,
//! readiness, exec (the only way anything enters or leaves the pod),
//! suspend/resume, and a teardown that leaves no object of the domain.
//!
//! Invariants: a sandbox is only created after its RuntimeClass was seen to
//! run gVisor; creating the `Sandbox` never replaces one (`AlreadyExists` is
//! [`Error::Held`]); teardown deletes every object carrying the domain's
//! label, and [`Cluster::domain_objects`] lists what is left.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{Api, AttachParams, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::egress::CiliumNetworkPolicy;
use crate::objects::{self, sandbox_name, OperatingMode, Sandbox, AGENT_CONTAINER, DOMAIN_LABEL};
use crate::{Error, Result};

/// The RuntimeClass handlers that run gVisor: `runsc` (containerd's gVisor
/// shim as usually configured) and `gvisor` (GKE Sandbox).
pub const GVISOR_HANDLERS: [&str; 2] = ["runsc", "gvisor"];

/// The field manager of Lazaret's server-side applies.
const FIELD_MANAGER: &str = "lazaret";

/// One namespace of one cluster.
#[derive(Clone)]
pub struct Cluster {
    client: kube::Client,
    namespace: String,
}

/// The most [`Cluster::exec`] keeps of a command's stdout.
pub const MAX_EXEC_OUTPUT: u64 = 64 << 20;
/// The most an exec keeps of a command's stderr.
pub const MAX_EXEC_STDERR: u64 = 64 << 10;

/// What a finished streamed exec gave back beside its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecStatus {
    pub stderr: Vec<u8>,
    /// The exit code; `None` when the API server reported none.
    pub code: Option<i32>,
}

/// A running exec with its stdin and stdout open ([`Cluster::exec_attached`]).
pub struct AttachedExec {
    pub stdin: tokio::io::WriteHalf<tokio::io::SimplexStream>,
    pub stdout: AttachedOutput,
    /// Dropping it ends the exec (its process in the pod loses stdin and stdout).
    pub guard: ExecGuard,
}

/// Keeps an attached exec's connection: the `kube` client aborts it when
/// its process handle is dropped.
pub struct ExecGuard(#[allow(dead_code)] kube::api::AttachedProcess);

/// An exec just started: its process and its streams.
struct Started {
    process: kube::api::AttachedProcess,
    status: ExitWatch,
    stdin: tokio::io::WriteHalf<tokio::io::SimplexStream>,
    stdout: AttachedOutput,
    stderr: AttachedOutput,
}

/// Reads `stream` to its end, keeping its first [`MAX_EXEC_STDERR`] bytes.
async fn read_bounded(stream: &mut AttachedOutput) -> std::io::Result<Vec<u8>> {
    let mut kept = Vec::new();
    stream.take(MAX_EXEC_STDERR).read_to_end(&mut kept).await?;
    tokio::io::copy(stream, &mut tokio::io::sink()).await?;
    Ok(kept)
}

/// The exec's status, watched once for all its streams. The `kube`
/// client's stdout and stderr do not end by themselves when its connection
/// fails or is aborted: only the status says so (it resolves, with `None`,
/// when the client's task is gone).
#[derive(Clone)]
struct ExitWatch(tokio::sync::watch::Receiver<Option<Option<i32>>>);

impl ExitWatch {
    fn new(
        status: impl std::future::Future<Output = Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>> + Send + 'static,
    ) -> ExitWatch {
        let (sender, receiver) = tokio::sync::watch::channel(None);
        tokio::spawn(async move {
            let status = status.await;
            let _ = sender.send(Some(status.map(|status| exit_code(&status))));
        });
        ExitWatch(receiver)
    }

    /// Resolves once the exec has ended.
    async fn ended(&self) {
        let mut receiver = self.0.clone();
        let _ = receiver.wait_for(Option::is_some).await;
    }

    /// The exit code, once the exec has ended (`None`: none was reported).
    async fn code(&self) -> Option<i32> {
        let mut receiver = self.0.clone();
        receiver.wait_for(Option::is_some).await.ok().and_then(|status| *status).flatten()
    }

    /// `stream`, ending when the exec does.
    fn output(&self, stream: tokio::io::ReadHalf<tokio::io::SimplexStream>) -> AttachedOutput {
        let watch = self.clone();
        AttachedOutput { inner: stream, ended: Box::pin(async move { watch.ended().await }), done: false }
    }
}

/// An exec's stdout or stderr, which ends when the exec does ([`ExitWatch`]).
pub struct AttachedOutput {
    inner: tokio::io::ReadHalf<tokio::io::SimplexStream>,
    ended: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    done: bool,
}

impl AsyncRead for AttachedOutput {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buffer: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = &mut *self;
        let before = buffer.filled().len();
        match std::pin::Pin::new(&mut this.inner).poll_read(context, buffer) {
            std::task::Poll::Ready(result) => return std::task::Poll::Ready(result),
            std::task::Poll::Pending if buffer.filled().len() > before => return std::task::Poll::Ready(Ok(())),
            std::task::Poll::Pending => {}
        }
        if this.done || this.ended.as_mut().poll(context).is_pending() {
            return if this.done { std::task::Poll::Ready(Ok(())) } else { std::task::Poll::Pending };
        }
        this.done = true;
        // The client writes all of a stream before it reports the status:
        // what came in between the two polls is read now, then it is the end.
        match std::pin::Pin::new(&mut this.inner).poll_read(context, buffer) {
            std::task::Poll::Ready(result) => std::task::Poll::Ready(result),
            std::task::Poll::Pending => std::task::Poll::Ready(Ok(())),
        }
    }
}

/// What a finished exec gave back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The exit code; `None` when the API server reported none.
    pub code: Option<i32>,
}

impl Cluster {
    /// The cluster of `context` (the kubeconfig's current context when
    /// `None`) in the kubeconfig at `kubeconfig`.
    pub async fn connect(kubeconfig: &Path, context: Option<&str>, namespace: &str) -> Result<Cluster> {
        let file = Kubeconfig::read_from(kubeconfig).map_err(|error| Error::Config(format!("{}: {error}", kubeconfig.display())))?;
        let options = KubeConfigOptions { context: context.map(str::to_owned), ..KubeConfigOptions::default() };
        let config = kube::Config::from_custom_kubeconfig(file, &options)
            .await
            .map_err(|error| Error::Config(format!("{}: {error}", kubeconfig.display())))?;
        let client = kube::Client::try_from(config).map_err(Error::api("a client for the kubeconfig's cluster"))?;
        Ok(Cluster { client, namespace: namespace.to_owned() })
    }

    /// The namespace the domain's objects live in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The client, for what this module does not wrap.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Refuses unless RuntimeClass `name` exists and its handler runs gVisor.
    pub async fn check_runtime_class(&self, name: &str) -> Result<()> {
        let classes: Api<RuntimeClass> = Api::all(self.client.clone());
        let Some(class) = classes.get_opt(name).await.map_err(Error::api(format!("RuntimeClass {name}")))? else {
            return Err(Error::NoRuntimeClass(name.to_owned()));
        };
        if GVISOR_HANDLERS.contains(&class.handler.as_str()) {
            Ok(())
        } else {
            Err(Error::NotGvisor { name: name.to_owned(), handler: class.handler })
        }
    }

    fn sandboxes(&self) -> Api<Sandbox> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates the domain's `Sandbox`: the domain's lock. `AlreadyExists`
    /// means another coordinator holds the domain ([`Error::Held`]).
    pub async fn create_sandbox(&self, sandbox: &Sandbox) -> Result<Sandbox> {
        let name = sandbox.metadata.name.clone().unwrap_or_default();
        match self.sandboxes().create(&PostParams { field_manager: Some(FIELD_MANAGER.into()), ..PostParams::default() }, sandbox).await {
            Ok(created) => Ok(created),
            Err(kube::Error::Api(status)) if status.code == 409 && status.reason == "AlreadyExists" => {
                Err(Error::Held { namespace: self.namespace.clone(), name })
            }
            Err(error) => Err(Error::Api { what: format!("creating Sandbox {}/{name}", self.namespace), source: error }),
        }
    }

    /// The domain's `Sandbox`, if it exists.
    pub async fn sandbox(&self, domain_hash: &str) -> Result<Option<Sandbox>> {
        let name = sandbox_name(domain_hash);
        self.sandboxes().get_opt(&name).await.map_err(Error::api(format!("Sandbox {}/{name}", self.namespace)))
    }

    /// Waits until the domain's pod is running and its agent container
    /// ready; gives the pod's name.
    pub async fn wait_ready(&self, domain_hash: &str, within: Duration) -> Result<String> {
        let name = sandbox_name(domain_hash);
        let mut poll = Poll::new(within, Duration::from_millis(20), Duration::from_millis(250));
        loop {
            if let Some(pod) = self.pods().get_opt(&name).await.map_err(Error::api(format!("Pod {}/{name}", self.namespace)))? {
                let status = pod.status.as_ref();
                let running = status.and_then(|status| status.phase.as_deref()) == Some("Running");
                let ready = status
                    .and_then(|status| status.container_statuses.as_ref())
                    .is_some_and(|statuses| statuses.iter().any(|container| container.name == AGENT_CONTAINER && container.ready));
                if running && ready && pod.metadata.deletion_timestamp.is_none() {
                    return Ok(name);
                }
            }
            if !poll.next().await {
                return Err(Error::Timeout(format!(
                    "the pod of Sandbox {}/{name} was not ready within {}s",
                    self.namespace,
                    within.as_secs()
                )));
            }
        }
    }

    /// The persistent directories' parts the pod's seeding container seeded
    /// (emptied and copied from the image) in this pod, as its termination
    /// message says ([`objects::seeded_parts`]); `None` when the pod has no
    /// such message (no seeding container, or a runtime that keeps none).
    pub async fn seeded_parts(&self, pod: &str) -> Result<Option<Vec<usize>>> {
        let found = self.pods().get_opt(pod).await.map_err(Error::api(format!("Pod {}/{pod}", self.namespace)))?;
        let message = found
            .and_then(|pod| pod.status)
            .and_then(|status| status.init_container_statuses)
            .and_then(|statuses| statuses.into_iter().find(|status| status.name == objects::SEED_CONTAINER))
            .and_then(|status| status.state)
            .and_then(|state| state.terminated)
            .and_then(|terminated| terminated.message);
        Ok(message.as_deref().and_then(objects::seeded_parts))
    }

    /// Sets the `Sandbox`'s operating mode: `Suspended` stops its pod and
    /// keeps its volume; `Running` starts a pod on the same volume.
    pub async fn set_operating_mode(&self, domain_hash: &str, mode: OperatingMode) -> Result<()> {
        let name = sandbox_name(domain_hash);
        let patch = serde_json::json!({ "spec": { "operatingMode": mode } });
        self.sandboxes()
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::api(format!("setting Sandbox {}/{name} to {mode:?}", self.namespace)))?;
        Ok(())
    }

    /// Sets the operating mode of the domain's `Sandbox` only if it is
    /// still the one whose UID is `uid` (the API server refuses the patch
    /// otherwise): a `Sandbox` made meanwhile by another coordinator is
    /// never changed.
    pub async fn set_operating_mode_of(&self, domain_hash: &str, uid: &str, mode: OperatingMode) -> Result<()> {
        let name = sandbox_name(domain_hash);
        let patch = serde_json::json!({ "metadata": { "uid": uid }, "spec": { "operatingMode": mode } });
        self.sandboxes()
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::api(format!("setting Sandbox {}/{name} to {mode:?}", self.namespace)))?;
        Ok(())
    }

    /// Replaces `existing` (as read, with its UID and resourceVersion: the
    /// API server refuses the update if either changed) by itself with
    /// `sandbox`'s pod template, suspended: the next resume starts a pod of
    /// the profile as it is now, on the same claim. The whole template is
    /// replaced (a merge patch would keep keys the new one leaves out).
    pub async fn suspend_with_template(&self, mut existing: Sandbox, sandbox: &Sandbox) -> Result<()> {
        let name = existing.metadata.name.clone().unwrap_or_default();
        existing.spec.pod_template = sandbox.spec.pod_template.clone();
        existing.spec.operating_mode = Some(OperatingMode::Suspended);
        existing.status = None;
        self.sandboxes()
            .replace(&name, &PostParams { field_manager: Some(FIELD_MANAGER.into()), ..PostParams::default() }, &existing)
            .await
            .map_err(Error::api(format!("updating Sandbox {}/{name}", self.namespace)))?;
        Ok(())
    }

    /// Deletes the domain's `Sandbox` only if its UID is `uid`, and waits
    /// until it (and with it its pod) is gone.
    pub async fn delete_sandbox_of(&self, domain_hash: &str, uid: &str, within: Duration) -> Result<()> {
        let name = sandbox_name(domain_hash);
        let namespace = &self.namespace;
        let mut delete = DeleteParams::foreground();
        delete.preconditions = Some(kube::api::Preconditions { uid: Some(uid.to_owned()), resource_version: None });
        match self.sandboxes().delete(&name, &delete).await {
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            other => {
                other.map_err(Error::api(format!("deleting Sandbox {namespace}/{name}")))?;
            }
        }
        let mut poll = Poll::new(within, Duration::from_millis(50), Duration::from_secs(1));
        while self.sandboxes().get_opt(&name).await.map_err(Error::api(format!("Sandbox {namespace}/{name}")))?.is_some() {
            if !poll.next().await {
                return Err(Error::Timeout(format!("Sandbox {namespace}/{name} still exists after {}s", within.as_secs())));
            }
        }
        Ok(())
    }

    /// Waits until the domain has no pod (after a suspend or a teardown).
    pub async fn wait_no_pod(&self, domain_hash: &str, within: Duration) -> Result<()> {
        let name = sandbox_name(domain_hash);
        let mut poll = Poll::new(within, Duration::from_millis(50), Duration::from_millis(250));
        while self.pods().get_opt(&name).await.map_err(Error::api(format!("Pod {}/{name}", self.namespace)))?.is_some() {
            if !poll.next().await {
                return Err(Error::Timeout(format!("Pod {}/{name} still exists after {}s", self.namespace, within.as_secs())));
            }
        }
        Ok(())
    }

    /// Runs `command` in the pod's agent container with `stdin` as its
    /// input: what it printed (stdout up to [`MAX_EXEC_OUTPUT`], stderr up
    /// to [`MAX_EXEC_STDERR`]) and its exit code (see [`Cluster::exec_streaming`]).
    pub async fn exec(&self, pod: &str, command: &[&str], stdin: &[u8]) -> Result<ExecOutput> {
        let mut stdout = Vec::new();
        let status = self.exec_streaming(pod, command, stdin, &mut stdout, MAX_EXEC_OUTPUT).await?;
        Ok(ExecOutput { stdout, stderr: status.stderr, code: status.code })
    }

    /// Runs `command` in the pod's agent container, streaming `input` to
    /// its stdin (closed at the end) and its stdout into `output`, never
    /// holding either whole. The pod is untrusted: more than `output_limit`
    /// bytes on stdout ends the exec with [`Error::Exec`], and stderr is
    /// kept up to [`MAX_EXEC_STDERR`] bytes (the rest is read and dropped).
    /// Input the command does not read is dropped once it has ended; but
    /// while the connection's buffers are full, the `kube` client reads
    /// nothing (its status included), so a command that stops reading a
    /// large input can hold the call: bound it (`tokio::time::timeout`).
    pub async fn exec_streaming<R, W>(
        &self,
        pod: &str,
        command: &[&str],
        mut input: R,
        mut output: W,
        output_limit: u64,
    ) -> Result<ExecStatus>
    where
        R: AsyncRead + Unpin + Send,
        W: AsyncWrite + Unpin + Send,
    {
        let exec_error = |message: String| Error::Exec { pod: pod.to_owned(), message };
        let Started { process, status, mut stdin, stdout, mut stderr } = self.start_exec(pod, command).await?;
        // Input stops when the command has ended: the rest would never be read.
        let writer = async {
            let copy = async {
                tokio::io::copy(&mut input, &mut stdin).await?;
                stdin.shutdown().await
            };
            tokio::select! {
                copied = copy => copied.map_err(|error| exec_error(format!("writing stdin: {error}"))),
                () = status.ended() => Ok(()),
            }
        };
        let reader = async {
            let copied = tokio::io::copy(&mut stdout.take(output_limit.saturating_add(1)), &mut output)
                .await
                .map_err(|error| exec_error(format!("reading stdout: {error}")))?;
            if copied > output_limit {
                return Err(exec_error(format!("`{}` printed more than {output_limit} bytes; it was stopped", command.join(" "))));
            }
            output.flush().await.map_err(|error| exec_error(format!("writing its output: {error}")))
        };
        let error_reader = async { read_bounded(&mut stderr).await.map_err(|error| exec_error(format!("reading stderr: {error}"))) };
        let ((), (), stderr) = tokio::try_join!(writer, reader, error_reader)?;
        let code = status.code().await;
        drop(stdin);
        // Input the command never read can make the client's end fail once
        // the command is gone (the pod resets the stream); with its status
        // in hand, that is no failure of the exec.
        match process.join().await {
            Err(error) if code.is_none() => return Err(exec_error(error.to_string())),
            Err(error) => tracing::debug!(%error, "the exec's connection ended with an error after its status"),
            Ok(()) => {}
        }
        Ok(ExecStatus { stderr, code })
    }

    /// Runs a session's `command` in the pod's agent container: `input` to
    /// its stdin (closed when `input` ends, dropped once the command has
    /// ended), its stdout and stderr into `output` and `errors` as they
    /// come, unbounded (they are the user's session, as a local exec's
    /// are). Gives the exit code, `None` when the API server reported none.
    pub async fn exec_session<R, W, E>(
        &self,
        pod: &str,
        command: &[&str],
        mut input: R,
        mut output: W,
        mut errors: E,
    ) -> Result<Option<i32>>
    where
        R: AsyncRead + Unpin + Send,
        W: AsyncWrite + Unpin + Send,
        E: AsyncWrite + Unpin + Send,
    {
        let exec_error = |message: String| Error::Exec { pod: pod.to_owned(), message };
        let Started { process, status, mut stdin, mut stdout, mut stderr } = self.start_exec(pod, command).await?;
        let writer = async {
            let copy = async {
                tokio::io::copy(&mut input, &mut stdin).await?;
                stdin.shutdown().await
            };
            tokio::select! {
                // A failed write is the command gone: its status says the rest.
                _ = copy => {}
                () = status.ended() => {}
            }
        };
        let copy_out = |stream: &'static str| move |error: std::io::Error| exec_error(format!("relaying {stream}: {error}"));
        let reader = async {
            tokio::io::copy(&mut stdout, &mut output).await.map_err(copy_out("stdout"))?;
            output.flush().await.map_err(copy_out("stdout"))
        };
        let error_reader = async {
            tokio::io::copy(&mut stderr, &mut errors).await.map_err(copy_out("stderr"))?;
            errors.flush().await.map_err(copy_out("stderr"))
        };
        let ((), outputs) = tokio::join!(writer, async { tokio::try_join!(reader, error_reader) });
        outputs?;
        let code = status.code().await;
        drop(stdin);
        match process.join().await {
            Err(error) if code.is_none() => Err(exec_error(error.to_string())),
            _ => Ok(code),
        }
    }

    /// Starts `command` in the pod's agent container and leaves its stdin
    /// and stdout open as streams (the escalation relay's one long-lived
    /// exec). Its stderr is read and dropped but for a bounded log line.
    pub async fn exec_attached(&self, pod: &str, command: &[&str]) -> Result<AttachedExec> {
        let Started { process, stdin, stdout, mut stderr, .. } = self.start_exec(pod, command).await?;
        let pod_name = pod.to_owned();
        // Ends with the exec (its status), as every stream of it does.
        tokio::spawn(async move {
            if let Ok(kept) = read_bounded(&mut stderr).await.map(|kept| String::from_utf8_lossy(&kept).into_owned()) {
                if !kept.is_empty() {
                    tracing::info!(pod = %pod_name, stderr = %kept.escape_debug(), "attached exec's stderr");
                }
            }
        });
        Ok(AttachedExec { stdin, stdout, guard: ExecGuard(process) })
    }

    /// Starts `command` in the pod's agent container with stdin, stdout and
    /// stderr, each output ending with the exec ([`ExitWatch`]).
    async fn start_exec(&self, pod: &str, command: &[&str]) -> Result<Started> {
        let parameters = AttachParams::default().container(AGENT_CONTAINER).stdin(true).stdout(true).stderr(true);
        let exec_error = |message: &str| Error::Exec { pod: pod.to_owned(), message: message.to_owned() };
        let mut process = self
            .pods()
            .exec(pod, command.iter().map(|word| word.to_string()).collect::<Vec<_>>(), &parameters)
            .await
            .map_err(Error::api(format!("exec in Pod {}/{pod}", self.namespace)))?;
        let status = ExitWatch::new(process.take_status().ok_or_else(|| exec_error("no status channel"))?);
        let stdin = process.stdin().ok_or_else(|| exec_error("no stdin"))?;
        let stdout = status.output(process.stdout().ok_or_else(|| exec_error("no stdout"))?);
        let stderr = status.output(process.stderr().ok_or_else(|| exec_error("no stderr"))?);
        Ok(Started { process, status, stdin, stdout, stderr })
    }

    /// Creates or updates the domain's `CiliumNetworkPolicy` (server-side
    /// apply, strict field validation: a field the installed CRD does not
    /// know is refused, not dropped).
    pub async fn apply_cilium_policy(&self, policy: &CiliumNetworkPolicy) -> Result<()> {
        self.apply(policy).await
    }

    /// Creates or updates the domain's deny-all `NetworkPolicy`.
    pub async fn apply_network_policy(&self, policy: &NetworkPolicy) -> Result<()> {
        self.apply(policy).await
    }

    /// Server-side apply of a namespaced object, with strict validation.
    async fn apply<K>(&self, object: &K) -> Result<()>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::Serialize
            + serde::de::DeserializeOwned,
    {
        let name = object.meta().name.clone().unwrap_or_default();
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.namespace);
        api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force().validation_strict(), &Patch::Apply(object))
            .await
            .map_err(Error::api(format!("applying {} {}/{name}", K::kind(&()), self.namespace)))?;
        Ok(())
    }

    /// Deletes the domain's `NetworkPolicy` objects (the deny-all of a
    /// profile without egress, when its egress is now Cilium's).
    pub async fn delete_network_policies(&self, domain_hash: &str) -> Result<()> {
        let selector = ListParams::default().labels(&format!("{DOMAIN_LABEL}={domain_hash}"));
        let policies: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), &self.namespace);
        policies
            .delete_collection(&DeleteParams::default(), &selector)
            .await
            .map_err(Error::api(format!("deleting the policies of {domain_hash}")))?;
        Ok(())
    }

    /// Deletes the domain's `CiliumNetworkPolicy` objects (a profile whose
    /// egress is now `none`: Cilium adds up the allows of every policy, so
    /// an old one would stay in force beside a deny-all). A cluster without
    /// Cilium's CRDs has none.
    pub async fn delete_cilium_policies(&self, domain_hash: &str) -> Result<()> {
        let selector = ListParams::default().labels(&format!("{DOMAIN_LABEL}={domain_hash}"));
        let cilium: Api<CiliumNetworkPolicy> = Api::namespaced(self.client.clone(), &self.namespace);
        match cilium.delete_collection(&DeleteParams::default(), &selector).await {
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            other => other.map(|_| ()).map_err(Error::api(format!("deleting the CiliumNetworkPolicy of {domain_hash}"))),
        }
    }

    /// Deletes every object of the domain (its `Sandbox`, and with it its
    /// pod; its claims; its policies) and waits until none is left.
    pub async fn delete_domain(&self, domain_hash: &str, within: Duration) -> Result<()> {
        let selector = ListParams::default().labels(&format!("{DOMAIN_LABEL}={domain_hash}"));
        let delete = DeleteParams::foreground();
        let namespace = &self.namespace;
        self.sandboxes()
            .delete_collection(&delete, &selector)
            .await
            .map_err(Error::api(format!("deleting the Sandbox of {domain_hash}")))?;
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        claims
            .delete_collection(&DeleteParams::default(), &selector)
            .await
            .map_err(Error::api(format!("deleting the claims of {domain_hash}")))?;
        self.delete_network_policies(domain_hash).await?;
        self.delete_cilium_policies(domain_hash).await?;
        // The Sandbox goes last (foreground deletion waits for its pod):
        // one GET at a time until it has, backing off, so that many domains
        // torn down at once do not flood the API server with lists.
        let name = sandbox_name(domain_hash);
        let mut poll = Poll::new(within, Duration::from_millis(50), Duration::from_secs(1));
        while self.sandboxes().get_opt(&name).await.map_err(Error::api(format!("Sandbox {namespace}/{name}")))?.is_some() {
            if !poll.next().await {
                break;
            }
        }
        loop {
            let left = self.domain_objects(domain_hash).await?;
            if left.is_empty() {
                return Ok(());
            }
            if !poll.next().await {
                return Err(Error::Timeout(format!(
                    "after {}s these objects of domain {domain_hash} are left: {}",
                    within.as_secs(),
                    left.join(", ")
                )));
            }
        }
    }

    /// Every object of the domain still on the cluster, as `Kind/name`.
    pub async fn domain_objects(&self, domain_hash: &str) -> Result<Vec<String>> {
        let selector = ListParams::default().labels(&format!("{DOMAIN_LABEL}={domain_hash}"));
        let mut left = Vec::new();
        let what = |kind: &str| format!("listing the {kind} objects of {domain_hash}");
        for sandbox in self.sandboxes().list(&selector).await.map_err(Error::api(what("Sandbox")))? {
            left.push(format!("Sandbox/{}", sandbox.metadata.name.unwrap_or_default()));
        }
        for pod in self.pods().list(&selector).await.map_err(Error::api(what("Pod")))? {
            left.push(format!("Pod/{}", pod.metadata.name.unwrap_or_default()));
        }
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &self.namespace);
        for claim in claims.list(&selector).await.map_err(Error::api(what("PersistentVolumeClaim")))? {
            left.push(format!("PersistentVolumeClaim/{}", claim.metadata.name.unwrap_or_default()));
        }
        let policies: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), &self.namespace);
        for policy in policies.list(&selector).await.map_err(Error::api(what("NetworkPolicy")))? {
            left.push(format!("NetworkPolicy/{}", policy.metadata.name.unwrap_or_default()));
        }
        let cilium: Api<CiliumNetworkPolicy> = Api::namespaced(self.client.clone(), &self.namespace);
        match cilium.list(&selector).await {
            Ok(list) => {
                left.extend(list.into_iter().map(|policy| format!("CiliumNetworkPolicy/{}", policy.metadata.name.unwrap_or_default())))
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(Error::Api { what: what("CiliumNetworkPolicy"), source: error }),
        }
        Ok(left)
    }
}

/// The pauses between polls of the cluster: doubling from a first one up
/// to a longest one, until a deadline.
struct Poll {
    deadline: Instant,
    interval: Duration,
    longest: Duration,
}

impl Poll {
    fn new(within: Duration, first: Duration, longest: Duration) -> Poll {
        Poll { deadline: Instant::now() + within, interval: first, longest }
    }

    /// Sleeps before the next poll; `false` once the deadline has passed.
    async fn next(&mut self) -> bool {
        if Instant::now() >= self.deadline {
            return false;
        }
        tokio::time::sleep(self.interval).await;
        self.interval = (self.interval * 2).min(self.longest);
        true
    }
}

/// The exit code in an exec's final status: 0 for `Success`, the
/// `ExitCode` cause of a `NonZeroExitCode` failure, else -1.
fn exit_code(status: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Status) -> i32 {
    if status.status.as_deref() == Some("Success") {
        return 0;
    }
    status
        .details
        .as_ref()
        .and_then(|details| details.causes.as_ref())
        .and_then(|causes| causes.iter().find(|cause| cause.reason.as_deref() == Some("ExitCode")))
        .and_then(|cause| cause.message.as_deref())
        .and_then(|message| message.parse().ok())
        .unwrap_or(-1)
}
