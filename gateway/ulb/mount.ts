/**
 * MOUNT (program 100005, versions 1 and 3; RFC 1813 Appendix I): no DDP-eligible items. Replies are
 * bounded for the procedures with fixed results; MNT v3 (a list of auth flavors), DUMP and EXPORT
 * (lists) are not, and get a Reply chunk.
 */
import type { RpcCallHeader } from '../../rpc/message.js';
import {
  MIN_REPLY_HEADER,
  maxReplyHeaderSize,
  type UlbCallPlan,
  UlbOutcome,
  type UpperLayerBinding,
} from './types.js';

export const MOUNT_PROGRAM = 100005;

/** Largest results by procedure: NULL, MNT, DUMP, UMNT, UMNTALL, EXPORT; -1 unbounded. */
const V1_RESULTS: readonly number[] = [0, 4 + 32, -1, 0, 0, -1]; // fhstatus: status, fhandle[32]
const V3_RESULTS: readonly number[] = [0, -1, -1, 0, 0, -1];

export function createMountUlb(): UpperLayerBinding {
  const binding: UpperLayerBinding = {
    name: 'MOUNT versions 1 and 3 (RFC 1813 Appendix I)',
    program: MOUNT_PROGRAM,
    versions: [1, 3],
    planCall(call: RpcCallHeader, plan: UlbCallPlan): void {
      if (call.prog !== MOUNT_PROGRAM || (call.vers !== 1 && call.vers !== 3)) return;
      const table = call.vers === 1 ? V1_RESULTS : V3_RESULTS;
      if (call.proc < 0 || call.proc >= table.length) return;
      const results = table[call.proc];
      plan.maxReplySize = results < 0 ? -1 : maxReplyHeaderSize(call) + results;
      plan.minReplySize = MIN_REPLY_HEADER;
      plan.outcome = UlbOutcome.COMPLETE;
      plan.binding = binding;
    },
    locateResult: () => -1,
  };
  return binding;
}
