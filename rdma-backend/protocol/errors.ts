import { GatewayError } from '../../common/errors.js';
import {
  ERR_CHUNK,
  ERR_VERS,
  RDMA2_ERR_BAD_XDR,
  RDMA2_ERR_INVAL_HTYPE,
  RDMA2_ERR_READ_CHUNKS,
  RDMA2_ERR_SEGMENTS,
  RDMA2_ERR_VERS,
  RDMA2_ERR_WRITE_CHUNKS,
  RPCRDMA_VERSION_1,
} from './constants.js';

/**
 * The body of an RDMA_ERROR (Version 1, RFC 8166 §4.3) or RDMA2_ERROR (seed 004 §5.3.3) message. Which
 * fields are meaningful depends on `code`:
 * - ERR_VERS / RDMA2_ERR_VERS (1): `versLow`, `versHigh`;
 * - RDMA2_ERR_READ_CHUNKS (4), RDMA2_ERR_WRITE_CHUNKS (5): `maxChunks`;
 * - RDMA2_ERR_SEGMENTS (6): `maxSegments`;
 * - RDMA2_ERR_WRITE_RESOURCE (7): `chunkIndex` (1-based, 0 = unknown), `lengthNeeded`;
 * - RDMA2_ERR_REPLY_RESOURCE (8): `lengthNeeded`;
 * - every other code (ERR_CHUNK, BAD_XDR, INVAL_HTYPE, SYSTEM, codes unknown to us): no field (the void arm).
 */
export interface RpcRdmaErrorBody {
  code: number;
  versLow?: number;
  versHigh?: number;
  maxChunks?: number;
  maxSegments?: number;
  chunkIndex?: number;
  lengthNeeded?: number;
}

/** The category of every error raised by the RPC-over-RDMA codecs. */
export class RpcRdmaError extends GatewayError {}

/** Facts the decoder knew when it failed; the transport needs xid and version to answer. */
export interface DecodeErrorContext {
  /** The version whose rules the header was decoded under (the peer's `rdma_vers` for ERR_VERS). */
  version: number;
  /** Header field being decoded, e.g. `rdma_writes[0].rdma_target[3].rdma_offset`. */
  field: string;
  /** Byte offset of the failure, relative to the start of the transport header. */
  offset: number;
  /** `rdma_xid`, once read (undefined when the message is shorter than the four common words). */
  xid?: number;
  credit?: number;
  /** `rdma_proc` / `rdma_htype`, once read. */
  htype?: number;
}

/**
 * A received transport header that cannot be accepted. `reply` is the error body the receiver must
 * answer with (RFC 8166 §5 / seed 004 §5.3.3): ERR_VERS or ERR_CHUNK for Version 1, an RDMA2_ERR_* code
 * (with its arm filled in) for Version 2. The answer copies `xid` and the version; when `xid` is
 * undefined (fewer than 16 bytes arrived) there is nothing to answer and the message is dropped.
 *
 * `code` is one of `ERR_RPCRDMA_VERS`, `ERR_RPCRDMA_BAD_XDR`, `ERR_RPCRDMA_INVAL_HTYPE`,
 * `ERR_RPCRDMA_READ_CHUNKS`, `ERR_RPCRDMA_WRITE_CHUNKS`, `ERR_RPCRDMA_SEGMENTS`, `ERR_RPCRDMA_SHORT`.
 */
export class RpcRdmaDecodeError extends RpcRdmaError {
  readonly reply: RpcRdmaErrorBody;
  readonly version: number;
  readonly field: string;
  readonly offset: number;
  readonly xid: number | undefined;
  readonly credit: number | undefined;
  readonly htype: number | undefined;

  constructor(code: string, message: string, reply: RpcRdmaErrorBody, ctx: DecodeErrorContext) {
    super(code, message, {
      rdmaErr: reply.code,
      version: ctx.version,
      field: ctx.field,
      offset: ctx.offset,
      xid: ctx.xid,
      htype: ctx.htype,
    });
    this.reply = reply;
    this.version = ctx.version;
    this.field = ctx.field;
    this.offset = ctx.offset;
    this.xid = ctx.xid;
    this.credit = ctx.credit;
    this.htype = ctx.htype;
  }
}

/**
 * Maps a Version 2 error body onto what a Version 1 receiver may send: RFC 8166 has only ERR_VERS and
 * ERR_CHUNK, so every Version 2 code other than VERS becomes ERR_CHUNK (RDMA2_ERR_BAD_XDR has the same
 * value, seed 004 §5.3.3).
 */
export function toVersion1ErrorBody(body: RpcRdmaErrorBody): RpcRdmaErrorBody {
  if (body.code === ERR_VERS) return { code: ERR_VERS, versLow: body.versLow, versHigh: body.versHigh };
  return { code: ERR_CHUNK };
}

const CODE_BY_RDMA2_ERR: Record<number, string> = {
  [RDMA2_ERR_VERS]: 'ERR_RPCRDMA_VERS',
  [RDMA2_ERR_BAD_XDR]: 'ERR_RPCRDMA_BAD_XDR',
  [RDMA2_ERR_INVAL_HTYPE]: 'ERR_RPCRDMA_INVAL_HTYPE',
  [RDMA2_ERR_READ_CHUNKS]: 'ERR_RPCRDMA_READ_CHUNKS',
  [RDMA2_ERR_WRITE_CHUNKS]: 'ERR_RPCRDMA_WRITE_CHUNKS',
  [RDMA2_ERR_SEGMENTS]: 'ERR_RPCRDMA_SEGMENTS',
};

/**
 * Builds the decode error for `body` (expressed in Version 2 terms) under the rules of `ctx.version`:
 * a Version 1 header gets the Version 1 mapping of the body, and the stable `code` names the cause.
 */
export function decodeError(
  message: string,
  body: RpcRdmaErrorBody,
  ctx: DecodeErrorContext,
): RpcRdmaDecodeError {
  const code = CODE_BY_RDMA2_ERR[body.code] ?? 'ERR_RPCRDMA_BAD_XDR';
  const reply = ctx.version === RPCRDMA_VERSION_1 ? toVersion1ErrorBody(body) : body;
  return new RpcRdmaDecodeError(code, message, reply, ctx);
}
