/**
 * The call router (DESIGN §1 step 2 and 4): takes each RPC Call record a TCP client sent, asks the
 * upper-layer binding which items are DDP-eligible and how large the reply can be, queues it fairly per
 * client, gives it an XID unique on the RDMA connection it goes to, submits it, and writes the reply back
 * to the client with the client's own XID.
 *
 * - Connection choice: the ready connection of the pool with the fewest calls outstanding that still has
 *   a credit. Calls wait in their client's queue (never in the transport's), so the scheduler, not the
 *   transport, decides who gets a credit when they are short.
 * - Fairness: deficit round robin with a quantum of one call over the clients with waiting calls
 *   (`ClientRing`); one client with a deep pipeline gets one credit per turn like everyone else.
 * - XIDs (DESIGN §3): the RDMA side uses gateway XIDs so that the server's duplicate request cache never
 *   confuses two pooled clients; RPCSEC_GSS calls keep theirs (the verifier covers it) and go to a
 *   connection where that XID is not in use, or wait.
 * - Failures: a call whose connection was lost (`retransmit: true`) goes back to the front of its client's
 *   queue and is sent on another or a new connection; except an RPCSEC_GSS call, whose seq_num the server
 *   may have seen (it would discard the resent call silently, RFC 2203 §5.3.3.1): its client is closed,
 *   and signs and retransmits it itself. A call that waits longer than `holdTimeMs` for a connection
 *   closes its client's TCP connection, so the client retransmits by itself; a call the peer refused for
 *   good (`retransmit: false`) does the same. No RPC reply is ever invented (DESIGN §3).
 * - NFSv4.1 sessions (RFC 8881 §2.10): the session id of each CREATE_SESSION reply (and
 *   BIND_CONN_TO_SESSION) is learned per client, and every call naming the session in its SEQUENCE goes
 *   on the RDMA connection the session was created or bound on, so the server's connection binding and
 *   backchannel stay consistent. When that connection is gone the call goes to the least-loaded one and
 *   the session follows it (re-learned). Sessions are forgotten on a successful DESTROY_SESSION or when
 *   their client leaves (unless another client bound them), and beyond a per-client cap. Only calls the
 *   session parser tagged have their replies inspected. Under RPCSEC_GSS integrity (krb5i) calls and
 *   replies are read inside `databody_integ` (RFC 2203 §5.3.2.2); under privacy (krb5p) sessions are not
 *   learned (ulb/sessions.ts).
 * - Backchannel (gateway/backchannel/relay.ts): backward calls on a connection go to the client owning
 *   the session; REPLY records from clients are their answers.
 * - A client that went away: its waiting calls are dropped; its calls in flight, the replies that come
 *   for them and its calls answered lately are kept for a while by its address and port, for its return
 *   (router/departed.ts: a retransmission is adopted, answered, or sent again under its first gateway
 *   XID); other replies are consumed when they arrive and their records and buffers released. (The
 *   transport's `abandon` is not used: it reports nothing once the call is over, so the router could not
 *   tell when the record and the XID are free again.)
 */
import type { BufferPool } from '../common/buffer-pool.js';
import { getU32BE, setU32BE } from '../common/bytes.js';
import { turnNow } from '../common/turn-clock.js';
import { U32Map } from '../common/u32-map.js';
import type {
  ConnectionPool,
  RequesterHandler,
  RpcRdmaConnection,
  TransportError,
} from '../rdma-backend/transport/index.js';
import { MIN_CALL_HEADER, MsgType } from '../rpc/constants.js';
import { RpcHeaderError } from '../rpc/errors.js';
import { RpcCallHeader } from '../rpc/message.js';
import {
  type CloseReason,
  COPIED_RECORD_MAX,
  type FrontendConnection,
  type FrontendHandler,
} from '../tcp-frontend/server.js';
import { BackchannelRelay, type BackchannelStats, createBackchannelStats } from './backchannel/relay.js';
import { RoomParty } from './reply-room.js';
import { type CallRecord, CallRecordPool, type ConnectionLink } from './router/call-record.js';
import { CallStats } from './router/call-stats.js';
import { ClientRing, ClientState } from './router/client-state.js';
import {
  createDepartedStats,
  DepartedCalls,
  type DepartedStats,
  endpointOf,
  type HeldCall,
  Match,
} from './router/departed.js';
import { SessionTable } from './router/sessions.js';
import { isIdempotent } from './ulb/idempotent.js';
import type { UlbRegistry } from './ulb/registry.js';
import { gssIntegrity, SessionOp, SessionReply, sessionOfReply, sessionOpOfCall } from './ulb/sessions.js';
import { UlbOutcome } from './ulb/types.js';

const EMPTY = Buffer.alloc(0);

/** Default of `RouterOptions.pinWaitMs`. */
const DEFAULT_PIN_WAIT_MS = 1000;

/**
 * What `decodeCall` made of a CALL record: its header decoded (in `Router.header`); not decoded but
 * framed, and answered by the server itself (forwarded unplanned); or malformed (its client closed).
 */
const Decoded = { OK: 0, UNPLANNED: 1, MALFORMED: 2 } as const;
type Decoded = (typeof Decoded)[keyof typeof Decoded];

/** How many more calls than the least-loaded connection a burst's connection may hold and still take its next call (`pick`). */
const BURST_SLACK = 32;

export interface RouterOptions {
  registry: UlbRegistry;
  /** How long a call may wait for an RDMA connection before its client is disconnected. Default 30 s. */
  holdTimeMs?: number;
  /**
   * How often held calls are checked against the hold time (and connections looked up, as a safety net:
   * the pool's ready event is how new connections are learnt). Default 250 ms.
   */
  tickMs?: number;
  /**
   * How long a relayed callback waits for its client's answer before it is refused to free its backward
   * credit (checked on the tick). Default 30 s (`DEFAULT_CALLBACK_TIMEOUT_MS`).
   */
  callbackTimeoutMs?: number;
  /**
   * The frontend's record pool: each call's record goes back to it when the call is over, and replies are
   * assembled in it (the frontend gives them back once written).
   */
  recordPool?: BufferPool;
  /**
   * Reply bytes one client may have coming (its calls in flight, each counted at its largest possible
   * reply) plus written and not yet taken by its socket. A call that would go beyond waits in the
   * router until replies drain; one call always goes when nothing is coming or unsent. Default 64 MiB.
   */
  maxReplyBytes?: number;
  /**
   * What a call whose reply size its ULB cannot bound is counted at: the largest reply the transport
   * accepts (the Reply chunk it offers). Default 4 MiB + 64 KiB.
   */
  unknownReplyBytes?: number;
  /**
   * How long the calls of a client that went away with calls in flight are kept for its return from
   * the same address and port (router/departed.ts): a retransmission is adopted, or answered with the
   * reply that came meanwhile, instead of running again under a new gateway XID. 0 disables. Default
   * 60 s.
   */
  resumeWindowMs?: number;
  /** Reply bytes held for departed clients, all together. Default 16 MiB. */
  resumeMaxBytes?: number;
  /**
   * How long a pinned retransmission (router/departed.ts) waits for its connection's credit at most, from
   * its first miss: then it goes on any connection (and may run again at the server). Default 1000 ms.
   * Tests lengthen it to tell "at once" from "after the wait" with a wide margin.
   */
  pinWaitMs?: number;
  /**
   * The router's clock, in milliseconds (monotonic). Default: `performance.now()` read once per
   * synchronous run (`turnNow`, common/turn-clock.ts). Tests that move time by hand give their own.
   */
  clock?: () => number;
  /**
   * Answered calls remembered per client for its loss (router/departed.ts): its calls in flight at most
   * (`frontend.maxCallsInFlight`). Default 128.
   */
  answeredRing?: number;
}

