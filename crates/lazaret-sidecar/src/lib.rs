//! The Network Sidecar's parts, as a library for its binary (`main.rs`,
//! which holds the process: flags, sockets, threads) and for the fuzz
//! targets: the egress policy and the kernel messages it becomes, the DNS
//! resolver, the credential endpoints, and the control protocol.

pub mod addresses;
pub mod blocked;
pub mod control;
pub mod dns;
pub mod enforcer;
pub mod events;
pub mod inject;
pub mod nft;
pub mod policy;
pub mod rtnl;

/// A mutex's guard; a panic in another thread that held it does not poison
/// the sidecar (what it guards stays consistent between statements).
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
