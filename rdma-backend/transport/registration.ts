/**
 * Chunk memory registrations, FRWR-like (RFC 8166 §3.4 / DESIGN §3 "Memory"): every chunk of a call gets
 * its own region whose rkey is handed to the peer for that call only.
 *
 * - Write and Reply chunk targets (and the responder's RDMA Read sinks) come from pools of pre-registered
 *   regions in power-of-two size classes (LOCAL_WRITE | REMOTE_WRITE). A region is rekeyed every time it
 *   is taken from the pool, so an rkey that a peer kept from an earlier call is refused by the provider,
 *   and the new key reaches exactly the length the segment advertises (`rekey(length)`): the slack of the
 *   size class is out of bounds for the peer (no write past the segment, no read of an earlier call's
 *   bytes through a reply claiming more than was offered).
 * - Read chunk sources are the caller's own bytes registered for REMOTE_READ for the call (no copy), and
 *   deregistered after invalidation — where the device can register them (`Device.canRegister`). A
 *   native device registers only memory it allocated (pinning a `Buffer.allocUnsafe` pool slab would
 *   expose unrelated data to DMA), so there the bytes are copied into a pooled region of the same access,
 *   keyed for exactly their length, as Linux's xprtrdma does not need to but every userspace ULP must.
 * - Large Write chunk targets and Read sinks can be windows of the caller's message buffer, registered
 *   for the call and deregistered after invalidation (`registerPlacement`, `placement.ts`), on the same
 *   condition; otherwise they come from the pools.
 * - Nothing goes back to a pool (or is deregistered) before it was invalidated: the peer's Send With
 *   Invalidate, or our Local Invalidate, whose completion the connection waits for. On connection loss
 *   the QP is in error, so nothing can reach the regions; they are rekeyed (revoking every rkey a peer
 *   saw) before they return to the pool.
 */
import { Access, type MemoryRegion, type ProtectionDomain } from '../verbs/index.js';
import { TransportError } from './errors.js';

/** One registered chunk of a call. */
export interface ChunkRegistration {
  mr: MemoryRegion;
  /** Size-class index of the pool it came from, or -1 for a per-call registration of caller memory. */
  sizeClass: number;
  /** Which pools it belongs to (pooled regions only): targets, sources or local copies. */
  kind: PoolKind;
  /** Set when the peer invalidated it remotely (Send With Invalidate named its rkey). */
  remotelyInvalidated: boolean;
}

const MIN_CLASS_SHIFT = 12; // 4 KiB

/** Pools by access: Write/Reply targets and Read sinks, Read-chunk sources, local sources of RDMA Writes. */
const enum PoolKind {
  Target = 0,
  Source = 1,
  Local = 2,
}
const POOL_ACCESS = [Access.LOCAL_WRITE | Access.REMOTE_WRITE, Access.REMOTE_READ, 0];

export class ChunkRegistrar {
  /** Free pooled regions, by kind then size class. */
  private readonly pools: ChunkRegistration[][][] = [[], [], []];
  /** Regions handed out and not yet released (gauge). */
  inUse = 0;
  registrations = 0;
  rekeys = 0;
  /** Bytes copied into registered memory because the device could not register the caller's own. */
  bounceBytes = 0;
  /**
   * Whether the device registers memory it did not allocate (the soft provider does; a native device
   * does not). Only then can chunk data be placed straight into the caller's message buffers.
   */
  readonly registersCallerMemory: boolean;

  constructor(
    private readonly pd: ProtectionDomain,
    /** Largest chunk the pools serve (bytes). */
    readonly maxChunk: number,
  ) {
    this.registersCallerMemory = pd.device.canRegister(Buffer.allocUnsafeSlow(1));
  }

  private classOf(length: number): number {
    let c = 0;
    // `2 **`, not `1 <<`: a shift wraps negative past 2^30 and the loop would never end.
    while (2 ** (MIN_CLASS_SHIFT + c) < length) c++;
    return c;
  }

  /**
   * A pooled region of `kind` freshly keyed for exactly `length` bytes (at least 1: a zero-length
   * segment still needs a valid handle): `mr.length === max(1, length)`.
   */
  private acquire(kind: PoolKind, length: number): ChunkRegistration {
    const exact = Math.max(1, length);
    const cls = this.classOf(exact);
    let reg = this.pools[kind][cls]?.pop();
    if (reg === undefined) {
      const buf = this.pd.device.allocBuffer(2 ** (MIN_CLASS_SHIFT + cls));
      reg = {
        mr: this.pd.registerMemory(buf, POOL_ACCESS[kind]),
        sizeClass: cls,
        kind,
        remotelyInvalidated: false,
      };
      this.registrations++;
      if (exact < buf.length) {
        reg.mr.rekey(exact);
        this.rekeys++;
      }
    } else {
      reg.mr.rekey(exact);
      reg.remotelyInvalidated = false;
      this.rekeys++;
    }
    this.inUse++;
    return reg;
  }

