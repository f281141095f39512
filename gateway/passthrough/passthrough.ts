/**
 * TCP passthrough (the `tcp` route): calls of programs the RDMA server serves only over TCP (MOUNT, NLM,
 * NSM, rquota — RFC 8267 leaves them off RDMA) are forwarded as they are to an upstream TCP server, and the
 * replies come back to the client that sent them.
 *
 * - One pool of upstream connections per target (`UpstreamPool`), opened on first use.
 * - XIDs: each upstream connection carries calls from many clients, so the gateway assigns the XID on the
 *   upstream side (unique per upstream connection, as on the RDMA side: DESIGN §3) and restores the
 *   client's in the reply. RPCSEC_GSS calls keep theirs (the GSS checksum covers it).
 * - Limits, statistics and backpressure are the frontend's: a call stays in flight for its client until the
 *   reply is written (the frontend stops reading a client at its in-flight limit and while its socket does
 *   not drain); the upstream client bounds calls on the wire and stops writing while the upstream socket
 *   does not drain.
 * - Failures are never answered (DESIGN §3): an upstream that cannot be reached, or a connection lost with
 *   calls on it, closes the clients concerned so that they retransmit; it is logged and counted. Upstream
 *   connections are never half-closed (ganesha drops replies due on a half-closed connection, DESIGN §4).
 */
import type { Logger } from 'pino';
import { pino } from 'pino';
import type { BufferPool } from '../../common/buffer-pool.js';
import { U32Map } from '../../common/u32-map.js';
import { AuthFlavor } from '../../rpc/constants.js';
import { formatHostPort, type HostPort } from '../../tcp-frontend/address.js';
import { type CallReceiver, RpcClientError, type RpcReply } from '../../tcp-frontend/client.js';
import { DEFAULT_MAX_RECORD_SIZE } from '../../tcp-frontend/record-marking.js';
import type { FrontendConnection } from '../../tcp-frontend/server.js';
import type { Route, TcpRouteHandler } from '../dispatch.js';
import { RoomParty } from '../reply-room.js';
import { type UpstreamLink, UpstreamPool, type UpstreamPoolOptions } from './upstream-pool.js';

export interface PassthroughStats {
  calls: number;
  replies: number;
  /** Replies for clients that had gone away (consumed). */
  orphanedReplies: number;
  /** Clients closed because their upstream could not be reached or was lost with their calls on it. */
  clientsClosed: number;
  /**
   * Calls a client sent again while the first was still in flight here (same XID): dropped, the first
   * one's reply answers both (as on the rdma route).
   */
  duplicatesDropped: number;
  /** Upstream connections opened, failed to open, and lost (closed with calls outstanding or not). */
  upstreamConnects: number;
  upstreamConnectFailures: number;
  upstreamLost: number;
  /** Gauge: calls forwarded and not yet answered. */
  inFlight: number;
  /** Failures by code (ERR_UPSTREAM_UNAVAILABLE, ERR_UPSTREAM_LOST, ERR_CLIENT_XID_IN_USE...). */
  errors: Record<string, number>;
}

export interface PassthroughOptions {
  /** Target of `tcp` routes that name none (`passthrough.upstream`); null: every tcp route names one. */
  defaultUpstream: HostPort | null;
  /** Upstream connections per target. Default 1. */
  connections?: number;
  connectTimeoutMs?: number;
  /** After a failed connect, calls fail at once for this long instead of each waiting for a timeout. */
  retryAfterMs?: number;
  /** Largest reply accepted from upstream (the frontend's record limit). */
  maxRecordSize?: number;
  /** Calls on the wire per upstream connection. */
  maxInFlight?: number;
  /**
   * Reply bytes one client may have coming plus written and not yet taken by its socket
   * (`frontend.maxReplyBytes`), on every route: the account is the client connection's
   * (`FrontendConnection.replyReserved`), shared with the rdma route. Each call forwarded here counts at
   * `maxRecordSize` (the route does not parse replies). Beyond it the client's reading is held until
   * replies drain. Default 64 MiB.
   */
  maxReplyBytes?: number;
  /**
   * The frontend's record pool: a forwarded record goes back once its reply is in (the upstream has read
   * it all, so the socket holds it no longer), or at once when it is never written.
   */
  recordPool?: BufferPool;
  logger?: Logger;
}

