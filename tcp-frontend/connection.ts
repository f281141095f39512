/**
 * One client connection of the TCP frontend: record decoding, the in-flight accounting that drives read
 * backpressure, write backpressure, batched reply writes, the idle timeout, and one close reason.
 *
 * Flow control, both ways:
 * - Reading (and dispatching) is paused while the client has `maxCallsInFlight` calls dispatched and not
 *   released, while the dispatcher holds the connection (`hold()`), or while the socket is not draining. A paused socket stops
 *   reading, the kernel's receive window fills, and TCP pushes back on the client itself; no other client
 *   is affected. Records already decoded from the last chunk read wait in a small backlog (at most one
 *   chunk's worth), so the in-flight limit is exact: the dispatcher never sees more than the limit.
 * - When `write()` returns false the connection is `writeBlocked` until `drain`; `sendRecord` reports it,
 *   `FrontendHandler.onWritable` says when it ends, and the dispatcher can hold further replies meanwhile.
 *   Nothing waits synchronously, so a client that never reads its replies blocks only itself.
 *
 * Replies written in the same tick go out together on the next tick (`RecordWriter`): small records
 * gathered into one buffer, large ones' parts written as they are, never concatenated.
 *
 * The socket reads into a buffer shared by every connection of the server (`withReadBuffer`, server.ts):
 * each record is copied out of it (into the record pool when large), so a record stays valid after
 * `onRecord` returns. A record handed to `onRecord` is the handler's to give back to the pool; those the
 * connection drops itself (decoded while closing, left in the backlog, partly received when the socket
 * closes) it gives back itself.
 */
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import type { BufferPool } from '../common/buffer-pool.js';
import { GatewayError } from '../common/errors.js';
import { FrontendError } from './frontend-errors.js';
import type { FrontendLimits } from './limits.js';
import { RecordDecoder, RecordMarkingError } from './record-marking.js';
import { RecordWriter } from './record-writer.js';
import { countBy, type FrontendStats } from './stats.js';

/** Why a connection closed; `code` is stable (counted in `FrontendStats.closes`), `details` explains. */
export interface CloseReason {
  /**
   * CLOSED_BY_CLIENT (FIN at a record boundary, every reply written), IDLE_TIMEOUT, SERVER_CLOSING,
   * ERR_SOCKET (reset, EPIPE...: `details.errno`), ERR_HANDLER, a record-marking code (ERR_RM_...), or the
   * code a dispatcher passed to `close()` / `destroy()`.
   */
  code: string;
  message: string;
  details: Record<string, unknown>;
}

/** What the server calls; set once when the server is created. */
export interface FrontendHandler {
  /**
   * One decoded record (an RPC call, or a reply to a backchannel call). The connection counts it in
   * flight until the dispatcher calls `release()` (or `sendReply()`, which does both). A record in a
   * buffer of the server's record pool is handed over: the handler gives it back (`BufferPool.release`)
   * once nothing uses it.
   */
  onRecord(conn: FrontendConnection, record: Buffer): void;
  /** Called once when the connection has closed, whatever the reason. Calls still in flight are void. */
  onClose(conn: FrontendConnection, reason: CloseReason): void;
  /**
   * The client's FIN came while the connection stays half-open (replies to its calls in flight are still
   * written; `onClose` follows once they are). Not called when the FIN closes the connection at once.
   */
  onEnd?(conn: FrontendConnection): void;
  /**
   * There may be reply room again: the socket drained after `sendRecord` returned false, the bytes watched
   * by `notifyWhenFlushed` were taken, or reply room was released after `awaitReplyRoom`. Calls or
   * reading held for this connection may go; a handler re-checks, since several may be waiting.
   */
  onWritable?(conn: FrontendConnection): void;
}

/** Zero pad bytes for callers that frame XDR opaque data (views of it, never written to). */
export const XDR_PAD = Buffer.alloc(4);

let nextConnectionId = 1;

function notifyRoomReleased(conn: FrontendConnection): void {
  conn.roomReleased();
}

