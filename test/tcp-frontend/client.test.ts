import { createServer, type Server, type Socket } from 'node:net';
import test from 'ava';
import { AcceptStat, MsgType } from '../../rpc/constants.js';
import {
  encodeAcceptedReply,
  encodeCallHeader,
  peekMsgType,
  peekXid,
  RpcCallHeader,
} from '../../rpc/message.js';
import { XdrWriter } from '../../rpc/xdr.js';
import { type CallReceiver, RpcClient } from '../../tcp-frontend/client.js';
import { type FrontendConnection, type FrontendHandler, FrontendServer } from '../../tcp-frontend/server.js';
import { encodeCall, silentServer, waitFor } from '../gateway/helpers.js';

const PROG = 0x2000_0002;

/** Holds calls; answers SUCCESS with results = the call's procedure number (so a mix-up shows). */
class Holder implements FrontendHandler {
  held: { conn: FrontendConnection; xid: number; proc: number }[] = [];
  other: Buffer[] = [];
  maxInFlight = 0;
  private readonly call = new RpcCallHeader();

  onRecord(conn: FrontendConnection, record: Buffer): void {
    this.maxInFlight = Math.max(this.maxInFlight, conn.inFlight);
    if (peekMsgType(record) !== MsgType.CALL) {
      this.other.push(Buffer.from(record));
      conn.release();
      return;
    }
    this.call.decode(record);
    this.held.push({ conn, xid: this.call.xid, proc: this.call.proc });
  }

  onClose(): void {}

  answer(order: 'fifo' | 'reverse' = 'fifo'): void {
    const list = this.held.splice(0);
    if (order === 'reverse') list.reverse();
    for (const { conn, xid, proc } of list) {
      const w = new XdrWriter(32);
      encodeAcceptedReply(w, { xid, acceptStat: AcceptStat.SUCCESS });
      w.u32(proc);
      conn.sendReply([w.toBuffer()]);
    }
  }
}

async function start(h: FrontendHandler) {
  const server = new FrontendServer({ listen: [{ host: '127.0.0.1', port: 0 }], handler: h });
  const [a] = await server.listen();
  return { server, port: a.port };
}

/** A raw TCP server that answers each connection with `respond(socket)`. */
async function rawServer(respond: (s: Socket) => void): Promise<{ server: Server; port: number }> {
  const server = createServer(respond);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const a = server.address();
  return { server, port: typeof a === 'object' && a ? a.port : 0 };
}

test('replies out of order are matched to their calls by XID; XIDs are unique', async (t) => {
  const h = new Holder();
  const { server, port } = await start(h);
  const client = await RpcClient.connect({ host: '127.0.0.1', port });
  const calls = Array.from({ length: 40 }, (_, i) => client.call(PROG, 1, i));
  await waitFor(() => h.held.length === 40, 'every call');
  t.is(new Set(h.held.map((c) => c.xid)).size, 40);
  h.answer('reverse');
  const replies = await Promise.all(calls);
  replies.forEach((r, i) => {
    t.is(r.body.readUInt32BE(0), i, `reply ${i} matched to its call`);
    t.is(r.acceptStat, AcceptStat.SUCCESS);
  });
  t.is(client.stats.repliesReceived, 40);
  await client.close();
  await server.close();
});

test('at most maxInFlight calls are on the wire; the rest wait locally', async (t) => {
  const h = new Holder();
  const { server, port } = await start(h);
  const client = await RpcClient.connect({ host: '127.0.0.1', port, maxInFlight: 3 });
  const calls = Array.from({ length: 10 }, (_, i) => client.call(PROG, 1, i));
  t.is(client.queued, 7);
  await waitFor(() => h.held.length === 3, 'three calls');
  await new Promise((r) => setTimeout(r, 50));
  t.is(h.held.length, 3);
  for (let round = 0; round < 10 && client.outstanding > 0; round++) {
    h.answer();
    await waitFor(() => h.held.length > 0 || client.outstanding === 0, 'more calls');
  }
  const replies = await Promise.all(calls);
  t.deepEqual(
    replies.map((r) => r.body.readUInt32BE(0)),
    Array.from({ length: 10 }, (_, i) => i),
  );
  t.is(h.maxInFlight, 3);
  await client.close();
  await server.close();
});

test('a call times out; its late reply is counted and ignored', async (t) => {
  const h = new Holder();
  const { server, port } = await start(h);
  const client = await RpcClient.connect({ host: '127.0.0.1', port });
  await t.throwsAsync(client.call(PROG, 1, 0, [], { timeoutMs: 50 }), { code: 'ERR_CLIENT_TIMEOUT' });
  // On a busy machine the 50 ms can pass before the server has read the call: answered only once it has.
  await waitFor(() => h.held.length === 1, 'the call at the server');
  h.answer();
  await waitFor(() => client.stats.lateReplies === 1, 'the late reply');
  t.is(client.outstanding, 0);
  await client.close();
  await server.close();
});

