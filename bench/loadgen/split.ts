/**
 * One workload carried by several load-generator processes (`npm run bench -- --loadgens N`), and their
 * results read as one.
 *
 * A Node.js generator is one event loop: on a host with more cores than this 2-core machine, one process
 * can top out before the chain does, and the figure would then measure the generator. Splitting the
 * workload keeps what it offers the chain the same (the same connections in total, each with the same
 * calls outstanding), so a run with N generators is compared with a run with one.
 */
import hdr from 'hdr-histogram-js';
import { latencyHistogram, summarizeLatency } from './histogram.js';
import type { LoadResult, LoadSpec } from './spec.js';

/** The most generator processes a run may ask for (`--loadgens`): more would only compete for cores. */
export const MAX_LOADGENS = 16;

/**
 * `spec` dealt out over at most `generators` specs: the connections as evenly as possible (the first
 * ones take the remainder), each with the whole `depth`, and so are the idle clients. No generator is
 * left without a connection, nor, when the workload has idle clients, without one of those: each
 * generator announces the idle phases only when it holds some, and the runner samples the server's memory
 * once every generator is there (see `spawn.ts`). So a workload gets fewer generators than asked when it
 * has fewer connections (or idle clients).
 */
export function splitSpec(spec: LoadSpec, generators: number): LoadSpec[] {
  if (!Number.isInteger(generators) || generators < 1 || generators > MAX_LOADGENS)
    throw new RangeError(`generators must be an integer in 1..${MAX_LOADGENS} (got ${generators})`);
  let n = Math.min(generators, spec.connections);
  if (spec.idle > 0) n = Math.min(n, spec.idle);
  if (n <= 1) return [spec];
  const share = (total: number, i: number) => Math.floor(total / n) + (i < total % n ? 1 : 0);
  return Array.from({ length: n }, (_, i) => ({
    ...spec,
    connections: share(spec.connections, i),
    idle: share(spec.idle, i),
  }));
}

/**
 * The results of the generators that carried `spec` together, as one result for `spec`. Their measured
 * windows open and close together (the runner releases them at each phase at once), so the rates add up
 * and the latencies are one population: the histograms are merged, and the percentiles are read from the
 * merged histogram, not averaged.
 */
export function mergeResults(spec: LoadSpec, results: readonly LoadResult[]): LoadResult {
  if (results.length === 0) throw new RangeError('no load-generator result to merge');
  if (results.length === 1) return results[0];
  const merged = latencyHistogram();
  let ops = 0;
  let errors = 0;
  let opsPerSec = 0;
  let bytesPerSec = 0;
  let clientCpuSeconds = 0;
  let elapsedSeconds = 0;
  let firstError: string | undefined;
  let generators = 0;
  for (const r of results) {
    ops += r.ops;
    errors += r.errors;
    opsPerSec += r.opsPerSec;
    bytesPerSec += r.bytesPerSec;
    clientCpuSeconds += r.clientCpuSeconds;
    elapsedSeconds = Math.max(elapsedSeconds, r.elapsedSeconds);
    firstError ??= r.firstError;
    generators += r.generators;
    const h = hdr.decodeFromCompressedBase64(r.histogram);
    merged.add(h);
    h.destroy();
  }
  return {
    spec,
    ops,
    errors,
    firstError,
    elapsedSeconds,
    opsPerSec,
    bytesPerSec,
    latencyUs: summarizeLatency(merged),
    histogram: hdr.encodeIntoCompressedBase64(merged),
    clientCpuSeconds,
    generators,
  };
}
