/**
 * Security through the soft provider's access checks: a rogue RDMA responder, given a call with a Read
 * chunk (our bytes, REMOTE_READ) and a Write chunk (a pool region, REMOTE_WRITE) by the transport's
 * requester role — the gateway's side — cannot write where it was not allowed, read what was not exposed,
 * or come back later with the keys of an earlier call. Every attempt is refused by the provider
 * (REM_ACCESS_ERR and a Terminate: the rogue loses its connection), the caller's bytes stay intact, and the
 * transport returns every registration.
 */
import test from 'ava';
import { decodeHeader, encodePrivateData } from '../../rdma-backend/protocol/index.js';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { RpcRdmaConnection } from '../../rdma-backend/transport/index.js';
import { WcStatus } from '../../rdma-backend/verbs/index.js';
import { RoguePeer } from '../helpers/rogue-peer.js';
import { Collector, headerBytes, pattern, replyData, TestCall, words } from '../transport/loopback.js';

const DATA = 6000; // over the 4 KiB inline limit: the argument goes in a Read chunk

async function session(tag: string) {
  const rogue = await RoguePeer.listen(
    encodePrivateData({ sendWithInvalidateOk: false, inlineSendSize: 4096, inlineRecvSize: 4096 }),
  );
  const collector = new Collector();
  const client = await RpcRdmaConnection.connect({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port: rogue.port,
    options: { maxVersion: 1, peerKey: `rkey-${tag}-${process.pid}` },
    requester: collector,
  });
  const peer = await rogue.peer;
  const data = pattern(DATA, 11);
  const call = TestCall.echo(7, data);
  const original = Buffer.from(call.message);
  client.submit(call);
  const h = decodeHeader(await peer.message(0));
  if (h.version !== 1 || h.proc !== 0) throw new Error('expected RDMA_MSG');
  const read = h.chunks.reads[0];
  const write = h.chunks.writes[0][0];
  const close = async () => {
    client.close();
    peer.close();
    await rogue.close();
  };
  return { client, peer, collector, call, original, h, read, write, close };
}

/** The rogue answers call 7 properly: its data written into the Write chunk, a reply that says so. */
async function answer(s: Awaited<ReturnType<typeof session>>, data: Buffer): Promise<void> {
  const status = await s.peer.write(s.write.handle, s.write.offset, data);
  if (status !== WcStatus.SUCCESS) throw new Error(`legitimate write failed: ${status}`);
  s.peer.send(
    headerBytes(
      { version: 1, proc: 0, xid: 7, credit: 4, chunks: { writes: [[{ ...s.write, length: data.length }]] } },
      words(7, 1, 0, 0, 0, 0, data.length),
    ),
  );
}

test('the rogue reads exactly the Read chunk it was given, and writes exactly the Write chunk', async (t) => {
  const s = await session('ok');
  t.teardown(s.close);
  const got = await s.peer.read(s.read.handle, s.read.offset, s.read.length);
  t.is(got.status, WcStatus.SUCCESS);
  t.deepEqual(got.data.subarray(0, DATA), pattern(DATA, 11), 'the Read chunk holds the argument');
  await answer(s, pattern(DATA, 3));
  const [o] = await s.collector.wait(1);
  t.deepEqual(replyData(o.reply as Buffer), pattern(DATA, 3));
  t.is(s.client.snapshot().registrations.inUse, 0, 'every registration returned');
});

