/**
 * The verbs conformance suite, written against rdma-backend/verbs only. `registerConformance(factory)`
 * registers every test for one provider; test/verbs/soft.test.ts runs it for the soft provider and the
 * native provider's test file can run the very same suite. Each test checks completion statuses on both
 * sides and that guard bytes around every registered region are untouched.
 */
import test from 'ava';
import {
  Access,
  CmEventType,
  QpState,
  SendFlags,
  WcFlags,
  WcOpcode,
  WcStatus,
  WrOpcode,
} from '../../rdma-backend/verbs/index.js';
import {
  allGuardsIntact,
  connectPair,
  type Pair,
  type ProviderFactory,
  pattern,
  postRecvOf,
  type Side,
  tick,
} from './harness.js';

const LW = Access.LOCAL_WRITE;
const RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE;
const RR = Access.REMOTE_READ;

function send(
  side: Side,
  wrId: number,
  g: { mr: import('../../rdma-backend/verbs/index.js').MemoryRegion },
  length: number,
  extra: Partial<import('../../rdma-backend/verbs/index.js').SendWr> = {},
): void {
  side.conn.qp.postSend({
    wrId,
    opcode: WrOpcode.SEND,
    flags: SendFlags.SIGNALED,
    sgList: length > 0 ? [{ mr: g.mr, offset: 0, length }] : [],
    ...extra,
  });
}

/** Asserts a fatal error's aftermath: both sides DISCONNECTED, QPs in ERR, and the Terminate if reported. */
async function expectFatal(
  t: import('ava').ExecutionContext,
  f: ProviderFactory,
  detector: Side,
  peer: Side,
  term?: { layer: number; type: number; code: number },
): Promise<void> {
  const [d, p] = await Promise.all([
    detector.events.wait(CmEventType.DISCONNECTED),
    peer.events.wait(CmEventType.DISCONNECTED),
  ]);
  t.is(detector.conn.qp.state, QpState.ERR);
  t.is(peer.conn.qp.state, QpState.ERR);
  if (f.reportsTerminate && term) {
    t.like(d.terminate, { local: true, ...term }, 'the detecting side sent this Terminate');
    t.like(p.terminate, { local: false, ...term }, 'the peer received the same Terminate');
  }
}

