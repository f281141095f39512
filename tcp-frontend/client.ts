/**
 * An ONC RPC client over TCP (RFC 5531 §11 record marking): XID allocation, a pending-call map, record
 * framing without copies, and backpressure both ways.
 *
 * Used by the load generator, `rpcrdma-gateway ping`, the tests, and the responder's upstream connection.
 * For the last, two things matter beyond a plain client:
 * - `callRaw` forwards an already-encoded call message whose XID the caller chose (and restores itself);
 * - a CALL arriving from the server on the same connection (an NFSv4.1 callback, RFC 8881 §2.10.3.1) is
 *   handed to `onCall`, and the answer goes back with `sendRecord`.
 *
 * Backpressure: at most `maxInFlight` calls are on the wire; more wait in a local queue, and the queue is
 * not drained while the socket is not draining (`write()` returned false), so a slow server bounds what
 * this process buffers for it. Reading is never paused: replies are what frees the queue.
 */
import { connect, type Socket } from 'node:net';
import { GatewayError } from '../common/errors.js';
import { AUTH_NONE, type OpaqueAuthInit } from '../rpc/auth.js';
import { MsgType } from '../rpc/constants.js';
import { encodeCallHeader, peekMsgType, peekXid, RpcReplyHeader } from '../rpc/message.js';
import { XdrWriter, xdrAlign } from '../rpc/xdr.js';
import { formatHostPort } from './address.js';
import {
  DEFAULT_MAX_RECORD_SIZE,
  RecordDecoder,
  RecordMarkingError,
  writeRecordMark,
} from './record-marking.js';

/**
 * A client-side failure. Codes: `ERR_CLIENT_CONNECT` (could not connect), `ERR_CLIENT_CLOSED` (the
 * connection closed with the call unanswered), `ERR_CLIENT_TIMEOUT` (no reply within the call's timeout),
 * `ERR_CLIENT_BAD_REPLY` (a reply for this call whose header does not decode), `ERR_CLIENT_XID_IN_USE`
 * (`callRaw` with an XID already pending), `ERR_CLIENT_STREAM` (the server's byte stream broke record
 * marking; the connection is closed), `ERR_CLIENT_CLOSE_TIMEOUT` (`close()` gave up waiting for the
 * outstanding calls or for the server to close its side, and destroyed the connection).
 */
export class RpcClientError extends GatewayError {}

export interface RpcClientOptions {
  host: string;
  port: number;
  /** Calls on the wire at once; more wait locally. Default 128. */
  maxInFlight?: number;
  /** Largest reply record accepted. Default `DEFAULT_MAX_RECORD_SIZE`. */
  maxRecordSize?: number;
  /** Default per-call timeout in ms; 0 (the default) waits as long as the connection lives. */
  callTimeoutMs?: number;
  /** Give up connecting after this many ms. Default 10 s. */
  connectTimeoutMs?: number;
  /**
   * How long `close()` waits, unless told otherwise, for the outstanding calls and then for the server's
   * side to close, before it destroys the connection. Default 10 s.
   */
  closeTimeoutMs?: number;
  /**
   * Bind this source port (an NFS client reconnecting binds its previous one, so that the server's
   * duplicate request cache knows its retransmissions). Default: any.
   */
  localPort?: number;
  /** Credential and verifier of `call()`; default AUTH_NONE. */
  cred?: Readonly<OpaqueAuthInit>;
  verf?: Readonly<OpaqueAuthInit>;
  /**
   * A CALL record from the server (backchannel). Without a handler such records are counted in
   * `stats.unexpectedRecords` and dropped. The record stays valid after the handler returns.
   */
  onCall?: (record: Buffer, client: RpcClient) => void;
  /** Called once when the connection closes (`error` set when it did not close cleanly). */
  onClose?: (error: RpcClientError | undefined) => void;
}

export interface CallOptions {
  timeoutMs?: number;
  /**
   * `call()`'s XID instead of the next free one: a retransmission carries its call's XID (RFC 5531 §9).
   * It must not be outstanding on this client.
   */
  xid?: number;
}

/** A decoded reply. `message` is the whole reply record; `body` the results (empty unless SUCCESS). */
export interface RpcReply {
  xid: number;
  replyStat: number;
  acceptStat: number;
  rejectStat: number;
  authStat: number;
  mismatchLow: number;
  mismatchHigh: number;
  message: Buffer;
  body: Buffer;
}

export interface RpcClientStats {
  callsSent: number;
  repliesReceived: number;
  /** Replies whose XID matched no pending call (answered after a timeout, or a confused server). */
  lateReplies: number;
  /** CALL records with no `onCall` handler, and records that are neither CALL nor REPLY. */
  unexpectedRecords: number;
  callbacksReceived: number;
  bytesOut: number;
  bytesIn: number;
}