  /**
   * A writable target region (REMOTE_WRITE) freshly keyed for exactly `length` bytes. Its length comes
   * from a chunk (offered by us, or announced by the peer), so it is bounded by `maxChunk`: the last guard
   * against a size nobody checked. The bounce copies of our own messages (`registerLocal`,
   * `registerSource`) are as large as those messages and are not chunks: they are not bounded here.
   */
  acquireTarget(length: number): ChunkRegistration {
    if (!(length <= this.maxChunk)) {
      throw new TransportError(
        'ERR_TRANSPORT_CHUNK_TOO_LARGE',
        `a chunk of ${length} bytes is larger than the largest this connection takes (${this.maxChunk})`,
        false,
        { length, maxChunk: this.maxChunk },
      );
    }
    return this.acquire(PoolKind.Target, length);
  }

  /** A pooled region of `kind` holding a copy of `bytes` at offset 0, keyed for exactly their length. */
  private bounce(kind: PoolKind, bytes: Buffer): ChunkRegistration {
    const reg = this.acquire(kind, bytes.length);
    bytes.copy(reg.mr.buffer, 0);
    this.bounceBytes += bytes.length;
    return reg;
  }

  /** Registers caller memory as a Read chunk source (REMOTE_READ) for one call. */
  registerSource(bytes: Buffer): ChunkRegistration {
    if (!this.pd.device.canRegister(bytes)) return this.bounce(PoolKind.Source, bytes);
    // Counted once made: a registration the device refuses (its MR limit, locked memory) holds nothing.
    const mr = this.pd.registerMemory(bytes, Access.REMOTE_READ);
    this.registrations++;
    this.inUse++;
    return { mr, sizeClass: -1, kind: PoolKind.Source, remotelyInvalidated: false };
  }

  /**
   * Registers caller memory for one call as the place where chunk data lands: the peer's RDMA Writes (a
   * Write chunk target) or our own RDMA Reads (a Read sink, which needs REMOTE_WRITE as well: iWARP places
   * a Read Response as a tagged write, RFC 5040 §4.5). The bytes are a window inside the buffer that
   * carries the message on, so the data needs no copy out of a pooled region, as xprtrdma registers the
   * pages of the RPC's own xdr_buf. The key reaches exactly `bytes` (at least 1 byte long). Null when the
   * device cannot register this memory: the caller then takes a pooled region and copies.
   */
  registerPlacement(bytes: Buffer): ChunkRegistration | null {
    if (bytes.length === 0 || !this.pd.device.canRegister(bytes)) return null;
    // Counted once made: a registration the device refuses (its MR limit, locked memory) holds nothing.
    const mr = this.pd.registerMemory(bytes, POOL_ACCESS[PoolKind.Target]);
    this.registrations++;
    this.inUse++;
    return { mr, sizeClass: -1, kind: PoolKind.Target, remotelyInvalidated: false };
  }

  /** Registers local bytes as the source of RDMA Writes (no remote access at all). */
  registerLocal(bytes: Buffer): ChunkRegistration {
    if (!this.pd.device.canRegister(bytes)) return this.bounce(PoolKind.Local, bytes);
    // Counted once made: a registration the device refuses (its MR limit, locked memory) holds nothing.
    const mr = this.pd.registerMemory(bytes, 0);
    this.registrations++;
    this.inUse++;
    return { mr, sizeClass: -1, kind: PoolKind.Local, remotelyInvalidated: false };
  }

  /**
   * Gives a region back once it is invalidated (or the connection is gone). `revoke` rekeys a pooled
   * region at once (used on connection loss, when no Local Invalidate can run).
   */
  release(reg: ChunkRegistration, revoke = false): void {
    this.inUse--;
    if (reg.sizeClass < 0) {
      reg.mr.deregister();
      return;
    }
    if (revoke) {
      reg.mr.rekey();
      this.rekeys++;
    }
    const byClass = this.pools[reg.kind];
    let free = byClass[reg.sizeClass];
    if (free === undefined) {
      free = [];
      byClass[reg.sizeClass] = free;
    }
    free.push(reg);
  }

  /** Deregisters every pooled region (the connection is being destroyed). */
  destroy(): void {
    for (const byClass of this.pools) {
      for (const free of byClass) {
        if (!free) continue;
        for (const reg of free) reg.mr.deregister();
        free.length = 0;
      }
    }
  }
}
