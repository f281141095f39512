/**
 * The load generator process (bench/loadgen/main.ts, started by spawn.ts) against the real test-program
 * server: it names the edges of its measured window and waits for the runner at each, so that the
 * chain's processes are sampled over exactly the calls the result counts.
 */

import test from 'ava';
import { type LoadPhase, runLoadgen, runLoadgens } from '../../bench/loadgen/spawn.js';
import type { LoadSpec } from '../../bench/loadgen/spec.js';
import { splitSpec } from '../../bench/loadgen/split.js';
import { serveTestProgram } from '../../gateway/test-program/server.js';
import { freePort } from '../helpers/ports.js';

/** NULL calls to `port` on loopback: 0.4 s measured after 0.1 s, no idle clients, unless `o` says otherwise. */

/**
 * A measured window of `seconds` honoured: never shorter (a timer does not fire early; 10 ms for rounding),
 * and longer only by what a busy process adds to the timer that ends it, well short of the warm-up's 0.9 s
 * that a window counted from the generator's start would add (the second test).
 */
function honoured(elapsedSeconds: number, seconds: number): boolean {
  return elapsedSeconds >= seconds - 0.01 && elapsedSeconds < seconds + 0.6;
}
function nullLoad(port: number, o: Partial<LoadSpec>): LoadSpec {
  return {
    target: `127.0.0.1:${port}`,
    ops: [{ op: 'null', size: 0, weight: 1 }],
    connections: 1,
    depth: 1,
    seconds: 0.4,
    warmupSeconds: 0.1,
    idle: 0,
    ...o,
  };
}

test('the load generator waits for the runner at both edges of its measured window, whose calls are the ones it counts', async (t) => {
  const server = await serveTestProgram();
  t.teardown(() => server.close({ drainTimeoutMs: 0 }));
  const stats = server.frontend.stats;
  const phases: LoadPhase[] = [];
  let repliesAtStart = 0;
  let repliesAtEnd = 0;
  let openDuringEndHold = -1;
  const result = await runLoadgen(
    nullLoad(server.addresses[0].port, { connections: 2, depth: 2 }),
    async (phase) => {
      phases.push(phase);
      if (phase === 'measure-start') repliesAtStart = stats.recordsOut;
      if (phase === 'measure-end') {
        repliesAtEnd = stats.recordsOut;
        // Held here, the generator must keep its connections (and its calls) until we answer.
        await new Promise((r) => setTimeout(r, 200));
        openDuringEndHold = stats.connectionsOpen;
      }
    },
  );
  t.deepEqual(phases, ['measure-start', 'measure-end']);
  t.is(openDuringEndHold, 2, 'the connections stay open until the runner has sampled the end');
  t.is(result.errors, 0, result.firstError);
  t.true(result.ops > 50, `${result.ops} calls`);
  // The server's replies between the two samples are the calls the result counts, give or take what the
  // calls outstanding did while each phase line and its answer crossed (a millisecond or so at each
  // edge). Sampled over the generator's whole life instead, the warm-up's calls would add a fifth.
  const served = repliesAtEnd - repliesAtStart;
  const slack = Math.max(40, result.ops * 0.03);
  t.true(Math.abs(served - result.ops) <= slack, `server replied ${served}, the result counts ${result.ops}`);
  t.true(honoured(result.elapsedSeconds, 0.4), `${result.elapsedSeconds} s`);
});

test('a load generator that cannot reach its target fails with the reason, before any measured window', async (t) => {
  // A port that was free a moment ago: nothing listens on it.
  const port = await freePort();
  const phases: LoadPhase[] = [];
  const err = await t.throwsAsync(
    runLoadgen(nullLoad(port, { seconds: 0.2, warmupSeconds: 0 }), (phase) => {
      phases.push(phase);
    }),
  );
  t.regex(err?.message ?? '', /load generator exited 1: .*ECONNREFUSED/s);
  t.deepEqual(phases, [], 'no window was opened, so the runner sampled nothing');
});

