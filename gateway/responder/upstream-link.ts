/**
 * One accepted RPC-over-RDMA connection and its one upstream TCP connection (DESIGN §1, responder role):
 * one TCP connection per RDMA connection, so that what the server ties to a connection (NFSv4.1
 * connection binding, the backchannel) keeps its meaning.
 *
 * - Forward: each inbound call (Read-chunk data already re-inserted by the transport) is written to the
 *   upstream as one record; the upstream's reply is matched by XID and sent back with its DDP-eligible
 *   results (found by the ULB) moved to the Write chunks the requester offered.
 * - Backward: a CALL record from the upstream (a callback on the same TCP connection) becomes a backward
 *   call on the RDMA connection (RFC 8167); its reply is written back to the upstream.
 * - The upstream is never half-closed while it owes replies: when the RDMA side ends, the link waits for
 *   the outstanding replies (dropping them: nobody can receive them) before it ends the TCP connection.
 * - When the upstream goes away, the RDMA connection is closed so that the requester retransmits on a new
 *   one; no reply is invented (DESIGN §3).
 */
import { connect, type Socket } from 'node:net';
import type { Logger } from 'pino';
import type { BufferPool } from '../../common/buffer-pool.js';
import { getU32BE } from '../../common/bytes.js';
import { U32Map } from '../../common/u32-map.js';
import { RDMA2_ERR_SYSTEM } from '../../rdma-backend/protocol/index.js';
import type {
  DdpItem,
  InboundCall,
  RequesterHandler,
  ResponderHandler,
  RpcRdmaConnection,
  TransportCall,
  TransportError,
} from '../../rdma-backend/transport/index.js';
import { MsgType } from '../../rpc/constants.js';
import { RpcCallHeader } from '../../rpc/message.js';
import { xdrPad } from '../../rpc/xdr.js';
import { RecordDecoder } from '../../tcp-frontend/record-marking.js';
import { COPIED_RECORD_MAX, RecordWriter } from '../../tcp-frontend/record-writer.js';
import type { UlbRegistry } from '../ulb/registry.js';
import { UlbCallPlan } from '../ulb/types.js';

const NO_ITEMS: readonly DdpItem[] = [];

/** An inbound call waiting for the upstream's reply (pooled per link). */
class Pending {
  inbound: InboundCall | null = null;
  /** The ULB's plan of the call, made before its message is written (and given back to the pool). */
  readonly plan = new UlbCallPlan();
  /** Whether `plan` holds this call's plan (it offered Write chunks and its header decoded). */
  planned = false;
}

/** A callback from the upstream, sent as a backward call (rare: allocated per call). */
class BackwardCall implements TransportCall {
  readonly ddpArgs: readonly DdpItem[] = NO_ITEMS;
  readonly ddpResults: readonly number[] = [];
  readonly maxReplySize = -1;
  constructor(
    readonly xid: number,
    readonly message: Buffer,
  ) {}
}

export interface ResponderStats {
  connections: number;
  callsForwarded: number;
  repliesSent: number;
  /** Replies from the upstream that matched no call (late, or the RDMA connection had gone). */
  unmatchedReplies: number;
  /** Calls refused because their XID was already outstanding on the connection. */
  duplicateXids: number;
  /** Upstream replies over the record limit: skipped, their call answered with an error. */
  oversizedReplies: number;
  callbacks: number;
  callbackReplies: number;
  callbacksFailed: number;
  /** Connection requests the device could not accept (a resource limit): rejected, nothing kept. */
  acceptFailures: number;
  /** Connection requests rejected because the responder was draining, closing, or full (`maxConnections`). */
  refused: number;
  /** Connections closed after `idleTimeoutMs` without traffic (the idle reaper). */
  idleClosed: number;
  /**
   * Upstream connections of ended RDMA connections cut before their replies came in (`lingerMs`),
   * because live and lingering links together were at `maxConnections`.
   */
  lingerCut: number;
  /** Gauges. */
  links: number;
  pending: number;
}

export function createResponderStats(): ResponderStats {
  return {
    connections: 0,
    callsForwarded: 0,
    repliesSent: 0,
    unmatchedReplies: 0,
    duplicateXids: 0,
    oversizedReplies: 0,
    callbacks: 0,
    callbackReplies: 0,
    callbacksFailed: 0,
    acceptFailures: 0,
    refused: 0,
    idleClosed: 0,
    lingerCut: 0,
    links: 0,
    pending: 0,
  };
}

