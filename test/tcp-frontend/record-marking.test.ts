import test from 'ava';
import fc from 'fast-check';
import { BufferPool } from '../../common/buffer-pool.js';
import { ConfigError } from '../../common/errors.js';
import {
  DEFAULT_MAX_FRAGMENTS,
  DEFAULT_MAX_RECORD_SIZE,
  frameRecord,
  RecordDecoder,
  type RecordDecoderOptions,
  RecordMarkingError,
  recordMark,
  writeRecordMark,
} from '../../tcp-frontend/record-marking.js';

/** A record and how it is split into fragments on the wire (fragment lengths, 0 allowed except alone). */
interface WireRecord {
  body: Buffer;
  fragments: number[];
}

function header(len: number, last: boolean): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(last ? (0x8000_0000 | len) >>> 0 : len, 0);
  return b;
}

/** Encodes records by hand (independently of the encoder under test). */
function wire(records: WireRecord[]): Buffer {
  const parts: Buffer[] = [];
  for (const r of records) {
    let pos = 0;
    r.fragments.forEach((len, i) => {
      parts.push(header(len, i === r.fragments.length - 1), r.body.subarray(pos, pos + len));
      pos += len;
    });
    if (pos !== r.body.length) throw new Error('fragments do not cover the body');
  }
  return Buffer.concat(parts);
}

/** A record of `size` distinct bytes split into the given fragment lengths. */
function rec(fragments: number[], seed: number): WireRecord {
  const size = fragments.reduce((a, b) => a + b, 0);
  const body = Buffer.alloc(size);
  for (let i = 0; i < size; i++) body[i] = (seed * 31 + i * 7) & 0xff;
  return { body, fragments };
}

/** Feeds `chunks` and returns copies of the records delivered (copies, because views may be reused). */
function decodeAll(
  chunks: Buffer[],
  options?: RecordDecoderOptions,
): { records: Buffer[]; decoder: RecordDecoder } {
  const records: Buffer[] = [];
  const decoder = new RecordDecoder((r) => records.push(Buffer.from(r)), options);
  for (const c of chunks) decoder.push(c);
  decoder.end();
  return { records, decoder };
}

function cutAt(stream: Buffer, cuts: number[]): Buffer[] {
  const points = [...new Set(cuts.map((c) => Math.min(c, stream.length)))].sort((a, b) => a - b);
  const out: Buffer[] = [];
  let prev = 0;
  for (const p of points) {
    out.push(stream.subarray(prev, p));
    prev = p;
  }
  out.push(stream.subarray(prev));
  return out;
}

// Single fragment, many fragments with zero-length non-final ones, a one-byte record, a larger record.
const mixed: WireRecord[] = [
  rec([12], 1),
  rec([3, 0, 5, 0, 0, 9], 2),
  rec([1], 3),
  rec([0, 7], 4),
  rec([40, 1, 20], 5),
  rec([8, 0], 6),
];
const mixedStream = wire(mixed);
const mixedBodies = mixed.map((r) => r.body);

test('one push of the whole stream yields every record', (t) => {
  t.deepEqual(decodeAll([mixedStream]).records, mixedBodies);
});

test('the stream cut at every single boundary yields identical records', (t) => {
  for (let cut = 0; cut <= mixedStream.length; cut++) {
    t.deepEqual(decodeAll(cutAt(mixedStream, [cut])).records, mixedBodies, `cut at ${cut}`);
  }
});

test('the stream cut at every pair of boundaries yields identical records', (t) => {
  const n = mixedStream.length;
  let runs = 0;
  for (let a = 0; a <= n; a++) {
    for (let b = a; b <= n; b++) {
      const { records } = decodeAll(cutAt(mixedStream, [a, b]));
      if (records.length !== mixedBodies.length || records.some((r, i) => !r.equals(mixedBodies[i]))) {
        t.fail(`cuts at ${a} and ${b}`);
        return;
      }
      runs++;
    }
  }
  t.is(runs, ((n + 1) * (n + 2)) / 2);
});

test('byte-by-byte feeding yields identical records', (t) => {
  const chunks = [...mixedStream].map((b) => Buffer.from([b]));
  t.deepEqual(decodeAll(chunks).records, mixedBodies);
});

