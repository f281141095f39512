/**
 * The readiness rule (what `/readyz` answers): ready only when the TCP listener is bound, at least one
 * RDMA connection is established, and the gateway is not draining. Kept apart from the gateway so that the
 * rule is one function with one test, and the gateway only reports facts.
 */
import type { ReadinessFacts } from './control.js';

export interface ReadinessVerdict {
  ready: boolean;
  reason: string | null;
}

export function judgeReadiness(f: ReadinessFacts): ReadinessVerdict {
  if (f.draining || f.state === 'draining') return { ready: false, reason: 'draining' };
  if (f.state === 'stopping' || f.state === 'stopped') return { ready: false, reason: `gateway ${f.state}` };
  if (!f.listenerBound) return { ready: false, reason: 'TCP listener not bound' };
  if (f.upstreamsReady < 1) return { ready: false, reason: 'no RDMA connection established' };
  if (f.state !== 'running') return { ready: false, reason: `gateway ${f.state}` };
  return { ready: true, reason: null };
}
