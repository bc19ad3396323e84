//! Running a fixed `sh` script inside the sandbox, whichever backend runs
//! it: the local sandbox's container (`podman exec`) or the domain's pod
//! on a cluster (`pods/exec`). Bounded in time and in bytes; what comes
//! back is the sandbox's, and parsed as untrusted. The agent branch's reads
//! of the working tree (the uncommitted changes of `branch/diff`, one file
//! of `branch/fileContents`) run here. A leaf: it knows the two ways in,
//! not the coordinator.

use lazaret_kube::cluster::Cluster;

use crate::error::Result;
use crate::podman::Podman;

/// The domain's pod on a cluster, once it runs.
#[derive(Clone)]
pub struct PodHandle {
    pub cluster: Cluster,
    pub pod: String,
}

/// The sandbox a script runs in.
pub enum Inside<'a> {
    Container(&'a str),
    Pod(&'a PodHandle),
}

/// What a script printed, and whether it succeeded (`None`: it was
/// stopped, or its status is unknown).
pub struct Ran {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub success: Option<bool>,
}

impl Inside<'_> {
    /// Runs `sh -c script NAME ARGUMENTS...` for at most
    /// [`lazaret_core::bounds::EXPORT`]; with `max_stdout`, stdout is cut
    /// there (locally the script is stopped; a pod that prints more is an
    /// error).
    pub async fn shell(&self, script: &str, name: &str, arguments: &[&str], max_stdout: Option<usize>, what: &str) -> Result<Ran> {
        let bound = lazaret_core::bounds::EXPORT;
        match self {
            Inside::Container(container) => {
                let mut command = tokio::process::Command::from(Podman::default().command());
                command.args(["exec", container, "sh", "-c", script, name]).args(arguments);
                match max_stdout {
                    None => {
                        let output = crate::bounded_process::output_within(command, bound, what).await?;
                        Ok(Ran { success: Some(output.status.success()), stdout: output.stdout, stderr: output.stderr })
                    }
                    Some(max) => {
                        let output = crate::bounded_process::output_capped(command, bound, max, what).await?;
                        Ok(Ran { success: output.status.map(|status| status.success()), stdout: output.stdout, stderr: Vec::new() })
                    }
                }
            }
            Inside::Pod(pod) => {
                let mut command = vec!["sh", "-c", script, name];
                command.extend_from_slice(arguments);
                let limit = max_stdout.map_or(lazaret_kube::cluster::MAX_EXEC_OUTPUT, |max| max as u64);
                let mut stdout = Vec::new();
                let run = pod.cluster.exec_streaming(&pod.pod, &command, tokio::io::empty(), &mut stdout, limit);
                let status = tokio::time::timeout(bound, run)
                    .await
                    .map_err(|_| crate::Error::TimedOut { what: format!("{what} in Pod {}", pod.pod), bound })??;
                Ok(Ran { success: status.code.map(|code| code == 0), stdout, stderr: status.stderr })
            }
        }
    }
}
