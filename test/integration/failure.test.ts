/**
 * The RDMA side unavailable (DESIGN §3 "No fabricated NFS errors"): calls are held while the pool
 * reconnects and complete when the peer comes back within the hold time; past the hold time the client's
 * TCP connection is closed (it retransmits by itself) and no RPC reply is ever invented.
 */
import { once } from 'node:events';
import { type AddressInfo, connect, createServer } from 'node:net';
import test, { type ExecutionContext } from 'ava';
import { defaultRegistry, type Gateway, startGateway, transportOptions } from '../../gateway/gateway.js';
import { Responder } from '../../gateway/responder.js';
import { encodeOpaqueParts } from '../../gateway/test-program/codec.js';
import { TEST_PROGRAM, TEST_VERSION, TestProc } from '../../gateway/test-program/constants.js';
import { serveTestProgram, TestProgramClient } from '../../gateway/test-program/index.js';
import { isIdempotent } from '../../gateway/ulb/idempotent.js';
import { decodeHeader } from '../../rdma-backend/protocol/index.js';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { RecordDecoder } from '../../tcp-frontend/record-marking.js';
import { connectRaw, framedCall, waitFor } from '../gateway/helpers.js';
import { freePort, freePorts } from '../helpers/ports.js';
import { plainPrivateData, RoguePeer } from '../helpers/rogue-peer.js';
import { delay, headerBytes, words } from '../transport/loopback.js';
import { BASELINE, gauges, startTestGateway, type TestGatewayOptions, testConfig } from './helpers.js';

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
async function rogueGateway(t: ExecutionContext, credit: number, options: TestGatewayOptions = {}) {
  const rogue = await RoguePeer.listen(plainPrivateData());
  const g = await startTestGateway({ ...options, peer: { host: '127.0.0.1', port: rogue.port } });
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

type Peer = Awaited<ReturnType<typeof rogueGateway>>['peer'];

/** A framed ECHO call of `text` under the client's `xid`. */
function echo(xid: number, text: string): Buffer {
  return framedCall(
    xid,
    TEST_PROGRAM,
    TEST_VERSION,
    TestProc.ECHO,
    Buffer.concat(encodeOpaqueParts(Buffer.from(text))),
  );
}

/** The RPC message of the rogue peer's `n`th received message (an inline RDMA2_MSG). */
async function callAt(peer: Peer, n: number): Promise<Buffer> {
  const m = await peer.message(n);
  const h = decodeHeader(m);
  if (h.version !== 2 || h.htype !== 0) throw new Error('expected RDMA2_MSG');
  return m.subarray(h.payloadOffset);
}

/** The rogue peer answers the call `message` it received (an accepted reply, SUCCESS, no results). */
/** Replies the router's call statistics counted: SUCCESS ones, and latencies in the histogram. */
function repliesCounted(g: Gateway): { success: number; latencies: number } {
  const s = g.router.callStats.snapshot();
  return { success: s.replies.success, latencies: s.latency.counts.reduce((a, b) => a + b, 0) };
}

function answer(peer: Peer, message: Buffer, credit = 8): void {
  const xid = message.readUInt32BE(0);
  peer.send(
    headerBytes(
      { version: 2, htype: 0, xid, credit, flags: 1, invHandle: 0, chunks: {} },
      words(xid, 1, 0, 0, 0, 0, 0),
    ),
  );
}

/** A raw client of `g` from 127.0.0.1:`localPort`, collecting the replies it gets. */
async function clientFrom(t: ExecutionContext, g: Gateway, localPort: number) {
  const sock = connect({
    host: '127.0.0.1',
    port: g.addresses[0].port,
    localAddress: '127.0.0.1',
    localPort,
  });
  t.teardown(() => sock.destroy());
  await once(sock, 'connect');
  const replies: Buffer[] = [];
  const decoder = new RecordDecoder((r) => replies.push(r));
  sock.on('data', (d) => decoder.push(d));
  return { sock, replies };
}

/**
 * A client of `g` from `port` sends `echo(xid, text)`, which reaches `peer` as its `n`th message; the
 * peer answers it first when `answered`; then the client resets its connection. Returns the call as the
 * peer got it, once the router has counted the departure.
 */
async function sentThenReset(
  t: ExecutionContext,
  g: Gateway,
  peer: Peer,
  port: number,
  call: { xid: number; text: string; n: number; answered?: boolean },
): Promise<Buffer> {
  const c = await clientFrom(t, g, port);
  c.sock.write(echo(call.xid, call.text));
  const sent = await callAt(peer, call.n);
  if (call.answered) {
    answer(peer, sent);
    await waitFor(() => c.replies.length === 1, 'answered');
  }
  const departures = g.router.stats.departures;
  c.sock.resetAndDestroy();
  await waitFor(() => g.router.stats.departures > departures, 'the departure recorded');
  return sent;
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

  sock.write(echo(0x55, 'first'));
  const first = await callAt(peer, 1);
  // The client's retransmission of 0x55 (an NFSv3 client does so after `timeo`), then a new call.
  sock.write(echo(0x55, 'first'));
  sock.write(echo(0x56, 'other'));
  const other = await callAt(peer, 2);
  t.true(
    other.includes(Buffer.from('other')),
    'the next call the peer got is the new one, not the retransmission',
  );
  t.is(g.router.stats.duplicatesDropped, 1);

  answer(peer, first);
  answer(peer, other);
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
  const again = await callAt(peer, 3);
  t.true(again.includes(Buffer.from('again')));
  t.is(g.router.stats.duplicatesDropped, 1);
});

