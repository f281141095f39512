/**
 * Connection management of the soft provider: TCP connect/accept plus the MPA request/reply exchange
 * (RFC 5044 §7.1, MPA v2 enhanced mode RFC 6581), mapped onto librdmacm's events. Once the exchange is
 * done the socket belongs to the QP (qp.ts).
 */
import net from 'node:net';
import {
  type CmEvent,
  CmEventType,
  type Connection,
  type ConnectRequest,
  type ConnParam,
  type DeviceCaps,
  invalidArgument,
  type QpInit,
  VerbsError,
} from '../../verbs/index.js';
import type { SoftCq } from './cq.js';
import type { SoftPd } from './memory.js';
import { decodeMpa, encodeMpa, irdOf, MpaError, type MpaFrame, mpaFrameLength } from './mpa.js';
import { type QpOwner, SoftQp, type StreamParams } from './qp.js';
import { Term, type TerminateCause } from './terminate.js';
import {
  MPA_MAX_PRIVATE_DATA,
  MPA_V2_IRD_ORD_MASK,
  MPA_V2_IRD_ORD_SIZE,
  MPA_V2_PEER_TO_PEER,
  MPA_V2_ZERO_LENGTH_READ_RTR,
  MPA_V2_ZERO_LENGTH_WRITE_RTR,
  Rtr,
} from './wire.js';

/**
 * The RTR to use among those whose bits `ordWord` (an ORD word) carries (RFC 6581 §5), `readCredits` being
 * what the Read RTR would need at our end (a responder's IRD, an initiator's ORD): the zero-length RDMA
 * Write first, as Linux siw and iw_cxgb4 pick it, else the zero-length RDMA Read. A responder answers the
 * request's bits with it; an initiator reads the reply's bits, masked by those it offered, with it.
 * Chelsio's iw_cxgb4 offers only the Read one by default (`p2p_type` 1) and refuses a reply that names
 * none. The zero-length Send (the Send RTR bit of the IRD word) is never taken, as in siw: it would
 * consume a Receive the ULP posted; an initiator that offers only that one gets a reply naming none.
 */
function chooseRtr(ordWord: number, readCredits: number): Rtr {
  if ((ordWord & MPA_V2_ZERO_LENGTH_WRITE_RTR) !== 0) return Rtr.WRITE;
  if ((ordWord & MPA_V2_ZERO_LENGTH_READ_RTR) !== 0 && readCredits > 0) return Rtr.READ;
  return Rtr.NONE;
}

/** The ORD-word bit naming `rtr` (0 for none). */
function rtrBit(rtr: Rtr): number {
  return rtr === Rtr.WRITE
    ? MPA_V2_ZERO_LENGTH_WRITE_RTR
    : rtr === Rtr.READ
      ? MPA_V2_ZERO_LENGTH_READ_RTR
      : 0;
}

/** What a connection needs from its device. */
export interface SoftDeviceContext {
  readonly options: Required<SoftProviderOptions>;
  readonly stags: import('./memory.js').StagTable;
  readonly limits: { maxQpWr: number; maxSge: number; maxIrd: number; maxOrd: number };
  /** Throws VERBS_RESOURCE_LIMIT when the device already has `maxQp` queue pairs (`ibv_create_qp`: ENOMEM). */
  admitQp(): void;
  track(c: SoftConnection, add: boolean): void;
}

