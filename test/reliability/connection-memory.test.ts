/**
 * Memory a closed RPC-over-RDMA connection (soft provider, both ends) keeps: measured alone in its own
 * worker so that no other test's garbage blurs it. Today about 2 MiB per connection stays reachable (the
 * SqEntry and WorkCompletion arrays of the soft QP/CQ, found with a heap snapshot), hence `failing`.
 */
import test from 'ava';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { RpcRdmaConnection } from '../../rdma-backend/transport/index.js';
import { Collector, echoServer, TestCall } from '../transport/loopback.js';
import { heapAfterGc, sleep } from './fuzz-kit.js';

test.failing('closed connections give back their memory (known leak: about 2 MiB of soft QP/CQ state per closed connection)', async (t) => {
  // When this starts passing, the leak is fixed: make it a plain test and drop PER_CONNECTION_RETENTION.
  const s = await echoServer();
  t.teardown(() => s.close());
  const N = 20;
  let heapBefore = 0;
  for (let i = -2; i < N; i++) {
    if (i === 0) heapBefore = heapAfterGc(); // after two warm-up connections
    const collector = new Collector();
    const c = await RpcRdmaConnection.connect({
      device: await createSoftProvider().openDevice(),
      host: '127.0.0.1',
      port: s.listener.port,
      requester: collector,
      options: { peerKey: `leak-${process.pid}-${i}` },
    });
    c.submit(TestCall.echo(1, Buffer.from('x'), false));
    await collector.wait(1);
    c.close();
    await sleep(10);
  }
  await sleep(200);
  s.conns.length = 0;
  const perConnection = (heapAfterGc() - heapBefore) / N;
  t.log(`retained per closed connection: ${(perConnection / 1024).toFixed(0)} KiB`);
  t.true(perConnection < 64 * 1024, `${perConnection} bytes retained per closed connection`);
});
