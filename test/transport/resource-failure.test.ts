/**
 * A memory registration the device refuses (the soft provider's `caps.maxMr`; on a native device the MR
 * limit or RLIMIT_MEMLOCK) while we serve a call costs that call only: it is answered RDMA2_ERR_SYSTEM
 * (Version 1: ERR_CHUNK), logged and counted, and what it held goes back. `reply()` never throws it at
 * the upper layer (the upstream link would take it for a broken upstream and close a healthy socket),
 * and a refused Read sink no longer closes the whole connection.
 */
import test from 'ava';
import type { InboundCall } from '../../rdma-backend/transport/index.js';
import {
  captureTransportLog,
  encodeReply,
  type Loopback,
  loopback,
  pattern,
  REPLY_DATA,
  replyData,
  sourceCall,
  TestCall,
} from './loopback.js';

/** The server's device takes `maxMr` memory regions: its Receive and Send slabs take two. */
function limited(maxMr: number, version: 1 | 2) {
  const log = captureTransportLog();
  return {
    log,
    options: {
      serverProvider: { caps: { maxMr } },
      server: { logger: log.logger },
      client: { maxVersion: version },
    },
  };
}

/** The first call that the responder holds, once it came. */
async function firstHeld(lb: Loopback): Promise<InboundCall> {
  for (let i = 0; i < 400 && lb.responder.held.length === 0; i++) await new Promise((r) => setTimeout(r, 5));
  const call = lb.responder.held.shift();
  if (call === undefined) throw new Error('no call reached the responder');
  return call;
}

/** A small inline call still served after the refusal: the connection went on. */
async function stillServes(t: import('ava').ExecutionContext, lb: Loopback, n: number): Promise<void> {
  lb.responder.hold = false;
  lb.client.submit(TestCall.echo(99, pattern(50, 9), false));
  const outs = await lb.collector.wait(n);
  t.deepEqual(replyData(outs[n - 1].reply as Buffer), pattern(50, 9));
  t.is(lb.server.state, 'ready');
}

for (const version of [2, 1] as const) {
  test(`Version ${version}: a Long Reply whose source the device will not register is refused ${version === 2 ? 'RDMA2_ERR_SYSTEM' : 'ERR_CHUNK'}; reply() does not throw`, async (t) => {
    const { log, options } = limited(2, version);
    const lb = await loopback(options);
    lb.responder.ddpResults = false;
    lb.responder.hold = true;
    try {
      // SOURCE of 6000 bytes, no Write chunk: a Reply chunk is offered, and the reply goes there from a
      // registered source.
      const c = sourceCall(7, 6000);
      c.ddpResults = [];
      c.maxReplySize = 9000;
      lb.client.submit(c);
      const call = await firstHeld(lb);
      t.notThrows(() => lb.responder.answer(call), 'the refusal is not thrown at the upper layer');
      const [o] = await lb.collector.wait(1);
      t.is(o.error?.code, version === 2 ? 'ERR_TRANSPORT_PEER_SYSTEM' : 'ERR_TRANSPORT_PEER_BAD_XDR');
      t.is(o.error?.details.rdmaErr, version === 2 ? 9 : 2);
      t.deepEqual(
        lb.server.snapshot().errors.sent,
        version === 2 ? { RDMA2_ERR_SYSTEM: 1 } : { ERR_CHUNK: 1 },
      );
      t.is(lb.server.counters.resourceFailures, 1);
      t.is(lb.server.counters.longReplies, 0);
      const line = log.lines.find((l) => l.obj.code === 'ERR_TRANSPORT_LOCAL_RESOURCE');
      t.like(line?.obj, { step: 'reply source registration', xid: 7, err: { code: 'VERBS_RESOURCE_LIMIT' } });
      t.is(lb.server.snapshot().registrations.inUse, 0);
      // The reply's message went back to its owner (`onReplyReleased`): nothing keeps it.
      t.deepEqual(lb.responder.released, lb.responder.replied);
      await stillServes(t, lb, 2);
    } finally {
      await lb.close();
    }
  });
}

test('a reply exposed in a responder-provided Read chunk that cannot be registered: refused before any RDMA Write of its Write chunk', async (t) => {
  // Three regions: the slabs and the RDMA Writes' source; exposing the reduced reply is the fourth.
  const { options } = limited(3, 2);
  const lb = await loopback(options);
  lb.responder.hold = true;
  try {
    lb.client.submit(TestCall.echo(1, Buffer.from('v2 first'), false));
    lb.responder.hold = false;
    await lb.collector.wait(1);
    lb.responder.hold = true;
    const data = pattern(100, 3);
    const c = TestCall.echo(8, data); // a Write chunk of 100 bytes is offered, no Reply chunk
    lb.client.submit(c);
    const call = await firstHeld(lb);
    // ECHO's result moves to the Write chunk; 8000 more bytes of results stay in the reply, which then
    // exceeds the requester's inline size: exposed for it to pull (seed 002 §4.1.1).
    const reply = Buffer.concat([encodeReply(8, data), Buffer.alloc(8000, 0x55)]);
    const before = lb.server.counters.rdmaWrites;
    t.notThrows(() => lb.server.reply(call, reply, [{ offset: REPLY_DATA, length: data.length }]));
    const outs = await lb.collector.wait(2);
    t.is(outs[1].error?.code, 'ERR_TRANSPORT_PEER_SYSTEM');
    t.is(lb.server.counters.rdmaWrites, before, 'no RDMA Write was posted for the refused reply');
    t.is(lb.server.counters.rprcReplies, 0);
    t.is(lb.server.rprcPending.size, 0);
    t.is(lb.server.snapshot().registrations.inUse, 0, "the Writes' source was released");
    t.is(lb.server.counters.resourceFailures, 1);
    await stillServes(t, lb, 3);
  } finally {
    await lb.close();
  }
});

for (const [what, size] of [
  ['a pooled Read sink', 10000],
  ['a placement window', 40000],
] as const) {
  test(`a call whose Read chunk needs ${what} the device will not register is refused; the connection goes on`, async (t) => {
    const { log, options } = limited(2, 2);
    const lb = await loopback(options);
    try {
      lb.client.submit(TestCall.echo(5, pattern(size, 5))); // the argument goes in a Read chunk
      const [o] = await lb.collector.wait(1);
      t.is(o.error?.code, 'ERR_TRANSPORT_PEER_SYSTEM', o.error?.message);
      t.is(lb.server.counters.rdmaReads, 0);
      t.is(lb.server.counters.resourceFailures, 1);
      t.is(lb.responder.received.length, 0);
      t.like(log.lines.find((l) => l.obj.code === 'ERR_TRANSPORT_LOCAL_RESOURCE')?.obj, {
        step: 'Read chunk sink registration',
        xid: 5,
      });
      t.is(lb.server.readJobs.length, 0);
      t.is(lb.server.inboundActive, 0);
      t.is(lb.server.snapshot().registrations.inUse, 0);
      await stillServes(t, lb, 2);
    } finally {
      await lb.close();
    }
  });
}
