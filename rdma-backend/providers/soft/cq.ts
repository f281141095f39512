/**
 * A completion queue: a fixed ring of WorkCompletions (each created the first time its slot is used, then
 * reused), notification as libibverbs arms it.
 */
import { type CompletionQueue, VerbsError, WorkCompletion } from '../../verbs/index.js';

const DISCARDED = new WorkCompletion();

export class SoftCq implements CompletionQueue {
  private ring: WorkCompletion[];
  /** Completion objects polled and free for reuse (see `slot`). */
  private free: WorkCompletion[] = [];
  private head = 0;
  private count = 0;
  private armed = false;
  private solicitedOnly = false;
  private scheduled = false;
  private handler: ((cq: CompletionQueue) => void) | undefined;
  overrun = false;
  users = 0;
  destroyed = false;
  private readonly fire = (): void => {
    this.scheduled = false;
    this.handler?.(this);
  };

  constructor(
    readonly depth: number,
    /** Tells the device this CQ is gone (its count against `maxCq`). */
    private readonly onDestroy?: () => void,
  ) {
    this.ring = new Array<WorkCompletion>(depth);
  }

  /**
   * Reserves the next slot; the caller fills it and then calls `commit(solicited)`. Returns undefined
   * (and sets `overrun`) when the ring is full.
   */
  slot(): WorkCompletion | undefined {
    // Nobody polls a destroyed CQ: a late (flush) completion is written to scratch and dropped by commit().
    if (this.destroyed) return DISCARDED;
    if (this.count === this.depth) {
      if (!this.overrun) {
        this.overrun = true;
        // The interface's promise: the handler learns of it without waiting for a completion.
        if (!this.scheduled && this.handler) {
          this.scheduled = true;
          queueMicrotask(this.fire);
        }
      }
      return undefined;
    }
    // From a LIFO free list rather than the ring slot: cycling through thousands of completion objects
    // misses the cache every time, a few recycled ones do not.
    const wc = this.free.pop() ?? new WorkCompletion();
    this.ring[(this.head + this.count) % this.depth] = wc;
    return wc;
  }

  commit(notify: boolean): void {
    if (this.destroyed) return;
    this.count++;
    if (this.armed && (notify || !this.solicitedOnly)) {
      this.armed = false;
      if (!this.scheduled && this.handler) {
        this.scheduled = true;
        queueMicrotask(this.fire);
      }
    }
  }

  poll(out: WorkCompletion[], max = out.length): number {
    const n = Math.min(max, out.length, this.count);
    for (let i = 0; i < n; i++) {
      const wc = this.ring[this.head];
      out[i].copyFrom(wc);
      this.free.push(wc);
      this.head = this.head + 1 === this.depth ? 0 : this.head + 1;
    }
    this.count -= n;
    return n;
  }

  requestNotify(solicitedOnly = false): void {
    this.armed = true;
    this.solicitedOnly = solicitedOnly;
  }

  setNotifyHandler(handler: (cq: CompletionQueue) => void): void {
    this.handler = handler;
  }

  destroy(): void {
    if (this.users > 0) throw new VerbsError('VERBS_BUSY', 'completion queue still used by queue pairs');
    if (this.destroyed) return;
    this.destroyed = true;
    this.onDestroy?.();
    // Nobody polls a destroyed CQ: drop the ring (a consumer may keep the CQ object reachable).
    this.count = 0;
    this.ring = [];
    this.free = [];
  }
}
