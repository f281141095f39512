/**
 * The upstream connections of one passthrough target: opened on first use (up to `connections`), used in
 * turn, replaced when lost. A target that cannot be reached fails fast for `retryAfterMs` after a failed
 * attempt, so a client's retransmissions do not each wait a connect timeout.
 */
import type { Logger } from 'pino';
import { GatewayError } from '../../common/errors.js';
import { formatHostPort, type HostPort } from '../../tcp-frontend/address.js';
import { RpcClient, type RpcClientError } from '../../tcp-frontend/client.js';
import type { PassthroughStats } from './passthrough.js';

/** The upstream of a tcp route is unreachable (`ERR_UPSTREAM_UNAVAILABLE`). */
export class UpstreamError extends GatewayError {}

export interface UpstreamPoolOptions {
  target: HostPort;
  connections: number;
  connectTimeoutMs: number;
  retryAfterMs: number;
  maxRecordSize?: number;
  maxInFlight: number;
  stats: PassthroughStats;
  logger: Logger;
}

/** One upstream connection and the XIDs in use on it: the gateway's, and the RPCSEC_GSS calls' own. */
export class UpstreamLink {
  private readonly inUse = new Set<number>();
  /** Starts at a random value so that a restarted gateway does not reuse recent XIDs (the server's DRC). */
  private nextXid = (Math.random() * 0x1_0000_0000) >>> 0;

  constructor(
    readonly client: RpcClient,
    readonly target: string,
  ) {}

  get outstanding(): number {
    return this.inUse.size;
  }

  allocateXid(): number {
    let xid = this.nextXid;
    do xid = (xid + 1) >>> 0;
    while (xid === 0 || this.inUse.has(xid));
    this.nextXid = xid;
    this.inUse.add(xid);
    return xid;
  }

  /**
   * Reserves an XID the caller must keep (an RPCSEC_GSS call's: its checksum covers it), so that
   * `allocateXid` never hands it to another call while it is in flight. False when a call on this
   * connection already has it.
   */
  reserveXid(xid: number): boolean {
    if (this.inUse.has(xid)) return false;
    this.inUse.add(xid);
    return true;
  }

  releaseXid(xid: number): void {
    this.inUse.delete(xid);
  }
}

export class UpstreamPool {
  readonly target: string;
  private readonly o: UpstreamPoolOptions;
  private readonly links: UpstreamLink[] = [];
  private next = 0;
  private connecting: Promise<UpstreamLink> | null = null;
  private failedAt = 0;
  private lastError: UpstreamError | null = null;
  private closed = false;

  constructor(o: UpstreamPoolOptions) {
    this.o = o;
    this.target = formatHostPort(o.target.host, o.target.port);
  }

  describe(): { target: string; connections: number; outstanding: number; state: string } {
    let outstanding = 0;
    for (const l of this.links) outstanding += l.outstanding;
    const state =
      this.links.length > 0
        ? 'connected'
        : this.connecting
          ? 'connecting'
          : this.failedAt > 0
            ? 'down'
            : 'idle';
    return { target: this.target, connections: this.links.length, outstanding, state };
  }

  /**
   * An open connection to send on now, in turn (opening more up to `connections` meanwhile), or null when
   * none is open: then `acquire()`. The common case costs no promise.
   */
  openLink(): UpstreamLink | null {
    const n = this.links.length;
    if (n === 0 || this.closed) return null;
    if (n < this.o.connections && this.connecting === null) this.open().catch(() => {});
    return this.links[this.next++ % n];
  }

  /** A connection to send on: an open one in turn, else the one being opened, else a new one. */
  acquire(): Promise<UpstreamLink> {
    if (this.closed)
      return Promise.reject(new UpstreamError('ERR_UPSTREAM_UNAVAILABLE', 'passthrough closed'));
    const link = this.openLink();
    if (link) return Promise.resolve(link);
    if (this.connecting) return this.connecting;
    if (this.lastError && Date.now() - this.failedAt < this.o.retryAfterMs)
      return Promise.reject(this.lastError);
    return this.open();
  }

  /**
   * Closes every connection. An idle one is closed gracefully, waiting at most `timeoutMs` for the server's
   * side. One with calls still outstanding is destroyed at once: the passthrough closes after the frontend
   * (`Gateway.stop`), so no client is left to take those replies, and a server that never sends them would
   * otherwise hold the stop for ever.
   */
  async close(timeoutMs: number): Promise<void> {
    this.closed = true;
    await Promise.all(
      this.links.splice(0).map((l) => {
        const outstanding = l.client.outstanding;
        if (outstanding === 0) return l.client.close(timeoutMs);
        this.o.logger.info(
          { upstream: this.target, outstanding },
          'passthrough upstream closed with calls unanswered: their clients are gone',
        );
        l.client.destroy();
        return undefined;
      }),
    );
  }

  private open(): Promise<UpstreamLink> {
    const o = this.o;
    const p = RpcClient.connect({
      host: o.target.host,
      port: o.target.port,
      connectTimeoutMs: o.connectTimeoutMs,
      maxRecordSize: o.maxRecordSize,
      maxInFlight: o.maxInFlight,
      onClose: (err) => this.lost(link, err),
    }).then(
      (client) => {
        this.connecting = null;
        this.lastError = null;
        link = new UpstreamLink(client, this.target);
        o.stats.upstreamConnects++;
        if (this.closed) {
          client.destroy();
          throw new UpstreamError('ERR_UPSTREAM_UNAVAILABLE', 'passthrough closed');
        }
        this.links.push(link);
        o.logger.info({ upstream: this.target, local: client.localPort }, 'passthrough upstream connected');
        return link;
      },
      (err: RpcClientError) => {
        this.connecting = null;
        this.failedAt = Date.now();
        o.stats.upstreamConnectFailures++;
        this.lastError = new UpstreamError(
          'ERR_UPSTREAM_UNAVAILABLE',
          err.message,
          { upstream: this.target, cause: err.code },
          { cause: err },
        );
        o.logger.warn(
          { upstream: this.target, code: err.code, err: err.message },
          'passthrough upstream unreachable',
        );
        throw this.lastError;
      },
    );
    let link: UpstreamLink | undefined;
    this.connecting = p;
    return p;
  }

  private lost(link: UpstreamLink | undefined, err: RpcClientError | undefined): void {
    if (!link) return;
    const i = this.links.indexOf(link);
    if (i >= 0) this.links.splice(i, 1);
    // Closed on purpose (`close()`): not a loss, whatever the calls it cut short.
    if (this.closed) return;
    this.o.stats.upstreamLost++;
    this.o.logger.warn(
      { upstream: this.target, outstanding: link.outstanding, err: err?.message },
      'passthrough upstream connection lost',
    );
  }
}
