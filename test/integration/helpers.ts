/**
 * The whole chain in one process for integration tests: frontend on a free loopback port → router →
 * pool on the soft provider → embedded responder → built-in test program over TCP. Real sockets all the
 * way; only the configuration is made small.
 */
import { type GatewayConfig, loadConfig } from '../../gateway/config.js';
import { type Gateway, startGateway } from '../../gateway/gateway.js';
import type { HostPort } from '../../tcp-frontend/address.js';

export interface TestGatewayOptions {
  poolSize?: number;
  /** Credits the gateway asks for per connection. */
  credits?: number;
  /** Credits the embedded responder grants (the effective limit is the smaller). */
  grant?: number;
  holdTimeMs?: number;
  /** A peer instead of the embedded responder. */
  peer?: HostPort;
  maxCallsInFlight?: number;
  /** `frontend.maxReplyBytes`: reply bytes one client may have coming and unsent. */
  maxReplyBytes?: number;
  backoffMs?: number;
  routerTickMs?: number;
  /** `frontend.resumeWindowMs` / `frontend.resumeMaxBytes`: what is kept for a departed client's return. */
  resumeWindowMs?: number;
  resumeMaxBytes?: number;
  /** Soft provider MPA CRC (`rdma.softCrc`). */
  softCrc?: boolean;
}

export function testConfig(o: TestGatewayOptions = {}): GatewayConfig {
  const { config } = loadConfig({ env: {}, flags: new Map() });
  config.frontend.listen = [{ host: '127.0.0.1', port: 0 }];
  config.rdma.provider = 'soft';
  config.rdma.poolSize = o.poolSize ?? 1;
  config.rdma.credits = o.credits ?? config.rdma.credits;
  config.rdma.holdTimeMs = o.holdTimeMs ?? config.rdma.holdTimeMs;
  if (o.peer) config.rdma.peer = o.peer;
  if (o.maxCallsInFlight) config.frontend.maxCallsInFlight = o.maxCallsInFlight;
  if (o.maxReplyBytes) config.frontend.maxReplyBytes = o.maxReplyBytes;
  if (o.resumeWindowMs !== undefined) config.frontend.resumeWindowMs = o.resumeWindowMs;
  if (o.resumeMaxBytes !== undefined) config.frontend.resumeMaxBytes = o.resumeMaxBytes;
  if (o.softCrc !== undefined) config.rdma.softCrc = o.softCrc;
  config.log.level = 'silent';
  return config;
}

export async function startTestGateway(o: TestGatewayOptions = {}): Promise<Gateway> {
  return startGateway({
    config: testConfig(o),
    embeddedGrant: o.grant,
    routerTickMs: o.routerTickMs,
    backoff: { initialMs: o.backoffMs ?? 50, maxMs: 500 },
  });
}

/** Everything that must come back to its baseline once no call is in flight (leak checks). */
export function gauges(g: Gateway) {
  const r = g.router.snapshot();
  const pool = g.pool.snapshot();
  let poolRegistrations = 0;
  for (const s of pool.slots) poolRegistrations += s.connection?.registrations.inUse ?? 0;
  let responderRegistrations = 0;
  for (const c of g.embedded?.responder.connections() ?? []) responderRegistrations += c.registrations.inUse;
  return {
    routerInFlight: r.inFlight,
    routerQueued: r.queued,
    recordsInUse: r.recordsInUse,
    frontendCallsInFlight: g.frontend.stats.callsInFlight,
    poolRegistrations,
    responderRegistrations,
    responderPending: g.embedded?.responder.stats.pending ?? 0,
  };
}

export const BASELINE = {
  routerInFlight: 0,
  routerQueued: 0,
  recordsInUse: 0,
  frontendCallsInFlight: 0,
  poolRegistrations: 0,
  responderRegistrations: 0,
  responderPending: 0,
};

/**
 * The gauges once they are back at BASELINE, or as they are after `timeoutMs`. After an RDMA connection is
 * killed, the responder keeps the calls it had already forwarded upstream until their replies come back
 * (then drops them: RFC 8166 §3.3.1, the requester resends elsewhere), so its `responderPending` drains a
 * moment after the router is idle. A leak shows as gauges that never come back.
 */
export async function settledGauges(g: Gateway, timeoutMs = 10_000): Promise<ReturnType<typeof gauges>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const now = gauges(g);
    const atBaseline = (Object.keys(BASELINE) as (keyof typeof BASELINE)[]).every(
      (k) => now[k] === BASELINE[k],
    );
    if (atBaseline || Date.now() > deadline) return now;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Sums a transport counter over the pool's connections (client ends) or the responder's (server ends). */
export function sumCounters(
  g: Gateway,
  side: 'pool' | 'responder',
  name: 'readChunkCalls' | 'rdmaReads' | 'rdmaWrites' | 'longCalls' | 'longReplies' | 'callsSent',
): number {
  let n = 0;
  if (side === 'pool') {
    for (const s of g.pool.snapshot().slots) n += s.connection?.counters[name] ?? 0;
  } else {
    for (const c of g.embedded?.responder.connections() ?? []) n += c.counters[name];
  }
  return n;
}

/** mulberry32: a small seeded PRNG so a failing run can be replayed from its logged seed. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 0x1_0000_0000;
  };
}
