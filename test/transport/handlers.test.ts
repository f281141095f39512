/**
 * User handlers that throw (responder onCall, requester onReply / onFailed / locateResult) never become
 * an uncaught exception (ava fails a test file on one) and never stop completion processing: each is
 * logged (structured, with the handler and the XID), counted in `handlerErrors`, and only the call it
 * concerns is affected. Plus the two hooks for the gateway: `onAbandoned` and the pool's `onReady`.
 */
import test, { type ExecutionContext } from 'ava';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import {
  ConnectionPool,
  type RpcRdmaConnection,
  type TransportCall,
  type TransportLogger,
} from '../../rdma-backend/transport/index.js';
import { Collector, delay, echoServer, loopback, pattern, replyData, TestCall } from './loopback.js';

class CapturingLogger implements TransportLogger {
  readonly lines: Record<string, unknown>[] = [];
  warn(obj: Record<string, unknown>): void {
    this.lines.push(obj);
  }
}

async function throwsBeforeAnswering(t: ExecutionContext, lendLimit: number) {
  const log = new CapturingLogger();
  const lb = await loopback({ server: { logger: log } });
  lb.responder.lendLimit = lendLimit;
  try {
    lb.responder.override = (call) => {
      if (call.xid === 7) throw new Error('upper layer bug');
      return false;
    };
    lb.client.submit(TestCall.echo(7, pattern(100, 1), false));
    lb.client.submit(TestCall.echo(8, pattern(100, 2), false));
    const outs = await lb.collector.wait(2);
    const bad = outs.find((o) => o.call.xid === 7);
    const good = outs.find((o) => o.call.xid === 8);
    t.is(bad?.error?.code, 'ERR_TRANSPORT_PEER_SYSTEM');
    t.false(bad?.error?.retransmit);
    t.deepEqual(replyData(good?.reply as Buffer), pattern(100, 2));
    t.is(lb.server.counters.handlerErrors, 1);
    t.is(log.lines.length, 1);
    t.like(log.lines[0], { code: 'ERR_TRANSPORT_HANDLER_THREW', handler: 'onCall', xid: 7, answered: false });
    t.is((log.lines[0].err as { message: string }).message, 'upper layer bug');
    t.is(lb.server.state, 'ready');
    lb.client.submit(TestCall.echo(9, pattern(5000, 3)));
    const [, , after] = await lb.collector.wait(3);
    t.deepEqual(replyData(after.reply as Buffer), pattern(5000, 3));
    // Lent or not, the call that threw holds no view of a Receive reposted since.
    t.is(lb.server.counters.lentCalls, lendLimit > 0 ? 2 : 0);
    if (lendLimit > 0) t.is(lb.responder.received[0].message.length, 0);
  } finally {
    await lb.close();
  }
}

test('responder onCall throws before answering: that call fails with RDMA2_ERR_SYSTEM, logged and counted, the connection serves on', (t) =>
  throwsBeforeAnswering(t, 0));

test('responder onCall throws before answering a call lent to it (lendLimit): the same, and the view is gone', (t) =>
  throwsBeforeAnswering(t, 1000));

test('responder onCall throws after answering: the reply stands, nothing else is sent', async (t) => {
  const log = new CapturingLogger();
  const lb = await loopback({ server: { logger: log } });
  try {
    lb.responder.override = (call) => {
      lb.responder.override = null;
      lb.responder.answer(call);
      throw new Error('after the reply');
    };
    lb.client.submit(TestCall.echo(1, pattern(10, 1), false));
    const [o] = await lb.collector.wait(1);
    t.deepEqual(replyData(o.reply as Buffer), pattern(10, 1));
    await delay(20);
    t.is(lb.server.counters.errorsSent, 0);
    t.like(log.lines[0], { handler: 'onCall', answered: true });
  } finally {
    await lb.close();
  }
});

test('requester onReply / locateResult throwing affects only its own call', async (t) => {
  const log = new CapturingLogger();
  const lb = await loopback({ client: { logger: log } });
  try {
    const origReply = lb.collector.onReply.bind(lb.collector);
    lb.collector.onReply = (call, reply) => {
      origReply(call, reply);
      if (call.xid === 2) throw new Error('onReply bug');
    };
    (lb.collector as unknown as { locateResult(call: TransportCall): number }).locateResult = (call) => {
      if (call.xid === 3) throw new Error('locate bug');
      return 28;
    };
    for (let x = 1; x <= 4; x++) lb.client.submit(TestCall.echo(x, pattern(6000, x)));
    const outs = await lb.collector.wait(4);
    for (const x of [1, 2, 4]) {
      const o = outs.find((y) => y.call.xid === x);
      t.deepEqual(replyData(o?.reply as Buffer), pattern(6000, x), `call ${x}`);
    }
    const three = outs.find((o) => o.call.xid === 3);
    t.is(three?.error?.code, 'ERR_TRANSPORT_HANDLER_THREW');
    t.false(three?.error?.retransmit);
    t.is(lb.client.counters.handlerErrors, 2);
    t.deepEqual(log.lines.map((l) => [l.handler, l.xid]).sort(), [
      ['locateResult', 3],
      ['onReply', 2],
    ]);
    t.is(lb.client.state, 'ready');
    t.is(lb.client.snapshot().registrations.inUse, 0);
    t.is(lb.client.credits.outstanding, 0);
  } finally {
    await lb.close();
  }
});