const wireRecord: fc.Arbitrary<WireRecord> = fc
  .array(fc.nat({ max: 300 }), { minLength: 1, maxLength: 5 })
  .filter((f) => f.reduce((a, b) => a + b, 0) > 0)
  .chain((fragments) =>
    fc
      .uint8Array({
        minLength: fragments.reduce((a, b) => a + b, 0),
        maxLength: fragments.reduce((a, b) => a + b, 0),
      })
      .map((bytes) => ({ body: Buffer.from(bytes), fragments })),
  );

test('random record sets cut at random points yield identical records', (t) => {
  fc.assert(
    fc.property(
      fc.array(wireRecord, { minLength: 1, maxLength: 6 }),
      fc.array(fc.nat({ max: 3000 }), { maxLength: 20 }),
      (records, cuts) => {
        const stream = wire(records);
        t.deepEqual(
          decodeAll(cutAt(stream, cuts)).records,
          records.map((r) => r.body),
        );
      },
    ),
    { numRuns: 200 },
  );
});

test('a decoder keeps no reference to a chunk after push: a reused read buffer still yields good records', (t) => {
  fc.assert(
    fc.property(
      fc.array(wireRecord, { minLength: 1, maxLength: 5 }),
      fc.integer({ min: 1, max: 97 }),
      (records, readSize) => {
        const stream = wire(records);
        const readBuffer = Buffer.alloc(readSize);
        const got: Buffer[] = [];
        const decoder = new RecordDecoder((r) => got.push(Buffer.from(r)));
        for (let pos = 0; pos < stream.length; pos += readSize) {
          const n = stream.copy(readBuffer, 0, pos, pos + readSize);
          decoder.push(readBuffer.subarray(0, n));
          readBuffer.fill(0xa5); // what the next read would do to a held view
        }
        decoder.end();
        t.deepEqual(
          got,
          records.map((r) => r.body),
        );
      },
    ),
    { numRuns: 100 },
  );
});

test('a single-fragment record inside one chunk is a zero-copy view; others are assembled once', (t) => {
  const stream = wire([rec([10], 1), rec([6, 4], 2), rec([30], 3)]);
  const chunk = Buffer.from(stream.subarray(0, 14 + 18 + 10)); // first two records, and 6 bytes of the third
  const rest = Buffer.from(stream.subarray(chunk.length));
  const seen: Buffer[] = [];
  const allocations: number[] = [];
  const d = new RecordDecoder((r) => seen.push(r), {
    allocate: (size) => {
      allocations.push(size);
      return Buffer.allocUnsafe(size);
    },
  });
  d.push(chunk);
  d.push(rest);
  t.is(seen.length, 3);
  const within = (view: Buffer, c: Buffer) =>
    view.buffer === c.buffer && view.byteOffset >= c.byteOffset && view.byteOffset < c.byteOffset + c.length;
  t.true(within(seen[0], chunk), 'record 1 is a view of the chunk');
  t.is(seen[0].byteOffset, chunk.byteOffset + 4);
  t.false(within(seen[1], chunk), 'record 2 (two fragments) is assembled');
  t.false(within(seen[2], chunk) || within(seen[2], rest), 'record 3 (split over chunks) is assembled');
  // Record 3's size is known from its only header: exactly one allocation of exactly 30 bytes.
  t.is(allocations.at(-1), 30);
  t.is(seen[2].length, 30);
});

/** Feeds `stream` to `decoder` in reads of `readSize` bytes through one buffer reused (and scribbled over) after each read, then ends it. */
function feedThroughReusedBuffer(
  decoder: RecordDecoder,
  stream: Buffer,
  readSize: number,
  readBuffer: Buffer,
): void {
  for (let pos = 0; pos < stream.length; pos += readSize) {
    const n = stream.copy(readBuffer, 0, pos, pos + readSize);
    decoder.push(readBuffer.subarray(0, n));
    readBuffer.fill(0xa5);
  }
  decoder.end();
}

