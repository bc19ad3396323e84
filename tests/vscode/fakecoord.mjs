// A stand-in coordinator on a Unix socket under the real socket root, for the
// cases a real coordinator cannot be made to produce on purpose: one that
// accepts and never answers (a hung coordinator), one whose pending/list
// fails, and one that hands out a request id another domain also uses (ids
// are minted by each coordinator, so two domains can collide), and one of
// another API version (another build's coordinator). Speaks the
// same JSON-RPC (vscode-jsonrpc, Content-Length framing) as the real one.
import * as fs from "node:fs";
import { createRequire } from "node:module";
import * as net from "node:net";
import * as path from "node:path";

const HERE = path.dirname(new URL(import.meta.url).pathname);
const require = createRequire(path.resolve(HERE, "../../vscode-extension/package.json"));
const rpc = require("vscode-jsonrpc/node");
/** The API version the extension speaks (its generated protocol.ts): a fake coordinator speaks it unless told otherwise. */
const EXTENSION_API = Number(fs.readFileSync(path.resolve(HERE, "../../vscode-extension/src/protocol.ts"), "utf8").match(/export const API_VERSION = (\d+);/)[1]);

export class FakeCoordinator {
  /**
   * mode: "silent" (accepts, never answers), "list-error" (pending/list
   * fails), "ok" (answers like a coordinator with `pending` waiting).
   */
  constructor(socketRoot, hash, { mode = "ok", pending = [], workspace = "/nonexistent/fake-workspace", profile = "fake", apiVersion = EXTENSION_API } = {}) {
    this.socket = path.join(socketRoot, hash, "control.sock");
    this.hash = hash;
    this.mode = mode;
    this.pending = pending;
    this.workspace = workspace;
    this.profile = profile;
    this.apiVersion = apiVersion;
    this.responses = [];
    this.calls = [];
    this.connections = [];
    this.sockets = [];
  }

  status() {
    return { apiVersion: this.apiVersion, domainHash: this.hash, profile: this.profile, workspace: this.workspace, image: "fake", containerName: "fake", containerState: "running", coordinatorPid: process.pid, startedAtMs: Date.now(), sessions: [], agentBranch: `lazaret/agent-${this.profile}` };
  }

  listen() {
    fs.mkdirSync(path.dirname(this.socket), { recursive: true, mode: 0o700 });
    this.server = net.createServer((sock) => {
      sock.on("error", () => undefined);
      this.sockets.push(sock);
      if (this.mode === "silent") return; // reads nothing, answers nothing
      const c = rpc.createMessageConnection(new rpc.StreamMessageReader(sock), new rpc.StreamMessageWriter(sock));
      const handle = (method, fn) => c.onRequest(method, (p) => (this.calls.push(method), fn(p)));
      handle("events/subscribe", () => "fake-sub");
      handle("escalation/list", () => (this.mode === "list-error" ? new rpc.ResponseError(-32603, "escalation/list failed in the fake coordinator (test)") : this.pending));
      // What the extension lists with: escalations and network requests, tagged by kind.
      handle("pending/list", () => (this.mode === "list-error" ? new rpc.ResponseError(-32603, "pending/list failed in the fake coordinator (test)") : this.pending.map((e) => ({ kind: "command", ...e }))));
      handle("rules/list", () => ({ autoApprove: [], network: [] }));
      handle("domain/status", () => this.status());
      handle("network/show", () => new rpc.ResponseError(1008, "no sidecar"));
      handle("branch/diff", () => ({ branch: `lazaret/agent-${this.profile}`, base: null, head: null, files: [], patch: "", uncommitted: null, warnings: [] }));
      handle("audit/list", () => []);
      handle("escalation/respond", (p) => {
        this.responses.push(p);
        const i = this.pending.findIndex((e) => e.requestId === p.requestId);
        if (i < 0) return new rpc.ResponseError(1007, "not pending");
        this.pending.splice(i, 1);
        return true;
      });
      c.listen();
      this.connections.push(c);
    });
    return new Promise((resolve) => this.server.listen(this.socket, resolve));
  }

  async close() {
    for (const c of this.connections) c.dispose();
    for (const s of this.sockets) s.destroy();
    await new Promise((resolve) => this.server?.close(() => resolve()));
    fs.rmSync(path.dirname(this.socket), { recursive: true, force: true });
  }
}
