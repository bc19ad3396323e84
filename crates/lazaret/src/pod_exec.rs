//! A session in a pod (a profile whose sandbox is on a cluster): `lazaret
//! pod-exec` runs the session's command over `pods/exec` with this
//! process's stdin, stdout and stderr, as `runsc exec` or `podman exec`
//! do for a local sandbox; `session` starts it in their place, on the same
//! host pseudo-terminal.
//!
//! An exec carries no environment, and a command line is seen by the API
//! server and its audit log: the session's variables (its id, the delegated
//! credential, `TERM`, the profile's `env`) cross as the first lines of the
//! command's stdin, read by a small `sh` prelude in the pod that exports
//! them and `exec`s the command in `/workspace`. `sh`'s `read` takes a pipe
//! byte by byte, so the command's input starts exactly after them.

use std::path::PathBuf;

use anyhow::{Context, Result};
use tokio::io::AsyncReadExt;

/// Where a domain's pod is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodTarget {
    pub kubeconfig: PathBuf,
    pub context: Option<String>,
    pub namespace: String,
    pub pod: String,
}

/// The prelude in the pod: exports the `NAME=value` lines up to an empty
/// one, then runs the command in `/workspace`.
const PRELUDE: &str = "while IFS= read -r variable && [ -n \"$variable\" ]; do export \"$variable\"; done; cd /workspace && exec \"$@\"";

impl PodTarget {
    /// `lazaret pod-exec` for `command`, the variables `names` passed from
    /// its environment.
    pub fn arguments(&self, names: &[String], command: &[String]) -> Vec<String> {
        let mut arguments = vec![
            "pod-exec".to_owned(),
            format!("--kubeconfig={}", self.kubeconfig.display()),
            format!("--namespace={}", self.namespace),
            format!("--pod={}", self.pod),
        ];
        if let Some(context) = &self.context {
            arguments.push(format!("--context={context}"));
        }
        arguments.extend(names.iter().map(|name| format!("--pass={name}")));
        arguments.push("--".to_owned());
        arguments.extend(command.iter().cloned());
        arguments
    }
}

/// The lines that carry the variables `names` (values from this process's
/// environment), ended by an empty line. A name that is not a shell
/// variable's, or a value with a newline or NUL, is refused by name.
fn preamble(names: &[String]) -> Result<Vec<u8>> {
    let mut lines = Vec::new();
    for name in names {
        let valid = name.chars().next().is_some_and(|first| first == '_' || first.is_ascii_alphabetic())
            && name.chars().all(|character| character == '_' || character.is_ascii_alphanumeric());
        if !valid {
            anyhow::bail!("`{name}` is not a variable name");
        }
        let value = std::env::var(name).with_context(|| format!("the variable {name} is not set (or not UTF-8)"))?;
        if value.contains(['\n', '\0']) {
            anyhow::bail!("the value of {name} holds a newline or NUL, which cannot cross to the pod");
        }
        lines.extend_from_slice(format!("{name}={value}\n").as_bytes());
    }
    lines.push(b'\n');
    Ok(lines)
}

/// `lazaret pod-exec`: the command's exit status (255 when the cluster
/// reported none).
pub fn run(target: &PodTarget, pass: &[String], command: &[String]) -> Result<u8> {
    let preamble = preamble(pass)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    let code = runtime.block_on(async {
        let cluster = lazaret_kube::cluster::Cluster::connect(&target.kubeconfig, target.context.as_deref(), &target.namespace).await?;
        let mut argv = vec!["sh", "-c", PRELUDE, "lazaret-session"];
        argv.extend(command.iter().map(String::as_str));
        let input = std::io::Cursor::new(preamble).chain(tokio::io::stdin());
        let code = cluster.exec_session(&target.pod, &argv, input, tokio::io::stdout(), tokio::io::stderr()).await?;
        Ok::<_, anyhow::Error>(code)
    });
    // A read of stdin may still block: it is not waited for.
    runtime.shutdown_background();
    Ok(code?.map_or(255, |code| u8::try_from(code.clamp(0, 255)).unwrap_or(255)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preamble_refuses_what_would_not_arrive_as_one_variable() {
        assert!(preamble(&["1X".to_owned()]).is_err());
        assert!(preamble(&["A-B".to_owned()]).is_err());
        assert!(preamble(&["LAZARET_SURELY_UNSET_VARIABLE".to_owned()]).is_err());
        assert_eq!(preamble(&[]).expect("empty"), b"\n");
    }
}
