// The arming delay of an answer (DECISIONS D20). VS Code's surfaces never take
// the keyboard when a request arrives, but a click or a keybinding meant for
// one request can still land on another: one that arrived a moment before,
// or one that moved onto the row under the pointer (or the selection) when
// the request that was there was answered elsewhere. So an answer is refused
// within ARMING_MS of the request's arrival in this window, and of the
// request taking another place in the view. Pure: the unit tests load it.

/** How long after it arrived (or moved) a request cannot be answered here. */
export const ARMING_MS = 1000;

/** A pending request's key: its kind, its domain and its id (ids are unique per coordinator only). */
export function requestKey(kind: "command" | "network", domain: string, id: string): string {
  return `${kind}\0${domain}\0${id}`;
}

export class Arming {
  /** When each pending request last arrived or moved (ms). */
  private since = new Map<string, number>();
  /** Each pending request's place in the view, as last seen. */
  private place = new Map<string, number>();
  /** When requests left (answered, expired, gone with their domain): the recent ones. */
  private left = new Map<string, number>();

  constructor(readonly delayMs: number = ARMING_MS) {}

  /**
   * The pending requests in the order the view shows them, at `now`: one new
   * to this window, or at another place than before (a request before it
   * left, or came), starts its delay again. Keys not listed are forgotten.
   */
  update(order: readonly string[], now: number): void {
    const since = new Map<string, number>();
    const place = new Map<string, number>();
    order.forEach((key, i) => {
      const before = this.since.get(key);
      since.set(key, before === undefined || this.place.get(key) !== i ? now : before);
      place.set(key, i);
    });
    for (const key of this.since.keys()) if (!since.has(key)) this.left.set(key, now);
    for (const [key, at] of this.left) if (now - at > this.delayMs || since.has(key)) this.left.delete(key);
    this.since = since;
    this.place = place;
  }

  /**
   * The selection went from `from` to `to` at `now`: when `from` left the
   * queue within the delay (the selection moved because its request went),
   * `to` moved onto it, and waits its delay again. A selection the user
   * moves among pending requests changes nothing.
   */
  selectionMoved(from: string | undefined, to: string | undefined, now: number): void {
    if (!from || !to || from === to) return;
    const at = this.left.get(from);
    if (at !== undefined && now - at <= this.delayMs) this.disarm(to, now);
  }

  /** A request moved onto what a command acts on (the selection): its delay starts again. */
  disarm(key: string, now: number): void {
    this.since.set(key, now);
  }

  /**
   * How long (ms) an answer to `key` must still wait at `now`; 0: it may be
   * answered. A key not seen yet starts its delay now.
   */
  remaining(key: string, now: number): number {
    let at = this.since.get(key);
    if (at === undefined) {
      at = now;
      this.since.set(key, at);
    }
    return Math.max(0, at + this.delayMs - now);
  }
}
