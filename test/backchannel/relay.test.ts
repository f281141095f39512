/**
 * The NFSv4.1 backchannel relay and session affinity through the real chain: scripted NFSv4.1 clients
 * (raw TCP) → gateway frontend → router → pool of 3 RDMA connections (soft provider) → embedded
 * responder → a scripted NFSv4.1 server (TCP) that answers CREATE_SESSION / SEQUENCE / DESTROY_SESSION
 * and sends CB_NULL and CB_COMPOUND(CB_SEQUENCE, CB_RECALL) on the TCP connection its session came in on.
 * Every message on both ends is hand-made from RFC 8881 XDR (nfs41-bytes.ts), not from the gateway's
 * encoders.
 */
import { createServer, type Server, type Socket } from 'node:net';
import test from 'ava';
import { type Gateway, startGateway } from '../../gateway/gateway.js';
import { frameRecord, RecordDecoder } from '../../tcp-frontend/record-marking.js';
import { connectRaw, waitFor } from '../gateway/helpers.js';
import { testConfig } from '../integration/helpers.js';
import {
  cbCompound,
  cbCompoundReply,
  cbNull,
  cbOp,
  cbRes,
  compoundCall,
  compoundReply,
  NFS4ERR,
  op,
  res,
  rpcReply,
  sessionId,
} from './nfs41-bytes.js';

/** Offset of the first operation code in a hand-made COMPOUND call with tag 'hand' (AUTH_NONE header 40). */
const FIRST_OP = 40 + 8 + 8;

/** The scripted NFSv4.1 server behind the responder. */
class ScriptedServer {
  readonly server: Server = createServer();
  readonly sockets: Socket[] = [];
  port = 0;
  private nextSession = 1;
  /** Session id (hex) → the upstream socket index it was created on. */
  readonly createdOn = new Map<string, number>();
  /** Session id (hex) → upstream socket indexes associated with it (created on, or SEQUENCE seen on). */
  readonly boundTo = new Map<string, Set<number>>();
  /** Session id (hex) → upstream socket indexes its SEQUENCE calls arrived on. */
  readonly sequenceOn = new Map<string, number[]>();
  /** Replies to our callbacks: socket index → XIDs. */
  readonly cbReplies: { socket: number; xid: number; record: Buffer }[] = [];
  /** Whether CREATE_SESSION n (1-based) grants the backchannel on its connection. */
  backChannelFor = (_n: number) => true;
  /** bctsr_dir of BIND_CONN_TO_SESSION replies (CDFS4_FORE 1, CDFS4_BACK 2, CDFS4_BOTH 3). */
  bindDir = 3;
  destroyed: string[] = [];

