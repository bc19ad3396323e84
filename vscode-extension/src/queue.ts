// The pending-escalation queue across domains. Pure: no editor state.
// A request is keyed by (domain, request id), never by the id alone: ids are
// unique only within a coordinator (DECISIONS D16), and an id seen in two
// domains is two requests, each listed under its own domain.
// Entries come from `pending/list` (its `command` items) and `escalationPending` events and leave
// on `escalationResolved`, on a successful answer, on a fresh list without
// them, or when their domain goes away. A request once resolved is never
// added back, so a list answer that raced with the resolution cannot
// resurrect it. tests/vectors/queue.json holds the cases both editors' tests run.
import type { PendingEscalation } from "./protocol";

export interface QueueItem {
  /** Key of the domain (its control socket). */
  domain: string;
  escalation: PendingEscalation;
  arrival: number;
}

const TOMBSTONES = 1024;

function key(domain: string, id: string): string {
  return `${domain}\0${id}`;
}

function receivedAt(item: QueueItem): number {
  const at: unknown = item.escalation.receivedAtMs;
  return typeof at === "number" && Number.isFinite(at) ? at : 0;
}

export class PendingQueue {
  private items = new Map<string, QueueItem>();
  private resolved = new Set<string>();
  private arrival = 0;

  /** Adds (or refreshes) a request of `domain`; the item when it is new to the queue. */
  add(domain: string, escalation: PendingEscalation): QueueItem | undefined {
    const id = escalation?.requestId;
    if (typeof id !== "string") return undefined;
    const k = key(domain, id);
    if (this.resolved.has(k)) return undefined;
    const existing = this.items.get(k);
    if (existing) {
      existing.escalation = escalation;
      return undefined;
    }
    const item = { domain, escalation, arrival: ++this.arrival };
    this.items.set(k, item);
    return item;
  }

  /** Removes a request for good (answered here or anywhere else); true when it was queued. */
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

  /** Makes `list` the pending requests of `domain`; returns the items that are new. */
  replace(domain: string, list: readonly PendingEscalation[]): QueueItem[] {
    const keep = new Set<string>();
    const added: QueueItem[] = [];
    for (const e of Array.isArray(list) ? list : []) {
      if (!e || typeof e.requestId !== "string") continue;
      keep.add(key(domain, e.requestId));
      const item = this.add(domain, e);
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

  get(domain: string, id: string): QueueItem | undefined {
    return this.items.get(key(domain, id));
  }

  has(domain: string, id: string): boolean {
    return this.items.has(key(domain, id));
  }

  /** Oldest first (receivedAtMs, then arrival; a receivedAtMs that is not a number counts as 0). */
  list(domain?: string): QueueItem[] {
    return [...this.items.values()]
      .filter((i) => domain === undefined || i.domain === domain)
      .sort((a, b) => receivedAt(a) - receivedAt(b) || a.arrival - b.arrival);
  }

  get size(): number {
    return this.items.size;
  }
}