/** Soft provider options (all optional). */
export interface SoftProviderOptions {
  /** Ask for / accept MPA CRC32c (RFC 5044 §4.4). Default true. */
  crc?: boolean;
  /** Largest ULPDU per FPDU (MULPDU, RFC 5044 §4.1), ≤ 65535. Default 65504. */
  mulpdu?: number;
  /** MPA revision the initiator proposes: 2 (enhanced, with IRD/ORD and RTR) or 1. Default 2. */
  mpaRevision?: 1 | 2;
  /** Default IRD and ORD when the consumer gives none. Default 32. */
  defaultIrd?: number;
  defaultOrd?: number;
  /**
   * Register only memory from `device.allocBuffer()`, as the native provider must (hardware pins pages,
   * and a `Buffer.allocUnsafe` pool slab shares its pages with unrelated data). Off by default; tests
   * turn it on to run the native provider's memory rules where no device exists. Default false.
   */
  ownedMemoryOnly?: boolean;
  /**
   * The RTRs a peer-to-peer initiator offers (MPA revision 2, RFC 6581 §5): `write`, the zero-length
   * RDMA Write; `read`, the zero-length RDMA Read (what Chelsio's iw_cxgb4 offers by default); `both`,
   * as Linux siw. The responder picks one; ours picks the Write when offered. Default `both`: an
   * iw_cxgb4 responder answers with its own `p2p_type` (the Read one by default) whatever was offered,
   * so offering only the Write would refuse every Linux NFS/RDMA server on a Chelsio adapter.
   */
  offerRtr?: 'write' | 'read' | 'both';
  /**
   * A smaller device than soft0's default caps: at most this many queue pairs, completion queues,
   * protection domains and memory regions at once (each at least 1, at most the default). Past one, the
   * call that would create another fails with VERBS_RESOURCE_LIMIT, as `ibv_create_qp`, `ibv_create_cq`,
   * `ibv_alloc_pd` and `ibv_reg_mr` fail with ENOMEM on an exhausted adapter: the way to exercise what
   * the layers above do when a device runs out. Default: none (soft0's caps).
   */
  caps?: SoftCapsLimit;
  /**
   * Where the provider reports what no caller hears of otherwise: a listener that failed to accept a
   * connection (EMFILE, ENFILE, ...) and goes on listening. A pino `Logger` fits (give the gateway's,
   * or a child of it). Default: a pino logger writing warnings and errors to stderr.
   */
  logger?: SoftLogger;
}

/** The structured logger the soft provider writes to (a pino `Logger` fits). */
export interface SoftLogger {
  warn(fields: Record<string, unknown>, message: string): void;
}

/** The resource caps `SoftProviderOptions.caps` may lower. */
export type SoftCapsLimit = Partial<Pick<DeviceCaps, 'maxQp' | 'maxCq' | 'maxPd' | 'maxMr'>>;

/** ESTABLISHED/REJECTED/DISCONNECTED etc. are delivered after the current call stack, in order. */
function deliver(handler: (e: CmEvent) => void, event: CmEvent): void {
  queueMicrotask(() => handler(event));
}

const ULP_PRIVATE_DATA_MAX = MPA_MAX_PRIVATE_DATA - MPA_V2_IRD_ORD_SIZE;
/** Read buffer of an active connection's stream: a 1 MiB RDMA Write in four reads. */
const READ_BUFFER_SIZE = 256 * 1024;

function checkPrivateData(pd: Buffer | undefined): Buffer {
  const b = pd ?? Buffer.alloc(0);
  if (b.length > ULP_PRIVATE_DATA_MAX) {
    throw invalidArgument('private data too long', { length: b.length, max: ULP_PRIVATE_DATA_MAX });
  }
  return b;
}

function clampDepth(v: number | undefined, dflt: number, max: number): number {
  const n = v ?? dflt;
  if (!Number.isInteger(n) || n < 0)
    throw invalidArgument('IRD/ORD must be a non-negative integer', { value: n });
  return Math.min(n, max, MPA_V2_IRD_ORD_MASK);
}

export class SoftConnection implements Connection, QpOwner {
  readonly qp: SoftQp;
  localAddress = '';
  localPort = 0;
  remoteAddress = '';
  remotePort = 0;
  private socket: net.Socket | undefined;
  private hs: Buffer = Buffer.alloc(0);
  private phase: 'connecting' | 'request' | 'accepted' | 'up' | 'dead' = 'connecting';
  private disconnected = false;
  private destroyed = false;
  private timer: NodeJS.Timeout | undefined;
  private myIrd = 0;
  private myOrd = 0;
  /** Passive side: the initiator's request. */
  private request: MpaFrame | undefined;

  constructor(
    private readonly ctx: SoftDeviceContext,
    private readonly init: QpInit,
  ) {
    ctx.admitQp();
    this.qp = new SoftQp(init.pd as SoftPd, init.sendCq, init.recvCq, init.cap, ctx.stags, this, ctx.limits);
    ctx.track(this, true);
  }

  get ord(): number {
    return this.qp.ord;
  }

  get ird(): number {
    return this.qp.ird;
  }

  /**
   * The ORD-word RTR bits an initiator offers (`SoftProviderOptions.offerRtr`). Not the Read RTR with an
   * ORD of 0: we could not send it (it takes a Read credit), and a reply choosing it would be refused.
   */
  private offeredRtrs(): number {
    const o = this.ctx.options.offerRtr;
    const read = o !== 'write' && this.myOrd > 0;
    return (o === 'read' ? 0 : MPA_V2_ZERO_LENGTH_WRITE_RTR) | (read ? MPA_V2_ZERO_LENGTH_READ_RTR : 0);
  }

