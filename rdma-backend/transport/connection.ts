/**
 * One RPC-over-RDMA connection in both roles (RFC 8166, RFC 8167, seed 004):
 *
 * - the client end (CM initiator) is the requester of forward calls and the responder of backward calls;
 * - the server end (CM acceptor) is the responder of forward calls and the requester of backward calls.
 *
 * So each end is requester in exactly one direction: `submit()` sends a forward call from a client end and
 * a backward call (inline only, RFC 8167 §4) from a server end, with that direction's credits; incoming
 * calls go to the `ResponderHandler`, answered with `reply()` / `replyError()`.
 *
 * Setup: RFC 8797 private data in the CM exchange both ways. Version negotiation (seed 004 §7): a client
 * that may use Version 2 sends one RDMA2_CONNPROP (≤ 1024 bytes, F_RESPONSE clear) and nothing more until
 * the server answers with its CONNPROP (Version 2, carrying the server's grant) or with ERR_VERS, on which
 * it falls back to Version 1 and remembers that per peer (`peerVersions`). A server answers in the version
 * the client used. Unknown properties are ignored (seed 004 §5.3.4).
 *
 * Receives: every end posts `credits + backwardCredits + CONTROL_RESERVE` Receives and reposts each one
 * as soon as its message is copied out, so that with conforming peers no Send ever finds no Receive
 * (RFC 8166 §3.3.1): the requester keeps at most min(grant, its own maximum) calls outstanding and the
 * responder never grants more than it posted.
 *
 * Connection loss: every queued and in-flight call fails with `retransmit: true`, registrations are
 * revoked, and nothing is ever resent on this connection (the pool reconnects).
 *
 * Hot path: completions are polled into a preallocated array; Send/Receive work requests and their SGEs
 * are reused; per-call state lives in pooled records indexed by the work request id.
 */

import { XdrWriter } from '../../rpc/xdr.js';
import type {
  ConnectionPrivateData,
  PropInput,
  RdmaSegment,
  RpcRdmaErrorBody,
  RpcRdmaHeader,
  RpcRdmaHeaderInput,
  V2NoMsg,
} from '../protocol/index.js';
import {
  type ChunkListsInput,
  decodePrivateData,
  ERR_CHUNK,
  ERR_VERS,
  encodeHeader,
  encodePrivateData,
  encodeV1ChunkHeader,
  encodeV2ChunkHeader,
  HeaderDecoder,
  maxChunkHeaderSize,
  RDMA_ERROR,
  RDMA_MSG,
  RDMA_NOMSG,
  RDMA2_CONNPROP,
  RDMA2_DEFAULT_RBSIZ,
  RDMA2_DONE,
  RDMA2_ERR_BAD_XDR,
  RDMA2_ERR_INVAL_HTYPE,
  RDMA2_ERR_READ_CHUNKS,
  RDMA2_ERR_REPLY_RESOURCE,
  RDMA2_ERR_SYSTEM,
  RDMA2_ERR_VERS,
  RDMA2_ERR_WRITE_CHUNKS,
  RDMA2_ERR_WRITE_RESOURCE,
  RDMA2_ERROR,
  RDMA2_MSG,
  RDMA2_NOMSG,
  RDMA2_PROPID_RBSIZ,
  RDMA2_PROPID_REQREMINV,
  RDMA2_PROPID_RPRC,
  RDMA2_REQPROP,
  RDMA2_RESPPROP,
  RDMA2_UPDPROP,
  type RdmaSegmentInput,
  type ReadSegmentInput,
  RPCRDMA_V1_DEFAULT_INLINE,
  RPCRDMA2_F_RESPONSE,
  RpcRdmaDecodeError,
} from '../protocol/index.js';
import {
  type CmEvent,
  CmEventType,
  type CompletionQueue,
  type ConnectRequest,
  createWorkCompletions,
  type Device,
  type ProtectionDomain,
  type RecvWr,
  SendFlags,
  type SendWr,
  type Sge,
  type Connection as VerbsConnection,
  WcFlags,
  WcStatus,
  type WorkCompletion,
  WrOpcode,
  wcStatusName,
} from '../verbs/index.js';
import { BufferSlab } from './buffers.js';
import { CreditWindow, Fifo } from './credits.js';
import { callTooLarge, connectionLost, peerRefused, TransportError } from './errors.js';
import {
  copyReduced,
  type DdpItem,
  groupReadChunks,
  type Insert,
  inlinePositions,
  mergeHandle,
  needsReplyChunk,
  planCall,
  planReply,
  reassemble,
  scatter,
} from './marshal.js';
import { type PropertyDisposition, PropertyExchange, type PropertyHost } from './properties.js';
import { ChunkRegistrar, type ChunkRegistration } from './registration.js';
import type {
  ConnectionCounters,
  ConnectionSnapshot,
  InboundCall,
  RequesterHandler,
  ResponderHandler,
  TransportCall,
} from './types.js';

/** Receives posted beyond the credits, for messages that carry no RPC (CONNPROP, errors, DONE). */
export const CONTROL_RESERVE = 4;
/** Send buffers kept back for control messages (error answers, CONNPROP) so calls cannot starve them. */
const CONTROL_SEND_SLOTS = 4;
/** How often a call is resent with more resources after RDMA2_ERR_*_RESOURCE / READ_CHUNKS. */
const MAX_RESOURCE_RETRIES = 2;

const KIND_RECV = 1;
const KIND_SEND = 2;
const KIND_INV = 3;
const KIND_READ = 4;
const KIND_WRITE = 5;
/** RDMA Read of a responder-provided Read chunk (seed 002) into a call's sink. */
const KIND_PULL = 6;
const KIND_SHIFT = 8;

export interface TransportOptions {
  /** Forward credits: a client asks for (and uses at most) this many; a server grants this many. */
  credits?: number;
  /** Backward credits (RFC 8167): a client grants this many; a server uses at most this many. */
  backwardCredits?: number;
  /** Our receive buffer size: the largest message we receive inline. Default 4096 (seed 004 §4.2.1). */
  recvSize?: number;
  /** The largest Receive buffer size this end may raise to at run time (RBSIZ changes). Default recvSize. */
  maxRecvSize?: number;
  /** Support the optional Version 2 extensions REQPROP / RESPPROP / UPDPROP / DONE (DESIGN §3). Default true. */
  extensions?: boolean;
  /**
   * As a requester, accept responder-provided Read chunks for replies (seed 002; announced as RPRC in
   * CONNPROP). Default: `extensions`.
   */
  rprc?: boolean;
  /** Our send buffer size: the most we ever send inline. Default 4096. */
  sendSize?: number;
  /** Highest version to propose / accept (1 or 2). Default 2. */
  maxVersion?: 1 | 2;
  /** Largest chunk (Read, Write or Reply) this end registers or accepts. Default 4 MiB. */
  maxChunkSize?: number;
  /** Reply chunk size offered when a call's maximum reply size is unknown. Default 1 MiB + 4 KiB. */
  defaultReplyChunk?: number;
  /** Responder limits, announced through RDMA2_ERR_READ_CHUNKS / WRITE_CHUNKS / SEGMENTS. */
  maxReadChunks?: number;
  maxWriteChunks?: number;
  maxSegmentsPerChunk?: number;
  /** Accept Send With Invalidate from the peer (announced in private data and REQREMINV). Default true. */
  acceptRemoteInvalidate?: boolean;
  /** Use Send With Invalidate when the peer allows it. Default true. */
  useRemoteInvalidate?: boolean;
  /** Key under which the negotiated version is remembered per peer (default host:port). */
  peerKey?: string;
  /**
   * RDMA Reads the peer may have outstanding against us (our IRD) and we against it (our ORD), offered in
   * the CM exchange; the provider negotiates them down to what both sides support. Default: provider's.
   */
  ird?: number;
  ord?: number;
}

type Resolved = Required<Omit<TransportOptions, 'peerKey' | 'ird' | 'ord'>> &
  Pick<TransportOptions, 'ird' | 'ord'>;

function resolve(o: TransportOptions): Resolved {
  return {
    credits: o.credits ?? 32,
    backwardCredits: o.backwardCredits ?? 4,
    recvSize: o.recvSize ?? 4096,
    maxRecvSize: Math.max(o.maxRecvSize ?? 0, o.recvSize ?? 4096),
    extensions: o.extensions ?? true,
    rprc: o.rprc ?? o.extensions ?? true,
    sendSize: o.sendSize ?? 4096,
    maxVersion: o.maxVersion ?? 2,
    maxChunkSize: o.maxChunkSize ?? 4 * 1024 * 1024,
    defaultReplyChunk: o.defaultReplyChunk ?? 1024 * 1024 + 4096,
    maxReadChunks: o.maxReadChunks ?? 8,
    maxWriteChunks: o.maxWriteChunks ?? 8,
    maxSegmentsPerChunk: o.maxSegmentsPerChunk ?? 64,
    acceptRemoteInvalidate: o.acceptRemoteInvalidate ?? true,
    useRemoteInvalidate: o.useRemoteInvalidate ?? true,
    ird: o.ird,
    ord: o.ord,
  };
}

/**
 * The version each peer was found to speak (seed 004 §7.2: after RDMA2_ERR_VERS, assume Version 1 on the
 * next connection to avoid a negotiation loop). Process-wide on purpose: it describes the peer.
 */
export const peerVersions = new Map<string, 1 | 2>();

interface CallState {
  index: number;
  call: TransportCall | null;
  regs: ChunkRegistration[];
  writeRegs: ChunkRegistration[];
  replyReg: ChunkRegistration | null;
  reply: Buffer | null;
  error: TransportError | null;
  /** Resend after invalidation (resources adjusted) instead of completing. */
  resend: boolean;
  abandoned: boolean;
  attempts: number;
  forcePzrc: boolean;
  noWriteChunks: boolean;
  writeNeed: number[] | null;
  replyNeed: number;
  inFlight: boolean;
  /** Responder-provided Read chunk being pulled (seed 002): the sink, the reply header, reads left. */
  pullSink: ChunkRegistration | null;
  pullHeader: V2NoMsg | null;
  pullsPending: number;
}

