/**
 * Program routing (issue 14): the table that says where the calls of each ONC RPC program (and optionally
 * version) go, and the frontend handler that dispatches every record by it.
 *
 *   FrontendServer → Dispatcher ─┬─ rdma  → Router → RPC-over-RDMA pool   (NFS: the server's RDMA port)
 *                                ├─ tcp   → Passthrough → upstream TCP    (MOUNT, NLM, NSM, rquota)
 *                                ├─ local → served in this process        (the portmapper)
 *                                └─ none  → PROG_UNAVAIL
 *
 * PROG_UNAVAIL is the one reply the gateway makes up: for a program without a route the gateway *is* the
 * server the client reached, and RFC 5531 §9 has the server answer PROG_UNAVAIL. Every other reply comes
 * from the real server (DESIGN §3).
 *
 * The calls the gateway answers itself (PROG_UNAVAIL, PROG_MISMATCH, RPC_MISMATCH, the `local` routes) end
 * here, so their records go back to the record pool once answered: each such reply is built in a
 * buffer of its own, so nothing refers to the record then. A record sent on belongs to its route.
 *
 * A listener may be restricted to some programs (NFS on 2049, MOUNT on 20048, the portmapper on 111); a
 * call for another program on that listener is PROG_UNAVAIL too, as it would be from a server that does
 * not serve the program on that port.
 */
import type { Logger } from 'pino';
import { pino } from 'pino';
import type { BufferPool } from '../common/buffer-pool.js';
import { getU32BE } from '../common/bytes.js';
import { ConfigError, UsageError } from '../common/errors.js';
import { AcceptStat, MsgType, RejectStat, RPC_VERSION } from '../rpc/constants.js';
import { encodeAcceptedReply, encodeDeniedReply } from '../rpc/message.js';
import { XdrWriter } from '../rpc/xdr.js';
import { formatHostPort, type HostPort, parseHostPort } from '../tcp-frontend/address.js';
import type {
  BoundAddress,
  CloseReason,
  FrontendConnection,
  FrontendHandler,
  ListenAddress,
} from '../tcp-frontend/server.js';
import type { GatewayConfig } from './config.js';
import {
  MOUNT_PROGRAM,
  NFS_ACL_PROGRAM,
  NFS_PROGRAM,
  NLM_PROGRAM,
  NSM_PROGRAM,
  PORTMAP_PROGRAM,
  programByName,
  programByNumber,
  programName,
  RQUOTA_PROGRAM,
} from './portmapper/programs.js';
import { TEST_PROGRAM } from './test-program/constants.js';

export type RouteKind = 'rdma' | 'tcp' | 'local';

/** One entry of the routing table. */
export interface Route {
  program: number;
  /** null: every version of the program. */
  version: number | null;
  kind: RouteKind;
  /** For `tcp`: the upstream; null means the configured default (`passthrough.upstream`). */
  upstream: HostPort | null;
}

/** `PROGRAM[.VERSION]=KIND` as written in the configuration, for messages. */
export function formatRoute(r: Route): string {
  const where = r.kind === 'tcp' && r.upstream ? `@${formatHostPort(r.upstream.host, r.upstream.port)}` : '';
  const vers = r.version === null ? '' : `.${r.version}`;
  return `${programName(r.program)}${vers}=${r.kind}${where}`;
}

/**
 * Parses `PROGRAM[.VERSION]=rdma|local|tcp[@HOST:PORT]` (PROGRAM: a name such as `nfs`, `mount`, `nlm`, or
 * a decimal number). Throws `UsageError` with a stable code: ERR_ROUTE_SYNTAX, ERR_ROUTE_PROGRAM (unknown
 * name), ERR_ROUTE_KIND, ERR_ADDRESS (from parseHostPort).
 */
