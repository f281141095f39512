/**
 * `GatewayControl` (admin-api/control.ts) on top of a running `Gateway`: a thin adapter from what the
 * gateway already has — the frontend's counters and connections, the router's counters, the pool's slot
 * snapshots and the transport's `ConnectionSnapshot`s — to the plain views the admin API reads, and the
 * few actions it asks for. It holds no protocol logic; property changes go through the transport's own
 * `requestProperties()` / `raiseReceiveSize()` (REQPROP / RESPPROP / UPDPROP, DESIGN §3).
 *
 * Per-slot counters stay monotonic across reconnects: a transport connection's counters start at zero, so
 * the adapter adds the last values it saw of each earlier connection of the slot to the current one's.
 * Increments between that last look and the disconnect are not seen (the pool does not hand us the dying
 * connection's final counters); `/metrics` therefore never goes backwards, but may be a little low after a
 * reconnect.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import type {
  ClientInfo,
  DrainStatus,
  GatewayControl,
  GatewayCounters,
  GatewayState,
  LocalPropertyOutcome,
  LogLevelName,
  PeerPropertiesView,
  PropertiesView,
  PropertyName,
  PropertyRequestOutcome,
  PropertyValues,
  ReadinessFacts,
  RoutingCounters,
  ServerInfo,
  UpstreamAction,
  UpstreamCounters,
  UpstreamInfo,
} from '../admin-api/control.js';
import { ControlError } from '../admin-api/errors.js';
import { type AdminApi, type AdminApiOptions, createAdminApi } from '../admin-api/index.js';
import { GatewayError } from '../common/errors.js';
import {
  RDMA2_PROPID_BRS,
  RDMA2_PROPID_RBSIZ,
  RDMA2_PROPID_REQREMINV,
  RDMA2_PROPID_RPRC,
} from '../rdma-backend/protocol/index.js';
import { loadedAddonTeardownFailures } from '../rdma-backend/providers/native/index.js';
import type {
  ConnectionCounters,
  ConnectionSnapshot,
  PoolSnapshot,
  RpcRdmaConnection,
} from '../rdma-backend/transport/index.js';
import { formatHostPort, type HostPort } from '../tcp-frontend/address.js';
import { configToPlain, type GatewayConfig } from './config.js';
import type { Gateway } from './gateway.js';

const ID_OF: Record<PropertyName, number> = {
  rbsiz: RDMA2_PROPID_RBSIZ,
  brs: RDMA2_PROPID_BRS,
  reqreminv: RDMA2_PROPID_REQREMINV,
  rprc: RDMA2_PROPID_RPRC,
};
const NAME_OF = new Map<number, PropertyName>(
  Object.entries(ID_OF).map(([name, id]) => [id, name as PropertyName]),
);

function namesOf(ids: readonly number[]): PropertyName[] {
  return ids.flatMap((id) => {
    const n = NAME_OF.get(id);
    return n ? [n] : [];
  });
}

function packageVersion(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  for (const up of [join(here, '..', '..', 'package.json'), join(here, '..', 'package.json')]) {
    try {
      return (JSON.parse(readFileSync(up, 'utf8')) as { version: string }).version;
    } catch {
      // try the next candidate (dist/gateway or the source tree)
    }
  }
  return '0.0.0';
}

function errorRef(e: unknown): { code: string; message: string } {
  if (e instanceof GatewayError) return { code: e.code, message: e.message };
  return { code: 'ERR_CONTROL_FAILED', message: e instanceof Error ? e.message : String(e) };
}

export interface GatewayControlOptions {
  config: GatewayConfig;
  /** The gateway's root logger: `setLogLevel` changes it, and its children follow. */
  logger: Logger;
  /** Provider name and devices for /v1/server-info (default: derived from the provider choice). */
  provider?: string;
  devices?: string[];
  version?: string;
  startedAt?: number;
  /**
   * How long an upstream taken offline may keep its calls in flight before its connection is closed
   * anyway (the router resends what is left on another). Default 30 s.
   */
  offlineDrainMs?: number;
}

