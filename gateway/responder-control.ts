/**
 * `ResponderControl` (admin-api/control.ts) on top of a running `Responder`: the responder role's admin
 * API reads its counters and its accepted RDMA connections through here, and asks it to drain. Like
 * `control.ts` for the gateway, a thin adapter with no protocol logic; the views of one connection
 * (properties, counters, credits) are the gateway's own functions, so both roles report a connection alike.
 */
import type { Logger } from 'pino';
import type {
  DrainStatus,
  GatewayState,
  PropertiesView,
  ReadinessFacts,
  ResponderControl,
  ResponderCounters,
  ServerInfo,
  UpstreamCounters,
  UpstreamInfo,
} from '../admin-api/control.js';
import type { ConnectionSnapshot } from '../rdma-backend/transport/index.js';
import { formatHostPort, type HostPort } from '../tcp-frontend/address.js';
import type { GatewayConfig } from './config.js';
import {
  creditView,
  type GatewayAdmin,
  localProperties,
  ProcessControlAdapter,
  peerPropertiesView,
  startConfiguredAdmin,
  transportCounters,
} from './control.js';
import type { Responder } from './responder.js';

export interface ResponderControlOptions {
  config: GatewayConfig;
  /** The process's root logger: `setLogLevel` changes it, and its children follow. */
  logger: Logger;
  /** What the responder forwards to, as `/v1/server-info` shows it (`HOST:PORT`, or the test program). */
  upstream: string;
  /** Provider name for `/v1/server-info` and the info metric (`soft`, `native`). */
  provider: string;
  devices?: string[];
  startedAt?: number;
  version?: string;
}

export class ResponderControlAdapter
  extends ProcessControlAdapter<ResponderControlOptions>
  implements ResponderControl
{
  constructor(
    private readonly responder: Responder,
    o: ResponderControlOptions,
  ) {
    super(o);
  }

  private state(): GatewayState {
    const r = this.responder;
    if (r.closing) return r.links.size > 0 ? 'stopping' : 'stopped';
    if (r.draining) return 'draining';
    return r.address() ? 'running' : 'starting';
  }

  private live(): ConnectionSnapshot[] {
    return this.responder.connections();
  }

  serverInfo(): ServerInfo {
    const a = this.responder.address();
    return {
      version: this.version,
      node: process.version,
      role: 'responder',
      provider: this.o.provider,
      devices: this.o.devices ?? [],
      state: this.state(),
      startedAt: this.startedAt,
      listening: a ? [formatHostPort(a.host, a.port)] : [],
      peer: this.o.upstream,
    };
  }

  readiness(): ReadinessFacts {
    return {
      role: 'responder',
      listenerBound: this.responder.address() !== null,
      upstreamsReady: this.live().filter((c) => c.state === 'ready').length,
      // Stopping is not draining: it closes its connections (the requesters resend elsewhere), whether or
      // not a drain came first (POST /v1/drain); the state says it.
      draining: this.responder.draining && !this.responder.closing,
      state: this.state(),
    };
  }

  properties(): PropertiesView {
    const first = this.responder.rdmaConnections()[0];
    return {
      local: localProperties(this.o.config, first?.opts),
      connections: this.live().map((cs) => peerPropertiesView(cs.id, cs)),
    };
  }

  connections(): UpstreamInfo[] {
    return this.responder.connectionsServing().map(({ snapshot, calls }) => connectionInfo(snapshot, calls));
  }

  counters(): { responder: ResponderCounters; connections: UpstreamCounters[] } {
    const s = this.responder.stats;
    return {
      responder: {
        connectionsAccepted: s.connections,
        acceptFailures: s.acceptFailures,
        connectionsRefused: s.refused,
        connectionsIdleClosed: s.idleClosed,
        lingeringUpstreamsCut: s.lingerCut,
        callsForwarded: s.callsForwarded,
        repliesSent: s.repliesSent,
        unmatchedReplies: s.unmatchedReplies,
        duplicateXids: s.duplicateXids,
        oversizedReplies: s.oversizedReplies,
        callbacks: s.callbacks,
        callbackReplies: s.callbackReplies,
        callbacksFailed: s.callbacksFailed,
        links: s.links,
        pending: s.pending,
      },
      connections: this.live().map((cs) => ({
        ...transportCounters(cs.id, cs.peer, (k) => cs.counters[k]),
        registrations: cs.registrations.registered,
        errorsSent: { ...cs.errors.sent },
        errorsReceived: { ...cs.errors.received },
        reconnects: 0,
        creditsGranted: cs.credits.granted,
        creditsInUse: cs.credits.outstanding,
        queued: cs.credits.queued,
      })),
    };
  }

  drain(): DrainStatus {
    this.responder.drain();
    return { draining: true, callsInFlight: this.responder.stats.pending };
  }

  cancelDrain(): DrainStatus {
    this.responder.resume();
    return { draining: false, callsInFlight: this.responder.stats.pending };
  }
}

/**
 * An accepted connection in the `UpstreamInfo` shape (no pool slot: the id is the connection's), with the
 * calls it is serving.
 */
function connectionInfo(cs: ConnectionSnapshot, callsInFlight: number): UpstreamInfo {
  return {
    id: cs.id,
    connectionId: cs.id,
    peer: cs.peer,
    state: cs.state,
    version: cs.version,
    credits: creditView(cs),
    grant: cs.grant,
    callsInFlight,
    sendLimit: cs.sendLimit,
    recvSize: cs.recvSize,
    remoteInvalidate: cs.remoteInvalidateOk,
    registrations: {
      inUse: cs.registrations.inUse,
      registered: cs.registrations.registered,
      rekeys: cs.registrations.rekeys,
    },
    reconnects: 0,
    connectAttempts: 0,
    lastError: null,
  };
}

/**
 * Starts the responder's admin API as configured (`admin.token`, ...) on `listen`; null when it is `off`.
 * The caller picks the address (the responder's default port differs from the gateway's, so that both run
 * on one host: `commands/responder.ts`).
 */
export function startResponderAdmin(
  responder: Responder,
  listen: HostPort | 'off',
  options: ResponderControlOptions,
): Promise<GatewayAdmin | null> {
  return startConfiguredAdmin(
    { responder: new ResponderControlAdapter(responder, options) },
    listen,
    options.config,
    options.logger,
  );
}
