/**
 * Encoders of RPC-over-RDMA transport headers, both versions. They write into the caller's `XdrWriter`
 * — typically `XdrWriter.into(sendBuffer, 0, inlineSize)` over a registered send buffer, reset per
 * message — so encoding allocates nothing; the RPC message follows at `w.pos` for MSG.
 *
 * Contract violations (reserved flag bits set, an error code the version cannot carry, a value that is
 * not a uint32) raise UsageError or XdrError(ERR_XDR_VALUE); a full fixed buffer raises
 * XdrError(ERR_XDR_OVERFLOW). Use `headerSize` (sizes.ts) to know the size before encoding.
 */
import { setU32BE } from '../../common/bytes.js';
import { UsageError } from '../../common/errors.js';
import type { XdrWriter } from '../../rpc/xdr.js';
import {
  ERR_CHUNK,
  ERR_VERS,
  RDMA_DONE,
  RDMA_ERROR,
  RDMA_MSG,
  RDMA_NOMSG,
  RDMA2_CONNPROP,
  RDMA2_DONE,
  RDMA2_ERR_READ_CHUNKS,
  RDMA2_ERR_REPLY_RESOURCE,
  RDMA2_ERR_SEGMENTS,
  RDMA2_ERR_VERS,
  RDMA2_ERR_WRITE_CHUNKS,
  RDMA2_ERR_WRITE_RESOURCE,
  RDMA2_ERROR,
  RDMA2_MSG,
  RDMA2_NOMSG,
  RDMA2_REQPROP,
  RDMA2_RESPPROP,
  RDMA2_UPDPROP,
  RPCRDMA_VERSION_1,
  RPCRDMA_VERSION_2,
  RPCRDMA2_F_RESERVED,
  RPCRDMA2_F_RESPONSE,
} from './constants.js';
import type { RpcRdmaErrorBody } from './errors.js';
import { defaultPropertyRegistry, type PropertyRegistry } from './properties.js';
import { chunkListsSize } from './sizes.js';
import type {
  ChunkListsInput,
  PropInput,
  RdmaSegmentInput,
  RpcRdmaHeaderInput,
  V1HeaderInput,
  V2HeaderInput,
} from './types.js';

function segment(w: XdrWriter, s: RdmaSegmentInput): void {
  w.u32(s.handle, 'rdma_handle');
  w.u32(s.length, 'rdma_length');
  if (typeof s.offset === 'bigint') w.u64(s.offset, 'rdma_offset');
  else w.u64Number(s.offset, 'rdma_offset');
}

function writeChunk(w: XdrWriter, segments: readonly RdmaSegmentInput[]): void {
  w.u32(segments.length, 'rdma_target');
  for (let i = 0; i < segments.length; i++) segment(w, segments[i]);
}

/**
 * Writes the read list, write list and reply chunk (RFC 8166 §4.3 `rpc_rdma_header`; the same wire form
 * is `rpcrdma2_chunk_lists` after `rdma_inv_handle`, seed 004 §3.3). Read entries are written in the
 * order given: entries of one Read chunk share a position and must be adjacent.
 */
export function encodeChunkLists(w: XdrWriter, chunks: ChunkListsInput): void {
  const reads = chunks.reads;
  if (reads) {
    for (let i = 0; i < reads.length; i++) {
      const s = reads[i];
      w.u32(1, 'rdma_reads');
      w.u32(s.position, 'rdma_position');
      segment(w, s);
    }
  }
  w.u32(0, 'rdma_reads');
  const writes = chunks.writes;
  if (writes) {
    for (let i = 0; i < writes.length; i++) {
      w.u32(1, 'rdma_writes');
      writeChunk(w, writes[i]);
    }
  }
  w.u32(0, 'rdma_writes');
  if (chunks.reply) {
    w.u32(1, 'rdma_reply');
    writeChunk(w, chunks.reply);
  } else {
    w.u32(0, 'rdma_reply');
  }
}

function checkFlags(flags: number): void {
  if ((flags & RPCRDMA2_F_RESERVED) !== 0) {
    throw new UsageError(
      'ERR_RPCRDMA_FLAGS',
      `rdma_flags 0x${(flags >>> 0).toString(16)} sets reserved bits`,
      {
        flags,
      },
    );
  }
}

function prefixV2(w: XdrWriter, xid: number, credit: number, htype: number, flags: number): void {
  checkFlags(flags);
  w.u32(xid, 'rdma_xid');
  w.u32(RPCRDMA_VERSION_2, 'rdma_vers');
  w.u32(credit, 'rdma_credit');
  w.u32(htype, 'rdma_htype');
  w.u32(flags >>> 0, 'rdma_flags');
}