/** Counter fields summed across the connections a slot has had. */
const SUMMED: readonly (keyof ConnectionCounters)[] = [
  'callsSent',
  'repliesReceived',
  'callsReceived',
  'repliesSent',
  'errorsSent',
  'errorsReceived',
  'retries',
  'inlineCalls',
  'readChunkCalls',
  'longCalls',
  'longReplies',
  'localInvalidations',
  'remoteInvalidations',
  'rdmaReads',
  'rdmaWrites',
  'rdmaReadBytes',
  'rdmaWriteBytes',
  'peerReadBytes',
  'peerWriteBytes',
  'placedBytes',
  'writeChunkCalls',
  'replyChunkCalls',
  'creditStalls',
  'droppedMessages',
  'resourceFailures',
  'rprcExpired',
  'bytesSent',
  'bytesReceived',
];

interface SlotHistory {
  connectionId: number | null;
  /**
   * The last counters seen of the current connection, and the sum over the slot's earlier ones. Keys are
   * counter names, plus `registrations` and the error counts as `errorsSent.<CODE>` / `errorsReceived.<CODE>`.
   */
  last: Record<string, number>;
  retired: Record<string, number>;
}

/** What the adapters of both roles share: when it started, its version, its configuration and log level. */
export abstract class ProcessControlAdapter<
  O extends { config: GatewayConfig; logger: Logger; startedAt?: number; version?: string },
> {
  protected readonly startedAt: number;
  protected readonly version: string;

  constructor(protected readonly o: O) {
    this.startedAt = o.startedAt ?? Date.now();
    this.version = o.version ?? packageVersion();
  }

  config(): Record<string, unknown> {
    return configToPlain(this.o.config);
  }

  logLevel(): LogLevelName {
    return this.o.logger.level as LogLevelName;
  }

  setLogLevel(level: LogLevelName): void {
    // pino children created without a level of their own follow their parent's level.
    this.o.logger.level = level;
  }

  nativeTeardownFailures(): Record<string, number> | null {
    return loadedAddonTeardownFailures();
  }
}

