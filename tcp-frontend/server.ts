/**
 * The TCP frontend: listens on one or more addresses (IPv4 and IPv6), enforces the connection limit across
 * all of them, and turns each accepted socket into a `FrontendConnection` that decodes records and hands
 * them to the one `FrontendHandler` the server was created with.
 *
 * The connection limit is enforced here rather than with `net.Server.maxConnections` because it spans
 * several listeners and because a refusal must be counted and logged with the peer's address.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { type Logger, pino } from 'pino';
import type { BufferPool } from '../common/buffer-pool.js';
import { withReadBuffer } from '../common/read-buffer.js';
import { type AccessPolicy, ClientAccess } from './access.js';
import { formatHostPort } from './address.js';
import { FrontendConnection, type FrontendHandler } from './connection.js';
import { FrontendError } from './frontend-errors.js';
import { type FrontendLimits, resolveLimits } from './limits.js';
import { countBy, createFrontendStats, type FrontendStats } from './stats.js';

export type { AccessDenial, AccessPolicy } from './access.js';
export { ClientAccess, PRIVILEGED_PORT_LIMIT, parseCidr } from './access.js';
export { formatHostPort, parseHostPort } from './address.js';
export type { CloseReason, FrontendHandler } from './connection.js';
export { FrontendConnection, XDR_PAD } from './connection.js';
export type { FrontendLimits } from './limits.js';
export { COPIED_RECORD_MAX } from './record-writer.js';
export type { FrontendStats } from './stats.js';

/** Node's own read size: a 1 MiB record arrives in 16 reads, as before the buffer was shared. */
const READ_BUFFER_SIZE = 64 * 1024;

export interface ListenAddress {
  host: string;
  /** 0 picks a free port (see `addresses()` for the one bound). */
  port: number;
}

export interface BoundAddress {
  host: string;
  port: number;
  family: string;
}

export interface FrontendServerOptions {
  listen: readonly ListenAddress[];
  handler: FrontendHandler;
  limits?: Partial<FrontendLimits>;
  logger?: Logger;
  /** Disable Nagle on client sockets (RPC is request/response: default true). */
  noDelay?: boolean;
  /** TCP keepalive probes after this many ms of silence, so dead peers are found; 0 disables. Default 60 s. */
  keepAliveMs?: number;
  /** Client networks allowed and the privileged-port requirement (default: anyone, any port). */
  access?: AccessPolicy;
  /**
   * Where records that span socket chunks are assembled (large calls: NFS WRITE, SINK). Whoever
   * consumes a record may give it back (`release`) once nothing references it (the router does, when
   * the call is over), so large calls reuse memory. Default: a fresh allocation per record.
   */
  recordPool?: BufferPool;
}

export interface CloseOptions {
  /** How long calls in flight may take to finish before their connections are destroyed. Default 10 s. */
  drainTimeoutMs?: number;
}

export class FrontendServer {
  readonly limits: FrontendLimits;
  readonly stats: FrontendStats = createFrontendStats();
  readonly connections = new Set<FrontendConnection>();
  readonly log: Logger;
  readonly access: ClientAccess;
  private readonly handler: FrontendHandler;
  private readonly recordPool: BufferPool | undefined;
  /**
   * What every connection of this server reads into (one process-wide read buffer, not a fresh 64 KiB
   * chunk per read: common/read-buffer.ts). Connections copy out what they keep (`zeroCopy: false`).
   */
  private readonly readBuffer = Buffer.allocUnsafe(READ_BUFFER_SIZE);
  private readonly listenOn: readonly ListenAddress[];
  private readonly noDelay: boolean;
  private readonly keepAliveMs: number;
  private readonly servers: Server[] = [];
  private closing = false;
  private refusing = false;
  private readonly closeWaiters: (() => void)[] = [];
  private recordSweep: NodeJS.Timeout | undefined;

  constructor(options: FrontendServerOptions) {
    this.limits = resolveLimits(options.limits);
    this.handler = options.handler;
    this.recordPool = options.recordPool;
    this.listenOn = options.listen;
    this.noDelay = options.noDelay ?? true;
    this.keepAliveMs = options.keepAliveMs ?? 60_000;
    this.log = options.logger ?? pino({ level: 'silent' });
    this.access = new ClientAccess(options.access);
  }

  /** Binds every listen address; on any failure closes those already bound and throws ERR_LISTEN. */
  async listen(): Promise<BoundAddress[]> {
    if (this.listenOn.length === 0) {
      throw new FrontendError('ERR_LISTEN', 'no listen address configured', {});
    }
    // Listening on '::' is dual-stack by default and would collide with an IPv4 listener on the same
    // port; with several addresses each IPv6 one binds IPv6 only.
    const ipv6Only = this.listenOn.length > 1;
    try {
      for (const addr of this.listenOn) {
        // Paused on connect: an accepted socket is adopted into one reading into `readBuffer`
        // (common/read-buffer.ts), and nothing may have been read into the original first.
        const server = createServer({ allowHalfOpen: true, pauseOnConnect: true }, (socket) =>
          this.accept(socket),
        );
        this.servers.push(server);
        await new Promise<void>((resolve, reject) => {
          server.once('error', reject);
          server.listen(
            { host: addr.host, port: addr.port, ipv6Only: ipv6Only && addr.host.includes(':') },
            () => {
              server.off('error', reject);
              resolve();
            },
          );
        }).catch((err: NodeJS.ErrnoException) => {
          throw new FrontendError(
            'ERR_LISTEN',
            `cannot listen on ${formatHostPort(addr.host, addr.port)}: ${err.message}`,
            { host: addr.host, port: addr.port, errno: err.code },
            { cause: err },
          );
        });
        server.on('error', (err) => this.log.error({ err: { message: err.message } }, 'listener error'));
      }
    } catch (err) {
      await this.closeListeners();
      throw err;
    }
    if (this.limits.recordTimeoutMs > 0 && this.recordSweep === undefined) {
      // One sweep for all connections rather than a timer per record: a record's deadline is then late by
      // at most a quarter of the timeout (and at most 1 s).
      const periodMs = Math.min(1000, Math.max(25, Math.floor(this.limits.recordTimeoutMs / 4)));
      this.recordSweep = setInterval(sweepRecordDeadlines, periodMs, this.connections);
      this.recordSweep.unref();
    }
    const bound = this.addresses();
    this.log.info({ addresses: bound.map((a) => formatHostPort(a.host, a.port)) }, 'frontend listening');
    return bound;
  }

