/**
 * The responder role against a hand-written upstream: callbacks from the upstream become backward calls
 * on the RDMA connection and their replies go back on the same TCP connection; the upstream connection is
 * not half-closed while it still owes replies; an upstream that goes away takes its RDMA connection with
 * it (the requester retransmits), without an invented reply.
 */
import { createServer, connect as netConnect, type Server, type Socket } from 'node:net';
import test from 'ava';
import { defaultRegistry } from '../../gateway/gateway.js';
import { Responder } from '../../gateway/responder.js';
import { TEST_PROGRAM, TEST_VERSION, TestProc } from '../../gateway/test-program/constants.js';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import {
  ConnectionPool,
  type InboundCall,
  type RequesterHandler,
  RpcRdmaConnection,
  type TransportCall,
  type TransportError,
} from '../../rdma-backend/transport/index.js';
import { pumpReads } from '../../rdma-backend/transport/responder.js';
import { frameRecord, RecordDecoder } from '../../tcp-frontend/record-marking.js';
import { mpaRequest } from '../helpers/iwarp-frames.js';
import { deviceRefusingRegistration } from '../helpers/refusing-device.js';
import { plainPrivateData } from '../helpers/rogue-peer.js';
import { captureLogger, encodeCall, waitFor } from './helpers.js';

const PROG = 0x20000077;
const CB_PROG = 0x40000001;

/** An accepted reply with `body` as results. */
function reply(xid: number, body: Buffer): Buffer {
  const h = Buffer.alloc(24);
  h.writeUInt32BE(xid, 0);
  h.writeUInt32BE(1, 4);
  return Buffer.concat([h, body]);
}

interface Upstream {
  server: Server;
  port: number;
  sockets: Socket[];
  /** Per socket: the records received, and whether a FIN came. */
  received: Buffer[];
  ended: boolean;
  onRecord: (socket: Socket, record: Buffer) => void;
}

async function upstream(onRecord: Upstream['onRecord']): Promise<Upstream> {
  const u: Upstream = { server: createServer(), port: 0, sockets: [], received: [], ended: false, onRecord };
  u.server.on('connection', (s) => {
    u.sockets.push(s);
    const d = new RecordDecoder((r) => {
      u.received.push(r);
      u.onRecord(s, r);
    });
    s.on('data', (c) => d.push(c));
    s.on('end', () => {
      u.ended = true;
      s.end();
    });
    s.on('error', () => {});
  });
  await new Promise<void>((r) => u.server.listen(0, '127.0.0.1', r));
  u.port = (u.server.address() as { port: number }).port;
  return u;
}

class Outcomes implements RequesterHandler {
  replies: Buffer[] = [];
  failures: TransportError[] = [];
  onReply(_c: TransportCall, r: Buffer): void {
    this.replies.push(r);
  }
  onFailed(_c: TransportCall, e: TransportError): void {
    this.failures.push(e);
  }
}

async function chain(
  t: import('ava').ExecutionContext,
  u: Upstream,
  o: { maxRecordSize?: number; logger?: import('pino').Logger } = {},
) {
  const device = await createSoftProvider().openDevice();
  const responder = new Responder({
    device,
    host: '127.0.0.1',
    port: 0,
    upstream: { host: '127.0.0.1', port: u.port },
    registry: defaultRegistry(),
    lingerMs: 2000,
    maxRecordSize: o.maxRecordSize,
    logger: o.logger,
  });
  const { port } = await responder.listen();
  const outcomes = new Outcomes();
  const backward: InboundCall[] = [];
  const clientDevice = await createSoftProvider().openDevice();
  const conn: RpcRdmaConnection = await RpcRdmaConnection.connect({
    device: clientDevice,
    host: '127.0.0.1',
    port,
    options: { peerKey: `responder-test-${port}` },
    requester: outcomes,
    responder: {
      onCall(call) {
        // The client end answers a callback with its argument's length as the result.
        backward.push(call);
        const n = Buffer.alloc(4);
        n.writeUInt32BE(call.message.length - 40, 0);
        conn.reply(call, reply(call.xid, n));
      },
    },
  });
  await waitFor(() => conn.state === 'ready', 'negotiated');
  t.teardown(async () => {
    conn.close();
    await responder.close(1000);
    u.server.close();
    for (const s of u.sockets) s.destroy();
  });
  return { responder, conn, outcomes, backward };
}

