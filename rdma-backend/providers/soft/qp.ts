/**
 * The RC queue pair of the soft provider: send and receive queues, DDP/RDMAP over an MPA-framed TCP
 * stream (RFC 5040/5041/5044), ORD/IRD accounting and hardware error semantics. The connection
 * (connection.ts) does the MPA exchange and then hands the socket over with `start()`.
 *
 * Transmit: `postSend` only queues and schedules `pump()`, so WRs posted in one tick go out in one corked
 * write, and no completion can ever be delivered from inside `postSend`. The first pump of an event-loop
 * turn runs in a microtask (no added latency for a lone call); the later ones of the same turn wait for
 * its check phase, so the Sends of every socket read in one poll phase leave in one write instead of one
 * write per socket (the idea of Linux's TCP autocorking). Send/Write WRs complete when the socket's
 * write callback says the bytes left their buffer; a Read completes when the last Read Response segment
 * was placed. Completions are generated in posting order.
 *
 * Receive: socket chunks are parsed in place by a small state machine; payload goes straight from the
 * chunk into the target buffer (one copy), the CRC runs over the same slices, and the checks whose
 * failure would change what a corrupted FPDU means are reported only after its CRC was found good.
 */
import type { Socket } from 'node:net';
import { copyBytes, getU32BE, getU32LE, setU32BE, viewOf } from '../../../common/bytes.js';
import {
  Access,
  type CompletionQueue,
  invalidArgument,
  type QpCap,
  QpState,
  type QueuePair,
  type RecvWr,
  SendFlags,
  type SendWr,
  type Sge,
  VerbsError,
  WcFlags,
  WcOpcode,
  WcStatus,
  WrOpcode,
} from '../../verbs/index.js';
import type { SoftCq } from './cq.js';
import { crc32c, crc32cWithView } from './crc32c.js';
import type { SoftMr, SoftPd, StagTable } from './memory.js';
import { MpaError } from './mpa.js';
import {
  describeTerminate,
  Layer,
  parseTerminateHeaders,
  remoteStatusFor,
  Term,
  type TerminateCause,
  TerminateError,
  terminateHdrct,
} from './terminate.js';
import { TxFramer } from './tx.js';
import {
  DDP_LAST,
  DDP_TAGGED,
  DDP_TAGGED_HEADER,
  DDP_UNTAGGED_HEADER,
  DDP_VERSION,
  MPA_CRC_SIZE,
  MPA_LENGTH_SIZE,
  mpaPad,
  Op,
  QN_READ_REQUEST,
  QN_SEND,
  QN_TERMINATE,
  RDMAP_VERSION,
  READ_REQUEST_BODY,
  READ_REQUEST_SIZE_AT,
  Rtr,
  TAGGED_HEADER,
  TERM_HDRCT_D,
  TERM_HDRCT_M,
  TERM_HDRCT_R,
  TERM_SEGMENT_LENGTH,
  TERMINATE_CONTROL,
  TERMINATE_MAX_ULPDU,
  UNTAGGED_HEADER,
} from './wire.js';

/** What the connection learned during MPA setup and hands to the QP. */
/** The ORQ entry of our Read RTR (no send-queue position: its Read Response completes nothing). */
const RTR_READ = -1;

export interface StreamParams {
  crc: boolean;
  /** Largest ULPDU (DDP header + payload) we put in one FPDU. */
  mulpdu: number;
  ord: number;
  ird: number;
  /** We must wait for the peer's first FPDU before transmitting (MPA responder, RFC 5044 §7.1.2). */
  waitForPeerFirst: boolean;
  /**
   * The RTR to send first (MPA v2 peer-to-peer initiator, RFC 6581 §6): a zero-length RDMA Write, or a
   * zero-length RDMA Read Request whose Read Response is taken without a completion. `Rtr.NONE`: none.
   */
  sendRtr: Rtr;
  /**
   * The RTR the reply negotiated, which the peer's first FPDU must be (MPA v2 peer-to-peer responder,
   * RFC 6581 §5): anything else is refused unread (`isRtr`). `Rtr.NONE`: no such check.
   */
  expectRtr: Rtr;
}

/** Callbacks into the owning connection. */
export interface QpOwner {
  /** The stream died (after flushing): raise DISCONNECTED with this detail. */
  onStreamDead(detail: { terminate?: { local: boolean } & TerminateCause; error?: Error }): void;
  /** The first FPDU arrived (responder side: the connection is now fully up). */
  onFirstFpdu(): void;
}

const ST_POSTED = 0;
const ST_SENT = 1;
const ST_DONE = 2;

/** The scatter-gather list of a posted work request, copied out of the caller's WR (which it may reuse). */
class SglEntry {
  wrId = 0;
  nsge = 0;
  mrs: SoftMr[] = [];
  offsets: number[] = [];
  lengths: number[] = [];
  keys: number[] = [];
  total = 0;

  /** Copies `sgl` in (validating each element) and sets `nsge` and `total`. */
  setSgl(sgl: readonly Sge[]): void {
    let total = 0;
    for (let i = 0; i < sgl.length; i++) {
      const s = sgl[i];
      if (!Number.isInteger(s.offset) || !Number.isInteger(s.length) || s.offset < 0 || s.length < 0) {
        throw invalidArgument('SGE offset/length must be non-negative integers', { i });
      }
      // Ring entries see the same few regions again and again: skip the (write-barriered) pointer store.
      const mr = s.mr as SoftMr;
      if (this.mrs[i] !== mr) this.mrs[i] = mr;
      this.offsets[i] = s.offset;
      this.lengths[i] = s.length;
      this.keys[i] = mr.lkey;
      total += s.length;
    }
    this.nsge = sgl.length;
    this.total = total;
  }
}

class SqEntry extends SglEntry {
  opcode = 0;
  flags = 0;
  rkey = 0;
  toHi = 0;
  toLo = 0;
  invRkey = 0;
  state = ST_POSTED;
  status = 0;
  /** Read: bytes placed so far. */
  placed = 0;
}

class RqEntry extends SglEntry {}

class ReadResponseJob {
  mr!: SoftMr;
  /** The Data Source STag and high TO word the Read Request named (checked again when the response goes). */
  srcStag = 0;
  srcHi = 0;
  offset = 0;
  length = 0;
  sinkStag = 0;
  sinkToHi = 0;
  sinkToLo = 0;
  /** The Read Request's MSN (a Terminate for it rebuilds its headers, see `readRequestHeaders`). */
  msn = 0;
}

const RX_HEADER = 0;
const RX_PAYLOAD = 1;
const RX_TRAILER = 2;

const SINK_DISCARD = 0;
const SINK_TAGGED = 1;
const SINK_RECV = 2;
const SINK_SMALL = 3;

const TWO32 = 0x100000000;

let nextQpNum = 1;

/** Written with a callback to learn when the socket has taken everything written before it. */
const EMPTY_CHUNK = Buffer.alloc(0);

/** Bytes of MPA length and DDP/RDMAP header an FPDU starts with, from its DDP control and RDMAP bytes. */
function headerLengthOf(ctrl: number, rdmap: number): number {
  const op = rdmap & 0x0f;
  if (ctrl & DDP_TAGGED) return TAGGED_HEADER;
  if (op === Op.READ_REQUEST) return UNTAGGED_HEADER + READ_REQUEST_BODY;
  if (op === Op.TERMINATE) return UNTAGGED_HEADER + TERMINATE_CONTROL;
  return UNTAGGED_HEADER;
}

/**
 * Copies `n` bytes (an FPDU header or trailer: at most a few dozen) byte by byte: `Buffer.copy` from an
 * offset allocates a view per call (Node 20), which costs more than the loop at these sizes.
 */
function copySmall(src: Buffer, from: number, n: number, dst: Buffer, to: number): void {
  for (let k = 0; k < n; k++) dst[to + k] = src[from + k];
}

/**
 * Bytes of a terminated FPDU's start (`offending`: MPA length, DDP header, RDMAP header) that a Terminate
 * with Hdrct `hdrct` carries after its control word (RFC 5040 §4.8).
 */
function terminatedLength(offending: Buffer | undefined, hdrct: number): number {
  if (offending === undefined || (hdrct & TERM_HDRCT_D) === 0) return 0;
  const ddp = offending[2] & DDP_TAGGED ? DDP_TAGGED_HEADER : DDP_UNTAGGED_HEADER;
  return TERM_SEGMENT_LENGTH + ddp + (hdrct & TERM_HDRCT_R ? READ_REQUEST_BODY : 0);
}

