import test from 'ava';
import { loopback, pattern, replyData, TestCall } from './loopback.js';

/**
 * Where Write chunk data goes back into a reply is the upper-layer binding's answer (locateResult). An
 * empty Write chunk needs no answer at all (a failed NFS READ carries no data item); data the binding
 * cannot place fails the call with a typed error instead of corrupting the reply.
 */
test('an empty Write chunk leaves the reply whole without asking the binding where data goes', async (t) => {
  const lb = await loopback();
  let asked = 0;
  lb.collector.locateResult = () => {
    asked++;
    return -1;
  };
  try {
    lb.client.submit(TestCall.echo(1, Buffer.alloc(0)));
    const [o] = await lb.collector.wait(1);
    t.falsy(o.error, o.error?.message);
    t.is(replyData(o.reply as Buffer).length, 0);
    t.is(asked, 0);
    t.is(lb.client.snapshot().registrations.inUse, 0);
  } finally {
    await lb.close();
  }
});

test('Write chunk data for a result the binding cannot place fails the call with ERR_TRANSPORT_CHUNK_POSITION', async (t) => {
  const lb = await loopback();
  lb.collector.locateResult = () => -1;
  try {
    lb.client.submit(TestCall.echo(2, pattern(5001)));
    lb.client.submit(TestCall.echo(3, Buffer.from('inline'), false));
    const outs = await lb.collector.wait(2);
    const failed = outs.find((o) => o.call.xid === 2);
    t.is(failed?.error?.code, 'ERR_TRANSPORT_CHUNK_POSITION');
    t.false(failed?.error?.retransmit);
    const ok = outs.find((o) => o.call.xid === 3);
    t.deepEqual(replyData(ok?.reply as Buffer), Buffer.from('inline'), 'the connection keeps serving');
    t.is(lb.client.snapshot().registrations.inUse, 0);
  } finally {
    await lb.close();
  }
});