export function parseRoute(text: string): Route {
  const m = /^\s*([A-Za-z0-9_-]+)(?:\.(\d+))?\s*=\s*(rdma|local|tcp)(?:@(.+))?\s*$/.exec(text);
  if (!m) {
    const kind = /=\s*([^@\s]*)/.exec(text)?.[1];
    if (kind !== undefined && /^[A-Za-z]+$/.test(kind) && !['rdma', 'local', 'tcp'].includes(kind)) {
      throw new UsageError('ERR_ROUTE_KIND', `route '${text}': '${kind}' is not rdma, tcp or local`, {
        text,
      });
    }
    throw new UsageError(
      'ERR_ROUTE_SYNTAX',
      `route '${text}' is not PROGRAM[.VERSION]=rdma|local|tcp[@HOST:PORT]`,
      { text },
    );
  }
  const [, progText, versText, kind, addr] = m;
  let program: number;
  if (/^\d+$/.test(progText)) {
    program = Number(progText);
    if (program > 0xffff_ffff)
      throw new UsageError('ERR_ROUTE_PROGRAM', `route '${text}': program number out of range`, { text });
  } else {
    const known = programByName(progText);
    if (!known) {
      throw new UsageError('ERR_ROUTE_PROGRAM', `route '${text}': unknown program '${progText}'`, {
        text,
        program: progText,
      });
    }
    program = known.program;
  }
  const version = versText === undefined ? null : Number(versText);
  if (version !== null && version > 0xffff_ffff) {
    throw new UsageError('ERR_ROUTE_SYNTAX', `route '${text}': version out of range`, { text });
  }
  if (addr !== undefined && kind !== 'tcp') {
    throw new UsageError('ERR_ROUTE_SYNTAX', `route '${text}': only a tcp route takes @HOST:PORT`, { text });
  }
  const upstream = addr === undefined ? null : parseHostPort(addr);
  if (upstream && upstream.port === 0) {
    throw new UsageError('ERR_ADDRESS', `route '${text}': the upstream needs a port other than 0`, { text });
  }
  return { program, version, kind: kind as RouteKind, upstream };
}

/** A (program, version) key; versions above 2^21 are not worth a collision-free scheme. */
function key(program: number, version: number): string {
  return `${program}.${version}`;
}

/**
 * Routes by program and version. A versioned route wins over a program-wide one. Duplicates (the same
 * program and version twice) are refused: which one would apply is a guess the operator should not have to
 * make.
 */
export class RoutingTable {
  readonly routes: readonly Route[];
  private readonly byProgram = new Map<number, Route>();
  private readonly byVersion = new Map<string, Route>();
  private readonly versioned = new Set<number>();

  constructor(routes: readonly Route[]) {
    this.routes = routes;
    for (const r of routes) {
      const k = r.version === null ? String(r.program) : key(r.program, r.version);
      const clash = r.version === null ? this.byProgram.get(r.program) : this.byVersion.get(k);
      if (clash) {
        throw new UsageError(
          'ERR_ROUTE_DUPLICATE',
          `duplicate route for ${programName(r.program)}${r.version === null ? '' : ` version ${r.version}`}: '${formatRoute(clash)}' and '${formatRoute(r)}'`,
          { program: r.program, version: r.version },
        );
      }
      if (r.version === null) this.byProgram.set(r.program, r);
      else {
        this.byVersion.set(k, r);
        this.versioned.add(r.program);
      }
    }
  }

  /** Whether any route names `program` (for any version). */
  knows(program: number): boolean {
    return this.byProgram.has(program) || this.versioned.has(program);
  }

  /** The route for a call, or undefined (PROG_UNAVAIL). */
  lookup(program: number, version: number): Route | undefined {
    if (this.versioned.has(program)) {
      const r = this.byVersion.get(key(program, version));
      if (r) return r;
    }
    return this.byProgram.get(program);
  }

  /** The versions of `program` the table routes: explicit ones, else the well-known ones. */
  versionsOf(program: number): number[] {
    const out = new Set<number>();
    for (const r of this.routes) {
      if (r.program !== program) continue;
      if (r.version !== null) out.add(r.version);
      else for (const v of programByNumber(program)?.versions ?? [1]) out.add(v);
    }
    return [...out].sort((a, b) => a - b);
  }

  /**
   * For a program routed only version by version: the lowest and highest routed version, which a call
   * for another version is told in PROG_MISMATCH (RFC 5531 §9). undefined when the program has a route
   * for every version, or none.
   */
  versionRange(program: number): { low: number; high: number } | undefined {
    if (!this.versioned.has(program) || this.byProgram.has(program)) return undefined;
    let low = Number.MAX_SAFE_INTEGER;
    let high = -1;
    for (const r of this.routes) {
      if (r.program !== program || r.version === null) continue;
      if (r.version < low) low = r.version;
      if (r.version > high) high = r.version;
    }
    return { low, high };
  }

