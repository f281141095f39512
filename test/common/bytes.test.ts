/**
 * The big-endian word helpers of the per-message paths (common/bytes.ts): the same words as Buffer's
 * methods, and the same refusal of a word that does not lie in the buffer; the word-wise copy between
 * DataViews (the soft provider's small copies): what `Buffer.copy` copies, and nothing outside either view.
 */
import test from 'ava';
import fc from 'fast-check';
import {
  copyBytes,
  getU32BE,
  getU32LE,
  setU16BE,
  setU32BE,
  setU32LE,
  viewOf,
  WORD_COPY_MAX,
} from '../../common/bytes.js';

test("they read and write what Buffer's readUInt32BE/LE, writeUInt32BE/LE and writeUInt16BE do, at any position in any buffer", (t) => {
  fc.assert(
    fc.property(
      fc.uint8Array({ minLength: 4, maxLength: 64 }),
      fc.nat(),
      fc.nat({ max: 0xffff_ffff }),
      (bytes, pick, v) => {
        const at = pick % (bytes.length - 3);
        const ours = Buffer.from(bytes);
        const theirs = Buffer.from(bytes);
        if (getU32BE(ours, at) !== theirs.readUInt32BE(at)) return false;
        setU32BE(ours, at, v);
        theirs.writeUInt32BE(v, at);
        return ours.equals(theirs) && getU32BE(ours, at) === v;
      },
    ),
  );
  t.pass();
});

test('big-endian, and a value is written modulo 2^32', (t) => {
  const b = Buffer.alloc(8);
  setU32BE(b, 2, 0x01020304);
  t.deepEqual([...b], [0, 0, 1, 2, 3, 4, 0, 0]);
  setU32BE(b, 0, 0x1_0000_0005); // taken modulo 2^32, as writeUInt32BE would refuse it
  t.is(getU32BE(b, 0), 5);
  setU32BE(b, 4, -1);
  t.is(getU32BE(b, 4), 0xffff_ffff);
  setU32LE(b, 0, 0x01020304);
  t.deepEqual([...b.subarray(0, 4)], [4, 3, 2, 1]);
  setU16BE(b, 6, 0x1_0203);
  t.deepEqual([...b.subarray(6)], [2, 3]);
});

test('a word outside the buffer is refused with ERR_OUT_OF_RANGE, and nothing is written', (t) => {
  const b = Buffer.from([1, 2, 3, 4, 5, 6]);
  for (const at of [-1, 3, 6, 100, Number.NaN]) {
    for (const f of [
      () => getU32BE(b, at),
      () => setU32BE(b, at, 0),
      () => getU32LE(b, at),
      () => setU32LE(b, at, 0),
    ])
      t.throws(f, { instanceOf: RangeError, code: 'ERR_OUT_OF_RANGE' }, String(at));
  }
  for (const at of [-1, 5, Number.NaN])
    t.throws(() => setU16BE(b, at, 0), { code: 'ERR_OUT_OF_RANGE', message: /16-bit/ });
  t.deepEqual([...b], [1, 2, 3, 4, 5, 6]);
  t.throws(
    () => getU32BE(b.subarray(2, 5), 0),
    { code: 'ERR_OUT_OF_RANGE' },
    'a view: its own length counts',
  );
  t.is(getU32BE(b.subarray(2), 0), 0x03040506);
});

test('copyBytes copies what Buffer.copy copies, word by word up to WORD_COPY_MAX and by memmove above, between views of any offset', (t) => {
  fc.assert(
    fc.property(
      fc.uint8Array({ minLength: 0, maxLength: 3 * WORD_COPY_MAX }),
      fc.nat({ max: 17 }),
      fc.nat({ max: 17 }),
      fc.nat(),
      fc.nat(),
      (bytes, srcOffset, dstOffset, pickFrom, pickN) => {
        // Views that start inside larger stores, as the QP's read chunks and registered slots do.
        const src = Buffer.alloc(bytes.length + srcOffset + 3);
        src.set(bytes, srcOffset);
        const srcView = src.subarray(srcOffset, srcOffset + bytes.length);
        const from = bytes.length === 0 ? 0 : pickFrom % bytes.length;
        const n = Math.min(pickN % (3 * WORD_COPY_MAX), bytes.length - from);
        const store = Buffer.alloc(n + dstOffset + 9, 0xee);
        const dst = store.subarray(dstOffset, dstOffset + n + 5);
        const want = Buffer.from(store);
        srcView.copy(want.subarray(dstOffset, dstOffset + n + 5), 3, from, from + n);
        copyBytes(viewOf(srcView), from, viewOf(dst), 3, n);
        return store.equals(want);
      },
    ),
  );
  t.pass();
});

test('copyBytes refuses a copy that does not fit either view with ERR_OUT_OF_RANGE, and writes nothing', (t) => {
  const store = Buffer.from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
  const src = viewOf(store.subarray(0, 8));
  const dst = viewOf(store.subarray(4, 10)); // six bytes, the store's 5th to 10th
  for (const [from, to, n] of [
    [0, 0, 7], // longer than dst
    [4, 0, 5], // past src's end (its view, not its store)
    [-1, 0, 2],
    [0, -1, 2],
    [0, 0, -1],
    [Number.NaN, 0, 2],
  ])
    t.throws(() => copyBytes(src, from, dst, to, n), { instanceOf: RangeError, code: 'ERR_OUT_OF_RANGE' });
  t.deepEqual([...store], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
  copyBytes(src, 0, dst, 1, 5);
  t.deepEqual([...store], [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 11, 12], "the view's own offsets count");
  // A copy above WORD_COPY_MAX (the memmove) is refused the same way, one byte too long for either view.
  const big = WORD_COPY_MAX + 10;
  const from = Buffer.alloc(big + 8, 0xab);
  const into = Buffer.alloc(big + 8, 0xcd);
  t.throws(() => copyBytes(viewOf(from), 0, viewOf(into.subarray(0, big)), 1, big), {
    code: 'ERR_OUT_OF_RANGE',
  });
  t.throws(() => copyBytes(viewOf(from.subarray(0, big)), 1, viewOf(into), 0, big), {
    code: 'ERR_OUT_OF_RANGE',
  });
  t.true(
    into.every((b) => b === 0xcd),
    'nothing written',
  );
  copyBytes(viewOf(from), 0, viewOf(into), 8, big);
  t.true(into.subarray(8).every((b) => b === 0xab) && into.subarray(0, 8).every((b) => b === 0xcd));
});
