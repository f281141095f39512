/**
 * ONC RPC record marking over TCP (RFC 5531 §11): each record (one RPC message) is one or more fragments,
 * each preceded by a 4-byte big-endian header whose high bit marks the last fragment and whose low 31 bits
 * are the fragment length.
 *
 * `RecordDecoder` turns arbitrary TCP chunks into whole records:
 * - a single-fragment record that lies inside one chunk is delivered as a view of that chunk (zero copy);
 * - any other record is copied once into one buffer; when the first fragment is also the last, that buffer
 *   is allocated with the exact size from the header; a multi-fragment record grows its buffer only when
 *   a fragment header announces more than it holds (geometrically, never past the limit);
 * - it keeps no reference to a chunk after `push` returns (except inside a delivered zero-copy record), so
 *   a caller may reuse its read buffer (`net.Socket` `onread`) once the handler has consumed the record;
 * - limits are enforced when a fragment header arrives: a record whose announced length exceeds the limit
 *   is rejected before any of its bytes are buffered, so a decoder never holds more than `maxRecordSize`;
 * - every buffer it takes from `allocate` is either delivered in a record or handed to `release` (outgrown,
 *   skipped, dropped when the stream fails, or by `dispose` when the owner gives up on the stream), so a
 *   pool gets back every buffer of a record that never completes.
 *
 * The encoder frames a message without copying it: it returns the header(s) and views of the body, ready
 * for `writev` (`socket.cork()` + writes, or `_writev`).
 */
import { getU32BE, setU32BE } from '../common/bytes.js';
import { ConfigError, UsageError } from '../common/errors.js';
import { RecordMarkingError } from './record-errors.js';

export { RecordMarkingError } from './record-errors.js';

/** High bit of a fragment header: this fragment ends the record. */
export const LAST_FRAGMENT = 0x8000_0000;
/** The largest length a fragment header can carry (31 bits). */
export const MAX_FRAGMENT_LENGTH = 0x7fff_ffff;
/**
 * Default record limit: a 4 MiB NFS READ/WRITE payload (the largest rsize/wsize Linux negotiates) plus
 * 64 KiB for the RPC and NFS headers around it.
 */
export const DEFAULT_MAX_RECORD_SIZE = 4 * 1024 * 1024 + 64 * 1024;
/**
 * Default fragment limit per record. Real senders use one fragment (Linux, libtirpc, ntirpc, libnfs) or a few
 * of their send-buffer size; 8192 admits 4 MiB in 512-byte fragments while bounding the work an endless
 * run of zero-length fragments can cause.
 */
export const DEFAULT_MAX_FRAGMENTS = 8192;

export interface RecordDecoderOptions {
  /** Largest record accepted, in bytes (1 .. 2^31-1). Default `DEFAULT_MAX_RECORD_SIZE`. */
  maxRecordSize?: number;
  /** Largest number of fragments in one record (>= 1). Default `DEFAULT_MAX_FRAGMENTS`. */
  maxFragments?: number;
  /**
   * Allocates the buffer a record is assembled in (e.g. from a pool of registered memory); it must return
   * at least `size` bytes. Default `Buffer.allocUnsafe`.
   */
  allocate?: (size: number) => Buffer;
  /**
   * Called with a buffer from `allocate` that the decoder dropped without delivering it (a multi-fragment
   * record outgrew it, the record was skipped, the stream failed, or `dispose`): nothing references it
   * any more, so a pool may take it back.
   */
  release?: (buf: Buffer) => void;
  /**
   * Deliver a single-fragment record that lies inside one chunk as a view of the chunk (default true).
   * False copies every record into a buffer from `allocate`: for callers that reuse their read buffer
   * (`net.Socket` `onread`) and keep records after the handler returns.
   */
  zeroCopy?: boolean;
  /**
   * With `zeroCopy: false`, a single-fragment record of at most this many bytes that lies inside one chunk
   * is still delivered as a view of the chunk, lent: the handler is told (`lent` true) and must be done with
   * it, or copy it, before it returns. Default 0 (nothing lent). For a caller that passes small records on
   * synchronously and copies only what it must keep (the responder's upstream link, docs/performance.md).
   */
  lendMax?: number;
  /**
   * Instead of stopping the stream, skip a record larger than `maxRecordSize`: its bytes are read and
   * dropped (nothing of it is kept but its first two words), and once its last byte has passed this is
   * called with the first word — an RPC message's XID — or -1 for a record shorter than 4 bytes, the
   * size its fragment headers announced, and the second word — its `msg_type`, CALL 0 or REPLY 1 — or -1
   * for a record shorter than 8 bytes. For a peer whose framing is sound but one of whose messages is too large
   * to carry on (the responder's upstream server): that one message fails, not the whole connection.
   */
  onOversize?: (head: number, announced: number, msgType: number) => void;
}

