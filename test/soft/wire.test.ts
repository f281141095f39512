/**
 * Soft provider on the wire, checked against an independent framer (test/helpers/iwarp-frames.ts) over a
 * raw TCP socket: CRC32c, MPA negotiation (revision 1 answered with 1, markers refused, CRC off = zero
 * field), and the Terminate sent for a CRC error, a bad MSN, a bad MO and a Send with no Receive.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import test from 'ava';
import fc from 'fast-check';
import {
  crc32c,
  crc32cImplementation,
  crc32cSoftware,
  createSoftProvider,
} from '../../rdma-backend/providers/soft/index.js';
import { decodeMpa, encodeMpa } from '../../rdma-backend/providers/soft/mpa.js';
import {
  Access,
  CmEventType,
  type Connection,
  SendFlags,
  WcStatus,
  WrOpcode,
} from '../../rdma-backend/verbs/index.js';
import { ddpUntaggedSend, fpdu, mpaRequest, crc32c as oracleCrc } from '../helpers/iwarp-frames.js';
import { CqWatcher, EventLog } from '../verbs/harness.js';

test('CRC32c check value, little-endian on the wire, chaining and native = software', (t) => {
  t.is(crc32c(Buffer.from('123456789')), 0xe3069283);
  t.is(crc32cSoftware(Buffer.from('123456789')), 0xe3069283);
  const f = fpdu(Buffer.from('123456789'.slice(0, 2)));
  t.is(f.readUInt32LE(f.length - 4), oracleCrc(f.subarray(0, f.length - 4)));
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 3000 }), fc.nat(3000), (arr, cut) => {
      const b = Buffer.from(arr);
      const k = Math.min(cut, b.length);
      const whole = crc32cSoftware(b);
      return (
        crc32c(b) === whole && crc32c(b, k, b.length, crc32c(b, 0, k)) === whole && oracleCrc(b) === whole
      );
    }),
    { numRuns: 200 },
  );
});

const execFileAsync = promisify(execFile);

const ADDON = fileURLToPath(
  new URL('../../../rdma-backend/native/crc32c/build/Release/crc32c.node', import.meta.url),
);

/** The addon's path the CPU calls for: CI builds the addon (npm install), so there it must be in use. */
function expectedCrcMethod(): string | undefined {
  if (!existsSync(ADDON) || process.env.RPCRDMA_SOFT_CRC !== undefined) return undefined;
  const flags = readFileSync('/proc/cpuinfo', 'utf8');
  if (!/\bsse4_2\b/.test(flags)) return undefined;
  if (process.env.RPCRDMA_CRC32C_METHOD === 'sse42') return 'sse42-3way';
  return /\bavx512f\b/.test(flags) && /\bvpclmulqdq\b/.test(flags) ? 'avx512-fold' : 'sse42-3way';
}

test('the CRC32c addon serves where it is built, and equals the software CRC across lane and fold bounds', (t) => {
  const expected = expectedCrcMethod();
  if (expected !== undefined) t.is(crc32cImplementation as string, expected);
  else t.log(`CRC32c implementation: ${crc32cImplementation} (addon built: ${existsSync(ADDON)})`);
  // Lengths around the fold (512, 256-byte steps) and lane sizes (3×256, 3×8192 bytes), odd starts
  // (unaligned head) and chaining.
  const big = Buffer.alloc(3 * 8192 * 3 + 37);
  for (let i = 0; i < big.length; i++) big[i] = (i * 131 + 17) & 0xff;
  const lengths = [
    95,
    96,
    97,
    511,
    512,
    513,
    767,
    768,
    769,
    1023,
    1024,
    1279,
    3 * 256 * 5 + 3,
    24575,
    24576,
    24577,
  ];
  for (const len of [...lengths, 49152 + 768 + 5, 65504, 73000]) {
    for (const start of [0, 1, 5]) {
      const end = start + len;
      const want = crc32cSoftware(big, start, end, 0x1234_5678);
      t.is(crc32c(big, start, end, 0x1234_5678), want, `len ${len} from ${start}`);
      const mid = start + (len >> 1);
      t.is(crc32c(big, mid, end, crc32c(big, start, mid, 0x1234_5678)), want, `chained at ${mid}`);
    }
  }
});

test('the CRC32c addon refuses a range outside its bytes and a non-Uint8Array with typed errors', (t) => {
  if (!existsSync(ADDON)) {
    if (process.env.CI) return t.fail(`the CRC32c addon is not built (${ADDON})`);
    t.log('!!! the CRC32c addon is not built: its argument checks are NOT tested here');
    return t.pass();
  }
  const m = createRequire(import.meta.url)(ADDON) as {
    crc32c: (b: unknown, start: number, end: number, prev: number) => number;
  };
  const b = Buffer.alloc(64);
  t.throws(() => m.crc32c(b, 10, 5, 0), { instanceOf: RangeError, code: 'ERR_CRC32C_RANGE' });
  t.throws(() => m.crc32c(b, 0, 65, 0), { instanceOf: RangeError, code: 'ERR_CRC32C_RANGE' });
  t.throws(() => m.crc32c(new Uint16Array(4), 0, 2, 0), { instanceOf: TypeError, code: 'ERR_CRC32C_ARGS' });
  t.is(m.crc32c(b.subarray(8), 0, 56, 0), crc32cSoftware(b, 8, 64, 0), 'a view: its own offset is honoured');
});

