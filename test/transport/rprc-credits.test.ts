/**
 * Credits and responder-provided Read chunks (seed 002). "Sending an RDMA_DONE message consumes one
 * credit" (§5.2.3): the requester holds a pulled reply's credit until its DONE is posted, so calls in
 * flight plus pulls in progress stay within the grant. The responder exposes at most its grant of replies
 * (beyond that, a requester that does not notify gets REPLY_RESOURCE, as without the extension), and
 * revokes an exposed reply whose DONE never comes after `rprcExpiryMs` (§4.1.3).
 */
import test from 'ava';
import { decodeHeader, type RpcRdmaHeader } from '../../rdma-backend/protocol/index.js';
import type { InboundCall } from '../../rdma-backend/transport/index.js';
import { WcStatus } from '../../rdma-backend/verbs/index.js';
import { plainPrivateData, RoguePeer } from '../helpers/rogue-peer.js';
import {
  captureTransportLog,
  echoServer,
  encodeCall,
  headerBytes,
  loopback,
  PROC_SOURCE,
  pattern,
  replyData,
  sourceCall,
  TestCall,
} from './loopback.js';

test('pulls held back (ORD 1) hold their credits: calls unanswered plus replies exposed never exceed the credits, window after window', async (t) => {
  const N = 4;
  const WINDOWS = 4;
  const lb = await loopback({ client: { credits: N, ord: 1 } });
  lb.responder.ddpResults = false;
  try {
    lb.client.submit(TestCall.echo(1, Buffer.from('v2 first'), false));
    await lb.collector.wait(1);
    // The responder answers a window at a time: once N calls are held, all N at once, each reply in a
    // responder-provided Read chunk, which the requester pulls one at a time (ORD 1).
    let peak = 0;
    lb.responder.hold = true;
    const onCall = lb.responder.onCall.bind(lb.responder);
    lb.responder.onCall = (call: InboundCall) => {
      onCall(call);
      peak = Math.max(peak, lb.server.rprcPending.size + lb.responder.held.length);
      if (lb.responder.held.length === N) for (const c of lb.responder.held.splice(0)) lb.responder.answer(c);
    };
    // A deep queue, as a busy gateway has: every credit that comes back is used at once.
    for (let i = 0; i < N * WINDOWS; i++) {
      // Inline SOURCE calls for 6000 bytes, offering no Write chunk and no Reply chunk.
      const c = sourceCall(100 + i, 6000 + i);
      c.ddpResults = [];
      c.maxReplySize = 1000;
      lb.client.submit(c);
    }
    const outs = await lb.collector.wait(1 + N * WINDOWS, 20_000);
    for (const o of outs.slice(1)) {
      t.falsy(o.error, o.error?.message);
      t.deepEqual(replyData(o.reply as Buffer), pattern(6000 + o.call.xid - 100, 3));
    }
    t.true(peak <= N, `the responder saw ${peak} calls and exposed replies at once, over the ${N} credits`);
    t.is(lb.server.counters.rprcReplies, N * WINDOWS);
    t.is(lb.client.counters.peakReadsOutstanding, 1, 'the pulls went one at a time');
    t.is(lb.client.credits.outstanding, 0, 'every credit came back');
    for (let i = 0; i < 100 && lb.server.rprcPending.size > 0; i++)
      await new Promise((r) => setTimeout(r, 5));
    t.is(lb.server.rprcPending.size, 0, 'every DONE arrived');
    t.is(lb.server.snapshot().counters.errorsSent, 0);
  } finally {
    await lb.close();
  }
});

/** A rogue requester that takes responder-provided Read chunks (RPRC) and never sends a DONE. */
async function rogueRequester(server: Parameters<typeof echoServer>[0]) {
  const s = await echoServer(server);
  const peer = await RoguePeer.connect(s.listener.port, plainPrivateData());
  await peer.ask(headerBytes({ version: 2, htype: 5, xid: 1, credit: 8, props: [{ id: 4, value: true }] }));
  const source = async (xid: number, n: number): Promise<RpcRdmaHeader> => {
    const arg = Buffer.alloc(4);
    arg.writeUInt32BE(n);
    return decodeHeader(
      await peer.ask(
        headerBytes({ version: 2, htype: 0, xid, credit: 8, chunks: {} }, encodeCall(xid, PROC_SOURCE, arg)),
      ),
    );
  };
  return { s, peer, source };
}

test('a requester that never sends DONE has its exposed replies revoked after rprcExpiryMs, logged and counted', async (t) => {
  const log = captureTransportLog();
  const { s, peer, source } = await rogueRequester({ rprcExpiryMs: 1500, logger: log.logger });
  try {
    const h = await source(2, 10001);
    if (h.version !== 2 || h.htype !== 1) throw new Error(`expected RDMA2_NOMSG, got ${JSON.stringify(h)}`);
    const rd = h.chunks.reads[0];
    const conn = s.conns[0];
    t.is(conn.rprcPending.size, 1);
    await new Promise((r) => setTimeout(r, 50));
    t.is(conn.rprcPending.size, 1, 'still exposed before the expiry');
    await peer.until(() => conn.rprcPending.size === 0, 'the exposed reply revoked', 8000);
    t.is(conn.counters.rprcExpired, 1);
    t.is(conn.snapshot().registrations.inUse, 0, 'its registration went with it');
    t.like(log.lines.find((l) => l.obj.code === 'ERR_TRANSPORT_RPRC_EXPIRED')?.obj, {
      revoked: 1,
      xid: 2,
      expiryMs: 1500,
    });
    // Seed 002 §4.1.3: a Read of it now is a remote access error.
    const late = await peer.read(rd.handle, rd.offset, 4);
    t.not(late.status, WcStatus.SUCCESS);
  } finally {
    peer.close();
    await s.close();
  }
});

test('no more replies exposed than the grant: beyond it REPLY_RESOURCE, as without the extension, until a DONE comes', async (t) => {
  const { s, peer, source } = await rogueRequester({ credits: 2 });
  try {
    const first = await source(2, 10001);
    const second = await source(3, 10001);
    t.like(first, { version: 2, htype: 1 });
    t.like(second, { version: 2, htype: 1 });
    // Both credits are held by the replies it has not notified: a third is not exposed.
    const third = await source(4, 10001);
    t.like(third, { version: 2, htype: 4, xid: 4, error: { code: 8 } }, 'RDMA2_ERR_REPLY_RESOURCE');
    t.is(s.conns[0].rprcPending.size, 2);
    peer.send(headerBytes({ version: 2, htype: 3, xid: 2, credit: 8 }));
    await peer.until(() => s.conns[0].rprcPending.size === 1, 'the DONE taken');
    const fourth = await source(5, 10001);
    t.like(fourth, { version: 2, htype: 1 }, 'exposed again once a DONE came');
    t.is(s.conns[0].state, 'ready');
  } finally {
    peer.close();
    await s.close();
  }
});
