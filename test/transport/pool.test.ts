import { type AddressInfo, createServer } from 'node:net';
import test from 'ava';
import { defaultRegistry } from '../../gateway/gateway.js';
import { Responder } from '../../gateway/responder.js';
import { serveTestProgram, type TestProgramServer } from '../../gateway/test-program/index.js';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { ConnectionPool, type PoolOptions } from '../../rdma-backend/transport/index.js';
import {
  Collector,
  captureTransportLog,
  delay,
  echoServer,
  pattern,
  replyData,
  TestCall,
} from './loopback.js';

/** A pool of `size` soft-provider connections to `port` on loopback, its results in `collector`. */
async function loopbackPool(
  port: number,
  size: number,
  collector: Collector,
  extra: Partial<PoolOptions> = {},
): Promise<ConnectionPool> {
  return new ConnectionPool({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port,
    size,
    requester: collector,
    ...extra,
  });
}

test('pool: spreads calls over its connections, reports a lost connection’s calls for retransmission, reconnects', async (t) => {
  const s = await echoServer();
  const collector = new Collector();
  const pool = await loopbackPool(s.listener.port, 3, collector, { backoff: { initialMs: 10, maxMs: 100 } });
  try {
    await pool.start();
    t.is(pool.snapshot().slots.length, 3);
    for (let i = 0; i < 90; i++) pool.submit(TestCall.echo(i + 1, pattern(50 + i, i), false));
    const outs = await collector.wait(90);
    t.is(outs.filter((o) => o.error).length, 0);
    const used = pool.snapshot().slots.filter((x) => (x.connection?.counters.callsSent ?? 0) > 0).length;
    t.true(used >= 2, `calls spread over ${used} connections`);

    // Hold every call on the server, then kill one server end mid-flight.
    for (const r of s.responders) r.hold = true;
    for (let i = 0; i < 30; i++) pool.submit(TestCall.echo(1000 + i, pattern(10, i), false));
    await delay(50);
    s.conns[0].close('test kill');
    const afterKill = await collector.wait(90 + 1);
    const lost = afterKill.slice(90).filter((o) => o.error);
    t.true(lost.length >= 1);
    for (const o of lost) t.true(o.error?.retransmit);
    // The slot reconnects after its back-off; resubmitted calls complete on the live connections.
    while (pool.snapshot().ready < 3) await delay(10);
    t.is(
      pool.snapshot().slots.reduce((n, x) => n + x.reconnects, 0),
      1,
    );
    for (const r of s.responders) {
      r.hold = false;
      for (const c of r.held.splice(0)) r.answer(c);
    }
    await delay(50);
    const failed = collector.outcomes.filter((o) => o.error).map((o) => o.call);
    for (const c of failed) pool.submit(c);
    const all = await collector.wait(90 + 30 + failed.length);
    const good = new Set(all.filter((o) => o.reply).map((o) => o.call.xid));
    for (let i = 0; i < 30; i++) t.true(good.has(1000 + i), `call ${1000 + i} completed`);
    for (const o of all.filter((x) => x.reply)) {
      const i = o.call.xid >= 1000 ? o.call.xid - 1000 : o.call.xid - 1;
      t.deepEqual(replyData(o.reply as Buffer), pattern(o.call.xid >= 1000 ? 10 : 50 + i, i));
    }
  } finally {
    pool.close();
    await s.close();
  }
});

test('pool: exponential back-off while the peer is down; held calls are handed back on close', async (t) => {
  const s = await echoServer();
  const port = s.listener.port;
  await s.listener.close();
  const collector = new Collector();
  const pool = await loopbackPool(port, 1, collector, {
    backoff: { initialMs: 20, maxMs: 80, factor: 2 },
    connectTimeoutMs: 500,
  });
  try {
    await pool.start();
    pool.submit(TestCall.echo(1, Buffer.from('held'), false));
    while (pool.snapshot().slots[0].attempts < 3) await delay(10);
    const snap = pool.snapshot();
    t.is(snap.pending, 1);
    t.is(snap.slots[0].nextDelayMs, 80, 'delay doubled up to the cap');
    t.is(collector.outcomes.length, 0, 'the held call is not failed while reconnecting');
  } finally {
    pool.close();
  }
  const [o] = await collector.wait(1);
  t.true(o.error?.retransmit, 'closing the pool hands held calls back for retransmission');
});