function call(xid: number, args = Buffer.alloc(0)): TransportCall {
  return { xid, message: encodeCall(xid, PROG, 1, 1, args), ddpArgs: [], ddpResults: [], maxReplySize: -1 };
}

test('an upstream callback goes back as a backward call and its reply returns to the upstream', async (t) => {
  const u = await upstream((s, record) => {
    const xid = record.readUInt32BE(0);
    if (record.readUInt32BE(4) === 0 && record.readUInt32BE(12) === PROG) {
      // Before answering, call the client back on the same connection.
      s.write(
        Buffer.concat(frameRecord(encodeCall(0xcb000000 + (xid & 0xff), CB_PROG, 1, 1, Buffer.alloc(12)))),
      );
    } else if (record.readUInt32BE(4) === 1) {
      // The callback's reply: now answer the original call with what the client said.
      const original = record.readUInt32BE(0) - 0xcb000000;
      s.write(Buffer.concat(frameRecord(reply(0x1000 + original, record.subarray(24)))));
    }
  });
  const { responder, conn, outcomes, backward } = await chain(t, u);
  for (let i = 0; i < 3; i++) conn.submit(call(0x1000 + i));
  await waitFor(() => outcomes.replies.length === 3, 'replies');
  t.is(backward.length, 3);
  t.true(backward.every((c) => c.backward));
  for (const r of outcomes.replies) t.is(r.readUInt32BE(24), 12, 'the result is the callback reply');
  t.is(responder.stats.callbacks, 3);
  t.is(responder.stats.callbackReplies, 3);
  // Both small messages came as views of the responder's Receives, copied into the upstream's stage.
  const [served] = responder.connections();
  t.like(served.counters, { lentCalls: 3, lentReplies: 3 });
  t.is(u.sockets.length, 1, 'one upstream TCP connection for the RDMA connection');
});

test('the upstream is not half-closed while it owes replies; it ends once they are in', async (t) => {
  let held: { s: Socket; xid: number }[] = [];
  const u = await upstream((s, record) => {
    held.push({ s, xid: record.readUInt32BE(0) });
  });
  const { responder, conn } = await chain(t, u);
  conn.submit(call(7));
  conn.submit(call(8));
  await waitFor(() => held.length === 2, 'calls at the upstream');
  conn.close('client goes away');
  await new Promise((r) => setTimeout(r, 150));
  t.false(u.ended, 'no FIN while two replies are due');
  for (const h of held) h.s.write(Buffer.concat(frameRecord(reply(h.xid, Buffer.alloc(4)))));
  held = [];
  await waitFor(() => u.ended, 'FIN after the last reply');
  await waitFor(() => responder.links.size === 0, 'link gone');
  t.is(responder.stats.repliesSent, 0, 'nobody to send them to');
});

test('an upstream that goes away closes its RDMA connection: the calls fail for retransmission', async (t) => {
  const u = await upstream((s) => {
    s.destroy();
  });
  const { conn, outcomes } = await chain(t, u);
  conn.submit(call(9));
  await waitFor(() => outcomes.failures.length === 1, 'failure');
  t.true(outcomes.failures[0].retransmit);
  t.is(outcomes.replies.length, 0, 'no invented reply');
  t.is(conn.state, 'closed');
});

test('an upstream that goes first leaves no linger timer behind when the RDMA close follows', async (t) => {
  const u = await upstream((s) => {
    s.destroy();
  });
  const { responder, conn, outcomes } = await chain(t, u);
  const [link] = [...responder.links];
  conn.submit(call(9));
  await waitFor(() => outcomes.failures.length === 1, 'failure');
  await waitFor(() => responder.links.size === 0, 'the link gone');
  // The RDMA close came after the upstream's: ending the destroyed upstream again armed a lingerMs timer
  // that kept the gone link reachable.
  t.is((link as unknown as { lingerTimer: NodeJS.Timeout | null }).lingerTimer, null);
});

