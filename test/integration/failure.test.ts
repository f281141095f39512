/**
 * The RDMA side unavailable (DESIGN §3 "No fabricated NFS errors"): calls are held while the pool
 * reconnects and complete when the peer comes back within the hold time; past the hold time the client's
 * TCP connection is closed (it retransmits by itself) and no RPC reply is ever invented.
 */
import { type AddressInfo, createServer } from 'node:net';
import test, { type ExecutionContext } from 'ava';
import { defaultRegistry, transportOptions } from '../../gateway/gateway.js';
import { Responder } from '../../gateway/responder.js';
import { encodeOpaqueParts } from '../../gateway/test-program/codec.js';
import { TEST_PROGRAM, TEST_VERSION, TestProc } from '../../gateway/test-program/constants.js';
import { serveTestProgram, TestProgramClient } from '../../gateway/test-program/index.js';
import { decodeHeader } from '../../rdma-backend/protocol/index.js';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { RecordDecoder } from '../../tcp-frontend/record-marking.js';
import { connectRaw, framedCall, waitFor } from '../gateway/helpers.js';
import { freePort } from '../helpers/ports.js';
import { plainPrivateData, RoguePeer } from '../helpers/rogue-peer.js';
import { headerBytes, words } from '../transport/loopback.js';
import { BASELINE, gauges, startTestGateway, testConfig } from './helpers.js';

/**
 * A responder (in front of a test-program server) for `port`, created but not listening: the peer the
 * gateway waits for. Its teardown is registered (it runs after the gateway's, which is registered later).
 */
async function lateResponder(t: ExecutionContext, port: number): Promise<{ responder: Responder }> {
  const upstream = await serveTestProgram();
  const responder = new Responder({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port,
    upstream: { host: '127.0.0.1', port: upstream.addresses[0].port },
    registry: defaultRegistry(),
    transport: transportOptions(testConfig()),
  });
  t.teardown(async () => {
    await responder.close();
    await upstream.close({ drainTimeoutMs: 0 });
  });
  return { responder };
}

/**
 * A gateway whose RDMA peer is a rogue server that answered the CONNPROP granting `credit`, and a raw
 * client connected to it; all of it torn down after the test.
 */
async function rogueGateway(t: ExecutionContext, credit: number) {
  const rogue = await RoguePeer.listen(plainPrivateData());
  const g = await startTestGateway({ peer: { host: '127.0.0.1', port: rogue.port } });
  const peer = await rogue.peer;
  const sock = await connectRaw(g.addresses[0].port);
  t.teardown(async () => {
    sock.destroy();
    peer.close();
    await rogue.close();
    await g.stop(0);
  });
  const cp = decodeHeader(await peer.message(0));
  peer.send(headerBytes({ version: 2, htype: 5, xid: cp.xid, credit, flags: 1, props: [] }));
  return { g, peer, sock };
}

test('with no RDMA peer, a call is held for the hold time, then its client is disconnected, never answered', async (t) => {
  const port = await freePort();
  const g = await startTestGateway({ peer: { host: '127.0.0.1', port }, holdTimeMs: 300 });
  const client = await TestProgramClient.connect({ host: '127.0.0.1', port: g.addresses[0].port });
  t.teardown(async () => {
    client.rpc.destroy();
    await g.stop(0);
  });
  const started = Date.now();
  const err = await t.throwsAsync(client.echo(Buffer.from('hello')));
  const waited = Date.now() - started;
  t.is((err as { code?: string }).code, 'ERR_CLIENT_CLOSED', 'the connection closed; no reply came');
  t.true(waited >= 300 && waited < 3000, `held ${waited} ms`);
  t.is(client.rpc.stats.repliesReceived, 0);
  t.is(g.router.stats.holdExpired, 1);
  t.is(g.router.stats.replies, 0);
  await waitFor(() => g.frontend.stats.connectionsOpen === 0, 'client closed');
  t.is(g.frontend.stats.closes.ERR_RDMA_UNAVAILABLE, 1);
  t.deepEqual(gauges(g), BASELINE);
});