test('pool: a parked slot closes its connection, gets no calls and does not reconnect until unparked', async (t) => {
  const s = await echoServer();
  const collector = new Collector();
  const pool = await loopbackPool(s.listener.port, 2, collector, { backoff: { initialMs: 10, maxMs: 20 } });
  t.teardown(async () => {
    pool.close();
    await s.close();
  });
  await pool.start();
  while (pool.snapshot().ready < 2) await delay(5);
  pool.park(0);
  t.true(pool.isParked(0));
  await delay(150); // many back-off periods
  const snap = pool.snapshot();
  t.is(snap.slots[0].state, 'parked');
  t.is(snap.slots[0].connection, null);
  t.is(snap.slots[0].reconnects, 0, 'parking is not a loss to recover from');
  t.is(snap.ready, 1);
  for (let i = 0; i < 10; i++) pool.submit(TestCall.echo(i + 1, pattern(20, i), false));
  const outs = await collector.wait(10);
  t.is(outs.filter((o) => o.error).length, 0);
  t.is(pool.snapshot().slots[1].connection?.counters.callsSent, 10, 'every call went to the other slot');
  pool.unpark(0);
  while (pool.snapshot().ready < 2) await delay(5);
  t.is(pool.snapshot().slots[0].state, 'ready');
  t.throws(() => pool.park(5), { instanceOf: RangeError });
});

test('pool: a peer that accepts and drops at once gets an exponential back-off, not a reconnect every initialMs', async (t) => {
  // A responder whose TCP upstream is down: it accepts each RDMA connection, then closes it.
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
  const deadPort = (probe.address() as AddressInfo).port;
  await new Promise<void>((r) => probe.close(() => r()));
  const responder = new Responder({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port: 0,
    upstream: { host: '127.0.0.1', port: deadPort },
    registry: defaultRegistry(),
  });
  const { port } = await responder.listen();
  const pool = new ConnectionPool({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port,
    size: 1,
    requester: new Collector(),
    options: { peerKey: `pool-drop-${process.pid}` },
    backoff: { initialMs: 100, maxMs: 30_000, factor: 2 },
  });
  t.teardown(async () => {
    pool.close();
    await responder.close(500);
  });
  await pool.start();
  await delay(2500);
  const slot = pool.snapshot().slots[0];
  // 100, 200, 400, 800 ms (±20 %) fit in 2.5 s: about five connections, not twenty-five.
  t.true(slot.reconnects <= 7, `${slot.reconnects} reconnects`);
  t.true(slot.nextDelayMs >= 800, `next delay ${slot.nextDelayMs} ms`);
});

test('pool: a peer that refuses is logged at attempts 1, 2, 4, 8…, and the connection that finally comes up is logged once', async (t) => {
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
  const port = (probe.address() as AddressInfo).port;
  await new Promise<void>((r) => probe.close(() => r()));
  const { lines, logger } = captureTransportLog();
  const pool = new ConnectionPool({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port,
    size: 1,
    requester: new Collector(),
    options: { peerKey: `pool-log-${process.pid}`, logger },
    backoff: { initialMs: 10, maxMs: 40, factor: 2 },
  });
  let responder: Responder | null = null;
  let program: TestProgramServer | null = null;
  t.teardown(async () => {
    pool.close();
    await responder?.close(500);
    await program?.close({ drainTimeoutMs: 0 });
  });
  await pool.start();
  while (pool.snapshot().slots[0].attempts < 10) await delay(10);
  const failures = lines.filter((l) => l.obj.code === 'ERR_TRANSPORT_CONNECT');
  t.deepEqual(
    failures.map((l) => l.obj.attempts),
    [1, 2, 4, 8],
    'a line per doubling of the attempts',
  );
  t.like(failures[0], { level: 'warn', obj: { peer: `127.0.0.1:${port}`, slot: 0 } });
  program = await serveTestProgram({ host: '127.0.0.1', port: 0 });
  responder = new Responder({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port,
    upstream: { host: '127.0.0.1', port: program.addresses[0].port },
    registry: defaultRegistry(),
  });
  await responder.listen();
  while (pool.snapshot().ready < 1) await delay(10);
  const up = lines.filter((l) => l.msg === 'RDMA connection up again');
  t.is(up.length, 1);
  t.like(up[0], { level: 'info', obj: { slot: 0 } });
  t.true((up[0].obj.attempts as number) >= 10);
});