export function registerConformance(f: ProviderFactory): void {
  const title = (s: string) => `[${f.name}] ${s}`;
  const withPair = (
    name: string,
    opts: Parameters<typeof connectPair>[1],
    body: (t: import('ava').ExecutionContext, p: Pair) => Promise<void>,
  ) =>
    test(title(name), async (t) => {
      const p = await connectPair(f, opts);
      try {
        await body(t, p);
        t.true(allGuardsIntact(p.client, p.server), 'no byte outside a registered region was touched');
      } finally {
        await p.close();
      }
    });

  test(title('device caps are sane and constants equal libibverbs'), async (t) => {
    const provider = await f.create();
    const names = await provider.listDevices();
    t.true(names.length >= 1);
    const dev = await provider.openDevice(names[0]);
    t.true(dev.caps.maxSge >= 1 && dev.caps.maxQpWr >= 16 && dev.caps.maxMrSize >= 1 << 20);
    t.true(dev.caps.maxIrd >= 1 && dev.caps.maxOrd >= 1);
    t.is(WcStatus.WR_FLUSH_ERR, 5);
    t.is(WcStatus.REM_ACCESS_ERR, 10);
    t.is(WcOpcode.RECV, 128);
    t.is(WrOpcode.SEND_WITH_INV, 9);
    t.is(WrOpcode.LOCAL_INV, 7);
    t.is(Access.REMOTE_READ, 4);
    t.is(CmEventType.ESTABLISHED, 9);
    t.is(CmEventType.DISCONNECTED, 10);
    t.is(WcFlags.WITH_INV, 8);
    const pd = dev.allocPd();
    t.throws(() => pd.registerMemory(dev.allocBuffer(8), Access.REMOTE_WRITE), { message: /LOCAL_WRITE/ });
    const mr = pd.registerMemory(dev.allocBuffer(8), RW);
    t.throws(() => pd.dealloc(), { message: /still/ });
    const old = mr.rkey;
    mr.rekey();
    t.not(mr.rkey, old, 'rekey changes the rkey');
    t.is(mr.rkey >>> 8, old >>> 8, 'STag index kept, key changed');
    mr.deregister();
    pd.dealloc();
    dev.close();
  });

  test(title('connect/accept carry private data both ways and the initiator ORD/IRD'), async (t) => {
    const cpd = pattern(200, 1);
    const spd = pattern(100, 2);
    const p = await connectPair(f, {
      clientPrivateData: cpd,
      serverPrivateData: spd,
      clientOrd: 5,
      clientIrd: 7,
    });
    try {
      t.deepEqual(p.request.privateData, cpd);
      t.is(p.request.ord, 5);
      t.is(p.request.ird, 7);
      const ce = p.client.events.events.find((e) => e.type === CmEventType.ESTABLISHED);
      t.deepEqual(ce?.privateData, spd);
      t.true(p.client.conn.ord <= 5 && p.client.conn.ord >= 1);
      t.is(p.client.conn.qp.state, QpState.RTS);
    } finally {
      await p.close();
    }
  });

  test(title('reject delivers REJECTED with the private data'), async (t) => {
    const [pc, ps] = [await f.create(), await f.create()];
    const [dc, ds] = [await pc.openDevice(), await ps.openDevice()];
    const listener = await ds.listen({
      host: f.host ?? '127.0.0.1',
      port: 0,
      onConnectRequest: (req) => req.reject(Buffer.from('go away')),
    });
    const pd = dc.allocPd();
    const cq = dc.createCq(16);
    const events: import('../../rdma-backend/verbs/index.js').CmEvent[] = [];
    const conn = dc.connect({
      host: f.host ?? '127.0.0.1',
      port: listener.port,
      pd,
      sendCq: cq,
      recvCq: cq,
      cap: { maxSendWr: 4, maxRecvWr: 4, maxSendSge: 1, maxRecvSge: 1 },
      privateData: Buffer.from('hi'),
      onEvent: (e) => events.push(e),
    });
    for (let i = 0; i < 200 && events.length === 0; i++) await tick(10);
    t.is(events[0]?.type, CmEventType.REJECTED);
    t.deepEqual(events[0]?.privateData, Buffer.from('go away'));
    conn.destroy();
    await listener.close();
  });

  test(
    title('connecting to a closed port fails with REJECTED or UNREACHABLE, never ESTABLISHED'),
    async (t) => {
      const dev = await (await f.create()).openDevice();
      const pd = dev.allocPd();
      const cq = dev.createCq(16);
      const events: number[] = [];
      const conn = dev.connect({
        host: f.host ?? '127.0.0.1',
        port: 1, // nothing listens on tcpmux
        pd,
        sendCq: cq,
        recvCq: cq,
        cap: { maxSendWr: 4, maxRecvWr: 4, maxSendSge: 1, maxRecvSge: 1 },
        onEvent: (e) => events.push(e.type),
        timeoutMs: 2000,
      });
      t.deepEqual(events, [], 'no event delivered synchronously from connect');
      for (let i = 0; i < 300 && events.length === 0; i++) await tick(10);
      t.true(events[0] === CmEventType.REJECTED || events[0] === CmEventType.UNREACHABLE, `got ${events}`);
      conn.destroy();
    },
  );

  withPair('Send/Recv with scatter-gather, unsignaled and solicited sends', {}, async (t, p) => {
    const r1 = postRecvOf(p.server, 300);
    const r2 = postRecvOf(p.server, 300);
    const r3 = postRecvOf(p.server, 10);
    const a = p.client.reg(100, LW);
    const b = p.client.reg(150, LW);
    a.buf.set(pattern(100, 3));
    b.buf.set(pattern(150, 4));
    const qp = p.client.conn.qp;
    qp.postSend({
      wrId: 1,
      opcode: WrOpcode.SEND,
      flags: 0,
      sgList: [
        { mr: a.mr, offset: 10, length: 90 },
        { mr: b.mr, offset: 0, length: 150 },
      ],
    });
    qp.postSend({
      wrId: 2,
      opcode: WrOpcode.SEND,
      flags: SendFlags.SIGNALED | SendFlags.SOLICITED,
      sgList: [{ mr: a.mr, offset: 0, length: 5 }],
    });
    qp.postSend({ wrId: 3, opcode: WrOpcode.SEND, flags: SendFlags.SIGNALED, sgList: [] });
    t.is(p.client.sendCq.cq.poll([]), 0);
    t.is(p.client.sendCq.notifications, 0, 'no completion delivered synchronously from postSend');
    const sc = await p.client.sendCq.take(2);
    t.deepEqual(
      sc.map((w) => [w.wrId, w.status, w.opcode]),
      [
        [2, 0, WcOpcode.SEND],
        [3, 0, WcOpcode.SEND],
      ],
      'unsignaled WR 1 reports nothing',
    );
    const rc = await p.server.recvCq.take(3);
    t.deepEqual(
      rc.map((w) => [w.wrId, w.status, w.opcode, w.byteLen]),
      [
        [r1.wrId, 0, WcOpcode.RECV, 240],
        [r2.wrId, 0, WcOpcode.RECV, 5],
        [r3.wrId, 0, WcOpcode.RECV, 0],
      ],
    );
    t.deepEqual(r1.g.buf.subarray(0, 240), Buffer.concat([a.buf.subarray(10), b.buf]));
    t.deepEqual(r2.g.buf.subarray(0, 5), a.buf.subarray(0, 5));
    t.true(
      r1.g.buf.subarray(240).every((x) => x === 0),
      'bytes past the message untouched',
    );
  });

  withPair('a large Send spans many FPDUs/packets and lands intact', {}, async (t, p) => {
    const n = 300_000;
    const r = postRecvOf(p.server, n + 7);
    const src = p.client.reg(n, LW);
    src.buf.set(pattern(n, 9));
    send(p.client, 1, src, n);
    const [sc] = await p.client.sendCq.take(1);
    t.is(sc.status, WcStatus.SUCCESS);
    const [rc] = await p.server.recvCq.take(1);
    t.is(rc.byteLen, n);
    t.true(r.g.buf.subarray(0, n).equals(src.buf));
  });

  withPair('Send with Invalidate invalidates the named rkey and reports it', {}, async (t, p) => {
    const r = postRecvOf(p.client, 64);
    const target = p.client.reg(4096, RW);
    const src = p.server.reg(16, LW, 1);
    send(p.server, 1, src, 16, { opcode: WrOpcode.SEND_WITH_INV, invalidateRkey: target.mr.rkey });
    const [sc] = await p.server.sendCq.take(1);
    t.is(sc.status, WcStatus.SUCCESS);
    const [rc] = await p.client.recvCq.take(1);
    t.is(rc.wrId, r.wrId);
    t.is(rc.status, WcStatus.SUCCESS);
    t.true((rc.wcFlags & WcFlags.WITH_INV) !== 0);
    t.is(rc.invalidatedRkey, target.mr.rkey);
    t.false(target.mr.valid);
    // Rekey makes the region usable again under a new rkey.
    const old = target.mr.rkey;
    target.mr.rekey();
    t.not(target.mr.rkey, old);
    t.true(target.mr.valid);
    const w = p.server.reg(8, LW, 0x42);
    p.server.conn.qp.postSend({
      wrId: 2,
      opcode: WrOpcode.RDMA_WRITE,
      flags: SendFlags.SIGNALED,
      sgList: [{ mr: w.mr, offset: 0, length: 8 }],
      rkey: target.mr.rkey,
      remoteAddr: target.mr.iova + 100n,
    });
    t.is((await p.server.sendCq.take(1))[0].status, WcStatus.SUCCESS);
    // A Write completes at the sender once handed over; a following Send proves it was placed.
    const r2 = postRecvOf(p.client, 8);
    send(p.server, 3, w, 1);
    await p.client.recvCq.take(1);
    t.is(r2.g.buf[0], 0x42);
    t.true(target.buf.subarray(100, 108).every((x) => x === 0x42));
    t.is(target.buf[99], 0);
    t.is(target.buf[108], 0);
  });

  withPair('RDMA Write (multi-SGE, multi-FPDU) places exactly the bytes addressed', {}, async (t, p) => {
    const target = p.server.reg(1 << 20, RW);
    const a = p.client.reg(700_000, LW);
    const b = p.client.reg(1000, LW);
    a.buf.set(pattern(700_000, 5));
    b.buf.set(pattern(1000, 6));
    p.client.conn.qp.postSend({
      wrId: 7,
      opcode: WrOpcode.RDMA_WRITE,
      flags: SendFlags.SIGNALED,
      sgList: [
        { mr: a.mr, offset: 0, length: 700_000 },
        { mr: b.mr, offset: 1, length: 999 },
      ],
      rkey: target.mr.rkey,
      remoteAddr: target.mr.iova + 3n,
    });
    const [sc] = await p.client.sendCq.take(1);
    t.deepEqual([sc.wrId, sc.status, sc.opcode], [7, WcStatus.SUCCESS, WcOpcode.RDMA_WRITE]);
    const r = postRecvOf(p.server, 4);
    send(p.client, 8, b, 4);
    await p.server.recvCq.take(1);
    t.true(target.buf.subarray(3, 700_003).equals(a.buf));
    t.true(target.buf.subarray(700_003, 701_002).equals(b.buf.subarray(1)));
    t.deepEqual([target.buf[0], target.buf[1], target.buf[2], target.buf[701_002]], [0, 0, 0, 0]);
    t.truthy(r);
  });

  withPair(
    'RDMA Read returns the source bytes; ORD reached stalls (does not fail) the queue',
    { clientOrd: 1 },
    async (t, p) => {
      const source = p.server.reg(256 * 1024, RR | LW);
      source.buf.set(pattern(256 * 1024, 8));
      const sinks = [0, 1, 2, 3].map(() => p.client.reg(64 * 1024, RW));
      t.is(p.client.conn.ord, 1);
      const qp = p.client.conn.qp;
      for (const [i, s] of sinks.entries()) {
        qp.postSend({
          wrId: 10 + i,
          opcode: WrOpcode.RDMA_READ,
          flags: SendFlags.SIGNALED,
          sgList: [{ mr: s.mr, offset: 0, length: 64 * 1024 }],
          rkey: source.mr.rkey,
          remoteAddr: source.mr.iova + BigInt(i * 64 * 1024),
        });
      }
      const r = p.client.reg(4, LW);
      const sr = postRecvOf(p.server, 4);
      send(p.client, 20, r, 4); // behind the Reads: must wait for them and complete after them
      const cs = await p.client.sendCq.take(5);
      t.deepEqual(
        cs.map((w) => [w.wrId, w.status]),
        [
          [10, 0],
          [11, 0],
          [12, 0],
          [13, 0],
          [20, 0],
        ],
      );
      t.deepEqual(
        cs.slice(0, 4).map((w) => [w.opcode, w.byteLen]),
        Array(4).fill([WcOpcode.RDMA_READ, 64 * 1024]),
      );
      for (const [i, s] of sinks.entries())
        t.true(s.buf.equals(source.buf.subarray(i * 65536, (i + 1) * 65536)));
      await p.server.recvCq.take(1);
      t.truthy(sr);
    },
  );

  withPair('zero-length Read and Write succeed', {}, async (t, p) => {
    const s = p.client.reg(16, RW);
    const src = p.server.reg(16, RR | LW);
    p.client.conn.qp.postSend({
      wrId: 1,
      opcode: WrOpcode.RDMA_READ,
      flags: SendFlags.SIGNALED,
      sgList: [],
      rkey: src.mr.rkey,
      remoteAddr: src.mr.iova,
    });
    p.client.conn.qp.postSend({
      wrId: 2,
      opcode: WrOpcode.RDMA_WRITE,
      flags: SendFlags.SIGNALED,
      sgList: [],
      rkey: 0,
      remoteAddr: 0n,
    });
    const cs = await p.client.sendCq.take(2);
    t.deepEqual(
      cs.map((w) => [w.wrId, w.status, w.byteLen]),
      [
        [1, 0, 0],
        [2, 0, 0],
      ],
    );
    t.truthy(s);
  });

  withPair(
    'Local Invalidate completes and a later remote Write with that rkey is a fatal error',
    { preRecv: { client: [64], server: [64] } },
    async (t, p) => {
      const target = p.server.reg(64, RW);
      p.server.conn.qp.postSend({
        wrId: 1,
        opcode: WrOpcode.LOCAL_INV,
        flags: SendFlags.SIGNALED,
        sgList: [],
        invalidateRkey: target.mr.rkey,
      });
      const [li] = await p.server.sendCq.take(1);
      t.deepEqual([li.status, li.opcode], [WcStatus.SUCCESS, WcOpcode.LOCAL_INV]);
      t.false(target.mr.valid);
      const src = p.client.reg(8, LW, 9);
      p.client.conn.qp.postSend({
        wrId: 2,
        opcode: WrOpcode.RDMA_WRITE,
        flags: SendFlags.SIGNALED,
        sgList: [{ mr: src.mr, offset: 0, length: 8 }],
        rkey: target.mr.rkey,
        remoteAddr: target.mr.iova,
      });
      await expectFatal(t, f, p.server, p.client, { layer: 1, type: 1, code: 0 });
      t.true(
        target.buf.every((x) => x === 0),
        'nothing placed',
      );
      const srv = await p.server.recvCq.take(1);
      t.is(srv[0].status, WcStatus.WR_FLUSH_ERR, 'the server posted receive is flushed');
      const cli = await p.client.recvCq.take(1);
      t.is(cli[0].status, WcStatus.WR_FLUSH_ERR, 'the client posted receive is flushed');
    },
  );

  // ------------------------------------------------------------------ fatal errors, one per cause

  const writeTo = (p: Pair, rkey: number, addr: bigint, len: number): void => {
    const src = p.client.reg(Math.max(len, 1), LW, 0x77);
    p.client.conn.qp.postSend({
      wrId: 100,
      opcode: WrOpcode.RDMA_WRITE,
      flags: SendFlags.SIGNALED,
      sgList: [{ mr: src.mr, offset: 0, length: len }],
      rkey,
      remoteAddr: addr,
    });
  };

  /** Checks both sides' completions after a fatal error: every WR accounted for, flushed ones with 5. */
  async function checkFlushed(
    t: import('ava').ExecutionContext,
    p: Pair,
    clientSendIds: number[],
    okStatuses: number[],
  ): Promise<void> {
    const cs = await p.client.sendCq.take(clientSendIds.length);
    t.deepEqual(
      cs.map((w) => w.wrId),
      clientSendIds,
      'every send WR completes, in order',
    );
    t.true(okStatuses.includes(cs[0].status), `first WR status ${cs[0].status}`);
    // iWARP completes a Send/Write once handed to the stream, so WRs before the Terminate arrived may
    // have succeeded; once one WR completed in error every later one must be flushed.
    let failed = false;
    for (const w of cs) {
      if (failed) t.is(w.status, WcStatus.WR_FLUSH_ERR, `WR ${w.wrId} after an error`);
      if (w.status !== WcStatus.SUCCESS) failed = true;
    }
    // The WR that takes the blame (the first one not to succeed: the failing WR itself, or one still in
    // flight when the Terminate came) carries a status the failing WR may have: the remote error or a flush.
    const firstError = cs.find((w) => w.status !== WcStatus.SUCCESS);
    if (firstError !== undefined)
      t.true(
        okStatuses.includes(firstError.status),
        `the first WR in error (${firstError.wrId}) has status ${firstError.status}, one of ${okStatuses}`,
      );
    const rs = await p.server.recvCq.take(1);
    t.is(rs[0].status, WcStatus.WR_FLUSH_ERR);
    const cr = await p.client.recvCq.take(1);
    t.is(cr[0].status, WcStatus.WR_FLUSH_ERR);
  }

  const fatalCase = (
    name: string,
    body: (p: Pair) => void,
    term: { layer: number; type: number; code: number },
    firstOk: number[],
  ) =>
    withPair(`fatal: ${name}`, { preRecv: { client: [32], server: [32] } }, async (t, p) => {
      body(p);
      // A WR posted behind the failing one must be flushed.
      const extra = p.client.reg(4, LW);
      send(p.client, 101, extra, 0);
      await expectFatal(t, f, p.server, p.client, term);
      await checkFlushed(t, p, [100, 101], firstOk);
    });

  const OK_OR_REMOTE = [
    WcStatus.SUCCESS,
    WcStatus.REM_ACCESS_ERR,
    WcStatus.REM_OP_ERR,
    WcStatus.REM_INV_REQ_ERR,
    WcStatus.WR_FLUSH_ERR,
  ];

  fatalCase(
    'Write to an invalid STag',
    (p) => writeTo(p, 0x7fff_ff01, 0n, 8),
    { layer: 1, type: 1, code: 0 },
    OK_OR_REMOTE,
  );
  fatalCase(
    'Write out of bounds',
    (p) => {
      const g = p.server.reg(16, RW);
      writeTo(p, g.mr.rkey, g.mr.iova + 10n, 8);
    },
    { layer: 1, type: 1, code: 1 },
    OK_OR_REMOTE,
  );
  fatalCase(
    'Write to a region without REMOTE_WRITE',
    (p) => {
      const g = p.server.reg(16, LW | RR);
      writeTo(p, g.mr.rkey, g.mr.iova, 8);
    },
    { layer: 0, type: 1, code: 2 },
    OK_OR_REMOTE,
  );
  fatalCase(
    'Write with a stale rkey (after rekey)',
    (p) => {
      const g = p.server.reg(16, RW);
      const old = g.mr.rkey;
      g.mr.rekey();
      writeTo(p, old, g.mr.iova, 8);
    },
    { layer: 1, type: 1, code: 0 },
    OK_OR_REMOTE,
  );
  fatalCase(
    'Write to a region of another protection domain',
    (p) => {
      const otherPd = p.server.device.allocPd();
      const buf = p.server.device.allocBuffer(16);
      const mr = otherPd.registerMemory(buf, RW);
      writeTo(p, mr.rkey, mr.iova, 8);
    },
    { layer: 1, type: 1, code: 2 },
    OK_OR_REMOTE,
  );

  const readFrom = (p: Pair, rkey: number, addr: bigint, len: number): void => {
    const sink = p.client.reg(len, RW);
    p.client.conn.qp.postSend({
      wrId: 100,
      opcode: WrOpcode.RDMA_READ,
      flags: SendFlags.SIGNALED,
      sgList: [{ mr: sink.mr, offset: 0, length: len }],
      rkey,
      remoteAddr: addr,
    });
  };
  fatalCase(
    'Read from a region without REMOTE_READ',
    (p) => {
      const g = p.server.reg(16, RW);
      readFrom(p, g.mr.rkey, g.mr.iova, 8);
    },
    { layer: 0, type: 1, code: 2 },
    [WcStatus.REM_ACCESS_ERR],
  );
  fatalCase(
    'Read out of bounds',
    (p) => {
      const g = p.server.reg(16, RR | LW);
      readFrom(p, g.mr.rkey, g.mr.iova + 12n, 8);
    },
    { layer: 0, type: 1, code: 1 },
    [WcStatus.REM_ACCESS_ERR],
  );
  fatalCase(
    'Read from an invalidated region',
    (p) => {
      const g = p.server.reg(16, RR | LW);
      (g.mr as unknown as { invalidate?: () => void }).invalidate?.() ?? g.mr.deregister();
      readFrom(p, g.mr.rkey === 0 ? 0x100 : g.mr.rkey, g.mr.iova, 8);
    },
    { layer: 0, type: 1, code: 0 },
    [WcStatus.REM_ACCESS_ERR],
  );

  withPair('fatal: Send with no Receive posted', { preRecv: { client: [32] } }, async (t, p) => {
    const src = p.client.reg(8, LW);
    send(p.client, 100, src, 8);
    send(p.client, 101, src, 8);
    await expectFatal(t, f, p.server, p.client, { layer: 1, type: 2, code: 2 });
    const cs = await p.client.sendCq.take(2);
    t.deepEqual(
      cs.map((w) => w.wrId),
      [100, 101],
    );
    for (const w of cs)
      t.true([WcStatus.SUCCESS, WcStatus.REM_INV_REQ_ERR, WcStatus.WR_FLUSH_ERR].includes(w.status as 0));
    t.is((await p.client.recvCq.take(1))[0].status, WcStatus.WR_FLUSH_ERR);
  });

  withPair('fatal: Receive too small', { preRecv: { client: [32], server: [8, 64] } }, async (t, p) => {
    const src = p.client.reg(20, LW, 3);
    send(p.client, 100, src, 20);
    await expectFatal(t, f, p.server, p.client, { layer: 1, type: 2, code: 5 });
    const rs = await p.server.recvCq.take(2);
    t.deepEqual(
      rs.map((w) => w.status),
      [WcStatus.LOC_LEN_ERR, WcStatus.WR_FLUSH_ERR],
    );
    t.is((await p.client.recvCq.take(1))[0].status, WcStatus.WR_FLUSH_ERR);
  });

  withPair(
    'fatal: Send with Invalidate of an rkey that is not valid here',
    { preRecv: { client: [32], server: [32, 32] } },
    async (t, p) => {
      const src = p.client.reg(4, LW);
      send(p.client, 100, src, 4, { opcode: WrOpcode.SEND_WITH_INV, invalidateRkey: 0x00ab_cd01 });
      await expectFatal(t, f, p.server, p.client, { layer: 0, type: 2, code: 9 });
      const rs = await p.server.recvCq.take(2);
      t.not(rs[0].status, WcStatus.SUCCESS);
      t.is(rs[1].status, WcStatus.WR_FLUSH_ERR);
    },
  );

  withPair(
    'local protection error: an SGE of a deregistered region',
    { preRecv: { client: [32], server: [32] } },
    async (t, p) => {
      const src = p.client.reg(8, LW);
      src.mr.deregister();
      send(p.client, 100, src, 8);
      send(p.client, 101, src, 0);
      const cs = await p.client.sendCq.take(2);
      t.deepEqual(
        cs.map((w) => [w.wrId, w.status]),
        [
          [100, WcStatus.LOC_PROT_ERR],
          [101, WcStatus.WR_FLUSH_ERR],
        ],
      );
      await Promise.all([
        p.client.events.wait(CmEventType.DISCONNECTED),
        p.server.events.wait(CmEventType.DISCONNECTED),
      ]);
      t.is((await p.server.recvCq.take(1))[0].status, WcStatus.WR_FLUSH_ERR);
      t.is((await p.client.recvCq.take(1))[0].status, WcStatus.WR_FLUSH_ERR);
    },
  );

  withPair(
    'disconnect flushes posted WRs on both sides and raises DISCONNECTED on both',
    { preRecv: { client: [32, 32], server: [32] } },
    async (t, p) => {
      p.client.conn.disconnect();
      await Promise.all([
        p.client.events.wait(CmEventType.DISCONNECTED),
        p.server.events.wait(CmEventType.DISCONNECTED),
      ]);
      const cr = await p.client.recvCq.take(2);
      t.deepEqual(
        cr.map((w) => w.status),
        [5, 5],
      );
      t.is((await p.server.recvCq.take(1))[0].status, 5);
      // Posting to a QP in ERR is accepted and flushed.
      const g = p.client.reg(4, LW);
      send(p.client, 55, g, 4);
      const [w] = await p.client.sendCq.take(1);
      t.deepEqual([w.wrId, w.status], [55, WcStatus.WR_FLUSH_ERR]);
    },
  );

  withPair(
    'post limits are enforced synchronously (queue full, bad WR)',
    { cap: { maxSendWr: 2, maxRecvWr: 2 } },
    async (t, p) => {
      const g = p.client.reg(4, LW);
      postRecvOf(p.client, 4);
      postRecvOf(p.client, 4);
      t.throws(() => postRecvOf(p.client, 4), { message: /full/ });
      t.throws(
        () => p.client.conn.qp.postSend({ wrId: 1, opcode: WrOpcode.RDMA_WRITE, flags: 0, sgList: [] }),
        { message: /rkey/ },
      );
      const r = postRecvOf(p.server, 4);
      const r2 = postRecvOf(p.server, 4);
      send(p.client, 1, g, 4);
      send(p.client, 2, g, 4);
      t.throws(() => send(p.client, 3, g, 4), { message: /full/ });
      await p.client.sendCq.take(2);
      await p.server.recvCq.take(2);
      t.truthy(r && r2);
    },
  );
}
