// Generated from crates/lazaret-protocol by its tests/generated.rs; do not edit.
// Regenerate: LAZARET_UPDATE_GENERATED=1 cargo test -p lazaret-protocol --test generated
/* eslint-disable */

/** The API version these types describe (`domain/status`.apiVersion). */
export const API_VERSION = 2;

/** The coordinator's application error codes (`error.code`; docs/rpc.md). */
export const ERROR_CODE = {
  /** The domain is tearing down; start a new session (the CLI retries). */
  SHUTTING_DOWN: 1001,
  /** The sandbox container could not be started; `message` says why. */
  SANDBOX_FAILED: 1002,
  /** The session id is unknown or belongs to another connection. */
  UNKNOWN_SESSION: 1003,
  /** The request was well-formed but its values are not acceptable. */
  INVALID_VALUE: 1004,
  /** The state store failed. */
  STORE_FAILED: 1005,
  /** A git operation failed; `message` has git's reason. */
  GIT_FAILED: 1006,
  /** The escalation is unknown or was already answered. */
  ESCALATION_NOT_PENDING: 1007,
  /** The domain has no Network Sidecar (empty allowlist) or it refused. */
  NETWORK_FAILED: 1008,
  /** The sandbox is not running (for methods that read inside it). */
  SANDBOX_NOT_RUNNING: 1009,
  /** The network request is unknown or was already answered. */
  NETWORK_REQUEST_NOT_PENDING: 1010,
  /** The rule or grant is unknown (revoked already, or expired). */
  RULE_NOT_FOUND: 1011,
} as const;

/** Why addresses in an allowed name's answer were not opened. */
export type AnswerRefusal = "specialAddress" | "privateAddress" | "hostNetwork" | "deniedAddress" | "hostAddress";

/** A network grant or remembered refusal as an audit record names it. */
export interface AuditGrant {
  /** The name, or the address's host network (`10.9.0.7/32`). */
  destination: string;
  /** For an address: every protocol and port of it. */
  everyPort: boolean;
  /** The id `rules/list` shows and `rules/revoke` takes; `None` in records migrated from layout v4, which did not keep it. */
  id?: string | null;
  /** How long it holds (`minutes`: its duration). */
  scope: GrantScope;
  /** For an address: the one protocol and port it covers (`tcp/8081`). */
  service?: string | null;
  verdict: EntryVerdict;
}

/** One record of the audit trail (hash-chained): the envelope every kind shares (its place in the chain, what became of it, who decided, why, when) and the event itself, whose `type` names its kind and whose fields are that kind's. The state store keeps each record as the bytes it was written as, and the chain hashes those bytes (see `lazaret-store`). */
export type AuditRecord = {
  decidedAtMs?: number | null;
  decidedBy?: DecisionSource | null;
  finishedAtMs?: number | null;
  /** SHA-256 (hex) of the record's stored bytes: this record as written, with `hash` empty. */
  hash: string;
  outcome: Outcome;
  /** `hash` of the record before (64 zeros for the first). */
  previousHash: string;
  /** Why, in words (a refusal's reason, a denial's reason, the Network Sidecar's message); agent text for some kinds. */
  reason?: string | null;
  receivedAtMs: number;
  /** Position in the chain, from 1. */
  sequence: number;
} & AuditEvent;

/** Every kind of audit record. */
export type AuditEvent =
  | EscalationAuditEvent
  | ConnectionRefusedAuditEvent
  | DnsRefusedAuditEvent
  | DnsAnswerRefusedAuditEvent
  | PolicyChangedAuditEvent
  | NetworkAskedAuditEvent
  | NetworkAnsweredAuditEvent
  | NetworkRequestExpiredAuditEvent
  | NetworkQueueFullAuditEvent
  | GrantExpiredAuditEvent
  | GrantRevokedAuditEvent
  | AutoApproveRevokedAuditEvent
  | CredentialRejectedAuditEvent
  | CredentialWithheldAuditEvent
  | CredentialUseAuditEvent
  | LegacyAuditEvent;

/** A host command requested from inside the sandbox (`lazaret-escalate`): refused, run without asking, or decided by a human. */
export interface EscalationAuditEvent extends EscalationAudit {
  type: "escalation";
}

/** Connections to the Escalation Socket refused before they made a request (no TLS identity, nothing readable in time): `connections` of them, one, or a window's count past the first of its kind. */
export interface ConnectionRefusedAuditEvent {
  connections: number;
  type: "connectionRefused";
}

/** The Network Sidecar refused a DNS question (`recordType` as asked: `A`, `TXT`, ...; the name as asked, agent text). `suppressed`: refusals before this one that the sidecar's rate limit left out. */
export interface DnsRefusedAuditEvent {
  name: string;
  recordType: string;
  refusal: DnsRefusal;
  suppressed?: number | null;
  type: "dnsRefused";
}

