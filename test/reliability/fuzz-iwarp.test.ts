/**
 * Hostile MPA/DDP/RDMAP frames to the soft provider over raw sockets, built with the independent framer of
 * test/helpers/iwarp-frames.ts. Each case: a real MPA exchange, a random number of valid Sends (so the MSN
 * and the receive queue have moved), then one hostile frame — bad CRC, bad MSN, bad MO, bad QN, a Send
 * larger than the Receive posted, an FPDU shorter than its own header, bad DDP/RDMAP versions, tagged
 * opcodes that do not exist, Writes and Read Requests with STags never exposed, or random bytes.
 *
 * Invariants: the provider answers with exactly one Terminate carrying the layer/type/code RFC 5040/5041/
 * 5044 prescribe for that frame (any known cause for random bytes) and closes; its DISCONNECTED event
 * reports the same cause; the valid Sends before it completed with their bytes; no exception escapes; the
 * listener keeps accepting; memory stays bounded.
 */
import net from 'node:net';
import test from 'ava';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import {
  Access,
  type CmEvent,
  CmEventType,
  type Connection,
  createWorkCompletions,
  WcStatus,
} from '../../rdma-backend/verbs/index.js';
import { ddpUntaggedSend, fpdu, mpaRequest, crc32c as oracleCrc } from '../helpers/iwarp-frames.js';
import { campaignSeed, caseCount, guardProcess, heapAfterGc, prng, Rand, sleep } from './fuzz-kit.js';

const RECV_SIZE = 256;
const RECVS = 32;
type Cause = [layer: number, type: number, code: number];

/** Every cause the soft provider may send (terminate.ts), for the random-bytes cases. */
const KNOWN: Cause[] = [
  [0, 0, 0],
  [0, 1, 0],
  [0, 1, 1],
  [0, 1, 2],
  [0, 1, 3],
  [0, 1, 4],
  [0, 2, 5],
  [0, 2, 6],
  [0, 2, 7],
  [0, 2, 9],
  [1, 1, 0],
  [1, 1, 1],
  [1, 1, 2],
  [1, 1, 3],
  [1, 1, 4],
  [1, 2, 1],
  [1, 2, 2],
  [1, 2, 3],
  [1, 2, 4],
  [1, 2, 5],
  [1, 2, 6],
  [2, 0, 2],
  [2, 0, 3],
  [2, 0, 4],
];

interface Hostile {
  name: string;
  /** The bytes, given the next expected MSN of the Send queue. */
  frame(r: Rand, msn: number): Buffer;
  /** The cause expected, or undefined for "any known cause". */
  cause?: Cause;
}

/** A tagged DDP segment (RFC 5041 §4.1): control, RDMAP control, STag, 64-bit TO, payload. */
function tagged(opcode: number, stag: number, to: bigint, payload: Buffer): Buffer {
  const b = Buffer.alloc(14 + payload.length);
  b[0] = 0xc1; // T, L, DV=1
  b[1] = 0x40 | opcode;
  b.writeUInt32BE(stag >>> 0, 2);
  b.writeBigUInt64BE(to, 6);
  payload.copy(b, 14);
  return b;
}

/** An RDMA Read Request (RFC 5040 §4.4) on QN 1 for `size` bytes of (srcStag, srcTo). */
function readRequest(msn: number, srcStag: number, srcTo: bigint, size: number): Buffer {
  const body = Buffer.alloc(28);
  body.writeUInt32BE(0x1234, 0); // sink STag
  body.writeBigUInt64BE(0n, 4);
  body.writeUInt32BE(size, 12);
  body.writeUInt32BE(srcStag >>> 0, 16);
  body.writeBigUInt64BE(srcTo, 20);
  return ddpUntaggedSend(body, { msn, qn: 1, opcode: 1 });
}

/** An STag whose index (high 24 bits) is far above any region this test registers. */
function unexposedStag(r: Rand): number {
  return (((0x1000 + r.int(0xfe000)) << 8) | r.int(256)) >>> 0;
}