/** Defaults of `RouterOptions.maxReplyBytes` and `unknownReplyBytes`. */
export const DEFAULT_MAX_REPLY_BYTES = 64 * 1024 * 1024;
const DEFAULT_UNKNOWN_REPLY_BYTES = 4 * 1024 * 1024 + 64 * 1024;
/** Defaults of `RouterOptions.resumeWindowMs` and `resumeMaxBytes`. */
export const DEFAULT_RESUME_WINDOW_MS = 60_000;
export const DEFAULT_RESUME_MAX_BYTES = 16 * 1024 * 1024;

/** Counters (monotonic) and gauges (current values) of the router, as plain numbers. */
export interface RouterStats extends BackchannelStats, DepartedStats {
  calls: number;
  replies: number;
  /** Replies for clients that had gone away: consumed and released. */
  orphanedReplies: number;
  /** Waiting calls dropped because their client went away (never sent). */
  droppedQueued: number;
  /**
   * Calls a client sent again while the first was still waiting or in flight (same XID): dropped, the
   * first one's reply answers both.
   */
  duplicatesDropped: number;
  /** Calls sent again after their connection was lost. */
  retransmits: number;
  /**
   * RPCSEC_GSS calls in flight on a lost connection: not sent again (their seq_num is spent, RFC 2203
   * §5.3.3.1); their client was closed so that it signs and retransmits them itself.
   */
  gssNotResent: number;
  /** Clients disconnected because a call waited longer than the hold time. */
  holdExpired: number;
  /** Clients disconnected because the peer refused one of their calls for good. */
  refused: number;
  /** Records that were neither a call nor usable (closed the client). */
  malformed: number;
  /** NFSv4.1 sessions learned from CREATE_SESSION / BIND_CONN_TO_SESSION replies. */
  sessionsLearned: number;
  /** Sessions forgotten after a successful DESTROY_SESSION. */
  sessionsDestroyed: number;
  /** Sessions forgotten because their client left. */
  sessionsDropped: number;
  /** Sessions forgotten because their client held more than `MAX_SESSIONS_PER_CLIENT` (router/sessions.ts). */
  sessionsEvicted: number;
  /** Session calls sent on another connection because theirs was gone (the session follows). */
  sessionMoves: number;
  /** Times a session call waited for a credit on its own connection while others went first. */
  affinityWaits: number;
  /** Gauge: sessions known. */
  sessions: number;
  /** Calls the ULB did not understand (sent without DDP, reply size unknown). */
  ulbUnknown: number;
  ulbPartial: number;
  /** RPCSEC_GSS calls that had to wait or move because their XID was in use. */
  gssXidCollisions: number;
  /** Times a client's calls were held because its replies would not fit `maxReplyBytes` (it reads too slowly). */
  replyRoomWaits: number;
  /** Gauges. */
  clients: number;
  queued: number;
  inFlight: number;
  recordsInUse: number;
  recordsCreated: number;
}

export class Router implements FrontendHandler, RequesterHandler<CallRecord> {
  readonly stats: RouterStats = {
    calls: 0,
    replies: 0,
    orphanedReplies: 0,
    droppedQueued: 0,
    duplicatesDropped: 0,
    retransmits: 0,
    gssNotResent: 0,
    holdExpired: 0,
    refused: 0,
    malformed: 0,
    ...createBackchannelStats(),
    ...createDepartedStats(),
    sessionsLearned: 0,
    sessionsDestroyed: 0,
    sessionsDropped: 0,
    sessionsEvicted: 0,
    sessionMoves: 0,
    affinityWaits: 0,
    sessions: 0,
    ulbUnknown: 0,
    ulbPartial: 0,
    gssXidCollisions: 0,
    replyRoomWaits: 0,
    clients: 0,
    queued: 0,
    inFlight: 0,
    recordsInUse: 0,
    recordsCreated: 0,
  };
  readonly holdTimeMs: number;
  readonly maxReplyBytes: number;
  private readonly unknownReplyBytes: number;
  private readonly tickMs: number;
  private readonly pinWaitMs: number;
  private readonly registry: UlbRegistry;
  private readonly header = new RpcCallHeader();
  private readonly records: CallRecordPool;
  /** The record pool (calls and replies), when the gateway shares one with the frontend. */
  readonly recordPool: BufferPool | undefined;
  private readonly ring = new ClientRing();
  private readonly clients = new Set<ClientState>();
  private links: ConnectionLink[] = [];
  /**
   * The connection the calls of the current burst (the records decoded in one event-loop callback) go to;
   * forgotten at the end of the burst, so every burst starts on the least-loaded connection.
   */
  private burstLink: ConnectionLink | null = null;
  /** Bursts started so far: where the search for the least-loaded connection starts (ties take turns). */
  private burstTurn = 0;
  private readonly endBurst = (): void => {
    this.burstLink = null;
  };
  private readonly linkOf = new Map<RpcRdmaConnection, ConnectionLink>();
  /** The same links by id: kept calls name their connection by id (router/departed.ts). */
  private readonly linkById = new Map<number, ConnectionLink>();
  /** Live clients by endpoint (`newClient`), when departures are kept. */
  private readonly liveByEndpoint = new Map<string, ClientState>();
  private nextLinkId = 1;
  private readonly sessions = new SessionTable();
  /** Calls of clients that left with calls in flight, kept for their return (router/departed.ts). */
  private readonly departed: DepartedCalls;
  /** `departed.match`'s out-parameter (one, reused). */
  private readonly matched: { held: HeldCall | null } = { held: null };
  private readonly answeredRing: number;
  /** Connections the operator took out of rotation (`setOffline`), also before their link exists. */
  private readonly offline = new Set<RpcRdmaConnection>();
  /**
   * Calls by program/version/procedure, replies by status, latency, transport failures by code
   * (preallocated tables; `callStats.snapshot()` for the admin API).
   */
  readonly callStats = new CallStats();
  /** Backward calls from the pool's connections (also the pool's default responder handler). */
  readonly backchannel: BackchannelRelay;
  private pool: ConnectionPool | null = null;
  private timer: NodeJS.Timeout | null = null;
  private stopWatchingPool: (() => void) | null = null;
  private pumping = false;
  /** Next gateway XID; starts at a random value so that a restarted gateway does not reuse recent XIDs. */
  private nextXid = (Math.random() * 0x1_0000_0000) >>> 0;
  /** One-element parts array for `sendReply` (written synchronously, so it can be reused). */
  private readonly one: Buffer[] = [Buffer.alloc(0)];
  private closed = false;
  private readonly clock: () => number;

