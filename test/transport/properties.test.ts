/** Run-time property changes (REQPROP / RESPPROP / UPDPROP, DESIGN §3 on seeds 000/003) round trips. */
import test from 'ava';
import { delay, loopback, pattern, replyData, TestCall } from './loopback.js';

const RBSIZ = 1;

async function traffic(lb: Awaited<ReturnType<typeof loopback>>, n: number, first: number, size = 16) {
  for (let i = 0; i < n; i++) lb.client.submit(TestCall.echo(first + i, pattern(size, i), false));
  await lb.collector.wait(lb.collector.outcomes.length + n);
}

test('lowering the peer’s RBSIZ: done at once, and our calls respect it from the request on', async (t) => {
  const lb = await loopback();
  try {
    await traffic(lb, 1, 1);
    t.is(lb.client.sendLimit, 4096);
    const d = await lb.client.requestProperties([{ id: RBSIZ, value: 2048 }]);
    t.deepEqual(d, { done: [RBSIZ], rejected: [], pending: [] });
    t.is(lb.client.sendLimit, 2048);
    t.is(lb.server.recvSize, 2048);
    const before = lb.client.snapshot().counters.longCalls;
    const c = TestCall.echo(50, pattern(3000, 1), false);
    lb.client.submit(c);
    const outs = await lb.collector.wait(2);
    t.deepEqual(replyData(outs[1].reply as Buffer), pattern(3000, 1));
    t.is(lb.client.snapshot().counters.longCalls, before + 1, '3000 bytes no longer go inline');
  } finally {
    await lb.close();
  }
});

test('raising the peer’s RBSIZ: pending until every Receive has the new size, then UPDPROP clears it', async (t) => {
  const lb = await loopback({
    client: { sendSize: 16384 },
    server: { credits: 2, backwardCredits: 1, maxRecvSize: 16384 },
  });
  try {
    await traffic(lb, 1, 1);
    const d = await lb.client.requestProperties([{ id: RBSIZ, value: 8192 }]);
    t.deepEqual(d, { done: [], rejected: [], pending: [RBSIZ] });
    t.deepEqual(lb.client.snapshot().properties.pendingAtPeer, [RBSIZ]);
    t.is(lb.client.sendLimit, 4096, 'not raised before the announcement');
    // Each message consumes one old-sized Receive, reposted at the new size; 7 are posted.
    for (let round = 0; round < 10 && lb.client.snapshot().properties.pendingAtPeer.length > 0; round++) {
      await traffic(lb, 1, 100 + round);
      await delay(5);
    }
    t.deepEqual(lb.client.snapshot().properties.pendingAtPeer, []);
    t.is(lb.client.sendLimit, 8192);
    t.is(lb.client.snapshot().properties.peer[RBSIZ], 8192);
    const inlineBefore = lb.client.snapshot().counters.inlineCalls;
    await traffic(lb, 1, 500, 6000);
    t.is(lb.client.snapshot().counters.inlineCalls, inlineBefore + 1, '6000 bytes now go inline');
    t.deepEqual(replyData(lb.collector.outcomes.at(-1)?.reply as Buffer), pattern(6000, 0));
  } finally {
    await lb.close();
  }
});

test('unsupported and unknown properties are rejected; a too-small RBSIZ is rejected and undone', async (t) => {
  const lb = await loopback();
  try {
    await traffic(lb, 1, 1);
    const d = await lb.client.requestProperties([
      { id: 3, value: true },
      { id: 99, data: Buffer.from([1, 2, 3, 4]) },
      { id: RBSIZ, value: 512 },
    ]);
    t.deepEqual(d, { done: [], rejected: [3, 99, RBSIZ], pending: [] });
    t.is(lb.client.sendLimit, 4096, 'the lowered limit is dropped once the request is rejected');
  } finally {
    await lb.close();
  }
});

test('an unsolicited raise of our own RBSIZ is announced only after every Receive was reposted', async (t) => {
  const lb = await loopback({
    client: { sendSize: 16384 },
    server: { credits: 2, backwardCredits: 1, maxRecvSize: 8192 },
  });
  try {
    await traffic(lb, 1, 1);
    lb.server.raiseReceiveSize(8192);
    await traffic(lb, 2, 10);
    t.is(lb.client.sendLimit, 4096, 'not yet: older Receives are still posted');
    for (let i = 0; i < 10 && lb.client.sendLimit !== 8192; i++) await traffic(lb, 1, 20 + i);
    t.is(lb.client.sendLimit, 8192);
    t.throws(() => lb.server.raiseReceiveSize(65536), { code: 'ERR_TRANSPORT_RBSIZ' });
  } finally {
    await lb.close();
  }
});

test('a peer without the extensions answers INVAL_HTYPE; we stop asking', async (t) => {
  const lb = await loopback({ server: { extensions: false } });
  try {
    await traffic(lb, 1, 1);
    const e = await t.throwsAsync(lb.client.requestProperties([{ id: RBSIZ, value: 2048 }]));
    t.is((e as { code?: string }).code, 'ERR_TRANSPORT_PROPERTY_REFUSED');
    t.false(lb.client.snapshot().properties.peerSupportsExtensions);
    t.is(lb.client.sendLimit, 4096);
    await t.throwsAsync(lb.client.requestProperties([{ id: RBSIZ, value: 2048 }]), {
      code: 'ERR_TRANSPORT_NO_EXTENSIONS',
    });
    await traffic(lb, 1, 2);
    t.is(lb.client.state, 'ready');
  } finally {
    await lb.close();
  }
});
