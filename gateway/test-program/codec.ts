/**
 * XDR of the test program's arguments and results (RFC 4506):
 *
 *   struct source_args { unsigned int count; unsigned int seed; };
 *   ECHO, SINK arguments and ECHO, SOURCE results: opaque data<>
 *   SINK result: unsigned int
 *
 * Encoders return parts for `writev` (length word, the caller's data untouched, pad) instead of copying
 * the data; decoders return views and check that the arguments are consumed exactly, so a call with
 * trailing bytes is GARBAGE_ARGS rather than silently accepted.
 */
import { XdrError, type XdrReader, xdrAlign, xdrPad } from '../../rpc/xdr.js';

const PADS = [Buffer.alloc(0), Buffer.alloc(1), Buffer.alloc(2), Buffer.alloc(3)];

/** `opaque<>` as parts: [length word, data, pad?]. The data buffer is not copied. */
export function encodeOpaqueParts(data: Buffer): Buffer[] {
  const len = Buffer.allocUnsafe(4);
  len.writeUInt32BE(data.length, 0);
  const pad = xdrPad(data.length);
  if (data.length === 0) return [len];
  return pad === 0 ? [len, data] : [len, data, PADS[pad]];
}

/** Encoded size of `opaque<>` holding `n` bytes. */
export function opaqueSize(n: number): number {
  return 4 + xdrAlign(n);
}

export function encodeSourceArgs(count: number, seed: number): Buffer {
  const b = Buffer.allocUnsafe(8);
  b.writeUInt32BE(count >>> 0, 0);
  b.writeUInt32BE(seed >>> 0, 4);
  return b;
}

function expectEnd(r: XdrReader, field: string): void {
  if (r.pos !== r.end) {
    throw new XdrError('ERR_XDR_VALUE', `${r.end - r.pos} bytes after ${field}`, field, r.pos, {
      trailing: r.end - r.pos,
    });
  }
}

/** Decodes `opaque data<max>` filling the reader's whole window; returns a view (no copy). */
export function decodeOpaque(r: XdrReader, max: number, field: string): Buffer {
  const data = r.opaque(max, field);
  expectEnd(r, field);
  return data;
}

export interface SourceArgs {
  count: number;
  seed: number;
}

export function decodeSourceArgs(r: XdrReader, out: SourceArgs): SourceArgs {
  out.count = r.u32('source_args.count');
  out.seed = r.u32('source_args.seed');
  expectEnd(r, 'source_args');
  return out;
}

export function decodeU32Result(r: XdrReader, field: string): number {
  const v = r.u32(field);
  expectEnd(r, field);
  return v;
}
