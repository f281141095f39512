/**
 * The composition root (DESIGN §1, §2): builds the chain from a configuration and owns its lifecycle.
 *
 *   TCP clients → FrontendServer (tcp-frontend/) → Router (gateway/router.ts)
 *     → ConnectionPool of RpcRdmaConnection (rdma-backend/transport/) → verbs provider → RDMA peer
 *
 * With `rdma.peer: embedded` the peer is the responder role in this process (`embedded.ts`), forwarding to
 * `upstream` (the built-in test program by default). Start order: peer, pool, then the listener, so the
 * first call finds a connection; stop order is the reverse, after a drain: the frontend stops accepting
 * and lets every call in flight finish (or the drain timeout pass) before the RDMA side goes away.
 */
import type { Logger } from 'pino';
import { BufferPool } from '../common/buffer-pool.js';
import { selectProvider } from '../rdma-backend/providers/select.js';
import {
  type BackoffOptions,
  ConnectionPool,
  type PoolSnapshot,
  type TransportLogger,
  type TransportOptions,
} from '../rdma-backend/transport/index.js';
import type { Device } from '../rdma-backend/verbs/index.js';
import { formatHostPort, type HostPort } from '../tcp-frontend/address.js';
import { type BoundAddress, FrontendServer, type FrontendStats } from '../tcp-frontend/server.js';
import type { GatewayConfig } from './config.js';
import {
  Dispatcher,
  type DispatchStats,
  listenerPrograms,
  listenPlanFor,
  routingTableFor,
} from './dispatch.js';
import { closeDeviceSoon, type EmbeddedPeer, startEmbeddedPeer } from './embedded.js';
import { silentLogger } from './logging.js';
import { Passthrough, type PassthroughStats } from './passthrough/index.js';
import { dumpPortmapper, type Registration } from './portmapper/discover.js';
import {
  buildMappings,
  type Mapping,
  PORTMAP_PROGRAM,
  Portmapper,
  registerWithRpcbind,
} from './portmapper/index.js';
import { Router, type RouterStats } from './router.js';
import { testProgramUlb } from './test-program/ulb.js';
import { createNfsRegistry } from './ulb/index.js';
import type { UlbRegistry } from './ulb/registry.js';

export interface GatewayOptions {
  config: GatewayConfig;
  logger?: Logger;
  /** Bindings to consult (default: NFSv3, NFSv4.x, MOUNT and the test program). */
  registry?: UlbRegistry;
  /** Reconnect back-off of the pool (default: the transport's, 100 ms doubling to 30 s). */
  backoff?: BackoffOptions;
  /** Credits the embedded responder grants (default `rdma.credits`): tests shrink it to make credits short. */
  embeddedGrant?: number;
  /** The router's hold-time sweep period (default 250 ms); tests lengthen it to prove nothing waits on it. */
  routerTickMs?: number;
  /** How long a pinned retransmission waits for its connection's credit (default 1000 ms); tests lengthen it. */
  routerPinWaitMs?: number;
  /** How long a relayed callback waits for its client (default 30 s); tests shorten it. */
  callbackTimeoutMs?: number;
}

export interface GatewaySnapshot {
  frontend: FrontendStats;
  router: RouterStats;
  pool: PoolSnapshot;
  responder: ReturnType<EmbeddedPeer['responder']['connections']> | null;
  /** Calls by route and program (issue 14), the passthrough and the portmapper. */
  dispatch?: DispatchStats;
  passthrough?: PassthroughStats & { upstreams: ReturnType<Passthrough['upstreams']> };
  portmapper?: Portmapper['stats'] | null;
}

/** The program-routing side of the gateway: the dispatcher in front of the router and what it feeds. */
export interface Routing {
  dispatcher: Dispatcher;
  passthrough: Passthrough;
  portmapper: Portmapper | null;
  /** Mappings registered with the host rpcbind (`portmapper.register`), unregistered at stop. */
  registered: Mapping[];
}