test('calls held while the peer is down complete once it comes up within the hold time', async (t) => {
  const port = await freePort();
  const g = await startTestGateway({ peer: { host: '127.0.0.1', port }, holdTimeMs: 10_000, backoffMs: 50 });
  const client = await TestProgramClient.connect({ host: '127.0.0.1', port: g.addresses[0].port });
  const { responder } = await lateResponder(t, port);
  t.teardown(async () => {
    client.rpc.destroy();
    await g.stop(0);
  });
  const calls = [
    client.echo(Buffer.alloc(100, 1)),
    client.source(100_000, 3),
    client.sink(Buffer.alloc(50_000)),
  ];
  await new Promise((r) => setTimeout(r, 200));
  t.is(g.router.stats.replies, 0);
  t.true(g.router.stats.queued >= 3, 'held in the router');
  await responder.listen();
  await Promise.all(calls);
  t.is(g.router.stats.replies, 3);
  t.is(g.router.stats.holdExpired, 0);
  t.is(responder.stats.callsForwarded, 3);
});

test('held calls go out as soon as a connection is ready, not at the next router sweep', async (t) => {
  const port = await freePort();
  // A sweep period far beyond the test's timeout: only the pool's ready event can release the calls.
  const g = await startTestGateway({
    peer: { host: '127.0.0.1', port },
    holdTimeMs: 600_000,
    backoffMs: 20,
    routerTickMs: 600_000,
  });
  const client = await TestProgramClient.connect({ host: '127.0.0.1', port: g.addresses[0].port });
  const { responder } = await lateResponder(t, port);
  t.teardown(async () => {
    client.rpc.destroy();
    await g.stop(0);
  });
  const calls = Promise.all([client.echo(Buffer.alloc(100, 1)), client.source(70_000, 5)]);
  await waitFor(() => g.router.stats.queued === 2, 'both calls held in the router');
  await responder.listen();
  const listening = Date.now();
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    calls.then(() => 'answered'),
    new Promise((r) => {
      timer = setTimeout(r, 5000, 'still held 5 s after the peer came up');
    }),
  ]);
  clearTimeout(timer);
  t.is(outcome, 'answered');
  // The pool retries every ≤ 500 ms (its back-off cap here); the calls follow the connection at once.
  const waited = Date.now() - listening;
  t.true(waited < 2000, `answered ${waited} ms after the peer came up`);
  t.is(g.router.stats.replies, 2);
  t.is(g.router.stats.holdExpired, 0);
});

test('a call the peer refuses for good closes its client, and the calls it had waiting are never sent', async (t) => {
  // A rogue RDMA server that grants one credit and refuses the first call with RDMA2_ERR_SYSTEM.
  const { g, peer, sock } = await rogueGateway(t, 1);
  // Three calls in one write: with one credit the second and third wait in the router.
  sock.write(
    Buffer.concat(
      [1, 2, 3].map((xid) =>
        framedCall(
          xid,
          TEST_PROGRAM,
          TEST_VERSION,
          TestProc.ECHO,
          Buffer.concat(encodeOpaqueParts(Buffer.from('x'))),
        ),
      ),
    ),
  );
  const first = decodeHeader(await peer.message(1));
  await waitFor(() => g.router.snapshot().queued === 2, 'two calls waiting for the credit');
  peer.send(headerBytes({ version: 2, htype: 4, xid: first.xid, credit: 1, flags: 1, error: { code: 9 } }));
  await waitFor(() => g.router.stats.refused === 1, 'the refusal');
  await new Promise((r) => setTimeout(r, 300));
  t.is(peer.received.length, 2, 'nothing was sent after the refused call (CONNPROP and the first call only)');
  t.is(g.router.stats.droppedQueued, 2);
  t.is(g.router.snapshot().queued, 0);
});

test('a reply whose RPC message is empty closes its client with the reason; its call slot and record come back', async (t) => {
  const { g, peer, sock } = await rogueGateway(t, 32);
  let closed = false;
  sock.on('close', () => {
    closed = true;
  });
  // A procedure its binding does not know: its reply size is unbounded, so a Reply chunk is offered.
  sock.write(framedCall(0x1234, TEST_PROGRAM, TEST_VERSION, 77));
  const h = decodeHeader(await peer.message(1));
  if (h.version !== 2 || !('chunks' in h) || h.chunks.reply === null)
    throw new Error('expected a Reply chunk');
  const seg = h.chunks.reply[0];
  // RDMA2_NOMSG whose Reply chunk carries no byte: no RPC message at all (before, Router.onReply threw
  // on it after unlinking the call, and the client's slot, its record and its connection stayed taken).
  peer.send(
    headerBytes({
      version: 2,
      htype: 1,
      xid: h.xid,
      credit: 32,
      flags: 1,
      invHandle: 0,
      chunks: { reads: [], writes: [], reply: [{ ...seg, length: 0 }] },
    }),
  );
  await waitFor(() => closed, 'the client closed');
  t.is(g.router.stats.refused, 1, 'closed as for a refused call, so that it retransmits');
  await waitFor(() => g.frontend.connections.size === 0, 'its frontend connection gone');
  const { poolRegistrations, ...after } = gauges(g);
  t.like(after, { routerInFlight: 0, routerQueued: 0, recordsInUse: 0, frontendCallsInFlight: 0 });
  t.is(poolRegistrations, 0, 'the Reply chunk was released');
  t.is(g.pool.snapshot().slots[0].connection?.counters.handlerErrors, 0, 'no handler threw');
});