export class GatewayControlAdapter
  extends ProcessControlAdapter<GatewayControlOptions>
  implements GatewayControl
{
  private readonly history = new Map<number, SlotHistory>();
  /** Pool slots the operator took offline: whatever connection occupies them is kept out of rotation. */
  private readonly offlineSlots = new Set<number>();
  /** Offline slots still draining before the pool parks them. */
  private readonly parkTimers = new Map<number, NodeJS.Timeout>();
  private stopWatchingPool: (() => void) | null = null;

  constructor(
    private readonly gateway: Gateway,
    o: GatewayControlOptions,
  ) {
    super(o);
    // A stopping gateway parks nothing more and reconnects nothing: the timers and the pool listener end.
    gateway.onStop(() => this.close());
  }

  /** Ends the park timers and the pool listener (the gateway is stopping). */
  close(): void {
    for (const id of [...this.parkTimers.keys()]) this.cancelPark(id);
    this.stopWatchingPool?.();
    this.stopWatchingPool = null;
  }

  /** Follows reconnects of offline slots: the new connection of such a slot starts out of rotation. */
  private watchPool(): void {
    if (this.stopWatchingPool || this.gateway.stopping) return;
    this.stopWatchingPool = this.gateway.pool.onReady((conn) => {
      const slot = this.gateway.pool.snapshot().slots.find((s) => s.connection?.id === conn.id);
      if (slot && this.offlineSlots.has(slot.index)) this.gateway.router.setOffline(conn, true);
    });
  }

  private state(): GatewayState {
    if (this.gateway.stopping) return this.gateway.stopped ? 'stopped' : 'stopping';
    if (this.gateway.draining) return 'draining';
    return this.gateway.frontend.addresses().length > 0 ? 'running' : 'stopped';
  }

  serverInfo(): ServerInfo {
    const peer = formatHostPort(this.gateway.peer.host, this.gateway.peer.port);
    return {
      version: this.version,
      node: process.version,
      role: 'gateway',
      provider: this.o.provider ?? (/^soft/.test(this.gateway.providerReason) ? 'soft' : 'native'),
      devices: this.o.devices ?? [],
      state: this.state(),
      startedAt: this.startedAt,
      listening: this.gateway.frontend.addresses().map((a) => formatHostPort(a.host, a.port)),
      peer: this.gateway.embedded ? `embedded (${peer})` : peer,
    };
  }

  readiness(): ReadinessFacts {
    return {
      listenerBound: this.gateway.frontend.addresses().length > 0,
      upstreamsReady: this.gateway.pool
        .snapshot()
        .slots.filter((s) => s.state === 'ready' && !this.offlineSlots.has(s.index)).length,
      draining: this.gateway.draining || this.gateway.stopping,
      state: this.state(),
    };
  }

  properties(): PropertiesView {
    const connections: PeerPropertiesView[] = [];
    for (const s of this.gateway.pool.snapshot().slots) {
      if (s.connection) connections.push(peerPropertiesView(s.index, s.connection));
    }
    return { local: localProperties(this.o.config, this.gateway.pool.connections()[0]?.opts), connections };
  }

  upstreams(): UpstreamInfo[] {
    const pool = this.gateway.pool.snapshot();
    return pool.slots.map((s) => upstreamInfo(pool.peer, s, this.offlineSlots.has(s.index)));
  }

  clients(): ClientInfo[] {
    const out: ClientInfo[] = [];
    for (const c of this.gateway.frontend.connections) {
      out.push({
        id: c.id,
        remote: formatHostPort(c.remoteAddress, c.remotePort),
        local: formatHostPort(c.localAddress, c.localPort),
        connectedAt: c.openedAt,
        callsInFlight: c.inFlight,
        bytesIn: c.bytesIn,
        bytesOut: c.bytesOut,
        recordsIn: c.recordsIn,
        recordsOut: c.recordsOut,
        paused: c.readPaused,
        writeBlocked: c.writeBlocked,
      });
    }
    return out;
  }

  counters(): GatewayCounters {
    const f = this.gateway.frontend.stats;
    const r = this.gateway.router.snapshot();
    const calls = this.gateway.router.callStats.snapshot();
    const pool = this.gateway.pool.snapshot();
    return {
      frontend: {
        connectionsAccepted: f.connectionsAccepted,
        connectionsRefused: f.connectionsRefused,
        connectionsClosed: f.connectionsClosed,
        connectionsOpen: f.connectionsOpen,
        bytesIn: f.bytesIn,
        bytesOut: f.bytesOut,
        recordsIn: f.recordsIn,
        recordsOut: f.recordsOut,
        callsInFlight: f.callsInFlight,
        readPauses: f.readPauses,
        writeBlocks: f.writeBlocks,
        repliesDropped: f.repliesDropped,
        closes: { ...f.closes },
        errors: { ...f.errors },
      },
      rpc: {
        callsTotal: r.calls,
        repliesTotal: r.replies,
        calls: calls.calls,
        callsOther: calls.callsOther,
        replies: calls.replies,
        callsByClass: {},
        inFlight: r.inFlight,
        heldReplies: r.heldReplies,
        heldReplyBytes: r.heldReplyBytes,
        departuresKept: r.departuresKept,
        callsKept: r.callsKept,
        latency: calls.latency,
        transportFailures: calls.failures,
        backchannelCalls: r.backchannelCalls,
        backchannelReplies: r.backchannelReplies,
        events: {
          retransmits: r.retransmits,
          orphaned_replies: r.orphanedReplies,
          dropped_queued: r.droppedQueued,
          duplicates_dropped: r.duplicatesDropped,
          departures: r.departures,
          unmatchable_departures: r.unmatchableDepartures,
          resumed_in_flight: r.resumedInFlight,
          resumed_answered: r.resumedAnswered,
          resumed_sent: r.resumedSent,
          resumed_unpinned: r.resumedUnpinned,
          held_replies_dropped: r.heldRepliesDropped,
          hold_expired: r.holdExpired,
          refused: r.refused,
          malformed: r.malformed,
          backchannel_replies_dropped: r.backchannelRepliesDropped,
          backchannel_orphans: r.backchannelOrphans,
          backchannel_unanswered: r.backchannelUnanswered,
          backchannel_replies_lost: r.backchannelRepliesLost,
          backchannel_timed_out: r.backchannelTimedOut,
          backchannel_xid_busy: r.backchannelXidBusy,
          sessions_learned: r.sessionsLearned,
          sessions_destroyed: r.sessionsDestroyed,
          sessions_dropped: r.sessionsDropped,
          sessions_evicted: r.sessionsEvicted,
          session_moves: r.sessionMoves,
          ulb_unknown: r.ulbUnknown,
          ulb_partial: r.ulbPartial,
          gss_xid_collisions: r.gssXidCollisions,
          gss_not_resent: r.gssNotResent,
          reply_room_waits: r.replyRoomWaits,
        },
      },
      upstreams: pool.slots.map((s) => this.slotCounters(pool.peer, s)),
      routing: this.routingCounters(),
    };
  }

  private routingCounters(): RoutingCounters | undefined {
    const routing = this.gateway.routing;
    if (!routing) return undefined;
    const d = routing.dispatcher.snapshot();
    const p = routing.passthrough.stats;
    const pm = routing.portmapper?.stats;
    return {
      calls: {
        rdma: d.rdma,
        tcp: d.tcp,
        local: d.local,
        unavailable: d.unavailable,
        versionMismatch: d.versionMismatch,
        rpcMismatch: d.rpcMismatch,
      },
      backchannelReplies: d.backchannelReplies,
      byProgram: d.byProgram,
      passthrough: {
        calls: p.calls,
        replies: p.replies,
        orphanedReplies: p.orphanedReplies,
        clientsClosed: p.clientsClosed,
        duplicatesDropped: p.duplicatesDropped,
        upstreamConnects: p.upstreamConnects,
        upstreamConnectFailures: p.upstreamConnectFailures,
        upstreamLost: p.upstreamLost,
        inFlight: p.inFlight,
        errors: { ...p.errors },
      },
      portmapper: pm ? { calls: pm.calls, byProc: { ...pm.byProc }, errors: pm.errors } : null,
    };
  }

  private slotCounters(peer: string, s: PoolSnapshot['slots'][number]): UpstreamCounters {
    const cs = s.connection;
    let h = this.history.get(s.index);
    if (!h) {
      h = { connectionId: null, last: {}, retired: {} };
      this.history.set(s.index, h);
    }
    const id = cs?.id ?? null;
    if (h.connectionId !== null && h.connectionId !== id) {
      for (const k of Object.keys(h.last)) h.retired[k] = (h.retired[k] ?? 0) + h.last[k];
      h.last = {};
    }
    h.connectionId = id ?? h.connectionId;
    if (cs) {
      for (const k of SUMMED) h.last[k] = cs.counters[k];
      h.last.registrations = cs.registrations.registered;
      for (const [code, n] of Object.entries(cs.errors.sent)) h.last[`errorsSent.${code}`] = n;
      for (const [code, n] of Object.entries(cs.errors.received)) h.last[`errorsReceived.${code}`] = n;
    }
    const v = (k: keyof ConnectionCounters) => (h.retired[k] ?? 0) + (cs ? cs.counters[k] : 0);
    const byCode = (prefix: 'errorsSent.' | 'errorsReceived.') => {
      const out: Record<string, number> = {};
      for (const src of [h.retired, h.last]) {
        for (const [k, n] of Object.entries(src)) {
          if (k.startsWith(prefix)) out[k.slice(prefix.length)] = (out[k.slice(prefix.length)] ?? 0) + n;
        }
      }
      return out;
    };
    return {
      ...transportCounters(s.index, cs?.peer ?? peer, v),
      registrations: (cs?.registrations.registered ?? 0) + (h.retired.registrations ?? 0),
      errorsSent: byCode('errorsSent.'),
      errorsReceived: byCode('errorsReceived.'),
      reconnects: s.reconnects,
      creditsGranted: cs?.credits.granted ?? 0,
      creditsInUse: cs?.credits.outstanding ?? 0,
      queued: cs?.credits.queued ?? 0,
    };
  }

  /** The live connections of the chosen slots (all when `upstream` is undefined). */
  private selected(upstream: number | undefined): { index: number; conn: RpcRdmaConnection | null }[] {
    const slots = this.gateway.pool.snapshot().slots;
    if (upstream !== undefined && !slots.some((s) => s.index === upstream)) {
      throw new ControlError('ERR_CONTROL_NOT_FOUND', `no upstream ${upstream}`, { upstream });
    }
    const live = new Map(this.gateway.pool.connections().map((c) => [c.id, c]));
    return slots
      .filter((s) => upstream === undefined || s.index === upstream)
      .map((s) => ({ index: s.index, conn: s.connection ? (live.get(s.connection.id) ?? null) : null }));
  }

  async requestPeerProperties(values: PropertyValues, upstream?: number): Promise<PropertyRequestOutcome[]> {
    const want = Object.entries(values).map(([name, value]) => ({ id: ID_OF[name as PropertyName], value }));
    const peer = this.gateway.pool.snapshot().peer;
    return Promise.all(
      this.selected(upstream).map(async ({ index, conn }): Promise<PropertyRequestOutcome> => {
        const base = { upstream: index, peer: conn?.peerKey ?? peer, done: [], rejected: [], pending: [] };
        if (!conn)
          return { ...base, error: { code: 'ERR_CONTROL_CONFLICT', message: 'no connection in this slot' } };
        try {
          const d = await conn.requestProperties(want);
          return {
            ...base,
            done: namesOf(d.done),
            rejected: namesOf(d.rejected),
            pending: namesOf(d.pending),
            error: null,
          };
        } catch (e) {
          return { ...base, error: errorRef(e) };
        }
      }),
    );
  }

  async setLocalProperties(values: PropertyValues, upstream?: number): Promise<LocalPropertyOutcome[]> {
    const names = Object.keys(values) as PropertyName[];
    const unsupported = names.filter((n) => n !== 'rbsiz');
    if (unsupported.length > 0) {
      throw new ControlError(
        'ERR_CONTROL_UNSUPPORTED',
        `only rbsiz (our Receive buffer size) can be changed at run time, not ${unsupported.join(', ')}`,
        { unsupported },
      );
    }
    const bytes = values.rbsiz as number;
    return this.selected(upstream).map(({ index, conn }): LocalPropertyOutcome => {
      if (!conn) {
        return {
          upstream: index,
          status: 'failed',
          error: { code: 'ERR_CONTROL_CONFLICT', message: 'no connection' },
        };
      }
      if (conn.snapshot().recvSize === bytes) return { upstream: index, status: 'unchanged', error: null };
      try {
        // Announced with UPDPROP once every posted Receive has the new size (xcharext 003).
        conn.raiseReceiveSize(bytes);
        return { upstream: index, status: 'pending', error: null };
      } catch (e) {
        return { upstream: index, status: 'failed', error: errorRef(e) };
      }
    });
  }

  async upstreamAction(id: number, action: UpstreamAction): Promise<UpstreamInfo> {
    const [slot] = this.selected(id);
    if (action === 'offline') {
      // Out of rotation in the router at once; the connection is closed once the calls on it are answered
      // (or after the drain time, when the router resends what is left elsewhere), and the pool does not
      // reconnect the slot until it is put back online.
      this.watchPool();
      this.offlineSlots.add(id);
      if (slot.conn) this.gateway.router.setOffline(slot.conn, true);
      this.parkWhenIdle(id);
      this.o.logger.info({ upstream: id, action }, `upstream ${id} offline: draining, then parked`);
      return this.upstreamInfo(id);
    }
    if (action === 'online') {
      this.offlineSlots.delete(id);
      this.cancelPark(id);
      if (slot.conn) this.gateway.router.setOffline(slot.conn, false);
      this.gateway.pool.unpark(id); // connects now if it was parked; a new connection joins the rotation
      this.o.logger.info({ upstream: id, action }, `upstream ${id} online`);
      return this.upstreamInfo(id);
    }
    if (!slot.conn || this.offlineSlots.has(id)) {
      // An offline slot's calls in flight finish on it (docs/admin-api.md): a reconnect would fail them over.
      const why = this.gateway.pool.isParked(id)
        ? 'is offline (parked): put it online'
        : this.offlineSlots.has(id)
          ? 'is offline (its calls in flight are finishing): put it online'
          : 'has no connection';
      throw new ControlError('ERR_CONTROL_CONFLICT', `upstream ${id} ${why} to reconnect`, {
        upstream: id,
      });
    }
    // The pool sees the close, fails the calls in flight as retransmittable (the router resends them on
    // another connection) and reconnects the slot with its back-off.
    slot.conn.close('reconnect requested through the admin API');
    return this.upstreamInfo(id);
  }

  /**
   * Parks slot `id` as soon as the router has no call in flight on its connection, or after the drain
   * time at the latest. Checked every 20 ms: an admin action, not a hot path.
   */
  private parkWhenIdle(id: number): void {
    this.cancelPark(id);
    if (this.gateway.stopping) return;
    const drainMs = this.o.offlineDrainMs ?? 30_000;
    const deadline = Date.now() + drainMs;
    const timer = setInterval(() => {
      const conn = this.gateway.pool.connectionAt(id);
      const busy = conn ? this.gateway.router.callsOn(conn) : 0;
      if (busy > 0 && Date.now() < deadline) return;
      this.cancelPark(id);
      if (busy > 0)
        this.o.logger.warn(
          { upstream: id, callsInFlight: busy, drainMs },
          `upstream ${id}: calls still in flight after the drain time; closing (the router resends them)`,
        );
      this.gateway.pool.park(id, 'upstream taken offline through the admin API');
    }, 20);
    timer.unref();
    this.parkTimers.set(id, timer);
  }

  private cancelPark(id: number): void {
    const timer = this.parkTimers.get(id);
    if (timer) clearInterval(timer);
    this.parkTimers.delete(id);
  }

  private upstreamInfo(id: number): UpstreamInfo {
    const pool = this.gateway.pool.snapshot();
    return upstreamInfo(pool.peer, pool.slots[id], this.offlineSlots.has(id));
  }

  closeClient(id: number, reason: string): boolean {
    for (const c of this.gateway.frontend.connections) {
      if (c.id === id) {
        c.close('CLOSED_BY_ADMIN', reason);
        return true;
      }
    }
    return false;
  }

  drain(): DrainStatus {
    this.gateway.drain();
    return { draining: true, callsInFlight: this.gateway.frontend.stats.callsInFlight };
  }

  cancelDrain(): DrainStatus {
    this.gateway.resume();
    return { draining: false, callsInFlight: this.gateway.frontend.stats.callsInFlight };
  }
}