/** The default registry: every binding the project has. */
export function defaultRegistry(): UlbRegistry {
  return createNfsRegistry().register(testProgramUlb);
}

/** Transport options from the configuration; chunks are sized for the largest record a client may send. */
export function transportOptions(
  config: GatewayConfig,
  credits = config.rdma.credits,
  logger?: TransportLogger,
): TransportOptions {
  const maxChunkSize = Math.max(4 * 1024 * 1024, config.frontend.maxRecordSize) + 64 * 1024;
  return {
    logger,
    credits,
    sendSize: config.rdma.inlineSend,
    recvSize: config.rdma.inlineReceive,
    maxVersion: config.rdma.protocolVersion,
    maxChunkSize,
    defaultReplyChunk: maxChunkSize,
  };
}

export class Gateway {
  constructor(
    readonly frontend: FrontendServer,
    readonly router: Router,
    readonly pool: ConnectionPool,
    readonly embedded: EmbeddedPeer | null,
    readonly addresses: BoundAddress[],
    readonly peer: HostPort,
    readonly providerReason: string,
    private readonly device: Device,
    private readonly log: Logger,
    readonly routing: Routing | null = null,
  ) {}

  /**
   * Drain (admin API, k8s pre-stop): new TCP connections are refused while calls of the open ones go on
   * and finish; `resume()` accepts again. `stop()` is what closes the open connections.
   */
  drain(): void {
    this.frontend.refuseNewConnections(true);
    this.log.info({ inFlight: this.frontend.stats.callsInFlight }, 'draining: new TCP connections refused');
  }

  resume(): void {
    this.frontend.refuseNewConnections(false);
    this.log.info('drain cancelled: accepting TCP connections again');
  }

  get draining(): boolean {
    return this.frontend.refusingNewConnections;
  }

  /** True from the start of `stop()`: the calls in flight are finishing, nothing new is taken. */
  stopping = false;
  /** True once `stop()` is done. */
  stopped = false;
  private readonly stopListeners = new Set<() => void>();

  /**
   * Calls `listener` once, when `stop()` starts: what watches the gateway from outside (the admin API's
   * adapter, with its timers and pool listener) ends there. Returns the listener's removal.
   */
  onStop(listener: () => void): () => void {
    this.stopListeners.add(listener);
    return () => this.stopListeners.delete(listener);
  }

  snapshot(): GatewaySnapshot {
    return {
      frontend: { ...this.frontend.stats },
      router: this.router.snapshot(),
      pool: this.pool.snapshot(),
      responder: this.embedded ? this.embedded.responder.connections() : null,
      ...(this.routing && {
        dispatch: this.routing.dispatcher.snapshot(),
        passthrough: { ...this.routing.passthrough.stats, upstreams: this.routing.passthrough.upstreams() },
        portmapper: this.routing.portmapper ? { ...this.routing.portmapper.stats } : null,
      }),
    };
  }

  /**
   * Graceful stop (SIGTERM): stop accepting, let calls in flight finish for at most `drainTimeoutMs`,
   * then close the RDMA side and the embedded peer.
   */
  async stop(drainTimeoutMs = 30_000): Promise<void> {
    this.stopping = true;
    const deadline = Date.now() + drainTimeoutMs;
    for (const listener of this.stopListeners) listener();
    this.stopListeners.clear();
    this.log.info({ drainTimeoutMs, inFlight: this.frontend.stats.callsInFlight }, 'draining');
    if (this.routing && this.routing.registered.length > 0)
      await registerWithRpcbind(this.routing.registered, 'unset', this.log);
    await this.frontend.close({ drainTimeoutMs });
    // Every client is gone now: the passthrough's upstream connections get what is left of the drain time,
    // and those still owed replies nobody can take go at once.
    await this.routing?.passthrough.close(Math.max(0, deadline - Date.now()));
    this.router.close();
    this.pool.close();
    await this.embedded?.close(Math.min(drainTimeoutMs, 5000));
    closeDeviceSoon(this.device);
    this.stopped = true;
    this.log.info({ router: this.router.snapshot() }, 'stopped');
  }
}