/** An allowlisted name's answer pointed at `addresses` the Network Sidecar did not open (left out of the reply); `refusal` is the first address's reason, `reason` names each. */
export interface DnsAnswerRefusedAuditEvent {
  addresses: string[];
  name: string;
  recordType: string;
  refusal: AnswerRefusal;
  suppressed?: number | null;
  type: "dnsAnswerRefused";
}

/** The egress policy was changed over the control socket (`net allow`, `net deny`: one entry; `net reload`: the configuration's allowlist and `privateAnswers`). Outcome `rejected` when it did not take. */
export interface PolicyChangedAuditEvent {
  action: PolicyAction;
  entries: string[];
  privateAnswers?: PrivateAnswers | null;
  type: "policyChanged";
}

/** A destination on no allow entry became a network request (`[network] ask`): a name (with the record type first asked) or an address's host network (with the `service` the connection tried). */
export interface NetworkAskedAuditEvent {
  destination: string;
  recordType?: string | null;
  requestId: string;
  service?: string | null;
  type: "networkAsked";
}

/** A network request was answered; the answer made `grant` (an allow, or a remembered refusal). */
export interface NetworkAnsweredAuditEvent {
  grant: AuditGrant;
  requestId: string;
  type: "networkAnswered";
}

/** A network request went away unanswered. */
export interface NetworkRequestExpiredAuditEvent {
  destination: string;
  recordTypes: string[];
  requestId: string;
  service?: string | null;
  type: "networkRequestExpired";
}

/** A question was refused without asking: as many network requests wait as a domain takes. The first refusal names its destination; once the queue has room, one more record counts the refusals since (`moreRefused`). */
export interface NetworkQueueFullAuditEvent {
  destination?: string | null;
  moreRefused?: number | null;
  recordType?: string | null;
  service?: string | null;
  type: "networkQueueFull";
}

/** A grant (or remembered refusal) for some minutes ran out. */
export interface GrantExpiredAuditEvent {
  grant: AuditGrant;
  type: "grantExpired";
}

/** A grant (or remembered refusal) was revoked (`rules/revoke`). */
export interface GrantRevokedAuditEvent {
  grant: AuditGrant;
  type: "grantRevoked";
}

/** An auto-approve rule was revoked for the rest of this run (`rules/revoke`; the configuration file is unchanged). */
export interface AutoApproveRevokedAuditEvent {
  entry: string;
  ruleId?: string | null;
  type: "autoApproveRevoked";
}

/** A credential endpoint's origin answered 401 or 403 to a request that carried the key. */
export interface CredentialRejectedAuditEvent {
  origin: string;
  status: number;
  suppressed?: number | null;
  type: "credentialRejected";
}

/** A credential endpoint's origin answered `method` with the key in the `part` of its answer: the head withheld (the sandbox got a 502) or the body cut before the key. `status`: the origin's, when readable. */
export interface CredentialWithheldAuditEvent {
  method: string;
  origin: string;
  part: WithheldPart;
  status?: number | null;
  suppressed?: number | null;
  type: "credentialWithheld";
}

/** What went through the credential endpoints since the last such record, per origin, written when `sessionId` ended. */
export interface CredentialUseAuditEvent {
  endpoints: CredentialUse[];
  sessionId: string;
  type: "credentialUse";
}

/** A record of layout v4 (an argv-shaped record of every kind) that the migration to typed records could not read as any kind: every field kept as it was (a v4 record had the fields of an escalation). */
export interface LegacyAuditEvent extends EscalationAudit {
  type: "legacy";
}

/** The result of `audit/verify`: what it proves is in docs/security.md ("The audit trail"). */
export interface AuditVerification {
  intact: boolean;
  /** What else the check found that does not break the chain (a migration from an older layout, a head one append behind after a crash). */
  notes?: string[];
  problem?: string | null;
  /** The first record that breaks the chain, and why (`problem` alone: the head kept beside the store does not match, or is missing). */
  problemAt?: number | null;
  records: number;
}

/** An auto-approve rule in force (`rules/list`). */
export interface AutoApproveListing {
  /** The entry as written (`cargo check *`). */
  entry: string;
  /** What `rules/revoke` takes. */
  id: string;
  /** Where it was written: `FILE:LINE:COLUMN` in the configuration, or the table (`[escalation] auto_approve`, `[profiles.NAME] auto_approve`) when the place is not known. */
  source: string;
}

/** The agent branch against its base on the host, plus the agent's uncommitted changes when the sandbox runs. */
export interface BranchDiff {
  /** The host commit the agent branch started from (merge base with the host's `HEAD`); `None` while the branch does not exist on the host. */
  base?: string | null;
  /** `lazaret/agent-<profile>`. */
  branch: string;
  files: FileChange[];
  /** The agent branch's commit on the host. */
  head?: string | null;
  patch: string;
  /** `None` when the sandbox is not running. */
  uncommitted?: UncommittedChanges | null;
  warnings: PathWarning[];
}