/**
 * Receives each complete record. A zero-copy record is a view of the chunk given to `push`: if the caller
 * reuses its read buffers, the handler must finish with (or copy) the record before returning. `lent` is
 * true for a record delivered as a view under `lendMax` while `zeroCopy` is false.
 */
export type RecordHandler = (record: Buffer, lent: boolean) => void;

function checkLimit(name: string, value: number, min: number, max: number): number {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError('ERR_RM_CONFIG', `${name} must be an integer in ${min}..${max}, got ${value}`, {
      key: name,
      value,
    });
  }
  return value;
}

export class RecordDecoder {
  readonly maxRecordSize: number;
  readonly maxFragments: number;
  /** Records delivered since construction. */
  records = 0;
  /** Stream bytes consumed since construction (positions in errors are counted from here). */
  streamOffset = 0;

  private readonly onRecord: RecordHandler;
  private readonly allocate: (size: number) => Buffer;
  private readonly release: ((buf: Buffer) => void) | undefined;
  private readonly zeroCopy: boolean;
  private readonly lendMax: number;
  /** Header bytes of the current fragment header received so far (0 while reading fragment data). */
  private headerHave = 0;
  private headerValue = 0;
  /** True between a fragment header and the end of its data. */
  private inFragment = false;
  private fragmentLeft = 0;
  private fragmentIsLast = false;
  /** Fragments of the current record seen so far. */
  private fragments = 0;
  /** Bytes the fragment headers of the current record have announced so far. */
  private announced = 0;
  private assembly: Buffer | undefined = undefined;
  private assemblyUsed = 0;
  private failure: RecordMarkingError | undefined = undefined;
  private ended = false;
  private readonly onOversize: ((head: number, announced: number, msgType: number) => void) | undefined;
  /** The current record is over the limit and being skipped (`onOversize`). */
  private skipping = false;
  /** The skipped record's first two words (big-endian), from `skipHeadHave` bytes so far (at most 8). */
  private skipHead = 0;
  private skipSecond = 0;
  private skipHeadHave = 0;

  constructor(onRecord: RecordHandler, options: RecordDecoderOptions = {}) {
    this.onRecord = onRecord;
    this.maxRecordSize = checkLimit(
      'maxRecordSize',
      options.maxRecordSize ?? DEFAULT_MAX_RECORD_SIZE,
      1,
      MAX_FRAGMENT_LENGTH,
    );
    this.maxFragments = checkLimit(
      'maxFragments',
      options.maxFragments ?? DEFAULT_MAX_FRAGMENTS,
      1,
      0xffff_ffff,
    );
    this.allocate = options.allocate ?? Buffer.allocUnsafe;
    this.release = options.release;
    this.zeroCopy = options.zeroCopy ?? true;
    this.lendMax =
      options.zeroCopy === false ? checkLimit('lendMax', options.lendMax ?? 0, 0, MAX_FRAGMENT_LENGTH) : 0;
    this.onOversize = options.onOversize;
  }

  /** Bytes of the current, incomplete record copied and held by the decoder. */
  get bufferedBytes(): number {
    return this.assemblyUsed;
  }

  /** Bytes allocated for the current, incomplete record (never more than `maxRecordSize`). */
  get reservedBytes(): number {
    return this.assembly ? Math.min(this.assembly.length, this.maxRecordSize) : 0;
  }

