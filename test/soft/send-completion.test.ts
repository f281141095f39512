/**
 * When the soft QP completes a Send or RDMA Write (qp.ts `written`): once the socket has let go of the
 * batch that carries its bytes, never earlier, since a completion gives the caller its buffer back and
 * payloads leave as views of that buffer. A Read completes on its last Read Response, which may come
 * before the socket's callback for the batch that carried its Read Request; the Read's queue entry (a
 * LIFO free list) or its ring slot (a queue wrapping around) may then serve a later WR, which must not
 * be taken for part of that older batch. The socket here is a fake whose write callbacks the test calls.
 */
import type { Socket } from 'node:net';
import test from 'ava';
import { resolveOptions, SoftDevice } from '../../rdma-backend/providers/soft/device.js';
import type { StagTable } from '../../rdma-backend/providers/soft/memory.js';
import { type QpOwner, SoftQp } from '../../rdma-backend/providers/soft/qp.js';
import { Rtr } from '../../rdma-backend/providers/soft/wire.js';
import {
  Access,
  type CompletionQueue,
  createWorkCompletions,
  SendFlags,
  WcStatus,
  WrOpcode,
} from '../../rdma-backend/verbs/index.js';
import { ddpTagged, fpdu } from '../helpers/iwarp-frames.js';

/** A socket that takes every write at once and calls back only when the test says the kernel took it. */
class HeldSocket {
  destroyed = false;
  /** The write callbacks not yet called, one per batch (the QP asks for one on a batch's last chunk). */
  readonly callbacks: (() => void)[] = [];
  on(): this {
    return this;
  }
  cork(): void {}
  uncork(): void {}
  end(): void {}
  destroy(): void {
    this.destroyed = true;
  }
  write(_chunk: Uint8Array, cb?: (err?: Error | null) => void): boolean {
    if (cb) this.callbacks.push(() => cb());
    return true;
  }
}

function completions(cq: CompletionQueue): [number, number][] {
  const wcs = createWorkCompletions(16);
  const n = cq.poll(wcs);
  return wcs.slice(0, n).map((w) => [w.wrId, w.status]);
}

const turn = () => new Promise((r) => setImmediate(r));

for (const maxSendWr of [8, 2]) {
  const reuse = maxSendWr === 2 ? 'its ring slot' : 'its queue entry';
  test(`a Send posted after a Read that completed early is not completed with the Read's batch (${reuse} reused)`, async (t) => {
    const dev = new SoftDevice('t', resolveOptions({ crc: false }));
    const pd = dev.allocPd();
    const cq = dev.createCq(16);
    const acc = Access.LOCAL_WRITE | Access.REMOTE_WRITE;
    const sink = pd.registerMemory(Buffer.alloc(64), acc);
    // 4 KiB payloads leave as views of these buffers: their owners may refill them once completed.
    const first = pd.registerMemory(Buffer.alloc(4096, 0x41), acc);
    const second = pd.registerMemory(Buffer.alloc(4096, 0x42), acc);
    const owner: QpOwner = { onStreamDead: () => t.fail('the stream stays up'), onFirstFpdu() {} };
    const qp = new SoftQp(
      pd as never,
      cq,
      cq,
      { maxSendWr, maxRecvWr: 1, maxSendSge: 1, maxRecvSge: 1 },
      (dev as unknown as { stags: StagTable }).stags,
      owner,
      { maxQpWr: 64, maxSge: 4 },
    );
    const socket = new HeldSocket();
    qp.start(socket as unknown as Socket, {
      crc: false,
      mulpdu: 65504,
      ord: 4,
      ird: 4,
      waitForPeerFirst: false,
      sendRtr: Rtr.NONE,
      expectRtr: Rtr.NONE,
    });
    const S = SendFlags.SIGNALED;
    qp.postSend({
      wrId: 1,
      opcode: WrOpcode.RDMA_READ,
      flags: S,
      sgList: [{ mr: sink, offset: 0, length: 16 }],
      rkey: 0x1234,
      remoteAddr: 0n,
    });
    qp.postSend({
      wrId: 2,
      opcode: WrOpcode.SEND,
      flags: S,
      sgList: [{ mr: first, offset: 0, length: 4096 }],
    });
    await turn();
    t.is(socket.callbacks.length, 1, 'batch 1 (Read Request, Send 2) is in the socket');

    // The Read Response arrives before the socket's callback for batch 1: the Read completes.
    qp.onData(fpdu(ddpTagged(2, sink.rkey, sink.iova, Buffer.alloc(16, 7)), { crc: false }));
    t.deepEqual(completions(cq), [[1, WcStatus.SUCCESS]], 'the Read, and not Send 2 yet');

    qp.postSend({
      wrId: 3,
      opcode: WrOpcode.SEND,
      flags: S,
      sgList: [{ mr: second, offset: 0, length: 4096 }],
    });
    await turn();
    t.is(socket.callbacks.length, 2, 'batch 2 (Send 3) is in the socket too');

    (socket.callbacks.shift() as () => void)();
    t.deepEqual(
      completions(cq),
      [[2, WcStatus.SUCCESS]],
      'batch 1 written: Send 2 completes, Send 3 (still in the socket) does not',
    );
    (socket.callbacks.shift() as () => void)();
    t.deepEqual(completions(cq), [[3, WcStatus.SUCCESS]], 'batch 2 written: Send 3 completes');
  });
}