test('several generators carry one workload: each phase reaches the runner once, when all are there, and the result counts all their calls', async (t) => {
  const server = await serveTestProgram();
  t.teardown(() => server.close({ drainTimeoutMs: 0 }));
  const stats = server.frontend.stats;
  const spec = nullLoad(server.addresses[0].port, { connections: 4, depth: 2 });
  const phases: LoadPhase[] = [];
  let openAtStart = -1;
  let openDuringEndHold = -1;
  let repliesAtStart = 0;
  let repliesAtEnd = 0;
  // The second generator warms up longer: the window may open only once it is there too.
  const [first, second] = splitSpec(spec, 2);
  const started = Date.now();
  let windowOpenedAfter = -1;
  const result = await runLoadgens(spec, [first, { ...second, warmupSeconds: 0.9 }], async (phase) => {
    phases.push(phase);
    if (phase === 'measure-start') {
      windowOpenedAfter = Date.now() - started;
      openAtStart = stats.connectionsOpen;
      repliesAtStart = stats.recordsOut;
    }
    if (phase === 'measure-end') {
      repliesAtEnd = stats.recordsOut;
      await new Promise((r) => setTimeout(r, 200));
      openDuringEndHold = stats.connectionsOpen;
    }
  });
  t.deepEqual(phases, ['measure-start', 'measure-end'], 'one barrier per phase, not one call per generator');
  t.true(
    windowOpenedAfter >= 850,
    `the window opened ${windowOpenedAfter} ms in, before the slower generator`,
  );
  t.true(honoured(result.elapsedSeconds, 0.4), `${result.elapsedSeconds} s: the windows coincide`);
  t.is(openAtStart, 4, 'both generators had their connections open when the window opened');
  t.is(openDuringEndHold, 4, 'and both held them until the runner had sampled the end');
  t.is(result.generators, 2);
  t.is(result.spec, spec);
  t.is(result.errors, 0, result.firstError);
  const served = repliesAtEnd - repliesAtStart;
  const slack = Math.max(60, result.ops * 0.04);
  t.true(Math.abs(served - result.ops) <= slack, `server replied ${served}, the result counts ${result.ops}`);
  t.true(Math.abs(result.opsPerSec - result.ops / result.elapsedSeconds) <= result.opsPerSec * 0.05);
});

test('when one of several generators fails, the others are stopped at once and the run fails with its reason', async (t) => {
  const server = await serveTestProgram();
  t.teardown(() => server.close({ drainTimeoutMs: 0 }));
  const deadPort = await freePort();
  // Long enough that the healthy generator could only end by being stopped.
  const base = nullLoad(server.addresses[0].port, { connections: 2, seconds: 60, warmupSeconds: 0.2 });
  const phases: LoadPhase[] = [];
  const started = Date.now();
  const err = await t.throwsAsync(
    runLoadgens(base, [base, nullLoad(deadPort, { connections: 2 })], (phase) => {
      phases.push(phase);
    }),
  );
  t.regex(err?.message ?? '', /^load generator 2 of 2 exited 1: .*ECONNREFUSED/s);
  t.deepEqual(phases, [], 'the healthy generator waited at the window and the runner sampled nothing');
  t.true(Date.now() - started < 20_000, `failed after ${Date.now() - started} ms`);
  // The healthy generator was killed, so its connections go.
  const deadline = Date.now() + 5000;
  while (server.frontend.stats.connectionsOpen > 0 && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 50));
  t.is(server.frontend.stats.connectionsOpen, 0);
});

test('with idle clients split among generators, the memory samples see all the idle clients and none of the busy ones', async (t) => {
  const server = await serveTestProgram();
  t.teardown(() => server.close({ drainTimeoutMs: 0 }));
  const stats = server.frontend.stats;
  // A window of 0.5 s, not less: a call counts as lost once it has waited half the window (and twice the
  // slowest reply), and a CI machine running other suites beside this one can stall a process 100 ms.
  const spec = nullLoad(server.addresses[0].port, { connections: 2, seconds: 0.5, idle: 6 });
  const open: Partial<Record<LoadPhase, number>> = {};
  const result = await runLoadgens(spec, splitSpec(spec, 2), (phase) => {
    open[phase] = stats.connectionsOpen;
  });
  t.deepEqual(open, { 'idle-start': 0, 'idle-ready': 6, 'measure-start': 8, 'measure-end': 8 });
  t.is(result.generators, 2);
  t.is(result.errors, 0, result.firstError);
});
