/**
 * Every call is answered (RFC 8166 §3.3.1), a refusal as much as a reply: an error answer that finds no
 * send buffer free waits for one, as a reply does, instead of being dropped (its call would hang with its
 * credit). And replies leave the control reserve (CONTROL_SEND_SLOTS) to error answers and control
 * messages: a backlog of replies never takes the buffers a refusal needs. The answers that wait are
 * bounded by what a conforming peer can be owed: a peer that goes on sending past that loses its connection.
 */
import test from 'ava';
import type { RpcRdmaConnection } from '../../rdma-backend/transport/index.js';
import { CONTROL_RESERVE, CONTROL_SEND_SLOTS } from '../../rdma-backend/transport/options.js';
import { flushPendingReplies } from '../../rdma-backend/transport/responder.js';
import { plainPrivateData, RoguePeer } from '../helpers/rogue-peer.js';
import {
  captureTransportLog,
  echoServer,
  headerBytes,
  type Loopback,
  loopback,
  pattern,
  replyData,
  TestCall,
  words,
} from './loopback.js';

/** Takes send buffers until `left` are free; returns them for `giveBack`. */
function takeSlots(conn: RpcRdmaConnection, left: number): number[] {
  const taken: number[] = [];
  while (conn.sendSlab.available > left) taken.push(conn.sendSlab.acquire());
  return taken;
}

/** Gives the buffers back and sends what waited, as the next Send completion would. */
function giveBack(conn: RpcRdmaConnection, taken: number[]): void {
  for (const slot of taken) conn.sendSlab.release(slot);
  flushPendingReplies(conn);
}

async function held(lb: Loopback, n: number): Promise<void> {
  for (let i = 0; i < 400 && lb.responder.held.length < n; i++) await new Promise((r) => setTimeout(r, 5));
  if (lb.responder.held.length < n) throw new Error(`${lb.responder.held.length} of ${n} calls held`);
}

test('replyError with every send buffer taken: the refusal waits for one and is sent, not dropped', async (t) => {
  const lb = await loopback();
  lb.responder.hold = true;
  try {
    lb.client.submit(TestCall.echo(3, pattern(10, 3), false));
    await held(lb, 1);
    const taken = takeSlots(lb.server, 0);
    lb.server.replyError(lb.responder.held[0], { code: 9 });
    t.is(lb.server.counters.droppedMessages, 0, 'the refusal is not dropped');
    t.is(lb.server.owedControl.length, 1);
    t.true(lb.server.workInFlight, 'an answer owed is work under way');
    giveBack(lb.server, taken);
    const [o] = await lb.collector.wait(1);
    t.is(o.error?.code, 'ERR_TRANSPORT_PEER_SYSTEM');
    t.is(lb.server.owedControl.length, 0);
    t.is(lb.client.credits.outstanding, 0, "the call's credit came back");
  } finally {
    await lb.close();
  }
});

test('a call refused on arrival while every send buffer is taken gets its refusal once one is free', async (t) => {
  const lb = await loopback({ server: { maxChunkSize: 8192 } });
  try {
    lb.client.submit(TestCall.echo(1, pattern(10, 1), false));
    await lb.collector.wait(1);
    const taken = takeSlots(lb.server, 0);
    // A Read chunk larger than the server takes: refused before any RDMA Read (RDMA2_ERR_SYSTEM).
    lb.client.submit(TestCall.echo(4, pattern(10000, 4)));
    for (let i = 0; i < 400 && lb.server.counters.callsReceived < 2; i++)
      await new Promise((r) => setTimeout(r, 5));
    t.is(lb.server.counters.callsReceived, 2);
    t.is(lb.server.counters.droppedMessages, 0, 'the refusal is not dropped');
    t.is(lb.server.owedControl.length, 1);
    giveBack(lb.server, taken);
    const outs = await lb.collector.wait(2);
    t.is(outs[1].error?.code, 'ERR_TRANSPORT_PEER_SYSTEM');
    t.deepEqual(lb.server.snapshot().errors.sent, { RDMA2_ERR_SYSTEM: 1 });
  } finally {
    await lb.close();
  }
});

test('a reply waits rather than take the control reserve, which a refusal then still finds', async (t) => {
  const lb = await loopback();
  lb.responder.hold = true;
  try {
    lb.client.submit(TestCall.echo(5, pattern(10, 5), false));
    lb.client.submit(TestCall.echo(6, pattern(10, 6), false));
    await held(lb, 2);
    const [toReply, toRefuse] = lb.responder.held;
    const taken = takeSlots(lb.server, CONTROL_SEND_SLOTS);
    lb.responder.answer(toReply);
    t.is(lb.server.pendingReplies.length, 1, 'the reply waits for a buffer outside the reserve');
    t.is(lb.server.sendSlab.available, CONTROL_SEND_SLOTS);
    lb.server.replyError(toRefuse, { code: 9 });
    t.is(lb.server.owedControl.length, 0, 'the refusal went out at once, from the reserve');
    t.is(lb.server.counters.errorsSent, 1);
    const [refused] = await lb.collector.wait(1);
    t.is(refused.call.xid, 6);
    t.is(refused.error?.code, 'ERR_TRANSPORT_PEER_SYSTEM');
    giveBack(lb.server, taken);
    const outs = await lb.collector.wait(2);
    t.is(outs[1].call.xid, 5);
    t.deepEqual(replyData(outs[1].reply as Buffer), pattern(10, 5));
    t.is(lb.server.pendingReplies.length, 0);
  } finally {
    await lb.close();
  }
});