test('a call the client sends again while the first is in flight is not sent twice; the first reply answers it', async (t) => {
  const { g, peer, sock } = await rogueGateway(t, 8);
  const replies: Buffer[] = [];
  const decoder = new RecordDecoder((r) => replies.push(r));
  sock.on('data', (d) => decoder.push(d));
  const echo = (xid: number, text: string) =>
    framedCall(
      xid,
      TEST_PROGRAM,
      TEST_VERSION,
      TestProc.ECHO,
      Buffer.concat(encodeOpaqueParts(Buffer.from(text))),
    );
  /** The RPC message of the peer's `n`th received message (an inline RDMA2_MSG). */
  const callAt = async (n: number) => {
    const m = await peer.message(n);
    const h = decodeHeader(m);
    if (h.version !== 2 || h.htype !== 0) throw new Error('expected RDMA2_MSG');
    return m.subarray(h.payloadOffset);
  };
  const answer = (message: Buffer) => {
    const xid = message.readUInt32BE(0);
    peer.send(
      headerBytes(
        { version: 2, htype: 0, xid, credit: 8, flags: 1, invHandle: 0, chunks: {} },
        words(xid, 1, 0, 0, 0, 0, 0),
      ),
    );
  };

  sock.write(echo(0x55, 'first'));
  const first = await callAt(1);
  // The client's retransmission of 0x55 (an NFSv3 client does so after `timeo`), then a new call.
  sock.write(echo(0x55, 'first'));
  sock.write(echo(0x56, 'other'));
  const other = await callAt(2);
  t.true(
    other.includes(Buffer.from('other')),
    'the next call the peer got is the new one, not the retransmission',
  );
  t.is(g.router.stats.duplicatesDropped, 1);

  answer(first);
  answer(other);
  await waitFor(() => replies.length === 2, 'two replies');
  t.deepEqual(
    replies.map((r) => r.readUInt32BE(0)),
    [0x55, 0x56],
    "one reply to 0x55, in the client's XID",
  );
  await waitFor(() => gauges(g).frontendCallsInFlight === 0, 'no call in flight');
  t.deepEqual(gauges(g), BASELINE, 'the dropped retransmission holds nothing');

  // Answered, the XID is free again: the same XID later is a new call and goes out.
  sock.write(echo(0x55, 'again'));
  const again = await callAt(3);
  t.true(again.includes(Buffer.from('again')));
  t.is(g.router.stats.duplicatesDropped, 1);
});

test('a call that takes down every connection it reaches is not resent for ever: its client is closed after the hold time', async (t) => {
  // An upstream that resets its connection whenever a call arrives: the responder then drops its RDMA
  // connection, and the gateway resends the call on a new one, which goes the same way.
  const poisoned = createServer((s) => {
    s.on('data', () => s.destroy());
    s.on('error', () => {});
  });
  await new Promise<void>((r) => poisoned.listen(0, '127.0.0.1', r));
  const responder = new Responder({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port: 0,
    upstream: { host: '127.0.0.1', port: (poisoned.address() as AddressInfo).port },
    registry: defaultRegistry(),
    transport: transportOptions(testConfig()),
  });
  const { port } = await responder.listen();
  const g = await startTestGateway({ peer: { host: '127.0.0.1', port }, holdTimeMs: 500 });
  const client = await TestProgramClient.connect({ host: '127.0.0.1', port: g.addresses[0].port });
  t.teardown(async () => {
    client.rpc.destroy();
    await g.stop(0);
    await responder.close(500);
    poisoned.close();
  });
  const started = Date.now();
  const err = await t.throwsAsync(client.echo(Buffer.from('poison')), undefined, 'never answered');
  t.is((err as { code?: string }).code, 'ERR_CLIENT_CLOSED');
  const waited = Date.now() - started;
  t.true(waited < 5000, `closed after ${waited} ms`);
  t.is(g.router.stats.holdExpired, 1);
  t.true(g.router.stats.retransmits >= 1, `${g.router.stats.retransmits} retransmissions`);
});