  /** Programs with at least one route, ascending. */
  programs(): number[] {
    return [...new Set(this.routes.map((r) => r.program))].sort((a, b) => a - b);
  }
}

/** Which programs one listening port serves; null: all of them. */
export type ListenerPrograms = ReadonlyMap<number, ReadonlySet<number> | null>;

export interface DispatchStats {
  /** Calls by route kind; `unavailable` got PROG_UNAVAIL from the gateway. */
  rdma: number;
  tcp: number;
  local: number;
  unavailable: number;
  /** Calls for a version of a routed program that no route serves: PROG_MISMATCH from the gateway. */
  versionMismatch: number;
  /** Calls the gateway answered itself whose RPC version is not 2: RPC_MISMATCH (RFC 5531 §9). */
  rpcMismatch: number;
  /** Replies from clients (backchannel) handed to the RDMA route. */
  backchannelReplies: number;
  /**
   * Calls by program name (`nfs`, `mountd`, or the number), whatever the route, for the programs the
   * routing table names; calls for any other program are counted under `other` (a client choosing program
   * numbers must not grow a table, or a metric's label set, without bound).
   */
  byProgram: Record<string, number>;
}

/** What a `tcp` route needs: the passthrough takes the record and answers on the connection. */
export interface TcpRouteHandler {
  forward(conn: FrontendConnection, record: Buffer, route: Route): void;
  onClose(conn: FrontendConnection): void;
  /** The client's socket drained (after a write that returned false). */
  onWritable?(conn: FrontendConnection): void;
}

export interface DispatcherOptions {
  table: RoutingTable;
  /** The RDMA route (the Router); it also gets malformed records and backchannel replies. */
  rdma: FrontendHandler;
  tcp?: TcpRouteHandler;
  /**
   * Handlers of `local` routes by program. Each answers a call before `onRecord` returns and keeps no
   * reference to its record (the portmapper decodes into copies and replies from a buffer of its own):
   * the dispatcher gives the record back to `recordPool` then.
   */
  local?: ReadonlyMap<number, FrontendHandler>;
  /** The frontend's record pool: where the records of the calls the gateway answers itself go back. */
  recordPool?: BufferPool;
  /** Per-port program restrictions (ports not in the map serve every routed program). */
  listeners?: ListenerPrograms;
  logger?: Logger;
}

/** Largest PROG_UNAVAIL reply: xid, msg_type, reply_stat, verifier AUTH_NONE (2 words), accept_stat. */
const PROG_UNAVAIL_SIZE = 24;
/** PROG_MISMATCH adds mismatch_info {low, high}. */
const PROG_MISMATCH_SIZE = PROG_UNAVAIL_SIZE + 8;
/** xid, REPLY, MSG_DENIED, RPC_MISMATCH, low, high. */
const RPC_MISMATCH_SIZE = 24;

export class Dispatcher implements FrontendHandler {
  readonly stats: DispatchStats = {
    rdma: 0,
    tcp: 0,
    local: 0,
    unavailable: 0,
    versionMismatch: 0,
    rpcMismatch: 0,
    backchannelReplies: 0,
    byProgram: {},
  };
  readonly table: RoutingTable;
  private readonly rdma: FrontendHandler;
  private readonly tcp: TcpRouteHandler | undefined;
  private readonly local: ReadonlyMap<number, FrontendHandler>;
  private listeners: ListenerPrograms;
  private readonly recordPool: BufferPool | undefined;
  private readonly writer = new XdrWriter(0);
  /** Per-program counters by number (names are made only in `snapshot`). */
  /** Only programs the routing table names: bounded by the configuration. */
  private readonly perProgram = new Map<number, number>();
  private otherPrograms = 0;

  constructor(o: DispatcherOptions) {
    this.table = o.table;
    this.rdma = o.rdma;
    this.tcp = o.tcp;
    this.local = o.local ?? new Map();
    this.listeners = o.listeners ?? new Map();
    this.recordPool = o.recordPool;
    (o.logger ?? pino({ level: 'silent' })).info({ routes: describeTable(o.table) }, 'program routes');
    for (const r of o.table.routes) {
      if (r.kind === 'tcp' && !this.tcp)
        throw new UsageError('ERR_ROUTE_KIND', `${formatRoute(r)}: no passthrough configured`, {});
      if (r.kind === 'local' && !this.local.has(r.program)) {
        throw new UsageError(
          'ERR_ROUTE_KIND',
          `${formatRoute(r)}: the gateway serves no such program itself`,
          {
            program: r.program,
          },
        );
      }
    }
  }