/**
 * Hears how a call ended, with the `token` it was given: `forwardRaw`'s caller (a forwarder keeps one
 * receiver and passes its per-call state as the token, so a call costs no closure and no promise), or the
 * promise of `call` / `callRaw`. Exactly one of the two is called per call. Neither may throw: they run
 * inside the client's socket and timer callbacks (and, for a refusal, inside `forwardRaw` itself).
 */
export interface CallReceiver<T> {
  onCallReply(token: T, reply: RpcReply): void;
  onCallFailed(token: T, err: RpcClientError): void;
}

interface PromiseSettlers {
  resolve: (reply: RpcReply) => void;
  reject: (err: RpcClientError) => void;
}

const PROMISE_RECEIVER: CallReceiver<PromiseSettlers> = {
  onCallReply: (p, reply) => p.resolve(reply),
  onCallFailed: (p, err) => p.reject(err),
};

interface PendingCall {
  xid: number;
  // biome-ignore lint/suspicious/noExplicitAny: each call's receiver matches its own token
  receiver: CallReceiver<any>;
  token: unknown;
  /** The framed message until it is written. */
  parts: Buffer[] | undefined;
  timer: NodeJS.Timeout | undefined;
}

function uncorkOnNextTick(client: RpcClient): void {
  client.flush();
}

export class RpcClient {
  readonly host: string;
  readonly port: number;
  readonly stats: RpcClientStats = {
    callsSent: 0,
    repliesReceived: 0,
    lateReplies: 0,
    unexpectedRecords: 0,
    callbacksReceived: 0,
    bytesOut: 0,
    bytesIn: 0,
  };
  /** The connection is closed (every call since failed with ERR_CLIENT_CLOSED). */
  closed = false;
  writeBlocked = false;

  private readonly socket: Socket;
  private readonly maxInFlight: number;
  private readonly callTimeoutMs: number;
  private readonly closeTimeoutMs: number;
  private readonly cred: Readonly<OpaqueAuthInit>;
  private readonly verf: Readonly<OpaqueAuthInit>;
  private readonly onCall: ((record: Buffer, client: RpcClient) => void) | undefined;
  private readonly onCloseHook: ((error: RpcClientError | undefined) => void) | undefined;
  private readonly decoder: RecordDecoder;
  private readonly replyHeader = new RpcReplyHeader();
  private readonly writer = new XdrWriter(0);
  /** Calls written and not yet answered, by XID. */
  private readonly pending = new Map<number, PendingCall>();
  /** Calls waiting for an in-flight slot, in order. */
  private queue: (PendingCall | undefined)[] = [];
  private queueHead = 0;
  private onWire = 0;
  private nextXid = (Math.random() * 0x1_0000_0000) >>> 0;
  private corked = false;
  private closeError: RpcClientError | undefined = undefined;
  private readonly closeWaiters: (() => void)[] = [];
  private ending = false;

  private constructor(socket: Socket, options: RpcClientOptions) {
    this.socket = socket;
    this.host = options.host;
    this.port = options.port;
    this.maxInFlight = options.maxInFlight ?? 128;
    this.callTimeoutMs = options.callTimeoutMs ?? 0;
    this.closeTimeoutMs = options.closeTimeoutMs ?? 10_000;
    this.cred = options.cred ?? AUTH_NONE;
    this.verf = options.verf ?? AUTH_NONE;
    this.onCall = options.onCall;
    this.onCloseHook = options.onClose;
    this.decoder = new RecordDecoder((record) => this.onRecord(record), {
      maxRecordSize: options.maxRecordSize ?? DEFAULT_MAX_RECORD_SIZE,
    });
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('drain', () => this.onDrain());
    socket.on('end', () => this.onEnd());
    socket.on('error', (err: NodeJS.ErrnoException) => {
      this.closeError ??= new RpcClientError('ERR_CLIENT_CLOSED', `connection error: ${err.message}`, {
        errno: err.code,
        server: formatHostPort(this.host, this.port),
      });
    });
    socket.on('close', () => this.onSocketClose());
  }