export class SoftQp implements QueuePair {
  readonly qpNum = nextQpNum++;
  state: QpState = QpState.INIT;
  readonly cap: Readonly<QpCap>;

  // Send queue: ring of entries created on first use (a connection that never fills its queue never pays
  // for the whole ring) and then reused; absolute counters, slot = counter % size.
  private sq: SqEntry[];
  /** Entries of reported WRs, reused last-in first-out (see `postSend`). */
  private sqFree: SqEntry[] = [];
  private sqHead = 0; // oldest not yet reported
  /** Set by `release()` (the connection was destroyed): posting is refused from then on. */
  private released = false;
  private sqTx = 0; // next to transmit
  private sqTail = 0; // next free
  private sqFlushed = 0; // the socket took the batches up to here (exclusive); `batchEnds` are those it holds
  private readonly batchEnds: number[] = [];
  private readsOutstanding = 0;
  /** Read WRs transmitted and waiting for their response, in order (absolute SQ positions). */
  private readonly orq: number[] = [];

  // Receive queue.
  private rq: RqEntry[];
  private rqHead = 0;
  private rqTail = 0;

  // Responder side of RDMA Read.
  private readonly irq: ReadResponseJob[] = [];
  private readonly irqFree: ReadResponseJob[] = [];

  // Stream.
  private socket: Socket | undefined;
  private params: StreamParams | undefined;
  private framer: TxFramer | undefined;
  private pumpScheduled = false;
  /** A pump already ran in a microtask during this event-loop turn; cleared in the turn's check phase. */
  private pumpedThisTurn = false;
  private blocked = false;
  private canTransmit = false;
  private gotFirstFpdu = false;
  /**
   * Next MSN to send and to expect, per untagged queue. RFC 5041 §5.1: the MSN starts at 1 and increases by
   * one modulo 2^32 with each message: 32-bit elements wrap by themselves.
   */
  private readonly txMsn = Uint32Array.of(1, 1, 1);
  private readonly rxMsn = Uint32Array.of(1, 1, 1);
  dead = false;

  // Receive parser state.
  private rxState = RX_HEADER;
  private readonly hdr = Buffer.alloc(64);
  private readonly hdrView = viewOf(this.hdr);
  private hdrHave = 0;
  private hdrNeed = 4;
  private hdrKnown = false;
  private ulpduLen = 0;
  private payloadLeft = 0;
  private readonly trailer = Buffer.alloc(8);
  private trailerHave = 0;
  private trailerNeed = 0;
  private rxCrc = 0;
  private sink = SINK_DISCARD;
  private sinkMr: SoftMr | undefined;
  private sinkPos = 0;
  private rxOp = 0;
  private rxLast = false;
  private pendingError: TerminateCause | undefined;
  private pendingRecvStatus = 0;
  private readonly small = Buffer.alloc(64);
  /** Where the work request being framed stands in its scatter-gather list (see `emitPayload`). */
  private txSge = 0;
  private txSgeOff = 0;
  private smallPos = 0;
  private recvCur: RqEntry | undefined;
  private recvMo = 0;
  private recvInvalidated = 0;
  private recvHasInv = false;

  private readonly pumpBound = (): void => this.pump();
  private readonly endTurnBound = (): void => {
    this.pumpedThisTurn = false;
  };
  private readonly onWritten = (err?: Error | null): void => this.written(err);
  private readonly onDrain = (): void => {
    this.blocked = false;
    this.schedulePump();
  };

  constructor(
    readonly pd: SoftPd,
    readonly sendCq: CompletionQueue,
    readonly recvCq: CompletionQueue,
    cap: QpCap,
    private readonly stags: StagTable,
    private readonly owner: QpOwner,
    limits: { maxQpWr: number; maxSge: number },
  ) {
    if (
      cap.maxSendWr < 1 ||
      cap.maxRecvWr < 0 ||
      cap.maxSendWr > limits.maxQpWr ||
      cap.maxRecvWr > limits.maxQpWr
    ) {
      throw invalidArgument('queue depth out of range', { cap, maxQpWr: limits.maxQpWr });
    }
    if (cap.maxSendSge > limits.maxSge || cap.maxRecvSge > limits.maxSge) {
      throw invalidArgument('scatter-gather limit out of range', { cap, maxSge: limits.maxSge });
    }
    this.cap = {
      maxSendWr: cap.maxSendWr,
      maxRecvWr: cap.maxRecvWr,
      maxSendSge: Math.max(1, cap.maxSendSge),
      maxRecvSge: Math.max(1, cap.maxRecvSge),
      maxInlineData: 0,
    };
    this.sq = new Array<SqEntry>(cap.maxSendWr);
    this.rq = new Array<RqEntry>(Math.max(1, cap.maxRecvWr));
    pd.qpCount++;
    (sendCq as SoftCq).users++;
    (recvCq as SoftCq).users++;
  }

  // ---------------------------------------------------------------- posting

  postSend(wr: SendWr): void {
    if (this.released) throw new VerbsError('VERBS_DESTROYED', 'queue pair was destroyed');
    if (this.sqTail - this.sqHead >= this.sq.length) {
      throw new VerbsError('VERBS_QUEUE_FULL', 'send queue full', { maxSendWr: this.cap.maxSendWr });
    }
    const op = wr.opcode;
    const sgl = wr.sgList;
    if (sgl.length > this.cap.maxSendSge) throw invalidArgument('too many SGEs', { n: sgl.length });
    switch (op) {
      case WrOpcode.SEND:
      case WrOpcode.RDMA_WRITE:
        break;
      case WrOpcode.SEND_WITH_INV:
      case WrOpcode.LOCAL_INV:
        if (typeof wr.invalidateRkey !== 'number') throw invalidArgument('invalidateRkey required', { op });
        break;
      case WrOpcode.RDMA_READ:
        // iWARP: a Read Request names one sink STag (max_sge_rd = 1).
        if (sgl.length > 1)
          throw invalidArgument('RDMA Read takes at most one SGE on iWARP', { n: sgl.length });
        // ORD 0 (the peer's IRD is 0, or we asked for none): no Read Request may ever go (RFC 5040 §6.4),
        // so the Read would wait at the head of the queue for ever, and everything behind it. Linux siw
        // refuses it with EINVAL ("We negotiated not to send READ req's", siw_activate_tx). A Read
        // posted before the ORD was negotiated is failed when it comes to be sent (`pump`).
        if (this.params !== undefined && this.params.ord === 0 && !this.dead) {
          throw invalidArgument('RDMA Read on a connection whose ORD is 0 (the peer takes no Reads)', {
            ord: 0,
          });
        }
        break;
      default:
        throw invalidArgument('work request opcode not supported by the soft (iWARP) provider', { op });
    }
    if (
      (op === WrOpcode.RDMA_WRITE || op === WrOpcode.RDMA_READ) &&
      (typeof wr.rkey !== 'number' || typeof wr.remoteAddr !== 'bigint')
    ) {
      throw invalidArgument('rkey and remoteAddr required', { op });
    }
    // The entry comes from a LIFO free list, not from the ring slot: a ring of thousands of entries used
    // in turn misses the cache on every post, a few recycled entries do not.
    const e = this.sqFree.pop() ?? new SqEntry();
    this.sq[this.sqTail % this.sq.length] = e;
    e.wrId = wr.wrId;
    e.opcode = op;
    e.flags = wr.flags;
    e.setSgl(sgl);
    if (op === WrOpcode.RDMA_WRITE || op === WrOpcode.RDMA_READ) {
      const addr = wr.remoteAddr as bigint;
      e.rkey = (wr.rkey as number) >>> 0;
      e.toHi = Number(addr >> 32n) >>> 0;
      e.toLo = Number(addr & 0xffffffffn);
    }
    e.invRkey = (wr.invalidateRkey ?? 0) >>> 0;
    e.state = ST_POSTED;
    e.status = WcStatus.SUCCESS;
    e.placed = 0;
    this.sqTail++;
    if (this.dead) {
      // Hardware flushes WRs posted to a QP in the error state.
      e.state = ST_DONE;
      e.status = WcStatus.WR_FLUSH_ERR;
      e.flags |= SendFlags.SIGNALED;
      // `sqFlushed` stays: batches of earlier WRs may still be in the socket (see `flushAll`).
      this.sqTx = this.sqTail;
      queueMicrotask(() => this.reapSend());
      return;
    }
    this.schedulePump();
  }

