/**
 * A `GatewayControl` with state the test sets directly, recording every action it is asked for. It stands
 * in for the gateway so the admin app can be tested alone (the end-to-end file uses the real one).
 */
import { ControlError } from '../../admin-api/errors.js';
import type {
  ClientInfo,
  DrainStatus,
  GatewayControl,
  GatewayCounters,
  LocalPropertyOutcome,
  LogLevelName,
  PropertiesView,
  PropertyRequestOutcome,
  PropertyValues,
  ReadinessFacts,
  ServerInfo,
  UpstreamAction,
  UpstreamInfo,
} from '../../admin-api/index.js';

export function upstream(id: number, state: UpstreamInfo['state'] = 'ready'): UpstreamInfo {
  return {
    id,
    connectionId: state === 'ready' ? 100 + id : null,
    peer: '127.0.0.1:20049',
    state,
    version: state === 'ready' ? 2 : 0,
    credits: { granted: 32, inUse: 3, max: 128, queued: 0 },
    grant: 4,
    callsInFlight: 3,
    sendLimit: 4096,
    recvSize: 4096,
    remoteInvalidate: true,
    registrations: { inUse: 1, registered: 10, rekeys: 9 },
    reconnects: 1,
    connectAttempts: 0,
    lastError: id === 1 ? 'peer "closed"\nwith newline' : null,
  };
}

export function counters(): GatewayCounters {
  return {
    frontend: {
      connectionsAccepted: 5,
      connectionsRefused: 1,
      connectionsClosed: 3,
      connectionsOpen: 2,
      bytesIn: 1000,
      bytesOut: 2000,
      recordsIn: 10,
      recordsOut: 9,
      callsInFlight: 1,
      readPauses: 0,
      writeBlocks: 0,
      repliesDropped: 0,
      closes: { CLOSED_BY_CLIENT: 3 },
      errors: { ERR_RM_TOO_LARGE: 1 },
    },
    rpc: {
      callsTotal: 10,
      repliesTotal: 9,
      calls: [{ program: 100003, version: 3, procedure: 6, count: 7 }],
      replies: { success: 9 },
      callsByClass: { inline: 9 },
      inFlight: 1,
      creditStalls: 2,
      latency: { bounds: [0.001, 0.01, 0.1], counts: [5, 3, 1, 0], sumSeconds: 0.05 },
      backchannelCalls: 0,
      backchannelReplies: 0,
      events: { retransmits: 1 },
    },
    upstreams: [0, 1].map((id) => ({
      id,
      peer: '127.0.0.1:20049',
      callsSent: 10,
      repliesReceived: 9,
      callsReceived: 0,
      repliesSent: 0,
      inlineCalls: 8,
      readChunkCalls: 1,
      longCalls: 1,
      longReplies: 1,
      rdmaReads: 2,
      rdmaWrites: 3,
      bytesSent: 5000,
      bytesReceived: 6000,
      localInvalidations: 1,
      remoteInvalidations: 2,
      registrations: 4,
      retries: 0,
      droppedMessages: 0,
      resourceFailures: 3,
      rprcExpired: 1,
      errorsSent: {},
      errorsReceived: { ERR_CHUNK: 1 },
      connects: 2,
      reconnects: 1,
      disconnects: { 'peer closed': 1 },
      creditsGranted: 32,
      creditsInUse: 3,
      queued: 0,
    })),
  };
}

export class FakeControl implements GatewayControl {
  facts: ReadinessFacts = { listenerBound: true, upstreamsReady: 2, draining: false, state: 'running' };
  ups: UpstreamInfo[] = [upstream(0), upstream(1)];
  clientList: ClientInfo[] = [
    {
      id: 7,
      remote: '127.0.0.1:50000',
      local: '127.0.0.1:2049',
      connectedAt: Date.now() - 1000,
      callsInFlight: 1,
      bytesIn: 100,
      bytesOut: 200,
      recordsIn: 2,
      recordsOut: 1,
      paused: false,
      writeBlocked: false,
    },
  ];
  current: GatewayCounters = counters();
  /** What `nativeTeardownFailures()` reports: null = the process does not use the native addon. */
  teardown: Record<string, number> | null = null;
  level: LogLevelName = 'info';
  readonly actions: string[] = [];
  readonly startedAt = Date.now() - 5000;

