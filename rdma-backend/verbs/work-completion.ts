import { WcOpcode, WcStatus } from './constants.js';

/**
 * One work completion (`struct ibv_wc`). Consumers preallocate an array of these once
 * (`createWorkCompletions`) and pass it to `CompletionQueue.poll()`, which overwrites the first N
 * entries: no object is allocated per completion.
 */
export class WorkCompletion {
  /** The `wrId` of the work request this completes. */
  wrId = 0;
  /** `WcStatus` value (IBV_WC_*). */
  status: number = WcStatus.SUCCESS;
  /** `WcOpcode` value; receives have bit 7 set. */
  opcode: number = WcOpcode.SEND;
  /** Bytes received (receive completions) or transferred (RDMA Read completions). */
  byteLen = 0;
  /** `WcFlags` bits: `WITH_INV` when `invalidatedRkey` is valid, `WITH_IMM` when `immData` is. */
  wcFlags = 0;
  /** Immediate data (host order) when `wcFlags & WITH_IMM`. */
  immData = 0;
  /** The rkey the peer's Send With Invalidate invalidated here, when `wcFlags & WITH_INV` (ibv_wc.invalidated_rkey). */
  invalidatedRkey = 0;
  /** Local QP number the work request was posted to. */
  qpNum = 0;
  /** Provider-specific detail of an error status (ibv_wc.vendor_err); 0 on success. */
  vendorErr = 0;

  /** Copies every field from another completion (used by providers filling a caller's array). */
  copyFrom(o: WorkCompletion): void {
    this.wrId = o.wrId;
    this.status = o.status;
    this.opcode = o.opcode;
    this.byteLen = o.byteLen;
    this.wcFlags = o.wcFlags;
    this.immData = o.immData;
    this.invalidatedRkey = o.invalidatedRkey;
    this.qpNum = o.qpNum;
    this.vendorErr = o.vendorErr;
  }
}

/** Allocates `n` reusable completions for `CompletionQueue.poll()`. */
export function createWorkCompletions(n: number): WorkCompletion[] {
  const out: WorkCompletion[] = new Array(n);
  for (let i = 0; i < n; i++) out[i] = new WorkCompletion();
  return out;
}