  /** Connects; rejects with ERR_CLIENT_CONNECT. */
  static connect(options: RpcClientOptions): Promise<RpcClient> {
    const server = formatHostPort(options.host, options.port);
    return new Promise((resolve, reject) => {
      const socket = connect({
        host: options.host,
        port: options.port,
        noDelay: true,
        ...(options.localPort !== undefined ? { localPort: options.localPort } : {}),
      });
      const timer = setTimeout(() => {
        socket.destroy();
        reject(
          new RpcClientError('ERR_CLIENT_CONNECT', `cannot connect to ${server}: timed out`, {
            server,
            timeoutMs: options.connectTimeoutMs ?? 10_000,
          }),
        );
      }, options.connectTimeoutMs ?? 10_000);
      const onError = (err: NodeJS.ErrnoException) => {
        clearTimeout(timer);
        reject(
          new RpcClientError(
            'ERR_CLIENT_CONNECT',
            `cannot connect to ${server}: ${err.message}`,
            { server, errno: err.code },
            { cause: err },
          ),
        );
      };
      socket.once('error', onError);
      socket.once('connect', () => {
        clearTimeout(timer);
        socket.off('error', onError);
        resolve(new RpcClient(socket, options));
      });
    });
  }

  /** Calls waiting for a reply (written or queued). */
  get outstanding(): number {
    return this.pending.size + this.queued;
  }

  /** Calls waiting locally for an in-flight slot or for the socket to drain. */
  get queued(): number {
    return this.queue.length - this.queueHead;
  }

  /** Local address of the connection (for logs and tests). */
  get localPort(): number {
    return this.socket.localPort ?? 0;
  }

  /**
   * Calls `prog`/`vers`/`proc` with `args` (XDR-encoded arguments, written as they are: never copied) and
   * resolves with the reply, whatever its status; rejects only when no reply can come.
   */
  call(
    prog: number,
    vers: number,
    proc: number,
    args: Buffer | readonly Buffer[] = [],
    options: CallOptions = {},
  ): Promise<RpcReply> {
    if (options.xid !== undefined && (this.pending.has(options.xid) || this.isQueued(options.xid)))
      return Promise.reject(
        new RpcClientError('ERR_CLIENT_XID_IN_USE', `xid ${options.xid} already has a call outstanding`, {
          xid: options.xid,
        }),
      );
    const xid = options.xid ?? this.allocateXid();
    const argParts: readonly Buffer[] = Buffer.isBuffer(args) ? [args] : args;
    let argBytes = 0;
    for (let i = 0; i < argParts.length; i++) argBytes += argParts[i].length;
    const headerBytes =
      24 + 8 + xdrAlign(this.cred.body?.length ?? 0) + 8 + xdrAlign(this.verf.body?.length ?? 0);
    // One buffer holds the record mark and the call header; the arguments follow as separate parts.
    const head = Buffer.allocUnsafe(4 + headerBytes);
    this.writer.reset(head, 4, head.length);
    encodeCallHeader(this.writer, { xid, prog, vers, proc, cred: this.cred, verf: this.verf });
    writeRecordMark(head, 0, headerBytes + argBytes, true);
    const parts: Buffer[] = [head];
    for (let i = 0; i < argParts.length; i++) if (argParts[i].length > 0) parts.push(argParts[i]);
    return this.submitPromise(xid, parts, options.timeoutMs ?? this.callTimeoutMs);
  }

  /**
   * Sends a complete call message (its parts concatenated form one RPC call; the first part holds at
   * least the XID) and resolves with the reply carrying that XID. For forwarding: the caller owns XIDs.
   */
  callRaw(message: readonly Buffer[], options: CallOptions = {}): Promise<RpcReply> {
    return new Promise<RpcReply>((resolve, reject) =>
      this.forwardRaw(message, PROMISE_RECEIVER, { resolve, reject }, options),
    );
  }

  /**
   * `callRaw` for a forwarder: the outcome goes to `receiver` with `token`, never through a promise. A
   * call that cannot be sent (the client is closed or closing, or its XID is outstanding:
   * ERR_CLIENT_XID_IN_USE) fails at once, before this returns.
   */
  forwardRaw<T>(
    message: readonly Buffer[],
    receiver: CallReceiver<T>,
    token: T,
    options: CallOptions = {},
  ): void {
    const xid = peekXid(message[0] ?? Buffer.alloc(0));
    if (this.pending.has(xid) || this.isQueued(xid)) {
      receiver.onCallFailed(
        token,
        new RpcClientError('ERR_CLIENT_XID_IN_USE', `xid ${xid} already has a call outstanding`, { xid }),
      );
      return;
    }
    let total = 0;
    for (let i = 0; i < message.length; i++) total += message[i].length;
    const mark = Buffer.allocUnsafe(4);
    writeRecordMark(mark, 0, total, true);
    const parts: Buffer[] = [mark];
    for (let i = 0; i < message.length; i++) parts.push(message[i]);
    this.submit(xid, parts, options.timeoutMs ?? this.callTimeoutMs, receiver, token);
  }

