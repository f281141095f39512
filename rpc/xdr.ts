/**
 * XDR (RFC 4506) reader and writer over `Buffer`.
 *
 * Both are reusable cursors: a hot path keeps one instance and calls `reset()` per message, so decoding a
 * field allocates nothing (opaque data comes back as a view into the input, never a copy). Every bounds
 * failure is an `XdrError` naming the field and the offset; Node's own RangeError never escapes.
 */
import { setU32BE } from '../common/bytes.js';
import { XdrError } from './xdr-errors.js';

export { XdrError } from './xdr-errors.js';

/** Bytes of zero padding that follow `len` bytes of opaque data (RFC 4506 §4.10). */
export function xdrPad(len: number): number {
  return (4 - (len & 3)) & 3;
}

/** `len` rounded up to a multiple of 4: the encoded size of opaque data without its length word. */
export function xdrAlign(len: number): number {
  // Not `(len + 3) & ~3`: the bitwise form wraps to a negative or zero int32 for lengths >= 2^31 - 3,
  // which let a hostile 0xfffffffd length pass the bounds check of a reader with a large limit.
  return len + xdrPad(len);
}

const UINT32_RANGE = 0x1_0000_0000;
const U64_MAX = (1n << 64n) - 1n;
const I64_MIN = -(1n << 63n);
const I64_MAX = (1n << 63n) - 1n;

export class XdrReader {
  buf: Buffer;
  /** Offset of the next byte to decode. */
  pos: number;
  /** Offset one past the last byte this reader may decode. */
  end: number;

  constructor(buf: Buffer = Buffer.alloc(0), pos = 0, end = buf.length) {
    this.buf = buf;
    this.pos = pos;
    this.end = end;
    // Same window check as reset(): a window past the buffer would make reads return garbage.
    this.reset(buf, pos, end);
  }

  /** Points the reader at a new message without allocating. */
  reset(buf: Buffer, pos = 0, end = buf.length): this {
    if (pos < 0 || end > buf.length || pos > end) {
      throw new XdrError('ERR_XDR_SHORT', 'reader window outside its buffer', 'window', pos, {
        end,
        bufferLength: buf.length,
      });
    }
    this.buf = buf;
    this.pos = pos;
    this.end = end;
    return this;
  }

  get remaining(): number {
    return this.end - this.pos;
  }

  private need(n: number, field: string): void {
    if (n > this.end - this.pos) {
      throw new XdrError(
        'ERR_XDR_SHORT',
        `XDR input ends inside ${field}: need ${n} bytes at offset ${this.pos}, ${this.end - this.pos} left`,
        field,
        this.pos,
        { needed: n, available: this.end - this.pos },
      );
    }
  }

  // u32/i32 assemble the word from bytes: after `need`, every index is in bounds, and this is several times
  // faster than Buffer#readUInt32BE on Node 20 (which re-validates the offset on every call).
  u32(field: string): number {
    this.need(4, field);
    const b = this.buf;
    const p = this.pos;
    this.pos = p + 4;
    return ((b[p] << 24) | (b[p + 1] << 16) | (b[p + 2] << 8) | b[p + 3]) >>> 0;
  }

  i32(field: string): number {
    this.need(4, field);
    const b = this.buf;
    const p = this.pos;
    this.pos = p + 4;
    return (b[p] << 24) | (b[p + 1] << 16) | (b[p + 2] << 8) | b[p + 3];
  }

  /** An XDR `enum` (a signed 32-bit word). */
  enum(field: string): number {
    return this.i32(field);
  }

  bool(field: string): boolean {
    const at = this.pos;
    const v = this.u32(field);
    if (v > 1) {
      throw new XdrError('ERR_XDR_VALUE', `${field} is a bool but holds ${v}`, field, at, { value: v });
    }
    return v === 1;
  }

  /** Unsigned hyper as bigint: values above 2^53 are exact. */
  u64(field: string): bigint {
    this.need(8, field);
    const v = this.buf.readBigUInt64BE(this.pos);
    this.pos += 8;
    return v;
  }

  i64(field: string): bigint {
    this.need(8, field);
    const v = this.buf.readBigInt64BE(this.pos);
    this.pos += 8;
    return v;
  }

  /** Unsigned hyper that must fit a JavaScript number exactly (sizes, counters); larger is ERR_XDR_VALUE. */
  u64Number(field: string): number {
    this.need(8, field);
    const hi = this.buf.readUInt32BE(this.pos);
    const lo = this.buf.readUInt32BE(this.pos + 4);
    if (hi > 0x1f_ffff) {
      throw new XdrError('ERR_XDR_VALUE', `${field} exceeds 2^53`, field, this.pos, { high: hi });
    }
    this.pos += 8;
    return hi * UINT32_RANGE + lo;
  }

  /** Fixed-length opaque: a view of `len` bytes; the pad is skipped. */
  fixedOpaque(len: number, field: string): Buffer {
    const padded = xdrAlign(len);
    this.need(padded, field);
    const view = this.buf.subarray(this.pos, this.pos + len);
    this.pos += padded;
    return view;
  }

