/**
 * Helpers for the verbs conformance suite: a connected pair of endpoints built through the interface
 * only (so any provider can be plugged in), guarded buffers that prove nothing outside a registered
 * range was touched, and completion/event waiters with deadlines.
 */
import {
  type CmEvent,
  CmEventType,
  type CompletionQueue,
  type Connection,
  type ConnectRequest,
  cmEventName,
  createWorkCompletions,
  type Device,
  type MemoryRegion,
  type ProtectionDomain,
  type QpCap,
  type VerbsProvider,
  type WorkCompletion,
} from '../../rdma-backend/verbs/index.js';

/** How a provider is brought up for the suite, and what it can report beyond libibverbs. */
export interface ProviderFactory {
  name: string;
  /** A fresh provider instance (each side of a pair opens its own device, like two hosts). */
  create(): VerbsProvider | Promise<VerbsProvider>;
  /** True when DISCONNECTED events carry the iWARP Terminate that caused them. */
  reportsTerminate: boolean;
  host?: string;
}

export interface Wc {
  wrId: number;
  status: number;
  opcode: number;
  byteLen: number;
  wcFlags: number;
  invalidatedRkey: number;
}

export class CqWatcher {
  readonly got: Wc[] = [];
  private readonly wcs: WorkCompletion[] = createWorkCompletions(32);
  private waiters: (() => void)[] = [];
  notifications = 0;

  constructor(readonly cq: CompletionQueue) {
    cq.setNotifyHandler(() => {
      this.notifications++;
      cq.requestNotify();
      this.drain();
    });
    cq.requestNotify();
  }

  drain(): void {
    let n = this.cq.poll(this.wcs);
    while (n > 0) {
      for (let i = 0; i < n; i++) {
        const w = this.wcs[i];
        this.got.push({
          wrId: w.wrId,
          status: w.status,
          opcode: w.opcode,
          byteLen: w.byteLen,
          wcFlags: w.wcFlags,
          invalidatedRkey: w.invalidatedRkey,
        });
      }
      n = this.cq.poll(this.wcs);
    }
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  /** Resolves with the first `n` completions received (waiting up to `ms`). */
  async take(n: number, ms = 5000): Promise<Wc[]> {
    const deadline = Date.now() + ms;
    while (this.got.length < n) {
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new Error(`timed out waiting for ${n} completions, have ${JSON.stringify(this.got)}`);
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(left, 50));
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
      this.drain();
    }
    return this.got.splice(0, n);
  }
}

export class EventLog {
  readonly events: CmEvent[] = [];
  private waiters: (() => void)[] = [];
  readonly handler = (e: CmEvent): void => {
    this.events.push(e);
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  };

  async wait(type: number, ms = 5000): Promise<CmEvent> {
    const deadline = Date.now() + ms;
    for (;;) {
      const found = this.events.find((e) => e.type === type);
      if (found) return found;
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new Error(
          `timed out waiting for ${cmEventName(type)}; got ${this.events.map((e) => cmEventName(e.type)).join(', ')}`,
        );
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(left, 50));
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }
}

const GUARD = 64;
const GUARD_BYTE = 0xa5;

/** A registered region with guard bytes on both sides inside one allocation. */
export class Guarded {
  readonly whole: Buffer;
  readonly buf: Buffer;
  readonly mr: MemoryRegion;

  constructor(pd: ProtectionDomain, size: number, access: number, fill = 0) {
    this.whole = pd.device.allocBuffer(size + 2 * GUARD).fill(GUARD_BYTE);
    this.buf = this.whole.subarray(GUARD, GUARD + size);
    this.buf.fill(fill);
    this.mr = pd.registerMemory(this.buf, access);
  }

  /** True when no byte outside the registered range changed. */
  guardsIntact(): boolean {
    for (let i = 0; i < GUARD; i++) {
      if (this.whole[i] !== GUARD_BYTE || this.whole[this.whole.length - 1 - i] !== GUARD_BYTE) return false;
    }
    return true;
  }
}

export interface Side {
  device: Device;
  pd: ProtectionDomain;
  sendCq: CqWatcher;
  recvCq: CqWatcher;
  conn: Connection;
  events: EventLog;
  regions: Guarded[];
  reg(size: number, access: number, fill?: number): Guarded;
}

