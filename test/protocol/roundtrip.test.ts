/**
 * Property tests: random chunk lists (0..N segments, random positions, 64-bit offsets including values
 * above 2^53) survive encode → decode in both versions, the size helpers match the encoder exactly, and
 * the worst-case size bounds every arrangement of the same number of segments.
 */
import test from 'ava';
import fc from 'fast-check';
import {
  type ChunkLists,
  chunkHeaderBound,
  chunkHeaderSize,
  decodeHeader,
  encodeHeader,
  encodeV1ChunkHeader,
  encodeV2ChunkHeader,
  headerSize,
  maxChunkHeaderSize,
  type RdmaSegment,
  type ReadSegment,
  type RpcRdmaHeaderInput,
} from '../../rdma-backend/protocol/index.js';
import { XdrError, XdrWriter } from '../../rpc/xdr.js';

const u32 = fc.integer({ min: 0, max: 0xffff_ffff });
/** Offsets biased towards the interesting ranges: small, around 2^53, and the top of u64. */
const offset = fc.oneof(
  fc.bigInt({ min: 0n, max: 0xffff_ffffn }),
  fc.bigInt({ min: (1n << 53n) - 2n, max: (1n << 53n) + 2n }),
  fc.bigInt({ min: 1n << 53n, max: (1n << 64n) - 1n }),
);
const segment: fc.Arbitrary<RdmaSegment> = fc.record({ handle: u32, length: u32, offset });
const readSegment: fc.Arbitrary<ReadSegment> = fc.record({ handle: u32, length: u32, offset, position: u32 });

/** Read chunks are runs of entries sharing a position: generate runs so the list is realistic. */
const readList = fc
  .array(fc.tuple(u32, fc.array(segment, { minLength: 1, maxLength: 4 })), { maxLength: 4 })
  .map((chunks) => chunks.flatMap(([position, segs]) => segs.map((s) => ({ ...s, position }))));

const chunkLists: fc.Arbitrary<ChunkLists> = fc.record({
  reads: fc.oneof(readList, fc.array(readSegment, { maxLength: 6 })),
  writes: fc.array(fc.array(segment, { maxLength: 5 }), { maxLength: 4 }),
  reply: fc.option(fc.array(segment, { maxLength: 5 }), { nil: null }),
});

test('Version 2 MSG/NOMSG chunk lists round-trip, with exact sizes', (t) => {
  fc.assert(
    fc.property(
      chunkLists,
      u32,
      u32,
      u32,
      fc.constantFrom(0 as const, 1 as const),
      (chunks, xid, credit, inv, htype) => {
        const w = new XdrWriter(64);
        encodeV2ChunkHeader(w, htype, xid, credit, htype, inv, chunks);
        const headerLen = w.length;
        w.u32(xid, 'rpc xid');
        const bytes = w.toBuffer();
        const h = decodeHeader(bytes);
        t.deepEqual(h, {
          version: 2,
          htype,
          xid,
          credit,
          flags: htype,
          invHandle: inv,
          chunks,
          payloadOffset: headerLen,
        });
        t.is(chunkHeaderSize(2, chunks), headerLen);
        t.is(headerSize(h as RpcRdmaHeaderInput), headerLen);
      },
    ),
    { numRuns: 300 },
  );
});

test('Version 1 MSG/NOMSG chunk lists round-trip, with exact sizes', (t) => {
  fc.assert(
    fc.property(
      chunkLists,
      u32,
      u32,
      fc.constantFrom(0 as const, 1 as const),
      (chunks, xid, credit, proc) => {
        const w = new XdrWriter(64);
        encodeV1ChunkHeader(w, proc, xid, credit, chunks);
        const bytes = w.toBuffer();
        t.deepEqual(decodeHeader(bytes), {
          version: 1,
          proc,
          xid,
          credit,
          chunks,
          payloadOffset: bytes.length,
        });
        t.is(chunkHeaderSize(1, chunks), bytes.length);
      },
    ),
    { numRuns: 300 },
  );
});