/** Backlog slots a connection keeps between reads (a read of 64 KiB holds at most ~1,600 NULL calls). */
const MAX_KEPT_BACKLOG = 64;

export class FrontendConnection {
  /** Unique in this process; used in logs and by dispatchers as a map key. */
  readonly id = nextConnectionId++;
  readonly remoteAddress: string;
  readonly remotePort: number;
  readonly localAddress: string;
  readonly localPort: number;
  readonly openedAt = Date.now();
  /** Calls dispatched and not yet released. */
  inFlight = 0;
  recordsIn = 0;
  recordsOut = 0;
  bytesIn = 0;
  bytesOut = 0;
  /** Reading is paused (in-flight limit, hold, or write backpressure). */
  readPaused = false;
  /** The client half-closed (FIN): no more calls, replies still go out. */
  readEnded = false;
  /** Set once closing starts; the connection accepts no more records or replies after `closed`. */
  closing = false;
  closed = false;
  /** Opaque slot for the dispatcher (per-client queue, fairness state...): the frontend never reads it. */
  context: unknown = undefined;
  /**
   * Reply bytes the dispatcher has promised this client and not yet written: each call sent on and not
   * answered, counted at the largest reply it can bring. One account for every route the dispatcher has
   * (`reserveReplyRoom` / `releaseReplyRoom`), so that `frontend.maxReplyBytes` bounds the client once,
   * whichever way its calls go.
   */
  replyReserved = 0;
  readonly log: Logger;

  private readonly socket: Socket;
  private readonly limits: FrontendLimits;
  private readonly stats: FrontendStats;
  private readonly handler: FrontendHandler;
  private readonly decoder: RecordDecoder;
  private readonly onClosed: (conn: FrontendConnection) => void;
  private readonly writer: RecordWriter;
  private readonly recordPool: BufferPool | undefined;
  /** Decoded records not yet dispatched; bounded by one read chunk (reading pauses when it is non-empty). */
  /**
   * Slots `[backlogHead, backlogTail)` hold records; the array is reused as it is (never shortened), so a
   * record costs no allocation.
   */
  private readonly backlog: (Buffer | undefined)[] = [];
  private backlogHead = 0;
  private backlogTail = 0;
  private pumping = false;
  private holds = 0;
  private reason: CloseReason | undefined = undefined;
  /** When the record now arriving began (Date.now()), or 0 at a record boundary. */
  private recordStartedAt = 0;

  constructor(
    socket: Socket,
    limits: FrontendLimits,
    stats: FrontendStats,
    handler: FrontendHandler,
    log: Logger,
    onClosed: (conn: FrontendConnection) => void,
    recordPool?: BufferPool,
  ) {
    this.socket = socket;
    this.limits = limits;
    this.stats = stats;
    this.handler = handler;
    this.onClosed = onClosed;
    this.recordPool = recordPool;
    this.writer = new RecordWriter(socket, { pool: recordPool, onBlocked: () => this.onWriteBlocked() });
    this.remoteAddress = socket.remoteAddress ?? '';
    this.remotePort = socket.remotePort ?? 0;
    this.localAddress = socket.localAddress ?? '';
    this.localPort = socket.localPort ?? 0;
    this.log = log.child({ conn: this.id, remote: `${this.remoteAddress}:${this.remotePort}` });
    this.decoder = new RecordDecoder((record) => this.onDecoded(record), {
      maxRecordSize: limits.maxRecordSize,
      maxFragments: limits.maxFragments,
      allocate: recordPool?.acquire,
      release: recordPool?.release,
      // The socket's chunks are views of a read buffer shared by every connection (server.ts): a record
      // is copied out (into the pool when large) before the next read overwrites them.
      zeroCopy: false,
    });
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('end', () => this.onEnd());
    socket.on('drain', () => this.onDrain());
    socket.on('error', (err: NodeJS.ErrnoException) => this.onError(err));
    socket.on('close', () => this.onSocketClose());
    if (limits.idleTimeoutMs > 0) {
      socket.setTimeout(limits.idleTimeoutMs);
      socket.on('timeout', () => this.onIdle());
    }
  }