  async start(): Promise<void> {
    this.server.on('connection', (s) => {
      const index = this.sockets.push(s) - 1;
      const d = new RecordDecoder((r) => this.onRecord(index, s, r));
      s.on('data', (c) => d.push(c));
      s.on('error', () => {});
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.port = (this.server.address() as { port: number }).port;
  }

  private onRecord(index: number, s: Socket, r: Buffer): void {
    const xid = r.readUInt32BE(0);
    if (r.readUInt32BE(4) === 1) {
      this.cbReplies.push({ socket: index, xid, record: Buffer.from(r) });
      return;
    }
    const first = r.readUInt32BE(FIRST_OP);
    let reply: Buffer;
    if (first === 43) {
      const n = this.nextSession++;
      const sid = sessionId(n);
      this.createdOn.set(sid.toString('hex'), index);
      this.boundTo.set(sid.toString('hex'), new Set([index]));
      reply = compoundReply(xid, 0, [res.createSession(sid, this.backChannelFor(n) ? 0x2 : 0)]);
    } else if (first === 41) {
      const sid = r.subarray(FIRST_OP + 4, FIRST_OP + 20);
      this.boundTo.get(sid.toString('hex'))?.add(index);
      reply = compoundReply(xid, 0, [res.bindConnToSession(sid, this.bindDir)]);
    } else if (first === 53 || first === 44) {
      reply = this.evaluate(index, xid, r);
    } else {
      reply = compoundReply(xid, NFS4ERR.OP_ILLEGAL, []);
    }
    s.write(Buffer.concat(frameRecord(reply)));
  }

  /**
   * Evaluates a COMPOUND of SEQUENCE, PUTROOTFH, LOOKUP (always NFS4ERR_NOENT) and DESTROY_SESSION
   * operations in order, stopping at the first that fails (RFC 8881 §16.2.3). DESTROY_SESSION follows
   * §18.37.3: NFS4ERR_NOT_ONLY_OP when it is not alone without SEQUENCE, or not last after SEQUENCE of
   * its own session; NFS4ERR_BADSESSION for a session not (or no longer) there; and
   * NFS4ERR_CONN_NOT_BOUND_TO_SESSION on a connection not associated with it (the one it was created
   * on, or one SEQUENCE bound it to: SP4_NONE, §2.10.3.1).
   */
  private evaluate(index: number, xid: number, r: Buffer): Buffer {
    const numOps = r.readUInt32BE(FIRST_OP - 4);
    const results: Buffer[] = [];
    let status = 0;
    let inSession = '';
    let p = FIRST_OP;
    for (let i = 0; i < numOps && status === 0; i++) {
      const opcode = r.readUInt32BE(p);
      p += 4;
      if (opcode === 53) {
        const sid = r.subarray(p, p + 16);
        const key = sid.toString('hex');
        p += 32;
        if (i === 0) {
          inSession = key;
          const list = this.sequenceOn.get(key) ?? [];
          list.push(index);
          this.sequenceOn.set(key, list);
        }
        this.boundTo.get(key)?.add(index);
        results.push(res.sequence(sid));
      } else if (opcode === 24) {
        results.push(res.putrootfh());
      } else if (opcode === 15) {
        p += 4 + ((r.readUInt32BE(p) + 3) & ~3);
        status = NFS4ERR.NOENT;
      } else if (opcode === 44) {
        const key = r.subarray(p, p + 16).toString('hex');
        p += 16;
        const bound = this.boundTo.get(key);
        if ((inSession === '' && numOps > 1) || (inSession === key && i !== numOps - 1)) {
          status = NFS4ERR.NOT_ONLY_OP;
        } else if (bound === undefined || this.destroyed.includes(key)) status = NFS4ERR.BADSESSION;
        else if (!bound.has(index)) status = NFS4ERR.CONN_NOT_BOUND_TO_SESSION;
        else {
          this.destroyed.push(key);
          results.push(res.destroySession());
        }
      } else {
        status = NFS4ERR.OP_ILLEGAL;
      }
      if (status !== 0) results.push(res.error(status === NFS4ERR.OP_ILLEGAL ? 10044 : opcode, status));
    }
    return compoundReply(xid, status, results);
  }

  send(socket: number, call: Buffer): void {
    this.sockets[socket].write(Buffer.concat(frameRecord(call)));
  }

  socketOf(sid: Buffer): number {
    return this.createdOn.get(sid.toString('hex')) as number;
  }

  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((r) => this.server.close(() => r()));
  }
}

/** A scripted NFSv4.1 client on a raw TCP connection to the gateway; it answers callbacks. */
class ScriptedClient {
  readonly replies = new Map<number, Buffer>();
  readonly callbacks: Buffer[] = [];
  sid: Buffer = Buffer.alloc(0);
  private nextXid = 1;
  answerCallbacks = true;
  private constructor(readonly socket: Socket) {
    const d = new RecordDecoder((r) => this.onRecord(Buffer.from(r)));
    socket.on('data', (c) => d.push(c));
    socket.on('error', () => {});
  }

  static async connect(port: number): Promise<ScriptedClient> {
    return new ScriptedClient(await connectRaw(port));
  }

  private onRecord(r: Buffer): void {
    const xid = r.readUInt32BE(0);
    if (r.readUInt32BE(4) === 1) {
      this.replies.set(xid, r);
      return;
    }
    this.callbacks.push(r);
    if (!this.answerCallbacks) return;
    const proc = r.readUInt32BE(20);
    // CB_NULL: empty results; CB_COMPOUND: CB_SEQUENCE + CB_RECALL results (RFC 8881 §20.9.3, §20.2.3).
    const answer =
      proc === 0
        ? rpcReply(xid, Buffer.alloc(0))
        : cbCompoundReply(xid, [cbRes.sequence(this.sid), cbRes.recall()]);
    this.socket.write(Buffer.concat(frameRecord(answer)));
  }

