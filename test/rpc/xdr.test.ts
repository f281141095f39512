import test from 'ava';
import fc from 'fast-check';
import { XdrError, XdrReader, XdrWriter, xdrAlign, xdrPad } from '../../rpc/xdr.js';

test('pad and align follow RFC 4506 §4.10', (t) => {
  t.deepEqual([0, 1, 2, 3, 4, 5].map(xdrPad), [0, 3, 2, 1, 0, 3]);
  t.deepEqual([0, 1, 2, 3, 4, 5].map(xdrAlign), [0, 4, 4, 4, 4, 8]);
});

test('opaque round trip keeps bytes and zero pad', (t) => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 64 }), (data) => {
      const w = new XdrWriter(4);
      w.opaque(data);
      const out = w.view();
      t.is(out.length, 4 + xdrAlign(data.length));
      t.true(out.subarray(4 + data.length).every((b) => b === 0));
      const r = new XdrReader(out);
      t.deepEqual(new Uint8Array(r.opaque(1024, 'data')), data);
      t.is(r.remaining, 0);
    }),
  );
});

test('a truncated opaque raises ERR_XDR_SHORT naming the field and offset', (t) => {
  const buf = Buffer.from([0, 0, 0, 8, 1, 2, 3]);
  const err = t.throws(() => new XdrReader(buf).opaque(100, 'cred.body'), { instanceOf: XdrError });
  t.is(err?.code, 'ERR_XDR_SHORT');
  t.is(err?.field, 'cred.body');
  t.is(err?.offset, 0);
});

/** One value of every XDR type, as the property test draws it. */
interface Sample {
  u32: number;
  i32: number;
  u64: bigint;
  i64: bigint;
  u64n: number;
  bool: boolean;
  en: number;
  fixed: Uint8Array;
  opaque: Uint8Array;
  str: string;
  opt: number | null;
  arr: number[];
}

const sample: fc.Arbitrary<Sample> = fc.record({
  u32: fc.nat({ max: 0xffff_ffff }),
  i32: fc.integer({ min: -0x8000_0000, max: 0x7fff_ffff }),
  u64: fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
  i64: fc.bigInt({ min: -(1n << 63n), max: (1n << 63n) - 1n }),
  u64n: fc.maxSafeNat(),
  bool: fc.boolean(),
  en: fc.integer({ min: -0x8000_0000, max: 0x7fff_ffff }),
  fixed: fc.uint8Array({ maxLength: 13 }),
  opaque: fc.uint8Array({ maxLength: 40 }),
  str: fc.string({ unit: 'grapheme', maxLength: 20 }),
  opt: fc.option(fc.nat({ max: 0xffff_ffff })),
  arr: fc.array(fc.nat({ max: 0xffff_ffff }), { maxLength: 10 }),
});

function encodeSample(w: XdrWriter, s: Sample): void {
  w.u32(s.u32, 'u32').i32(s.i32, 'i32').u64(s.u64, 'u64').i64(s.i64, 'i64').u64Number(s.u64n, 'u64n');
  w.bool(s.bool, 'bool').enum(s.en, 'enum').fixedOpaque(s.fixed, 'fixed').opaque(s.opaque, 'opaque');
  w.string(s.str, 'str');
  w.bool(s.opt !== null, 'opt');
  if (s.opt !== null) w.u32(s.opt, 'opt.value');
  w.u32(s.arr.length, 'arr');
  for (const v of s.arr) w.u32(v, 'arr.item');
}

function decodeSample(r: XdrReader, fixedLen: number): Sample {
  const u32 = r.u32('u32');
  const i32 = r.i32('i32');
  const u64 = r.u64('u64');
  const i64 = r.i64('i64');
  const u64n = r.u64Number('u64n');
  const bool = r.bool('bool');
  const en = r.enum('enum');
  const fixed = new Uint8Array(r.fixedOpaque(fixedLen, 'fixed'));
  const opaque = new Uint8Array(r.opaque(1000, 'opaque'));
  const str = r.string(1000, 'str');
  const opt = r.optional('opt') ? r.u32('opt.value') : null;
  const n = r.arrayLength(100, 4, 'arr');
  const arr: number[] = [];
  for (let i = 0; i < n; i++) arr.push(r.u32('arr.item'));
  return { u32, i32, u64, i64, u64n, bool, en, fixed, opaque, str, opt, arr };
}

