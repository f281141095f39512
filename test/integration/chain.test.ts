/**
 * The product end to end over real sockets: TCP clients → gateway (frontend, router, pool) → soft
 * RPC-over-RDMA → responder → TCP → the built-in test program. Every reply is verified byte for byte by the
 * test-program client (ECHO: the same random bytes; SINK: the count; SOURCE: the seeded pattern), and is
 * matched by XID on the client's own connection — a reply delivered to the wrong client or with the wrong
 * XID fails the content check or shows up as a late/unexpected reply.
 */

import { randomBytes } from 'node:crypto';
import test, { type ExecutionContext } from 'ava';
import type { Gateway } from '../../gateway/gateway.js';
import { TestProgramClient } from '../../gateway/test-program/index.js';
import { waitFor } from '../gateway/helpers.js';
import { testSeed } from '../helpers/seed.js';
import { BASELINE, gauges, prng, startTestGateway, sumCounters } from './helpers.js';

const MAX = 4 * 1024 * 1024;
/** Above every inline threshold in play (4 KiB): such data must travel in chunks. */
const BIG = 8192;

interface LoadResult {
  counts: { ECHO: number; SINK: number; SOURCE: number };
  bigSinks: number;
  bigSources: number;
  bytes: number;
  ms: number;
}

async function connectClients(g: Gateway, n: number): Promise<TestProgramClient[]> {
  const { port } = g.addresses[0];
  return Promise.all(Array.from({ length: n }, () => TestProgramClient.connect({ host: '127.0.0.1', port })));
}

/** Sizes from 0 B to 4 MiB (both edges forced), mostly small, within a byte budget. */
function sizesFor(rand: () => number, n: number, budget: number): number[] {
  const sizes: number[] = [];
  for (let i = 0; i < n; i++) {
    let size: number;
    if (i === 0) size = 0;
    else if (i === 1 || i === 2 || i === 3) size = MAX;
    else if (rand() < 1 / 40) size = 65536 + Math.floor(rand() * (MAX - 65536));
    else size = Math.floor(2 ** (rand() * 16)) - 1;
    if (size > budget) size = Math.floor(rand() * 4096);
    budget -= size;
    sizes.push(size);
  }
  return sizes;
}

async function runLoad(
  t: ExecutionContext,
  clients: TestProgramClient[],
  callsPerClient: number,
  budget: number,
): Promise<LoadResult> {
  const seed = testSeed(t, 'LOAD_SEED');
  const sizes = sizesFor(prng(seed), clients.length * callsPerClient, budget);
  const r: LoadResult = {
    counts: { ECHO: 0, SINK: 0, SOURCE: 0 },
    bigSinks: 0,
    bigSources: 0,
    bytes: 0,
    ms: 0,
  };
  const started = Date.now();
  await Promise.all(
    clients.map(async (client, c) => {
      const calls: Promise<unknown>[] = [];
      for (let k = 0; k < callsPerClient; k++) {
        const i = c * callsPerClient + k;
        const size = sizes[(i * 7919) % sizes.length];
        r.bytes += size;
        const which = (i + c) % 3;
        if (which === 0) {
          r.counts.ECHO++;
          calls.push(client.echo(randomBytes(size)));
        } else if (which === 1) {
          r.counts.SINK++;
          if (size >= BIG) r.bigSinks++;
          calls.push(client.sink(Buffer.alloc(size, i & 0xff)));
        } else {
          r.counts.SOURCE++;
          if (size >= BIG) r.bigSources++;
          calls.push(client.source(size, (seed + i) >>> 0));
        }
      }
      // Pipelined on one connection: replies come back in any order and are matched by XID.
      await Promise.all(calls);
    }),
  );
  r.ms = Date.now() - started;
  for (const c of clients) {
    t.is(c.rpc.stats.lateReplies, 0);
    t.is(c.rpc.stats.unexpectedRecords, 0);
  }
  return r;
}