  constructor(options: RouterOptions) {
    this.registry = options.registry;
    this.holdTimeMs = options.holdTimeMs ?? 30_000;
    this.maxReplyBytes = options.maxReplyBytes ?? DEFAULT_MAX_REPLY_BYTES;
    this.unknownReplyBytes = options.unknownReplyBytes ?? DEFAULT_UNKNOWN_REPLY_BYTES;
    this.tickMs = options.tickMs ?? 250;
    this.pinWaitMs = options.pinWaitMs ?? DEFAULT_PIN_WAIT_MS;
    this.recordPool = options.recordPool;
    this.clock = options.clock ?? turnNow;
    this.backchannel = new BackchannelRelay(
      this.sessions,
      this.stats,
      options.callbackTimeoutMs,
      options.recordPool?.release,
    );
    this.records = new CallRecordPool(options.recordPool?.release);
    this.answeredRing = options.answeredRing ?? 128;
    this.departed = new DepartedCalls(
      options.resumeWindowMs ?? DEFAULT_RESUME_WINDOW_MS,
      options.resumeMaxBytes ?? DEFAULT_RESUME_MAX_BYTES,
      this.stats,
    );
  }

  /** Routes calls over `pool` (whose requester handler must be this router) and starts the tick. */
  attach(pool: ConnectionPool): void {
    this.pool = pool;
    this.refreshLinks();
    // A (re)connected connection takes the held calls at once; the tick is only the hold-time sweep and a
    // safety net, not how the router learns of connections.
    this.stopWatchingPool ??= pool.onReady(() => {
      if (this.closed) return;
      this.refreshLinks();
      this.pump();
    });
    if (this.timer === null) {
      this.timer = setInterval(() => this.tick(), this.tickMs);
      this.timer.unref();
    }
  }

  /** Stops the tick. Calls still queued stay where they are (the frontend closes their clients). */
  close(): void {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.stopWatchingPool?.();
    this.stopWatchingPool = null;
    this.departed.clear();
  }

  /**
   * Takes a connection out of rotation (admin API "offline") or puts it back. An offline connection gets
   * no new call — not even the calls of an NFSv4.1 session bound to it, which move to another connection
   * as when a connection is lost — and the calls in flight on it finish normally. The connection itself
   * stays open (closing it for good is the pool's business).
   */
  setOffline(conn: RpcRdmaConnection, offline: boolean): void {
    if (offline) this.offline.add(conn);
    else this.offline.delete(conn);
    const link = this.linkOf.get(conn);
    if (link) link.offline = offline;
    if (!offline) this.pump();
  }

  /** Calls the router has in flight on `conn` (sent, reply not yet back). */
  callsOn(conn: RpcRdmaConnection): number {
    return this.linkOf.get(conn)?.xids.size ?? 0;
  }

  snapshot(): RouterStats {
    const s = this.stats;
    s.clients = this.clients.size;
    s.sessions = this.sessions.size;
    s.sessionsEvicted = this.sessions.evicted;
    s.departuresKept = this.departed.size;
    s.callsKept = this.departed.heldCalls;
    s.recordsInUse = this.records.inUse;
    s.recordsCreated = this.records.created;
    return { ...s };
  }

  // --------------------------------------------------------------------------------------------------
  // From the TCP frontend

  onRecord(conn: FrontendConnection, record: Buffer): void {
    let client = conn.context as ClientState | undefined;
    if (client === undefined) {
      client = this.newClient(conn);
    }
    if (record.length < 8) {
      this.malformed(conn, record, 'a record too short to be an RPC message', null);
      return;
    }
    const msgType = getU32BE(record, 4);
    if (msgType === MsgType.REPLY) {
      this.backchannel.onClientReply(client, conn, record);
      return;
    }
    if (msgType !== MsgType.CALL) {
      this.malformed(conn, record, `msg_type ${msgType} is neither CALL nor REPLY`, null);
      return;
    }
    const decoded = this.decodeCall(conn, record);
    if (decoded === Decoded.MALFORMED) return;
    const clientXid = getU32BE(record, 0);
    if (client.xids.has(clientXid)) {
      // The client retransmitted a call still waiting or in flight (an NFSv3 client does so on the same
      // connection after `timeo`). Sent again, it would run twice at the server with two gateway XIDs,
      // where the server's duplicate request cache would have recognized a retransmission on one
      // connection; the first one's reply answers the client's XID either way. As Linux's nfsd drops a
      // retransmission of a request in progress (RC_DROPIT).
      this.stats.duplicatesDropped++;
      this.recordPool?.release(record);
      conn.release();
      return;
    }
    let pinLink: ConnectionLink | null = null;
    let pinXid = 0;
    if (client.resumeFrom !== null) {
      const match = this.resume(client, clientXid, record);
      if (match === Match.IN_FLIGHT || match === Match.ANSWERED) return;
      if (match === Match.SENT) {
        const held = this.matched.held as HeldCall;
        pinLink = this.linkById.get(held.linkId) ?? null;
        pinXid = held.gatewayXid;
      }
      this.matched.held = null;
    }
    const r = this.records.take();
    const now = this.clock();
    r.arrivedAt = now;
    r.client = client;
    r.message = record;
    r.clientXid = clientXid;
    client.xids.set(clientXid, r);
    this.plan(r, record, decoded === Decoded.OK);
    if (pinLink !== null && r.session === null && !r.gss && this.usable(pinLink)) {
      // Under its first gateway XID, on its first connection: the server's DRC knows it there (dispatch
      // keeps the XID while it is free on the connection).
      r.xid = pinXid;
      r.pinned = pinLink;
      setU32BE(record, 0, pinXid);
      // Its claim on the connection's next credit starts now: calls ahead of it in the ring must not
      // take that credit before its turn comes (`pick`, `takes`).
      r.pinWaitSince = now;
      pinLink.pinClaimUntil = Math.max(pinLink.pinClaimUntil, now + this.pinWaitMs);
    } else if (pinXid !== 0 && r.session === null && !r.gss) {
      // Its connection is gone (and the server's cache with it, for this gateway): it goes anywhere.
      this.stats.resumedUnpinned++;
    }
    r.queuedAt = now;
    r.enqueuedAt = now;
    client.calls++;
    this.stats.calls++;
    client.push(r);
    this.stats.queued++;
    this.activate(client);
    this.pump();
  }