  private emit(event: CmEvent): void {
    deliver(this.init.onEvent, event);
  }

  // ---------------------------------------------------------------- active side

  startConnect(host: string, port: number, param: ConnParam, timeoutMs: number): void {
    const pd = checkPrivateData(param.privateData);
    this.myIrd = clampDepth(param.ird, this.ctx.options.defaultIrd, this.ctx.limits.maxIrd);
    this.myOrd = clampDepth(param.ord, this.ctx.options.defaultOrd, this.ctx.limits.maxOrd);
    const rev = this.ctx.options.mpaRevision;
    const req = encodeMpa({
      reply: false,
      markers: false,
      crc: this.ctx.options.crc,
      reject: false,
      revision: rev,
      // RFC 6581 §5/§6: peer-to-peer mode, offering the RTRs `offerRtr` names.
      enhanced:
        rev === 2
          ? { irdWord: MPA_V2_PEER_TO_PEER | this.myIrd, ordWord: this.offeredRtrs() | this.myOrd }
          : undefined,
      privateData: pd,
    });
    // The stream is read into one buffer per connection, reused (`onread`): the QP copies everything it
    // keeps (headers, trailers, payload into the registered sink), and the MPA handshake below copies too.
    const socket = net.connect({
      host,
      port,
      onread: {
        buffer: Buffer.allocUnsafe(READ_BUFFER_SIZE),
        callback: (n: number, buf: Uint8Array): boolean => {
          this.onActiveData((buf as Buffer).subarray(0, n));
          return true;
        },
      },
    });
    this.socket = socket;
    socket.setNoDelay(true);
    this.timer = setTimeout(() => {
      this.failConnect(
        CmEventType.UNREACHABLE,
        new VerbsError('VERBS_TIMEOUT', 'connect timed out', { host, port }),
      );
    }, timeoutMs);
    this.timer.unref();
    socket.once('connect', () => {
      this.noteAddresses(socket);
      socket.write(req);
    });
    socket.on('error', (err: NodeJS.ErrnoException) => this.onSocketError(err));
    socket.on('close', () => this.onSocketClose());
  }

  private noteAddresses(socket: net.Socket): void {
    this.localAddress = socket.localAddress ?? '';
    this.localPort = socket.localPort ?? 0;
    this.remoteAddress = socket.remoteAddress ?? '';
    this.remotePort = socket.remotePort ?? 0;
  }

  private onActiveData(chunk: Buffer): void {
    if (this.phase === 'up') {
      this.qp.onData(chunk);
      return;
    }
    if (this.phase !== 'connecting') return;
    // A copy: `chunk` is the reused read buffer.
    this.hs = Buffer.concat([this.hs, chunk]);
    let need: number;
    let reply: MpaFrame;
    try {
      // A bad header fails the connect as soon as its 20 bytes are in (`mpaFrameLength`).
      need = mpaFrameLength(this.hs, true);
      if (need < 0 || this.hs.length < need) return;
      reply = decodeMpa(this.hs.subarray(0, need), true);
    } catch (err) {
      this.failConnect(CmEventType.CONNECT_ERROR, err as Error);
      return;
    }
    const leftover = this.hs.subarray(need);
    this.hs = Buffer.alloc(0);
    clearTimeout(this.timer);
    if (reply.reject) {
      this.phase = 'dead';
      this.socket?.destroy();
      this.emit({ type: CmEventType.REJECTED, privateData: reply.privateData });
      return;
    }
    const rev = this.ctx.options.mpaRevision;
    const problem = reply.markers
      ? 'peer wants markers (not supported)'
      : reply.revision > rev
        ? 'reply revision above the request'
        : this.ctx.options.crc && !reply.crc
          ? 'peer dropped CRC that we required'
          : undefined;
    if (problem) {
      this.failConnect(
        CmEventType.CONNECT_ERROR,
        new VerbsError('VERBS_MPA', `MPA reply refused: ${problem}`, {}),
      );
      return;
    }
    let ord = rev === 2 ? this.myOrd : Math.min(this.myOrd, this.ctx.options.defaultOrd);
    let sendRtr: Rtr = Rtr.NONE;
    let rtrRefused = false;
    if (reply.enhanced) {
      ord = Math.min(this.myOrd, irdOf(reply.enhanced.irdWord));
      // RFC 6581 §5: a peer-to-peer reply names the RTR, one of those we offered. None, the Send one
      // (never offered), or one we did not offer is no matching RTR option.
      const p2p = (reply.enhanced.irdWord & MPA_V2_PEER_TO_PEER) !== 0;
      sendRtr = p2p ? chooseRtr(reply.enhanced.ordWord & this.offeredRtrs(), ord) : Rtr.NONE;
      rtrRefused = p2p && sendRtr === Rtr.NONE;
    }
    const params: StreamParams = {
      crc: reply.crc,
      mulpdu: this.ctx.options.mulpdu,
      ord,
      ird: this.myIrd,
      waitForPeerFirst: false,
      sendRtr,
      expectRtr: Rtr.NONE,
    };
    if (rtrRefused) {
      // As Linux siw does, the responder is told why with a Terminate (MPA 2/0/7); the QP frames it and
      // closes the stream, and `onStreamDead` turns that into this connect's CONNECT_ERROR.
      const words = reply.enhanced as { irdWord: number; ordWord: number };
      this.qp.start(this.socket as net.Socket, params);
      this.qp.fatal(
        Term.MPA_NO_MATCHING_RTR,
        true,
        undefined,
        new MpaError(
          'MPA_RTR_MISMATCH',
          'MPA reply refused: peer-to-peer mode without an RTR we offered (RFC 6581 §5)',
          { irdWord: words.irdWord, ordWord: words.ordWord },
        ),
      );
      return;
    }
    this.establish(this.socket as net.Socket, params, leftover, reply.privateData);
  }