const HOSTILE: Hostile[] = [
  {
    name: 'bad CRC',
    cause: [2, 0, 2],
    frame: (r, msn) => {
      const f = fpdu(ddpUntaggedSend(r.bytes(1 + r.int(64)), { msn }));
      // Anywhere but the ULPDU length (a flip there moves the framing: that is the random-bytes case).
      f[2 + r.int(f.length - 2)] ^= 1 << r.int(8);
      return f;
    },
  },
  {
    name: 'MSN ahead',
    cause: [1, 2, 3],
    frame: (r, msn) => fpdu(ddpUntaggedSend(Buffer.from('x'), { msn: msn + 1 + r.int(1000) })),
  },
  {
    name: 'MSN behind',
    cause: [1, 2, 3],
    frame: (_r, msn) => fpdu(ddpUntaggedSend(Buffer.from('x'), { msn: msn - 1 })),
  },
  {
    name: 'bad MO',
    cause: [1, 2, 4],
    frame: (r, msn) => fpdu(ddpUntaggedSend(Buffer.from('x'), { msn, mo: 1 + r.int(4096) })),
  },
  {
    name: 'bad QN',
    cause: [1, 2, 1],
    frame: (r, msn) => fpdu(ddpUntaggedSend(Buffer.from('x'), { msn, qn: 3 + r.int(100) })),
  },
  {
    name: 'Send larger than the Receive (oversize)',
    cause: [1, 2, 5],
    frame: (r, msn) => fpdu(ddpUntaggedSend(r.bytes(RECV_SIZE + 1 + r.int(60_000)), { msn })),
  },
  {
    name: 'FPDU shorter than its DDP header',
    cause: [2, 0, 3],
    frame: (r, msn) => fpdu(ddpUntaggedSend(Buffer.alloc(0), { msn }).subarray(0, 2 + r.int(14))),
  },
  {
    name: 'bad DDP version',
    cause: [1, 2, 6],
    frame: (_r, msn) => {
      const d = ddpUntaggedSend(Buffer.from('x'), { msn });
      d[0] = (d[0] & ~3) | 2;
      return fpdu(d);
    },
  },
  {
    name: 'bad RDMAP version',
    cause: [0, 2, 5],
    frame: (_r, msn) => {
      const d = ddpUntaggedSend(Buffer.from('x'), { msn });
      d[1] = (d[1] & 0x3f) | 0x80;
      return fpdu(d);
    },
  },
  {
    name: 'tagged Send (no such tagged opcode)',
    cause: [0, 2, 6],
    frame: () => fpdu(tagged(3, 1, 0n, Buffer.from('x'))),
  },
  {
    name: 'Write to an STag never exposed',
    cause: [1, 1, 0],
    frame: (r) => fpdu(tagged(0, unexposedStag(r), 0n, r.bytes(1 + r.int(64)))),
  },
  {
    name: 'Read Request of an STag never exposed',
    cause: [0, 1, 0],
    frame: (r) => fpdu(readRequest(1, unexposedStag(r), 0n, 1 + r.int(4096))),
  },
  {
    name: 'unknown untagged opcode',
    cause: [0, 2, 6],
    frame: (_r, msn) => fpdu(ddpUntaggedSend(Buffer.from('x'), { msn, opcode: 8 + (msn % 7) })),
  },
  {
    name: 'random bytes',
    // Followed by enough zeros to complete any ULPDU length they announce: the provider must then decide.
    frame: (r) => Buffer.concat([r.bytes(1 + r.int(512)), Buffer.alloc(66_000)]),
  },
];

interface Server {
  port: number;
  events: CmEvent[];
  conns: Set<Connection>;
  received: { wrId: number; status: number; byteLen: number }[];
  close(): Promise<void>;
}

async function softServer(): Promise<Server> {
  const dev = await createSoftProvider().openDevice();
  const pd = dev.allocPd();
  const cq = dev.createCq(4096);
  const wcs = createWorkCompletions(64);
  const mr = pd.registerMemory(Buffer.alloc(RECVS * RECV_SIZE), Access.LOCAL_WRITE);
  const events: CmEvent[] = [];
  const conns = new Set<Connection>();
  const received: Server['received'] = [];
  cq.setNotifyHandler(() => {
    cq.requestNotify();
    for (let n = cq.poll(wcs); n > 0; n = cq.poll(wcs)) {
      for (let i = 0; i < n; i++)
        received.push({ wrId: wcs[i].wrId, status: wcs[i].status, byteLen: wcs[i].byteLen });
    }
  });
  cq.requestNotify();
  const listener = await dev.listen({
    host: '127.0.0.1',
    port: 0,
    onConnectRequest: (req) => {
      const conn: Connection = req.createConnection({
        pd,
        sendCq: cq,
        recvCq: cq,
        cap: { maxSendWr: 8, maxRecvWr: RECVS, maxSendSge: 1, maxRecvSge: 1 },
        onEvent: (e) => {
          events.push(e);
          if (e.type === CmEventType.DISCONNECTED) {
            conns.delete(conn);
            conn.destroy();
          }
        },
      });
      conns.add(conn);
      for (let i = 0; i < RECVS; i++) {
        conn.qp.postRecv({ wrId: i, sgList: [{ mr, offset: i * RECV_SIZE, length: RECV_SIZE }] });
      }
      conn.accept({ privateData: Buffer.from('ok') });
    },
  });
  return { port: listener.port, events, conns, received, close: () => listener.close() };
}

/** Connects, completes MPA, runs `then`, and resolves with everything the provider sent and the close. */
function rawCase(port: number, then: (s: net.Socket) => void): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    let have = 0;
    let started = false;
    const timer = setTimeout(() => reject(new Error('no close within 5 s')), 5000);
    s.on('connect', () => s.write(mpaRequest({ revision: 1 })));
    s.on('data', (d: Buffer) => {
      chunks.push(d);
      have += d.length;
      if (!started && have >= 22) {
        started = true;
        then(s);
      }
    });
    s.on('error', () => {});
    s.on('close', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks));
    });
  });
}

