import test from 'ava';
import { Collector, EchoResponder, loopback, pattern, replyData, TestCall } from './loopback.js';

for (const version of [1, 2] as const) {
  test(`v${version}: backward calls (server → client) share the connection with forward calls, own credits`, async (t) => {
    const lb = await loopback({
      client: { maxVersion: version, backwardCredits: 2 },
      server: { backwardCredits: 8 },
    });
    const cbResponder = new EchoResponder();
    cbResponder.conn = lb.client;
    cbResponder.ddpResults = false;
    lb.client.setResponder(cbResponder);
    const back = new Collector();
    lb.server.setRequester(back);
    try {
      // Version negotiation completes with the first forward call.
      lb.client.submit(TestCall.echo(1, Buffer.from('fwd'), false));
      await lb.collector.wait(1);
      let peak = 0;
      const orig = cbResponder.onCall.bind(cbResponder);
      cbResponder.onCall = (c) => {
        peak = Math.max(peak, lb.server.snapshot().credits.outstanding);
        t.true(c.backward);
        orig(c);
      };
      const N = 40;
      for (let i = 0; i < N; i++) lb.server.submit(TestCall.echo(0x1000 + i, pattern(100 + i, i), false));
      for (let i = 0; i < 10; i++) lb.client.submit(TestCall.echo(10 + i, pattern(5000, i)));
      const outs = await back.wait(N);
      await lb.collector.wait(11);
      for (const o of outs) {
        t.falsy(o.error, o.error?.message);
        const i = o.call.xid - 0x1000;
        t.deepEqual(replyData(o.reply as Buffer), pattern(100 + i, i));
      }
      t.true(peak <= 2, `backward outstanding peaked at ${peak} with a grant of 2`);
      t.is(lb.server.snapshot().credits.granted, 2);
      t.is(lb.collector.outcomes.filter((o) => o.error).length, 0);
    } finally {
      await lb.close();
    }
  });
}

test('a backward call that does not fit inline fails (RFC 8167: backward messages are inline only)', async (t) => {
  const lb = await loopback();
  const back = new Collector();
  lb.server.setRequester(back);
  lb.client.setResponder(new EchoResponder());
  try {
    lb.client.submit(TestCall.echo(1, Buffer.from('fwd'), false));
    await lb.collector.wait(1);
    lb.server.submit(TestCall.echo(2, pattern(10000), false));
    const [o] = await back.wait(1);
    t.is(o.error?.code, 'ERR_TRANSPORT_CALL_TOO_LARGE');
    t.false(o.error?.retransmit);
  } finally {
    await lb.close();
  }
});
