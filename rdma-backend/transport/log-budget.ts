/**
 * A process-wide budget for the log lines a peer can cause in the transport (its protocol errors, the
 * ends of its connections, handler errors its messages set off): at most `lines` per `windowMs` over
 * every connection together. The per-connection bound (`RpcRdmaConnection.logPeerError`) does not hold
 * against a peer that reconnects in a loop; this one does. Lines over the budget are counted, and when
 * the window ends one line says how many were left out (on a timer, so that a flood that stops is still
 * reported).
 */
import type { TransportLogger } from './options.js';

export class LogBudget {
  private windowStart = Number.NEGATIVE_INFINITY;
  private used = 0;
  private suppressed = 0;

  constructor(
    readonly lines = 100,
    readonly windowMs = 10_000,
    private readonly now: () => number = performance.now.bind(performance),
    private readonly schedule: (report: () => void, ms: number) => void = (report, ms) => {
      setTimeout(report, ms).unref();
    },
  ) {}

  /** Whether one more line may go to `log` now. */
  take(log: TransportLogger): boolean {
    const now = this.now();
    if (now - this.windowStart >= this.windowMs) {
      this.report(log);
      this.windowStart = now;
      this.used = 0;
    }
    if (this.used >= this.lines) {
      // The first line left out in a window arms the report of them all, at the window's end.
      if (this.suppressed++ === 0)
        this.schedule(() => this.report(log), this.windowStart + this.windowMs - now);
      return false;
    }
    this.used++;
    return true;
  }

  /** Says how many lines were left out since the last report, if any. */
  private report(log: TransportLogger): void {
    if (this.suppressed === 0) return;
    log.warn(
      {
        code: 'TRANSPORT_LOG_SUPPRESSED',
        suppressed: this.suppressed,
        lines: this.lines,
        windowMs: this.windowMs,
      },
      `${this.suppressed} transport log line(s) left out: over ${this.lines} in ${this.windowMs} ms (the counters in /v1/stats have every event)`,
    );
    this.suppressed = 0;
  }
}

/** The transport's budget, shared by every connection of the process. */
export const TRANSPORT_LOG_BUDGET = new LogBudget();
