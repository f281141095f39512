/**
 * Wire numbers of RPC-over-RDMA Version 1 (RFC 8166 §4.3 / §8) and Version 2 (seed
 * draft-cel-nfsv4-rpcrdma-version-two-08 §6, plus the optional extensions of DESIGN.md §3).
 * `docs/protocol.md` lists every value with the section it comes from.
 */

/** RPC-over-RDMA Version 1 (RFC 8166). */
export const RPCRDMA_VERSION_1 = 1;
/** RPC-over-RDMA Version 2 (seed draft -08). */
export const RPCRDMA_VERSION_2 = 2;

/** Size of `rpcrdma_common` (xid, vers, credit, proc/htype): the four words every version keeps (RFC 8166 §4.2). */
export const RPCRDMA_COMMON_SIZE = 16;
/** Size of `rpcrdma2_hdr_prefix` (`rpcrdma_common` + `rdma_flags`), seed 004 §3.2. */
export const RPCRDMA2_PREFIX_SIZE = 20;

// ---- Version 1 procedures (RFC 8166 §4.3 `rdma_proc`) ----
export const RDMA_MSG = 0;
export const RDMA_NOMSG = 1;
/** Deprecated (RFC 8166 §4.3): decoded only to be rejected with ERR_CHUNK. */
export const RDMA_MSGP = 2;
/** Deprecated in RFC 8166; kept because Wireshark and older peers know it (void body). */
export const RDMA_DONE = 3;
export const RDMA_ERROR = 4;

// ---- Version 1 error codes (RFC 8166 §4.3 `rpc_rdma_errcode`) ----
export const ERR_VERS = 1;
export const ERR_CHUNK = 2;

// ---- Version 2 header types (seed 004 §5.2 Table 2, DESIGN.md §3 for 3, 6, 7, 8) ----
export const RDMA2_MSG = 0;
export const RDMA2_NOMSG = 1;
/** Optional extension: pull-completion notification (seed 002 §4.1.3), numbered by DESIGN.md §3. */
export const RDMA2_DONE = 3;
export const RDMA2_ERROR = 4;
export const RDMA2_CONNPROP = 5;
/** Optional extension (xcharext ROPT_REQXCH), numbered by DESIGN.md §3. */
export const RDMA2_REQPROP = 6;
/** Optional extension (xcharext ROPT_RESPXCH), numbered by DESIGN.md §3. */
export const RDMA2_RESPPROP = 7;
/** Optional extension (xcharext ROPT_UPDXCH), numbered by DESIGN.md §3. */
export const RDMA2_UPDPROP = 8;

/** The header types of DESIGN.md §3 that a peer may not support (it answers RDMA2_ERR_INVAL_HTYPE). */
export const RDMA2_OPTIONAL_HTYPES: readonly number[] = [
  RDMA2_DONE,
  RDMA2_REQPROP,
  RDMA2_RESPPROP,
  RDMA2_UPDPROP,
];

// ---- Version 2 flags (seed 004 §3.2) ----
export const RPCRDMA2_F_RESPONSE = 0x0000_0001;
/** Every bit the seed does not define: the sender MUST send them as zero (§3.2), the receiver reports them. */
export const RPCRDMA2_F_RESERVED = 0xffff_fffe;

// ---- Version 2 error codes (seed 004 §6.4) ----
export const RDMA2_ERR_VERS = 1;
/** Same value as Version 1 ERR_CHUNK (seed 004 §5.3.3). */
export const RDMA2_ERR_BAD_XDR = 2;
export const RDMA2_ERR_INVAL_HTYPE = 3;
export const RDMA2_ERR_READ_CHUNKS = 4;
export const RDMA2_ERR_WRITE_CHUNKS = 5;
export const RDMA2_ERR_SEGMENTS = 6;
export const RDMA2_ERR_WRITE_RESOURCE = 7;
export const RDMA2_ERR_REPLY_RESOURCE = 8;
export const RDMA2_ERR_SYSTEM = 9;

const V1_ERROR_NAMES = ['', 'ERR_VERS', 'ERR_CHUNK'];
const V2_ERROR_NAMES = [
  '',
  'RDMA2_ERR_VERS',
  'RDMA2_ERR_BAD_XDR',
  'RDMA2_ERR_INVAL_HTYPE',
  'RDMA2_ERR_READ_CHUNKS',
  'RDMA2_ERR_WRITE_CHUNKS',
  'RDMA2_ERR_SEGMENTS',
  'RDMA2_ERR_WRITE_RESOURCE',
  'RDMA2_ERR_REPLY_RESOURCE',
  'RDMA2_ERR_SYSTEM',
];

/**
 * The name of an RPC-over-RDMA error code (RFC 8166 §4.3 for Version 1, seed 004 §6.4 for Version 2), or
 * `UNKNOWN` for a code neither defines: a bounded set, fit for a metric label.
 */
export function rpcRdmaErrorName(version: number, code: number): string {
  const names = version === 1 ? V1_ERROR_NAMES : V2_ERROR_NAMES;
  return (Number.isInteger(code) && code > 0 && names[code]) || 'UNKNOWN';
}

// ---- Transport property ids (seed 004 §4.2, DESIGN.md §3 for 3 and 4) ----
export const RDMA2_PROPID_RBSIZ = 1;
export const RDMA2_PROPID_BRS = 2;
/** Requester accepts Send With Invalidate (xcharext XCHAR_REQREMINV, renumbered by DESIGN.md §3). */
export const RDMA2_PROPID_REQREMINV = 3;
/** Requester accepts responder-provided Read chunks (seed 002), numbered by DESIGN.md §3. */
export const RDMA2_PROPID_RPRC = 4;

/** `enum rpcrdma2_rvreqsup` (seed 004 §4.2.2). */
export const RDMA2_RVREQSUP_NONE = 0;
export const RDMA2_RVREQSUP_INLINE = 1;
export const RDMA2_RVREQSUP_GENL = 2;

/** Default Receive Buffer Size of a Version 2 connection (seed 004 §4.2.1, §7.1). */
export const RDMA2_DEFAULT_RBSIZ = 4096;
/** Default inline threshold of Version 1 without RFC 8797 private data (RFC 8166 §3.3.3). */
export const RPCRDMA_V1_DEFAULT_INLINE = 1024;

// ---- Encoded sizes (XDR words of RFC 8166 §4.3 / seed 004 §6.3) ----
/** `rdma_segment`: handle u32, length u32, offset u64. */
export const SEGMENT_SIZE = 16;
/** A read list entry: the "present" word, position u32, then the segment. */
export const READ_LIST_ENTRY_SIZE = 4 + 4 + SEGMENT_SIZE;
/** Overhead of one Write chunk in the write list: the "present" word and the segment count. */
export const WRITE_CHUNK_OVERHEAD = 8;