/** A session that ended, from the state store. */
export interface CompletedSession {
  command: string[];
  /** `exited`, `disconnected` or `sandbox-failed`. */
  endReason: string;
  endedAtMs: number;
  exitStatus?: number | null;
  pid: number;
  sessionId: string;
  startedAtMs: number;
}

/** The state of the domain's sandbox container. */
export type ContainerState = "starting" | "running" | "failed" | "stopping";

/** One credential endpoint of the Network Sidecar and what went through it since the sidecar started. */
export interface CredentialEndpointStatus {
  bytesReceived: number;
  /** Bytes of request bodies sent on, and of response bodies passed back. */
  bytesSent: number;
  /** Requests the sidecar answered itself with an error (refused, too large, the origin unreachable). */
  failed: number;
  /** The header the sidecar sets (lower case), e.g. `x-api-key`. */
  header: string;
  /** The API origin, `https://host[:port]`. */
  origin: string;
  /** The sandbox reaches it at `http://127.0.0.1:<port>`. */
  port: number;
  /** Of the 4xx answers, 401 and 403: usually a revoked or wrong key. */
  rejected: number;
  /** Requests the origin answered, by status class. */
  status1xx: number;
  status2xx: number;
  status3xx: number;
  status4xx: number;
  status5xx: number;
  /** Answers that carried the credential (counted in their status class too): a head withheld (the client got a 502) or a body cut before it. */
  withheld?: number;
}

/** What went through one credential endpoint between two `credentialUse` records: requests by the origin's status class, keys refused (401, 403), requests the sidecar failed itself, bytes, answers withheld. */
export interface CredentialUse {
  bytesReceived: number;
  bytesSent: number;
  failed: number;
  origin: string;
  rejected: number;
  status1xx: number;
  status2xx: number;
  status3xx: number;
  status4xx: number;
  status5xx: number;
  withheld: number;
}

/** An answer to a pending escalation. */
export type Decision = "approve" | "deny" | "edit" | "abort";

/** Who decided: `policy`, `timeout`, `client`, `networkSidecar`, `rpc` or `rpc:<client>` (self-declared client name). */
export type DecisionSource = string;

/** Why the sidecar refused a DNS question. */
export type DnsRefusal = "malformed" | "recordType" | "badCharacters" | "notAName" | "notAllowlisted" | "denied" | "longLabel" | "tooManyLabels";

/** The answer to `domain/status`. */
export interface DomainStatus {
  /** `lazaret/agent-<profile>`, `None` for a directly mounted workspace. */
  agentBranch?: string | null;
  /** The agent branch's commit on the host, once it exists there. */
  agentBranchHead?: string | null;
  apiVersion: number;
  /** Why the container failed, when `containerState` is `failed`. */
  containerError?: string | null;
  containerName: string;
  containerState: ContainerState;
  coordinatorPid: number;
  domainHash: string;
  image: string;
  /** Why the sandbox has no working network now (its Network Sidecar stopped: no name resolves, no policy change takes), while that lasts. */
  networkError?: string | null;
  profile: string;
  sessions: LiveSession[];
  startedAtMs: number;
  workspace: string;
}

/** What `lazaret editor-info --json` prints: how an editor finds the coordinators without reading the configuration itself. */
export interface EditorInfo {
  /** The API version this `lazaret` speaks (`API_VERSION`). */
  apiVersion: number;
  /** `<socketRoot>/<domainHash>/control.sock`. */
  controlSocketPattern: string;
  /** The profile `lazaret run` uses without `--profile`. */
  defaultProfile: string;
  /** Every running domain of the user. */
  domains: RunningDomain[];
  /** The default profile's domain of each `--workspace` folder. */
  folders: FolderDomain[];
  /** Always `Content-Length` (LSP-style framing). */
  framing: string;
  /** Every configured profile (the built-in `default` included). */
  profiles: string[];
  /** The user's socket directory. */
  socketRoot: string;
  /** The `lazaret` version, e.g. `0.1.0`. */
  version: string;
}

/** Whether an entry allows or denies. */
export type EntryVerdict = "allow" | "deny";

/** An escalation: the host command a session asked for, and what ran. */
export interface EscalationAudit {
  /** The id the requesting client chose: a correlation value only, written by the agent. */
  clientRequestId?: string | null;
  /** What ran (differs from the request when edited). */
  executedArgv?: string[] | null;
  exitStatus?: number | null;
  /** The agent's words: untrusted. */
  justification?: string | null;
  /** Minted by the coordinator for each request (D16). */
  requestId: string;
  requestedArgv: string[];
  /** The session the request claimed; `verified` says whether its signature checked out. */
  sessionId: string;
  verified: boolean;
}

/** An allow or deny entry that ends on its own. */
export interface ExpiringEntry {
  entry: string;
  expiresInMs: number;
  verdict: EntryVerdict;
}