  nativeTeardownFailures(): Record<string, number> | null {
    return this.teardown;
  }

  serverInfo(): ServerInfo {
    return {
      version: '0.1.0-test',
      node: process.version,
      role: 'gateway',
      provider: 'soft',
      devices: ['soft0'],
      state: this.facts.state,
      startedAt: this.startedAt,
      listening: ['127.0.0.1:2049'],
      peer: 'embedded',
    };
  }
  readiness(): ReadinessFacts {
    return { ...this.facts };
  }
  properties(): PropertiesView {
    return {
      local: {
        maxVersion: 2,
        rbsiz: 4096,
        maxRbsiz: 65536,
        sendSize: 4096,
        credits: 128,
        reqreminv: true,
        rprc: true,
        extensions: true,
      },
      connections: this.ups.map((u) => ({
        upstream: u.id,
        peer: u.peer,
        version: u.version,
        peerProperties: { rbsiz: 4096, reqreminv: true },
        sendLimit: u.sendLimit,
        recvSize: u.recvSize,
        credits: u.credits,
        pendingAtPeer: [],
        pendingForPeer: [],
        peerSupportsExtensions: true,
      })),
    };
  }
  upstreams(): UpstreamInfo[] {
    return this.ups.map((u) => ({ ...u }));
  }
  clients(): ClientInfo[] {
    return this.clientList.map((c) => ({ ...c }));
  }
  counters(): GatewayCounters {
    return structuredClone(this.current);
  }
  config(): Record<string, unknown> {
    return { admin: { listen: '127.0.0.1:9249', token: '***' }, rdma: { credits: 128 } };
  }
  logLevel(): LogLevelName {
    return this.level;
  }
  async requestPeerProperties(values: PropertyValues, up?: number): Promise<PropertyRequestOutcome[]> {
    this.actions.push(`reqprop ${JSON.stringify(values)} ${up}`);
    if (up !== undefined && !this.ups.some((u) => u.id === up))
      throw new ControlError('ERR_CONTROL_NOT_FOUND', `no upstream ${up}`);
    return this.ups
      .filter((u) => up === undefined || u.id === up)
      .map((u) => ({
        upstream: u.id,
        peer: u.peer,
        done: values.rbsiz !== undefined ? ['rbsiz' as const] : [],
        rejected: values.brs !== undefined ? ['brs' as const] : [],
        pending: [],
        error: null,
      }));
  }
  async setLocalProperties(values: PropertyValues, up?: number): Promise<LocalPropertyOutcome[]> {
    this.actions.push(`local ${JSON.stringify(values)} ${up}`);
    return this.ups.map((u) => ({ upstream: u.id, status: 'pending' as const, error: null }));
  }
  async upstreamAction(id: number, action: UpstreamAction): Promise<UpstreamInfo> {
    this.actions.push(`${action} ${id}`);
    const u = this.ups.find((x) => x.id === id);
    if (!u) throw new ControlError('ERR_CONTROL_NOT_FOUND', `no upstream ${id}`);
    if (action === 'offline') u.state = 'offline';
    if (action === 'online') u.state = 'connecting';
    return { ...u };
  }
  closeClient(id: number, reason: string): boolean {
    this.actions.push(`close ${id} ${reason}`);
    const before = this.clientList.length;
    this.clientList = this.clientList.filter((c) => c.id !== id);
    return this.clientList.length < before;
  }
  drain(): DrainStatus {
    this.actions.push('drain');
    this.facts.draining = true;
    return { draining: true, callsInFlight: 1 };
  }
  cancelDrain(): DrainStatus {
    this.actions.push('cancel drain');
    this.facts.draining = false;
    return { draining: false, callsInFlight: 1 };
  }
  setLogLevel(level: LogLevelName): void {
    this.actions.push(`level ${level}`);
    this.level = level;
  }
}
