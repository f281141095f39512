/**
 * A raw RPC-over-RDMA peer for rogue-peer tests: built on the verbs interface (soft provider) with no
 * transport logic, it sends exactly the bytes a test gives it, shows every message it receives, and can
 * RDMA Read/Write with any rkey — to prove what the transport answers to malformed input, and that a
 * stale rkey is refused by the provider.
 */
import { encodePrivateData } from '../../rdma-backend/protocol/index.js';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import {
  Access,
  type CmEvent,
  CmEventType,
  type CompletionQueue,
  type Connection,
  createWorkCompletions,
  type Device,
  type MemoryRegion,
  type ProtectionDomain,
  SendFlags,
  WrOpcode,
} from '../../rdma-backend/verbs/index.js';

/** RFC 8797 private data of a peer with 4 KiB inline sizes that does not take Send With Invalidate. */
export const plainPrivateData = (): Buffer =>
  encodePrivateData({ sendWithInvalidateOk: false, inlineSendSize: 4096, inlineRecvSize: 4096 });

const RECVS = 64;
const RECV_SIZE = 65536;

export interface RogueCompletion {
  wrId: number;
  status: number;
  opcode: number;
  byteLen: number;
}

export class RoguePeer {
  readonly received: Buffer[] = [];
  readonly completions: RogueCompletion[] = [];
  readonly events: CmEvent[] = [];
  readonly pd: ProtectionDomain;
  readonly cq: CompletionQueue;
  conn!: Connection;
  private readonly recvMr: MemoryRegion;
  private readonly wcs = createWorkCompletions(32);
  private waiters: (() => void)[] = [];
  private nextWr = 1000;

  private constructor(readonly device: Device) {
    this.pd = device.allocPd();
    this.cq = device.createCq(1024);
    this.recvMr = this.pd.registerMemory(Buffer.alloc(RECVS * RECV_SIZE), Access.LOCAL_WRITE);
    this.cq.setNotifyHandler(() => {
      this.cq.requestNotify();
      let n = this.cq.poll(this.wcs);
      while (n > 0) {
        for (let i = 0; i < n; i++) {
          const wc = this.wcs[i];
          if (wc.wrId < RECVS && wc.status === 0) {
            this.received.push(
              Buffer.from(this.recvMr.buffer.subarray(wc.wrId * RECV_SIZE, wc.wrId * RECV_SIZE + wc.byteLen)),
            );
            this.conn.qp.postRecv(this.recvWr(wc.wrId));
          } else if (wc.wrId >= RECVS) {
            this.completions.push({
              wrId: wc.wrId,
              status: wc.status,
              opcode: wc.opcode,
              byteLen: wc.byteLen,
            });
          }
        }
        n = this.cq.poll(this.wcs);
      }
      this.wake();
    });
    this.cq.requestNotify();
  }

