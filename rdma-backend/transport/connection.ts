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
 * it falls back to Version 1 and remembers that per peer (`peerVersions`; a guess for `versionGuessTtlMs`). A server answers in the version
 * the client used. Unknown properties are ignored (seed 004 §5.3.4).
 *
 * Receives: every end posts `credits + backwardCredits + CONTROL_RESERVE` Receives (a Version 2 server
 * `credits` more, for the DONEs of replies in responder-provided Read chunks) and reposts each one
 * as soon as its message is copied out, so that with conforming peers no Send ever finds no Receive
 * (RFC 8166 §3.3.1): the requester keeps at most min(grant, its own maximum) calls outstanding and the
 * responder never grants more than it posted.
 *
 * Connection loss: every queued and in-flight call fails with `retransmit: true`, registrations are
 * revoked, and nothing is ever resent on this connection (the pool reconnects).
 *
 * Module layout: this file (setup, API, resources, teardown), `receive.ts` (completion handling and
 * receive dispatch), `requester.ts` (calls out, replies in), `responder.ts` (calls in, replies out),
 * `control.ts` (header-only messages), `options.ts`, `state.ts` (pooled per-call records).
 *
 * Hot path: completions are polled into a preallocated array; Send/Receive work requests and their SGEs
 * are reused; per-call state lives in pooled records indexed by the work request id.
 */

import { GatewayError } from '../../common/errors.js';
import { U32Map } from '../../common/u32-map.js';
import { XdrWriter } from '../../rpc/xdr.js';
import {
  type ConnectionPrivateData,
  decodePrivateData,
  ERR_CHUNK,
  ERR_VERS,
  encodePrivateData,
  HeaderDecoder,
  type PropInput,
  type RdmaSegmentInput,
  type ReadSegmentInput,
  RPCRDMA_V1_DEFAULT_INLINE,
  type RpcRdmaErrorBody,
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
  type WorkCompletion,
  WrOpcode,
} from '../verbs/index.js';
import { BufferSlab } from './buffers.js';
import { nextControlXid, type OwedControl, sendConnProp, sendControl, sendError } from './control.js';
import { CreditWindow, Fifo } from './credits.js';
import { connectionLost, TransportError } from './errors.js';
import { TRANSPORT_LOG_BUDGET } from './log-budget.js';
import type { DdpItem } from './marshal.js';
import {
  CONTROL_RESERVE,
  CONTROL_SEND_SLOTS,
  KIND_RECV,
  KIND_SEND,
  KIND_SHIFT,
  type Resolved,
  rememberedVersion,
  rememberVersion,
  resolve,
  SEND_SIGNAL_INTERVAL,
  SILENT,
  type TransportLogger,
  type TransportOptions,
} from './options.js';
import { type PropertyDisposition, PropertyExchange, type PropertyHost } from './properties.js';
import { onCompletions } from './receive.js';
import { ChunkRegistrar, type ChunkRegistration } from './registration.js';
import { allocState, canSendCall, enqueue, freeState, pump, releaseRegs, sendCall } from './requester.js';
import {
  type ExposedReply,
  endInbound,
  expireExposed,
  type PendingReply,
  ReplyHold,
  releaseInboundSinks,
  sendReply,
} from './responder.js';
import { SendSignaling } from './send-signaling.js';
import {
  type CallState,
  ChunkScratch,
  type InboundCallImpl,
  type InboundState,
  type ReadJob,
} from './state.js';
import type {
  ConnectionCounters,
  ConnectionSnapshot,
  InboundCall,
  RequesterHandler,
  ResponderHandler,
  TransportCall,
} from './types.js';

export {
  CONTROL_RESERVE,
  peerVersions,
  type TransportLogger,
  type TransportOptions,
} from './options.js';

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
  /** Called once when version negotiation is over and calls can flow (`state` became 'ready'). */
  onReady?: (conn: RpcRdmaConnection) => void;
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

/** Protocol errors of a peer logged per connection before they are only counted (`logPeerError`). */
const PEER_ERRORS_LOGGED = 8;

const noRequester: RequesterHandler = {
  onReply() {},
  onFailed() {},
};