  /** True when the stream is at a record boundary (a clean place for EOF). */
  get atRecordBoundary(): boolean {
    return !this.inFragment && this.headerHave === 0 && this.fragments === 0;
  }

  /** The error that stopped this decoder, if any. */
  get error(): RecordMarkingError | undefined {
    return this.failure;
  }

  /** Feeds the next chunk of the byte stream; calls the handler for every record it completes. */
  push(chunk: Buffer): void {
    if (this.failure || this.ended) this.failAgain();
    const n = chunk.length;
    let pos = 0;
    while (pos < n) {
      if (!this.inFragment) {
        let word: number;
        if (this.headerHave === 0 && n - pos >= 4) {
          word = getU32BE(chunk, pos);
          pos += 4;
        } else {
          this.headerValue = this.headerValue * 256 + chunk[pos];
          pos++;
          if (++this.headerHave < 4) continue;
          word = this.headerValue;
          this.headerValue = 0;
          this.headerHave = 0;
        }
        const len = word & MAX_FRAGMENT_LENGTH;
        const last = word >= LAST_FRAGMENT;
        this.startFragment(len, last, this.streamOffset + pos - 4);
        // Zero copy: a whole single-fragment record inside this chunk is handed over as a view.
        if (last && this.fragments === 1 && n - pos >= len && !this.skipping) {
          this.finishRecord();
          if (this.zeroCopy || len <= this.lendMax) {
            this.deliver(chunk.subarray(pos, pos + len), pos + len, !this.zeroCopy);
          } else {
            this.deliver(this.copyOut(chunk, pos, len), pos + len, false);
          }
          pos += len;
          continue;
        }
        if (len === 0) {
          this.endFragment();
          continue;
        }
        if (!this.skipping) this.ensureCapacity(last);
        continue;
      }
      const take = Math.min(this.fragmentLeft, n - pos);
      if (this.skipping) {
        for (let k = 0; k < take && this.skipHeadHave < 8; k++) this.keepHeadByte(chunk[pos + k]);
      } else {
        chunk.copy(this.assembly!, this.assemblyUsed, pos, pos + take);
        this.assemblyUsed += take;
      }
      this.fragmentLeft -= take;
      pos += take;
      if (this.fragmentLeft === 0) this.endFragment(pos);
    }
    this.streamOffset += n;
  }

  /**
   * Declares the end of the stream (the peer closed). Throws `ERR_RM_TRUNCATED` unless the stream stopped
   * exactly at a record boundary. The decoder cannot be used afterwards.
   */
  end(): void {
    if (this.failure || this.ended) this.failAgain();
    if (this.atRecordBoundary) {
      this.ended = true;
      return;
    }
    let reason: string;
    if (this.headerHave > 0) {
      reason = `stream ended after ${this.headerHave} of the 4 bytes of a fragment header`;
    } else if (this.inFragment) {
      reason = `stream ended with ${this.fragmentLeft} bytes of a fragment still to come`;
    } else {
      reason = `stream ended after fragment ${this.fragments} of a record, which was not the last`;
    }
    throw this.fail('ERR_RM_TRUNCATED', reason, {
      streamOffset: this.streamOffset,
      bufferedBytes: this.assemblyUsed,
      missingBytes: this.inFragment ? this.fragmentLeft : undefined,
    });
  }

  /**
   * Gives up on the stream (its socket closed, perhaps mid-record): the partly assembled record's buffer
   * goes to `release`, and the decoder cannot be used afterwards. Idempotent, and harmless after `end`
   * or a failure.
   */
  dispose(): void {
    this.ended = true;
    this.dropAssembly();
  }

