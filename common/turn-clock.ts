/**
 * `performance.now()` read once per synchronous run of JavaScript: the first reading is kept until the
 * microtask queue is next drained, and every caller in between gets it.
 *
 * Why: the router stamps every call twice (on arrival and when its reply is written: the latency
 * histogram, the hold time, the departed calls' windows). One `performance.now()` costs about 70 ns here
 * (a brand check and a call into C++), and the two readings were about 3.5 % of the instructions of a NULL
 * call through the whole chain (docs/performance.md, "Counting instructions per call"). One socket read
 * delivers 8–12 calls and one completion poll as many replies, so one reading serves them all, and it is
 * the right one: the records of one read arrived together, and the replies of one poll leave together,
 * when the frontend writes them at the end of the tick.
 *
 * How stale a reading can be: by the synchronous run it was taken in, plus the callbacks already queued
 * for the same tick (`process.nextTick`, microtasks queued before it); libuv's callbacks each get a fresh
 * one. That is microseconds, a few milliseconds under load, against hold times of seconds and a latency
 * histogram whose first bound is 50 µs. Code that measures an interval inside one run must read
 * `performance.now()` itself.
 */
import { performance } from 'node:perf_hooks';

let reading = -1;

function forget(): void {
  reading = -1;
}

/** Milliseconds from `performance.timeOrigin`, as `performance.now()`, read at most once per run. */
export function turnNow(): number {
  if (reading < 0) {
    reading = performance.now();
    queueMicrotask(forget);
  }
  return reading;
}
