/**
 * N RPC-over-RDMA connections to one peer (client ends). Calls go to the ready connection with the
 * fewest outstanding + queued calls; while none is ready they wait in the pool (bounded). A lost
 * connection's calls reach the handler as `retransmit: true` (the caller resubmits — to this pool, which
 * then uses another or a new connection, never the dead one), and the slot reconnects with exponential
 * back-off (PROTOCOL-NOTES §7: Linux starts at seconds and caps; here both are configurable).
 */
import type { Device } from '../verbs/index.js';
import { type ConnectParams, RpcRdmaConnection, type TransportOptions } from './connection.js';
import { Fifo } from './credits.js';
import { TransportError } from './errors.js';
import { TRANSPORT_LOG_BUDGET } from './log-budget.js';
import type { ConnectionSnapshot, RequesterHandler, ResponderHandler, TransportCall } from './types.js';

export interface BackoffOptions {
  initialMs?: number;
  maxMs?: number;
  factor?: number;
}

export interface PoolOptions {
  device: Device;
  host: string;
  port: number;
  size: number;
  options?: TransportOptions;
  requester: RequesterHandler;
  /** Handles backward calls arriving on any connection. */
  responder?: ResponderHandler;
  backoff?: BackoffOptions;
  /** Calls held while no connection is ready; beyond it `submit` fails them (retransmit). Default 4096. */
  maxPending?: number;
  connectTimeoutMs?: number;
  /**
   * Called each time one of the pool's connections becomes ready (negotiation over, calls can flow): at
   * start and after every reconnect. Same as `pool.onReady(listener)` registered before `start()`.
   */
  onReady?: (conn: RpcRdmaConnection, pool: ConnectionPool) => void;
}

/** Listener of `ConnectionPool.onReady`. */
export type PoolReadyListener = (conn: RpcRdmaConnection, pool: ConnectionPool) => void;

interface Slot {
  index: number;
  conn: RpcRdmaConnection | null;
  connecting: boolean;
  attempts: number;
  reconnects: number;
  nextDelayMs: number;
  timer: NodeJS.Timeout | null;
  lastError: string;
  /** Taken out of service (`park`): no connection, no reconnect, until `unpark`. */
  parked: boolean;
  /** When its current connection was established (`performance.now()` ms). */
  connectedAt: number;
}

/**
 * A connection that carried a reply, or stayed up this long, was a real recovery: the back-off starts
 * again from `initialMs` when it is lost. One that the peer drops at once (a responder whose upstream is
 * down accepts, then closes) keeps the back-off growing instead of reconnecting every `initialMs`.
 */
const HEALTHY_MS = 5000;

export interface PoolSnapshot {
  peer: string;
  size: number;
  ready: number;
  pending: number;
  slots: {
    index: number;
    state: 'connecting' | 'backoff' | 'ready' | 'negotiating' | 'closed' | 'parked';
    attempts: number;
    reconnects: number;
    nextDelayMs: number;
    lastError: string;
    connection: ConnectionSnapshot | null;
  }[];
}

export class ConnectionPool {
  private readonly slots: Slot[] = [];
  private readonly pending = new Fifo<TransportCall>(64);
  private closed = false;
  private readonly readyListeners = new Set<PoolReadyListener>();
  private readonly initialMs: number;
  private readonly maxMs: number;
  private readonly factor: number;

  constructor(private readonly o: PoolOptions) {
    this.initialMs = o.backoff?.initialMs ?? 100;
    this.maxMs = o.backoff?.maxMs ?? 30_000;
    this.factor = o.backoff?.factor ?? 2;
    if (o.onReady) this.readyListeners.add(o.onReady);
    for (let i = 0; i < o.size; i++) {
      this.slots.push({
        index: i,
        conn: null,
        connecting: false,
        attempts: 0,
        reconnects: 0,
        nextDelayMs: this.initialMs,
        timer: null,
        lastError: '',
        parked: false,
        connectedAt: 0,
      });
    }
  }

  /** Opens every connection; resolves when all attempts finished (failures go to back-off). */
  async start(): Promise<void> {
    await Promise.all(this.slots.map((s) => this.connectSlot(s)));
  }

