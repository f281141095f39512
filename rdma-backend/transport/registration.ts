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
 *   deregistered after invalidation.
 * - Nothing goes back to a pool (or is deregistered) before it was invalidated: the peer's Send With
 *   Invalidate, or our Local Invalidate, whose completion the connection waits for. On connection loss
 *   the QP is in error, so nothing can reach the regions; they are rekeyed (revoking every rkey a peer
 *   saw) before they return to the pool.
 */
import { Access, type MemoryRegion, type ProtectionDomain } from '../verbs/index.js';

/** One registered chunk of a call. */
export interface ChunkRegistration {
  mr: MemoryRegion;
  /** Size-class index of the pool it came from, or -1 for a per-call registration of caller memory. */
  sizeClass: number;
  /** Set when the peer invalidated it remotely (Send With Invalidate named its rkey). */
  remotelyInvalidated: boolean;
}

const MIN_CLASS_SHIFT = 12; // 4 KiB

export class ChunkRegistrar {
  private readonly pools: ChunkRegistration[][] = [];
  /** Regions handed out and not yet released (gauge). */
  inUse = 0;
  registrations = 0;
  rekeys = 0;

  constructor(
    private readonly pd: ProtectionDomain,
    /** Largest chunk the pools serve (bytes). */
    readonly maxChunk: number,
  ) {}

  private classOf(length: number): number {
    let c = 0;
    while (1 << (MIN_CLASS_SHIFT + c) < length) c++;
    return c;
  }

  /**
   * A writable target region (REMOTE_WRITE) freshly keyed for exactly `length` bytes (at least 1: a
   * zero-length segment still needs a valid handle): `mr.length === max(1, length)`.
   */
  acquireTarget(length: number): ChunkRegistration {
    const exact = Math.max(1, length);
    const cls = this.classOf(exact);
    const free = this.pools[cls];
    let reg = free?.pop();
    if (reg === undefined) {
      const buf = this.pd.device.allocBuffer(1 << (MIN_CLASS_SHIFT + cls));
      reg = {
        mr: this.pd.registerMemory(buf, Access.LOCAL_WRITE | Access.REMOTE_WRITE),
        sizeClass: cls,
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

  /** Registers caller memory as a Read chunk source (REMOTE_READ) for one call. */
  registerSource(bytes: Buffer): ChunkRegistration {
    this.registrations++;
    this.inUse++;
    return {
      mr: this.pd.registerMemory(bytes, Access.REMOTE_READ),
      sizeClass: -1,
      remotelyInvalidated: false,
    };
  }

  /** Registers local bytes as the source of RDMA Writes (no remote access at all). */
  registerLocal(bytes: Buffer): ChunkRegistration {
    this.registrations++;
    this.inUse++;
    return { mr: this.pd.registerMemory(bytes, 0), sizeClass: -1, remotelyInvalidated: false };
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
    let free = this.pools[reg.sizeClass];
    if (free === undefined) {
      free = [];
      this.pools[reg.sizeClass] = free;
    }
    free.push(reg);
  }

  /** Deregisters every pooled region (the connection is being destroyed). */
  destroy(): void {
    for (const free of this.pools) {
      if (!free) continue;
      for (const reg of free) reg.mr.deregister();
      free.length = 0;
    }
  }
}