test('a peer that keeps sending malformed messages while none of our Sends completes: its connection closes once more answers are owed than a conforming peer can be', async (t) => {
  const { lines, logger } = captureTransportLog();
  const s = await echoServer({ credits: 4, logger });
  const peer = await RoguePeer.connect(s.listener.port, plainPrivateData());
  try {
    // Version 2 first (CONNPROP and its answer), then the peer stops reading: every send buffer is taken.
    await peer.ask(headerBytes({ version: 2, htype: 5, xid: 1, credit: 4, props: [] }));
    const conn = s.conns[0];
    const cap = conn.grant + CONTROL_RESERVE + conn.credits.max;
    t.is(conn.owedControlCap, cap);
    let atClose: { reason: string | undefined; failure: boolean | undefined; owed: number } | null = null;
    let peak = 0;
    const close = conn.close.bind(conn);
    conn.close = (reason?: string, failure?: boolean) => {
      atClose ??= { reason, failure, owed: conn.owedControl.length };
      close(reason, failure);
    };
    takeSlots(conn, 0);
    // Unknown header types (RDMA2_ERR_INVAL_HTYPE each), more than the cap.
    for (let i = 0; i < cap + 5; i++) peer.send(words(100 + i, 2, 4, 42, 0));
    for (let i = 0; i < 1000 && atClose === null; i++) {
      peak = Math.max(peak, conn.owedControl.length);
      await new Promise((r) => setTimeout(r, 5));
    }
    const closed = atClose as {
      reason: string | undefined;
      failure: boolean | undefined;
      owed: number;
    } | null;
    t.not(closed, null, 'the connection was closed');
    t.is(closed?.owed, cap, 'the answers owed stopped at the cap');
    t.true(peak <= cap, `peak ${peak}`);
    t.true(closed?.failure, 'closed as a failure');
    t.regex(
      closed?.reason ?? '',
      /control messages owed to the peer wait for a send buffer, the most a conforming peer can be owed/,
    );
    await peer.until(() => peer.disconnected, 'DISCONNECTED', 10000);
    t.is(conn.state, 'closed');
    t.is(conn.owedControl.length, 0);
    const refused = lines.find(
      (l) => l.obj.code === 'ERR_TRANSPORT_PEER_PROTOCOL' && l.obj.cap === cap && l.obj.owed === cap,
    );
    t.truthy(refused, 'the peer protocol error is logged');
    t.like(refused?.obj, { due: 'RDMA2_ERR_INVAL_HTYPE', version: 2 });
    const lost = lines.find((l) => l.obj.code === 'ERR_TRANSPORT_CONNECTION_LOST');
    t.like(lost, { level: 'warn', obj: { reason: closed?.reason, by: 'us' } });
  } finally {
    peer.close();
    await s.close();
  }
});

test('a pull that completes while every send buffer is taken: its DONE waits for one, keeping the credit, and then releases the exposed reply', async (t) => {
  // A long expiry: only the DONE can release the exposed reply within the test.
  const lb = await loopback({ server: { rprcExpiryMs: 600_000 } });
  lb.responder.ddpResults = false;
  try {
    lb.client.submit(TestCall.echo(1, Buffer.from('v2 first'), false));
    await lb.collector.wait(1);
    // The reply arrives and its pull starts (the sink is registered) with no send buffer free on the
    // requester: the DONE will find none when the pull completes.
    const taken: number[] = [];
    const registrar = lb.client.registrar;
    const acquireTarget = registrar.acquireTarget.bind(registrar);
    registrar.acquireTarget = (size: number) => {
      taken.push(...takeSlots(lb.client, 0));
      return acquireTarget(size);
    };
    const c = TestCall.echo(2, pattern(30001, 2), false);
    c.maxReplySize = 1000; // fits inline as far as the caller knows: no Reply chunk offered
    lb.client.submit(c);
    const outs = await lb.collector.wait(2);
    t.falsy(outs[1].error, outs[1].error?.message);
    t.deepEqual(replyData(outs[1].reply as Buffer), pattern(30001, 2));
    t.true(taken.length > 0, 'the send buffers were taken before the pull');
    t.is(lb.client.counters.droppedMessages, 0, 'the DONE is not dropped');
    t.is(lb.client.owedControl.length, 1, 'the DONE waits for a send buffer');
    t.is(lb.client.owedControl.peek()?.kind, 'done');
    t.is(lb.client.counters.donesSent, 0);
    t.is(lb.client.credits.outstanding, 1, "the DONE keeps its call's credit until it is posted");
    t.is(lb.server.rprcPending.size, 1, 'the reply stays exposed until the DONE');
    // The caller hears of the credit: no reply brings it back (its own queue of calls may go).
    let told = 0;
    (lb.collector as { onCredit?: () => void }).onCredit = () => {
      told++;
      t.is(lb.client.credits.outstanding, 0, 'told once the credit is free');
    };
    giveBack(lb.client, taken);
    t.is(lb.client.owedControl.length, 0);
    t.is(lb.client.counters.donesSent, 1, 'the DONE went with the first free buffer');
    t.is(lb.client.credits.outstanding, 0, 'and its credit came back');
    t.is(told, 1, 'the requester was told the credit is free (onCredit)');
    for (let i = 0; i < 1000 && lb.server.rprcPending.size > 0; i++)
      await new Promise((r) => setTimeout(r, 5));
    t.is(lb.server.rprcPending.size, 0, 'the exposed reply was released by the DONE');
    t.is(lb.server.counters.rprcExpired, 0);
    t.is(lb.server.registrar.inUse, 0, 'nothing left exposed');
    t.is(lb.server.counters.droppedMessages, 0);
    // And the connection goes on.
    lb.client.submit(TestCall.echo(3, Buffer.from('after'), false));
    const after = await lb.collector.wait(3);
    t.falsy(after[2].error, after[2].error?.message);
  } finally {
    await lb.close();
  }
});