  private recvWr(i: number) {
    return { wrId: i, sgList: [{ mr: this.recvMr, offset: i * RECV_SIZE, length: RECV_SIZE }] };
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  private onEvent = (e: CmEvent): void => {
    this.events.push(e);
    this.wake();
  };

  /** Connects to a transport server end as a raw client. */
  static async connect(port: number, privateData?: Buffer, postRecvs = RECVS): Promise<RoguePeer> {
    const device = await createSoftProvider().openDevice();
    const p = new RoguePeer(device);
    p.conn = device.connect({
      host: '127.0.0.1',
      port,
      pd: p.pd,
      sendCq: p.cq,
      recvCq: p.cq,
      cap: { maxSendWr: 256, maxRecvWr: RECVS, maxSendSge: 1, maxRecvSge: 1 },
      privateData,
      onEvent: p.onEvent,
    });
    for (let i = 0; i < postRecvs; i++) p.conn.qp.postRecv(p.recvWr(i));
    await p.until(() => p.events.some((e) => e.type === CmEventType.ESTABLISHED), 'ESTABLISHED');
    return p;
  }

  /** Listens for one transport client end; resolves the peer once it accepted. */
  static async listen(
    privateData?: Buffer,
  ): Promise<{ port: number; peer: Promise<RoguePeer>; close(): Promise<void> }> {
    let resolvePeer: (p: RoguePeer) => void = () => {};
    const peer = new Promise<RoguePeer>((r) => {
      resolvePeer = r;
    });
    const l = await RoguePeer.listenMany(privateData, (p) => resolvePeer(p));
    return { port: l.port, peer, close: l.close };
  }

  /** Listens for transport client ends, accepting each (`peers`, in order; `onPeer` for each). */
  static async listenMany(
    privateData?: Buffer,
    onPeer?: (p: RoguePeer) => void,
  ): Promise<{ port: number; peers: RoguePeer[]; close(): Promise<void> }> {
    const device = await createSoftProvider().openDevice();
    const peers: RoguePeer[] = [];
    const listener = await device.listen({
      host: '127.0.0.1',
      port: 0,
      onConnectRequest: (req) => {
        const p = new RoguePeer(device);
        p.conn = req.createConnection({
          pd: p.pd,
          sendCq: p.cq,
          recvCq: p.cq,
          cap: { maxSendWr: 256, maxRecvWr: RECVS, maxSendSge: 1, maxRecvSge: 1 },
          onEvent: p.onEvent,
        });
        for (let i = 0; i < RECVS; i++) p.conn.qp.postRecv(p.recvWr(i));
        p.conn.accept({ privateData });
        peers.push(p);
        onPeer?.(p);
      },
    });
    return { port: listener.port, peers, close: () => listener.close() };
  }

  /** Waits until `cond()` holds (checked on every completion/event), failing after `ms`. */
  async until(cond: () => boolean, what: string, ms = 5000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!cond()) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`rogue peer: timed out waiting for ${what}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(left, 50));
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  /** Sends `bytes` and waits for the next message to arrive after them (a request and its answer). */
  async ask(bytes: Buffer, ms = 5000): Promise<Buffer> {
    const n = this.received.length;
    this.send(bytes);
    return this.message(n, ms);
  }

  /** The `n`-th received message (0-based), waiting for it. */
  async message(n: number, ms = 5000): Promise<Buffer> {
    await this.until(() => this.received.length > n, `message ${n}`, ms);
    return this.received[n];
  }

  get disconnected(): boolean {
    return this.events.some((e) => e.type === CmEventType.DISCONNECTED);
  }

  /** Sends `bytes` as one RDMA Send (optionally With Invalidate). */
  send(bytes: Buffer, invalidateRkey?: number): number {
    const mr = this.pd.registerMemory(Buffer.from(bytes), 0);
    const wrId = this.nextWr++;
    this.conn.qp.postSend({
      wrId,
      opcode: invalidateRkey ? WrOpcode.SEND_WITH_INV : WrOpcode.SEND,
      flags: SendFlags.SIGNALED,
      sgList: bytes.length ? [{ mr, offset: 0, length: bytes.length }] : [],
      invalidateRkey,
    });
    return wrId;
  }

  /** RDMA Write of `data` to (rkey, addr); resolves with the completion status. */
  async write(rkey: number, addr: bigint, data: Buffer): Promise<number> {
    const mr = this.pd.registerMemory(Buffer.from(data), Access.LOCAL_WRITE);
    const wrId = this.nextWr++;
    this.conn.qp.postSend({
      wrId,
      opcode: WrOpcode.RDMA_WRITE,
      flags: SendFlags.SIGNALED,
      sgList: [{ mr, offset: 0, length: data.length }],
      remoteAddr: addr,
      rkey,
    });
    await this.until(
      () => this.completions.some((c) => c.wrId === wrId) || this.disconnected,
      `write ${wrId}`,
    );
    return this.completions.find((c) => c.wrId === wrId)?.status ?? -1;
  }

  /** RDMA Read of `length` bytes from (rkey, addr). */
  async read(rkey: number, addr: bigint, length: number): Promise<{ status: number; data: Buffer }> {
    const mr = this.pd.registerMemory(Buffer.alloc(length), Access.LOCAL_WRITE | Access.REMOTE_WRITE);
    const wrId = this.nextWr++;
    this.conn.qp.postSend({
      wrId,
      opcode: WrOpcode.RDMA_READ,
      flags: SendFlags.SIGNALED,
      sgList: [{ mr, offset: 0, length }],
      remoteAddr: addr,
      rkey,
    });
    await this.until(() => this.completions.some((c) => c.wrId === wrId), `read ${wrId}`);
    return { status: this.completions.find((c) => c.wrId === wrId)?.status ?? -1, data: mr.buffer };
  }

  close(): void {
    try {
      this.conn.disconnect();
    } catch {
      // already gone
    }
  }
}
