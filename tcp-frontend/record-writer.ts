/**
 * Writes ONC RPC records (RFC 5531 §11 record marking) to a socket, gathering the records of one tick
 * into as few socket writes as possible.
 *
 * Why: a `socket.write` costs a write request, a Writable state transition and, uncorked, a system call.
 * For small messages (a NULL reply is 28 bytes), two writes per record (mark, body) cost more than the
 * record's whole path through the gateway. So:
 * - a small record (mark and parts together at most `STAGE_RECORD_MAX`) is copied into a stage buffer,
 *   its pooled parts going back to their pool at once; every small record of the tick then leaves in one
 *   write;
 * - a large record's mark goes at the end of the stage, which is written, and its parts follow as they
 *   are (no copy); the socket is corked for the tick, so the stage and the parts leave in one `writev`;
 * - the tick's writes are flushed on the next tick (`process.nextTick`), or earlier by `flush()`.
 *
 * A pooled part (the pool `owns` it) is handed over by `write`: it goes back to the pool once the socket
 * has taken its bytes (write callbacks run in write order, hence one FIFO), or at once when it was copied.
 * Stage buffers come from a process-wide pool of 64 KiB buffers, so an idle connection holds none.
 *
 * Backpressure is reported from the socket writes themselves: `write` returns false once a socket write
 * returned false, and `onBlocked` says when that first happens; the socket's `drain` ends it (the owner
 * listens for it and calls `unblocked()`). A record staged in the current tick is always accepted.
 */
import type { Socket } from 'node:net';
import { BufferPool } from '../common/buffer-pool.js';

/** A stage buffer: one record of up to `STAGE_RECORD_MAX` bytes always fits in an empty one. */
const STAGE_SIZE = 64 * 1024;
/** Largest record (mark included) copied into the stage; larger ones are written as they are. */
const STAGE_RECORD_MAX = 16 * 1024;
/** Records of at most this many bytes (mark excluded) are copied into the stage before `write` returns. */
export const COPIED_RECORD_MAX = STAGE_RECORD_MAX - 4;
/** Last-fragment bit of the record mark (RFC 5531 §11). */
const LAST_FRAGMENT = 0x80000000;

/** Stage buffers of every writer in the process: taken per tick of output, returned after the write. */
const stages = new BufferPool({
  minSize: STAGE_SIZE,
  maxSize: STAGE_SIZE,
  maxRetainedBytes: 8 * 1024 * 1024,
});

const EMPTY = Buffer.alloc(0);

function flushOnNextTick(w: RecordWriter): void {
  w.flush();
}

export interface RecordWriterOptions {
  /** Where pooled parts go back (the parts it `owns`); none: every part is the caller's. */
  pool?: BufferPool;
  /** Called when a socket write first reports backpressure (`write` returns false from then on). */
  onBlocked?: () => void;
}

export class RecordWriter {
  /** True from a socket write that returned false until `unblocked()`. */
  blocked = false;
  private readonly socket: Socket;
  private readonly pool: BufferPool | undefined;
  private readonly onBlocked: (() => void) | undefined;
  /** The stage of this tick, or null; `stagePos` bytes of it are filled. */
  private stage: Buffer | null = null;
  private stagePos = 0;
  private flushScheduled = false;
  private corked = false;
  /** Pooled buffers (stages and parts) written and waiting for their write callback, oldest first. */
  private readonly inFlight: Buffer[] = [];
  private readonly one: Buffer[] = [EMPTY];

  constructor(socket: Socket, options: RecordWriterOptions = {}) {
    this.socket = socket;
    this.pool = options.pool;
    this.onBlocked = options.onBlocked;
  }