test("a client that comes back from its address and port and sends its calls again gets the first attempts' replies; nothing runs twice", async (t) => {
  const { g, peer } = await rogueGateway(t, 8);
  const [port] = await freePorts(1);
  const a = await clientFrom(t, g, port);
  a.sock.write(echo(0x71, 'in flight'));
  const inFlight = await callAt(peer, 1);
  a.sock.write(echo(0x72, 'answered while away'));
  const answered = await callAt(peer, 2);
  // The client vanishes (a reset: nothing lingers in TIME_WAIT, so it can bind its port again at once).
  a.sock.resetAndDestroy();
  await waitFor(() => g.router.stats.departures === 1, 'the departure recorded');
  answer(peer, answered);
  await waitFor(() => g.router.stats.heldReplies === 1, 'the reply held for its return');
  t.is(g.router.stats.orphanedReplies, 0);

  // Back from the same port (Linux's client binds it again so that the server's DRC knows it), it sends
  // both calls again, then a new one: only the new one reaches the server.
  const b = await clientFrom(t, g, port);
  b.sock.write(
    Buffer.concat([echo(0x71, 'in flight'), echo(0x72, 'answered while away'), echo(0x73, 'new')]),
  );
  const fresh = await callAt(peer, 3);
  t.true(fresh.includes(Buffer.from('new')), 'the next call the server got is the new one');
  await waitFor(() => b.replies.length === 1, 'the held reply');
  t.is(b.replies[0].readUInt32BE(0), 0x72, "answered at once, in the client's XID");
  t.deepEqual(b.replies[0].subarray(4), words(0, 1, 0, 0, 0, 0, 0).subarray(4), "the server's reply");
  answer(peer, inFlight);
  answer(peer, fresh);
  await waitFor(() => b.replies.length === 3, 'the other two replies');
  t.deepEqual(
    b.replies.map((r) => r.readUInt32BE(0)),
    [0x72, 0x71, 0x73],
    "the first attempt's reply answers the adopted call",
  );
  // The call statistics count every reply written, the held one too: three calls planned, three replies.
  t.deepEqual(repliesCounted(g), { success: 3, latencies: 3 }, 'the held reply is counted as written');
  // The kept reply stays for the window, as in a server's cache: lost again, it answers again.
  t.like(g.router.snapshot(), {
    resumedInFlight: 1,
    resumedAnswered: 1,
    heldReplies: 1,
    heldReplyBytes: 28 + 1024,
    orphanedReplies: 0,
  });
  b.sock.resetAndDestroy();
  const c = await clientFrom(t, g, port);
  c.sock.write(echo(0x72, 'answered while away'));
  await waitFor(() => c.replies.length === 1, 'answered again');
  t.is(c.replies[0].readUInt32BE(0), 0x72);
  t.is(g.router.stats.resumedAnswered, 2);
  t.deepEqual(repliesCounted(g), { success: 4, latencies: 4 }, 'written again, counted again');
  t.is(peer.received.length, 4, 'the server saw the CONNPROP and three calls, no retransmission');
  await waitFor(() => gauges(g).frontendCallsInFlight === 0, 'no call in flight');
  t.deepEqual(gauges(g), BASELINE);
});

