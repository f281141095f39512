/**
 * When the soft QP writes to its socket. A lone Send leaves in the microtask after `postSend` (no added
 * latency); Sends posted later in the same event-loop turn — by the other socket reads of one poll
 * phase, as when many clients' calls arrive together — leave together in that turn's check phase, in one
 * write. Each write is one `uncork()` of the QP's socket (qp.ts `flushFramer`), counted here by a spy
 * that calls the real method.
 */
import net from 'node:net';
import test from 'ava';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { Access, SendFlags, WcStatus, WrOpcode } from '../../rdma-backend/verbs/index.js';
import { connectPair, type Pair, postRecvOf, type Side } from '../verbs/harness.js';

const soft = { name: 'soft', create: () => createSoftProvider(), reportsTerminate: true };

/** Counts `uncork()` calls on every net.Socket while `body` runs; the real method still runs. */
async function countingWrites<T>(body: (writes: () => number) => Promise<T>): Promise<T> {
  const proto = net.Socket.prototype;
  const real = proto.uncork;
  let n = 0;
  proto.uncork = function (this: net.Socket) {
    n++;
    return real.call(this);
  };
  try {
    return await body(() => n);
  } finally {
    proto.uncork = real;
  }
}

function postSend(side: Side, wrId: number, fill: number): void {
  const g = side.reg(64, Access.LOCAL_WRITE, fill);
  side.conn.qp.postSend({
    wrId,
    opcode: WrOpcode.SEND,
    flags: SendFlags.SIGNALED,
    sgList: [{ mr: g.mr, offset: 0, length: 64 }],
  });
}

async function pairWithReceives(n: number): Promise<{ pair: Pair; recvs: { g: { buf: Buffer } }[] }> {
  const pair = await connectPair(soft);
  const recvs = Array.from({ length: n }, () => postRecvOf(pair.server, 64));
  return { pair, recvs };
}

/** Every Send arrived, in posting order (each carried its own fill byte), and completed on both sides. */
async function assertDelivered(
  t: import('ava').ExecutionContext,
  pair: Pair,
  recvs: { g: { buf: Buffer } }[],
  fills: number[],
): Promise<void> {
  const received = await pair.server.recvCq.take(fills.length);
  const sent = await pair.client.sendCq.take(fills.length);
  t.true(received.every((w) => w.status === WcStatus.SUCCESS && w.byteLen === 64));
  t.true(sent.every((w) => w.status === WcStatus.SUCCESS));
  t.deepEqual(
    recvs.slice(0, fills.length).map((r) => r.g.buf[0]),
    fills,
  );
}

test.serial('a lone Send is written in the microtask after postSend, not later in the turn', async (t) => {
  const { pair, recvs } = await pairWithReceives(1);
  try {
    await countingWrites(async (writes) => {
      // Start in a fresh macrotask, as a socket's data callback would.
      await new Promise((r) => setTimeout(r, 5));
      let checkPhaseSaw = -1;
      const before = writes();
      setImmediate(() => {
        checkPhaseSaw = writes() - before;
      });
      postSend(pair.client, 1, 0x11);
      t.is(writes() - before, 0, 'postSend itself never writes');
      await null;
      await null;
      t.is(writes() - before, 1, 'written by the microtask checkpoint that follows the callback');
      await new Promise((r) => setImmediate(r));
      t.is(checkPhaseSaw, 1, 'already written when the check phase began');
    });
    await assertDelivered(t, pair, recvs, [0x11]);
  } finally {
    await pair.close();
  }
});

test.serial('Sends posted after the first of one turn leave together in its check phase', async (t) => {
  const { pair, recvs } = await pairWithReceives(4);
  try {
    await countingWrites(async (writes) => {
      await new Promise((r) => setTimeout(r, 5));
      const before = writes();
      // Four "socket reads" of one poll phase: each posts a Send and ends with a microtask checkpoint.
      for (let i = 0; i < 4; i++) {
        postSend(pair.client, 10 + i, 0x20 + i);
        await null;
        await null;
      }
      t.is(writes() - before, 1, 'only the first Send is written before the check phase');
      await new Promise((r) => setImmediate(r));
      t.is(writes() - before, 2, 'the other three leave in one write');
      // A later turn starts afresh: its first Send goes out in a microtask again.
      await new Promise((r) => setTimeout(r, 5));
      const later = writes();
      postSend(pair.client, 20, 0x30);
      await null;
      await null;
      t.is(writes() - later, 1);
    });
    await assertDelivered(t, pair, recvs, [0x20, 0x21, 0x22, 0x23]);
  } finally {
    await pair.close();
  }
});

test.serial(
  'calls read from many sockets in one poll phase cost the QP two writes, not one each',
  async (t) => {
    const clients = 16;
    const { pair, recvs } = await pairWithReceives(clients);
    const server = net.createServer();
    const accepted: net.Socket[] = [];
    let fill = 0x40;
    const order: number[] = [];
    server.on('connection', (s) => {
      accepted.push(s);
      s.on('data', () => {
        order.push(fill);
        postSend(pair.client, 100 + fill, fill++);
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as net.AddressInfo).port;
    const sockets = await Promise.all(
      Array.from(
        { length: clients },
        () =>
          new Promise<net.Socket>((resolve) => {
            const s = net.connect(port, '127.0.0.1', () => resolve(s));
          }),
      ),
    );
    while (accepted.length < clients) await new Promise((r) => setTimeout(r, 5));
    try {
      await countingWrites(async (writes) => {
        const before = writes();
        // All 16 writes land in the server sockets' buffers before the loop polls again, so their data
        // callbacks run in one poll phase.
        for (const s of sockets) s.write('x');
        while (order.length < clients) await new Promise((r) => setTimeout(r, 1));
        await new Promise((r) => setImmediate(r));
        const qpWrites = writes() - before;
        t.true(qpWrites <= 2, `the QP wrote ${qpWrites} times for ${clients} socket reads`);
      });
      await assertDelivered(t, pair, recvs, order);
    } finally {
      for (const s of sockets) s.destroy();
      for (const s of accepted) s.destroy();
      server.close();
      await pair.close();
    }
  },
);

test.serial(
  'a connection destroyed while Sends wait for the check phase flushes them and writes nothing more',
  async (t) => {
    const { pair, recvs } = await pairWithReceives(3);
    try {
      await countingWrites(async (writes) => {
        await new Promise((r) => setTimeout(r, 5));
        const before = writes();
        postSend(pair.client, 30, 0x50);
        await null;
        await null;
        postSend(pair.client, 31, 0x51); // deferred to the check phase
        postSend(pair.client, 32, 0x52);
        pair.client.conn.destroy();
        await new Promise((r) => setImmediate(r)); // the deferred pump runs on a dead QP
        await new Promise((r) => setTimeout(r, 20));
        t.is(writes() - before, 1, 'only the Send written before the teardown');
      });
      const sent = await pair.client.sendCq.take(3);
      t.deepEqual(
        sent.map((w) => w.wrId),
        [30, 31, 32],
        'completions in posting order',
      );
      t.true(
        sent.slice(1).every((w) => w.status === WcStatus.WR_FLUSH_ERR),
        'the deferred Sends were flushed, not sent',
      );
      const got = await pair.server.recvCq.take(1);
      t.is(got[0].status, WcStatus.SUCCESS);
      t.is(recvs[0].g.buf[0], 0x50);
      t.true(
        pair.client.regions.every((g) => g.guardsIntact()) &&
          pair.server.regions.every((g) => g.guardsIntact()),
      );
    } finally {
      await pair.close();
    }
  },
);