test('ended connections whose upstream still owes replies count against maxConnections: the oldest is cut for a new one', async (t) => {
  const w = await testResponder(t, { maxConnections: 2, hold: new Set([1, 2, 3, 4]) });
  /** A connection that sends a call the upstream holds, then ends: its link lingers. */
  const lingerer = async (xid: number) => {
    const c = await w.connect();
    c.submit(call(xid));
    await waitFor(() => w.responder.stats.pending === xid, 'held upstream');
    c.close();
    await waitFor(() => w.responder.rdmaConnections().length === 0, 'its RDMA connection ended');
  };
  await lingerer(1);
  await lingerer(2);
  t.is(w.responder.links.size, 2, 'two links linger, each with its upstream connection');
  const firstUpstream = w.u.sockets[0];
  const cutGone = new Promise<void>((r) => firstUpstream.once('close', () => r()));

  // A third connection: live and lingering would be three. The oldest lingering upstream is cut.
  const outcomes = new Outcomes();
  const third = await w.connect(outcomes);
  t.is(w.responder.stats.lingerCut, 1);
  t.is(w.responder.links.size, 2, 'never more links than maxConnections');
  t.is(w.responder.stats.pending, 1, "the cut link's held call is no longer counted");
  await cutGone; // the oldest link's upstream socket was closed
  t.like(
    w.lines.find((r) => r.reason === 'LINGER_CUT'),
    { outstanding: 1 },
  );
  third.submit(call(9));
  await waitFor(() => outcomes.replies.length === 1, 'the new connection is served');

  // Two live connections and the last lingering link: that one gives way too; a third live one is refused.
  await w.connect();
  t.is(w.responder.stats.lingerCut, 2);
  t.is(w.responder.links.size, 2);
  await t.throwsAsync(w.connect());
  t.is(w.responder.stats.refused, 1, 'live connections are never cut: at maxConnections one more is refused');
});

test('a call assembled in the record pool is planned before it is written: its result still goes in the Write chunk', async (t) => {
  const COUNT = 6000;
  // The upstream answers a SOURCE call with COUNT bytes: the result the requester offered a Write chunk for.
  const u = await upstream((s, rec) => {
    if (rec.readUInt32BE(4) !== 0) return;
    const body = Buffer.alloc(4 + COUNT, 0x5a);
    body.writeUInt32BE(COUNT, 0);
    s.write(Buffer.concat(frameRecord(reply(rec.readUInt32BE(0), body))));
  });
  const { responder, conn, outcomes } = await chain(t, u);
  // The requester finds the result after the 24-byte header and its length word.
  (outcomes as Outcomes & { locateResult(): number }).locateResult = () => 28;
  // A small call, then one of over 4 KiB (a Long Call: assembled in the responder's record pool, which
  // takes it back once written upstream - and gives that memory to the reply record next).
  for (const [xid, extra] of [
    [0x77, 0],
    [0x78, 5000],
  ]) {
    const args = Buffer.alloc(8 + extra);
    args.writeUInt32BE(COUNT, 0);
    const message = encodeCall(xid, TEST_PROGRAM, TEST_VERSION, TestProc.SOURCE, args);
    conn.submit({ xid, message, ddpArgs: [], ddpResults: [COUNT], maxReplySize: 28 + COUNT + 64 });
    await waitFor(
      () => outcomes.replies.length + outcomes.failures.length === (xid === 0x77 ? 1 : 2),
      `reply ${xid}`,
    );
  }
  t.deepEqual(outcomes.failures, []);
  for (const r of outcomes.replies) t.is(r.length, 28 + COUNT);
  const counters = responder.connections()[0].counters;
  t.is(counters.rdmaWrites, 2, 'both results went by RDMA Write into their Write chunks');
  t.is(counters.longReplies, 0);
});

test('an upstream reply over the record limit fails only its call; the connection and the other calls go on', async (t) => {
  const MAX = 64 * 1024;
  const held: { s: Socket; xid: number }[] = [];
  const u = await upstream((s, rec) => {
    const xid = rec.readUInt32BE(0);
    // Call 1 gets a reply of 64 KiB + 24 bytes, over the responder's limit; the others wait, then small ones.
    if (xid === 1) s.write(Buffer.concat(frameRecord(reply(1, Buffer.alloc(MAX)))));
    else held.push({ s, xid });
  });
  const { responder, conn, outcomes } = await chain(t, u, { maxRecordSize: MAX });
  conn.submit(call(2));
  conn.submit(call(3));
  await waitFor(() => held.length === 2, 'two calls at the upstream');
  conn.submit(call(1));
  await waitFor(() => outcomes.failures.length === 1, 'the oversized one refused');
  t.is(outcomes.failures[0].code, 'ERR_TRANSPORT_PEER_SYSTEM');
  t.false(outcomes.failures[0].retransmit);
  for (const h of held) h.s.write(Buffer.concat(frameRecord(reply(h.xid, Buffer.alloc(4)))));
  await waitFor(() => outcomes.replies.length === 2, 'the other two answered');
  t.is(conn.state, 'ready');
  t.is(responder.stats.oversizedReplies, 1);
});