test('a call from another port, or with other bytes, goes to the server again', async (t) => {
  const { g, peer } = await rogueGateway(t, 8);
  const [p1, p2] = await freePorts(2);
  const first = await sentThenReset(t, g, peer, p1, { xid: 0x81, text: 'call', n: 1 });

  // Another port is another client, whatever its XID.
  const other = await clientFrom(t, g, p2);
  other.sock.write(echo(0x81, 'call'));
  const second = await callAt(peer, 2);
  t.true(second.includes(Buffer.from('call')));
  t.not(second.readUInt32BE(0), first.readUInt32BE(0), 'under its own gateway XID');
  // The same port and XID with other bytes is a new call (an RPCSEC_GSS retransmission under a new
  // sequence number is one): sent, and the kept call is forgotten.
  const b = await clientFrom(t, g, p1);
  b.sock.write(echo(0x81, 'changed'));
  const third = await callAt(peer, 3);
  t.true(third.includes(Buffer.from('changed')));
  answer(peer, first);
  await waitFor(() => g.router.stats.orphanedReplies === 1, "the forgotten call's reply dropped");
  t.is(g.router.stats.heldReplies, 0);
  answer(peer, second);
  answer(peer, third);
  await waitFor(() => other.replies.length === 1 && b.replies.length === 1, 'both answered');
  t.like(g.router.snapshot(), { resumedInFlight: 0, resumedAnswered: 0, heldReplyBytes: 0 });
});

test('past the resume window a kept reply is let go, and the retransmission goes to the server again', async (t) => {
  // However late the reply comes (a stall on a loaded machine may outlast the window), once the window
  // is over nothing is kept and the call is sent again.
  const { g, peer } = await rogueGateway(t, 8, { resumeWindowMs: 500, routerTickMs: 50 });
  const [port] = await freePorts(1);
  const late = await sentThenReset(t, g, peer, port, { xid: 0x91, text: 'late', n: 1 });
  answer(peer, late);
  await waitFor(() => g.router.snapshot().inFlight === 0, 'answered');
  await waitFor(() => g.router.snapshot().departuresKept === 0, 'let go after the window');
  const c2 = await clientFrom(t, g, port);
  c2.sock.write(echo(0x91, 'late'));
  t.true((await callAt(peer, 2)).includes(Buffer.from('late')), 'sent again');
  t.like(g.router.snapshot(), { resumedInFlight: 0, resumedAnswered: 0, resumedSent: 0, heldReplyBytes: 0 });
});

test("each call is kept for the window from its own departure: the client's next departure does not extend it", async (t) => {
  const { g, peer } = await rogueGateway(t, 8, { resumeWindowMs: 2000, routerTickMs: 50 });
  const [port] = await freePorts(1);
  const first = await sentThenReset(t, g, peer, port, { xid: 0xe1, text: 'first', n: 1, answered: true });
  t.is(g.router.snapshot().callsKept, 1);
  await delay(700);
  // Back from its port, another call answered, and lost again: the same departure keeps both.
  const second = await sentThenReset(t, g, peer, port, { xid: 0xe2, text: 'second', n: 2, answered: true });
  t.is(g.router.snapshot().callsKept, 2);
  t.is(g.router.snapshot().departuresKept, 1);
  // The first call's window ends ~700 ms before the second's.
  await waitFor(() => g.router.snapshot().callsKept < 2, 'the first window over');
  t.like(g.router.snapshot(), { callsKept: 1, departuresKept: 1 });
  const c = await clientFrom(t, g, port);
  c.sock.write(echo(0xe1, 'first'));
  t.not((await callAt(peer, 3)).readUInt32BE(0), first.readUInt32BE(0), 'past its window: sent afresh');
  c.sock.write(echo(0xe2, 'second'));
  t.is((await callAt(peer, 4)).readUInt32BE(0), second.readUInt32BE(0), 'within its window: its first XID');
  t.is(g.router.stats.resumedSent, 1);
});