  /** Sets the per-port restrictions once the listeners are bound (ports asked as 0 are known only then). */
  setListeners(listeners: ListenerPrograms): void {
    this.listeners = listeners;
  }

  snapshot(): DispatchStats {
    const byProgram: Record<string, number> = {};
    for (const [p, n] of this.perProgram) byProgram[programName(p)] = n;
    if (this.otherPrograms > 0) byProgram.other = this.otherPrograms;
    return { ...this.stats, byProgram };
  }

  onRecord(conn: FrontendConnection, record: Buffer): void {
    // Anything too short to carry prog/vers, and every non-CALL, is the RDMA route's business: it knows
    // how to refuse malformed records and where backchannel replies go.
    if (record.length < 24 || getU32BE(record, 4) !== MsgType.CALL) {
      if (record.length >= 8 && getU32BE(record, 4) === MsgType.REPLY) this.stats.backchannelReplies++;
      this.rdma.onRecord(conn, record);
      return;
    }
    const program = getU32BE(record, 12);
    const version = getU32BE(record, 16);
    const allowed = this.listeners.get(conn.localPort);
    const route = allowed && !allowed.has(program) ? undefined : this.table.lookup(program, version);
    // A routed call's program is in the table by definition; only an unrouted one needs the check.
    if (route !== undefined || this.table.knows(program)) {
      this.perProgram.set(program, (this.perProgram.get(program) ?? 0) + 1);
    } else this.otherPrograms++;
    // RFC 5531 §9: a call of another RPC version is refused as such before its program is looked at, by
    // whoever answers it: the gateway for an unrouted call and for its own services (the local route);
    // the server behind an RDMA or TCP route does the same for its calls.
    if ((route === undefined || route.kind === 'local') && getU32BE(record, 8) !== RPC_VERSION) {
      this.rpcMismatch(conn, record);
      return;
    }
    if (route === undefined) {
      const range = allowed && !allowed.has(program) ? undefined : this.table.versionRange(program);
      if (range === undefined) this.progUnavail(conn, record, program, version);
      else this.progMismatch(conn, record, program, version, range);
      return;
    }
    switch (route.kind) {
      case 'rdma':
        this.stats.rdma++;
        this.rdma.onRecord(conn, record);
        return;
      case 'tcp':
        this.stats.tcp++;
        (this.tcp as TcpRouteHandler).forward(conn, record, route);
        return;
      case 'local':
        this.stats.local++;
        (this.local.get(program) as FrontendHandler).onRecord(conn, record);
        // Answered, and not kept (see `DispatcherOptions.local`).
        this.recordPool?.release(record);
        return;
    }
  }

  onClose(conn: FrontendConnection, reason: CloseReason): void {
    this.rdma.onClose(conn, reason);
    this.tcp?.onClose(conn);
    for (const h of this.local.values()) h.onClose(conn, reason);
  }

  onEnd(conn: FrontendConnection): void {
    this.rdma.onEnd?.(conn);
  }

  onWritable(conn: FrontendConnection): void {
    this.rdma.onWritable?.(conn);
    this.tcp?.onWritable?.(conn);
  }

  /** RFC 5531 §9: "PROG_UNAVAIL: remote hasn't exported program". */
  private progUnavail(conn: FrontendConnection, record: Buffer, program: number, version: number): void {
    this.stats.unavailable++;
    conn.log.debug({ program, version, localPort: conn.localPort }, 'no route for the program: PROG_UNAVAIL');
    const w = this.writer.reset(Buffer.allocUnsafe(PROG_UNAVAIL_SIZE), 0);
    encodeAcceptedReply(w, { xid: getU32BE(record, 0), acceptStat: AcceptStat.PROG_UNAVAIL });
    this.recordPool?.release(record);
    conn.sendReply([w.view()]);
  }

