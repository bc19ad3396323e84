// Every domain the extension shows: the running ones under the socket root and
// the domain of each workspace folder (running or not). One connection per
// coordinator with one event subscription; reconnects when a coordinator comes
// back on the same path; resyncs after `eventsLagged` or a gap. Node only.
import * as fs from "node:fs";
import { CoordinatorClient, Log, RpcError, TIMED_OUT } from "./client";
import { apiMismatch, discover, Discovery, isSocket, ProblemError, Runner, scanSockets } from "./discovery";
import {
  AuditRecord,
  BranchDiff,
  Decision,
  DomainStatus,
  ERROR_CODE,
  FolderDomain,
  GrantScope,
  METHODS,
  NetworkDecision,
  NetworkPolicy,
  PendingEscalation,
  PendingNetworkRequest,
  Rules,
  SequencedEvent,
} from "./protocol";
import { EscalationItem, NetworkItem, NetworkQueue, PendingQueue } from "./queue";
import { Sequencer } from "./sequencer";

export interface DnsRefusal {
  name: string;
  recordType: string;
  reason: string;
  atMs: number;
}

export interface DomainState {
  /** The control socket: the domain's key. */
  socket: string;
  folder?: FolderDomain;
  client?: CoordinatorClient;
  connecting: boolean;
  status?: DomainStatus;
  network?: NetworkPolicy;
  networkError?: string;
  branch?: BranchDiff;
  branchError?: string;
  /** Why the recent audit records could not be read (the last ones read stay). */
  auditError?: string;
  /** Commits of the agent branch ahead of its base, and its last commit (host git). */
  branchInfo?: { ahead: number; last: string };
  /** The commits of the last review opened in this window: a merge takes that head, or nothing. */
  reviewed?: { branch: string; base: string | null; head: string };
  audit?: AuditRecord[];
  /** Auto-approve rules, network grants and remembered refusals (`rules/list`). */
  rules?: Rules;
  /** Why `rules/list` failed (the last rules read stay). */
  rulesError?: string;
  dnsRefusals: DnsRefusal[];
  seq: Sequencer;
  resyncs: number;
  lastError?: string;
  /**
   * Why this domain's pending requests are not known: its coordinator did not
   * answer, or `pending/list` failed. Shown as that failure, never as an
   * empty queue; cleared by the next list that succeeds.
   */
  problem?: string;
  /** The fix of `problem` when it is not the usual "ask again" (a coordinator of another API version). */
  problemFix?: string;
  /** No new attempt before this time (ms) after a failure. */
  retryAt?: number;
  resyncing?: boolean;
}

export type Change = "pending" | "domains" | "details";

/** A failure to ask a domain, already recorded as its `problem`. */
class AskFailed extends Error {}

const RECENT = 10;
/** How long the queue's own calls (subscribe, list, status) may take before the coordinator counts as not answering. */
export const ASK_TIMEOUT_MS = 8000;
/** Wait between attempts at a domain that failed. */
const RETRY_MS = 3000;

/** What a failed discovery means to the user, and the fix. */
export function discoveryProblem(error: string, binary: string): { message: string; fix: string } {
  const missing = /ENOENT|EACCES|not found|No such file/i.test(error);
  return {
    message: missing ? `cannot run the lazaret binary \`${binary}\` (${error})` : `\`${binary} editor-info\` failed (${error})`,
    fix: missing
      ? "Set the `lazaret.path` setting to the lazaret binary (an absolute path, or a name on PATH; in a remote window, in the Remote settings), then run Lazaret: Refresh."
      : "Check `lazaret editor-info --json` in a terminal (and the `lazaret.path` setting), then run Lazaret: Refresh.",
  };
}

export interface ManagerOptions {
  run: Runner;
  folders: () => string[];
  log: Log;
  pollMs?: number;
  /** The lazaret binary as configured (for messages). */
  binary?: () => string;
  /** Overrides ASK_TIMEOUT_MS (tests). */
  askTimeoutMs?: number;
  /** `git ARGS` in a host directory (commits ahead, last commit). */
  git?: Runner;
}

