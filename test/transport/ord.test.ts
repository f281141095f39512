/**
 * The responder's RDMA Reads of Read chunks stay within the negotiated ORD (the requester's IRD), and a
 * requester whose ORD is 0 (the responder's IRD) does not ask for replies it would have to pull.
 */
import test from 'ava';
import { RDMA2_PROPID_RPRC } from '../../rdma-backend/protocol/index.js';
import { xdrPad } from '../../rpc/xdr.js';
import {
  CALL_DATA,
  encodeCall,
  encodeReply,
  loopback,
  PROC_ECHO,
  pattern,
  replyData,
  TestCall,
} from './loopback.js';

/** A call with `n` DDP-eligible opaques of `size` bytes each (n Read chunks). */
function manyItemCall(xid: number, n: number, size: number): TestCall {
  const parts: Buffer[] = [encodeCall(xid, PROC_ECHO, pattern(size, 0))];
  const items = [{ offset: CALL_DATA, length: size }];
  let off = parts[0].length;
  for (let i = 1; i < n; i++) {
    const lw = Buffer.alloc(4);
    lw.writeUInt32BE(size);
    items.push({ offset: off + 4, length: size });
    parts.push(lw, pattern(size, i), Buffer.alloc(xdrPad(size)));
    off += 4 + size + xdrPad(size);
  }
  const c = new TestCall(xid, Buffer.concat(parts));
  c.ddpArgs = items;
  c.maxReplySize = 1024;
  return c;
}

for (const ird of [1, 4]) {
  test(`five Read chunks against a requester IRD of ${ird}: at most ${ird} RDMA Read(s) outstanding`, async (t) => {
    const lb = await loopback({ client: { ird }, server: { maxReadChunks: 8 } });
    let got: Buffer | null = null;
    lb.responder.override = (call, conn) => {
      got = call.message;
      conn.reply(call, encodeReply(call.xid, Buffer.from('ok')));
      return true;
    };
    try {
      const calls = [manyItemCall(1, 5, 5003), manyItemCall(2, 5, 4097)];
      for (const c of calls) lb.client.submit(c);
      const outs = await lb.collector.wait(2);
      for (const o of outs) t.falsy(o.error, o.error?.message);
      t.deepEqual(got, calls[1].message);
      const peak = lb.server.snapshot().counters.peakReadsOutstanding;
      t.true(peak <= ird, `peak ${peak}`);
      if (ird > 1) t.true(peak > 1, `reads ran one at a time (peak ${peak}) although ORD allows ${ird}`);
      t.is(lb.server.snapshot().counters.rdmaReads, 10);
    } finally {
      await lb.close();
    }
  });
}

for (const offerRtr of ['read', 'both'] as const) {
  test(`an initiator offering the ${offerRtr === 'read' ? 'Read RTR only (iw_cxgb4 by default)' : 'Write and Read RTRs (Linux siw)'}: calls with Read chunks run as on any connection`, async (t) => {
    const lb = await loopback({ provider: { offerRtr }, client: { ird: 1 }, server: { maxReadChunks: 8 } });
    lb.responder.override = (call, conn) => {
      conn.reply(call, encodeReply(call.xid, call.message.subarray(CALL_DATA, CALL_DATA + 16)));
      return true;
    };
    try {
      const calls = [manyItemCall(1, 3, 5003), manyItemCall(2, 2, 4097)];
      for (const c of calls) lb.client.submit(c);
      const outs = await lb.collector.wait(2);
      for (const o of outs) t.falsy(o.error, o.error?.message);
      t.is(lb.server.snapshot().counters.rdmaReads, 5);
      t.is(lb.client.state, 'ready');
    } finally {
      await lb.close();
    }
  });
}

test('a requester IRD of 0: a call with a Read chunk is refused (nothing can pull it), the connection and inline calls go on', async (t) => {
  const lb = await loopback({ client: { ird: 0 }, server: { maxReadChunks: 8 } });
  try {
    lb.client.submit(manyItemCall(1, 1, 5003));
    const [refused] = await lb.collector.wait(1);
    t.is(lb.server.ord, 0, "the requester's IRD 0 leaves the responder no Read");
    t.is(refused.error?.code, 'ERR_TRANSPORT_PEER_SYSTEM', refused.error?.message);
    t.is(lb.server.snapshot().counters.rdmaReads, 0);
    lb.client.submit(TestCall.echo(2, Buffer.from('inline'), false));
    const outs = await lb.collector.wait(2);
    t.falsy(outs[1].error, outs[1].error?.message);
    t.is(lb.client.state, 'ready');
    t.is(lb.server.state, 'ready');
  } finally {
    await lb.close();
  }
});

test('a requester ORD of 0 (responder IRD 0): RPRC is not announced, a reply too large for the call comes back as REPLY_RESOURCE and the retry with a Reply chunk succeeds', async (t) => {
  const lb = await loopback({ server: { ird: 0 } });
  lb.responder.ddpResults = false;
  try {
    lb.client.submit(TestCall.echo(1, Buffer.from('v2 first'), false));
    const [first] = await lb.collector.wait(1);
    t.falsy(first.error, first.error?.message);
    t.is(lb.client.version, 2);
    t.is(lb.client.ord, 0, "the responder's IRD 0 leaves the requester no Read");
    const c = TestCall.echo(2, pattern(30001, 2), false);
    c.maxReplySize = 1000; // fits inline as far as the caller knows: no Reply chunk offered
    lb.client.submit(c);
    const outs = await lb.collector.wait(2);
    t.falsy(outs[1].error, `${outs[1].error?.code}: ${outs[1].error?.message}`);
    t.deepEqual(replyData(outs[1].reply as Buffer), pattern(30001, 2));
    t.is(lb.server.props.peerValues.get(RDMA2_PROPID_RPRC), false, 'the requester announced no RPRC');
    const s = lb.server.snapshot();
    t.is(s.counters.rprcReplies, 0, 'nothing exposed');
    t.deepEqual(s.errors.sent, { RDMA2_ERR_REPLY_RESOURCE: 1 });
    t.is(lb.client.snapshot().counters.retries, 1, 'retried with a Reply chunk');
    t.is(lb.client.state, 'ready');
  } finally {
    await lb.close();
  }
});
