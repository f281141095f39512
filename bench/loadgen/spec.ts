/**
 * What one load-generator run does and what it reports. Shared by the load generator process
 * (`loadgen/main.ts`) and the scenario runner that starts it, so both sides agree on the JSON.
 */

/** A procedure of the test program with its payload size (bytes; ignored by NULL). */
export type OpKind = 'null' | 'echo' | 'sink' | 'source';

export interface OpSpec {
  op: OpKind;
  size: number;
  /** Relative weight in a mixed workload (the ops are interleaved deterministically by weight). */
  weight: number;
}

export interface LoadSpec {
  /** `HOST:PORT` of any ONC RPC over TCP endpoint serving the test program. */
  target: string;
  ops: OpSpec[];
  /** TCP connections carrying the load. */
  connections: number;
  /** Calls outstanding on each connection. */
  depth: number;
  /** Seconds measured, after `warmupSeconds` not measured. */
  seconds: number;
  warmupSeconds: number;
  /**
   * Connections opened before the measurement that each make one NULL call and then stay idle; a
   * process of their own holds them (idle.ts), not the busy generator's loop. When
   * above zero the generator prints `idle-start` on stderr before opening them and `idle-ready` once they
   * are open (each time waiting for a line on stdin), so that the runner can sample the server's memory
   * right before and right after; then it starts the busy load.
   */
  idle: number;
}

export interface LatencySummary {
  /** Microseconds. */
  p50: number;
  p90: number;
  p99: number;
  p999: number;
  max: number;
  mean: number;
}

export interface LoadResult {
  spec: LoadSpec;
  ops: number;
  errors: number;
  firstError?: string;
  elapsedSeconds: number;
  opsPerSec: number;
  /** Payload bytes moved per second, both directions (the ECHO data counts once each way). */
  bytesPerSec: number;
  latencyUs: LatencySummary;
  /** The latency histogram, HdrHistogram compressed base64, to merge several generators' results. */
  histogram: string;
  /** CPU seconds (user + system) of the generator processes during the measurement. */
  clientCpuSeconds: number;
  /** How many generator processes carried the load (`--loadgens`, split.ts). */
  generators: number;
}

/** Payload bytes one op moves (both directions). */
export function payloadBytes(op: OpSpec): number {
  if (op.op === 'null') return 0;
  return op.op === 'echo' ? 2 * op.size : op.size;
}

export function describeOps(ops: readonly OpSpec[]): string {
  const name = (o: OpSpec) =>
    o.op === 'null'
      ? 'NULL'
      : `${o.op.toUpperCase()} ${o.size >= 1 << 20 ? `${o.size >> 20}MiB` : `${o.size >> 10}KiB`}`;
  if (ops.length === 1) return name(ops[0]);
  const total = ops.reduce((s, o) => s + o.weight, 0);
  return ops.map((o) => `${Math.round((100 * o.weight) / total)}% ${name(o)}`).join(' + ');
}

/**
 * A deterministic interleaving of `items` by integer `weights` (smooth weighted round robin): 7 and 3 give
 * 10 entries, 7 of the first and 3 of the second, spread rather than bunched.
 */
export function schedule<T>(items: readonly T[], weights: readonly number[]): T[] {
  const out: T[] = [];
  const total = weights.reduce((s, w) => s + w, 0);
  const credit = weights.map(() => 0);
  for (let i = 0; i < total; i++) {
    let best = 0;
    for (let k = 0; k < items.length; k++) {
      credit[k] += weights[k];
      if (credit[k] > credit[best]) best = k;
    }
    credit[best] -= total;
    out.push(items[best]);
  }
  return out;
}