/**
 * A client's call the peer refuses, the client gone before (`gone`) or closed by the refusal (`live`);
 * then another client's identical call, which takes the freed record, and the first client's
 * retransmission from its port: a new call, never an adoption of the other's.
 */
async function refusedThenReused(t: ExecutionContext, mode: 'gone' | 'live') {
  const { g, peer } = await rogueGateway(t, 8);
  const [p1, p2] = await freePorts(2);
  const a = await clientFrom(t, g, p1);
  a.sock.write(echo(0xb1, 'refused'));
  const refused = await callAt(peer, 1);
  if (mode === 'gone') {
    a.sock.resetAndDestroy();
    await waitFor(() => g.router.stats.departures === 1, 'the departure recorded');
  }
  peer.send(
    headerBytes({
      version: 2,
      htype: 4,
      xid: refused.readUInt32BE(0),
      credit: 8,
      flags: 1,
      error: { code: 9 },
    }),
  );
  await waitFor(() => g.router.snapshot().inFlight === 0, 'the refusal');
  if (mode === 'live') t.is(g.router.stats.refused, 1, 'the refusal closed the client');
  // Another client's identical call takes the freed record (the pool is LIFO)...
  const other = await clientFrom(t, g, p2);
  other.sock.write(echo(0xb1, 'refused'));
  const othersCall = await callAt(peer, 2);
  // ...and the first client's retransmission is a new call, not an adoption of that one.
  const b = await clientFrom(t, g, p1);
  b.sock.write(echo(0xb1, 'refused'));
  const retransmission = await callAt(peer, 3);
  t.not(retransmission.readUInt32BE(0), othersCall.readUInt32BE(0));
  answer(peer, othersCall);
  answer(peer, retransmission);
  await waitFor(() => other.replies.length === 1 && b.replies.length === 1, 'each answered');
  t.is(other.replies[0].readUInt32BE(0), 0xb1);
  t.like(g.router.snapshot(), { resumedInFlight: 0, resumedAnswered: 0 });
}

test("a departed client's call the peer refuses is kept no more: its record, reused by another client, is never adopted", (t) =>
  refusedThenReused(t, 'gone'));

test('a call the peer refuses closes its client and is not kept: its record, reused by another client, is never adopted', (t) =>
  refusedThenReused(t, 'live'));

test("a client that shuts its socket down with calls in flight (Linux's client, then a reset on the reply) gets the replies when it comes back from its port", async (t) => {
  const { g, peer } = await rogueGateway(t, 8);
  const [port] = await freePorts(1);
  const a = await clientFrom(t, g, port);
  a.sock.write(echo(0xe1, 'in flight at the FIN'));
  const first = await callAt(peer, 1);
  // shutdown(SHUT_RDWR): a FIN, and a reset for whatever comes after.
  a.sock.on('data', () => a.sock.resetAndDestroy());
  a.sock.end();
  await waitFor(() => g.router.stats.departures === 1, 'the departure recorded at the FIN');
  answer(peer, first);
  await waitFor(() => g.router.stats.heldReplies === 1, 'the reply written, and kept');
  const b = await clientFrom(t, g, port);
  b.sock.write(echo(0xe1, 'in flight at the FIN'));
  await waitFor(() => b.replies.length === 1, 'answered from the kept reply');
  t.is(b.replies[0].readUInt32BE(0), 0xe1);
  t.like(g.router.snapshot(), { resumedAnswered: 1, heldReplies: 1 });
  t.is(peer.received.length, 2, 'the server saw the CONNPROP and the call once');
  await waitFor(() => gauges(g).frontendCallsInFlight === 0, 'no call in flight');
  t.deepEqual(gauges(g), BASELINE);
});