test('a reply the transport fails to send closes its RDMA connection as failed (the calls are resent), not the upstream as broken', async (t) => {
  const u = await upstream((s, rec) => {
    const xid = rec.readUInt32BE(0);
    // Calls 1 and 2 are answered together, in one write: the two replies arrive in one read.
    if (xid === 2)
      s.write(
        Buffer.concat([...frameRecord(reply(1, Buffer.alloc(4))), ...frameRecord(reply(2, Buffer.alloc(4)))]),
      );
  });
  const log = captureLogger();
  const { responder, conn, outcomes } = await chain(t, u, { logger: log.logger });
  // A fault inside the transport's reply path, injected on this responder's connection once armed: its
  // send buffer slab throws (after the call was marked answered, as a real fault there would be).
  const [served] = responder.rdmaConnections();
  const slab = served.sendSlab;
  const acquire = slab.acquire;
  let injected = false;
  slab.acquire = function (this: typeof slab) {
    if (!injected) {
      injected = true;
      throw new Error('injected send-slab fault');
    }
    return acquire.call(this);
  };
  conn.submit(call(1));
  conn.submit(call(2));
  await waitFor(
    () => outcomes.failures.length + outcomes.replies.length === 2,
    `both calls done (${outcomes.failures.length} failed, ${outcomes.replies.length} answered)`,
  );
  t.true(injected);
  t.is(outcomes.failures.length, 2, 'neither call answered after the fault');
  for (const f of outcomes.failures) {
    t.is(f.code, 'ERR_TRANSPORT_CONNECTION_LOST', f.message);
    t.true(f.retransmit, 'failed for retransmission: the requester resends them');
  }
  t.is(outcomes.replies.length, 0);
  const line = log.lines.find((l) => l.code === 'ERR_RESPONDER_REPLY_FAILED');
  t.truthy(line, 'the fault is logged as ours');
  t.is(line?.xid, 1);
  t.false(
    log.lines.some((l) => String(l.msg).includes('broken record stream')),
    'not taken for a broken upstream stream',
  );
});

test('small records lent from the read buffer: a stray reply is counted and dropped, a callback copied, the reply intact', async (t) => {
  const cbArgs = Buffer.from('callback arguments, kept by the backward call');
  const u = await upstream((s, rec) => {
    if (rec.readUInt32BE(4) !== 0) {
      // The client's answer to the callback: now the call's reply.
      s.write(Buffer.concat(frameRecord(reply(7, Buffer.from('the reply of call 7')))));
      return;
    }
    // One write, so the three small records arrive in one read and are all lent: a reply matching no call,
    // a callback, and (after the callback's answer) the reply. The read buffer is reused behind them.
    s.write(
      Buffer.concat([
        ...frameRecord(reply(999, Buffer.from('no call has this XID'))),
        ...frameRecord(encodeCall(7, CB_PROG, 1, 1, cbArgs)),
      ]),
    );
  });
  const { responder, conn, outcomes, backward } = await chain(t, u);
  conn.submit(call(7));
  await waitFor(() => outcomes.replies.length + outcomes.failures.length === 1, 'call 7 answered');
  t.deepEqual(outcomes.failures, []);
  t.deepEqual(outcomes.replies[0].subarray(24), Buffer.from('the reply of call 7'));
  t.is(responder.stats.unmatchedReplies, 1);
  t.is(backward.length, 1);
  t.deepEqual(backward[0].message.subarray(backward[0].message.length - cbArgs.length), cbArgs);
  // Nothing lent was put into (or refused by) the record pool.
  t.is(responder.recordPool.stats.ignored, 0);
  t.is(responder.recordPool.stats.doubleReleases, 0);
  t.is(conn.state, 'ready');
});

