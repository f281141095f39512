/**
 * Chunk marshalling as pure functions (RFC 8166 §3.4–3.5, seed 004 §3.3): which form a Call or a Reply
 * takes on the wire, how DDP-eligible data items leave the Payload stream, and how a receiver puts them
 * back. Nothing here touches verbs or registrations, so every rule is unit-tested on its own.
 *
 * A DDP-eligible item is described by the caller as `{ offset, length }`: the item's data bytes within the
 * XDR-encoded RPC message. The XDR length word before them stays inline and the XDR pad after them
 * (`xdrPad(length)` bytes) is never carried in a chunk (RFC 8166 §3.4.5 and §3.5.3: "the XDR roundup is
 * not included"); the receiver of a chunk re-creates the pad as zeros.
 */

import { xdrPad } from '../../rpc/xdr.js';
import { chunkHeaderBound, type RdmaSegment, type ReadSegment } from '../protocol/index.js';
import { callTooLarge, TransportError } from './errors.js';

export interface DdpItem {
  /** Offset of the item's first data byte in the message (after its XDR length word). */
  offset: number;
  /** Data bytes, without the XDR pad. */
  length: number;
}

/** Checks that items are in order, 4-byte aligned, do not overlap and lie (pad included) in the message. */
export function checkItems(messageLength: number, items: readonly DdpItem[]): void {
  let end = 0;
  for (let i = 0; i < items.length; i++) {
    const it = items[i];
    if (
      !Number.isInteger(it.offset) ||
      !Number.isInteger(it.length) ||
      it.length < 0 ||
      it.offset < end ||
      it.offset % 4 !== 0 ||
      it.offset + it.length + xdrPad(it.length) > messageLength
    ) {
      throw new TransportError(
        'ERR_TRANSPORT_DDP_ITEM',
        `DDP item ${i} is not a valid XDR data item`,
        false,
        {
          index: i,
          offset: it.offset,
          length: it.length,
          messageLength,
        },
      );
    }
    end = it.offset + it.length + xdrPad(it.length);
  }
}

/** Bytes an item takes in the Payload stream besides its length word: the data and its pad. */
export function itemSpan(length: number): number {
  return length + xdrPad(length);
}

/** Length of the message once `items` (data + pad) are removed. */
export function reducedLength(messageLength: number, items: readonly DdpItem[]): number {
  let n = messageLength;
  for (let i = 0; i < items.length; i++) n -= itemSpan(items[i].length);
  return n;
}

/**
 * Copies `message` without the data and pad of `items` into `dst` at `dstOffset` (the reduced Payload
 * stream of RFC 8166 §3.4.5). Returns the number of bytes written.
 */
export function copyReduced(
  message: Buffer,
  items: readonly DdpItem[],
  dst: Buffer,
  dstOffset: number,
): number {
  let src = 0;
  let out = dstOffset;
  for (let i = 0; i < items.length; i++) {
    const it = items[i];
    out += message.copy(dst, out, src, it.offset);
    src = it.offset + itemSpan(it.length);
  }
  out += message.copy(dst, out, src, message.length);
  return out - dstOffset;
}

export type CallMode = 'inline' | 'read' | 'pzrc';

export interface CallPlanInput {
  version: 1 | 2;
  messageLength: number;
  items: readonly DdpItem[];
  /** The largest message the peer can receive (its Receive buffer size / inline threshold). */
  sendLimit: number;
  /** Write chunks the call carries (one segment each). */
  writeChunks: number;
  /** Whether the call carries a Reply chunk (one segment). */
  replyChunk: boolean;
  /** False after the peer answered RDMA2_ERR_READ_CHUNKS: DDP arguments then go in a Position-Zero chunk. */
  readChunksAllowed: boolean;
}

export interface CallPlan {
  mode: CallMode;
  /** Bytes of RPC message sent inline (0 for a Position-Zero Read chunk). */
  inlineLength: number;
}