  private async connectSlot(s: Slot): Promise<void> {
    if (this.closed || s.connecting || s.parked) return;
    s.connecting = true;
    s.attempts++;
    const params: ConnectParams = {
      device: this.o.device,
      host: this.o.host,
      port: this.o.port,
      options: this.o.options,
      requester: this.o.requester,
      responder: this.o.responder,
      timeoutMs: this.o.connectTimeoutMs,
      onClose: (conn, reason) => this.onConnectionClosed(s, conn, reason),
      onReady: (conn) => this.onConnectionReady(s, conn),
    };
    try {
      const conn = await RpcRdmaConnection.connect(params);
      s.connecting = false;
      if (this.closed || s.parked) {
        conn.close(this.closed ? 'pool closed' : 'slot parked');
        return;
      }
      if (conn.state === 'closed') {
        // Lost between establishment and here: its onClose found the slot empty, so retry from here.
        s.lastError = conn.closeReason;
        this.scheduleReconnect(s);
        return;
      }
      s.conn = conn;
      if (s.attempts > 1) this.log('info', s, 'RDMA connection up again', { attempts: s.attempts });
      s.attempts = 0;
      s.connectedAt = performance.now();
      this.flushPending();
    } catch (e) {
      s.connecting = false;
      s.lastError = (e as Error).message;
      // Attempts 1, 2, 4, 8…: a peer down for long costs a line per doubling, not one per retry.
      if ((s.attempts & (s.attempts - 1)) === 0) {
        this.log('warn', s, 'cannot connect to the RDMA peer; retrying with back-off', {
          code: 'ERR_TRANSPORT_CONNECT',
          attempts: s.attempts,
          err: s.lastError,
          retryInMs: Math.round(s.nextDelayMs),
        });
      }
      this.scheduleReconnect(s);
    }
  }

  /** One line about slot `s` in the transport's log (`TransportOptions.logger`), within its budget. */
  private log(level: 'warn' | 'info', s: Slot, msg: string, fields: Record<string, unknown>): void {
    const log = this.o.options?.logger;
    if (log === undefined || !TRANSPORT_LOG_BUDGET.take(log)) return;
    const line = { peer: `${this.o.host}:${this.o.port}`, slot: s.index, ...fields };
    if (level === 'warn') log.warn(line, msg);
    else log.info?.(line, msg);
  }

  /**
   * Registers `listener` for "a connection became ready" (so a caller that schedules calls itself, like
   * the gateway router, need not poll `connections()`). Returns the function that unregisters it.
   * A connection that is already ready when the listener is added is not replayed: read `connections()`.
   */
  onReady(listener: PoolReadyListener): () => void {
    this.readyListeners.add(listener);
    return () => {
      this.readyListeners.delete(listener);
    };
  }

  private onConnectionReady(s: Slot, conn: RpcRdmaConnection): void {
    // Negotiation may finish before `connect()` resolved: the slot owns the connection from here on.
    if (this.closed || s.parked) return;
    s.conn = conn;
    this.flushPending();
    for (const l of this.readyListeners) {
      try {
        l(conn, this);
      } catch {
        // A listener's bug must not keep the others (or the pool) from learning of the connection; the
        // connection counts it like any throwing handler.
        conn.counters.handlerErrors++;
      }
    }
  }

  private onConnectionClosed(s: Slot, conn: RpcRdmaConnection, reason: string): void {
    if (s.conn !== conn) return;
    s.conn = null;
    s.lastError = reason;
    if (this.closed || s.parked) return;
    s.reconnects++;
    if (conn.counters.repliesReceived > 0 || performance.now() - s.connectedAt >= HEALTHY_MS) {
      s.nextDelayMs = this.initialMs;
    }
    this.scheduleReconnect(s);
  }

  private scheduleReconnect(s: Slot): void {
    if (this.closed || s.timer || s.parked) return;
    // Exponential back-off with ±20 % jitter so that pooled slots do not reconnect in lock-step.
    const delay = Math.round(s.nextDelayMs * (0.8 + Math.random() * 0.4));
    s.nextDelayMs = Math.min(this.maxMs, s.nextDelayMs * this.factor);
    s.timer = setTimeout(() => {
      s.timer = null;
      void this.connectSlot(s);
    }, delay);
    s.timer.unref?.();
  }