function checkChunks(t: ExecutionContext, g: Gateway, r: LoadResult): void {
  // SINK data is a DDP-eligible argument: every large one went in a Read chunk, pulled with RDMA Read.
  const readChunkCalls = sumCounters(g, 'pool', 'readChunkCalls');
  t.true(readChunkCalls >= r.bigSinks, `readChunkCalls ${readChunkCalls} >= large SINKs ${r.bigSinks}`);
  t.true(readChunkCalls <= r.counts.SINK, 'only SINK calls have DDP-eligible arguments');
  t.true(sumCounters(g, 'responder', 'rdmaReads') >= r.bigSinks);
  // SOURCE data is a DDP-eligible result: RDMA Writes beyond those of Reply chunks are Write chunks.
  const writeChunkWrites =
    sumCounters(g, 'responder', 'rdmaWrites') - sumCounters(g, 'responder', 'longReplies');
  t.true(
    writeChunkWrites >= r.bigSources,
    `Write-chunk writes ${writeChunkWrites} >= large SOURCEs ${r.bigSources}`,
  );
  t.log(
    `chunks: ${readChunkCalls} calls with Read chunks (${r.bigSinks} large SINKs), ` +
      `${writeChunkWrites} Write-chunk writes (${r.bigSources} large SOURCEs), ` +
      `${sumCounters(g, 'pool', 'longCalls')} long calls, ${sumCounters(g, 'responder', 'longReplies')} long replies`,
  );
}

async function closeAll(g: Gateway, clients: TestProgramClient[]): Promise<void> {
  for (const c of clients) c.rpc.destroy();
  await g.stop(0);
}

test('hundreds of clients through one RDMA connection: ECHO, SINK, SOURCE 0 B..4 MiB, all verified', async (t) => {
  const g = await startTestGateway({ poolSize: 1 });
  const clients = await connectClients(g, 200);
  t.teardown(() => closeAll(g, clients));
  const r = await runLoad(t, clients, 4, 64 * 1024 * 1024);
  t.log(`200 clients, 800 calls, ${(r.bytes / 2 ** 20).toFixed(1)} MiB in ${r.ms} ms`);
  const calls = g.embedded?.testProgram?.handler.stats.calls;
  t.deepEqual(calls, { NULL: 0, ...r.counts });
  t.is(g.router.stats.replies, 800);
  checkChunks(t, g, r);
  await waitFor(() => g.router.stats.inFlight === 0, 'router idle');
  t.deepEqual(gauges(g), BASELINE);
  await Promise.all(clients.map((c) => c.close()));
  await waitFor(() => g.frontend.stats.connectionsOpen === 0, 'clients gone');
  t.is(g.router.snapshot().clients, 0);
});

test('the same through a pool of four RDMA connections, spread by load', async (t) => {
  const g = await startTestGateway({ poolSize: 4 });
  const clients = await connectClients(g, 120);
  t.teardown(() => closeAll(g, clients));
  const r = await runLoad(t, clients, 4, 48 * 1024 * 1024);
  t.log(`120 clients, 480 calls, ${(r.bytes / 2 ** 20).toFixed(1)} MiB in ${r.ms} ms`);
  t.is(g.router.stats.replies, 480);
  const perConnection = g.pool.snapshot().slots.map((s) => s.connection?.counters.callsSent ?? 0);
  t.log(`calls per connection: ${perConnection.join(', ')}`);
  t.is(perConnection.length, 4);
  for (const n of perConnection)
    t.true(n > 480 / 4 / 4, `every connection carried a share (${perConnection})`);
  checkChunks(t, g, r);
  await waitFor(() => g.router.stats.inFlight === 0, 'router idle');
  t.deepEqual(gauges(g), BASELINE);
});