test('zeroCopy false: every record is its own buffer from allocate, held records survive a reused read buffer', (t) => {
  fc.assert(
    fc.property(
      fc.array(wireRecord, { minLength: 1, maxLength: 5 }),
      fc.integer({ min: 1, max: 97 }),
      (records, readSize) => {
        const stream = wire(records);
        const readBuffer = Buffer.alloc(readSize + 64);
        const held: Buffer[] = []; // not copied: the handler keeps what it was given
        const decoder = new RecordDecoder((r) => held.push(r), { zeroCopy: false });
        feedThroughReusedBuffer(decoder, stream, readSize, readBuffer);
        t.deepEqual(
          held,
          records.map((r) => r.body),
        );
        for (const r of held) t.not(r.buffer, readBuffer.buffer);
      },
    ),
    { numRuns: 100 },
  );
});

test('lendMax: small whole records are lent as views of the chunk, the rest copied; the handler is told which', (t) => {
  fc.assert(
    fc.property(
      fc.array(wireRecord, { minLength: 1, maxLength: 6 }),
      fc.integer({ min: 1, max: 97 }),
      fc.integer({ min: 0, max: 64 }),
      (records, readSize, lendMax) => {
        const stream = wire(records);
        const readBuffer = Buffer.alloc(readSize + 64);
        const got: Buffer[] = [];
        let lentCount = 0;
        const decoder = new RecordDecoder(
          (r, lent) => {
            // A lent record is a view of this read, no larger than the limit; any other is the handler's.
            t.is(r.buffer === readBuffer.buffer, lent);
            if (lent) {
              t.true(r.length <= lendMax);
              lentCount++;
            }
            got.push(Buffer.from(r)); // copied before the read buffer is reused
          },
          { zeroCopy: false, lendMax },
        );
        feedThroughReusedBuffer(decoder, stream, readSize, readBuffer);
        t.deepEqual(
          got,
          records.map((r) => r.body),
        );
        if (lendMax === 0) t.is(lentCount, 0);
      },
    ),
    { numRuns: 100 },
  );
  // A whole record under the limit inside one chunk is lent; one byte over, copied.
  const seen: [number, boolean][] = [];
  const d = new RecordDecoder((r, lent) => seen.push([r.length, lent]), { zeroCopy: false, lendMax: 8 });
  d.push(wire([rec([8], 1), rec([9], 2)]));
  t.deepEqual(seen, [
    [8, true],
    [9, false],
  ]);
  // With zeroCopy every record is a view anyway, and none is called lent.
  const views: boolean[] = [];
  new RecordDecoder((_r, lent) => views.push(lent), { lendMax: 8 }).push(wire([rec([4], 3)]));
  t.deepEqual(views, [false]);
  t.throws(() => new RecordDecoder(() => {}, { zeroCopy: false, lendMax: -1 }), { instanceOf: ConfigError });
});

test('a buffer outgrown by a multi-fragment record is handed to release; the delivered one is not', (t) => {
  const released: Buffer[] = [];
  const allocated: Buffer[] = [];
  const seen: Buffer[] = [];
  const d = new RecordDecoder((r) => seen.push(r), {
    allocate: (size) => {
      const b = Buffer.allocUnsafe(size);
      allocated.push(b);
      return b;
    },
    release: (b) => released.push(b),
  });
  const r = rec([10, 30, 100], 7);
  d.push(wire([r]));
  t.deepEqual(seen, [r.body]);
  t.true(allocated.length >= 2, 'the buffer grew');
  t.deepEqual(released, allocated.slice(0, -1), 'every buffer but the last, each once');
  t.is(seen[0].buffer, allocated[allocated.length - 1].buffer);
});

/** A decoder assembling in a real pool (every record copied: `zeroCopy` false), and the pool. */
function pooledDecoder(options: RecordDecoderOptions = {}): { d: RecordDecoder; pool: BufferPool } {
  const pool = new BufferPool();
  const d = new RecordDecoder(() => {}, {
    allocate: pool.acquire,
    release: pool.release,
    zeroCopy: false,
    ...options,
  });
  return { d, pool };
}