export class DomainManager {
  readonly queue = new PendingQueue();
  /** Pending network requests (`[network] ask`): as critical as the escalations, counted with them. */
  readonly netQueue = new NetworkQueue();
  readonly domains = new Map<string, DomainState>();
  info?: Discovery;
  discoveryError?: string;
  /** The fix of `discoveryError` when discovery knew it (a lazaret of another API version). */
  discoveryFix?: string;
  /** Whether a discovery has finished (before it, nothing was asked yet). */
  discovered = false;
  private listeners: Array<(change: Change, detail?: unknown) => void> = [];
  private newRequestListeners: Array<(item: EscalationItem) => void> = [];
  private newNetworkListeners: Array<(item: NetworkItem) => void> = [];
  private timer?: NodeJS.Timeout;
  private watcher?: fs.FSWatcher;
  private disposed = false;

  constructor(private readonly opts: ManagerOptions) {}

  private get askTimeout(): number {
    return this.opts.askTimeoutMs ?? ASK_TIMEOUT_MS;
  }

  onChange(listener: (change: Change) => void): void {
    this.listeners.push(listener);
  }

  /** A request this window has not seen before (from an event or a list). */
  onNewRequest(listener: (item: EscalationItem) => void): void {
    this.newRequestListeners.push(listener);
  }

  /** A network request this window has not seen before (from an event or a list). */
  onNewNetworkRequest(listener: (item: NetworkItem) => void): void {
    this.newNetworkListeners.push(listener);
  }

  /** Everything pending across domains: escalations and network requests. */
  pendingCount(domain?: string): number {
    return this.queue.list(domain).length + this.netQueue.list(domain).length;
  }

  private emit(change: Change): void {
    for (const l of this.listeners) l(change);
  }

  private announce(items: EscalationItem[]): void {
    for (const item of items) for (const l of this.newRequestListeners) l(item);
  }

  private announceNetwork(items: NetworkItem[]): void {
    for (const item of items) for (const l of this.newNetworkListeners) l(item);
  }

  /**
   * Why this window cannot say what is pending, with the fix: a failed
   * discovery, a coordinator that does not answer, a failed list. Empty when
   * every known domain was asked and answered.
   */
  problems(): Array<{ socket?: string; message: string; fix: string }> {
    const out: Array<{ socket?: string; message: string; fix: string }> = [];
    if (this.discoveryError)
      out.push(this.discoveryFix ? { message: this.discoveryError, fix: this.discoveryFix } : discoveryProblem(this.discoveryError, this.binary));
    for (const d of this.domains.values()) {
      if (d.problem)
        out.push({
          socket: d.socket,
          message: d.problem,
          fix: d.problemFix ?? "Check it with `lazaret pending` in a terminal; Lazaret: Refresh asks again (it retries by itself).",
        });
    }
    return out;
  }

  private get binary(): string {
    return this.opts.binary?.() ?? "lazaret";
  }

  /** Discovers the domains, connects, then keeps scanning the socket root. */
  async start(): Promise<void> {
    await this.rediscover();
    const poll = () => {
      if (this.disposed) return;
      this.scan();
      this.timer = setTimeout(poll, this.opts.pollMs ?? 500);
    };
    poll();
  }

  /** Runs `lazaret editor-info` again (folders changed, settings changed). */
  async rediscover(): Promise<void> {
    try {
      this.info = await discover(this.opts.run, this.opts.folders(), this.binary);
      this.discoveryError = undefined;
      this.discoveryFix = undefined;
      this.opts.log("info", `discovered: socket root ${this.info.socketRoot}, ${this.info.domains.length} running domain(s), ${this.info.folders.length} folder domain(s)`);
    } catch (err) {
      this.discoveryError = (err as Error).message;
      this.discoveryFix = err instanceof ProblemError ? err.fix : undefined;
      this.discovered = true;
      this.opts.log("error", this.discoveryError);
      this.emit("pending");
      this.emit("domains");
      return;
    }
    this.discovered = true;
    const folderSockets = new Set(this.info.folders.map((f) => f.controlSocket));
    for (const [key, state] of this.domains) {
      if (state.folder && !folderSockets.has(key)) {
        state.folder = undefined;
        if (!state.client) this.domains.delete(key);
      }
    }
    for (const folder of this.info.folders) {
      const state = this.ensure(folder.controlSocket);
      state.folder = folder;
    }
    for (const d of this.info.domains) this.ensure(d.controlSocket);
    this.watchRoot();
    this.emit("pending");
    this.emit("domains");
    this.scan();
  }