test('calls outstanding when the server goes away fail with ERR_CLIENT_CLOSED', async (t) => {
  const h = new Holder();
  const { server, port } = await start(h);
  let closeError: unknown = 'not called';
  const client = await RpcClient.connect({ host: '127.0.0.1', port, onClose: (e) => (closeError = e) });
  const calls = [client.call(PROG, 1, 0), client.call(PROG, 1, 1)];
  await waitFor(() => h.held.length === 2, 'the calls');
  await server.close({ drainTimeoutMs: 10 });
  for (const c of calls) await t.throwsAsync(c, { code: 'ERR_CLIENT_CLOSED' });
  t.true(client.closed);
  t.is((closeError as { code: string }).code, 'ERR_CLIENT_CLOSED');
  await t.throwsAsync(client.call(PROG, 1, 2), { code: 'ERR_CLIENT_CLOSED' });
});

test('a CALL from the server (callback) reaches onCall, and the answer goes back on the same connection', async (t) => {
  const h = new Holder();
  const { server, port } = await start(h);
  const callbacks: number[] = [];
  const client = await RpcClient.connect({
    host: '127.0.0.1',
    port,
    onCall: (record, c) => {
      const xid = peekXid(record);
      callbacks.push(xid);
      const w = new XdrWriter(32);
      encodeAcceptedReply(w, { xid, acceptStat: AcceptStat.SUCCESS });
      c.sendRecord([w.toBuffer()]);
    },
  });
  const forward = client.call(PROG, 1, 5);
  await waitFor(() => h.held.length === 1, 'the forward call');
  const conn = h.held[0].conn;
  conn.sendRecord([encodeCall(0xcafe, 0x4000_0000, 1, 1)]);
  await waitFor(() => h.other.length === 1, 'the callback reply');
  t.deepEqual(callbacks, [0xcafe]);
  t.is(peekXid(h.other[0]), 0xcafe);
  t.is(peekMsgType(h.other[0]), MsgType.REPLY);
  h.answer();
  t.is((await forward).body.readUInt32BE(0), 5);
  t.is(client.stats.callbacksReceived, 1);
  await client.close();
  await server.close();
});

test('callRaw forwards a call with the caller’s XID and refuses an XID already outstanding', async (t) => {
  const h = new Holder();
  const { server, port } = await start(h);
  const client = await RpcClient.connect({ host: '127.0.0.1', port });
  const w = new XdrWriter(64);
  encodeCallHeader(w, { xid: 0x1234, prog: PROG, vers: 1, proc: 9 });
  const message = w.toBuffer();
  // Split in two parts: forwarding a header and a body as separate buffers is the point.
  const p = client.callRaw([message.subarray(0, 10), message.subarray(10)]);
  await t.throwsAsync(client.callRaw([message]), { code: 'ERR_CLIENT_XID_IN_USE' });
  await waitFor(() => h.held.length === 1, 'the call');
  t.is(h.held[0].xid, 0x1234);
  h.answer();
  const r = await p;
  t.is(r.xid, 0x1234);
  t.is(r.body.readUInt32BE(0), 9);
  await client.close();
  await server.close();
});

test("forwardRaw hands each outcome to its receiver with the caller's token, refusals before it returns", async (t) => {
  const h = new Holder();
  const { server, port } = await start(h);
  const client = await RpcClient.connect({ host: '127.0.0.1', port });
  const events: string[] = [];
  const receiver: CallReceiver<{ name: string }> = {
    onCallReply: (token, reply) =>
      events.push(`${token.name} reply xid ${reply.xid} proc ${reply.body.readUInt32BE(0)}`),
    onCallFailed: (token, err) => events.push(`${token.name} ${err.code}`),
  };
  const message = (xid: number, proc: number) => {
    const w = new XdrWriter(64);
    encodeCallHeader(w, { xid, prog: PROG, vers: 1, proc });
    return w.toBuffer();
  };
  client.forwardRaw([message(0x51, 3)], receiver, { name: 'a' });
  client.forwardRaw([message(0x52, 4)], receiver, { name: 'b' });
  client.forwardRaw([message(0x51, 5)], receiver, { name: 'dup' });
  t.deepEqual(events, ['dup ERR_CLIENT_XID_IN_USE'], 'the refusal is reported before forwardRaw returns');
  await waitFor(() => h.held.length === 2, 'both calls');
  h.answer('reverse');
  await waitFor(() => events.length === 3, 'both replies');
  t.deepEqual(events.slice(1), ['b reply xid 82 proc 4', 'a reply xid 81 proc 3']);
  // One left outstanding when the connection goes: its receiver hears ERR_CLIENT_CLOSED, once.
  client.forwardRaw([message(0x53, 6)], receiver, { name: 'c' });
  await waitFor(() => h.held.length === 1, 'the third call');
  h.held[0].conn.destroy('TEST_CLOSE', 'the test closes the server side');
  await waitFor(() => events.length === 4, 'the failure');
  t.is(events[3], 'c ERR_CLIENT_CLOSED');
  client.forwardRaw([message(0x54, 7)], receiver, { name: 'late' });
  t.is(events[4], 'late ERR_CLIENT_CLOSED', 'a closed client refuses at once');
  t.is(events.length, 5);
  await server.close();
});