/** One forwarded call: everything needed to put the reply back where it belongs. */
interface Forwarded {
  conn: FrontendConnection;
  clientXid: number;
  gss: boolean;
  /** Its client's calls in flight on this route, by client XID (this call is in it until it is over). */
  xids: U32Map<Forwarded>;
  link: UpstreamLink;
  xid: number;
  /** The call's record: given back to the record pool when nothing can hold it any more. */
  record: Buffer;
}

export class Passthrough implements TcpRouteHandler, CallReceiver<Forwarded> {
  readonly stats: PassthroughStats = {
    calls: 0,
    replies: 0,
    orphanedReplies: 0,
    clientsClosed: 0,
    duplicatesDropped: 0,
    upstreamConnects: 0,
    upstreamConnectFailures: 0,
    upstreamLost: 0,
    inFlight: 0,
    errors: {},
  };
  private readonly pools = new Map<string, UpstreamPool>();
  /** Each route's pool, so that a call finds it without building the target's key. */
  private readonly routePools = new WeakMap<Route, UpstreamPool>();
  private readonly defaultUpstream: HostPort | null;
  private readonly poolOptions: Omit<UpstreamPoolOptions, 'target'>;
  private readonly log: Logger;
  private readonly recordPool: BufferPool | undefined;
  private closed = false;
  private readonly maxReplyBytes: number;
  private readonly replyUnit: number;
  /** Clients whose reading this route holds (`FrontendConnection.hold`) until there is reply room again. */
  private readonly holding = new WeakSet<FrontendConnection>();
  /**
   * Each client's calls in flight on this route, by its XID. A call that comes again with one of them is
   * the client retransmitting it (after `timeo`, on the same connection): sent again under another
   * upstream XID it would run twice, where the server's duplicate request cache would have known a
   * retransmission on one connection. Dropped; the first call's reply answers the XID.
   */
  private readonly clientXids = new WeakMap<FrontendConnection, U32Map<Forwarded>>();

  constructor(o: PassthroughOptions) {
    this.defaultUpstream = o.defaultUpstream;
    this.recordPool = o.recordPool;
    this.log = o.logger ?? pino({ level: 'silent' });
    this.maxReplyBytes = o.maxReplyBytes ?? 64 * 1024 * 1024;
    this.replyUnit = o.maxRecordSize ?? DEFAULT_MAX_RECORD_SIZE;
    this.poolOptions = {
      connections: o.connections ?? 1,
      connectTimeoutMs: o.connectTimeoutMs ?? 3000,
      retryAfterMs: o.retryAfterMs ?? 1000,
      maxRecordSize: o.maxRecordSize,
      maxInFlight: o.maxInFlight ?? 128,
      stats: this.stats,
      logger: this.log,
    };
  }

  /** The pools by target, for the statistics. */
  upstreams(): { target: string; connections: number; outstanding: number; state: string }[] {
    return [...this.pools.values()].map((p) => p.describe());
  }