/** One changed file. */
export interface FileChange {
  /** `None` for binary files. */
  additions?: number | null;
  deletions?: number | null;
  path: string;
  /** git's status letter: `A`, `M`, `D`, `R`, `T`, or `??` (untracked). */
  status: string;
}

/** The answer to `branch/fileContents`: one path at the agent branch's base, at its head on the host, and in the sandbox's working tree. */
export interface FileContents {
  base: FileVersion;
  /** The base commit the diff starts from (`BranchDiff.base`). */
  baseCommit?: string | null;
  head: FileVersion;
  /** The agent branch's commit on the host (`BranchDiff.head`). */
  headCommit?: string | null;
  path: string;
  /** The file in the sandbox's `/workspace`, uncommitted changes included. Written by the agent: treat as untrusted. `None` when the sandbox is not running or the workspace is mounted directly. */
  working?: FileVersion | null;
}

/** One side of a file for a diff editor. */
export interface FileVersion {
  /** NUL bytes or invalid UTF-8: `text` is `None`. */
  binary: boolean;
  /** Whether the path exists on this side. */
  exists: boolean;
  /** Size in bytes (0 when absent). */
  size: number;
  text?: string | null;
  /** `text` holds only the first `MAX_FILE_TEXT` bytes. */
  truncated: boolean;
}

/** The domain of a folder (running or not), as `lazaret editor-info --workspace DIR` names it. */
export interface FolderDomain {
  controlSocket: string;
  domainHash: string;
  profile: string;
  /** Whether a coordinator answers on `controlSocket` now. */
  running: boolean;
  /** The folder as given, made absolute. */
  workspace: string;
}

/** How long an answer to a network request holds. */
export type GrantScope =
  | GrantScopeSession
  | GrantScopeMinutes
  | GrantScopeProfile;

/** Until this sandbox stops (every session of the domain has ended). */
export interface GrantScopeSession {
  type: "session";
}

/** For `minutes` minutes (1 to 1440). */
export interface GrantScopeMinutes {
  minutes: number;
  type: "minutes";
}

/** For the profile, until revoked: kept in the Domain Root (never in the configuration file or the workspace), shown by `lazaret config show`, in force at every start of this domain. */
export interface GrantScopeProfile {
  type: "profile";
}

/** An address learned from an answer to an allowed DNS name. */
export interface LearnedAddress {
  address: string;
  expiresInSeconds: number;
  names: string[];
}

/** A session that is live now. */
export interface LiveSession {
  /** Self-declared by the client that registered it (`cli`, an editor name). */
  client: string;
  command: string[];
  pid: number;
  sessionId: string;
  startedAtMs: number;
}

/** An answer to a network request. */
export type NetworkDecision = "allow" | "allowEveryPort" | "deny";

/** A network grant or remembered refusal, made by answering a network request (`rules/list`). */
export interface NetworkGrant {
  decidedBy: DecisionSource;
  /** The name, or the address's host network (`10.9.0.7/32`). */
  destination: string;
  /** For an address: the grant covers every protocol and port of it (an `allowEveryPort` answer, or a grant made before grants were scoped). */
  everyPort?: boolean;
  /** When it ends on its own (`minutes` scope). */
  expiresAtMs?: number | null;
  grantedAtMs: number;
  /** Questions for the destination since it was made (answered under an allow, refused under a deny), as the sidecar's events report them: past its rate limit (20/s, bursts of 50) some go uncounted. */
  hits: number;
  /** What `rules/revoke` takes. */
  id: string;
  scope: GrantScope;
  /** For an address: the one protocol and port the grant covers (`tcp/8081`); `None` for a name, or for an address when `everyPort`. */
  service?: string | null;
  verdict: EntryVerdict;
}

/** The egress policy the Network Sidecar enforces now. */
export interface NetworkPolicy {
  /** Allowed CIDRs and DNS names (`github.com`, `*.npmjs.org`). */
  allow: string[];
  /** The credential endpoints the sidecar serves the sandbox (a profile's `credentials`): where each origin's API is reached, which header the sidecar adds, and what went through it. Never the credential itself. */
  credentials?: CredentialEndpointStatus[];
  /** Denied CIDRs and names (holes in wider allows). */
  deny: string[];
  /** Entries of `allow` and `deny` that end on their own, with the time they have left. */
  expiring?: ExpiringEntry[];
  /** How long a question for a name on no allow entry is held for a grant, in milliseconds (`[network] ask`); 0: refused at once. */
  holdMs?: number;
  /** Addresses reachable now because an allowed name resolved to them. */
  learned: LearnedAddress[];
  /** Whether a name's answer may open internal addresses no CIDR entry allows: `refuse` (the default) or `allow` (`[network] private_answers`). */
  privateAnswers: PrivateAnswers;
  /** How many kernel rules enforce it. */
  rules: number;
  /** The resolvers the sidecar forwards allowed questions to. */
  upstreams: string[];
}