test('the three-lane path agrees with the software CRC too, where the fold would serve', async (t) => {
  if (!existsSync(ADDON)) {
    // npm install builds it wherever a C compiler exists; CI always has one.
    if (process.env.CI) return t.fail(`the CRC32c addon is not built (${ADDON})`);
    t.log('!!! the CRC32c addon is not built: its three-lane path is NOT tested here');
    return t.pass();
  }
  // A child process, since the addon picks its path once at load time.
  const script = `
    const m = require(${JSON.stringify(ADDON)});
    const b = Buffer.alloc(100000); for (let i = 0; i < b.length; i++) b[i] = (i * 131 + 17) & 0xff;
    const out = [m.method];
    for (const n of [512, 769, 24577, 65504, 99990]) out.push(m.crc32c(b, 3, 3 + n, 0xabcdef));
    console.log(JSON.stringify(out));`;
  const { stdout } = await execFileAsync(process.execPath, ['-e', script], {
    env: { ...process.env, RPCRDMA_CRC32C_METHOD: 'sse42' },
  });
  const [method, ...crcs] = JSON.parse(stdout) as [string, ...number[]];
  t.not(method, 'avx512-fold', 'RPCRDMA_CRC32C_METHOD=sse42 keeps the three-lane path');
  const b = Buffer.alloc(100000);
  for (let i = 0; i < b.length; i++) b[i] = (i * 131 + 17) & 0xff;
  t.deepEqual(
    crcs,
    [512, 769, 24577, 65504, 99990].map((n) => crc32cSoftware(b, 3, 3 + n, 0xabcdef)),
  );
});

test('MPA frames round-trip; IRD/ORD words are stripped; 512-byte limit enforced', (t) => {
  const pd = Buffer.alloc(508, 7);
  const f = decodeMpa(
    encodeMpa({
      reply: false,
      markers: false,
      crc: true,
      reject: false,
      revision: 2,
      enhanced: { irdWord: 0x8000 | 9, ordWord: 0x8000 | 3 },
      privateData: pd,
    }),
    false,
  );
  t.like(f, { crc: true, revision: 2, enhanced: { irdWord: 0x8009, ordWord: 0x8003 } });
  t.deepEqual(f.privateData, pd);
  t.throws(
    () =>
      encodeMpa({
        reply: true,
        markers: false,
        crc: true,
        reject: false,
        revision: 2,
        enhanced: { irdWord: 0, ordWord: 0 },
        privateData: Buffer.alloc(509),
      }),
    { message: /512/ },
  );
  t.throws(() => decodeMpa(Buffer.from('MPA ID Req Framx\0\x01\0\0', 'latin1'), false), { message: /key/ });
});

interface Server {
  port: number;
  conn: () => Connection | undefined;
  events: EventLog;
  cq: CqWatcher;
  recv: (n: number) => void;
  close(): Promise<void>;
}

async function server(opts: { crc?: boolean } = {}, preRecv = 0): Promise<Server> {
  const dev = await createSoftProvider(opts).openDevice();
  const pd = dev.allocPd();
  const cq = new CqWatcher(dev.createCq(64));
  const events = new EventLog();
  const mr = pd.registerMemory(Buffer.alloc(4096), Access.LOCAL_WRITE);
  let conn: Connection | undefined;
  let id = 0;
  const recv = (n: number) => {
    for (let i = 0; i < n; i++) conn?.qp.postRecv({ wrId: id++, sgList: [{ mr, offset: 0, length: 64 }] });
  };
  const l = await dev.listen({
    host: '127.0.0.1',
    port: 0,
    onConnectRequest: (req) => {
      conn = req.createConnection({
        pd,
        sendCq: cq.cq,
        recvCq: cq.cq,
        cap: { maxSendWr: 8, maxRecvWr: 8, maxSendSge: 1, maxRecvSge: 1 },
        onEvent: events.handler,
      });
      recv(preRecv);
      conn.accept({ privateData: Buffer.from('ok') });
    },
  });
  return { port: l.port, conn: () => conn, events, cq, recv, close: () => l.close() };
}

