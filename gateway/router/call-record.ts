/**
 * One client call on its way through the gateway, as the transport sees it (`TransportCall`). Records are
 * pooled and reused: the transport keeps its state in its own pooled slots and reports outcomes through
 * the router's one handler, so nothing is allocated per call on the hot path besides what Node itself
 * allocates for the socket data.
 */
import type { U32Map } from '../../common/u32-map.js';
import type { DdpItem, RpcRdmaConnection, TransportCall } from '../../rdma-backend/transport/index.js';
import { SESSIONID_SIZE, SessionOp } from '../ulb/sessions.js';
import { UlbCallPlan } from '../ulb/types.js';
import type { ClientState } from './client-state.js';
import type { Session } from './sessions.js';

const EMPTY = Buffer.alloc(0);

/** Per RDMA connection: the XIDs in use on it (DESIGN §3: unique per connection) and the calls it carries. */
export interface ConnectionLink {
  /** Unique in the router (from 1): how kept calls name it without holding it (router/departed.ts). */
  readonly id: number;
  readonly conn: RpcRdmaConnection;
  /** Gateway XID (or an RPCSEC_GSS call's own XID) → the call carrying it on this connection. */
  readonly xids: U32Map<CallRecord>;
  /**
   * The NFSv4.1 sessions whose back channel is bound to this connection, in binding order: many sessions,
   * of many clients, may share one connection's (RFC 8881 §2.10.3.1). CB_NULL and callbacks naming no
   * session go to one of them (gateway/backchannel/relay.ts).
   */
  readonly backchannels: Set<Session>;
  /** Taken out of rotation by the operator (admin API): no new calls, those in flight finish. */
  offline: boolean;
  /**
   * Until when (`performance.now()` ms) a pinned retransmission waiting here claims the next credit (no
   * other call takes it: `Router.pick`); 0: no claim.
   */
  pinClaimUntil: number;
}

export class CallRecord implements TransportCall {
  /** The XID on the RDMA side (written into `message` before the call is submitted). */
  xid = 0;
  /** The client's RPC Call record (a view of the socket data; the router owns it until the reply). */
  message: Buffer = EMPTY;
  /** The ULB's answer for this call; `ddpArgs` / `ddpResults` are its arrays, so nothing is copied. */
  readonly plan = new UlbCallPlan();
  readonly ddpArgs: readonly DdpItem[];
  readonly ddpResults: readonly number[];
  maxReplySize = -1;
  /** Reply bytes reserved against its client's budget while it is in flight (`Router`'s reply room). */
  replyReserve = 0;

  /** The client that sent it (null while the record is free). */
  client: ClientState | null = null;
  /** The client's own XID, restored on the reply. */
  clientXid = 0;
  /** RPCSEC_GSS: the XID is covered by the verifier's MIC (RFC 2203 §5.3.1), so it is never rewritten. */
  gss = false;
  /** The connection carrying it, while it is in flight on the RDMA side. */
  link: ConnectionLink | null = null;
  /** When the router received the record (`performance.now()` ms): the latency histogram counts from here. */
  arrivedAt = 0;
  /**
   * Where its hold time counts from (ms, `performance.now()`): when it entered its client's queue, or its
   * first loss for a resent call, moved on by the time it spent queued while its client waited for reply
   * room (that is not waiting for an RDMA connection).
   */
  queuedAt = 0;
  /** When it last entered its client's queue (ms): the part of a room wait it spent queued starts here. */
  enqueuedAt = 0;
  /**
   * Running it twice does no harm (an NFSv3 read-only procedure, NULL): its reply is not kept for a
   * client that went away (router/departed.ts), as nfsd's duplicate request cache keeps none.
   */
  idempotent = false;
  /** Times it was submitted to a connection (> 1 after a connection loss). */
  attempts = 0;
  /** Next call in the client's queue (intrusive FIFO: no queue nodes allocated). */
  next: CallRecord | null = null;
  /** What the call means for NFSv4.1 session state (`SessionOp.NONE` for everything else). */
  sessionOp: SessionOp = SessionOp.NONE;
  /**
   * A session call under RPCSEC_GSS integrity (RFC 2203 §5.3.2.2): its reply's results are read inside
   * `databody_integ` (`sessionOfReply`).
   */
  sessionIntegrity = false;
  /** The session id the call names (SEQUENCE, BIND_CONN_TO_SESSION, DESTROY_SESSION) or a reply granted. */
  readonly sessionId = Buffer.alloc(SESSIONID_SIZE);
  /** The known session the call belongs to: it goes on that session's connection (affinity). */
  session: Session | null = null;
  /**
   * The retransmission of a call answered just before its client left: it goes on this connection, under
   * the gateway XID it had there (router/departed.ts), while that connection is up.
   */
  pinned: ConnectionLink | null = null;
  /** When the pinned call first found its connection without a credit (ms), or -1. */
  pinWaitSince = -1;

  constructor() {
    this.ddpArgs = this.plan.args;
    this.ddpResults = this.plan.results;
  }

  reset(): void {
    this.xid = 0;
    this.message = EMPTY;
    this.maxReplySize = -1;
    this.replyReserve = 0;
    this.client = null;
    this.clientXid = 0;
    this.gss = false;
    this.link = null;
    this.queuedAt = 0;
    this.enqueuedAt = 0;
    this.arrivedAt = 0;
    this.attempts = 0;
    this.idempotent = false;
    this.next = null;
    this.sessionOp = SessionOp.NONE;
    this.sessionIntegrity = false;
    this.session = null;
    this.pinned = null;
    this.pinWaitSince = -1;
    this.plan.fallBack();
    this.plan.binding = null;
  }
}

/** A free list of records; it grows to the largest number of calls the gateway ever held at once. */
export class CallRecordPool {
  private readonly free: CallRecord[] = [];
  /** Records ever created (in use = created - free). */
  created = 0;

  /**
   * `releaseMessage` takes each call's message back when its record is given back: by then the call is
   * over (replied, failed for good, or dropped before it was sent) and the transport has released
   * every registration of it, so nothing references the bytes.
   */
  constructor(private readonly releaseMessage?: (message: Buffer) => void) {}

  take(): CallRecord {
    const r = this.free.pop();
    if (r !== undefined) return r;
    this.created++;
    return new CallRecord();
  }

  give(r: CallRecord): void {
    if (this.releaseMessage !== undefined && r.message !== EMPTY) this.releaseMessage(r.message);
    r.reset();
    this.free.push(r);
  }

  get inUse(): number {
    return this.created - this.free.length;
  }

  get available(): number {
    return this.free.length;
  }
}