test('a burst of calls from one read stays on one connection of the pool instead of being dealt across it', async (t) => {
  // 16 ECHOs written at once arrive in one read (two at worst): the router keeps a burst on the connection
  // its first call took (one Send batch, one socket write), where dealing each call to the least-loaded
  // connection would split it 4/4/4/4 over the idle pool.
  const g = await startTestGateway({ poolSize: 4 });
  const [client] = await connectClients(g, 1);
  t.teardown(() => closeAll(g, [client]));
  await waitFor(() => g.pool.snapshot().ready === 4, 'four connections ready');
  const sent = () => g.pool.snapshot().slots.map((s) => s.connection?.counters.callsSent ?? 0);
  const before = sent();
  const data = Buffer.alloc(64, 7);
  const replies = await Promise.all(Array.from({ length: 16 }, () => client.echo(data)));
  for (const r of replies) t.deepEqual(r, data);
  const per = sent().map((n, i) => n - before[i]);
  t.log(`calls per connection: ${per.join(', ')}`);
  t.is(
    per.reduce((a, b) => a + b, 0),
    16,
  );
  t.true(Math.max(...per) >= 8, `the burst stayed together (${per})`);
  await waitFor(() => g.router.stats.inFlight === 0, 'router idle');
  t.deepEqual(gauges(g), BASELINE);
});

test("1 MiB SOURCE replies reuse the responder's record buffers, and every one arrives intact", async (t) => {
  // The responder assembles each reply record from the upstream in a pooled buffer and takes it back
  // when the reply's RDMA Writes and Send complete. A buffer reused too early would corrupt a reply
  // still on its way: each has its own seed, and the client checks every byte against it.
  const g = await startTestGateway({ poolSize: 2 });
  const clients = await connectClients(g, 4);
  t.teardown(() => closeAll(g, clients));
  const pool = g.embedded?.responder.recordPool;
  if (!pool) throw new Error('the test gateway has no embedded responder');
  const seed = testSeed(t, 'LOAD_SEED');
  for (let round = 0; round < 6; round++) {
    await Promise.all(
      clients.flatMap((c, ci) =>
        [0, 1, 2, 3].map((k) => c.source(1024 * 1024 + ci * 8 + k, (seed + round * 64 + ci * 4 + k) >>> 0)),
      ),
    );
  }
  t.log(`record pool: ${JSON.stringify(pool.stats)}`);
  t.true(pool.stats.hits >= 16, 'later rounds reuse the buffers of earlier ones');
  t.true(pool.stats.misses <= 40, 'the pool grows only to what is in flight at once');
  t.is(pool.stats.doubleReleases, 0);
  await waitFor(() => g.router.stats.inFlight === 0, 'router idle');
  t.deepEqual(gauges(g), BASELINE);
});

test("1 MiB SOURCE replies reuse the gateway's record buffers, and every one arrives intact", async (t) => {
  // The gateway's requester registers each reply's Write chunk inside a frame from the record pool (the
  // responder's RDMA Write places the data there, placement.ts), and the frontend takes the frame back
  // once the client's socket has taken the bytes. Given back too early, a frame would be written over by
  // a later reply while still queued on a socket: each reply has its own seed, and the client checks
  // every byte.
  const g = await startTestGateway({ poolSize: 2 });
  const clients = await connectClients(g, 4);
  t.teardown(() => closeAll(g, clients));
  const pool = g.router.recordPool;
  if (!pool) throw new Error('the gateway has no record pool');
  const before = { ...pool.stats };
  const seed = testSeed(t, 'LOAD_SEED');
  for (let round = 0; round < 6; round++) {
    await Promise.all(
      clients.flatMap((c, ci) =>
        [0, 1, 2, 3].map((k) => c.source(1024 * 1024 + ci * 8 + k, (seed + round * 64 + ci * 4 + k) >>> 0)),
      ),
    );
  }
  t.log(`gateway record pool: ${JSON.stringify(pool.stats)}`);
  const hits = pool.stats.hits - before.hits;
  const returned = pool.stats.returned - before.returned;
  t.true(hits >= 16, `later rounds reuse the buffers of earlier ones (${hits} hits)`);
  t.true(returned >= 90, `every written reply goes back (${returned} of 96)`);
  t.is(pool.stats.doubleReleases, 0);
  const placed = g.pool.connections().reduce((n, c) => n + c.counters.placedBytes, 0);
  t.true(placed >= 96 * 1024 * 1024, `the Write chunk data was placed, not copied (${placed} B)`);
  await waitFor(() => g.router.stats.inFlight === 0, 'router idle');
  t.deepEqual(gauges(g), BASELINE);
});