  /** The ready connection with the least work, or null. */
  pick(): RpcRdmaConnection | null {
    let best: RpcRdmaConnection | null = null;
    let bestLoad = Number.POSITIVE_INFINITY;
    for (const s of this.slots) {
      const c = s.conn;
      if (!c || s.parked || c.state === 'closed' || c.state === 'connecting') continue;
      const snap = c.credits;
      const load = snap.outstanding + c.queuedCalls;
      if (load < bestLoad) {
        best = c;
        bestLoad = load;
      }
    }
    return best;
  }

  submit(call: TransportCall): void {
    if (this.closed) {
      this.fail(call, 'pool closed');
      return;
    }
    const c = this.pick();
    if (c) {
      c.submit(call);
      return;
    }
    if (this.pending.length >= (this.o.maxPending ?? 4096)) {
      this.fail(call, 'no connection and the pool is holding its maximum');
      return;
    }
    this.pending.push(call);
  }

  private fail(call: TransportCall, why: string): void {
    const err = new TransportError('ERR_TRANSPORT_POOL_UNAVAILABLE', why, true, {
      peer: `${this.o.host}:${this.o.port}`,
    });
    queueMicrotask(() => {
      try {
        this.o.requester.onFailed(call, err);
      } catch {
        // Nothing to fail further: the call is already reported (the handler's bug is its own).
      }
    });
  }

  private flushPending(): void {
    while (this.pending.length > 0) {
      const c = this.pick();
      if (!c) return;
      c.submit(this.pending.shift() as TransportCall);
    }
  }

  snapshot(): PoolSnapshot {
    return {
      peer: `${this.o.host}:${this.o.port}`,
      size: this.slots.length,
      ready: this.slots.filter((s) => s.conn?.state === 'ready').length,
      pending: this.pending.length,
      slots: this.slots.map((s) => ({
        index: s.index,
        state: s.conn ? s.conn.state : s.parked ? 'parked' : s.connecting ? 'connecting' : 'backoff',
        attempts: s.attempts,
        reconnects: s.reconnects,
        nextDelayMs: s.nextDelayMs,
        lastError: s.lastError,
        connection: s.conn ? s.conn.snapshot() : null,
      })),
    };
  }

  /**
   * Takes slot `index` out of service: its connection, if any, is closed now (its calls in flight fail as
   * retransmittable, like any lost connection's: the caller should first let them finish), a connect in
   * progress is dropped when it completes, and the slot does not reconnect until `unpark`.
   */
  park(index: number, reason = 'slot parked'): void {
    const s = this.slotAt(index);
    if (s.parked) return;
    s.parked = true;
    if (s.timer) clearTimeout(s.timer);
    s.timer = null;
    s.conn?.close(reason);
  }

  /** Puts a parked slot back: it connects at once (back-off starts afresh). */
  unpark(index: number): void {
    const s = this.slotAt(index);
    if (!s.parked) return;
    s.parked = false;
    s.nextDelayMs = this.initialMs;
    void this.connectSlot(s);
  }

  /** The connection slot `index` holds now (ready or negotiating), or null. */
  connectionAt(index: number): RpcRdmaConnection | null {
    return this.slotAt(index).conn;
  }

  isParked(index: number): boolean {
    return this.slotAt(index).parked;
  }

  private slotAt(index: number): Slot {
    const s = this.slots[index];
    if (s === undefined) throw new RangeError(`no pool slot ${index} (size ${this.slots.length})`);
    return s;
  }

  /** The live connections (for tests and the admin API's control operations). */
  connections(): RpcRdmaConnection[] {
    return this.slots.flatMap((s) => (s.conn ? [s.conn] : []));
  }

  close(): void {
    this.closed = true;
    for (const s of this.slots) {
      if (s.timer) clearTimeout(s.timer);
      s.timer = null;
      s.conn?.close('pool closed');
    }
    for (const call of this.pending.drain()) this.fail(call, 'pool closed');
  }
}
