// The pending queues across domains: host command escalations and network
// requests (`[network] ask`: a DNS name the sandbox asked for that no allow
// entry covers). Pure: no editor state. One implementation, KeyedQueue,
// serves both; what it guarantees:
//
// - A request is keyed by (domain, request id), never by the id alone: ids
//   are unique only within a coordinator (DECISIONS D16), and an id seen in
//   two domains is two requests, each listed under its own domain.
// - Entries come from `pending/list` (`replace`: the list becomes the
//   domain's requests) and from the pending events (`add`). Adding an id
//   already queued replaces its value in place (an upsert: a network request
//   is sent again, same id, when `repeats` grows) and is not announced again.
// - They leave on the resolved events and on a successful answer (`resolve`),
//   on a fresh list without them, or when their domain goes away
//   (`dropDomain`). A request once resolved is never added back (the last
//   TOMBSTONES resolved keys are remembered), so a list answer that raced
//   with the resolution cannot resurrect it.
// - `list` is oldest first: receivedAtMs (one that is not a finite number
//   counts as 0), then order of arrival in this queue.
//
// tests/vectors/queue.json holds the cases both editors' tests run.
import type { PendingEscalation, PendingNetworkRequest } from "./protocol";

/** What a queued value must carry: its id and when the coordinator received it. */
export interface Pending {
  requestId: string;
  receivedAtMs: number;
}

export interface QueueItem<T> {
  /** Key of the domain (its control socket). */
  domain: string;
  /** The request as the coordinator last sent it. */
  value: T;
  /** Order of arrival in this queue (ties of receivedAtMs). */
  arrival: number;
}

const TOMBSTONES = 1024;

function key(domain: string, id: string): string {
  return `${domain}\0${id}`;
}

function receivedAt(item: QueueItem<Pending>): number {
  const at: unknown = item.value.receivedAtMs;
  return typeof at === "number" && Number.isFinite(at) ? at : 0;
}

export class KeyedQueue<T extends Pending> {
  private items = new Map<string, QueueItem<T>>();
  private resolved = new Set<string>();
  private arrival = 0;

  /** `accepts`: what else a value needs to be queued, beyond a string requestId. */
  constructor(private readonly accepts: (value: T) => boolean = () => true) {}

  /** Adds a request of `domain`, or replaces the value of the one with its id; the item when it is new to the queue. */
  add(domain: string, value: T): QueueItem<T> | undefined {
    const id = value?.requestId;
    if (typeof id !== "string" || !this.accepts(value)) return undefined;
    const k = key(domain, id);
    if (this.resolved.has(k)) return undefined;
    const existing = this.items.get(k);
    if (existing) {
      existing.value = value;
      return undefined;
    }
    const item = { domain, value, arrival: ++this.arrival };
    this.items.set(k, item);
    return item;
  }

  /** Removes a request for good (answered here or anywhere else, or expired); true when it was queued. */
  resolve(domain: string, id: string): boolean {
    if (typeof id !== "string") return false;
    const k = key(domain, id);
    if (!this.resolved.has(k)) {
      this.resolved.add(k);
      if (this.resolved.size > TOMBSTONES) {
        const oldest = this.resolved.values().next().value as string;
        this.resolved.delete(oldest);
      }
    }
    return this.items.delete(k);
  }

  /**
   * Makes `list` the pending requests of `domain`; returns the items that are new.
   * An entry with a string requestId keeps its queued request even when `accepts` refuses the new value.
   */
  replace(domain: string, list: readonly T[]): QueueItem<T>[] {
    const keep = new Set<string>();
    const added: QueueItem<T>[] = [];
    for (const v of Array.isArray(list) ? list : []) {
      if (!v || typeof v.requestId !== "string") continue;
      keep.add(key(domain, v.requestId));
      const item = this.add(domain, v);
      if (item) added.push(item);
    }
    for (const [k, item] of this.items) {
      if (item.domain === domain && !keep.has(k)) this.items.delete(k);
    }
    return added;
  }

  /** Forgets every request of a domain (its coordinator went away). */
  dropDomain(domain: string): void {
    for (const [k, item] of this.items) if (item.domain === domain) this.items.delete(k);
  }

  get(domain: string, id: string): QueueItem<T> | undefined {
    return this.items.get(key(domain, id));
  }

  has(domain: string, id: string): boolean {
    return this.items.has(key(domain, id));
  }

  /** Oldest first (receivedAtMs, then arrival; a receivedAtMs that is not a number counts as 0). */
  list(domain?: string): QueueItem<T>[] {
    return [...this.items.values()]
      .filter((i) => domain === undefined || i.domain === domain)
      .sort((a, b) => receivedAt(a) - receivedAt(b) || a.arrival - b.arrival);
  }

  get size(): number {
    return this.items.size;
  }
}

/** The host command escalations (`command` items of `pending/list`, `escalationPending`). */
export class PendingQueue extends KeyedQueue<PendingEscalation> {}
export type EscalationItem = QueueItem<PendingEscalation>;

/** The network requests (`network` items of `pending/list`, `networkRequestPending`); one without a destination is refused. */
export class NetworkQueue extends KeyedQueue<PendingNetworkRequest> {
  constructor() {
    super((r) => typeof r.destination === "string");
  }
}
export type NetworkItem = QueueItem<PendingNetworkRequest>;