interface ReadJob {
  chunk: number;
  segment: RdmaSegment;
  sinkOffset: number;
}

interface InboundState {
  index: number;
  xid: number;
  version: 1 | 2;
  backward: boolean;
  inline: Buffer;
  nomsg: boolean;
  positions: number[];
  lengths: number[];
  sinks: ChunkRegistration[];
  segments: RdmaSegment[][];
  readsPending: number;
  writeChunks: RdmaSegment[][];
  replyChunk: RdmaSegment[] | null;
  invHandle: number;
  /** The handle every requester chunk shares, or 0 (no chunks) / -1 (several handles). */
  singleHandle: number;
  call: InboundCallImpl | null;
}

class InboundCallImpl implements InboundCall {
  constructor(
    readonly xid: number,
    readonly version: 1 | 2,
    readonly message: Buffer,
    readonly backward: boolean,
    readonly writeChunks: readonly (readonly RdmaSegment[])[],
    readonly replyChunk: readonly RdmaSegment[] | null,
    readonly invHandle: number,
    /** @internal */ readonly singleHandle: number,
    /** @internal */ readonly owner: RpcRdmaConnection,
  ) {}
  answered = false;
}

let nextConnectionId = 1;

export interface ConnectParams {
  device: Device;
  host: string;
  port: number;
  options?: TransportOptions;
  requester: RequesterHandler;
  responder?: ResponderHandler;
  /** Called once when the connection is gone (after every call was failed). */
  onClose?: (conn: RpcRdmaConnection, reason: string) => void;
  timeoutMs?: number;
}

export interface AcceptParams {
  device: Device;
  request: ConnectRequest;
  options?: TransportOptions;
  responder: ResponderHandler;
  /** For backward calls sent from this (server) end. */
  requester?: RequesterHandler;
  onClose?: (conn: RpcRdmaConnection, reason: string) => void;
}

const noRequester: RequesterHandler = {
  onReply() {},
  onFailed() {},
};

export class RpcRdmaConnection {
  readonly id = nextConnectionId++;
  readonly role: 'client' | 'server';
  readonly opts: Resolved;
  readonly peerKey: string;
  state: 'connecting' | 'negotiating' | 'ready' | 'closed' = 'connecting';
  /** Negotiated version (0 until known). */
  version: 0 | 1 | 2 = 0;
  /** The largest message the peer receives (its inline threshold / RBSIZ). */
  sendLimit = RPCRDMA_V1_DEFAULT_INLINE;
  /** The peer accepts Send With Invalidate (RFC 8797 flag, or REQREMINV in its CONNPROP). */
  peerAcceptsRemoteInvalidate = false;
  peerPrivateData: ConnectionPrivateData | undefined;
  closeReason = '';
  readonly counters: ConnectionCounters = {
    callsSent: 0,
    repliesReceived: 0,
    callsReceived: 0,
    repliesSent: 0,
    errorsSent: 0,
    errorsReceived: 0,
    retries: 0,
    inlineCalls: 0,
    readChunkCalls: 0,
    longCalls: 0,
    longReplies: 0,
    localInvalidations: 0,
    remoteInvalidations: 0,
    rdmaReads: 0,
    rdmaWrites: 0,
    droppedMessages: 0,
    peakReadsOutstanding: 0,
    rprcReplies: 0,
    donesSent: 0,
    bytesSent: 0,
    bytesReceived: 0,
  };

  /** Credits of the direction in which we are the requester. */
  readonly credits: CreditWindow;
  /** Credits we grant the peer for its calls. */
  readonly grant: number;
  private readonly queue = new Fifo<TransportCall>(256);
  private readonly inflight = new Map<number, number>();
  private readonly states: CallState[] = [];
  private readonly freeStates: number[] = [];
  private readonly callIndex = new WeakMap<TransportCall, number>();

  private readonly inbound: (InboundState | null)[] = [];
  private readonly freeInbound: number[] = [];
  private inboundActive = 0;
  /** RDMA Reads waiting for ORD room: `owner` is an inbound index, or a call state index when `pull`. */
  private readonly readJobs = new Fifo<{ owner: number; pull: boolean; job: ReadJob }>(64);
  /** Responder-provided Read chunks exposed for replies, by XID, until the requester's DONE (seed 002). */
  private readonly rprcPending = new Map<number, ChunkRegistration>();
  private readsOutstanding = 0;
  private ord = 1;

  private pd!: ProtectionDomain;
  private cq!: CompletionQueue;
  private vconn!: VerbsConnection;
  private recvSlab!: BufferSlab;
  private sendSlab!: BufferSlab;
  private registrar!: ChunkRegistrar;
  private readonly sendRegs: (ChunkRegistration[] | null)[] = [];
  private readonly recvWrs: RecvWr[] = [];
  private readonly wcs: WorkCompletion[] = createWorkCompletions(64);
  private readonly sge: Sge[] = [{ mr: null as never, offset: 0, length: 0 }];
  private readonly sendWr: SendWr = {
    wrId: 0,
    opcode: WrOpcode.SEND,
    flags: SendFlags.SIGNALED,
    sgList: this.sge,
  };
  private readonly w = new XdrWriter(0);
  private decoder: HeaderDecoder;
  private controlXid = 0x7f000000;
  private negotiationXid = -1;
  private requester: RequesterHandler;
  private responder: ResponderHandler | undefined;
  private readonly onClose: ((conn: RpcRdmaConnection, reason: string) => void) | undefined;
  private established: { resolve: () => void; reject: (e: Error) => void } | null = null;
  private firstMessageSeen = false;
  /** Our current Receive buffer size (RBSIZ) — new Receives are posted with it. */
  recvSize: number;
  /** The smallest Receive currently posted: what a message to us may be, whatever we announced. */
  private recvFloor: number;
  private readonly postedSize: number[] = [];
  private smallPosted = 0;
  private onReceivesResized: (() => void) | null = null;
  private readonly props: PropertyExchange;
  private readonly pendingReplies = new Fifo<{
    inbound: InboundCallImpl;
    message: Buffer;
    items: readonly DdpItem[];
  }>(16);

  private constructor(
    role: 'client' | 'server',
    options: TransportOptions,
    peerKey: string,
    requester: RequesterHandler,
    responder: ResponderHandler | undefined,
    onClose: ((conn: RpcRdmaConnection, reason: string) => void) | undefined,
  ) {
    this.role = role;
    this.opts = resolve(options);
    this.peerKey = options.peerKey ?? peerKey;
    this.requester = requester;
    this.responder = responder;
    this.onClose = onClose;
    this.credits = new CreditWindow(role === 'client' ? this.opts.credits : this.opts.backwardCredits);
    this.grant = role === 'client' ? this.opts.backwardCredits : this.opts.credits;
    this.decoder = this.makeDecoder(this.opts.maxVersion);
    this.recvSize = this.opts.recvSize;
    this.recvFloor = this.opts.recvSize;
    this.props = new PropertyExchange(this.propertyHost());
  }

  private propertyHost(): PropertyHost {
    const self = this;
    return {
      sendControl: (h) => this.sendControl(h),
      nextControlXid: () => this.nextControlXid(),
      get recvSize() {
        return self.recvSize;
      },
      get maxRecvSize() {
        return self.opts.maxRecvSize;
      },
      get sendLimit() {
        return self.sendLimit;
      },
      resizeReceives: (bytes, done) => this.resizeReceives(bytes, done),
      setPeerRecvSize: (bytes) => {
        this.sendLimit = Math.min(Math.max(bytes, RPCRDMA_V1_DEFAULT_INLINE), this.opts.sendSize);
      },
      setPeerAcceptsRemoteInvalidate: (ok) => {
        this.peerAcceptsRemoteInvalidate = ok;
      },
    };
  }

  // ----------------------------------------------------------------------------------------------------
  // Properties (properties.ts holds the exchange logic)

  /**
   * Asks the peer to change its transport properties (RDMA2_REQPROP). Resolves with the dispositions;
   * ids answered "pending" stay in `snapshot().properties.pendingAtPeer` until the peer's UPDPROP clears them.
   */
  requestProperties(want: PropInput[]): Promise<PropertyDisposition> {
    if (this.version !== 2 || this.state !== 'ready') {
      return Promise.reject(
        new TransportError(
          'ERR_TRANSPORT_NO_EXTENSIONS',
          'property changes need a ready Version 2 connection',
          false,
        ),
      );
    }
    return this.props.request(want);
  }

  /** Raises our Receive buffer size; announced (UPDPROP) once every posted Receive has the new size. */
  raiseReceiveSize(bytes: number): void {
    if (bytes > this.opts.maxRecvSize || bytes <= this.recvSize) {
      throw new TransportError('ERR_TRANSPORT_RBSIZ', `cannot raise the Receive size to ${bytes}`, false, {
        current: this.recvSize,
        max: this.opts.maxRecvSize,
      });
    }
    this.props.raise(bytes);
  }

  private resizeReceives(bytes: number, done: () => void): void {
    this.recvSize = bytes;
    if (bytes <= this.recvFloor) {
      // Lowering (the peer asked for it): posted Receives are larger, which is harmless.
      this.recvFloor = bytes;
      this.onReceivesResized = null;
      done();
      return;
    }
    this.smallPosted = 0;
    for (const n of this.postedSize) if (n < bytes) this.smallPosted++;
    this.onReceivesResized = done;
    if (this.smallPosted === 0) this.receivesResized();
  }

