/**
 * The workload of leak.test.ts, run under valgrind as its own process: create/destroy cycles of every
 * addon object that exists without an RDMA device (addon memory, the uv_poll event source — destroyed
 * explicitly, from its own callback, and by the GC finalizer — and the throwing paths: device open,
 * CM channel, argument validation, work-request parsing). Prints a JSON summary; exits 1 if the addon's
 * own accounting shows a leak.
 */

import { once } from 'node:events';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Worker } from 'node:worker_threads';
import { loadAddon } from '../../rdma-backend/providers/native/addon.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const load = loadAddon();
if (!load.ok) {
  process.stderr.write(`${load.error.message}\n`);
  process.exit(2);
}
const a = load.addon;
const cycles = Number(process.argv[2] ?? 20);
const tick = () => new Promise((r) => setImmediate(r));
const swallow = (fn: () => unknown) => {
  try {
    fn();
  } catch {
    // the error path itself is what is exercised
  }
};

async function main(): Promise<void> {
  const baseLive = a.testing.liveResources();
  const send = new Uint32Array(2 * a.layout.SEND_WR_STRIDE);
  for (let c = 0; c < cycles; c++) {
    // addon memory
    for (let i = 0; i < 4; i++) new Uint8Array(a.allocBuffer(4096 * (i + 1)))[0] = 1;
    swallow(() => a.allocBuffer(0));
    // event source: explicit destroy after one batch
    await new Promise<void>((resolve) => {
      const s = new a.testing.EventSource(new Uint32Array(2), () => {
        s.destroy();
        resolve();
      });
      s.signal(c + 1);
    });
    // event source dropped without destroy: the finalizer releases it
    new a.testing.EventSource(new Uint32Array(1), () => {}).setRef(false);
    // failing native calls (no device here) and argument errors
    swallow(() => a.listDevices());
    swallow(() => a.openDevice('leak-check-nope'));
    swallow(() => a.createCmChannel(() => {}));
    swallow(() => a.testing.errnoError(12, 'ibv_reg_mr'));
    send[2] = 99; // bad opcode
    swallow(() => a.testing.parseSendWrs(send, 0, 1, 4));
    send[2] = 2; // SEND, no SGE: parses
    a.testing.parseSendWrs(send, 0, 2, 4);
    swallow(() => new (a as unknown as { classes: { Pd: new () => unknown } }).classes.Pd());
    if (c % 5 === 4) {
      gc();
      await tick();
    }
  }
  // An environment that exits with live objects: the async cleanup hook releases them (and their uv_poll
  // handles) as the worker's environment is torn down.
  const w = new Worker(
    `const a = require(${JSON.stringify(load.ok ? load.path : '')});
     globalThis.keep = [new a.testing.EventSource(new Uint32Array(1), () => {}), a.allocBuffer(8192)];
     globalThis.keep[0].signal(1);
     setTimeout(() => process.exit(0), 10);`,
    { eval: true },
  );
  await once(w, 'exit');
  for (let i = 0; i < 10 && (a.bufferStats().count > 0 || a.testing.liveResources() > baseLive); i++) {
    gc();
    await tick();
  }
  const summary = { cycles, buffers: a.bufferStats(), live: a.testing.liveResources() - baseLive };
  process.stdout.write(`${JSON.stringify(summary)}\n`);
  process.exit(summary.buffers.count === 0 && summary.live === 0 ? 0 : 1);
}

void main();