  /**
   * Reads the length word of variable-length opaque data, checks it against `max` and against the input,
   * and returns it; `pos` is left at the first data byte. With `skipOpaqueData` this decodes an opaque
   * without creating a view.
   */
  opaqueLength(max: number, field: string): number {
    const at = this.pos;
    const len = this.u32(field);
    if (len > max) {
      this.pos = at;
      throw new XdrError('ERR_XDR_LIMIT', `${field} length ${len} exceeds its limit ${max}`, field, at, {
        length: len,
        limit: max,
      });
    }
    if (xdrAlign(len) > this.end - this.pos) {
      this.pos = at;
      throw new XdrError(
        'ERR_XDR_SHORT',
        `XDR input ends inside ${field}: ${len} bytes declared at offset ${at}, ${this.end - at - 4} left`,
        field,
        at,
        { length: len, available: this.end - at - 4 },
      );
    }
    return len;
  }

  /** Advances over `len` data bytes and their pad (after `opaqueLength`). */
  skipOpaqueData(len: number): void {
    this.pos += xdrAlign(len);
  }

  /** Variable-length opaque<max>: a view into the input, no copy. */
  opaque(max: number, field: string): Buffer {
    const len = this.opaqueLength(max, field);
    const view = this.buf.subarray(this.pos, this.pos + len);
    this.pos += xdrAlign(len);
    return view;
  }

  /** string<max>, decoded as UTF-8. */
  string(max: number, field: string): string {
    const len = this.opaqueLength(max, field);
    const s = this.buf.toString('utf8', this.pos, this.pos + len);
    this.pos += xdrAlign(len);
    return s;
  }

  /**
   * The element count of a variable-length array, checked against `max` and against the smallest
   * possible encoding of the elements (`minElementSize` bytes each), so a hostile count can never make the
   * caller loop or allocate beyond what the input can hold.
   */
  arrayLength(max: number, minElementSize: number, field: string): number {
    const at = this.pos;
    const n = this.u32(field);
    if (n > max) {
      this.pos = at;
      throw new XdrError('ERR_XDR_LIMIT', `${field} count ${n} exceeds its limit ${max}`, field, at, {
        count: n,
        limit: max,
      });
    }
    if (minElementSize > 0 && n * minElementSize > this.end - this.pos) {
      this.pos = at;
      throw new XdrError(
        'ERR_XDR_SHORT',
        `XDR input ends inside ${field}: ${n} elements cannot fit in ${this.end - this.pos} bytes`,
        field,
        at,
        { count: n, available: this.end - this.pos },
      );
    }
    return n;
  }

  /** Optional data (`*T`): the discriminant word. */
  optional(field: string): boolean {
    return this.bool(field);
  }

  skip(n: number, field: string): void {
    if (!(n >= 0)) {
      throw new XdrError('ERR_XDR_VALUE', `cannot skip ${n} bytes of ${field}`, field, this.pos, {
        count: n,
      });
    }
    this.need(n, field);
    this.pos += n;
  }
}

/**
 * XDR writer. Growable by default (owns a buffer that doubles); with `XdrWriter.into(buf, offset, end)`
 * it encodes into a caller's fixed buffer (a registered send buffer, say) and raises ERR_XDR_OVERFLOW
 * instead of growing.
 */
export class XdrWriter {
  buf: Buffer;
  pos: number;
  /** Where this writer's output starts in `buf`. */
  start: number;
  limit: number;
  private growable: boolean;

  constructor(initialSize = 256) {
    this.buf = Buffer.allocUnsafe(initialSize);
    this.pos = 0;
    this.start = 0;
    this.limit = initialSize;
    this.growable = true;
  }

  /** A writer over a fixed window of `buf`; it never reallocates. */
  static into(buf: Buffer, offset = 0, end = buf.length): XdrWriter {
    const w = new XdrWriter(0);
    w.growable = false;
    w.reset(buf, offset, end);
    return w;
  }

  /** Starts a new message: over the same buffer, or (fixed mode) over a new window. */
  reset(buf: Buffer = this.buf, offset = 0, end = buf.length): this {
    this.buf = buf;
    this.pos = offset;
    this.start = offset;
    this.limit = end;
    return this;
  }

  /** Bytes written since the last reset. */
  get length(): number {
    return this.pos - this.start;
  }

  private ensure(n: number, field: string): void {
    if (this.pos + n <= this.limit) return;
    if (!this.growable) {
      throw new XdrError(
        'ERR_XDR_OVERFLOW',
        `XDR output full while writing ${field}: need ${n} bytes, ${this.limit - this.pos} left`,
        field,
        this.pos - this.start,
        { needed: n, available: this.limit - this.pos },
      );
    }
    let size = Math.max(this.buf.length * 2, 256);
    while (size < this.pos + n) size *= 2;
    const next = Buffer.allocUnsafe(size);
    this.buf.copy(next, 0, this.start, this.pos);
    this.pos -= this.start;
    this.start = 0;
    this.buf = next;
    this.limit = size;
  }