test('an oversized callback from the upstream is dropped, never taken for the reply of a call with its XID', async (t) => {
  const MAX = 64 * 1024;
  let upstreamSocket: Socket | undefined;
  const u = await upstream((s, rec) => {
    upstreamSocket = s;
    if (rec.readUInt32BE(4) !== 0) return; // callback replies, if any
    // Before answering call 5, the server calls back with a record over the limit that reuses XID 5
    // (its own XID space), then answers the call.
    s.write(Buffer.concat(frameRecord(encodeCall(5, CB_PROG, 1, 1, Buffer.alloc(MAX)))));
    s.write(Buffer.concat(frameRecord(reply(5, Buffer.alloc(4)))));
  });
  const { responder, conn, outcomes } = await chain(t, u, { maxRecordSize: MAX });
  conn.submit(call(5));
  await waitFor(() => outcomes.replies.length + outcomes.failures.length === 1, 'call 5 answered');
  t.deepEqual(outcomes.failures, [], 'the call was not refused for the callback');
  t.is(outcomes.replies.length, 1);
  t.is(responder.stats.oversizedReplies, 1);
  t.is(responder.stats.unmatchedReplies, 0);
  t.truthy(upstreamSocket);
  t.is(conn.state, 'ready');
});

test('a connection the device cannot accept is rejected at once, its upstream link goes, the next one is served', async (t) => {
  const u = await upstream((s, record) =>
    s.write(Buffer.concat(frameRecord(reply(record.readUInt32BE(0), Buffer.alloc(4))))),
  );
  // The first accept's second registration (its send slab) is refused, as RLIMIT_MEMLOCK would.
  const refusing = await deviceRefusingRegistration(2);
  const responder = new Responder({
    device: refusing.device,
    host: '127.0.0.1',
    port: 0,
    upstream: { host: '127.0.0.1', port: u.port },
    registry: defaultRegistry(),
    lingerMs: 2000,
  });
  const { port } = await responder.listen();
  const connect = async () =>
    RpcRdmaConnection.connect({
      device: await createSoftProvider().openDevice(),
      host: '127.0.0.1',
      port,
      options: { peerKey: `responder-refused-${port}` },
      requester: new Outcomes(),
    });
  let conn: RpcRdmaConnection | undefined;
  t.teardown(async () => {
    conn?.close();
    await responder.close(1000);
    u.server.close();
    for (const s of u.sockets) s.destroy();
  });
  const started = Date.now();
  await t.throwsAsync(connect());
  t.true(Date.now() - started < 5000, 'rejected, not left to time out');
  t.is(responder.stats.acceptFailures, 1);
  t.is(responder.stats.connections, 0, 'a refused connection is not counted as accepted');
  t.is(refusing.pds[0].mrCount, 0, 'no registration left');
  t.true(refusing.pds[0].dead);
  await waitFor(() => responder.links.size === 0, 'the upstream link of the refused connection closed');

  const outcomes = new Outcomes();
  conn = await RpcRdmaConnection.connect({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port,
    options: { peerKey: `responder-refused-${port}` },
    requester: outcomes,
  });
  conn.submit(call(7));
  await waitFor(() => outcomes.replies.length === 1, 'the next connection served');
  t.is(responder.stats.acceptFailures, 1);
  t.is(responder.stats.connections, 1);
});

/**
 * An idle timeout whose timer never fires within a test: the test places each sweep itself
 * (`Responder.sweepIdle()`), so that a loaded machine's timers cannot decide the outcome.
 */
const MANUAL_SWEEPS = 3_600_000;

/**
 * A responder (`idleTimeoutMs`, `maxConnections`) before an upstream that answers at once with
 * `replyBytes` of result (default 4), except the XIDs in `hold`; `connect` opens a negotiated connection
 * to it, closed at teardown.
 */
async function testResponder(
  t: import('ava').ExecutionContext,
  o: { idleTimeoutMs?: number; maxConnections?: number; hold?: Set<number>; replyBytes?: number } = {},
) {
  const hold = o.hold ?? new Set<number>();
  const held = new Map<number, Socket>();
  const result = Buffer.alloc(o.replyBytes ?? 4, 1);
  const u = await upstream((s, record) => {
    const xid = record.readUInt32BE(0);
    if (hold.has(xid)) held.set(xid, s);
    else s.write(Buffer.concat(frameRecord(reply(xid, result))));
  });
  const { logger, lines } = captureLogger();
  const responder = new Responder({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port: 0,
    upstream: { host: '127.0.0.1', port: u.port },
    registry: defaultRegistry(),
    lingerMs: 2000,
    idleTimeoutMs: o.idleTimeoutMs,
    maxConnections: o.maxConnections,
    logger,
  });
  const { port } = await responder.listen();
  // The sweeps run at listenedAt + k × idleTimeoutMs.
  const listenedAt = Date.now();
  const open: { close(): void }[] = [];
  t.teardown(async () => {
    for (const c of open) c.close();
    await responder.close(1000);
    u.server.close();
    for (const s of u.sockets) s.destroy();
  });
  const connect = async (outcomes = new Outcomes()) => {
    const conn = await RpcRdmaConnection.connect({
      device: await createSoftProvider().openDevice(),
      host: '127.0.0.1',
      port,
      options: { peerKey: `responder-test-${port}` },
      requester: outcomes,
    });
    open.push(conn);
    await waitFor(() => conn.state === 'ready', 'negotiated');
    return conn;
  };
  /** Answers a held call. */
  const answer = (xid: number) =>
    (held.get(xid) as Socket).write(Buffer.concat(frameRecord(reply(xid, Buffer.alloc(4)))));
  return { responder, port, u, lines, open, connect, answer, listenedAt };
}