/** Our own transport properties: a live connection's options, else what the configuration gives. */
export function localProperties(config: GatewayConfig, opts: RpcRdmaConnection['opts'] | undefined) {
  const c = config.rdma;
  return {
    maxVersion: opts?.maxVersion ?? c.protocolVersion,
    rbsiz: opts?.recvSize ?? c.inlineReceive,
    maxRbsiz: opts?.maxRecvSize ?? c.inlineReceive,
    sendSize: opts?.sendSize ?? c.inlineSend,
    credits: opts?.credits ?? c.credits,
    reqreminv: opts?.acceptRemoteInvalidate ?? true,
    rprc: opts?.rprc ?? true,
    extensions: opts?.extensions ?? true,
  };
}

/** One connection's properties as the peer announced them, and the changes pending either way. */
export function peerPropertiesView(id: number, cs: ConnectionSnapshot): PeerPropertiesView {
  const peerProperties: PropertyValues = {};
  for (const [pid, value] of Object.entries(cs.properties.peer)) {
    const name = NAME_OF.get(Number(pid));
    if (name && (typeof value === 'number' || typeof value === 'boolean')) peerProperties[name] = value;
  }
  return {
    upstream: id,
    peer: cs.peer,
    version: cs.version,
    peerProperties,
    sendLimit: cs.sendLimit,
    recvSize: cs.recvSize,
    credits: creditView(cs),
    pendingAtPeer: namesOf(cs.properties.pendingAtPeer),
    pendingForPeer: namesOf(cs.properties.pendingForPeer),
    peerSupportsExtensions: cs.properties.peerSupportsExtensions,
  };
}

