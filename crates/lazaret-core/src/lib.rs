//! `lazaret-core`: the parts of Lazaret that need no container runtime and no
//! async runtime: the configuration model and its validation, token and tilde
//! expansion, the Domain Anchor and the names it derives, and exit statuses.
//!
//! Everything here is deterministic given a [`host::HostEnvironment`]; the
//! binaries supply the real one, tests supply fakes.

pub mod bounds;
pub mod config;
pub mod domain;
pub mod egress;
pub mod error;
pub mod exit_status;
pub mod expand;
pub mod git_bundle;
pub mod git_config_mirror;
pub mod host;
pub mod host_code_files;
pub mod ids;
pub mod image_reference;
pub mod limits;
pub mod location;
pub mod paths;
pub mod policy;
pub mod terminal_text;
pub mod time;

pub use error::{Error, Result};
