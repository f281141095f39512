/** A completion queue: a fixed ring of preallocated WorkCompletions, notification as libibverbs arms it. */
import {
  type CompletionQueue,
  createWorkCompletions,
  VerbsError,
  type WorkCompletion,
} from '../../verbs/index.js';

export class SoftCq implements CompletionQueue {
  private readonly ring: WorkCompletion[];
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

  constructor(readonly depth: number) {
    this.ring = createWorkCompletions(depth);
  }

  /**
   * Reserves the next slot; the caller fills it and then calls `commit(solicited)`. Returns undefined
   * (and sets `overrun`) when the ring is full.
   */
  slot(): WorkCompletion | undefined {
    if (this.count === this.depth) {
      this.overrun = true;
      return undefined;
    }
    return this.ring[(this.head + this.count) % this.depth];
  }

  commit(notify: boolean): void {
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
      out[i].copyFrom(this.ring[this.head]);
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
    this.destroyed = true;
  }
}