/** The transport's counters in the admin shape, `v` reading each (summed, on a gateway slot). */
export function transportCounters(id: number, peer: string, v: (k: keyof ConnectionCounters) => number) {
  return {
    id,
    peer,
    callsSent: v('callsSent'),
    repliesReceived: v('repliesReceived'),
    callsReceived: v('callsReceived'),
    repliesSent: v('repliesSent'),
    inlineCalls: v('inlineCalls'),
    readChunkCalls: v('readChunkCalls'),
    longCalls: v('longCalls'),
    longReplies: v('longReplies'),
    writeChunkCalls: v('writeChunkCalls'),
    replyChunkCalls: v('replyChunkCalls'),
    rdmaReads: v('rdmaReads'),
    rdmaWrites: v('rdmaWrites'),
    rdmaReadBytes: v('rdmaReadBytes'),
    rdmaWriteBytes: v('rdmaWriteBytes'),
    peerRdmaReadBytes: v('peerReadBytes'),
    peerRdmaWriteBytes: v('peerWriteBytes'),
    placedBytes: v('placedBytes'),
    bytesSent: v('bytesSent'),
    bytesReceived: v('bytesReceived'),
    localInvalidations: v('localInvalidations'),
    remoteInvalidations: v('remoteInvalidations'),
    retries: v('retries'),
    droppedMessages: v('droppedMessages'),
    resourceFailures: v('resourceFailures'),
    rprcExpired: v('rprcExpired'),
    creditStalls: v('creditStalls'),
  };
}