  /** Records decoded but waiting for an in-flight slot. */
  get backlogLength(): number {
    return this.backlogTail - this.backlogHead;
  }

  /** The reason this connection closed (or is closing), once known. */
  get closeReason(): CloseReason | undefined {
    return this.reason;
  }

  /**
   * Writes one record made of `parts` (an RPC message: header and body buffers, never concatenated) and
   * returns false when the socket is not draining (the caller should hold further records for this
   * connection until `onWritable`). Records for a closed connection are dropped and counted.
   * A part that is a buffer of the record pool goes back to the pool once the socket has written it: the
   * caller hands it over and must not use it afterwards. A record of at most `COPIED_RECORD_MAX` bytes is
   * copied before this returns, so its parts may be borrowed memory the caller reuses at once.
   */
  sendRecord(parts: readonly Buffer[]): boolean {
    const socket = this.socket;
    if (this.closed || socket.destroyed || !socket.writable) {
      this.stats.repliesDropped++;
      // Nothing was written: pooled parts go back at once, as they would after a write.
      this.writer.drop(parts);
      return false;
    }
    let total = 0;
    for (let i = 0; i < parts.length; i++) total += parts[i].length;
    if (total === 0) {
      throw new FrontendError('ERR_EMPTY_REPLY', 'sendRecord was given an empty record', { conn: this.id });
    }
    const ok = this.writer.write(parts, total);
    const bytes = total + 4;
    this.bytesOut += bytes;
    this.stats.bytesOut += bytes;
    this.recordsOut++;
    this.stats.recordsOut++;
    return ok;
  }

  /**
   * Calls the handler's `onWritable` once every byte accepted so far has been taken by the kernel, even
   * though no socket write refused anything (so no `drain` comes). For a dispatcher holding calls until
   * `unsentBytes` falls. One notification at a time; none for a closed connection.
   */
  notifyWhenFlushed(): void {
    if (this.flushWatched || this.closed) return;
    this.flushWatched = true;
    this.writer.afterFlush(this.onFlushed);
  }

  private flushWatched = false;

  /**
   * Whoever holds this client back for reply room (`replyReserved` + `unsentBytes` too large) asks to be
   * told when another party releases room. `party` is the caller's own bit (the dispatcher's routes each
   * have one): a release by another party then calls the handler's `onWritable` once, on a later tick
   * (never from inside the release, which happens in the middle of handling a reply); a party's own
   * releases do not, since it sees them itself. Ask again if the room is still short then.
   */
  awaitReplyRoom(party: number): void {
    this.roomAwaited |= party;
  }

  reserveReplyRoom(bytes: number): void {
    this.replyReserved += bytes;
  }

  /** `bytes` of reply room back, released by `party` (its bit, as given to `awaitReplyRoom`). */
  releaseReplyRoom(bytes: number, party: number): void {
    this.replyReserved -= bytes;
    if ((this.roomAwaited & ~party) !== 0 && !this.closed) {
      this.roomAwaited = 0;
      process.nextTick(notifyRoomReleased, this);
    }
  }

  /** The parties waiting for reply room (`awaitReplyRoom` bits). */
  private roomAwaited = 0;

  /** @internal `releaseReplyRoom`'s deferred notification. */
  roomReleased(): void {
    if (this.closed || this.socket.destroyed) return;
    this.handler.onWritable?.(this);
  }

  private readonly onFlushed = (err?: Error | null): void => {
    this.flushWatched = false;
    // A destroyed socket fails its pending writes before 'close' reports it: nothing was flushed, and
    // the client is gone (its waiting calls must not be woken and sent).
    if (err || this.closed || this.socket.destroyed) return;
    this.handler.onWritable?.(this);
  };

  /**
   * Nothing can be written to the client any more: closed, or its socket destroyed (a reset) and the
   * close not reported yet. A dispatcher sends no more of its calls on.
   */
  get gone(): boolean {
    return this.closed || this.socket.destroyed;
  }

