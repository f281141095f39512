/**
 * The `onReplyReleased` contract a responder relies on to reuse reply buffers: every message given to
 * `reply()` comes back exactly once, and only when nothing reads from it any more — never while its RDMA
 * Writes or Send may still be in flight, never for a reply owed when the connection is torn down. A lent
 * message (`reply(…, lent)`) is the caller's again when `reply()` returns, and is never released.
 */
import test from 'ava';
import type { RpcRdmaConnection, TransportLogger } from '../../rdma-backend/transport/index.js';
import { flushPendingReplies } from '../../rdma-backend/transport/responder.js';
import { CALL_DATA, encodeReply, loopback, pattern, replyData, sourceCall, TestCall } from './loopback.js';

/** The test program's ECHO reply to the ECHO call `m`: its data back, under its XID. */
function echoReplyTo(m: Buffer): Buffer {
  return encodeReply(m.readUInt32BE(0), m.subarray(CALL_DATA, CALL_DATA + m.readUInt32BE(CALL_DATA - 4)));
}

test('every reply message is released exactly once, the same buffer, whether inline, in Write chunks or in the Reply chunk', async (t) => {
  const lb = await loopback();
  try {
    lb.client.submit(TestCall.echo(1, pattern(100, 1), false)); // inline: copied, released at once
    lb.client.submit(sourceCall(2, 1 << 20)); // 1 MiB Write chunk: released after the Writes complete
    lb.client.submit(TestCall.echo(3, pattern(20000, 2), false)); // Long Reply through the Reply chunk
    const outs = await lb.collector.wait(3);
    for (const o of outs) t.is(o.error, undefined);
    t.is(replyData(outs.find((o) => o.call.xid === 2)?.reply as Buffer).length, 1 << 20);
    t.deepEqual(replyData(outs.find((o) => o.call.xid === 3)?.reply as Buffer), pattern(20000, 2));
    // The last Send's completion may follow the requester's receipt of it by a turn.
    for (let i = 0; i < 50 && lb.responder.released.length < 3; i++)
      await new Promise((r) => setTimeout(r, 10));
    t.is(lb.responder.replied.length, 3);
    t.is(lb.responder.released.length, 3);
    for (const m of lb.responder.replied) t.is(lb.responder.released.filter((r) => r === m).length, 1);
    t.is(lb.server.counters.handlerErrors, 0);
  } finally {
    await lb.close();
  }
});

test('a 1 MiB reply is not released before its RDMA Writes complete', async (t) => {
  const lb = await loopback();
  try {
    let releasedDuringReply = -1;
    lb.responder.override = (call) => {
      lb.responder.override = null;
      lb.responder.answer(call);
      // reply() returned: the Writes are posted, not completed, so the buffer must still be held.
      releasedDuringReply = lb.responder.released.length;
      return true;
    };
    lb.client.submit(sourceCall(5, 1 << 20));
    const [o] = await lb.collector.wait(1);
    t.is(o.error, undefined);
    t.is(releasedDuringReply, 0);
    for (let i = 0; i < 50 && lb.responder.released.length < 1; i++)
      await new Promise((r) => setTimeout(r, 10));
    t.is(lb.responder.released.length, 1);
    t.is(lb.responder.released[0], lb.responder.replied[0]);
  } finally {
    await lb.close();
  }
});

test('a reply still in flight when the connection is torn down is never released (the socket may hold views of it)', async (t) => {
  const lb = await loopback();
  try {
    lb.responder.override = (call, conn: RpcRdmaConnection) => {
      lb.responder.override = null;
      lb.responder.answer(call);
      conn.close('test: torn down under a reply');
      return true;
    };
    lb.client.submit(sourceCall(6, 1 << 20));
    const [o] = await lb.collector.wait(1);
    t.truthy(o.error, 'the requester sees the call fail');
    await new Promise((r) => setTimeout(r, 100));
    t.is(lb.server.state, 'closed');
    t.is(lb.responder.replied.length, 1);
    t.deepEqual(lb.responder.released, []);
  } finally {
    await lb.close();
  }
});

test('an onReplyReleased that throws is logged and counted; the connection serves on', async (t) => {
  const lines: Record<string, unknown>[] = [];
  const logger: TransportLogger = { warn: (obj) => void lines.push(obj) };
  const lb = await loopback({ server: { logger } });
  try {
    lb.responder.onReplyReleased = () => {
      throw new Error('pool bug');
    };
    lb.client.submit(TestCall.echo(8, pattern(100, 4), false));
    lb.client.submit(sourceCall(9, 1 << 20));
    const outs = await lb.collector.wait(2);
    for (const o of outs) t.is(o.error, undefined);
    for (let i = 0; i < 50 && lb.server.counters.handlerErrors < 2; i++)
      await new Promise((r) => setTimeout(r, 10));
    t.is(lb.server.counters.handlerErrors, 2);
    t.like(lines[0], { code: 'ERR_TRANSPORT_HANDLER_THREW', handler: 'onReplyReleased' });
    t.is(lb.server.state, 'ready');
    lb.client.submit(TestCall.echo(10, pattern(5000, 5)));
    const all = await lb.collector.wait(3);
    t.deepEqual(replyData(all[2].reply as Buffer), pattern(5000, 5));
  } finally {
    await lb.close();
  }
});