  private receivesResized(): void {
    this.recvFloor = this.recvSize;
    const cb = this.onReceivesResized;
    this.onReceivesResized = null;
    cb?.();
  }

  private repostReceive(slot: number): void {
    const wr = this.recvWrs[slot];
    const old = this.postedSize[slot];
    (wr.sgList[0] as Sge).length = this.recvSize;
    this.postedSize[slot] = this.recvSize;
    this.vconn.qp.postRecv(wr);
    if (this.onReceivesResized && old < this.recvSize && --this.smallPosted === 0) this.receivesResized();
  }

  /** Sends a message that carries no RPC (it lands in one of the peer's reserve Receives). */
  private sendControl(h: RpcRdmaHeaderInput): boolean {
    // The credit word means a grant when F_RESPONSE is set, a request otherwise (seed 004 §3.2).
    const v2 = h as { flags?: number; credit: number };
    v2.credit = ((v2.flags ?? 0) & RPCRDMA2_F_RESPONSE) !== 0 ? this.grant : this.credits.max;
    return this.sendHeader(h);
  }

  /**
   * Sends one header-only message from a send slot (control messages, errors, DONE). Returns false, and
   * counts a dropped message, when the connection is closed or no send slot is free.
   */
  private sendHeader(h: RpcRdmaHeaderInput, invalidateRkey = 0): boolean {
    if (this.state === 'closed') return false;
    const slot = this.sendSlab.acquire();
    if (slot < 0) {
      this.counters.droppedMessages++;
      return false;
    }
    const buf = this.sendSlab.view(slot);
    this.w.reset(buf, 0, buf.length);
    encodeHeader(this.w, h);
    this.postSendSlot(
      slot,
      this.w.length,
      invalidateRkey ? WrOpcode.SEND_WITH_INV : WrOpcode.SEND,
      invalidateRkey,
    );
    return true;
  }

  private makeDecoder(high: number): HeaderDecoder {
    return new HeaderDecoder({
      versions: { low: 1, high },
      // The extensions (REQPROP, RESPPROP, UPDPROP, DONE) are decoded when enabled; otherwise the decoder
      // answers them with INVAL_HTYPE and the peer must stop using them (DESIGN §3).
      extensions: this.opts.extensions,
      limits: {
        maxReadChunks: this.opts.maxReadChunks,
        maxWriteChunks: this.opts.maxWriteChunks,
        maxSegmentsPerChunk: this.opts.maxSegmentsPerChunk,
      },
    });
  }

  // ----------------------------------------------------------------------------------------------------
  // Setup

  /** Connects to a server (client end). Resolves once the CM connection is established. */
  static async connect(p: ConnectParams): Promise<RpcRdmaConnection> {
    const c = new RpcRdmaConnection(
      'client',
      p.options ?? {},
      `${p.host}:${p.port}`,
      p.requester,
      p.responder,
      p.onClose,
    );
    c.setupQueues(p.device);
    const pd: ConnectionPrivateData = {
      sendWithInvalidateOk: c.opts.acceptRemoteInvalidate,
      inlineSendSize: c.opts.sendSize,
      inlineRecvSize: c.opts.recvSize,
    };
    const done = new Promise<void>((resolve, reject) => {
      c.established = { resolve, reject };
    });
    c.vconn = p.device.connect({
      host: p.host,
      port: p.port,
      timeoutMs: p.timeoutMs,
      pd: c.pd,
      sendCq: c.cq,
      recvCq: c.cq,
      cap: c.qpCap(p.device),
      privateData: encodePrivateData(pd),
      ird: c.opts.ird,
      ord: c.opts.ord,
      onEvent: (e) => c.onCmEvent(e),
    });
    c.postAllReceives();
    await done;
    return c;
  }

  /** Accepts a connection request (server end). */
  static accept(p: AcceptParams): RpcRdmaConnection {
    const req = p.request;
    const c = new RpcRdmaConnection(
      'server',
      p.options ?? {},
      `${req.remoteAddress}:${req.remotePort}`,
      p.requester ?? noRequester,
      p.responder,
      p.onClose,
    );
    c.setupQueues(p.device);
    c.peerPrivateData = decodePrivateData(req.privateData);
    c.vconn = req.createConnection({
      pd: c.pd,
      sendCq: c.cq,
      recvCq: c.cq,
      cap: c.qpCap(p.device),
      onEvent: (e) => c.onCmEvent(e),
    });
    c.postAllReceives();
    c.vconn.accept({
      ird: c.opts.ird,
      ord: c.opts.ord,
      privateData: encodePrivateData({
        sendWithInvalidateOk: c.opts.acceptRemoteInvalidate,
        inlineSendSize: c.opts.sendSize,
        inlineRecvSize: c.opts.recvSize,
      }),
    });
    return c;
  }

  private get recvCount(): number {
    return this.opts.credits + this.opts.backwardCredits + CONTROL_RESERVE;
  }

  private qpCap(device: Device) {
    const maxSendWr = Math.min(device.caps.maxQpWr, 4096);
    return { maxSendWr, maxRecvWr: this.recvCount, maxSendSge: 1, maxRecvSge: 1 };
  }

  private setupQueues(device: Device): void {
    this.pd = device.allocPd();
    this.cq = device.createCq(Math.min(device.caps.maxCqe, 4096 + this.recvCount));
    this.recvSlab = new BufferSlab(this.pd, this.recvCount, this.opts.maxRecvSize);
    const sendSlots = 2 * (this.opts.credits + this.opts.backwardCredits) + 2 * CONTROL_SEND_SLOTS;
    this.sendSlab = new BufferSlab(this.pd, sendSlots, this.opts.sendSize);
    for (let i = 0; i < sendSlots; i++) this.sendRegs.push(null);
    this.registrar = new ChunkRegistrar(this.pd, this.opts.maxChunkSize);
    this.cq.setNotifyHandler(() => this.onCompletions());
    this.cq.requestNotify();
  }

  private postAllReceives(): void {
    for (let i = 0; i < this.recvCount; i++) {
      this.recvWrs.push({
        wrId: i * KIND_SHIFT + KIND_RECV,
        sgList: [{ mr: this.recvSlab.mr, offset: this.recvSlab.offset(i), length: this.recvSize }],
      });
      this.postedSize.push(this.recvSize);
      this.vconn.qp.postRecv(this.recvWrs[i]);
    }
  }

  private onCmEvent(e: CmEvent): void {
    switch (e.type) {
      case CmEventType.ESTABLISHED:
        this.ord = Math.max(1, this.vconn.ord);
        if (this.role === 'client') {
          this.peerPrivateData = decodePrivateData(e.privateData);
          this.startNegotiation();
          this.established?.resolve();
          this.established = null;
        } else {
          // The server learns the version from the client's first message (seed 004 §7.3).
          this.state = 'negotiating';
        }
        return;
      case CmEventType.DISCONNECTED:
        this.teardown(e.terminate ? `terminate ${e.terminate.name}` : (e.error?.message ?? 'disconnected'));
        return;
      case CmEventType.REJECTED:
      case CmEventType.UNREACHABLE:
      case CmEventType.ADDR_ERROR:
      case CmEventType.CONNECT_ERROR: {
        const err = connectionLost(`connect failed (event ${e.type})`, { peer: this.peerKey });
        this.established?.reject(err);
        this.established = null;
        this.teardown('connect failed');
        return;
      }
      default:
        return;
    }
  }

  /** Inline threshold of Version 1 from the peer's private data (RFC 8797 §4), else 1024 (RFC 8166 §3.3.3). */
  private v1SendLimit(): number {
    const peer = this.peerPrivateData?.inlineRecvSize ?? RPCRDMA_V1_DEFAULT_INLINE;
    return Math.min(peer, this.opts.sendSize);
  }

  private startNegotiation(): void {
    const remembered = peerVersions.get(this.peerKey);
    if (this.opts.maxVersion === 1 || remembered === 1) {
      this.useVersion(1);
      return;
    }
    this.state = 'negotiating';
    // Until the server answers, nothing larger than the Version 1 default may be sent (seed 004 §7).
    this.sendLimit = Math.min(RPCRDMA_V1_DEFAULT_INLINE, this.opts.sendSize);
    this.negotiationXid = this.nextControlXid();
    this.sendConnProp(this.negotiationXid, 0, this.credits.max);
  }

  private useVersion(v: 1 | 2): void {
    this.version = v;
    this.state = 'ready';
    if (v === 1) {
      this.sendLimit = this.v1SendLimit();
      this.peerAcceptsRemoteInvalidate = this.peerPrivateData?.sendWithInvalidateOk ?? false;
      this.decoder = this.makeDecoder(1);
    }
    this.pump();
  }

  private nextControlXid(): number {
    this.controlXid = (this.controlXid + 1) >>> 0;
    return this.controlXid;
  }

  private sendConnProp(xid: number, flags: number, credit: number): void {
    this.sendHeader({
      version: 2,
      htype: RDMA2_CONNPROP,
      xid,
      credit,
      flags,
      props: [
        { id: RDMA2_PROPID_RBSIZ, value: this.recvSize },
        { id: RDMA2_PROPID_REQREMINV, value: this.opts.acceptRemoteInvalidate },
        { id: RDMA2_PROPID_RPRC, value: this.opts.rprc },
      ],
    });
  }

  // ----------------------------------------------------------------------------------------------------
  // Requester role

  /** Sets the handler for replies to calls sent from this end. */
  setRequester(h: RequesterHandler): void {
    this.requester = h;
  }

  setResponder(h: ResponderHandler): void {
    this.responder = h;
  }

