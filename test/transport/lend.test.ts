/**
 * `RequesterHandler.lendLimit`: small inline replies to calls that exposed no memory are handed over as
 * views of the receive buffer, valid during `onReply` only, instead of copies. Anything else (a large
 * reply, a call with a Write chunk even when answered inline, a Long Reply) is still a buffer the handler
 * owns, and every byte is right.
 */
import test from 'ava';
import type { TransportCall } from '../../rdma-backend/transport/index.js';
import {
  CALL_DATA,
  Collector,
  encodeCall,
  loopback,
  PROC_SINK,
  pattern,
  REPLY_DATA,
  replyData,
  TestCall,
  twoItemCall,
} from './loopback.js';

/** Copies every reply inside `onReply`, as a handler that lends must; counts owned allocations. */
class CopyingCollector extends Collector {
  readonly lendLimit: number;
  allocations = 0;
  /** The reply buffers as handed over (views may have been overwritten since). */
  readonly handed: Buffer[] = [];

  constructor(lendLimit: number) {
    super();
    this.lendLimit = lendLimit;
    this.allocateReply = (size) => {
      this.allocations++;
      return Buffer.allocUnsafe(size);
    };
  }

  override onReply(call: TransportCall, reply: Buffer): void {
    this.handed.push(reply);
    super.onReply(call, Buffer.from(reply));
  }
}

test('small inline replies are lent; the bytes are right while onReply runs', async (t) => {
  const lb = await loopback();
  const c = new CopyingCollector(1000);
  lb.client.setRequester(c);
  try {
    // More calls than the connection has Receives (in rounds, within the credits), so slots are reused.
    const n = 5 * 40;
    for (let round = 0; round < 5; round++) {
      for (let i = round * 40; i < (round + 1) * 40; i++) {
        lb.client.submit(TestCall.echo(i + 1, pattern(100 + (i % 50), i), false));
      }
      await c.wait((round + 1) * 40);
    }
    const outs = c.outcomes;
    t.is(outs.length, n);
    for (const o of outs) {
      t.falsy(o.error, o.error?.message);
      const i = o.call.xid - 1;
      t.deepEqual(replyData(o.reply as Buffer), pattern(100 + (i % 50), i));
    }
    t.is(lb.client.counters.lentReplies, n);
    // A SINK call exposes its data in one Read chunk, which the responder invalidates with its reply
    // (Send With Invalidate): nothing left to fence, so its small reply is lent too.
    const sink = new TestCall(999, encodeCall(999, PROC_SINK, pattern(10000, 9)));
    sink.ddpArgs = [{ offset: CALL_DATA, length: 10000 }];
    sink.maxReplySize = 64;
    lb.client.submit(sink);
    const done = await c.wait(n + 1);
    t.is(done[n].reply?.readUInt32BE(REPLY_DATA), 10000, 'the SINK reply: the length it received');
    t.is(lb.client.counters.remoteInvalidations, 1);
    t.is(lb.client.counters.lentReplies, n + 1);
    t.is(c.allocations, 0, 'no reply was copied into a buffer of its own');
    // The lent views point into the connection's receive buffers, reused since: they are not the replies.
    t.true(
      c.handed.some((h, k) => !h.equals(c.outcomes[k].reply as Buffer)),
      'a lent view no longer holds its reply after onReply returned',
    );
  } finally {
    await lb.close();
  }
});

test('a reply above the limit, calls that exposed memory, and a Long Reply are owned buffers', async (t) => {
  const lb = await loopback();
  const c = new CopyingCollector(1000);
  lb.client.setRequester(c);
  try {
    lb.client.submit(TestCall.echo(1, pattern(2000, 1), false)); // inline, above the limit
    await c.wait(1);
    // A Write chunk offered (memory exposed, invalidated before completion) but the reply comes inline.
    lb.responder.ddpResults = false;
    lb.client.submit(TestCall.echo(2, pattern(200, 2)));
    await c.wait(2);
    // A Long Reply (Reply chunk): the bytes are in registered memory, not in the receive buffer.
    const long = TestCall.echo(3, pattern(20001, 3), false);
    long.maxReplySize = 30000;
    lb.client.submit(long);
    await c.wait(3);
    // Two Read chunks (two registrations, so no remote invalidation): a small inline reply that completes
    // only after our Local Invalidates, when its Receive is long reposted. Traffic in between reuses it.
    lb.client.submit(twoItemCall(4, pattern(300, 4), pattern(10000, 5)));
    for (let i = 0; i < 40; i++) lb.client.submit(TestCall.echo(100 + i, pattern(300, 6), false));
    const outs = await c.wait(44);
    for (const o of outs) t.falsy(o.error, o.error?.message);
    const byXid = (x: number) => outs.find((o) => o.call.xid === x)?.reply as Buffer;
    t.deepEqual(replyData(byXid(1)), pattern(2000, 1));
    t.deepEqual(replyData(byXid(2)), pattern(200, 2));
    t.deepEqual(replyData(byXid(3)), pattern(20001, 3));
    t.deepEqual(replyData(byXid(4)), pattern(300, 4));
    t.true(lb.client.counters.localInvalidations >= 2, 'the two-chunk call was fenced by Local Invalidates');
    t.is(lb.client.counters.lentReplies, 40, 'only the 40 plain ECHOs were lent');
    t.is(c.allocations, 4);
    for (const x of [1, 2, 3, 4]) {
      const k = outs.findIndex((o) => o.call.xid === x);
      t.true(c.handed[k].equals(outs[k].reply as Buffer), `reply ${x} is still whole: it was owned`);
    }
  } finally {
    await lb.close();
  }
});