test('every XDR type round-trips, including hypers above 2^53 and negative values', (t) => {
  fc.assert(
    fc.property(sample, (s) => {
      const w = new XdrWriter(8);
      encodeSample(w, s);
      const out = w.view();
      t.is(out.length % 4, 0, 'XDR output is a multiple of four bytes');
      const r = new XdrReader(out);
      t.deepEqual(decodeSample(r, s.fixed.length), s);
      t.is(r.remaining, 0);
    }),
    { numRuns: 200 },
  );
});

test('hypers above 2^53 are exact and in network byte order', (t) => {
  const big = (1n << 63n) + 12345n;
  const w = new XdrWriter()
    .u64(big)
    .i64(-(1n << 63n))
    .u64((1n << 64n) - 1n);
  t.is(w.view().subarray(0, 8).toString('hex'), '8000000000003039');
  const r = new XdrReader(w.view());
  t.is(r.u64('a'), big);
  t.is(r.i64('b'), -(1n << 63n));
  t.is(r.u64('c'), (1n << 64n) - 1n);
});

test('u64Number refuses a value above 2^53 with ERR_XDR_VALUE', (t) => {
  const buf = new XdrWriter().u64(1n << 53n).view();
  const err = t.throws(() => new XdrReader(buf).u64Number('size'), { instanceOf: XdrError });
  t.is(err?.code, 'ERR_XDR_VALUE');
  t.is(err?.field, 'size');
  t.is(new XdrReader(new XdrWriter().u64((1n << 53n) - 1n).view()).u64Number('size'), 2 ** 53 - 1);
});

test('u32 and i32 decode the full range from raw bytes', (t) => {
  fc.assert(
    fc.property(fc.uint8Array({ minLength: 4, maxLength: 4 }), (bytes) => {
      const buf = Buffer.from(bytes);
      t.is(new XdrReader(buf).u32('x'), buf.readUInt32BE(0));
      t.is(new XdrReader(buf).i32('x'), buf.readInt32BE(0));
    }),
  );
});

test('a bool other than 0 or 1 is ERR_XDR_VALUE at its offset', (t) => {
  const buf = Buffer.from([0, 0, 0, 1, 0, 0, 0, 2]);
  const r = new XdrReader(buf);
  t.true(r.bool('first'));
  const err = t.throws(() => r.bool('second'), { instanceOf: XdrError });
  t.is(err?.code, 'ERR_XDR_VALUE');
  t.is(err?.field, 'second');
  t.is(err?.offset, 4);
});

/** Every reader call that can run out of input, with the bytes it needs. */
const shortCases: Array<[string, number, (r: XdrReader) => unknown]> = [
  ['u32', 4, (r) => r.u32('f')],
  ['i32', 4, (r) => r.i32('f')],
  ['enum', 4, (r) => r.enum('f')],
  ['bool', 4, (r) => r.bool('f')],
  ['u64', 8, (r) => r.u64('f')],
  ['i64', 8, (r) => r.i64('f')],
  ['u64Number', 8, (r) => r.u64Number('f')],
  ['fixedOpaque(5)', 8, (r) => r.fixedOpaque(5, 'f')],
  ['skip(6)', 6, (r) => r.skip(6, 'f')],
];

test('every fixed-size read at every short length raises ERR_XDR_SHORT with field and offset', (t) => {
  for (const [name, needed, read] of shortCases) {
    for (let have = 0; have < needed; have++) {
      // A prefix word the reader consumes first, so the offset in the error is not trivially zero.
      const buf = Buffer.alloc(4 + have, 0);
      const r = new XdrReader(buf);
      r.u32('prefix');
      const err = t.throws(() => read(r), { instanceOf: XdrError }, `${name} with ${have} bytes`);
      t.is(err?.code, 'ERR_XDR_SHORT', name);
      t.is(err?.field, 'f', name);
      t.is(err?.offset, 4, name);
      t.is(err?.details.field, 'f');
    }
  }
});