  /**
   * The MPA exchange is done: the QP takes the stream, ESTABLISHED is queued, and only then are the bytes
   * that came after the MPA frame parsed, as FPDUs. A peer that sent them broke RFC 5044 §7.1.2 (the
   * initiator sends no FPDU before the reply, the responder none before the initiator's first); whatever
   * they cause, a Terminate and DISCONNECTED included, reaches the consumer after ESTABLISHED, never
   * before it, as with librdmacm (no DISCONNECTED for a connection that never was ESTABLISHED). Linux siw
   * refuses such bytes when they are there with the MPA frame (siw_recv_mpa_rr: "peer sent extra data",
   * -EPROTO) but parses those that come a moment later with its QP: we do the latter whatever the timing.
   */
  private establish(socket: net.Socket, params: StreamParams, leftover: Buffer, privateData: Buffer): void {
    this.phase = 'up';
    this.qp.start(socket, params);
    this.emit({ type: CmEventType.ESTABLISHED, privateData });
    // After the emit: events are delivered in the order they are queued (`deliver`).
    if (leftover.length > 0) this.qp.onData(leftover);
  }

  private failConnect(type: CmEventType, error: Error): void {
    if (this.phase === 'dead' || this.phase === 'up') return;
    this.phase = 'dead';
    clearTimeout(this.timer);
    this.socket?.destroy();
    this.emit({ type, error });
  }

  private onSocketError(err: NodeJS.ErrnoException): void {
    if (this.phase === 'connecting') {
      const code = err.code ?? '';
      // iw_cm reports a refused TCP connection as REJECTED (status -ECONNREFUSED), with no private data.
      if (code === 'ECONNREFUSED') {
        this.phase = 'dead';
        clearTimeout(this.timer);
        this.emit({ type: CmEventType.REJECTED, privateData: Buffer.alloc(0), error: err });
        return;
      }
      const addr =
        code === 'ENOTFOUND' || code === 'EADDRNOTAVAIL' || code === 'EAI_AGAIN' || code === 'EINVAL';
      this.failConnect(addr ? CmEventType.ADDR_ERROR : CmEventType.UNREACHABLE, err);
      return;
    }
    if (this.phase === 'up' || this.phase === 'accepted') this.qp.closeStream(err);
  }

  private onSocketClose(): void {
    if (this.phase === 'connecting') {
      this.failConnect(
        CmEventType.CONNECT_ERROR,
        new VerbsError('VERBS_MPA', 'peer closed during MPA setup'),
      );
      return;
    }
    if (this.phase === 'request') {
      this.phase = 'dead';
      return;
    }
    if (this.phase === 'up' || this.phase === 'accepted') this.qp.closeStream();
  }

  // ---------------------------------------------------------------- passive side