  private watchRoot(): void {
    this.watcher?.close();
    this.watcher = undefined;
    if (!this.info) return;
    try {
      this.watcher = fs.watch(this.info.socketRoot, () => setTimeout(() => this.scan(), 50));
      this.watcher.on("error", () => undefined);
    } catch {
      // The root does not exist yet: the poll finds it.
    }
  }

  private ensure(socket: string): DomainState {
    let state = this.domains.get(socket);
    if (!state) {
      state = { socket, connecting: false, dnsRefusals: [], seq: new Sequencer(), resyncs: 0 };
      this.domains.set(socket, state);
    }
    return state;
  }

  /** Connects to every control socket that is not connected yet. */
  scan(): void {
    if (!this.info || this.disposed) return;
    if (!this.watcher) this.watchRoot();
    const live = new Set(scanSockets(this.info.socketRoot));
    for (const state of this.domains.values()) if (state.folder && isSocket(state.socket)) live.add(state.socket);
    // A domain that failed and whose socket is gone: its coordinator ended, nothing waits there.
    for (const [socket, state] of this.domains) {
      if (!live.has(socket) && !state.client && !state.connecting && state.problem) {
        state.problem = undefined;
        state.problemFix = undefined;
        if (!state.folder) this.domains.delete(socket);
        this.emit("pending");
        this.emit("domains");
      }
    }
    const now = Date.now();
    for (const socket of live) {
      const state = this.ensure(socket);
      if ((state.retryAt ?? 0) > now) continue;
      if (!state.client && !state.connecting) void this.connect(state);
      else if (state.client && state.problem && !state.resyncing) void this.resync(state).catch(() => undefined);
    }
  }

  /** Records why a domain could not be asked, and waits a little before the next attempt. */
  private fail(state: DomainState, message: string, fix?: string): void {
    // The same failure again (a retry) is not logged again.
    if (state.problem !== message) this.opts.log("warn", `${state.socket}: ${message}`);
    state.problem = message;
    state.problemFix = fix;
    state.retryAt = Date.now() + RETRY_MS;
    this.emit("pending");
    this.emit("domains");
  }

  private async connect(state: DomainState): Promise<void> {
    state.connecting = true;
    let client: CoordinatorClient;
    try {
      client = await CoordinatorClient.connect(state.socket, this.opts.log);
    } catch (err) {
      state.connecting = false;
      const e = err as NodeJS.ErrnoException;
      state.lastError = e.message;
      // Nobody listens there (a socket left by a coordinator that ended): no request can wait on it.
      if (e.code === "ECONNREFUSED" || e.code === "ENOENT") return;
      this.fail(state, `the coordinator does not answer (${e.message})`);
      return;
    }
    if (this.disposed) return client.dispose();
    state.client = client;
    state.seq.reset();
    client.onEvent((event) => this.onEvent(state, event));
    client.onClose(() => this.onClosed(state, client));
    try {
      // The API version first: a coordinator of another one is not subscribed
      // to nor asked for its requests (answering a protocol this extension
      // does not speak is unsafe), only listed with the problem.
      const status = await client.request(METHODS.domainStatus, {}, this.askTimeout).catch((err: RpcError) => {
        throw new Error(err.code === TIMED_OUT ? `the coordinator does not answer (${err.message})` : `${METHODS.domainStatus} failed: ${err.message}`);
      });
      const mismatch = apiMismatch("coordinator", "this domain's coordinator", (status as Partial<DomainStatus> | null)?.apiVersion);
      if (mismatch) {
        this.fail(state, mismatch.message, mismatch.fix);
        throw new AskFailed(mismatch.message);
      }
      await client.subscribe(this.askTimeout).catch((err: Error) => {
        throw new Error(`the coordinator does not answer (${err.message})`);
      });
      await this.resync(state);
      this.opts.log("info", `connected to ${state.socket} (${state.status?.profile} ${state.status?.workspace})`);
    } catch (err) {
      if (!(err instanceof AskFailed)) this.fail(state, (err as Error).message);
      client.dispose();
      this.onClosed(state, client);
    } finally {
      state.connecting = false;
    }
    void this.refreshDetails(state);
  }