test('variable-length data checks its length word against the limit and the input', (t) => {
  const declared = (len: number, have: number) => {
    const b = Buffer.alloc(8 + have);
    b.writeUInt32BE(0xdead, 0);
    b.writeUInt32BE(len, 4);
    const r = new XdrReader(b);
    r.u32('prefix');
    return r;
  };
  for (const [name, read] of [
    ['opaque', (r: XdrReader) => r.opaque(16, 'body')],
    ['string', (r: XdrReader) => r.string(16, 'body')],
    ['opaqueLength', (r: XdrReader) => r.opaqueLength(16, 'body')],
  ] as const) {
    const over = t.throws(() => read(declared(17, 100)), { instanceOf: XdrError });
    t.is(over?.code, 'ERR_XDR_LIMIT', name);
    t.is(over?.offset, 4, name);
    t.is(over?.details.limit, 16, name);
    // 0xffffffff must not wrap around into a small number.
    t.is(
      t.throws(() => read(declared(0xffff_ffff, 100)), { instanceOf: XdrError })?.code,
      'ERR_XDR_LIMIT',
      name,
    );
    // 5 bytes need 8 with pad: 7 available is short.
    const short = t.throws(() => read(declared(5, 7)), { instanceOf: XdrError });
    t.is(short?.code, 'ERR_XDR_SHORT', name);
    t.is(short?.field, 'body', name);
    t.is(short?.offset, 4, name);
    t.notThrows(() => read(declared(5, 8)), name);
  }
});

test('array counts are bounded by the limit and by what the input can hold', (t) => {
  const b = Buffer.alloc(16);
  b.writeUInt32BE(3, 0);
  t.is(new XdrReader(b).arrayLength(3, 4, 'gids'), 3);
  const over = t.throws(() => new XdrReader(b).arrayLength(2, 4, 'gids'), { instanceOf: XdrError });
  t.is(over?.code, 'ERR_XDR_LIMIT');
  t.is(over?.field, 'gids');
  b.writeUInt32BE(4, 0);
  const short = t.throws(() => new XdrReader(b).arrayLength(100, 4, 'gids'), { instanceOf: XdrError });
  t.is(short?.code, 'ERR_XDR_SHORT');
  // A hostile count never becomes a loop bound: 2^32-1 elements of 4 bytes cannot fit in 12 bytes.
  b.writeUInt32BE(0xffff_ffff, 0);
  t.is(
    t.throws(() => new XdrReader(b).arrayLength(0xffff_ffff, 4, 'gids'), { instanceOf: XdrError })?.code,
    'ERR_XDR_SHORT',
  );
});

test('a reader window outside its buffer is refused', (t) => {
  const r = new XdrReader();
  const err = t.throws(() => r.reset(Buffer.alloc(4), 0, 8), { instanceOf: XdrError });
  t.is(err?.code, 'ERR_XDR_SHORT');
  t.is(t.throws(() => r.reset(Buffer.alloc(4), 3, 2), { instanceOf: XdrError })?.code, 'ERR_XDR_SHORT');
});

test('a reader never lets a Node RangeError escape on random input', (t) => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 40 }), fc.nat({ max: 40 }), (bytes, limit) => {
      const r = new XdrReader(Buffer.from(bytes));
      try {
        while (r.remaining > 0) {
          r.u32('a');
          r.opaque(limit, 'b');
          r.u64('c');
          r.string(limit, 'd');
          r.bool('e');
        }
      } catch (err) {
        t.true(err instanceof XdrError, String(err));
      }
    }),
    { numRuns: 300 },
  );
});

