/**
 * One workload over several load-generator processes (bench/loadgen/split.ts): how it is dealt out, and
 * how their results are read back as one (rates added, latencies merged as one population).
 */
import test from 'ava';
import hdr from 'hdr-histogram-js';
import type { LoadResult, LoadSpec } from '../../bench/loadgen/spec.js';
import { MAX_LOADGENS, mergeResults, splitSpec } from '../../bench/loadgen/split.js';

const SPEC: LoadSpec = {
  target: '127.0.0.1:1',
  ops: [{ op: 'null', size: 0, weight: 1 }],
  connections: 4,
  depth: 16,
  seconds: 4,
  warmupSeconds: 1,
  idle: 0,
};

test('the connections are dealt out evenly, each keeps the whole depth, and the total stays the same', (t) => {
  const parts = splitSpec(SPEC, 3);
  t.deepEqual(
    parts.map((p) => p.connections),
    [2, 1, 1],
  );
  for (const p of parts) {
    t.is(p.depth, 16);
    t.is(p.target, SPEC.target);
    t.is(p.seconds, 4);
    t.is(p.idle, 0);
  }
  t.deepEqual(splitSpec(SPEC, 1), [SPEC], 'one generator runs the workload as it is');
  t.deepEqual(
    splitSpec(SPEC, 4).map((p) => p.connections),
    [1, 1, 1, 1],
  );
});

test('a workload gets no more generators than it has connections, nor than it has idle clients', (t) => {
  t.is(splitSpec({ ...SPEC, connections: 2 }, 8).length, 2);
  t.deepEqual(splitSpec({ ...SPEC, connections: 1 }, 8), [{ ...SPEC, connections: 1 }]);
  const idle = splitSpec({ ...SPEC, connections: 64, depth: 1, idle: 1000 }, 3);
  t.deepEqual(
    idle.map((p) => [p.connections, p.idle]),
    [
      [22, 334],
      [21, 333],
      [21, 333],
    ],
  );
  // Every generator must hold idle clients when the workload has some: only those announce the idle
  // phases at which the runner samples the server's memory.
  t.is(splitSpec({ ...SPEC, connections: 64, idle: 2 }, 8).length, 2);
});

test('a generator count outside 1..MAX_LOADGENS is refused', (t) => {
  for (const n of [0, -1, 1.5, Number.NaN, MAX_LOADGENS + 1]) {
    t.throws(
      () => splitSpec(SPEC, n),
      { instanceOf: RangeError, message: /generators must be an integer/ },
      `${n}`,
    );
  }
});

/** A generator's result whose calls all took `us` microseconds. */
function resultOf(calls: number, us: number, extra: Partial<LoadResult> = {}): LoadResult {
  const h = hdr.build({
    lowestDiscernibleValue: 1,
    highestTrackableValue: 60_000_000,
    numberOfSignificantValueDigits: 3,
  });
  h.recordValueWithCount(us, calls);
  const histogram = hdr.encodeIntoCompressedBase64(h);
  return {
    spec: { ...SPEC, connections: 2 },
    ops: calls,
    errors: 0,
    elapsedSeconds: 4,
    opsPerSec: calls / 4,
    bytesPerSec: 0,
    latencyUs: { p50: us, p90: us, p99: us, p999: us, max: us, mean: us },
    histogram,
    clientCpuSeconds: 1.5,
    generators: 1,
    ...extra,
  };
}

test('merged results add the rates and read the percentiles from one merged histogram', (t) => {
  const fast = resultOf(9000, 100, { bytesPerSec: 1000 });
  const slow = resultOf(1000, 5000, {
    errors: 2,
    firstError: 'null: reply_stat 1 accept_stat 0',
    elapsedSeconds: 4.01,
    bytesPerSec: 500,
  });
  const m = mergeResults(SPEC, [fast, slow]);
  t.is(m.spec, SPEC, 'the result is for the whole workload');
  t.is(m.generators, 2);
  t.is(m.ops, 10_000);
  t.is(m.errors, 2);
  t.is(m.firstError, 'null: reply_stat 1 accept_stat 0');
  t.is(m.opsPerSec, 9000 / 4 + 1000 / 4);
  t.is(m.bytesPerSec, 1500);
  t.is(m.clientCpuSeconds, 3);
  t.is(m.elapsedSeconds, 4.01);
  // One population: 90 % of the calls took 100 µs, so the median and p90 are 100 µs and p99 is 5 ms.
  // Averaging the generators' percentiles would give 2,550 µs for all three.
  t.true(Math.abs(m.latencyUs.p50 - 100) <= 1, `p50 ${m.latencyUs.p50}`);
  t.true(Math.abs(m.latencyUs.p90 - 100) <= 1, `p90 ${m.latencyUs.p90}`);
  t.true(Math.abs(m.latencyUs.p99 - 5000) <= 5, `p99 ${m.latencyUs.p99}`);
  t.true(Math.abs(m.latencyUs.mean - 590) <= 1, `mean ${m.latencyUs.mean}`);
  t.is(hdr.decodeFromCompressedBase64(m.histogram).totalCount, 10_000, 'the merged histogram is kept');
  t.is(mergeResults(SPEC, [fast]), fast, 'a single result is returned as it is');
  t.throws(() => mergeResults(SPEC, []), { instanceOf: RangeError });
});