  /** Reply bytes accepted by `sendRecord` and not yet taken by the kernel (gathered for this tick, or queued in the socket). */
  get unsentBytes(): number {
    return this.writer.staged + this.socket.writableLength;
  }

  /** The socket is not draining: a write returned false and `drain` has not come yet (the writer's state). */
  get writeBlocked(): boolean {
    return this.writer.blocked;
  }

  /** The writer's first socket write that returned false (once per episode): stop reading until `drain`. */
  private onWriteBlocked(): void {
    this.stats.writeBlocks++;
    this.stats.connectionsWriteBlocked++;
    this.updateReading();
  }

  /** `sendRecord(parts)` followed by `release()`: the usual way to answer a call. */
  sendReply(parts: readonly Buffer[]): boolean {
    const ok = this.sendRecord(parts);
    this.release();
    return ok;
  }

  /** One dispatched record is done with (answered, dropped, or it was not a call). */
  release(): void {
    if (this.inFlight === 0) return;
    this.inFlight--;
    this.stats.callsInFlight--;
    if (this.closed) return;
    if (this.backlogLength > 0) this.pump();
    else this.updateReading();
    if (this.inFlight === 0 && this.backlogLength === 0 && (this.readEnded || this.closing)) this.finish();
  }

  /** The dispatcher cannot take more from this client for now: pause reading until `unhold()`. */
  hold(): void {
    this.holds++;
    this.updateReading();
  }

  unhold(): void {
    if (this.holds === 0) return;
    this.holds--;
    if (this.holds === 0 && this.backlogLength > 0) this.pump();
    else this.updateReading();
  }

  /** Writes the replies gathered in this tick (done on the next tick; harmless to call early). */
  flush(): void {
    this.writer.flush();
  }

  /**
   * Graceful close: stop taking calls (undispatched ones are dropped: the client retransmits them), let the
   * calls in flight finish and their replies drain, then end the connection.
   */
  close(code: string, message = code, details: Record<string, unknown> = {}): void {
    if (this.closed) return;
    this.setReason(code, message, details);
    this.closing = true;
    this.dropBacklog();
    this.updateReading();
    if (this.inFlight === 0) this.finish();
  }

  /** Immediate close: nothing more is read or written. */
  destroy(code: string, message = code, details: Record<string, unknown> = {}): void {
    if (this.closed) return;
    // A graceful close cut short (drain timeout), or a half-open connection the server ends (the client's
    // FIN set CLOSED_BY_CLIENT), is reported with the facts of why it was cut short.
    if ((this.closing || this.readEnded) && this.reason) this.reason = { code, message, details };
    else this.setReason(code, message, details);
    this.closing = true;
    this.dropBacklog();
    this.socket.destroy();
  }

  private setReason(code: string, message: string, details: Record<string, unknown> = {}): void {
    if (!this.reason) this.reason = { code, message, details };
  }

  private onData(chunk: Buffer): void {
    this.bytesIn += chunk.length;
    this.stats.bytesIn += chunk.length;
    if (this.closing) return;
    const recordsBefore = this.recordsIn;
    try {
      this.decoder.push(chunk);
    } catch (err) {
      if (err instanceof RecordMarkingError) {
        this.failStream(err);
        return;
      }
      // The decoder rethrows what our own record callback threw; `dispatch` already catches the handler's
      // errors, so reaching this is a bug in this file.
      throw err;
    }
    if (this.limits.recordTimeoutMs > 0) {
      // A record that completed in this chunk restarts the clock for the one it left partly received.
      if (this.decoder.atRecordBoundary) this.recordStartedAt = 0;
      else if (this.recordStartedAt === 0 || this.recordsIn !== recordsBefore)
        this.recordStartedAt = Date.now();
    }
    if (!this.closed) this.updateReading();
  }