/**
 * Chooses how a Call travels (RFC 8166 §3.5.1–3.5.3, Linux `rpcrdma_marshal_req` does the same):
 * inline when header + message fit the peer's receive buffer; else the DDP-eligible items in Read chunks
 * at their positions when the reduced message then fits; else a Long Call (RDMA_NOMSG with the whole
 * message in a Position-Zero Read chunk).
 */
export function planCall(p: CallPlanInput): CallPlan {
  const writes = p.writeChunks;
  const reply = p.replyChunk ? 1 : -1;
  const bare = chunkHeaderBound(p.version, 0, writes, writes, reply);
  if (bare + p.messageLength <= p.sendLimit) return { mode: 'inline', inlineLength: p.messageLength };
  if (p.items.length > 0 && p.readChunksAllowed) {
    const withReads = chunkHeaderBound(p.version, p.items.length, writes, writes, reply);
    const reduced = reducedLength(p.messageLength, p.items);
    if (withReads + reduced <= p.sendLimit) return { mode: 'read', inlineLength: reduced };
  }
  const pz = chunkHeaderBound(p.version, 1, writes, writes, reply);
  if (pz > p.sendLimit) {
    throw callTooLarge('transport header of a Long Call does not fit the peer receive buffer', {
      headerSize: pz,
      sendLimit: p.sendLimit,
    });
  }
  return { mode: 'pzrc', inlineLength: 0 };
}

/**
 * Whether a requester must offer a Reply chunk (RFC 8166 §3.5.4 / PROTOCOL-NOTES §3: the Linux server
 * ignores our announced sizes, so the test is against our own receive buffer): when the largest possible
 * reply, minus what Write chunks take, plus the largest reply header, exceeds our receive buffer.
 * `maxReplySize` < 0 means unknown, which always needs one.
 */
export function needsReplyChunk(
  version: 1 | 2,
  maxReplySize: number,
  ddpResultBytes: number,
  writeChunks: number,
  recvSize: number,
): boolean {
  if (maxReplySize < 0) return true;
  const hdr = chunkHeaderBound(version, 0, writeChunks, writeChunks, 1);
  return hdr + Math.max(0, maxReplySize - ddpResultBytes) > recvSize;
}

export type ReplyMode = 'inline' | 'reply-chunk' | 'error';

export interface ReplyPlanInput {
  version: 1 | 2;
  replyLength: number;
  /** DDP-eligible result items of the reply, in order. Item i may go to Write chunk i. */
  items: readonly DdpItem[];
  /** Capacity in bytes of each Write chunk the requester offered. */
  writeCapacities: readonly number[];
  /** Capacity of the Reply chunk, or -1 when none was offered. */
  replyCapacity: number;
  /** The requester's receive buffer size. */
  sendLimit: number;
  /** Encoded size of the reply's transport header (write list echoed, reply chunk echoed). */
  headerSize: number;
}

export interface ReplyPlan {
  mode: ReplyMode;
  /** How many leading items move into Write chunks (the rest stay inline). */
  moved: number;
  /** Length of the Payload stream once moved items are out. */
  reducedLength: number;
  /** For mode 'error': the RDMA2 error to answer with and its arm. */
  error?: { code: number; chunkIndex?: number; lengthNeeded?: number };
}

/** RDMA2_ERR_WRITE_RESOURCE and RDMA2_ERR_REPLY_RESOURCE (seed 004 §6.4). */
const ERR_WRITE_RESOURCE = 7;
const ERR_REPLY_RESOURCE = 8;

/**
 * Chooses how a Reply travels (RFC 8166 §3.5.2–3.5.4): DDP-eligible results into the Write chunks the
 * requester offered (one item per chunk, in order); then inline if the reduced reply fits the requester's
 * receive buffer, else into the Reply chunk (RDMA_NOMSG); else an error: a result larger than its Write
 * chunk → WRITE_RESOURCE naming the 1-based chunk, a reply larger than the Reply chunk → REPLY_RESOURCE
 * with the length needed (seed 004 §5.3.3). Version 1 peers get ERR_CHUNK for both (the caller maps it).
 */