test('a client that only half-closes gets every reply on its connection, which then closes; copies are kept meanwhile', async (t) => {
  const { g, peer } = await rogueGateway(t, 8);
  const [port] = await freePorts(1);
  const a = await clientFrom(t, g, port);
  a.sock.write(Buffer.concat([echo(0xa1, 'one'), echo(0xa2, 'two'), echo(0xa3, 'three')]));
  const calls = [await callAt(peer, 1), await callAt(peer, 2), await callAt(peer, 3)];
  a.sock.end(); // half-close: it still reads
  await waitFor(() => g.router.stats.departures === 1, 'the departure recorded at the FIN');
  for (const c of calls) answer(peer, c);
  await once(a.sock, 'close');
  t.deepEqual(
    a.replies.map((r) => r.readUInt32BE(0)),
    [0xa1, 0xa2, 0xa3],
    'every reply on the half-open connection',
  );
  t.like(g.router.snapshot(), { heldReplies: 3, orphanedReplies: 0, heldRepliesDropped: 0 });
  await waitFor(() => gauges(g).frontendCallsInFlight === 0, 'no call in flight');
  t.deepEqual(gauges(g), BASELINE);
});

test('a client whose reading was paused at its in-flight limit and that comes back from its port is matched: the old connection is closed first', async (t) => {
  const { g, peer } = await rogueGateway(t, 8, { maxCallsInFlight: 2 });
  const [port] = await freePorts(1);
  const a = await clientFrom(t, g, port);
  a.sock.write(Buffer.concat([echo(0xf1, 'one'), echo(0xf2, 'two'), echo(0xf3, 'three')]));
  const one = await callAt(peer, 1);
  const two = await callAt(peer, 2);
  // At its limit the gateway does not read the socket, so it cannot see the reset.
  a.sock.resetAndDestroy();
  await new Promise((r) => setTimeout(r, 100));
  // (libuv takes a paused socket out of epoll on Linux: the reset is not seen, whatever this logs.)
  t.log(`departures before the client comes back: ${g.router.stats.departures}`);
  const b = await clientFrom(t, g, port);
  b.sock.write(Buffer.concat([echo(0xf1, 'one'), echo(0xf2, 'two')]));
  await waitFor(() => g.router.stats.resumedInFlight === 2, 'both adopted');
  t.is(g.router.stats.departures, 1);
  answer(peer, one);
  answer(peer, two);
  await waitFor(() => b.replies.length === 2, 'both answered');
  t.deepEqual(
    b.replies.map((r) => r.readUInt32BE(0)),
    [0xf1, 0xf2],
  );
  t.is(peer.received.length, 3, 'the server saw the CONNPROP and each call once');
  await waitFor(() => gauges(g).frontendCallsInFlight === 0, 'no call in flight');
  t.deepEqual(gauges(g), BASELINE);
});

test('the reply of a call that may simply run again (NULL, an NFSv3 read) is not kept for a departed client', async (t) => {
  const { g, peer } = await rogueGateway(t, 8);
  const [port] = await freePorts(1);
  const a = await clientFrom(t, g, port);
  a.sock.write(
    Buffer.concat([framedCall(0x61, TEST_PROGRAM, TEST_VERSION, TestProc.NULL), echo(0x62, 'changes')]),
  );
  const nullCall = await callAt(peer, 1);
  const echoCall = await callAt(peer, 2);
  a.sock.resetAndDestroy();
  await waitFor(() => g.router.stats.departures === 1, 'the departure recorded');
  answer(peer, nullCall);
  answer(peer, echoCall);
  await waitFor(() => g.router.snapshot().inFlight === 0, 'both answered');
  t.like(g.router.snapshot(), { heldReplies: 1, heldRepliesDropped: 0, orphanedReplies: 1 });
  t.true(isIdempotent(100003, 3, 6), 'NFSv3 READ');
  t.false(isIdempotent(100003, 3, 12), 'NFSv3 REMOVE');
  t.false(isIdempotent(100003, 4, 1), 'an NFSv4 COMPOUND');
});