  u32(v: number, field = 'u32'): this {
    if (!Number.isInteger(v) || v < 0 || v > 0xffff_ffff) {
      throw new XdrError(
        'ERR_XDR_VALUE',
        `${field} ${v} is not an unsigned 32-bit integer`,
        field,
        this.length,
      );
    }
    this.ensure(4, field);
    setU32BE(this.buf, this.pos, v);
    this.pos += 4;
    return this;
  }

  i32(v: number, field = 'i32'): this {
    if (!Number.isInteger(v) || v < -0x8000_0000 || v > 0x7fff_ffff) {
      throw new XdrError('ERR_XDR_VALUE', `${field} ${v} is not a signed 32-bit integer`, field, this.length);
    }
    this.ensure(4, field);
    this.buf.writeInt32BE(v, this.pos);
    this.pos += 4;
    return this;
  }

  enum(v: number, field = 'enum'): this {
    return this.i32(v, field);
  }

  bool(v: boolean, field = 'bool'): this {
    this.ensure(4, field);
    setU32BE(this.buf, this.pos, v ? 1 : 0);
    this.pos += 4;
    return this;
  }

  u64(v: bigint | number, field = 'u64'): this {
    const big = typeof v === 'bigint' ? v : BigInt(v);
    if (big < 0n || big > U64_MAX) {
      throw new XdrError(
        'ERR_XDR_VALUE',
        `${field} ${big} is not an unsigned 64-bit integer`,
        field,
        this.length,
      );
    }
    this.ensure(8, field);
    this.buf.writeBigUInt64BE(big, this.pos);
    this.pos += 8;
    return this;
  }

  /** Unsigned hyper from a safe integer, without creating a BigInt. */
  u64Number(v: number, field = 'u64'): this {
    if (!Number.isSafeInteger(v) || v < 0) {
      throw new XdrError('ERR_XDR_VALUE', `${field} ${v} is not a safe unsigned integer`, field, this.length);
    }
    this.ensure(8, field);
    this.buf.writeUInt32BE(Math.floor(v / UINT32_RANGE), this.pos);
    this.buf.writeUInt32BE(v % UINT32_RANGE, this.pos + 4);
    this.pos += 8;
    return this;
  }

  i64(v: bigint | number, field = 'i64'): this {
    const big = typeof v === 'bigint' ? v : BigInt(v);
    if (big < I64_MIN || big > I64_MAX) {
      throw new XdrError(
        'ERR_XDR_VALUE',
        `${field} ${big} is not a signed 64-bit integer`,
        field,
        this.length,
      );
    }
    this.ensure(8, field);
    this.buf.writeBigInt64BE(big, this.pos);
    this.pos += 8;
    return this;
  }

  /** Zero bytes that align `len` bytes of data to four. */
  pad(len: number): this {
    const n = xdrPad(len);
    if (n > 0) {
      this.ensure(n, 'pad');
      this.buf.fill(0, this.pos, this.pos + n);
      this.pos += n;
    }
    return this;
  }

  /** Fixed-length opaque: the bytes and their pad, no length word. */
  fixedOpaque(data: Uint8Array, field = 'opaque'): this {
    this.ensure(xdrAlign(data.length), field);
    this.buf.set(data, this.pos);
    this.pos += data.length;
    return this.pad(data.length);
  }

  /** Variable-length opaque: length word, bytes, pad. */
  opaque(data: Uint8Array, field = 'opaque'): this {
    this.u32(data.length, field);
    return this.fixedOpaque(data, field);
  }

  string(s: string, field = 'string'): this {
    const len = Buffer.byteLength(s, 'utf8');
    this.u32(len, field);
    this.ensure(xdrAlign(len), field);
    this.buf.write(s, this.pos, len, 'utf8');
    this.pos += len;
    return this.pad(len);
  }

  /** Raw bytes already in XDR form (a forwarded procedure body): copied as they are, no pad added. */
  raw(data: Uint8Array, field = 'raw'): this {
    this.ensure(data.length, field);
    this.buf.set(data, this.pos);
    this.pos += data.length;
    return this;
  }

  /** Reserves a word to patch later (a length known only once what follows is written). */
  reserveU32(field = 'reserved'): number {
    this.ensure(4, field);
    const at = this.pos;
    this.pos += 4;
    return at;
  }

  patchU32(at: number, v: number): this {
    this.buf.writeUInt32BE(v >>> 0, at);
    return this;
  }

  /** A view of what was written since the last reset (no copy; valid until the next write or reset). */
  view(): Buffer {
    return this.buf.subarray(this.start, this.pos);
  }

  /** A copy of what was written, safe to keep after the writer is reused. */
  toBuffer(): Buffer {
    return Buffer.from(this.view());
  }
}