  postRecv(wr: RecvWr): void {
    if (this.released) throw new VerbsError('VERBS_DESTROYED', 'queue pair was destroyed');
    if (this.rqTail - this.rqHead >= this.cap.maxRecvWr) {
      throw new VerbsError('VERBS_QUEUE_FULL', 'receive queue full', { maxRecvWr: this.cap.maxRecvWr });
    }
    const sgl = wr.sgList;
    if (sgl.length > this.cap.maxRecvSge) throw invalidArgument('too many SGEs', { n: sgl.length });
    const at = this.rqTail % this.rq.length;
    let e = this.rq[at];
    if (e === undefined) {
      e = new RqEntry();
      this.rq[at] = e;
    }
    e.wrId = wr.wrId;
    e.setSgl(sgl);
    this.rqTail++;
    if (this.dead) queueMicrotask(() => this.flushRecvs());
  }

  // ---------------------------------------------------------------- stream start / stop

  /**
   * Hands over the socket after MPA setup. Bytes that followed the MPA frame are not taken here: the
   * connection feeds them to `onData` once it has queued ESTABLISHED, so that whatever they cause (a
   * Terminate and DISCONNECTED) reaches the consumer after it (see `SoftConnection.establish`).
   */
  start(socket: Socket, params: StreamParams): void {
    this.socket = socket;
    this.params = params;
    this.framer = new TxFramer(params.crc);
    this.state = QpState.RTS;
    socket.on('drain', this.onDrain);
    this.canTransmit = !params.waitForPeerFirst;
    if (params.sendRtr === Rtr.WRITE) this.emitZeroLengthWrite();
    else if (params.sendRtr === Rtr.READ) this.emitRtrRead();
    this.schedulePump();
  }

  get ord(): number {
    return this.params?.ord ?? 0;
  }

  get ird(): number {
    return this.params?.ird ?? 0;
  }

  // ---------------------------------------------------------------- transmit

  private schedulePump(): void {
    if (this.pumpScheduled || this.socket === undefined) return;
    this.pumpScheduled = true;
    if (this.pumpedThisTurn) {
      // Queued after endTurnBound, so it runs in the check phase that clears the mark, once every
      // socket read of this poll phase has posted its WRs.
      setImmediate(this.pumpBound);
      return;
    }
    this.pumpedThisTurn = true;
    setImmediate(this.endTurnBound);
    queueMicrotask(this.pumpBound);
  }

  private pump(): void {
    this.pumpScheduled = false;
    const socket = this.socket;
    const fr = this.framer;
    if (this.dead || socket === undefined || fr === undefined || !this.canTransmit || this.blocked) return;
    const params = this.params as StreamParams;
    const budget = 4 * 1024 * 1024;
    // Read Responses first: they free the peer's ORD slots.
    while (this.irq.length > 0 && fr.bytes < budget) {
      const job = this.irq.shift() as ReadResponseJob;
      // The source was checked when the Read Request arrived, but the response may have waited (socket
      // not draining) while the region was invalidated: its bytes may now be someone else's.
      const revoked =
        job.length > 0
          ? this.checkTagged(job.srcStag, job.srcHi, job.offset, job.length, Access.REMOTE_READ, true)
          : undefined;
      if (revoked !== undefined) {
        this.irqFree.push(job);
        this.fatal(revoked, true, this.readRequestHeaders(job));
        return;
      }
      this.emitReadResponse(job);
      this.irqFree.push(job);
    }
    while (this.sqTx < this.sqTail && fr.bytes < budget) {
      const e = this.sq[this.sqTx % this.sq.length];
      if (e.opcode === WrOpcode.RDMA_READ && params.ord === 0) {
        // Posted before the ORD was known (`postSend` refuses it since): it can never go. As Linux siw,
        // whose SQ processing fails on it (siw_activate_tx: EINVAL) and drops the connection, the QP
        // goes to error; the Read completes with a local QP operation error, what follows is flushed.
        e.state = ST_DONE;
        e.status = WcStatus.LOC_QP_OP_ERR;
        this.fatal(Term.LOCAL_CATASTROPHIC, true);
        return;
      }
      if (e.opcode === WrOpcode.RDMA_READ && this.readsOutstanding >= params.ord) break; // ORD reached: stall
      if (e.flags & SendFlags.FENCE && this.readsOutstanding > 0) break;
      const bad = this.checkLocal(e);
      if (bad !== 0) {
        // The WRs before it were processed: `fatal` sends their frames ahead of the Terminate and they
        // complete as the socket takes them (hardware would have sent them before reaching the bad one).
        e.state = ST_DONE;
        e.status = bad;
        this.fatal(Term.LOCAL_CATASTROPHIC, true);
        return;
      }
      switch (e.opcode) {
        case WrOpcode.SEND:
        case WrOpcode.SEND_WITH_INV:
          this.emitSend(e);
          break;
        case WrOpcode.RDMA_WRITE:
          this.emitWrite(e);
          break;
        case WrOpcode.RDMA_READ:
          this.emitReadRequest(e);
          this.readsOutstanding++;
          this.orq.push(this.sqTx);
          break;
        case WrOpcode.LOCAL_INV: {
          const mr = this.stags.byIndex(e.invRkey);
          if (mr === undefined || mr.rkey !== e.invRkey || !mr.valid || mr.pd !== this.pd) {
            e.state = ST_DONE;
            e.status = WcStatus.MW_BIND_ERR;
            this.fatal(Term.LOCAL_CATASTROPHIC, true);
            return;
          }
          // No new access from now on; the WR completes (state SENT → DONE in `written`) only once the
          // socket has taken every byte framed before it, Read Responses from this region included, so
          // the caller cannot reuse the memory while a response still refers to it.
          mr.invalidate();
          break;
        }
      }
      if (e.state === ST_POSTED) e.state = ST_SENT;
      this.sqTx++;
    }
    this.flushFramer();
    this.reapSend();
  }

  private flushFramer(): void {
    const fr = this.framer as TxFramer;
    const socket = this.socket as Socket;
    if (fr.bytes === 0 && fr.chunks.length === 0) {
      // Nothing to send, but WRs that need no bytes (Local Invalidate) complete once the socket has taken
      // what was written before them: an empty write's callback comes after the earlier ones.
      if (this.sqFlushed < this.sqTx && this.batchEnds[this.batchEnds.length - 1] !== this.sqTx) {
        this.batchEnds.push(this.sqTx);
        socket.write(EMPTY_CHUNK, this.onWritten);
      }
      return;
    }
    const chunks = fr.take();
    this.batchEnds.push(this.sqTx);
    socket.cork();
    let ok = true;
    for (let i = 0; i < chunks.length - 1; i++) ok = socket.write(chunks[i]);
    ok = socket.write(chunks[chunks.length - 1], this.onWritten);
    socket.uncork();
    if (!ok) this.blocked = true;
  }

  /**
   * The socket let go of a batch: every Send/Write/Local Invalidate in it is complete. It took the bytes,
   * unless the write failed or, once the QP is dead (a local error held the batch back, see `flushAll`),
   * the socket was destroyed first: its write in progress then reports no error though it was cancelled,
   * so whether those bytes went is unknown and the WRs are flushed.
   */
  private written(err?: Error | null): void {
    const end = this.batchEnds.shift();
    if (end === undefined || (err && !this.dead)) return; // a failed socket: `closeStream` flushes
    // A released QP dropped its socket (`release`): its completions go nowhere, so `taken` is moot then.
    const socket = this.socket;
    const taken = !err && !(this.dead && (socket === undefined || socket.destroyed));
    // Positions below `sqHead` were reported already, and their entries recycled: a Read completes on its
    // last Read Response (RFC 5040 §4.5), which may arrive before the socket lets go of the batch that
    // carried its Read Request. Its entry (`sqFree`) and its ring slot (`sqTail` wrapping around) may
    // hold a later WR by now, whose bytes are in a batch still held: only [sqHead, end) are this batch's.
    for (let p = Math.max(this.sqFlushed, this.sqHead); p < end; p++) {
      const e = this.sq[p % this.sq.length];
      if (e.state === ST_SENT && e.opcode !== WrOpcode.RDMA_READ) {
        e.state = ST_DONE;
        if (!taken) e.status = WcStatus.WR_FLUSH_ERR;
      }
    }
    this.sqFlushed = end;
    this.reapSend();
    if (!this.blocked && !this.dead) this.schedulePump();
  }