export function creditView(cs: ConnectionSnapshot) {
  return {
    granted: cs.credits.granted,
    inUse: cs.credits.outstanding,
    max: cs.credits.max,
    queued: cs.credits.queued,
  };
}

function upstreamInfo(peer: string, s: PoolSnapshot['slots'][number], offline: boolean): UpstreamInfo {
  const cs = s.connection;
  return {
    id: s.index,
    connectionId: cs?.id ?? null,
    peer: cs?.peer ?? peer,
    state: offline || s.state === 'parked' ? 'offline' : s.state,
    version: cs?.version ?? 0,
    credits: cs ? creditView(cs) : { granted: 0, inUse: 0, max: 0, queued: 0 },
    grant: cs?.grant ?? 0,
    callsInFlight: cs?.credits.outstanding ?? 0,
    sendLimit: cs?.sendLimit ?? 0,
    recvSize: cs?.recvSize ?? 0,
    remoteInvalidate: cs?.remoteInvalidateOk ?? false,
    registrations: cs?.registrations ?? { inUse: 0, registered: 0, rekeys: 0 },
    reconnects: s.reconnects,
    connectAttempts: s.attempts,
    lastError: s.lastError === '' ? null : s.lastError,
  };
}

/** The control interface of a running gateway, for `createAdminApi({ control })`. */
export function gatewayControl(gateway: Gateway, options: GatewayControlOptions): GatewayControl {
  return new GatewayControlAdapter(gateway, options);
}

