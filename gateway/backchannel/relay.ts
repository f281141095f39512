/**
 * The NFSv4.1 backchannel relay (DESIGN §1 "Backchannel", RFC 8881 §2.10.3.1, RFC 8167): a backward
 * Call arriving on an RDMA connection of the pool goes to the TCP client that owns the session named in
 * its CB_SEQUENCE; CB_NULL and calls without a session go to a client with a session whose back channel
 * is bound to that connection (many may be, RFC 8881 §2.10.3.1). The client's Reply goes back on the
 * same RDMA connection with the server's XID.
 *
 * - XIDs: a backward call gets an XID chosen per client connection, so callbacks from two RDMA
 *   connections (two servers' XID spaces) can never collide on one client; the server's XID is restored
 *   on the way back.
 * - A callback for a client that is gone, or for a session nobody owns, gets no RPC reply: inventing one
 *   would lie to the server (DESIGN §3); the server's own callback timeout handles it (it marks the path
 *   down and tells the client through SEQ4_STATUS_CB_PATH_DOWN). It is counted. It is refused at the
 *   RPC-over-RDMA level instead (RDMA2_ERR_SYSTEM; Version 1: ERR_CHUNK, RFC 8166 §4.5): a backward credit
 *   comes back only with an answer (RFC 8167 §4), so a call left unanswered would pin one of the few
 *   backward credits of that connection for good and stall every other session's callbacks behind it
 *   (seen in test/backchannel/relay.test.ts). The responder role drops a refused backward call without
 *   answering its upstream, so the server still sees only its own timeout.
 * - Backward credits and the inline-only rule (RFC 8167 §4, §5) are the transport's job.
 */
import { RDMA2_ERR_SYSTEM } from '../../rdma-backend/protocol/index.js';
import type { InboundCall, ResponderHandler } from '../../rdma-backend/transport/index.js';
import { RpcCallHeader } from '../../rpc/message.js';
import type { FrontendConnection } from '../../tcp-frontend/server.js';
import type { ConnectionLink } from '../router/call-record.js';
import type { ClientState } from '../router/client-state.js';
import type { SessionTable } from '../router/sessions.js';
import { CallbackSession, SESSIONID_SIZE, sessionOfCallback } from '../ulb/sessions.js';

/** Backchannel counters, kept in the router's stats object (plain numbers for the admin API). */
export interface BackchannelStats {
  /** Backward calls relayed to a client. */
  backchannelCalls: number;
  /** Client replies relayed back to the RDMA connection. */
  backchannelReplies: number;
  /** Backward calls with no live client to go to (no RPC reply; refused at the RPC-over-RDMA level). */
  backchannelOrphans: number;
  /** Backward calls relayed to a client that left before answering (likewise). */
  backchannelUnanswered: number;
  /** Client replies matching no relayed backward call (dropped). */
  backchannelRepliesDropped: number;
  /** Client replies whose RDMA connection had closed meanwhile (the server retries on its own). */
  backchannelRepliesLost: number;
  /** Backward calls a live client left unanswered past the callback timeout (refused likewise). */
  backchannelTimedOut: number;
  /** RPCSEC_GSS backward calls refused because their XID was already pending on the client (resent). */
  backchannelXidBusy: number;
}

/** Backchannel counters at zero (the router spreads them into its stats object). */
export function createBackchannelStats(): BackchannelStats {
  return {
    backchannelCalls: 0,
    backchannelReplies: 0,
    backchannelOrphans: 0,
    backchannelUnanswered: 0,
    backchannelRepliesDropped: 0,
    backchannelRepliesLost: 0,
    backchannelTimedOut: 0,
    backchannelXidBusy: 0,
  };
}

/**
 * How long a relayed callback may wait for its client's answer before it is refused to free its backward
 * credit. The server has given up on that RPC well before: Linux nfsd gives it lease/10 (9 s by default;
 * `max_cb_time` in fs/nfsd/nfs4callback.c). The same order as the router's hold time.
 */
export const DEFAULT_CALLBACK_TIMEOUT_MS = 30_000;

