/**
 * The load generator process (bench/loadgen/main.ts, started by spawn.ts) against the real test-program
 * server: it names the edges of its measured window and waits for the runner at each, so that the
 * chain's processes are sampled over exactly the calls the result counts.
 */

import test from 'ava';
import { type LoadPhase, runLoadgen } from '../../bench/loadgen/spawn.js';
import { serveTestProgram } from '../../gateway/test-program/server.js';
import { freePort } from '../helpers/ports.js';

test('the load generator waits for the runner at both edges of its measured window, whose calls are the ones it counts', async (t) => {
  const server = await serveTestProgram();
  t.teardown(() => server.close({ drainTimeoutMs: 0 }));
  const stats = server.frontend.stats;
  const phases: LoadPhase[] = [];
  let repliesAtStart = 0;
  let repliesAtEnd = 0;
  let openDuringEndHold = -1;
  const result = await runLoadgen(
    {
      target: `127.0.0.1:${server.addresses[0].port}`,
      ops: [{ op: 'null', size: 0, weight: 1 }],
      connections: 2,
      depth: 2,
      seconds: 0.4,
      warmupSeconds: 0.1,
      idle: 0,
    },
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
  t.is(result.errors, 0);
  t.true(result.ops > 50, `${result.ops} calls`);
  // The server's replies between the two samples are the calls the result counts, give or take what the
  // calls outstanding did while each phase line and its answer crossed (a millisecond or so at each
  // edge). Sampled over the generator's whole life instead, the warm-up's calls would add a fifth.
  const served = repliesAtEnd - repliesAtStart;
  const slack = Math.max(40, result.ops * 0.03);
  t.true(Math.abs(served - result.ops) <= slack, `server replied ${served}, the result counts ${result.ops}`);
  t.true(Math.abs(result.elapsedSeconds - 0.4) < 0.1, `${result.elapsedSeconds} s`);
});

test('a load generator that cannot reach its target fails with the reason, before any measured window', async (t) => {
  // A port that was free a moment ago: nothing listens on it.
  const port = await freePort();
  const phases: LoadPhase[] = [];
  const err = await t.throwsAsync(
    runLoadgen(
      {
        target: `127.0.0.1:${port}`,
        ops: [{ op: 'null', size: 0, weight: 1 }],
        connections: 1,
        depth: 1,
        seconds: 0.2,
        warmupSeconds: 0,
        idle: 0,
      },
      (phase) => {
        phases.push(phase);
      },
    ),
  );
  t.regex(err?.message ?? '', /load generator exited 1: .*ECONNREFUSED/s);
  t.deepEqual(phases, [], 'no window was opened, so the runner sampled nothing');
});