test('at maxConnections one more RDMA connection is rejected at once, counted and logged; a closed one makes room', async (t) => {
  const w = await testResponder(t, { maxConnections: 2 });
  const first = await w.connect();
  await w.connect();
  const started = Date.now();
  await t.throwsAsync(w.connect());
  t.true(Date.now() - started < 5000, 'rejected, not left to time out');
  t.is(w.responder.stats.refused, 1);
  t.is(w.responder.stats.connections, 2);
  const warn = w.lines.find((r) => r.reason === 'REFUSED_MAX_CONNECTIONS');
  t.like(warn, { open: 2, maxConnections: 2 });

  // The two accepted ones serve; once one closes, a new one is accepted and served.
  const outcomes = new Outcomes();
  first.close();
  await waitFor(() => w.responder.rdmaConnections().length === 1, 'the closed connection gone');
  const next = await w.connect(outcomes);
  next.submit(call(9));
  await waitFor(() => outcomes.replies.length === 1, 'the new connection served');
  t.is(w.responder.stats.connections, 3);
  t.is(w.responder.stats.refused, 1);
});

test('the idle reaper closes a connection with no traffic for one to two periods, and its upstream; busy ones stay', async (t) => {
  // The timer itself is under test here: a period long enough that setting up three connections on a
  // loaded machine fits in the one every new connection is given.
  const IDLE = 1000;
  const w = await testResponder(t, { idleTimeoutMs: IDLE, hold: new Set([500]) });
  const connectedAt = Date.now(); // before the connect: the guarantee runs from the accept
  const idleOne = await w.connect();
  const busyOutcomes = new Outcomes();
  const busy = await w.connect(busyOutcomes);
  const heldOutcomes = new Outcomes();
  const holding = await w.connect(heldOutcomes);
  holding.submit(call(500)); // at the upstream until answered
  let xid = 1000;
  const ticker = setInterval(() => busy.submit(call(xid++)), 100);
  t.teardown(() => clearInterval(ticker));

  await waitFor(() => idleOne.state === 'closed', 'the idle connection closed', 4 * IDLE + 2000);
  // It had a whole period first (new connections count as active), then one without traffic.
  t.true(Date.now() - connectedAt >= IDLE - 10, `closed after ${Date.now() - connectedAt} ms`);
  t.is(w.responder.stats.idleClosed, 1);
  t.like(
    w.lines.find((l) => l.reason === 'IDLE_TIMEOUT'),
    { level: 30, idleTimeoutMs: IDLE },
  );
  await waitFor(() => w.u.ended, "the idle connection's upstream ended");
  await waitFor(() => w.responder.links.size === 2, 'its link gone');

  // Two and a half periods more: the one with traffic and the one with a call at the upstream stay.
  await new Promise((r) => setTimeout(r, 2.5 * IDLE));
  t.is(busy.state, 'ready');
  t.is(holding.state, 'ready');
  t.is(w.responder.stats.idleClosed, 1);
  t.is(busyOutcomes.failures.length, 0);

  // Its reply comes; then both fall silent and go, with nothing lost.
  w.answer(500);
  await waitFor(() => heldOutcomes.replies.length === 1, 'the held reply');
  clearInterval(ticker);
  const sent = xid - 1000;
  await waitFor(() => w.responder.stats.idleClosed === 3, 'both closed once silent', 4 * IDLE + 2000);
  t.is(busyOutcomes.replies.length, sent);
  t.is(busyOutcomes.failures.length + heldOutcomes.failures.length, 0);
  await waitFor(() => w.responder.links.size === 0, 'their links gone with their upstreams');
});