/** What became of an audited request or change. */
export type Outcome = "rejected" | "auto" | "approved" | "edited" | "denied" | "aborted" | "timedOut" | "networkAllowed" | "networkDenied" | "networkReloaded" | "dnsRefused" | "dnsAnswerRefused" | "networkAsked" | "networkGranted" | "networkRefused" | "networkExpired" | "networkRevoked" | "networkQueueFull" | "credentialRejected" | "credentialUse" | "credentialWithheld";

/** A changed file that makes hosts run code (DECISIONS D4). */
export interface PathWarning {
  path: string;
  reason: string;
}

/** A request from inside the sandbox waiting for a human. */
export interface PendingEscalation {
  /** Exactly what would run (the program is resolved on the host). */
  argv: string[];
  /** The host directory the command would run in. */
  cwd: string;
  /** The argv quoted for display only. */
  display: string;
  domainHash: string;
  /** When the request is denied if nobody answers. */
  expiresAtMs: number;
  /** The agent's words: untrusted. */
  justification?: string | null;
  profile: string;
  /** Why this was not auto-approved. */
  reasons: string[];
  receivedAtMs: number;
  /** Minted by the coordinator, random per request: never the agent's choice (DECISIONS D16). Clients key a request by (domain, id). */
  requestId: string;
  /** Warnings: commands that run project code or take command-running options. */
  riskNotes: string[];
  /** The verified session the request came from. */
  sessionId: string;
}

/** Something waiting for a human: a host command from `lazaret-escalate`, or a network destination. */
export type PendingItem =
  | PendingItemCommand
  | PendingItemNetwork;

export interface PendingItemCommand extends PendingEscalation {
  kind: "command";
}

export interface PendingItemNetwork extends PendingNetworkRequest {
  kind: "network";
}

/** A destination the sandbox asked for that no allow entry covers, waiting for a human (`[network] ask`): a name it looked up, or an address it connected to directly. Everything in it came from the sandbox (the name is checked to be a plain DNS name, lower case; the address is re-written by the coordinator). */
export interface PendingNetworkRequest {
  /** The DNS name asked for (lower case, letters, digits, hyphens, dots), or the address connected to, as its host network (`10.9.0.7/32`, `fd00::7/128`). Approving it allows exactly this entry. */
  destination: string;
  domainHash: string;
  /** When the request goes away if nobody answers (the destination stays refused). */
  expiresAtMs: number;
  profile: string;
  receivedAtMs: number;
  /** The record types asked for (`A`, `AAAA`); for an address, what was tried (`tcp/8080`, `udp/53`, or an IP protocol number), the same as `service`. */
  recordTypes: string[];
  /** Questions for it after the first, while it waits. */
  repeats: number;
  /** Minted by the coordinator, random per request. */
  requestId: string;
  /** For an address: the protocol and port the connection tried (`tcp/8080`, `udp/53`, or an IP protocol number). `allow` opens exactly this service of the address; `allowEveryPort` is the wider answer; `deny` refuses this service. Each service of an address is a request of its own. `None` for a name. */
  service?: string | null;
  /** The sessions live when it was first asked. The sandbox's network is shared by all its sessions, so which one asked cannot be told. */
  sessionIds: string[];
}

/** A change of the egress policy over the control socket. */
export type PolicyAction = "allow" | "deny" | "reload";

/** Whether an allowlisted DNS name's answer may open internal addresses (private, CGNAT, ULA and other special-purpose ranges, the host's own networks) that no CIDR entry allows: `[network] private_answers`. Refused by default: an allowed name stands for hosts out on the network, not for whatever its DNS says. */
export type PrivateAnswers = "refuse" | "allow";

/** The answer to `session/register`. */
export interface RegisterResult {
  containerName: string;
  /** The sandbox's default command (the image's CMD), for sessions that name none. */
  defaultCommand: string[];
  domainHash: string;
  /** Live sessions after this registration. */
  sessionCount: number;
  /** How the session's command joins the sandbox: the client runs this and never works out the backend from the profile. */
  target: SessionTarget;
}

/** Every rule and grant of the domain (`rules/list`). */
export interface Rules {
  autoApprove: AutoApproveListing[];
  network: NetworkGrant[];
}

/** A running domain as `lazaret editor-info` lists it. */
export interface RunningDomain {
  /** `lazaret/agent-<profile>`, `None` for a directly mounted workspace. */
  agentBranch?: string | null;
  /** The agent branch's commit on the host, once it exists there. */
  agentBranchHead?: string | null;
  apiVersion: number;
  /** Why the container failed, when `containerState` is `failed`. */
  containerError?: string | null;
  containerName: string;
  containerState: ContainerState;
  controlSocket: string;
  coordinatorPid: number;
  domainHash: string;
  image: string;
  /** Why the sandbox has no working network now (its Network Sidecar stopped: no name resolves, no policy change takes), while that lasts. */
  networkError?: string | null;
  profile: string;
  sessions: LiveSession[];
  startedAtMs: number;
  workspace: string;
}

