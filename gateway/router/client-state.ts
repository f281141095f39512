/**
 * Per TCP client: the calls it sent that wait for an RDMA credit (an intrusive FIFO of call records), and
 * its bookkeeping for the fair scheduler. Stored in `FrontendConnection.context`.
 */
import { U32Map } from '../../common/u32-map.js';
import type { FrontendConnection } from '../../tcp-frontend/server.js';
import type { PendingCallback } from '../backchannel/relay.js';
import type { CallRecord } from './call-record.js';
import { AnsweredRing, type Departure } from './departed.js';
import type { Session } from './sessions.js';

let nextClientId = 1;

export class ClientState {
  /** Unique in the process: what kept calls name their client by (router/departed.ts). */
  readonly id = nextClientId++;
  readonly conn: FrontendConnection;
  /** Waiting calls, oldest first (retransmissions go to the front). */
  head: CallRecord | null = null;
  tail: CallRecord | null = null;
  queued = 0;
  /** Calls submitted to an RDMA connection and not yet answered. */
  inFlight = 0;
  /** Out of the ring because its replies would not fit its reply budget; back in on a reply or a drain. */
  waitingForRoom = false;
  /** When it last started waiting for room (`performance.now()`). */
  roomWaitSince = 0;
  /** In the scheduler's round-robin ring. */
  active = false;
  /** The TCP connection is gone: replies to its calls are consumed and dropped. */
  closed = false;
  /** Calls this client sent, and replies it got (for the admin API and tests). */
  calls = 0;
  replies = 0;
  /**
   * Its calls waiting or in flight, by the client's XID: a call that comes again with one of these XIDs
   * is the client retransmitting it, answered by the original's reply.
   */
  readonly xids = new U32Map<CallRecord>();
  /** Its address and port and the gateway's it reached (`endpointOf`); '' when departures are not kept. */
  endpoint = '';
  /** Its last calls answered (created on its first reply when departures are kept: router/departed.ts). */
  answered: AnsweredRing | null = null;
  /** Counted in `departures` (once, though its FIN and its close may both keep calls). */
  counted = false;
  /** It left with calls in flight, kept here for its return (router/departed.ts). */
  departure: Departure | null = null;
  /**
   * A connection from the address and port of a client that left with calls kept: its calls are checked
   * against them (a retransmission is adopted or answered) until none is left.
   */
  resumeFrom: Departure | null = null;
  /** NFSv4.1 sessions this client owns or bound through the gateway, oldest first (O(1) removal). */
  readonly sessions = new Set<Session>();
  /** It went beyond the per-client session cap once (`SessionTable`): logged once, not per session. */
  sessionCapLogged = false;
  /** Backward calls relayed to this client, by the XID they carry on its connection (created on first use). */
  callbacks: Map<number, PendingCallback> | null = null;
  /** Last backward-call XID used on this connection (starts random, like the router's gateway XIDs). */
  nextCallbackXid = (Math.random() * 0x1_0000_0000) >>> 0;

  constructor(conn: FrontendConnection) {
    this.conn = conn;
  }

  /** Notes a call answered (`AnsweredRing.add`), creating the ring on first use. */
  noteAnswered(
    clientXid: number,
    gatewayXid: number,
    linkId: number,
    call: Buffer,
    now: number,
    ringSize: number,
  ): void {
    this.answered ??= new AnsweredRing(ringSize);
    this.answered.add(clientXid, gatewayXid, linkId, call, now);
  }

  push(r: CallRecord): void {
    r.next = null;
    if (this.tail === null) this.head = r;
    else this.tail.next = r;
    this.tail = r;
    this.queued++;
  }

  /** A call that must go again (its connection was lost): ahead of the client's newer calls. */
  pushFront(r: CallRecord): void {
    r.next = this.head;
    this.head = r;
    if (this.tail === null) this.tail = r;
    this.queued++;
  }

  /**
   * The earliest hold clock of its waiting calls. Not always the head's: a resent call goes in front with
   * its clock from its first loss, which may be later than those of the calls behind it.
   */
  oldestQueuedAt(): number {
    let oldest = Number.POSITIVE_INFINITY;
    for (let r = this.head; r !== null; r = r.next) if (r.queuedAt < oldest) oldest = r.queuedAt;
    return oldest;
  }

  shift(): CallRecord | null {
    const r = this.head;
    if (r === null) return null;
    this.head = r.next;
    if (this.head === null) this.tail = null;
    r.next = null;
    this.queued--;
    return r;
  }
}

/**
 * The round-robin ring of clients that have waiting calls: deficit round robin with a quantum of one call.
 * The scarce resource is the credit (one per call, whatever its size: large data travels in chunks that
 * the credit does not measure), so each turn gives a client one credit, and a client with a thousand
 * calls waiting gets no more turns than one with a single call (RFC 8166 §3.3.1 credits; DESIGN §1).
 */
export class ClientRing {
  private items: (ClientState | undefined)[] = new Array(64);
  private head = 0;
  private count = 0;

  get length(): number {
    return this.count;
  }

  push(c: ClientState): void {
    if (this.count === this.items.length) {
      const grown: (ClientState | undefined)[] = new Array(this.items.length * 2);
      for (let i = 0; i < this.count; i++) grown[i] = this.items[(this.head + i) % this.items.length];
      this.items = grown;
      this.head = 0;
    }
    this.items[(this.head + this.count) % this.items.length] = c;
    this.count++;
  }

  peek(): ClientState | undefined {
    return this.count === 0 ? undefined : this.items[this.head];
  }

  shift(): ClientState | undefined {
    if (this.count === 0) return undefined;
    const c = this.items[this.head];
    this.items[this.head] = undefined;
    this.head = (this.head + 1) % this.items.length;
    this.count--;
    return c;
  }
}
