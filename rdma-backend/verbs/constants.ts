/**
 * Numeric constants of the verbs interface. Every value equals the libibverbs / librdmacm one
 * (`<infiniband/verbs.h>`, `<rdma/rdma_cma.h>`), so the native provider passes them through unchanged
 * and a log line reads the same as one from a C program. They are `as const` objects rather than
 * TypeScript enums so that they erase to plain numbers under `isolatedModules`.
 */

/** `enum ibv_wc_status`: the status of a work completion. */
export const WcStatus = {
  SUCCESS: 0,
  LOC_LEN_ERR: 1,
  LOC_QP_OP_ERR: 2,
  LOC_EEC_OP_ERR: 3,
  LOC_PROT_ERR: 4,
  WR_FLUSH_ERR: 5,
  MW_BIND_ERR: 6,
  BAD_RESP_ERR: 7,
  LOC_ACCESS_ERR: 8,
  REM_INV_REQ_ERR: 9,
  REM_ACCESS_ERR: 10,
  REM_OP_ERR: 11,
  RETRY_EXC_ERR: 12,
  RNR_RETRY_EXC_ERR: 13,
  LOC_RDD_VIOL_ERR: 14,
  REM_INV_RD_REQ_ERR: 15,
  REM_ABORT_ERR: 16,
  INV_EECN_ERR: 17,
  INV_EEC_STATE_ERR: 18,
  FATAL_ERR: 19,
  RESP_TIMEOUT_ERR: 20,
  GENERAL_ERR: 21,
} as const;
export type WcStatus = (typeof WcStatus)[keyof typeof WcStatus];

/** `ibv_wc_status_str()` names, for logs and test messages. */
export function wcStatusName(status: number): string {
  for (const [name, value] of Object.entries(WcStatus)) if (value === status) return `IBV_WC_${name}`;
  return `IBV_WC_STATUS_${status}`;
}

/**
 * `enum ibv_wc_opcode`. Receive completions have bit 7 set (`opcode & WcOpcode.RECV`), as in libibverbs.
 * Note that the opcode of a completion with an error status other than on a receive is undefined in
 * libibverbs; providers here fill it anyway (from the work request) but consumers must key on `wrId`.
 */
export const WcOpcode = {
  SEND: 0,
  RDMA_WRITE: 1,
  RDMA_READ: 2,
  COMP_SWAP: 3,
  FETCH_ADD: 4,
  BIND_MW: 5,
  LOCAL_INV: 6,
  TSO: 7,
  RECV: 128,
  RECV_RDMA_WITH_IMM: 129,
} as const;
export type WcOpcode = (typeof WcOpcode)[keyof typeof WcOpcode];

/** `enum ibv_wc_flags`: `WITH_INV` marks a receive whose Send With Invalidate invalidated `invalidatedRkey`. */
export const WcFlags = {
  GRH: 1 << 0,
  WITH_IMM: 1 << 1,
  IP_CSUM_OK: 1 << 2,
  WITH_INV: 1 << 3,
} as const;

/** `enum ibv_access_flags` (the ones a provider must honour). */
export const Access = {
  LOCAL_WRITE: 1 << 0,
  REMOTE_WRITE: 1 << 1,
  REMOTE_READ: 1 << 2,
  REMOTE_ATOMIC: 1 << 3,
  MW_BIND: 1 << 4,
  ZERO_BASED: 1 << 5,
} as const;

/**
 * `enum ibv_wr_opcode`. Send with Solicited Event is `SEND` (or `SEND_WITH_INV`) plus
 * `SendFlags.SOLICITED`, exactly as in libibverbs; the soft provider maps that to RDMAP opcodes 5/6.
 */
export const WrOpcode = {
  RDMA_WRITE: 0,
  RDMA_WRITE_WITH_IMM: 1,
  SEND: 2,
  SEND_WITH_IMM: 3,
  RDMA_READ: 4,
  ATOMIC_CMP_AND_SWP: 5,
  ATOMIC_FETCH_AND_ADD: 6,
  LOCAL_INV: 7,
  BIND_MW: 8,
  SEND_WITH_INV: 9,
} as const;
export type WrOpcode = (typeof WrOpcode)[keyof typeof WrOpcode];

/** `enum ibv_send_flags`. */
export const SendFlags = {
  FENCE: 1 << 0,
  SIGNALED: 1 << 1,
  SOLICITED: 1 << 2,
  INLINE: 1 << 3,
} as const;

/** `enum ibv_qp_state`. */
export const QpState = {
  RESET: 0,
  INIT: 1,
  RTR: 2,
  RTS: 3,
  SQD: 4,
  SQE: 5,
  ERR: 6,
} as const;
export type QpState = (typeof QpState)[keyof typeof QpState];

/** `enum rdma_cm_event_type`. */
export const CmEventType = {
  ADDR_RESOLVED: 0,
  ADDR_ERROR: 1,
  ROUTE_RESOLVED: 2,
  ROUTE_ERROR: 3,
  CONNECT_REQUEST: 4,
  CONNECT_RESPONSE: 5,
  CONNECT_ERROR: 6,
  UNREACHABLE: 7,
  REJECTED: 8,
  ESTABLISHED: 9,
  DISCONNECTED: 10,
  DEVICE_REMOVAL: 11,
  MULTICAST_JOIN: 12,
  MULTICAST_ERROR: 13,
  ADDR_CHANGE: 14,
  TIMEWAIT_EXIT: 15,
} as const;
export type CmEventType = (typeof CmEventType)[keyof typeof CmEventType];

/** `rdma_event_str()` names. */
export function cmEventName(type: number): string {
  for (const [name, value] of Object.entries(CmEventType)) if (value === type) return `RDMA_CM_EVENT_${name}`;
  return `RDMA_CM_EVENT_${type}`;
}

/** `enum ibv_transport_type` (IBV_TRANSPORT_IB = 0, IBV_TRANSPORT_IWARP = 1). */
export const TransportType = {
  IB: 0,
  IWARP: 1,
} as const;
export type TransportType = (typeof TransportType)[keyof typeof TransportType];