export interface GatewayAdmin {
  api: AdminApi;
  url: string;
}

/**
 * Creates the admin API for either role's control with the configured token settings and starts it on
 * `listen`; null when `listen` is `off`. An API that cannot listen is closed before the error goes on.
 */
export async function startConfiguredAdmin(
  role: Pick<AdminApiOptions, 'control' | 'responder'>,
  listen: HostPort | 'off',
  config: GatewayConfig,
  logger: Logger,
): Promise<GatewayAdmin | null> {
  if (listen === 'off') return null;
  const api = await createAdminApi({
    ...role,
    logger,
    host: listen.host,
    port: listen.port,
    token: config.admin.token,
    protectReads: config.admin.protectReads,
    allowUnauthenticatedWrites: config.admin.allowUnauthenticatedWrites,
  });
  try {
    const { url } = await api.listen();
    return { api, url };
  } catch (err) {
    await api.close();
    throw err;
  }
}

/**
 * Starts the admin API of a running gateway as configured (`admin.listen`, `admin.token`); null when
 * `admin.listen` is `off`. `logger` should be the root logger so that a log-level change reaches every
 * component.
 */
export async function startGatewayAdmin(
  gateway: Gateway,
  options: GatewayControlOptions,
): Promise<GatewayAdmin | null> {
  return startConfiguredAdmin(
    { control: gatewayControl(gateway, options) },
    options.config.admin.listen,
    options.config,
    options.logger,
  );
}
