/**
 * Selective signaling of Sends (xprtrdma's batching): most Sends are posted unsignaled and their send
 * buffers come back with the completion of a later signaled Send. The tests run far more calls than a
 * connection has send buffers, so a buffer that never came back would stall them.
 */
import test from 'ava';
import { SendSignaling } from '../../rdma-backend/transport/send-signaling.js';
import { loopback, pattern, replyData, TestCall } from './loopback.js';

const WAVE = 64;
const CALLS = 47 * WAVE;

test('most Sends go unsignaled, and their buffers come back: 3,008 calls through ~270 send buffers', async (t) => {
  const lb = await loopback();
  t.teardown(() => lb.close());
  let xid = 1;
  for (let done = 0; done < CALLS; done += WAVE) {
    for (let i = 0; i < WAVE; i++, xid++)
      lb.client.submit(TestCall.echo(xid, pattern(8 + (xid % 50), xid), false));
    await lb.collector.wait(done + WAVE, 5000);
  }
  const outs = lb.collector.outcomes;
  t.is(outs.length, CALLS);
  for (const o of outs) {
    t.falsy(o.error, o.error?.message);
    t.deepEqual(replyData(o.reply as Buffer), pattern(8 + (o.call.xid % 50), o.call.xid));
  }
  // Every call's Send and every reply's Send, except about one in SEND_SIGNAL_INTERVAL (16).
  t.true(lb.client.counters.sendsUnsignaled >= CALLS * 0.85, `client: ${lb.client.counters.sendsUnsignaled}`);
  t.true(lb.server.counters.sendsUnsignaled >= CALLS * 0.85, `server: ${lb.server.counters.sendsUnsignaled}`);
  t.true(lb.client.counters.sendsUnsignaled < CALLS, 'some Sends are still signaled');
  t.is(lb.client.counters.handlerErrors + lb.server.counters.handlerErrors, 0);
});

test('replies whose Sends hold more than a send buffer are signaled, so they are handed back at once', async (t) => {
  const lb = await loopback();
  t.teardown(() => lb.close());
  // The connection's own messages (the CONNPROP exchange) and inline replies may go unsignaled: one
  // inline call first, then count from there.
  lb.client.submit(TestCall.echo(100, pattern(8), false));
  await lb.collector.wait(1);
  const before = lb.server.counters.sendsUnsignaled;
  // Write-chunk replies (DDP results): each reply's Send holds a staged or registered source.
  for (let i = 1; i <= 40; i++) lb.client.submit(TestCall.echo(i, pattern(3000, i)));
  const outs = await lb.collector.wait(41);
  for (const o of outs) t.falsy(o.error, o.error?.message);
  t.is(lb.server.counters.sendsUnsignaled - before, 0, 'no reply with a Write chunk went unsignaled');
});

// The bookkeeping alone, including the paths a loopback cannot force: flushes and failed Sends.
function signaling(interval = 4) {
  const released: [number, boolean][] = [];
  const s = new SendSignaling(8, interval, (slot, completed) => released.push([slot, completed]));
  return { s, released };
}

test('one Send in `interval` is signaled; its completion releases the unsignaled ones before it, in order', (t) => {
  const { s, released } = signaling(4);
  t.deepEqual(
    [0, 1, 2, 3].map((slot) => s.post(slot, false, 100)),
    [false, false, false, true],
  );
  s.completed(3, true);
  t.deepEqual(released, [
    [0, true],
    [1, true],
    [2, true],
    [3, true],
  ]);
});

test('a Send that holds resources, or few free slots, forces a signal', (t) => {
  const { s } = signaling(4);
  t.false(s.post(0, false, 100));
  t.true(s.post(1, true, 100), 'holds more than its buffer');
  t.true(s.post(2, false, 3), 'fewer free slots than the interval');
});

test('a flush releases unsignaled Sends one by one, and a later fence does not release them again', (t) => {
  const { s, released } = signaling(4);
  s.post(0, false, 100);
  s.post(1, false, 100);
  s.completed(0, false); // flushed
  t.deepEqual(released, [[0, false]]);
  // Slot 0 is reused and posted unsignaled again; a fence posted after it covers both positions.
  s.post(0, false, 100);
  s.post(5, true, 100);
  s.completed(5, true);
  t.deepEqual(released, [
    [0, false],
    [1, true],
    [0, true],
    [5, true],
  ]);
});

test('a failed signaled Send releases only itself: earlier unsignaled ones wait for their own report', (t) => {
  const { s, released } = signaling(4);
  s.post(0, false, 100);
  s.post(1, true, 100);
  s.completed(1, false);
  t.deepEqual(released, [[1, false]]);
  s.completed(0, false);
  t.deepEqual(released, [
    [1, false],
    [0, false],
  ]);
});