/** A raw TCP initiator that collects everything the provider sends. */
async function raw(
  port: number,
): Promise<{ sock: net.Socket; got: () => Buffer; waitFor: (n: number) => Promise<Buffer> }> {
  const sock = net.connect(port, '127.0.0.1');
  await new Promise((r) => sock.once('connect', r));
  let buf = Buffer.alloc(0);
  const waiters: (() => void)[] = [];
  sock.on('data', (d: Buffer) => {
    buf = Buffer.concat([buf, d]);
    for (const w of waiters.splice(0)) w();
  });
  sock.on('error', () => {});
  const waitFor = async (n: number) => {
    const deadline = Date.now() + 3000;
    while (buf.length < n && Date.now() < deadline)
      await new Promise<void>((r) => {
        waiters.push(r);
        setTimeout(r, 50);
      });
    return buf;
  };
  return { sock, got: () => buf, waitFor };
}

test('revision 1 request gets a revision 1 reply; nothing is sent before our first FPDU', async (t) => {
  const s = await server({}, 2);
  const r = await raw(s.port);
  r.sock.write(mpaRequest({ crc: true, revision: 1, privateData: Buffer.from('hi') }));
  const reply = await r.waitFor(22);
  const f = decodeMpa(reply.subarray(0, 22), true);
  t.like(f, { revision: 1, crc: true, reject: false, enhanced: undefined });
  t.deepEqual(f.privateData, Buffer.from('ok'));
  await s.events.wait(CmEventType.ESTABLISHED);
  const src = Buffer.alloc(8, 1);
  // The responder posts a Send now; MPA (RFC 5044 §7.1.2) holds it until the initiator's first FPDU.
  const conn = s.conn() as Connection;
  const mr = conn.qp.pd.registerMemory(src, Access.LOCAL_WRITE);
  conn.qp.postSend({
    wrId: 1,
    opcode: WrOpcode.SEND,
    flags: SendFlags.SIGNALED,
    sgList: [{ mr, offset: 0, length: 8 }],
  });
  await new Promise((res) => setTimeout(res, 100));
  t.is(r.got().length, 22, 'responder sent nothing after its reply');
  r.sock.write(fpdu(ddpUntaggedSend(Buffer.from('first'), { msn: 1 })));
  const all = await r.waitFor(22 + 32);
  t.is(all.length, 22 + 32, 'the held Send went out after our FPDU');
  const f2 = all.subarray(22);
  t.is(f2.readUInt32LE(f2.length - 4), oracleCrc(f2.subarray(0, f2.length - 4)), 'good little-endian CRC');
  const [wc] = await s.cq.take(2);
  t.true(wc.status === WcStatus.SUCCESS);
  r.sock.destroy();
  await s.close();
});

test('markers are refused: the reply rejects', async (t) => {
  const s = await server();
  const r = await raw(s.port);
  const req = mpaRequest({ revision: 1 });
  req[16] |= 0x80;
  r.sock.write(req);
  const reply = await r.waitFor(20);
  t.true(decodeMpa(reply.subarray(0, 20), true).reject);
  r.sock.destroy();
  await s.close();
});

test('CRC off on both sides: the CRC field is present and zero', async (t) => {
  const s = await server({ crc: false }, 1);
  const r = await raw(s.port);
  r.sock.write(mpaRequest({ crc: false, revision: 1 }));
  const reply = await r.waitFor(22);
  t.false(decodeMpa(reply.subarray(0, 22), true).crc);
  r.sock.write(fpdu(ddpUntaggedSend(Buffer.from('x'), { msn: 1 }), { crc: false }));
  await s.cq.take(1);
  const conn = s.conn() as Connection;
  const mr = conn.qp.pd.registerMemory(Buffer.alloc(6, 2), Access.LOCAL_WRITE);
  conn.qp.postSend({ wrId: 1, opcode: WrOpcode.SEND, flags: 0, sgList: [{ mr, offset: 0, length: 6 }] });
  const all = await r.waitFor(22 + 32);
  t.is(all.length, 22 + 32);
  t.is(all.readUInt32LE(all.length - 4), 0);
  r.sock.destroy();
  await s.close();
});

async function terminateFor(
  t: import('ava').ExecutionContext,
  frame: (crcOn: boolean) => Buffer,
  expected: [number, number, number],
  preRecv = 2,
  /** Write the frame in this many pieces, apart in time (so the parser sees it split across reads). */
  pieces = 1,
) {
  const s = await server({}, preRecv);
  const r = await raw(s.port);
  r.sock.write(mpaRequest({ revision: 1 }));
  await r.waitFor(22);
  const f = frame(true);
  const step = Math.ceil(f.length / pieces);
  for (let at = 0; at < f.length; at += step) {
    if (at > 0) await new Promise((res) => setTimeout(res, 20));
    r.sock.write(f.subarray(at, at + step));
  }
  const all = await r.waitFor(22 + 28);
  const term = all.subarray(22);
  t.is(term[3] & 0x0f, 7, 'RDMAP Terminate');
  t.is(term.readUInt32BE(8), 2, 'QN 2');
  t.is(term.readUInt32BE(12), 1, 'first MSN of the Terminate queue');
  const ctrl = term.readUInt32BE(20);
  t.deepEqual([ctrl >>> 28, (ctrl >>> 24) & 0xf, (ctrl >>> 16) & 0xff], expected);
  t.is(term.readUInt32LE(24), oracleCrc(term.subarray(0, 24)));
  const ev = await s.events.wait(CmEventType.DISCONNECTED);
  t.like(ev.terminate, { local: true, layer: expected[0], type: expected[1], code: expected[2] });
  const flushed = await s.cq.take(preRecv);
  t.true(flushed.every((w) => w.status === WcStatus.WR_FLUSH_ERR));
  r.sock.destroy();
  await s.close();
}