  /** The addresses actually bound (ports resolved when 0 was asked for). */
  addresses(): BoundAddress[] {
    const out: BoundAddress[] = [];
    for (const s of this.servers) {
      const a = s.address();
      if (a && typeof a === 'object') out.push({ host: a.address, port: a.port, family: a.family });
    }
    return out;
  }

  /**
   * Stops accepting, closes connections gracefully (calls in flight finish and their replies are written,
   * undispatched ones are dropped for the client to retransmit) and resolves once all are closed;
   * connections still open after `drainTimeoutMs` are destroyed.
   */
  async close(options: CloseOptions = {}): Promise<void> {
    this.closing = true;
    clearInterval(this.recordSweep);
    this.recordSweep = undefined;
    const listenersClosed = this.closeListeners();
    for (const conn of this.connections) conn.close('SERVER_CLOSING', 'the server is shutting down');
    if (this.connections.size > 0) {
      const drainTimeoutMs = options.drainTimeoutMs ?? 10_000;
      const timer = setTimeout(() => {
        for (const conn of this.connections) {
          conn.destroy('SERVER_CLOSING', 'drain timeout: calls still in flight were abandoned', {
            drainTimeoutMs,
            inFlight: conn.inFlight,
          });
        }
      }, drainTimeoutMs);
      await new Promise<void>((resolve) => this.closeWaiters.push(resolve));
      clearTimeout(timer);
    }
    await listenersClosed;
  }

  /**
   * Drain (admin API): while `refuse` is set, a new connection is closed as soon as it is accepted (counted
   * as REFUSED_DRAINING); open connections and their calls are untouched. The listeners stay bound, so
   * cancelling the drain cannot lose the port to another process.
   */
  refuseNewConnections(refuse: boolean): void {
    this.refusing = refuse;
  }

  get refusingNewConnections(): boolean {
    return this.refusing;
  }

  private closeListeners(): Promise<void> {
    const servers = this.servers.splice(0);
    return Promise.all(
      servers.map(
        (s) =>
          new Promise<void>((resolve) => {
            if (!s.listening) return resolve();
            s.close(() => resolve());
          }),
      ),
    ).then(() => undefined);
  }

  private accept(socket: Socket): void {
    const remote = formatHostPort(socket.remoteAddress ?? '?', socket.remotePort ?? 0);
    // Access first: a client that may not connect must not take a slot from those that may.
    const denial = this.access.open
      ? undefined
      : this.access.check(socket.remoteAddress ?? '', socket.remotePort ?? 0);
    if (denial) {
      this.stats.connectionsRefused++;
      countBy(this.stats.errors, denial.code);
      this.log.warn(
        { reason: denial.code, remote, ...denial.details },
        `connection refused: ${denial.message}`,
      );
      socket.on('error', () => {});
      socket.destroy();
      return;
    }
    if (this.closing || this.refusing || this.connections.size >= this.limits.maxConnections) {
      const code = this.closing
        ? 'REFUSED_SERVER_CLOSING'
        : this.refusing
          ? 'REFUSED_DRAINING'
          : 'REFUSED_MAX_CONNECTIONS';
      this.stats.connectionsRefused++;
      countBy(this.stats.errors, code);
      this.log.warn(
        { reason: code, remote, open: this.connections.size, maxConnections: this.limits.maxConnections },
        'connection refused',
      );
      // An error on a socket we are discarding (a reset racing the destroy) must not crash the process.
      socket.on('error', () => {});
      socket.destroy();
      return;
    }
    const adopted = withReadBuffer(socket, this.readBuffer, { allowHalfOpen: true });
    adopted.setNoDelay(this.noDelay);
    if (this.keepAliveMs > 0) adopted.setKeepAlive(true, this.keepAliveMs);
    const conn = new FrontendConnection(
      adopted,
      this.limits,
      this.stats,
      this.handler,
      this.log,
      (c) => this.forget(c),
      this.recordPool,
    );
    this.connections.add(conn);
    this.stats.connectionsAccepted++;
    this.stats.connectionsOpen++;
    conn.log.debug('connection accepted');
  }

  private forget(conn: FrontendConnection): void {
    if (!this.connections.delete(conn)) return;
    this.stats.connectionsOpen--;
    this.stats.connectionsClosed++;
    if (this.connections.size === 0) {
      for (const resolve of this.closeWaiters.splice(0)) resolve();
    }
  }
}

function sweepRecordDeadlines(connections: ReadonlySet<FrontendConnection>): void {
  const now = Date.now();
  for (const conn of connections) conn.checkRecordDeadline(now);
}
