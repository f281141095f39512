/**
 * Fair scheduling when credits are short: one client keeps 64 large SINK calls outstanding while nine
 * clients make light calls one at a time, through one RDMA connection with a grant of 4 credits. With the
 * deficit round robin of the router, a light call waits for at most about one credit turn per busy client,
 * not behind the flood's queue.
 *
 * Stated bound, counted rather than timed (latencies on 2 shared cores swing with whatever else runs): while
 * a light call waits, at most 16 flood calls complete (p95) — a quarter of the flood's 64-call pipeline.
 * A scheduler that serves the flooding client's queue first fails it: a light call then waits behind the
 * whole flood, ~60 flood completions (tried). Latencies are logged for the reader.
 */
import test from 'ava';
import { TestProgramClient } from '../../gateway/test-program/index.js';
import { startTestGateway } from './helpers.js';

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

test('one flooding client does not starve nine light clients under a small credit grant', async (t) => {
  const g = await startTestGateway({ poolSize: 1, credits: 4, grant: 4 });
  const { port } = g.addresses[0];
  const flood = await TestProgramClient.connect({ host: '127.0.0.1', port, maxInFlight: 64 });
  const light = await Promise.all(
    Array.from({ length: 9 }, () => TestProgramClient.connect({ host: '127.0.0.1', port })),
  );
  t.teardown(async () => {
    flood.rpc.destroy();
    for (const c of light) c.rpc.destroy();
    await g.stop(0);
  });
  t.is(g.pool.connections()[0].credits.limit, 4, 'the connection runs on 4 credits');

  let flooding = true;
  const floodLatencies: number[] = [];
  let floodCompleted = 0;
  const payload = Buffer.alloc(256 * 1024, 0x5a);
  const floodLoop = async () => {
    const one = async () => {
      while (flooding) {
        const start = performance.now();
        await flood.sink(payload);
        floodCompleted++;
        floodLatencies.push(performance.now() - start);
      }
    };
    await Promise.all(Array.from({ length: 64 }, one));
  };
  const floodDone = floodLoop();
  // Let the flood fill its pipeline before measuring.
  await new Promise((r) => setTimeout(r, 300));

  const lightLatencies: number[] = [];
  /** Per light call: how many flood calls completed while it waited (how far the flood overtook it). */
  const overtaken: number[] = [];
  const data = Buffer.alloc(64, 1);
  await Promise.all(
    light.map(async (c) => {
      for (let i = 0; i < 20; i++) {
        const start = performance.now();
        const floodBefore = floodCompleted;
        await c.echo(data);
        lightLatencies.push(performance.now() - start);
        overtaken.push(floodCompleted - floodBefore);
        await new Promise((r) => setTimeout(r, 5));
      }
    }),
  );
  flooding = false;
  await floodDone;

  floodLatencies.sort((a, b) => a - b);
  lightLatencies.sort((a, b) => a - b);
  overtaken.sort((a, b) => a - b);
  const overtakenP95 = percentile(overtaken, 95);
  const floodP50 = percentile(floodLatencies, 50);
  const lightP50 = percentile(lightLatencies, 50);
  const lightP95 = percentile(lightLatencies, 95);
  t.log(
    `flood: ${floodLatencies.length} SINKs of 256 KiB, p50 ${floodP50.toFixed(1)} ms; ` +
      `light: ${lightLatencies.length} ECHOs, p50 ${lightP50.toFixed(1)} ms, p95 ${lightP95.toFixed(1)} ms, ` +
      `max ${lightLatencies[lightLatencies.length - 1].toFixed(1)} ms; ` +
      `flood calls completed during a light call: p95 ${overtakenP95}, max ${overtaken[overtaken.length - 1]}`,
  );
  t.is(lightLatencies.length, 180);
  t.true(floodLatencies.length >= 64, 'the flood kept its pipeline full');
  t.true(
    overtakenP95 <= 16,
    `a light call waits for at most a quarter of the flood's 64-call pipeline (p95 ${overtakenP95} flood calls)`,
  );
});
