//! Checks of the top-level tables: `[escalation]`, `[runtime]` and
//! `[network]`, each into the values [`super::Config`] keeps.
//!
//! Invariants: an absent table or key means its documented default (README,
//! DECISIONS D17), exactly as if the default were written; every refused
//! value is recorded on the [`Checker`] (never returned as an error), so the
//! load reports all problems at once.

use std::path::{Path, PathBuf};

use toml::Spanned;

use super::check::Checker;
use super::raw::{RawEscalation, RawNetwork, RawRuntime};
use super::{EscalationTimeouts, Located};
use crate::egress::{EgressRule, PrivateAnswers};
use crate::host::HostEnvironment;

/// Longest Unix socket path (`sun_path` is 108 bytes with the terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

/// `[escalation]`, checked.
pub(super) struct Escalation {
    pub(super) enabled: bool,
    /// `None` after a recorded problem.
    pub(super) socket_root: Option<PathBuf>,
    pub(super) auto_approve: Vec<Located<String>>,
    pub(super) auto_approve_rules: Vec<crate::policy::AutoApproveRule>,
    pub(super) timeouts: EscalationTimeouts,
}

/// `[network]`, checked.
pub(super) struct Network {
    pub(super) allow_egress: Vec<EgressRule>,
    pub(super) podman_network: String,
    pub(super) dns_upstream: Vec<std::net::SocketAddr>,
    pub(super) private_answers: PrivateAnswers,
    pub(super) ask: bool,
    pub(super) ask_hold_seconds: u64,
    pub(super) ca_bundle: Option<PathBuf>,
}

/// `$XDG_RUNTIME_DIR/lazaret`, else `/tmp/lazaret-<uid>`.
fn default_socket_root(host: &dyn HostEnvironment) -> PathBuf {
    match host.var("XDG_RUNTIME_DIR").filter(|value| value.starts_with('/')) {
        Some(dir) => PathBuf::from(dir).join("lazaret"),
        None => PathBuf::from(format!("/tmp/lazaret-{}", host.uid())),
    }
}

