/**
 * The counters the admin API reports per connection: bytes moved by RDMA Read and Write by this end and
 * by the peer, calls by the chunks they offer, RPC-over-RDMA errors by code name on both ends, and calls
 * that waited for a credit on a ready connection.
 */
import test from 'ava';
import { rpcRdmaErrorName } from '../../rdma-backend/protocol/index.js';
import { CALL_DATA, loopback, pattern, REPLY_DATA, replyData, sourceCall, TestCall } from './loopback.js';

test('error code names are the RFC 8166 and seed draft names, UNKNOWN otherwise (a bounded label set)', (t) => {
  t.is(rpcRdmaErrorName(1, 1), 'ERR_VERS');
  t.is(rpcRdmaErrorName(1, 2), 'ERR_CHUNK');
  t.is(rpcRdmaErrorName(1, 9), 'UNKNOWN');
  t.is(rpcRdmaErrorName(2, 2), 'RDMA2_ERR_BAD_XDR');
  t.is(rpcRdmaErrorName(2, 9), 'RDMA2_ERR_SYSTEM');
  t.is(rpcRdmaErrorName(2, 0), 'UNKNOWN');
  t.is(rpcRdmaErrorName(2, 10), 'UNKNOWN');
  t.is(rpcRdmaErrorName(2, 0xffff_ffff), 'UNKNOWN');
});

test('RDMA Read and Write bytes are counted on the end that moved them; calls by the chunks they offer', async (t) => {
  const lb = await loopback();
  t.teardown(() => lb.close());
  // A Read chunk (10,000 bytes pulled by the server) and a Write chunk (the echoed 10,000 pushed back).
  lb.client.submit(TestCall.echo(1, pattern(10_000, 1)));
  // A Write chunk only: 50,000 bytes pushed.
  lb.client.submit(sourceCall(2, 50_000));
  // No DDP-eligible data and too large to go inline: a Long Call (the whole call pulled through a
  // Position-Zero Read chunk) answered as a Long Reply (the whole reply pushed into the Reply chunk).
  const long = TestCall.echo(3, pattern(20_000, 3), false);
  lb.client.submit(long);
  const outs = await lb.collector.wait(3);
  for (const o of outs) t.falsy(o.error, o.error?.message);
  t.deepEqual(replyData(outs.find((o) => o.call.xid === 3)?.reply as Buffer), pattern(20_000, 3));

  const s = lb.server.counters;
  t.is(s.rdmaReadBytes, 10_000 + (CALL_DATA + 20_000), 'the Read chunk and the whole long call');
  t.is(
    s.rdmaWriteBytes,
    10_000 + 50_000 + (REPLY_DATA + 20_000),
    'two Write chunks and the whole long reply',
  );
  t.is(s.rdmaReads, 2);
  const c = lb.client.counters;
  t.is(c.readChunkCalls, 1);
  t.is(c.longCalls, 1);
  t.is(c.writeChunkCalls, 2);
  t.is(c.replyChunkCalls, 1);
  t.is(c.rdmaReadBytes, 0, 'the requester moved nothing itself');
  t.is(c.rdmaWriteBytes, 0);
  t.is(c.peerReadBytes, s.rdmaReadBytes, 'what the peer pulled, as the requester counts it');
  t.is(c.peerWriteBytes, s.rdmaWriteBytes, 'what the peer wrote, as its replies state');
  t.is(s.peerReadBytes + s.peerWriteBytes, 0, 'the server end made no calls');
});

for (const version of [1, 2] as const) {
  test(`Version ${version}: an error answer is counted by code name on both ends`, async (t) => {
    const lb = await loopback({ client: { maxVersion: version }, server: { maxVersion: version } });
    t.teardown(() => lb.close());
    lb.responder.override = (call) => {
      if (call.xid === 7) throw new Error('upper layer bug'); // answered RDMA2_ERR_SYSTEM / ERR_CHUNK
      return false;
    };
    lb.client.submit(TestCall.echo(7, pattern(100, 1), false));
    lb.client.submit(TestCall.echo(8, pattern(100, 2), false));
    await lb.collector.wait(2);
    const name = version === 1 ? 'ERR_CHUNK' : 'RDMA2_ERR_SYSTEM';
    t.deepEqual(lb.server.snapshot().errors, { sent: { [name]: 1 }, received: {} });
    t.deepEqual(lb.client.snapshot().errors, { sent: {}, received: { [name]: 1 } });
    t.is(lb.server.counters.errorsSent, 1);
    t.is(lb.client.counters.errorsReceived, 1);
  });
}

test('calls beyond the credit window on a ready connection are counted as credit stalls', async (t) => {
  const lb = await loopback({ server: { credits: 2 }, client: { credits: 8 } });
  t.teardown(() => lb.close());
  lb.client.submit(TestCall.echo(1, pattern(10, 1), false));
  await lb.collector.wait(1); // the grant of 2 has arrived with this reply
  t.is(lb.client.counters.creditStalls, 0, 'a call with a credit free does not stall');
  const limit = lb.client.snapshot().credits.granted;
  t.is(limit, 2);
  for (let xid = 2; xid < 12; xid++) lb.client.submit(TestCall.echo(xid, pattern(10, xid), false));
  await lb.collector.wait(11);
  t.is(lb.client.counters.creditStalls, 10 - limit);
  t.is(lb.client.snapshot().credits.queued, 0);
});