  /** Reports finished WRs from the head of the SQ, in order. */
  private reapSend(): void {
    const cq = this.sendCq as SoftCq;
    while (this.sqHead < this.sqTail) {
      const e = this.sq[this.sqHead % this.sq.length];
      if (e.state !== ST_DONE) break;
      if (e.flags & SendFlags.SIGNALED || e.status !== WcStatus.SUCCESS) {
        const wc = cq.slot();
        if (wc === undefined) {
          this.fatal(Term.LOCAL_CATASTROPHIC, true);
          return;
        }
        wc.wrId = e.wrId;
        wc.status = e.status;
        wc.opcode = wcOpcodeOf(e.opcode);
        wc.byteLen = e.opcode === WrOpcode.RDMA_READ ? e.placed : e.total;
        wc.wcFlags = 0;
        wc.immData = 0;
        wc.invalidatedRkey = 0;
        wc.qpNum = this.qpNum;
        wc.vendorErr = 0;
        cq.commit(e.status !== WcStatus.SUCCESS);
      }
      this.sqHead++;
      // Nothing reads a ring slot outside [sqHead, sqTail) (`written` included): the stale reference there
      // is harmless, and the entry may serve the next post at once.
      this.sqFree.push(e);
    }
  }

  /** Local checks of a WR's SGEs (lkey, validity, PD, bounds, LOCAL_WRITE for a Read sink). */
  private checkLocal(e: SqEntry): number {
    for (let i = 0; i < e.nsge; i++) {
      const mr = e.mrs[i];
      if (mr.deregistered || !mr.valid || mr.lkey !== e.keys[i] || mr.pd !== this.pd)
        return WcStatus.LOC_PROT_ERR;
      if (e.offsets[i] + e.lengths[i] > mr.length) return WcStatus.LOC_PROT_ERR;
      if (e.opcode === WrOpcode.RDMA_READ) {
        // iWARP: the sink of a Read is written by the peer's Read Response, a tagged placement.
        const need = Access.LOCAL_WRITE | Access.REMOTE_WRITE;
        if ((mr.access & need) !== need) return WcStatus.LOC_ACCESS_ERR;
      }
    }
    return 0;
  }

  private writeUntagged(
    at: number,
    op: number,
    last: boolean,
    qn: number,
    msn: number,
    mo: number,
    ulp: number,
  ): void {
    const b = (this.framer as TxFramer).slab;
    b[at] = (last ? DDP_LAST : 0) | DDP_VERSION;
    b[at + 1] = (RDMAP_VERSION << 6) | op;
    setU32BE(b, at + 2, ulp);
    setU32BE(b, at + 6, qn);
    setU32BE(b, at + 10, msn);
    setU32BE(b, at + 14, mo);
  }

  private writeTagged(at: number, op: number, last: boolean, stag: number, toHi: number, toLo: number): void {
    const b = (this.framer as TxFramer).slab;
    b[at] = DDP_TAGGED | (last ? DDP_LAST : 0) | DDP_VERSION;
    b[at + 1] = (RDMAP_VERSION << 6) | op;
    setU32BE(b, at + 2, stag);
    setU32BE(b, at + 6, toHi);
    setU32BE(b, at + 10, toLo);
  }

  /** Emits the payload of `e` (its SGEs) in segments; `header(seg, moOrOffset, last, len)` writes each header. */
  private emitSend(e: SqEntry): void {
    const fr = this.framer as TxFramer;
    const inv = e.opcode === WrOpcode.SEND_WITH_INV;
    const se = (e.flags & SendFlags.SOLICITED) !== 0;
    const op = inv ? (se ? Op.SEND_SE_INV : Op.SEND_INV) : se ? Op.SEND_SE : Op.SEND;
    const maxPayload = (this.params as StreamParams).mulpdu - (UNTAGGED_HEADER - 2);
    const msn = this.txMsn[QN_SEND]++;
    let mo = 0;
    this.txSge = 0;
    this.txSgeOff = 0;
    do {
      const len = Math.min(maxPayload, e.total - mo);
      const last = mo + len === e.total;
      const at = fr.begin(UNTAGGED_HEADER - 2 + len, UNTAGGED_HEADER - 2);
      this.writeUntagged(at, op, last, QN_SEND, msn, mo, inv ? e.invRkey : 0);
      this.emitPayload(fr, e, len);
      fr.end();
      mo += len;
    } while (mo < e.total);
  }

  private emitWrite(e: SqEntry): void {
    const fr = this.framer as TxFramer;
    const maxPayload = (this.params as StreamParams).mulpdu - (TAGGED_HEADER - 2);
    let off = 0;
    this.txSge = 0;
    this.txSgeOff = 0;
    do {
      const len = Math.min(maxPayload, e.total - off);
      const last = off + len === e.total;
      const lo = e.toLo + off;
      const at = fr.begin(TAGGED_HEADER - 2 + len, TAGGED_HEADER - 2);
      this.writeTagged(at, Op.WRITE, last, e.rkey, (e.toHi + Math.floor(lo / TWO32)) >>> 0, lo >>> 0);
      this.emitPayload(fr, e, len);
      fr.end();
      off += len;
    } while (off < e.total);
  }

  /**
   * Hands the next `len` bytes of `e`'s scatter-gather list to the framer as views (no copy), resuming
   * where the previous segment of the same work request stopped (`txSge`/`txSgeOff`).
   */
  private emitPayload(fr: TxFramer, e: SqEntry, len: number): void {
    let left = len;
    while (left > 0) {
      const avail = e.lengths[this.txSge] - this.txSgeOff;
      if (avail === 0) {
        this.txSge++;
        this.txSgeOff = 0;
        continue;
      }
      const n = Math.min(avail, left);
      const start = e.offsets[this.txSge] + this.txSgeOff;
      fr.payload(e.mrs[this.txSge], start, start + n);
      this.txSgeOff += n;
      left -= n;
    }
  }

  private emitZeroLengthWrite(): void {
    const fr = this.framer as TxFramer;
    const at = fr.begin(TAGGED_HEADER - 2, TAGGED_HEADER - 2);
    this.writeTagged(at, Op.WRITE, true, 0, 0, 0);
    fr.end();
  }

  /**
   * The Read RTR: a Read Request for zero bytes, sink STag 0 at offset 0, source STag 1 (Linux siw's
   * choice: some hardware treats STag 0 as special). It holds a Read credit (ORD) until its Read Response
   * comes, which completes no work request (`RTR_READ` in the ORQ).
   */
  private emitRtrRead(): void {
    this.emitReadRequestFrame(0, 0, 0, 0, 1, 0, 0);
    this.readsOutstanding++;
    this.orq.push(RTR_READ);
  }

  private emitReadRequest(e: SqEntry): void {
    const sink = e.nsge > 0 ? e.mrs[0] : undefined;
    this.emitReadRequestFrame(
      sink ? e.keys[0] : 0,
      sink ? sink.iovaHi : 0,
      sink ? e.offsets[0] : 0,
      e.total,
      e.rkey,
      e.toHi,
      e.toLo,
    );
  }

  /** One RDMA Read Request FPDU (RFC 5040 §4.4): its Data Sink, its size, its Data Source. */
  private emitReadRequestFrame(
    sinkStag: number,
    sinkHi: number,
    sinkLo: number,
    size: number,
    srcStag: number,
    srcHi: number,
    srcLo: number,
  ): void {
    const fr = this.framer as TxFramer;
    const hdr = UNTAGGED_HEADER - 2 + READ_REQUEST_BODY;
    const at = fr.begin(hdr, hdr);
    this.writeUntagged(at, Op.READ_REQUEST, true, QN_READ_REQUEST, this.txMsn[QN_READ_REQUEST]++, 0, 0);
    const b = fr.slab;
    const p = at + UNTAGGED_HEADER - 2;
    setU32BE(b, p, sinkStag);
    setU32BE(b, p + 4, sinkHi);
    setU32BE(b, p + 8, sinkLo);
    setU32BE(b, p + READ_REQUEST_SIZE_AT, size);
    setU32BE(b, p + 16, srcStag);
    setU32BE(b, p + 20, srcHi);
    setU32BE(b, p + 24, srcLo);
    fr.end();
  }

