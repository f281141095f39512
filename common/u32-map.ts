/**
 * A map from uint32 keys (RPC XIDs) to values, for the per-call lookups of the hot path: open addressing
 * with linear probing in a `Uint32Array` of keys and an array of values, deletion by backward shift (no
 * tombstones, so probe sequences stay short under constant insert/delete churn).
 *
 * Why not `Map`: every call in flight costs a `set`, a `get` and a `delete` in the transport, the router
 * and the responder. XIDs at or above 2^31 are heap numbers in V8, whose `Map` hashing is slower, and a
 * `Map` under churn rebuilds its table every few dozen operations. This one allocates only when it grows.
 */
const MIN_CAPACITY = 16;

export class U32Map<V> {
  private keys: Uint32Array;
  /** `undefined` marks an empty slot (values are never undefined). */
  private vals: (V | undefined)[];
  private mask: number;
  /** 32 - log2(capacity): a home slot is the top bits of the key times the golden ratio. */
  private shift: number;
  private count = 0;

  constructor(capacity = MIN_CAPACITY) {
    let n = MIN_CAPACITY;
    while (n < capacity * 2) n *= 2;
    this.keys = new Uint32Array(n);
    this.vals = new Array<V | undefined>(n).fill(undefined);
    this.mask = n - 1;
    this.shift = 32 - Math.log2(n);
  }

  get size(): number {
    return this.count;
  }

  private home(key: number): number {
    // Fibonacci hashing: the high bits of the product depend on every bit of the key.
    return Math.imul(key, 0x9e3779b1) >>> this.shift;
  }

  /** The slot holding `key`, or -1. */
  private find(key: number): number {
    const keys = this.keys;
    const vals = this.vals;
    const mask = this.mask;
    for (let i = this.home(key); ; i = (i + 1) & mask) {
      if (vals[i] === undefined) return -1;
      if (keys[i] === key) return i;
    }
  }

  get(key: number): V | undefined {
    const i = this.find(key >>> 0);
    return i < 0 ? undefined : this.vals[i];
  }

  has(key: number): boolean {
    return this.find(key >>> 0) >= 0;
  }

  set(key: number, value: V): this {
    if (value === undefined) throw new TypeError('U32Map values cannot be undefined');
    const k = key >>> 0;
    if ((this.count + 1) * 2 > this.keys.length) this.grow();
    const keys = this.keys;
    const vals = this.vals;
    const mask = this.mask;
    for (let i = this.home(k); ; i = (i + 1) & mask) {
      if (vals[i] === undefined) {
        keys[i] = k;
        vals[i] = value;
        this.count++;
        return this;
      }
      if (keys[i] === k) {
        vals[i] = value;
        return this;
      }
    }
  }

  delete(key: number): boolean {
    let i = this.find(key >>> 0);
    if (i < 0) return false;
    const keys = this.keys;
    const vals = this.vals;
    const mask = this.mask;
    // Backward shift: move later members of the probe run into the hole when their home allows it.
    for (let j = (i + 1) & mask; vals[j] !== undefined; j = (j + 1) & mask) {
      const h = this.home(keys[j]);
      // Entry j may move to i only if its home is not cyclically within (i, j].
      const movable = i <= j ? h <= i || h > j : h <= i && h > j;
      if (movable) {
        keys[i] = keys[j];
        vals[i] = vals[j];
        i = j;
      }
    }
    vals[i] = undefined;
    this.count--;
    return true;
  }

  clear(): void {
    this.vals.fill(undefined);
    this.count = 0;
  }

  /** Calls `fn` for every entry (order unspecified); `fn` must not modify the map. */
  forEach(fn: (value: V, key: number) => void): void {
    const vals = this.vals;
    for (let i = 0; i < vals.length; i++) {
      const v = vals[i];
      if (v !== undefined) fn(v, this.keys[i]);
    }
  }

  private grow(): void {
    const oldKeys = this.keys;
    const oldVals = this.vals;
    const n = oldKeys.length * 2;
    this.keys = new Uint32Array(n);
    this.vals = new Array<V | undefined>(n).fill(undefined);
    this.mask = n - 1;
    this.shift = 32 - Math.log2(n);
    this.count = 0;
    for (let i = 0; i < oldVals.length; i++) {
      const v = oldVals[i];
      if (v !== undefined) this.set(oldKeys[i], v);
    }
  }
}