test('a stream that fails mid-record gives its partly assembled buffer back to the pool, once', (t) => {
  // 8 KiB of a 16 KiB first fragment, then each way the stream can fail with that buffer held.
  const partial = Buffer.concat([header(16 * 1024, false), Buffer.alloc(8 * 1024, 1)]);
  const rest = Buffer.alloc(8 * 1024);
  const failures: [string, RecordDecoderOptions, (d: RecordDecoder) => void][] = [
    ['ERR_RM_TRUNCATED', {}, (d) => d.end()],
    [
      'ERR_RM_TOO_MANY_FRAGMENTS',
      { maxFragments: 1 },
      (d) => d.push(Buffer.concat([rest, header(0, false)])),
    ],
    [
      'ERR_RM_RECORD_TOO_LARGE',
      { maxRecordSize: 64 * 1024 },
      (d) => d.push(Buffer.concat([rest, header(1 << 20, true)])),
    ],
  ];
  for (const [code, options, fail] of failures) {
    const { d, pool } = pooledDecoder(options);
    d.push(partial);
    t.is(pool.stats.misses, 1, `${code}: one pooled buffer assembling`);
    expectError(() => fail(d), code);
    t.is(pool.stats.returned, 1, `${code}: given back`);
    d.dispose();
    t.is(pool.stats.returned, 1, `${code}: dispose after the failure releases nothing more`);
    t.is(pool.stats.doubleReleases, 0);
  }
});

test('dispose gives a partial record’s buffer back once and stops the decoder; at a boundary it releases nothing', (t) => {
  const { d, pool } = pooledDecoder();
  d.push(Buffer.concat([header(16 * 1024, true), Buffer.alloc(1000)]));
  d.dispose();
  d.dispose();
  t.is(pool.stats.returned, 1);
  t.is(pool.stats.doubleReleases, 0);
  t.regex(expectError(() => d.push(Buffer.alloc(4)), 'ERR_RM_FAILED').reason, /has ended/);
  // A delivered record is the handler's: disposing afterwards must not release it.
  const kept: Buffer[] = [];
  const clean = new RecordDecoder((r) => kept.push(r), { allocate: pool.acquire, release: pool.release });
  const body = Buffer.alloc(16 * 1024, 3);
  const stream = Buffer.concat([header(body.length, true), body]);
  clean.push(stream.subarray(0, 100));
  clean.push(stream.subarray(100));
  clean.dispose();
  t.true(pool.owns(kept[0]), 'the delivered record is still out');
  t.is(pool.stats.returned, 1);
});

test('bufferedBytes and reservedBytes track the incomplete record and drop to zero after it', (t) => {
  const d = new RecordDecoder(() => {});
  const stream = wire([rec([100, 50], 1)]);
  d.push(stream.subarray(0, 4 + 60));
  t.is(d.bufferedBytes, 60);
  t.true(d.reservedBytes >= 100 && d.reservedBytes <= DEFAULT_MAX_RECORD_SIZE);
  t.false(d.atRecordBoundary);
  d.push(stream.subarray(64));
  t.is(d.bufferedBytes, 0);
  t.is(d.reservedBytes, 0);
  t.true(d.atRecordBoundary);
  t.is(d.records, 1);
});

function expectError(fn: () => void, code: string): RecordMarkingError {
  try {
    fn();
  } catch (err) {
    if (err instanceof RecordMarkingError && err.code === code) return err;
    throw new Error(`expected ${code}, got ${String(err)}`);
  }
  throw new Error(`expected ${code}, nothing thrown`);
}

test('a fragment header announcing 0x7fffffff bytes is refused at once, nothing buffered', (t) => {
  for (const word of [0x7fff_ffff, 0xffff_ffff]) {
    const d = new RecordDecoder(() => {});
    const b = Buffer.alloc(4);
    b.writeUInt32BE(word, 0);
    const err = expectError(() => d.push(Buffer.concat([b, Buffer.alloc(64)])), 'ERR_RM_RECORD_TOO_LARGE');
    t.is(err.details.announced, 0x7fff_ffff);
    t.is(err.details.limit, DEFAULT_MAX_RECORD_SIZE);
    t.regex(err.reason, /over the limit/);
    t.is(d.bufferedBytes, 0);
    t.is(d.reservedBytes, 0);
    t.is(d.error, err);
  }
});

