/**
 * Selective signaling of Sends, as xprtrdma does it: most Sends are posted unsignaled, because a
 * completion per Send costs a CQ entry, a poll and a dispatch. Send-queue completions come in order
 * (InfiniBand and iWARP alike), so the completion of a signaled Send says that every Send posted before it
 * is done too: their send buffers are released then. A flush (the QP in error) reports unsignaled Sends as
 * well; those are released one by one and skipped when a later fence passes them.
 *
 * Bookkeeping only: which slots to release is reported to `release`, the connection's own function.
 */
export class SendSignaling {
  /** Unsignaled slots in post order: a ring with absolute positions `[released, posted)`. */
  private readonly ring: number[] = [];
  private posted = 0;
  private released = 0;
  /** Unsignaled Sends posted since the last signaled one. */
  private sinceSignal = 0;
  /** Per slot: for a signaled Send, `posted` when it was posted (everything before it is its to release). */
  private readonly fence: number[] = [];
  /** Per slot: its ring position while posted unsignaled and not released, else -1. */
  private readonly at: number[] = [];

  constructor(
    slots: number,
    private readonly interval: number,
    private readonly release: (slot: number, completed: boolean) => void,
  ) {
    for (let i = 0; i < slots; i++) {
      this.ring.push(-1);
      this.fence.push(0);
      this.at.push(-1);
    }
  }

  /**
   * Decides whether the Send of `slot` is signaled and records it. It is when `mustSignal` (it holds more
   * than its buffer: those resources go back at its own completion), every `interval`th Send, and when
   * fewer than `interval` slots are `available`, so nothing waits long for a slot.
   */
  post(slot: number, mustSignal: boolean, available: number): boolean {
    const signaled = mustSignal || this.sinceSignal >= this.interval - 1 || available < this.interval;
    if (signaled) {
      this.sinceSignal = 0;
      this.fence[slot] = this.posted;
    } else {
      this.sinceSignal++;
      this.at[slot] = this.posted;
      this.ring[this.posted++ % this.ring.length] = slot;
    }
    return signaled;
  }

  /** The Send of `slot` completed (`ok`: successfully, else flushed or failed). */
  completed(slot: number, ok: boolean): void {
    if (this.at[slot] >= 0) {
      // Only a flush reports an unsignaled Send: released now, skipped by a later fence.
      this.at[slot] = -1;
      this.release(slot, false);
      return;
    }
    if (ok) {
      const fence = this.fence[slot];
      while (this.released < fence) {
        const pos = this.released++;
        const earlier = this.ring[pos % this.ring.length];
        if (this.at[earlier] === pos) {
          this.at[earlier] = -1;
          this.release(earlier, true);
        }
      }
    }
    this.release(slot, ok);
  }
}