  /**
   * A client's first record: its state, and, when departures are kept, what it may resume. A live client
   * of the same four-tuple is gone for the peer (TCP has one connection per four-tuple at a time) though
   * its reset may not have been read yet (its socket paused at its in-flight limit): it is closed first,
   * so that its calls are kept for this one.
   */
  private newClient(conn: FrontendConnection): ClientState {
    const client = new ClientState(conn);
    conn.context = client;
    this.clients.add(client);
    // (A socket destroyed before its addresses were read has none: nothing to match it by.)
    if (!this.departed.enabled || conn.remotePort === 0) return client;
    const endpoint = endpointOf(conn.remoteAddress, conn.remotePort, conn.localAddress, conn.localPort);
    client.endpoint = endpoint;
    const before = this.liveByEndpoint.get(endpoint);
    if (before !== undefined && !before.closed) {
      before.conn.log.info(
        { code: 'CLIENT_REPLACED' },
        'a new connection from the same address and port: the client lost this one; its calls are kept for the new one',
      );
      this.closeNow(
        before.conn,
        'CLIENT_REPLACED',
        'replaced by a new connection from the same address and port',
        {},
      );
    }
    this.liveByEndpoint.set(endpoint, client);
    if (this.departed.size > 0) client.resumeFrom = this.departed.find(endpoint);
    return client;
  }

  /**
   * The client's FIN came (the connection is half-open: replies are still written). Linux's client shuts
   * its socket down both ways and answers later data with a reset, so the replies of the calls in flight
   * may never reach it: they are kept, as for a client gone, and also written.
   */
  onEnd(conn: FrontendConnection): void {
    const client = conn.context as ClientState | undefined;
    if (client === undefined || client.closed || client.endpoint === '') return;
    this.departed.depart(client, client.endpoint, this.clock(), true);
  }

  onClose(conn: FrontendConnection, reason: CloseReason): void {
    const client = conn.context as ClientState | undefined;
    if (client === undefined || client.closed) return;
    client.closed = true;
    this.clients.delete(client);
    if (client.endpoint !== '' && this.liveByEndpoint.get(client.endpoint) === client)
      this.liveByEndpoint.delete(client.endpoint);
    this.stats.sessionsDropped += this.backchannel.clientGone(client);
    // Calls not sent yet are simply dropped; those in flight are consumed when their replies come.
    for (let r = client.shift(); r !== null; r = client.shift()) {
      this.stats.queued--;
      this.stats.droppedQueued++;
      this.finishCall(r);
    }
    // What is left in its XID table is in flight: kept for its return, with the calls answered lately,
    // whose replies may not have reached the client: those of the window when the connection was lost,
    // those of the last seconds after a clean close (the client's FIN, every reply written).
    if (client.endpoint !== '')
      this.departed.depart(client, client.endpoint, this.clock(), reason.code !== 'CLOSED_BY_CLIENT');
    else if (this.departed.enabled && client.calls > 0) this.stats.unmatchableDepartures++;
  }

  /** A call is over: out of its client's XID table (if still there) and its record back to the pool. */
  private finishCall(r: CallRecord): void {
    const client = r.client;
    if (client !== null) {
      if (client.xids.get(r.clientXid) === r) client.xids.delete(r.clientXid);
      // Kept (its FIN came, say, while it was still queued): kept no more, its record is reused.
      if (client.departure !== null) this.departed.release(r);
    }
    this.unpin(r);
    this.records.give(r);
  }

  /**
   * Whether `record` (a call of a client that came back from the address and port of one that left) is
   * the retransmission of a kept call. IN_FLIGHT: adopted (the reply in flight will answer it here);
   * ANSWERED: answered with the reply that came meanwhile (either way the record is given back: the kept
   * call's own bytes went to the server). SENT: a call answered just before the client left, whose
   * reply may have been lost: the caller sends it again under `matched.held`'s gateway XID and
   * connection. NONE: a new call.
   */
  private resume(client: ClientState, clientXid: number, record: Buffer): Match {
    const d = client.resumeFrom as NonNullable<ClientState['resumeFrom']>;
    const match = this.departed.match(d, clientXid, record, this.matched);
    if (this.departed.find(d.endpoint) !== d) client.resumeFrom = null; // nothing left to resume
    if (match === Match.NONE || match === Match.SENT) return match;
    const held = this.matched.held as HeldCall;
    this.matched.held = null;
    this.recordPool?.release(record);
    const conn = client.conn;
    client.calls++;
    if (match === Match.ANSWERED) {
      client.replies++;
      this.stats.replies++;
      // Counted as every reply written to a client is, each time it is written (a reply lost again
      // answers again), with the latency from the first attempt's arrival.
      this.callStats.reply(held.reply as Buffer, held.arrivedAt, this.clock());
      // Kept, not pooled, and never written to: the same buffer may answer again (`DepartedCalls.match`).
      this.one[0] = held.reply as Buffer;
      conn.sendReply(this.one);
      this.one[0] = EMPTY;
      return match;
    }
    const r = held.record as CallRecord;
    held.record = null;
    const gone = r.client as ClientState;
    gone.inFlight--;
    gone.xids.delete(clientXid);
    gone.conn.releaseReplyRoom(r.replyReserve, RoomParty.RDMA);
    r.client = client;
    client.inFlight++;
    client.xids.set(clientXid, r);
    conn.reserveReplyRoom(r.replyReserve);
    // The departed client's sessions were forgotten with it (unless another client bound them): looked
    // up again, so that the reply teaches the router who owns the session now.
    if (r.session !== null) r.session = this.sessions.find(r.sessionId);
    return match;
  }