test('onFailed throwing during connection loss: every other call is still reported exactly once', async (t) => {
  const log = new CapturingLogger();
  const lb = await loopback({ client: { logger: log } });
  lb.responder.hold = true;
  try {
    let failedCalls = 0;
    lb.collector.onFailed = (call) => {
      failedCalls++;
      throw new Error(`onFailed bug ${call.xid}`);
    };
    for (let x = 1; x <= 20; x++) lb.client.submit(TestCall.echo(x, pattern(10, x), false));
    while (lb.responder.held.length < 20) await delay(5);
    lb.server.close('test kill');
    while (lb.client.state !== 'closed') await delay(5);
    t.is(failedCalls, 20);
    t.is(lb.client.counters.handlerErrors, 20);
    t.is(log.lines.filter((l) => l.handler === 'onFailed').length, 20);
  } finally {
    await lb.close();
  }
});

test('onAbandoned: called once when the abandoned call’s reply arrived and its memory was invalidated', async (t) => {
  const lb = await loopback();
  lb.responder.hold = true;
  try {
    const abandoned: { call: TransportCall; inUse: number }[] = [];
    (lb.collector as Collector & { onAbandoned(c: TransportCall): void }).onAbandoned = (call) => {
      abandoned.push({ call, inUse: lb.client.snapshot().registrations.inUse });
    };
    const gone = TestCall.echo(1, pattern(9000, 1));
    const kept = TestCall.echo(2, pattern(9000, 2));
    lb.client.submit(gone);
    lb.client.submit(kept);
    while (lb.responder.held.length < 2) await delay(5);
    lb.client.abandon(gone);
    t.is(abandoned.length, 0, 'not before its reply');
    // Answer the abandoned call only: when the hook runs, nothing of it is registered any more.
    lb.responder.hold = false;
    lb.responder.answer(lb.responder.held[0]);
    while (abandoned.length === 0) await delay(5);
    t.is(abandoned[0].call, gone);
    t.is(abandoned[0].inUse, 2, 'only the other call’s Read + Write chunk remain');
    lb.responder.answer(lb.responder.held[1]);
    await lb.collector.wait(1);
    await delay(20);
    t.is(abandoned.length, 1);
    t.deepEqual(
      lb.collector.outcomes.map((o) => o.call),
      [kept],
      'no onReply / onFailed for the abandoned call',
    );
    // The XID is free again on this connection: the record can be reused at once.
    lb.client.submit(gone);
    const [, again] = await lb.collector.wait(2);
    t.is(again.call, gone);
    t.deepEqual(replyData(again.reply as Buffer), pattern(9000, 1));
  } finally {
    await lb.close();
  }
});

test('onAbandoned: called at connection loss for abandoned calls (in flight and queued), never onFailed', async (t) => {
  const lb = await loopback({ client: { credits: 2 }, server: { credits: 2 } });
  lb.responder.hold = true;
  try {
    const seen: number[] = [];
    (lb.collector as Collector & { onAbandoned(c: TransportCall): void }).onAbandoned = (call) => {
      seen.push(call.xid);
    };
    const calls = [1, 2, 3, 4].map((x) => TestCall.echo(x, pattern(10, x), false));
    for (const c of calls) lb.client.submit(c);
    while (lb.responder.held.length < 2) await delay(5);
    lb.client.abandon(calls[0]); // in flight
    lb.client.abandon(calls[3]); // queued
    lb.server.close('test kill');
    while (lb.client.state !== 'closed') await delay(5);
    t.deepEqual(seen.sort(), [1, 4]);
    t.deepEqual(lb.collector.outcomes.map((o) => o.call.xid).sort(), [2, 3]);
    for (const o of lb.collector.outcomes) t.true(o.error?.retransmit);
  } finally {
    await lb.close();
  }
});

test('pool onReady: one event per connection that becomes ready, at start and after a reconnect', async (t) => {
  const s = await echoServer();
  const collector = new Collector();
  const ready: { conn: RpcRdmaConnection; state: string }[] = [];
  const pool = new ConnectionPool({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port: s.listener.port,
    size: 3,
    requester: collector,
    backoff: { initialMs: 10, maxMs: 50 },
    options: { peerKey: `ready-${process.pid}` },
  });
  const viaMethod: RpcRdmaConnection[] = [];
  const off = pool.onReady((conn) => viaMethod.push(conn));
  pool.onReady((conn) => {
    ready.push({ conn, state: conn.state });
    throw new Error('a listener bug does not stop the others');
  });
  try {
    await pool.start();
    while (ready.length < 3) await delay(5);
    t.is(new Set(ready.map((r) => r.conn)).size, 3);
    for (const r of ready) t.is(r.state, 'ready');
    t.is(viaMethod.length, 3);
    off();
    // A ready connection takes a call at once (no polling).
    pool.submit(TestCall.echo(1, pattern(10, 1), false));
    await collector.wait(1);
    s.conns[0].close('test kill');
    while (ready.length < 4) await delay(5);
    t.is(ready.length, 4);
    t.false(
      ready.slice(0, 3).some((r) => r.conn === ready[3].conn),
      'a new connection',
    );
    t.is(ready[3].state, 'ready');
    t.is(viaMethod.length, 3, 'unsubscribed listener not called');
    t.is(pool.snapshot().ready, 3);
  } finally {
    pool.close();
    await s.close();
  }
});
