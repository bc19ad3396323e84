// A fake Session Coordinator for the unit tests: vscode-jsonrpc over a real
// Unix socket, the method names from the generated protocol.
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { createMessageConnection, MessageConnection, ResponseError, StreamMessageReader, StreamMessageWriter } from "vscode-jsonrpc/node";
import { API_VERSION, AuditRecord, DomainStatus, ERROR_CODE, METHODS, PendingEscalation, PendingItem, PendingNetworkRequest, Rules, SUBSCRIPTION } from "../../src/protocol";

export function tempDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), "lzvs-"));
}

export class FakeCoordinator {
  server?: net.Server;
  connections: MessageConnection[] = [];
  sockets: net.Socket[] = [];
  pending: PendingEscalation[] = [];
  /** Pending network requests (`pending/list` lists them after the commands). */
  network: PendingNetworkRequest[] = [];
  rules: Rules = { autoApprove: [], network: [] };
  responses: unknown[] = [];
  /** `network/respond` and `rules/revoke` params, in order. */
  netResponses: any[] = [];
  revokes: any[] = [];
  /** `network/respond` fails with this error (a coordinator that refuses the answer). */
  netRespondError?: ResponseError<unknown>;
  calls: string[] = [];
  seq = 0;
  /** `escalation/list` fails with this error (a coordinator that cannot list). */
  listError?: ResponseError<unknown>;
  /** Accepts connections and never answers anything (a hung coordinator). */
  silent = false;
  /** `domain/status`'s `networkError` (the Network Sidecar stopped). */
  networkError?: string;
  /** `domain/status`'s `apiVersion` (another build's coordinator when not ours). */
  apiVersion: number = API_VERSION;
  constructor(readonly socket: string, readonly hash = "abcdef012345") {}

  status(): DomainStatus {
    return { apiVersion: this.apiVersion, domainHash: this.hash, profile: "default", workspace: "/w", image: "img", containerName: "c", containerState: "running", coordinatorPid: 1, startedAtMs: 0, sessions: [], ...(this.networkError ? { networkError: this.networkError } : {}) };
  }

  listen(): Promise<void> {
    fs.mkdirSync(path.dirname(this.socket), { recursive: true });
    this.server = net.createServer((sock) => {
      const c = createMessageConnection(new StreamMessageReader(sock), new StreamMessageWriter(sock));
      const handle = (method: string, fn: (p: any) => unknown) =>
        c.onRequest(method, (p: any) => {
          this.calls.push(method);
          return this.silent ? new Promise(() => undefined) : fn(p);
        });
      handle(SUBSCRIPTION.subscribe, () => "sub1");
      handle(METHODS.escalationList, () => this.listError ?? this.pending);
      handle(METHODS.pendingList, (): PendingItem[] | ResponseError<unknown> => this.listError ?? [...this.pending.map((e) => ({ kind: "command" as const, ...e })), ...this.network.map((r) => ({ kind: "network" as const, ...r }))]);
      handle(METHODS.networkRespond, (p: any) => {
        this.netResponses.push(p);
        if (this.netRespondError) return this.netRespondError;
        const i = this.network.findIndex((r) => r.requestId === p.requestId);
        if (i < 0) return new ResponseError(ERROR_CODE.NETWORK_REQUEST_NOT_PENDING, "not pending");
        this.network.splice(i, 1);
        return true;
      });
      handle(METHODS.rulesList, () => this.rules);
      handle(METHODS.rulesRevoke, (p: any) => {
        this.revokes.push(p);
        const before = this.rules.network.length + this.rules.autoApprove.length;
        this.rules = { network: this.rules.network.filter((g) => g.id !== p.id), autoApprove: this.rules.autoApprove.filter((a) => a.id !== p.id) };
        return before === this.rules.network.length + this.rules.autoApprove.length ? new ResponseError(ERROR_CODE.RULE_NOT_FOUND, "no such rule") : true;
      });
      handle(METHODS.domainStatus, () => this.status());
      handle(METHODS.networkShow, () => new ResponseError(ERROR_CODE.NETWORK_FAILED, "no sidecar"));
      handle(METHODS.branchDiff, () => ({ branch: "lazaret/agent-default", base: null, head: null, files: [], patch: "", uncommitted: null, warnings: [] }));
      handle(METHODS.auditList, (): AuditRecord[] => [
        { sequence: 1, previousHash: "", hash: "h", type: "escalation", requestId: "r", sessionId: "s", verified: true, outcome: "approved", decidedBy: "rpc:cli", requestedArgv: ["true"], receivedAtMs: 1 },
        { sequence: 2, previousHash: "h", hash: "i", type: "dnsRefused", name: "evil.example", recordType: "TXT", refusal: "recordType", outcome: "dnsRefused", decidedBy: "networkSidecar", receivedAtMs: 2 },
      ]);
      handle(METHODS.escalationRespond, (p: any) => {
        this.responses.push(p);
        // As the coordinator: an edit to an empty command is refused, and the request stays pending.
        if (p.decision === "edit" && (!p.argv?.length || p.argv[0] === "")) return new ResponseError(1004, "the edited command has no program");
        const i = this.pending.findIndex((e) => e.requestId === p.requestId);
        if (i < 0) return new ResponseError(ERROR_CODE.ESCALATION_NOT_PENDING, "not pending");
        this.pending.splice(i, 1);
        return true;
      });
      c.listen();
      this.connections.push(c);
      sock.on("error", () => undefined);
      this.sockets.push(sock);
    });
    return new Promise((resolve) => this.server!.listen(this.socket, resolve));
  }

  /** Sends an event to every subscriber; `seq` numbered unless given (null: no seq, which breaks the protocol). */
  event(event: Record<string, unknown>, seq?: number | null): void {
    const numbered = seq === null ? event : { seq: seq ?? ++this.seq, ...event };
    for (const c of this.connections) void c.sendNotification(SUBSCRIPTION.notification, { subscription: "sub1", result: numbered });
  }

  async close(): Promise<void> {
    for (const c of this.connections) c.dispose();
    this.connections = [];
    for (const s of this.sockets) s.destroy();
    this.sockets = [];
    await new Promise<void>((resolve) => this.server?.close(() => resolve()));
    fs.rmSync(this.socket, { force: true });
  }
}

/** `lazaret editor-info --json` of this API version: the socket root, nothing running. */
export function editorInfo(socketRoot: string): string {
  return JSON.stringify({ apiVersion: API_VERSION, socketRoot, domains: [], folders: [], profiles: ["default"] });
}

export async function until(what: string, fn: () => boolean, timeoutMs = 3000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!fn()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export function escalation(id: string, hash = "abcdef012345"): PendingEscalation {
  return { requestId: id, argv: ["touch", id], display: `touch ${id}`, cwd: "/w", domainHash: hash, profile: "default", sessionId: "s", reasons: ["`touch` is not in auto_approve"], riskNotes: [], receivedAtMs: Date.now(), expiresAtMs: Date.now() + 300_000 };
}

export function networkRequest(id: string, destination = "grant.test", repeats = 0, hash = "abcdef012345"): PendingNetworkRequest {
  return { requestId: id, destination, recordTypes: ["A"], repeats, sessionIds: ["s"], domainHash: hash, profile: "default", receivedAtMs: Date.now(), expiresAtMs: Date.now() + 300_000 };
}
