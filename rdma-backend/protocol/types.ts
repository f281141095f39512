/**
 * The structured form of RPC-over-RDMA transport headers, shared by both versions. Decoders return these
 * shapes; encoders accept them (segment offsets may then also be plain numbers).
 *
 * Segment offsets are XDR `uint64` (RFC 8166 §4.3; seed 004 §6.3). They are kept as `bigint` in decoded
 * headers because a peer's offset is an opaque virtual address (the Linux client puts the XID in the upper
 * 32 bits of its IOVA), so values above 2^53 are normal and a `number` would silently round them.
 */
import type { RpcRdmaErrorBody } from './errors.js';
import type { PropEntry, PropSubset } from './properties.js';

/** `rpcrdma2_segment` / RFC 8166 `xdr_rdma_segment`: one registered memory region of the peer. */
export interface RdmaSegment {
  /** `rdma_handle`: the R_key / STag. */
  handle: number;
  /** `rdma_length` in bytes. */
  length: number;
  /** `rdma_offset`: the peer's virtual address or offset (u64). */
  offset: bigint;
}

/** A segment as encoders accept it: the offset may be a safe non-negative integer. */
export interface RdmaSegmentInput {
  handle: number;
  length: number;
  offset: bigint | number;
}

/** A read list entry: a segment plus `rdma_position`, its XDR offset in the Payload stream. */
export interface ReadSegment extends RdmaSegment {
  position: number;
}

export interface ReadSegmentInput extends RdmaSegmentInput {
  position: number;
}

/**
 * The three chunk lists of RDMA_MSG / RDMA_NOMSG (RFC 8166 §4.3) and of `rpcrdma2_chunk_lists` (seed 004
 * §3.3) without `rdma_inv_handle`, which Version 2 headers carry beside them.
 *
 * `reads` is the read list flattened in wire order: a Read chunk is the run of entries with the same
 * `position`. `writes` holds one array of segments per Write chunk. `reply` is the Reply chunk or null.
 */
export interface ChunkLists {
  reads: ReadSegment[];
  writes: RdmaSegment[][];
  reply: RdmaSegment[] | null;
}

export interface ChunkListsInput {
  reads?: readonly ReadSegmentInput[];
  writes?: readonly (readonly RdmaSegmentInput[])[];
  reply?: readonly RdmaSegmentInput[] | null;
}

/** The four words every version keeps (RFC 8166 §4.2, seed 004 §3.1). */
interface CommonFields {
  xid: number;
  /** `rdma_credit`: a request from a requester, a grant from a responder. */
  credit: number;
  /**
   * Offset, in the buffer given to the decoder, of the first byte after the transport header: the RPC
   * message for MSG, otherwise where any trailing bytes begin (the decoder ignores them).
   */
  payloadOffset: number;
}

// ------------------------------------------------------------------------------------------------------
// Version 1 (RFC 8166)

export interface V1Msg extends CommonFields {
  version: 1;
  proc: 0;
  chunks: ChunkLists;
}

export interface V1NoMsg extends CommonFields {
  version: 1;
  proc: 1;
  chunks: ChunkLists;
}

/** RDMA_DONE: deprecated by RFC 8166, void body (RFC 5666 §4.3). */
export interface V1Done extends CommonFields {
  version: 1;
  proc: 3;
}

export interface V1Error extends CommonFields {
  version: 1;
  proc: 4;
  error: RpcRdmaErrorBody;
}

export type V1Header = V1Msg | V1NoMsg | V1Done | V1Error;

// ------------------------------------------------------------------------------------------------------
// Version 2 (seed 004 and the extensions of DESIGN.md §3)

interface V2Fields extends CommonFields {
  version: 2;
  /** `rdma_flags` as received (RPCRDMA2_F_RESPONSE and any reserved bits). */
  flags: number;
}

/** The flags to send; reserved bits must be zero (seed 004 §3.2). Defaults to 0. */
interface V2Input {
  xid: number;
  credit: number;
  flags?: number;
}

export interface V2Msg extends V2Fields {
  htype: 0;
  /** `rdma_inv_handle`: the handle the responder may invalidate remotely, or 0. */
  invHandle: number;
  chunks: ChunkLists;
}

export interface V2NoMsg extends V2Fields {
  htype: 1;
  invHandle: number;
  chunks: ChunkLists;
}

/** RDMA2_DONE (extension, seed 002): pull completion for the Reply whose XID it carries. Void body. */
export interface V2Done extends V2Fields {
  htype: 3;
}

export interface V2Error extends V2Fields {
  htype: 4;
  error: RpcRdmaErrorBody;
  /**
   * True when the message used the Version 1 ERR_VERS layout (no `rdma_flags` word) although it carried
   * rdma_vers 2: some peers answer a Version 2 probe that way; see docs/protocol.md.
   */
  legacyLayout?: boolean;
}

export interface V2ConnProp extends V2Fields {
  htype: 5;
  props: PropEntry[];
}

/** RDMA2_REQPROP (extension): the properties, with the values the sender wants. */
export interface V2ReqProp extends V2Fields {
  htype: 6;
  want: PropEntry[];
}

/** RDMA2_RESPPROP (extension): dispositions of the request with the same XID, as subsets of its propset. */
export interface V2RespProp extends V2Fields {
  htype: 7;
  done: PropSubset;
  rejected: PropSubset;
  pending: PropSubset;
}

/** RDMA2_UPDPROP (extension): a property's new value, and whether a pending request is now cleared. */
export interface V2UpdProp extends V2Fields {
  htype: 8;
  now: PropEntry;
  pendingCleared: boolean;
}

export type V2Header = V2Msg | V2NoMsg | V2Done | V2Error | V2ConnProp | V2ReqProp | V2RespProp | V2UpdProp;

/** What `decodeHeader` returns. */
export type RpcRdmaHeader = V1Header | V2Header;

// ------------------------------------------------------------------------------------------------------
// Encoder inputs

export type V1HeaderInput =
  | { version: 1; proc: 0 | 1; xid: number; credit: number; chunks: ChunkListsInput }
  | { version: 1; proc: 3; xid: number; credit: number }
  | { version: 1; proc: 4; xid: number; credit: number; error: RpcRdmaErrorBody };

/**
 * A property value to send: `value` is encoded with the property's XDR type; undefined sends a
 * zero-length rdma_data (the default). `data`, when present, is sent as the raw rdma_data instead (how a
 * decoded `PropEntry` round-trips, and how a property unknown to the registry is sent).
 */
export interface PropInput {
  id: number;
  value?: unknown;
  data?: Uint8Array;
}

export type V2HeaderInput =
  | (V2Input & { version: 2; htype: 0 | 1; invHandle?: number; chunks: ChunkListsInput })
  | (V2Input & { version: 2; htype: 3 })
  | (V2Input & { version: 2; htype: 4; error: RpcRdmaErrorBody })
  | (V2Input & { version: 2; htype: 5; props: readonly PropInput[] })
  | (V2Input & { version: 2; htype: 6; want: readonly PropInput[] })
  | (V2Input & {
      version: 2;
      htype: 7;
      done: readonly number[];
      rejected: readonly number[];
      pending: readonly number[];
    })
  | (V2Input & { version: 2; htype: 8; now: PropInput; pendingCleared: boolean });

export type RpcRdmaHeaderInput = V1HeaderInput | V2HeaderInput;
