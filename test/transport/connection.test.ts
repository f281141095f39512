import test from 'ava';
import type { SoftCq } from '../../rdma-backend/providers/soft/cq.js';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { peerVersions, RpcRdmaConnection } from '../../rdma-backend/transport/index.js';
import { ChunkRegistrar } from '../../rdma-backend/transport/registration.js';
import { deviceRefusingRegistration } from '../helpers/refusing-device.js';
import {
  Collector,
  delay,
  EchoResponder,
  encodeReply,
  loopback,
  pattern,
  replyData,
  TestCall,
} from './loopback.js';

test('inline call and reply, Version 2 negotiated with CONNPROP both ways', async (t) => {
  const lb = await loopback();
  try {
    const c = TestCall.echo(1, Buffer.from('hello'), false);
    lb.client.submit(c);
    const [o] = await lb.collector.wait(1);
    t.falsy(o.error);
    t.deepEqual(replyData(o.reply as Buffer), Buffer.from('hello'));
    t.is(lb.client.version, 2);
    t.is(lb.server.version, 2);
    t.is(lb.client.snapshot().credits.granted, lb.server.grant);
    t.is(lb.client.snapshot().counters.inlineCalls, 1);
  } finally {
    await lb.close();
  }
});

for (const version of [1, 2] as const) {
  test(`v${version}: DDP Read chunk and Write chunk with odd lengths keep the XDR pad inline-only`, async (t) => {
    const lb = await loopback({ client: { maxVersion: version } });
    try {
      const sizes = [4097, 8193, 65537, 5001, 12345];
      sizes.forEach((n, i) => {
        lb.client.submit(TestCall.echo(100 + i, pattern(n, i)));
      });
      const outs = await lb.collector.wait(sizes.length);
      for (const o of outs) {
        t.falsy(o.error, o.error?.message);
        const i = o.call.xid - 100;
        t.deepEqual(replyData(o.reply as Buffer), pattern(sizes[i], i));
      }
      const s = lb.client.snapshot();
      t.is(lb.client.version, version);
      t.is(s.counters.readChunkCalls, sizes.length);
      t.true(lb.server.snapshot().counters.rdmaWrites >= sizes.length);
      t.is(s.registrations.inUse, 0, 'every registration released after the calls');
    } finally {
      await lb.close();
    }
  });

  test(`v${version}: long call (Position-Zero Read chunk, NOMSG) and long reply (Reply chunk)`, async (t) => {
    const lb = await loopback({ client: { maxVersion: version } });
    lb.responder.ddpResults = false;
    try {
      const data = pattern(20001, 5);
      const c = TestCall.echo(7, data, false);
      c.maxReplySize = 30000;
      lb.client.submit(c);
      const [o] = await lb.collector.wait(1);
      t.falsy(o.error, o.error?.message);
      t.deepEqual(replyData(o.reply as Buffer), data);
      t.is(lb.client.snapshot().counters.longCalls, 1);
      t.is(lb.server.snapshot().counters.longReplies, 1);
      t.is(lb.client.snapshot().counters.longReplies, 1);
    } finally {
      await lb.close();
    }
  });
}

test('version fallback: a Version 1 server answers ERR_VERS, the client continues in v1 and remembers', async (t) => {
  const key = `fallback-${process.pid}`;
  peerVersions.delete(key);
  const lb = await loopback({ server: { maxVersion: 1 }, peerKey: key });
  try {
    lb.client.submit(TestCall.echo(1, Buffer.from('abc'), false));
    const [o] = await lb.collector.wait(1);
    t.falsy(o.error, o.error?.message);
    t.is(lb.client.version, 1);
    t.is(lb.server.version, 1);
    t.is(peerVersions.get(key), 1);
    t.is(lb.server.snapshot().counters.errorsSent, 1, 'exactly one ERR_VERS');
  } finally {
    await lb.close();
  }
  // Next connection to the same peer starts in Version 1 without a probe.
  const lb2 = await loopback({ server: { maxVersion: 1 }, peerKey: key });
  try {
    lb2.client.submit(TestCall.echo(2, Buffer.from('abc'), false));
    await lb2.collector.wait(1);
    t.is(lb2.server.snapshot().counters.errorsSent, 0);
    t.is(lb2.client.version, 1);
  } finally {
    await lb2.close();
    peerVersions.delete(key);
  }
});

