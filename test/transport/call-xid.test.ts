/**
 * RFC 8166 §4.2.1: a call's rdma_xid is the XID of the RPC message it conveys. The responder's upper
 * layer keys the call on rdma_xid and matches the upstream's reply by its RPC XID, so a call whose two
 * differ would wait for ever or be given another call's reply: it is refused as a malformed call
 * (RDMA2_ERR_BAD_XDR; Version 1: ERR_CHUNK), an inline one before any RDMA Read, a Long Call once pulled.
 */
import test from 'ava';
import { decodeHeader } from '../../rdma-backend/protocol/index.js';
import { Access } from '../../rdma-backend/verbs/index.js';
import { plainPrivateData, RoguePeer } from '../helpers/rogue-peer.js';
import { echoServer, encodeCall, headerBytes, PROC_ECHO, replyData } from './loopback.js';

async function withRogue(
  body: (s: Awaited<ReturnType<typeof echoServer>>, peer: RoguePeer) => Promise<void>,
) {
  const s = await echoServer();
  const peer = await RoguePeer.connect(s.listener.port, plainPrivateData());
  try {
    await body(s, peer);
  } finally {
    peer.close();
    await s.close();
  }
}

test('Version 2: a call whose RPC XID is not its rdma_xid is refused RDMA2_ERR_BAD_XDR, inline or Long; the connection serves on', async (t) => {
  await withRogue(async (s, peer) => {
    await peer.ask(headerBytes({ version: 2, htype: 5, xid: 1, credit: 8, props: [] }));
    // Inline: RPC XID 21 under rdma_xid 20.
    const inline = decodeHeader(
      await peer.ask(
        headerBytes(
          { version: 2, htype: 0, xid: 20, credit: 8, chunks: {} },
          encodeCall(21, PROC_ECHO, Buffer.from('x')),
        ),
      ),
    );
    t.like(inline, { version: 2, htype: 4, xid: 20, flags: 1, error: { code: 2 } });
    // Long Call: the whole call in a Position-Zero Read chunk, RPC XID 31 under rdma_xid 30.
    const call = encodeCall(31, PROC_ECHO, Buffer.alloc(6000, 0x61));
    const src = peer.pd.registerMemory(Buffer.from(call), Access.REMOTE_READ);
    const reads = [{ position: 0, handle: src.rkey, length: call.length, offset: src.iova }];
    const long = decodeHeader(
      await peer.ask(headerBytes({ version: 2, htype: 1, xid: 30, credit: 8, chunks: { reads } })),
    );
    t.like(long, { version: 2, htype: 4, xid: 30, error: { code: 2 } });
    const conn = s.conns[0];
    t.is(conn.snapshot().counters.rdmaReads, 1, 'the Long Call was pulled before its XID could be read');
    // A Long Call whose RPC message is a REPLY under its rdma_xid: not a call either.
    const reply = Buffer.alloc(6000);
    reply.writeUInt32BE(40, 0);
    reply.writeUInt32BE(1, 4);
    const src2 = peer.pd.registerMemory(reply, Access.REMOTE_READ);
    const reads2 = [{ position: 0, handle: src2.rkey, length: reply.length, offset: src2.iova }];
    const notCall = decodeHeader(
      await peer.ask(headerBytes({ version: 2, htype: 1, xid: 40, credit: 8, chunks: { reads: reads2 } })),
    );
    t.like(notCall, { version: 2, htype: 4, xid: 40, error: { code: 2 } });
    t.deepEqual(s.responders[0].received, [], 'no call reached the upper layer');
    t.is(conn.inboundActive, 0);
    t.is(conn.snapshot().registrations.inUse, 0);
    // A good call, after all of that.
    const ok = decodeHeader(
      await peer.ask(
        headerBytes(
          { version: 2, htype: 0, xid: 50, credit: 8, chunks: {} },
          encodeCall(50, PROC_ECHO, Buffer.from('ok')),
        ),
      ),
    );
    t.like(ok, { version: 2, htype: 0, xid: 50 });
    t.deepEqual(
      replyData(peer.received[peer.received.length - 1].subarray(ok.payloadOffset)),
      Buffer.from('ok'),
    );
    t.is(conn.state, 'ready');
  });
});

test('Version 1: a call whose RPC XID is not its rdma_xid is refused ERR_CHUNK', async (t) => {
  await withRogue(async (s, peer) => {
    const h = decodeHeader(
      await peer.ask(
        headerBytes(
          { version: 1, proc: 0, xid: 7, credit: 8, chunks: {} },
          encodeCall(8, PROC_ECHO, Buffer.from('x')),
        ),
      ),
    );
    t.like(h, { version: 1, proc: 4, xid: 7, error: { code: 2 } });
    t.deepEqual(s.responders[0].received, []);
    t.deepEqual(s.conns[0].snapshot().errors.sent, { ERR_CHUNK: 1 });
  });
});