  /**
   * Decodes the call header of `record` (a CALL) into `this.header`. A call shorter than the smallest
   * call header (xid, msg_type, rpcvers, prog, vers, proc, credential and verifier flavor and length: 40
   * bytes, an AUTH_NONE NULL call), or whose header does not say where it ends (a field runs past the
   * record, an opaque_auth over 400 bytes, RFC 5531 §8.2), is malformed: its client is closed and nothing
   * reaches the transport. Sent on, it would cost others: Linux's svc_process_common closes the
   * transport on a message shorter than six words ("short len"), failing every client's calls on that
   * RDMA connection, and the call would be resent first on the next one; a longer one that does not
   * frame is answered at best with an error the client did not ask for; a server that drops it leaves it
   * in flight, holding a credit, for good. Two failures are the server's to answer (the decoder stops at
   * them, before the header's end): an rpcvers other than 2 (RPC_MISMATCH, RFC 5531 §9) and an AUTH_SYS
   * credential whose body is malformed (AUTH_BADCRED): those calls are forwarded unplanned, and the
   * client gets the server's answer rather than a closed connection it would reconnect to in a loop.
   */
  private decodeCall(conn: FrontendConnection, record: Buffer): Decoded {
    if (record.length < MIN_CALL_HEADER) {
      this.malformed(
        conn,
        record,
        `a CALL of ${record.length} bytes, shorter than the smallest call header (${MIN_CALL_HEADER})`,
        null,
      );
      return Decoded.MALFORMED;
    }
    try {
      this.header.decode(record, 0, record.length);
      return Decoded.OK;
    } catch (err) {
      if (
        err instanceof RpcHeaderError &&
        (err.code === 'ERR_RPC_VERSION' || err.code === 'ERR_RPC_AUTH_SYS')
      )
        return Decoded.UNPLANNED;
      this.malformed(
        conn,
        record,
        `a call header that does not decode: ${(err as Error).message}`,
        err instanceof RpcHeaderError ? err : null,
      );
      return Decoded.MALFORMED;
    }
  }

  /**
   * Asks the ULB about the call (`decoded`: its header is in `this.header`); a call whose header the
   * server answers for itself (`decodeCall`) is forwarded as it is, with no DDP and its reply size unknown.
   */
  private plan(r: CallRecord, record: Buffer, decoded: boolean): void {
    let counted = false;
    let planned = false;
    // Known from the header alone, whatever the planning does: a GSS call's XID is under its verifier's
    // checksum (RFC 2203 §5.3.1), never rewritten, and the call is never resent by the gateway.
    r.gss = decoded && this.header.isGss;
    if (decoded) {
      try {
        const h = this.header;
        this.callStats.call(h.prog, h.vers, h.proc);
        counted = true;
        r.idempotent = isIdempotent(h.prog, h.vers, h.proc);
        this.registry.planCall(h, r.plan);
        const op = sessionOpOfCall(h, record, r.sessionId, r.plan);
        r.sessionOp = op;
        if (op !== SessionOp.NONE) r.sessionIntegrity = gssIntegrity(h);
        if (op === SessionOp.SEQUENCE || op === SessionOp.BIND || op === SessionOp.DESTROY) {
          r.session = this.sessions.find(r.sessionId);
        }
        planned = true;
      } catch {
        // (The bindings and the session parser never throw; a bug there costs only DDP and affinity.)
      }
    }
    if (!planned) {
      if (!counted) this.callStats.unclassifiedCall();
      r.plan.fallBack();
      r.plan.binding = null;
    }
    if (r.plan.outcome === UlbOutcome.UNKNOWN) this.stats.ulbUnknown++;
    else if (r.plan.outcome === UlbOutcome.PARTIAL) this.stats.ulbPartial++;
    r.maxReplySize = r.plan.maxReplySize;
  }

  /**
   * Closes a client that sent a record that is not a usable RPC call (`header`: the decoder's error, which
   * names the field and its offset). The record is the router's: given back, never sent.
   */
  private malformed(
    conn: FrontendConnection,
    record: Buffer,
    why: string,
    header: RpcHeaderError | null,
  ): void {
    this.stats.malformed++;
    const length = record.length;
    this.recordPool?.release(record);
    const details =
      header === null
        ? { length }
        : { length, headerCode: header.code, field: header.field, offset: header.offset };
    conn.log.warn({ code: 'ERR_NOT_RPC_CALL', ...details }, `closing client: ${why}`);
    this.closeNow(conn, 'ERR_NOT_RPC_CALL', why, details);
  }

  /**
   * Destroys a client's connection and forgets its waiting calls at once: the frontend reports the close
   * asynchronously, and a waiting call sent meanwhile (a non-idempotent one) would run on the server and
   * again when the client retransmits it.
   */
  private closeNow(
    conn: FrontendConnection,
    code: string,
    message: string,
    details: Record<string, unknown>,
  ): void {
    conn.destroy(code, message, details);
    this.onClose(conn, conn.closeReason as CloseReason);
  }

  // --------------------------------------------------------------------------------------------------
  // Scheduling

  private activate(client: ClientState): void {
    // A client waiting for reply room goes back in from `wakeForRoom`, not with each new call.
    if (client.active || client.waitingForRoom) return;
    client.active = true;
    this.ring.push(client);
  }

  /** Sends waiting calls, one per client per turn, while some connection has a credit. */
  private pump(): void {
    if (this.pumping || this.closed) return;
    this.pumping = true;
    try {
      let misses = 0;
      while (this.ring.length > 0 && misses < this.ring.length) {
        const client = this.ring.peek() as ClientState;
        const r = client.head;
        // A client reset and not yet reported closed (`gone`): its replies could not be written, so its
        // waiting calls stay here and are dropped with it.
        if (r === null || client.closed || client.conn.gone) {
          this.ring.shift();
          client.active = false;
          continue;
        }
        if (!this.hasReplyRoom(client, r)) {
          // Its replies would not fit: it waits out of the ring until a reply or a drain makes room.
          this.ring.shift();
          client.active = false;
          client.waitingForRoom = true;
          client.roomWaitSince = this.clock();
          this.stats.replyRoomWaits++;
          this.watchUnsent(client);
          continue;
        }
        const link = this.pick(r);
        if (link === null) {
          // No credit anywhere: wait for a reply or a new connection; unless a credit is held for a pinned
          // retransmission further on in the ring, which must get its turn.
          if (!r.gss && !this.bound(r) && !this.claimed()) break;
          // This GSS XID is in use wherever a credit is free, or the session's own connection has no
          // credit now: let the other clients go first.
          if (r.gss) this.stats.gssXidCollisions++;
          else this.stats.affinityWaits++;
          this.ring.push(this.ring.shift() as ClientState);
          misses++;
          continue;
        }
        misses = 0;
        this.ring.shift();
        client.shift();
        this.stats.queued--;
        this.dispatch(r, link);
        if (client.queued > 0) this.ring.push(client);
        else client.active = false;
      }
    } finally {
      this.pumping = false;
    }
  }

