/**
 * Fuzzing the decoder: truncated and mutated headers never raise anything but RpcRdmaDecodeError, and
 * the error maps to the code the receiver must answer with (RFC 8166 §5, seed 004 §5.3.3). Bounded:
 * a fixed seed and a fixed number of cases, well under a second each.
 */
import test from 'ava';
import fc from 'fast-check';
import {
  DEFAULT_DECODE_LIMITS,
  decodeHeader,
  RpcRdmaDecodeError,
  type RpcRdmaHeader,
  type RpcRdmaHeaderInput,
} from '../../rdma-backend/protocol/index.js';
import { encodeToBuffer } from './hex.js';

const enc = encodeToBuffer;

const seg = (handle: number, offset: bigint) => ({ handle, length: 4096, offset });

/** One valid message of every header type in both versions. */
const CORPUS: Buffer[] = [
  enc(
    {
      version: 1,
      proc: 0,
      xid: 1,
      credit: 128,
      chunks: {
        reads: [{ ...seg(1, 1n << 60n), position: 116 }],
        writes: [[seg(2, 5n)]],
        reply: [seg(3, 7n)],
      },
    },
    Buffer.from('00000001', 'hex'),
  ),
  enc({ version: 1, proc: 1, xid: 2, credit: 1, chunks: { reads: [{ ...seg(4, 0n), position: 0 }] } }),
  enc({ version: 1, proc: 3, xid: 3, credit: 1 }),
  enc({ version: 1, proc: 4, xid: 4, credit: 1, error: { code: 1, versLow: 1, versHigh: 1 } }),
  enc({ version: 1, proc: 4, xid: 5, credit: 1, error: { code: 2 } }),
  enc(
    { version: 2, htype: 0, xid: 6, credit: 32, invHandle: 9, chunks: { writes: [[seg(9, 1n << 62n)]] } },
    Buffer.from('00000006', 'hex'),
  ),
  enc({
    version: 2,
    htype: 1,
    xid: 7,
    credit: 32,
    flags: 1,
    chunks: {
      reads: [
        { ...seg(1, 3n), position: 0 },
        { ...seg(2, 4n), position: 0 },
      ],
      reply: [seg(5, 6n), seg(6, 7n)],
    },
  }),
  enc({ version: 2, htype: 3, xid: 8, credit: 0 }),
  enc({ version: 2, htype: 4, xid: 9, credit: 1, error: { code: 1, versLow: 1, versHigh: 2 } }),
  enc({ version: 2, htype: 4, xid: 9, credit: 1, error: { code: 7, chunkIndex: 1, lengthNeeded: 99 } }),
  enc({ version: 2, htype: 4, xid: 9, credit: 1, error: { code: 6, maxSegments: 8 } }),
  enc({
    version: 2,
    htype: 5,
    xid: 10,
    credit: 1,
    props: [
      { id: 1, value: 8192 },
      { id: 2, value: 2 },
      { id: 3, value: true },
      { id: 77, data: Buffer.from('xyz') },
    ],
  }),
  enc({ version: 2, htype: 6, xid: 11, credit: 1, want: [{ id: 1, value: 65536 }, { id: 4 }] }),
  enc({ version: 2, htype: 7, xid: 11, credit: 1, flags: 1, done: [1], rejected: [], pending: [2, 0] }),
  enc({ version: 2, htype: 8, xid: 12, credit: 1, now: { id: 4, value: true }, pendingCleared: false }),
];

/** Decodes and classifies: returns the header, or checks the error's mapping and returns undefined. */
function decodeChecked(bytes: Buffer): RpcRdmaHeader | undefined {
  try {
    const h = decodeHeader(bytes);
    if (h.payloadOffset > bytes.length)
      throw new Error(`payloadOffset ${h.payloadOffset} beyond ${bytes.length}`);
    return h;
  } catch (e) {
    if (!(e instanceof RpcRdmaDecodeError)) {
      throw new Error(
        `decoder threw ${(e as Error)?.name}: ${(e as Error)?.message} on ${bytes.toString('hex')}`,
      );
    }
    checkMapping(e, bytes);
    return undefined;
  }
}

