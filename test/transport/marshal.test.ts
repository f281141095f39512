import test from 'ava';
import fc from 'fast-check';
import { maxChunkHeaderSize } from '../../rdma-backend/protocol/index.js';
import {
  checkItems,
  copyReduced,
  type DdpItem,
  groupReadChunks,
  itemSpan,
  needsReplyChunk,
  planCall,
  planReply,
  readChunkInsertPoints,
  reassemble,
  reducedLength,
  scatter,
} from '../../rdma-backend/transport/marshal.js';

/** An XDR message: a header of `head` bytes then opaque items (length word + data + zero pad). */
function xdrMessage(head: number, datas: Buffer[]): { message: Buffer; items: DdpItem[] } {
  const parts: Buffer[] = [Buffer.alloc(head, 0xaa)];
  const items: DdpItem[] = [];
  let off = head;
  for (const d of datas) {
    const lw = Buffer.alloc(4);
    lw.writeUInt32BE(d.length);
    parts.push(lw);
    off += 4;
    items.push({ offset: off, length: d.length });
    parts.push(d, Buffer.alloc(itemSpan(d.length) - d.length));
    off += itemSpan(d.length);
    parts.push(Buffer.alloc(8, 0xbb)); // trailing fields after each item
    off += 8;
  }
  return { message: Buffer.concat(parts), items };
}

test('odd lengths: the pad leaves the stream with the data and comes back as zeros', (t) => {
  const datas = [Buffer.alloc(1, 1), Buffer.alloc(5, 2), Buffer.alloc(7, 3), Buffer.alloc(8, 4)];
  const { message, items } = xdrMessage(12, datas);
  checkItems(message.length, items);
  const reduced = Buffer.alloc(reducedLength(message.length, items));
  t.is(copyReduced(message, items, reduced, 0), reduced.length);
  t.is(reduced.length, message.length - (4 + 8 + 8 + 8));
  const at: number[] = [];
  t.true(
    readChunkInsertPoints(
      items.map((i) => i.offset),
      items.map((i) => i.length),
      false,
      reduced.length,
      at,
    ),
  );
  const back = reassemble(
    reduced,
    datas.map((d, i) => ({ at: at[i], data: d })),
  );
  t.deepEqual(back, message);
});

test('property: reduce then reassemble is the identity for any item layout', (t) => {
  fc.assert(
    fc.property(
      fc.nat(16).map((n) => n * 4),
      fc.array(fc.uint8Array({ maxLength: 37 }), { maxLength: 5 }),
      (head, arrays) => {
        const datas = arrays.map((a) => Buffer.from(a));
        const { message, items } = xdrMessage(head, datas);
        const reduced = Buffer.alloc(reducedLength(message.length, items));
        copyReduced(message, items, reduced, 0);
        const at: number[] = [];
        const fits = readChunkInsertPoints(
          items.map((i) => i.offset),
          items.map((i) => i.length),
          false,
          reduced.length,
          at,
        );
        const back = reassemble(
          reduced,
          datas.map((d, i) => ({ at: at[i], data: d })),
        );
        return fits && back.equals(message);
      },
    ),
    { numRuns: 200 },
  );
  t.pass();
});

test('checkItems refuses unaligned, overlapping and out-of-range items', (t) => {
  t.throws(() => checkItems(64, [{ offset: 2, length: 4 }]), { code: 'ERR_TRANSPORT_DDP_ITEM' });
  t.throws(
    () =>
      checkItems(64, [
        { offset: 4, length: 8 },
        { offset: 8, length: 4 },
      ]),
    { code: 'ERR_TRANSPORT_DDP_ITEM' },
  );
  // 61 bytes of data need 64 with the pad: beyond a 64-byte message starting at 4.
  t.throws(() => checkItems(64, [{ offset: 4, length: 61 }]), { code: 'ERR_TRANSPORT_DDP_ITEM' });
  t.notThrows(() => checkItems(64, [{ offset: 4, length: 60 }]));
});

test('reassemble refuses positions outside the message or out of order', (t) => {
  const inline = Buffer.alloc(16);
  t.throws(() => reassemble(inline, [{ at: 20, data: Buffer.alloc(1) }]), {
    code: 'ERR_TRANSPORT_CHUNK_POSITION',
  });
  t.throws(() => reassemble(inline, [{ at: 2, data: Buffer.alloc(1) }]), {
    code: 'ERR_TRANSPORT_CHUNK_POSITION',
  });
  t.throws(
    () =>
      reassemble(inline, [
        { at: 8, data: Buffer.alloc(1) },
        { at: 4, data: Buffer.alloc(1) },
      ]),
    { code: 'ERR_TRANSPORT_CHUNK_POSITION' },
  );
});