  /**
   * The connection the call must go on: its session's, or the one it is pinned to (a retransmission for
   * the server's duplicate request cache), while that connection is up and in rotation; null: any. A
   * pinned call whose connection is gone is unpinned (it goes anywhere, under a new XID if need be).
   */
  private boundLink(r: CallRecord): ConnectionLink | null {
    const s = r.session;
    if (s !== null && s.link !== null && this.usable(s.link)) return s.link;
    const p = r.pinned;
    if (p !== null && !this.usable(p)) {
      this.unpin(r);
      this.stats.resumedUnpinned++;
    }
    return r.pinned;
  }

  /** The call is pinned no more (sent, gone, or given up on its connection). */
  private unpin(r: CallRecord): void {
    r.pinWaitSince = -1;
    r.pinned = null;
  }

  /** True when the call must go on one connection (`boundLink`). */
  private bound(r: CallRecord): boolean {
    return this.boundLink(r) !== null;
  }

  private usable(l: ConnectionLink): boolean {
    return !l.offline && l.conn.state !== 'closed' && this.linkOf.get(l.conn) === l;
  }

  /** Whether the unbound call `r` may go on `l` now: in rotation, a free credit, and its XID free for GSS. */
  private takes(l: ConnectionLink, r: CallRecord): boolean {
    // A credit that frees on a connection a pinned retransmission waits for is that call's (`pick`).
    return (
      !l.offline &&
      Router.free(l) &&
      !(r.gss && l.xids.has(r.clientXid)) &&
      (l.pinClaimUntil === 0 || this.claimOver(l))
    );
  }

  /** Whether some connection's credit is claimed by a pinned retransmission (`pick`). */
  private claimed(): boolean {
    for (const l of this.links) if (l.pinClaimUntil !== 0 && !this.claimOver(l)) return true;
    return false;
  }

  /** Whether the pinned calls' claim on `l` is over (then forgotten). */
  private claimOver(l: ConnectionLink): boolean {
    if (this.clock() < l.pinClaimUntil) return false;
    l.pinClaimUntil = 0;
    return true;
  }

  /** Whether `l` can take a call now. */
  private static free(l: ConnectionLink): boolean {
    const c = l.conn;
    return c.state === 'ready' && c.queuedCalls === 0 && c.credits.canSend();
  }

  /**
   * A session's call: its session's connection (or nothing until it has a credit). Otherwise the ready
   * connection with a free credit and the fewest calls outstanding (and a free XID for GSS). The calls
   * of one burst stay on the connection its first call went to while it has a credit and at most
   * `BURST_SLACK` more calls outstanding than the least-loaded one: they then leave in one Send batch (one
   * socket write on the soft provider, one doorbell on hardware) instead of being dealt out one by one
   * across the pool, and the next burst starts on the least-loaded connection again (equally loaded
   * connections take turns, one burst each).
   */
  private pick(r: CallRecord): ConnectionLink | null {
    const bound = this.boundLink(r);
    if (bound !== null) {
      const l = bound;
      if (Router.free(l) && !(r.gss && l.xids.has(r.clientXid))) {
        if (r.pinned === l) {
          l.pinClaimUntil = 0; // its claim is met (another waiting pin claims again at its next miss)
          this.unpin(r);
        }
        return l;
      }
      if (r.pinned !== l) return null; // a session's call waits for its connection
      // A pinned retransmission claims its connection's next credit (no other call takes it), for
      // `pinWaitMs` from its first miss at most: then it goes anywhere (and may run again at the server)
      // rather than hold its client until the hold time while other connections are free.
      const now = this.clock();
      if (now - r.pinWaitSince <= this.pinWaitMs) {
        // Bounded in time by itself: a claimant its client holds back (reply room) blocks no one long.
        l.pinClaimUntil = Math.max(l.pinClaimUntil, r.pinWaitSince + this.pinWaitMs);
        return null;
      }
      this.unpin(r);
      this.stats.resumedUnpinned++;
    }
    let best: ConnectionLink | null = null;
    let bestLoad = Number.POSITIVE_INFINITY;
    const links = this.links;
    const n = links.length;
    // Ties go round robin, one burst each: under light load the bursts still take turns on the pool.
    const start = n > 0 ? this.burstTurn % n : 0;
    for (let k = 0; k < n; k++) {
      const l = links[start + k < n ? start + k : start + k - n];
      if (!this.takes(l, r)) continue;
      const load = l.xids.size;
      if (load < bestLoad) {
        best = l;
        bestLoad = load;
      }
    }
    const burst = this.burstLink;
    if (burst === null) {
      if (best !== null) {
        this.burstLink = best;
        this.burstTurn = (this.burstTurn + 1) >>> 0;
        queueMicrotask(this.endBurst);
      }
      return best;
    }
    if (best !== null && burst !== best && burst.xids.size <= bestLoad + BURST_SLACK && this.takes(burst, r))
      return burst;
    return best;
  }

  private dispatch(r: CallRecord, link: ConnectionLink): void {
    const client = r.client as ClientState;
    if (r.gss) {
      r.xid = r.clientXid;
    } else if (r.xid === 0 || link.xids.has(r.xid)) {
      // A retransmission keeps its XID when the new connection allows (the server's DRC may know it).
      let xid = this.nextXid;
      do xid = (xid + 1) >>> 0;
      while (xid === 0 || link.xids.has(xid));
      this.nextXid = xid;
      r.xid = xid;
      setU32BE(r.message, 0, xid);
    }
    link.xids.set(r.xid, r);
    r.link = link;
    const s = r.session;
    if (s !== null && s.link !== link) {
      // Its connection is gone: the session follows the call (the server binds the new connection
      // implicitly on SEQUENCE for SP4_NONE, RFC 8881 §2.10.3.1; the client re-binds its backchannel).
      if (s.link !== null) this.stats.sessionMoves++;
      s.link = link;
    }
    r.attempts++;
    client.inFlight++;
    r.replyReserve = this.replyBytesOf(r);
    client.conn.reserveReplyRoom(r.replyReserve);
    this.stats.inFlight++;
    link.conn.submit(r);
  }

  // --------------------------------------------------------------------------------------------------
  // From the transport

  /** A credit came back with no reply (a pulled reply's DONE was posted late): waiting calls may go. */
  onCredit(): void {
    this.pump();
  }