test('the worst-case size bounds every arrangement of N read / N write segments', (t) => {
  fc.assert(
    fc.property(chunkLists, fc.constantFrom(1 as const, 2 as const), (chunks, version) => {
      const writeSegments = chunks.writes.reduce((n, c) => n + c.length, 0);
      const budget = {
        readSegments: chunks.reads.length,
        writeSegments,
        replySegments: chunks.reply?.length,
      };
      // Empty Write chunks need the chunk count in the budget.
      const writeChunks = Math.max(writeSegments, chunks.writes.length);
      t.true(chunkHeaderSize(version, chunks) <= maxChunkHeaderSize(version, { ...budget, writeChunks }));
      const worst = maxChunkHeaderSize(version, budget);
      // And the bound is reached when every write segment is its own chunk.
      const spread = { ...chunks, writes: chunks.writes.flat().map((s) => [s]) };
      t.is(chunkHeaderSize(version, spread), worst);
      // From the exact counts (what the transport holds), the bound is the header's size.
      const exact = chunkHeaderBound(
        version,
        chunks.reads.length,
        chunks.writes.length,
        writeSegments,
        chunks.reply ? chunks.reply.length : -1,
      );
      t.is(exact, chunkHeaderSize(version, chunks));
    }),
    { numRuns: 200 },
  );
});

test('worst-case sizes by hand: 28 + 24 per read segment + 24 per write segment + reply', (t) => {
  // Version 2: prefix 20 + inv_handle 4 + three list terminators 12 = 36.
  t.is(maxChunkHeaderSize(2, {}), 36);
  t.is(maxChunkHeaderSize(2, { writeSegments: 1 }), 60);
  t.is(maxChunkHeaderSize(1, { readSegments: 2, replySegments: 3 }), 16 + 12 + 48 + 4 + 48);
  t.throws(() => maxChunkHeaderSize(1, { readSegments: -1 }), { code: 'ERR_RPCRDMA_BUDGET' });
});

test('offsets may be given as safe numbers and decode as the same bigint', (t) => {
  const w = new XdrWriter(64);
  encodeV1ChunkHeader(w, 1, 1, 1, { writes: [[{ handle: 1, length: 2, offset: 2 ** 53 - 1 }]] });
  const h = decodeHeader(w.view());
  t.like(h, { chunks: { writes: [[{ offset: 2n ** 53n - 1n }]] } });
});

test('encoding into a fixed send buffer: exact fit succeeds, one byte short overflows', (t) => {
  const chunks = { writes: [[{ handle: 7, length: 4096, offset: 1n << 60n }]] };
  const size = chunkHeaderSize(2, chunks);
  const registered = Buffer.alloc(size + 8);
  const w = XdrWriter.into(registered, 8, 8 + size);
  encodeV2ChunkHeader(w, 0, 1, 32, 0, 7, chunks);
  t.is(w.pos, 8 + size);
  const tight = XdrWriter.into(Buffer.alloc(size - 1));
  const err = t.throws(() => encodeV2ChunkHeader(tight, 0, 1, 32, 0, 7, chunks), { instanceOf: XdrError });
  t.is(err?.code, 'ERR_XDR_OVERFLOW');
});

test('values that are not uint32 are refused by the encoder', (t) => {
  const h: RpcRdmaHeaderInput = { version: 1, proc: 0, xid: -1, credit: 1, chunks: {} };
  t.throws(() => encodeHeader(new XdrWriter(), h), { instanceOf: XdrError });
  const big: RpcRdmaHeaderInput = {
    version: 2,
    htype: 1,
    xid: 1,
    credit: 1,
    chunks: { reply: [{ handle: 1, length: 1, offset: 1n << 64n }] },
  };
  t.throws(() => encodeHeader(new XdrWriter(), big), { instanceOf: XdrError });
});

test('the fast path (room in the window) and the checked path (growing writer) write the same bytes', (t) => {
  fc.assert(
    fc.property(chunkLists, u32, u32, (chunks, xid, inv) => {
      const fast = XdrWriter.into(Buffer.alloc(4096));
      const slow = new XdrWriter(4);
      encodeV2ChunkHeader(fast, 1, xid, 5, 0, inv, chunks);
      encodeV2ChunkHeader(slow, 1, xid, 5, 0, inv, chunks);
      t.deepEqual(fast.view(), slow.view());
      const fast1 = XdrWriter.into(Buffer.alloc(4096));
      const slow1 = new XdrWriter(4);
      encodeV1ChunkHeader(fast1, 0, xid, 5, chunks);
      encodeV1ChunkHeader(slow1, 0, xid, 5, chunks);
      t.deepEqual(fast1.view(), slow1.view());
    }),
    { numRuns: 200 },
  );
});