  /**
   * Sends a call (queued while negotiating or when no credit is free). The outcome arrives on the
   * requester handler; a closed connection fails the call at once with `retransmit: true`.
   */
  submit(call: TransportCall): void {
    if (this.state === 'closed') {
      const err = connectionLost(this.closeReason || 'closed', { peer: this.peerKey });
      queueMicrotask(() => this.requester.onFailed(call, err));
      return;
    }
    const idx = this.allocState(call);
    this.callIndex.set(call, idx);
    if (this.state !== 'ready' || this.queue.length > 0 || !this.canSendCall()) {
      this.queue.push(call);
      return;
    }
    this.sendCall(this.states[idx]);
  }

  /**
   * The caller no longer wants the outcome (its client went away). The call's memory stays registered and
   * fenced until the reply arrives and it is invalidated, or the connection ends (DESIGN §3 "Memory").
   */
  abandon(call: TransportCall): void {
    const idx = this.callIndex.get(call);
    if (idx === undefined) return;
    const st = this.states[idx];
    if (st.call === call) st.abandoned = true;
  }

  private canSendCall(): boolean {
    return this.credits.canSend() && this.sendSlab.available > CONTROL_SEND_SLOTS;
  }

  private allocState(call: TransportCall): number {
    let idx = this.freeStates.pop();
    if (idx === undefined) {
      idx = this.states.length;
      this.states.push({
        index: idx,
        call: null,
        regs: [],
        writeRegs: [],
        replyReg: null,
        reply: null,
        error: null,
        resend: false,
        abandoned: false,
        attempts: 0,
        forcePzrc: false,
        noWriteChunks: false,
        writeNeed: null,
        replyNeed: 0,
        inFlight: false,
        pullSink: null,
        pullHeader: null,
        pullsPending: 0,
      });
    }
    const st = this.states[idx];
    st.call = call;
    st.regs.length = 0;
    st.writeRegs.length = 0;
    st.replyReg = null;
    st.reply = null;
    st.error = null;
    st.resend = false;
    st.abandoned = false;
    st.attempts = 0;
    st.forcePzrc = false;
    st.noWriteChunks = false;
    st.writeNeed = null;
    st.replyNeed = 0;
    st.inFlight = false;
    st.pullSink = null;
    st.pullHeader = null;
    st.pullsPending = 0;
    return idx;
  }

  private freeState(st: CallState): void {
    if (st.call) this.callIndex.delete(st.call);
    st.call = null;
    st.reply = null;
    st.error = null;
    this.freeStates.push(st.index);
  }

  /** Sends queued calls while credits and send buffers allow. */
  private pump(): void {
    while (this.state === 'ready' && this.queue.length > 0 && this.canSendCall()) {
      const call = this.queue.shift() as TransportCall;
      const idx = this.callIndex.get(call);
      if (idx === undefined) continue;
      const st = this.states[idx];
      if (st.abandoned && st.regs.length === 0) {
        this.freeState(st);
        continue;
      }
      this.sendCall(st);
    }
  }

  private sendCall(st: CallState): void {
    const call = st.call as TransportCall;
    const version = this.version as 1 | 2;
    const backward = this.role === 'server';
    try {
      // RFC 8167 §4: backward-direction messages are inline only, so DDP items simply stay inline.
      const writeLens = backward || st.noWriteChunks ? [] : call.ddpResults;
      let ddpResultBytes = 0;
      for (const n of writeLens) ddpResultBytes += n;
      let replyChunkLen = 0;
      if (!backward) {
        if (st.replyNeed > 0) replyChunkLen = st.replyNeed;
        else if (
          needsReplyChunk(version, call.maxReplySize, ddpResultBytes, writeLens.length, this.recvFloor)
        ) {
          replyChunkLen =
            call.maxReplySize < 0 ? this.opts.defaultReplyChunk : call.maxReplySize - ddpResultBytes;
          replyChunkLen = Math.max(replyChunkLen, this.recvFloor);
        }
      }
      const plan = planCall({
        version,
        messageLength: call.message.length,
        items: backward ? [] : call.ddpArgs,
        sendLimit: this.sendLimit,
        writeChunks: writeLens.length,
        replyChunk: replyChunkLen > 0,
        readChunksAllowed: !st.forcePzrc,
      });
      if (backward && plan.mode !== 'inline') {
        throw callTooLarge('a backward call must fit inline (RFC 8167 §4)', {
          length: call.message.length,
          sendLimit: this.sendLimit,
        });
      }
      const chunks: ChunkListsInput = {};
      if (plan.mode === 'read') {
        const reads: ReadSegmentInput[] = [];
        for (const it of call.ddpArgs) {
          const reg = this.registrar.registerSource(call.message.subarray(it.offset, it.offset + it.length));
          st.regs.push(reg);
          reads.push({ position: it.offset, handle: reg.mr.rkey, length: it.length, offset: reg.mr.iova });
        }
        chunks.reads = reads;
        this.counters.readChunkCalls++;
      } else if (plan.mode === 'pzrc') {
        const reg = this.registrar.registerSource(call.message);
        st.regs.push(reg);
        chunks.reads = [
          { position: 0, handle: reg.mr.rkey, length: call.message.length, offset: reg.mr.iova },
        ];
        this.counters.longCalls++;
      } else {
        this.counters.inlineCalls++;
      }
      if (writeLens.length > 0) {
        const writes: RdmaSegmentInput[][] = [];
        for (let i = 0; i < writeLens.length; i++) {
          const need = st.writeNeed?.[i] ?? writeLens[i];
          const reg = this.registrar.acquireTarget(need);
          st.regs.push(reg);
          st.writeRegs.push(reg);
          writes.push([{ handle: reg.mr.rkey, length: need, offset: reg.mr.iova }]);
        }
        chunks.writes = writes;
      }
      if (replyChunkLen > 0) {
        const reg = this.registrar.acquireTarget(replyChunkLen);
        st.regs.push(reg);
        st.replyReg = reg;
        chunks.reply = [{ handle: reg.mr.rkey, length: replyChunkLen, offset: reg.mr.iova }];
      }
      // rdma_inv_handle (seed 004 §3.3): only when a single registration covers every chunk, the
      // condition under which one Send With Invalidate fences the whole call.
      const invHandle = st.regs.length === 1 ? st.regs[0].mr.rkey : 0;
      const slot = this.sendSlab.acquire();
      const buf = this.sendSlab.view(slot);
      this.w.reset(buf, 0, buf.length);
      const htype = plan.mode === 'pzrc' ? RDMA2_NOMSG : RDMA2_MSG;
      if (version === 2) encodeV2ChunkHeader(this.w, htype, call.xid, this.credits.max, 0, invHandle, chunks);
      else
        encodeV1ChunkHeader(
          this.w,
          htype === RDMA2_NOMSG ? RDMA_NOMSG : RDMA_MSG,
          call.xid,
          this.credits.max,
          chunks,
        );
      let len = this.w.length;
      if (plan.mode === 'inline') len += call.message.copy(buf, len);
      else if (plan.mode === 'read') len += copyReduced(call.message, call.ddpArgs, buf, len);
      this.credits.take();
      st.inFlight = true;
      this.inflight.set(call.xid, st.index);
      this.counters.callsSent++;
      this.postSendSlot(slot, len, WrOpcode.SEND, 0);
    } catch (e) {
      const err =
        e instanceof TransportError
          ? e
          : new TransportError('ERR_TRANSPORT_MARSHAL', (e as Error).message, false, { xid: call.xid });
      this.releaseRegs(st, true);
      this.finishCall(st, null, err);
    }
  }

  /** A reply (or an error) for one of our calls arrived. */
  private onReply(h: RpcRdmaHeader, buf: Buffer, end: number, wc: WorkCompletion): void {
    if (this.props.owns(h.xid)) {
      if (h.version === 2 && h.htype === RDMA2_ERROR) this.props.onError(h.xid, h.error.code);
      return;
    }
    const idx = this.inflight.get(h.xid);
    const pulled = h.version === 2 && h.htype === RDMA2_NOMSG && h.chunks.reads.length > 0;
    if (idx === undefined) {
      // Seed 002 §4.1.3: a reply with a responder-provided Read chunk for an XID we forgot still gets
      // its pull-completion notification, so the responder can invalidate.
      if (pulled) this.sendDone(h.xid, 0);
      this.counters.droppedMessages++;
      return;
    }
    this.inflight.delete(h.xid);
    const st = this.states[idx];
    st.inFlight = false;
    this.credits.complete(h.credit);
    if (wc.wcFlags & WcFlags.WITH_INV) {
      for (const r of st.regs) {
        if (r.mr.rkey === wc.invalidatedRkey) {
          r.remotelyInvalidated = true;
          this.counters.remoteInvalidations++;
        }
      }
    }
    const isError = h.version === 1 ? h.proc === RDMA_ERROR : h.htype === RDMA2_ERROR;
    if (pulled && h.version === 2 && h.htype === RDMA2_NOMSG) {
      this.counters.repliesReceived++;
      this.pullReply(st, h);
      return;
    }
    if (isError) {
      this.counters.errorsReceived++;
      this.onErrorReply(st, (h as { error: RpcRdmaErrorBody }).error, h.version);
    } else {
      this.counters.repliesReceived++;
      try {
        st.reply = this.reassembleReply(st, h, buf, end);
      } catch (e) {
        st.error =
          e instanceof TransportError
            ? e
            : new TransportError('ERR_TRANSPORT_BAD_REPLY', (e as Error).message, false, { xid: h.xid });
      }
    }
    this.invalidateThenComplete(st);
  }

