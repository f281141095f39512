/**
 * The C++ layer of the native provider, exercised without an RDMA device: argument validation, errno ->
 * JS error shape, page-aligned addon memory, the uv_poll event path (through an eventfd source that uses
 * the same watcher / drain-until-EAGAIN / one-batch-per-wake-up code as a completion channel), object
 * lifetime, and teardown of live objects when a worker thread exits.
 */
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Worker } from 'node:worker_threads';
import { EXPECTED_ADDON_ABI, EXPECTED_LAYOUT_VERSION } from '../../rdma-backend/providers/native/addon.js';
import { addonTest, requireAddon } from './native-helpers.js';

const test = addonTest();

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

function nativeCode(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (e) {
    return (e as { code?: string }).code;
  }
  return undefined;
}

test('the addon reports the ABI and record layout this code expects', (t) => {
  const a = requireAddon();
  t.is(a.ADDON_ABI, EXPECTED_ADDON_ABI);
  t.like(a.layout, { LAYOUT_VERSION: EXPECTED_LAYOUT_VERSION, MAX_SGE: 4, WC_STRIDE: 10 });
  t.is(a.layout.SEND_WR_STRIDE, a.layout.SEND_WR_SGE + 4 * a.layout.MAX_SGE);
  t.is(a.layout.RECV_WR_STRIDE, a.layout.RECV_WR_SGE + 4 * a.layout.MAX_SGE);
});

test.serial('allocBuffer returns zeroed addon memory of the exact size, accounted in whole pages', (t) => {
  const a = requireAddon();
  const page = a.pageSize();
  t.true(page >= 4096 && (page & (page - 1)) === 0);
  const before = a.bufferStats();
  const ab = a.allocBuffer(page + 1);
  t.is(ab.byteLength, page + 1);
  t.true(new Uint8Array(ab).every((b) => b === 0));
  t.true(a.isAddonBuffer(ab));
  const after = a.bufferStats();
  t.is(after.count, before.count + 1);
  t.is(after.bytes, before.bytes + 2 * page, 'rounded up to whole pages (registration pins pages)');
});

test.serial(
  'a teardown call that fails inside a release is counted per call with its errno, not lost',
  (t) => {
    const a = requireAddon();
    // Without a device no ibv_* teardown runs here; the test hook records what a failing one records.
    const before = a.teardownFailures().ibv_dereg_mr?.count ?? 0;
    a.testing.recordTeardownFailure('ibv_dereg_mr', 16); // EBUSY: a memory window still bound
    a.testing.recordTeardownFailure('ibv_dereg_mr', 22); // EINVAL
    const after = a.teardownFailures();
    t.deepEqual(after.ibv_dereg_mr, { count: before + 2, lastErrno: 'EINVAL' });
    t.false('ibv_dealloc_pd' in after, 'a call that never failed is not listed');
  },
);

test('only addon memory counts as registrable: never a Buffer pool slab or a plain ArrayBuffer', (t) => {
  const a = requireAddon();
  const pooled = Buffer.allocUnsafe(64);
  t.false(a.isAddonBuffer(pooled.buffer), 'Buffer.allocUnsafe slab');
  t.false(a.isAddonBuffer(new ArrayBuffer(4096)));
  t.false(a.isAddonBuffer(Buffer.alloc(8192).buffer));
  t.false(a.isAddonBuffer('not a buffer'));
});

test('allocBuffer validates its size', (t) => {
  const a = requireAddon();
  for (const bad of [0, -1, 1.5, Number.NaN, 2 ** 41]) {
    const e = t.throws(() => a.allocBuffer(bad), { instanceOf: RangeError });
    t.is((e as { code?: string }).code, 'ERR_NATIVE_ARG', String(bad));
  }
  const e = t.throws(() => a.allocBuffer('8' as unknown as number), { instanceOf: TypeError });
  t.is((e as { code?: string }).code, 'ERR_NATIVE_ARG');
});

test.serial('addon memory is freed when its ArrayBuffer is collected', async (t) => {
  const a = requireAddon();
  const before = a.bufferStats().count;
  (() => {
    for (let i = 0; i < 50; i++) a.allocBuffer(10_000);
  })();
  t.true(a.bufferStats().count >= before + 50);
  // Finalizers of external buffers run after a GC, sometimes on a later turn: bounded retries. (Buffers
  // of earlier tests may be collected too, hence <=.)
  for (let i = 0; i < 20 && a.bufferStats().count > before; i++) {
    gc();
    await new Promise((r) => setImmediate(r));
  }
  t.true(a.bufferStats().count <= before);
});

/** Whether the page at `addr` lies in a mapping whose VmFlags include `dc` (MADV_DONTFORK). */
function doNotCopy(addr: number): boolean {
  let inside = false;
  for (const line of readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
    const m = /^([0-9a-f]+)-([0-9a-f]+) /.exec(line);
    if (m) inside = addr >= Number.parseInt(m[1], 16) && addr < Number.parseInt(m[2], 16);
    else if (inside && line.startsWith('VmFlags:')) return / dc( |$)/.test(line);
  }
  return false;
}

test.serial(
  'freed addon memory is no longer MADV_DONTFORK (malloc reuses it for fork/exec argv)',
  async (t) => {
    const a = requireAddon();
    const before = a.bufferStats().count;
    // Small buffers come from a malloc arena (not an mmap that free would unmap), where the mark would stay.
    const addrs = (() => {
      const out: number[] = [];
      for (let i = 0; i < 64; i++) out.push(a.testing.addressOf(a.allocBuffer(4096)));
      return out;
    })();
    t.true(addrs.every(doNotCopy), 'the live buffers are marked');
    for (let i = 0; i < 20 && a.bufferStats().count > before; i++) {
      gc();
      await new Promise((r) => setImmediate(r));
    }
    t.true(a.bufferStats().count <= before);
    const still = addrs.filter(doNotCopy);
    t.is(still.length, 0, `freed pages still do-not-copy: ${still.map((x) => x.toString(16)).join(' ')}`);
  },
);

