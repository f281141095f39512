/**
 * Write chunk targets come from power-of-two pools, but each is rekeyed for exactly the length its segment
 * advertises (`MemoryRegion.rekey(length)`): a peer can write the whole segment and not one byte more —
 * the slack of the size class is out of bounds for the provider (RFC 5040 §7.1 base-and-bounds check).
 */
import test from 'ava';
import { decodeHeader, encodePrivateData } from '../../rdma-backend/protocol/index.js';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { RpcRdmaConnection } from '../../rdma-backend/transport/index.js';
import { Access, WcStatus } from '../../rdma-backend/verbs/index.js';
import { RoguePeer } from '../helpers/rogue-peer.js';
import { Collector, headerBytes, pattern, REPLY_DATA, replyData, TestCall, words } from './loopback.js';

async function session(tag: string, size: number) {
  const rogue = await RoguePeer.listen(
    encodePrivateData({ sendWithInvalidateOk: false, inlineSendSize: 4096, inlineRecvSize: 4096 }),
  );
  const collector = new Collector();
  const client = await RpcRdmaConnection.connect({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port: rogue.port,
    options: { maxVersion: 1, peerKey: `exact-${tag}-${process.pid}` },
    requester: collector,
  });
  const peer = await rogue.peer;
  const call = TestCall.echo(7, Buffer.alloc(16, 1), false);
  call.ddpResults = [size];
  call.maxReplySize = REPLY_DATA + size + 4;
  client.submit(call);
  const h = decodeHeader(await peer.message(0));
  if (h.version !== 1 || h.proc !== 0) throw new Error('expected RDMA_MSG');
  const write = h.chunks.writes[0][0];
  const close = async () => {
    client.close();
    peer.close();
    await rogue.close();
  };
  return { client, peer, collector, write, close };
}

for (const size of [5001, 4096, 1]) {
  test(`a ${size}-byte Write chunk segment is writable whole and not one byte beyond`, async (t) => {
    const ok = await session(`ok-${size}`, size);
    t.teardown(ok.close);
    t.is(ok.write.length, size);
    const data = pattern(size, 9);
    t.is(await ok.peer.write(ok.write.handle, ok.write.offset, data), WcStatus.SUCCESS);
    ok.peer.send(
      headerBytes(
        { version: 1, proc: 0, xid: 7, credit: 4, chunks: { writes: [[ok.write]] } },
        words(7, 1, 0, 0, 0, 0, size),
      ),
    );
    const [good] = await ok.collector.wait(1);
    t.deepEqual(replyData(good.reply as Buffer), data);

    const over = await session(`over-${size}`, size);
    t.teardown(over.close);
    await over.peer.write(over.write.handle, over.write.offset + BigInt(size), Buffer.alloc(1, 0xee));
    await over.peer.until(() => over.peer.disconnected, 'the peer to lose its connection');
    const ev = over.peer.events.find((e) => e.terminate);
    t.is(ev?.terminate?.type, 1, `a protection error (${ev?.terminate?.name})`);
    const [bad] = await over.collector.wait(1);
    t.true(bad.error?.retransmit, 'the call is reported for retransmission, no reply made up');
    await new Promise((r) => setTimeout(r, 20));
    t.is(over.client.snapshot().registrations.inUse, 0);
  });
}

test('soft MemoryRegion.rekey(length) limits the keys to [0, length) and rekey() restores the whole buffer', async (t) => {
  const device = await createSoftProvider().openDevice();
  const pd = device.allocPd();
  const mr = pd.registerMemory(device.allocBuffer(8192), Access.LOCAL_WRITE | Access.REMOTE_WRITE);
  const k0 = mr.rkey;
  mr.rekey(100);
  t.is(mr.length, 100);
  t.not(mr.rkey, k0);
  t.true(mr.valid);
  mr.rekey();
  t.is(mr.length, 8192);
  for (const bad of [0, -1, 8193, 1.5]) {
    t.throws(() => mr.rekey(bad), { message: /rekey length/ }, `length ${bad}`);
  }
  t.is(mr.length, 8192, 'a refused rekey changes nothing');
  mr.deregister();
  pd.dealloc();
  device.close();
});