export interface PairOptions {
  cap?: Partial<QpCap>;
  clientPrivateData?: Buffer;
  serverPrivateData?: Buffer;
  clientOrd?: number;
  clientIrd?: number;
  serverOrd?: number;
  serverIrd?: number;
  /** Receives to post on each side before the connection is up: [client, server] sizes. */
  preRecv?: { client?: number[]; server?: number[] };
  cqDepth?: number;
}

export interface Pair {
  client: Side;
  server: Side;
  request: ConnectRequest;
  close(): Promise<void>;
}

function capOf(o: PairOptions): QpCap {
  return { maxSendWr: 64, maxRecvWr: 64, maxSendSge: 4, maxRecvSge: 4, ...o.cap };
}

/** Connects two fresh devices over loopback through the verbs interface alone. */
export async function connectPair(f: ProviderFactory, o: PairOptions = {}): Promise<Pair> {
  const host = f.host ?? '127.0.0.1';
  const [pc, ps] = await Promise.all([f.create(), f.create()]);
  const [dc, ds] = await Promise.all([pc.openDevice(), ps.openDevice()]);
  const depth = o.cqDepth ?? 256;
  const mkSide = (device: Device): Omit<Side, 'conn'> => {
    const pd = device.allocPd();
    const regions: Guarded[] = [];
    return {
      device,
      pd,
      sendCq: new CqWatcher(device.createCq(depth)),
      recvCq: new CqWatcher(device.createCq(depth)),
      events: new EventLog(),
      regions,
      reg(size, access, fill) {
        const g = new Guarded(pd, size, access, fill);
        regions.push(g);
        return g;
      },
    };
  };
  const cs = mkSide(dc);
  const ss = mkSide(ds);
  let server: Side | undefined;
  let request: ConnectRequest | undefined;
  const gotRequest = new Promise<void>((resolve) => {
    void ds
      .listen({
        host,
        port: 0,
        onConnectRequest: (req) => {
          request = req;
          const conn = req.createConnection({
            pd: ss.pd,
            sendCq: ss.sendCq.cq,
            recvCq: ss.recvCq.cq,
            cap: capOf(o),
            onEvent: ss.events.handler,
          });
          server = { ...ss, conn };
          resolve();
        },
      })
      .then((l) => {
        listener = l;
        listenerReady(l.port);
      });
  });
  let listener: { port: number; close(): Promise<void> } | undefined;
  let listenerReady!: (port: number) => void;
  const port = await new Promise<number>((r) => {
    listenerReady = r;
  });
  const conn = dc.connect({
    host,
    port,
    pd: cs.pd,
    sendCq: cs.sendCq.cq,
    recvCq: cs.recvCq.cq,
    cap: capOf(o),
    onEvent: cs.events.handler,
    privateData: o.clientPrivateData,
    ord: o.clientOrd,
    ird: o.clientIrd,
  });
  const client: Side = { ...cs, conn };
  for (const size of o.preRecv?.client ?? []) postRecvOf(client, size);
  await gotRequest;
  const s = server as unknown as Side;
  for (const size of o.preRecv?.server ?? []) postRecvOf(s, size);
  s.conn.accept({ privateData: o.serverPrivateData, ord: o.serverOrd, ird: o.serverIrd });
  await Promise.all([client.events.wait(CmEventType.ESTABLISHED), s.events.wait(CmEventType.ESTABLISHED)]);
  return {
    client,
    server: s,
    request: request as ConnectRequest,
    async close() {
      client.conn.destroy();
      s.conn.destroy();
      await listener?.close();
    },
  };
}

let nextRecvId = 1_000_000;

/** Posts one receive of `size` bytes (its own guarded region); returns the region and wrId. */
export function postRecvOf(side: Side, size: number): { g: Guarded; wrId: number } {
  const g = side.reg(size, 1 /* LOCAL_WRITE */);
  const wrId = nextRecvId++;
  side.conn.qp.postRecv({ wrId, sgList: [{ mr: g.mr, offset: 0, length: size }] });
  return { g, wrId };
}

export function allGuardsIntact(...sides: Side[]): boolean {
  return sides.every((s) => s.regions.every((g) => g.guardsIntact()));
}

export function pattern(n: number, seed: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    b[i] = x & 0xff;
  }
  return b;
}

export function tick(ms = 0): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