  private reassembleReply(st: CallState, h: RpcRdmaHeader, buf: Buffer, end: number): Buffer {
    const chunks = (h as { chunks: { writes: RdmaSegment[][]; reply: RdmaSegment[] | null } }).chunks;
    const nomsg = h.version === 1 ? h.proc === RDMA_NOMSG : h.htype === RDMA2_NOMSG;
    let inline: Buffer;
    if (nomsg && st.pullSink) {
      inline = st.pullSink.mr.buffer.subarray(
        0,
        sumLengths((h as { chunks: { reads: RdmaSegment[] } }).chunks.reads),
      );
    } else if (nomsg) {
      if (!st.replyReg || !chunks.reply) {
        throw new TransportError(
          'ERR_TRANSPORT_BAD_REPLY',
          'RDMA_NOMSG reply without our Reply chunk',
          false,
          {
            xid: h.xid,
          },
        );
      }
      const n = sumLengths(chunks.reply);
      if (n > st.replyReg.mr.length) {
        throw new TransportError(
          'ERR_TRANSPORT_BAD_REPLY',
          'peer claims more Reply chunk bytes than offered',
          false,
          {
            xid: h.xid,
            claimed: n,
          },
        );
      }
      this.counters.longReplies++;
      inline = st.replyReg.mr.buffer.subarray(0, n);
    } else {
      inline = buf.subarray(h.payloadOffset, end);
    }
    const writes = chunks.writes;
    if (writes.length === 0 || st.writeRegs.length === 0) return Buffer.from(inline);
    const call = st.call as TransportCall;
    const inserts: Insert[] = [];
    for (let i = 0; i < writes.length && i < st.writeRegs.length; i++) {
      const n = sumLengths(writes[i]);
      const reg = st.writeRegs[i];
      if (n > reg.mr.length) {
        throw new TransportError(
          'ERR_TRANSPORT_BAD_REPLY',
          'peer claims more Write chunk bytes than offered',
          false,
          {
            xid: h.xid,
            chunk: i,
            claimed: n,
          },
        );
      }
      // An empty Write chunk (a failed READ, an empty file) leaves the Payload stream whole: nothing to
      // re-insert, and the result it was offered for may not even be in the reply.
      if (n === 0) continue;
      const locate = this.requester.locateResult;
      if (!locate) {
        throw new TransportError(
          'ERR_TRANSPORT_NO_LOCATOR',
          'Write chunk data returned but no locateResult hook',
          false,
        );
      }
      const at = locate.call(this.requester, call, inline, i);
      if (at < 0) {
        throw new TransportError(
          'ERR_TRANSPORT_CHUNK_POSITION',
          'peer wrote Write chunk data for a result the reply does not carry',
          false,
          { xid: h.xid, chunk: i, length: n },
        );
      }
      inserts.push({ at, data: reg.mr.buffer.subarray(0, n) });
    }
    inserts.sort((a, b) => a.at - b.at);
    const out = reassemble(inline, inserts);
    return out === inline ? Buffer.from(inline) : out;
  }

  /**
   * A reply that the responder exposes in a Position-Zero Read chunk (seed 002 §4.1.2): RDMA Read it,
   * reassemble, then notify pull completion with RDMA2_DONE (Send With Invalidate of the responder's
   * rkey when it accepts that) before our own chunks are invalidated and the call completes.
   */
  private pullReply(st: CallState, h: V2NoMsg): void {
    const reads = h.chunks.reads;
    let total = 0;
    let bad = !this.opts.rprc;
    for (const r of reads) {
      if (r.position !== 0) bad = true;
      total += r.length;
    }
    if (bad || total > this.opts.maxChunkSize) {
      // Seed 002 §4.1.3: a requester that cannot take it still notifies, and ends the transaction.
      this.sendDone(h.xid, 0);
      st.error = new TransportError(
        'ERR_TRANSPORT_RPRC_REFUSED',
        'cannot pull a responder-provided Read chunk',
        false,
        {
          xid: h.xid,
          length: total,
        },
      );
      this.invalidateThenComplete(st);
      return;
    }
    st.pullSink = this.registrar.acquireTarget(Math.max(total, 1));
    st.regs.push(st.pullSink);
    st.pullHeader = h;
    let off = 0;
    for (const seg of reads) {
      if (seg.length === 0) continue;
      st.pullsPending++;
      this.readJobs.push({ owner: st.index, pull: true, job: { chunk: 0, segment: seg, sinkOffset: off } });
      off += seg.length;
    }
    if (st.pullsPending === 0) this.onPullDone(st.index, true);
    else this.pumpReads();
  }

  private onPullDone(idx: number, none = false): void {
    if (!none) this.readsOutstanding--;
    const st = this.states[idx];
    if (st.pullHeader && (none || --st.pullsPending === 0)) {
      const h = st.pullHeader as V2NoMsg;
      st.pullHeader = null;
      try {
        st.reply = this.reassembleReply(st, h, EMPTY, 0);
      } catch (e) {
        st.error =
          e instanceof TransportError
            ? e
            : new TransportError('ERR_TRANSPORT_BAD_REPLY', (e as Error).message, false, { xid: h.xid });
      }
      const handles = h.chunks.reads;
      const one = handles.every((r) => r.handle === handles[0].handle) ? handles[0].handle : 0;
      this.sendDone(h.xid, this.peerPrivateData?.sendWithInvalidateOk ? one : 0);
      this.invalidateThenComplete(st);
    }
    this.pumpReads();
  }

  /** RDMA2_DONE: pull completion for `xid` (seed 002 §4.1.3), With Invalidate of `rkey` when non-zero. */
  private sendDone(xid: number, rkey: number): void {
    // The XID is the requester's own: F_RESPONSE clear, the credit word is a request (seed 004 §3.2).
    const h = { version: 2, htype: RDMA2_DONE, xid, credit: this.credits.max, flags: 0 } as const;
    if (this.sendHeader(h, rkey)) this.counters.donesSent++;
  }

  private onErrorReply(st: CallState, err: RpcRdmaErrorBody, version: number): void {
    const call = st.call as TransportCall;
    const retryable = st.attempts < MAX_RESOURCE_RETRIES && version === 2;
    switch (err.code) {
      case RDMA2_ERR_READ_CHUNKS:
        // Seed 004 §5.3.3: resend with a Position-Zero Read chunk, unless it already was one.
        if (retryable && !st.forcePzrc && st.regs.length > 0 && (err.maxChunks ?? 0) < call.ddpArgs.length) {
          st.forcePzrc = true;
          st.resend = true;
          return;
        }
        break;
      case RDMA2_ERR_WRITE_CHUNKS:
        // Resend with no Write chunks and a Reply chunk large enough for the results.
        if (retryable && !st.noWriteChunks && call.ddpResults.length > 0) {
          st.noWriteChunks = true;
          st.resend = true;
          return;
        }
        break;
      case RDMA2_ERR_WRITE_RESOURCE: {
        const i = (err.chunkIndex ?? 0) - 1;
        const need = err.lengthNeeded ?? 0;
        if (retryable && i >= 0 && i < call.ddpResults.length && need > 0 && need <= this.opts.maxChunkSize) {
          st.writeNeed = st.writeNeed ?? call.ddpResults.slice();
          st.writeNeed[i] = need;
          st.resend = true;
          return;
        }
        break;
      }
      case RDMA2_ERR_REPLY_RESOURCE: {
        const need = err.lengthNeeded ?? 0;
        if (retryable && need > 0 && need <= this.opts.maxChunkSize && this.role === 'client') {
          st.replyNeed = need;
          st.resend = true;
          return;
        }
        break;
      }
      case RDMA2_ERR_VERS:
        if (this.version === 2) peerVersions.set(this.peerKey, 1);
        break;
      default:
        break;
    }
    st.error = peerRefused(err.code, version, { xid: call.xid, ...err });
  }

  /** Local Invalidate of every region the peer did not invalidate, then completion (RFC 8166 §3.4.6 note). */
  private invalidateThenComplete(st: CallState): void {
    let last = -1;
    for (let i = 0; i < st.regs.length; i++) if (!st.regs[i].remotelyInvalidated) last = i;
    if (last < 0) {
      this.onInvalidated(st);
      return;
    }
    for (let i = 0; i <= last; i++) {
      const r = st.regs[i];
      if (r.remotelyInvalidated) continue;
      this.sendWr.wrId = st.index * KIND_SHIFT + KIND_INV;
      this.sendWr.opcode = WrOpcode.LOCAL_INV;
      // Only the last is signaled: send-queue completions are in order, so it implies the others.
      this.sendWr.flags = i === last ? SendFlags.SIGNALED : 0;
      this.sendWr.sgList = EMPTY_SGL;
      this.sendWr.invalidateRkey = r.mr.rkey;
      this.counters.localInvalidations++;
      this.postSend();
    }
    this.sendWr.sgList = this.sge;
    this.sendWr.invalidateRkey = undefined;
  }

  private onInvalidated(st: CallState): void {
    this.releaseRegs(st, false);
    if (st.resend && this.state !== 'closed') {
      st.resend = false;
      st.attempts++;
      this.counters.retries++;
      this.queue.push(st.call as TransportCall);
      this.pump();
      return;
    }
    this.finishCall(st, st.reply, st.error);
    this.pump();
  }

  private releaseRegs(st: CallState, revoke: boolean): void {
    for (const r of st.regs) this.registrar.release(r, revoke);
    st.regs.length = 0;
    st.writeRegs.length = 0;
    st.replyReg = null;
  }

  private finishCall(st: CallState, reply: Buffer | null, error: TransportError | null): void {
    const call = st.call as TransportCall;
    const abandoned = st.abandoned;
    this.freeState(st);
    if (abandoned) return;
    if (reply && !error) this.requester.onReply(call, reply);
    else
      this.requester.onFailed(call, error ?? new TransportError('ERR_TRANSPORT_INTERNAL', 'no reply', false));
  }

  // ----------------------------------------------------------------------------------------------------
  // Receive dispatch

  private onCompletions(): void {
    this.cq.requestNotify();
    let n = this.cq.poll(this.wcs);
    while (n > 0) {
      for (let i = 0; i < n; i++) {
        try {
          this.onCompletion(this.wcs[i]);
        } catch (e) {
          // A throwing user handler must not leave completions unprocessed (credits and Receives would
          // drift): finish the batch, and let the error surface on its own tick.
          queueMicrotask(() => {
            throw e;
          });
        }
      }
      n = this.cq.poll(this.wcs);
    }
  }