  /**
   * Queues one record made of `parts` (`total` bytes, their sum, more than zero) and returns false when
   * the socket is not draining. Pooled parts are handed over (see the module comment).
   */
  write(parts: readonly Buffer[], total: number): boolean {
    if (!this.socket.writable) {
      // Ended or destroyed: a write would only raise 'write after end'. Nothing is written; pooled
      // parts go back at once.
      this.drop(parts);
      return false;
    }
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      process.nextTick(flushOnNextTick, this);
    }
    const pool = this.pool;
    if (total + 4 <= STAGE_RECORD_MAX) {
      let stage = this.stage;
      if (stage === null || this.stagePos + total + 4 > stage.length) {
        this.writeStage();
        stage = this.takeStage();
      }
      let pos = this.putMark(stage, total);
      for (let i = 0; i < parts.length; i++) {
        const part = parts[i];
        pos += part.copy(stage, pos);
        if (pool?.owns(part)) pool.release(part);
      }
      this.stagePos = pos;
      return !this.blocked;
    }
    // A large record: its mark closes the stage, its parts follow without a copy, all in one writev.
    if (!this.corked) {
      this.corked = true;
      this.socket.cork();
    }
    let stage = this.stage;
    if (stage === null || this.stagePos + 4 > stage.length) {
      this.writeStage();
      stage = this.takeStage();
    }
    this.stagePos = this.putMark(stage, total);
    this.writeStage();
    for (let i = 0; i < parts.length; i++) {
      const part = parts[i];
      if (part.length === 0) continue;
      if (pool?.owns(part)) this.writePooled(part);
      else this.checked(this.socket.write(part));
    }
    return !this.blocked;
  }

  /** `write` of a record of one part. */
  writeOne(part: Buffer): boolean {
    const one = this.one;
    one[0] = part;
    const ok = this.write(one, part.length);
    one[0] = EMPTY;
    return ok;
  }

  /** Writes what this tick gathered (called on the next tick; harmless to call early or twice). */
  flush(): void {
    this.flushScheduled = false;
    this.writeStage();
    if (this.corked) {
      this.corked = false;
      this.socket.uncork();
    }
  }

  /**
   * Calls `done` once the socket has taken every byte handed to this writer so far, this tick's stage
   * included (written now): an empty write's callback, since write callbacks run in write order. For an
   * owner waiting for `unsentBytes` to fall when no `drain` will come (no socket write ever returned
   * false). Never called if the socket is no longer writable; called with an error if it is destroyed
   * before the bytes leave.
   */
  afterFlush(done: (err?: Error | null) => void): void {
    this.flush();
    if (this.socket.writable) this.socket.write(EMPTY, done);
  }

  /** The socket drained: records are accepted without backpressure again. */
  unblocked(): void {
    this.blocked = false;
  }

  /** Bytes gathered and not yet handed to the socket. */
  get staged(): number {
    return this.stagePos;
  }

  private putMark(stage: Buffer, total: number): number {
    const p = this.stagePos;
    const mark = (LAST_FRAGMENT | total) >>> 0;
    stage[p] = mark >>> 24;
    stage[p + 1] = (mark >>> 16) & 0xff;
    stage[p + 2] = (mark >>> 8) & 0xff;
    stage[p + 3] = mark & 0xff;
    return p + 4;
  }

  private takeStage(): Buffer {
    const stage = stages.acquire(STAGE_SIZE);
    this.stage = stage;
    this.stagePos = 0;
    return stage;
  }

  /** Hands the filled part of the stage to the socket; the stage returns to its pool after the write. */
  private writeStage(): void {
    const stage = this.stage;
    if (stage === null) return;
    const used = this.stagePos;
    this.stage = null;
    this.stagePos = 0;
    if (used === 0 || !this.socket.writable) {
      // Nothing gathered, or nobody left to write it to (the socket ended or closed within the tick).
      stages.release(stage);
      return;
    }
    this.inFlight.push(stage);
    this.checked(this.socket.write(stage.subarray(0, used), this.onWritten));
  }

  private writePooled(part: Buffer): void {
    this.inFlight.push(part);
    this.checked(this.socket.write(part, this.onWritten));
  }

  private checked(ok: boolean): void {
    if (ok || this.blocked) return;
    this.blocked = true;
    this.onBlocked?.();
  }

  /**
   * Socket write callbacks run in write order: the oldest pooled buffer is the one just written. After a
   * failed write the socket is being destroyed and may still refer to it: it is left to the collector.
   */
  private readonly onWritten = (err?: Error | null): void => {
    const buf = this.inFlight.shift();
    if (buf === undefined || err) return;
    if (stages.owns(buf)) stages.release(buf);
    else this.pool?.release(buf);
  };

  /** Gives back, at once, pooled parts of a record that will not be written (the socket is gone). */
  drop(parts: readonly Buffer[]): void {
    const pool = this.pool;
    if (pool === undefined) return;
    for (let i = 0; i < parts.length; i++) if (pool.owns(parts[i])) pool.release(parts[i]);
  }
}