  private emitReadResponse(job: ReadResponseJob): void {
    const fr = this.framer as TxFramer;
    const maxPayload = (this.params as StreamParams).mulpdu - (TAGGED_HEADER - 2);
    let off = 0;
    do {
      const len = Math.min(maxPayload, job.length - off);
      const last = off + len === job.length;
      const lo = job.sinkToLo + off;
      const at = fr.begin(TAGGED_HEADER - 2 + len, TAGGED_HEADER - 2);
      this.writeTagged(
        at,
        Op.READ_RESPONSE,
        last,
        job.sinkStag,
        (job.sinkToHi + Math.floor(lo / TWO32)) >>> 0,
        lo >>> 0,
      );
      fr.payload(job.mr, job.offset + off, job.offset + off + len);
      fr.end();
      off += len;
    } while (off < job.length);
  }

  /**
   * Frames the Terminate for `c` (RFC 5040 §4.8). `offending` holds the start of the received FPDU that
   * caused it (MPA length, DDP header, RDMAP header: `hdr`'s layout), or is undefined when no received
   * segment did (a local error). The Terminate Control word's Hdrct bits say which of those headers follow
   * it (`terminateHdrct`); they are copied as received, the MPA length standing for the DDP Segment Length
   * (a DDP segment is an MPA ULPDU, RFC 5044 §4.1). Returns the Hdrct bits.
   */
  private emitTerminate(c: TerminateCause, offending: Buffer | undefined): number {
    const fr = this.framer as TxFramer;
    let hdrct = offending === undefined ? 0 : terminateHdrct(c, offending[2], offending[3]);
    // A MULPDU below 70 bytes has no room for the Read Request header: it is left out, R says so.
    if (hdrct & TERM_HDRCT_R && TERMINATE_MAX_ULPDU > (this.params as StreamParams).mulpdu) {
      hdrct &= ~TERM_HDRCT_R;
    }
    const copied = terminatedLength(offending, hdrct);
    const ulpdu = DDP_UNTAGGED_HEADER + TERMINATE_CONTROL + copied;
    const at = fr.begin(ulpdu, ulpdu);
    this.writeUntagged(at, Op.TERMINATE, true, QN_TERMINATE, this.txMsn[QN_TERMINATE]++, 0, 0);
    // Terminate Control: layer(4) etype(4) code(8) M D R(3) reserved(13).
    const p = at + DDP_UNTAGGED_HEADER;
    fr.slab.writeUInt32BE(
      (((c.layer & 0xf) << 28) | ((c.type & 0xf) << 24) | ((c.code & 0xff) << 16) | hdrct) >>> 0,
      p,
    );
    if (copied > 0) copySmall(offending as Buffer, 0, copied, fr.slab, p + TERMINATE_CONTROL);
    fr.end();
    return hdrct;
  }

  /**
   * The FPDU start of the Read Request behind `job`, rebuilt for a Terminate sent when its response is
   * refused later (RFC 5040 §4.8: the terminated DDP and RDMAP headers).
   * The fields are those it arrived with; only its reserved bits, which nothing keeps, read as zero.
   */
  private readRequestHeaders(job: ReadResponseJob): Buffer {
    // Once in the QP's life (the stream ends with this Terminate): not worth a buffer kept per QP.
    const b = Buffer.alloc(UNTAGGED_HEADER + READ_REQUEST_BODY);
    b.writeUInt16BE(DDP_UNTAGGED_HEADER + READ_REQUEST_BODY, 0);
    b[2] = DDP_LAST | DDP_VERSION;
    b[3] = (RDMAP_VERSION << 6) | Op.READ_REQUEST;
    setU32BE(b, 4, 0);
    setU32BE(b, 8, QN_READ_REQUEST);
    setU32BE(b, 12, job.msn);
    setU32BE(b, 16, 0);
    const p = UNTAGGED_HEADER;
    setU32BE(b, p, job.sinkStag);
    setU32BE(b, p + 4, job.sinkToHi);
    setU32BE(b, p + 8, job.sinkToLo);
    setU32BE(b, p + 12, job.length);
    setU32BE(b, p + 16, job.srcStag);
    setU32BE(b, p + 20, job.srcHi);
    setU32BE(b, p + 24, job.offset);
    return b;
  }

  // ---------------------------------------------------------------- receive

  /** Parses a socket chunk. */
  onData(chunk: Buffer): void {
    const n = chunk.length;
    let i = 0;
    const crcOn = (this.params as StreamParams).crc;
    // One DataView per read, for the small CRCs and copies of every FPDU in it (common/bytes.ts).
    const view = viewOf(chunk);
    while (i < n && !this.dead) {
      if (this.rxState === RX_HEADER && this.hdrHave === 0 && n - i >= MPA_LENGTH_SIZE) {
        const taken = this.wholeFpdu(chunk, view, i, crcOn);
        if (taken > 0) {
          i += taken;
          continue;
        }
      }
      if (this.rxState === RX_PAYLOAD) {
        const take = Math.min(this.payloadLeft, n - i);
        if (crcOn) this.rxCrc = crc32cWithView(chunk, view, i, i + take, this.rxCrc);
        this.placePayload(chunk, view, i, take);
        i += take;
        this.payloadLeft -= take;
        if (this.payloadLeft === 0) this.rxState = RX_TRAILER;
      } else if (this.rxState === RX_HEADER) {
        const take = Math.min(this.hdrNeed - this.hdrHave, n - i);
        copySmall(chunk, i, take, this.hdr, this.hdrHave);
        this.hdrHave += take;
        i += take;
        if (this.hdrHave < this.hdrNeed) continue;
        if (!this.hdrKnown) {
          this.hdrKnown = true;
          if (!this.sizeHeader()) return;
          if (this.hdrHave < this.hdrNeed) continue;
        }
        if (crcOn) this.rxCrc = crc32c(this.hdr, 0, this.hdrNeed, 0);
        this.onHeader();
        this.trailerNeed = mpaPad(this.ulpduLen) + MPA_CRC_SIZE;
        this.trailerHave = 0;
        this.rxState = this.payloadLeft > 0 ? RX_PAYLOAD : RX_TRAILER;
      } else {
        const take = Math.min(this.trailerNeed - this.trailerHave, n - i);
        copySmall(chunk, i, take, this.trailer, this.trailerHave);
        this.trailerHave += take;
        i += take;
        if (this.trailerHave < this.trailerNeed) continue;
        const pad = this.trailerNeed - MPA_CRC_SIZE;
        let crcOk = true;
        if (crcOn) {
          const crc = crc32c(this.trailer, 0, pad, this.rxCrc);
          crcOk = crc === getU32LE(this.trailer, pad);
        }
        this.rxState = RX_HEADER;
        this.hdrHave = 0;
        this.hdrNeed = 4;
        this.hdrKnown = false;
        if (!crcOk) {
          this.fatal(Term.MPA_CRC, true);
          return;
        }
        this.onFpduEnd();
      }
    }
  }

  /**
   * The common case: a whole FPDU lies in `chunk` at `i`. It is checked with one CRC over length, ULPDU
   * and pad (before anything of it is interpreted or placed) and handled without the byte-wise state
   * machine below. Returns its length, or 0 when it is not all there (the state machine takes it).
   */
  private wholeFpdu(chunk: Buffer, view: DataView, i: number, crcOn: boolean): number {
    const ulpdu = (chunk[i] << 8) | chunk[i + 1];
    const covered = MPA_LENGTH_SIZE + ulpdu + mpaPad(ulpdu);
    if (covered + MPA_CRC_SIZE > chunk.length - i) return 0;
    // Shorter than the DDP control bytes: a framing error whatever its CRC, as on the split path
    // (`sizeHeader`), so that the verdict does not depend on how the stream was read.
    if (ulpdu < 2) {
      this.fatal(Term.MPA_FPDU_START, true);
      return covered + MPA_CRC_SIZE;
    }
    if (crcOn && crc32cWithView(chunk, view, i, i + covered, 0) !== getU32LE(chunk, i + covered)) {
      this.fatal(Term.MPA_CRC, true);
      return covered + MPA_CRC_SIZE;
    }
    this.ulpduLen = ulpdu;
    this.hdrNeed = Math.min(headerLengthOf(chunk[i + 2], chunk[i + 3]), ulpdu + MPA_LENGTH_SIZE);
    copyBytes(view, i, this.hdrView, 0, this.hdrNeed);
    this.onHeader();
    if (this.payloadLeft > 0) {
      this.placePayload(chunk, view, i + this.hdrNeed, this.payloadLeft);
      this.payloadLeft = 0;
    }
    this.hdrNeed = 4;
    this.onFpduEnd();
    return covered + MPA_CRC_SIZE;
  }

