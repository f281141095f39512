/**
 * An RDMA Read on a connection whose ORD is 0 (the peer advertised IRD 0): no Read Request may go
 * (RFC 5040 §6.4), so instead of waiting at the head of the send queue for ever, and holding up
 * everything behind it, the Read is refused when posted (VERBS_INVALID_ARGUMENT, as Linux siw refuses it
 * with EINVAL), or, posted before the ORD was negotiated, completes in error and the QP goes to error.
 */
import test from 'ava';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import {
  Access,
  CmEventType,
  SendFlags,
  VerbsError,
  WcStatus,
  WrOpcode,
} from '../../rdma-backend/verbs/index.js';
import { CqWatcher, connectPair, EventLog, postRecvOf } from '../verbs/harness.js';

const soft = { name: 'soft', create: () => createSoftProvider(), reportsTerminate: true };
const RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE;

test('ORD 0: a posted RDMA Read is refused at once, and the queue goes on serving', async (t) => {
  const p = await connectPair(soft, { serverIrd: 0 });
  try {
    t.is(p.client.conn.ord, 0, "the server's IRD 0 leaves the client no Read credit");
    const sink = p.client.reg(64, RW);
    const source = p.server.reg(64, Access.LOCAL_WRITE | Access.REMOTE_READ);
    const e = t.throws(
      () =>
        p.client.conn.qp.postSend({
          wrId: 1,
          opcode: WrOpcode.RDMA_READ,
          flags: SendFlags.SIGNALED,
          sgList: [{ mr: sink.mr, offset: 0, length: 64 }],
          rkey: source.mr.rkey,
          remoteAddr: source.mr.iova,
        }),
      { instanceOf: VerbsError },
    );
    t.is(e?.code, 'VERBS_INVALID_ARGUMENT');
    // Nothing was posted: a Send after it goes and completes.
    const msg = p.client.reg(16, Access.LOCAL_WRITE, 0x33);
    postRecvOf(p.server, 16);
    p.client.conn.qp.postSend({
      wrId: 2,
      opcode: WrOpcode.SEND,
      flags: SendFlags.SIGNALED,
      sgList: [{ mr: msg.mr, offset: 0, length: 16 }],
    });
    const [wc] = await p.client.sendCq.take(1, 2000);
    t.like(wc, { wrId: 2, status: WcStatus.SUCCESS });
    t.like((await p.server.recvCq.take(1, 2000))[0], { status: WcStatus.SUCCESS, byteLen: 16 });
  } finally {
    await p.close();
  }
});

test('ORD 0: a Read posted before the connection was up completes in error, and what follows is flushed', async (t) => {
  const server = await createSoftProvider().openDevice();
  const spd = server.allocPd();
  const scq = server.createCq(16);
  const l = await server.listen({
    host: '127.0.0.1',
    port: 0,
    onConnectRequest: (req) => {
      const c = req.createConnection({
        pd: spd,
        sendCq: scq,
        recvCq: scq,
        cap: { maxSendWr: 4, maxRecvWr: 4, maxSendSge: 1, maxRecvSge: 1 },
        onEvent() {},
      });
      c.accept({ ird: 0 });
    },
  });
  const dev = await createSoftProvider().openDevice();
  const pd = dev.allocPd();
  const cq = new CqWatcher(dev.createCq(16));
  const events = new EventLog();
  const conn = dev.connect({
    host: '127.0.0.1',
    port: l.port,
    pd,
    sendCq: cq.cq,
    recvCq: cq.cq,
    cap: { maxSendWr: 4, maxRecvWr: 4, maxSendSge: 1, maxRecvSge: 1 },
    onEvent: events.handler,
  });
  try {
    const sink = pd.registerMemory(Buffer.alloc(64), RW);
    const msg = pd.registerMemory(Buffer.alloc(16), Access.LOCAL_WRITE);
    // Posted now, before ESTABLISHED: the ORD is not known yet, so the post is taken.
    conn.qp.postSend({
      wrId: 1,
      opcode: WrOpcode.RDMA_READ,
      flags: SendFlags.SIGNALED,
      sgList: [{ mr: sink, offset: 0, length: 64 }],
      rkey: 0x100,
      remoteAddr: 0n,
    });
    conn.qp.postSend({
      wrId: 2,
      opcode: WrOpcode.SEND,
      flags: SendFlags.SIGNALED,
      sgList: [{ mr: msg, offset: 0, length: 16 }],
    });
    const wcs = await cq.take(2, 2000);
    t.deepEqual(
      wcs.map((w) => [w.wrId, w.status]),
      [
        [1, WcStatus.LOC_QP_OP_ERR],
        [2, WcStatus.WR_FLUSH_ERR],
      ],
      'the Read fails, the Send behind it is flushed: nothing waits for ever',
    );
    t.is(conn.ord, 0);
    await events.wait(CmEventType.DISCONNECTED, 2000);
  } finally {
    conn.destroy();
    await l.close();
  }
});
