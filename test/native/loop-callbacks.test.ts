/**
 * The addon's libuv callbacks (a CQ's completion channel, a device's async events, the rdma_cm event
 * channel, and the testing EventSource that shares their watcher) must never let a C++ exception unwind
 * into libuv: that is std::terminate, the whole gateway gone, and a CM batch never acknowledged. Two ways
 * one could: a wake-up for an object GC has just collected (ObjectWrap::Value() is empty between the
 * clearing of its weak reference and its finalizer, which Node-API runs later, in the check phase), and
 * any failure while events become JS values. Each case runs in a child process, which such an escape
 * would abort.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { addonTest, load } from './native-helpers.js';

const test = addonTest();

async function runChild(
  body: string,
): Promise<{ status: number | null; signal: string | null; out: string; err: string }> {
  if (!load.ok) throw load.error;
  const code = `const a = require(${JSON.stringify(load.path)});\n${body}`;
  const child = spawn(process.execPath, ['--expose-gc', '-e', code], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => {
    out += d;
  });
  child.stderr.on('data', (d) => {
    err += d;
  });
  const [status, signal] = (await once(child, 'close')) as [number | null, string | null];
  return { status, signal, out, err };
}

test('a wake-up for an object GC collected before its finalizer ran is taken and dropped, not thrown', async (t) => {
  const r = await runChild(`
    const uncaught = [];
    process.on('uncaughtException', (e) => uncaught.push(e.message));
    let calls = 0;
    const before = a.testing.liveResources();
    (() => {
      // The callback does not hold the source: nothing keeps its JS object alive.
      const s = new a.testing.EventSource(new Uint32Array(1), () => calls++);
      s.signal(1);
    })();
    const created = a.testing.liveResources() - before;
    // Clears the weak reference now; the finalizer waits for the check phase, and the poll phase (where the
    // readable eventfd is reported) comes first.
    gc();
    setTimeout(() => console.log(JSON.stringify({ created, calls, uncaught, live: a.testing.liveResources() - before })), 50);
  `);
  t.is(r.signal, null, r.err);
  t.is(r.status, 0, r.err);
  t.deepEqual(
    JSON.parse(r.out),
    { created: 1, calls: 0, uncaught: [], live: 0 },
    'delivered to no one, then finalized',
  );
});

for (const kind of ['napi', 'std'] as const) {
  test(`a ${kind === 'napi' ? 'Node-API' : 'C++'} exception in a loop callback is an uncaughtException, not std::terminate`, async (t) => {
    const r = await runChild(`
      const uncaught = [];
      let calls = 0;
      const s = new a.testing.EventSource(new Uint32Array(1), () => calls++);
      process.on('uncaughtException', (e) => {
        uncaught.push({ message: e.message, code: e.code, cause: e.cause && e.cause.message });
        s.signal(2); // the source still works after a failed wake-up
      });
      s.failNextWake(${JSON.stringify(kind)});
      s.signal(1);
      setTimeout(() => {
        s.destroy();
        console.log(JSON.stringify({ calls, uncaught }));
      }, 100);
    `);
    t.is(r.signal, null, r.err);
    t.is(r.status, 0, r.err);
    const { calls, uncaught } = JSON.parse(r.out);
    t.is(calls, 1, 'the wake-up after the failed one is delivered');
    t.is(uncaught.length, 1);
    t.is(uncaught[0].code, 'ERR_NATIVE_CALLBACK');
    const what = kind === 'napi' ? 'injected failure of a Node-API call' : 'injected C++ failure';
    t.is(uncaught[0].message, `rdma_native: an event callback failed: ${what}`);
    t.is(uncaught[0].cause, kind === 'napi' ? what : undefined, 'a JS error rides along as the cause');
  });
}
