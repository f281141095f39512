/** The message-buffer pool: classes, reuse, and releases it must refuse (foreign buffers, twice). */
import test from 'ava';
import { BufferPool } from '../../common/buffer-pool.js';
import { ConfigError } from '../../common/errors.js';

/** The class of the store under `buf`: its length without the tail that marks a store (< 64 bytes). */
function storeClass(buf: Uint8Array): number {
  return buf.buffer.byteLength & ~63;
}

test('a released buffer is handed out again for any size of its class, as a view of exactly that size', (t) => {
  const pool = new BufferPool({ minSize: 64 * 1024, maxSize: 4 * 1024 * 1024 });
  const a = pool.acquire(1024 * 1024 + 40);
  t.is(a.length, 1024 * 1024 + 40);
  t.is(storeClass(a), 2 * 1024 * 1024, 'the class above 1 MiB + 40');
  pool.release(a);
  const b = pool.acquire(2 * 1024 * 1024);
  t.is(b.buffer, a.buffer, 'same store');
  t.is(b.length, 2 * 1024 * 1024);
  const c = pool.acquire(64 * 1024);
  t.not(c.buffer, a.buffer, 'another class');
  t.is(storeClass(c), 64 * 1024);
  t.like(pool.stats, { hits: 1, misses: 2, returned: 1 });
});

test('sizes outside the classes are plain allocations, never taken back', (t) => {
  const pool = new BufferPool({ minSize: 64 * 1024, maxSize: 1024 * 1024 });
  const small = pool.acquire(100);
  const huge = pool.acquire(1024 * 1024 + 1);
  t.is(small.length, 100);
  t.is(huge.length, 1024 * 1024 + 1);
  pool.release(small);
  pool.release(huge);
  pool.release(Buffer.alloc(128 * 1024));
  t.like(pool.stats, { unpooled: 2, ignored: 3, returned: 0, retainedBytes: 0 });
  t.false(pool.owns(huge));
});

test('a second release of the same store is refused and counted, so it is never handed out twice', (t) => {
  const pool = new BufferPool();
  const a = pool.acquire(100_000);
  t.true(pool.owns(a));
  pool.release(a);
  t.false(pool.owns(a));
  pool.release(a.subarray(10)); // a view of the same store: still the same store
  t.is(pool.stats.doubleReleases, 1);
  const b = pool.acquire(100_000);
  const c = pool.acquire(100_000);
  t.is(b.buffer, a.buffer);
  t.not(c.buffer, a.buffer, 'one release, one reuse');
});

test('the free lists keep at most maxRetainedBytes; the rest goes to the garbage collector', (t) => {
  const pool = new BufferPool({
    minSize: 64 * 1024,
    maxSize: 1024 * 1024,
    maxRetainedBytes: 2 * 1024 * 1024 + 1024,
  });
  const out = [1, 2, 3].map(() => pool.acquire(1024 * 1024));
  const store = out[0].buffer.byteLength; // 1 MiB and the tail that marks a store
  for (const b of out) pool.release(b);
  t.like(pool.stats, { returned: 2, dropped: 1, retainedBytes: 2 * store });
  pool.acquire(1024 * 1024);
  t.is(pool.stats.retainedBytes, store);
});

test("from 4 KiB by default: a 4 KiB message buffer is reused, one under 4 KiB stays on Node's slab", (t) => {
  const pool = new BufferPool();
  const a = pool.acquire(4096 + 100);
  t.true(pool.owns(a));
  pool.release(a);
  t.is(pool.acquire(8192).buffer, a.buffer, 'the 8 KiB class, reused');
  const small = pool.acquire(4095);
  t.false(pool.owns(small));
  pool.release(small);
  t.like(pool.stats, { hits: 1, misses: 1, unpooled: 1, returned: 1, ignored: 1 });
});

test('a foreign buffer with the length of a store is still refused: the length only selects the lookup', (t) => {
  const pool = new BufferPool({ minSize: 4096, maxSize: 65536 });
  const mine = pool.acquire(8192);
  const lookalike = new Uint8Array(mine.buffer.byteLength); // same length as a store, not the pool's
  t.false(pool.owns(lookalike));
  pool.release(lookalike);
  t.like(pool.stats, { ignored: 1, returned: 0 });
  // Node's 8 KiB slab (small allocUnsafe) never has a store's length.
  const slab = Buffer.allocUnsafe(64);
  t.false(pool.owns(slab));
  pool.release(mine);
  t.is(pool.stats.returned, 1);
});

test('classes must be powers of two with min <= max', (t) => {
  t.throws(() => new BufferPool({ minSize: 100_000 }), { instanceOf: ConfigError, message: /powers of two/ });
  t.throws(() => new BufferPool({ minSize: 1 << 20, maxSize: 1 << 16 }), { instanceOf: ConfigError });
  t.throws(() => new BufferPool({ maxRetainedBytes: -1 }), { instanceOf: ConfigError });
});
