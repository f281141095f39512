import test from 'ava';
import { CreditWindow, Fifo } from '../../rdma-backend/transport/credits.js';

test('one credit after connect, grants respected, 0 treated as 1, capped by our maximum', (t) => {
  const c = new CreditWindow(8);
  t.is(c.limit, 1);
  t.true(c.canSend());
  c.take();
  t.false(c.canSend());
  c.complete(32);
  t.is(c.limit, 8); // never more than we asked for and posted Receives for
  for (let i = 0; i < 8; i++) c.take();
  t.false(c.canSend());
  c.complete(0);
  t.is(c.limit, 1);
  t.is(c.outstanding, 7);
  t.false(c.canSend());
  c.reset();
  t.is(c.limit, 1);
  t.is(c.outstanding, 0);
  t.throws(() => new CreditWindow(0));
});

test('Fifo keeps order across growth and wrap-around', (t) => {
  const q = new Fifo<number>(2);
  const out: number[] = [];
  for (let i = 0; i < 100; i++) {
    q.push(i);
    if (i % 3 === 0) out.push(q.shift() as number);
  }
  out.push(...q.drain());
  t.deepEqual(
    out,
    Array.from({ length: 100 }, (_, i) => i),
  );
  t.is(q.length, 0);
  t.is(q.shift(), undefined);
});