function checkMapping(e: RpcRdmaDecodeError, bytes: Buffer): void {
  const fail = (why: string) => {
    throw new Error(`${why}: ${e.code} ${JSON.stringify(e.reply)} on ${bytes.toString('hex')}`);
  };
  if (bytes.length < 16) {
    if (e.code !== 'ERR_RPCRDMA_SHORT' || e.xid !== undefined) fail('short message');
    return;
  }
  if (e.xid !== bytes.readUInt32BE(0)) fail('xid not carried');
  const vers = bytes.readUInt32BE(4);
  if (vers !== 1 && vers !== 2) {
    if (
      e.code !== 'ERR_RPCRDMA_VERS' ||
      e.reply.code !== 1 ||
      e.reply.versLow !== 1 ||
      e.reply.versHigh !== 2
    ) {
      fail('unsupported version');
    }
    return;
  }
  if (vers === 1) {
    // Version 1 can only answer ERR_CHUNK once the version is accepted.
    if (e.reply.code !== 2 || Object.keys(e.reply).length !== 1) fail('Version 1 mapping');
    return;
  }
  const L = DEFAULT_DECODE_LIMITS;
  switch (e.reply.code) {
    case 2:
      if (e.code !== 'ERR_RPCRDMA_BAD_XDR') fail('BAD_XDR code');
      break;
    case 3:
      if ([0, 1, 3, 4, 5, 6, 7, 8].includes(bytes.readUInt32BE(12))) fail('INVAL_HTYPE on a known type');
      break;
    case 4:
      if (e.reply.maxChunks !== L.maxReadChunks) fail('READ_CHUNKS limit');
      break;
    case 5:
      if (e.reply.maxChunks !== L.maxWriteChunks) fail('WRITE_CHUNKS limit');
      break;
    case 6:
      if (e.reply.maxSegments !== L.maxSegmentsPerChunk) fail('SEGMENTS limit');
      break;
    default:
      fail('unexpected Version 2 code');
  }
}

test('every truncation of every valid header is refused with BAD_XDR / ERR_CHUNK (or SHORT)', (t) => {
  let cases = 0;
  for (const full of CORPUS) {
    const complete = decodeHeader(full);
    // A MSG keeps its 4-byte RPC stand-in: cutting into it is a truncation too.
    for (let len = 0; len < full.length; len++) {
      const cut = full.subarray(0, len);
      const h = decodeChecked(cut);
      cases++;
      if (h === undefined) continue;
      // The only legal successes: the Version 1 ERR_VERS layout recognised at exactly 28 bytes, and a
      // Version 1 RDMA_MSG cut inside its payload (RFC 8166 does not require a payload word).
      const legacy = h.version === 2 && h.htype === 4 && h.legacyLayout === true;
      const bareV1Msg = h.version === 1 && h.proc === 0 && len >= complete.payloadOffset;
      t.true(legacy || bareV1Msg, `truncated to ${len}: ${full.toString('hex')}`);
    }
    t.truthy(complete);
  }
  t.true(cases > 500);
});

test('mutated headers: only the typed error, always with the right code (20k cases)', (t) => {
  const interesting = [0, 1, 2, 3, 4, 5, 8, 9, 0x10, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff];
  const mutation = fc.record({
    base: fc.nat({ max: CORPUS.length - 1 }),
    edits: fc.array(
      fc.oneof(
        fc.record({
          kind: fc.constant('byte' as const),
          at: fc.nat(),
          value: fc.integer({ min: 0, max: 255 }),
        }),
        fc.record({
          kind: fc.constant('word' as const),
          at: fc.nat(),
          value: fc.constantFrom(...interesting),
        }),
        fc.record({ kind: fc.constant('cut' as const), at: fc.nat(), value: fc.constant(0) }),
      ),
      { minLength: 1, maxLength: 4 },
    ),
  });
  let decoded = 0;
  let refused = 0;
  fc.assert(
    fc.property(mutation, ({ base, edits }) => {
      let bytes = Buffer.from(CORPUS[base]);
      for (const e of edits) {
        if (bytes.length === 0) break;
        if (e.kind === 'byte') bytes[e.at % bytes.length] = e.value;
        else if (e.kind === 'cut') bytes = bytes.subarray(0, e.at % bytes.length);
        else if (bytes.length >= 4) bytes.writeUInt32BE(e.value, (e.at % (bytes.length >> 2)) * 4);
      }
      const h = decodeChecked(bytes);
      if (h === undefined) {
        refused++;
        return;
      }
      decoded++;
      // What decodes must re-encode to the same header bytes (the chunk-carrying types are canonical).
      const chunked =
        (h.version === 1 && h.proc <= 1) || (h.version === 2 && (h.htype === 0 || h.htype === 1));
      if (chunked && !(h.version === 2 && (h.flags & ~1) !== 0)) {
        const again = enc(h as RpcRdmaHeaderInput);
        if (!again.equals(bytes.subarray(0, h.payloadOffset)))
          throw new Error(`not canonical: ${bytes.toString('hex')}`);
      }
    }),
    { numRuns: 20_000, seed: 0x5eed },
  );
  t.true(decoded > 100, `decoded ${decoded}`);
  t.true(refused > 1000, `refused ${refused}`);
});

test('random bytes: only the typed error (5k cases)', (t) => {
  fc.assert(
    fc.property(
      fc.uint8Array({ maxLength: 96 }),
      fc.constantFrom(0, 1, 2, 3),
      fc.nat({ max: 10 }),
      (raw, vers, htype) => {
        const bytes = Buffer.from(raw);
        // Bias towards accepted versions and known types, or nothing gets past rdma_vers.
        if (bytes.length >= 16) {
          bytes.writeUInt32BE(vers, 4);
          bytes.writeUInt32BE(htype, 12);
        }
        decodeChecked(bytes);
      },
    ),
    { numRuns: 5_000, seed: 42 },
  );
  t.pass();
});
