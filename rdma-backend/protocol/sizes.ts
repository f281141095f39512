/**
 * Encoded sizes of transport headers, computed without encoding: the marshaller compares
 * `header + RPC message` with the peer's inline threshold / Receive Buffer Size to choose between MSG, a
 * Read chunk, a Position-Zero Read chunk and a Reply chunk, and must know the header cost first.
 */
import { UsageError } from '../../common/errors.js';
import {
  ERR_VERS,
  RDMA_ERROR,
  RDMA2_CONNPROP,
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
  READ_LIST_ENTRY_SIZE,
  RPCRDMA_COMMON_SIZE,
  RPCRDMA_VERSION_1,
  RPCRDMA2_PREFIX_SIZE,
  SEGMENT_SIZE,
  WRITE_CHUNK_OVERHEAD,
} from './constants.js';
import type { RpcRdmaErrorBody } from './errors.js';
import { defaultPropertyRegistry, type PropertyRegistry } from './properties.js';
import type { ChunkListsInput, PropInput, RpcRdmaHeaderInput } from './types.js';

/** Bytes of the three chunk lists, their terminators included (RFC 8166 §4.3). */
export function chunkListsSize(chunks: ChunkListsInput): number {
  let n = 12; // the three "no more entries" / "absent" words
  if (chunks.reads) n += chunks.reads.length * READ_LIST_ENTRY_SIZE;
  if (chunks.writes) {
    const writes = chunks.writes;
    for (let i = 0; i < writes.length; i++) n += WRITE_CHUNK_OVERHEAD + writes[i].length * SEGMENT_SIZE;
  }
  if (chunks.reply) n += 4 + chunks.reply.length * SEGMENT_SIZE;
  return n;
}

/** Bytes of an RDMA_MSG / RDMA_NOMSG (v1) or RDMA2_MSG / RDMA2_NOMSG (v2) header with these chunks. */
export function chunkHeaderSize(version: 1 | 2, chunks: ChunkListsInput): number {
  return (
    (version === RPCRDMA_VERSION_1 ? RPCRDMA_COMMON_SIZE : RPCRDMA2_PREFIX_SIZE + 4) + chunkListsSize(chunks)
  );
}

/** What a header may carry at most, for `maxChunkHeaderSize`. */
export interface ChunkBudget {
  /** Read segments in the read list (each costs the same, however they group into chunks). */
  readSegments?: number;
  /** Segments in the write list; the worst case puts each in its own Write chunk. */
  writeSegments?: number;
  /**
   * Most Write chunks the list may hold (each costs 8 bytes besides its segments). Defaults to
   * `writeSegments`, the worst case when no chunk is empty; give it when empty Write chunks are possible.
   */
  writeChunks?: number;
  /** Segments of a Reply chunk; undefined means no Reply chunk. */
  replySegments?: number;
}

/**
 * The largest RDMA(2)_MSG / NOMSG header that holds at most the given segments: read segments cost 24
 * bytes each, write segments 16 plus 8 per Write chunk (at most one chunk per segment unless
 * `writeChunks` says otherwise), a Reply chunk 4 + 16 per segment.
 */
function checkCount(v: number): void {
  if (!Number.isInteger(v) || v < 0)
    throw new UsageError('ERR_RPCRDMA_BUDGET', `segment count ${v} is invalid`);
}

export function maxChunkHeaderSize(version: 1 | 2, budget: ChunkBudget): number {
  const reads = budget.readSegments ?? 0;
  const writes = budget.writeSegments ?? 0;
  const writeChunks = budget.writeChunks ?? writes;
  checkCount(reads);
  checkCount(writes);
  checkCount(writeChunks);
  checkCount(budget.replySegments ?? 0);
  return chunkHeaderBound(version, reads, writeChunks, writes, budget.replySegments ?? -1);
}

/**
 * `maxChunkHeaderSize` from counts the caller already holds as whole numbers (the lengths of its own
 * lists), without a budget object or the checks: the transport asks it for every call and reply.
 * `replySegments` < 0 means no Reply chunk.
 */
export function chunkHeaderBound(
  version: 1 | 2,
  readSegments: number,
  writeChunks: number,
  writeSegments: number,
  replySegments: number,
): number {
  let n = (version === RPCRDMA_VERSION_1 ? RPCRDMA_COMMON_SIZE : RPCRDMA2_PREFIX_SIZE + 4) + 12;
  n += readSegments * READ_LIST_ENTRY_SIZE;
  n += writeChunks * WRITE_CHUNK_OVERHEAD + writeSegments * SEGMENT_SIZE;
  if (replySegments >= 0) n += 4 + replySegments * SEGMENT_SIZE;
  return n;
}

function errorBodySize(e: RpcRdmaErrorBody): number {
  switch (e.code) {
    case RDMA2_ERR_VERS:
    case RDMA2_ERR_WRITE_RESOURCE:
      return 12;
    case RDMA2_ERR_READ_CHUNKS:
    case RDMA2_ERR_WRITE_CHUNKS:
    case RDMA2_ERR_SEGMENTS:
    case RDMA2_ERR_REPLY_RESOURCE:
      return 8;
    default:
      return 4;
  }
}

function propvalSize(p: PropInput, registry: PropertyRegistry): number {
  if (p.data !== undefined) return 4 + 4 + ((p.data.length + 3) & ~3);
  return 4 + registry.dataSize(p.id, p.value);
}

function propsetSize(props: readonly PropInput[], registry: PropertyRegistry): number {
  let n = 4;
  for (const p of props) n += propvalSize(p, registry);
  return n;
}

/** Exact encoded size of any header `encodeHeader` accepts (the RPC message of a MSG not included). */
export function headerSize(
  h: RpcRdmaHeaderInput,
  registry: PropertyRegistry = defaultPropertyRegistry,
): number {
  if (h.version === RPCRDMA_VERSION_1) {
    if (h.proc === 0 || h.proc === 1) return chunkHeaderSize(1, h.chunks);
    if (h.proc === RDMA_ERROR) return RPCRDMA_COMMON_SIZE + (h.error.code === ERR_VERS ? 12 : 4);
    return RPCRDMA_COMMON_SIZE;
  }
  switch (h.htype) {
    case RDMA2_MSG:
    case RDMA2_NOMSG:
      return chunkHeaderSize(2, h.chunks);
    case RDMA2_ERROR:
      return RPCRDMA2_PREFIX_SIZE + errorBodySize(h.error);
    case RDMA2_CONNPROP:
      return RPCRDMA2_PREFIX_SIZE + propsetSize(h.props, registry);
    case RDMA2_REQPROP:
      return RPCRDMA2_PREFIX_SIZE + propsetSize(h.want, registry);
    case RDMA2_RESPPROP:
      return RPCRDMA2_PREFIX_SIZE + 12 + 4 * (h.done.length + h.rejected.length + h.pending.length);
    case RDMA2_UPDPROP:
      return RPCRDMA2_PREFIX_SIZE + propvalSize(h.now, registry) + 4;
    default:
      return RPCRDMA2_PREFIX_SIZE;
  }
}