  /**
   * Knows the ULPDU length and the DDP/RDMAP control bytes: how long is the header? False (the stream is
   * terminated) for a ULPDU shorter than the two control bytes already read with its length: the bytes
   * after it are its pad and CRC, so the frame cannot be parsed on from here (RFC 5044 §4: the CRC sits
   * at 2 + ULPDU_Length + pad). No DDP header is that short.
   */
  private sizeHeader(): boolean {
    this.ulpduLen = this.hdr.readUInt16BE(0);
    if (this.ulpduLen < 2) {
      this.fatal(Term.MPA_FPDU_START, true);
      return false;
    }
    // A ULPDU shorter than its header: take what it has; onHeader() reports it after the CRC check.
    this.hdrNeed = Math.min(headerLengthOf(this.hdr[2], this.hdr[3]), this.ulpduLen + 2);
    return true;
  }

  private onHeader(): void {
    const h = this.hdr;
    const ctrl = h[2];
    const rd = h[3];
    const op = rd & 0x0f;
    const tagged = (ctrl & DDP_TAGGED) !== 0;
    this.rxOp = op;
    this.rxLast = (ctrl & DDP_LAST) !== 0;
    this.sink = SINK_DISCARD;
    this.pendingError = undefined;
    this.pendingRecvStatus = 0;
    this.payloadLeft = this.ulpduLen + 2 - this.hdrNeed;
    const fullHeader = tagged
      ? TAGGED_HEADER
      : op === Op.READ_REQUEST
        ? UNTAGGED_HEADER + READ_REQUEST_BODY
        : op === Op.TERMINATE
          ? UNTAGGED_HEADER + TERMINATE_CONTROL
          : UNTAGGED_HEADER;
    if (this.hdrNeed < fullHeader) {
      this.pendingError = Term.MPA_FPDU_START;
      return;
    }
    if (
      !this.gotFirstFpdu &&
      (this.params as StreamParams).expectRtr !== Rtr.NONE &&
      !this.isRtr(tagged, op) &&
      (tagged || op !== Op.TERMINATE)
    ) {
      // Nothing of it is placed or delivered: the stream ends when its CRC has been checked. A Terminate
      // is the exception: an initiator may end the connection with one before any RTR (RFC 6581 §9 names
      // its setup errors, e.g. insufficient IRD), and it is taken as what it is, not answered.

      this.pendingError = Term.MPA_NO_MATCHING_RTR;
      return;
    }
    if ((ctrl & 3) !== DDP_VERSION) {
      this.pendingError = tagged ? Term.DDP_T_VERSION : Term.DDP_U_VERSION;
      return;
    }
    if (rd >>> 6 !== RDMAP_VERSION) {
      this.pendingError = Term.RDMAP_VERSION;
      return;
    }
    if (tagged) {
      if (op !== Op.WRITE && op !== Op.READ_RESPONSE) {
        this.pendingError = Term.RDMAP_OPCODE;
        return;
      }
      const stag = getU32BE(h, 4);
      const toHi = getU32BE(h, 8);
      const toLo = getU32BE(h, 12);
      const len = this.payloadLeft;
      if (op === Op.READ_RESPONSE) {
        const pos = this.orq[0];
        if (pos === undefined) {
          this.pendingError = Term.RDMAP_OPCODE;
          return;
        }
        if (pos === RTR_READ) {
          // The answer to our Read RTR: to the sink we named (STag 0), nothing in it, in one segment.
          if (stag !== 0 || len !== 0 || !this.rxLast) this.pendingError = Term.DDP_T_STAG_NOT_ASSOC;
          return;
        }
        const e = this.sq[pos % this.sq.length];
        if (e.nsge === 0 ? stag !== 0 || len !== 0 : stag !== e.keys[0]) {
          this.pendingError = Term.DDP_T_STAG_NOT_ASSOC;
          return;
        }
        // RFC 5040 §4.4 / §4.6: the Read Response fills the Data Sink the Read Request named, from its
        // tagged offset on, segment after segment, and ends with the Read's size: anything else would
        // place bytes where this Read did not ask for them (Linux siw terminates the same way).
        if (e.nsge > 0 && (toHi !== e.mrs[0].iovaHi || toLo !== e.offsets[0] + e.placed)) {
          this.pendingError = Term.DDP_T_BASE_BOUNDS;
          return;
        }
        e.placed += len;
        if (e.placed > e.total || (this.rxLast && e.placed !== e.total)) {
          this.pendingError = Term.DDP_T_BASE_BOUNDS;
          return;
        }
      }
      if (len === 0) return; // a zero-length tagged segment (RTR) is not validated
      const err = this.checkTagged(stag, toHi, toLo, len, Access.REMOTE_WRITE, false);
      if (err !== undefined) {
        this.pendingError = err;
        return;
      }
      this.sink = SINK_TAGGED;
      this.sinkMr = this.stags.byIndex(stag) as SoftMr;
      this.sinkPos = toLo;
      return;
    }
    const qn = getU32BE(h, 8);
    const msn = getU32BE(h, 12);
    const mo = getU32BE(h, 16);
    switch (op) {
      case Op.SEND:
      case Op.SEND_INV:
      case Op.SEND_SE:
      case Op.SEND_SE_INV: {
        if (qn !== QN_SEND) {
          this.pendingError = Term.DDP_U_INVALID_QN;
          return;
        }
        if (msn !== this.rxMsn[QN_SEND]) {
          this.pendingError = Term.DDP_U_MSN_RANGE;
          return;
        }
        if (mo !== this.recvMo) {
          this.pendingError = Term.DDP_U_INVALID_MO;
          return;
        }
        if (mo === 0) {
          if (this.rqHead === this.rqTail) {
            this.pendingError = Term.DDP_U_NO_BUFFER;
            return;
          }
          const r = this.rq[this.rqHead % this.rq.length];
          this.recvCur = r;
          for (let k = 0; k < r.nsge; k++) {
            const mr = r.mrs[k];
            if (
              mr.deregistered ||
              !mr.valid ||
              mr.lkey !== r.keys[k] ||
              mr.pd !== this.pd ||
              !(mr.access & Access.LOCAL_WRITE) ||
              r.offsets[k] + r.lengths[k] > mr.length
            ) {
              this.pendingRecvStatus = WcStatus.LOC_PROT_ERR;
              this.pendingError = Term.LOCAL_CATASTROPHIC;
              return;
            }
          }
        }
        const r = this.recvCur as RqEntry;
        if (mo + this.payloadLeft > r.total) {
          this.pendingRecvStatus = WcStatus.LOC_LEN_ERR;
          this.pendingError = Term.DDP_U_TOO_LONG;
          return;
        }
        this.recvMo = mo + this.payloadLeft;
        this.sink = SINK_RECV;
        this.sinkPos = mo;
        if (op === Op.SEND_INV || op === Op.SEND_SE_INV) {
          this.recvHasInv = true;
          this.recvInvalidated = getU32BE(h, 4);
        }
        return;
      }
      case Op.READ_REQUEST: {
        if (qn !== QN_READ_REQUEST) {
          this.pendingError = Term.DDP_U_INVALID_QN;
          return;
        }
        if (msn !== this.rxMsn[QN_READ_REQUEST]) {
          this.pendingError = Term.DDP_U_MSN_RANGE;
          return;
        }
        if (mo !== 0 || !this.rxLast) {
          this.pendingError = Term.DDP_U_INVALID_MO;
          return;
        }
        // More Read Requests outstanding than our IRD: the MSN is outside the advertised range.
        if (this.irq.length >= (this.params as StreamParams).ird) {
          this.pendingError = Term.DDP_U_MSN_RANGE;
          return;
        }
        if (this.payloadLeft !== 0) {
          this.pendingError = Term.DDP_U_TOO_LONG;
          return;
        }
        return;
      }
      case Op.TERMINATE: {
        if (qn !== QN_TERMINATE) {
          this.pendingError = Term.DDP_U_INVALID_QN;
          return;
        }
        this.sink = SINK_SMALL;
        this.smallPos = 0;
        return;
      }
      default:
        this.pendingError = Term.RDMAP_OPCODE;
    }
  }