  /** RFC 5531 §9: MSG_DENIED, RPC_MISMATCH: "RPC version number != 2", with the one version spoken. */
  private rpcMismatch(conn: FrontendConnection, record: Buffer): void {
    this.stats.rpcMismatch++;
    const rpcvers = getU32BE(record, 8);
    conn.log.debug({ rpcvers }, 'RPC version is not 2: RPC_MISMATCH');
    const w = this.writer.reset(Buffer.allocUnsafe(RPC_MISMATCH_SIZE), 0);
    encodeDeniedReply(w, {
      xid: getU32BE(record, 0),
      rejectStat: RejectStat.RPC_MISMATCH,
      mismatch: { low: RPC_VERSION, high: RPC_VERSION },
    });
    this.recordPool?.release(record);
    conn.sendReply([w.view()]);
  }

  /** RFC 5531 §9: "PROG_MISMATCH: remote can't support version #", with the versions it does support. */
  private progMismatch(
    conn: FrontendConnection,
    record: Buffer,
    program: number,
    version: number,
    mismatch: { low: number; high: number },
  ): void {
    this.stats.versionMismatch++;
    conn.log.debug({ program, version, ...mismatch }, 'no route for the version: PROG_MISMATCH');
    const w = this.writer.reset(Buffer.allocUnsafe(PROG_MISMATCH_SIZE), 0);
    encodeAcceptedReply(w, {
      xid: getU32BE(record, 0),
      acceptStat: AcceptStat.PROG_MISMATCH,
      mismatch,
    });
    this.recordPool?.release(record);
    conn.sendReply([w.view()]);
  }
}

/** Logs the table once at start, one line per route. */

export function describeTable(table: RoutingTable): string[] {
  return table.routes.map(formatRoute);
}

// ----------------------------------------------------------------------------------------------------
// From the configuration

/** The servers' TCP-only programs (RFC 8267 §6 puts only NFS and NFS_ACL on RDMA). */
const TCP_SIDE_PROGRAMS = [MOUNT_PROGRAM, NLM_PROGRAM, NSM_PROGRAM, RQUOTA_PROGRAM];

/** The programs RFC 8267 §6 puts on RDMA (and the gateway's own test program, behind the responder). */
const RDMA_SIDE_PROGRAMS = [NFS_PROGRAM, NFS_ACL_PROGRAM, TEST_PROGRAM];

function discoveredVersions(discovered: readonly UpstreamRegistration[], program: number): number[] {
  const out = new Set<number>();
  for (const r of discovered) if (r.program === program) out.add(r.version);
  return [...out].sort((a, b) => a - b);
}

/** The TCP registrations of the server's portmapper (`passthrough.discover`), when it was asked. */
export interface UpstreamRegistration {
  program: number;
  version: number;
  port: number;
}

/**
 * The default routes: NFS, NFS_ACL and the test program over RDMA; MOUNT, NLM, NSM, rquota through the
 * TCP passthrough when an upstream is configured (else over RDMA, as before routing existed: a server
 * reached through the embedded responder serves them on its NFS port); the portmapper locally when on.
 *
 * With `discovered` (what the server's portmapper lists for TCP), each program gets one route per version
 * the server registers — the TCP-side ones to the port it registers them on (the host of
 * `passthrough.upstream`) — and none when the server does not serve it: the gateway then neither
 * advertises it nor forwards its calls (PROG_UNAVAIL, or PROG_MISMATCH for an unserved version, as the
 * server itself would answer). NFS keeps a route for every version when the server lists none.
 */
