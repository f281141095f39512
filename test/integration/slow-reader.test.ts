/**
 * A client that sends calls and does not read its replies (a stalled or hostile reader) must cost the
 * gateway a bounded amount of memory: without the reply budget (`frontend.maxReplyBytes`) one 64 KiB read
 * of 128 SOURCE calls made the gateway fetch and hold 128 replies of up to 4 MiB each. Through the whole
 * chain (frontend → router → RDMA → embedded responder → test program), real sockets.
 */
import { type AddressInfo, createServer, type Socket } from 'node:net';
import test, { type ExecutionContext } from 'ava';
import { parseRoute } from '../../gateway/dispatch.js';
import { startGateway } from '../../gateway/gateway.js';
import { encodeSourceArgs } from '../../gateway/test-program/codec.js';
import { TEST_PROGRAM, TEST_VERSION, TestProc } from '../../gateway/test-program/constants.js';
import { TestProgramClient } from '../../gateway/test-program/index.js';
import { serveTestProgram } from '../../gateway/test-program/server.js';
import { frameRecord, RecordDecoder } from '../../tcp-frontend/record-marking.js';
import { connectRaw, framedCall, waitFor } from '../gateway/helpers.js';
import { settledGauges, startTestGateway, testConfig } from './helpers.js';

const MiB = 1024 * 1024;
const CALLS = 64;

/** `n` SOURCE calls of 1 MiB each (XIDs 1..n), framed and concatenated for one write. */
function sourceCalls(n: number): Buffer {
  const calls: Buffer[] = [];
  for (let i = 0; i < n; i++) {
    calls.push(framedCall(i + 1, TEST_PROGRAM, TEST_VERSION, TestProc.SOURCE, encodeSourceArgs(MiB, i)));
  }
  return Buffer.concat(calls);
}

test('a client that does not read its replies gets at most its reply budget fetched, then every reply once it reads', async (t) => {
  const budget = 16 * MiB;
  const g = await startTestGateway({ maxReplyBytes: budget });
  const { port } = g.addresses[0];
  const hog = await connectRaw(port);
  t.teardown(async () => {
    hog.destroy();
    await g.stop(0);
  });
  hog.pause();
  // 64 SOURCE calls of 1 MiB in one write: 64 MiB of replies, and the client reads none of them yet.
  hog.write(sourceCalls(CALLS));
  await waitFor(() => g.router.stats.replyRoomWaits > 0, 'the router to hold the client back');
  // Let everything that may still move settle: replies in flight land, the socket fills.
  await new Promise((r) => setTimeout(r, 500));
  const [conn] = g.frontend.connections;
  const fetched = g.router.stats.replies;
  t.log(`${fetched} of ${CALLS} replies fetched, ${(conn.bytesOut / MiB).toFixed(1)} MiB written or queued`);
  // The budget (16 MiB: the test program's binding bounds each SOURCE reply at 1 MiB and its header) plus
  // what the kernel's socket buffers took before user space had to hold anything: far from the 64 asked.
  t.true(conn.bytesOut < budget + 12 * MiB, `${conn.bytesOut} bytes queued for the client`);
  t.true(fetched < CALLS / 2, `${fetched} replies fetched`);
  t.true(g.router.snapshot().queued > 0, 'the rest wait in the router');

  // Everyone else is served meanwhile.
  const other = await TestProgramClient.connect({ host: '127.0.0.1', port });
  t.teardown(() => other.rpc.destroy());
  t.deepEqual(await other.echo(Buffer.from('not held')), Buffer.from('not held'));

  // Once the client reads, every reply comes, in full and to the call it answers.
  const seen = new Map<number, number>();
  const all = new Promise<void>((resolve, reject) => {
    const decoder = new RecordDecoder((record) => {
      const xid = record.readUInt32BE(0);
      seen.set(xid, record.length);
      if (seen.size === CALLS) resolve();
    });
    hog.on('data', (chunk: Buffer) => {
      try {
        decoder.push(chunk);
      } catch (e) {
        reject(e);
      }
    });
  });
  hog.resume();
  await all;
  for (let xid = 1; xid <= CALLS; xid++) {
    // accepted reply header (24 bytes) + the opaque's length word + 1 MiB
    t.is(seen.get(xid), 24 + 4 + MiB, `reply ${xid}`);
  }
  t.is(g.router.stats.holdExpired, 0, 'waiting for the client to read is not waiting for RDMA');
  const settled = await settledGauges(g);
  t.is(settled.routerInFlight, 0);
  t.is(settled.routerQueued, 0);
});