// ------------------------------------------------------------------------------------------------------
// Hot path: when the whole header fits in the writer's window, words are stored byte by byte straight into
// `w.buf` after one capacity check (XdrWriter's per-field checks cost ~30 ns a word). Any value that is not
// a uint32 / u64 makes the fast path give up; the checked path then raises the precise XdrError.

const U64_MAX = (1n << 64n) - 1n;
const scratch = new DataView(new ArrayBuffer(8));

const isU32 = (v: number): boolean => v >>> 0 === v;

/** Stores one segment at `p`; false when a field is out of range. */
function putSegment(buf: Buffer, p: number, s: RdmaSegmentInput): boolean {
  const { handle, length, offset } = s;
  if (!isU32(handle) || !isU32(length)) return false;
  setU32BE(buf, p, handle);
  setU32BE(buf, p + 4, length);
  if (typeof offset === 'bigint') {
    if (offset < 0n || offset > U64_MAX) return false;
    scratch.setBigUint64(0, offset);
    setU32BE(buf, p + 8, scratch.getUint32(0));
    setU32BE(buf, p + 12, scratch.getUint32(4));
  } else {
    if (!Number.isSafeInteger(offset) || offset < 0) return false;
    setU32BE(buf, p + 8, Math.floor(offset / 0x1_0000_0000));
    setU32BE(buf, p + 12, offset >>> 0);
  }
  return true;
}

function putWriteChunk(buf: Buffer, p: number, segments: readonly RdmaSegmentInput[]): number {
  setU32BE(buf, p, segments.length);
  p += 4;
  for (let i = 0; i < segments.length; i++) {
    if (!putSegment(buf, p, segments[i])) return -1;
    p += 16;
  }
  return p;
}

/** Stores the chunk lists at `p`; returns the end offset, or -1 when a value is out of range. */
function putChunkLists(buf: Buffer, p: number, chunks: ChunkListsInput): number {
  const reads = chunks.reads;
  if (reads) {
    for (let i = 0; i < reads.length; i++) {
      const s = reads[i];
      if (!isU32(s.position)) return -1;
      setU32BE(buf, p, 1);
      setU32BE(buf, p + 4, s.position);
      if (!putSegment(buf, p + 8, s)) return -1;
      p += 24;
    }
  }
  setU32BE(buf, p, 0);
  p += 4;
  const writes = chunks.writes;
  if (writes) {
    for (let i = 0; i < writes.length; i++) {
      setU32BE(buf, p, 1);
      p = putWriteChunk(buf, p + 4, writes[i]);
      if (p < 0) return -1;
    }
  }
  setU32BE(buf, p, 0);
  p += 4;
  if (chunks.reply) {
    setU32BE(buf, p, 1);
    return putWriteChunk(buf, p + 4, chunks.reply);
  }
  setU32BE(buf, p, 0);
  return p + 4;
}

/**
 * Tries the fast path for a header of `words` (the leading words) then the chunk lists. Returns true
 * when it wrote everything (and advanced `w.pos`), false when the caller must take the checked path.
 */
function fastChunkHeader(w: XdrWriter, words: readonly number[], chunks: ChunkListsInput): boolean {
  const size = words.length * 4 + chunkListsSize(chunks);
  const start = w.pos;
  if (w.limit - start < size) return false;
  const buf = w.buf;
  let p = start;
  for (let i = 0; i < words.length; i++) {
    if (!isU32(words[i])) return false;
    setU32BE(buf, p, words[i]);
    p += 4;
  }
  p = putChunkLists(buf, p, chunks);
  if (p < 0) return false;
  w.pos = p;
  return true;
}

/**
 * The hot-path encoder of RDMA2_MSG / RDMA2_NOMSG (seed 004 §5.3.1–2): prefix, `rdma_inv_handle`, chunk
 * lists. For RDMA2_MSG the caller appends the RPC message at `w.pos`.
 */
export function encodeV2ChunkHeader(
  w: XdrWriter,
  htype: typeof RDMA2_MSG | typeof RDMA2_NOMSG,
  xid: number,
  credit: number,
  flags: number,
  invHandle: number,
  chunks: ChunkListsInput,
): void {
  checkFlags(flags);
  v2Words[0] = xid;
  v2Words[2] = credit;
  v2Words[3] = htype;
  v2Words[4] = flags;
  v2Words[5] = invHandle;
  if (fastChunkHeader(w, v2Words, chunks)) return;
  prefixV2(w, xid, credit, htype, flags);
  w.u32(invHandle, 'rdma_inv_handle');
  encodeChunkLists(w, chunks);
}