test('4–64 KiB calls and replies reuse both record pools, and every one arrives intact', async (t) => {
  // Messages from 4 KiB up are pooled (common/buffer-pool.ts): the frontend's call records, the gateway's
  // reply frames, the responder's call and reply records. 4 clients × 48 ECHOs of distinct sizes and
  // random bytes, many at once: a buffer given back while still in use would corrupt another client's
  // reply, and every reply is checked byte for byte.
  const g = await startTestGateway({ poolSize: 2 });
  const clients = await connectClients(g, 4);
  t.teardown(() => closeAll(g, clients));
  const gw = g.router.recordPool;
  const rs = g.embedded?.responder.recordPool;
  if (!gw || !rs) throw new Error('the test gateway has no record pools');
  const before = { gw: { ...gw.stats }, rs: { ...rs.stats } };
  for (let round = 0; round < 4; round++) {
    await Promise.all(
      clients.flatMap((c, ci) =>
        Array.from({ length: 12 }, async (_, k) => {
          const data = randomBytes(4096 + (((round * 48 + ci * 12 + k) * 1237) % (60 * 1024)));
          t.true((await c.echo(data)).equals(data));
        }),
      ),
    );
  }
  t.log(`gateway record pool: ${JSON.stringify(gw.stats)}; responder: ${JSON.stringify(rs.stats)}`);
  for (const [name, pool, was] of [
    ['gateway', gw, before.gw],
    ['responder', rs, before.rs],
  ] as const) {
    const hits = pool.stats.hits - was.hits;
    t.true(hits >= 96, `${name}: later rounds reuse the buffers of earlier ones (${hits} hits)`);
    t.is(pool.stats.doubleReleases, 0, name);
  }
  await waitFor(() => g.router.stats.inFlight === 0, 'router idle');
  t.deepEqual(gauges(g), BASELINE);
});

test('small calls and replies are lent by the transport, not copied, and every one arrives intact', async (t) => {
  // The router takes small inline replies as views of the transport's receive buffers (lendLimit): the
  // frontend copies each into its write stage before the buffer is reused. 4 clients × 200 ECHOs of
  // distinct sizes and bytes, many at once, so receive buffers are reused while replies are in flight.
  const g = await startTestGateway({ poolSize: 2 });
  const clients = await connectClients(g, 4);
  t.teardown(() => closeAll(g, clients));
  const lent = () => g.pool.connections().reduce((n, c) => n + c.counters.lentReplies, 0);
  // The responder takes the small calls as views in turn (ResponderHandler.lendLimit) and copies each
  // into its upstream write stage.
  t.truthy(g.embedded, 'the chain has its responder in this process');
  const lentCalls = () =>
    (g.embedded?.responder.connections() ?? []).reduce((n, c) => n + c.counters.lentCalls, 0);
  const before = lent();
  const callsBefore = lentCalls();
  await Promise.all(
    clients.flatMap((c, ci) =>
      Array.from({ length: 200 }, async (_, k) => {
        const data = randomBytes(1 + ((ci * 200 + k) % 900));
        t.true((await c.echo(data)).equals(data));
      }),
    ),
  );
  await Promise.all(clients.map((c) => c.null()));
  t.true(lent() - before >= 804, `replies lent: ${lent() - before}`);
  t.true(lentCalls() - callsBefore >= 804, `calls lent: ${lentCalls() - callsBefore}`);
  await waitFor(() => g.router.stats.inFlight === 0, 'router idle');
  t.deepEqual(gauges(g), BASELINE);
});

