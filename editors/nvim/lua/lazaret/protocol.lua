--- Generated from crates/lazaret-protocol by its tests/generated.rs; do not edit.
--- Regenerate: LAZARET_UPDATE_GENERATED=1 cargo test -p lazaret-protocol --test generated
--- The control protocol's method names and API version, and LuaLS annotations of its wire types.

---@alias lazaret.AnswerRefusal 'specialAddress' | 'privateAddress' | 'hostNetwork' | 'deniedAddress' | 'hostAddress'

---@class lazaret.AuditGrant
---@field destination string The name, or the address's host network (`10.9.0.7/32`).
---@field everyPort boolean For an address: every protocol and port of it.
---@field id? string The id `rules/list` shows and `rules/revoke` takes; `None` in records migrated from layout v4, which did not keep it.
---@field scope lazaret.GrantScope How long it holds (`minutes`: its duration).
---@field service? string For an address: the one protocol and port it covers (`tcp/8081`).
---@field verdict lazaret.EntryVerdict

---@alias lazaret.AuditEvent lazaret.EscalationAuditEvent|lazaret.ConnectionRefusedAuditEvent|lazaret.DnsRefusedAuditEvent|lazaret.DnsAnswerRefusedAuditEvent|lazaret.PolicyChangedAuditEvent|lazaret.NetworkAskedAuditEvent|lazaret.NetworkAnsweredAuditEvent|lazaret.NetworkRequestExpiredAuditEvent|lazaret.NetworkQueueFullAuditEvent|lazaret.GrantExpiredAuditEvent|lazaret.GrantRevokedAuditEvent|lazaret.AutoApproveRevokedAuditEvent|lazaret.CredentialRejectedAuditEvent|lazaret.CredentialWithheldAuditEvent|lazaret.CredentialUseAuditEvent|lazaret.LegacyAuditEvent