test("a call answered just before its client left goes again under its first gateway XID on the same connection, for the server's duplicate request cache", async (t) => {
  const { g, peer } = await rogueGateway(t, 8);
  const [p1, p2, p3] = await freePorts(3);
  // Answered, then the connection goes; as far as the client knows its reply was lost with it.
  const first = await sentThenReset(t, g, peer, p1, { xid: 0xc1, text: 'remove', n: 1, answered: true });

  // The same XID from another port is another client's call: a new gateway XID.
  const other = await clientFrom(t, g, p2);
  other.sock.write(echo(0xc1, 'remove'));
  t.not((await callAt(peer, 2)).readUInt32BE(0), first.readUInt32BE(0), 'another port is another client');

  const b = await clientFrom(t, g, p1);
  b.sock.write(echo(0xc1, 'remove'));
  const again = await callAt(peer, 3);
  t.is(again.readUInt32BE(0), first.readUInt32BE(0), 'under its first gateway XID');
  t.deepEqual(again.subarray(4), first.subarray(4), 'the same call');
  t.is(g.router.stats.resumedSent, 1);
  answer(peer, again);
  await waitFor(() => b.replies.length === 1, "the server's answer");
  t.is(b.replies[0].readUInt32BE(0), 0xc1);
  // A new call of that client gets a new gateway XID.
  b.sock.write(echo(0xc2, 'next'));
  t.not((await callAt(peer, 4)).readUInt32BE(0), first.readUInt32BE(0));

  // The same XID with another length, or the same length and other bytes, is another call: a new
  // gateway XID (ganesha's cache on an RDMA connection would answer it with the first call's reply).
  const c = await clientFrom(t, g, p3);
  c.sock.write(Buffer.concat([echo(0xd1, 'short'), echo(0xd2, 'fileA')]));
  const cFirst = await callAt(peer, 5);
  const dFirst = await callAt(peer, 6);
  answer(peer, cFirst);
  answer(peer, dFirst);
  await waitFor(() => c.replies.length === 2, 'answered');
  c.sock.resetAndDestroy();
  await waitFor(() => g.router.stats.departures === 2, 'the second departure');
  t.is(g.router.snapshot().callsKept, 2, 'both of its calls kept');
  const c2 = await clientFrom(t, g, p3);
  c2.sock.write(echo(0xd1, 'a longer call'));
  t.not((await callAt(peer, 7)).readUInt32BE(0), cFirst.readUInt32BE(0));
  c2.sock.write(echo(0xd2, 'fileB'));
  t.not((await callAt(peer, 8)).readUInt32BE(0), dFirst.readUInt32BE(0));
  t.is(g.router.stats.resumedSent, 1);
});

test('a clean close keeps the calls answered in its last seconds, for a reply that crossed the FIN; for a short while', async (t) => {
  const { g, peer } = await rogueGateway(t, 8);
  const [port] = await freePorts(1);
  const a = await clientFrom(t, g, port);
  a.sock.write(echo(0xc9, 'crossed the FIN'));
  const first = await callAt(peer, 1);
  answer(peer, first);
  // The reply is written, and the client's FIN follows: as far as it knows, the reply was lost.
  await waitFor(() => a.replies.length === 1, 'answered');
  a.sock.end();
  await once(a.sock, 'close');
  await waitFor(() => g.router.snapshot().clients === 0, 'the close seen');
  t.like(g.router.snapshot(), { departures: 1, departuresKept: 1, callsKept: 1 });
  const b = await clientFrom(t, g, port);
  b.sock.write(echo(0xc9, 'crossed the FIN'));
  t.is((await callAt(peer, 2)).readUInt32BE(0), first.readUInt32BE(0), 'under its first gateway XID');
  t.is(g.router.stats.resumedSent, 1);
});

/**
 * A gateway on two rogue RDMA connections of one credit each; a client's call `xid` ('remove') answered on
 * one of them (`pinned`), then the client's connection reset (its departure recorded). `pinWaitMs`: the
 * router's wait of a pinned retransmission for its connection's credit (default: the router's, 1 s).
 */