test('the idle reaper closes a peer that completes the MPA exchange and never sends a frame', async (t) => {
  const IDLE = 300;
  const w = await testResponder(t, { idleTimeoutMs: IDLE });
  const sock = netConnect(w.port, '127.0.0.1');
  sock.on('error', () => {});
  t.teardown(() => sock.destroy());
  let received = 0;
  sock.on('data', (d: Buffer) => {
    received += d.length;
  });
  const closed = new Promise<void>((r) => sock.once('close', () => r()));
  await new Promise((r) => sock.once('connect', r));
  sock.write(mpaRequest({ crc: true, revision: 1, privateData: plainPrivateData() }));
  await waitFor(() => received >= 20, 'the MPA reply');
  await waitFor(() => w.responder.links.size === 1, 'the link');
  // Before the reaper, nothing ever closed it: no RTR or first frame is awaited with a timeout.
  await Promise.race([
    closed,
    new Promise((_, reject) => setTimeout(() => reject(new Error('still open')), 4 * IDLE + 2000)),
  ]);
  t.is(w.responder.stats.idleClosed, 1);
  await waitFor(() => w.responder.links.size === 0, 'the link gone');
  await waitFor(() => w.u.ended, 'its upstream ended');
});

test('a pool whose idle connection the responder reaps reconnects and serves the next call', async (t) => {
  const w = await testResponder(t, { idleTimeoutMs: MANUAL_SWEEPS });
  const outcomes = new Outcomes();
  const pool = new ConnectionPool({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port: w.port,
    size: 1,
    requester: outcomes,
    options: { peerKey: `responder-idle-pool-${w.port}` },
    backoff: { initialMs: 50, maxMs: 1000, factor: 2 },
  });
  w.open.push(pool);
  await pool.start();
  pool.submit(call(1));
  await waitFor(() => outcomes.replies.length === 1, 'the first reply');
  w.responder.sweepIdle(); // its reply marked it: unmarked
  t.is(w.responder.stats.idleClosed, 0);
  w.responder.sweepIdle(); // no traffic since: closed
  t.is(w.responder.stats.idleClosed, 1);
  await waitFor(
    () => pool.snapshot().slots[0].reconnects === 1 && pool.snapshot().ready === 1,
    'reconnected',
  );
  pool.submit(call(2));
  await waitFor(() => outcomes.replies.length === 2, 'the reply on the new connection');
  t.is(outcomes.failures.length, 0);
  t.is(w.responder.stats.connections, 2);
});

test('a reply is traffic: a connection is reaped a period or more after its last reply, not at the next sweep', async (t) => {
  const w = await testResponder(t, { idleTimeoutMs: MANUAL_SWEEPS, hold: new Set([600]) });
  const outcomes = new Outcomes();
  const conn = await w.connect(outcomes);
  conn.submit(call(600));
  await waitFor(() => w.u.received.length === 1, 'the call held at the upstream');
  // Sweeps while it is held leave the connection alone (a call at the upstream).
  for (let i = 0; i < 3; i++) w.responder.sweepIdle();
  t.is(w.responder.stats.idleClosed, 0);
  w.answer(600);
  await waitFor(() => outcomes.replies.length === 1, 'the reply');
  w.responder.sweepIdle(); // the first sweep after the reply only unmarks it
  t.is(w.responder.stats.idleClosed, 0, 'not reaped at the next sweep after its reply');
  t.is(conn.state, 'ready');
  w.responder.sweepIdle();
  t.is(w.responder.stats.idleClosed, 1, 'reaped a period after its reply');
  await waitFor(() => conn.state === 'closed', 'closed');
  t.is(outcomes.failures.length, 0);
});