/** What `events/event` notifications carry: the event and its number. `seq` counts from 1 per subscription, with no gaps (a dropped stretch is itself reported, as `eventsLagged`). */
export type SequencedEvent = {
  seq: number;
} & Event;

/** Every event kind. */
export type Event =
  | SessionRegisteredEvent
  | SessionEndedEvent
  | ContainerStateEvent
  | ShuttingDownEvent
  | BranchUpdatedEvent
  | BranchRejectedEvent
  | EscalationPendingEvent
  | EscalationResolvedEvent
  | EscalationFinishedEvent
  | NetworkChangedEvent
  | NetworkDnsRefusedEvent
  | NetworkDnsAnswerRefusedEvent
  | NetworkFailedEvent
  | NetworkRestoredEvent
  | NetworkDnsResolvedEvent
  | NetworkRequestPendingEvent
  | NetworkRequestResolvedEvent
  | RulesChangedEvent
  | EventsLaggedEvent;

export interface SessionRegisteredEvent {
  kind: "sessionRegistered";
  pid: number;
  sessionCount: number;
  sessionId: string;
}

export interface SessionEndedEvent {
  endReason: string;
  exitStatus?: number | null;
  kind: "sessionEnded";
  sessionCount: number;
  sessionId: string;
}

export interface ContainerStateEvent {
  kind: "containerState";
  message?: string | null;
  state: ContainerState;
}

export interface ShuttingDownEvent {
  kind: "shuttingDown";
  reason: string;
}

/** The agent branch reached the host at `commit`. */
export interface BranchUpdatedEvent {
  branch: string;
  commit: string;
  kind: "branchUpdated";
  previous?: string | null;
}

/** An export from the sandbox was refused (e.g. objects failed fsck); the host branch did not move. */
export interface BranchRejectedEvent {
  branch: string;
  kind: "branchRejected";
  reason: string;
}

/** A request needs a human: answer it with `escalation/respond`. */
export interface EscalationPendingEvent {
  escalation: PendingEscalation;
  kind: "escalationPending";
}

/** A request was decided; `argv` is what runs, if anything. */
export interface EscalationResolvedEvent {
  argv?: string[] | null;
  decidedBy: DecisionSource;
  kind: "escalationResolved";
  outcome: Outcome;
  requestId: string;
}

/** A host command requested from the sandbox finished. */
export interface EscalationFinishedEvent {
  exitStatus?: number | null;
  kind: "escalationFinished";
  requestId: string;
}

/** The egress policy changed (`network/allow`, `network/deny`, `network/reload`; for a reload `rule` lists the new allowlist). */
export interface NetworkChangedEvent {
  action: string;
  kind: "networkChanged";
  rule: string;
}

/** The Network Sidecar refused a DNS question from the sandbox; nothing went upstream. `suppressed`: refusals dropped by the rate limit since the last event. */
export interface NetworkDnsRefusedEvent {
  kind: "networkDnsRefused";
  message: string;
  name: string;
  reason: DnsRefusal;
  recordType: string;
  suppressed?: number | null;
}

/** An allowlisted name's answer pointed at `addresses` the Network Sidecar does not open (attack review finding 17); they were left out of the reply. `reason` is the first address's; `message` names each address and why. `suppressed`: as for `networkDnsRefused`. */
export interface NetworkDnsAnswerRefusedEvent {
  addresses: string[];
  kind: "networkDnsAnswerRefused";
  message: string;
  name: string;
  reason: AnswerRefusal;
  recordType: string;
  suppressed?: number | null;
}

/** The Network Sidecar stopped: the sandbox has no working network (no name resolves; the kernel keeps the last rules, so nothing new opens) until `networkRestored`. `restarting`: whether it is being started again; if not, the sandbox stays without network until the domain starts anew. */
export interface NetworkFailedEvent {
  kind: "networkFailed";
  message: string;
  restarting: boolean;
}

/** The Network Sidecar is back with the domain's policy as it was (live changes included; learned addresses start afresh). */
export interface NetworkRestoredEvent {
  kind: "networkRestored";
  message: string;
}

/** An allowlisted name was resolved; its `addresses` are reachable now. */
export interface NetworkDnsResolvedEvent {
  addresses: string[];
  kind: "networkDnsResolved";
  name: string;
  recordType: string;
}

/** A network destination needs a human: answer it with `network/respond`. Sent again (same `requestId`) when more questions for it came in. */
export interface NetworkRequestPendingEvent {
  kind: "networkRequestPending";
  request: PendingNetworkRequest;
}

/** A network request was answered or expired. */
export interface NetworkRequestResolvedEvent {
  decidedBy: DecisionSource;
  kind: "networkRequestResolved";
  outcome: Outcome;
  requestId: string;
  scope?: GrantScope | null;
}

