/**
 * Remote invalidation of a responder-provided Read chunk (seed 002 §4.1.4): the DONE goes With Invalidate
 * only when both ends support it, and then only of the R_key the responder provided — the reply's
 * rdma_inv_handle, where zero means no handle may be invalidated (seed 004 §3.3). The responder names
 * its exposed region there when both ends announced REQREMINV; the requester follows the handle it was
 * given and the responder's REQREMINV, not the RFC 8797 private-data flag.
 */
import test, { type ExecutionContext } from 'ava';
import { decodeHeader, encodePrivateData } from '../../rdma-backend/protocol/index.js';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { RpcRdmaConnection, type TransportOptions } from '../../rdma-backend/transport/index.js';
import { Access } from '../../rdma-backend/verbs/index.js';
import { plainPrivateData, RoguePeer } from '../helpers/rogue-peer.js';
import {
  Collector,
  echoServer,
  encodeCall,
  encodeReply,
  headerBytes,
  PROC_SOURCE,
  pattern,
  replyData,
  TestCall,
} from './loopback.js';

const REQREMINV = 3;
const RPRC = 4;

/** A rogue requester announcing `reqreminv` pulls a reply exposed to it; what rdma_inv_handle was. */
async function exposedWith(t: ExecutionContext, peerReqreminv: boolean, server: TransportOptions) {
  const s = await echoServer(server);
  const peer = await RoguePeer.connect(s.listener.port, plainPrivateData());
  try {
    await peer.ask(
      headerBytes({
        version: 2,
        htype: 5,
        xid: 1,
        credit: 8,
        props: [
          { id: REQREMINV, value: peerReqreminv },
          { id: RPRC, value: true },
        ],
      }),
    );
    const arg = Buffer.alloc(4);
    arg.writeUInt32BE(10001);
    const h = decodeHeader(
      await peer.ask(
        headerBytes({ version: 2, htype: 0, xid: 2, credit: 8, chunks: {} }, encodeCall(2, PROC_SOURCE, arg)),
      ),
    );
    if (h.version !== 2 || h.htype !== 1) throw new Error(`expected RDMA2_NOMSG, got ${JSON.stringify(h)}`);
    const rd = h.chunks.reads[0];
    const got = await peer.read(rd.handle, rd.offset, rd.length);
    t.deepEqual(replyData(got.data), pattern(10001, 3));
    // The DONE, With Invalidate of the handle when one was named.
    peer.send(headerBytes({ version: 2, htype: 3, xid: 2, credit: 8 }), h.invHandle || undefined);
    const conn = s.conns[0];
    await peer.until(() => conn.snapshot().registrations.inUse === 0, 'the exposed reply released');
    t.is(conn.state, 'ready');
    return {
      invHandle: h.invHandle,
      exposed: rd.handle,
      remote: conn.snapshot().counters.remoteInvalidations,
    };
  } finally {
    peer.close();
    await s.close();
  }
}

test('responder: rdma_inv_handle names the exposed region only when both ends take Send With Invalidate, else zero', async (t) => {
  const both = await exposedWith(t, true, {});
  t.is(both.invHandle, both.exposed, 'both announced REQREMINV: the exposed R_key');
  t.is(both.remote, 1, 'and the DONE that invalidated it is counted');
  const notPeer = await exposedWith(t, false, {});
  t.is(notPeer.invHandle, 0, "the requester's REQREMINV is false");
  t.is(notPeer.remote, 0);
  const notUs = await exposedWith(t, true, { acceptRemoteInvalidate: false });
  t.is(notUs.invHandle, 0, 'we do not take it (acceptRemoteInvalidate false)');
});

/**
 * Our requester against a rogue responder that announces `reqreminv` in its CONNPROP and `flag` in its
 * private data, and exposes its reply with rdma_inv_handle `named` (the region's R_key) or zero. Returns
 * whether the DONE invalidated the exposed region.
 */
async function doneInvalidates(tag: string, reqreminv: boolean, flag: boolean, named: boolean) {
  const rogue = await RoguePeer.listen(
    encodePrivateData({ sendWithInvalidateOk: flag, inlineSendSize: 4096, inlineRecvSize: 4096 }),
  );
  const collector = new Collector();
  const client = await RpcRdmaConnection.connect({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port: rogue.port,
    options: { peerKey: `rprc-inv-${tag}-${process.pid}` },
    requester: collector,
  });
  const peer = await rogue.peer;
  try {
    const cp = decodeHeader(await peer.message(0));
    peer.send(
      headerBytes({
        version: 2,
        htype: 5,
        xid: cp.xid,
        credit: 4,
        flags: 1,
        props: [{ id: REQREMINV, value: reqreminv }],
      }),
    );
    await peer.until(() => client.state === 'ready', 'ready');
    const call = TestCall.echo(9, Buffer.from('x'), false);
    client.submit(call);
    await peer.message(1);
    const reply = encodeReply(9, pattern(5000, 9));
    const mr = peer.pd.registerMemory(reply, Access.REMOTE_READ);
    const reads = [{ position: 0, handle: mr.rkey, length: reply.length, offset: mr.iova }];
    peer.send(
      headerBytes({
        version: 2,
        htype: 1,
        xid: 9,
        credit: 4,
        flags: 1,
        invHandle: named ? mr.rkey : 0,
        chunks: { reads },
      }),
    );
    const done = decodeHeader(await peer.message(2));
    const [o] = await collector.wait(1);
    if (o.error) throw o.error;
    if (done.version !== 2 || done.htype !== 3 || done.xid !== 9)
      throw new Error(`expected DONE: ${JSON.stringify(done)}`);
    // The DONE was received: a Send With Invalidate naming the region left it invalid (the soft MR's
    // own flag: a Read through the QP would read the requester's memory, not ours).
    return { invalidated: !(mr as unknown as { valid: boolean }).valid, reply: o.reply as Buffer };
  } finally {
    client.close();
    peer.close();
    await rogue.close();
  }
}

test('requester: the DONE invalidates the handle the responder named, when the responder announced REQREMINV', async (t) => {
  const r = await doneInvalidates('named', true, false, true);
  t.deepEqual(replyData(r.reply), pattern(5000, 9));
  t.true(r.invalidated, 'REQREMINV true and a handle named: With Invalidate, whatever the private data says');
});

test('requester: a zero rdma_inv_handle means a plain Send, whatever the private data says', async (t) => {
  const r = await doneInvalidates('zero', true, true, false);
  t.false(r.invalidated);
});

test('requester: no Send With Invalidate to a responder whose REQREMINV is false, though it named a handle and its private data allows it', async (t) => {
  const r = await doneInvalidates('refused', false, true, true);
  t.false(r.invalidated);
});