export interface UpstreamLinkOptions {
  upstream: { host: string; port: number };
  registry: UlbRegistry;
  stats: ResponderStats;
  log: Logger;
  /** Largest reply record accepted from the upstream. */
  maxRecordSize: number;
  /** How long to wait for replies still due after the RDMA side ended before ending the upstream. */
  lingerMs: number;
  onGone: (link: UpstreamLink) => void;
  /**
   * Where reply records are assembled, shared by the links of a responder: a record goes back when the
   * transport has sent it (`onReplyReleased`), so a 1 MiB READ reply reuses memory instead of allocating.
   */
  pool: BufferPool;
}

/**
 * The upstream socket reads into one buffer per link, reused (`onread`), instead of a fresh 64 KiB chunk
 * per read: records are copied out of it by the decoder (`zeroCopy: false`), so nothing refers to it
 * after a read is decoded. 256 KiB: a 1 MiB reply in four reads.
 */
const READ_BUFFER_SIZE = 256 * 1024;

export class UpstreamLink implements ResponderHandler, RequesterHandler<BackwardCall> {
  conn: RpcRdmaConnection | null = null;
  readonly socket: Socket;
  private readonly o: UpstreamLinkOptions;
  private readonly decoder: RecordDecoder;
  private readonly pending = new U32Map<Pending>();
  private readonly free: Pending[] = [];
  private readonly header = new RpcCallHeader();
  private rdmaClosed = false;
  private upstreamClosed = false;
  private lingerTimer: NodeJS.Timeout | null = null;
  private readonly writer: RecordWriter;
  /**
   * Whether a call, its reply, a callback or its reply went through since the idle reaper last looked
   * (`takeActivity`). A new connection counts as active: it gets a whole period before it can go.
   */
  private active = true;

  constructor(o: UpstreamLinkOptions) {
    this.o = o;
    this.decoder = new RecordDecoder((record, lent) => this.onUpstreamRecord(record, lent), {
      maxRecordSize: o.maxRecordSize,
      allocate: o.pool.acquire,
      release: o.pool.release,
      zeroCopy: false,
      // Replies below the pool's smallest class (never pooled anyway) are lent to the transport as views
      // of the read buffer: `reply(…, lent)` copies an inline one into its send buffer before returning,
      // and the message itself wherever it would keep it longer. An allocation and a copy fewer per small
      // reply (about 0.7k of a NULL call's ~62k instructions through the chain, counted by function:
      // docs/performance.md, "Counting instructions per call").
      lendMax: o.pool.minSize - 1,
      onOversize: (xid, announced, msgType) => this.onOversizedRecord(xid, announced, msgType),
    });
    // Writes before the connection is established are buffered by Node, so calls may arrive at once.
    this.socket = connect({
      host: o.upstream.host,
      port: o.upstream.port,
      noDelay: true,
      onread: {
        buffer: Buffer.allocUnsafe(READ_BUFFER_SIZE),
        callback: (n: number, buf: Uint8Array): boolean => {
          this.onData(buf as Buffer, n);
          return true;
        },
      },
    });
    this.writer = new RecordWriter(this.socket, { pool: o.pool });
    this.socket.on('error', (err: NodeJS.ErrnoException) =>
      o.log.warn({ code: err.code, err: err.message }, 'upstream connection error'),
    );
    this.socket.on('close', () => this.onUpstreamClosed());
  }

  get outstanding(): number {
    return this.pending.size;
  }

  get log(): Logger {
    return this.o.log;
  }

  /** Whether there was traffic since the last call, which clears the mark (the idle reaper's sweep). */
  takeActivity(): boolean {
    const was = this.active;
    this.active = false;
    return was;
  }

  // ------------------------------------------------------------------------------------------------
  // RDMA → upstream

  /**
   * Small inline messages come as views of the transport's Receive, both the calls to forward
   * (`ResponderHandler.lendLimit`) and the client's replies to callbacks (`RequesterHandler.lendLimit`):
   * `onCall` plans a call and `onCall` and `onReply` hand the record to the writer, which copies a
   * record this small into its stage before returning. Nothing else keeps them.
   */
  readonly lendLimit = COPIED_RECORD_MAX;

  onCall(inbound: InboundCall): void {
    const conn = this.conn as RpcRdmaConnection;
    if (this.upstreamClosed) return; // the connection is being closed: the requester retransmits
    this.active = true;
    const xid = inbound.xid;
    if (this.pending.has(xid)) {
      // A requester may not reuse an XID it has outstanding on this connection (RFC 8166 §4.1).
      this.o.stats.duplicateXids++;
      conn.replyError(inbound, { code: RDMA2_ERR_SYSTEM });
      return;
    }
    const p = this.free.pop() ?? new Pending();
    p.inbound = inbound;
    // Planned now: a message assembled in our pool (`allocateCall`) goes back to it once written (or
    // copied), and by the time the reply comes its bytes may be another message's.
    p.planned = inbound.writeChunks.length > 0 && this.plan(inbound.message, p.plan);
    this.pending.set(xid, p);
    this.o.stats.pending++;
    this.o.stats.callsForwarded++;
    this.writer.writeOne(inbound.message);
  }