/** Rules or grants changed (a grant made, expired or revoked): call `rules/list` again. */
export interface RulesChangedEvent {
  kind: "rulesChanged";
}

/** This subscriber fell behind and `dropped` events were lost. Resync: call `pending/list`, `rules/list` and `domain/status` again. */
export interface EventsLaggedEvent {
  dropped: number;
  kind: "eventsLagged";
}

/** Where and how a session's command runs (`session/register`'s answer), as the coordinator that made the sandbox says. */
export type SessionTarget =
  | SessionTargetLocal
  | SessionTargetPod;

/** The local gVisor sandbox: `runsc exec` with the container's process spec the coordinator recorded in the Domain Root (0600, never on the wire: it holds the sandbox's environment), `podman exec` when there is no record. */
export interface SessionTargetLocal {
  containerName: string;
  type: "local";
}

/** The domain's pod on a cluster, reached as the coordinator reaches it (`lazaret pod-exec`): its kubeconfig, context and namespace. An exec carries no environment: the session's variables and the profile's `env` cross on the command's stdin. */
export interface SessionTargetPod {
  context?: string | null;
  kubeconfig: string;
  namespace: string;
  pod: string;
  type: "pod";
}

/** One change of the agent in a persistent directory (the State Anchor). */
export interface StateChange {
  /** The persistent directory (container path). */
  dir: string;
  kind: StateChangeKind;
  /** The changed path (container path; the agent chose it). */
  path: string;
}

/** How a path under a persistent directory differs from the image. */
export type StateChangeKind = "added" | "modified" | "modifiedConflict" | "deleted" | "deletedConflict";

/** What `lazaret status --json` prints. */
export interface StatusReport {
  domainHash: string;
  /** Whether a coordinator answers for the domain. */
  running: boolean;
  /** `domain/status`, when running. */
  status?: DomainStatus | null;
}

/** The agent's uncommitted changes inside the sandbox. */
export interface UncommittedChanges {
  files: FileChange[];
  patch: string;
}

/** Where an origin's answer carried the credential of its endpoint. */
export type WithheldPart = "head" | "body";

/** Parameters of `session/register`. */
export interface SessionRegisterParams {
  client?: string;
  command?: string[];
  pid: number;
  publicKey?: string;
  sessionId: string;
}

/** Parameters of `session/unregister`. */
export interface SessionUnregisterParams {
  exitStatus?: number;
  sessionId: string;
}

/** Parameters of `session/list`. */
export interface SessionListParams {
  limit?: number;
}

/** Parameters of `domain/status`. */
export interface DomainStatusParams {
}

/** Parameters of `domain/shutdown`. */
export interface DomainShutdownParams {
  reason?: string;
}

/** Parameters of `network/show`. */
export interface NetworkShowParams {
}

/** Parameters of `network/allow`. */
export interface NetworkAllowParams {
  rule: string;
}

/** Parameters of `network/deny`. */
export interface NetworkDenyParams {
  rule: string;
}

/** Parameters of `network/reload`. */
export interface NetworkReloadParams {
}

/** Parameters of `escalation/list`. */
export interface EscalationListParams {
}

/** Parameters of `escalation/respond`. */
export interface EscalationRespondParams {
  argv?: string[];
  client?: string;
  decision: Decision;
  reason?: string;
  requestId: string;
}

/** Parameters of `pending/list`. */
export interface PendingListParams {
}

/** Parameters of `network/respond`. */
export interface NetworkRespondParams {
  client?: string;
  decision: NetworkDecision;
  requestId: string;
  scope: GrantScope;
}

/** Parameters of `rules/list`. */
export interface RulesListParams {
}

/** Parameters of `rules/revoke`. */
export interface RulesRevokeParams {
  client?: string;
  id: string;
}

/** Parameters of `audit/list`. */
export interface AuditListParams {
  before?: number;
  limit?: number;
}

/** Parameters of `audit/verify`. */
export interface AuditVerifyParams {
}

/** Parameters of `branch/diff`. */
export interface BranchDiffParams {
  head?: string;
  patch?: boolean;
}

/** Parameters of `branch/fileContents`. */
export interface BranchFileContentsParams {
  baseCommit?: string;
  headCommit?: string;
  path: string;
}

/** Parameters of `state/diff`. */
export interface StateDiffParams {
  dir?: string;
}