  /**
   * Closes the connection (RECORD_TIMEOUT) if its current record has been arriving for longer than the
   * record timeout while the gateway was reading; called by the server's sweep.
   */
  checkRecordDeadline(now: number): void {
    if (this.recordStartedAt === 0 || this.readPaused || this.closing) return;
    const elapsedMs = now - this.recordStartedAt;
    if (elapsedMs < this.limits.recordTimeoutMs) return;
    const receivedBytes = this.decoder.bufferedBytes;
    this.log.info(
      { recordTimeoutMs: this.limits.recordTimeoutMs, elapsedMs, receivedBytes },
      'closing connection: record not complete in time',
    );
    this.destroy(
      'RECORD_TIMEOUT',
      `record incomplete ${elapsedMs} ms after its first byte (${receivedBytes} bytes received)`,
      { recordTimeoutMs: this.limits.recordTimeoutMs, elapsedMs, receivedBytes },
    );
  }

  private failStream(err: RecordMarkingError): void {
    countBy(this.stats.errors, err.code);
    this.log.warn({ err: err.toLog() }, `closing connection: ${err.message}`);
    this.destroy(err.code, err.message, err.toLog());
  }

  private onDecoded(record: Buffer): void {
    this.recordsIn++;
    this.stats.recordsIn++;
    if (this.closing) {
      // Not dispatched, so nobody else has it: back to the pool.
      this.recordPool?.release(record);
      return;
    }
    this.backlog[this.backlogTail++] = record;
    this.pump();
  }