test('credit exhaustion: 3000 queued calls through a grant of 4, never more outstanding, no terminate', async (t) => {
  const lb = await loopback({ server: { credits: 4 }, client: { credits: 16 } });
  try {
    let maxOutstanding = 0;
    const origOnCall = lb.responder.onCall.bind(lb.responder);
    lb.responder.onCall = (call) => {
      maxOutstanding = Math.max(maxOutstanding, lb.client.snapshot().credits.outstanding);
      origOnCall(call);
    };
    const N = 3000;
    for (let i = 0; i < N; i++) lb.client.submit(TestCall.echo(i + 1, Buffer.from([i & 0xff]), false));
    t.true(lb.client.snapshot().credits.queued > N - 10);
    const outs = await lb.collector.wait(N, 60000);
    t.is(outs.filter((o) => o.error).length, 0);
    t.true(maxOutstanding <= 4, `outstanding peaked at ${maxOutstanding}`);
    t.is(lb.client.snapshot().credits.granted, 4);
    t.is(lb.client.state, 'ready');
    t.is(lb.server.state, 'ready');
    // Every reply matched its own call.
    for (const o of outs) t.is(replyData(o.reply as Buffer)[0], (o.call.xid - 1) & 0xff);
  } finally {
    await lb.close();
  }
});

test('connection kill mid-flight: every call reported once as needing retransmission', async (t) => {
  const lb = await loopback({ server: { credits: 8 } });
  lb.responder.hold = true;
  try {
    const N = 50;
    for (let i = 0; i < N; i++) lb.client.submit(TestCall.echo(i + 1, pattern(i % 2 ? 9000 : 10, i)));
    while (lb.responder.held.length < 8) await delay(5);
    lb.server.close('test kill');
    const outs = await lb.collector.wait(N);
    await delay(50);
    t.is(lb.collector.outcomes.length, N, 'no duplicate reports');
    const xids = new Set(outs.map((o) => o.call.xid));
    t.is(xids.size, N);
    for (const o of outs) {
      t.truthy(o.error);
      t.true(o.error?.retransmit);
      t.is(o.error?.code, 'ERR_TRANSPORT_CONNECTION_LOST');
    }
    t.is(lb.client.state, 'closed');
    t.is(lb.client.snapshot().registrations.inUse, 0);
    // Late replies of held calls go nowhere; a submit after close fails at once for retransmission.
    for (const c of lb.responder.held) lb.server.reply(c, Buffer.alloc(32));
    lb.client.submit(TestCall.echo(999, Buffer.from('x'), false));
    const late = await lb.collector.wait(N + 1);
    t.true(late[N].error?.retransmit);
  } finally {
    await lb.close();
  }
});

test('an abandoned call is never reported, and its chunks stay registered until its reply is invalidated', async (t) => {
  const lb = await loopback();
  lb.responder.hold = true;
  try {
    const gone = TestCall.echo(1, pattern(9000, 1));
    const kept = TestCall.echo(2, pattern(9000, 2));
    lb.client.submit(gone);
    lb.client.submit(kept);
    while (lb.responder.held.length < 2) await delay(5);
    lb.client.abandon(gone);
    t.is(lb.client.snapshot().registrations.inUse, 4, 'Read + Write chunk of each call still fenced');
    lb.responder.hold = false;
    for (const c of lb.responder.held.splice(0)) lb.responder.answer(c);
    const [o] = await lb.collector.wait(1);
    t.is(o.call, kept);
    await delay(50);
    t.is(lb.collector.outcomes.length, 1, 'nothing reported for the abandoned call');
    t.is(
      lb.client.snapshot().registrations.inUse,
      0,
      'its memory was invalidated and released with its reply',
    );
  } finally {
    await lb.close();
  }
});

test('a chunk larger than the connection takes is refused with a typed error, never registered (no class past 2^30)', async (t) => {
  const device = await createSoftProvider().openDevice();
  const registrar = new ChunkRegistrar(device.allocPd(), 4 * 1024 * 1024);
  for (const length of [4 * 1024 * 1024 + 1, 2 ** 30 + 1, 2 ** 31, 0xffffffff]) {
    const e = t.throws(() => registrar.acquireTarget(length));
    t.is((e as { code?: string }).code, 'ERR_TRANSPORT_CHUNK_TOO_LARGE', `${length}`);
  }
  t.is(registrar.acquireTarget(4 * 1024 * 1024).mr.length, 4 * 1024 * 1024);
});

