/**
 * Every RDMA2_ERROR both ways: our responder sends it when its condition is met, our requester handles
 * it — retrying with more resources where seed 004 §5.3.3 allows, else failing the call with a typed,
 * non-retransmittable error.
 */
import test from 'ava';
import {
  encodeReply,
  loopback,
  pattern,
  REPLY_DATA,
  replyData,
  sourceCall,
  TestCall,
  twoItemCall,
} from './loopback.js';

test('READ_CHUNKS: more Read chunks than the responder takes → resent with a Position-Zero Read chunk', async (t) => {
  const lb = await loopback({ server: { maxReadChunks: 1 } });
  let seen: Buffer | null = null;
  lb.responder.override = (call, conn) => {
    seen = call.message;
    conn.reply(call, encodeReply(call.xid, Buffer.from('ok')));
    return true;
  };
  try {
    const c = twoItemCall(1, pattern(5000, 1), pattern(6003, 2));
    lb.client.submit(c);
    const [o] = await lb.collector.wait(1);
    t.falsy(o.error, o.error?.message);
    t.deepEqual(seen, c.message, 'the responder got the whole call through the retry');
    t.is(lb.server.snapshot().counters.errorsSent, 1);
    t.is(lb.client.snapshot().counters.retries, 1);
    t.is(lb.client.snapshot().counters.longCalls, 1);
  } finally {
    await lb.close();
  }
});

test('WRITE_CHUNKS: more Write chunks than the responder returns → resent with a Reply chunk instead', async (t) => {
  const lb = await loopback({ server: { maxWriteChunks: 0 } });
  try {
    const c = TestCall.echo(1, pattern(9001, 4));
    c.maxReplySize = REPLY_DATA + 9004;
    lb.client.submit(c);
    const [o] = await lb.collector.wait(1);
    t.falsy(o.error, o.error?.message);
    t.deepEqual(replyData(o.reply as Buffer), pattern(9001, 4));
    t.is(lb.client.snapshot().counters.errorsReceived, 1);
    t.is(lb.client.snapshot().counters.longReplies, 1);
  } finally {
    await lb.close();
  }
});

test('SEGMENTS: a chunk with more segments than allowed fails the call, not retransmittable', async (t) => {
  const lb = await loopback({ server: { maxSegmentsPerChunk: 0 } });
  try {
    lb.client.submit(TestCall.echo(1, pattern(9000)));
    const [o] = await lb.collector.wait(1);
    t.is(o.error?.code, 'ERR_TRANSPORT_PEER_SEGMENTS');
    t.false(o.error?.retransmit);
    t.is(o.error?.details.maxSegments, 0);
  } finally {
    await lb.close();
  }
});

test('WRITE_RESOURCE: a result larger than its Write chunk → resent with the length needed', async (t) => {
  const lb = await loopback();
  try {
    lb.client.submit(sourceCall(1, 6001, 100));
    const [o] = await lb.collector.wait(1);
    t.falsy(o.error, o.error?.message);
    t.deepEqual(replyData(o.reply as Buffer), pattern(6001, 3));
    t.is(lb.server.snapshot().counters.errorsSent, 1);
    t.is(lb.client.snapshot().counters.retries, 1);
  } finally {
    await lb.close();
  }
});

test('REPLY_RESOURCE: a reply larger than the Reply chunk → resent with a larger Reply chunk', async (t) => {
  // Without responder-provided Read chunks (seed 002), the only remedy is the resend.
  const lb = await loopback({ client: { rprc: false } });
  lb.responder.ddpResults = false;
  try {
    const c = TestCall.echo(1, pattern(20000, 6), false);
    c.maxReplySize = 6000; // the caller under-estimated
    lb.client.submit(c);
    const [o] = await lb.collector.wait(1);
    t.falsy(o.error, o.error?.message);
    t.deepEqual(replyData(o.reply as Buffer), pattern(20000, 6));
    t.is(lb.client.snapshot().counters.retries, 1);
  } finally {
    await lb.close();
  }
});

test('Version 1: resource errors are ERR_CHUNK and fail the call (no retry in Version 1)', async (t) => {
  const lb = await loopback({ client: { maxVersion: 1 } });
  try {
    lb.client.submit(sourceCall(1, 6001, 100));
    const [o] = await lb.collector.wait(1);
    t.is(o.error?.code, 'ERR_TRANSPORT_PEER_BAD_XDR');
    t.false(o.error?.retransmit);
    t.is(o.error?.details.version, 1);
  } finally {
    await lb.close();
  }
});

for (const [code, name] of [
  [2, 'BAD_XDR'],
  [3, 'INVAL_HTYPE'],
  [9, 'SYSTEM'],
] as const) {
  test(`${name} from the responder fails the call with ERR_TRANSPORT_PEER_${name}`, async (t) => {
    const lb = await loopback();
    lb.responder.override = (call, conn) => {
      conn.replyError(call, { code });
      return true;
    };
    try {
      lb.client.submit(TestCall.echo(1, Buffer.from('x'), false));
      lb.client.submit(TestCall.echo(2, pattern(7000)));
      const outs = await lb.collector.wait(2);
      for (const o of outs) {
        t.is(o.error?.code, `ERR_TRANSPORT_PEER_${name}`);
        t.false(o.error?.retransmit);
      }
      t.is(lb.client.snapshot().registrations.inUse, 0, 'chunks invalidated and released on the error');
      t.is(lb.client.state, 'ready', 'the connection stays up');
    } finally {
      await lb.close();
    }
  });
}

test('retries are bounded: a responder that always answers REPLY_RESOURCE ends the call', async (t) => {
  const lb = await loopback();
  lb.responder.override = (call, conn) => {
    conn.replyError(call, { code: 8, lengthNeeded: 64 * 1024 });
    return true;
  };
  try {
    lb.client.submit(TestCall.echo(1, Buffer.from('x'), false));
    const [o] = await lb.collector.wait(1);
    t.is(o.error?.code, 'ERR_TRANSPORT_PEER_REPLY_RESOURCE');
    t.is(lb.responder.received.length, 3, 'first try and two retries');
  } finally {
    await lb.close();
  }
});