  /** Dispatches backlogged records while the in-flight limit and holds allow; never re-entered. */
  private pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (this.backlogHead < this.backlogTail && this.canDispatch()) {
        const record = this.backlog[this.backlogHead]!;
        this.backlog[this.backlogHead++] = undefined;
        this.dispatch(record);
      }
      if (this.backlogHead === this.backlogTail) {
        this.backlogHead = 0;
        this.backlogTail = 0;
        // A burst of tiny records grew it: give that back rather than keep it for an idle client.
        if (this.backlog.length > MAX_KEPT_BACKLOG) this.backlog.length = 0;
      }
    } finally {
      this.pumping = false;
    }
    this.updateReading();
  }

  /**
   * Whether the next backlogged record may go to the dispatcher. Not while the socket is not draining:
   * every call dispatched adds a reply to a queue the client is not emptying (a client pipelining SOURCE
   * calls without reading would otherwise make the server buffer gigabytes from one 64 KiB read).
   */
  private canDispatch(): boolean {
    return (
      !this.closing && !this.writeBlocked && this.holds === 0 && this.inFlight < this.limits.maxCallsInFlight
    );
  }

  private dispatch(record: Buffer): void {
    this.inFlight++;
    this.stats.callsInFlight++;
    try {
      this.handler.onRecord(this, record);
    } catch (err) {
      const cause = err instanceof GatewayError ? err.toLog() : { message: String(err) };
      countBy(this.stats.errors, 'ERR_HANDLER');
      this.log.error({ err: cause }, 'closing connection: the record handler threw');
      this.destroy('ERR_HANDLER', 'the record handler threw', { cause });
    }
  }

  /** Drops the undispatched records (the client retransmits them); their buffers go back to the pool. */
  private dropBacklog(): void {
    const pool = this.recordPool;
    if (pool !== undefined) {
      for (let i = this.backlogHead; i < this.backlogTail; i++) pool.release(this.backlog[i]!);
    }
    this.backlog.fill(undefined, this.backlogHead, this.backlogTail);
    this.backlogHead = 0;
    this.backlogTail = 0;
  }

  private updateReading(): void {
    // Once our side has ended, reading stays on until the client's FIN arrives (`finish`).
    if (this.closed || this.socket.writableEnded) return;
    const pause =
      this.closing ||
      this.writeBlocked ||
      this.holds > 0 ||
      this.backlogLength > 0 ||
      this.inFlight >= this.limits.maxCallsInFlight;
    if (pause && !this.readPaused) {
      this.readPaused = true;
      this.stats.readPauses++;
      this.socket.pause();
    } else if (!pause && this.readPaused) {
      this.readPaused = false;
      // The time the gateway held this client back is not the client's: its record's clock restarts.
      if (this.recordStartedAt !== 0) this.recordStartedAt = Date.now();
      this.socket.resume();
    }
  }

  private onEnd(): void {
    this.readEnded = true;
    if (this.closing) return;
    try {
      this.decoder.end();
    } catch (err) {
      if (err instanceof RecordMarkingError) {
        this.failStream(err);
        return;
      }
      throw err;
    }
    this.setReason('CLOSED_BY_CLIENT', 'the client closed the connection', {});
    // The socket is half-open (allowHalfOpen): replies to calls still in flight are written first.
    if (this.inFlight === 0 && this.backlogLength === 0) this.finish();
    else this.handler.onEnd?.(this);
  }

  private onDrain(): void {
    if (!this.writer.blocked) return;
    this.writer.unblocked();
    this.stats.connectionsWriteBlocked--;
    if (this.closed) return;
    if (this.backlogLength > 0) this.pump();
    else this.updateReading();
    this.handler.onWritable?.(this);
  }

  private onError(err: NodeJS.ErrnoException): void {
    // Resets and broken pipes are what a client that goes away looks like: worth a count, not a warning.
    const errno = err.code ?? 'UNKNOWN';
    countBy(this.stats.errors, 'ERR_SOCKET');
    this.setReason('ERR_SOCKET', `socket error: ${err.message}`, { errno });
    this.log.info({ errno, message: err.message }, 'connection error');
  }

  private onIdle(): void {
    if (this.closed) return;
    if (this.inFlight > 0 || this.backlogLength > 0) {
      // Waiting for the server's answers is not idleness; the reply's write will re-arm the timer. But
      // replies written and not taken for the whole period are: a client that keeps its receive window
      // shut would otherwise hold its calls, their records and up to its reply budget for ever (the
      // router keeps its further calls waiting for room, so they stay in flight).
      if (this.unsentBytes === 0) return;
      this.log.warn(
        { idleTimeoutMs: this.limits.idleTimeoutMs, unsentBytes: this.unsentBytes, inFlight: this.inFlight },
        'closing a client that took none of its replies',
      );
      this.destroy('IDLE_TIMEOUT', `took no reply bytes for ${this.limits.idleTimeoutMs} ms`, {
        idleTimeoutMs: this.limits.idleTimeoutMs,
        unsentBytes: this.unsentBytes,
      });
      return;
    }
    this.log.info({ idleTimeoutMs: this.limits.idleTimeoutMs }, 'closing idle connection');
    this.destroy('IDLE_TIMEOUT', `no traffic for ${this.limits.idleTimeoutMs} ms`, {
      idleTimeoutMs: this.limits.idleTimeoutMs,
    });
  }

  /** Ends the connection once everything is written (FIN after the last reply). */
  private finish(): void {
    if (this.closed || this.socket.writableEnded) return;
    this.closing = true;
    this.flush();
    this.socket.end();
    // The socket closes when the client's FIN (or reset) is read: read on, discarding (`onData` ignores
    // everything once closing). A paused socket reading into a buffer of its own (`onread`) stops reading
    // at the kernel, and would wait for the drain timeout instead.
    if (this.readPaused) {
      this.readPaused = false;
      this.socket.resume();
    }
  }

  private onSocketClose(): void {
    if (this.closed) return;
    this.closed = true;
    this.closing = true;
    this.flush();
    if (this.writer.blocked) {
      this.writer.unblocked();
      this.stats.connectionsWriteBlocked--;
    }
    this.stats.callsInFlight -= this.inFlight;
    this.inFlight = 0;
    this.dropBacklog();
    // A record cut off by the close will never complete: its buffer goes back to the pool.
    this.decoder.dispose();
    const reason = this.reason ?? {
      code: 'CLOSED_BY_CLIENT',
      message: 'the client closed the connection',
      details: {},
    };
    this.reason = reason;
    countBy(this.stats.closes, reason.code);
    this.log.debug(
      { reason: reason.code, recordsIn: this.recordsIn, recordsOut: this.recordsOut },
      'connection closed',
    );
    this.onClosed(this);
    this.handler.onClose(this, reason);
  }
}