  private onCompletion(wc: WorkCompletion): void {
    const kind = wc.wrId % KIND_SHIFT;
    const slot = (wc.wrId - kind) / KIND_SHIFT;
    if (wc.status !== WcStatus.SUCCESS) {
      // Fatal for the connection (hardware semantics): DISCONNECTED follows and fails every call.
      if (wc.status !== WcStatus.WR_FLUSH_ERR) this.closeReason ||= `completion ${wcStatusName(wc.status)}`;
      if (kind === KIND_SEND) this.releaseSendSlot(slot);
      return;
    }
    switch (kind) {
      case KIND_RECV:
        this.onReceive(slot, wc);
        return;
      case KIND_SEND:
        this.releaseSendSlot(slot);
        this.flushPendingReplies();
        this.pump();
        return;
      case KIND_INV:
        this.onInvalidated(this.states[slot]);
        return;
      case KIND_READ:
        this.onReadDone(slot);
        return;
      case KIND_PULL:
        this.onPullDone(slot);
        return;
      default:
        return;
    }
  }

  private onReceive(slot: number, wc: WorkCompletion): void {
    const buf = this.recvSlab.view(slot);
    const end = wc.byteLen;
    this.counters.bytesReceived += end;
    try {
      this.dispatch(buf, end, wc);
    } finally {
      // Everything needed was copied out: the Receive goes straight back (credits stay honest).
      if (this.state !== 'closed') this.repostReceive(slot);
    }
  }

  private dispatch(buf: Buffer, end: number, wc: WorkCompletion): void {
    let h: RpcRdmaHeader;
    try {
      h = this.decoder.decode(buf, 0, end);
    } catch (e) {
      if (e instanceof RpcRdmaDecodeError) this.answerDecodeError(e);
      else this.counters.droppedMessages++;
      return;
    }
    if (this.role === 'client' && this.state === 'negotiating') {
      this.onNegotiationAnswer(h);
      return;
    }
    if (this.role === 'server' && !this.firstMessageSeen) {
      this.firstMessageSeen = true;
      this.version = h.version;
      this.state = 'ready';
      if (h.version === 1) {
        this.sendLimit = this.v1SendLimit();
        this.peerAcceptsRemoteInvalidate = this.peerPrivateData?.sendWithInvalidateOk ?? false;
      } else {
        this.sendLimit = Math.min(RDMA2_DEFAULT_RBSIZ, this.opts.sendSize);
        this.peerAcceptsRemoteInvalidate = this.peerPrivateData?.sendWithInvalidateOk ?? false;
        // CONNPROP first in our direction too (seed 004 §5.3.4), carrying our grant.
        this.sendConnProp(
          h.htype === RDMA2_CONNPROP ? h.xid : this.nextControlXid(),
          RPCRDMA2_F_RESPONSE,
          this.grant,
        );
      }
      if (h.version === 2 && h.htype === RDMA2_CONNPROP) {
        this.props.applyConnProp(h.props);
        this.pump();
        return;
      }
      this.pump();
    }
    if (h.version !== this.version) {
      // Seed 004 §7.3: the version does not change during a connection.
      this.sendError(h.xid, h.version === 2 ? 2 : 1, {
        code: ERR_VERS,
        versLow: this.version,
        versHigh: this.version,
      });
      return;
    }
    if (h.version === 1) {
      if (h.proc === RDMA_ERROR) {
        this.onReply(h, buf, end, wc);
        return;
      }
      if (h.proc !== RDMA_MSG && h.proc !== RDMA_NOMSG) {
        this.sendError(h.xid, 1, { code: ERR_CHUNK });
        return;
      }
      // Version 1 has no direction flag: an inline message says by its msg_type (RFC 8167 §4); a
      // NOMSG is always a forward message (backward ones are inline only).
      let isCall: boolean;
      if (h.proc === RDMA_MSG) {
        if (end - h.payloadOffset < 8) {
          this.sendError(h.xid, 1, { code: ERR_CHUNK });
          return;
        }
        isCall = buf.readUInt32BE(h.payloadOffset + 4) === 0;
      } else {
        isCall = this.role === 'server';
      }
      if (isCall) this.onInboundCall(h.xid, 1, h.proc === RDMA_NOMSG, h.chunks, 0, buf, h.payloadOffset, end);
      else this.onReply(h, buf, end, wc);
      return;
    }
    switch (h.htype) {
      case RDMA2_MSG:
      case RDMA2_NOMSG: {
        const response = (h.flags & RPCRDMA2_F_RESPONSE) !== 0;
        if (h.htype === RDMA2_MSG) {
          // Seed 004 §3.2: the flag MUST equal the RPC msg_type of an inline message.
          const msgType = end - h.payloadOffset >= 8 ? buf.readUInt32BE(h.payloadOffset + 4) : -1;
          if (msgType !== (response ? 1 : 0)) {
            this.sendError(h.xid, 2, { code: RDMA2_ERR_BAD_XDR });
            return;
          }
        }
        if (response) this.onReply(h, buf, end, wc);
        else
          this.onInboundCall(
            h.xid,
            2,
            h.htype === RDMA2_NOMSG,
            h.chunks,
            h.invHandle,
            buf,
            h.payloadOffset,
            end,
          );
        return;
      }
      case RDMA2_ERROR:
        this.onReply(h, buf, end, wc);
        return;
      case RDMA2_CONNPROP:
        this.props.applyConnProp(h.props);
        if ((h.flags & RPCRDMA2_F_RESPONSE) !== 0 && this.role === 'client') this.credits.update(h.credit);
        this.pump();
        return;
      case RDMA2_REQPROP:
        this.props.onReqProp(h.xid, h.want);
        return;
      case RDMA2_RESPPROP:
        this.props.onRespProp(h);
        return;
      case RDMA2_UPDPROP:
        this.props.onUpdProp(h);
        return;
      case RDMA2_DONE:
        this.onDone(h.xid, wc);
        return;
      default:
        this.sendError((h as { xid: number }).xid, 2, { code: RDMA2_ERR_INVAL_HTYPE });
        return;
    }
  }

  private onNegotiationAnswer(h: RpcRdmaHeader): void {
    if (h.version === 2 && h.htype === RDMA2_CONNPROP) {
      this.props.applyConnProp(h.props);
      this.credits.update(h.credit);
      peerVersions.set(this.peerKey, 2);
      this.useVersion(2);
      return;
    }
    const isErr = (h.version === 1 && h.proc === RDMA_ERROR) || (h.version === 2 && h.htype === RDMA2_ERROR);
    if (isErr && (h as { error: RpcRdmaErrorBody }).error.code === ERR_VERS) {
      const e = (h as { error: RpcRdmaErrorBody }).error;
      if ((e.versLow ?? 1) <= 1) {
        // Seed 004 §7.2: continue in a version the server supports, and remember it for this peer.
        peerVersions.set(this.peerKey, 1);
        this.useVersion(1);
        return;
      }
    }
    if (h.version === 2 && (h.htype === RDMA2_MSG || h.htype === RDMA2_NOMSG)) {
      // A Version 2 server that did not send CONNPROP first: accept its version anyway.
      peerVersions.set(this.peerKey, 2);
      this.useVersion(2);
      return;
    }
    this.counters.droppedMessages++;
    this.close('version negotiation failed');
  }

  // ----------------------------------------------------------------------------------------------------
  // Responder role

  private onInboundCall(
    xid: number,
    version: 1 | 2,
    nomsg: boolean,
    chunks: {
      reads: { position: number; handle: number; length: number; offset: bigint }[];
      writes: RdmaSegment[][];
      reply: RdmaSegment[] | null;
    },
    invHandle: number,
    buf: Buffer,
    payloadOffset: number,
    end: number,
  ): void {
    const backward = this.role === 'client';
    this.counters.callsReceived++;
    const errCode = (code: number) => (version === 1 ? ERR_CHUNK : code);
    if (!this.responder) {
      this.sendError(xid, version, { code: errCode(RDMA2_ERR_SYSTEM) });
      return;
    }
    if (backward && (chunks.reads.length > 0 || chunks.writes.length > 0 || chunks.reply)) {
      // RFC 8167 §4: backward messages carry no chunks.
      this.sendError(xid, version, { code: errCode(RDMA2_ERR_BAD_XDR) });
      return;
    }
    const grouped = groupReadChunks(chunks.reads);
    if (grouped === null) {
      this.sendError(xid, version, { code: errCode(RDMA2_ERR_BAD_XDR) });
      return;
    }
    const { positions, lengths, segments } = grouped;
    let single = grouped.singleHandle;
    for (const w of chunks.writes) for (const s of w) single = mergeHandle(single, s.handle);
    if (chunks.reply) for (const s of chunks.reply) single = mergeHandle(single, s.handle);
    const pz = positions.length > 0 && positions[0] === 0;
    // A NOMSG call needs a Position-Zero Read chunk; an MSG call must not have one (RFC 8166 §3.5.3).
    if (nomsg !== pz) {
      this.sendError(xid, version, { code: errCode(RDMA2_ERR_BAD_XDR) });
      return;
    }
    for (const l of lengths) {
      if (l > this.opts.maxChunkSize) {
        this.sendError(xid, version, { code: errCode(RDMA2_ERR_SYSTEM) });
        return;
      }
    }
    const inline = nomsg ? EMPTY : Buffer.from(buf.subarray(payloadOffset, end));
    let idx = this.freeInbound.pop();
    if (idx === undefined) {
      idx = this.inbound.length;
      this.inbound.push(null);
    }
    const ib: InboundState = {
      index: idx,
      xid,
      version,
      backward,
      inline,
      nomsg,
      positions,
      lengths,
      sinks: [],
      segments,
      readsPending: 0,
      writeChunks: chunks.writes,
      replyChunk: chunks.reply,
      invHandle,
      singleHandle: single,
      call: null,
    };
    this.inbound[idx] = ib;
    this.inboundActive++;
    if (positions.length === 0) {
      this.deliverInbound(ib);
      return;
    }
    for (let c = 0; c < positions.length; c++) {
      const sink = this.registrar.acquireTarget(lengths[c]);
      ib.sinks.push(sink);
      let off = 0;
      for (const seg of segments[c]) {
        if (seg.length === 0) continue;
        ib.readsPending++;
        this.readJobs.push({ owner: idx, pull: false, job: { chunk: c, segment: seg, sinkOffset: off } });
        off += seg.length;
      }
    }
    if (ib.readsPending === 0) this.deliverInbound(ib);
    else this.pumpReads();
  }

