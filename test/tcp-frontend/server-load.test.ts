/**
 * The frontend under load and under a misbehaving client, with the real test program behind it.
 */

import { randomBytes } from 'node:crypto';
import test from 'ava';
import { encodeSourceArgs } from '../../gateway/test-program/codec.js';
import { TEST_PROGRAM, TEST_VERSION, TestProc } from '../../gateway/test-program/constants.js';
import { TestProgramClient } from '../../gateway/test-program/index.js';
import { serveTestProgram } from '../../gateway/test-program/server.js';
import { connectRaw, framedCall, waitFor } from '../gateway/helpers.js';
import { testSeed } from '../helpers/seed.js';

/** mulberry32: a small seeded PRNG so a failing run can be replayed from its logged seed. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 0x1_0000_0000;
  };
}

const MAX = 4 * 1024 * 1024;

test('hundreds of concurrent clients: ECHO, SINK and SOURCE of 0 B to 4 MiB, every byte verified', async (t) => {
  const seed = testSeed(t, 'LOAD_SEED');
  const rand = prng(seed);
  const server = await serveTestProgram();
  const { port } = server.addresses[0];
  const CLIENTS = 200;
  const CALLS_PER_CLIENT = 4;
  // Sizes: mostly log-uniform up to 64 KiB, one call in 40 from 64 KiB to 4 MiB, and the edges 0 and
  // 4 MiB exactly, with a byte budget that keeps the run to seconds on two shared cores.
  let budget = 96 * 1024 * 1024;
  const sizes: number[] = [];
  for (let i = 0; i < CLIENTS * CALLS_PER_CLIENT; i++) {
    let size: number;
    if (i === 0) size = 0;
    else if (i === 1 || i === 2 || i === 3) size = MAX;
    else if (rand() < 1 / 40) size = 65536 + Math.floor(rand() * (MAX - 65536));
    else size = Math.floor(2 ** (rand() * 16)) - 1;
    if (size > budget) size = Math.floor(rand() * 4096);
    budget -= size;
    sizes.push(size);
  }
  const clients = await Promise.all(
    Array.from({ length: CLIENTS }, () => TestProgramClient.connect({ host: '127.0.0.1', port })),
  );
  t.teardown(() => {
    for (const c of clients) c.rpc.destroy();
    return server.close({ drainTimeoutMs: 0 });
  });
  await waitFor(() => server.frontend.stats.connectionsAccepted === CLIENTS, 'every connection accepted');
  const counts = { ECHO: 0, SINK: 0, SOURCE: 0 };
  let bytes = 0;
  const started = Date.now();
  await Promise.all(
    clients.map(async (client, c) => {
      const calls: Promise<unknown>[] = [];
      for (let k = 0; k < CALLS_PER_CLIENT; k++) {
        const i = c * CALLS_PER_CLIENT + k;
        const size = sizes[(i * 7919) % sizes.length];
        bytes += size;
        const which = (i + c) % 3;
        if (which === 0) {
          counts.ECHO++;
          calls.push(client.echo(randomBytes(size)));
        } else if (which === 1) {
          counts.SINK++;
          calls.push(client.sink(Buffer.alloc(size, i & 0xff)));
        } else {
          counts.SOURCE++;
          calls.push(client.source(size, (seed + i) >>> 0));
        }
      }
      // Pipelined on one connection: replies come back in any order and are matched by XID.
      await Promise.all(calls);
    }),
  );
  const ms = Date.now() - started;
  t.log(
    `${CLIENTS} clients, ${CLIENTS * CALLS_PER_CLIENT} calls, ${(bytes / 2 ** 20).toFixed(1)} MiB in ${ms} ms`,
  );
  t.deepEqual(server.handler.stats.calls, { NULL: 0, ...counts });
  t.deepEqual(server.handler.stats.errorReplies, {});
  await Promise.all(clients.map((c) => c.close()));
  await waitFor(() => server.frontend.stats.connectionsOpen === 0, 'every connection to close');
  t.is(server.frontend.stats.callsInFlight, 0);
  t.deepEqual(server.frontend.stats.errors, {});
  t.deepEqual(server.frontend.stats.closes, { CLOSED_BY_CLIENT: CLIENTS });
  await server.close();
});

test('a client that never reads its replies blocks only itself, and the server buffers a bounded amount', async (t) => {
  const server = await serveTestProgram();
  const { port } = server.addresses[0];
  // 200 SOURCE calls of 1 MiB in one write, and never a read: 200 MiB of replies nobody takes.
  const hog = await connectRaw(port);
  t.teardown(() => {
    hog.destroy();
    return server.close({ drainTimeoutMs: 0 });
  });
  hog.pause();
  const calls: Buffer[] = [];
  for (let i = 0; i < 200; i++) {
    calls.push(framedCall(i, TEST_PROGRAM, TEST_VERSION, TestProc.SOURCE, encodeSourceArgs(1024 * 1024, i)));
  }
  hog.write(Buffer.concat(calls));
  await waitFor(() => server.frontend.stats.connectionsWriteBlocked === 1, 'the hog to stop draining');
  const [hogConn] = server.frontend.connections;
  t.true(hogConn.writeBlocked);
  t.true(hogConn.readPaused);
  // Others are served normally while the hog's replies sit unread.
  const others = await Promise.all(
    Array.from({ length: 20 }, () => TestProgramClient.connect({ host: '127.0.0.1', port })),
  );
  const started = Date.now();
  await Promise.all(others.map((c, i) => Promise.all([c.echo(randomBytes(1000 + i)), c.source(100_000, i)])));
  const ms = Date.now() - started;
  // Starved behind the hog, they would never be answered (its replies are never read): the bound only
  // keeps that from running to the test timeout, with room for a loaded machine.
  t.true(ms < 15_000, `others answered in ${ms} ms`);
  await new Promise((r) => setTimeout(r, 100));
  // Dispatching stops once the socket stops draining: only a few of the 200 replies were produced.
  t.true(
    server.handler.stats.calls.SOURCE - 20 < 10,
    `${server.handler.stats.calls.SOURCE - 20} hog calls served`,
  );
  t.true(hogConn.bytesOut < 16 * 1024 * 1024, `${hogConn.bytesOut} bytes queued for the hog`);
  hog.destroy();
  await Promise.all(others.map((c) => c.close()));
  await waitFor(() => server.frontend.stats.connectionsOpen === 0, 'every connection to close');
  t.is(server.frontend.stats.callsInFlight, 0);
  t.is(server.frontend.stats.connectionsWriteBlocked, 0);
  await server.close();
});