test('the writer refuses values its type cannot hold', (t) => {
  const w = new XdrWriter();
  const cases: Array<[string, () => unknown]> = [
    ['u32 -1', () => w.u32(-1, 'x')],
    ['u32 2^32', () => w.u32(2 ** 32, 'x')],
    ['u32 1.5', () => w.u32(1.5, 'x')],
    ['i32 2^31', () => w.i32(2 ** 31, 'x')],
    ['u64 -1', () => w.u64(-1n, 'x')],
    ['u64 2^64', () => w.u64(1n << 64n, 'x')],
    ['i64 2^63', () => w.i64(1n << 63n, 'x')],
    ['u64Number 2^53', () => w.u64Number(2 ** 53, 'x')],
  ];
  for (const [name, fn] of cases) {
    const err = t.throws(fn, { instanceOf: XdrError }, name);
    t.is(err?.code, 'ERR_XDR_VALUE', name);
    t.is(err?.field, 'x', name);
  }
  t.is(w.length, 0, 'a refused value writes nothing');
});

test('a fixed-mode writer raises ERR_XDR_OVERFLOW instead of growing, at the right offset', (t) => {
  fc.assert(
    fc.property(sample, fc.nat({ max: 400 }), (s, room) => {
      const full = new XdrWriter();
      encodeSample(full, s);
      const target = Buffer.alloc(room + 8, 0xee);
      const w = XdrWriter.into(target, 4, 4 + room);
      if (full.length <= room) {
        encodeSample(w, s);
        t.deepEqual(w.view(), full.view());
      } else {
        const err = t.throws(() => encodeSample(w, s), { instanceOf: XdrError });
        t.is(err?.code, 'ERR_XDR_OVERFLOW');
        t.true(err!.offset <= room);
        t.is(w.buf, target, 'never reallocates');
      }
      // The bytes outside the window are untouched.
      t.true(target.subarray(0, 4).every((b) => b === 0xee));
      t.true(target.subarray(4 + room).every((b) => b === 0xee));
    }),
    { numRuns: 150 },
  );
});

test('a growable writer keeps earlier bytes when it grows, also after a reset to an offset', (t) => {
  const w = new XdrWriter(4);
  for (let i = 0; i < 100; i++) w.u32(i, 'n');
  const r = new XdrReader(w.view());
  for (let i = 0; i < 100; i++) t.is(r.u32('n'), i);
  w.reset(w.buf, 8);
  w.string('hello', 's');
  t.is(w.length, 12);
  t.is(new XdrReader(w.view()).string(16, 's'), 'hello');
});

test('reserveU32 and patchU32 fill in a length later', (t) => {
  const w = new XdrWriter();
  const at = w.reserveU32('len');
  w.string('abc');
  w.patchU32(at, w.length - 4);
  const r = new XdrReader(w.view());
  t.is(r.u32('len'), 8);
  t.is(r.string(8, 's'), 'abc');
});

test('toBuffer copies, view does not', (t) => {
  const w = new XdrWriter().u32(7);
  const view = w.view();
  const copy = w.toBuffer();
  w.reset().u32(9);
  t.is(view.readUInt32BE(0), 9);
  t.is(copy.readUInt32BE(0), 7);
});

test('lengths at and above 2^31 align without wrapping, so a huge opaque length is refused', (t) => {
  t.is(xdrAlign(0xffff_fffd), 0x1_0000_0000);
  t.is(xdrAlign(0x8000_0001), 0x8000_0004);
  const b = Buffer.alloc(12);
  b.writeUInt32BE(0xffff_fffd, 0);
  const err = t.throws(() => new XdrReader(b).opaque(0xffff_ffff, 'data'), { instanceOf: XdrError });
  t.is(err?.code, 'ERR_XDR_SHORT');
  t.is(err?.field, 'data');
});

test('a reader constructed over a window past its buffer is refused, and skip refuses a negative count', (t) => {
  t.is(t.throws(() => new XdrReader(Buffer.alloc(4), 0, 8), { instanceOf: XdrError })?.code, 'ERR_XDR_SHORT');
  const r = new XdrReader(Buffer.alloc(8), 4);
  t.is(t.throws(() => r.skip(-4, 'x'), { instanceOf: XdrError })?.code, 'ERR_XDR_VALUE');
  t.is(r.pos, 4);
});
