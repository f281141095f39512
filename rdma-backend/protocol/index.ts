/**
 * RPC-over-RDMA wire codecs: Version 1 (RFC 8166), Version 2 (seed draft -08) with the optional
 * extensions of DESIGN.md §3, transport properties, and RFC 8797 connection private data.
 * `docs/protocol.md` documents the numbering and every choice made where the specs are ambiguous.
 *
 * Receive path: `decodeHeader(buf, offset, end)` (or a per-connection `HeaderDecoder`) → structured
 * header, RPC payload at `payloadOffset`; failures are `RpcRdmaDecodeError` carrying the error to answer.
 * Send path: `encodeV2ChunkHeader` / `encodeV1ChunkHeader` (hot path) or `encodeHeader` into an
 * `XdrWriter` over the send buffer; `headerSize` / `maxChunkHeaderSize` (`chunkHeaderBound` from plain
 * counts) to plan inline thresholds.
 */
export * from './constants.js';
export {
  DEFAULT_DECODE_LIMITS,
  type DecodeLimits,
  type DecodeOptions,
  decodeHeader,
  HeaderDecoder,
} from './decoder.js';
export {
  encodeChunkLists,
  encodeHeader,
  encodeV1ChunkHeader,
  encodeV2ChunkHeader,
  encodeVersError,
} from './encoder.js';
export {
  type DecodeErrorContext,
  decodeError,
  RpcRdmaDecodeError,
  RpcRdmaError,
  type RpcRdmaErrorBody,
  toVersion1ErrorBody,
} from './errors.js';
export {
  type ConnectionPrivateData,
  decodePrivateData,
  encodePrivateData,
  RPCRDMA_CMP_F_SND_W_INV_OK,
  RPCRDMA_PRIVATE_DATA_MAGIC,
  RPCRDMA_PRIVATE_DATA_MAX_SIZE,
  RPCRDMA_PRIVATE_DATA_SIZE,
  RPCRDMA_PRIVATE_DATA_VERSION,
} from './private-data.js';
export {
  applyProperties,
  createDefaultPropertyRegistry,
  DEFAULT_TRANSPORT_PROPERTIES,
  defaultPropertyRegistry,
  PROP_BRS,
  PROP_RBSIZ,
  PROP_REQREMINV,
  PROP_RPRC,
  type PropEntry,
  type PropertyDefinition,
  PropertyRegistry,
  type PropSubset,
  subsetHas,
  subsetMembers,
  subsetOf,
  type TransportProperties,
} from './properties.js';
export {
  type ChunkBudget,
  chunkHeaderBound,
  chunkHeaderSize,
  chunkListsSize,
  headerSize,
  maxChunkHeaderSize,
} from './sizes.js';
export type * from './types.js';