test('planCall: inline when it fits, Read chunks for DDP items, else Position-Zero', (t) => {
  const base = { version: 2 as const, writeChunks: 0, replyChunk: false, readChunksAllowed: true };
  const hdr = maxChunkHeaderSize(2, {});
  t.is(planCall({ ...base, messageLength: 4096 - hdr, items: [], sendLimit: 4096 }).mode, 'inline');
  t.is(planCall({ ...base, messageLength: 4096 - hdr + 4, items: [], sendLimit: 4096 }).mode, 'pzrc');
  const items = [{ offset: 200, length: 8191 }];
  const read = planCall({ ...base, messageLength: 200 + 8192 + 8, items, sendLimit: 4096 });
  t.is(read.mode, 'read');
  t.is(read.inlineLength, 208);
  t.is(
    planCall({ ...base, readChunksAllowed: false, messageLength: 200 + 8192 + 8, items, sendLimit: 4096 })
      .mode,
    'pzrc',
  );
  // Version 1 header is 8 bytes shorter, so the same message may fit where Version 2 does not.
  const v1hdr = maxChunkHeaderSize(1, {});
  t.is(
    planCall({ ...base, version: 1, messageLength: 1024 - v1hdr, items: [], sendLimit: 1024 }).mode,
    'inline',
  );
  t.is(
    planCall({ ...base, version: 2, messageLength: 1024 - v1hdr, items: [], sendLimit: 1024 }).mode,
    'pzrc',
  );
  t.throws(() => planCall({ ...base, messageLength: 100000, items: [], sendLimit: 40 }), {
    code: 'ERR_TRANSPORT_CALL_TOO_LARGE',
  });
});

test('needsReplyChunk compares the largest reply with our receive buffer', (t) => {
  t.false(needsReplyChunk(2, 1000, 0, 0, 4096));
  t.true(needsReplyChunk(2, 5000, 0, 0, 4096));
  t.false(needsReplyChunk(2, 1024 * 1024 + 200, 1024 * 1024, 1, 4096));
  t.true(needsReplyChunk(2, -1, 0, 0, 4096));
});

test('planReply: write chunks, inline, reply chunk and the two resource errors', (t) => {
  const base = { version: 2 as const, sendLimit: 1024, headerSize: 64 };
  const items = [{ offset: 32, length: 4001 }];
  const ok = planReply({
    ...base,
    replyLength: 32 + 4004 + 8,
    items,
    writeCapacities: [8192],
    replyCapacity: -1,
  });
  t.deepEqual(ok, { mode: 'inline', moved: 1, reducedLength: 40 });
  const short = planReply({
    ...base,
    replyLength: 32 + 4004 + 8,
    items,
    writeCapacities: [4000],
    replyCapacity: -1,
  });
  t.is(short.mode, 'error');
  t.deepEqual(short.error, { code: 7, chunkIndex: 1, lengthNeeded: 4001 });
  const long = planReply({ ...base, replyLength: 5000, items: [], writeCapacities: [], replyCapacity: 8192 });
  t.is(long.mode, 'reply-chunk');
  const noRoom = planReply({
    ...base,
    replyLength: 5000,
    items: [],
    writeCapacities: [],
    replyCapacity: 4096,
  });
  t.deepEqual(noRoom.error, { code: 8, lengthNeeded: 5000 });
  // No Write chunk offered: the item stays inline.
  const stay = planReply({
    ...base,
    replyLength: 100,
    items: [{ offset: 8, length: 13 }],
    writeCapacities: [],
    replyCapacity: -1,
  });
  t.deepEqual(stay, { mode: 'inline', moved: 0, reducedLength: 100 });
});

test('scatter fills segments in order and refuses too little room', (t) => {
  t.deepEqual(scatter(10, [4, 4, 4]), [
    { segment: 0, segOffset: 0, srcOffset: 0, length: 4 },
    { segment: 1, segOffset: 0, srcOffset: 4, length: 4 },
    { segment: 2, segOffset: 0, srcOffset: 8, length: 2 },
  ]);
  t.is(scatter(13, [4, 4, 4]), null);
  t.deepEqual(scatter(0, [4]), []);
});

test('groupReadChunks: runs of one position form a chunk; positions never go back; one shared handle', (t) => {
  const seg = (position: number, handle: number, length: number) => ({
    position,
    handle,
    length,
    offset: 0n,
  });
  const g = groupReadChunks([seg(0, 7, 10), seg(0, 7, 6), seg(40, 7, 3)]);
  t.deepEqual(g?.positions, [0, 40]);
  t.deepEqual(g?.lengths, [16, 3]);
  t.is(g?.segments[0].length, 2);
  t.is(g?.singleHandle, 7);
  t.is(groupReadChunks([seg(8, 1, 4), seg(40, 2, 4)])?.singleHandle, -1);
  t.is(groupReadChunks([seg(40, 1, 4), seg(8, 1, 4)]), null);
  t.deepEqual(groupReadChunks([]), { positions: [], lengths: [], segments: [], singleHandle: 0 });
});