test('clients that disconnect mid-call disturb no one and leak nothing', async (t) => {
  const g = await startTestGateway({ poolSize: 2 });
  const good = await connectClients(g, 20);
  const quitters = await connectClients(g, 10);
  t.teardown(() => closeAll(g, [...good, ...quitters]));
  const before = gauges(g);
  // The quitters put large calls in flight (both directions) and 8 KiB ECHOs (pooled Long Calls and
  // Replies), and vanish before the replies.
  const abandoned: Promise<unknown>[] = [];
  for (const [i, q] of quitters.entries()) {
    for (let k = 0; k < 4; k++) {
      abandoned.push(q.source(1024 * 1024, i * 10 + k).catch(() => 'gone'));
      abandoned.push(q.sink(Buffer.alloc(512 * 1024, k)).catch(() => 'gone'));
      abandoned.push(q.echo(randomBytes(8 * 1024 + k)).catch(() => 'gone'));
    }
  }
  const work = runLoad(t, good, 6, 24 * 1024 * 1024);
  await waitFor(() => g.router.stats.inFlight > 0, 'quitters in flight');
  for (const q of quitters) q.rpc.destroy();
  const r = await work;
  t.is(r.counts.ECHO + r.counts.SINK + r.counts.SOURCE, 120);
  t.true((await Promise.all(abandoned)).includes('gone'));
  await waitFor(() => g.router.stats.inFlight === 0 && g.router.stats.queued === 0, 'orphans consumed');
  const s = g.router.snapshot();
  t.log(
    `orphaned replies consumed ${s.orphanedReplies}, waiting calls dropped ${s.droppedQueued}, ` +
      `replies held for the quitters' return ${s.heldReplies} (${s.heldReplyBytes} B)`,
  );
  t.true(s.orphanedReplies + s.droppedQueued + s.departures > 0);
  t.true(s.departures <= 10, 'one departure per quitter at most');
  t.is(g.router.recordPool?.stats.doubleReleases, 0, 'no orphaned reply frame given back twice');
  t.deepEqual(gauges(g), before);
  t.deepEqual(gauges(g), BASELINE);
});

test('killing an RDMA connection under load loses no call', async (t) => {
  const g = await startTestGateway({ poolSize: 2, backoffMs: 20 });
  const clients = await connectClients(g, 60);
  t.teardown(() => closeAll(g, clients));
  const work = runLoad(t, clients, 6, 48 * 1024 * 1024);
  await waitFor(() => g.router.stats.inFlight >= 8, 'calls in flight');
  // One from the gateway's side, then one from the responder's side (as if the peer dropped it).
  g.pool.connections()[0].close('killed by the test');
  await waitFor(() => g.router.stats.retransmits > 0, 'retransmissions', 10_000);
  await waitFor(() => g.pool.snapshot().ready === 2, 'the slot reconnected', 10_000);
  g.embedded?.responder.rdmaConnections()[0]?.close('killed by the test (peer side)');
  const r = await work;
  t.is(r.counts.ECHO + r.counts.SINK + r.counts.SOURCE, 360);
  t.is(g.router.stats.replies, 360);
  t.is(g.router.stats.holdExpired, 0);
  t.is(g.router.stats.refused, 0);
  t.is(g.frontend.stats.connectionsOpen, 60, 'no client was disconnected');
  t.log(
    `retransmitted ${g.router.stats.retransmits} calls; pool reconnects ${g.pool.snapshot().slots.map((s) => s.reconnects)}`,
  );
  await waitFor(() => g.router.stats.inFlight === 0, 'router idle');
  t.deepEqual(gauges(g), BASELINE);
});

test('with rdma.softCrc off (both ends, embedded chain) calls of every kind go through intact', async (t) => {
  const g = await startTestGateway({ poolSize: 1, softCrc: false });
  const client = await TestProgramClient.connect({ host: '127.0.0.1', port: g.addresses[0].port });
  t.teardown(async () => {
    client.rpc.destroy();
    await g.stop(0);
  });
  const small = randomBytes(100);
  t.deepEqual(await client.echo(small), small);
  const big = randomBytes(3 * 1024 * 1024 + 5);
  t.deepEqual(await client.echo(big), big, 'Read chunk out, Write chunk back');
  t.is(await client.sink(big), big.length);
  const src = await client.source(2 * 1024 * 1024, 42);
  t.is(src.length, 2 * 1024 * 1024);
  t.true(sumCounters(g, 'responder', 'rdmaReads') > 0 && sumCounters(g, 'responder', 'rdmaWrites') > 0);
});