test('with a budget smaller than one reply, calls still go one at a time', async (t) => {
  const g = await startTestGateway({ maxReplyBytes: 64 * 1024 });
  const { port } = g.addresses[0];
  const c = await TestProgramClient.connect({ host: '127.0.0.1', port, maxInFlight: 8 });
  t.teardown(async () => {
    c.rpc.destroy();
    await g.stop(0);
  });
  const replies = await Promise.all(Array.from({ length: 8 }, (_, i) => c.source(256 * 1024, i)));
  t.is(replies.length, 8);
  for (const r of replies) t.is(r.length, 256 * 1024);
  t.true(g.router.stats.replyRoomWaits > 0, 'the budget held the later calls back');
});

test('through a tcp (passthrough) route too: a client that does not read is held at its reply budget', async (t) => {
  const upstream = await serveTestProgram();
  const config = testConfig({ maxReplyBytes: 16 * MiB });
  config.routes = [parseRoute(`test=tcp@127.0.0.1:${upstream.addresses[0].port}`)];
  const g = await startGateway({ config });
  const hog = await connectRaw(g.addresses[0].port);
  t.teardown(async () => {
    hog.destroy();
    await g.stop(0);
    await upstream.close({ drainTimeoutMs: 0 });
  });
  hog.pause();
  hog.write(sourceCalls(CALLS));
  // The route counts each call at the largest reply (4 MiB + 64 KiB: it does not parse replies), so it holds
  // the client's reading after four calls; give whatever may still move the time to move.
  await waitFor(
    () => g.routing?.passthrough.stats.calls !== undefined && g.routing.passthrough.stats.calls >= 4,
    'calls forwarded',
  );
  await new Promise((r) => setTimeout(r, 500));
  const [conn] = g.frontend.connections;
  const forwarded = g.routing?.passthrough.stats.calls ?? 0;
  t.log(
    `${forwarded} of ${CALLS} calls forwarded, ${(conn.bytesOut / MiB).toFixed(1)} MiB written or queued`,
  );
  t.true(forwarded < CALLS / 2, `${forwarded} forwarded`);
  t.true(conn.bytesOut < 16 * MiB + 12 * MiB, `${conn.bytesOut} bytes queued for the client`);
  // Once it reads, every reply comes.
  const seen = new Set<number>();
  const all = new Promise<void>((resolve) => {
    const decoder = new RecordDecoder((record) => {
      seen.add(record.readUInt32BE(0));
      if (seen.size === CALLS) resolve();
    });
    hog.on('data', (d: Buffer) => decoder.push(d));
  });
  hog.resume();
  await all;
  t.is(seen.size, CALLS);
});

test('a client that keeps its window shut is closed after the idle timeout, calls still waiting for room or not', async (t) => {
  const config = testConfig({ maxReplyBytes: 4 * MiB });
  config.frontend.idleTimeoutMs = 1500;
  const g = await startGateway({ config, routerTickMs: 50 });
  const hog = await connectRaw(g.addresses[0].port);
  t.teardown(async () => {
    hog.destroy();
    await g.stop(0);
  });
  hog.pause(); // a paused socket reads nothing, not even the gateway's close: watch the gateway's side
  hog.write(sourceCalls(32));
  await waitFor(() => g.router.stats.replyRoomWaits > 0, 'the router to hold the client back');
  await waitFor(() => g.frontend.stats.closes.IDLE_TIMEOUT === 1, 'the gateway to close the client', 10_000);
  t.is(g.frontend.connections.size, 0);
  await waitFor(() => g.router.snapshot().queued === 0, 'its waiting calls dropped');
});

