//! Every wait has a bound, and every bound is named here (issue 28 item 6):
//! how long the CLI waits for the coordinator, and how long the coordinator
//! waits for podman, its helpers and its own tasks. Each constant says what
//! it bounds and why it has that value; the code that waits names the
//! constant and says it in its error ("... did not finish within N s").
//!
//! Poll intervals and rate windows are not waits and stay beside their
//! loops. Bounds of the sandbox's own requests (escalation approval and
//! command time-outs) are configuration (`[escalation]`); the Network
//! Sidecar (a static helper that does not depend on this crate) keeps its
//! upstream DNS time-out in `lazaret-sidecar/src/dns.rs`, and the Escalation
//! Socket its request read time-out in `escalation/server.rs`.
//!
//! Only constants: this crate still runs nothing and waits for nothing.

use std::time::Duration;

// --- The CLI and editors' control-socket calls ---------------------------

/// A control-socket call that the coordinator answers from memory, its
/// store or one exchange with the Network Sidecar (status, lists, network
/// changes, answers to escalations). Those take milliseconds; 15 s leaves
/// room for a machine under load and for the sidecar's own
/// [`SIDECAR_CONTROL`] bound.
pub const ORDINARY_CALL: Duration = Duration::from_secs(15);

/// A call whose work grows with the domain's data: `branch/diff` and
/// `branch/fileContents` (host git and a `podman exec` bounded by
/// [`EXPORT`]), `state/diff` (listings of whole overlays) and
/// `audit/verify` (walks the whole hash chain). Two minutes covers large
/// repositories and trails without leaving a stuck coordinator waited on
/// for an hour.
pub const SLOW_CALL: Duration = Duration::from_secs(120);

/// `session/unregister`: it exports the agent branch (at most [`EXPORT`])
/// before it answers, then records the session.
pub const UNREGISTER_CALL: Duration = Duration::from_secs(EXPORT.as_secs() + ORDINARY_CALL.as_secs());

/// `session/register`, the one call that legitimately waits for a long
/// process: it resolves once the sandbox runs, that is after `podman run`
/// ([`PODMAN_RUN`]) and the seeding of the agent's repository ([`SEED`]).
pub const REGISTER_CALL: Duration = Duration::from_secs(PODMAN_RUN.as_secs() + SEED.as_secs() + ORDINARY_CALL.as_secs());

/// `lazaret pending` and friends ask every running domain at once; a domain
/// that has not answered its `escalation/list` or `domain/status` within
/// 5 s is reported by name (never listed as empty) and the others are
/// shown. Short because a human is waiting for the list.
pub const DOMAIN_ANSWER: Duration = Duration::from_secs(5);

/// The leader CLI's wait for the coordinator it started to bind its control
/// socket: the coordinator prepares the workspace, the store, the State
/// Anchor and the Network Sidecar first (seconds; a first checkout of a
/// large repository more). A coordinator that fails exits and is reported
/// at once, so this bounds only one that hangs.
pub const COORDINATOR_BIND: Duration = Duration::from_secs(60);

// --- The coordinator's own waits ----------------------------------------

/// How long a new coordinator waits for its first session before it tears
/// down: the CLI that started it registers right after the bind; if that
/// CLI died, nobody else will.
pub const FIRST_SESSION: Duration = Duration::from_secs(20);

/// How long teardown waits for the domain lock before going ahead without
/// it. A leader CLI holds the lock only while it registers (milliseconds);
/// a lock held longer belongs to a stuck process, which must not keep the
/// sandbox alive.
pub const TEARDOWN_LOCK: Duration = Duration::from_secs(5);

/// `podman run --detach` of the sandbox or the Network Sidecar. A start
/// takes about half a second here; podman may first set up its storage or
/// copy up a large image. Five minutes, then podman is killed and the
/// domain reports the start failed with the container's name.
pub const PODMAN_RUN: Duration = Duration::from_secs(300);

/// One `podman rm --force --time=0` (teardown retries it a few times).
/// `--time=0` kills at once; runsc needs seconds to tear a sandbox down.
/// Teardown holds the domain lock meanwhile, so a hung podman must not hold
/// it for long: past this bound podman is killed, the failure names the
/// container, and teardown goes on to release the lock.
pub const PODMAN_RM: Duration = Duration::from_secs(30);

/// A podman query or small command (`inspect`, `image exists`, `logs`,
/// `network inspect`, `unshare` reading the network namespace): answered
/// from podman's database in well under a second.
pub const PODMAN_QUERY: Duration = Duration::from_secs(30);

/// Building the Network Sidecar's image (`FROM scratch` plus one static
/// binary, no step that runs anything): seconds.
pub const SIDECAR_IMAGE_BUILD: Duration = Duration::from_secs(120);

/// The Network Sidecar's control socket appearing after `podman run`: the
/// sidecar installs its rules and binds within a second.
pub const SIDECAR_START: Duration = Duration::from_secs(10);

/// One request on the sidecar's control socket (a JSON line each way); the
/// sidecar answers from memory and netlink in milliseconds.
pub const SIDECAR_CONTROL: Duration = Duration::from_secs(5);

/// A credential's `command` (a keyring's CLI) at the sidecar's start.
pub const CREDENTIAL_COMMAND: Duration = Duration::from_secs(30);

/// How long a sidecar that ended may take to be back: its supervisor (the
/// container's PID 1) starts it again within 2 s at most.
pub const SIDECAR_RETURN: Duration = Duration::from_secs(15);

/// Seeding the agent's repository inside the sandbox at start, a first
/// checkout of a large repository included (10,000 files took 10-18 s
/// through gVisor; much larger ones far more).
pub const SEED: Duration = Duration::from_secs(600);

/// One export of the agent branch, and the in-sandbox reads that go with it
/// (`git diff` of uncommitted changes, a file for a diff editor): the
/// agent controls how long these run, so they are cut off.
pub const EXPORT: Duration = Duration::from_secs(15);

/// Mounting or unmounting the State Anchor: the overlay mount script (kernel
/// overlayfs at once; fuse-overlayfs starts a daemon), `podman image
/// mount`, `umount`, reading the mount table, each in `podman unshare`
/// rootless. Seconds; a minute covers a slow podman.
pub const MOUNT_COMMAND: Duration = Duration::from_secs(60);

/// Walking, hashing or removing the State Anchor's trees (`find`,
/// `sha256sum`, `rm -rf` in `podman unshare`), for `state diff`, `state
/// reset` and teardown: proportional to what the agent wrote there; 10,000
/// files take seconds, so ten minutes only stops a hung command.
pub const STATE_WALK: Duration = Duration::from_secs(600);

/// One probe of a runsc candidate (`runsc --version`, `runsc flags`) when a
/// coordinator chooses its runtime: a Go program start, tens of
/// milliseconds. A runsc that hangs is passed over like one that fails.
pub const RUNSC_PROBE: Duration = Duration::from_secs(10);

/// A short snippet the CLI runs inside the sandbox during a session (a
/// signal for ^C on old runsc, the terminal's new size): milliseconds, but
/// the sandbox's binaries are the agent's, so a hung one is cut off.
pub const IN_SANDBOX_SIGNAL: Duration = Duration::from_secs(5);