  onReply(r: CallRecord, reply: Buffer): void {
    const link = r.link;
    this.unlink(r);
    const client = r.client as ClientState;
    if (client.closed) {
      // Kept (copied) for the client's return from the same address and port, or dropped.
      if (client.departure === null || !this.departed.hold(r, reply)) this.stats.orphanedReplies++;
      this.recordPool?.release(reply);
    } else {
      // Half-open: written, and kept too, in case the client reset its end (`onEnd`).
      if (client.departure !== null) this.departed.hold(r, reply);
      // A SEQUENCE reply is read only for a session the router does not know (see sessionReply).
      if (r.sessionOp !== SessionOp.NONE && (r.sessionOp !== SessionOp.SEQUENCE || r.session === null))
        this.sessionReply(r, link, reply);
      if (!r.gss) setU32BE(reply, 0, r.clientXid);
      client.xids.delete(r.clientXid);
      client.replies++;
      this.stats.replies++;
      const now = this.clock();
      // Its reply may yet be lost with the connection: kept with a departure for a retransmission.
      if (this.departed.enabled && !r.gss && !r.idempotent && link !== null)
        client.noteAnswered(r.clientXid, r.xid, link.id, r.message, now, this.answeredRing);
      // Counted before the hand-over: a pooled reply belongs to the frontend once given to sendReply.
      this.callStats.reply(reply, r.arrivedAt, now);
      this.one[0] = reply;
      client.conn.sendReply(this.one);
      this.one[0] = EMPTY; // drop the reference to the reply
      if (client.waitingForRoom) this.wakeForRoom(client);
    }
    this.finishCall(r);
    this.pump();
  }

  /** The client's socket drained: if it waited for reply room, its calls may go on. */
  onWritable(conn: FrontendConnection): void {
    const client = conn.context as ClientState | undefined;
    if (client === undefined || !client.waitingForRoom) return;
    this.wakeForRoom(client);
    this.pump();
  }

  onFailed(r: CallRecord, error: TransportError): void {
    this.callStats.failure(error.code);
    this.unlink(r);
    const client = r.client as ClientState;
    if (client.closed) {
      // Not sent again for a client that is gone: its retransmission, if it comes back, goes afresh.
      this.finishCall(r);
      this.pump();
      return;
    }
    if (error.retransmit && r.gss) {
      // An RPCSEC_GSS call is not the gateway's to send again. Its seq_num, under the verifier's MIC
      // (RFC 2203 §5.3.1), has been seen by the server if the call got there, or may have fallen below the
      // window since: the server then discards it silently (§5.3.3.1), no reply ever comes, and the call
      // would hold its credit and its XID for good while the client's own retransmission (a new seq_num,
      // the same XID) is dropped as a duplicate of it. Only the client can sign a new seq_num: it is
      // closed, as for a refused call, and retransmits by itself. No reply is invented (DESIGN §3).
      this.stats.gssNotResent++;
      client.conn.log.warn(
        { code: 'ERR_RDMA_GSS_LOST', transportCode: error.code, xid: r.clientXid },
        'RDMA connection lost with an RPCSEC_GSS call in flight; closing the client so that it signs it again',
      );
      this.finishCall(r);
      this.closeNow(
        client.conn,
        'ERR_RDMA_GSS_LOST',
        `an RPCSEC_GSS call was in flight on a lost RDMA connection (${error.code}): only the client can send it again`,
        { transportCode: error.code },
      );
      this.pump();
      return;
    }
    if (error.retransmit) {
      // RFC 8166 §3.3.1 / PROTOCOL-NOTES §2: never again on the lost connection; another or a new one.
      // (Not RPCSEC_GSS calls: above.)
      this.stats.retransmits++;
      // The hold time runs from the first loss, not from each: a call that takes down every connection
      // it reaches (or a peer that keeps dropping) must not be resent for ever. After that it waits at
      // most `holdTimeMs` in all, and then its client is closed (it retransmits by itself).
      const now = this.clock();
      if (r.attempts <= 1) r.queuedAt = now;
      r.enqueuedAt = now;
      client.pushFront(r);
      this.stats.queued++;
      // Its reply room came back with it: a client held for room goes on now (nothing else would wake
      // it before the tick when this was its only call in flight).
      if (client.waitingForRoom) this.wakeForRoom(client);
      else this.activate(client);
      this.refreshLinks();
      this.pump();
      return;
    }
    // The peer refused the call for good. Answering it would be inventing a reply (DESIGN §3): close the
    // client so that it retransmits, and say why in the log.
    this.stats.refused++;
    client.conn.log.warn(
      { code: error.code, details: error.details, xid: r.clientXid },
      'RDMA peer refused a call; closing the client so that it retransmits',
    );
    this.finishCall(r);
    this.closeNow(client.conn, 'ERR_RDMA_REFUSED', `the RDMA peer refused a call: ${error.code}`, {
      transportCode: error.code,
    });
    this.pump();
  }

  /**
   * Learns or forgets a session from the reply to a CREATE_SESSION, BIND_CONN_TO_SESSION or
   * DESTROY_SESSION; and learns one again from a successful SEQUENCE naming a session the router does not
   * know. That is a client that reconnected to the gateway: the server never saw it go (the RDMA
   * connection stayed up), so it binds nothing again, and its CB_SEQUENCE callbacks would otherwise find
   * no owner until a refused callback made it report the path down and the client rebind.
   */
  private sessionReply(r: CallRecord, link: ConnectionLink | null, reply: Buffer): void {
    const client = r.client as ClientState;
    const outcome = sessionOfReply(reply, r.sessionOp, r.sessionId, r.sessionIntegrity);
    if (outcome === SessionReply.FAILED) return;
    if (r.sessionOp === SessionOp.DESTROY) {
      const s = this.sessions.find(r.sessionId);
      if (s !== null) {
        this.sessions.forget(s);
        this.stats.sessionsDestroyed++;
      }
      return;
    }
    const found = this.sessions.find(r.sessionId);
    // Another client may have named it meanwhile (and the router learned it then): it keeps it.
    if (found !== null && r.sessionOp === SessionOp.SEQUENCE) return;
    if (found !== null && r.sessionOp === SessionOp.BIND && outcome === SessionReply.FORE) {
      // CDFS4_FORE binds this connection to the fore channel only (RFC 8881 §18.34.3): the back channel,
      // and so the callbacks, stay with the owner. The call itself went on the session's connection.
      this.sessions.bindFore(found, client);
      return;
    }
    const s = this.sessions.learn(r.sessionId, client, link);
    if (found === null) this.stats.sessionsLearned++;
    if (outcome === SessionReply.BACK && link !== null) this.sessions.bindBack(s, link);
  }