const attacks: {
  name: string;
  run(s: Awaited<ReturnType<typeof session>>): Promise<number>;
}[] = [
  {
    name: 'RDMA Write through the Read chunk key (exposed for reading only)',
    run: (s) => s.peer.write(s.read.handle, s.read.offset, Buffer.alloc(16, 0xee)),
  },
  {
    name: 'RDMA Read through the Write chunk key (exposed for writing only)',
    run: async (s) => (await s.peer.read(s.write.handle, s.write.offset, 16)).status,
  },
  {
    name: 'RDMA Read past the end of the Read chunk region',
    run: async (s) => (await s.peer.read(s.read.handle, s.read.offset, s.read.length + 4096)).status,
  },
  {
    name: 'RDMA Write far past the end of the Write chunk region',
    run: (s) => s.peer.write(s.write.handle, s.write.offset + 1_048_576n, Buffer.alloc(16, 0xee)),
  },
  {
    name: 'RDMA Write below the start of the Write chunk region',
    run: (s) => s.peer.write(s.write.handle, s.write.offset - 8n, Buffer.alloc(16, 0xee)),
  },
  {
    name: 'RDMA Write with a key the transport never handed out',
    run: (s) => s.peer.write((s.write.handle ^ 0x5500) >>> 0, s.write.offset, Buffer.alloc(16, 0xee)),
  },
  {
    // Write chunk regions come from power-of-two pools, but each is keyed for exactly the advertised
    // segment (MemoryRegion.rekey(length)): the slack behind it is not reachable with that rkey.
    name: 'RDMA Write past the end of the advertised segment (into the pooled region behind it)',
    run: (s) => s.peer.write(s.write.handle, s.write.offset, Buffer.alloc(s.write.length + 1000, 0xee)),
  },
];

for (const attack of attacks) {
  test(`refused: ${attack.name}`, async (t) => {
    const s = await session(attack.name.replace(/\W+/g, '-'));
    t.teardown(s.close);
    const status = await attack.run(s);
    await s.peer.until(() => s.peer.disconnected, 'the rogue to lose its connection');
    // A Read fails at the rogue itself; a Write completes locally once sent (iWARP semantics) and the
    // target's refusal arrives as a Terminate. Either way the cause is a protection error, checked by
    // the target before a single byte was placed (RFC 5040 §7.1, RFC 5041 §7.2).
    const ev = s.peer.events.find((e) => e.terminate);
    t.truthy(ev?.terminate, 'the rogue received or raised a Terminate');
    t.is(ev?.terminate?.type, 1, `a protection error (${ev?.terminate?.name})`);
    if (attack.name.startsWith('RDMA Read'))
      t.not(status, WcStatus.SUCCESS, `the Read failed (status ${status})`);
    const [o] = await s.collector.wait(1);
    t.truthy(o.error, 'the call failed (to be retransmitted), no reply was made up');
    t.true(s.call.message.equals(s.original), "the caller's bytes are intact");
    await new Promise((r) => setTimeout(r, 20));
    t.is(s.client.snapshot().registrations.inUse, 0, 'every registration returned');
  });
}

test('refused: the keys of a finished call, reused by the rogue afterwards', async (t) => {
  const s = await session('stale');
  t.teardown(s.close);
  await answer(s, pattern(100, 5));
  const [o] = await s.collector.wait(1);
  t.deepEqual(replyData(o.reply as Buffer), pattern(100, 5));
  // A second call takes a Write chunk region from the same pool: the old key must not reach it.
  const second = TestCall.echo(8, Buffer.alloc(50, 1));
  s.client.submit(second);
  const h2 = decodeHeader(await s.peer.message(1));
  if (h2.version !== 1 || h2.proc !== 0) throw new Error('expected RDMA_MSG');
  t.not(h2.chunks.writes[0][0].handle, s.write.handle, 'the region was rekeyed');
  await s.peer.write(s.write.handle, s.write.offset, Buffer.alloc(64, 0xee));
  await s.peer.until(() => s.peer.disconnected, 'the rogue to lose its connection');
  const ev = s.peer.events.find((e) => e.terminate);
  t.like(ev?.terminate, { local: false, layer: 1, type: 1, code: 0 }, 'DDP tagged: invalid STag');
  const outcomes = await s.collector.wait(2);
  t.truthy(outcomes[1].error, 'the second call fails rather than carrying foreign bytes');
  t.is(s.client.snapshot().registrations.inUse, 0);
});