  /**
   * Writes one record as it is (a reply to a backchannel call, or a hand-made message in a test). Returns
   * false when the socket is not draining.
   */
  sendRecord(parts: readonly Buffer[]): boolean {
    if (this.closed) return false;
    let total = 0;
    for (const p of parts) total += p.length;
    const mark = Buffer.allocUnsafe(4);
    writeRecordMark(mark, 0, total, true);
    return this.write([mark, ...parts]);
  }

  /** Writes raw bytes, unframed (tests of malformed streams). */
  sendRaw(bytes: Buffer): boolean {
    return this.write([bytes]);
  }

  /**
   * Waits for every outstanding call to settle, then closes the connection (never a half-close first) and
   * waits for the server's side to close. A server that neither answers nor closes must not hold the
   * caller for ever: after `timeoutMs` (default `closeTimeoutMs`) the connection is destroyed, and the calls
   * still outstanding fail with ERR_CLIENT_CLOSE_TIMEOUT.
   */
  async close(timeoutMs = this.closeTimeoutMs): Promise<void> {
    if (this.closed) return;
    this.ending = true;
    const timer = setTimeout(() => this.abandon(timeoutMs), timeoutMs);
    try {
      if (this.outstanding > 0) {
        await new Promise<void>((resolve) => this.closeWaiters.push(resolve));
      }
      if (this.closed) return;
      await new Promise<void>((resolve) => {
        this.socket.once('close', () => resolve());
        this.flush();
        this.socket.end();
      });
    } finally {
      clearTimeout(timer);
    }
  }

  /** `close()` ran out of time: the connection goes now, and what it still owes fails with the reason. */
  private abandon(timeoutMs: number): void {
    if (this.closed) return;
    this.closeError ??= new RpcClientError(
      'ERR_CLIENT_CLOSE_TIMEOUT',
      `the connection did not close within ${timeoutMs} ms`,
      { server: formatHostPort(this.host, this.port), timeoutMs, outstanding: this.outstanding },
    );
    this.socket.destroy();
  }

  /** Closes at once; outstanding calls fail with ERR_CLIENT_CLOSED. */
  destroy(): void {
    this.socket.destroy();
  }

  /** Closes at once with a TCP reset (a connection lost): nothing lingers in TIME_WAIT. */
  reset(): void {
    this.socket.resetAndDestroy();
  }

  /** Writes what was corked in this tick. */
  flush(): void {
    if (!this.corked) return;
    this.corked = false;
    this.socket.uncork();
  }

  private allocateXid(): number {
    let xid = this.nextXid;
    while (this.pending.has(xid)) xid = (xid + 1) >>> 0;
    this.nextXid = (xid + 1) >>> 0;
    return xid;
  }

  private isQueued(xid: number): boolean {
    for (let i = this.queueHead; i < this.queue.length; i++) if (this.queue[i]?.xid === xid) return true;
    return false;
  }

  private submitPromise(xid: number, parts: Buffer[], timeoutMs: number): Promise<RpcReply> {
    return new Promise<RpcReply>((resolve, reject) =>
      this.submit(xid, parts, timeoutMs, PROMISE_RECEIVER, { resolve, reject }),
    );
  }

  private submit<T>(
    xid: number,
    parts: Buffer[],
    timeoutMs: number,
    receiver: CallReceiver<T>,
    token: T,
  ): void {
    if (this.closed || this.ending) {
      receiver.onCallFailed(
        token,
        this.closeError ??
          new RpcClientError('ERR_CLIENT_CLOSED', 'the client is closed', {
            server: formatHostPort(this.host, this.port),
          }),
      );
      return;
    }
    const call: PendingCall = { xid, receiver, token, parts, timer: undefined };
    if (timeoutMs > 0) call.timer = setTimeout(() => this.timeOut(call, timeoutMs), timeoutMs);
    this.queue.push(call);
    this.pump();
  }

  private pump(): void {
    while (this.queueHead < this.queue.length && this.onWire < this.maxInFlight && !this.writeBlocked) {
      const call = this.queue[this.queueHead]!;
      this.queue[this.queueHead++] = undefined;
      const parts = call.parts!;
      call.parts = undefined;
      this.pending.set(call.xid, call);
      this.onWire++;
      this.stats.callsSent++;
      this.write(parts);
    }
    if (this.queueHead === this.queue.length) {
      this.queue.length = 0;
      this.queueHead = 0;
    }
  }

