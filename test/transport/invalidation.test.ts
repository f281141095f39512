import test from 'ava';
import { decodeHeader } from '../../rdma-backend/protocol/index.js';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { RpcRdmaConnection } from '../../rdma-backend/transport/index.js';
import { WcStatus } from '../../rdma-backend/verbs/index.js';
import { RoguePeer } from '../helpers/rogue-peer.js';
import {
  CALL_DATA,
  Collector,
  encodeReply,
  headerBytes,
  loopback,
  pattern,
  REPLY_DATA,
  replyData,
  sourceCall,
  TestCall,
} from './loopback.js';

test('remote invalidation: one registration per call, the server sends With Invalidate, no Local Invalidate', async (t) => {
  const lb = await loopback();
  try {
    lb.client.submit(sourceCall(1, 5001));
    const [o] = await lb.collector.wait(1);
    t.falsy(o.error, o.error?.message);
    t.deepEqual(replyData(o.reply as Buffer), pattern(5001, 3));
    const c = lb.client.snapshot().counters;
    t.is(c.remoteInvalidations, 1);
    t.is(c.localInvalidations, 0);
  } finally {
    await lb.close();
  }
});

test('local invalidation: several registrations (or a server not allowed to) → Local Invalidate each', async (t) => {
  const lb = await loopback({ server: { useRemoteInvalidate: false } });
  try {
    lb.client.submit(TestCall.echo(1, pattern(9999)));
    lb.client.submit(sourceCall(2, 7777));
    const outs = await lb.collector.wait(2);
    for (const o of outs) t.falsy(o.error, o.error?.message);
    const c = lb.client.snapshot().counters;
    t.is(c.remoteInvalidations, 0);
    t.is(c.localInvalidations, 3, 'read + write chunk of the echo, write chunk of the source');
    t.is(lb.client.snapshot().registrations.inUse, 0);
  } finally {
    await lb.close();
  }
});

test('a stale rkey is refused by the provider once the call completed (Write chunk and Read chunk)', async (t) => {
  const rogue = await RoguePeer.listen();
  const device = await createSoftProvider().openDevice();
  const collector = new Collector();
  const client = await RpcRdmaConnection.connect({
    device,
    host: '127.0.0.1',
    port: rogue.port,
    options: { maxVersion: 1, peerKey: `stale-${process.pid}` },
    requester: collector,
  });
  const peer = await rogue.peer;
  try {
    // A call with a Read chunk (DDP argument) and a Write chunk (DDP result).
    const data = pattern(8191, 9);
    client.submit(TestCall.echo(77, data));
    const callMsg = await peer.message(0);
    const h = decodeHeader(callMsg);
    if (h.version !== 1 || h.proc !== 0) throw new Error('expected an RDMA_MSG call');
    const rd = h.chunks.reads[0];
    const wr = h.chunks.writes[0][0];
    t.is(rd.position, CALL_DATA);
    const pulled = await peer.read(rd.handle, rd.offset, rd.length);
    t.is(pulled.status, WcStatus.SUCCESS);
    t.deepEqual(pulled.data, data);
    t.is(await peer.write(wr.handle, wr.offset, data), WcStatus.SUCCESS);
    // Reduced reply: the result's length word stays inline, its data and pad are in the Write chunk.
    const reduced = encodeReply(77, Buffer.alloc(0));
    reduced.writeUInt32BE(data.length, REPLY_DATA - 4);
    peer.send(
      headerBytes(
        { version: 1, proc: 0, xid: 77, credit: 8, chunks: { writes: [[{ ...wr, length: data.length }]] } },
        reduced,
      ),
    );
    const [o] = await collector.wait(1);
    t.falsy(o.error, o.error?.message);
    t.deepEqual(replyData(o.reply as Buffer), data);
    t.is(client.snapshot().counters.localInvalidations, 2);
    // The call is complete: both rkeys are dead. A Read with the old Read-chunk rkey fails…
    const stale = await peer.read(rd.handle, rd.offset, 4);
    t.not(stale.status, WcStatus.SUCCESS);
    await peer.until(() => peer.disconnected, 'disconnect after the stale access');
    await collector.wait(1);
    t.is(client.state === 'closed' || client.state === 'ready', true);
  } finally {
    client.close();
    peer.close();
    await rogue.close();
  }
});

test('a stale Write-chunk rkey is refused too (separate connection, Write after completion)', async (t) => {
  const rogue = await RoguePeer.listen();
  const device = await createSoftProvider().openDevice();
  const collector = new Collector();
  const client = await RpcRdmaConnection.connect({
    device,
    host: '127.0.0.1',
    port: rogue.port,
    options: { maxVersion: 1, peerKey: `stale2-${process.pid}` },
    requester: collector,
  });
  const peer = await rogue.peer;
  try {
    client.submit(sourceCall(5, 300));
    const h = decodeHeader(await peer.message(0));
    if (h.version !== 1 || h.proc !== 0) throw new Error('expected an RDMA_MSG call');
    const wr = h.chunks.writes[0][0];
    t.is(await peer.write(wr.handle, wr.offset, pattern(300, 3)), WcStatus.SUCCESS);
    const reduced = encodeReply(5, Buffer.alloc(0));
    reduced.writeUInt32BE(300, REPLY_DATA - 4);
    peer.send(
      headerBytes(
        { version: 1, proc: 0, xid: 5, credit: 8, chunks: { writes: [[{ ...wr, length: 300 }]] } },
        reduced,
      ),
    );
    const [o] = await collector.wait(1);
    t.deepEqual(replyData(o.reply as Buffer), pattern(300, 3));
    // An RDMA Write is unacknowledged (RFC 5040 §4.3): the writer's completion says only that it left.
    // The target's provider refuses the STag, answers with a Terminate, and the connection ends.
    await peer.write(wr.handle, wr.offset, Buffer.alloc(4, 0xee));
    await peer.until(() => peer.disconnected, 'disconnect after the stale write');
    const ev = peer.events.find((e) => e.terminate);
    t.truthy(ev?.terminate, 'the peer received a Terminate');
    t.false(ev?.terminate?.local);
    await collector.wait(1);
    while (client.state !== 'closed') await new Promise((r) => setTimeout(r, 5));
    t.regex(client.closeReason, /terminate/i);
  } finally {
    client.close();
    peer.close();
    await rogue.close();
  }
});
