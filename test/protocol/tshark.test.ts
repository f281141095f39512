/**
 * Cross-check of the Version 1 codec with Wireshark: Version 1 headers encoded by us ride in iWARP Sends
 * (MPA FPDUs with CRC32c, after an MPA request/reply exchange — Wireshark finds MPA only then) inside a
 * synthetic TCP capture, and tshark must read the same xid, version, credit, proc, error fields and chunk
 * segments (handles, lengths, offsets, positions) as our decoder.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  decodeHeader,
  encodePrivateData,
  type RpcRdmaErrorBody,
  type V1Header,
} from '../../rdma-backend/protocol/index.js';
import { XdrWriter } from '../../rpc/xdr.js';
import { crc32c, mpaReply, mpaRequest, SendFramer } from '../helpers/iwarp-frames.js';
import { PcapWriter } from '../helpers/pcap.js';
import { requireExecutable, testWithPeers } from '../helpers/peers.js';
import { encodeToBuffer } from './hex.js';

const FIELDS = [
  'frame.number',
  'rpcordma.xid',
  'rpcordma.version',
  'rpcordma.flow_control',
  'rpcordma.msg_type',
  'rpcordma.reads_count',
  'rpcordma.writes_count',
  'rpcordma.reply_count',
  'rpcordma.position',
  'rpcordma.segment_count',
  'rpcordma.rdma_handle',
  'rpcordma.rdma_length',
  'rpcordma.rdma_offset',
  'rpcordma.errcode',
  'rpcordma.vers_low',
  'rpcordma.vers_high',
] as const;

/** A minimal RPC Call header (AUTH_NONE) so tshark accepts an RDMA_MSG: its xid must match rdma_xid. */
function rpcCall(xid: number, proc: number): Buffer {
  const w = new XdrWriter(64);
  w.u32(xid).u32(0).u32(2).u32(100003).u32(3).u32(proc).u32(0).u32(0).u32(0).u32(0);
  return w.toBuffer();
}

function rpcReply(xid: number): Buffer {
  const w = new XdrWriter(64);
  w.u32(xid).u32(1).u32(0).u32(0).u32(0).u32(0);
  return w.toBuffer();
}

const header = encodeToBuffer;

const seg = (handle: number, length: number, offset: bigint) => ({ handle, length, offset });

/** The messages of the capture, in order, with their direction. */
const MESSAGES: { from: 'client' | 'server'; bytes: Buffer }[] = [
  {
    from: 'client',
    bytes: header(
      {
        version: 1,
        proc: 0,
        xid: 0x1001,
        credit: 128,
        chunks: {
          reads: [
            { ...seg(0x11223344, 8192, 0xffeeddccbbaa9988n), position: 40 },
            { ...seg(0x11223345, 100, (1n << 53n) + 1n), position: 40 },
          ],
          writes: [[seg(0xa001, 4096, 0x7f0000001000n), seg(0xa002, 512, 0x20n)]],
          reply: [seg(0xb001, 1024, 0x1234_5678_9abc_def0n)],
        },
      },
      rpcCall(0x1001, 0),
    ),
  },
  {
    from: 'server',
    bytes: header({
      version: 1,
      proc: 1,
      xid: 0x1001,
      credit: 64,
      chunks: { reply: [seg(0xb001, 300, 0x1234_5678_9abc_def0n)] },
    }),
  },
  {
    from: 'client',
    bytes: header({
      version: 1,
      proc: 1,
      xid: 0x1002,
      credit: 128,
      chunks: { reads: [{ ...seg(0xc001, 9000, 1n << 62n), position: 0 }] },
    }),
  },
  {
    from: 'server',
    bytes: header({
      version: 1,
      proc: 4,
      xid: 0x1002,
      credit: 64,
      error: { code: 1, versLow: 1, versHigh: 1 },
    }),
  },
  { from: 'server', bytes: header({ version: 1, proc: 4, xid: 0x1003, credit: 64, error: { code: 2 } }) },
  { from: 'client', bytes: header({ version: 1, proc: 3, xid: 0x1004, credit: 1 }) },
  {
    from: 'client',
    bytes: header({ version: 1, proc: 0, xid: 0x1005, credit: 128, chunks: {} }, rpcCall(0x1005, 0)),
  },
  {
    from: 'server',
    bytes: header({ version: 1, proc: 0, xid: 0x1005, credit: 32, chunks: {} }, rpcReply(0x1005)),
  },
];

function buildCapture(): Buffer {
  const cap = new PcapWriter();
  const s = cap.tcpStream({ ip: '127.0.0.1', port: 41_234 }, { ip: '127.0.0.1', port: 20_049 });
  const pd = encodePrivateData({ sendWithInvalidateOk: true, inlineSendSize: 4096, inlineRecvSize: 4096 });
  s.send('client', mpaRequest({ privateData: pd }));
  s.send('server', mpaReply({ privateData: pd }));
  const framers = { client: new SendFramer(), server: new SendFramer() };
  for (const m of MESSAGES) s.send(m.from, framers[m.from].send(m.bytes));
  s.close();
  return cap.toBuffer();
}