  private onClosed(state: DomainState, client: CoordinatorClient): void {
    if (state.client !== client) return;
    state.client = undefined;
    state.status = undefined;
    state.network = undefined;
    state.branch = undefined;
    this.queue.dropDomain(state.socket);
    this.netQueue.dropDomain(state.socket);
    state.rules = undefined;
    // A domain that failed stays, to show the failure (until its socket goes away).
    if (!state.folder && !state.problem) this.domains.delete(state.socket);
    this.emit("pending");
    this.emit("domains");
  }

  /**
   * Lists the queue and the status again (on connect, after lost events, on
   * Refresh). A list that fails or does not come in time leaves the domain
   * with a `problem` (shown as such) and rejects.
   */
  async resync(state: DomainState): Promise<void> {
    const client = state.client;
    if (!client) return;
    state.resyncs++;
    state.resyncing = true;
    try {
      // Everything waiting for a human: host commands and network destinations.
      const [list, status] = await Promise.all([
        client.request(METHODS.pendingList, {}, this.askTimeout),
        client.request(METHODS.domainStatus, {}, this.askTimeout),
      ]);
      if (!Array.isArray(list)) throw new Error(`${METHODS.pendingList} answered with no list`);
      const commands: PendingEscalation[] = [];
      const network: PendingNetworkRequest[] = [];
      for (const item of list) {
        if (item?.kind === "command") commands.push(item);
        else if (item?.kind === "network") network.push(item);
      }
      state.status = status;
      state.problem = undefined;
      state.problemFix = undefined;
      state.retryAt = undefined;
      this.announce(this.queue.replace(state.socket, commands));
      this.announceNetwork(this.netQueue.replace(state.socket, network));
    } catch (err) {
      const e = err as RpcError;
      const problem = e.code === TIMED_OUT ? `the coordinator does not answer (${e.message})` : `${e.method ?? METHODS.pendingList} failed: ${e.message}`;
      this.fail(state, problem);
      throw new AskFailed(problem);
    } finally {
      state.resyncing = false;
      this.emit("pending");
      this.emit("domains");
    }
  }