  forward(conn: FrontendConnection, record: Buffer, route: Route): void {
    const pool = this.closed ? undefined : (this.routePools.get(route) ?? this.poolFor(route));
    if (pool === undefined) {
      // The dispatcher refuses a table without an upstream at start; this is the stop race.
      this.fail(conn, 'ERR_UPSTREAM_UNAVAILABLE', 'no upstream for the tcp route', {});
      return;
    }
    const clientXid = record.readUInt32BE(0);
    let xids = this.clientXids.get(conn);
    if (xids === undefined) {
      xids = new U32Map<Forwarded>();
      this.clientXids.set(conn, xids);
    } else if (xids.has(clientXid)) {
      this.stats.duplicatesDropped++;
      this.recordPool?.release(record);
      conn.release();
      return;
    }
    this.stats.calls++;
    this.stats.inFlight++;
    this.reserve(conn);
    const f: Forwarded = {
      conn,
      clientXid,
      gss: record.length >= 28 && record.readUInt32BE(24) === AuthFlavor.RPCSEC_GSS,
      xids,
      link: null as unknown as UpstreamLink,
      xid: 0,
      record,
    };
    xids.set(clientXid, f);
    const link = pool.openLink();
    if (link !== null) {
      this.send(f, link, record);
      return;
    }
    // No connection yet (first use, or every one lost): wait for one.
    pool.acquire().then(
      (opened) => this.send(f, opened, record),
      (err: { code?: string; message: string; details?: Record<string, unknown> }) => {
        this.stats.inFlight--;
        over(f);
        this.recordPool?.release(record); // never written
        this.unreserve(conn);
        this.fail(conn, 'ERR_UPSTREAM_UNAVAILABLE', `upstream ${pool.target} unavailable: ${err.message}`, {
          upstream: pool.target,
          cause: err.code,
        });
      },
    );
  }

  /** The pool of `route`'s target (shared by every route to it), remembered for the route. */
  private poolFor(route: Route): UpstreamPool | undefined {
    const target = route.upstream ?? this.defaultUpstream;
    if (target === null) return undefined;
    const k = formatHostPort(target.host, target.port);
    let pool = this.pools.get(k);
    if (!pool) {
      pool = new UpstreamPool({ ...this.poolOptions, target });
      this.pools.set(k, pool);
    }
    this.routePools.set(route, pool);
    return pool;
  }

  onClose(conn: FrontendConnection): void {
    // Replies find the connection through their call and are dropped once it has closed; only the hold is
    // kept per client.
    this.holding.delete(conn);
  }

  /**
   * The client's socket drained, or reply room was released (by this route or the rdma route): if its
   * reading was held for room, it may go on.
   */
  onWritable(conn: FrontendConnection): void {
    this.release(conn);
  }

  /**
   * Counts a forwarded call's largest reply against its client's reply room; once the replies coming (on
   * any route) and unsent reach `maxReplyBytes`, the client's reading is held (the call being forwarded
   * still goes). Without it a client sending calls and reading nothing would make the gateway hold
   * `maxCallsInFlight` replies.
   */
  private reserve(conn: FrontendConnection): void {
    conn.reserveReplyRoom(this.replyUnit);
    if (!this.holding.has(conn) && conn.replyReserved + conn.unsentBytes >= this.maxReplyBytes) {
      this.holding.add(conn);
      conn.hold();
      conn.awaitReplyRoom(RoomParty.TCP);
    }
  }

  private unreserve(conn: FrontendConnection): void {
    conn.releaseReplyRoom(this.replyUnit, RoomParty.TCP);
    this.release(conn);
  }

  /**
   * Lets a held client read again once its replies coming and unsent fit. Until then it waits for the
   * next release of room (a reply on either route), or for its unsent bytes to be taken when no reply is
   * coming at all.
   */
  private release(conn: FrontendConnection): void {
    if (conn.closed || !this.holding.has(conn)) return;
    if (conn.replyReserved + conn.unsentBytes >= this.maxReplyBytes) {
      conn.awaitReplyRoom(RoomParty.TCP);
      if (conn.replyReserved === 0) conn.notifyWhenFlushed();
      return;
    }
    this.holding.delete(conn);
    conn.unhold();
  }

