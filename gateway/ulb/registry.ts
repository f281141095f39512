/**
 * Bindings by program and version, and the one entry point the gateway calls per call. A call no
 * binding covers gets the safe fallback (no DDP items, reply size unknown); procedure 0 of any program
 * is answered without a binding, since by convention it takes and returns nothing (RFC 5531 §12.1).
 */
import type { RpcCallHeader } from '../../rpc/message.js';
import {
  MIN_REPLY_HEADER,
  maxReplyHeaderSize,
  type UlbCallPlan,
  UlbOutcome,
  type UpperLayerBinding,
} from './types.js';

/** The binding for procedure 0 (NULL) of programs that have no binding of their own. */
export const nullProcedureUlb: UpperLayerBinding = {
  name: 'NULL procedure of any program (RFC 5531 §12.1)',
  program: -1,
  versions: [],
  planCall(call, plan) {
    if (call.proc !== 0) return;
    plan.maxReplySize = maxReplyHeaderSize(call);
    plan.minReplySize = MIN_REPLY_HEADER;
    plan.outcome = UlbOutcome.COMPLETE;
    plan.binding = nullProcedureUlb;
  },
  locateResult: () => -1,
};

export class UlbRegistry {
  private readonly programs = new Map<number, Map<number, UpperLayerBinding>>();

  /** Registers `binding` for each of its versions; a later registration replaces an earlier one. */
  register(binding: UpperLayerBinding): this {
    let versions = this.programs.get(binding.program);
    if (versions === undefined) {
      versions = new Map();
      this.programs.set(binding.program, versions);
    }
    for (const v of binding.versions) versions.set(v, binding);
    return this;
  }

  lookup(program: number, version: number): UpperLayerBinding | undefined {
    return this.programs.get(program)?.get(version);
  }

  /**
   * Fills `plan` for `call` (a decoded call header). Never throws; `plan.outcome` says how much was
   * understood, and the gateway counts the UNKNOWN and PARTIAL ones.
   */
  planCall(call: RpcCallHeader, plan: UlbCallPlan): UlbCallPlan {
    plan.reset(call);
    const binding = this.lookup(call.prog, call.vers);
    if (binding !== undefined) binding.planCall(call, plan);
    if (plan.binding === null && call.proc === 0) nullProcedureUlb.planCall(call, plan);
    return plan;
  }
}