async function answeredThenLost(t: ExecutionContext, xid: number, pinWaitMs?: number) {
  const rogue = await RoguePeer.listenMany(plainPrivateData());
  // startTestGateway's, with the router's pin wait.
  const g = await startGateway({
    config: testConfig({ poolSize: 2, peer: { host: '127.0.0.1', port: rogue.port } }),
    backoff: { initialMs: 50, maxMs: 500 },
    routerPinWaitMs: pinWaitMs,
  });
  t.teardown(async () => {
    await g.stop(0);
    for (const p of rogue.peers) p.close();
    await rogue.close();
  });
  await waitFor(() => rogue.peers.length === 2 && rogue.peers.every((p) => p.received.length >= 1), 'both');
  for (const p of rogue.peers) {
    const cp = decodeHeader(p.received[0]);
    p.send(headerBytes({ version: 2, htype: 5, xid: cp.xid, credit: 1, flags: 1, props: [] }));
  }
  const [port] = await freePorts(1);
  const a = await clientFrom(t, g, port);
  a.sock.write(echo(xid, 'remove'));
  await waitFor(() => rogue.peers.some((p) => p.received.length === 2), 'the first attempt');
  const pinned = rogue.peers.find((p) => p.received.length === 2) as RoguePeer;
  const first = await callAt(pinned, 1);
  answer(pinned, first, 1);
  await waitFor(() => a.replies.length === 1, 'answered');
  a.sock.resetAndDestroy();
  await waitFor(() => g.router.stats.departures === 1, 'the departure');
  return { g, rogue, port, pinned, first };
}

/**
 * A pin wait far beyond what a loaded machine adds to a test's round trips: a resend that must take its own
 * connection's credit is not sent elsewhere because the test was slow, and "at once" (AT_ONCE_MS) cannot be
 * mistaken for "after the wait".
 */
const LONG_PIN_WAIT_MS = 5000;
const AT_ONCE_MS = 2500;

test("a resend under its first gateway XID takes its connection's next credit, ahead of the calls queued before it", async (t) => {
  // Two RDMA connections of one credit each, both busy with other clients' calls.
  const { g, rogue, port, pinned, first } = await answeredThenLost(t, 0x51, LONG_PIN_WAIT_MS);
  const busyPorts = await freePorts(3);
  for (const bp of busyPorts) {
    const c = await clientFrom(t, g, bp);
    c.sock.write(Buffer.concat(Array.from({ length: 4 }, (_, i) => echo(0x1000 + i, `busy ${bp}`))));
  }
  await waitFor(
    () => rogue.peers.every((p) => p.received.length >= 2) && pinned.received.length === 3,
    'busy',
  );
  const b = await clientFrom(t, g, port);
  b.sock.write(echo(0x51, 'remove'));
  await waitFor(() => g.router.stats.resumedSent === 1, 'the resend matched');
  // The pinned connection's credit frees: the resend is the next call it gets, not a queued busy one.
  answer(pinned, await callAt(pinned, 2), 1);
  const next = await callAt(pinned, 3);
  t.is(next.readUInt32BE(0), first.readUInt32BE(0), 'the resend, under its first gateway XID');
  t.true(next.includes(Buffer.from('remove')));
  t.is(g.router.stats.resumedUnpinned, 0);
});

/**
 * `answeredThenLost`, then another client's calls take both connections' credits: the pinned one's is
 * never given back, the other's is (answered), so that connection is free again.
 */
async function pinnedConnectionBusy(t: ExecutionContext, xid: number, pinWaitMs?: number) {
  const lost = await answeredThenLost(t, xid, pinWaitMs);
  const { g, rogue, pinned } = lost;
  const other = rogue.peers.find((p) => p !== pinned) as RoguePeer;
  const [busyPort] = await freePorts(1);
  const busy = await clientFrom(t, g, busyPort);
  busy.sock.write(Buffer.concat([echo(0x2000 + xid, 'busy one'), echo(0x3000 + xid, 'busy two')]));
  await waitFor(() => pinned.received.length === 3 && other.received.length === 2, 'both busy');
  answer(other, await callAt(other, 1), 1);
  await waitFor(() => busy.replies.length === 1, 'the other connection free again');
  return { ...lost, other };
}

test('a resend whose connection has no credit for a second goes on another one (resumed_unpinned)', async (t) => {
  const { g, port, other } = await pinnedConnectionBusy(t, 0x52);
  const b = await clientFrom(t, g, port);
  const sentAt = Date.now();
  b.sock.write(echo(0x52, 'remove'));
  const moved = await callAt(other, 2);
  t.true(moved.includes(Buffer.from('remove')), 'the resend, on the other connection');
  t.true(Date.now() - sentAt >= 900, `after its wait for its own connection (${Date.now() - sentAt} ms)`);
  t.like(g.router.snapshot(), { resumedSent: 1, resumedUnpinned: 1 });
  answer(other, moved, 1);
  await waitFor(() => b.replies.length === 1, 'answered');
});