export function planReply(p: ReplyPlanInput): ReplyPlan {
  const moved = Math.min(p.items.length, p.writeCapacities.length);
  for (let i = 0; i < moved; i++) {
    if (p.items[i].length > p.writeCapacities[i]) {
      return {
        mode: 'error',
        moved: 0,
        reducedLength: p.replyLength,
        error: { code: ERR_WRITE_RESOURCE, chunkIndex: i + 1, lengthNeeded: p.items[i].length },
      };
    }
  }
  let reduced = p.replyLength;
  for (let i = 0; i < moved; i++) reduced -= itemSpan(p.items[i].length);
  if (p.headerSize + reduced <= p.sendLimit) return { mode: 'inline', moved, reducedLength: reduced };
  if (p.replyCapacity >= reduced) return { mode: 'reply-chunk', moved, reducedLength: reduced };
  return {
    mode: 'error',
    moved: 0,
    reducedLength: reduced,
    error: { code: ERR_REPLY_RESOURCE, lengthNeeded: reduced },
  };
}

/** One chunk's data to put back into a Payload stream: at `at` in the inline (reduced) bytes. */
export interface Insert {
  at: number;
  data: Buffer;
}

/** `size` bytes from `allocate`, which may return more than asked: the exact view, made only when needed. */
export function allocateExactly(allocate: (size: number) => Buffer, size: number): Buffer {
  const got = allocate(size);
  return got.length === size ? got : got.subarray(0, size);
}

/** A copy of `bytes` in a buffer from `allocate` (which may return more than asked: the view is exact). */
export function copyOf(bytes: Buffer, allocate: (size: number) => Buffer): Buffer {
  const n = bytes.length;
  const out = allocateExactly(allocate, n);
  bytes.copy(out, 0);
  return out;
}

/**
 * Checks where chunk `index`'s data goes back into the inline bytes: a 4-byte aligned offset, not before
 * the previous chunk's (`prev`), within the inline bytes. A violation means a malformed peer message: a
 * TransportError (the responder answers it with BAD_XDR / ERR_CHUNK).
 */
export function checkInsertPosition(index: number, at: number, prev: number, inlineLength: number): void {
  if (!insertPositionOk(at, prev, inlineLength)) {
    throw new TransportError(
      'ERR_TRANSPORT_CHUNK_POSITION',
      `chunk ${index} position ${at} is not in the message`,
      false,
      { index, at, inlineLength },
    );
  }
}

function insertPositionOk(at: number, prev: number, inlineLength: number): boolean {
  return Number.isInteger(at) && at >= prev && at <= inlineLength && at % 4 === 0;
}

/**
 * Where each Read chunk of a call goes back into the bytes it was taken from — the inline bytes of an MSG
 * call, the Position-Zero chunk's data of a NOMSG call — computed once per call. A position is an offset
 * in the unreduced Payload stream (RFC 8166 §3.4.5); in the reduced bytes each earlier chunk's data and
 * pad is not there. Chunk `i`'s offset in those bytes goes to `ats[i]` (a NOMSG call's `ats[0]`, its
 * Position-Zero chunk, is 0). Returns whether
 * every one fits by the rules `checkInsertPosition` applies at reassembly. Checked before anything is
 * pulled: a responder refuses a call it cannot parse "without processing it in any way except to send an
 * error message" (seed 004 §5.3.3, RDMA2_ERR_BAD_XDR).
 */
export function readChunkInsertPoints(
  positions: readonly number[],
  lengths: readonly number[],
  nomsg: boolean,
  inlineLength: number,
  ats: number[],
): boolean {
  ats.length = 0;
  const first = nomsg ? 1 : 0;
  if (nomsg) ats.push(0);
  const base = nomsg ? lengths[0] : inlineLength;
  let removed = 0;
  let prev = 0;
  for (let i = first; i < positions.length; i++) {
    const at = positions[i] - removed;
    if (!insertPositionOk(at, prev, base)) return false;
    ats.push(at);
    prev = at;
    removed += itemSpan(lengths[i]);
  }
  return true;
}