  /** Posts RDMA Reads up to our ORD (the peer's IRD bounds it, RFC 5040 §6.4). */
  private pumpReads(): void {
    while (this.readsOutstanding < this.ord && this.readJobs.length > 0) {
      const { owner, pull, job } = this.readJobs.shift() as { owner: number; pull: boolean; job: ReadJob };
      let sink: ChunkRegistration | null;
      if (pull) sink = this.states[owner].pullSink;
      else sink = this.inbound[owner]?.sinks[job.chunk] ?? null;
      if (!sink) continue;
      this.sge[0].mr = sink.mr;
      this.sge[0].offset = job.sinkOffset;
      this.sge[0].length = job.segment.length;
      this.sendWr.wrId = owner * KIND_SHIFT + (pull ? KIND_PULL : KIND_READ);
      this.sendWr.opcode = WrOpcode.RDMA_READ;
      this.sendWr.flags = SendFlags.SIGNALED;
      this.sendWr.remoteAddr = job.segment.offset;
      this.sendWr.rkey = job.segment.handle;
      this.readsOutstanding++;
      if (this.readsOutstanding > this.counters.peakReadsOutstanding) {
        this.counters.peakReadsOutstanding = this.readsOutstanding;
      }
      this.counters.rdmaReads++;
      this.postSend();
    }
  }

  private onReadDone(idx: number): void {
    this.readsOutstanding--;
    const ib = this.inbound[idx];
    if (ib && --ib.readsPending === 0) this.deliverInbound(ib);
    this.pumpReads();
  }

  private deliverInbound(ib: InboundState): void {
    let message: Buffer;
    try {
      if (ib.positions.length === 0) message = ib.inline;
      else {
        let base = ib.inline;
        let first = 0;
        if (ib.nomsg) {
          base = ib.sinks[0].mr.buffer.subarray(0, ib.lengths[0]);
          first = 1;
        }
        const ats = inlinePositions(ib.positions.slice(first), ib.lengths.slice(first));
        const inserts: Insert[] = [];
        for (let c = first; c < ib.positions.length; c++) {
          inserts.push({ at: ats[c - first], data: ib.sinks[c].mr.buffer.subarray(0, ib.lengths[c]) });
        }
        message = reassemble(base, inserts);
        if (message === base) message = Buffer.from(base);
      }
    } catch {
      this.releaseInboundSinks(ib);
      this.endInbound(ib);
      this.sendError(ib.xid, ib.version, { code: ib.version === 1 ? ERR_CHUNK : RDMA2_ERR_BAD_XDR });
      return;
    }
    // The data was copied out: the sinks can be rekeyed and reused at once.
    this.releaseInboundSinks(ib);
    const call = new InboundCallImpl(
      ib.xid,
      ib.version,
      message,
      ib.backward,
      ib.writeChunks,
      ib.replyChunk,
      ib.invHandle,
      ib.singleHandle,
      this,
    );
    this.endInbound(ib);
    this.responder?.onCall(call);
  }

  /**
   * RDMA2_DONE from the requester: its pull is over, so the exposed reply is fenced now. Deregistration
   * revokes the rkey at once (unless the DONE came With Invalidate, which already did). A DONE for an XID
   * with nothing exposed is dropped silently (seed 002 §4.1.3).
   */
  private onDone(xid: number, wc: WorkCompletion): void {
    const reg = this.rprcPending.get(xid);
    if (!reg) {
      this.counters.droppedMessages++;
      return;
    }
    this.rprcPending.delete(xid);
    if (wc.wcFlags & WcFlags.WITH_INV && wc.invalidatedRkey === reg.mr.rkey)
      this.counters.remoteInvalidations++;
    this.registrar.release(reg);
  }

  private releaseInboundSinks(ib: InboundState): void {
    for (const s of ib.sinks) this.registrar.release(s, true);
    ib.sinks.length = 0;
  }

  private endInbound(ib: InboundState): void {
    this.inbound[ib.index] = null;
    this.freeInbound.push(ib.index);
    this.inboundActive--;
  }

  /**
   * Answers an inbound call. `ddpItems` are the DDP-eligible results within `message` (offset of the data
   * after the length word, length without pad), in order: item i goes to Write chunk i when the requester
   * offered one (RFC 8166 §3.5.2); the rest stays inline. A reply too large for the requester's resources
   * is answered with RDMA2_ERR_WRITE_RESOURCE / REPLY_RESOURCE (Version 1: ERR_CHUNK).
   */
  reply(inbound: InboundCall, message: Buffer, ddpItems: readonly DdpItem[] = []): void {
    const ib = inbound as InboundCallImpl;
    if (ib.owner !== this || ib.answered) return;
    ib.answered = true;
    if (this.state === 'closed') return; // the requester retransmits on a new connection
    if (this.sendSlab.available === 0) {
      this.pendingReplies.push({ inbound: ib, message, items: ddpItems });
      return;
    }
    this.sendReply(ib, message, ddpItems);
  }

  /** Answers an inbound call with an RDMA2_ERROR (Version 1: ERR_CHUNK unless ERR_VERS). */
  replyError(inbound: InboundCall, error: RpcRdmaErrorBody): void {
    const ib = inbound as InboundCallImpl;
    if (ib.owner !== this || ib.answered) return;
    ib.answered = true;
    this.sendError(
      ib.xid,
      ib.version,
      ib.version === 1 && error.code !== ERR_VERS ? { code: ERR_CHUNK } : error,
    );
  }

  private flushPendingReplies(): void {
    while (this.pendingReplies.length > 0 && this.sendSlab.available > 0) {
      const p = this.pendingReplies.shift() as {
        inbound: InboundCallImpl;
        message: Buffer;
        items: readonly DdpItem[];
      };
      this.sendReply(p.inbound, p.message, p.items);
    }
  }

  private sendReply(ib: InboundCallImpl, message: Buffer, items: readonly DdpItem[]): void {
    const version = ib.version;
    const caps = ib.writeChunks.map(sumLengths);
    const replyCap = ib.replyChunk ? sumLengths(ib.replyChunk) : -1;
    let writeSegs = 0;
    for (const w of ib.writeChunks) writeSegs += w.length;
    const headerSize = maxChunkHeaderSize(version, {
      writeSegments: writeSegs,
      writeChunks: ib.writeChunks.length,
      replySegments: ib.replyChunk ? ib.replyChunk.length : undefined,
    });
    const planInput = {
      version,
      replyLength: message.length,
      items,
      writeCapacities: caps,
      replyCapacity: replyCap,
      sendLimit: this.sendLimit,
      headerSize,
    };
    let plan = planReply(planInput);
    let rprc = false;
    if (
      plan.mode === 'error' &&
      plan.error?.code === RDMA2_ERR_REPLY_RESOURCE &&
      version === 2 &&
      this.props.peerValues.get(RDMA2_PROPID_RPRC) === true
    ) {
      // Seed 002 §4.1.1: the reply exceeds every requester-provided resource and the requester takes
      // responder-provided Read chunks: expose the reduced reply for it to pull.
      plan = planReply({ ...planInput, replyCapacity: Number.MAX_SAFE_INTEGER });
      rprc = plan.mode === 'reply-chunk';
    }
    if (plan.mode === 'error' && plan.error) {
      this.sendError(ib.xid, version, version === 1 ? { code: ERR_CHUNK } : plan.error);
      return;
    }
    const slot = this.sendSlab.acquire();
    const regs: ChunkRegistration[] = [];
    let src: ChunkRegistration | null = null;
    const needSrc = plan.moved > 0 || (plan.mode === 'reply-chunk' && !rprc);
    if (needSrc) {
      src = this.registrar.registerLocal(message);
      regs.push(src);
    }
    // Write chunks: the data of each moved item, spread over the chunk's segments; unused chunks and
    // segments are returned with length 0 (RFC 8166 §3.5.2).
    const writesOut: RdmaSegmentInput[][] = [];
    for (let i = 0; i < ib.writeChunks.length; i++) {
      const segs = ib.writeChunks[i];
      const out: RdmaSegmentInput[] = segs.map((s) => ({ handle: s.handle, length: 0, offset: s.offset }));
      if (i < plan.moved) {
        const it = items[i];
        const spans = scatter(
          it.length,
          segs.map((s) => s.length),
        );
        for (const sp of spans ?? []) {
          this.postWrite(
            src as ChunkRegistration,
            it.offset + sp.srcOffset,
            sp.length,
            segs[sp.segment],
            sp.segOffset,
          );
          out[sp.segment].length = sp.length;
        }
      }
      writesOut.push(out);
    }
    let replyOut: RdmaSegmentInput[] | null = null;
    let readsOut: ReadSegmentInput[] | undefined;
    if (rprc) {
      // A private copy: it stays exposed until the requester's DONE, longer than the caller's buffer.
      const body = Buffer.allocUnsafe(plan.reducedLength);
      copyReduced(message, items.slice(0, plan.moved), body, 0);
      const reg = this.registrar.registerSource(body);
      this.rprcPending.get(ib.xid)?.mr.deregister();
      this.rprcPending.set(ib.xid, reg);
      readsOut = [{ position: 0, handle: reg.mr.rkey, length: body.length, offset: reg.mr.iova }];
      if (ib.replyChunk)
        replyOut = ib.replyChunk.map((s) => ({ handle: s.handle, length: 0, offset: s.offset }));
      this.counters.rprcReplies++;
    } else if (plan.mode === 'reply-chunk' && ib.replyChunk) {
      // The reduced reply goes into the Reply chunk (Long Reply, RFC 8166 §3.5.4).
      let body = src as ChunkRegistration;
      if (plan.moved > 0) {
        const reduced = Buffer.allocUnsafe(plan.reducedLength);
        copyReduced(message, items.slice(0, plan.moved), reduced, 0);
        body = this.registrar.registerLocal(reduced);
        regs.push(body);
      }
      const segs = ib.replyChunk;
      replyOut = segs.map((s) => ({ handle: s.handle, length: 0, offset: s.offset }));
      for (const sp of scatter(
        plan.reducedLength,
        segs.map((s) => s.length),
      ) ?? []) {
        this.postWrite(body, sp.srcOffset, sp.length, segs[sp.segment], sp.segOffset);
        replyOut[sp.segment].length = sp.length;
      }
      this.counters.longReplies++;
    } else if (ib.replyChunk) {
      replyOut = ib.replyChunk.map((s) => ({ handle: s.handle, length: 0, offset: s.offset }));
    }
    const buf = this.sendSlab.view(slot);
    this.w.reset(buf, 0, buf.length);
    const chunks: ChunkListsInput = { reads: readsOut, writes: writesOut, reply: replyOut };
    const nomsg = plan.mode === 'reply-chunk';
    if (version === 2) {
      encodeV2ChunkHeader(
        this.w,
        nomsg ? RDMA2_NOMSG : RDMA2_MSG,
        ib.xid,
        this.grant,
        RPCRDMA2_F_RESPONSE,
        0,
        chunks,
      );
    } else {
      encodeV1ChunkHeader(this.w, nomsg ? RDMA_NOMSG : RDMA_MSG, ib.xid, this.grant, chunks);
    }
    let len = this.w.length;
    if (!nomsg) len += copyReduced(message, items.slice(0, plan.moved), buf, len);
    this.sendRegs[slot] = regs.length > 0 ? regs : null;
    // Send With Invalidate (RFC 8797 §5.1, seed 004 §8.4) when the requester allows it and one rkey covers
    // every chunk of the call; Version 2 names it in rdma_inv_handle.
    let inv = 0;
    if (this.opts.useRemoteInvalidate && this.peerAcceptsRemoteInvalidate && ib.singleHandle > 0) {
      if (version === 1 || ib.invHandle === ib.singleHandle) inv = ib.singleHandle;
    }
    this.counters.repliesSent++;
    this.postSendSlot(slot, len, inv ? WrOpcode.SEND_WITH_INV : WrOpcode.SEND, inv);
  }