export async function startGateway(o: GatewayOptions): Promise<Gateway> {
  const config = o.config;
  const log = o.logger ?? silentLogger();
  const registry = o.registry ?? defaultRegistry();
  const embeddedPeer = config.rdma.peer === 'embedded';
  // The embedded chain is the soft provider's job unless the configuration insists on native.
  const choice = embeddedPeer && config.rdma.provider === 'auto' ? 'soft' : config.rdma.provider;
  const selected = selectProvider(choice, {
    soft: { crc: config.rdma.softCrc, logger: log.child({ component: 'soft-provider' }) },
  });
  const provider = selected.provider;
  const reason =
    choice !== config.rdma.provider ? 'soft provider: the embedded chain runs in userspace' : selected.reason;
  log.info({ provider: provider.name, reason }, 'verbs provider selected');
  const transport = transportOptions(config, config.rdma.credits, log.child({ component: 'transport' }));

  // Everything that can refuse the configuration (program routes, listen plan, the dispatcher's checks)
  // runs before anything is started: a failure here leaves nothing behind to keep the process alive.
  const table = routingTableFor(config, await discoverUpstream(config, log));
  const plan = listenPlanFor(config);
  // Call records of the frontend, assembled in pooled buffers and given back by the router when each
  // call is over: a 1 MiB WRITE reuses memory instead of allocating (docs/performance.md).
  const recordPool = new BufferPool();
  const router = new Router({
    registry,
    recordPool,
    holdTimeMs: config.rdma.holdTimeMs,
    tickMs: o.routerTickMs,
    pinWaitMs: o.routerPinWaitMs,
    callbackTimeoutMs: o.callbackTimeoutMs,
    maxReplyBytes: config.frontend.maxReplyBytes,
    resumeWindowMs: config.frontend.resumeWindowMs,
    resumeMaxBytes: config.frontend.resumeMaxBytes,
    answeredRing: config.frontend.maxCallsInFlight,
    // A reply the ULB cannot bound can be as large as the Reply chunk the transport offers.
    unknownReplyBytes: transport.maxChunkSize,
  });
  // Program routing (issue 14): the dispatcher sends each call to the router, the passthrough or the
  // portmapper by its program.
  const passthrough = new Passthrough({
    defaultUpstream: config.passthrough.upstream === 'off' ? null : config.passthrough.upstream,
    connections: config.passthrough.connections,
    connectTimeoutMs: config.passthrough.connectTimeoutMs,
    maxRecordSize: config.frontend.maxRecordSize,
    maxReplyBytes: config.frontend.maxReplyBytes,
    recordPool,
    logger: log.child({ component: 'passthrough' }),
  });
  let mappings: Mapping[] = [];
  const portmapper = table.programs().includes(PORTMAP_PROGRAM)
    ? new Portmapper(() => mappings, log.child({ component: 'portmapper' }))
    : null;
  const dispatcher = new Dispatcher({
    table,
    rdma: router,
    tcp: passthrough,
    local: portmapper ? new Map([[PORTMAP_PROGRAM, portmapper]]) : new Map(),
    recordPool,
    logger: log.child({ component: 'dispatch' }),
  });
  const frontend = new FrontendServer({
    listen: plan.addresses,
    handler: dispatcher,
    limits: {
      maxConnections: config.frontend.maxConnections,
      maxRecordSize: config.frontend.maxRecordSize,
      maxCallsInFlight: config.frontend.maxCallsInFlight,
      idleTimeoutMs: config.frontend.idleTimeoutMs,
      recordTimeoutMs: config.frontend.recordTimeoutMs,
    },
    access: {
      allow: config.frontend.allowedClients,
      requirePrivilegedPort: config.frontend.requirePrivilegedPort,
    },
    logger: log.child({ component: 'frontend' }),
    recordPool,
  });

  // From the first thing started on, a failure undoes what was started (in reverse) before it goes on:
  // a listener or an embedded peer left open would keep the process alive after the error.
  let embedded: EmbeddedPeer | null = null;
  let device: Device | null = null;
  let pool: ConnectionPool | null = null;
  try {
    let peer: HostPort;
    if (embeddedPeer) {
      embedded = await startEmbeddedPeer({
        provider,
        upstream: config.upstream,
        registry,
        transport: transportOptions(
          config,
          o.embeddedGrant ?? config.rdma.credits,
          log.child({ component: 'responder-transport' }),
        ),
        maxRecordSize: Math.max(config.frontend.maxRecordSize, transport.maxChunkSize ?? 0),
        logger: log,
      });
      peer = { host: embedded.host, port: embedded.port };
    } else {
      peer = config.rdma.peer as HostPort;
    }
    device = await provider.openDevice();
    pool = new ConnectionPool({
      device,
      host: peer.host,
      port: peer.port,
      size: config.rdma.poolSize,
      options: transport,
      requester: router,
      responder: router.backchannel,
      backoff: o.backoff,
    });
    await pool.start();
    router.attach(pool);
    const ready = await waitForReady(pool, 3000);
    if (ready === 0) log.warn({ peer }, 'no RDMA connection yet; calls are held while the pool reconnects');
    const addresses = await frontend.listen();
    const programs = listenerPrograms(plan, addresses);
    dispatcher.setListeners(programs);
    mappings = buildMappings(table, addresses, programs);
    const registered = config.portmapper.register ? mappings : [];
    if (registered.length > 0) await registerWithRpcbind(registered, 'set', log);
    const routing: Routing = { dispatcher, passthrough, portmapper, registered };
    return new Gateway(frontend, router, pool, embedded, addresses, peer, reason, device, log, routing);
  } catch (err) {
    log.error({ err: (err as Error).message }, 'the gateway could not start; stopping what was started');
    await frontend.close({ drainTimeoutMs: 0 });
    await passthrough.close();
    router.close();
    pool?.close();
    await embedded?.close(0);
    if (device) closeDeviceSoon(device);
    throw err;
  }
}

