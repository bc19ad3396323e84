// The pending-escalation queue across domains. Pure: no editor state.
// Entries come from `escalation/list` and `escalationPending` events and leave
// on `escalationResolved`, on a fresh list without them, or when their domain
// goes away. A request once resolved is never added back, so a list answer
// that raced with the resolution cannot resurrect it.
import type { PendingEscalation } from "./protocol";

export interface QueueItem {
  /** Key of the domain (its control socket). */
  domain: string;
  escalation: PendingEscalation;
  arrival: number;
}

const TOMBSTONES = 1024;

export class PendingQueue {
  private items = new Map<string, QueueItem>();
  private resolved = new Set<string>();
  private arrival = 0;

  /** Adds (or refreshes) a request; true when it is new to the queue. */
  add(domain: string, escalation: PendingEscalation): boolean {
    const id = escalation?.requestId;
    if (typeof id !== "string" || this.resolved.has(id)) return false;
    const existing = this.items.get(id);
    if (existing) {
      existing.escalation = escalation;
      existing.domain = domain;
      return false;
    }
    this.items.set(id, { domain, escalation, arrival: ++this.arrival });
    return true;
  }

  /** Removes a request for good (answered here or anywhere else); true when it was queued. */
  resolve(id: string): boolean {
    if (!this.resolved.has(id)) {
      this.resolved.add(id);
      if (this.resolved.size > TOMBSTONES) {
        const oldest = this.resolved.values().next().value as string;
        this.resolved.delete(oldest);
      }
    }
    return this.items.delete(id);
  }

  /** Makes `list` the pending requests of `domain`; returns the ids that are new. */
  replace(domain: string, list: readonly PendingEscalation[]): string[] {
    const keep = new Set<string>();
    const added: string[] = [];
    for (const e of list ?? []) {
      if (!e || typeof e.requestId !== "string") continue;
      keep.add(e.requestId);
      if (this.add(domain, e)) added.push(e.requestId);
    }
    for (const [id, item] of this.items) {
      if (item.domain === domain && !keep.has(id)) this.items.delete(id);
    }
    return added;
  }

  /** Forgets every request of a domain (its coordinator went away). */
  dropDomain(domain: string): void {
    for (const [id, item] of this.items) if (item.domain === domain) this.items.delete(id);
  }

  get(id: string): QueueItem | undefined {
    return this.items.get(id);
  }

  has(id: string): boolean {
    return this.items.has(id);
  }

  /** Oldest first (receivedAtMs, then arrival). */
  list(domain?: string): QueueItem[] {
    return [...this.items.values()]
      .filter((i) => domain === undefined || i.domain === domain)
      .sort((a, b) => (a.escalation.receivedAtMs ?? 0) - (b.escalation.receivedAtMs ?? 0) || a.arrival - b.arrival);
  }

  get size(): number {
    return this.items.size;
  }
}
