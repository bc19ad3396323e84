//! The one approval queue: pending host commands and network requests,
//! the answers clients give, and the grants and rules they leave.

use serde::{Deserialize, Serialize};

use super::{DecisionSource, EntryVerdict, GrantScope};

/// A request from inside the sandbox waiting for a human.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PendingEscalation {
    /// Minted by the coordinator, random per request: never the agent's
    /// choice (DECISIONS D16). Clients key a request by (domain, id).
    pub request_id: String,
    pub domain_hash: String,
    pub profile: String,
    /// The verified session the request came from.
    pub session_id: String,
    /// Exactly what would run (the program is resolved on the host).
    pub argv: Vec<String>,
    /// The argv quoted for display only.
    pub display: String,
    /// The agent's words: untrusted.
    pub justification: Option<String>,
    /// The host directory the command would run in.
    pub cwd: String,
    /// Why this was not auto-approved.
    pub reasons: Vec<String>,
    /// Warnings: commands that run project code or take command-running options.
    pub risk_notes: Vec<String>,
    pub received_at_ms: u64,
    /// When the request is denied if nobody answers.
    pub expires_at_ms: u64,
}

/// A destination the sandbox asked for that no allow entry covers, waiting
/// for a human (`[network] ask`): a name it looked up, or an address it
/// connected to directly. Everything in it came from the sandbox (the name is
/// checked to be a plain DNS name, lower case; the address is re-written by
/// the coordinator).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PendingNetworkRequest {
    /// Minted by the coordinator, random per request.
    pub request_id: String,
    pub domain_hash: String,
    pub profile: String,
    /// The DNS name asked for (lower case, letters, digits, hyphens, dots),
    /// or the address connected to, as its host network (`10.9.0.7/32`,
    /// `fd00::7/128`). Approving it allows exactly this entry.
    pub destination: String,
    /// The record types asked for (`A`, `AAAA`); for an address, what was
    /// tried (`tcp/8080`, `udp/53`, or an IP protocol number), the same as
    /// `service`.
    pub record_types: Vec<String>,
    /// For an address: the protocol and port the connection tried
    /// (`tcp/8080`, `udp/53`, or an IP protocol number). `allow` opens
    /// exactly this service of the address; `allowEveryPort` is the wider
    /// answer; `deny` refuses this service. Each service of an address is a
    /// request of its own. `None` for a name.
    #[serde(default)]
    pub service: Option<String>,
    /// The sessions live when it was first asked. The sandbox's network is
    /// shared by all its sessions, so which one asked cannot be told.
    pub session_ids: Vec<String>,
    /// Questions for it after the first, while it waits.
    pub repeats: u64,
    pub received_at_ms: u64,
    /// When the request goes away if nobody answers (the destination stays
    /// refused).
    pub expires_at_ms: u64,
}

/// Something waiting for a human: a host command from `lazaret-escalate`,
/// or a network destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum PendingItem {
    Command(PendingEscalation),
    Network(PendingNetworkRequest),
}

impl PendingItem {
    pub fn request_id(&self) -> &str {
        match self {
            PendingItem::Command(escalation) => &escalation.request_id,
            PendingItem::Network(request) => &request.request_id,
        }
    }

    pub fn received_at_ms(&self) -> u64 {
        match self {
            PendingItem::Command(escalation) => escalation.received_at_ms,
            PendingItem::Network(request) => request.received_at_ms,
        }
    }
}

/// An answer to a network request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum NetworkDecision {
    /// Allow the destination for the scope; a held question is answered.
    /// For an address, only the protocol and port the request shows
    /// (`service`).
    Allow,
    /// For an address only: allow every protocol and port of it, wider
    /// than the request shows; every client names it so. Refused for a name.
    AllowEveryPort,
    /// Refuse it, and remember the refusal for the scope: no new request
    /// for it until then.
    Deny,
}

/// A network grant or remembered refusal, made by answering a network
/// request (`rules/list`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NetworkGrant {
    /// What `rules/revoke` takes.
    pub id: String,
    /// The name, or the address's host network (`10.9.0.7/32`).
    pub destination: String,
    /// For an address: the one protocol and port the grant covers
    /// (`tcp/8081`); `None` for a name, or for an address when `everyPort`.
    #[serde(default)]
    pub service: Option<String>,
    /// For an address: the grant covers every protocol and port of it (an
    /// `allowEveryPort` answer, or a grant made before grants were scoped).
    #[serde(default)]
    pub every_port: bool,
    pub verdict: EntryVerdict,
    pub scope: GrantScope,
    pub decided_by: DecisionSource,
    pub granted_at_ms: u64,
    /// When it ends on its own (`minutes` scope).
    pub expires_at_ms: Option<u64>,
    /// Questions for the destination since it was made (answered under an
    /// allow, refused under a deny), as the sidecar's events report them:
    /// past its rate limit (20/s, bursts of 50) some go uncounted.
    pub hits: u64,
}

/// An auto-approve rule in force (`rules/list`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AutoApproveListing {
    /// What `rules/revoke` takes.
    pub id: String,
    /// The entry as written (`cargo check *`).
    pub entry: String,
    /// Where it was written: `FILE:LINE:COLUMN` in the configuration, or
    /// the table (`[escalation] auto_approve`, `[profiles.NAME]
    /// auto_approve`) when the place is not known.
    pub source: String,
}

/// Every rule and grant of the domain (`rules/list`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Rules {
    pub auto_approve: Vec<AutoApproveListing>,
    pub network: Vec<NetworkGrant>,
}

/// An answer to a pending escalation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum Decision {
    /// Run the argv as requested.
    Approve,
    /// Refuse it (`reason` goes back to the sandbox and into the audit).
    Deny,
    /// Run `argv` instead (recorded as edited, with both argvs).
    Edit,
    /// Refuse it, recorded as aborted (the terminal prompt's [Q] Abort,
    /// which then ends the domain with `domain/shutdown`).
    Abort,
}