  /**
   * Is the segment whose header was just read the RTR the reply negotiated (RFC 6581 §5/§6)?
   * - Write RTR: a tagged Write, last, no payload. Its STag and tagged offset are not looked at: a
   *   zero-length Write's are not validated (RFC 5040 §5.1), and initiators differ (Linux siw sends
   *   STag 1, we send 0).
   * - Read RTR: a Read Request, last, asking for zero bytes (what Chelsio's iw_cxgb4 sends by default,
   *   and Linux siw when it is chosen). The rest of it is checked as any Read Request's (queue, MSN,
   *   IRD), and it is answered as one: a zero-length Read Response to the sink it names; the source STag
   *   of a zero-length Read is not validated (RFC 5040 §4.4).
   */
  private isRtr(tagged: boolean, op: number): boolean {
    if ((this.params as StreamParams).expectRtr === Rtr.WRITE) {
      return tagged && op === Op.WRITE && this.rxLast && this.payloadLeft === 0;
    }
    return (
      !tagged &&
      op === Op.READ_REQUEST &&
      this.rxLast &&
      this.payloadLeft === 0 &&
      this.hdr.readUInt32BE(UNTAGGED_HEADER + READ_REQUEST_SIZE_AT) === 0
    );
  }

  /** Tagged-buffer checks for a Write target / Read Response sink (DDP codes) or a Read source (RDMAP codes). */
  private checkTagged(
    stag: number,
    toHi: number,
    toLo: number,
    len: number,
    access: number,
    rdmap: boolean,
  ): TerminateCause | undefined {
    const mr = this.stags.byIndex(stag);
    if (mr === undefined || mr.rkey !== stag || !mr.valid)
      return rdmap ? Term.RDMAP_INVALID_STAG : Term.DDP_T_INVALID_STAG;
    if (mr.pd !== this.pd) return rdmap ? Term.RDMAP_STAG_NOT_ASSOC : Term.DDP_T_STAG_NOT_ASSOC;
    if (!(mr.access & access)) return Term.RDMAP_ACCESS_RIGHTS;
    if (toHi !== mr.iovaHi || toLo + len > mr.length)
      return rdmap ? Term.RDMAP_BASE_BOUNDS : Term.DDP_T_BASE_BOUNDS;
    return undefined;
  }

  /** Places `n` bytes of `chunk` (`view` over it) at `i` into the current sink. */
  private placePayload(chunk: Buffer, view: DataView, i: number, n: number): void {
    switch (this.sink) {
      case SINK_TAGGED:
        copyBytes(view, i, (this.sinkMr as SoftMr).view, this.sinkPos, n);
        this.sinkPos += n;
        return;
      case SINK_RECV: {
        const r = this.recvCur as RqEntry;
        let pos = this.sinkPos;
        let k = 0;
        let base = 0;
        while (n > 0) {
          while (pos >= base + r.lengths[k]) {
            base += r.lengths[k];
            k++;
          }
          const inSge = pos - base;
          const take = Math.min(n, r.lengths[k] - inSge);
          copyBytes(view, i, r.mrs[k].view, r.offsets[k] + inSge, take);
          i += take;
          n -= take;
          pos += take;
        }
        this.sinkPos = pos;
        return;
      }
      case SINK_SMALL: {
        const take = Math.min(n, this.small.length - this.smallPos);
        chunk.copy(this.small, this.smallPos, i, i + take);
        this.smallPos += take;
        return;
      }
      default:
        return;
    }
  }

  /** A whole FPDU arrived with a good CRC (or with CRC off). */
  private onFpduEnd(): void {
    if (!this.gotFirstFpdu) {
      this.gotFirstFpdu = true;
      if (!this.canTransmit) {
        this.canTransmit = true;
        this.schedulePump();
      }
      this.owner.onFirstFpdu();
    }
    if (this.pendingError !== undefined) {
      if (this.pendingRecvStatus !== 0) this.failRecvHead(this.pendingRecvStatus);
      this.fatal(
        this.pendingError,
        true,
        this.hdr,
        this.pendingError === Term.MPA_NO_MATCHING_RTR ? this.rtrError() : undefined,
      );
      return;
    }
    const h = this.hdr;
    switch (this.rxOp) {
      case Op.SEND:
      case Op.SEND_INV:
      case Op.SEND_SE:
      case Op.SEND_SE_INV:
        if (this.rxLast) this.completeRecv();
        return;
      case Op.READ_RESPONSE:
        if (this.rxLast) this.completeRead();
        return;
      case Op.READ_REQUEST: {
        this.rxMsn[QN_READ_REQUEST]++;
        const p = UNTAGGED_HEADER;
        const size = h.readUInt32BE(p + READ_REQUEST_SIZE_AT);
        const srcStag = h.readUInt32BE(p + 16);
        const srcHi = h.readUInt32BE(p + 20);
        const srcLo = h.readUInt32BE(p + 24);
        let mr: SoftMr | undefined;
        if (size > 0) {
          const err = this.checkTagged(srcStag, srcHi, srcLo, size, Access.REMOTE_READ, true);
          if (err !== undefined) {
            this.fatal(err, true, this.hdr);
            return;
          }
          mr = this.stags.byIndex(srcStag);
        }
        const job = this.irqFree.pop() ?? new ReadResponseJob();
        job.mr = mr as SoftMr;
        job.srcStag = srcStag;
        job.srcHi = srcHi;
        job.offset = srcLo;
        job.length = size;
        job.sinkStag = h.readUInt32BE(p);
        job.sinkToHi = h.readUInt32BE(p + 4);
        job.sinkToLo = h.readUInt32BE(p + 8);
        job.msn = h.readUInt32BE(12);
        if (size === 0) job.mr = { buffer: Buffer.alloc(0) } as SoftMr;
        this.irq.push(job);
        this.schedulePump();
        return;
      }
      case Op.TERMINATE: {
        // The headers of the segment it terminated follow the control word (RFC 5040 §4.8); they are
        // reported with it, as far as they fit `small` (64 bytes; the largest, M D R, take 48).
        const w = h.readUInt32BE(UNTAGGED_HEADER);
        const c = describeTerminate(w >>> 28, (w >>> 24) & 0xf, (w >>> 16) & 0xff);
        const hdrct = w & (TERM_HDRCT_M | TERM_HDRCT_D | TERM_HDRCT_R);
        this.fatal(
          c,
          false,
          undefined,
          new TerminateError(false, c, parseTerminateHeaders(hdrct, this.small, this.smallPos)),
        );
        return;
      }
      default:
        return;
    }
  }

  /** The error a responder reports when the peer's first FPDU (in `hdr`) was not the negotiated RTR. */
  private rtrError(): MpaError {
    const h = this.hdr;
    const c = Term.MPA_NO_MATCHING_RTR;
    const read = (this.params as StreamParams).expectRtr === Rtr.READ;
    return new MpaError(
      'MPA_RTR_MISMATCH',
      `the initiator's first FPDU is not the zero-length RDMA ${read ? 'Read Request' : 'Write'} RTR negotiated for peer-to-peer mode (RFC 6581 §5)`,
      {
        expected: read
          ? {
              tagged: false,
              opcode: Op.READ_REQUEST,
              last: true,
              ulpduLength: UNTAGGED_HEADER + READ_REQUEST_BODY - MPA_LENGTH_SIZE,
              readSize: 0,
            }
          : {
              tagged: true,
              opcode: Op.WRITE,
              last: true,
              ulpduLength: TAGGED_HEADER - MPA_LENGTH_SIZE,
            },
        got: {
          tagged: (h[2] & DDP_TAGGED) !== 0,
          opcode: h[3] & 0x0f,
          last: this.rxLast,
          ulpduLength: this.ulpduLen,
        },
        terminate: { layer: c.layer, type: c.type, code: c.code },
      },
    );
  }