/** A backward call relayed to a client, waiting for its reply. */
export interface PendingCallback {
  readonly inbound: InboundCall;
  readonly link: ConnectionLink;
  /** When it was relayed (`performance.now()`). */
  readonly at: number;
}

/** One per RDMA connection: the transport reports backward calls per connection through it. */
class BackchannelPort implements ResponderHandler {
  constructor(
    private readonly relay: BackchannelRelay,
    private readonly link: ConnectionLink,
  ) {}

  onCall(call: InboundCall): void {
    this.relay.onBackwardCall(this.link, call);
  }

  /** A client's answer given to `reply()` has been sent: its record buffer may be reused. */
  onReplyReleased(message: Buffer): void {
    this.relay.releaseRecord?.(message);
  }
}

export class BackchannelRelay implements ResponderHandler {
  private readonly header = new RpcCallHeader();
  private readonly id = Buffer.alloc(SESSIONID_SIZE);
  private readonly one: Buffer[] = [Buffer.alloc(0)];
  /** Clients with callbacks waiting for an answer (what `expire` looks at). */
  private readonly waiting = new Set<ClientState>();

  constructor(
    private readonly sessions: SessionTable,
    private readonly stats: BackchannelStats,
    readonly callbackTimeoutMs = DEFAULT_CALLBACK_TIMEOUT_MS,
    /**
     * Gives a client's REPLY record back to the frontend's record pool once nothing references it (the
     * router's `recordPool.release`); without it a pooled record is left to the garbage collector.
     */
    readonly releaseRecord?: (record: Buffer) => void,
  ) {}

  /** The responder handler to install on `link`'s connection. */
  portFor(link: ConnectionLink): ResponderHandler {
    return new BackchannelPort(this, link);
  }

  /**
   * A backward call on a connection the router does not know yet (the pool's default handler): no session
   * can have its backchannel there, so it has nowhere to go.
   */
  onCall(_call: InboundCall): void {
    // The connection is not known here (InboundCall does not name it), so the call cannot be refused and
    // keeps its credit; it can only happen in the ≤ 1 tick after a connection became ready.
    this.stats.backchannelOrphans++;
  }

  onBackwardCall(link: ConnectionLink, call: InboundCall): void {
    const msg = call.message;
    let what: CallbackSession = CallbackSession.NONE;
    let gss = false;
    try {
      this.header.decode(msg, 0, msg.length);
      gss = this.header.isGss;
      what = sessionOfCallback(this.header, msg, this.id);
    } catch {
      // not even an RPC call header: the client will answer GARBAGE_ARGS or nothing
    }
    // An RPCSEC_GSS callback is under a context one client created for the server's use (RFC 8881
    // §2.10.8.3: the handles of CREATE_SESSION's and BACKCHANNEL_CTL's csa_sec_parms), which the gateway
    // does not map: one naming no session goes only where the connection leaves no choice, like one
    // whose session is hidden.
    const client =
      what === CallbackSession.NAMED
        ? (this.sessions.find(this.id)?.client ?? null)
        : what === CallbackSession.NONE && !gss
          ? anyBackClient(link)
          : onlyBackClient(link);
    if (client === null || client.closed) {
      this.stats.backchannelOrphans++;
      link.conn.replyError(call, REFUSED);
      return;
    }
    client.callbacks ??= new Map();
    const pending = client.callbacks;
    let xid: number;
    if (gss) {
      // RPCSEC_GSS: the call's verifier is a MIC over its header from the XID on (RFC 2203 §5.3.1), so the
      // XID goes as the server sent it, as on the forward path; one already pending on this client (from
      // another connection) is refused, and the server sends the callback again.
      xid = msg.readUInt32BE(0);
      if (pending.has(xid)) {
        this.stats.backchannelXidBusy++;
        link.conn.replyError(call, REFUSED);
        return;
      }
    } else {
      xid = client.nextCallbackXid;
      do xid = (xid + 1) >>> 0;
      while (pending.has(xid));
      client.nextCallbackXid = xid;
      msg.writeUInt32BE(xid, 0); // the transport gave us this buffer: it is ours to rewrite
    }
    pending.set(xid, { inbound: call, link, at: performance.now() });
    this.waiting.add(client);
    this.stats.backchannelCalls++;
    this.one[0] = msg;
    client.conn.sendRecord(this.one);
    this.one[0] = EMPTY;
  }