  /** Fills `plan` for the call `message`; false when its header does not decode (no DDP results then). */
  private plan(message: Buffer, plan: UlbCallPlan): boolean {
    try {
      this.o.registry.planCall(this.header.decode(message), plan);
      return true;
    } catch {
      return false;
    }
  }

  allocateCall(size: number): Buffer {
    return this.o.pool.acquire(size);
  }

  /** @internal */
  flush(): void {
    this.writer.flush();
  }

  // ------------------------------------------------------------------------------------------------
  // upstream → RDMA

  private onData(buf: Buffer, n: number): void {
    try {
      this.decoder.push(n === buf.length ? buf : buf.subarray(0, n));
    } catch (err) {
      this.o.log.warn({ err: (err as Error).message }, 'upstream sent a broken record stream; closing');
      this.socket.destroy();
    }
  }

  /** `lent`: a view of the read buffer, valid until this returns (`lendMax` above). */
  private onUpstreamRecord(record: Buffer, lent: boolean): void {
    const msgType = record.length < 8 ? -1 : getU32BE(record, 4);
    if (msgType === MsgType.REPLY) this.onUpstreamReply(record, lent);
    else if (msgType === MsgType.CALL)
      this.onCallback(lent ? Buffer.from(record) : record); // kept by the backward call: not pooled
    else if (!lent) this.o.pool.release(record);
  }

  /**
   * The upstream sent a record over `maxRecordSize`: too large for us to carry back, whatever the
   * requester offers. Its bytes were skipped; only its call fails — RDMA2_ERR_SYSTEM (ERR_CHUNK in
   * Version 1), not REPLY_RESOURCE, which would invite the requester to resend with a larger Reply chunk
   * that cannot help — instead of the connection and every call on it. A record that is not a REPLY
   * (an oversized callback from the server, in its own XID space) matches none of our calls: it is only
   * dropped, and the server's callback times out.
   */
  private onOversizedRecord(xid: number, announced: number, msgType: number): void {
    this.o.stats.oversizedReplies++;
    const p = xid < 0 || msgType !== MsgType.REPLY ? undefined : this.pending.get(xid);
    this.o.log.warn(
      { xid, bytes: announced, limit: this.decoder.maxRecordSize, call: p !== undefined },
      'upstream record larger than the limit: skipped, the call it answers refused',
    );
    if (p === undefined) return;
    this.pending.delete(xid);
    this.o.stats.pending--;
    const inbound = p.inbound as InboundCall;
    p.inbound = null;
    this.free.push(p);
    if (!this.rdmaClosed) {
      (this.conn as RpcRdmaConnection).replyError(inbound, { code: RDMA2_ERR_SYSTEM });
    }
    if (this.rdmaClosed && this.pending.size === 0) this.endUpstream();
  }

  private onUpstreamReply(record: Buffer, lent: boolean): void {
    const xid = getU32BE(record, 0);
    const p = this.pending.get(xid);
    if (p === undefined) {
      this.o.stats.unmatchedReplies++;
      if (!lent) this.o.pool.release(record);
      return;
    }
    this.pending.delete(xid);
    this.o.stats.pending--;
    this.active = true;
    const inbound = p.inbound as InboundCall;
    p.inbound = null;
    if (!this.rdmaClosed) {
      const items = p.planned ? this.locateResults(p, inbound, record) : NO_ITEMS;
      try {
        // An owned record comes back through onReplyReleased; a lent one is ours again on return.
        (this.conn as RpcRdmaConnection).reply(inbound, record, items, lent);
        this.o.stats.repliesSent++;
      } catch (err) {
        this.replyFailed(xid, err as Error);
      }
    } else if (!lent) {
      this.o.pool.release(record);
    }
    this.free.push(p);
    if (this.rdmaClosed && this.pending.size === 0) this.endUpstream();
  }

  /**
   * The transport threw while sending an upstream reply. It answers what it cannot send itself (a
   * refused registration, a reply too large), so this is a fault of ours, not of the upstream's stream,
   * and what the transport had taken for the reply (its send buffer, registrations, the call marked
   * answered) is unknown: the RDMA connection is closed as failed, so that the requester resends its
   * calls on another, rather than one call hanging. Caught here rather than around the record decoder,
   * where it was taken for a broken stream: the upstream closed for a fault that was not its own.
   */
  private replyFailed(xid: number, err: Error): void {
    this.o.log.error(
      { code: 'ERR_RESPONDER_REPLY_FAILED', xid, err },
      'the transport failed to send an upstream reply: closing the RDMA connection, the requester resends its calls',
    );
    (this.conn as RpcRdmaConnection).close(`a reply failed in the transport: ${err.message}`, true);
  }