test('a resend whose connection is gone goes on another one at once (resumed_unpinned)', async (t) => {
  const { g, rogue, port, pinned, first } = await answeredThenLost(t, 0x53, LONG_PIN_WAIT_MS);
  const other = rogue.peers.find((p) => p !== pinned) as RoguePeer;
  pinned.close();
  await waitFor(() => g.pool.connections().filter((c) => c.state === 'ready').length === 1, 'one left');
  const b = await clientFrom(t, g, port);
  const sentAt = Date.now();
  b.sock.write(echo(0x53, 'remove'));
  const moved = await callAt(other, 1);
  t.true(moved.includes(Buffer.from('remove')), 'the resend, on the other connection');
  t.true(Date.now() - sentAt < AT_ONCE_MS, `without waiting for its own (${Date.now() - sentAt} ms)`);
  t.not(moved.readUInt32BE(0), first.readUInt32BE(0), 'under a new gateway XID');
  t.like(g.router.snapshot(), { resumedSent: 1, resumedUnpinned: 1 });
  answer(other, moved, 1);
  await waitFor(() => b.replies.length === 1, 'answered');
  t.is(b.replies[0].readUInt32BE(0), 0x53);
});

test('a resend waiting for a credit on its connection goes on another one as soon as that connection is lost', async (t) => {
  const { g, port, pinned, other } = await pinnedConnectionBusy(t, 0x54, LONG_PIN_WAIT_MS);
  const b = await clientFrom(t, g, port);
  b.sock.write(echo(0x54, 'remove'));
  await waitFor(() => g.router.stats.resumedSent === 1, 'the resend matched, waiting for its credit');
  await delay(100);
  t.is(other.received.length, 2, 'not on the other connection while its own is up');
  const lostAt = Date.now();
  pinned.close();
  // The busy call is sent again too (it failed with the connection): both go on the other connection,
  // one credit at a time.
  for (let n = 2; ; n++) {
    const m = await callAt(other, n);
    if (m.includes(Buffer.from('remove'))) break;
    answer(other, m, 1);
  }
  t.true(Date.now() - lostAt < AT_ONCE_MS, `at once, not after its wait (${Date.now() - lostAt} ms)`);
  t.is(g.router.stats.resumedUnpinned, 1);
});

test("replies held for departed clients stay within resumeMaxBytes: the oldest departure's go first", async (t) => {
  // An accepted empty reply is 28 bytes, counted with 1,024 of overhead: room for one.
  const { g, peer } = await rogueGateway(t, 8, { resumeMaxBytes: 1500 });
  const [p1, p2] = await freePorts(2);
  const one = await sentThenReset(t, g, peer, p1, { xid: 0xa1, text: 'one', n: 1 });
  const two = await sentThenReset(t, g, peer, p2, { xid: 0xa2, text: 'two', n: 2 });
  answer(peer, one);
  await waitFor(() => g.router.stats.heldReplies === 1, 'the first reply held');
  answer(peer, two);
  await waitFor(() => g.router.stats.heldRepliesDropped === 1, "the older departure's reply dropped");
  t.like(g.router.snapshot(), { heldReplies: 1, heldReplyBytes: 28 + 1024 });

  const a2 = await clientFrom(t, g, p1);
  a2.sock.write(echo(0xa1, 'one'));
  t.true((await callAt(peer, 3)).includes(Buffer.from('one')), 'its retransmission goes to the server');
  const b2 = await clientFrom(t, g, p2);
  b2.sock.write(echo(0xa2, 'two'));
  await waitFor(() => b2.replies.length === 1, 'answered from the held reply');
  t.is(b2.replies[0].readUInt32BE(0), 0xa2);
  t.like(g.router.snapshot(), { resumedAnswered: 1, heldReplies: 1, heldReplyBytes: 28 + 1024 });
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