/** Reused word arrays of the fast path (encoding is synchronous, so sharing them is safe). */
const v2Words = [0, RPCRDMA_VERSION_2, 0, 0, 0, 0];
const v1Words = [0, RPCRDMA_VERSION_1, 0, 0];

/**
 * The hot-path encoder of RDMA_MSG / RDMA_NOMSG (RFC 8166 §4.3). For RDMA_MSG the caller appends the RPC
 * message at `w.pos`.
 */
export function encodeV1ChunkHeader(
  w: XdrWriter,
  proc: typeof RDMA_MSG | typeof RDMA_NOMSG,
  xid: number,
  credit: number,
  chunks: ChunkListsInput,
): void {
  v1Words[0] = xid;
  v1Words[2] = credit;
  v1Words[3] = proc;
  if (fastChunkHeader(w, v1Words, chunks)) return;
  w.u32(xid, 'rdma_xid');
  w.u32(RPCRDMA_VERSION_1, 'rdma_vers');
  w.u32(credit, 'rdma_credit');
  w.u32(proc, 'rdma_proc');
  encodeChunkLists(w, chunks);
}

function need(v: number | undefined, field: string, code: number): number {
  if (v === undefined) {
    throw new UsageError('ERR_RPCRDMA_ERROR_BODY', `error code ${code} needs ${field}`, { code, field });
  }
  return v;
}

/** The `rpcrdma2_error` union (seed 004 §5.3.3): the arm follows the code; other codes are void. */
function errorBodyV2(w: XdrWriter, e: RpcRdmaErrorBody): void {
  w.u32(e.code, 'rdma_err');
  switch (e.code) {
    case RDMA2_ERR_VERS:
      w.u32(need(e.versLow, 'versLow', e.code), 'rdma_vers_low');
      w.u32(need(e.versHigh, 'versHigh', e.code), 'rdma_vers_high');
      break;
    case RDMA2_ERR_READ_CHUNKS:
    case RDMA2_ERR_WRITE_CHUNKS:
      w.u32(need(e.maxChunks, 'maxChunks', e.code), 'rdma_max_chunks');
      break;
    case RDMA2_ERR_SEGMENTS:
      w.u32(need(e.maxSegments, 'maxSegments', e.code), 'rdma_max_segments');
      break;
    case RDMA2_ERR_WRITE_RESOURCE:
      w.u32(need(e.chunkIndex, 'chunkIndex', e.code), 'rdma_chunk_index');
      w.u32(need(e.lengthNeeded, 'lengthNeeded', e.code), 'rdma_length_needed');
      break;
    case RDMA2_ERR_REPLY_RESOURCE:
      w.u32(need(e.lengthNeeded, 'lengthNeeded', e.code), 'rdma_length_needed');
      break;
    default:
      break;
  }
}

/** The `rpc_rdma_error` union of RFC 8166 §4.3: only ERR_VERS and ERR_CHUNK exist. */
function errorBodyV1(w: XdrWriter, e: RpcRdmaErrorBody): void {
  if (e.code === ERR_VERS) {
    w.u32(ERR_VERS, 'rdma_err');
    w.u32(need(e.versLow, 'versLow', e.code), 'rdma_vers_low');
    w.u32(need(e.versHigh, 'versHigh', e.code), 'rdma_vers_high');
  } else if (e.code === ERR_CHUNK) {
    w.u32(ERR_CHUNK, 'rdma_err');
  } else {
    throw new UsageError(
      'ERR_RPCRDMA_ERROR_BODY',
      `Version 1 has no error code ${e.code} (map it to ERR_CHUNK)`,
      {
        code: e.code,
      },
    );
  }
}

function propset(w: XdrWriter, props: readonly PropInput[], registry: PropertyRegistry): void {
  w.u32(props.length, 'rpcrdma2_propset');
  for (let i = 0; i < props.length; i++) propval(w, props[i], registry);
}

function propval(w: XdrWriter, p: PropInput, registry: PropertyRegistry): void {
  w.u32(p.id, 'rdma_which');
  // Raw bytes win: a decoded entry (known or not) re-encodes exactly as it was received.
  if (p.data !== undefined) w.opaque(p.data, 'rdma_data');
  else registry.encodeData(w, p.id, p.value);
}