test('without lendLimit nothing is lent', async (t) => {
  const lb = await loopback();
  try {
    lb.client.submit(TestCall.echo(1, pattern(50, 1), false));
    const [o] = await lb.collector.wait(1);
    t.deepEqual(replyData(o.reply as Buffer), pattern(50, 1));
    t.is(lb.client.counters.lentReplies, 0);
    t.is(lb.server.counters.lentCalls, 0);
  } finally {
    await lb.close();
  }
});

// ---------------------------------------------------------------------------------------------------
// The responder's side: `ResponderHandler.lendLimit`

test('small inline calls are lent to the responder while onCall runs, and emptied after it', async (t) => {
  const lb = await loopback();
  lb.responder.lendLimit = 1000;
  // What each call held while onCall ran, and whether it was the receive buffer's memory.
  const seen: { bytes: Buffer; view: Buffer }[] = [];
  lb.responder.override = (call) => {
    seen.push({ bytes: Buffer.from(call.message), view: call.message });
    return false; // answered by EchoResponder from the view, synchronously
  };
  try {
    // More calls than the server has Receives, in rounds, so its receive buffers are reused.
    const n = 5 * 40;
    for (let round = 0; round < 5; round++) {
      for (let i = round * 40; i < (round + 1) * 40; i++) {
        lb.client.submit(TestCall.echo(i + 1, pattern(60 + (i % 50), i), false));
      }
      await lb.collector.wait((round + 1) * 40);
    }
    for (const o of lb.collector.outcomes) {
      t.falsy(o.error, o.error?.message);
      const i = o.call.xid - 1;
      t.deepEqual(replyData(o.reply as Buffer), pattern(60 + (i % 50), i), `call ${i + 1} answered right`);
    }
    t.is(lb.server.counters.lentCalls, n);
    for (const [k, s] of seen.entries()) {
      t.deepEqual(s.bytes, encodeCall(k + 1, 1, pattern(60 + (k % 50), k)), `call ${k + 1} whole in onCall`);
    }
    t.true(
      lb.responder.received.every((call) => call.message.length === 0),
      'a lent message is empty once onCall returned: nobody reads a reposted Receive through it',
    );
    t.true(
      seen.some((s, k) => !s.view.equals(seen[k].bytes)),
      'the views were the receive buffers: reused since',
    );
  } finally {
    await lb.close();
  }
});

test('a call above lendLimit and a call with a Read chunk are owned by the responder', async (t) => {
  const lb = await loopback();
  lb.responder.lendLimit = 1000;
  lb.responder.hold = true; // kept past onCall: their messages must stay whole
  try {
    lb.client.submit(TestCall.echo(1, pattern(2000, 1), false)); // inline, above the limit
    // A SINK whose data comes by RDMA Read: its small inline part is delivered only after the Reads,
    // when its Receive is long reposted.
    const sink = new TestCall(2, encodeCall(2, PROC_SINK, pattern(10000, 2)));
    sink.ddpArgs = [{ offset: CALL_DATA, length: 10000 }];
    sink.maxReplySize = 64;
    lb.client.submit(sink);
    await waitUntil(() => lb.responder.held.length === 2);
    // Traffic through the same Receives meanwhile (answered at once, lent).
    lb.responder.hold = false;
    for (let i = 0; i < 40; i++) lb.client.submit(TestCall.echo(100 + i, pattern(300, 6), false));
    await lb.collector.wait(40);
    const byXid = (x: number) => lb.responder.held.find((c) => c.xid === x)?.message as Buffer;
    t.deepEqual(byXid(1), encodeCall(1, 1, pattern(2000, 1)));
    t.deepEqual(byXid(2), encodeCall(2, PROC_SINK, pattern(10000, 2)));
    t.is(lb.server.counters.lentCalls, 40, 'only the 40 small ECHOs were lent');
    for (const call of lb.responder.held) lb.responder.answer(call);
    const outs = await lb.collector.wait(42);
    for (const o of outs) t.falsy(o.error, o.error?.message);
    t.is(outs.find((o) => o.call.xid === 2)?.reply?.readUInt32BE(REPLY_DATA), 10000);
  } finally {
    await lb.close();
  }
});

async function waitUntil(done: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !done(); i++) await new Promise((r) => setTimeout(r, 10));
  if (!done()) throw new Error('timed out');
}