type Row = Record<(typeof FIELDS)[number], string[]>;

function runTshark(file: string): Row[] {
  const tshark = requireExecutable('tshark');
  const args = [
    '-r',
    file,
    '-Y',
    'rpcordma',
    '-T',
    'fields',
    '-E',
    'separator=\t',
    '-E',
    'occurrence=a',
    '-E',
    'aggregator=,',
  ];
  for (const f of FIELDS) args.push('-e', f);
  const out = execFileSync(tshark, args, {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: 60_000,
  });
  return out
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((line) => {
      const cols = line.split('\t');
      const row = {} as Row;
      FIELDS.forEach((f, i) => {
        row[f] = cols[i] ? cols[i].split(',') : [];
      });
      return row;
    });
}

const num = (s: string): number => Number(s);
const big = (s: string): bigint => BigInt(s);

interface Expected {
  xid: number;
  credit: number;
  proc: number;
  segments: { handle: number; length: number; offset: bigint }[];
  positions: number[];
  segmentCounts?: number[];
  error?: RpcRdmaErrorBody;
}

/** What tshark should show for one of our headers, derived from OUR decoder's view of the bytes. */
function expected(h: V1Header): Expected {
  const base = { xid: h.xid, credit: h.credit, proc: h.proc };
  if (h.proc !== 0 && h.proc !== 1) {
    return { ...base, segments: [], positions: [], error: h.proc === 4 ? h.error : undefined };
  }
  const c = h.chunks;
  const segments = [...c.reads, ...c.writes.flat(), ...(c.reply ?? [])].map(({ handle, length, offset }) => ({
    handle,
    length,
    offset,
  }));
  return {
    ...base,
    segments,
    positions: c.reads.map((r) => r.position),
    segmentCounts: [...c.writes.map((w) => w.length), ...(c.reply ? [c.reply.length] : [])],
  };
}

testWithPeers('tshark')('tshark decodes our Version 1 headers in iWARP Sends exactly as we do', (t) => {
  t.is(crc32c(Buffer.from('123456789')), 0xe3069283, 'the oracle framer computes CRC32c right');
  const dir = mkdtempSync(join(tmpdir(), 'rpcrdma-tshark-'));
  try {
    const file = join(dir, 'v1.pcap');
    writeFileSync(file, buildCapture());
    const tshark = requireExecutable('tshark');
    // The framing itself must be clean: no malformed packet, no bad checksum or CRC32c (expert warnings).
    const problems = execFileSync(
      tshark,
      ['-r', file, '-Y', '_ws.malformed || _ws.expert.severity >= "warning"'],
      {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
        timeout: 60_000,
      },
    );
    t.is(problems.trim(), '', 'tshark reports no malformed frame and no warning');
    // tshark 4.0 shows the MPA CRC verdict only in the packet details.
    const details = execFileSync(tshark, ['-r', file, '-V'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 60_000,
      maxBuffer: 64 << 20,
    });
    t.is(details.match(/\(Good CRC32\)/g)?.length, MESSAGES.length, 'every FPDU CRC32c is good');
    t.false(details.includes('Bad CRC32'));
    const rows = runTshark(file);
    t.is(rows.length, MESSAGES.length, 'tshark found every RPC-over-RDMA message');
    for (let i = 0; i < MESSAGES.length; i++) {
      const ours = decodeHeader(MESSAGES[i].bytes) as V1Header;
      const want = expected(ours);
      const r = rows[i];
      const label = `message ${i} (frame ${r['frame.number'][0]})`;
      t.is(num(r['rpcordma.xid'][0]), want.xid, `${label} xid`);
      t.is(num(r['rpcordma.version'][0]), 1, `${label} version`);
      t.is(num(r['rpcordma.flow_control'][0]), want.credit, `${label} credit`);
      t.is(num(r['rpcordma.msg_type'][0]), want.proc, `${label} proc`);
      const theirs = r['rpcordma.rdma_handle'].map((h, k) => ({
        handle: num(h),
        length: num(r['rpcordma.rdma_length'][k]),
        offset: big(r['rpcordma.rdma_offset'][k]),
      }));
      t.deepEqual(theirs, want.segments, `${label} segments`);
      t.deepEqual(r['rpcordma.position'].map(num), want.positions, `${label} positions`);
      if (want.segmentCounts)
        t.deepEqual(r['rpcordma.segment_count'].map(num), want.segmentCounts, `${label} counts`);
      if (want.error) {
        t.is(num(r['rpcordma.errcode'][0]), want.error.code, `${label} errcode`);
        if (want.error.code === 1) {
          t.is(num(r['rpcordma.vers_low'][0]), want.error.versLow ?? -1, `${label} vers_low`);
          t.is(num(r['rpcordma.vers_high'][0]), want.error.versHigh ?? -1, `${label} vers_high`);
        }
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
