/**
 * A soft CQ that fills up (IBV_EVENT_CQ_ERR on a real device): the completion that does not fit is lost,
 * so the CQ is marked `overrun` (sticky), its handler is woken even though nobody re-armed it — the
 * verbs interface's promise, since no later completion will come to say so — and the QP that lost it
 * fails the connection on both sides.
 */
import test from 'ava';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { CmEventType, QpState, WrOpcode } from '../../rdma-backend/verbs/index.js';
import { connectPair, postRecvOf, tick } from '../verbs/harness.js';

test('a full CQ: the lost completion marks it overrun, wakes its unarmed handler, and fails the QP', async (t) => {
  const p = await connectPair(
    { name: 'soft', create: () => createSoftProvider(), reportsTerminate: true },
    { cqDepth: 2 },
  );
  try {
    for (let i = 0; i < 4; i++) postRecvOf(p.server, 64);
    const cq = p.server.recvCq.cq;
    let woken = 0;
    // This handler neither re-arms nor polls: after its first call only an overrun may call it again.
    cq.setNotifyHandler(() => woken++);
    const msg = p.client.reg(16, 0);
    const sendOne = (wrId: number) =>
      p.client.conn.qp.postSend({
        wrId,
        opcode: WrOpcode.SEND,
        flags: 0,
        sgList: [{ mr: msg.mr, offset: 0, length: 16 }],
      });
    sendOne(1);
    await tick(50);
    t.is(woken, 1, 'the armed CQ reported the first completion');
    t.false(cq.overrun);
    sendOne(2); // fills the CQ (depth 2)
    sendOne(3); // finds no room
    await p.server.events.wait(CmEventType.DISCONNECTED);
    await p.client.events.wait(CmEventType.DISCONNECTED);
    t.true(cq.overrun, 'sticky until the CQ is destroyed');
    t.is(woken, 2, 'woken once more, for the overrun, without being re-armed');
    t.is(p.server.conn.qp.state, QpState.ERR);
  } finally {
    await p.close();
  }
});