/** The Terminate causes in the FPDUs after the 22-byte MPA reply; throws on a malformed FPDU. */
function terminates(stream: Buffer): Cause[] {
  const out: Cause[] = [];
  let off = 22;
  while (off + 2 <= stream.length) {
    const len = stream.readUInt16BE(off);
    const total = ((2 + len + 3) & ~3) + 4;
    if (off + total > stream.length) throw new Error(`truncated FPDU at ${off}`);
    const f = stream.subarray(off, off + total);
    if (f.readUInt32LE(total - 4) !== oracleCrc(f.subarray(0, total - 4)))
      throw new Error('bad CRC from provider');
    if ((f[3] & 0x0f) === 7) {
      const ctrl = f.readUInt32BE(20);
      out.push([ctrl >>> 28, (ctrl >>> 24) & 0xf, (ctrl >>> 16) & 0xff]);
    }
    off += total;
  }
  return out;
}

test('soft provider: hostile MPA/DDP/RDMAP frames get the prescribed Terminate, nothing escapes', async (t) => {
  t.timeout(120_000);
  const guard = guardProcess(t);
  const seed = campaignSeed(t);
  const r = new Rand(prng(seed));
  const server = await softServer();
  t.teardown(() => server.close());
  const heapBefore = heapAfterGc();
  const CASES = caseCount(1500);
  const byName: Record<string, number> = {};
  let validSends = 0;
  const failures: string[] = [];
  const isKnown = (c: Cause) => KNOWN.some((k) => k[0] === c[0] && k[1] === c[1] && k[2] === c[2]);
  let next = 0;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (next < CASES) {
        next++;
        const h = r.pick(HOSTILE);
        const before = 1 + r.int(RECVS - 2);
        const recvBefore = server.received.length;
        const bytes: Buffer[] = [];
        for (let m = 1; m <= before; m++)
          bytes.push(fpdu(ddpUntaggedSend(r.bytes(1 + r.int(RECV_SIZE - 1)), { msn: m })));
        bytes.push(h.frame(r, before + 1));
        const all = Buffer.concat(bytes);
        const stream = await rawCase(server.port, (s) => {
          // Split at a random point: the hostile frame must be found however the bytes arrive.
          const cut = r.int(all.length + 1);
          s.write(all.subarray(0, cut));
          s.write(all.subarray(cut));
        });
        byName[h.name] = (byName[h.name] ?? 0) + 1;
        validSends += before;
        let causes: Cause[];
        try {
          causes = terminates(stream);
        } catch (err) {
          failures.push(`${h.name}: ${(err as Error).message}`);
          continue;
        }
        if (causes.length !== 1) {
          failures.push(`${h.name}: ${causes.length} Terminates`);
          continue;
        }
        const got = causes[0];
        const ok = h.cause ? got.join('/') === h.cause.join('/') : isKnown(got);
        if (!ok)
          failures.push(
            `${h.name}: Terminate ${got.join('/')}, expected ${h.cause?.join('/') ?? 'a known cause'}`,
          );
        if (server.received.length < recvBefore) failures.push('completions went backwards');
      }
    }),
  );
  const deadline = Date.now() + 5000;
  while (server.conns.size > 0 && Date.now() < deadline) await sleep(10);
  t.deepEqual(failures.slice(0, 20), [], `${failures.length} cases without the prescribed Terminate`);
  t.is(server.conns.size, 0, 'every connection was torn down');
  const disconnects = server.events.filter((e) => e.type === CmEventType.DISCONNECTED);
  t.is(disconnects.length, CASES, 'one DISCONNECTED per case');
  t.true(
    disconnects.every(
      (e) => e.terminate?.local === true && isKnown([e.terminate.layer, e.terminate.type, e.terminate.code]),
    ),
    'every DISCONNECTED names the local Terminate cause',
  );
  const ok = server.received.filter((w) => w.status === WcStatus.SUCCESS).length;
  t.true(ok >= validSends * 0.99, `the valid Sends before the hostile frame completed (${ok}/${validSends})`);
  t.true(
    server.received.every(
      (w) =>
        w.status === WcStatus.SUCCESS ||
        w.status === WcStatus.WR_FLUSH_ERR ||
        w.status === WcStatus.LOC_LEN_ERR ||
        w.status === WcStatus.LOC_PROT_ERR,
    ),
    'Receives complete with success, flush, or the local error of the frame',
  );
  t.log(`${CASES} connections, ${validSends} valid Sends, hostile frames ${JSON.stringify(byName)}`);
  const growth = heapAfterGc() - heapBefore;
  t.log(`heap growth after GC: ${(growth / 1048576).toFixed(1)} MiB`);
  t.true(growth < 32 * 1048576, `heap growth ${growth} bytes stays under 32 MiB`);
  guard.check();
});