/**
 * Builds the complete RPC message from the inline bytes and the chunk data the peer moved out of it,
 * re-creating each item's XDR pad as zeros (the chunk never carries it). `inserts` must be in order of
 * `at`, each within the inline bytes: a violation means a malformed peer message and is reported as a
 * TransportError (the responder answers it with BAD_XDR / ERR_CHUNK).
 */
export function reassemble(
  inline: Buffer,
  inserts: readonly Insert[],
  allocate: (size: number) => Buffer = Buffer.allocUnsafe,
): Buffer {
  let total = inline.length;
  let prev = 0;
  for (let i = 0; i < inserts.length; i++) {
    const at = inserts[i].at;
    checkInsertPosition(i, at, prev, inline.length);
    prev = at;
    total += itemSpan(inserts[i].data.length);
  }
  if (inserts.length === 0) return inline;
  const out = allocateExactly(allocate, total);
  let src = 0;
  let o = 0;
  for (let i = 0; i < inserts.length; i++) {
    const { at, data } = inserts[i];
    o += inline.copy(out, o, src, at);
    src = at;
    o += data.copy(out, o);
    const pad = xdrPad(data.length);
    if (pad > 0) {
      out.fill(0, o, o + pad);
      o += pad;
    }
  }
  inline.copy(out, o, src);
  return out;
}

/** A slice of a chunk transfer: bytes [srcOffset, srcOffset+length) go to segment `segment` at `segOffset`. */
export interface SegmentSpan {
  segment: number;
  segOffset: number;
  srcOffset: number;
  length: number;
}

/**
 * Splits `length` bytes across a chunk's segments in order (RFC 8166 §3.4.6: a chunk is filled segment
 * by segment). Returns null when the segments cannot hold them.
 */
export function scatter(length: number, segmentLengths: readonly number[]): SegmentSpan[] | null {
  const spans: SegmentSpan[] = [];
  let left = length;
  let src = 0;
  for (let s = 0; s < segmentLengths.length && left > 0; s++) {
    const n = Math.min(left, segmentLengths[s]);
    if (n === 0) continue;
    spans.push({ segment: s, segOffset: 0, srcOffset: src, length: n });
    src += n;
    left -= n;
  }
  return left > 0 ? null : spans;
}

/** A received read list grouped into Read chunks. */
export interface ReadChunks {
  /** XDR position of each chunk, ascending. */
  positions: number[];
  /** Total length of each chunk. */
  lengths: number[];
  segments: RdmaSegment[][];
  /** The handle every segment shares, 0 when there are none, -1 when they differ. */
  singleHandle: number;
}

/**
 * Groups a decoded read list into Read chunks: a chunk is a run of entries with one position (RFC 8166
 * §3.4.5 / §4.3). Positions must not go backwards; null when they do (the caller answers BAD_XDR /
 * ERR_CHUNK).
 */
export function groupReadChunks(reads: readonly ReadSegment[]): ReadChunks | null {
  const positions: number[] = [];
  const lengths: number[] = [];
  const segments: RdmaSegment[][] = [];
  let single = 0;
  for (const r of reads) {
    const last = positions.length - 1;
    if (last < 0 || positions[last] !== r.position) {
      if (last >= 0 && r.position < positions[last]) return null;
      positions.push(r.position);
      lengths.push(0);
      segments.push([]);
    }
    lengths[lengths.length - 1] += r.length;
    segments[segments.length - 1].push({ handle: r.handle, length: r.length, offset: r.offset });
    single = mergeHandle(single, r.handle);
  }
  return { positions, lengths, segments, singleHandle: single };
}

/** Tracks whether every chunk of a call uses one handle: 0 none yet, the handle, or -1 for several. */
export function mergeHandle(single: number, handle: number): number {
  if (single === 0) return handle;
  return single === handle ? single : -1;
}
