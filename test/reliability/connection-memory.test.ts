/**
 * Memory a closed RPC-over-RDMA connection (soft provider, both ends) keeps: measured alone in its own
 * worker so that no other test's garbage blurs it. It used to be about 2 MiB per connection: the soft QP
 * and CQ preallocated their whole work-queue and completion rings (4096 SqEntry + ~4200 WorkCompletion)
 * and kept them after destruction, and anything that still referenced the closed connection (here the
 * echo server's `responders` list, in the gateway a snapshot or a log record) kept them alive. Rings are
 * now filled on first use and dropped on destroy, so a closed connection costs only its own small state.
 */
import test from 'ava';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { RpcRdmaConnection } from '../../rdma-backend/transport/index.js';
import { Collector, echoServer, TestCall } from '../transport/loopback.js';
import { heapAfterGc, sleep } from './fuzz-kit.js';

test('closed connections give back their memory, even while the closed objects stay referenced', async (t) => {
  const s = await echoServer();
  t.teardown(() => s.close());
  const N = 40;
  let heapBefore = 0;
  let buffersBefore = 0;
  for (let i = -2; i < N; i++) {
    if (i === 0) {
      heapBefore = heapAfterGc(); // after two warm-up connections
      buffersBefore = process.memoryUsage().arrayBuffers;
    }
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
  // The server's `conns` and `responders` lists still hold every closed server end on purpose: a closed
  // connection that something still references must not pin its queues.
  t.is(s.conns.length, N + 2);
  const perConnection = (heapAfterGc() - heapBefore) / N;
  const buffersPerConnection = (process.memoryUsage().arrayBuffers - buffersBefore) / N;
  t.log(
    `retained per closed connection: ${(perConnection / 1024).toFixed(0)} KiB of heap, ${(buffersPerConnection / 1024).toFixed(0)} KiB of buffers`,
  );
  t.true(perConnection < 64 * 1024, `${perConnection} bytes retained per closed connection`);
  // Buffers (outside the heap): the transport's send and receive slabs stay with the connection object
  // (608 KiB here); the soft QP's 256 KiB socket read buffer and 64 KiB send slab must not (864 KiB when
  // the released QP kept its socket).
  t.true(
    buffersPerConnection < 700 * 1024,
    `${buffersPerConnection} buffer bytes retained per closed connection`,
  );
});
