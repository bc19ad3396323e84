// The pending network requests across domains (`[network] ask`): a DNS name
// the sandbox asked for that no allow entry covers, waiting for a human. Pure:
// no editor state. Keyed by (domain, request id) as the escalation queue
// (./queue) is. Entries come from `pending/list` and `networkRequestPending`
// events; an event for a request already listed replaces it (the coordinator
// sends it again, same id, when `repeats` grows: an upsert). They leave on
// `networkRequestResolved`, on a successful answer, on a fresh list without
// them, or when their domain goes away; a request once resolved is never
// added back (a list answer that raced with the resolution cannot resurrect it).
import type { PendingNetworkRequest } from "./protocol";

export interface NetworkItem {
  /** Key of the domain (its control socket). */
  domain: string;
  request: PendingNetworkRequest;
  arrival: number;
}

const TOMBSTONES = 1024;

function key(domain: string, id: string): string {
  return `${domain}\0${id}`;
}

function receivedAt(item: NetworkItem): number {
  const at: unknown = item.request.receivedAtMs;
  return typeof at === "number" && Number.isFinite(at) ? at : 0;
}

export class NetworkQueue {
  private items = new Map<string, NetworkItem>();
  private resolved = new Set<string>();
  private arrival = 0;

  /** Adds a request of `domain`, or replaces the one with its id (more questions came in); the item when it is new. */
  upsert(domain: string, request: PendingNetworkRequest): NetworkItem | undefined {
    const id = request?.requestId;
    if (typeof id !== "string" || typeof request.destination !== "string") return undefined;
    const k = key(domain, id);
    if (this.resolved.has(k)) return undefined;
    const existing = this.items.get(k);
    if (existing) {
      existing.request = request;
      return undefined;
    }
    const item = { domain, request, arrival: ++this.arrival };
    this.items.set(k, item);
    return item;
  }

  /** Removes a request for good (answered here or elsewhere, or expired); true when it was listed. */
  resolve(domain: string, id: string): boolean {
    if (typeof id !== "string") return false;
    const k = key(domain, id);
    if (!this.resolved.has(k)) {
      this.resolved.add(k);
      if (this.resolved.size > TOMBSTONES) this.resolved.delete(this.resolved.values().next().value as string);
    }
    return this.items.delete(k);
  }

  /** Makes `list` the pending network requests of `domain`; returns the items that are new. */
  replace(domain: string, list: readonly PendingNetworkRequest[]): NetworkItem[] {
    const keep = new Set<string>();
    const added: NetworkItem[] = [];
    for (const r of Array.isArray(list) ? list : []) {
      if (!r || typeof r.requestId !== "string") continue;
      keep.add(key(domain, r.requestId));
      const item = this.upsert(domain, r);
      if (item) added.push(item);
    }
    for (const [k, item] of this.items) if (item.domain === domain && !keep.has(k)) this.items.delete(k);
    return added;
  }

  dropDomain(domain: string): void {
    for (const [k, item] of this.items) if (item.domain === domain) this.items.delete(k);
  }

  get(domain: string, id: string): NetworkItem | undefined {
    return this.items.get(key(domain, id));
  }

  has(domain: string, id: string): boolean {
    return this.items.has(key(domain, id));
  }

  /** Oldest first (receivedAtMs, then arrival). */
  list(domain?: string): NetworkItem[] {
    return [...this.items.values()]
      .filter((i) => domain === undefined || i.domain === domain)
      .sort((a, b) => receivedAt(a) - receivedAt(b) || a.arrival - b.arrival);
  }

  get size(): number {
    return this.items.size;
  }
}
