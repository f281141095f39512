/**
 * The responder role (`rpcrdma-gateway responder`, DESIGN §1): accepts RPC-over-RDMA connections on a
 * verbs device and forwards each one to a TCP RPC server over its own TCP connection
 * (`responder/upstream-link.ts`). The transport does the RDMA side (Read chunks pulled with RDMA Read,
 * Write / Reply chunks, responder-provided Read chunks, Send With Invalidate); this module wires it to TCP.
 */
import type { Logger } from 'pino';
import { pino } from 'pino';
import { BufferPool } from '../common/buffer-pool.js';
import type { ConnectionSnapshot } from '../rdma-backend/transport/index.js';
import { RpcRdmaConnection, type TransportOptions } from '../rdma-backend/transport/index.js';
import type { Device, Listener } from '../rdma-backend/verbs/index.js';
import { DEFAULT_MAX_RECORD_SIZE } from '../tcp-frontend/record-marking.js';
import { createResponderStats, type ResponderStats, UpstreamLink } from './responder/upstream-link.js';
import type { UlbRegistry } from './ulb/registry.js';

export type { ResponderStats } from './responder/upstream-link.js';

/** `ResponderOptions.maxConnections` (`responder.maxConnections`) when not given. */
export const DEFAULT_MAX_CONNECTIONS = 256;

/**
 * `ResponderOptions.idleTimeoutMs` (`responder.idleTimeoutMs`) when not given: six minutes, the period of
 * Linux's reaper of idle server connections (`svc_age_temp_xprts`, which svcrdma's accepted connections
 * are subject to) and of `frontend.idleTimeoutMs`.
 */
export const DEFAULT_IDLE_TIMEOUT_MS = 360_000;

export interface ResponderOptions {
  device: Device;
  /** Where to accept RPC-over-RDMA connections (port 0: any free port). */
  host: string;
  port: number;
  /** The TCP RPC server calls are forwarded to. */
  upstream: { host: string; port: number };
  registry: UlbRegistry;
  transport?: TransportOptions;
  /** Largest reply accepted from the upstream. Default: the frontend's default record limit. */
  maxRecordSize?: number;
  /** After an RDMA connection ends, how long replies still due may take before the upstream is cut. */
  lingerMs?: number;
  /**
   * RDMA connections open at once (`responder.maxConnections`); one more is rejected at once. Each holds
   * its registered buffers and an upstream TCP connection, so without a bound any host that reaches the
   * port could make the responder hold them without limit. Default 256.
   */
  maxConnections?: number;
  /**
   * Close an accepted RDMA connection that carried no call, reply or callback for this long and has
   * nothing in flight (0: never). Swept every `idleTimeoutMs`, as Linux does: a connection goes after
   * one to two periods without traffic. A peer that connects and sends nothing (no RTR, no call) holds
   * its slot of `maxConnections` and its registered buffers no longer than that. A gateway's pool
   * opens a new connection after its first reconnect delay. Default six minutes.
   */
  idleTimeoutMs?: number;
  logger?: Logger;
}

export class Responder {
  readonly stats: ResponderStats = createResponderStats();
  readonly links = new Set<UpstreamLink>();
  /** Reply records of every link (large ones reused; see `UpstreamLinkOptions.pool`). */
  readonly recordPool = new BufferPool();
  private listener: Listener | null = null;
  private readonly log: Logger;
  private readonly goneWaiters: (() => void)[] = [];
  private closingFlag = false;
  private drainingFlag = false;
  private idleSweep: NodeJS.Timeout | null = null;

  constructor(private readonly o: ResponderOptions) {
    this.log = o.logger ?? pino({ level: 'silent' });
  }

  /** Starts accepting; resolves with the bound address. */
  async listen(): Promise<{ host: string; port: number }> {
    this.listener = await this.o.device.listen({
      host: this.o.host,
      port: this.o.port,
      onConnectRequest: (request) => {
        if (this.closingFlag || this.drainingFlag) {
          // Draining (a rollout, the admin API) or closing: the gateway's pool tries its other peers or
          // backs off and comes again.
          this.stats.refused++;
          request.reject();
          return;
        }
        const open = this.openConnections();
        const max = this.o.maxConnections ?? DEFAULT_MAX_CONNECTIONS;
        if (open >= max) {
          this.stats.refused++;
          this.log.warn(
            {
              reason: 'REFUSED_MAX_CONNECTIONS',
              rdmaPeer: `${request.remoteAddress}:${request.remotePort}`,
              open,
              maxConnections: max,
            },
            'RDMA connection refused: the responder holds its maximum of connections',
          );
          request.reject();
          return;
        }
        // A link whose RDMA connection ended keeps its upstream socket while replies are still due
        // (lingerMs). Live and lingering links together stay within maxConnections: without that, a
        // peer connecting, calling and leaving in a loop would pile up upstream sockets without bound.
        // The oldest lingering ones give way (their replies have nowhere to go).
        this.cutLingering(this.links.size - max + 1);
        const link = new UpstreamLink({
          upstream: this.o.upstream,
          registry: this.o.registry,
          stats: this.stats,
          log: this.log.child({ rdmaPeer: `${request.remoteAddress}:${request.remotePort}` }),
          maxRecordSize: this.o.maxRecordSize ?? DEFAULT_MAX_RECORD_SIZE,
          lingerMs: this.o.lingerMs ?? 30_000,
          onGone: (l) => this.onGone(l),
          pool: this.recordPool,
        });
        this.links.add(link);
        this.stats.links = this.links.size;
        try {
          link.conn = RpcRdmaConnection.accept({
            device: this.o.device,
            request,
            options: this.o.transport,
            responder: link,
            requester: link,
            onClose: (_conn, reason) => link.onRdmaClosed(reason),
          });
          this.stats.connections++; // accepted: a refused one counts as an accept failure only
        } catch (e) {
          // Refused by the device (a resource limit): the request was rejected and nothing of the
          // connection is left; its upstream link goes too (no call can have reached it).
          this.stats.acceptFailures++;
          this.log.warn(
            { code: (e as { code?: string }).code, err: String(e) },
            'could not accept an RDMA connection',
          );
          link.onRdmaClosed('accept failed');
        }
      },
    });
    const bound = { host: this.listener.host, port: this.listener.port };
    const idleMs = this.o.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
    if (idleMs > 0) {
      this.idleSweep = setInterval(() => this.sweepIdle(), idleMs);
      this.idleSweep.unref();
    }
    this.log.info({ listen: bound, upstream: this.o.upstream }, 'responder listening');
    return bound;
  }