/** Every method: its parameters (sent by name) and its result. */
export interface Methods {
  /** Registers a client session; resolves once the sandbox is running. The session counts as live until `session/unregister` or until its connection closes (reference-counted teardown). */
  "session/register": { params: SessionRegisterParams; result: RegisterResult };
  /** Ends a session of this connection and records it. */
  "session/unregister": { params: SessionUnregisterParams; result: boolean };
  /** Completed sessions from the state store, oldest first (`limit` most recent, 50 by default). */
  "session/list": { params: SessionListParams; result: CompletedSession[] };
  /** The domain: profile, workspace, container state, live sessions. */
  "domain/status": { params: DomainStatusParams; result: DomainStatus };
  /** Tears the whole domain down (every session ends, the sandbox is removed), as the prompt's [Q] Abort does. */
  "domain/shutdown": { params: DomainShutdownParams; result: boolean };
  /** The sandbox's egress policy as the Network Sidecar enforces it. */
  "network/show": { params: NetworkShowParams; result: NetworkPolicy };
  /** Allows a CIDR, an address or a DNS name (`github.com`, `*.npmjs.org`) live, without restarting the sandbox. */
  "network/allow": { params: NetworkAllowParams; result: NetworkPolicy };
  /** Denies a CIDR or a name live (removes an allow entry, or carves a hole in a wider one). */
  "network/deny": { params: NetworkDenyParams; result: NetworkPolicy };
  /** Re-reads the configuration file and replaces the live policy with its merged allowlist (live `allow`/`deny` changes are dropped). An invalid configuration changes nothing. */
  "network/reload": { params: NetworkReloadParams; result: NetworkPolicy };
  /** Requests waiting for a human, oldest first. */
  "escalation/list": { params: EscalationListParams; result: PendingEscalation[] };
  /** Answers a pending request: `edit` runs `argv` instead. The first answer wins; later ones fail with code 1007. `client` names the answering client for the audit trail (`terminal`, `vscode`, `neovim`, ...); it is self-declared, any process of the user may answer. */
  "escalation/respond": { params: EscalationRespondParams; result: boolean };
  /** Everything waiting for a human, oldest first: host commands and network destinations (`[network] ask`). */
  "pending/list": { params: PendingListParams; result: PendingItem[] };
  /** Answers a pending network request for `scope`. The first answer wins; later ones fail with code 1010. `client` as for `escalation/respond`. */
  "network/respond": { params: NetworkRespondParams; result: boolean };
  /** The auto-approve rules in force and the network grants and remembered refusals, each with the id `rules/revoke` takes. */
  "rules/list": { params: RulesListParams; result: Rules };
  /** Revokes a network grant (what it opened closes at once, established flows included), a remembered refusal, or an auto-approve rule (for this run of the domain: the configuration file is not changed). Fails with code 1011 for an unknown id. */
  "rules/revoke": { params: RulesRevokeParams; result: boolean };
  /** A page of the audit trail (typed records: escalations, network events, credential use), oldest first: the `limit` most recent records (100 by default, at most 1000), or with `before` the most recent ones whose `sequence` is below it (to page back, pass the first `sequence` of the page you have). */
  "audit/list": { params: AuditListParams; result: AuditRecord[] };
  /** Verifies the audit hash chain. */
  "audit/verify": { params: AuditVerifyParams; result: AuditVerification };
  /** The agent branch against its base, plus uncommitted changes. `patch: false` leaves the patch texts empty. `head` (a full commit id) diffs that commit instead of the branch's current head, so a client can show again exactly what it showed (DECISIONS D16). */
  "branch/diff": { params: BranchDiffParams; result: BranchDiff };
  /** One path (relative to the workspace) at the agent branch's base, at its head, and in the sandbox's working tree, for a diff editor. `baseCommit` and `headCommit` (full commit ids, from the `BranchDiff` the client shows) pin the committed sides to those commits: a review shows the commits it names, never a branch that moved since (DECISIONS D16). */
  "branch/fileContents": { params: BranchFileContentsParams; result: FileContents };
  /** What the agent changed in the profile's persistent directories (all, or the one named by `dir`), as `lazaret state diff` shows it. */
  "state/diff": { params: StateDiffParams; result: StateChange[] };
}

/** Method names by their camelCase Rust name. */
export const METHODS = {
  sessionRegister: "session/register",
  sessionUnregister: "session/unregister",
  sessionList: "session/list",
  domainStatus: "domain/status",
  domainShutdown: "domain/shutdown",
  networkShow: "network/show",
  networkAllow: "network/allow",
  networkDeny: "network/deny",
  networkReload: "network/reload",
  escalationList: "escalation/list",
  escalationRespond: "escalation/respond",
  pendingList: "pending/list",
  networkRespond: "network/respond",
  rulesList: "rules/list",
  rulesRevoke: "rules/revoke",
  auditList: "audit/list",
  auditVerify: "audit/verify",
  branchDiff: "branch/diff",
  branchFileContents: "branch/fileContents",
  stateDiff: "state/diff",
} as const;

/** Domain events as `events/event` notifications ([`SequencedEvent`]). */
export const SUBSCRIPTION = {
  subscribe: "events/subscribe",
  notification: "events/event",
  unsubscribe: "events/unsubscribe",
} as const;

/** The params of a `events/event` notification. */
export interface EventNotification {
  subscription: string;
  result: SequencedEvent;
}