function subset(w: XdrWriter, words: readonly number[]): void {
  w.u32(words.length, 'rpcrdma2_propsubset');
  for (let i = 0; i < words.length; i++) w.u32(words[i] >>> 0, 'rpcrdma2_propsubset');
}

function encodeV1(w: XdrWriter, h: V1HeaderInput): void {
  if (h.proc === RDMA_MSG || h.proc === RDMA_NOMSG) {
    encodeV1ChunkHeader(w, h.proc, h.xid, h.credit, h.chunks);
    return;
  }
  w.u32(h.xid, 'rdma_xid');
  w.u32(RPCRDMA_VERSION_1, 'rdma_vers');
  w.u32(h.credit, 'rdma_credit');
  w.u32(h.proc, 'rdma_proc');
  if (h.proc === RDMA_ERROR) errorBodyV1(w, h.error);
  else if (h.proc !== RDMA_DONE)
    throw new UsageError('ERR_RPCRDMA_HTYPE', `cannot encode rdma_proc ${h.proc}`);
}

function encodeV2(w: XdrWriter, h: V2HeaderInput, registry: PropertyRegistry): void {
  const flags = h.flags ?? 0;
  switch (h.htype) {
    case RDMA2_MSG:
    case RDMA2_NOMSG:
      encodeV2ChunkHeader(w, h.htype, h.xid, h.credit, flags, h.invHandle ?? 0, h.chunks);
      return;
    case RDMA2_DONE:
      prefixV2(w, h.xid, h.credit, RDMA2_DONE, flags);
      return;
    case RDMA2_ERROR:
      // seed 004 §3.2: RDMA2_ERROR always has RPCRDMA2_F_RESPONSE set.
      prefixV2(w, h.xid, h.credit, RDMA2_ERROR, flags | RPCRDMA2_F_RESPONSE);
      errorBodyV2(w, h.error);
      return;
    case RDMA2_CONNPROP:
      prefixV2(w, h.xid, h.credit, RDMA2_CONNPROP, flags);
      propset(w, h.props, registry);
      return;
    case RDMA2_REQPROP:
      prefixV2(w, h.xid, h.credit, RDMA2_REQPROP, flags);
      propset(w, h.want, registry);
      return;
    case RDMA2_RESPPROP:
      prefixV2(w, h.xid, h.credit, RDMA2_RESPPROP, flags);
      subset(w, h.done);
      subset(w, h.rejected);
      subset(w, h.pending);
      return;
    case RDMA2_UPDPROP:
      prefixV2(w, h.xid, h.credit, RDMA2_UPDPROP, flags);
      propval(w, h.now, registry);
      w.bool(h.pendingCleared, 'rdma_pendclr');
      return;
    default:
      throw new UsageError(
        'ERR_RPCRDMA_HTYPE',
        `cannot encode header type ${(h as { htype: number }).htype}`,
      );
  }
}

/**
 * The answer to a header whose `rdma_vers` this receiver does not support (docs/protocol.md, "ERR_VERS
 * layout"): the seven words of RFC 8166's RDMA_ERROR / ERR_VERS, with `rdma_xid` and `rdma_vers` copied
 * from the offending header (seed 004 §5.3.3) and our supported range — what the Linux server sends, and
 * the one layout every version's implementation can parse. `decodeHeader` reads it back through the
 * Version 1 path, or as `legacyLayout` when the echoed version is 2.
 */
export function encodeVersError(
  w: XdrWriter,
  xid: number,
  echoedVersion: number,
  credit: number,
  versLow: number,
  versHigh: number,
): void {
  w.u32(xid, 'rdma_xid');
  w.u32(echoedVersion, 'rdma_vers');
  w.u32(credit, 'rdma_credit');
  w.u32(RDMA_ERROR, 'rdma_proc');
  w.u32(ERR_VERS, 'rdma_err');
  w.u32(versLow, 'rdma_vers_low');
  w.u32(versHigh, 'rdma_vers_high');
}

/**
 * Encodes any header of either version from its structured form (the shape `decodeHeader` returns is
 * accepted as is). Property values are encoded with `registry`.
 */
export function encodeHeader(
  w: XdrWriter,
  h: RpcRdmaHeaderInput,
  registry: PropertyRegistry = defaultPropertyRegistry,
): void {
  if (h.version === RPCRDMA_VERSION_1) encodeV1(w, h);
  else if (h.version === RPCRDMA_VERSION_2) encodeV2(w, h, registry);
  else
    throw new UsageError('ERR_RPCRDMA_VERS', `cannot encode version ${(h as { version: number }).version}`);
}