test('a reply whose header does not decode fails that call only', async (t) => {
  const { server, port } = await rawServer((s) => {
    s.once('data', (d: Buffer) => {
      const xid = d.readUInt32BE(4);
      const bad = Buffer.alloc(16);
      bad.writeUInt32BE((0x8000_0000 | 12) >>> 0, 0);
      bad.writeUInt32BE(xid, 4);
      bad.writeUInt32BE(MsgType.REPLY, 8);
      bad.writeUInt32BE(7, 12); // reply_stat 7 does not exist
      s.write(bad);
    });
  });
  const client = await RpcClient.connect({ host: '127.0.0.1', port });
  const err = await t.throwsAsync(client.call(PROG, 1, 0), { code: 'ERR_CLIENT_BAD_REPLY' });
  t.is((err as unknown as { details: { cause: { code: string } } }).details.cause.code, 'ERR_RPC_REPLY_STAT');
  client.destroy();
  server.close();
});

test('a server that breaks record marking closes the client with ERR_CLIENT_STREAM', async (t) => {
  const { server, port } = await rawServer((s) => {
    s.once('data', () => s.write(Buffer.from([0x80, 0, 0, 0]))); // an empty record
  });
  const client = await RpcClient.connect({ host: '127.0.0.1', port });
  await t.throwsAsync(client.call(PROG, 1, 0), { code: 'ERR_CLIENT_STREAM' });
  t.true(client.closed);
  server.close();
});

test('connecting to a closed port fails with ERR_CLIENT_CONNECT', async (t) => {
  const { server, port } = await rawServer(() => {});
  await new Promise<void>((r) => server.close(() => r()));
  const err = await t.throwsAsync(RpcClient.connect({ host: '127.0.0.1', port }), {
    code: 'ERR_CLIENT_CONNECT',
  });
  t.is((err as unknown as { details: { errno: string } }).details.errno, 'ECONNREFUSED');
});

test('close() waits for outstanding calls before closing', async (t) => {
  const h = new Holder();
  const { server, port } = await start(h);
  const client = await RpcClient.connect({ host: '127.0.0.1', port });
  const p = client.call(PROG, 1, 3);
  const closing = client.close();
  await waitFor(() => h.held.length === 1, 'the call');
  await new Promise((r) => setTimeout(r, 30));
  t.false(client.closed);
  h.answer();
  t.is((await p).body.readUInt32BE(0), 3);
  await closing;
  t.true(client.closed);
  await server.close();
});

test('close() against a server that neither answers nor closes gives up after its timeout', async (t) => {
  const silent = await silentServer();
  t.teardown(() => silent.close());
  // A call outstanding: close() waits for it, then destroys the connection at the deadline and the call
  // fails with the typed reason.
  let closeError: unknown = 'not called';
  const a = await RpcClient.connect({
    host: '127.0.0.1',
    port: silent.port,
    onClose: (e) => (closeError = e),
  });
  const call = a.call(PROG, 1, 0);
  call.catch(() => undefined); // asserted below
  await waitFor(() => silent.received() > 0, 'the call at the server');
  const started = Date.now();
  const closing = await Promise.race([
    a.close(200).then(() => 'closed'),
    new Promise((r) => setTimeout(() => r('still waiting after 3 s'), 3000)),
  ]);
  t.is(closing, 'closed');
  t.true(Date.now() - started < 1000, `closed after ${Date.now() - started} ms`);
  t.true(a.closed);
  await t.throwsAsync(call, { code: 'ERR_CLIENT_CLOSE_TIMEOUT' });
  t.is((closeError as { code: string }).code, 'ERR_CLIENT_CLOSE_TIMEOUT');
  // Nothing outstanding, but the server never closes its side: the default bound (closeTimeoutMs).
  const b = await RpcClient.connect({ host: '127.0.0.1', port: silent.port, closeTimeoutMs: 200 });
  const closingIdle = await Promise.race([
    b.close().then(() => 'closed'),
    new Promise((r) => setTimeout(() => r('still waiting after 3 s'), 3000)),
  ]);
  t.is(closingIdle, 'closed');
  t.true(b.closed);
});