test('a record one byte over the limit is refused when its header arrives; at the limit it passes', (t) => {
  const limit = 1000;
  t.is(decodeAll([wire([rec([limit], 1)])], { maxRecordSize: limit }).records[0].length, limit);
  t.is(decodeAll([wire([rec([600, 0, 400], 1)])], { maxRecordSize: limit }).records[0].length, limit);
  for (const fragments of [[limit + 1], [600, 401], [999, 0, 2]]) {
    const stream = wire([rec(fragments, 2)]);
    const d = new RecordDecoder(() => {}, { maxRecordSize: limit });
    let maxHeld = 0;
    const err = expectError(() => {
      for (let pos = 0; pos < stream.length; pos += 50) {
        d.push(stream.subarray(pos, pos + 50));
        maxHeld = Math.max(maxHeld, d.bufferedBytes, d.reservedBytes);
      }
    }, 'ERR_RM_RECORD_TOO_LARGE');
    t.is(err.details.announced, limit + 1, String(fragments));
    t.true(maxHeld <= limit, `held ${maxHeld}`);
    // Refused at the offending header: the bytes after it were never consumed as data.
    const headerAt =
      fragments.length === 1
        ? 0
        : 4 * (fragments.length - 1) + fragments.slice(0, -1).reduce((a, b) => a + b, 0);
    t.is(err.details.streamOffset, headerAt);
  }
});

test('endless non-final fragments stop at the fragment or size limit, never buffering past the limit', (t) => {
  // Zero-length fragments: only the fragment limit can stop them.
  const zero = new RecordDecoder(() => {});
  const zeros = Buffer.alloc(4 * 1024);
  let pushes = 0;
  const err = expectError(() => {
    for (; pushes < 100; pushes++) zero.push(zeros);
  }, 'ERR_RM_TOO_MANY_FRAGMENTS');
  t.is(err.details.limit, DEFAULT_MAX_FRAGMENTS);
  t.is(pushes, Math.floor(DEFAULT_MAX_FRAGMENTS / 1024), 'stopped by the fragment after the limit');
  t.is(zero.bufferedBytes, 0);
  // 100-byte non-final fragments: stopped by the size limit, held bytes stay under it.
  const limit = 10_000;
  const d = new RecordDecoder(() => {}, { maxRecordSize: limit });
  const frag = Buffer.concat([header(100, false), Buffer.alloc(100, 1)]);
  let maxHeld = 0;
  expectError(() => {
    for (let i = 0; i < 1000; i++) {
      d.push(frag);
      maxHeld = Math.max(maxHeld, d.bufferedBytes, d.reservedBytes);
    }
  }, 'ERR_RM_RECORD_TOO_LARGE');
  t.is(maxHeld, limit);
});

test('more fragments than maxFragments is ERR_RM_TOO_MANY_FRAGMENTS; exactly the limit passes', (t) => {
  t.is(decodeAll([wire([rec([1, 1, 1], 1)])], { maxFragments: 3 }).records.length, 1);
  const err = expectError(
    () => decodeAll([wire([rec([1, 0, 1, 1], 1)])], { maxFragments: 3 }),
    'ERR_RM_TOO_MANY_FRAGMENTS',
  );
  t.is(err.details.limit, 3);
});

test('a zero-length record is refused, alone or after zero-length fragments', (t) => {
  for (const stream of [
    header(0, true),
    Buffer.concat([header(0, false), header(0, false), header(0, true)]),
  ]) {
    const err = expectError(() => decodeAll([stream]), 'ERR_RM_EMPTY_RECORD');
    t.regex(err.reason, /zero bytes/);
  }
});

test('EOF anywhere inside a record is ERR_RM_TRUNCATED; EOF at a record boundary is clean', (t) => {
  const boundaries = new Set<number>([0]);
  let pos = 0;
  for (const r of mixed) {
    pos += r.body.length + 4 * r.fragments.length;
    boundaries.add(pos);
  }
  for (let cut = 0; cut <= mixedStream.length; cut++) {
    const d = new RecordDecoder(() => {});
    d.push(mixedStream.subarray(0, cut));
    if (boundaries.has(cut)) {
      t.notThrows(() => d.end(), `cut ${cut}`);
    } else {
      const err = expectError(() => d.end(), 'ERR_RM_TRUNCATED');
      t.regex(err.reason, /^stream ended/);
      t.is(err.details.streamOffset, cut);
    }
  }
});