impl Checker<'_> {
    /// `[escalation]`; without the table, escalation is on with the default
    /// socket directory and timeouts.
    pub(super) fn escalation(&mut self, raw: Option<&RawEscalation>, host: &dyn HostEnvironment) -> Escalation {
        let (enabled, socket_root, auto_approve) = match raw {
            Some(escalation) => (
                escalation.enabled.unwrap_or(true),
                match &escalation.socket_dir {
                    Some(socket_dir) => self.host_directory("escalation.socket_dir", socket_dir, host),
                    None => Some(default_socket_root(host)),
                },
                escalation.auto_approve.iter().map(|entry| self.auto_approve_entry(entry)).collect(),
            ),
            None => (true, Some(default_socket_root(host)), Vec::new()),
        };
        if let Some(socket_root) = &socket_root {
            self.socket_root_length(socket_root, raw.and_then(|escalation| escalation.socket_dir.as_ref()));
        }
        let defaults = EscalationTimeouts::default();
        let timeouts = EscalationTimeouts {
            approval_seconds: self
                .timeout("escalation.approval_timeout_seconds", raw.and_then(|escalation| escalation.approval_timeout_seconds.as_ref()))
                .unwrap_or(defaults.approval_seconds),
            command_seconds: self
                .timeout("escalation.command_timeout_seconds", raw.and_then(|escalation| escalation.command_timeout_seconds.as_ref()))
                .unwrap_or(defaults.command_seconds),
        };
        let entries = raw.map(|escalation| escalation.auto_approve.as_slice()).unwrap_or_default();
        let auto_approve_rules = self.auto_approve_rules("escalation.auto_approve", entries);
        Escalation { enabled, socket_root, auto_approve, auto_approve_rules, timeouts }
    }

    fn auto_approve_entry(&mut self, entry: &Spanned<String>) -> Located<String> {
        if entry.get_ref().trim().is_empty() {
            self.error("escalation.auto_approve", "an entry is empty".into(), Some(self.locate(entry.span())));
        }
        self.located(entry)
    }

    /// The longest socket path under `socket_root` must fit a Unix socket
    /// address; `written` is `socket_dir` if the file sets it.
    fn socket_root_length(&mut self, socket_root: &Path, written: Option<&Spanned<String>>) {
        let longest = socket_root.join("0123456789ab").join("escalate.sock");
        if longest.as_os_str().len() > MAX_SOCKET_PATH {
            let location = written.map(|dir| self.locate(dir.span()));
            self.error(
                "escalation.socket_dir",
                format!("`{}` is too long: socket paths under it would exceed {MAX_SOCKET_PATH} bytes", socket_root.display()),
                location,
            );
        }
    }

    /// A timeout key: its value when written (also when out of range: the
    /// recorded problem stops the load anyway).
    fn timeout(&mut self, field: &str, value: Option<&Spanned<u64>>) -> Option<u64> {
        let value = value?;
        if !(1..=86_400).contains(value.get_ref()) {
            self.error(field, format!("`{}` is out of range (1 to 86400 seconds)", value.get_ref()), Some(self.locate(value.span())));
        }
        Some(*value.get_ref())
    }

    /// `[runtime] runsc`: an existing file, canonical. `None` when not
    /// written (the newest runsc found is used) or refused.
    pub(super) fn runsc(&mut self, raw: Option<&RawRuntime>, host: &dyn HostEnvironment) -> Option<PathBuf> {
        let value = raw.and_then(|runtime| runtime.runsc.as_ref())?;
        let path = self.host_directory("runtime.runsc", value, host)?;
        match host.canonicalize(&path) {
            Ok(path) => Some(path),
            Err(error) => {
                let location = Some(self.locate(value.span()));
                self.error("runtime.runsc", format!("`{}` cannot be used: {error}", value.get_ref()), location);
                None
            }
        }
    }

    /// `[network]`; without the table, no global egress, the `podman`
    /// network, podman's nameservers and private answers refused.
    pub(super) fn network(&mut self, raw: Option<&RawNetwork>, host: &dyn HostEnvironment) -> Network {
        let allow_egress = raw.map(|network| self.egress("network.allow_egress", &network.allow_egress)).unwrap_or_default();
        let podman_network = match raw.and_then(|network| network.podman_network.as_ref()) {
            Some(name) => self.podman_network(name),
            None => "podman".to_owned(),
        };
        let dns_upstream = self.dns_upstream(raw.map(|network| network.dns_upstream.as_slice()).unwrap_or_default());
        let private_answers = match raw.and_then(|network| network.private_answers.as_ref()) {
            None => PrivateAnswers::default(),
            Some(value) => PrivateAnswers::parse(value.get_ref()).unwrap_or_else(|| {
                self.error(
                    "network.private_answers",
                    format!("`{}` is not a choice: \"refuse\" (the default) or \"allow\"", value.get_ref()),
                    Some(self.locate(value.span())),
                );
                PrivateAnswers::default()
            }),
        };
        let ask = raw.and_then(|network| network.ask).unwrap_or(false);
        let ask_hold_seconds = match raw.and_then(|network| network.ask_hold_seconds.as_ref()) {
            None => super::DEFAULT_ASK_HOLD_SECONDS,
            Some(value) => {
                let most = super::MAX_ASK_HOLD_SECONDS;
                if *value.get_ref() > most {
                    self.error(
                        "network.ask_hold_seconds",
                        format!("`{}` is out of range (0 to {most} seconds: shorter than a resolver's time-out)", value.get_ref()),
                        Some(self.locate(value.span())),
                    );
                }
                *value.get_ref()
            }
        };
        // An existing file, canonical (the sidecar gets it read-only).
        let ca_bundle = raw.and_then(|network| network.ca_bundle.as_ref()).and_then(|value| {
            let path = self.host_directory("network.ca_bundle", value, host)?;
            match host.canonicalize(&path) {
                Ok(path) if path.is_file() => Some(path),
                Ok(path) => {
                    self.error("network.ca_bundle", format!("`{}` is not a file", path.display()), Some(self.locate(value.span())));
                    None
                }
                Err(error) => {
                    self.error(
                        "network.ca_bundle",
                        format!("`{}` cannot be used: {error}", value.get_ref()),
                        Some(self.locate(value.span())),
                    );
                    None
                }
            }
        });
        Network { allow_egress, podman_network, dns_upstream, private_answers, ask, ask_hold_seconds, ca_bundle }
    }

    fn podman_network(&mut self, name: &Spanned<String>) -> String {
        let valid = !name.get_ref().is_empty() && name.get_ref().chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if !valid {
            self.error(
                "network.podman_network",
                format!("`{}` is not a valid podman network name", name.get_ref()),
                Some(self.locate(name.span())),
            );
        }
        name.get_ref().clone()
    }

    /// `dns_upstream` entries: an IP address (port 53) or a socket address.
    fn dns_upstream(&mut self, entries: &[Spanned<String>]) -> Vec<std::net::SocketAddr> {
        let mut dns_upstream = Vec::new();
        for entry in entries {
            let text = entry.get_ref();
            let parsed = text.parse::<std::net::IpAddr>().map(|address| std::net::SocketAddr::new(address, 53)).or_else(|_| text.parse());
            match parsed {
                Ok(address) => dns_upstream.push(address),
                Err(_) => self.error(
                    "network.dns_upstream",
                    format!("`{text}` is not an IP address (optionally with a port, e.g. 10.0.0.53 or [fd00::53]:5353)"),
                    Some(self.locate(entry.span())),
                ),
            }
        }
        dns_upstream
    }
}