test('a call whose reply bound is beyond any chunk offers a Reply chunk of the largest size, and completes', async (t) => {
  const lb = await loopback();
  try {
    const c = TestCall.echo(3, Buffer.from('small reply, huge bound'), false);
    c.maxReplySize = 0xffffffff; // a hostile READDIR count once made this a 4 GiB Reply chunk (the loop never ended)
    lb.client.submit(c);
    const [o] = await lb.collector.wait(1);
    t.falsy(o.error, o.error?.message);
    t.deepEqual(replyData(o.reply as Buffer), Buffer.from('small reply, huge bound'));
  } finally {
    await lb.close();
  }
});

test('a CQ in error (completions lost) closes the connection: the calls it held are reported for retransmission', async (t) => {
  const lb = await loopback();
  lb.responder.hold = true;
  try {
    lb.client.submit(TestCall.echo(1, Buffer.from('a')));
    lb.client.submit(TestCall.echo(2, Buffer.from('b')));
    while (lb.responder.held.length < 2) await delay(5);
    // What IBV_EVENT_CQ_ERR does to a device's CQ; the soft provider sets it only when its ring is full,
    // which the transport's sizing never lets happen.
    (lb.client.cq as SoftCq).overrun = true;
    // The next completion (this reply's Receive) is the first the transport sees after the loss.
    const [first] = lb.responder.held;
    lb.server.reply(first, encodeReply(first.xid, Buffer.from('a')));
    const outs = await lb.collector.wait(2);
    t.falsy(outs.find((o) => o.call.xid === 1)?.error, 'a reply received before the check is delivered');
    const lost = outs.find((o) => o.call.xid === 2);
    t.is(lost?.error?.code, 'ERR_TRANSPORT_CONNECTION_LOST');
    t.true(lost?.error?.retransmit);
    t.regex(lost?.error?.message ?? '', /completion queue in error/);
    t.is(lb.client.state, 'closed');
    t.regex(lb.client.closeReason, /completion queue in error: completions were lost/);
    t.is(lb.client.snapshot().registrations.inUse, 0);
  } finally {
    await lb.close();
  }
});

test('a set-up the device refuses half-way leaves no PD, CQ or registration behind, on either end', async (t) => {
  // Client end: the second registration (the send slab) fails after the receive slab, a CQ and a PD.
  const client = await deviceRefusingRegistration(2);
  const server = await createSoftProvider().openDevice();
  const listener = await server.listen({ host: '127.0.0.1', port: 0, onConnectRequest: (r) => r.reject() });
  try {
    await t.throwsAsync(
      RpcRdmaConnection.connect({
        device: client.device,
        host: '127.0.0.1',
        port: listener.port,
        requester: new Collector(),
        options: { peerKey: `refused-${process.pid}` },
      }),
      { message: /RLIMIT_MEMLOCK/ },
    );
    t.is(client.pds.length, 1);
    t.is(client.pds[0].mrCount, 0, 'the receive slab was deregistered');
    t.true(client.pds[0].dead, 'the PD was deallocated');
    t.true(client.cqs[0].destroyed, 'the CQ was destroyed');
  } finally {
    await listener.close();
  }

  // Server end: accept() fails the same way; the request is rejected at once and nothing stays.
  const refusing = await deviceRefusingRegistration(2);
  let thrown: unknown;
  const l2 = await refusing.device.listen({
    host: '127.0.0.1',
    port: 0,
    onConnectRequest: (request) => {
      try {
        RpcRdmaConnection.accept({ device: refusing.device, request, responder: new EchoResponder() });
      } catch (e) {
        thrown = e;
      }
    },
  });
  try {
    const started = Date.now();
    await t.throwsAsync(
      RpcRdmaConnection.connect({
        device: await createSoftProvider().openDevice(),
        host: '127.0.0.1',
        port: l2.port,
        requester: new Collector(),
        options: { peerKey: `refused-accept-${process.pid}` },
      }),
    );
    t.true(Date.now() - started < 5000, 'told at once (a reject), not by its connect timeout');
    t.regex(String(thrown), /RLIMIT_MEMLOCK/);
    t.is(refusing.pds[0].mrCount, 0);
    t.true(refusing.pds[0].dead);
    t.true(refusing.cqs[0].destroyed);
  } finally {
    await l2.close();
  }
});