  /** Where it accepts RDMA connections; null before `listen()` and after `close()`. */
  address(): { host: string; port: number } | null {
    return this.listener ? { host: this.listener.host, port: this.listener.port } : null;
  }

  get closing(): boolean {
    return this.closingFlag;
  }

  get draining(): boolean {
    return this.drainingFlag;
  }

  /**
   * Refuses new RDMA connections from now on, so that a load balancer or a rollout can take this
   * responder out; the accepted ones go on, and their calls finish. `resume()` undoes it.
   */
  drain(): void {
    if (!this.drainingFlag)
      this.log.info({ links: this.links.size }, 'draining: new RDMA connections refused');
    this.drainingFlag = true;
  }

  resume(): void {
    if (this.drainingFlag) this.log.info('drain cancelled: accepting RDMA connections again');
    this.drainingFlag = false;
  }

  private onGone(link: UpstreamLink): void {
    this.links.delete(link);
    this.stats.links = this.links.size;
    if (this.links.size === 0) for (const w of this.goneWaiters.splice(0)) w();
  }

  /**
   * The accepted connections with the calls each is serving: those whose Read chunks are still being
   * pulled, and those forwarded upstream and not yet answered.
   */
  connectionsServing(): { snapshot: ConnectionSnapshot; calls: number }[] {
    const out: { snapshot: ConnectionSnapshot; calls: number }[] = [];
    for (const l of this.links) {
      if (!l.conn || l.conn.state === 'closed') continue;
      const snapshot = l.conn.snapshot();
      out.push({ snapshot, calls: snapshot.inboundInProgress + l.outstanding });
    }
    return out;
  }

  /** The accepted connections' transport snapshots (counters prove which chunks were used). */
  connections(): ConnectionSnapshot[] {
    return this.connectionsServing().map((c) => c.snapshot);
  }

  /**
   * One sweep of the idle reaper (mark and sweep, like Linux's `XPT_OLD`). A connection with work in
   * flight is left alone: a call at the upstream, or anything the transport is still doing
   * (`RpcRdmaConnection.workInFlight`: Read chunks being pulled, a reply waiting for a send slot or exposed
   * for the requester's pull, callbacks out). Of the others, one that carried traffic (a call, a reply, a
   * callback or its reply) since the last sweep is only unmarked; one unmarked at the last sweep is closed,
   * a period or more after its last traffic. Closing it ends its upstream TCP connection too; the
   * requester reconnects. The timer calls it every `idleTimeoutMs`; tests call it to place sweeps exactly
   * (the timers of a loaded machine would decide their outcome otherwise).
   */
  sweepIdle(): void {
    const idleTimeoutMs = this.o.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
    for (const l of this.links) {
      const conn = l.conn;
      if (!conn || conn.state === 'closed') continue;
      if (l.outstanding > 0 || conn.workInFlight) continue;
      if (l.takeActivity()) continue;
      this.stats.idleClosed++;
      l.log.info(
        { reason: 'IDLE_TIMEOUT', idleTimeoutMs, connection: conn.id },
        'closing an idle RDMA connection (no traffic for one to two idle periods)',
      );
      conn.close('idle timeout');
    }
  }

  /** Cuts the upstream of up to `n` lingering links, the oldest first (a Set iterates in insertion order). */
  private cutLingering(n: number): void {
    for (const l of this.links) {
      if (n <= 0) return;
      if (!l.lingering) continue;
      l.cutUpstream(); // leaves `links` at once (onGone)
      this.stats.lingerCut++;
      n--;
    }
  }

  /** RDMA connections accepted and not closed (`maxConnections` bounds them, with the lingering links). */
  private openConnections(): number {
    let n = 0;
    for (const l of this.links) if (l.conn && l.conn.state !== 'closed') n++;
    return n;
  }

  /** The live RDMA connections (tests kill them to exercise failure handling). */
  rdmaConnections(): RpcRdmaConnection[] {
    const out: RpcRdmaConnection[] = [];
    for (const l of this.links) if (l.conn && l.conn.state !== 'closed') out.push(l.conn);
    return out;
  }

  /** Stops accepting, closes every connection and waits (bounded) for the upstream sides to end. */
  async close(timeoutMs = 5000): Promise<void> {
    this.closingFlag = true;
    if (this.idleSweep) clearInterval(this.idleSweep);
    this.idleSweep = null;
    await this.listener?.close();
    this.listener = null;
    if (this.links.size === 0) return;
    const gone = new Promise<void>((resolve) => this.goneWaiters.push(resolve));
    for (const l of this.links) l.close();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      gone,
      new Promise<void>((resolve) => {
        timer = setTimeout(() => {
          for (const l of this.links) l.socket.destroy();
          resolve();
        }, timeoutMs);
      }),
    ]);
    clearTimeout(timer);
  }
}