  /**
   * Small inline replies may be lent (a view of the transport's receive buffer, valid during `onReply`):
   * everything `onReply` does with a reply is synchronous, and the frontend copies a record this small
   * into its write stage before `sendReply` returns.
   */
  readonly lendLimit = COPIED_RECORD_MAX;

  /**
   * Replies are assembled in the record pool: the frontend gives a pooled reply back once its socket has
   * taken the bytes (`FrontendConnection.sendRecord`); any other reply is left to the garbage collector.
   */
  allocateReply(size: number): Buffer {
    return this.recordPool === undefined ? Buffer.allocUnsafe(size) : this.recordPool.acquire(size);
  }

  locateResult(r: CallRecord, reducedReply: Buffer, index: number): number {
    return r.plan.locateResult(reducedReply, index);
  }

  private unlink(r: CallRecord): void {
    const link = r.link;
    if (link !== null) {
      if (link.xids.get(r.xid) === r) link.xids.delete(r.xid);
      r.link = null;
    }
    const client = r.client as ClientState;
    client.inFlight--;
    client.conn.releaseReplyRoom(r.replyReserve, RoomParty.RDMA);
    r.replyReserve = 0;
    this.stats.inFlight--;
  }

  /**
   * Whether `client` may send `r` now without its replies outgrowing `maxReplyBytes`: the replies its
   * calls in flight may bring, what its socket has not taken yet, and `r`'s own. A client that does not
   * read its replies would otherwise make the gateway buffer every reply of every call it sent
   * (`maxCallsInFlight` × the largest reply). One call always goes when nothing is coming or unsent, so
   * a reply larger than the budget still gets through.
   */
  private hasReplyRoom(client: ClientState, r: CallRecord): boolean {
    const conn = client.conn;
    const unsent = conn.unsentBytes;
    if (conn.replyReserved === 0 && unsent === 0) return true;
    return conn.replyReserved + unsent + this.replyBytesOf(r) <= this.maxReplyBytes;
  }

  /** The largest reply `r` can bring: its ULB's bound, or the largest reply the transport accepts. */
  private replyBytesOf(r: CallRecord): number {
    return r.maxReplySize >= 0 ? r.maxReplySize : this.unknownReplyBytes;
  }

  /**
   * What will wake a client waiting for room. Its own replies do (`onReply`); a reply on the tcp route
   * releases room of the same account, and says so (`awaitReplyRoom`). With no reply coming on any
   * route, only its unsent bytes hold it back, and when the socket takes them without ever having refused
   * a write no `drain` says so: ask the connection to tell us.
   */
  private watchUnsent(client: ClientState): void {
    const conn = client.conn;
    conn.awaitReplyRoom(RoomParty.RDMA);
    if (conn.replyReserved === 0 && conn.unsentBytes > 0) conn.notifyWhenFlushed();
  }

  /** A client that waited for reply room goes back in the ring if its next call fits now. */
  private wakeForRoom(client: ClientState): void {
    if (!client.waitingForRoom || client.closed) return;
    const r = client.head;
    if (r !== null && !this.hasReplyRoom(client, r)) {
      this.watchUnsent(client);
      return;
    }
    client.waitingForRoom = false;
    // The hold time measures waiting for an RDMA connection, not for the client to read: every waiting
    // call gets back the part of the room wait it spent queued (a call queued or resent meanwhile, from
    // then on; a call in flight meanwhile, nothing: it was not waiting).
    const now = this.clock();
    const since = client.roomWaitSince;
    for (let q = r; q !== null; q = q.next) q.queuedAt += now - Math.max(q.enqueuedAt, since);
    if (client.queued > 0) this.activate(client);
  }

  // --------------------------------------------------------------------------------------------------
  // Connections and held calls

  /** Picks up connections the pool opened and forgets closed ones with nothing in flight. */
  private refreshLinks(): void {
    const pool = this.pool;
    if (pool === null) return;
    const live = pool.connections();
    let changed = live.length !== this.links.length;
    for (const conn of live) {
      if (!this.linkOf.has(conn)) {
        const link: ConnectionLink = {
          id: this.nextLinkId++,
          conn,
          xids: new U32Map<CallRecord>(),
          backchannels: new Set(),
          offline: this.offline.has(conn),
          pinClaimUntil: 0,
        };
        this.linkOf.set(conn, link);
        this.linkById.set(link.id, link);
        // Backward calls are reported per connection, so the relay knows where each came from.
        conn.setResponder(this.backchannel.portFor(link));
        changed = true;
      }
    }
    for (const [conn, link] of this.linkOf) {
      if (conn.state === 'closed' && link.xids.size === 0 && !live.includes(conn)) {
        this.linkOf.delete(conn);
        this.linkById.delete(link.id);
        this.offline.delete(conn);
        changed = true;
      }
    }
    if (changed) {
      this.links = [...this.linkOf.values()];
      this.burstLink = null; // a burst never continues on a connection that left the rotation
    }
  }

  private tick(): void {
    this.refreshLinks();
    const now = this.clock();
    this.backchannel.expire(now);
    this.departed.expire(now);
    if (this.stats.queued > 0) {
      this.expireHeld();
      // A safety net only: replies, drains and the flush watch (`watchUnsent`) wake a waiting client.
      for (const c of this.clients) if (c.waitingForRoom) this.wakeForRoom(c);
      this.pump();
    }
  }

  /** Closes the clients whose oldest waiting call has waited longer than the hold time. */
  private expireHeld(): void {
    const limit = this.clock() - this.holdTimeMs;
    let expired: ClientState[] | null = null;
    for (const c of this.clients) {
      // Waiting for its own replies to drain is not waiting for an RDMA connection.
      if (c.head === null || c.waitingForRoom || c.oldestQueuedAt() >= limit) continue;
      expired ??= [];
      expired.push(c);
    }
    if (expired === null) return;
    for (const c of expired) {
      this.stats.holdExpired++;
      c.conn.log.warn(
        { code: 'ERR_RDMA_UNAVAILABLE', holdTimeMs: this.holdTimeMs, waiting: c.queued },
        'no RDMA connection took the calls within the hold time; closing the client so that it retransmits',
      );
      this.closeNow(
        c.conn,
        'ERR_RDMA_UNAVAILABLE',
        `no RDMA connection could take the calls for ${this.holdTimeMs} ms`,
        {
          holdTimeMs: this.holdTimeMs,
          waiting: c.queued,
        },
      );
    }
  }
}
