/**
 * The test program's upper-layer binding (RFC 8166 §6), in the general shape every binding has
 * (`gateway/ulb/types.ts`): SINK's data is a DDP-eligible argument (it may travel in a Read chunk), SOURCE's
 * data a DDP-eligible result (it may come back in a Write chunk); ECHO carries its data inline or in a
 * Long Call / Reply chunk. docs/test-program.md lists the same answers.
 */
import { getU32BE } from '../../common/bytes.js';
import type { RpcCallHeader } from '../../rpc/message.js';
import { xdrAlign } from '../../rpc/xdr.js';
import {
  DdpKind,
  MIN_REPLY_HEADER,
  maxReplyHeaderSize,
  successResultsOffset,
  type UlbCallPlan,
  UlbOutcome,
  type UpperLayerBinding,
} from '../ulb/types.js';
import { DEFAULT_MAX_TEST_DATA, TEST_PROGRAM, TEST_VERSION, TestProc } from './constants.js';

/** Length of the opaque at the start of the arguments, or -1 if the arguments cannot hold it. */
function leadingOpaqueLength(call: RpcCallHeader): number {
  const at = call.bodyOffset;
  if (call.end - at < 4) return -1;
  const length = getU32BE(call.buf, at);
  return xdrAlign(length) > call.end - at - 4 ? -1 : length;
}

/** SOURCE's `count`, or -1 when the arguments (count, seed) are not all there. */
function sourceCount(call: RpcCallHeader): number {
  return call.end - call.bodyOffset < 8 ? -1 : getU32BE(call.buf, call.bodyOffset);
}

/**
 * The binding. `maxData` is the server's data limit: a SOURCE asking for more is refused by the server
 * (SYSTEM_ERR: well-formed arguments, more than it will produce), so no Write chunk larger than it is
 * ever offered.
 */
export function createTestProgramUlb(maxData = DEFAULT_MAX_TEST_DATA): UpperLayerBinding {
  const binding: UpperLayerBinding = {
    name: 'rpcrdma-gateway test program',
    program: TEST_PROGRAM,
    versions: [TEST_VERSION],
    planCall(call: RpcCallHeader, plan: UlbCallPlan): void {
      if (call.prog !== TEST_PROGRAM || call.vers !== TEST_VERSION) return;
      const header = maxReplyHeaderSize(call);
      switch (call.proc) {
        case TestProc.NULL:
          plan.maxReplySize = header;
          plan.minReplySize = MIN_REPLY_HEADER;
          break;
        case TestProc.ECHO: {
          const length = leadingOpaqueLength(call);
          if (length < 0) return; // garbled: the server answers GARBAGE_ARGS; plan stays UNKNOWN
          plan.maxReplySize = header + 4 + xdrAlign(length);
          plan.minReplySize = MIN_REPLY_HEADER + 4 + xdrAlign(length);
          break;
        }
        case TestProc.SINK: {
          const length = leadingOpaqueLength(call);
          if (length < 0) return;
          // The length word stays in the Payload stream; the data moves (RFC 8166 §3.4.5).
          plan.addArg(call.bodyOffset + 4, length);
          plan.maxReplySize = header + 4;
          plan.minReplySize = MIN_REPLY_HEADER + 4;
          break;
        }
        case TestProc.SOURCE: {
          const count = sourceCount(call);
          if (count < 0) return;
          const bounded = Math.min(count, maxData);
          plan.addResult(bounded, DdpKind.DATA);
          plan.maxReplySize = header + 4 + xdrAlign(bounded);
          plan.minReplySize = MIN_REPLY_HEADER + 4;
          break;
        }
        default:
          return; // PROC_UNAVAIL from the server: nothing to plan
      }
      plan.outcome = UlbOutcome.COMPLETE;
      plan.binding = binding;
    },
    locateResult(plan: UlbCallPlan, reply: Buffer, start: number, end: number, index: number): number {
      if (index !== 0 || plan.proc !== TestProc.SOURCE) return -1;
      // SOURCE's result is `opaque<>`: its length word first, the data right after it.
      const results = successResultsOffset(reply, start, end);
      return results < 0 || results + 4 > end ? -1 : results + 4;
    },
  };
  return binding;
}

/** The binding for the default data limit. */
export const testProgramUlb: UpperLayerBinding = createTestProgramUlb();