  /** Sends COMPOUND calls at once (pipelined); resolves with their replies in order. */
  async call(...calls: ((xid: number) => Buffer)[]): Promise<Buffer[]> {
    const xids: number[] = [];
    for (const make of calls) {
      const xid = this.nextXid++;
      xids.push(xid);
      this.socket.write(Buffer.concat(frameRecord(make(xid))));
    }
    await waitFor(() => xids.every((x) => this.replies.has(x)), `replies to ${xids.length} calls`, 8000);
    return xids.map((x) => this.replies.get(x) as Buffer);
  }

  async createSession(clientId: bigint): Promise<Buffer> {
    const [r] = await this.call((x) => compoundCall(x, 1, [op.createSession(clientId)]));
    // COMPOUND4res: status, tag 'hand' (8), count, resop, status, then the session id (RFC 8881 §18.36.2).
    t_assert(r.readUInt32BE(24) === 0, 'CREATE_SESSION succeeded');
    this.sid = Buffer.from(r.subarray(24 + 4 + 8 + 12, 24 + 4 + 8 + 12 + 16));
    return this.sid;
  }

  sequence(n: number): ((xid: number) => Buffer)[] {
    return Array.from(
      { length: n },
      (_, i) => (x: number) => compoundCall(x, 1, [op.sequence(this.sid, i + 2, i % 8), op.putrootfh()]),
    );
  }
}

function t_assert(cond: boolean, what: string): void {
  if (!cond) throw new Error(`expected: ${what}`);
}

async function chain(
  o: { callbackTimeoutMs?: number; routerTickMs?: number } = {},
): Promise<{ g: Gateway; up: ScriptedServer; port: number }> {
  const up = new ScriptedServer();
  await up.start();
  const config = testConfig({ poolSize: 3 });
  config.upstream = { host: '127.0.0.1', port: up.port };
  const g = await startGateway({ config, backoff: { initialMs: 50, maxMs: 500 }, ...o });
  await waitFor(() => g.pool.snapshot().ready === 3, 'three ready RDMA connections');
  return { g, up, port: g.addresses[0].port };
}

/** Takes every RDMA connection but the first out of rotation: all clients' calls share that one. */
function oneConnection(g: Gateway): void {
  for (const c of g.pool.connections().slice(1)) g.router.setOffline(c, true);
}

async function stop(g: Gateway, up: ScriptedServer, clients: ScriptedClient[]): Promise<void> {
  for (const c of clients) c.socket.destroy();
  await g.stop(1000);
  await up.close();
}

test.serial(
  'two sessions: affinity on a pool of 3, callbacks reach their owners, answers return with the server XID',
  async (t) => {
    const { g, up, port } = await chain();
    const a = await ScriptedClient.connect(port);
    const b = await ScriptedClient.connect(port);
    // Session 1 (a) gets the backchannel on its connection; session 2 (b) does not (csr_flags 0).
    up.backChannelFor = (n) => n === 1;
    try {
      const sa = await a.createSession(0xa1n);
      const sb = await b.createSession(0xb2n);
      t.is(g.router.snapshot().sessionsLearned, 2);
      t.is(g.router.snapshot().sessions, 2);
      // Pipelined: without affinity the least-loaded choice spreads 12 calls over the 3 connections.
      await Promise.all([a.call(...a.sequence(12)), b.call(...b.sequence(12))]);
      for (const [who, sid] of [
        ['a', sa],
        ['b', sb],
      ] as const) {
        const on = up.sequenceOn.get(sid.toString('hex')) ?? [];
        t.is(on.length, 12, `${who}: 12 SEQUENCE calls`);
        t.deepEqual(
          new Set(on),
          new Set([up.socketOf(sid)]),
          `${who}: all on the connection of CREATE_SESSION`,
        );
      }
      t.is(g.router.snapshot().sessionMoves, 0);

      // CB_NULL on a's connection goes to a (its session owns that backchannel); CB_RECALL naming b's
      // session goes to b; the same server XID on two connections reaches a twice under distinct XIDs.
      const onA = up.socketOf(sa);
      const other = (onA + 1) % up.sockets.length;
      t.true(up.sockets.length >= 2, 'the responder opened an upstream connection per RDMA connection used');
      const fh = Buffer.from('a file handle of 28 bytes...');
      up.send(onA, cbNull(0xcb000001));
      up.send(
        up.socketOf(sb),
        cbCompound(0xcb000002, 1, [cbOp.sequence(sb), cbOp.recall(Buffer.alloc(12, 7), fh)]),
      );
      up.send(onA, cbCompound(0xcb000003, 1, [cbOp.sequence(sa), cbOp.recall(Buffer.alloc(12, 8), fh)]));
      up.send(other, cbCompound(0xcb000003, 1, [cbOp.sequence(sa), cbOp.recall(Buffer.alloc(12, 9), fh)]));
      await waitFor(() => up.cbReplies.length === 4, 'four callback replies at the server');

      t.is(a.callbacks.length, 3);
      t.is(b.callbacks.length, 1);
      t.is(a.callbacks[0].readUInt32BE(20), 0, 'a got the CB_NULL');
      t.is(b.callbacks[0].subarray(-fh.length - 4 - 4).readUInt32BE(4), fh.length, 'b got the CB_RECALL');
      const aXids = a.callbacks.map((c) => c.readUInt32BE(0));
      t.is(new Set(aXids).size, 3, 'distinct XIDs on the client connection');
      // The bytes after the XID are the server's, unchanged.
      t.deepEqual(
        b.callbacks[0].subarray(4),
        cbCompound(0, 1, [cbOp.sequence(sb), cbOp.recall(Buffer.alloc(12, 7), fh)]).subarray(4),
      );

      const bySocket = up.cbReplies.map((r) => `${r.socket}:${r.xid.toString(16)}`).sort();
      const want = [
        `${onA}:cb000001`,
        `${up.socketOf(sb)}:cb000002`,
        `${onA}:cb000003`,
        `${other}:cb000003`,
      ].sort();
      t.deepEqual(bySocket, want, 'each answer came back on its connection with the server XID');
      const recallReply = up.cbReplies.find((r) => r.xid === 0xcb000002)?.record as Buffer;
      t.deepEqual(
        recallReply.subarray(4),
        cbCompoundReply(0, [cbRes.sequence(sb), cbRes.recall()]).subarray(4),
      );

      const s = g.router.snapshot();
      t.is(s.backchannelCalls, 4);
      t.is(s.backchannelReplies, 4);
      t.is(s.backchannelOrphans, 0);

      // DESTROY_SESSION (after SEQUENCE, RFC 8881 §18.37) forgets a's session.
      await a.call((x) => compoundCall(x, 1, [op.sequence(sa, 50), op.destroySession(sa)]));
      t.deepEqual(up.destroyed, [sa.toString('hex')]);
      t.is(g.router.snapshot().sessionsDestroyed, 1);
      t.is(g.router.snapshot().sessions, 1);
      // Its CB_NULL now has no owner on that connection (b's session has no backchannel there).
      up.send(onA, cbNull(0xcb000009));
      await waitFor(() => g.router.snapshot().backchannelOrphans === 1, 'the orphan counted');
    } finally {
      await stop(g, up, [a, b]);
    }
  },
);

test.serial(
  'DESTROY_SESSION inside a longer COMPOUND (RFC 8881 §18.37.3): the session it names is forgotten when it succeeded',
  async (t) => {
    const { g, up, port } = await chain();
    const a = await ScriptedClient.connect(port);
    try {
      // Three sessions of one client, one after the other: idle connections take turns, so each is
      // created (and its connection associated with it) on another connection of the pool.
      const s2 = await a.createSession(0x12n);
      const s3 = await a.createSession(0x13n);
      const s1 = await a.createSession(0x11n);
      t.is(g.router.snapshot().sessions, 3);
      t.is(new Set([s1, s2, s3].map((s) => up.socketOf(s))).size, 3, 'three connections');
      const status = (reply: Buffer) => reply.readUInt32BE(24);

      // Another session's DESTROY_SESSION in the middle, and a LOOKUP after it that fails: the COMPOUND
      // fails (NFS4ERR_NOENT) but DESTROY_SESSION succeeded. The server accepts it only on a connection
      // associated with s2, not s1's: the gateway routes the call by the session it destroys.
      const [r1] = await a.call((x) =>
        compoundCall(x, 1, [op.sequence(s1, 2), op.putrootfh(), op.destroySession(s2), op.lookup('missing')]),
      );
      t.is(status(r1), NFS4ERR.NOENT);
      t.deepEqual(up.destroyed, [s2.toString('hex')], 'the server destroyed s2');
      t.is(g.router.snapshot().sessionsDestroyed, 1);
      t.is(g.router.snapshot().sessions, 2);

      // Its own session's DESTROY_SESSION not last: NFS4ERR_NOT_ONLY_OP; s1 stays known.
      const [r2] = await a.call((x) =>
        compoundCall(x, 1, [op.sequence(s1, 3), op.destroySession(s1), op.putrootfh()]),
      );
      t.is(status(r2), NFS4ERR.NOT_ONLY_OP);
      t.is(g.router.snapshot().sessions, 2);

      // Its own session's DESTROY_SESSION last, after other operations: s3 is forgotten.
      const [r3] = await a.call((x) =>
        compoundCall(x, 1, [op.sequence(s3, 2), op.putrootfh(), op.destroySession(s3)]),
      );
      t.is(status(r3), 0);
      t.deepEqual(up.destroyed, [s2.toString('hex'), s3.toString('hex')]);
      t.is(g.router.snapshot().sessionsDestroyed, 2);
      t.is(g.router.snapshot().sessions, 1);

      // s1 still has its owner: a recall naming it reaches a.
      up.send(
        up.socketOf(s1),
        cbCompound(0x5e000001, 1, [cbOp.sequence(s1), cbOp.recall(Buffer.alloc(12, 5), Buffer.alloc(8))]),
      );
      await waitFor(() => up.cbReplies.length === 1, 'the recall answered');
      t.is(a.callbacks.length, 1);
      t.is(g.router.snapshot().backchannelOrphans, 0);
    } finally {
      await stop(g, up, [a]);
    }
  },
);

test.serial(
  'a departed client: its callback is counted and gets no answer; an unanswered one too',
  async (t) => {
    const { g, up, port } = await chain();
    const c = await ScriptedClient.connect(port);
    const d = await ScriptedClient.connect(port);
    d.answerCallbacks = false;
    try {
      const sc = await c.createSession(0xc3n);
      const sd = await d.createSession(0xd4n);
      // d receives a recall and leaves without answering it.
      up.send(
        up.socketOf(sd),
        cbCompound(0xdd000001, 1, [cbOp.sequence(sd), cbOp.recall(Buffer.alloc(12), Buffer.alloc(8))]),
      );
      await waitFor(() => d.callbacks.length === 1, 'd got the recall');
      c.socket.destroy();
      d.socket.destroy();
      await waitFor(() => g.router.snapshot().sessionsDropped === 2, 'both sessions forgotten');
      t.is(g.router.snapshot().sessions, 0);
      t.is(g.router.snapshot().backchannelUnanswered, 1);
      up.send(
        up.socketOf(sc),
        cbCompound(0xcc000001, 1, [cbOp.sequence(sc), cbOp.recall(Buffer.alloc(12), Buffer.alloc(8))]),
      );
      up.send(up.socketOf(sc), cbNull(0xcc000002));
      // d's unanswered recall was refused at the RPC-over-RDMA level when d left, so its backward credit
      // came back (the grant is small) and these two reach the relay at all.
      await waitFor(() => g.router.snapshot().backchannelOrphans === 2, 'two orphans counted');
      // The responder role saw all three fail and answered none of them to the server.
      await waitFor(() => g.embedded?.responder.stats.callbacksFailed === 3, 'three failed backward calls');
      await new Promise((r) => setTimeout(r, 300));
      t.is(up.cbReplies.length, 0, 'no invented answer reached the server');
      t.is(g.router.snapshot().backchannelReplies, 0);
    } finally {
      await stop(g, up, [c, d]);
    }
  },
);

test.serial(
  'the session follows its calls when its connection is gone, and keeps them together there',
  async (t) => {
    const { g, up, port } = await chain();
    const a = await ScriptedClient.connect(port);
    try {
      const sa = await a.createSession(0xe5n);
      const first = up.socketOf(sa);
      await a.call(...a.sequence(3));
      // Losing the upstream connection takes its RDMA connection with it (responder role).
      up.sockets[first].destroy();
      await waitFor(
        () => g.router.snapshot().sessionMoves === 0 && g.pool.snapshot().ready < 3,
        'a connection lost',
      );
      await a.call(...a.sequence(9));
      const on = up.sequenceOn.get(sa.toString('hex')) ?? [];
      t.is(on.length, 12);
      const after = on.slice(3);
      t.is(new Set(after).size, 1, `after the loss all on one connection: ${after}`);
      t.not(after[0], first);
      t.is(g.router.snapshot().sessionMoves, 1);
    } finally {
      await stop(g, up, [a]);
    }
  },
);

test.serial(
  'a client that reconnects and goes on with its session gets that session’s callbacks again',
  async (t) => {
    const { g, up, port } = await chain();
    const a = await ScriptedClient.connect(port);
    let again: ScriptedClient | undefined;
    try {
      const sa = await a.createSession(0xf6n);
      a.socket.destroy();
      await waitFor(() => g.router.snapshot().sessionsDropped === 1, 'the session forgotten with its client');
      // The server never saw the client go (its RDMA connection stayed up), so nothing is bound again:
      // the client just goes on with SEQUENCE on its new TCP connection (RFC 8881 §2.10.3.1, SP4_NONE).
      again = await ScriptedClient.connect(port);
      again.sid = sa;
      await again.call(...again.sequence(2));
      t.is(g.router.snapshot().sessions, 1, 'learned again from the SEQUENCE reply');
      t.is(g.router.snapshot().sessionsLearned, 2);
      const fh = Buffer.from('a file handle');
      up.send(
        up.socketOf(sa),
        cbCompound(0xf6000001, 1, [cbOp.sequence(sa), cbOp.recall(Buffer.alloc(12, 3), fh)]),
      );
      await waitFor(() => up.cbReplies.length === 1, 'the recall answered');
      t.is(again.callbacks.length, 1, 'the reconnected client got the recall');
      t.is(up.cbReplies[0].xid, 0xf6000001);
      t.is(g.router.snapshot().backchannelOrphans, 0);
      // Only an unknown session's SEQUENCE reply is read: the next ones change nothing.
      await again.call(...again.sequence(1));
      t.is(g.router.snapshot().sessionsLearned, 2);
    } finally {
      await stop(g, up, again ? [a, again] : [a]);
    }
  },
);

test.serial(
  'callbacks a live client never answers are refused after the callback timeout, freeing their credits',
  async (t) => {
    const { g, up, port } = await chain({ callbackTimeoutMs: 300, routerTickMs: 50 });
    const d = await ScriptedClient.connect(port);
    d.answerCallbacks = false;
    try {
      const sd = await d.createSession(0xa7n);
      const recall = (xid: number) =>
        cbCompound(xid, 1, [cbOp.sequence(sd), cbOp.recall(Buffer.alloc(12, xid & 0xff), Buffer.alloc(8))]);
      // More than the backward credits a connection grants: without the timeout the later ones would
      // wait for ever behind the unanswered ones.
      for (let i = 1; i <= 10; i++) up.send(up.socketOf(sd), recall(0xa7000000 + i));
      await waitFor(() => d.callbacks.length === 10, 'all ten recalls reached the client', 10_000);
      t.true(g.router.snapshot().backchannelTimedOut >= 1, 'the first ones were refused on the tick');
      await waitFor(() => g.router.snapshot().backchannelTimedOut === 10, 'all ten refused in the end');
      // No RPC reply was made up for the server (the responder role drops a refused backward call).
      t.is(up.cbReplies.length, 0);
      // A late answer matches nothing and is dropped.
      const late = d.callbacks[0];
      d.socket.write(
        Buffer.concat(
          frameRecord(cbCompoundReply(late.readUInt32BE(0), [cbRes.sequence(sd), cbRes.recall()])),
        ),
      );
      await waitFor(() => g.router.snapshot().backchannelRepliesDropped === 1, 'the late answer dropped');
      // An answered one still goes through.
      d.answerCallbacks = true;
      up.send(up.socketOf(sd), recall(0xa7000099));
      await waitFor(() => up.cbReplies.length === 1, 'the answered recall reached the server');
      t.is(up.cbReplies[0].xid, 0xa7000099);
      t.is(g.router.snapshot().backchannelReplies, 1);
    } finally {
      await stop(g, up, [d]);
    }
  },
);

test.serial(
  'many sessions share one connection’s back channel (RFC 8881 §2.10.3.1): CB_NULL reaches a live one until none is left',
  async (t) => {
    const { g, up, port } = await chain();
    oneConnection(g);
    const a = await ScriptedClient.connect(port);
    const b = await ScriptedClient.connect(port);
    const c = await ScriptedClient.connect(port);
    try {
      const sa = await a.createSession(0x11n);
      const sb = await b.createSession(0x22n);
      const on = up.socketOf(sa);
      t.is(up.socketOf(sb), on, 'both sessions on the one connection in rotation');
      up.send(on, cbNull(0xc0000001));
      await waitFor(() => up.cbReplies.length === 1, 'the first CB_NULL answered');
      const first = a.callbacks.length;
      // b (the last to bind its back channel there) destroys its session: a's is still bound there.
      await b.call((x) => compoundCall(x, 1, [op.sequence(sb, 2), op.destroySession(sb)]));
      t.is(g.router.snapshot().sessionsDestroyed, 1);
      up.send(on, cbNull(0xc0000002));
      await waitFor(() => up.cbReplies.length === 2, 'CB_NULL answered after b destroyed its session');
      t.is(a.callbacks.length, first + 1, 'a got it');
      // c binds there too and its TCP connection closes: a's session is still there.
      const sc = await c.createSession(0x33n);
      t.is(up.socketOf(sc), on);
      c.socket.destroy();
      await waitFor(() => g.router.snapshot().sessionsDropped === 1, "c's session forgotten with c");
      const before = a.callbacks.length;
      up.send(on, cbNull(0xc0000003));
      await waitFor(() => up.cbReplies.length === 3, 'CB_NULL answered after c left');
      t.is(a.callbacks.length, before + 1, 'a got it');
      t.is(g.router.snapshot().backchannelOrphans, 0);
      // a leaves too: nobody has a back channel there any more, and only now is CB_NULL refused.
      a.socket.destroy();
      await waitFor(() => g.router.snapshot().sessionsDropped === 2, "a's session forgotten with a");
      up.send(on, cbNull(0xc0000004));
      await waitFor(() => g.router.snapshot().backchannelOrphans === 1, 'the orphan counted');
      t.is(up.cbReplies.length, 3);
    } finally {
      await stop(g, up, [a, b, c]);
    }
  },
);

test.serial(
  'BIND_CONN_TO_SESSION answered CDFS4_FORE binds the fore channel only (RFC 8881 §18.34.3): callbacks stay with the owner',
  async (t) => {
    const { g, up, port } = await chain();
    const a = await ScriptedClient.connect(port);
    const a2 = await ScriptedClient.connect(port);
    try {
      const s = await a.createSession(0x44n);
      a2.sid = s;
      up.bindDir = 1; // CDFS4_FORE
      const [r] = await a2.call((x) => compoundCall(x, 1, [op.bindConnToSession(s, 1 /* CDFC4_FORE */)]));
      t.is(r.readUInt32BE(24), 0, 'BIND_CONN_TO_SESSION succeeded');
      const recall = (xid: number) =>
        cbCompound(xid, 1, [cbOp.sequence(s), cbOp.recall(Buffer.alloc(12, 4), Buffer.alloc(8, 4))]);
      up.send(up.socketOf(s), recall(0xb1000001));
      await waitFor(() => up.cbReplies.length === 1, 'the recall answered');
      t.is(a.callbacks.length, 1, 'the owner, whose back channel it is, got the recall');
      t.is(a2.callbacks.length, 0, 'not the client that bound the fore channel');
      // The owner leaves: the session is not forgotten while a client that bound it is still there.
      a.socket.destroy();
      await waitFor(() => g.router.snapshot().clients === 1, 'a gone');
      t.is(g.router.snapshot().sessions, 1);
      t.is(g.router.snapshot().sessionsDropped, 0);
      up.send(up.socketOf(s), recall(0xb1000002));
      await waitFor(() => up.cbReplies.length === 2, 'the second recall answered');
      t.is(a2.callbacks.length, 1, 'handed to the client that bound it');
      t.is(g.router.snapshot().backchannelOrphans, 0);
    } finally {
      await stop(g, up, [a, a2]);
    }
  },
);
