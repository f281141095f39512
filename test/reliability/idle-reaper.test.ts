/**
 * The responder's idle reaper (`responder.idleTimeoutMs`) under a real gateway, with calls landing at
 * random moments around the reaps. A call that reaches a connection as it is reaped never reached the
 * upstream: the gateway resends it on a new connection (RFC 8166 §3.3.1 lets a requester retransmit on a
 * new connection), so every call completes with its bytes, nothing stays in flight, and the reconnect churn
 * leaves no memory behind on either side. Seeds are logged; replay one with FAULT_SEED=N.
 */
import test from 'ava';
import { defaultRegistry } from '../../gateway/gateway.js';
import { Responder } from '../../gateway/responder.js';
import { serveTestProgram, TestProgramClient } from '../../gateway/test-program/index.js';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { waitFor } from '../gateway/helpers.js';
import { testSeed } from '../helpers/seed.js';
import { BASELINE, gauges, settledGauges, startTestGateway } from '../integration/helpers.js';
import { heapAfterGc, prng, sleep } from './fuzz-kit.js';

const IDLE_MS = 100;
const CLIENTS = 3;
const CALLS = 20;

test('calls at random moments around the reaps all complete with their bytes; the churn leaks nothing', async (t) => {
  const seed = testSeed(t, 'FAULT_SEED');
  const rand = prng(seed);
  const program = await serveTestProgram({ host: '127.0.0.1', port: 0 });
  const responder = new Responder({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port: 0,
    upstream: { host: '127.0.0.1', port: program.addresses[0].port },
    registry: defaultRegistry(),
    idleTimeoutMs: IDLE_MS,
  });
  const { port } = await responder.listen();
  const g = await startTestGateway({ poolSize: 2, peer: { host: '127.0.0.1', port }, backoffMs: 20 });
  const clients: TestProgramClient[] = [];
  t.teardown(async () => {
    for (const c of clients) await c.rpc.close();
    await g.stop(1000);
    await responder.close(1000);
    await program.close({ drainTimeoutMs: 0 });
  });
  for (let i = 0; i < CLIENTS; i++) {
    clients.push(
      await TestProgramClient.connect({
        host: g.addresses[0].host,
        port: g.addresses[0].port,
        callTimeoutMs: 20_000,
      }),
    );
  }
  /**
   * Both pool connections up and no other link at the responder: memory is compared between two moments in
   * this same state (a connection being replaced holds its slabs meanwhile). Everything runs on this
   * event loop, so the state holds through the synchronous measurement that follows.
   */
  const steady = () =>
    waitFor(
      () =>
        g.pool.snapshot().ready === 2 &&
        responder.links.size === 2 &&
        responder.rdmaConnections().length === 2,
      'both pool connections up, nothing else at the responder',
    );
  // Gaps from nothing to four idle periods: some calls land on a connection just reaped or about to be,
  // most on fresh ones.
  let wrong = 0;
  const run = () =>
    Promise.all(
      clients.map(async (c) => {
        for (let n = 0; n < CALLS; n++) {
          await sleep(Math.floor(rand() * 4 * IDLE_MS));
          const bytes = Buffer.alloc(1 + Math.floor(rand() * 3000), Math.floor(rand() * 256));
          if (!(await c.echo(bytes)).equals(bytes)) wrong++;
        }
      }),
    );
  // A first run warms everything up (compiled code, pools grown to this load); the second is measured.
  await run();
  await steady();
  const heapBefore = heapAfterGc();
  const buffersBefore = process.memoryUsage().arrayBuffers;
  const reapedBefore = responder.stats.idleClosed;
  const resentBefore = g.router.snapshot().retransmits;
  await run();
  t.is(wrong, 0);
  const reaped = responder.stats.idleClosed - reapedBefore;
  t.true(reaped >= 4, `${reaped} connections reaped during the run`);
  t.log(
    `seed ${seed}: ${reaped} reaps, ${g.router.snapshot().retransmits - resentBefore} calls resent by the gateway`,
  );

  t.deepEqual(await settledGauges(g), { ...gauges(g), ...BASELINE });
  t.is(responder.stats.pending, 0);
  // Per reap: what the gateway's closed pool connection and the responder's closed link leave behind. A
  // closed connection still referenced somewhere would hold its transport's slabs, about 600 KiB of
  // buffers and 50 KiB of heap (test/reliability/connection-memory.test.ts); the heap also takes code
  // compiled for paths first run in the measured half (a resend), up to about 60 KiB per reap here.
  await steady();
  const heapPerReap = (heapAfterGc() - heapBefore) / reaped;
  const buffersPerReap = (process.memoryUsage().arrayBuffers - buffersBefore) / reaped;
  t.log(`per reap: ${Math.round(heapPerReap)} bytes of heap, ${Math.round(buffersPerReap)} of buffers`);
  t.true(heapPerReap < 128 * 1024, `${heapPerReap} bytes of heap per reap`);
  t.true(buffersPerReap < 256 * 1024, `${buffersPerReap} buffer bytes per reap`);
});
