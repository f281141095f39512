/**
 * A small progress bar on stderr for the long suites: redrawn in place on a terminal, one line per step
 * otherwise (CI logs), with an estimate of the time left from the steps' planned durations.
 */
export class Progress {
  private done = 0;
  private doneWeight = 0;
  private readonly started = Date.now();
  private readonly tty = process.stderr.isTTY === true;

  /** `weights`: the planned relative cost of each step, in order (seconds is a good unit). */
  constructor(
    private readonly title: string,
    private readonly weights: readonly number[],
  ) {}

  private get totalWeight(): number {
    return this.weights.reduce((s, w) => s + w, 0);
  }

  /** Shows that step `label` is starting. */
  step(label: string): void {
    const total = this.weights.length;
    const fraction = this.totalWeight > 0 ? this.doneWeight / this.totalWeight : 0;
    const width = 24;
    const filled = Math.round(fraction * width);
    const bar = `${'#'.repeat(filled)}${'-'.repeat(width - filled)}`;
    const elapsed = (Date.now() - this.started) / 1000;
    const eta = fraction > 0.02 ? Math.round((elapsed / fraction) * (1 - fraction)) : undefined;
    const text = `[${this.title}] [${bar}] ${this.done + 1}/${total}${eta !== undefined ? ` ~${formatSeconds(eta)} left` : ''}  ${label}`;
    if (this.tty) process.stderr.write(`\r\x1b[2K${text.slice(0, (process.stderr.columns ?? 120) - 1)}`);
    else process.stderr.write(`${text}\n`);
  }

  /** Marks the current step finished. */
  advance(): void {
    this.doneWeight += this.weights[this.done] ?? 0;
    this.done++;
  }

  finish(): void {
    if (this.tty) process.stderr.write('\r\x1b[2K');
    process.stderr.write(
      `[${this.title}] ${this.done}/${this.weights.length} steps in ${formatSeconds((Date.now() - this.started) / 1000)}\n`,
    );
  }
}

function formatSeconds(s: number): string {
  if (s < 60) return `${Math.round(s)}s`;
  return `${Math.floor(s / 60)}m${String(Math.round(s % 60)).padStart(2, '0')}s`;
}