test('a CRC error terminates with LLP/MPA 2/0/2', (t) =>
  terminateFor(t, () => {
    const f = fpdu(ddpUntaggedSend(Buffer.from('payload'), { msn: 1 }));
    f[f.length - 1] ^= 0xff;
    return f;
  }, [2, 0, 2]));

test('a CRC error in an FPDU split across reads terminates with LLP/MPA 2/0/2 too', (t) =>
  terminateFor(
    t,
    () => {
      const f = fpdu(ddpUntaggedSend(Buffer.from('a payload long enough to split'), { msn: 1 }));
      f[f.length - 1] ^= 0xff;
      return f;
    },
    [2, 0, 2],
    2,
    3,
  ));

test('a bad MSN in an FPDU split across reads terminates with DDP untagged 1/2/3 too', (t) =>
  terminateFor(t, () => fpdu(ddpUntaggedSend(Buffer.from('p'), { msn: 5 })), [1, 2, 3], 2, 4));

test('a bad MSN terminates with DDP untagged 1/2/3', (t) =>
  terminateFor(t, () => fpdu(ddpUntaggedSend(Buffer.from('p'), { msn: 5 })), [1, 2, 3]));

test('a bad MO terminates with DDP untagged 1/2/4', (t) =>
  terminateFor(t, () => fpdu(ddpUntaggedSend(Buffer.from('p'), { msn: 1, mo: 9 })), [1, 2, 4]));

test('an invalid QN terminates with DDP untagged 1/2/1', (t) =>
  terminateFor(t, () => fpdu(ddpUntaggedSend(Buffer.from('p'), { msn: 1, qn: 5 })), [1, 2, 1]));

test('a Send with no Receive posted terminates with DDP untagged 1/2/2', (t) =>
  terminateFor(t, () => fpdu(ddpUntaggedSend(Buffer.from('p'), { msn: 1 })), [1, 2, 2], 0));

test('FPDUs never exceed the configured MULPDU', async (t) => {
  const mulpdu = 200;
  const dev = await createSoftProvider({ mulpdu }).openDevice();
  const pd = dev.allocPd();
  const cq = new CqWatcher(dev.createCq(16));
  const events = new EventLog();
  const l = await dev.listen({
    host: '127.0.0.1',
    port: 0,
    onConnectRequest: (req) => {
      const c = req.createConnection({
        pd,
        sendCq: cq.cq,
        recvCq: cq.cq,
        cap: { maxSendWr: 4, maxRecvWr: 4, maxSendSge: 1, maxRecvSge: 1 },
        onEvent: events.handler,
      });
      c.accept();
      const mr = pd.registerMemory(Buffer.alloc(1000, 9), Access.LOCAL_WRITE);
      c.qp.postSend({
        wrId: 1,
        opcode: WrOpcode.SEND,
        flags: SendFlags.SIGNALED,
        sgList: [{ mr, offset: 0, length: 1000 }],
      });
    },
  });
  const r = await raw(l.port);
  r.sock.write(mpaRequest({ revision: 1 }));
  await r.waitFor(20);
  // Unblock the responder with a zero-length Write (tagged, STag 0) as our first FPDU.
  const w = Buffer.alloc(14);
  w[0] = 0xc1;
  w[1] = 0x40;
  r.sock.write(fpdu(w));
  await new Promise((res) => setTimeout(res, 200));
  const stream = r.got().subarray(20);
  let off = 0;
  let payload = 0;
  let n = 0;
  while (off + 2 <= stream.length) {
    const len = stream.readUInt16BE(off);
    t.true(len <= mulpdu, `ULPDU ${len} <= ${mulpdu}`);
    payload += len - 18;
    const total = ((2 + len + 3) & ~3) + 4;
    t.is(stream.readUInt32LE(off + total - 4), oracleCrc(stream.subarray(off, off + total - 4)));
    off += total;
    n++;
  }
  t.is(payload, 1000);
  t.true(n >= 6);
  r.sock.destroy();
  await l.close();
});