test('a stopped decoder refuses more input with ERR_RM_FAILED, naming the first error', (t) => {
  const d = new RecordDecoder(() => {});
  expectError(() => d.push(header(0, true)), 'ERR_RM_EMPTY_RECORD');
  const again = expectError(() => d.push(wire([rec([4], 1)])), 'ERR_RM_FAILED');
  t.regex(again.reason, /zero bytes/);
  expectError(() => d.end(), 'ERR_RM_FAILED');
  const ended = new RecordDecoder(() => {});
  ended.end();
  t.is(ended.error, undefined, 'a clean end is not an error');
  t.regex(expectError(() => ended.push(wire([rec([4], 1)])), 'ERR_RM_FAILED').reason, /has ended/);
});

test('an exception from the record handler propagates and stops the decoder', (t) => {
  const boom = new Error('consumer failed');
  const d = new RecordDecoder(() => {
    throw boom;
  });
  t.is(
    t.throws(() => d.push(wire([rec([4], 1), rec([4], 2)]))),
    boom,
  );
  expectError(() => d.push(wire([rec([4], 3)])), 'ERR_RM_FAILED');
});

test('decoder limits are validated as configuration', (t) => {
  for (const options of [
    { maxRecordSize: 0 },
    { maxRecordSize: 2 ** 31 },
    { maxFragments: 0 },
    { maxRecordSize: 1.5 },
  ]) {
    t.throws(() => new RecordDecoder(() => {}, options), { instanceOf: ConfigError });
  }
});

test('record marks set the last-fragment bit as an unsigned word', (t) => {
  t.is(recordMark(0x7fff_ffff).toString('hex'), 'ffffffff');
  t.is(recordMark(1).toString('hex'), '80000001');
  t.is(recordMark(5, false).toString('hex'), '00000005');
  const b = Buffer.alloc(8);
  writeRecordMark(b, 4, 0x1234, true);
  t.is(b.toString('hex'), '0000000080001234');
  for (const bad of [-1, 2 ** 31, 0.5]) {
    t.is(t.throws(() => recordMark(bad), { instanceOf: RecordMarkingError })?.code, 'ERR_RM_FRAGMENT_SIZE');
  }
});

test('frameRecord returns the header and the caller’s own buffers, copying nothing', (t) => {
  const body = Buffer.from('hello, record');
  const framed = frameRecord(body);
  t.is(framed.length, 2);
  t.is(framed[0].toString('hex'), recordMark(body.length).toString('hex'));
  t.is(framed[1], body);
  const parts = [Buffer.from('abc'), Buffer.from('defg')];
  const framedParts = frameRecord(parts);
  t.is(framedParts[1], parts[0]);
  t.is(framedParts[2], parts[1]);
  t.is(framedParts[0].readUInt32BE(0), (0x8000_0000 | 7) >>> 0);
});

test('frameRecord splits bodies over maxFragmentSize into fragments that decode to the same record', (t) => {
  fc.assert(
    fc.property(
      fc
        .array(fc.uint8Array({ maxLength: 50 }), { minLength: 1, maxLength: 5 })
        .filter((p) => p.some((x) => x.length > 0)),
      fc.integer({ min: 1, max: 60 }),
      (arrays, maxFragment) => {
        const parts = arrays.map((a) => Buffer.from(a));
        const total = Buffer.concat(parts);
        const framed = frameRecord(parts, maxFragment);
        // Headers: ceil(total / max) of them, each fragment at most maxFragment, the last one flagged.
        const { records } = decodeAll([Buffer.concat(framed)]);
        t.deepEqual(records, [total]);
        const decoded: number[] = [];
        const stream = Buffer.concat(framed);
        for (let pos = 0; pos < stream.length; ) {
          const word = stream.readUInt32BE(pos);
          decoded.push(word);
          pos += 4 + (word & 0x7fff_ffff);
        }
        t.is(decoded.length, Math.ceil(total.length / maxFragment));
        t.true(decoded.every((w) => (w & 0x7fff_ffff) <= maxFragment && (w & 0x7fff_ffff) > 0));
        t.true(decoded.every((w, i) => w >= 0x8000_0000 === (i === decoded.length - 1)));
        // Every body byte goes out as a view of the caller's buffers: nothing was copied.
        const inside = (piece: Buffer, p: Buffer) =>
          piece.buffer === p.buffer &&
          piece.byteOffset >= p.byteOffset &&
          piece.byteOffset + piece.length <= p.byteOffset + p.length;
        const viewed = framed.filter((piece) => parts.some((p) => p.length > 0 && inside(piece, p)));
        t.is(
          viewed.reduce((n, piece) => n + piece.length, 0),
          total.length,
        );
      },
    ),
    { numRuns: 150 },
  );
});

