//! The command-line surface of `lazaret` (clap definitions only; the
//! handlers live in `commands`).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// `lazaret --version`: the package version and the git commit it was built from.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("LAZARET_GIT_COMMIT"), ")");

/// Run an AI coding agent in a gVisor sandbox under rootless podman.
///
/// Each (profile, workspace) pair is a domain with its own sandbox, git
/// branch `lazaret/agent-<profile>`, state and sockets. Without a config file
/// the built-in `default` profile is used (build its image once with
/// `lazaret image build`).
#[derive(Debug, Parser)]
#[command(name = "lazaret", version = VERSION, propagate_version = true, max_term_width = 100)]
pub struct Cli {
    /// Configuration file [default: $XDG_CONFIG_HOME/lazaret/config.toml].
    /// Never read from the workspace.
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// More log output on stderr (-v info, -vv debug); LAZARET_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command (default: the image's shell) in the domain's sandbox.
    ///
    /// Starts the domain's Session Coordinator and sandbox if they are not
    /// running, or joins them. With a terminal the session is interactive;
    /// without one (scripts, pipes) stdin, stdout and stderr pass through.
    /// The inner command's exit status becomes lazaret's. When the last
    /// session of a domain ends, its sandbox is removed.
    Run {
        #[command(flatten)]
        target: DomainTarget,
        /// Mount the workspace itself read-write at /workspace. Only for a
        /// directory that is not a git repository: a repository is never
        /// mounted (the agent works on its own checkout of
        /// lazaret/agent-<profile> instead).
        #[arg(long)]
        mount_workspace: bool,
        /// The command and its arguments, after `--`.
        #[arg(last = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Show a domain's coordinator, container and live sessions.
    Status {
        #[command(flatten)]
        target: DomainTarget,
        #[arg(long)]
        json: bool,
    },
    /// List a domain's completed sessions (from its state store).
    Sessions {
        #[command(flatten)]
        target: DomainTarget,
        /// At most this many, the most recent.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[arg(long)]
        json: bool,
    },
    /// Print the Domain Anchor hash and every resource name of a domain.
    Domain {
        #[command(subcommand)]
        action: Option<DomainCommand>,
        #[command(flatten)]
        target: DomainTarget,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Check or show the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Check that podman, runsc, runc, fuse-overlayfs, git and the rootless
    /// prerequisites are in place; each failed check says how to fix it.
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// Build images offline: the built-in profile's, or an agent's.
    #[command(subcommand)]
    Image(ImageCommand),
    /// Add a ready-made profile for an agent to the configuration file.
    ///
    /// Writes `[profiles.<agent>]` with the image `lazaret image build
    /// --agent` makes, the agent as the default command, the hosts it needs
    /// (by DNS name, each with the reason), its API key pulled from your shell
    /// with `env:` (never written), the directories that keep its settings and
    /// login, and an empty `auto_approve`. Other profiles and comments are
    /// left as they are; the new file is checked before it replaces the old
    /// one. See docs/agents.md.
    Init {
        /// The agent.
        #[arg(long, value_enum)]
        agent: crate::agents::Agent,
        /// Profile name [default: the agent's name].
        #[arg(long, short, value_name = "NAME")]
        profile: Option<String>,
        /// Also resolve the new profile against this workspace (as `lazaret
        /// run --workspace DIR` will) and name it in the next steps.
        #[arg(long, short, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Print the profile instead of writing it.
        #[arg(long)]
        print: bool,
        /// Replace an existing profile of that name.
        #[arg(long)]
        force: bool,
    },
    /// Show the agent branch (lazaret/agent-<profile>) against the commit it
    /// started from, plus the agent's uncommitted changes while the sandbox
    /// runs. Files that make hosts run code (editor tasks, direnv, package
    /// scripts, nested .git, ...) are listed as warnings first.
    Diff {
        #[command(flatten)]
        target: DomainTarget,
        /// Only the list of files and their line counts.
        #[arg(long)]
        stat: bool,
        #[arg(long)]
        json: bool,
    },
    /// Merge the agent branch into the workspace's current branch, pinned to
    /// the commit you reviewed.
    ///
    /// Shows what will be merged (the files from the branch's base to the
    /// commit, and first the files that make hosts run code), asks, then
    /// runs `git merge` of that commit id, never of the branch name: a
    /// commit the agent adds while you read is not merged. With --expect the
    /// merge is refused (exit status 3) when the branch is no longer at that
    /// commit: review it again (`lazaret diff`). The editors run this.
    Merge {
        #[command(flatten)]
        target: DomainTarget,
        /// The full commit id you reviewed (40 hex digits, as `lazaret diff
        /// --json` gives it as `head`); refused when the branch moved.
        #[arg(long, value_name = "COMMIT")]
        expect: Option<String>,
        /// Merge without asking (a script, or an editor that asked already).
        #[arg(long, short)]
        yes: bool,
    },
    /// Show the domain's audit trail (every host command requested from the
    /// sandbox, verified or refused, its decision and what ran; network
    /// changes, requests, grants and refusals; the credential endpoints),
    /// one record a line, or verify its hash chain. --json prints the
    /// typed records, each naming its kind in `type`.
    Audit {
        #[command(subcommand)]
        action: Option<AuditCommand>,
        #[command(flatten)]
        target: DomainTarget,
        /// At most this many records, the most recent.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        #[arg(long)]
        json: bool,
    },
    /// What the agent changed in the profile's persistent directories (the
    /// State Anchor), or discard it.
    #[command(subcommand)]
    State(StateCommand),
    /// The running sandbox's egress policy: show it, allow/deny a CIDR or a
    /// DNS name live (no restart), or reload it from the configuration.
    #[command(subcommand)]
    Net(NetCommand),
    /// List what waits for a human in every running domain: host commands
    /// (`lazaret-escalate`) and network destinations (`[network] ask`).
    ///
    /// The agent's text (argv, justification, names) is shown escaped; a long
    /// command or justification is cut after its start, saying so: --full
    /// prints all of it. A domain that cannot be asked is an error (exit
    /// status 1), never an empty list.
    Pending {
        #[arg(long)]
        json: bool,
        /// Print every request whole, however long.
        #[arg(long)]
        full: bool,
    },
    /// Approve a pending request (id or unique prefix, see `lazaret pending`).
    ///
    /// A network request is allowed for this session (until the sandbox
    /// stops) unless --for or --profile says otherwise; a request to an
    /// address opens only the protocol and port it shows, unless
    /// --every-port.
    Approve {
        request_id: String,
        #[command(flatten)]
        scope: ScopeArguments,
    },
    /// Deny a pending request. A denied network destination is not asked
    /// about again for the scope (this session unless --for or --profile).
    Deny {
        request_id: String,
        /// Told to the sandbox and kept in the audit (host commands).
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        scope: ScopeArguments,
    },
    /// Approve a pending escalation with a different command (what runs instead).
    Edit {
        request_id: String,
        /// The command to run instead, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        argv: Vec<String>,
    },
    /// List the auto-approve rules and the network grants and remembered
    /// refusals of every running domain, or revoke one by id.
    Rules {
        #[command(subcommand)]
        command: Option<RulesCommand>,
        #[arg(long)]
        json: bool,
    },
    /// For editors: how to find the coordinators (control socket pattern,
    /// framing, API version) and the running domains.
    EditorInfo {
        /// Machine-readable output: the `EditorInfo` object of
        /// docs/protocol.schema.json (the contract editors rely on).
        #[arg(long)]
        json: bool,
        /// Also name the default profile's domain of this folder (running
        /// or not) under `folders`; repeatable.
        #[arg(long = "workspace", value_name = "DIR")]
        workspaces: Vec<std::path::PathBuf>,
    },
    /// Print a shell completion script for bash, zsh, fish, elvish or
    /// powershell (the Debian package and scripts/install put them in place).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Internal: write man pages (lazaret.1, lazaret-run.1, ...) into DIR.
    #[command(hide = true)]
    Man {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Internal: print (NUL-terminated) each DIR whose xattr NAME is kernel
    /// overlayfs' opaque mark; the State Anchor runs it in `podman unshare`.
    #[command(hide = true)]
    StateAnchorOpaque {
        #[arg(value_name = "NAME")]
        xattr: String,
        #[arg(value_name = "DIR")]
        dirs: Vec<PathBuf>,
    },
    /// Internal: hold the terminal's settings until stdin ends (the
    /// interactive CLI that started it is gone, however), then put them
    /// back (started by `run` before it makes the terminal raw).
    #[command(hide = true)]
    TerminalGuard,
    /// Internal: run one session's command in a domain's pod over
    /// `pods/exec` (started by `run` for a profile whose sandbox is on a
    /// cluster): stdin, stdout and stderr relayed, the command's exit
    /// status ours. The variables named by --pass (values from this
    /// process's environment) reach the command over its stdin, before
    /// anything else, never on a command line the API server sees.
    #[command(hide = true)]
    PodExec {
        #[arg(long, value_name = "FILE")]
        kubeconfig: PathBuf,
        #[arg(long)]
        context: Option<String>,
        #[arg(long)]
        namespace: String,
        #[arg(long)]
        pod: String,
        #[arg(long = "pass", value_name = "NAME")]
        pass: Vec<String>,
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Internal: run as a domain's Session Coordinator (started by `run`).
    #[command(hide = true)]
    Coordinator {
        #[command(flatten)]
        target: DomainTarget,
        #[arg(long)]
        mount_workspace: bool,
    },
}

/// Which domain: a profile and a workspace.
#[derive(Debug, Args, Clone)]
pub struct DomainTarget {
    /// Agent profile (a `[profiles.<name>]` of the configuration).
    #[arg(long, short, default_value = lazaret_core::config::DEFAULT_PROFILE, value_name = "NAME")]
    pub profile: String,
    /// The project directory the agent works on [default: current directory].
    #[arg(long, short, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the configuration and resolve every profile against the
    /// workspace; print every problem with file, line and column.
    Check {
        /// The workspace used to resolve `{workspace_dir}` and friends
        /// [default: current directory].
        #[arg(long, short, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
    /// Show one profile fully resolved (tokens expanded, paths canonical).
    /// Values pulled from host variables (`env:VAR`) are redacted.
    Show {
        #[command(flatten)]
        target: DomainTarget,
        #[arg(long)]
        json: bool,
    },
    /// Print the path of the configuration file Lazaret reads.
    Path,
}

#[derive(Debug, Subcommand)]
pub enum NetCommand {
    /// The allow and deny lists in force (read back from the kernel), the
    /// addresses learned from DNS answers, the upstream resolvers and
    /// whether names may open private addresses.
    Show {
        #[command(flatten)]
        target: DomainTarget,
        /// Print the sidecar's answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make a CIDR, an address or a DNS name reachable from the sandbox now.
    /// A name (`github.com`, or `*.npmjs.org` for the names below it) is
    /// answered by the sandbox's resolver, and the addresses it resolves to
    /// become reachable for their TTL; private and other internal addresses
    /// (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7, the host's
    /// networks) only where a CIDR entry covers them, or with `[network]
    /// private_answers = "allow"`.
    Allow {
        /// e.g. 10.0.0.0/8, 192.0.2.7, 2001:db8::/32, github.com, *.npmjs.org
        rule: String,
        #[command(flatten)]
        target: DomainTarget,
    },
    /// Make a CIDR or a DNS name unreachable from the sandbox now (removes an
    /// allow entry, or carves an exception out of a wider one).
    Deny {
        rule: String,
        #[command(flatten)]
        target: DomainTarget,
    },
    /// Re-read the configuration file and make its allowlist (and `[network]
    /// private_answers`) the policy in force (drops live `allow`/`deny`
    /// changes). An invalid file changes nothing.
    Reload {
        #[command(flatten)]
        target: DomainTarget,
    },
}

#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// List what the agent added (A), changed (M) or deleted (D) in each
    /// persistent directory; `!` marks files the base image changed too
    /// (the agent's version wins). On a cluster: against the directory as
    /// seeded, listed in the pod while the domain runs, else as its last
    /// teardown listed it.
    Diff {
        #[command(flatten)]
        target: DomainTarget,
        /// Only this persistent directory (a container path such as /usr).
        #[arg(long, value_name = "PATH")]
        dir: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Discard the agent's changes (all persistent directories, or --dir).
    /// Refused while the domain runs. On a cluster the domain's next start
    /// seeds the directories again from the image.
    Reset {
        #[command(flatten)]
        target: DomainTarget,
        #[arg(long, value_name = "PATH")]
        dir: Option<PathBuf>,
        /// Do not ask for confirmation.
        #[arg(long, short)]
        yes: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Check that no stored record was edited, removed or reordered; exits
    /// 1 naming the first broken record.
    Verify {
        #[command(flatten)]
        target: DomainTarget,
    },
}

#[derive(Debug, Subcommand)]
pub enum DomainCommand {
    /// Delete a cluster profile's domain from its cluster: its `Sandbox`
    /// (which the end of a domain only suspends), pod, volume claim with the
    /// persistent directories, and egress policy. Refused while the domain
    /// runs, and for a `Sandbox` another machine's coordinator made.
    Rm {
        #[command(flatten)]
        target: DomainTarget,
    },
}

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Build the default profile's image offline from this host's Debian
    /// packages (a shell, coreutils, git and friends), or with --agent an
    /// agent's image on top of it. Cached: a rebuild happens only when those
    /// files change, or with --force.
    ///
    /// With --agent, the agent's runtime comes from Debian packages (installed
    /// on the host with apt if missing) and its package, pinned by version, is
    /// fetched on the host with npm or pip into ~/.cache/lazaret/agents (once;
    /// no install script runs, and any that exists is reported). Nothing runs
    /// and nothing is downloaded inside the image build.
    Build {
        /// Rebuild even if an up-to-date image exists.
        #[arg(long)]
        force: bool,
        /// Build this agent's image (localhost/lazaret-<agent>:<version>).
        #[arg(long, value_enum)]
        agent: Option<crate::agents::Agent>,
        /// Image name to create [default: localhost/lazaret-default:1, or the
        /// agent's image].
        #[arg(long, value_name = "REFERENCE")]
        tag: Option<String>,
    },
}

/// How long an answer to a network request holds (host commands take none).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ScopeArguments {
    /// For this long only: minutes (`30m`, or `30`) or hours (`2h`), at most 24h.
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_scope_duration, conflicts_with = "profile")]
    pub for_minutes: Option<u32>,
    /// For the profile, until revoked (`lazaret rules revoke`): kept in the
    /// domain's data directory, never in the configuration file.
    #[arg(long)]
    pub profile: bool,
    /// For a request to an address (approve only): allow every protocol and
    /// port of the address, wider than the one protocol and port the
    /// request shows (which is all an approval opens without it).
    #[arg(long)]
    pub every_port: bool,
}

/// `30m`, `30` (minutes) or `2h`, as minutes from 1 to 1440.
pub fn parse_scope_duration(text: &str) -> Result<u32, String> {
    let (number, per) = if let Some(hours) = text.strip_suffix('h') { (hours, 60) } else { (text.strip_suffix('m').unwrap_or(text), 1) };
    let minutes = number.parse::<u32>().ok().and_then(|n| n.checked_mul(per)).filter(|minutes| (1..=1440).contains(minutes));
    minutes.ok_or_else(|| format!("`{text}` is not a duration from 1m to 24h (write e.g. 30m or 2h)"))
}

#[derive(Debug, Subcommand)]
pub enum RulesCommand {
    /// Revoke a network grant or remembered refusal (what it opened closes
    /// at once, established connections included), or an auto-approve rule
    /// for the rest of this run (the configuration file is not changed).
    Revoke { id: String },
}