test('a reply exposed for the requester to pull (responder-provided Read chunk) is not cut off by a sweep: the call runs once', async (t) => {
  // With 64 KiB the call left no room for: the reply is exposed for the requester to pull.
  const w = await testResponder(t, { idleTimeoutMs: MANUAL_SWEEPS, replyBytes: 64 * 1024 });
  const { responder, port } = w;
  const conns: RpcRdmaConnection[] = [];
  const got: number[] = [];
  const failed: string[] = [];
  let pool: ConnectionPool | null = null;
  pool = new ConnectionPool({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port,
    size: 1,
    options: { peerKey: `responder-rprc-reap-${port}` },
    backoff: { initialMs: 50, maxMs: 200 },
    onReady: (c) => conns.push(c),
    requester: {
      onReply: (c) => void got.push(c.xid),
      onFailed: (c, e) => {
        failed.push(e.code);
        // As the gateway's router does, within a bound (its hold time): a reaped connection's call goes
        // again once the pool has reconnected.
        if (e.retransmit && failed.length <= 3) setTimeout(() => pool?.submit(c), 100);
      },
    },
  });
  w.open.push(pool);
  await pool.start();
  await waitFor(() => conns.length === 1 && conns[0].state === 'ready', 'ready');
  // The requester's pull is held back (its Read credits taken) while sweeps pass.
  const requester = conns[0] as unknown as { ord: number; readJobs: unknown[] };
  const ord = requester.ord;
  requester.ord = 0;
  pool.submit({ ...call(7), maxReplySize: 100 });
  await waitFor(
    () => [...responder.links].some((l) => (l.conn?.rprcPending.size ?? 0) === 1),
    'the reply exposed',
  );
  for (let i = 0; i < 3; i++) responder.sweepIdle();
  t.is(responder.stats.idleClosed, 0, 'not reaped while its reply waits to be pulled');
  requester.ord = ord;
  pumpReads(conns[0]);
  await waitFor(() => got.length === 1, 'the reply');
  t.deepEqual(
    w.u.received.map((r) => r.readUInt32BE(0)),
    [7],
    'the upstream ran the call once',
  );
  t.deepEqual(failed, []);
});

test('a reaped link whose upstream never closes its side goes anyway, lingerMs after its FIN', async (t) => {
  const sockets: Socket[] = [];
  const server = createServer({ allowHalfOpen: true }, (s) => {
    sockets.push(s);
    s.on('error', () => {});
    s.resume(); // reads everything, never ends its side
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const responder = new Responder({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port: 0,
    upstream: { host: '127.0.0.1', port: (server.address() as { port: number }).port },
    registry: defaultRegistry(),
    idleTimeoutMs: 300,
    lingerMs: 500,
  });
  const { port } = await responder.listen();
  const conn = await RpcRdmaConnection.connect({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port,
    options: { peerKey: `responder-halfopen-${port}` },
    requester: new Outcomes(),
  });
  t.teardown(async () => {
    conn.close();
    await responder.close(200);
    server.close();
    for (const s of sockets) s.destroy();
  });
  await waitFor(() => responder.stats.idleClosed === 1, 'reaped', 3000);
  await waitFor(
    () => responder.links.size === 0,
    'the link gone although the upstream kept its side open',
    3000,
  );
  t.is(responder.stats.links, 0);
});

test('a call whose Read chunk is still being pulled is not reaped, however many sweeps pass', async (t) => {
  const w = await testResponder(t, { idleTimeoutMs: MANUAL_SWEEPS });
  const outcomes = new Outcomes();
  const conn = await w.connect(outcomes);
  const server = w.responder.rdmaConnections()[0] as unknown as RpcRdmaConnection & {
    ord: number;
    readsOutstanding: number;
  };
  // Its RDMA Reads wait, as behind a busy ORD (a slow peer): every Read the ORD allows counted out.
  // (Not an ORD of 0, which refuses a call with Read chunks at once.)
  server.readsOutstanding = server.ord;
  const data = Buffer.alloc(8192, 0x5a);
  const withChunk: TransportCall = {
    xid: 31,
    message: encodeCall(31, PROG, 1, 1, Buffer.concat([Buffer.from([0, 0, 0x20, 0]), data])),
    ddpArgs: [{ offset: 40 + 4, length: data.length }],
    ddpResults: [],
    maxReplySize: -1,
  };
  conn.submit(withChunk);
  await waitFor(() => server.inboundActive === 1, 'the call waiting for its Read chunk');
  for (let i = 0; i < 3; i++) w.responder.sweepIdle();
  t.is(w.responder.stats.idleClosed, 0, 'not reaped while its chunk is being pulled');
  t.is(conn.state, 'ready');
  server.readsOutstanding = 0;
  pumpReads(server);
  await waitFor(() => outcomes.replies.length === 1, 'the reply');
  t.is(outcomes.failures.length, 0);
  t.is(w.u.received.length, 1, 'the upstream got it once');
});