test("an allocateReply or allocateCall that throws is the handler's bug: logged, counted, the message still arrives", async (t) => {
  const lines: Record<string, unknown>[] = [];
  const logger: TransportLogger = { warn: (obj) => void lines.push(obj) };
  const lb = await loopback({ client: { logger }, server: { logger } });
  try {
    lb.collector.allocateReply = () => {
      throw new Error('reply pool bug');
    };
    lb.responder.allocateCall = () => {
      throw new Error('call pool bug');
    };
    // A 1 MiB SOURCE reply is reassembled (allocateReply); a 64 KiB ECHO call with DDP goes in a Read
    // chunk and is reassembled on the responder (allocateCall), its echo comes back in a Write chunk.
    lb.client.submit(sourceCall(11, 1 << 20));
    lb.client.submit(TestCall.echo(12, pattern(65536, 6)));
    const outs = await lb.collector.wait(2);
    for (const o of outs) t.is(o.error, undefined, 'no call fails for an allocator bug');
    t.is(replyData(outs.find((o) => o.call.xid === 11)?.reply as Buffer).length, 1 << 20);
    t.deepEqual(replyData(outs.find((o) => o.call.xid === 12)?.reply as Buffer), pattern(65536, 6));
    t.true(lines.some((l) => l.handler === 'allocateReply'));
    t.true(lines.some((l) => l.handler === 'allocateCall'));
    t.is(lb.server.counters.handlerErrors, 1);
    t.is(lb.client.counters.handlerErrors, 2);
  } finally {
    await lb.close();
  }
});

test('a lent reply is never released, and overwriting it once reply() returns changes nothing sent: inline, queued for a send buffer, through the Reply chunk, queued then through the Reply chunk', async (t) => {
  const lb = await loopback();
  try {
    const queued: number[] = [];
    lb.responder.override = (call, conn) => {
      const xid = call.message.readUInt32BE(0);
      const reply = echoReplyTo(call.message);
      lb.responder.replied.push(reply);
      if (xid === 2 || xid === 4) {
        // Every send buffer taken: the reply has to wait for one.
        const taken: number[] = [];
        while (conn.sendSlab.available > 0) taken.push(conn.sendSlab.acquire());
        conn.reply(call, reply, [], true);
        queued.push(conn.pendingReplies.length);
        reply.fill(0xee);
        for (const slot of taken) conn.sendSlab.release(slot);
        flushPendingReplies(conn);
      } else {
        conn.reply(call, reply, [], true);
        reply.fill(0xee); // the caller's read buffer, reused at once
      }
      return true;
    };
    lb.client.submit(TestCall.echo(1, pattern(100, 1), false)); // inline
    lb.client.submit(TestCall.echo(2, pattern(300, 2), false)); // queued, then inline
    lb.client.submit(TestCall.echo(3, pattern(20000, 3), false)); // the Reply chunk's RDMA Writes read later
    // Queued, then the Reply chunk: the queue's copy is what the RDMA Writes read.
    lb.client.submit(TestCall.echo(4, pattern(20000, 4), false));
    const outs = await lb.collector.wait(4);
    for (const o of outs) t.is(o.error, undefined);
    const data = (xid: number) => replyData(outs.find((o) => o.call.xid === xid)?.reply as Buffer);
    t.deepEqual(data(1), pattern(100, 1));
    t.deepEqual(data(2), pattern(300, 2));
    t.deepEqual(data(3), pattern(20000, 3));
    t.deepEqual(data(4), pattern(20000, 4));
    t.deepEqual(queued, [1, 1], 'the second and the fourth reply waited for a send buffer');
    t.is(lb.server.counters.longReplies, 2);
    await new Promise((r) => setTimeout(r, 100));
    t.deepEqual(lb.responder.released, [], 'nothing lent comes back through onReplyReleased');
    t.is(lb.server.snapshot().registrations.inUse, 0, "the Reply chunk's source registration was released");
    t.is(lb.server.counters.handlerErrors, 0);
  } finally {
    await lb.close();
  }
});

test('a lent reply to a connection already closed is dropped, not released', async (t) => {
  const lb = await loopback();
  lb.responder.hold = true;
  try {
    lb.client.submit(TestCall.echo(4, pattern(50, 4), false));
    for (let i = 0; i < 100 && lb.responder.held.length < 1; i++) await new Promise((r) => setTimeout(r, 5));
    lb.server.close('test: closed before the reply');
    const reply = encodeReply(4, pattern(50, 4));
    lb.server.reply(lb.responder.held[0], reply, [], true);
    await lb.collector.wait(1);
    t.deepEqual(lb.responder.released, []);
  } finally {
    await lb.close();
  }
});

test('a lent reply queued for a send buffer when the connection closes is dropped with the queue: not released, nothing sent from it', async (t) => {
  const lb = await loopback();
  try {
    let queued = -1;
    let taken: number[] = [];
    lb.responder.override = (call, conn) => {
      const reply = echoReplyTo(call.message);
      taken = [];
      while (conn.sendSlab.available > 0) taken.push(conn.sendSlab.acquire());
      conn.reply(call, reply, [], true);
      queued = conn.pendingReplies.length;
      reply.fill(0xee);
      return true;
    };
    lb.client.submit(TestCall.echo(5, pattern(20000, 5), false)); // would need the Reply chunk
    for (let i = 0; i < 200 && queued < 0; i++) await new Promise((r) => setTimeout(r, 5));
    t.is(queued, 1, 'the reply waited for a send buffer');
    lb.server.close('test: closed with a reply queued');
    for (const slot of taken) lb.server.sendSlab.release(slot);
    const outs = await lb.collector.wait(1);
    t.not(outs[0].error, undefined, 'the call fails on the client: its connection went away unanswered');
    t.is(lb.server.pendingReplies.length, 0, 'the queue was dropped at the close');
    await new Promise((r) => setTimeout(r, 50));
    t.deepEqual(lb.responder.released, [], 'the queued copy is never released');
    t.is(lb.server.snapshot().registrations.inUse, 0, 'nothing was registered for it');
    t.is(lb.server.counters.handlerErrors, 0);
  } finally {
    await lb.close();
  }
});