  /** A REPLY record from a client: the answer to a relayed callback (or nothing we know). */
  onClientReply(client: ClientState, conn: FrontendConnection, record: Buffer): void {
    const xid = record.readUInt32BE(0);
    const p = client.callbacks?.get(xid);
    if (p === undefined) {
      this.stats.backchannelRepliesDropped++;
      this.releaseRecord?.(record);
    } else {
      client.callbacks?.delete(xid);
      if (client.callbacks?.size === 0) this.waiting.delete(client);
      record.writeUInt32BE(p.inbound.xid, 0);
      if (p.link.conn.state === 'closed') {
        this.stats.backchannelRepliesLost++;
        this.releaseRecord?.(record);
      } else {
        // Given back by the transport once sent (`onReplyReleased` of this connection's port).
        p.link.conn.reply(p.inbound, record);
        this.stats.backchannelReplies++;
      }
    }
    conn.release();
  }

  /**
   * The client left: its relayed callbacks stay unanswered (counted); its sessions go to another client
   * that bound them, or are forgotten (returns how many were).
   */
  clientGone(client: ClientState): number {
    this.waiting.delete(client);
    if (client.callbacks !== null) {
      this.stats.backchannelUnanswered += client.callbacks.size;
      for (const p of client.callbacks.values()) p.link.conn.replyError(p.inbound, REFUSED);
      client.callbacks.clear();
    }
    let n = 0;
    for (const s of client.sessions) n += this.sessions.release(client, s);
    return n;
  }

  /**
   * Refuses the callbacks a live client has left unanswered for longer than the callback timeout (the
   * router's tick calls this): each pins one of its connection's few backward credits until it is
   * answered (RFC 8167 §4), so one client that never answers would stall every other session's callbacks
   * there. A late answer then matches nothing and is dropped (`backchannelRepliesDropped`).
   */
  expire(now: number): void {
    if (this.waiting.size === 0) return;
    const limit = now - this.callbackTimeoutMs;
    for (const client of this.waiting) {
      const pending = client.callbacks;
      if (pending === null) {
        this.waiting.delete(client);
        continue;
      }
      for (const [xid, p] of pending) {
        if (p.at > limit) continue;
        pending.delete(xid);
        this.stats.backchannelTimedOut++;
        client.conn.log.warn(
          {
            code: 'ERR_CALLBACK_TIMEOUT',
            timeoutMs: this.callbackTimeoutMs,
            serverXid: p.inbound.xid,
            connection: p.link.conn.id,
          },
          'the client did not answer a relayed callback in time; refused to free its backward credit',
        );
        if (p.link.conn.state !== 'closed') p.link.conn.replyError(p.inbound, REFUSED);
      }
      if (pending.size === 0) this.waiting.delete(client);
    }
  }
}

/**
 * Where a callback naming no session goes (CB_NULL, NFSv4.0-style, not parseable): the client of a
 * session whose back channel is bound to its connection. CB_NULL carries no session id (RFC 8881 §20.1),
 * and any of them answers for the connection; the server only probes the path.
 */
function anyBackClient(link: ConnectionLink): ClientState | null {
  for (const s of link.backchannels) if (!s.client.closed) return s.client;
  return null;
}

/**
 * Where a callback whose session cannot be read (RPCSEC_GSS privacy), or an RPCSEC_GSS callback naming
 * none (CB_NULL), goes: only where there is no choice, one client with back channels on its connection;
 * with more, any choice would be a guess.
 */
function onlyBackClient(link: ConnectionLink): ClientState | null {
  let only: ClientState | null = null;
  for (const s of link.backchannels) {
    if (s.client.closed) continue;
    if (only !== null && s.client !== only) return null;
    only = s.client;
  }
  return only;
}

const EMPTY = Buffer.alloc(0);
/** How a callback with nowhere to go is refused (frees its backward credit; no RPC reply is made up). */
const REFUSED = { code: RDMA2_ERR_SYSTEM } as const;
