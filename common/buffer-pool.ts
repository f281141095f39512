/**
 * A pool of message buffers of 4 KiB and more (NFS READ/WRITE payloads, Long Calls and Replies, 1 MiB
 * test-program records) reused instead of allocated per message.
 *
 * Why: a fresh 1 MiB `Buffer` per record costs more than its copy. Its backing store is mmap()ed by
 * malloc (above glibc's threshold), first-touch page faults follow, and V8 counts it as external memory,
 * so a few hundred per second trigger "external memory pressure" scavenges and mark-compacts
 * (docs/performance.md, dc422ee in its index: GC at 14–18 % of the responder's time on 1 MiB SOURCE).
 * Reusing the same few backing stores removes all three. From 4 KiB: below that `Buffer.allocUnsafe` carves
 * from Node's shared 8 KiB slab (`Buffer.poolSize`), at and above it every buffer is an `ArrayBuffer`
 * of its own (4 KiB ECHO records spent 3 % of the gateway in `createUnsafeBuffer`,
 * docs/performance-investigations.md).
 *
 * - A store is its class size plus `STORE_TAIL` bytes, a length no Node slab has: `release` and `owns`
 *   tell a candidate store from the slab under a small record by its length alone, and look the store
 *   up in the ownership map only when the length matches (no lookup on the small-message path).
 * - Size classes are powers of two from `minSize` to `maxSize`; `acquire(n)` returns a view of exactly
 *   `n` bytes over a pooled `ArrayBuffer` of the class that fits (sizes outside the classes get a plain,
 *   unpooled allocation).
 * - `release(view)` takes back a view returned by `acquire` once nothing references it any more. Only
 *   the pool's own stores are taken back, each at most once while it is out; anything else (a plain
 *   allocation, a view of a socket chunk, a second release) is ignored and counted, never adopted: a
 *   buffer still in use elsewhere must never be handed out twice.
 * - A buffer never released is simply collected: forgetting to release costs an allocation, not memory.
 * - The pool retains at most `maxRetainedBytes`; what does not fit is dropped to the garbage collector.
 */
import { ConfigError } from './errors.js';

export interface BufferPoolOptions {
  /** Smallest pooled class (bytes, a power of two). Smaller requests are plain allocations. */
  minSize?: number;
  /** Largest pooled class (bytes, a power of two). Larger requests are plain allocations. */
  maxSize?: number;
  /** Most bytes kept on the free lists together. */
  maxRetainedBytes?: number;
}

export interface BufferPoolStats {
  /** Acquisitions served from a free list. */
  hits: number;
  /** Acquisitions that allocated a new pooled store. */
  misses: number;
  /** Acquisitions outside the classes (plain allocations). */
  unpooled: number;
  /** Releases taken back onto a free list. */
  returned: number;
  /** Releases dropped because the free lists were full. */
  dropped: number;
  /** Releases ignored because the buffer is not a view of the pool's stores (a plain allocation). */
  ignored: number;
  /** Releases of a store already back in the pool, ignored (a caller bug: it released twice). */
  doubleReleases: number;
  /** Bytes on the free lists now. */
  retainedBytes: number;
}

const DEFAULT_MIN = 4 * 1024;
/** Bytes past the class size in every store (never part of a view): marks the store's length. */
const STORE_TAIL = 8;
const DEFAULT_MAX = 8 * 1024 * 1024;
const DEFAULT_RETAINED = 64 * 1024 * 1024;

function isPowerOfTwo(n: number): boolean {
  return Number.isInteger(n) && n > 0 && (n & (n - 1)) === 0;
}

export class BufferPool {
  readonly minSize: number;
  readonly maxSize: number;
  readonly maxRetainedBytes: number;
  readonly stats: BufferPoolStats = {
    hits: 0,
    misses: 0,
    unpooled: 0,
    returned: 0,
    dropped: 0,
    ignored: 0,
    doubleReleases: 0,
    retainedBytes: 0,
  };
  private readonly minShift: number;
  private readonly free: ArrayBuffer[][] = [];
  /** Stores created by this pool, mapped to whether they are out (true) or on a free list (false). */
  private readonly out = new WeakMap<ArrayBuffer, boolean>();

  constructor(o: BufferPoolOptions = {}) {
    this.minSize = o.minSize ?? DEFAULT_MIN;
    this.maxSize = o.maxSize ?? DEFAULT_MAX;
    this.maxRetainedBytes = o.maxRetainedBytes ?? DEFAULT_RETAINED;
    if (!isPowerOfTwo(this.minSize) || !isPowerOfTwo(this.maxSize) || this.maxSize < this.minSize) {
      throw new ConfigError('ERR_BUFFER_POOL_CONFIG', 'pool classes must be powers of two, min <= max', {
        minSize: this.minSize,
        maxSize: this.maxSize,
      });
    }
    if (!Number.isInteger(this.maxRetainedBytes) || this.maxRetainedBytes < 0) {
      throw new ConfigError('ERR_BUFFER_POOL_CONFIG', 'maxRetainedBytes must be a non-negative integer', {
        maxRetainedBytes: this.maxRetainedBytes,
      });
    }
    this.minShift = 31 - Math.clz32(this.minSize);
    const classes = 31 - Math.clz32(this.maxSize) - this.minShift + 1;
    for (let i = 0; i < classes; i++) this.free.push([]);
  }

  /** A buffer of exactly `size` bytes (contents unspecified). Bound: usable as `RecordDecoder`'s `allocate`. */
  readonly acquire = (size: number): Buffer => {
    if (size < this.minSize || size > this.maxSize) {
      this.stats.unpooled++;
      return Buffer.allocUnsafe(size);
    }
    const cls = size <= this.minSize ? 0 : 32 - Math.clz32(size - 1) - this.minShift;
    const list = this.free[cls];
    let store = list.pop();
    if (store === undefined) {
      this.stats.misses++;
      store = new ArrayBuffer((this.minSize << cls) + STORE_TAIL);
    } else {
      this.stats.hits++;
      this.stats.retainedBytes -= store.byteLength;
    }
    this.out.set(store, true);
    return Buffer.from(store, 0, size);
  };

  /** Takes back a buffer from `acquire` that nothing references any more (see the module comment). */
  readonly release = (buf: Uint8Array): void => {
    const store = buf.buffer as ArrayBuffer;
    // Only a store of a class's length can be ours: a small record's memory (Node's 8 KiB slab) and
    // plain allocations are told apart without the WeakMap lookup.
    const state = this.isStoreLength(store.byteLength) ? this.out.get(store) : undefined;
    if (state !== true) {
      if (state === false) this.stats.doubleReleases++;
      else this.stats.ignored++;
      return;
    }
    this.out.set(store, false);
    if (this.stats.retainedBytes + store.byteLength > this.maxRetainedBytes) {
      this.out.delete(store);
      this.stats.dropped++;
      return;
    }
    const cls = 31 - Math.clz32(store.byteLength - STORE_TAIL) - this.minShift;
    this.free[cls].push(store);
    this.stats.retainedBytes += store.byteLength;
    this.stats.returned++;
  };

  /** True when `buf` is a view of one of this pool's stores that is currently out. */
  owns(buf: Uint8Array): boolean {
    const store = buf.buffer as ArrayBuffer;
    return this.isStoreLength(store.byteLength) && this.out.get(store) === true;
  }

  /** Whether `n` is the length of one of the classes' stores (a class size plus the tail). */
  private isStoreLength(n: number): boolean {
    const size = n - STORE_TAIL;
    return size >= this.minSize && size <= this.maxSize && isPowerOfTwo(size);
  }
}