/** Waits (bounded) until every pool connection finished negotiating; returns how many are ready. */
async function waitForReady(pool: ConnectionPool, timeoutMs: number): Promise<number> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const s = pool.snapshot();
    if (s.ready === s.size || Date.now() >= until) return s.ready;
    if (s.slots.every((slot) => slot.state === 'backoff' || slot.state === 'ready')) return s.ready;
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * The server's TCP registrations, when `passthrough.discover` says where to ask (issue 14: advertise only
 * what the server serves). null (every TCP-side program to `passthrough.upstream`) when discovery is off
 * or the server's portmapper cannot be asked — logged, because the gateway then may advertise programs the
 * server does not serve.
 */
async function discoverUpstream(config: GatewayConfig, log: Logger): Promise<Registration[] | null> {
  const upstream = config.passthrough.upstream;
  const where = config.passthrough.discover;
  if (upstream === 'off' || where === 'off') return null;
  const target = where === 'auto' ? { host: upstream.host, port: 111 } : where;
  try {
    const found = await dumpPortmapper(target, Math.min(config.passthrough.connectTimeoutMs, 3000));
    log.info(
      { portmapper: formatHostPort(target.host, target.port), registrations: found.length },
      "learned the server's TCP programs from its portmapper",
    );
    return found;
  } catch (err) {
    log.warn(
      { err },
      'cannot learn which MOUNT/NLM/NSM/rquota versions the server serves: routing all of them to passthrough.upstream',
    );
    return null;
  }
}
