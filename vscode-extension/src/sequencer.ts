// Event sequencing of one subscription. Pure: no editor state.
// Events carry `seq` 1, 2, 3, ... per subscription; `eventsLagged` or a gap
// means events were lost and the client must resync (list the queue and the
// status again). A repeated or older seq is dropped. An event without `seq`
// (no coordinator of this API version sends one; see the version check in
// ./domains) is applied as it comes, its handler ignoring what it cannot
// read; only a JSON number is a seq. tests/vectors/sequencer.json holds the cases both
// editors' tests run.

export interface Verdict {
  /** Apply the event's own content. */
  apply: boolean;
  /** Events were lost: list and status again. */
  resync: boolean;
}

export class Sequencer {
  last: number | undefined;
  lagged = 0;
  gaps = 0;

  /** A new subscription numbers its events from 1 again. */
  reset(): void {
    this.last = undefined;
  }

  accept(event: { seq?: unknown; kind?: unknown; dropped?: unknown }): Verdict {
    const seq = typeof event?.seq === "number" ? event.seq : undefined;
    const lagged = event?.kind === "eventsLagged";
    if (seq === undefined) return { apply: !lagged, resync: lagged };
    if (this.last !== undefined && seq <= this.last) return { apply: false, resync: false };
    const gap = (this.last === undefined && seq > 1) || (this.last !== undefined && seq > this.last + 1);
    this.last = seq;
    if (lagged) {
      this.lagged += typeof event.dropped === "number" ? event.dropped : 0;
      return { apply: false, resync: true };
    }
    if (gap) this.gaps++;
    return { apply: true, resync: gap };
  }
}
