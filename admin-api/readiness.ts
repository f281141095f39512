/**
 * The readiness rule (what `/readyz` answers): a gateway is ready only when its TCP listener is bound, at
 * least one RDMA connection is established, and it is not draining; a responder when its RDMA listener is
 * bound and it is not draining (it waits for the gateways to connect, so it cannot wait for a connection
 * before it says it is there). Kept apart from the roles so that the rule is one function with one test,
 * and the roles only report facts.
 */
import type { ReadinessFacts } from './control.js';

export interface ReadinessVerdict {
  ready: boolean;
  reason: string | null;
}

export function judgeReadiness(f: ReadinessFacts): ReadinessVerdict {
  if (f.draining || f.state === 'draining') return { ready: false, reason: 'draining' };
  const role = f.role ?? 'gateway';
  if (f.state === 'stopping' || f.state === 'stopped') return { ready: false, reason: `${role} ${f.state}` };
  if (role === 'responder') {
    if (!f.listenerBound) return { ready: false, reason: 'RDMA listener not bound' };
  } else {
    if (!f.listenerBound) return { ready: false, reason: 'TCP listener not bound' };
    if (f.upstreamsReady < 1) return { ready: false, reason: 'no RDMA connection established' };
  }
  if (f.state !== 'running') return { ready: false, reason: `${role} ${f.state}` };
  return { ready: true, reason: null };
}