  /**
   * Closes every upstream connection (never a half-close first), once the frontend has closed: an idle one
   * waiting at most `timeoutMs` for the server's side, one with calls outstanding at once — their clients
   * are gone, and a server that never answers must not hold the stop.
   */
  async close(timeoutMs = 1000): Promise<void> {
    this.closed = true;
    await Promise.all([...this.pools.values()].map((p) => p.close(timeoutMs)));
    // The final counters, for operators and for tests of a process they cannot snapshot from inside.
    this.log.info({ stats: { ...this.stats, errors: { ...this.stats.errors } } }, 'passthrough closed');
  }

  private send(f: Forwarded, link: UpstreamLink, record: Buffer): void {
    if (f.conn.closed) {
      // The client went away while the upstream connection was being made.
      this.stats.inFlight--;
      over(f);
      this.recordPool?.release(record); // never written
      return;
    }
    f.link = link;
    if (f.gss) {
      // The GSS checksum covers the XID: it goes upstream as it is, reserved on this connection so that no
      // other client's call is given it meanwhile.
      f.xid = f.clientXid;
      if (!link.reserveXid(f.xid)) {
        this.recordPool?.release(record); // never written
        this.onCallFailed(
          f,
          new RpcClientError('ERR_CLIENT_XID_IN_USE', `xid ${f.xid} already has a call outstanding`, {
            xid: f.xid,
          }),
        );
        return;
      }
    } else {
      f.xid = link.allocateXid();
      record.writeUInt32BE(f.xid, 0);
    }
    // A refusal (XID in use, client closing) is reported from inside forwardRaw: like a missing upstream
    // in forward(), it closes the client from within its dispatch, which the frontend allows.
    link.client.forwardRaw([record], this, f);
  }

  /** The upstream's reply to a forwarded call (`CallReceiver`). */
  onCallReply(f: Forwarded, reply: RpcReply): void {
    this.stats.inFlight--;
    over(f);
    // Answered, so the upstream read the whole call: no write holds the record now. (A failed call's
    // record is left to the collector: its lost socket may still hold it.)
    this.recordPool?.release(f.record);
    f.link.releaseXid(f.xid);
    if (f.conn.closed) {
      this.stats.orphanedReplies++;
      return;
    }
    this.stats.replies++;
    reply.message.writeUInt32BE(f.clientXid, 0);
    f.conn.sendReply([reply.message]);
    this.unreserve(f.conn);
  }

  /** A forwarded call that no reply will answer (`CallReceiver`). */
  onCallFailed(f: Forwarded, err: RpcClientError): void {
    this.stats.inFlight--;
    over(f);
    // A call refused for its XID never held it: the XID is the other call's.
    if (err.code !== 'ERR_CLIENT_XID_IN_USE') f.link.releaseXid(f.xid);
    if (f.conn.closed) return;
    this.unreserve(f.conn);
    const code = err.code === 'ERR_CLIENT_XID_IN_USE' ? err.code : 'ERR_UPSTREAM_LOST';
    this.fail(f.conn, code, `upstream ${f.link.target}: ${err.message}`, {
      upstream: f.link.target,
      xid: f.clientXid,
    });
  }

  /** Closes the client so that it retransmits; the gateway does not answer for the server (DESIGN §3). */
  private fail(
    conn: FrontendConnection,
    code: string,
    message: string,
    details: Record<string, unknown>,
  ): void {
    this.stats.errors[code] = (this.stats.errors[code] ?? 0) + 1;
    if (conn.closed) return;
    if (conn.closing) {
      // Closing gracefully (the admin API, the server stopping), it waits for its calls in flight: this one
      // will never be answered, so it is over now — else the close would wait for it for ever, with the
      // socket paused and the connection's slot held. The client retransmits it on its next connection.
      conn.release();
      return;
    }
    this.stats.clientsClosed++;
    conn.log.warn({ code, ...details }, `${message}; closing the client so that it retransmits`);
    conn.destroy(code, message, details);
  }
}

/** The call is over (answered, failed, or never sent): its XID is its client's to use again. */
function over(f: Forwarded): void {
  if (f.xids.get(f.clientXid) === f) f.xids.delete(f.clientXid);
}
