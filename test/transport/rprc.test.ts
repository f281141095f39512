/** Responder-provided Read chunks and RDMA2_DONE (seed 002). */
import test from 'ava';
import { decodeHeader, encodePrivateData } from '../../rdma-backend/protocol/index.js';
import { WcStatus } from '../../rdma-backend/verbs/index.js';
import { RoguePeer } from '../helpers/rogue-peer.js';
import {
  delay,
  echoServer,
  encodeCall,
  headerBytes,
  loopback,
  PROC_SOURCE,
  pattern,
  REPLY_DATA,
  replyData,
  TestCall,
} from './loopback.js';

test('a reply larger than every requester resource travels in a responder-provided Read chunk, then DONE', async (t) => {
  const lb = await loopback();
  lb.responder.ddpResults = false;
  try {
    await new Promise<void>((r) => {
      lb.client.submit(TestCall.echo(1, Buffer.from('v2 first'), false));
      void lb.collector.wait(1).then(() => r());
    });
    const c = TestCall.echo(2, pattern(30001, 2), false);
    c.maxReplySize = 1000; // fits inline as far as the caller knows: no Reply chunk offered
    lb.client.submit(c);
    const outs = await lb.collector.wait(2);
    t.falsy(outs[1].error, outs[1].error?.message);
    t.deepEqual(replyData(outs[1].reply as Buffer), pattern(30001, 2));
    // DONE is a control message: wait for the server to take it.
    for (let i = 0; i < 100 && lb.server.snapshot().counters.remoteInvalidations === 0; i++) {
      await new Promise((r) => setTimeout(r, 5));
    }
    t.is(lb.server.snapshot().counters.rprcReplies, 1);
    t.is(lb.client.snapshot().counters.donesSent, 1);
    t.is(
      lb.server.snapshot().counters.remoteInvalidations,
      1,
      'DONE came With Invalidate of the exposed rkey',
    );
    t.is(lb.server.snapshot().counters.errorsSent, 0);
    t.is(lb.client.snapshot().registrations.inUse, 0);
    t.is(lb.server.snapshot().registrations.inUse, 0);
  } finally {
    await lb.close();
  }
});

// RPRC needs both ends: a requester that announces it (seed 002 §4.1.1), and a responder with the Version
// 2 extensions, since the requester's DONE that ends each such reply is one of them (it would refuse it).
for (const [title, options] of [
  ['a requester without RPRC support is not sent one: REPLY_RESOURCE instead', { client: { rprc: false } }],
  [
    'a responder without the Version 2 extensions sends none either: RPRC needs the DONE it would refuse',
    { server: { extensions: false } },
  ],
] as const) {
  test(title, async (t) => {
    const lb = await loopback(options);
    lb.responder.ddpResults = false;
    lb.responder.override = null;
    try {
      const c = TestCall.echo(2, pattern(30001, 2), false);
      c.maxReplySize = 1000;
      lb.client.submit(c);
      const [o] = await lb.collector.wait(1);
      t.falsy(o.error, o.error?.message);
      await delay(100);
      const s = lb.server.snapshot();
      t.is(s.counters.rprcReplies, 0);
      t.is(s.counters.errorsSent, 1, 'REPLY_RESOURCE, then the requester retried');
      t.is(lb.client.snapshot().counters.retries, 1);
      t.is(s.registrations.inUse, 0, 'nothing left exposed');
    } finally {
      await lb.close();
    }
  });
}

test('rogue requester: pulls the reply, sends DONE, and the exposed rkey is dead afterwards', async (t) => {
  const s = await echoServer();
  const listener = s.listener;
  const conns = s.conns;
  const peer = await RoguePeer.connect(
    listener.port,
    encodePrivateData({ sendWithInvalidateOk: false, inlineSendSize: 4096, inlineRecvSize: 4096 }),
  );
  try {
    peer.send(headerBytes({ version: 2, htype: 5, xid: 1, credit: 8, props: [{ id: 4, value: true }] }));
    await peer.message(0);
    const arg = Buffer.alloc(4);
    arg.writeUInt32BE(10001);
    peer.send(
      headerBytes({ version: 2, htype: 0, xid: 2, credit: 8, chunks: {} }, encodeCall(2, PROC_SOURCE, arg)),
    );
    const h = decodeHeader(await peer.message(1));
    if (h.version !== 2 || h.htype !== 1) throw new Error(`expected RDMA2_NOMSG, got ${JSON.stringify(h)}`);
    t.is(h.flags, 1);
    t.is(h.chunks.reads.length, 1);
    const rd = h.chunks.reads[0];
    t.is(rd.position, 0);
    const got = await peer.read(rd.handle, rd.offset, rd.length);
    t.is(got.status, WcStatus.SUCCESS);
    t.is(got.data.length, REPLY_DATA + 10004);
    t.deepEqual(replyData(got.data), pattern(10001, 3));
    peer.send(headerBytes({ version: 2, htype: 3, xid: 2, credit: 8 }));
    for (let i = 0; i < 100 && conns[0].snapshot().registrations.inUse > 0; i++) {
      await new Promise((r) => setTimeout(r, 5));
    }
    t.is(conns[0].snapshot().registrations.inUse, 0, 'the exposed reply is fenced after DONE');
    const stale = await peer.read(rd.handle, rd.offset, 4);
    t.not(stale.status, WcStatus.SUCCESS, 'a Read after DONE is refused by the provider');
  } finally {
    peer.close();
    await s.close();
  }
});

test('a full window of replies in responder-provided Read chunks, each followed by a DONE and a new call, never exhausts the Receives', async (t) => {
  const N = 32;
  const lb = await loopback({ client: { credits: N }, server: {} });
  lb.responder.ddpResults = false;
  try {
    lb.client.submit(TestCall.echo(1, Buffer.from('v2 first'), false));
    await lb.collector.wait(1);
    let xid = 100;
    const last = 100 + 6 * N;
    const next = () => {
      const c = TestCall.echo(++xid, pattern(6000, 2), false);
      c.maxReplySize = 1000; // no Reply chunk offered: every reply comes in a responder-provided Read chunk
      return c;
    };
    // Keep the window full: a new call for every reply, as a gateway with a deep queue does.
    const onReply = lb.collector.onReply.bind(lb.collector);
    lb.collector.onReply = (call, reply) => {
      if (xid < last) lb.client.submit(next());
      onReply(call, reply);
    };
    // The responder holds the first window, then answers it at once: N replies pulled, then N DONEs and N
    // calls in flight together (seed 002 §5.2.3: DONE has no credit of its own).
    lb.responder.hold = true;
    for (let i = 0; i < N; i++) lb.client.submit(next());
    await new Promise((r) => setTimeout(r, 200));
    lb.responder.hold = false;
    for (const c of lb.responder.held.splice(0)) lb.responder.answer(c);
    const outs = await lb.collector.wait(1 + (last - 100), 20_000);
    t.true(
      outs.every((o) => !o.error),
      outs.find((o) => o.error)?.error?.message,
    );
    t.is(lb.server.state, 'ready', `the server end stayed up (${lb.server.closeReason ?? ''})`);
    t.true(lb.client.snapshot().counters.donesSent >= 6 * N - 1);
  } finally {
    await lb.close();
  }
});