  /** Called by the listener once the MPA request was read; the socket keeps buffering after it. */
  adoptPassive(socket: net.Socket, request: MpaFrame, leftover: Buffer): void {
    this.socket = socket;
    this.request = request;
    this.hs = leftover;
    this.phase = 'request';
    this.noteAddresses(socket);
    socket.removeAllListeners('data');
    socket.removeAllListeners('error');
    socket.removeAllListeners('close');
    socket.on('data', (chunk: Buffer) => {
      if (this.phase === 'up') this.qp.onData(chunk);
      else this.hs = Buffer.concat([this.hs, chunk]); // a copy: `chunk` may be a reused read buffer
    });
    socket.on('error', (err: NodeJS.ErrnoException) => this.onSocketError(err));
    socket.on('close', () => this.onSocketClose());
  }

  accept(param: ConnParam = {}): void {
    const req = this.request;
    if (req === undefined || this.phase !== 'request') {
      throw new VerbsError('VERBS_INVALID_STATE', 'accept() is for a passive connection awaiting it', {
        phase: this.phase,
      });
    }
    const pd = checkPrivateData(param.privateData);
    this.myIrd = clampDepth(param.ird, this.ctx.options.defaultIrd, this.ctx.limits.maxIrd);
    this.myOrd = clampDepth(param.ord, this.ctx.options.defaultOrd, this.ctx.limits.maxOrd);
    // RFC 5044 §7.1.2: CRC is used when either side asks for it; answer revision 1 with revision 1.
    const crc = req.crc || this.ctx.options.crc;
    let ord = this.myOrd;
    let enhanced: MpaFrame['enhanced'];
    let rtr: Rtr = Rtr.NONE;
    if (req.enhanced) {
      ord = Math.min(this.myOrd, irdOf(req.enhanced.irdWord));
      const p2p = (req.enhanced.irdWord & MPA_V2_PEER_TO_PEER) !== 0;
      rtr = p2p ? chooseRtr(req.enhanced.ordWord, this.myIrd) : Rtr.NONE;
      enhanced = {
        irdWord: (p2p ? MPA_V2_PEER_TO_PEER : 0) | this.myIrd,
        ordWord: rtrBit(rtr) | ord,
      };
    }
    const reply = encodeMpa({
      reply: true,
      markers: false,
      crc,
      reject: false,
      revision: req.revision,
      enhanced,
      privateData: pd,
    });
    const socket = this.socket as net.Socket;
    socket.setNoDelay(true);
    socket.write(reply);
    const leftover = this.hs;
    this.hs = Buffer.alloc(0);
    // RFC 5044 §7.1.2: the responder sends no FPDU before the initiator's first one arrived; in
    // peer-to-peer mode that one must be the RTR the reply chose (RFC 6581 §5), or the stream ends.
    this.establish(
      socket,
      {
        crc,
        mulpdu: this.ctx.options.mulpdu,
        ord,
        ird: this.myIrd,
        waitForPeerFirst: true,
        sendRtr: Rtr.NONE,
        expectRtr: rtr,
      },
      leftover,
      req.privateData,
    );
  }

  /** Passive side: rdma_reject. */
  rejectRequest(privateData?: Buffer): void {
    const req = this.request;
    if (req === undefined || this.phase !== 'request') {
      throw new VerbsError('VERBS_INVALID_STATE', 'reject() is for a connection request awaiting an answer');
    }
    rejectSocket(this.socket as net.Socket, req, checkPrivateData(privateData));
    this.phase = 'dead';
  }

  // ---------------------------------------------------------------- QpOwner

  onStreamDead(detail: { terminate?: { local: boolean } & TerminateCause; error?: Error }): void {
    if (this.disconnected) return;
    this.disconnected = true;
    if (this.phase === 'connecting') {
      // The MPA reply was refused after the QP took the socket to send a Terminate: the connect failed.
      this.phase = 'dead';
      this.emit({ type: CmEventType.CONNECT_ERROR, error: detail.error });
      return;
    }
    this.phase = 'dead';
    if (this.destroyed) return;
    const t = detail.terminate;
    this.emit({
      type: CmEventType.DISCONNECTED,
      error: detail.error,
      terminate: t ? { local: t.local, layer: t.layer, type: t.type, code: t.code, name: t.name } : undefined,
    });
  }

  onFirstFpdu(): void {}

  // ---------------------------------------------------------------- teardown