  /** Network policy, agent branch and recent audit records (not on the approval path). */
  async refreshDetails(state: DomainState, which: Array<"network" | "branch" | "audit" | "rules"> = ["network", "branch", "audit", "rules"]): Promise<void> {
    const client = state.client;
    if (!client) return;
    const jobs: Promise<void>[] = [];
    if (which.includes("network"))
      jobs.push(
        client.request(METHODS.networkShow, {}).then(
          (n) => {
            state.network = n;
            state.networkError = undefined;
          },
          (e: RpcError) => {
            state.network = undefined;
            state.networkError = e.code === ERROR_CODE.NETWORK_FAILED ? "no network (no sidecar: empty allowlist)" : e.message;
          },
        ),
      );
    if (which.includes("branch"))
      jobs.push(
        client.request(METHODS.branchDiff, { patch: false }).then(
          async (b) => {
            state.branch = b;
            state.branchError = undefined;
            state.branchInfo = undefined;
            const ws = state.status?.workspace;
            if (this.opts.git && ws && b.base && b.head) {
              const [count, last] = await Promise.all([
                this.opts.git(["-C", ws, "rev-list", "--count", `${b.base}..${b.head}`]),
                this.opts.git(["-C", ws, "log", "-1", "--format=%h %s", b.head]),
              ]);
              if (count.code === 0 && last.code === 0) state.branchInfo = { ahead: Number(count.stdout.trim()), last: last.stdout.trim() };
            }
          },
          (e: RpcError) => {
            state.branchError = e.message;
          },
        ),
      );
    if (which.includes("audit"))
      jobs.push(
        client.request(METHODS.auditList, { limit: RECENT }).then(
          (records) => {
            state.audit = records;
            state.auditError = undefined;
          },
          (e: RpcError) => {
            state.auditError = e.message;
            this.opts.log("warn", `${state.socket}: ${METHODS.auditList} failed: ${e.message}`);
          },
        ),
      );
    if (which.includes("rules"))
      jobs.push(
        client.request(METHODS.rulesList, {}).then(
          (rules) => {
            state.rules = rules;
            state.rulesError = undefined;
          },
          (e: RpcError) => {
            state.rulesError = e.message;
            this.opts.log("warn", `${state.socket}: ${METHODS.rulesList} failed: ${e.message}`);
          },
        ),
      );
    await Promise.all(jobs);
    this.emit("details");
  }

  private onEvent(state: DomainState, event: SequencedEvent): void {
    const verdict = state.seq.accept(event);
    if (verdict.resync) {
      this.opts.log("warn", `${state.socket}: events lost (${event.kind === "eventsLagged" ? `eventsLagged, ${event.dropped} dropped` : `gap before seq ${event.seq}`}): resync`);
      void this.resync(state).then(() => this.refreshDetails(state), () => undefined);
    }
    if (!verdict.apply) return;
    switch (event.kind) {
      case "escalationPending": {
        const item = this.queue.add(state.socket, event.escalation);
        if (item) this.announce([item]);
        this.emit("pending");
        break;
      }
      case "escalationResolved":
        this.queue.resolve(state.socket, event.requestId);
        this.emit("pending");
        break;
      case "networkRequestPending": {
        // Sent again (same id) when more questions came in: an upsert.
        const item = this.netQueue.add(state.socket, event.request);
        if (item) this.announceNetwork([item]);
        this.emit("pending");
        break;
      }
      case "networkRequestResolved":
        this.netQueue.resolve(state.socket, event.requestId);
        this.emit("pending");
        void this.refreshDetails(state, ["audit"]);
        break;
      case "rulesChanged":
        void this.refreshDetails(state, ["rules", "network"]);
        break;
      case "escalationFinished":
        void this.refreshDetails(state, ["audit"]);
        break;
      case "sessionRegistered":
      case "sessionEnded":
      case "containerState":
        void this.refreshStatus(state);
        break;
      case "shuttingDown":
        if (state.status) state.status = { ...state.status, containerState: "stopping" };
        this.emit("domains");
        break;
      case "branchUpdated":
      case "branchRejected":
        void this.refreshDetails(state, ["branch"]);
        break;
      case "networkChanged":
        void this.refreshDetails(state, ["network", "audit"]);
        break;
      case "networkFailed":
      case "networkRestored":
        // `domain/status` carries `networkError` while the sidecar is down.
        void this.refreshStatus(state);
        void this.refreshDetails(state, ["network"]);
        break;
      case "networkDnsRefused":
      case "networkDnsAnswerRefused": {
        // A refused answer names the addresses that were not opened.
        const reason = event.kind === "networkDnsAnswerRefused" ? `${event.reason} ${event.addresses.join(" ")}` : event.reason;
        state.dnsRefusals.unshift({ name: event.name, recordType: event.recordType, reason, atMs: Date.now() });
        state.dnsRefusals.length = Math.min(state.dnsRefusals.length, RECENT);
        this.emit("details");
        break;
      }
      case "networkDnsResolved":
        void this.refreshDetails(state, ["network"]);
        break;
      default:
        break;
    }
  }

