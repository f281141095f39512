/**
 * The native provider's memory rule, run where no RDMA device exists: a device that registers only the
 * memory it allocated (`ownedMemoryOnly` on the soft provider, the native provider always). The transport
 * must then copy a caller's bytes (a client's WRITE data, an upstream's reply) into pooled registered
 * memory instead of registering them in place, with every chunk kind still carrying the right bytes and
 * every region returning to its pool.
 */
import test from 'ava';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { Access, VerbsError } from '../../rdma-backend/verbs/index.js';
import { loopback, pattern, replyData, sourceCall, TestCall } from './loopback.js';

const owned = { ownedMemoryOnly: true } as const;

test('ownedMemoryOnly: only allocBuffer memory (and views into it) can be registered', async (t) => {
  const device = await createSoftProvider(owned).openDevice();
  const pd = device.allocPd();
  const mine = device.allocBuffer(8192);
  t.true(device.canRegister(mine));
  t.true(device.canRegister(mine.subarray(100, 200)), 'a view into allocated memory');
  const foreign = Buffer.alloc(64);
  t.false(device.canRegister(foreign));
  t.false(device.canRegister(Buffer.allocUnsafe(64)), 'a pool slab never');
  const err = t.throws(() => pd.registerMemory(foreign, Access.REMOTE_READ));
  t.true(err instanceof VerbsError);
  t.is((err as VerbsError).code, 'VERBS_INVALID_ARGUMENT');
  const mr = pd.registerMemory(mine.subarray(4096), Access.REMOTE_READ);
  t.is(mr.length, 4096);
  mr.deregister();
  pd.dealloc();
  device.close();

  const lenient = await createSoftProvider().openDevice();
  t.true(lenient.canRegister(Buffer.alloc(64)), 'the default soft device registers any Buffer');
  lenient.close();
});

for (const version of [1, 2] as const) {
  test(`v${version} ownedMemoryOnly: Read chunks, Write chunks, Long Call and Long Reply carry copies`, async (t) => {
    const lb = await loopback({ client: { maxVersion: version }, provider: owned });
    try {
      // Read chunks out (the client's call bytes are a plain Buffer) and Write chunks back (the server's
      // reply is a plain Buffer too): odd lengths, so the XDR pad rules are exercised as well.
      const sizes = [4097, 8193, 65537, 5001];
      sizes.forEach((n, i) => {
        lb.client.submit(TestCall.echo(100 + i, pattern(n, i)));
      });
      lb.client.submit(sourceCall(200, 70001));
      let outs = await lb.collector.wait(sizes.length + 1);
      for (const o of outs) {
        t.falsy(o.error, o.error?.message);
        const data = replyData(o.reply as Buffer);
        if (o.call.xid === 200) t.deepEqual(data, pattern(70001, 3));
        else t.deepEqual(data, pattern(sizes[o.call.xid - 100], o.call.xid - 100));
      }
      // Position-Zero Read chunk (Long Call) and a Reply chunk (Long Reply).
      lb.responder.ddpResults = false;
      const long = TestCall.echo(300, pattern(20001, 5), false);
      long.maxReplySize = 30000;
      lb.client.submit(long);
      outs = await lb.collector.wait(sizes.length + 2);
      const last = outs[outs.length - 1];
      t.falsy(last.error, last.error?.message);
      t.deepEqual(replyData(last.reply as Buffer), pattern(20001, 5));

      const cs = lb.client.snapshot();
      const ss = lb.server.snapshot();
      t.is(lb.client.version, version);
      t.is(cs.counters.readChunkCalls, sizes.length);
      t.is(cs.counters.longCalls, 1);
      t.is(ss.counters.longReplies, 1);
      // Every Read-chunk source and the Long Call went through a copy: at least their data bytes.
      const sent = sizes.reduce((a, n) => a + n, 0) + 20001;
      t.true(cs.registrations.bounceBytes >= sent, `client copied ${cs.registrations.bounceBytes} B`);
      t.true(
        ss.registrations.bounceBytes >= 70001 + 20001,
        `server copied ${ss.registrations.bounceBytes} B`,
      );
      t.is(cs.registrations.inUse, 0, 'client: every region back in its pool');
      t.is(ss.registrations.inUse, 0, 'server: every region back in its pool');
      t.is(cs.counters.errorsSent + ss.counters.errorsSent, 0);
    } finally {
      await lb.close();
    }
  });
}

test('ownedMemoryOnly: a responder-provided Read chunk is a copy, and goes back to the pool after DONE', async (t) => {
  const lb = await loopback({ provider: owned });
  lb.responder.ddpResults = false;
  try {
    lb.client.submit(TestCall.echo(1, Buffer.from('v2 first'), false));
    await lb.collector.wait(1);
    const c = TestCall.echo(2, pattern(30001, 2), false);
    c.maxReplySize = 1000; // no Reply chunk offered: the responder exposes the reply for a pull
    lb.client.submit(c);
    const outs = await lb.collector.wait(2);
    t.falsy(outs[1].error, outs[1].error?.message);
    t.deepEqual(replyData(outs[1].reply as Buffer), pattern(30001, 2));
    for (let i = 0; i < 200 && lb.server.snapshot().registrations.inUse > 0; i++) {
      await new Promise((r) => setTimeout(r, 5));
    }
    t.is(lb.server.snapshot().counters.rprcReplies, 1);
    t.true(lb.server.snapshot().registrations.bounceBytes >= 30001);
    t.is(lb.server.snapshot().registrations.inUse, 0, 'released once DONE arrived');
    t.is(lb.client.snapshot().registrations.inUse, 0);
  } finally {
    await lb.close();
  }
});

test('ownedMemoryOnly: a reply whose DDP data fills the largest chunk, so its whole message is larger, still goes', async (t) => {
  // The reply message is copied whole into registered memory (registerLocal); it is not a chunk, and a
  // limit meant for chunks once refused it, leaving the call unanswered.
  const lb = await loopback({ provider: owned });
  try {
    const n = 4 * 1024 * 1024; // the default maxChunkSize
    lb.client.submit(sourceCall(1, n));
    const [o] = await lb.collector.wait(1, 5000);
    t.falsy(o.error, o.error?.message);
    t.is(replyData(o.reply as Buffer).length, n);
    t.is(lb.server.snapshot().registrations.inUse, 0);
  } finally {
    await lb.close();
  }
});