test('frameRecord refuses an empty record and a bad fragment size', (t) => {
  t.is(
    t.throws(() => frameRecord(Buffer.alloc(0)), { instanceOf: RecordMarkingError })?.code,
    'ERR_RM_EMPTY_RECORD',
  );
  for (const bad of [0, 2 ** 31, 1.5]) {
    t.is(
      t.throws(() => frameRecord(Buffer.alloc(4), bad), { instanceOf: RecordMarkingError })?.code,
      'ERR_RM_FRAGMENT_SIZE',
    );
  }
});

test('onOversize also reports the second word (msg_type), wherever reads split the record; -1 when too short', (t) => {
  const bigOne = rec([100], 2);
  const bigTwo = rec([30, 50], 3); // its head was assembled before it grew over the limit
  const stream = wire([bigOne, bigTwo]);
  for (let cut = 0; cut <= stream.length; cut++) {
    const seen: [number, number][] = [];
    decodeAll(cutAt(stream, [cut]), { maxRecordSize: 64, onOversize: (h, _a, m) => seen.push([h, m]) });
    t.deepEqual(
      seen,
      [
        [bigOne.body.readUInt32BE(0), bigOne.body.readUInt32BE(4)],
        [bigTwo.body.readUInt32BE(0), bigTwo.body.readUInt32BE(4)],
      ],
      `cut ${cut}`,
    );
  }
  const short: [number, number][] = [];
  decodeAll([wire([rec([6], 5)])], { maxRecordSize: 2, onOversize: (h, _a, m) => short.push([h, m]) });
  t.is(short[0][1], -1, 'six bytes: no second word');
  t.not(short[0][0], -1, 'but a first one');
});

test('onOversize: a record over the limit is skipped and reported with its first word; the stream goes on', (t) => {
  // Limit 64 bytes. An oversized single-fragment record, one whose second fragment makes it oversized
  // (its head was assembled already), one of 3 bytes over a 2-byte limit is tested below.
  const small = rec([40], 1);
  const bigOne = rec([100], 2);
  const bigTwo = rec([30, 50], 3);
  const after = rec([10, 20], 4);
  const stream = wire([small, bigOne, bigTwo, after]);
  const firstWord = (r: WireRecord) => r.body.readUInt32BE(0);
  // The verdict must not depend on where reads split the stream: every single cut point.
  for (let cut = 0; cut <= stream.length; cut++) {
    const skipped: [number, number][] = [];
    const released: Buffer[] = [];
    const { records, decoder } = decodeAll(cutAt(stream, [cut]), {
      maxRecordSize: 64,
      onOversize: (head, announced) => skipped.push([head, announced]),
      release: (b) => released.push(b),
    });
    t.deepEqual(records, [small.body, after.body], `cut ${cut}`);
    t.deepEqual(
      skipped,
      [
        [firstWord(bigOne), 100],
        [firstWord(bigTwo), 80],
      ],
      `cut ${cut}`,
    );
    t.true(decoder.atRecordBoundary);
    t.is(decoder.bufferedBytes, 0);
  }
  const tiny: [number, number][] = [];
  decodeAll([wire([rec([3], 5)])], { maxRecordSize: 2, onOversize: (h, a) => tiny.push([h, a]) });
  t.deepEqual(tiny, [[-1, 3]], 'a record too short for a word reports -1');
  // Without the option an oversized record still stops the stream.
  t.throws(() => decodeAll([wire([bigOne])], { maxRecordSize: 64 }), { instanceOf: RecordMarkingError });
});