/**
 * The connection object: setup (CM, private data, negotiation), the public API, the shared resources
 * (queues, slabs, registrar, work requests) and teardown. The role paths are functions over it in
 * `requester.ts`, `responder.ts`, `receive.ts` and `control.ts` (xprtrdma / svcrdma split); they reach its
 * fields directly, so fields without a doc saying otherwise are internal, not API (the stable surface is
 * what `index.ts` documents: connect/accept, submit/abandon, reply/replyError, properties, snapshot, close).
 */
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
    sendsUnsignaled: 0,
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
    rdmaReadBytes: 0,
    rdmaWriteBytes: 0,
    peerReadBytes: 0,
    peerWriteBytes: 0,
    placedBytes: 0,
    lentReplies: 0,
    lentCalls: 0,
    writeChunkCalls: 0,
    replyChunkCalls: 0,
    creditStalls: 0,
    droppedMessages: 0,
    peakReadsOutstanding: 0,
    rprcReplies: 0,
    donesSent: 0,
    bytesSent: 0,
    bytesReceived: 0,
    handlerErrors: 0,
    resourceFailures: 0,
    rprcExpired: 0,
  };
  /** RPC-over-RDMA error messages by code name; rare, so plain objects keyed by constant strings. */
  readonly errorsByCode: { sent: Record<string, number>; received: Record<string, number> } = {
    sent: {},
    received: {},
  };

  /** Credits of the direction in which we are the requester. */
  readonly credits: CreditWindow;
  /** Credits we grant the peer for its calls. */
  readonly grant: number;
  /** Indices of the call states waiting for a credit or a send buffer, oldest first. */
  readonly queue = new Fifo<number>(256);
  /** XID → index of the call state, for the calls sent and not yet answered. */
  readonly inflight = new U32Map<number>();
  readonly states: CallState[] = [];
  readonly freeStates: number[] = [];

  readonly inbound: (InboundState | null)[] = [];
  readonly freeInbound: number[] = [];
  inboundActive = 0;
  /** RDMA Reads waiting for ORD room: `owner` is an inbound index, or a call state index when `pull`. */
  readonly readJobs = new Fifo<{ owner: number; pull: boolean; job: ReadJob }>(64);
  /**
   * Responder-provided Read chunks exposed for replies, by XID, until the requester's DONE or their
   * expiry (seed 002), oldest first; at most `grant` (`sendReply`).
   */
  readonly rprcPending = new Map<number, ExposedReply>();
  /** Revokes exposed replies whose DONE never came (`expireExposed`); armed while any is exposed. */
  private rprcTimer: NodeJS.Timeout | null = null;
  private readonly rprcExpiry = (): void => {
    this.rprcTimer = null;
    expireExposed(this);
  };

  /** Arms the expiry of exposed replies `ms` from now, unless it is armed already. */
  armRprcExpiry(ms: number): void {
    if (this.rprcTimer !== null) return;
    this.rprcTimer = setTimeout(this.rprcExpiry, Math.max(1, ms));
    this.rprcTimer.unref();
  }
  readsOutstanding = 0;
  ord = 1;

  pd!: ProtectionDomain;
  cq!: CompletionQueue;
  vconn!: VerbsConnection;
  recvSlab!: BufferSlab;
  sendSlab!: BufferSlab;
  registrar!: ChunkRegistrar;
  readonly sendRegs: (ChunkRegistration[] | null)[] = [];
  /** Per send slot: the reply message its RDMA Writes read from (registered), handed back at completion. */
  readonly sendMessages: (Buffer | null)[] = [];
  /** Per send slot: the second send buffer holding the staged RDMA Write source of a reply, or -1. */
  readonly sendStage: number[] = [];
  /** Which Sends go unsignaled, and which send slots a completion releases (`send-signaling.ts`). */
  signaling!: SendSignaling;
  /** Scratch arrays of the reply path (filled and consumed synchronously, never kept). */
  readonly scratchCaps: number[] = [];
  /** Chunk lists of the reply being encoded (responder path); emptied after each encode. */
  readonly replyChunks: {
    reads: ReadSegmentInput[] | undefined;
    writes: RdmaSegmentInput[][] | undefined;
    reply: RdmaSegmentInput[] | null | undefined;
  } = { reads: undefined, writes: undefined, reply: undefined };
  /** Chunk lists of the call being encoded (requester path). */
  readonly chunkScratch = new ChunkScratch();
  /** Inbound call records by index, reused (see `inbound` for which are in progress). */
  readonly inboundPool: InboundState[] = [];
  readonly scratchAt: number[] = [];
  readonly scratchLens: number[] = [];
  readonly recvWrs: RecvWr[] = [];
  readonly wcs: WorkCompletion[] = createWorkCompletions(64);
  readonly sge: Sge[] = [{ mr: null as never, offset: 0, length: 0 }];
  readonly sendWr: SendWr = {
    wrId: 0,
    opcode: WrOpcode.SEND,
    flags: SendFlags.SIGNALED,
    sgList: this.sge,
  };
  readonly w = new XdrWriter(0);
  /**
   * Where an inbound call is assembled: the responder handler's `allocateCall`, or a plain allocation.
   * An allocator that throws is the handler's bug, not the peer's: logged and counted like any handler
   * error, and the message is assembled in a plain allocation (never answered as malformed).
   */
  readonly allocateCall = (size: number): Buffer => {
    const r = this.responder;
    if (r?.allocateCall === undefined) return Buffer.allocUnsafe(size);
    try {
      return r.allocateCall(size);
    } catch (e) {
      this.handlerThrew('allocateCall', e, { size });
      return Buffer.allocUnsafe(size);
    }
  };
  /** Where a reply is assembled: the requester handler's `allocateReply`, or a plain allocation (as above). */
  readonly allocateReply = (size: number): Buffer => {
    const r = this.requester;
    if (r.allocateReply === undefined) return Buffer.allocUnsafe(size);
    try {
      return r.allocateReply(size);
    } catch (e) {
      this.handlerThrew('allocateReply', e, { size });
      return Buffer.allocUnsafe(size);
    }
  };
  decoder: HeaderDecoder;
  controlXid = 0x7f000000;
  negotiationXid = -1;
  requester: RequesterHandler;
  responder: ResponderHandler | undefined;
  readonly onClose: ((conn: RpcRdmaConnection, reason: string) => void) | undefined;
  readonly onReady: ((conn: RpcRdmaConnection) => void) | undefined;
  readonly log: TransportLogger;
  /** `close()` was called: the end is ours (`logClosed`). */
  private closedByUs = false;
  /** ... because something failed (`close(reason, true)`). */
  private closedOnFailure = false;
  /** The connection was up once (a failed connect is reported by whoever connected, not by `logClosed`). */
  private wasEstablished = false;
  /** Protocol errors of the peer logged so far (`logPeerError`). */
  private peerErrorsLogged = 0;
  established: { resolve: () => void; reject: (e: Error) => void } | null = null;
  firstMessageSeen = false;
  /** Our current Receive buffer size (RBSIZ) — new Receives are posted with it. */
  recvSize: number;
  /** The smallest Receive currently posted: what a message to us may be, whatever we announced. */
  recvFloor: number;
  readonly postedSize: number[] = [];
  smallPosted = 0;
  onReceivesResized: (() => void) | null = null;
  readonly props: PropertyExchange;
  /** Replies waiting for a send buffer outside the control reserve (`reply`, `flushPendingReplies`). */
  readonly pendingReplies = new Fifo<PendingReply>(16);
  /**
   * Control messages owed to the peer waiting for any free send buffer, oldest first: error answers
   * (`sendError`) and DONEs (`sendDone`), never dropped for want of one, and never more than
   * `owedControlCap` (beyond, the peer is not conforming and its connection closes).
   */
  readonly owedControl = new Fifo<OwedControl>(8);

  /**
   * The most control messages a conforming peer can be owed at once: an answer per call of its within our
   * grant and per message in the control reserve (`recvCount`), as it waits for each before it sends
   * again, and a DONE per credit of ours, as each holds its call's credit until it is posted.
   */
  get owedControlCap(): number {
    return this.grant + CONTROL_RESERVE + this.credits.max;
  }

  /** `close()` was called or the connection is gone: nothing more is worth starting on it. */
  get closing(): boolean {
    return this.closedByUs || this.state === 'closed';
  }

  private constructor(
    role: 'client' | 'server',
    options: TransportOptions,
    peerKey: string,
    requester: RequesterHandler,
    responder: ResponderHandler | undefined,
    onClose: ((conn: RpcRdmaConnection, reason: string) => void) | undefined,
    onReady?: (conn: RpcRdmaConnection) => void,
  ) {
    this.role = role;
    this.opts = resolve(options);
    this.log = options.logger ?? SILENT;
    this.onReady = onReady;
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

  propertyHost(): PropertyHost {
    const self = this;
    return {
      sendControl: (h) => sendControl(this, h),
      nextControlXid: () => nextControlXid(this),
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

  resizeReceives(bytes: number, done: () => void): void {
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

  receivesResized(): void {
    this.recvFloor = this.recvSize;
    const cb = this.onReceivesResized;
    this.onReceivesResized = null;
    cb?.();
  }

  repostReceive(slot: number): void {
    const wr = this.recvWrs[slot];
    const old = this.postedSize[slot];
    (wr.sgList[0] as Sge).length = this.recvSize;
    this.postedSize[slot] = this.recvSize;
    this.vconn.qp.postRecv(wr);
    if (this.onReceivesResized && old < this.recvSize && --this.smallPosted === 0) this.receivesResized();
  }

  makeDecoder(high: number): HeaderDecoder {
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
      p.onReady,
    );
    const pd: ConnectionPrivateData = {
      sendWithInvalidateOk: c.opts.acceptRemoteInvalidate,
      inlineSendSize: c.opts.sendSize,
      inlineRecvSize: c.opts.recvSize,
    };
    const done = new Promise<void>((resolve, reject) => {
      c.established = { resolve, reject };
    });
    try {
      c.setupQueues(p.device);
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
    } catch (e) {
      // A device out of a resource (RLIMIT_MEMLOCK, CQs, QPs) refuses one step: what the steps before it
      // created goes now, or every reconnect attempt would leak a PD, a CQ and registrations.
      c.state = 'closed';
      c.destroyResources();
      throw e;
    }
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
    try {
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
    } catch (e) {
      // As in connect(): nothing created for a connection that never was stays behind, and the peer is
      // told at once (a reject) instead of waiting for its connect timeout.
      c.state = 'closed';
      if (c.vconn === undefined) {
        try {
          req.reject();
        } catch {
          // the request may already be gone with its socket
        }
      }
      c.destroyResources();
      throw e;
    }
    return c;
  }

  get recvCount(): number {
    // A requester sends an RDMA2_DONE for every reply it pulls from a responder-provided Read chunk (seed
    // 002 §4.1.3). It holds the call's credit until the DONE is posted (§5.2.3: "Sending an RDMA_DONE
    // message consumes one credit"), and the credit then goes to its next call, which may reach us
    // before we took the DONE: an end that may send such replies keeps one more Receive per credit it
    // grants, and never has more than that many replies exposed (`sendReply`), so a full window of
    // them followed by a DONE and a new call each never finds the Receives exhausted.
    const dones = this.role === 'server' && this.mayExposeReplies ? this.opts.credits : 0;
    return this.opts.credits + this.opts.backwardCredits + CONTROL_RESERVE + dones;
  }

  /**
   * Whether this end may answer with responder-provided Read chunks (seed 002 §4.1) when the peer
   * announces RPRC: only with the Version 2 extensions on, since the requester's RDMA2_DONE that ends
   * each such reply is one of them (we would refuse it otherwise, and hold the exposed reply for ever).
   */
  get mayExposeReplies(): boolean {
    return this.opts.maxVersion === 2 && this.opts.extensions;
  }

  /**
   * Whether this end announces RPRC in its CONNPROP (seed 002 §4.1.1): it takes responder-provided Read
   * chunks (`rprc`) and can pull them, that is, its ORD (the responder's IRD) is not 0. With an ORD of 0
   * every reply exposed to it would fail (ERR_TRANSPORT_RPRC_REFUSED, for good); without RPRC the
   * responder answers REPLY_RESOURCE instead and the call goes again with a larger Reply chunk. The ORD is
   * known from ESTABLISHED on: a client sends its CONNPROP from there, but a server may answer its client's
   * first message before it sees its own ESTABLISHED (on a native device the CM and the CQ are different
   * fds); it then announces none, which costs nothing: a server requests only backward calls, whose
   * replies are never exposed (RFC 8167 §4).
   */
  get announcesRprc(): boolean {
    return this.opts.rprc && this.wasEstablished && this.ord > 0;
  }

  qpCap(device: Device) {
    const maxSendWr = Math.min(device.caps.maxQpWr, 4096);
    return { maxSendWr, maxRecvWr: this.recvCount, maxSendSge: 1, maxRecvSge: 1 };
  }

  setupQueues(device: Device): void {
    this.pd = device.allocPd();
    this.cq = device.createCq(Math.min(device.caps.maxCqe, 4096 + this.recvCount));
    this.recvSlab = new BufferSlab(this.pd, this.recvCount, this.opts.maxRecvSize);
    const sendSlots = 2 * (this.opts.credits + this.opts.backwardCredits) + 2 * CONTROL_SEND_SLOTS;
    this.sendSlab = new BufferSlab(this.pd, sendSlots, this.opts.sendSize);
    for (let i = 0; i < sendSlots; i++) {
      this.sendRegs.push(null);
      this.sendStage.push(-1);
      this.sendMessages.push(null);
    }
    this.signaling = new SendSignaling(sendSlots, SEND_SIGNAL_INTERVAL, (slot, completed) =>
      this.releaseSendSlot(slot, completed),
    );
    this.registrar = new ChunkRegistrar(this.pd, this.opts.maxChunkSize);
    this.cq.setNotifyHandler(() => onCompletions(this));
    this.cq.requestNotify();
  }

  postAllReceives(): void {
    for (let i = 0; i < this.recvCount; i++) {
      this.recvWrs.push({
        wrId: i * KIND_SHIFT + KIND_RECV,
        sgList: [{ mr: this.recvSlab.mr, offset: this.recvSlab.offset(i), length: this.recvSize }],
      });
      this.postedSize.push(this.recvSize);
      this.vconn.qp.postRecv(this.recvWrs[i]);
    }
  }

  onCmEvent(e: CmEvent): void {
    switch (e.type) {
      case CmEventType.ESTABLISHED:
        this.wasEstablished = true;
        // As negotiated: 0 means no RDMA Read may go (a call with Read chunks is refused, a reply to pull
        // fails), not 1, which the verbs would refuse at post and so close the connection.
        this.ord = this.vconn.ord;
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
  v1SendLimit(): number {
    const peer = this.peerPrivateData?.inlineRecvSize ?? RPCRDMA_V1_DEFAULT_INLINE;
    return Math.min(peer, this.opts.sendSize);
  }

  startNegotiation(): void {
    const remembered = rememberedVersion(this.peerKey);
    if (this.opts.maxVersion === 1 || remembered === 1) {
      this.useVersion(1);
      return;
    }
    this.state = 'negotiating';
    // Until the server answers, nothing larger than the Version 1 default may be sent (seed 004 §7).
    this.sendLimit = Math.min(RPCRDMA_V1_DEFAULT_INLINE, this.opts.sendSize);
    this.negotiationXid = nextControlXid(this);
    sendConnProp(this, this.negotiationXid, 0, this.credits.max);
    // Seed 004 §7.2: "A client can assume the same situation [no Version 2 support] if the initial
    // negotiation message is lost or dropped."
    this.negotiationTimer = setTimeout(this.negotiationTimedOut, this.opts.negotiationTimeoutMs);
    this.negotiationTimer.unref();
  }

  private negotiationTimer: NodeJS.Timeout | null = null;

  private readonly negotiationTimedOut = (): void => {
    this.negotiationTimer = null;
    if (this.state !== 'negotiating') return;
    rememberVersion(this.peerKey, 1, this.opts.versionGuessTtlMs);
    this.log.warn(
      {
        peer: this.peerKey,
        connection: this.id,
        timeoutMs: this.opts.negotiationTimeoutMs,
        versionGuessTtlMs: this.opts.versionGuessTtlMs,
      },
      'no answer to the Version 2 CONNPROP: closing; the next connections to this peer speak Version 1 for versionGuessTtlMs',
    );
    this.close(
      `no answer to CONNPROP within ${this.opts.negotiationTimeoutMs} ms (taken for a Version 1 peer)`,
    );
  };

  useVersion(v: 1 | 2): void {
    if (this.negotiationTimer !== null) {
      clearTimeout(this.negotiationTimer);
      this.negotiationTimer = null;
    }
    this.version = v;
    this.state = 'ready';
    if (v === 1) {
      this.sendLimit = this.v1SendLimit();
      this.peerAcceptsRemoteInvalidate = this.peerPrivateData?.sendWithInvalidateOk ?? false;
      this.decoder = this.makeDecoder(1);
    }
    pump(this);
    if (this.onReady) {
      try {
        this.onReady(this);
      } catch (e) {
        this.handlerThrew('onReady', e, {});
      }
    }
  }

  /**
   * A user handler threw. The exception is the handler's bug, not the transport's: it is logged with the
   * handler's name and the call it concerned, counted, and completion processing goes on (credits,
   * Receives and the other calls stay consistent). What else happens is decided per handler by the caller
   * of this method (see `deliverInbound`, `complete`, `teardown`).
   */
  handlerThrew(handler: string, e: unknown, details: Record<string, unknown>): void {
    this.counters.handlerErrors++;
    if (!this.mayLog()) return;
    const err = e instanceof Error ? e : new Error(String(e));
    this.log.warn(
      {
        code: 'ERR_TRANSPORT_HANDLER_THREW',
        handler,
        connection: this.id,
        peer: this.peerKey,
        ...details,
        err: { type: err.name, message: err.message, stack: err.stack },
      },
      `transport: ${handler} handler threw: ${err.message}`,
    );
  }

  /**
   * A local resource failed for one call we serve (`step`: what was being done; `e`: the device's error,
   * e.g. VERBS_RESOURCE_LIMIT for an MR limit or locked memory): the caller answers that call with an
   * error and the connection goes on. Logged (within the process-wide budget) and counted.
   */
  resourceFailed(step: string, e: unknown, details: Record<string, unknown>): void {
    this.counters.resourceFailures++;
    if (!this.mayLog()) return;
    const err =
      e instanceof GatewayError
        ? e.toLog()
        : e instanceof Error
          ? { type: e.name, message: e.message }
          : { message: String(e) };
    this.log.warn(
      {
        code: 'ERR_TRANSPORT_LOCAL_RESOURCE',
        step,
        connection: this.id,
        peer: this.peerKey,
        ...details,
        err,
      },
      `transport: ${step} failed (${String(err.message)}): the call is refused, the connection goes on`,
    );
  }

  reportFailed(call: TransportCall, err: TransportError): void {
    try {
      this.requester.onFailed(call, err);
    } catch (e) {
      this.handlerThrew('onFailed', e, { xid: call.xid, failure: err.code });
    }
  }

  /** A credit came back outside a reply or a failure (`RequesterHandler.onCredit`): tell the caller. */
  reportCredit(): void {
    const h = this.requester.onCredit;
    if (!h) return;
    try {
      h.call(this.requester, this);
    } catch (e) {
      this.handlerThrew('onCredit', e, {});
    }
  }

  /** The call is finished for the transport (an abandoned call's memory is invalidated): tell the caller. */
  reportAbandoned(call: TransportCall): void {
    const h = this.requester.onAbandoned;
    if (!h) return;
    try {
      h.call(this.requester, call);
    } catch (e) {
      this.handlerThrew('onAbandoned', e, { xid: call.xid });
    }
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
      queueMicrotask(() => this.reportFailed(call, err));
      return;
    }
    const idx = allocState(this, call);
    if (this.state !== 'ready' || this.queue.length > 0 || !canSendCall(this)) {
      // Waiting for negotiation is not a stall; waiting behind a full credit window on a ready one is.
      if (this.state === 'ready') this.counters.creditStalls++;
      enqueue(this, this.states[idx]);
      return;
    }
    sendCall(this, this.states[idx]);
  }

  /**
   * The caller no longer wants the outcome (its client went away). The call's memory stays registered and
   * fenced until the reply arrives and it is invalidated, or the connection ends (DESIGN §3 "Memory").
   */
  abandon(call: TransportCall): void {
    // A search rather than a map kept per call: abandoning is rare (a client went away), calls are not.
    const states = this.states;
    for (let i = 0; i < states.length; i++) {
      if (states[i].call === call) {
        states[i].abandoned = true;
        return;
      }
    }
  }

  // ----------------------------------------------------------------------------------------------------
  // Receive dispatch

  // ----------------------------------------------------------------------------------------------------
  // Responder role

  /**
   * Answers an inbound call. `ddpItems` are the DDP-eligible results within `message` (offset of the data
   * after the length word, length without pad), in order: item i goes to Write chunk i when the requester
   * offered one (RFC 8166 §3.5.2); the rest stays inline. A reply too large for the requester's resources
   * is answered with RDMA2_ERR_WRITE_RESOURCE / REPLY_RESOURCE (Version 1: ERR_CHUNK), and one whose
   * memory the device will not register with RDMA2_ERR_SYSTEM (`resourceFailures`): neither throws.
   *
   * `lent`: `message` is valid only until this returns (a view of the caller's read buffer). The transport
   * copies it where it would keep it longer (queued for a free send buffer, or registered as the source
   * of RDMA Writes) and never reports it to `onReplyReleased`: the caller has it back on return.
   */
  reply(inbound: InboundCall, message: Buffer, ddpItems: readonly DdpItem[] = [], lent = false): void {
    const ib = inbound as InboundCallImpl;
    if (ib.owner !== this || ib.answered) return;
    ib.answered = true;
    if (this.state === 'closed') {
      if (!lent) this.replyReleased(message); // the requester retransmits on a new connection
      return;
    }
    if (this.sendSlab.available <= CONTROL_SEND_SLOTS) {
      // Replies leave the control reserve to what must never wait behind them: error answers (a refused
      // call is owed its answer as much as a served one, RFC 8166 §3.3.1), CONNPROP, DONE.
      // A lent message is copied to wait; the copy is the transport's own (sent from as it is, a Reply
      // chunk's Writes included), never reported either.
      this.pendingReplies.push({
        inbound: ib,
        message: lent ? Buffer.from(message) : message,
        items: ddpItems,
        hold: lent ? ReplyHold.COPY : ReplyHold.CALLER,
      });
      return;
    }
    sendReply(this, ib, message, ddpItems, lent ? ReplyHold.LENT : ReplyHold.CALLER);
  }

  /** Answers an inbound call with an RDMA2_ERROR (Version 1: ERR_CHUNK unless ERR_VERS). */
  replyError(inbound: InboundCall, error: RpcRdmaErrorBody): void {
    const ib = inbound as InboundCallImpl;
    if (ib.owner !== this || ib.answered) return;
    ib.answered = true;
    sendError(
      this,
      ib.xid,
      ib.version,
      ib.version === 1 && error.code !== ERR_VERS ? { code: ERR_CHUNK } : error,
    );
  }

  // ----------------------------------------------------------------------------------------------------
  // Errors and sends

  /** Posts the Send of a send slot, signaled or not (`SendSignaling`). */
  postSendSlot(slot: number, length: number, opcode: number, invalidateRkey: number): void {
    // A Send holding more than its buffer (registrations, a staging buffer, the caller's reply) is
    // signaled: those go back at its own completion.
    const holdsMore =
      this.sendRegs[slot] !== null || this.sendStage[slot] >= 0 || this.sendMessages[slot] !== null;
    const signaled = this.signaling.post(slot, holdsMore, this.sendSlab.available);
    if (!signaled) this.counters.sendsUnsignaled++;
    this.sge[0].mr = this.sendSlab.mr;
    this.sge[0].offset = this.sendSlab.offset(slot);
    this.sge[0].length = length;
    this.sendWr.wrId = slot * KIND_SHIFT + KIND_SEND;
    this.sendWr.opcode = opcode as SendWr['opcode'];
    this.sendWr.flags = signaled ? SendFlags.SIGNALED : 0;
    this.sendWr.invalidateRkey = invalidateRkey || undefined;
    this.counters.bytesSent += length;
    this.postSend();
    this.sendWr.invalidateRkey = undefined;
  }

  postSend(): void {
    try {
      this.vconn.qp.postSend(this.sendWr);
    } catch (e) {
      // A refused post (queue full, bad argument) leaves the connection's accounting unknowable:
      // close it, so every call is reported for retransmission.
      this.close(`postSend refused: ${(e as Error).message}`, true);
    } finally {
      this.sendWr.remoteAddr = undefined;
      this.sendWr.rkey = undefined;
    }
  }

  /** Tells the responder handler that a reply's buffer is no longer referenced (`onReplyReleased`). */
  replyReleased(message: Buffer): void {
    const r = this.responder;
    if (r?.onReplyReleased === undefined) return;
    try {
      r.onReplyReleased(message);
    } catch (e) {
      this.handlerThrew('onReplyReleased', e, {});
    }
  }

  /** `completed`: the Send (and the RDMA Writes before it) succeeded, so the reply's buffer is free. */
  releaseSendSlot(slot: number, completed = true): void {
    const message = this.sendMessages[slot];
    if (message !== null) {
      this.sendMessages[slot] = null;
      if (completed) this.replyReleased(message);
    }
    const regs = this.sendRegs[slot];
    if (regs) {
      for (let i = 0; i < regs.length; i++) this.registrar.release(regs[i]);
      this.sendRegs[slot] = null;
    }
    const stage = this.sendStage[slot];
    if (stage >= 0) {
      this.sendStage[slot] = -1;
      this.sendSlab.release(stage);
    }
    this.sendSlab.release(slot);
  }

  // ----------------------------------------------------------------------------------------------------
  // Teardown

  /**
   * Closes the connection: DISCONNECTED follows and every call is failed for retransmission. `failure`:
   * something went wrong (the peer's answer, the device), which the log says at warn (`logClosed`).
   */
  close(reason = 'closed by us', failure = false): void {
    if (this.state === 'closed') return;
    this.closedByUs = true;
    this.closedOnFailure ||= failure;
    this.closeReason ||= reason;
    try {
      this.vconn?.disconnect();
    } catch {
      this.teardown(reason);
    }
  }

  teardown(reason: string): void {
    if (this.state === 'closed') return;
    this.state = 'closed';
    if (this.negotiationTimer !== null) {
      clearTimeout(this.negotiationTimer);
      this.negotiationTimer = null;
    }
    this.closeReason ||= reason;
    const inboundDropped = this.inboundActive;
    const err = connectionLost(this.closeReason, { peer: this.peerKey, connection: this.id });
    // In-flight calls first (oldest first in XID map order), then the queue: each reported exactly once.
    const failed: TransportCall[] = [];
    const abandonedCalls = new Set<TransportCall>();
    for (const st of this.states) {
      if (st.call === null) continue;
      // The QP is in error, so no peer can reach these regions; revoking their keys fences them for good.
      releaseRegs(this, st, true);
      const call = st.call;
      const abandoned = st.abandoned;
      freeState(this, st);
      failed.push(call);
      if (abandoned) abandonedCalls.add(call);
    }
    this.queue.drain();
    this.inflight.clear();
    // RDMA Reads not yet posted name call states and inbound records freed here: none is posted now.
    this.readJobs.drain();
    this.readsOutstanding = 0;
    for (let i = 0; i < this.inbound.length; i++) {
      const ib = this.inbound[i];
      if (ib) {
        releaseInboundSinks(this, ib);
        endInbound(this, ib);
      }
    }
    for (let s = 0; s < this.sendRegs.length; s++) {
      const regs = this.sendRegs[s];
      if (regs) for (const r of regs) this.registrar.release(r, true);
      this.sendRegs[s] = null;
      this.sendStage[s] = -1;
      this.sendMessages[s] = null; // the socket may still hold views of it: left to the GC
    }
    this.pendingReplies.drain();
    this.owedControl.drain();
    for (const exposed of this.rprcPending.values()) this.registrar.release(exposed.reg, true);
    this.rprcPending.clear();
    if (this.rprcTimer !== null) {
      clearTimeout(this.rprcTimer);
      this.rprcTimer = null;
    }
    this.credits.reset();
    // Each reported exactly once, even when a handler throws (reportFailed / reportAbandoned catch).
    for (const call of failed) {
      if (abandonedCalls.has(call)) this.reportAbandoned(call);
      else this.reportFailed(call, err);
    }
    this.props.fail(err);
    this.established?.reject(err);
    this.established = null;
    this.logClosed(failed.length, inboundDropped);
    setImmediate(() => this.destroyResources());
    if (this.onClose) {
      try {
        this.onClose(this, this.closeReason);
      } catch (e) {
        this.handlerThrew('onClose', e, { reason: this.closeReason });
      }
    }
  }

  /**
   * Says why the connection ended. Warn when it cost something or was not ours to end cleanly: calls in
   * flight failed with it (to be resent), the peer ended it with a Terminate, or a completion failed.
   * Info otherwise: closed by us (a pool closing, an idle reaper), or a clean disconnect by the peer with
   * nothing in flight (a responder reaping an idle connection).
   */
  private logClosed(callsFailed: number, inboundDropped: number): void {
    if (!this.wasEstablished || !this.mayLog()) return;
    const reason = this.closeReason;
    const clean =
      callsFailed === 0 &&
      inboundDropped === 0 &&
      !this.closedOnFailure &&
      (this.closedByUs || reason === 'disconnected');
    const fields = {
      code: clean ? 'RDMA_CONNECTION_CLOSED' : 'ERR_TRANSPORT_CONNECTION_LOST',
      connection: this.id,
      peer: this.peerKey,
      // Not `role`: the process logger's base field (gateway or responder) has that name.
      end: this.role,
      reason,
      by: this.closedByUs ? 'us' : 'peer',
      callsFailed,
      inboundDropped,
    };
    if (clean) this.log.info?.(fields, `RDMA connection closed: ${reason}`);
    else
      this.log.warn(
        fields,
        `RDMA connection lost: ${reason}${callsFailed > 0 ? `; ${callsFailed} call(s) in flight failed for retransmission` : ''}`,
      );
  }

  /** Whether a line may go to the log now: there is a logger, and the process-wide budget allows it. */
  private mayLog(): boolean {
    return this.log !== SILENT && TRANSPORT_LOG_BUDGET.take(this.log);
  }

  /**
   * Logs a message of the peer's that broke the protocol, with what we did about it, at most
   * `PEER_ERRORS_LOGGED` times per connection: a peer that keeps doing it must not flood the log. The rest
   * are only counted (`errorsSent`, `droppedMessages`: `/v1/stats`), which the last line logged says.
   */
  logPeerError(fields: Record<string, unknown>, msg: string): void {
    if (this.peerErrorsLogged >= PEER_ERRORS_LOGGED || !this.mayLog()) return;
    const last = ++this.peerErrorsLogged === PEER_ERRORS_LOGGED;
    this.log.warn(
      { connection: this.id, peer: this.peerKey, ...fields, ...(last ? { moreNotLogged: true } : {}) },
      last ? `${msg} (further protocol errors of this peer are counted, not logged)` : msg,
    );
  }

  /**
   * Frees the QP, registrations, CQ and PD, each on its own: one that fails (or was never created, when
   * set-up stopped half-way) does not keep the ones after it. Best effort: a provider that still holds a
   * reference frees it with the device.
   */
  destroyResources(): void {
    const vconn = this.vconn as VerbsConnection | undefined;
    const steps = [
      () => vconn?.destroy(),
      () => this.registrar?.destroy(),
      () => this.recvSlab?.destroy(),
      () => this.sendSlab?.destroy(),
      () => this.cq?.destroy(),
      () => this.pd?.dealloc(),
    ];
    for (const step of steps) {
      try {
        step();
      } catch {
        // the next one still goes
      }
    }
    // Nothing polls a destroyed CQ: the completion objects go (a closed connection may stay referenced).
    this.wcs.length = 0;
  }

  /** Calls waiting for a credit (or for negotiation to finish). */
  get queuedCalls(): number {
    return this.queue.length;
  }

  /**
   * Whether closing now would cut short something under way in either direction: calls of ours in flight
   * or queued, inbound calls whose Read chunks are being pulled, answers waiting for a send slot, replies
   * exposed in responder-provided Read chunks until the requester's RDMA2_DONE. (An idle reaper asks.)
   */
  get workInFlight(): boolean {
    return (
      this.credits.outstanding > 0 ||
      this.queue.length > 0 ||
      this.inboundActive > 0 ||
      this.pendingReplies.length > 0 ||
      this.owedControl.length > 0 ||
      this.rprcPending.size > 0
    );
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
      errors: { sent: { ...this.errorsByCode.sent }, received: { ...this.errorsByCode.received } },
      registrations: {
        inUse: this.registrar.inUse,
        registered: this.registrar.registrations,
        rekeys: this.registrar.rekeys,
        bounceBytes: this.registrar.bounceBytes,
      },
    };
  }
}