  private startFragment(len: number, last: boolean, headerAt: number): void {
    const fragments = ++this.fragments;
    if (fragments > this.maxFragments) {
      throw this.fail('ERR_RM_TOO_MANY_FRAGMENTS', `record has more than ${this.maxFragments} fragments`, {
        limit: this.maxFragments,
        streamOffset: headerAt,
      });
    }
    const total = this.announced + len;
    if (total > this.maxRecordSize && !this.skipping) {
      if (this.onOversize === undefined) {
        throw this.fail(
          'ERR_RM_RECORD_TOO_LARGE',
          `fragment header announces ${len} bytes, making a record of ${total} bytes over the limit of ${this.maxRecordSize}`,
          { fragmentLength: len, announced: total, limit: this.maxRecordSize, streamOffset: headerAt },
        );
      }
      this.startSkipping();
    }
    if (last && total === 0) {
      throw this.fail('ERR_RM_EMPTY_RECORD', 'a record of zero bytes (no RPC message is empty)', {
        fragments,
        streamOffset: headerAt,
      });
    }
    this.announced = total;
    this.fragmentLeft = len;
    this.fragmentIsLast = last;
    this.inFragment = true;
  }

  /**
   * Makes room for the fragment just announced. When the record's size is known (this is its last
   * fragment) the buffer gets exactly that size; otherwise it grows geometrically up to the limit.
   */
  private ensureCapacity(last: boolean): void {
    const needed = this.announced;
    const have = this.assembly ? this.assembly.length : 0;
    if (needed <= have) return;
    const size = last ? needed : Math.min(this.maxRecordSize, Math.max(needed, have * 2));
    const next = this.allocateAtLeast(size);
    const old = this.assembly;
    if (old && this.assemblyUsed > 0) old.copy(next, 0, 0, this.assemblyUsed);
    this.assembly = next;
    if (old && this.release) this.release(old);
  }

  private allocateAtLeast(size: number): Buffer {
    const buf = this.allocate(size);
    if (buf.length < size) {
      throw new UsageError(
        'ERR_RM_ALLOCATE',
        `RecordDecoder allocate(${size}) returned ${buf.length} bytes`,
        {
          size,
          returned: buf.length,
        },
      );
    }
    return buf;
  }

  /** A whole record inside `chunk`, copied into a buffer of its own (`zeroCopy: false`). */
  private copyOut(chunk: Buffer, pos: number, len: number): Buffer {
    const out = this.allocateAtLeast(len);
    chunk.copy(out, 0, pos, pos + len);
    return out.length === len ? out : out.subarray(0, len);
  }

  /** The record outgrew the limit (`onOversize`): keep its first word, drop what was assembled of it. */
  private startSkipping(): void {
    this.skipping = true;
    this.skipHead = 0;
    this.skipSecond = 0;
    this.skipHeadHave = 0;
    const assembled = this.assembly;
    if (assembled !== undefined) {
      const keep = Math.min(8, this.assemblyUsed);
      for (let i = 0; i < keep; i++) this.keepHeadByte(assembled[i]);
    }
    this.dropAssembly();
  }

  private keepHeadByte(b: number): void {
    if (this.skipHeadHave < 4) this.skipHead = this.skipHead * 256 + b;
    else this.skipSecond = this.skipSecond * 256 + b;
    this.skipHeadHave++;
  }

  private endFragment(pos = 0): void {
    this.inFragment = false;
    if (!this.fragmentIsLast) return;
    if (this.skipping) {
      const head = this.skipHeadHave >= 4 ? this.skipHead : -1;
      const msgType = this.skipHeadHave === 8 ? this.skipSecond : -1;
      const announced = this.announced;
      this.skipping = false;
      this.finishRecord();
      (this.onOversize as (head: number, announced: number, msgType: number) => void)(
        head,
        announced,
        msgType,
      );
      return;
    }
    const record =
      this.assembly!.length === this.assemblyUsed
        ? this.assembly!
        : this.assembly!.subarray(0, this.assemblyUsed);
    this.finishRecord();
    this.deliver(record, pos, false);
  }

  private finishRecord(): void {
    this.inFragment = false;
    this.fragments = 0;
    this.announced = 0;
    this.assembly = undefined;
    this.assemblyUsed = 0;
  }

