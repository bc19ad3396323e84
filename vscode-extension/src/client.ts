// A typed client of one Session Coordinator: vscode-jsonrpc over the Unix
// control socket, the method table and event types generated from the Rust
// protocol crate (./protocol). Node only (no vscode).
import * as net from "node:net";
import {
  createMessageConnection,
  MessageConnection,
  ParameterStructures,
  ResponseError,
  StreamMessageReader,
  StreamMessageWriter,
} from "vscode-jsonrpc/node";
import { EventNotification, Methods, SequencedEvent, SUBSCRIPTION } from "./protocol";

export type Log = (level: "debug" | "info" | "warn" | "error", message: string) => void;

export class RpcError extends Error {
  constructor(
    readonly method: string,
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

/** JSON-RPC's own code for a method the server does not have (the coordinator's are ERROR_CODE in protocol.ts). */
export const METHOD_NOT_FOUND = -32601;
/** Not an answer of the coordinator: it did not answer in time (outside every range the coordinator uses). */
export const TIMED_OUT = -2;

function withTimeout<T>(promise: Promise<T>, method: string, timeoutMs?: number): Promise<T> {
  if (!timeoutMs) return promise;
  let timer: NodeJS.Timeout;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new RpcError(method, TIMED_OUT, `no answer to ${method} in ${timeoutMs / 1000} s`)), timeoutMs);
  });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}

export class CoordinatorClient {
  private connection: MessageConnection;
  private closed = false;
  private closeHandlers: Array<() => void> = [];
  private eventHandlers: Array<(event: SequencedEvent) => void> = [];
  subscription: string | undefined;

  private constructor(
    readonly socketPath: string,
    private socket: net.Socket,
    private log: Log,
  ) {
    this.connection = createMessageConnection(new StreamMessageReader(socket), new StreamMessageWriter(socket));
    this.connection.onNotification(SUBSCRIPTION.notification, (params: EventNotification) => {
      this.log("debug", `<- ${SUBSCRIPTION.notification} ${JSON.stringify(params)}`);
      if (!params || (this.subscription !== undefined && params.subscription !== this.subscription)) return;
      for (const h of this.eventHandlers) h(params.result);
    });
    this.connection.onClose(() => this.markClosed());
    this.connection.onError(([error]) => this.log("warn", `${socketPath}: ${error.message}`));
    socket.on("close", () => this.markClosed());
    this.connection.listen();
  }

  /** Connects to a control socket; rejects when nothing accepts there. */
  static connect(socketPath: string, log: Log, timeoutMs = 3000): Promise<CoordinatorClient> {
    return new Promise((resolve, reject) => {
      const socket = net.createConnection(socketPath);
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new Error(`${socketPath}: connect timed out`));
      }, timeoutMs);
      socket.once("error", (err) => {
        clearTimeout(timer);
        reject(err);
      });
      socket.once("connect", () => {
        clearTimeout(timer);
        socket.removeAllListeners("error");
        socket.on("error", (err) => log("debug", `${socketPath}: ${err.message}`));
        resolve(new CoordinatorClient(socketPath, socket, log));
      });
    });
  }

  get isClosed(): boolean {
    return this.closed;
  }

  private markClosed(): void {
    if (this.closed) return;
    this.closed = true;
    this.log("info", `${this.socketPath}: connection closed`);
    for (const h of this.closeHandlers) h();
  }

  onClose(handler: () => void): void {
    this.closeHandlers.push(handler);
  }

  onEvent(handler: (event: SequencedEvent) => void): void {
    this.eventHandlers.push(handler);
  }

  /**
   * One typed request; parameters by name. With `timeoutMs`, a coordinator
   * that does not answer in time is an error (RpcError code TIMED_OUT), so
   * that a client that could not ask never passes for one told "nothing".
   */
  async request<M extends keyof Methods>(method: M, params: Methods[M]["params"], timeoutMs?: number): Promise<Methods[M]["result"]> {
    const started = Date.now();
    this.log("debug", `-> ${method} ${JSON.stringify(params)}`);
    try {
      const result = await withTimeout(this.connection.sendRequest<Methods[M]["result"]>(method, ParameterStructures.byName, params ?? {}), method, timeoutMs);
      this.log("debug", `<- ${method} (${Date.now() - started} ms) ${truncate(JSON.stringify(result))}`);
      return result;
    } catch (err) {
      const e = err instanceof RpcError ? err : err instanceof ResponseError ? new RpcError(method, err.code, err.message) : new RpcError(method, -1, String((err as Error)?.message ?? err));
      this.log("debug", `<- ${method} error ${e.code}: ${e.message}`);
      throw e;
    }
  }

  /** `events/subscribe`: the subscription id. */
  async subscribe(timeoutMs?: number): Promise<string> {
    this.log("debug", `-> ${SUBSCRIPTION.subscribe}`);
    const id = await withTimeout(this.connection.sendRequest<string>(SUBSCRIPTION.subscribe, ParameterStructures.byPosition), SUBSCRIPTION.subscribe, timeoutMs);
    this.subscription = String(id);
    this.log("debug", `<- ${SUBSCRIPTION.subscribe} ${this.subscription}`);
    return this.subscription;
  }

  dispose(): void {
    this.closed = true;
    try {
      this.connection.dispose();
    } catch {
      /* already gone */
    }
    this.socket.destroy();
  }
}

function truncate(text: string | undefined, max = 2000): string {
  if (text === undefined) return "undefined";
  return text.length > max ? `${text.slice(0, max)}… (${text.length} chars)` : text;
}