  disconnect(): void {
    if (this.phase === 'connecting') {
      this.failConnect(
        CmEventType.CONNECT_ERROR,
        new VerbsError('VERBS_DISCONNECTED', 'disconnected while connecting'),
      );
      return;
    }
    if (this.phase === 'request') {
      this.rejectRequest();
      return;
    }
    if (this.phase === 'up') this.qp.closeStream();
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    clearTimeout(this.timer);
    if (this.phase === 'up') this.qp.closeStream();
    else this.socket?.destroy();
    this.phase = 'dead';
    this.qp.release();
    this.socket = undefined;
    this.ctx.track(this, false);
  }
}

function rejectSocket(socket: net.Socket, req: MpaFrame, privateData: Buffer): void {
  const reply = encodeMpa({
    reply: true,
    markers: false,
    crc: req.crc,
    reject: true,
    revision: req.revision,
    enhanced: req.enhanced ? { irdWord: 0, ordWord: 0 } : undefined,
    privateData,
  });
  socket.end(reply);
  setTimeout(() => socket.destroy(), 2000).unref();
}

/** The passive side of one incoming connection before the consumer answered it. */
export class SoftConnectRequest implements ConnectRequest {
  readonly remoteAddress: string;
  readonly remotePort: number;
  readonly privateData: Buffer;
  readonly ird: number;
  readonly ord: number;
  private answered = false;

  constructor(
    private readonly ctx: SoftDeviceContext,
    private readonly socket: net.Socket,
    private readonly frame: MpaFrame,
    private readonly leftover: () => Buffer,
  ) {
    this.remoteAddress = socket.remoteAddress ?? '';
    this.remotePort = socket.remotePort ?? 0;
    this.privateData = frame.privateData;
    // Revision 1 carries no IRD/ORD: assume the device default.
    this.ird = frame.enhanced ? irdOf(frame.enhanced.irdWord) : ctx.options.defaultIrd;
    this.ord = frame.enhanced ? irdOf(frame.enhanced.ordWord) : ctx.options.defaultOrd;
  }

  createConnection(init: QpInit): Connection {
    if (this.answered) throw new VerbsError('VERBS_INVALID_STATE', 'connection request already answered');
    // Answered only once the QP exists: a device out of QPs (or a bad QpInit) throws here, and the
    // consumer can still reject() the request instead of leaving the peer's socket open.
    const c = new SoftConnection(this.ctx, init);
    this.answered = true;
    c.adoptPassive(this.socket, this.frame, this.leftover());
    return c;
  }

  reject(privateData?: Buffer): void {
    if (this.answered) throw new VerbsError('VERBS_INVALID_STATE', 'connection request already answered');
    this.answered = true;
    rejectSocket(this.socket, this.frame, checkPrivateData(privateData));
  }
}

/** Reads the MPA request of a fresh passive socket, then hands it to `onRequest`. */
export function acceptMpaRequest(
  ctx: SoftDeviceContext,
  socket: net.Socket,
  onRequest: (r: SoftConnectRequest) => void,
): void {
  let hs: Buffer = Buffer.alloc(0);
  let leftover: Buffer = Buffer.alloc(0);
  let done = false;
  const timer = setTimeout(() => socket.destroy(), 10_000);
  timer.unref();
  socket.on('error', () => socket.destroy());
  socket.on('close', () => clearTimeout(timer));
  socket.on('data', (chunk: Buffer) => {
    if (done) {
      leftover = Buffer.concat([leftover, chunk]); // copies: `chunk` may be a reused read buffer
      return;
    }
    hs = Buffer.concat([hs, chunk]);
    if (
      hs.length >= 16 &&
      !hs.subarray(0, Math.min(16, hs.length)).equals(Buffer.from('MPA ID Req Frame', 'latin1'))
    ) {
      socket.destroy();
      return;
    }
    let need: number;
    let frame: MpaFrame;
    try {
      // A bad header (a Private Data Length over 512) ends it as soon as its 20 bytes are in.
      need = mpaFrameLength(hs, false);
      if (need < 0 || hs.length < need) return;
      frame = decodeMpa(hs.subarray(0, need), false);
    } catch {
      socket.destroy();
      return;
    }
    done = true;
    clearTimeout(timer);
    leftover = hs.subarray(need);
    if (frame.markers) {
      // RFC 5044 §7.1.2 lets the responder refuse markers: reject, we never use them.
      rejectSocket(socket, frame, Buffer.alloc(0));
      return;
    }
    onRequest(new SoftConnectRequest(ctx, socket, frame, () => leftover));
  });
}

export type { SoftCq };
