/**
 * Protection domains and memory regions of the native provider. Only memory the addon allocated
 * (`NativeDevice.allocBuffer`, page-aligned, MADV_DONTFORK) can be registered: a Buffer from
 * `Buffer.allocUnsafe` may be a slice of a shared pool slab, and pinning it would pin unrelated data.
 */
import { Access, type MemoryRegion, type ProtectionDomain, VerbsError } from '../../verbs/index.js';
import type { NativeMr, NativePd, RdmaNativeAddon } from './addon.js';
import { toVerbsError } from './errors.js';

/** What a PD needs from its device (kept narrow so memory.ts does not import device.ts). */
export interface PdOwner {
  readonly addon: RdmaNativeAddon;
}

export class NativeProtectionDomain implements ProtectionDomain {
  constructor(
    readonly device: ProtectionDomain['device'] & PdOwner,
    readonly native: NativePd,
  ) {}

  registerMemory(buffer: Buffer, access: number): MemoryRegion {
    if (!Buffer.isBuffer(buffer) || buffer.length === 0) {
      throw new VerbsError('VERBS_INVALID_ARGUMENT', 'registerMemory needs a non-empty Buffer', {});
    }
    if ((access & Access.REMOTE_WRITE) !== 0 && (access & Access.LOCAL_WRITE) === 0) {
      throw new VerbsError(
        'VERBS_INVALID_ARGUMENT',
        'REMOTE_WRITE access requires LOCAL_WRITE (as in libibverbs)',
        {
          access,
        },
      );
    }
    if (!this.device.addon.isAddonBuffer(buffer.buffer)) {
      throw new VerbsError(
        'VERBS_INVALID_ARGUMENT',
        'the native provider registers only memory from device.allocBuffer() (page-aligned, owned by the addon); ' +
          'a Buffer.alloc/allocUnsafe buffer may share its pages with unrelated data',
        { length: buffer.length },
      );
    }
    let mr: NativeMr;
    try {
      mr = this.native.regMr(buffer.buffer as ArrayBuffer, buffer.byteOffset, buffer.length, access);
    } catch (e) {
      throw toVerbsError(e, 'registerMemory', {
        memlock: () => this.device.addon.memlockLimit(),
        bytes: buffer.length,
      });
    }
    return new NativeMemoryRegion(this, buffer, access, mr);
  }

  dealloc(): void {
    try {
      this.native.destroy();
    } catch (e) {
      throw toVerbsError(e, 'dealloc');
    }
  }
}

export class NativeMemoryRegion implements MemoryRegion {
  private deregistered = false;
  /** Address of byte 0 as a JS number (exact: user-space addresses fit in 47 bits), for SGE encoding. */
  readonly addr: number;
  readonly iova: bigint;

  constructor(
    readonly pd: NativeProtectionDomain,
    readonly buffer: Buffer,
    readonly access: number,
    private native: NativeMr,
  ) {
    this.addr = native.addr;
    this.iova = BigInt(native.addr);
  }

  /** The registered length: the whole buffer, or the window of the last `rekey(length)`. */
  get length(): number {
    return Math.min(this.buffer.length, this.native.length);
  }
  get lkey(): number {
    return this.native.lkey;
  }
  get rkey(): number {
    return this.native.rkey;
  }
  get valid(): boolean {
    return !this.deregistered;
  }

  /**
   * A fresh registration of the same bytes (new keys; the old registration, and its rkey, are gone);
   * with `length`, of bytes [0, length) only (registered before the old one goes: no gap, as rereg).
   */
  rekey(length = this.buffer.length): void {
    if (this.deregistered) throw new VerbsError('VERBS_DESTROYED', 'the memory region is deregistered', {});
    if (!Number.isInteger(length) || length < 1 || length > this.buffer.length) {
      throw new VerbsError('VERBS_INVALID_ARGUMENT', 'rekey length must be in 1..buffer.length', {
        length,
        max: this.buffer.length,
      });
    }
    try {
      if (length !== this.native.length) {
        const fresh = this.pd.native.regMr(
          this.buffer.buffer as ArrayBuffer,
          this.buffer.byteOffset,
          length,
          this.access,
        );
        this.native.destroy();
        this.native = fresh;
        return;
      }
      this.native.rereg();
    } catch (e) {
      throw toVerbsError(e, 'rekey', {
        memlock: () => this.pd.device.addon.memlockLimit(),
        bytes: this.length,
      });
    }
  }

  deregister(): void {
    if (this.deregistered) return;
    try {
      this.native.destroy();
    } catch (e) {
      throw toVerbsError(e, 'deregister');
    }
    this.deregistered = true;
  }
}