export function defaultRoutes(
  config: GatewayConfig,
  discovered: readonly UpstreamRegistration[] | null = null,
): Route[] {
  const upstream = config.passthrough.upstream;
  const routes: Route[] = [];
  for (const program of RDMA_SIDE_PROGRAMS) {
    const versions = discovered === null || upstream === 'off' ? [] : discoveredVersions(discovered, program);
    if (versions.length > 0) {
      for (const version of versions) routes.push({ program, version, kind: 'rdma', upstream: null });
    } else if (discovered === null || upstream === 'off' || program === NFS_PROGRAM) {
      // Without discovery every version goes to the server; NFS always does (an NFSv4-only server need
      // not register with a portmapper at all).
      routes.push({ program, version: null, kind: 'rdma', upstream: null });
    }
  }
  if (upstream === 'off') {
    for (const program of TCP_SIDE_PROGRAMS)
      routes.push({ program, version: null, kind: 'rdma', upstream: null });
  } else if (discovered === null) {
    for (const program of TCP_SIDE_PROGRAMS)
      routes.push({ program, version: null, kind: 'tcp', upstream: null });
  } else {
    const seen = new Set<string>();
    for (const reg of discovered) {
      if (!TCP_SIDE_PROGRAMS.includes(reg.program)) continue;
      const k = `${reg.program}/${reg.version}`;
      if (seen.has(k)) continue; // PMAP v2 holds one port per (program, version, protocol)
      seen.add(k);
      routes.push({
        program: reg.program,
        version: reg.version,
        kind: 'tcp',
        upstream: { host: upstream.host, port: reg.port },
      });
    }
  }
  if (config.portmapper.enabled)
    routes.push({ program: PORTMAP_PROGRAM, version: null, kind: 'local', upstream: null });
  return routes;
}

function configError(key: string, message: string, details: Record<string, unknown> = {}): ConfigError {
  return new ConfigError('ERR_CONFIG_VALUE', `${key}: ${message}`, { key, ...details });
}

/**
 * The routing table of a configuration: the defaults, each program named in `routes` replacing its
 * default. Throws ConfigError (naming `routes`) for a tcp route with no upstream, or a local route for a
 * program the gateway does not serve itself.
 */
export function routingTableFor(
  config: GatewayConfig,
  discovered: readonly UpstreamRegistration[] | null = null,
): RoutingTable {
  const configured = config.routes;
  const named = new Set(configured.map((r) => r.program));
  const routes = [...defaultRoutes(config, discovered).filter((r) => !named.has(r.program)), ...configured];
  for (const r of routes) {
    if (r.kind === 'tcp' && r.upstream === null && config.passthrough.upstream === 'off') {
      throw configError('routes', `'${formatRoute(r)}' names no upstream and passthrough.upstream is off`, {
        route: formatRoute(r),
      });
    }
    if (r.kind === 'local' && r.program !== PORTMAP_PROGRAM) {
      throw configError('routes', `'${formatRoute(r)}': the gateway serves only the portmapper itself`, {
        route: formatRoute(r),
      });
    }
  }
  try {
    return new RoutingTable(routes);
  } catch (err) {
    if (err instanceof UsageError) throw configError('routes', err.message, { reason: err.code });
    throw err;
  }
}

/** Every address the frontend binds, with the programs each serves (null: all). */
export interface ListenPlan {
  addresses: ListenAddress[];
  programs: (ReadonlySet<number> | null)[];
}

export function listenPlanFor(config: GatewayConfig): ListenPlan {
  const addresses: ListenAddress[] = [];
  const programs: (ReadonlySet<number> | null)[] = [];
  for (const a of config.frontend.listen) {
    addresses.push({ host: a.host, port: a.port });
    programs.push(null);
  }
  for (const l of config.listeners) {
    addresses.push({ host: l.host, port: l.port });
    programs.push(new Set(l.programs));
  }
  if (config.portmapper.enabled) {
    for (const a of config.portmapper.listen) {
      addresses.push({ host: a.host, port: a.port });
      programs.push(new Set([PORTMAP_PROGRAM]));
    }
  }
  // One port, one program set: the dispatcher tells listeners apart by the port a client reached.
  const byPort = new Map<number, string>();
  addresses.forEach((a, i) => {
    if (a.port === 0) return;
    const set = programs[i] === null ? '*' : [...(programs[i] as Set<number>)].sort().join('+');
    const prev = byPort.get(a.port);
    if (prev !== undefined && prev !== set) {
      throw configError(
        'listeners',
        `port ${a.port} is given two different program sets (${prev} and ${set})`,
        {
          port: a.port,
        },
      );
    }
    byPort.set(a.port, set);
  });
  return { addresses, programs };
}

/** The per-port restrictions once bound (`bound[i]` is `plan.addresses[i]` with its real port). */
export function listenerPrograms(plan: ListenPlan, bound: readonly BoundAddress[]): ListenerPrograms {
  const out = new Map<number, ReadonlySet<number> | null>();
  bound.forEach((b, i) => {
    const p = plan.programs[i] ?? null;
    if (p !== null) out.set(b.port, p);
  });
  return out;
}
