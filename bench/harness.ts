/**
 * The benchmark harness: every suite measures the project next to a baseline taken in the same run, so
 * results are ratios that mean something on any machine (DEVELOPERS guide: never an absolute time from
 * another day). Suites return rows; `run.ts` prints them as JSON and as a table.
 */
import { performance } from 'node:perf_hooks';
import type { BenchRdma } from './options.js';

export interface Target {
  /** What the target constrains: the ratio to the baseline, or the value itself. */
  of: 'ratio' | 'value';
  op: '>=' | '<=';
  value: number;
}

export interface BenchRow {
  suite: string;
  name: string;
  value: number;
  unit: string;
  baseline?: { name: string; value: number };
  ratio?: number;
  target?: Target;
  met?: boolean;
  extra?: Record<string, unknown>;
}

/**
 * Environment variables that change what a run measures (bench/suites/scenarios.ts, bench/scenarios/chains.ts):
 * recorded in the result file when set, and shown on its chart and report.
 */
export const BENCH_ENV = ['BENCH_CHAINS', 'BENCH_WORKLOADS', 'BENCH_NODE_ARGS'] as const;

export interface BenchContext {
  quick: boolean;
  /** Seconds a single measurement should last (shorter with --quick). */
  seconds: number;
  log(msg: string): void;
  /** `--profile`: where the end-to-end suites write V8 CPU profiles of the gateway and the responder. */
  profileDir?: string;
  /** The RDMA provider and address of the gateway chains (`--rdma-provider`, `--rdma-address`); soft on 127.0.0.1 when absent. */
  rdma?: BenchRdma;
  /** Load-generator processes per scenario (`--loadgens`); one when absent. */
  loadgens?: number;
}

export interface Suite {
  name: string;
  run(ctx: BenchContext): Promise<BenchRow[]>;
}

/**
 * Calls `fn` (which performs `opsPerCall` operations) repeatedly for about `seconds` after a warm-up, and
 * returns operations per second.
 */
export function measureRate(fn: () => void, seconds: number, opsPerCall = 1): number {
  const warmEnd = performance.now() + Math.min(200, seconds * 200);
  while (performance.now() < warmEnd) fn();
  let calls = 0;
  let batch = 1;
  const start = performance.now();
  const deadline = start + seconds * 1000;
  let now = start;
  while (now < deadline) {
    for (let i = 0; i < batch; i++) fn();
    calls += batch;
    now = performance.now();
    if (now - start < 10) batch *= 2;
  }
  return (calls * opsPerCall) / ((now - start) / 1000);
}

/**
 * The rows that make a run fail (`run.ts` exits non-zero): a target with no valid figure (`extra.invalid`:
 * a chain that did not start, failed calls, a missing baseline). An unmet target is a result, not a failure.
 */
export function invalidTargets(rows: readonly BenchRow[]): BenchRow[] {
  return rows.filter(
    (r) => r.extra?.invalid !== undefined && (r.target !== undefined || r.extra?.suiteFailed === true),
  );
}

/**
 * Runs `suites` in order. A suite that throws keeps the rows of the others: it becomes one row of its own
 * (`extra.invalid`: the error, `extra.suiteFailed`), which fails the run (`invalidTargets`), and the next
 * suite runs.
 */
export async function runSuites(suites: readonly Suite[], ctx: BenchContext): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  for (const suite of suites) {
    ctx.log(`[bench] ${suite.name} ...`);
    try {
      rows.push(...(await suite.run(ctx)));
    } catch (err) {
      const reason = err instanceof Error ? (err.stack ?? err.message) : String(err);
      ctx.log(`\n[bench] ${suite.name} failed: ${reason}`);
      rows.push({
        suite: suite.name,
        name: `${suite.name} (suite failed)`,
        value: Number.NaN,
        unit: '',
        extra: { invalid: err instanceof Error ? err.message : String(err), suiteFailed: true },
      });
    }
  }
  return rows;
}

/** Fills in `ratio` and `met` from `baseline` and `target`. */
export function row(r: BenchRow): BenchRow {
  const out = { ...r };
  if (out.baseline && out.baseline.value > 0) out.ratio = out.value / out.baseline.value;
  if (out.target) {
    const subject = out.target.of === 'ratio' ? out.ratio : out.value;
    if (subject !== undefined) {
      out.met = out.target.op === '>=' ? subject >= out.target.value : subject <= out.target.value;
    }
  }
  return out;
}

function fmt(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  if (Math.abs(n) >= 1e6) return `${(n / 1e6).toFixed(2)}M`;
  if (Math.abs(n) >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
  return n.toFixed(n >= 100 ? 0 : 2);
}

/**
 * Why a row is no figure (`extra.invalid`: failed calls, a chain that did not start, a suite that threw),
 * on one line and short enough for a table cell; undefined for a valid row.
 */
export function invalidNote(r: BenchRow, max = 100): string | undefined {
  const why = r.extra?.invalid;
  if (why === undefined) return undefined;
  const line = String(why).split('\n')[0].trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

/** The `met` column: met / NOT MET, and for a row that is no figure, `INVALID` with the reason. */
export function verdict(r: BenchRow, notMet = 'NOT MET'): string {
  const met = r.met === undefined ? '' : r.met ? 'met' : notMet;
  const why = invalidNote(r);
  if (why === undefined) return met;
  return `${met === '' ? '' : `${met} `}INVALID: ${why}`;
}

export function table(rows: BenchRow[]): string {
  const head = ['suite', 'benchmark', 'value', 'unit', 'baseline', 'ratio', 'target', 'met'];
  const body = rows.map((r) => [
    r.suite,
    r.name,
    fmt(r.value),
    r.unit,
    r.baseline ? `${r.baseline.name} ${fmt(r.baseline.value)}` : '',
    r.ratio !== undefined ? r.ratio.toFixed(2) : '',
    r.target ? `${r.target.of} ${r.target.op} ${r.target.value}` : '',
    verdict(r),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i])).join('  ');
  return [line(head), line(widths.map((w) => '-'.repeat(w))), ...body.map(line)].join('\n');
}
