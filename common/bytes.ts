/**
 * Words read and written by index, for the per-message paths (record marks, XIDs, transport and FPDU
 * headers, MPA lengths and CRCs), and copies between DataViews (`copyBytes`).
 *
 * Why not `buf.readUInt32BE` / `buf.writeUInt32BE`: each is a method load (on Node 20, V8 11's concurrently
 * compiled code leaves it a generic `LoadIC`), and the write validates its value and offset through
 * Node's validators on every call. Counted by callgrind over NULL calls through the whole chain
 * (`bench/chain-loop.ts`), the Buffer methods and their validation were about 6 % of the
 * instructions (docs/performance.md, "Counting instructions per call"). Node's own methods are plain
 * JavaScript doing these same byte accesses, so on Node 24 this is no slower (counted too).
 *
 * Like the methods, each throws a RangeError (code ERR_OUT_OF_RANGE) for a word that does not lie in the
 * buffer, rather than let a typed array ignore the store or read `undefined`. The value written is
 * taken modulo 2^32 (callers pass XIDs, lengths and keys that already are uint32).
 */

function outOfRange(at: number, length: number, bits = 32): RangeError {
  const e = new RangeError(`a ${bits}-bit word at ${at} does not lie in a buffer of ${length} bytes`);
  (e as RangeError & { code: string }).code = 'ERR_OUT_OF_RANGE';
  return e;
}

/** The big-endian uint32 at `at`. */
export function getU32BE(buf: Uint8Array, at: number): number {
  if (!(at >= 0 && at + 4 <= buf.length)) throw outOfRange(at, buf.length);
  return ((buf[at] << 24) | (buf[at + 1] << 16) | (buf[at + 2] << 8) | buf[at + 3]) >>> 0;
}

/** Writes `v` (mod 2^32) big-endian at `at`. */
export function setU32BE(buf: Uint8Array, at: number, v: number): void {
  if (!(at >= 0 && at + 4 <= buf.length)) throw outOfRange(at, buf.length);
  buf[at] = v >>> 24;
  buf[at + 1] = v >>> 16;
  buf[at + 2] = v >>> 8;
  buf[at + 3] = v;
}

/** The little-endian uint32 at `at` (the MPA CRC's byte order, RFC 5044 §4.4). */
export function getU32LE(buf: Uint8Array, at: number): number {
  if (!(at >= 0 && at + 4 <= buf.length)) throw outOfRange(at, buf.length);
  return (buf[at] | (buf[at + 1] << 8) | (buf[at + 2] << 16) | (buf[at + 3] << 24)) >>> 0;
}

/** Writes `v` (mod 2^32) little-endian at `at`. */
export function setU32LE(buf: Uint8Array, at: number, v: number): void {
  if (!(at >= 0 && at + 4 <= buf.length)) throw outOfRange(at, buf.length);
  buf[at] = v;
  buf[at + 1] = v >>> 8;
  buf[at + 2] = v >>> 16;
  buf[at + 3] = v >>> 24;
}

/** Writes `v` (mod 2^16) big-endian at `at` (an MPA length, RFC 5044 §4.1). */
export function setU16BE(buf: Uint8Array, at: number, v: number): void {
  if (!(at >= 0 && at + 2 <= buf.length)) throw outOfRange(at, buf.length, 16);
  buf[at] = v >>> 8;
  buf[at + 1] = v;
}

/** A DataView over exactly the bytes of `buf`: its byte offsets are `buf`'s indexes. */
export function viewOf(buf: Uint8Array): DataView {
  return new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
}

/**
 * The largest copy `copyBytes` makes word by word. Below it a copy from an offset by `Buffer.copy` costs
 * ~55–90 ns whatever the size on Node 24, which calls into C++, and ~100–200 ns on Node 20, which makes a
 * view of the source; the word loop takes ~20 ns for 40 bytes and ~90 ns for 128, and above that a
 * memmove wins (by the clock, a loop of copies; docs/performance.md, "Counting instructions per call").
 */
export const WORD_COPY_MAX = 128;

/**
 * Copies `n` bytes from `src` at `from` to `dst` at `to`, through DataViews that the caller keeps with its
 * buffers (a view per copy would cost what the word loop saves): up to `WORD_COPY_MAX` bytes four at a
 * time, larger copies by one memmove (`TypedArray.set` over views of the two ranges, whose making is small
 * beside the bytes). For the copies of the soft provider's per-message paths: an FPDU's header, a payload
 * placed into its Receive buffer or tagged sink, a small payload packed into a send slab. A copy that does
 * not fit either view throws a RangeError (ERR_OUT_OF_RANGE) before anything is written, where
 * `Buffer.copy` would silently copy less; `src` and `dst` must not overlap.
 */
export function copyBytes(src: DataView, from: number, dst: DataView, to: number, n: number): void {
  if (!(n >= 0 && from >= 0 && to >= 0 && from + n <= src.byteLength && to + n <= dst.byteLength)) {
    const e = new RangeError(
      `a copy of ${n} bytes from ${from} of ${src.byteLength} to ${to} of ${dst.byteLength} does not fit`,
    );
    (e as RangeError & { code: string }).code = 'ERR_OUT_OF_RANGE';
    throw e;
  }
  if (n > WORD_COPY_MAX) {
    new Uint8Array(dst.buffer, dst.byteOffset + to, n).set(
      new Uint8Array(src.buffer, src.byteOffset + from, n),
    );
    return;
  }
  const words = from + (n & ~3);
  let s = from;
  let d = to;
  while (s < words) {
    // Little-endian both ways: the bytes land in their order, without a byte swap.
    dst.setInt32(d, src.getInt32(s, true), true);
    s += 4;
    d += 4;
  }
  const end = from + n;
  while (s < end) dst.setUint8(d++, src.getUint8(s++));
}