test('a client waiting for reply room goes on at once when a call of its own is resent, not at the next tick', async (t) => {
  // An upstream that holds every call until told: the first SOURCE stays in flight while the second
  // waits for room (two 1 MiB replies do not fit a 1.5 MiB budget).
  const held: { socket: Socket; record: Buffer }[] = [];
  const upstream = createServer((socket) => {
    socket.on('error', () => {});
    const decoder = new RecordDecoder((record) => held.push({ socket, record }));
    socket.on('data', (d: Buffer) => decoder.push(d));
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  const config = testConfig({ maxReplyBytes: 1.5 * MiB });
  config.upstream = { host: '127.0.0.1', port: (upstream.address() as AddressInfo).port };
  // The tick would wake the client after a minute: only the router's own wake-up can make this pass.
  const g = await startGateway({ config, routerTickMs: 60_000, backoff: { initialMs: 20, maxMs: 100 } });
  const client = await connectRaw(g.addresses[0].port);
  t.teardown(async () => {
    client.destroy();
    await g.stop(0);
    upstream.close();
  });
  client.write(sourceCalls(2));
  await waitFor(
    () => held.length === 1 && g.router.stats.replyRoomWaits === 1,
    'one call held upstream, one waiting',
  );
  // The gateway's own XIDs travel upstream: a call is known by its arguments (SOURCE's seed is its index).
  const seedOf = (h: { record: Buffer }) => h.record.readUInt32BE(h.record.length - 4);
  t.is(seedOf(held[0]), 0);

  // The RDMA connection goes: call 1 is resent on the next one, and its client must not wait for the tick.
  g.pool.connections()[0].close('killed by the test');
  await waitFor(() => held.length === 2, 'call 1 resent after the reconnect', 5000);
  t.is(seedOf(held[1]), 0, 'call 1 again');
  t.is(g.router.stats.retransmits, 1);

  // Answering it makes room for call 2, and both replies reach the client.
  const replies = new Map<number, number>();
  const decoder = new RecordDecoder((r) => replies.set(r.readUInt32BE(0), r.length));
  client.on('data', (d: Buffer) => decoder.push(d));
  const answer = (h: { socket: Socket; record: Buffer }) => {
    const xid = h.record.readUInt32BE(0);
    const reply = Buffer.alloc(28 + MiB);
    reply.writeUInt32BE(xid, 0);
    reply.writeUInt32BE(1, 4);
    reply.writeUInt32BE(MiB, 24);
    h.socket.write(Buffer.concat(frameRecord(reply)));
  };
  answer(held[1]);
  await waitFor(() => held.length === 3, 'call 2 sent once call 1 was answered', 5000);
  t.is(seedOf(held[2]), 1, 'then call 2');
  answer(held[2]);
  await waitFor(() => replies.size === 2, 'both replies', 5000);
  t.deepEqual(
    [...replies],
    [
      [1, 28 + MiB],
      [2, 28 + MiB],
    ],
  );
});

test('a client held for reply room that resets: none of its waiting calls reaches the server afterwards', async (t) => {
  // The flush watch armed for a waiting client fires (with an error) when its socket is destroyed, before
  // the frontend reports the close: it must not wake the client and send its calls.
  const seen: number[] = [];
  const upstream = createServer((socket) => {
    socket.on('error', () => {});
    const decoder = new RecordDecoder((record) => {
      seen.push(record.readUInt32BE(record.length - 4));
      const reply = Buffer.alloc(28 + MiB);
      reply.writeUInt32BE(record.readUInt32BE(0), 0);
      reply.writeUInt32BE(1, 4);
      reply.writeUInt32BE(MiB, 24);
      socket.write(Buffer.concat(frameRecord(reply)));
    });
    socket.on('data', (d: Buffer) => decoder.push(d));
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  const config = testConfig({ maxReplyBytes: 4 * MiB });
  config.upstream = { host: '127.0.0.1', port: (upstream.address() as AddressInfo).port };
  const g = await startGateway({ config, routerTickMs: 60_000 });
  const hog = await connectRaw(g.addresses[0].port);
  t.teardown(async () => {
    hog.destroy();
    await g.stop(0);
    upstream.close();
  });
  hog.pause();
  hog.write(sourceCalls(32));
  await waitFor(() => g.router.stats.replyRoomWaits > 0, 'the client held for room');
  // Settled: every call sent has its reply, and nothing more has gone for 300 ms (on a loaded machine
  // the replies written meanwhile may still make room for a few calls for a while).
  let last = -1;
  while (seen.length !== last || g.router.snapshot().inFlight > 0) {
    last = seen.length;
    await new Promise((r) => setTimeout(r, 300));
  }
  const before = seen.length;
  hog.resetAndDestroy();
  await waitFor(() => g.frontend.connections.size === 0, 'the client gone');
  await new Promise((r) => setTimeout(r, 500));
  t.is(seen.length, before, `calls reached the server after the client reset: ${seen.slice(before)}`);
  t.is(g.router.snapshot().orphanedReplies, 0);
  t.true(g.router.snapshot().droppedQueued > 0, 'its waiting calls were dropped');
});

/**
 * An upstream TCP server that answers nothing until told, for both routes (the responder's upstream and
 * the tcp route's target): each record it gets is kept with its socket and its RPC program.
 */
async function holdingUpstream() {
  const held: { socket: Socket; record: Buffer; program: number }[] = [];
  const server = createServer((socket) => {
    socket.on('error', () => {});
    const decoder = new RecordDecoder((record) =>
      held.push({ socket, record, program: record.readUInt32BE(12) }),
    );
    socket.on('data', (d: Buffer) => decoder.push(d));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  /** An accepted reply to `h` carrying an opaque of `dataBytes` (small: its write never blocks). */
  const answer = (h: { socket: Socket; record: Buffer }, dataBytes = 16) => {
    const reply = Buffer.alloc(28 + dataBytes);
    reply.writeUInt32BE(h.record.readUInt32BE(0), 0);
    reply.writeUInt32BE(1, 4);
    reply.writeUInt32BE(dataBytes, 24);
    h.socket.write(Buffer.concat(frameRecord(reply)));
  };
  const count = (program: number) => held.filter((h) => h.program === program).length;
  const close = () => {
    server.close();
    for (const h of held) h.socket.destroy();
  };
  return { server, port, held, answer, count, close };
}

const MOUNT_PROGRAM = 100005;

/**
 * A gateway whose rdma route (the test program) and tcp route (MOUNT) both lead to one holding upstream,
 * with a reply budget of `budget`, and a client connected to it that reads every reply (`replies`: their
 * XIDs).
 */
async function twoRouteWorld(t: ExecutionContext, budget: number) {
  const up = await holdingUpstream();
  const config = testConfig({ maxReplyBytes: budget });
  config.upstream = { host: '127.0.0.1', port: up.port };
  config.routes = [parseRoute(`mount=tcp@127.0.0.1:${up.port}`)];
  // The tick would wake a client waiting for room after a minute: only the wake-ups under test can
  // make these tests pass in time.
  const g = await startGateway({ config, routerTickMs: 60_000 });
  const client = await connectRaw(g.addresses[0].port);
  t.teardown(async () => {
    client.destroy();
    up.close(); // first: the tcp route's close waits for its calls to be answered or lost
    await g.stop(0);
  });
  const replies = new Set<number>();
  const decoder = new RecordDecoder((r) => replies.add(r.readUInt32BE(0)));
  client.on('data', (d: Buffer) => decoder.push(d));
  const mountCalls = (...xids: number[]) =>
    Buffer.concat(xids.map((x) => framedCall(x, MOUNT_PROGRAM, 3, 0)));
  return { up, g, client, replies, mountCalls };
}

test('one reply budget for both routes: calls waiting on the tcp route hold the rdma route back, and its replies let it go on', async (t) => {
  // 10 MiB: two MOUNT calls count 2 × 4.06 MiB (the tcp route does not parse replies), so one SOURCE
  // call's 1 MiB still fits and a second does not.
  const { up, g, client, replies, mountCalls } = await twoRouteWorld(t, 10 * MiB);
  client.write(Buffer.concat([mountCalls(101, 102), sourceCalls(4)]));
  await waitFor(
    () => up.count(MOUNT_PROGRAM) === 2 && up.count(TEST_PROGRAM) >= 1,
    'two MOUNT calls and a SOURCE call upstream',
  );
  await new Promise((r) => setTimeout(r, 300));
  t.is(up.count(TEST_PROGRAM), 1, "the tcp route's calls count against the rdma route's room");
  t.is(g.router.stats.replyRoomWaits, 1, 'the other three wait for room');

  // One MOUNT reply releases 4.06 MiB: the three SOURCE calls waiting fit now, and go at once.
  up.answer(up.held.find((h) => h.program === MOUNT_PROGRAM) as (typeof up.held)[number]);
  await waitFor(() => up.count(TEST_PROGRAM) === 4, 'the SOURCE calls sent once the MOUNT reply came', 3000);
  await waitFor(() => replies.has(101), 'the MOUNT reply');
  for (const h of up.held.filter((x) => x.program === TEST_PROGRAM)) up.answer(h);
  up.answer(up.held.filter((h) => h.program === MOUNT_PROGRAM)[1]);
  await waitFor(() => replies.size === 6, 'every reply');
  t.is(g.frontend.connections.size, 1);
  t.is([...g.frontend.connections][0].replyReserved, 0, 'nothing left reserved');
});

test('one reply budget for both routes: calls in flight on the rdma route hold the tcp route back, and their replies let it read again', async (t) => {
  // 10 MiB: nine SOURCE calls (9 × 1 MiB) go; the MOUNT call after them goes too (the call that finds the
  // budget spent still goes) and holds the client's reading, so the second MOUNT call waits.
  const { up, g, client, replies, mountCalls } = await twoRouteWorld(t, 10 * MiB);
  client.write(sourceCalls(9));
  await waitFor(() => up.count(TEST_PROGRAM) === 9, 'nine SOURCE calls upstream');
  client.write(mountCalls(101, 102));
  await waitFor(() => up.count(MOUNT_PROGRAM) >= 1, 'the first MOUNT call upstream');
  await new Promise((r) => setTimeout(r, 300));
  t.is(up.count(MOUNT_PROGRAM), 1, "the rdma route's calls count against the tcp route's room");

  // Small replies to the SOURCE calls: no write of them ever blocks, so no `drain` comes; the room they
  // release is what must let the client's reading go on.
  for (const h of up.held.filter((x) => x.program === TEST_PROGRAM)) up.answer(h);
  await waitFor(() => up.count(MOUNT_PROGRAM) === 2, 'the second MOUNT call read and sent', 3000);
  for (const h of up.held.filter((x) => x.program === MOUNT_PROGRAM)) up.answer(h);
  await waitFor(() => replies.size === 11, 'every reply');
  t.is([...g.frontend.connections][0].replyReserved, 0, 'nothing left reserved');
});
