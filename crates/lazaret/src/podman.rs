//! The one place that spawns `podman`. Every invocation goes through
//! [`Podman::command`], so flags that these machines need (DECISIONS D10,
//! ENVIRONMENT.md) are set in one spot.

use std::process::{Command, Stdio};

/// Podman invoked as the current user (rootless unless we are root).
#[derive(Debug, Clone)]
pub struct Podman {
    program: String,
}

impl Default for Podman {
    fn default() -> Podman {
        Podman { program: std::env::var("LAZARET_PODMAN").unwrap_or_else(|_| "podman".to_owned()) }
    }
}

impl Podman {
    /// A `podman` command with a clean, explicit environment: podman's own
    /// needs only, never the agent profile's or proxy variables (D10).
    pub fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.env_clear();
        for name in [
            "PATH",
            "HOME",
            "USER",
            "LOGNAME",
            "XDG_RUNTIME_DIR",
            "XDG_CONFIG_HOME",
            "XDG_DATA_HOME",
            "CONTAINERS_CONF",
            "CONTAINERS_STORAGE_CONF",
            "TMPDIR",
            "LANG",
        ] {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command
    }

    /// The value of `label` on a local image, `None` if the image or label is absent.
    pub fn image_label(&self, image: &str, label: &str) -> Option<String> {
        let format = format!("{{{{index .Labels \"{label}\"}}}}");
        let output = self.command().args(["image", "inspect", "--format", &format, image]).stdin(Stdio::null()).output().ok()?;
        if !output.status.success() {
            return None;
        }
        let value = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        (!value.is_empty() && value != "<no value>").then_some(value)
    }

    pub fn image_exists(&self, image: &str) -> bool {
        self.command()
            .args(["image", "exists", image])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }
}
