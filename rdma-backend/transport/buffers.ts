/**
 * Pools of registered message buffers (Send and Receive), one slab per pool registered once for local
 * access: every Send/Receive uses the slab's lkey with an offset, so posting a message costs no
 * registration (as xprtrdma's `rpcrdma_regbuf`s and svcrdma's send contexts). Buffers start on 4 KiB
 * boundaries of the slab, which comes from `Device.allocBuffer` (page-aligned on the native provider).
 */
import { Access, type MemoryRegion, type ProtectionDomain } from '../verbs/index.js';

const PAGE = 4096;

export class BufferSlab {
  readonly mr: MemoryRegion;
  /** Distance in bytes between consecutive buffers (the buffer size rounded up to a page). */
  readonly stride: number;
  private readonly free: number[];
  /** One view per slot, made on first use and kept: a message costs no Buffer object. */
  private views: (Buffer | undefined)[] = [];

  constructor(
    pd: ProtectionDomain,
    readonly count: number,
    readonly size: number,
  ) {
    this.stride = Math.ceil(size / PAGE) * PAGE;
    // Memory from the device: the native provider registers only page-aligned memory it owns.
    const slab = pd.device.allocBuffer(this.stride * count);
    this.mr = pd.registerMemory(slab, Access.LOCAL_WRITE);
    this.free = [];
    for (let i = count - 1; i >= 0; i--) this.free.push(i);
    this.views = [];
    for (let i = 0; i < count; i++)
      this.views.push(this.mr.buffer.subarray(i * this.stride, i * this.stride + size));
  }

  /** The buffer of slot `i` (a view, `size` bytes). */
  view(i: number): Buffer {
    let v = this.views[i];
    if (v === undefined) {
      v = this.mr.buffer.subarray(i * this.stride, i * this.stride + this.size);
      this.views[i] = v;
    }
    return v;
  }

  offset(i: number): number {
    return i * this.stride;
  }

  /** A free slot index, or -1 when all are in use. */
  acquire(): number {
    const i = this.free.pop();
    return i === undefined ? -1 : i;
  }

  release(i: number): void {
    this.free.push(i);
  }

  get available(): number {
    return this.free.length;
  }

  get inUse(): number {
    return this.count - this.free.length;
  }

  destroy(): void {
    this.views = [];
    this.mr.deregister();
  }
}