test('errno errors carry code, errno and syscall, with the strerror text', (t) => {
  const a = requireAddon();
  const e = a.testing.errnoError(12, 'ibv_reg_mr');
  t.true(e instanceof Error);
  t.like(e, { code: 'ENOMEM', errno: 12, syscall: 'ibv_reg_mr' });
  t.is(e.message, 'ibv_reg_mr: Cannot allocate memory (ENOMEM)');
  t.is(a.testing.errnoError(16, 'ibv_dealloc_pd').code, 'EBUSY');
  t.is(a.testing.errnoError(38, 'ibv_get_device_list').code, 'ENOSYS');
  t.is(a.testing.errnoError(4242, 'x').code, 'EUNKNOWN');
});

test('objects cannot be constructed from JS without the addon creating the resource', (t) => {
  const a = requireAddon() as unknown as { classes: Record<string, new (...args: unknown[]) => unknown> };
  for (const name of ['Context', 'Pd', 'Mr', 'Mw', 'Cq', 'Qp', 'CmChannel', 'CmId']) {
    const e = t.throws(() => new a.classes[name]());
    t.is((e as { code?: string }).code, 'ERR_NATIVE_ARG', name);
  }
});

test('openDevice and createCmChannel report the errno when the kernel has no RDMA', (t) => {
  const a = requireAddon();
  const code = nativeCode(() => a.openDevice('no-such-device'));
  t.true(code === 'ENODEV' || code === 'ENOSYS', `openDevice: ${code}`);
  t.is(
    nativeCode(() => a.openDevice(42 as unknown as string)),
    'ERR_NATIVE_ARG',
  );
  t.is(
    nativeCode(() => a.createCmChannel(undefined as unknown as () => void)),
    'ERR_NATIVE_ARG',
  );
});

test('memlockLimit reports the RLIMIT_MEMLOCK pair', (t) => {
  const m = requireAddon().memlockLimit();
  t.true(m.soft > 0 && m.hard >= m.soft);
});

test('the event source delivers one batch per wake-up through uv_poll, then stops cleanly', async (t) => {
  const a = requireAddon();
  const live = a.testing.liveResources();
  const batch = new Uint32Array(4);
  const seen: number[][] = [];
  let wake: () => void = () => {};
  const src = new a.testing.EventSource(batch, (n) => {
    seen.push(Array.from(batch.subarray(0, n)));
    wake();
  });
  const nextBatch = () =>
    new Promise<void>((r) => {
      wake = r;
    });
  t.true(a.testing.liveResources() >= live + 1);
  // Three signals before the loop polls: the eventfd sums them, so one wake-up delivers one batch.
  let got = nextBatch();
  src.signal(1);
  src.signal(2);
  src.signal(4);
  await got;
  got = nextBatch();
  src.signal(9);
  await got;
  t.deepEqual(seen, [[7], [9]]);
  src.destroy();
  src.destroy(); // idempotent
  t.is(
    nativeCode(() => src.signal(1)),
    'ERR_NATIVE_STATE',
  );
});

test('an object may be destroyed from inside its own callback', async (t) => {
  const a = requireAddon();
  const batch = new Uint32Array(1);
  let calls = 0;
  await new Promise<void>((resolve) => {
    const src = new a.testing.EventSource(batch, () => {
      calls++;
      src.destroy();
      setImmediate(resolve);
    });
    src.signal(5);
  });
  t.is(calls, 1);
  t.is(batch[0], 5);
});

test('the event source validates its arguments', (t) => {
  const a = requireAddon();
  t.is(
    nativeCode(() => new a.testing.EventSource(new Uint32Array(0), () => {})),
    'ERR_NATIVE_ARG',
  );
  t.is(
    nativeCode(() => new a.testing.EventSource(new Int32Array(2) as unknown as Uint32Array, () => {})),
    'ERR_NATIVE_ARG',
  );
  t.is(
    nativeCode(() => new a.testing.EventSource(new Uint32Array(2), 'x' as unknown as () => void)),
    'ERR_NATIVE_ARG',
  );
  const src = new a.testing.EventSource(new Uint32Array(1), () => {});
  t.is(
    nativeCode(() => src.signal(0)),
    'ERR_NATIVE_ARG',
  );
  src.destroy();
});

test.serial('a worker that exits with live addon objects is torn down by the cleanup hook', async (t) => {
  const a = requireAddon();
  const before = a.bufferStats().count;
  const { load } = await import('./native-helpers.js');
  if (!load.ok) return t.fail(load.error.message);
  const w = new Worker(
    `const a = require(${JSON.stringify(load.path)});
     const { parentPort } = require('node:worker_threads');
     const keep = [];
     for (let i = 0; i < 4; i++) keep.push(new a.testing.EventSource(new Uint32Array(1), () => {}));
     for (let i = 0; i < 8; i++) keep.push(a.allocBuffer(4096));
     keep[0].signal(1);
     parentPort.postMessage(a.testing.liveResources());
     globalThis.keep = keep;
     setTimeout(() => process.exit(0), 20);`,
    { eval: true },
  );
  const [live] = (await once(w, 'message')) as [number];
  const [code] = (await once(w, 'exit')) as [number];
  t.is(live, 4);
  t.is(code, 0);
  // The worker's external buffers are released with its isolate.
  for (let i = 0; i < 20 && a.bufferStats().count > before; i++) await new Promise((r) => setTimeout(r, 10));
  t.is(a.bufferStats().count, before);
});
