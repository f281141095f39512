/**
 * Credit accounting (RFC 8166 §3.3.1, seed 004 §8.2, DESIGN §3 "Credits"). One `CreditWindow` per
 * direction in which this end is the requester: forward (calls we send to a server) or backward (calls a
 * server sends to its client, RFC 8167). A requester never has more calls outstanding than the peer's last
 * grant (and never more than it asked for, so every reply has a Receive posted here); after a (re)connect
 * the window is 1 until the first grant arrives; a grant of 0 is treated as 1 (RFC 8166 §3.3.1, the
 * Linux client does the same). Exhaustion is not an error: callers wait in a `Fifo`.
 */
export class CreditWindow {
  /** The peer's last grant (≥ 1). */
  private grant = 1;
  /** Calls sent and not yet answered. */
  outstanding = 0;
  /** The largest number of credits this end ever uses: it asks for this many and posts Receives for them. */
  readonly max: number;

  constructor(max: number) {
    if (!Number.isInteger(max) || max < 1)
      throw new RangeError(`credit maximum ${max} must be a positive integer`);
    this.max = max;
  }

  /** The number of calls that may be outstanding now. */
  get limit(): number {
    return Math.min(this.grant, this.max);
  }

  get granted(): number {
    return this.grant;
  }

  canSend(): boolean {
    return this.outstanding < this.limit;
  }

  /** Takes one credit; the caller checked `canSend()`. */
  take(): void {
    this.outstanding++;
  }

  /** A response arrived: its credit comes back and the peer's grant is updated (0 counts as 1). */
  complete(grant: number): void {
    this.release();
    this.update(grant);
  }

  /**
   * A response whose credit word must not be read came back: an RDMA2_ERROR (seed 004 §5.3.3: "The
   * receiver of this header type MUST ignore the value of the rdma_start.rdma_credits field"), or a
   * header that did not decode. Its credit comes back; the grant stays what it was.
   */
  release(): void {
    if (this.outstanding > 0) this.outstanding--;
  }

  /** Records a grant carried by a message that answers no call (e.g. the peer's CONNPROP). */
  update(grant: number): void {
    this.grant = grant > 0 ? grant >>> 0 : 1;
  }

  /** After a reconnect: back to one credit and nothing outstanding. */
  reset(): void {
    this.grant = 1;
    this.outstanding = 0;
  }
}

/** A FIFO on a growable ring: O(1) push/shift without `Array.prototype.shift` copying. */
export class Fifo<T> {
  private items: (T | undefined)[];
  private head = 0;
  private count = 0;

  constructor(initialCapacity = 64) {
    this.items = new Array(initialCapacity);
  }

  get length(): number {
    return this.count;
  }

  push(item: T): void {
    if (this.count === this.items.length) {
      const next: (T | undefined)[] = new Array(this.items.length * 2);
      for (let i = 0; i < this.count; i++) next[i] = this.items[(this.head + i) % this.items.length];
      this.items = next;
      this.head = 0;
    }
    this.items[(this.head + this.count) % this.items.length] = item;
    this.count++;
  }

  peek(): T | undefined {
    return this.count === 0 ? undefined : this.items[this.head];
  }

  shift(): T | undefined {
    if (this.count === 0) return undefined;
    const item = this.items[this.head];
    this.items[this.head] = undefined;
    this.head = (this.head + 1) % this.items.length;
    this.count--;
    return item;
  }

  /** Removes and returns everything, oldest first. */
  drain(): T[] {
    const out: T[] = [];
    for (let item = this.shift(); item !== undefined; item = this.shift()) out.push(item);
    return out;
  }
}