  private write(parts: readonly Buffer[]): boolean {
    const socket = this.socket;
    if (!this.corked) {
      this.corked = true;
      socket.cork();
      process.nextTick(uncorkOnNextTick, this);
    }
    let ok = true;
    for (const p of parts) {
      this.stats.bytesOut += p.length;
      ok = socket.write(p);
    }
    if (!ok) this.writeBlocked = true;
    return ok;
  }

  private onDrain(): void {
    this.writeBlocked = false;
    this.pump();
  }

  private onData(chunk: Buffer): void {
    this.stats.bytesIn += chunk.length;
    try {
      this.decoder.push(chunk);
    } catch (err) {
      if (!(err instanceof RecordMarkingError)) throw err;
      this.closeError = new RpcClientError(
        'ERR_CLIENT_STREAM',
        `the server broke record marking: ${err.reason}`,
        { ...err.details, server: formatHostPort(this.host, this.port) },
        { cause: err },
      );
      this.socket.destroy();
    }
  }

  private onRecord(record: Buffer): void {
    if (record.length < 8) {
      this.stats.unexpectedRecords++;
      return;
    }
    const type = peekMsgType(record);
    if (type === MsgType.CALL) {
      this.stats.callbacksReceived++;
      if (this.onCall) this.onCall(record, this);
      else this.stats.unexpectedRecords++;
      return;
    }
    if (type !== MsgType.REPLY) {
      this.stats.unexpectedRecords++;
      return;
    }
    const xid = peekXid(record);
    const call = this.pending.get(xid);
    if (!call) {
      this.stats.lateReplies++;
      return;
    }
    this.settle(call);
    this.stats.repliesReceived++;
    const h = this.replyHeader;
    try {
      h.decode(record);
    } catch (err) {
      call.receiver.onCallFailed(
        call.token,
        new RpcClientError(
          'ERR_CLIENT_BAD_REPLY',
          `reply to xid ${xid} does not decode`,
          { xid, ...(err instanceof GatewayError ? { cause: err.toLog() } : {}) },
          { cause: err },
        ),
      );
      return;
    }
    call.receiver.onCallReply(call.token, {
      xid,
      replyStat: h.replyStat,
      acceptStat: h.acceptStat,
      rejectStat: h.rejectStat,
      authStat: h.authStat,
      mismatchLow: h.mismatchLow,
      mismatchHigh: h.mismatchHigh,
      message: record,
      body: h.body,
    });
  }

  /** Removes a written call from the pending map and frees its slot. */
  private settle(call: PendingCall): void {
    this.pending.delete(call.xid);
    if (call.timer) clearTimeout(call.timer);
    this.onWire--;
    this.pump();
    this.notifyIfIdle();
  }

  private timeOut(call: PendingCall, timeoutMs: number): void {
    call.timer = undefined;
    if (this.pending.get(call.xid) === call) {
      this.settle(call);
    } else {
      const i = this.queue.indexOf(call, this.queueHead);
      if (i < 0) return;
      this.queue.splice(i, 1);
      this.notifyIfIdle();
    }
    call.receiver.onCallFailed(
      call.token,
      new RpcClientError('ERR_CLIENT_TIMEOUT', `no reply to xid ${call.xid} within ${timeoutMs} ms`, {
        xid: call.xid,
        timeoutMs,
      }),
    );
  }

  private notifyIfIdle(): void {
    if (this.outstanding === 0) for (const resolve of this.closeWaiters.splice(0)) resolve();
  }

  private onEnd(): void {
    // The server closed its side: no reply can come any more (expected when we asked to close).
    if (!this.ending)
      this.closeError ??= new RpcClientError('ERR_CLIENT_CLOSED', 'the server closed the connection', {
        server: formatHostPort(this.host, this.port),
      });
    this.socket.end();
  }

  private onSocketClose(): void {
    if (this.closed) return;
    this.closed = true;
    const error =
      this.closeError ??
      new RpcClientError('ERR_CLIENT_CLOSED', 'the connection closed', {
        server: formatHostPort(this.host, this.port),
      });
    const failed: PendingCall[] = [...this.pending.values()];
    for (let i = this.queueHead; i < this.queue.length; i++) failed.push(this.queue[i]!);
    this.pending.clear();
    this.queue = [];
    this.queueHead = 0;
    this.onWire = 0;
    for (const call of failed) {
      if (call.timer) clearTimeout(call.timer);
      call.receiver.onCallFailed(call.token, error);
    }
    for (const resolve of this.closeWaiters.splice(0)) resolve();
    const clean = this.ending && failed.length === 0 && !this.closeError;
    this.onCloseHook?.(clean ? undefined : error);
  }
}