---@class lazaret.EscalationAuditEvent : lazaret.EscalationAudit
---@field decidedAtMs? integer
---@field decidedBy? lazaret.DecisionSource
---@field finishedAtMs? integer
---@field hash string SHA-256 (hex) of the record's stored bytes: this record as written, with `hash` empty.
---@field outcome lazaret.Outcome
---@field previousHash string `hash` of the record before (64 zeros for the first).
---@field reason? string Why, in words (a refusal's reason, a denial's reason, the Network Sidecar's message); agent text for some kinds.
---@field receivedAtMs integer
---@field sequence integer Position in the chain, from 1.
---@field type 'escalation'

---@class lazaret.ConnectionRefusedAuditEvent
---@field decidedAtMs? integer
---@field decidedBy? lazaret.DecisionSource
---@field finishedAtMs? integer
---@field hash string SHA-256 (hex) of the record's stored bytes: this record as written, with `hash` empty.
---@field outcome lazaret.Outcome
---@field previousHash string `hash` of the record before (64 zeros for the first).
---@field reason? string Why, in words (a refusal's reason, a denial's reason, the Network Sidecar's message); agent text for some kinds.
---@field receivedAtMs integer
---@field sequence integer Position in the chain, from 1.
---@field connections integer
---@field type 'connectionRefused'

---@class lazaret.DnsRefusedAuditEvent
---@field decidedAtMs? integer
---@field decidedBy? lazaret.DecisionSource
---@field finishedAtMs? integer
---@field hash string SHA-256 (hex) of the record's stored bytes: this record as written, with `hash` empty.
---@field outcome lazaret.Outcome
---@field previousHash string `hash` of the record before (64 zeros for the first).
---@field reason? string Why, in words (a refusal's reason, a denial's reason, the Network Sidecar's message); agent text for some kinds.
---@field receivedAtMs integer
---@field sequence integer Position in the chain, from 1.
---@field name string
---@field recordType string
---@field refusal lazaret.DnsRefusal
---@field suppressed? integer
---@field type 'dnsRefused'

---@class lazaret.DnsAnswerRefusedAuditEvent
---@field decidedAtMs? integer
---@field decidedBy? lazaret.DecisionSource
---@field finishedAtMs? integer
---@field hash string SHA-256 (hex) of the record's stored bytes: this record as written, with `hash` empty.
---@field outcome lazaret.Outcome
---@field previousHash string `hash` of the record before (64 zeros for the first).
---@field reason? string Why, in words (a refusal's reason, a denial's reason, the Network Sidecar's message); agent text for some kinds.
---@field receivedAtMs integer
---@field sequence integer Position in the chain, from 1.
---@field addresses string[]
---@field name string
---@field recordType string
---@field refusal lazaret.AnswerRefusal
---@field suppressed? integer
---@field type 'dnsAnswerRefused'

---@class lazaret.PolicyChangedAuditEvent
---@field decidedAtMs? integer
---@field decidedBy? lazaret.DecisionSource
---@field finishedAtMs? integer
---@field hash string SHA-256 (hex) of the record's stored bytes: this record as written, with `hash` empty.
---@field outcome lazaret.Outcome
---@field previousHash string `hash` of the record before (64 zeros for the first).
---@field reason? string Why, in words (a refusal's reason, a denial's reason, the Network Sidecar's message); agent text for some kinds.
---@field receivedAtMs integer
---@field sequence integer Position in the chain, from 1.
---@field action lazaret.PolicyAction
---@field entries string[]
---@field privateAnswers? lazaret.PrivateAnswers
---@field type 'policyChanged'

---@class lazaret.NetworkAskedAuditEvent
---@field decidedAtMs? integer
---@field decidedBy? lazaret.DecisionSource
---@field finishedAtMs? integer
---@field hash string SHA-256 (hex) of the record's stored bytes: this record as written, with `hash` empty.
---@field outcome lazaret.Outcome
---@field previousHash string `hash` of the record before (64 zeros for the first).
---@field reason? string Why, in words (a refusal's reason, a denial's reason, the Network Sidecar's message); agent text for some kinds.
---@field receivedAtMs integer
---@field sequence integer Position in the chain, from 1.
---@field destination string
---@field recordType? string
---@field requestId string
---@field service? string
---@field type 'networkAsked'

---@class lazaret.NetworkAnsweredAuditEvent
---@field decidedAtMs? integer
---@field decidedBy? lazaret.DecisionSource
---@field finishedAtMs? integer
---@field hash string SHA-256 (hex) of the record's stored bytes: this record as written, with `hash` empty.
---@field outcome lazaret.Outcome
---@field previousHash string `hash` of the record before (64 zeros for the first).
---@field reason? string Why, in words (a refusal's reason, a denial's reason, the Network Sidecar's message); agent text for some kinds.
---@field receivedAtMs integer
---@field sequence integer Position in the chain, from 1.
---@field grant lazaret.AuditGrant
---@field requestId string
---@field type 'networkAnswered'

---@class lazaret.NetworkRequestExpiredAuditEvent
---@field decidedAtMs? integer
---@field decidedBy? lazaret.DecisionSource
---@field finishedAtMs? integer
---@field hash string SHA-256 (hex) of the record's stored bytes: this record as written, with `hash` empty.
---@field outcome lazaret.Outcome
---@field previousHash string `hash` of the record before (64 zeros for the first).
---@field reason? string Why, in words (a refusal's reason, a denial's reason, the Network Sidecar's message); agent text for some kinds.
---@field receivedAtMs integer
---@field sequence integer Position in the chain, from 1.
---@field destination string
---@field recordTypes string[]
---@field requestId string
---@field service? string
---@field type 'networkRequestExpired'

---@class lazaret.NetworkQueueFullAuditEvent
---@field decidedAtMs? integer
---@field decidedBy? lazaret.DecisionSource
---@field finishedAtMs? integer
---@field hash string SHA-256 (hex) of the record's stored bytes: this record as written, with `hash` empty.
---@field outcome lazaret.Outcome
---@field previousHash string `hash` of the record before (64 zeros for the first).
---@field reason? string Why, in words (a refusal's reason, a denial's reason, the Network Sidecar's message); agent text for some kinds.
---@field receivedAtMs integer
---@field sequence integer Position in the chain, from 1.
---@field destination? string
---@field moreRefused? integer
---@field recordType? string
---@field service? string
---@field type 'networkQueueFull'

---@class lazaret.GrantExpiredAuditEvent
---@field decidedAtMs? integer
---@field decidedBy? lazaret.DecisionSource
---@field finishedAtMs? integer
---@field hash string SHA-256 (hex) of the record's stored bytes: this record as written, with `hash` empty.
---@field outcome lazaret.Outcome
---@field previousHash string `hash` of the record before (64 zeros for the first).
---@field reason? string Why, in words (a refusal's reason, a denial's reason, the Network Sidecar's message); agent text for some kinds.
---@field receivedAtMs integer
---@field sequence integer Position in the chain, from 1.
---@field grant lazaret.AuditGrant
---@field type 'grantExpired'

---@class lazaret.GrantRevokedAuditEvent
---@field decidedAtMs? integer
---@field decidedBy? lazaret.DecisionSource
---@field finishedAtMs? integer
---@field hash string SHA-256 (hex) of the record's stored bytes: this record as written, with `hash` empty.
---@field outcome lazaret.Outcome
---@field previousHash string `hash` of the record before (64 zeros for the first).
---@field reason? string Why, in words (a refusal's reason, a denial's reason, the Network Sidecar's message); agent text for some kinds.
---@field receivedAtMs integer
---@field sequence integer Position in the chain, from 1.
---@field grant lazaret.AuditGrant
---@field type 'grantRevoked'

---@class lazaret.AutoApproveRevokedAuditEvent
---@field decidedAtMs? integer
---@field decidedBy? lazaret.DecisionSource
---@field finishedAtMs? integer
---@field hash string SHA-256 (hex) of the record's stored bytes: this record as written, with `hash` empty.
---@field outcome lazaret.Outcome
---@field previousHash string `hash` of the record before (64 zeros for the first).
---@field reason? string Why, in words (a refusal's reason, a denial's reason, the Network Sidecar's message); agent text for some kinds.
---@field receivedAtMs integer
---@field sequence integer Position in the chain, from 1.
---@field entry string
---@field ruleId? string
---@field type 'autoApproveRevoked'

---@class lazaret.CredentialRejectedAuditEvent
---@field decidedAtMs? integer
---@field decidedBy? lazaret.DecisionSource
---@field finishedAtMs? integer
---@field hash string SHA-256 (hex) of the record's stored bytes: this record as written, with `hash` empty.
---@field outcome lazaret.Outcome
---@field previousHash string `hash` of the record before (64 zeros for the first).
---@field reason? string Why, in words (a refusal's reason, a denial's reason, the Network Sidecar's message); agent text for some kinds.
---@field receivedAtMs integer
---@field sequence integer Position in the chain, from 1.
---@field origin string
---@field status integer
---@field suppressed? integer
---@field type 'credentialRejected'

---@class lazaret.CredentialWithheldAuditEvent
---@field decidedAtMs? integer
---@field decidedBy? lazaret.DecisionSource
---@field finishedAtMs? integer
---@field hash string SHA-256 (hex) of the record's stored bytes: this record as written, with `hash` empty.
---@field outcome lazaret.Outcome
---@field previousHash string `hash` of the record before (64 zeros for the first).
---@field reason? string Why, in words (a refusal's reason, a denial's reason, the Network Sidecar's message); agent text for some kinds.
---@field receivedAtMs integer
---@field sequence integer Position in the chain, from 1.
---@field method string
---@field origin string
---@field part lazaret.WithheldPart
---@field status? integer
---@field suppressed? integer
---@field type 'credentialWithheld'

---@class lazaret.CredentialUseAuditEvent
---@field decidedAtMs? integer
---@field decidedBy? lazaret.DecisionSource
---@field finishedAtMs? integer
---@field hash string SHA-256 (hex) of the record's stored bytes: this record as written, with `hash` empty.
---@field outcome lazaret.Outcome
---@field previousHash string `hash` of the record before (64 zeros for the first).
---@field reason? string Why, in words (a refusal's reason, a denial's reason, the Network Sidecar's message); agent text for some kinds.
---@field receivedAtMs integer
---@field sequence integer Position in the chain, from 1.
---@field endpoints lazaret.CredentialUse[]
---@field sessionId string
---@field type 'credentialUse'

---@class lazaret.LegacyAuditEvent : lazaret.EscalationAudit
---@field decidedAtMs? integer
---@field decidedBy? lazaret.DecisionSource
---@field finishedAtMs? integer
---@field hash string SHA-256 (hex) of the record's stored bytes: this record as written, with `hash` empty.
---@field outcome lazaret.Outcome
---@field previousHash string `hash` of the record before (64 zeros for the first).
---@field reason? string Why, in words (a refusal's reason, a denial's reason, the Network Sidecar's message); agent text for some kinds.
---@field receivedAtMs integer
---@field sequence integer Position in the chain, from 1.
---@field type 'legacy'

---@alias lazaret.AuditRecord lazaret.AuditEvent

---@class lazaret.AuditVerification
---@field intact boolean
---@field notes? string[] What else the check found that does not break the chain (a migration from an older layout, a head one append behind after a crash).
---@field problem? string
---@field problemAt? integer The first record that breaks the chain, and why (`problem` alone: the head kept beside the store does not match, or is missing).
---@field records integer

---@class lazaret.AutoApproveListing
---@field entry string The entry as written (`cargo check *`).
---@field id string What `rules/revoke` takes.
---@field source string Where it was written: `FILE:LINE:COLUMN` in the configuration, or the table (`[escalation] auto_approve`, `[profiles.NAME] auto_approve`) when the place is not known.

---@class lazaret.BranchDiff
---@field base? string The host commit the agent branch started from (merge base with the host's `HEAD`); `None` while the branch does not exist on the host.
---@field branch string `lazaret/agent-<profile>`.
---@field files lazaret.FileChange[]
---@field head? string The agent branch's commit on the host.
---@field patch string
---@field uncommitted? lazaret.UncommittedChanges `None` when the sandbox is not running.
---@field warnings lazaret.PathWarning[]

---@class lazaret.CompletedSession
---@field command string[]
---@field endReason string `exited`, `disconnected` or `sandbox-failed`.
---@field endedAtMs integer
---@field exitStatus? integer
---@field pid integer
---@field sessionId string
---@field startedAtMs integer

---@alias lazaret.ContainerState 'starting' | 'running' | 'failed' | 'stopping'

---@class lazaret.CredentialEndpointStatus
---@field bytesReceived integer
---@field bytesSent integer Bytes of request bodies sent on, and of response bodies passed back.
---@field failed integer Requests the sidecar answered itself with an error (refused, too large, the origin unreachable).
---@field header string The header the sidecar sets (lower case), e.g. `x-api-key`.
---@field origin string The API origin, `https://host[:port]`.
---@field port integer The sandbox reaches it at `http://127.0.0.1:<port>`.
---@field rejected integer Of the 4xx answers, 401 and 403: usually a revoked or wrong key.
---@field status1xx integer Requests the origin answered, by status class.
---@field status2xx integer
---@field status3xx integer
---@field status4xx integer
---@field status5xx integer
---@field withheld? integer Answers that carried the credential (counted in their status class too): a head withheld (the client got a 502) or a body cut before it.

---@class lazaret.CredentialUse
---@field bytesReceived integer
---@field bytesSent integer
---@field failed integer
---@field origin string
---@field rejected integer
---@field status1xx integer
---@field status2xx integer
---@field status3xx integer
---@field status4xx integer
---@field status5xx integer
---@field withheld integer

---@alias lazaret.Decision 'approve' | 'deny' | 'edit' | 'abort'

---@alias lazaret.DecisionSource string

---@alias lazaret.DnsRefusal 'malformed' | 'recordType' | 'badCharacters' | 'notAName' | 'notAllowlisted' | 'denied' | 'longLabel' | 'tooManyLabels'

---@class lazaret.DomainStatus
---@field agentBranch? string `lazaret/agent-<profile>`, `None` for a directly mounted workspace.
---@field agentBranchHead? string The agent branch's commit on the host, once it exists there.
---@field apiVersion integer
---@field containerError? string Why the container failed, when `containerState` is `failed`.
---@field containerName string
---@field containerState lazaret.ContainerState
---@field coordinatorPid integer
---@field domainHash string
---@field image string
---@field networkError? string Why the sandbox has no working network now (its Network Sidecar stopped: no name resolves, no policy change takes), while that lasts.
---@field profile string
---@field sessions lazaret.LiveSession[]
---@field startedAtMs integer
---@field workspace string

---@class lazaret.EditorInfo
---@field apiVersion integer The API version this `lazaret` speaks (`API_VERSION`).
---@field controlSocketPattern string `<socketRoot>/<domainHash>/control.sock`.
---@field defaultProfile string The profile `lazaret run` uses without `--profile`.
---@field domains lazaret.RunningDomain[] Every running domain of the user.
---@field folders lazaret.FolderDomain[] The default profile's domain of each `--workspace` folder.
---@field framing string Always `Content-Length` (LSP-style framing).
---@field profiles string[] Every configured profile (the built-in `default` included).
---@field socketRoot string The user's socket directory.
---@field version string The `lazaret` version, e.g. `0.1.0`.

---@alias lazaret.EntryVerdict 'allow' | 'deny'

---@class lazaret.EscalationAudit
---@field clientRequestId? string The id the requesting client chose: a correlation value only, written by the agent.
---@field executedArgv? string[] What ran (differs from the request when edited).
---@field exitStatus? integer
---@field justification? string The agent's words: untrusted.
---@field requestId string Minted by the coordinator for each request (D16).
---@field requestedArgv string[]
---@field sessionId string The session the request claimed; `verified` says whether its signature checked out.
---@field verified boolean

---@class lazaret.ExpiringEntry
---@field entry string
---@field expiresInMs integer
---@field verdict lazaret.EntryVerdict

---@class lazaret.FileChange
---@field additions? integer `None` for binary files.
---@field deletions? integer
---@field path string
---@field status string git's status letter: `A`, `M`, `D`, `R`, `T`, or `??` (untracked).

---@class lazaret.FileContents
---@field base lazaret.FileVersion
---@field baseCommit? string The base commit the diff starts from (`BranchDiff.base`).
---@field head lazaret.FileVersion
---@field headCommit? string The agent branch's commit on the host (`BranchDiff.head`).
---@field path string
---@field working? lazaret.FileVersion The file in the sandbox's `/workspace`, uncommitted changes included. Written by the agent: treat as untrusted. `None` when the sandbox is not running or the workspace is mounted directly.

---@class lazaret.FileVersion
---@field binary boolean NUL bytes or invalid UTF-8: `text` is `None`.
---@field exists boolean Whether the path exists on this side.
---@field size integer Size in bytes (0 when absent).
---@field text? string
---@field truncated boolean `text` holds only the first `MAX_FILE_TEXT` bytes.

---@class lazaret.FolderDomain
---@field controlSocket string
---@field domainHash string
---@field profile string
---@field running boolean Whether a coordinator answers on `controlSocket` now.
---@field workspace string The folder as given, made absolute.

---@alias lazaret.GrantScope lazaret.GrantScopeSession|lazaret.GrantScopeMinutes|lazaret.GrantScopeProfile

---@class lazaret.GrantScopeSession
---@field type 'session'

---@class lazaret.GrantScopeMinutes
---@field minutes integer
---@field type 'minutes'

---@class lazaret.GrantScopeProfile
---@field type 'profile'

---@class lazaret.LearnedAddress
---@field address string
---@field expiresInSeconds integer
---@field names string[]

---@class lazaret.LiveSession
---@field client string Self-declared by the client that registered it (`cli`, an editor name).
---@field command string[]
---@field pid integer
---@field sessionId string
---@field startedAtMs integer

---@alias lazaret.NetworkDecision 'allow' | 'allowEveryPort' | 'deny'

---@class lazaret.NetworkGrant
---@field decidedBy lazaret.DecisionSource
---@field destination string The name, or the address's host network (`10.9.0.7/32`).
---@field everyPort? boolean For an address: the grant covers every protocol and port of it (an `allowEveryPort` answer, or a grant made before grants were scoped).
---@field expiresAtMs? integer When it ends on its own (`minutes` scope).
---@field grantedAtMs integer
---@field hits integer Questions for the destination since it was made (answered under an allow, refused under a deny), as the sidecar's events report them: past its rate limit (20/s, bursts of 50) some go uncounted.
---@field id string What `rules/revoke` takes.
---@field scope lazaret.GrantScope
---@field service? string For an address: the one protocol and port the grant covers (`tcp/8081`); `None` for a name, or for an address when `everyPort`.
---@field verdict lazaret.EntryVerdict

---@class lazaret.NetworkPolicy
---@field allow string[] Allowed CIDRs and DNS names (`github.com`, `*.npmjs.org`).
---@field credentials? lazaret.CredentialEndpointStatus[] The credential endpoints the sidecar serves the sandbox (a profile's `credentials`): where each origin's API is reached, which header the sidecar adds, and what went through it. Never the credential itself.
---@field deny string[] Denied CIDRs and names (holes in wider allows).
---@field expiring? lazaret.ExpiringEntry[] Entries of `allow` and `deny` that end on their own, with the time they have left.
---@field holdMs? integer How long a question for a name on no allow entry is held for a grant, in milliseconds (`[network] ask`); 0: refused at once.
---@field learned lazaret.LearnedAddress[] Addresses reachable now because an allowed name resolved to them.
---@field privateAnswers lazaret.PrivateAnswers Whether a name's answer may open internal addresses no CIDR entry allows: `refuse` (the default) or `allow` (`[network] private_answers`).
---@field rules integer How many kernel rules enforce it.
---@field upstreams string[] The resolvers the sidecar forwards allowed questions to.

---@alias lazaret.Outcome 'rejected' | 'auto' | 'approved' | 'edited' | 'denied' | 'aborted' | 'timedOut' | 'networkAllowed' | 'networkDenied' | 'networkReloaded' | 'dnsRefused' | 'dnsAnswerRefused' | 'networkAsked' | 'networkGranted' | 'networkRefused' | 'networkExpired' | 'networkRevoked' | 'networkQueueFull' | 'credentialRejected' | 'credentialUse' | 'credentialWithheld'

---@class lazaret.PathWarning
---@field path string
---@field reason string

---@class lazaret.PendingEscalation
---@field argv string[] Exactly what would run (the program is resolved on the host).
---@field cwd string The host directory the command would run in.
---@field display string The argv quoted for display only.
---@field domainHash string
---@field expiresAtMs integer When the request is denied if nobody answers.
---@field justification? string The agent's words: untrusted.
---@field profile string
---@field reasons string[] Why this was not auto-approved.
---@field receivedAtMs integer
---@field requestId string Minted by the coordinator, random per request: never the agent's choice (DECISIONS D16). Clients key a request by (domain, id).
---@field riskNotes string[] Warnings: commands that run project code or take command-running options.
---@field sessionId string The verified session the request came from.

---@alias lazaret.PendingItem lazaret.PendingItemCommand|lazaret.PendingItemNetwork

---@class lazaret.PendingItemCommand : lazaret.PendingEscalation
---@field kind 'command'

---@class lazaret.PendingItemNetwork : lazaret.PendingNetworkRequest
---@field kind 'network'

---@class lazaret.PendingNetworkRequest
---@field destination string The DNS name asked for (lower case, letters, digits, hyphens, dots), or the address connected to, as its host network (`10.9.0.7/32`, `fd00::7/128`). Approving it allows exactly this entry.
---@field domainHash string
---@field expiresAtMs integer When the request goes away if nobody answers (the destination stays refused).
---@field profile string
---@field receivedAtMs integer
---@field recordTypes string[] The record types asked for (`A`, `AAAA`); for an address, what was tried (`tcp/8080`, `udp/53`, or an IP protocol number), the same as `service`.
---@field repeats integer Questions for it after the first, while it waits.
---@field requestId string Minted by the coordinator, random per request.
---@field service? string For an address: the protocol and port the connection tried (`tcp/8080`, `udp/53`, or an IP protocol number). `allow` opens exactly this service of the address; `allowEveryPort` is the wider answer; `deny` refuses this service. Each service of an address is a request of its own. `None` for a name.
---@field sessionIds string[] The sessions live when it was first asked. The sandbox's network is shared by all its sessions, so which one asked cannot be told.

---@alias lazaret.PolicyAction 'allow' | 'deny' | 'reload'

---@alias lazaret.PrivateAnswers 'refuse' | 'allow'

---@class lazaret.RegisterResult
---@field containerName string
---@field defaultCommand string[] The sandbox's default command (the image's CMD), for sessions that name none.
---@field domainHash string
---@field sessionCount integer Live sessions after this registration.
---@field target lazaret.SessionTarget How the session's command joins the sandbox: the client runs this and never works out the backend from the profile.

---@class lazaret.Rules
---@field autoApprove lazaret.AutoApproveListing[]
---@field network lazaret.NetworkGrant[]

---@class lazaret.RunningDomain
---@field agentBranch? string `lazaret/agent-<profile>`, `None` for a directly mounted workspace.
---@field agentBranchHead? string The agent branch's commit on the host, once it exists there.
---@field apiVersion integer
---@field containerError? string Why the container failed, when `containerState` is `failed`.
---@field containerName string
---@field containerState lazaret.ContainerState
---@field controlSocket string
---@field coordinatorPid integer
---@field domainHash string
---@field image string
---@field networkError? string Why the sandbox has no working network now (its Network Sidecar stopped: no name resolves, no policy change takes), while that lasts.
---@field profile string
---@field sessions lazaret.LiveSession[]
---@field startedAtMs integer
---@field workspace string

---@alias lazaret.Event lazaret.SessionRegisteredEvent|lazaret.SessionEndedEvent|lazaret.ContainerStateEvent|lazaret.ShuttingDownEvent|lazaret.BranchUpdatedEvent|lazaret.BranchRejectedEvent|lazaret.EscalationPendingEvent|lazaret.EscalationResolvedEvent|lazaret.EscalationFinishedEvent|lazaret.NetworkChangedEvent|lazaret.NetworkDnsRefusedEvent|lazaret.NetworkDnsAnswerRefusedEvent|lazaret.NetworkFailedEvent|lazaret.NetworkRestoredEvent|lazaret.NetworkDnsResolvedEvent|lazaret.NetworkRequestPendingEvent|lazaret.NetworkRequestResolvedEvent|lazaret.RulesChangedEvent|lazaret.EventsLaggedEvent

---@class lazaret.SessionRegisteredEvent
---@field seq integer
---@field kind 'sessionRegistered'
---@field pid integer
---@field sessionCount integer
---@field sessionId string

---@class lazaret.SessionEndedEvent
---@field seq integer
---@field endReason string
---@field exitStatus? integer
---@field kind 'sessionEnded'
---@field sessionCount integer
---@field sessionId string

---@class lazaret.ContainerStateEvent
---@field seq integer
---@field kind 'containerState'
---@field message? string
---@field state lazaret.ContainerState

---@class lazaret.ShuttingDownEvent
---@field seq integer
---@field kind 'shuttingDown'
---@field reason string

---@class lazaret.BranchUpdatedEvent
---@field seq integer
---@field branch string
---@field commit string
---@field kind 'branchUpdated'
---@field previous? string

---@class lazaret.BranchRejectedEvent
---@field seq integer
---@field branch string
---@field kind 'branchRejected'
---@field reason string

---@class lazaret.EscalationPendingEvent
---@field seq integer
---@field escalation lazaret.PendingEscalation
---@field kind 'escalationPending'

---@class lazaret.EscalationResolvedEvent
---@field seq integer
---@field argv? string[]
---@field decidedBy lazaret.DecisionSource
---@field kind 'escalationResolved'
---@field outcome lazaret.Outcome
---@field requestId string

---@class lazaret.EscalationFinishedEvent
---@field seq integer
---@field exitStatus? integer
---@field kind 'escalationFinished'
---@field requestId string

---@class lazaret.NetworkChangedEvent
---@field seq integer
---@field action string
---@field kind 'networkChanged'
---@field rule string

---@class lazaret.NetworkDnsRefusedEvent
---@field seq integer
---@field kind 'networkDnsRefused'
---@field message string
---@field name string
---@field reason lazaret.DnsRefusal
---@field recordType string
---@field suppressed? integer

---@class lazaret.NetworkDnsAnswerRefusedEvent
---@field seq integer
---@field addresses string[]
---@field kind 'networkDnsAnswerRefused'
---@field message string
---@field name string
---@field reason lazaret.AnswerRefusal
---@field recordType string
---@field suppressed? integer

---@class lazaret.NetworkFailedEvent
---@field seq integer
---@field kind 'networkFailed'
---@field message string
---@field restarting boolean

---@class lazaret.NetworkRestoredEvent
---@field seq integer
---@field kind 'networkRestored'
---@field message string

---@class lazaret.NetworkDnsResolvedEvent
---@field seq integer
---@field addresses string[]
---@field kind 'networkDnsResolved'
---@field name string
---@field recordType string

---@class lazaret.NetworkRequestPendingEvent
---@field seq integer
---@field kind 'networkRequestPending'
---@field request lazaret.PendingNetworkRequest

---@class lazaret.NetworkRequestResolvedEvent
---@field seq integer
---@field decidedBy lazaret.DecisionSource
---@field kind 'networkRequestResolved'
---@field outcome lazaret.Outcome
---@field requestId string
---@field scope? lazaret.GrantScope

---@class lazaret.RulesChangedEvent
---@field seq integer
---@field kind 'rulesChanged'

---@class lazaret.EventsLaggedEvent
---@field seq integer
---@field dropped integer
---@field kind 'eventsLagged'

---@alias lazaret.SequencedEvent lazaret.Event

---@alias lazaret.SessionTarget lazaret.SessionTargetLocal|lazaret.SessionTargetPod

---@class lazaret.SessionTargetLocal
---@field containerName string
---@field type 'local'

---@class lazaret.SessionTargetPod
---@field context? string
---@field kubeconfig string
---@field namespace string
---@field pod string
---@field type 'pod'

---@class lazaret.StateChange
---@field dir string The persistent directory (container path).
---@field kind lazaret.StateChangeKind
---@field path string The changed path (container path; the agent chose it).

---@alias lazaret.StateChangeKind 'added' | 'modified' | 'modifiedConflict' | 'deleted' | 'deletedConflict'

---@class lazaret.StatusReport
---@field domainHash string
---@field running boolean Whether a coordinator answers for the domain.
---@field status? lazaret.DomainStatus `domain/status`, when running.

---@class lazaret.UncommittedChanges
---@field files lazaret.FileChange[]
---@field patch string

---@alias lazaret.WithheldPart 'head' | 'body'

local M = {}

--- The API version these declarations describe.
M.API_VERSION = 2

--- Method names by their Rust name.
M.methods = {
  session_register = 'session/register',
  session_unregister = 'session/unregister',
  session_list = 'session/list',
  domain_status = 'domain/status',
  domain_shutdown = 'domain/shutdown',
  network_show = 'network/show',
  network_allow = 'network/allow',
  network_deny = 'network/deny',
  network_reload = 'network/reload',
  escalation_list = 'escalation/list',
  escalation_respond = 'escalation/respond',
  pending_list = 'pending/list',
  network_respond = 'network/respond',
  rules_list = 'rules/list',
  rules_revoke = 'rules/revoke',
  audit_list = 'audit/list',
  audit_verify = 'audit/verify',
  branch_diff = 'branch/diff',
  branch_file_contents = 'branch/fileContents',
  state_diff = 'state/diff',
}

--- The coordinator's application error codes (`err.code`; docs/rpc.md).
M.error_code = {
  --- The domain is tearing down; start a new session (the CLI retries).
  SHUTTING_DOWN = 1001,
  --- The sandbox container could not be started; `message` says why.
  SANDBOX_FAILED = 1002,
  --- The session id is unknown or belongs to another connection.
  UNKNOWN_SESSION = 1003,
  --- The request was well-formed but its values are not acceptable.
  INVALID_VALUE = 1004,
  --- The state store failed.
  STORE_FAILED = 1005,
  --- A git operation failed; `message` has git's reason.
  GIT_FAILED = 1006,
  --- The escalation is unknown or was already answered.
  ESCALATION_NOT_PENDING = 1007,
  --- The domain has no Network Sidecar (empty allowlist) or it refused.
  NETWORK_FAILED = 1008,
  --- The sandbox is not running (for methods that read inside it).
  SANDBOX_NOT_RUNNING = 1009,
  --- The network request is unknown or was already answered.
  NETWORK_REQUEST_NOT_PENDING = 1010,
  --- The rule or grant is unknown (revoked already, or expired).
  RULE_NOT_FOUND = 1011,
}

--- The event subscription.
M.subscription = {
  subscribe = 'events/subscribe',
  notification = 'events/event',
  unsubscribe = 'events/unsubscribe',
}

return M
