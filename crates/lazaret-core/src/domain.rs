//! The Domain Anchor and the host resource
//! names derived from it (DECISIONS D7).

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// Number of hex digits of the SHA-256 digest kept as the domain hash.
pub const DOMAIN_HASH_LENGTH: usize = 12;

/// A (profile, canonical workspace) pair and its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainAnchor {
    pub profile: String,
    pub workspace: PathBuf,
    pub hash: String,
}

impl DomainAnchor {
    /// `workspace` must already be canonical (see [`crate::config::canonical_workspace`]).
    pub fn new(profile: &str, workspace: &Path) -> Result<DomainAnchor> {
        let Some(workspace_text) = workspace.to_str() else {
            return Err(Error::Workspace {
                path: workspace.to_path_buf(),
                message: "the path is not valid UTF-8, so no Domain Anchor can be derived".into(),
            });
        };
        Ok(DomainAnchor { profile: profile.to_owned(), workspace: workspace.to_path_buf(), hash: domain_hash(profile, workspace_text) })
    }
}

/// First 12 hex digits of SHA-256 of `"<profile>:<canonical workspace>"`.
pub fn domain_hash(profile: &str, canonical_workspace: &str) -> String {
    let digest = Sha256::digest(format!("{profile}:{canonical_workspace}").as_bytes());
    let mut hex = crate::ids::hex(&digest);
    hex.truncate(DOMAIN_HASH_LENGTH);
    hex
}

/// Every host resource scoped to one domain (DECISIONS D7).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DomainResources {
    pub domain_hash: String,
    pub profile: String,
    pub workspace: PathBuf,
    pub container_name: String,
    pub sidecar_name: String,
    /// `<socket_dir>/<hash>`: 0700, holds both sockets.
    pub socket_dir: PathBuf,
    pub control_socket: PathBuf,
    pub escalation_socket: PathBuf,
    pub lockfile: PathBuf,
    pub domain_dir: PathBuf,
}

impl DomainResources {
    pub fn new(anchor: &DomainAnchor, data_root: &Path, socket_root: &Path) -> DomainResources {
        let hash = &anchor.hash;
        let socket_dir = socket_root.join(hash);
        DomainResources {
            domain_hash: hash.clone(),
            profile: anchor.profile.clone(),
            workspace: anchor.workspace.clone(),
            container_name: format!("lazaret-{}-{hash}", anchor.profile),
            sidecar_name: format!("lazaret-net-{hash}"),
            control_socket: socket_dir.join("control.sock"),
            escalation_socket: socket_dir.join("escalate.sock"),
            socket_dir,
            // D12: in the user's private socket directory, never in /tmp.
            lockfile: socket_root.join(format!("lazaret_coord_{hash}.lock")),
            domain_dir: data_root.join("domains").join(hash),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_matches_the_specification() {
        // sha256("claude:/home/user/project") computed independently with sha256sum.
        assert_eq!(domain_hash("claude", "/home/user/project"), "d9921716687a");
        let hash = domain_hash("claude", "/home/user/project");
        assert_eq!(hash.len(), 12);
        assert!(hash.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(hash, domain_hash("codex", "/home/user/project"));
        assert_ne!(hash, domain_hash("claude", "/home/user/project2"));
    }

    #[test]
    fn names_follow_d7() {
        let anchor = DomainAnchor { profile: "claude".into(), workspace: "/w".into(), hash: "0123456789ab".into() };
        let resources = DomainResources::new(&anchor, Path::new("/data"), Path::new("/run/user/1000/lazaret"));
        assert_eq!(resources.container_name, "lazaret-claude-0123456789ab");
        assert_eq!(resources.sidecar_name, "lazaret-net-0123456789ab");
        assert_eq!(resources.control_socket, Path::new("/run/user/1000/lazaret/0123456789ab/control.sock"));
        assert_eq!(resources.escalation_socket, Path::new("/run/user/1000/lazaret/0123456789ab/escalate.sock"));
        assert_eq!(resources.lockfile, Path::new("/run/user/1000/lazaret/lazaret_coord_0123456789ab.lock"));
        assert_eq!(resources.domain_dir, Path::new("/data/domains/0123456789ab"));
    }
}