  private async refreshStatus(state: DomainState): Promise<void> {
    try {
      if (state.client) state.status = await state.client.request(METHODS.domainStatus, {});
      this.emit("domains");
    } catch {
      /* the close handler takes over */
    }
  }

  /**
   * Answers the request `requestId` of `domain` as client `vscode`. Returns
   * "answered", or "already-answered" when another client was first (1007);
   * either way the request leaves the queue. Any other failure (the
   * coordinator refused the answer, e.g. 1004 for an empty edit, or the
   * connection broke) rejects and leaves the request pending: it was not
   * answered, so it stays listed (the coordinator's `escalationResolved`
   * event removes it if it was).
   */
  async respond(domain: string, requestId: string, decision: Decision, extra: { argv?: string[]; reason?: string } = {}): Promise<"answered" | "already-answered"> {
    if (!this.queue.has(domain, requestId)) return "already-answered";
    const client = this.domains.get(domain)?.client;
    if (!client) throw new Error("the domain's coordinator is not connected; the request was not answered");
    try {
      await client.request(METHODS.escalationRespond, { requestId, decision, client: "vscode", ...extra });
    } catch (err) {
      if (err instanceof RpcError && err.code === ERROR_CODE.ESCALATION_NOT_PENDING) {
        this.queue.resolve(domain, requestId);
        this.emit("pending");
        return "already-answered";
      }
      throw err;
    }
    this.queue.resolve(domain, requestId);
    this.emit("pending");
    return "answered";
  }

  /**
   * Answers the network request `requestId` of `domain` for `scope` as client
   * `vscode`. As `respond`: "already-answered" when it was answered elsewhere
   * or expired (1010); any other failure rejects and leaves it pending.
   */
  async respondNetwork(domain: string, requestId: string, decision: NetworkDecision, scope: GrantScope): Promise<"answered" | "already-answered"> {
    if (!this.netQueue.has(domain, requestId)) return "already-answered";
    const client = this.domains.get(domain)?.client;
    if (!client) throw new Error("the domain's coordinator is not connected; the request was not answered");
    try {
      await client.request(METHODS.networkRespond, { requestId, decision, scope, client: "vscode" });
    } catch (err) {
      if (err instanceof RpcError && err.code === ERROR_CODE.NETWORK_REQUEST_NOT_PENDING) {
        this.netQueue.resolve(domain, requestId);
        this.emit("pending");
        return "already-answered";
      }
      throw err;
    }
    this.netQueue.resolve(domain, requestId);
    this.emit("pending");
    return "answered";
  }

  /**
   * Revokes the rule or grant `id` of `domain` as client `vscode`: "revoked",
   * or "gone" when it was revoked already or expired (1011). The rules are
   * read again either way; any other failure rejects.
   */
  async revokeRule(domain: string, id: string): Promise<"revoked" | "gone"> {
    const state = this.domains.get(domain);
    const client = state?.client;
    if (!state || !client) throw new Error("the domain's coordinator is not connected; nothing was revoked");
    let outcome: "revoked" | "gone" = "revoked";
    try {
      await client.request(METHODS.rulesRevoke, { id, client: "vscode" });
    } catch (err) {
      if (!(err instanceof RpcError && err.code === ERROR_CODE.RULE_NOT_FOUND)) throw err;
      outcome = "gone";
    }
    await this.refreshDetails(state, ["rules", "network"]);
    return outcome;
  }

  /** Connected domains (with a status). */
  connected(): DomainState[] {
    return [...this.domains.values()].filter((d) => d.client && d.status);
  }

  /** The connected domain whose workspace is `dir`, or the only one. */
  domainFor(dir?: string): DomainState | undefined {
    const all = this.connected();
    return all.find((d) => d.status?.workspace === dir) ?? (all.length === 1 ? all[0] : undefined);
  }

  dispose(): void {
    this.disposed = true;
    clearTimeout(this.timer);
    this.watcher?.close();
    for (const d of this.domains.values()) d.client?.dispose();
  }
}

