/**
 * An Mr whose deregistration fails where nothing can throw (its GC finalizer, or the environment's
 * cleanup hook) is still registered: its pages pinned and its rkey valid, so a peer may still RDMA Write
 * into them. Its memory must then never go back to malloc, where the next allocation would receive those
 * writes. No device here registers memory, so the addon's testing hook runs the release's own handling
 * (DeregisterOrKeep in verbs_objects.cc, what Mr::Release calls) with the ibv_dereg_mr answer injected.
 */
import { once } from 'node:events';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Worker } from 'node:worker_threads';
import { addonTest, load, requireAddon } from './native-helpers.js';

const test = addonTest();

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const EIO = 5;

/** GCs until `done()`, then a few rounds more (a buffer that should stay must survive them). */
async function collect(done: () => boolean): Promise<void> {
  for (let i = 0; i < 30 && !done(); i++) {
    gc();
    await new Promise((r) => setTimeout(r, 5));
  }
  for (let i = 0; i < 5; i++) {
    gc();
    await new Promise((r) => setTimeout(r, 5));
  }
}

test.serial('a failed deregistration keeps the memory: its collected ArrayBuffer is not freed', async (t) => {
  const a = requireAddon();
  const page = a.pageSize();
  const failures = a.teardownFailures().ibv_dereg_mr?.count ?? 0;
  const before = a.bufferStats();
  (() => {
    // The control: a deregistration that succeeds leaves the memory to its ArrayBuffer's finalizer.
    t.true(a.testing.deregisterOrKeep(a.allocBuffer(page), 0));
    t.false(a.testing.deregisterOrKeep(a.allocBuffer(3 * page), EIO));
  })();
  t.is(a.bufferStats().count, before.count + 2);
  await collect(() => a.bufferStats().count <= before.count + 1);
  const after = a.bufferStats();
  t.is(after.count, before.count + 1, 'only the buffer whose deregistration succeeded was freed');
  t.is(after.bytes, before.bytes + 3 * page);
  t.is(after.kept, before.kept + 1);
  t.is(after.keptBytes, before.keptBytes + 3 * page);
  t.deepEqual(
    a.teardownFailures().ibv_dereg_mr,
    { count: failures + 1, lastErrno: 'EIO' },
    'counted as every teardown failure (and so in /metrics)',
  );
});

test.serial('memory kept by a failed deregistration outlives the worker that registered it', async (t) => {
  const a = requireAddon();
  if (!load.ok) return t.fail(load.error.message);
  const before = a.bufferStats();
  // Environment teardown: the worker's ArrayBuffers are released with its isolate, the kept one excepted.
  const w = new Worker(
    `const a = require(${JSON.stringify(load.path)});
     const { parentPort } = require('node:worker_threads');
     globalThis.keep = [a.allocBuffer(4096), a.allocBuffer(4096)];
     parentPort.postMessage(a.testing.deregisterOrKeep(globalThis.keep[0], 16));
     setTimeout(() => process.exit(0), 20);`,
    { eval: true },
  );
  const [deregistered] = (await once(w, 'message')) as [boolean];
  const [code] = (await once(w, 'exit')) as [number];
  t.false(deregistered);
  t.is(code, 0);
  for (let i = 0; i < 20 && a.bufferStats().count > before.count + 1; i++)
    await new Promise((r) => setTimeout(r, 10));
  await new Promise((r) => setTimeout(r, 50));
  t.is(
    a.bufferStats().count,
    before.count + 1,
    'the other buffer went with the isolate, the kept one stayed',
  );
  t.is(a.bufferStats().kept, before.kept + 1);
});

test('the hook takes only addon memory', (t) => {
  const a = requireAddon();
  const e = t.throws(() => a.testing.deregisterOrKeep(new ArrayBuffer(8), EIO));
  t.is((e as { code?: string }).code, 'ERR_NATIVE_ARG');
});
