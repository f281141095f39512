/**
 * Protection domains, memory regions and the STag table of one soft device. An STag is
 * `index << 8 | key` (RFC 5040 §2.1 leaves the layout to the RNIC; this is the layout of every iWARP
 * RNIC and of Linux siw): the index finds the region, the 8-bit key must match, so `rekey()` revokes
 * every rkey handed out before it. lkey and rkey are the same STag, as with siw.
 *
 * The key of an index advances by one at every rekey and every registration that reuses the index (as
 * ULPs do with `ib_inc_rkey` on a fast-registered MR), so an rkey handed out comes back only after 254
 * more keys at that index, whatever other regions do meanwhile. One device-wide counter would not bound
 * it: with 254 registrations elsewhere between two rekeys, a region got its previous key back, and a
 * stale rkey of a deregistered region could name the region that took its index.
 */
import { viewOf } from '../../../common/bytes.js';
import {
  Access,
  type Device,
  invalidArgument,
  type MemoryRegion,
  type ProtectionDomain,
  VerbsError,
} from '../../verbs/index.js';

export class StagTable {
  private readonly regions: (SoftMr | undefined)[] = [undefined]; // index 0 is never used: STag 0 is invalid
  private readonly free: number[] = [];
  private nextKey = 1;
  /** The last key given at each index (`keyFor`). */
  private readonly lastKeys: number[] = [];

  constructor(private readonly maxMr: number) {}

  get count(): number {
    return this.regions.length - 1 - this.free.length;
  }

  allocate(mr: SoftMr): number {
    let index = this.free.pop();
    if (index === undefined) {
      if (this.regions.length > this.maxMr) {
        throw new VerbsError('VERBS_RESOURCE_LIMIT', 'too many memory regions', { maxMr: this.maxMr });
      }
      index = this.regions.length;
      this.regions.push(undefined);
    }
    this.regions[index] = mr;
    return index;
  }

  release(index: number): void {
    this.regions[index] = undefined;
    this.free.push(index);
  }

  /**
   * The next 8-bit key (1..255) at `index`: the one after the last given there, or, at an index never used,
   * the next of a device-wide counter (so that new regions do not all start alike).
   */
  keyFor(index: number): number {
    const last = this.lastKeys[index];
    let k: number;
    if (last === undefined) {
      k = this.nextKey;
      this.nextKey = this.nextKey === 255 ? 1 : this.nextKey + 1;
    } else {
      k = last === 255 ? 1 : last + 1;
    }
    this.lastKeys[index] = k;
    return k;
  }

  /** The region an STag names if the STag is currently valid (right key, not invalidated), else undefined. */
  lookup(stag: number): SoftMr | undefined {
    const mr = this.regions[stag >>> 8];
    if (mr === undefined || mr.rkey !== stag || !mr.valid) return undefined;
    return mr;
  }

  /** The region an STag's index names regardless of key/validity (for telling error causes apart). */
  byIndex(stag: number): SoftMr | undefined {
    return this.regions[stag >>> 8];
  }
}

export class SoftPd implements ProtectionDomain {
  mrCount = 0;
  qpCount = 0;
  dead = false;

  constructor(
    readonly device: Device,
    private readonly stags: StagTable,
    private readonly maxMrSize: number,
    /** Tells the device this PD is gone (its count against `maxPd`). */
    private readonly onDealloc?: () => void,
  ) {}

  registerMemory(buffer: Buffer, access: number): MemoryRegion {
    if (this.dead) throw new VerbsError('VERBS_DESTROYED', 'protection domain was deallocated');
    if (!Buffer.isBuffer(buffer)) throw invalidArgument('registerMemory needs a Buffer');
    if (!this.device.canRegister(buffer)) {
      // The same refusal as the native provider's (ownedMemoryOnly).
      throw invalidArgument(
        'this device registers only memory from device.allocBuffer(); a Buffer.alloc/allocUnsafe buffer may share its pages with unrelated data',
        { length: buffer.length },
      );
    }
    if (buffer.length > this.maxMrSize) {
      throw invalidArgument('region larger than maxMrSize', { length: buffer.length, max: this.maxMrSize });
    }
    // libibverbs: remote write (and atomics) require local write.
    if (access & Access.REMOTE_WRITE && !(access & Access.LOCAL_WRITE)) {
      throw invalidArgument('REMOTE_WRITE access requires LOCAL_WRITE', { access });
    }
    const mr = new SoftMr(this, this.stags, buffer, access);
    this.mrCount++;
    return mr;
  }

  dealloc(): void {
    if (this.dead) return;
    if (this.mrCount > 0 || this.qpCount > 0) {
      throw new VerbsError('VERBS_BUSY', 'protection domain still has memory regions or queue pairs', {
        mrs: this.mrCount,
        qps: this.qpCount,
      });
    }
    this.dead = true;
    this.onDealloc?.();
  }
}

export class SoftMr implements MemoryRegion {
  /** Bytes [0, length) of `buffer` are reachable with the current keys (every bounds check uses it). */
  length: number;
  /**
   * The high 32 bits of every Tagged Offset that reaches this region: the region's index, so that a
   * peer that forgets to add `iova` to an offset hits a bounds error instead of the wrong bytes.
   */
  readonly iovaHi: number;
  readonly iova: bigint;
  private index: number;
  private key: number;
  valid = true;
  deregistered = false;
  private bytesView: DataView | undefined;

  constructor(
    readonly pd: SoftPd,
    private readonly stags: StagTable,
    readonly buffer: Buffer,
    readonly access: number,
  ) {
    this.length = buffer.length;
    this.index = stags.allocate(this);
    this.key = stags.keyFor(this.index);
    this.iovaHi = this.index;
    this.iova = BigInt(this.index) << 32n;
  }

  /** A DataView over `buffer`, made the first time a small copy or CRC reads or writes through it. */
  get view(): DataView {
    if (this.bytesView === undefined) this.bytesView = viewOf(this.buffer);
    return this.bytesView;
  }

  get rkey(): number {
    return this.deregistered ? 0 : ((this.index << 8) | this.key) >>> 0;
  }

  get lkey(): number {
    return this.rkey;
  }

  rekey(length = this.buffer.length): void {
    if (this.deregistered) throw new VerbsError('VERBS_DESTROYED', 'memory region was deregistered');
    if (!Number.isInteger(length) || length < 1 || length > this.buffer.length) {
      throw invalidArgument('rekey length must be in 1..buffer.length', { length, max: this.buffer.length });
    }
    this.length = length;
    this.key = this.stags.keyFor(this.index);
    this.valid = true;
  }

  invalidate(): void {
    this.valid = false;
  }

  deregister(): void {
    if (this.deregistered) return;
    this.valid = false;
    this.deregistered = true;
    this.stags.release(this.index);
    this.pd.mrCount--;
  }
}
