/**
 * `turnNow` (common/turn-clock.ts): one `performance.now()` reading per synchronous run, fresh after the
 * microtask queue drained and in every later callback.
 */
import { performance } from 'node:perf_hooks';
import { setImmediate as nextMacrotask } from 'node:timers/promises';
import test from 'ava';
import { turnNow } from '../../common/turn-clock.js';

function spin(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

test.serial('one reading serves the whole synchronous run, however long it takes', (t) => {
  const first = turnNow();
  spin(5);
  t.is(turnNow(), first);
  t.true(performance.now() - first >= 5, 'the real clock moved on meanwhile');
});

test.serial(
  'the reading is taken once per run: performance.now() is called once for many readings',
  async (t) => {
    await nextMacrotask();
    const real = performance.now;
    let reads = 0;
    performance.now = () => {
      reads++;
      return real.call(performance);
    };
    try {
      for (let i = 0; i < 100; i++) turnNow();
      t.is(reads, 1);
      await Promise.resolve();
      turnNow();
      t.is(reads, 2, 'read again once the microtask queue drained');
    } finally {
      performance.now = real;
    }
  },
);

test.serial(
  'a later run reads the clock afresh: after a microtask checkpoint and in a new callback',
  async (t) => {
    const first = turnNow();
    spin(2);
    await Promise.resolve();
    const second = turnNow();
    t.true(second - first >= 2, `${second} is 2 ms or more after ${first}`);
    spin(2);
    await nextMacrotask();
    t.true(turnNow() - second >= 2);
  },
);

test.serial("it is performance.now()'s clock, read in the run that first asks", async (t) => {
  await nextMacrotask();
  const before = performance.now();
  const reading = turnNow();
  const after = performance.now();
  t.true(before <= reading && reading <= after, `${before} <= ${reading} <= ${after}`);
});