  private completeRecv(): void {
    const r = this.recvCur as RqEntry;
    let flags = 0;
    let invalidated = 0;
    if (this.recvHasInv) {
      // RFC 5040 §5.3: invalidate the STag before the Send is reported.
      const stag = this.recvInvalidated;
      const mr = this.stags.byIndex(stag);
      if (mr === undefined || mr.rkey !== stag || !mr.valid || mr.pd !== this.pd) {
        this.failRecvHead(WcStatus.REM_INV_REQ_ERR);
        this.fatal(Term.RDMAP_CANNOT_INVALIDATE, true, this.hdr);
        return;
      }
      mr.invalidate();
      flags = WcFlags.WITH_INV;
      invalidated = stag;
    }
    const solicited = this.rxOp === Op.SEND_SE || this.rxOp === Op.SEND_SE_INV;
    const cq = this.recvCq as SoftCq;
    const wc = cq.slot();
    if (wc === undefined) {
      this.fatal(Term.LOCAL_CATASTROPHIC, true);
      return;
    }
    wc.wrId = r.wrId;
    wc.status = WcStatus.SUCCESS;
    wc.opcode = WcOpcode.RECV;
    wc.byteLen = this.recvMo;
    wc.wcFlags = flags;
    wc.immData = 0;
    wc.invalidatedRkey = invalidated;
    wc.qpNum = this.qpNum;
    wc.vendorErr = 0;
    cq.commit(solicited);
    this.rqHead++;
    this.recvCur = undefined;
    this.recvMo = 0;
    this.recvHasInv = false;
    this.rxMsn[QN_SEND]++;
  }

  private completeRead(): void {
    const pos = this.orq.shift() as number;
    if (pos === RTR_READ) {
      this.readsOutstanding--;
      this.schedulePump(); // an ORD-stalled Read may go now
      return;
    }
    const e = this.sq[pos % this.sq.length];
    e.state = ST_DONE;
    this.readsOutstanding--;
    this.reapSend();
    this.schedulePump(); // an ORD-stalled Read may go now
  }

  private failRecvHead(status: number): void {
    if (this.rqHead === this.rqTail) return;
    const r = this.rq[this.rqHead % this.rq.length];
    this.pushRecvCompletion(r.wrId, status);
    this.rqHead++;
  }

  private pushRecvCompletion(wrId: number, status: number): void {
    const cq = this.recvCq as SoftCq;
    const wc = cq.slot();
    if (wc === undefined) return;
    wc.wrId = wrId;
    wc.status = status;
    wc.opcode = WcOpcode.RECV;
    wc.byteLen = 0;
    wc.wcFlags = 0;
    wc.immData = 0;
    wc.invalidatedRkey = 0;
    wc.qpNum = this.qpNum;
    wc.vendorErr = 0;
    cq.commit(true);
  }

  private flushRecvs(): void {
    while (this.rqHead < this.rqTail) {
      this.pushRecvCompletion(this.rq[this.rqHead % this.rq.length].wrId, WcStatus.WR_FLUSH_ERR);
      this.rqHead++;
    }
  }

  // ---------------------------------------------------------------- errors

  /**
   * The stream is over. `local` = we detected `cause` (send a Terminate first, RFC 5040 §6.1), caused by
   * the received segment whose FPDU starts `offending` (`hdr`'s layout) if one did; otherwise the peer
   * terminated with `cause`. Flushes every WR and tells the owner, with `error` or else a TerminateError
   * naming the Terminate sent and the headers it carried.
   */
  fatal(cause: TerminateCause, local: boolean, offending?: Buffer, error?: Error): void {
    if (this.dead) return;
    this.dead = true;
    this.state = QpState.ERR;
    const socket = this.socket;
    let reported = error;
    if (local && socket !== undefined && !socket.destroyed && this.framer !== undefined) {
      // The frames built for the WRs already processed go first, the Terminate after them (the last FPDU
      // of the stream); `flushAll` leaves those WRs to complete as the socket takes them.
      this.flushFramer();
      const hdrct = this.emitTerminate(cause, offending);
      const sent =
        offending === undefined
          ? { hdrct }
          : parseTerminateHeaders(hdrct, offending, terminatedLength(offending, hdrct));
      reported ??= new TerminateError(true, cause, sent);
      const chunks = this.framer.take();
      for (const c of chunks) socket.write(c);
      socket.end();
      // If the peer never closes its side, do not keep the socket forever.
      setTimeout(() => socket.destroy(), 2000).unref();
    } else if (socket !== undefined) {
      socket.destroy();
    }
    this.flushAll(local ? undefined : cause);
    this.owner.onStreamDead({ terminate: { local, ...cause }, error: reported });
  }

  /** The connection ended without a Terminate (disconnect, peer closed, socket error). */
  closeStream(error?: Error): void {
    if (this.dead) return;
    this.dead = true;
    this.state = QpState.ERR;
    this.socket?.destroy();
    this.flushAll(undefined);
    this.owner.onStreamDead({ error });
  }

  /**
   * Marks every outstanding WR done (in error) and reports them; receives are flushed too. WRs whose bytes
   * a live socket still holds are the exception: they complete in `written()`.
   */
  private flushAll(remote: TerminateCause | undefined): void {
    // The socket writes views of the callers' buffers (no copy), and a completion, of any status, gives
    // the buffer back: a WR in a batch whose write callback has not come may not complete yet, or what
    // the caller puts in the buffer next goes on the wire in its place (and a Local Invalidate would
    // complete before the Read Responses framed ahead of it left). Only a local error ends the stream
    // with a live socket (`socket.end()`, so those batches go out ahead of the Terminate); otherwise the
    // socket was destroyed and reads none of them any more, and their late callbacks must find nothing.
    const socket = this.socket;
    const held =
      socket !== undefined && !socket.destroyed && this.batchEnds.length > 0
        ? this.batchEnds[this.batchEnds.length - 1]
        : this.sqFlushed;
    if (held === this.sqFlushed) this.batchEnds.length = 0;
    // Completions are reported in order: WRs finished before the first unfinished one keep their
    // status; the first unfinished one takes the blame for a remote Terminate (if it was in flight);
    // everything after it, finished or not, is flushed, since its completion was not reported yet.
    let failed = false;
    for (let p = this.sqHead; p < this.sqTail; p++) {
      const e = this.sq[p % this.sq.length];
      if (e.state === ST_DONE && e.status !== WcStatus.SUCCESS) {
        failed = true; // keeps its own error status (e.g. the WR that hit a local protection error)
        continue;
      }
      if (!failed && e.state === ST_DONE) continue;
      if (p < held && e.state === ST_SENT && e.opcode !== WrOpcode.RDMA_READ) {
        // Still in the socket: `written()` completes it, successfully unless a WR before it failed.
        if (failed) e.status = WcStatus.WR_FLUSH_ERR;
        continue;
      }
      e.status =
        !failed && remote !== undefined && e.state === ST_SENT
          ? remoteStatusFor(remote)
          : WcStatus.WR_FLUSH_ERR;
      failed = true;
      e.state = ST_DONE;
    }
    this.sqTx = this.sqTail;
    this.orq.length = 0;
    this.irq.length = 0;
    this.readsOutstanding = 0;
    this.reapSend();
    this.flushRecvs();
  }

  /**
   * Releases the QP's hold on its PD and CQs, and drops its work-queue entries once nothing is pending
   * (they hold SGE arrays and region references; a consumer may keep the QP object reachable long after).
   */
  release(): void {
    this.released = true;
    if (this.sqHead === this.sqTail) this.sq = [];
    this.sqFree = [];
    if (this.rqHead === this.rqTail) this.rq = [];
    if (this.dead) {
      // A dead stream frames and reads nothing more: its 64 KiB slab and its socket (with the socket's
      // read buffer) go, for a QP object that stays reachable. Writes still pending keep their own
      // references until the socket lets them go.
      this.framer = undefined;
      this.socket = undefined;
    }
    this.pd.qpCount--;
    (this.sendCq as SoftCq).users--;
    (this.recvCq as SoftCq).users--;
  }
}

function wcOpcodeOf(op: number): number {
  switch (op) {
    case WrOpcode.RDMA_WRITE:
      return WcOpcode.RDMA_WRITE;
    case WrOpcode.RDMA_READ:
      return WcOpcode.RDMA_READ;
    case WrOpcode.LOCAL_INV:
      return WcOpcode.LOCAL_INV;
    default:
      return WcOpcode.SEND;
  }
}

export { Layer };