  /**
   * The DDP-eligible results of `reply` (offsets in the full message) for the Write chunks the requester
   * offered, in order (RFC 8166 §3.5.2). The ULB locates result i in a reply from which results 0..i-1
   * have been removed; for the first (the usual case: one READ) that is the reply itself, later ones are
   * located in a reduced copy.
   */
  private locateResults(p: Pending, inbound: InboundCall, reply: Buffer): readonly DdpItem[] {
    const plan = p.plan;
    const n = Math.min(plan.results.length, inbound.writeChunks.length);
    if (n === 0) return NO_ITEMS;
    const items: DdpItem[] = [];
    let reduced = reply;
    let removed = 0;
    for (let i = 0; i < n; i++) {
      const at = plan.locateResult(reduced, i);
      if (at < 4 || at > reduced.length) break;
      const length = getU32BE(reduced, at - 4);
      const span = length + xdrPad(length);
      if (at + span > reduced.length) break;
      items.push({ offset: at + removed, length });
      if (i + 1 < n) {
        reduced = Buffer.concat([reduced.subarray(0, at), reduced.subarray(at + span)]);
        removed += span;
      }
    }
    return items;
  }

  /** A call from the upstream to the client (callback): a backward call on the RDMA connection. */
  private onCallback(record: Buffer): void {
    if (this.rdmaClosed) return;
    this.active = true;
    this.o.stats.callbacks++;
    (this.conn as RpcRdmaConnection).submit(new BackwardCall(getU32BE(record, 0), record));
  }

  onReplyReleased(message: Buffer): void {
    this.o.pool.release(message);
  }

  onReply(_call: BackwardCall, reply: Buffer): void {
    this.o.stats.callbackReplies++;
    this.active = true;
    if (this.upstreamClosed) return;
    this.writer.writeOne(reply);
  }

  onFailed(call: BackwardCall, error: TransportError): void {
    // The upstream's own timeout handles it: answering for the client would invent a reply.
    this.o.stats.callbacksFailed++;
    this.o.log.debug({ xid: call.xid, code: error.code }, 'backward call failed');
  }

  // ------------------------------------------------------------------------------------------------
  // Lifecycle

  /** The RDMA connection ended: drop what is due, end the upstream once it owes nothing. */
  onRdmaClosed(reason: string): void {
    if (this.rdmaClosed) return;
    this.rdmaClosed = true;
    this.o.log.debug({ reason, outstanding: this.pending.size }, 'RDMA connection closed');
    if (this.pending.size === 0) {
      this.endUpstream();
      return;
    }
    this.lingerTimer = setTimeout(() => this.socket.destroy(), this.o.lingerMs);
    this.lingerTimer.unref();
  }

  private endUpstream(): void {
    // Already gone (the upstream closed first, and the RDMA close followed): nothing to end, and a new
    // timer would only keep the link reachable for lingerMs.
    if (this.upstreamClosed) return;
    if (this.lingerTimer) clearTimeout(this.lingerTimer);
    this.flush();
    this.socket.end();
    // An upstream that never closes its side would keep the link (and its socket) for ever; the reaper
    // makes RDMA closes routine, so a bounded wait for its FIN, then the socket goes.
    this.lingerTimer = setTimeout(() => this.socket.destroy(), this.o.lingerMs);
    this.lingerTimer.unref();
  }

  /** The RDMA side ended while the upstream still owes replies: the link waits (`lingerMs`) for them. */
  get lingering(): boolean {
    return this.rdmaClosed && !this.upstreamClosed;
  }

  /**
   * Gives up the replies still due after the RDMA side ended (they have nowhere to go): the upstream
   * connection goes now, because the responder needs its place for a new RDMA connection.
   */
  cutUpstream(): void {
    if (!this.lingering) return;
    this.o.log.info(
      { reason: 'LINGER_CUT', outstanding: this.pending.size },
      'cutting the upstream connection of an ended RDMA connection: the responder needs its place',
    );
    this.socket.destroy();
    this.onUpstreamClosed();
  }

  private onUpstreamClosed(): void {
    if (this.upstreamClosed) return;
    this.upstreamClosed = true;
    if (this.lingerTimer) clearTimeout(this.lingerTimer);
    this.lingerTimer = null;
    this.o.stats.pending -= this.pending.size;
    this.pending.clear();
    if (!this.rdmaClosed) {
      this.o.log.warn(
        'upstream connection closed; closing the RDMA connection so that calls are retransmitted',
      );
      this.conn?.close('upstream closed');
    }
    this.o.onGone(this);
  }

  /** Closes both sides (responder shutdown). */
  close(): void {
    this.conn?.close('responder closing');
  }
}
