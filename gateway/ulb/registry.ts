/**
 * Bindings by program and version, and the one entry point the gateway calls per call. A call no
 * binding covers gets the safe fallback (no DDP items, reply size unknown); procedure 0 of any program
 * is answered without a binding, since by convention it takes and returns nothing (RFC 5531 §12.1),
 * except as an RPCSEC_GSS control message (RFC 2203 §5.2: reply size unknown).
 */
import type { RpcCallHeader } from '../../rpc/message.js';
import {
  gssProcOf,
  MIN_REPLY_HEADER,
  maxReplyHeaderSize,
  RPCSEC_GSS_DATA,
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
    // Procedure 0 under RPCSEC_GSS with gss_proc INIT or CONTINUE_INIT is a context-setup call (RFC 2203
    // §5.2.2), whatever the program: its reply carries rpc_gss_init_res (§5.2.3.1), a context handle
    // and a GSS token of no fixed bound (a Kerberos AP-REP, say), not the NULL procedure's nothing. Its
    // size is unknown, so that a Reply chunk is offered; the same for DESTROY (§5.4), whose reply is
    // small, rather than guess at what a server puts in it.
    if (call.proc === 0 && gssProcOf(call) > RPCSEC_GSS_DATA) plan.maxReplySize = -1;
    return plan;
  }
}