  private postWrite(
    src: ChunkRegistration,
    srcOffset: number,
    length: number,
    seg: RdmaSegment,
    segOffset: number,
  ): void {
    this.sge[0].mr = src.mr;
    this.sge[0].offset = srcOffset;
    this.sge[0].length = length;
    this.sendWr.wrId = KIND_WRITE;
    this.sendWr.opcode = WrOpcode.RDMA_WRITE;
    this.sendWr.flags = 0;
    this.sendWr.remoteAddr = seg.offset + BigInt(segOffset);
    this.sendWr.rkey = seg.handle;
    this.counters.rdmaWrites++;
    this.postSend();
  }

  // ----------------------------------------------------------------------------------------------------
  // Errors and sends

  private answerDecodeError(e: RpcRdmaDecodeError): void {
    if (e.xid === undefined) {
      this.counters.droppedMessages++;
      return;
    }
    if (e.reply.code === ERR_VERS) {
      // A version we do not speak: answer in the highest one we do (Version 1 form for a V1-only end,
      // as RFC 8166 §5 prescribes and Linux does).
      this.sendError(e.xid, this.opts.maxVersion === 1 || this.version === 1 ? 1 : 2, e.reply);
      return;
    }
    this.sendError(e.xid, e.version === 1 ? 1 : 2, e.reply);
  }

  private sendError(xid: number, version: number, body: RpcRdmaErrorBody): void {
    // An error answers a message of the peer's: the credit word is our grant, F_RESPONSE is set.
    const sent =
      version === 1
        ? this.sendHeader({ version: 1, proc: RDMA_ERROR, xid, credit: this.grant, error: body })
        : this.sendHeader({
            version: 2,
            htype: RDMA2_ERROR,
            xid,
            credit: this.grant,
            flags: RPCRDMA2_F_RESPONSE,
            error: body,
          });
    if (sent) this.counters.errorsSent++;
  }

  private postSendSlot(slot: number, length: number, opcode: number, invalidateRkey: number): void {
    this.sge[0].mr = this.sendSlab.mr;
    this.sge[0].offset = this.sendSlab.offset(slot);
    this.sge[0].length = length;
    this.sendWr.wrId = slot * KIND_SHIFT + KIND_SEND;
    this.sendWr.opcode = opcode as SendWr['opcode'];
    this.sendWr.flags = SendFlags.SIGNALED;
    this.sendWr.invalidateRkey = invalidateRkey || undefined;
    this.counters.bytesSent += length;
    this.postSend();
    this.sendWr.invalidateRkey = undefined;
  }

  private postSend(): void {
    try {
      this.vconn.qp.postSend(this.sendWr);
    } catch (e) {
      // A refused post (queue full, bad argument) leaves the connection's accounting unknowable:
      // close it, so every call is reported for retransmission.
      this.close(`postSend refused: ${(e as Error).message}`);
    } finally {
      this.sendWr.remoteAddr = undefined;
      this.sendWr.rkey = undefined;
    }
  }

  private releaseSendSlot(slot: number): void {
    const regs = this.sendRegs[slot];
    if (regs) {
      for (const r of regs) this.registrar.release(r);
      this.sendRegs[slot] = null;
    }
    this.sendSlab.release(slot);
  }

  // ----------------------------------------------------------------------------------------------------
  // Teardown

  /** Closes the connection: DISCONNECTED follows and every call is failed for retransmission. */
  close(reason = 'closed by us'): void {
    if (this.state === 'closed') return;
    this.closeReason ||= reason;
    try {
      this.vconn?.disconnect();
    } catch {
      this.teardown(reason);
    }
  }

  private teardown(reason: string): void {
    if (this.state === 'closed') return;
    this.state = 'closed';
    this.closeReason ||= reason;
    const err = connectionLost(this.closeReason, { peer: this.peerKey, connection: this.id });
    // In-flight calls first (oldest first in XID map order), then the queue: each reported exactly once.
    const failed: TransportCall[] = [];
    for (const st of this.states) {
      if (st.call === null) continue;
      // The QP is in error, so no peer can reach these regions; revoking their keys fences them for good.
      this.releaseRegs(st, true);
      const call = st.call;
      const abandoned = st.abandoned;
      this.freeState(st);
      if (!abandoned) failed.push(call);
    }
    this.queue.drain();
    this.inflight.clear();
    for (let i = 0; i < this.inbound.length; i++) {
      const ib = this.inbound[i];
      if (ib) {
        this.releaseInboundSinks(ib);
        this.endInbound(ib);
      }
    }
    for (let s = 0; s < this.sendRegs.length; s++) {
      const regs = this.sendRegs[s];
      if (regs) for (const r of regs) this.registrar.release(r, true);
      this.sendRegs[s] = null;
    }
    this.pendingReplies.drain();
    for (const reg of this.rprcPending.values()) this.registrar.release(reg);
    this.rprcPending.clear();
    this.credits.reset();
    for (const call of failed) this.requester.onFailed(call, err);
    this.props.fail(err);
    this.established?.reject(err);
    this.established = null;
    setImmediate(() => this.destroyResources());
    this.onClose?.(this, this.closeReason);
  }

  private destroyResources(): void {
    try {
      this.vconn?.destroy();
      this.registrar.destroy();
      this.recvSlab.destroy();
      this.sendSlab.destroy();
      this.cq.destroy();
      this.pd.dealloc();
    } catch {
      // Best effort: a provider that still holds a reference frees it with the device.
    }
  }

  /** Calls waiting for a credit (or for negotiation to finish). */
  get queuedCalls(): number {
    return this.queue.length;
  }

  snapshot(): ConnectionSnapshot {
    return {
      id: this.id,
      role: this.role,
      state: this.state,
      version: this.version,
      peer: this.peerKey,
      sendLimit: this.sendLimit,
      recvSize: this.recvSize,
      credits: {
        granted: this.credits.granted,
        outstanding: this.credits.outstanding,
        max: this.credits.max,
        queued: this.queue.length,
      },
      grant: this.grant,
      inboundInProgress: this.inboundActive,
      properties: {
        peer: Object.fromEntries(this.props.peerValues),
        pendingAtPeer: [...this.props.pendingAtPeer.keys()],
        pendingForPeer: [...this.props.pendingForPeer],
        peerSupportsExtensions: this.props.peerSupportsExtensions,
      },
      remoteInvalidateOk: this.peerAcceptsRemoteInvalidate,
      counters: { ...this.counters },
      registrations: {
        inUse: this.registrar.inUse,
        registered: this.registrar.registrations,
        rekeys: this.registrar.rekeys,
      },
    };
  }
}

const EMPTY = Buffer.alloc(0);
const EMPTY_SGL: readonly Sge[] = [];

function sumLengths(segs: readonly { length: number }[]): number {
  let n = 0;
  for (const s of segs) n += s.length;
  return n;
}