  private deliver(record: Buffer, pos: number, lent: boolean): void {
    this.records++;
    try {
      this.onRecord(record, lent);
    } catch (err) {
      this.failure = new RecordMarkingError(
        'ERR_RM_FAILED',
        'the record handler threw; the rest of the chunk was not decoded',
        { streamOffset: this.streamOffset + pos },
        { cause: err },
      );
      throw err;
    }
  }

  private fail(code: string, reason: string, details: Record<string, unknown>): RecordMarkingError {
    const err = new RecordMarkingError(code, reason, details);
    this.failure = err;
    this.dropAssembly();
    return err;
  }

  /** The incomplete record will never be delivered: its buffer goes back (see `release`). */
  private dropAssembly(): void {
    const assembled = this.assembly;
    this.assembly = undefined;
    this.assemblyUsed = 0;
    if (assembled !== undefined) this.release?.(assembled);
  }

  private failAgain(): never {
    const why = this.failure ? this.failure.reason : 'the stream has ended';
    throw new RecordMarkingError(
      'ERR_RM_FAILED',
      `decoder already stopped: ${why}`,
      { streamOffset: this.streamOffset },
      { cause: this.failure },
    );
  }
}

/** Writes one fragment header at `offset` of `target`. */
export function writeRecordMark(target: Buffer, offset: number, length: number, last: boolean): void {
  if (!Number.isInteger(length) || length < 0 || length > MAX_FRAGMENT_LENGTH) {
    throw new RecordMarkingError('ERR_RM_FRAGMENT_SIZE', `fragment length ${length} is not in 0..2^31-1`, {
      length,
    });
  }
  // `0x80000000 | len` alone is a negative int32 in JavaScript; `>>> 0` makes it the unsigned word.
  setU32BE(target, offset, last ? (LAST_FRAGMENT | length) >>> 0 : length);
}

/** A 4-byte header for a single-fragment record of `length` bytes. */
export function recordMark(length: number, last = true): Buffer {
  const b = Buffer.allocUnsafe(4);
  writeRecordMark(b, 0, length, last);
  return b;
}

/**
 * Frames one record for `writev`: returns [header, body...] where the body buffers are the caller's (or
 * views of them) — nothing of the body is copied. A body longer than `maxFragmentSize` becomes several
 * fragments; their headers share one small allocation.
 */
export function frameRecord(
  body: Buffer | readonly Buffer[],
  maxFragmentSize = MAX_FRAGMENT_LENGTH,
): Buffer[] {
  if (!Number.isInteger(maxFragmentSize) || maxFragmentSize < 1 || maxFragmentSize > MAX_FRAGMENT_LENGTH) {
    throw new RecordMarkingError(
      'ERR_RM_FRAGMENT_SIZE',
      `maximum fragment size ${maxFragmentSize} is not in 1..2^31-1`,
      { maxFragmentSize },
    );
  }
  const parts: readonly Buffer[] = Buffer.isBuffer(body) ? [body] : body;
  let total = 0;
  for (const p of parts) total += p.length;
  if (total === 0) {
    throw new RecordMarkingError('ERR_RM_EMPTY_RECORD', 'cannot frame an empty record', {});
  }
  const count = Math.ceil(total / maxFragmentSize);
  const headers = Buffer.allocUnsafe(4 * count);
  if (count === 1) {
    writeRecordMark(headers, 0, total, true);
    return [headers, ...parts];
  }
  const out: Buffer[] = [];
  let partIndex = 0;
  let partPos = 0;
  let left = total;
  for (let f = 0; f < count; f++) {
    const fragLen = Math.min(maxFragmentSize, left);
    left -= fragLen;
    writeRecordMark(headers, 4 * f, fragLen, left === 0);
    out.push(headers.subarray(4 * f, 4 * f + 4));
    let need = fragLen;
    while (need > 0) {
      const p = parts[partIndex];
      const take = Math.min(need, p.length - partPos);
      if (take > 0) out.push(partPos === 0 && take === p.length ? p : p.subarray(partPos, partPos + take));
      partPos += take;
      need -= take;
      if (partPos === p.length) {
        partIndex++;
        partPos = 0;
      }
    }
  }
  return out;
}
