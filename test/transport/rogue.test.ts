/**
 * A rogue peer (test/helpers/rogue-peer.ts) talks to our server end with raw bytes: malformed headers get
 * the right RDMA2_ERROR, and a peer that overruns credits or sends an oversized message costs only its
 * own connection.
 */
import test from 'ava';
import { decodeHeader, type RpcRdmaHeader } from '../../rdma-backend/protocol/index.js';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import {
  type InboundCall,
  RpcRdmaConnection,
  type TransportOptions,
} from '../../rdma-backend/transport/index.js';
import { rememberedVersion, rememberVersion } from '../../rdma-backend/transport/options.js';
import { Access } from '../../rdma-backend/verbs/index.js';
import { plainPrivateData, RoguePeer } from '../helpers/rogue-peer.js';
import {
  Collector,
  captureTransportLog,
  delay,
  echoServer,
  encodeCall,
  encodeReply,
  headerBytes,
  PROC_ECHO,
  replyData,
  TestCall,
  words,
} from './loopback.js';

const pd = plainPrivateData;

/** Runs `body` with a rogue peer connected to an echo server (made with `server`), then closes both. */
async function withRogue(
  body: (s: Awaited<ReturnType<typeof echoServer>>, peer: RoguePeer) => Promise<void>,
  ...server: Parameters<typeof echoServer>
): Promise<void> {
  const s = await echoServer(...server);
  const peer = await RoguePeer.connect(s.listener.port, pd());
  try {
    await body(s, peer);
  } finally {
    peer.close();
    await s.close();
  }
}

test('malformed and unknown headers get the right RDMA2_ERROR; the connection keeps serving', async (t) => {
  await withRogue(async (s, peer) => {
    const ask = async (msg: Buffer): Promise<RpcRdmaHeader> => decodeHeader(await peer.ask(msg));
    // Version 2 first: our CONNPROP comes back, with the grant and F_RESPONSE.
    const cp = await ask(
      headerBytes({
        version: 2,
        htype: 5,
        xid: 1,
        credit: 8,
        props: [
          { id: 1, value: 4096 },
          { id: 99, data: Buffer.from('zz') },
        ],
      }),
    );
    t.like(cp, { version: 2, htype: 5, xid: 1, flags: 1, credit: 32 });

    const expectError = (h: RpcRdmaHeader, xid: number, code: number) => {
      if (h.version !== 2 || h.htype !== 4) return t.fail(`expected RDMA2_ERROR, got ${JSON.stringify(h)}`);
      t.is(h.xid, xid);
      t.is(h.error.code, code);
      t.is(h.flags, 1, 'RDMA2_ERROR always has F_RESPONSE (seed 004 §3.2)');
      return h;
    };
    expectError(await ask(words(2, 2, 8, 42, 0)), 2, 3); // unknown header type → INVAL_HTYPE
    // DONE for an XID with no responder-provided Read chunk: dropped silently (seed 002 §4.1.3).
    peer.send(words(3, 2, 8, 3, 0));
    expectError(await ask(words(4, 2, 8, 0, 0, 0, 1, 5)), 4, 2); // read list cut short → BAD_XDR
    // An unknown version: ERR_VERS in the Version 1 layout, 7 echoed (read as words: no decoder speaks 7).
    const vers = await peer.ask(words(5, 7, 8, 0, 0));
    t.deepEqual(
      [0, 1, 3, 4, 5, 6].map((i) => vers.readUInt32BE(4 * i)),
      [5, 7, 4, 1, 1, 2],
    );
    // F_RESPONSE clear but the RPC message is a REPLY: seed 004 §3.2 violation → BAD_XDR.
    expectError(
      await ask(
        headerBytes({ version: 2, htype: 0, xid: 6, credit: 8, chunks: {} }, words(6, 1, 0, 0, 0, 0)),
      ),
      6,
      2,
    );
    // NOMSG without a Position-Zero Read chunk → BAD_XDR.
    expectError(await ask(headerBytes({ version: 2, htype: 1, xid: 7, credit: 8, chunks: {} })), 7, 2);
    // Too many Write chunks for the default limit (8) → WRITE_CHUNKS with the limit.
    const seg = { handle: 5, length: 8, offset: 0 };
    const many = headerBytes(
      { version: 2, htype: 0, xid: 8, credit: 8, chunks: { writes: Array.from({ length: 9 }, () => [seg]) } },
      encodeCall(8, PROC_ECHO, Buffer.from('a')),
    );
    const wc = expectError(await ask(many), 8, 5);
    t.is(wc?.error.maxChunks, 8);
    // Version 1 on a Version 2 connection → ERR_VERS (the version does not change, seed 004 §7.3).
    const v1 = await ask(
      headerBytes(
        { version: 1, proc: 0, xid: 9, credit: 8, chunks: {} },
        encodeCall(9, PROC_ECHO, Buffer.from('a')),
      ),
    );
    t.is((v1 as { error: { code: number } }).error.code, 1);
    // A message shorter than the four common words has no XID to answer: dropped silently.
    peer.send(words(1, 2));
    // And a valid call is still served.
    const ok = await ask(
      headerBytes(
        { version: 2, htype: 0, xid: 10, credit: 8, chunks: {} },
        encodeCall(10, PROC_ECHO, Buffer.from('still here')),
      ),
    );
    t.like(ok, { version: 2, htype: 0, xid: 10, flags: 1 });
    const last = peer.received[peer.received.length - 1];
    t.deepEqual(replyData(last.subarray(ok.payloadOffset)), Buffer.from('still here'));
    t.is(s.conns[0].state, 'ready');
    t.is(s.conns[0].snapshot().counters.droppedMessages, 2, 'the DONE and the short message');
  });
});

test('a peer that sends a message larger than our receive buffer loses only its connection', async (t) => {
  await withRogue(async (s, peer) => {
    peer.send(
      headerBytes(
        { version: 1, proc: 0, xid: 1, credit: 8, chunks: {} },
        encodeCall(1, PROC_ECHO, Buffer.alloc(8000)),
      ),
    );
    await peer.until(() => peer.disconnected, 'disconnect');
    while (s.conns[0].state !== 'closed') await new Promise((r) => setTimeout(r, 5));
    t.regex(s.conns[0].closeReason, /LOC_LEN_ERR|terminate/i, 'a Receive too small is fatal, as on hardware');
    // The server end still accepts and serves other connections.
    const collector = new Collector();
    const client = await RpcRdmaConnection.connect({
      device: await createSoftProvider().openDevice(),
      host: '127.0.0.1',
      port: s.listener.port,
      requester: collector,
      options: { peerKey: `rogue-after-${process.pid}` },
    });
    client.submit(TestCall.echo(1, Buffer.from('ok'), false));
    const [o] = await collector.wait(1);
    t.deepEqual(replyData(o.reply as Buffer), Buffer.from('ok'));
    client.close();
  });
});

test('a peer that overruns its credits: calls beyond the Receives posted end its connection, nothing else', async (t) => {
  // Hold every call so that no Receive is consumed and reposted faster than the peer sends.
  await withRogue(
    async (s, peer) => {
      // 2 credits + 1 backward + 4 control Receives are posted: the 8th Send finds none.
      for (let i = 1; i <= 40; i++) {
        peer.send(
          headerBytes(
            { version: 1, proc: 0, xid: i, credit: 8, chunks: {} },
            encodeCall(i, PROC_ECHO, Buffer.from('x')),
          ),
        );
      }
      await peer.until(() => peer.disconnected, 'disconnect', 5000);
      while (s.conns[0].state !== 'closed') await new Promise((r) => setTimeout(r, 5));
      t.true(s.responders[0].received.length >= 7, `received ${s.responders[0].received.length}`);
      // Answers for the held calls after the loss go nowhere and throw nothing.
      for (const c of s.responders[0].held as InboundCall[]) s.conns[0].reply(c, Buffer.alloc(28));
      t.pass();
    },
    { credits: 2, backwardCredits: 1 },
    { hold: true },
  );
});

test('client end: a reply for an unknown XID is dropped; a reply claiming more than offered fails the call', async (t) => {
  const { client, collector, peer, close } = await clientToRogue('client', 1);
  try {
    const c = TestCall.echo(11, Buffer.alloc(5000, 1));
    client.submit(c);
    const h = decodeHeader(await peer.message(0));
    if (h.version !== 1 || h.proc !== 0) throw new Error('expected RDMA_MSG');
    peer.send(
      headerBytes({ version: 1, proc: 0, xid: 999, credit: 4, chunks: {} }, words(999, 1, 0, 0, 0, 0, 0)),
    );
    const wr = h.chunks.writes[0][0];
    peer.send(
      headerBytes(
        {
          version: 1,
          proc: 0,
          xid: 11,
          credit: 4,
          chunks: { writes: [[{ ...wr, length: wr.length + 4096 }]] },
        },
        words(11, 1, 0, 0, 0, 0, 5000),
      ),
    );
    const [o] = await collector.wait(1);
    t.is(o.error?.code, 'ERR_TRANSPORT_BAD_REPLY');
    t.is(client.snapshot().counters.droppedMessages, 1);
    t.is(client.snapshot().registrations.inUse, 0);
  } finally {
    await close();
  }
});

test('client end: a reply whose RPC message is not a reply to the call fails it (ERR_TRANSPORT_BAD_REPLY); the connection goes on', async (t) => {
  const { client, collector, peer, close } = await clientToRogue('bad-reply-head', 1);
  try {
    // Calls whose replies may exceed the inline size: each offers a Reply chunk.
    const longCall = (xid: number) => {
      const c = TestCall.echo(xid, Buffer.from('abc'), false);
      c.maxReplySize = 9000;
      return c;
    };
    for (const xid of [21, 22, 23, 24]) client.submit(longCall(xid));
    const rc = async (n: number) => {
      const h = decodeHeader(await peer.message(n));
      if (h.version !== 1 || h.proc !== 0 || h.chunks.reply === null)
        throw new Error('expected a Reply chunk');
      return h.chunks.reply[0];
    };
    // 21: an RDMA_NOMSG whose Reply chunk the peer left empty: no RPC message at all.
    const s21 = await rc(0);
    peer.send(
      headerBytes({ version: 1, proc: 1, xid: 21, credit: 4, chunks: { reply: [{ ...s21, length: 0 }] } }),
    );
    // 22: the Reply chunk holds an RPC CALL.
    const s22 = await rc(1);
    await peer.write(s22.handle, s22.offset, words(22, 0, 2, 0x20000099, 1, 1, 0, 0, 0, 0, 0));
    peer.send(
      headerBytes({ version: 1, proc: 1, xid: 22, credit: 4, chunks: { reply: [{ ...s22, length: 44 }] } }),
    );
    // 23: an inline reply whose RPC XID is another's.
    await rc(2);
    peer.send(
      headerBytes({ version: 1, proc: 0, xid: 23, credit: 4, chunks: {} }, words(0xdead, 1, 0, 0, 0, 0, 0)),
    );
    // 24: a good reply, after all of that.
    await rc(3);
    peer.send(
      headerBytes({ version: 1, proc: 0, xid: 24, credit: 4, chunks: {} }, words(24, 1, 0, 0, 0, 0, 0)),
    );

    const outcomes = await collector.wait(4);
    const byXid = new Map(outcomes.map((o) => [o.call.xid, o]));
    const bad: [number, RegExp][] = [
      [21, /has 0 bytes, fewer than an RPC reply header/],
      [22, /msg_type 0, not REPLY/],
      [23, /RPC XID 0xdead is not its rdma_xid 0x17/],
    ];
    for (const [xid, why] of bad) {
      const o = byXid.get(xid);
      t.is(o?.error?.code, 'ERR_TRANSPORT_BAD_REPLY', `xid ${xid}`);
      t.is(o?.error?.retransmit, false);
      t.regex(o?.error?.message ?? '', why);
      t.is(o?.reply, undefined, 'no handler is given the message');
    }
    t.is(byXid.get(24)?.error, undefined, 'the connection still delivers replies');
    t.deepEqual(byXid.get(24)?.reply, words(24, 1, 0, 0, 0, 0, 0));
    t.is(client.state, 'ready');
    t.is(client.snapshot().registrations.inUse, 0, 'every Reply chunk was released');
  } finally {
    await close();
  }
});

/** Our client end connected to a rogue server; `maxVersion` 1 skips the Version 2 negotiation. */
async function clientToRogue(tag: string, maxVersion: 1 | 2, options: TransportOptions = {}) {
  const rogue = await RoguePeer.listen(pd());
  const collector = new Collector();
  const client = await RpcRdmaConnection.connect({
    device: await createSoftProvider().openDevice(),
    host: '127.0.0.1',
    port: rogue.port,
    options: { maxVersion, peerKey: `rogue-${tag}-${process.pid}`, ...options },
    requester: collector,
  });
  const peer = await rogue.peer;
  const close = async () => {
    client.close();
    peer.close();
    await rogue.close();
  };
  return { rogue, collector, client, peer, close };
}

/** The rogue answers the client's CONNPROP (Version 2, a grant of `credit`) and waits until the client is ready. */
async function answerConnProp(s: Awaited<ReturnType<typeof clientToRogue>>, credit: number): Promise<void> {
  const cp = decodeHeader(await s.peer.message(0));
  s.peer.send(headerBytes({ version: 2, htype: 5, xid: cp.xid, credit, flags: 1, props: [] }));
  await s.peer.until(() => s.client.state === 'ready', 'ready');
}

test('client end: a reply that does not decode fails its call, is never answered with an error, and frees the credit', async (t) => {
  const malformed: [string, 1 | 2, (xid: number) => Buffer][] = [
    ['Version 1 RDMA_ERROR with an rdma_err of 3', 1, (xid) => words(xid, 1, 4, 4, 3)],
    ['Version 1 RDMA_MSG reply with its write list cut short', 1, (xid) => words(xid, 1, 4, 0, 0, 1, 1)],
    [
      'Version 2 RDMA2_MSG reply (F_RESPONSE) with its read list cut short',
      2,
      (xid) => words(xid, 2, 4, 0, 1, 0, 1, 5),
    ],
  ];
  for (const [name, version, reply] of malformed) {
    const s = await clientToRogue(`bad-reply-${version}`, version);
    try {
      let sentSoFar = 0;
      if (version === 2) {
        // Our CONNPROP first, answered so that the connection is ready with a grant of 1.
        const cp = decodeHeader(await s.peer.message(0));
        s.peer.send(headerBytes({ version: 2, htype: 5, xid: cp.xid, credit: 1, flags: 1, props: [] }));
        sentSoFar = 1;
      }
      s.client.submit(TestCall.echo(11, Buffer.alloc(100, 1)));
      const h = decodeHeader(await s.peer.message(sentSoFar));
      t.is(h.xid, 11);
      s.peer.send(reply(11));
      const [o] = await s.collector.wait(1);
      t.is(o.error?.code, 'ERR_TRANSPORT_BAD_REPLY', name);
      t.is(s.client.snapshot().registrations.inUse, 0, `${name}: its Write chunk was given back`);
      // With a grant of 1 the next call goes only if the bad reply gave its credit back.
      s.client.submit(TestCall.echo(12, Buffer.from('x'), false));
      const next = decodeHeader(await s.peer.message(sentSoFar + 1));
      t.is(next.xid, 12, `${name}: the next call went, nothing came before it`);
      t.is(s.client.snapshot().counters.errorsSent, 0, `${name}: no error sent to the responder`);
    } finally {
      await s.close();
    }
  }
});

test('client end: an RDMA2_ERROR answers its call but its credit word is not a grant', async (t) => {
  const s = await clientToRogue('v2-error-credit', 2);
  try {
    await answerConnProp(s, 32);
    s.client.submit(TestCall.echo(21, Buffer.from('a'), false));
    const h = decodeHeader(await s.peer.message(1));
    // RDMA2_ERR_SYSTEM with a credit word of 0: seed 004 §5.3.3, the receiver MUST ignore it.
    s.peer.send(headerBytes({ version: 2, htype: 4, xid: h.xid, credit: 0, flags: 1, error: { code: 9 } }));
    const [o] = await s.collector.wait(1);
    t.is(o.error?.code, 'ERR_TRANSPORT_PEER_SYSTEM');
    t.is(s.client.snapshot().credits.granted, 32);
    for (let i = 0; i < 4; i++) s.client.submit(TestCall.echo(30 + i, Buffer.from('b'), false));
    await s.peer.message(5); // all four go without waiting for a reply
    t.is(s.peer.received.length, 6);
  } finally {
    await s.close();
  }
});

test('an unsupported rdma_vers gets ERR_VERS in the Version 1 layout with that version echoed', async (t) => {
  await withRogue(async (_s, peer) => {
    const answer = await peer.ask(words(77, 3, 8, 0, 0));
    // xid, rdma_vers echoed, credit, RDMA_ERROR, ERR_VERS, low, high (docs/protocol.md item 6)
    t.is(answer.length, 28);
    const w = [0, 1, 3, 4, 5, 6].map((i) => answer.readUInt32BE(4 * i));
    t.deepEqual(w, [77, 3, 4, 1, 1, 2]);
  });
});

test('a call whose Read chunk positions cannot be right is refused before a single RDMA Read', async (t) => {
  await withRogue(async (s, peer) => {
    await peer.ask(headerBytes({ version: 2, htype: 5, xid: 1, credit: 8, props: [] }));
    const src = peer.pd.registerMemory(Buffer.alloc(64 * 1024, 0x41), Access.REMOTE_READ);
    const reduced = encodeCall(7, PROC_ECHO, Buffer.alloc(0));
    const segment = { handle: src.rkey, length: 4 * 1024, offset: src.iova };
    // Two 4 KiB chunks (below the placement minimum: the path that used to pull first), the second placed
    // beyond the 44-byte message, then unaligned, then before the first.
    const bogus = [0x10000, 46, 0];
    for (let i = 0; i < bogus.length; i++) {
      const xid = 10 + i;
      const reads = [
        { position: 40, ...segment },
        { position: bogus[i], ...segment },
      ];
      const before = s.conns[0].snapshot().counters.rdmaReads;
      const answer = decodeHeader(
        await peer.ask(headerBytes({ version: 2, htype: 0, xid, credit: 8, chunks: { reads } }, reduced)),
      );
      t.like(
        answer,
        { version: 2, htype: 4, xid, error: { code: 2 } },
        `position ${bogus[i]}: RDMA2_ERR_BAD_XDR`,
      );
      t.is(s.conns[0].snapshot().counters.rdmaReads, before, `position ${bogus[i]}: no RDMA Read issued`);
    }
    t.is(s.conns[0].snapshot().registrations.inUse, 0);
  });
});

test("client end: a reply is its call's even when the call shares its XID with a property request in progress", async (t) => {
  const s = await clientToRogue('control-xid', 2);
  try {
    await answerConnProp(s, 32);
    const asked = s.client.requestProperties([{ id: 1, value: 2048 }]).catch((e: unknown) => e);
    const rq = decodeHeader(await s.peer.message(1));
    t.is(rq.version === 2 ? rq.htype : -1, 6, 'REQPROP');
    // A call that carries the same XID (as an RPCSEC_GSS call keeping its client's XID can), answered first.
    s.client.submit(TestCall.echo(rq.xid, Buffer.from('hello'), false));
    const ch = decodeHeader(await s.peer.message(2));
    s.peer.send(
      headerBytes(
        { version: 2, htype: 0, xid: ch.xid, credit: 32, flags: 1, chunks: {} },
        encodeReply(ch.xid, Buffer.from('hello')),
      ),
    );
    const [o] = await s.collector.wait(1);
    t.is(o.error, undefined);
    t.is(s.client.snapshot().credits.outstanding, 0);
    s.client.close();
    await asked;
  } finally {
    await s.close();
  }
});

test('client end: a server that never answers the Version 2 CONNPROP is taken for a Version 1 one, for versionGuessTtlMs', async (t) => {
  const key = `rogue-silent-${process.pid}`;
  // A guess long enough that a reconnect slowed by a loaded machine still lands inside it.
  const guessMs = 10_000;
  const ttl = { negotiationTimeoutMs: 200, peerKey: key, versionGuessTtlMs: guessMs };
  const s = await clientToRogue('silent', 2, ttl);
  try {
    const cp = decodeHeader(await s.peer.message(0));
    t.like(cp, { version: 2, htype: 5 }, 'CONNPROP sent');
    s.client.submit(TestCall.echo(5, Buffer.from('waits'), false));
    // Seed 004 §7.2: no answer is taken as no Version 2; the connection closes and its call goes again.
    const [o] = await s.collector.wait(1, 3000);
    t.is(o.error?.code, 'ERR_TRANSPORT_CONNECTION_LOST');
    t.true(o.error?.retransmit);
    t.regex(s.client.closeReason ?? '', /no answer to CONNPROP/);
  } finally {
    await s.close();
  }
  const guessedAt = performance.now();
  // The next connection to that peer speaks Version 1 from its first message.
  const again = await clientToRogue('silent-again', 2, ttl);
  try {
    again.client.submit(TestCall.echo(6, Buffer.from('v1'), false));
    const first = decodeHeader(await again.peer.message(0));
    t.like(first, { version: 1, proc: 0, xid: 6 });
  } finally {
    await again.close();
  }
  t.true(performance.now() - guessedAt < guessMs, 'the second connection came within the guess');
  // Only a guess: once it has expired, the peer is asked for Version 2 again.
  await new Promise((r) => setTimeout(r, guessMs + 100 - (performance.now() - guessedAt)));
  const later = await clientToRogue('silent-later', 2, ttl);
  try {
    later.client.submit(TestCall.echo(7, Buffer.from('v2 again'), false));
    t.like(decodeHeader(await later.peer.message(0)), { version: 2, htype: 5 }, 'CONNPROP again');
  } finally {
    await later.close();
  }
});

test('client end: a server that refuses Version 2 with ERR_VERS is remembered as Version 1 past versionGuessTtlMs', async (t) => {
  const key = `rogue-errvers-${process.pid}`;
  const opts = { negotiationTimeoutMs: 2000, peerKey: key, versionGuessTtlMs: 1 };
  const s = await clientToRogue('errvers', 2, opts);
  try {
    const cp = decodeHeader(await s.peer.message(0));
    t.like(cp, { version: 2, htype: 5 });
    // RDMA2_ERROR ERR_VERS in the Version 1 layout: rdma_vers 1, proc RDMA_ERROR, ERR_VERS, low 1, high 1.
    const err = Buffer.alloc(28);
    err.writeUInt32BE(cp.xid, 0);
    err.writeUInt32BE(1, 4);
    err.writeUInt32BE(1, 8);
    err.writeUInt32BE(4, 12);
    err.writeUInt32BE(1, 16);
    err.writeUInt32BE(1, 20);
    err.writeUInt32BE(1, 24);
    s.peer.send(err);
    s.client.submit(TestCall.echo(8, Buffer.from('v1 now'), false));
    t.like(decodeHeader(await s.peer.message(1)), { version: 1, proc: 0, xid: 8 });
  } finally {
    await s.close();
  }
  await new Promise((r) => setTimeout(r, 20));
  const again = await clientToRogue('errvers-again', 2, opts);
  try {
    again.client.submit(TestCall.echo(9, Buffer.from('still v1'), false));
    t.like(decodeHeader(await again.peer.message(0)), { version: 1, proc: 0, xid: 9 });
  } finally {
    await again.close();
  }
});

test('client end: an undecodable reply sent With Invalidate fails its call and leaves the connection up', async (t) => {
  const s = await clientToRogue('bad-reply-inv', 1);
  try {
    s.client.submit(TestCall.echo(11, Buffer.alloc(100, 1)));
    const h = decodeHeader(await s.peer.message(0));
    if (h.version !== 1 || h.proc !== 0) throw new Error('expected RDMA_MSG');
    const rkey = h.chunks.writes[0][0].handle;
    // RDMA_MSG reply with its write list cut short, invalidating the call's Write chunk: a Local
    // Invalidate of that key after the peer's is fatal on iWARP, so the transport must know.
    s.peer.send(words(11, 1, 4, 0, 0, 1, 1), rkey);
    const [o] = await s.collector.wait(1);
    t.is(o.error?.code, 'ERR_TRANSPORT_BAD_REPLY');
    await delay(100);
    t.is(s.client.state, 'ready', s.client.closeReason);
    t.is(s.client.snapshot().counters.remoteInvalidations, 1);
    t.is(s.client.snapshot().registrations.inUse, 0);
  } finally {
    await s.close();
  }
});

test('a message of the other version on a settled connection: ERR_VERS in the Version 1 layout, an answer never answered', async (t) => {
  await withRogue(async (s, peer) => {
    // The first message settles Version 1 (seed 004 §7.3).
    await peer.ask(
      headerBytes(
        { version: 1, proc: 0, xid: 1, credit: 8, chunks: {} },
        encodeCall(1, PROC_ECHO, Buffer.from('a')),
      ),
    );
    const v2call = headerBytes(
      { version: 2, htype: 0, xid: 2, credit: 8, chunks: {} },
      encodeCall(2, PROC_ECHO, Buffer.from('b')),
    );
    const answer = await peer.ask(v2call);
    // xid, rdma_vers echoed (2), credit, RDMA_ERROR, ERR_VERS, low 1, high 1
    t.is(answer.length, 28);
    t.deepEqual(
      [0, 1, 3, 4, 5, 6].map((i) => answer.readUInt32BE(4 * i)),
      [2, 2, 4, 1, 1, 1],
    );
    // A Version 2 response (F_RESPONSE) is not a request: nothing goes back.
    const dropped = s.conns[0].snapshot().counters.droppedMessages;
    const before = peer.received.length;
    peer.send(
      headerBytes({ version: 2, htype: 0, xid: 3, credit: 8, flags: 1, chunks: {} }, words(3, 1, 0, 0, 0, 0)),
    );
    await peer.until(
      () => s.conns[0].snapshot().counters.droppedMessages === dropped + 1,
      'the response dropped',
    );
    await delay(50);
    t.is(peer.received.length, before);
    t.is(s.conns[0].state, 'ready');
  });
});

test('a version guess never weakens what a peer said: ERR_VERS stays past the TTL; an answered Version 2 yields to a later guess', async (t) => {
  const refused = `guess-after-errvers-${process.pid}`;
  rememberVersion(refused, 1); // RDMA2_ERR_VERS on one connection
  rememberVersion(refused, 1, 30); // another connection's CONNPROP timed out meanwhile
  const answered = `guess-after-answer-${process.pid}`;
  rememberVersion(answered, 2); // the peer answered CONNPROP
  rememberVersion(answered, 1, 30); // a later connection's CONNPROP went unanswered
  t.is(rememberedVersion(answered), 1, 'within the guess');
  await new Promise((r) => setTimeout(r, 50));
  t.is(rememberedVersion(refused), 1, 'still Version 1: the peer said so');
  t.is(rememberedVersion(answered), undefined, 'the guess expired: ask for Version 2 again');
});

test('a peer that breaks the protocol is logged with the reason and what it was answered, at most 8 times per connection', async (t) => {
  const { lines, logger } = captureTransportLog();
  await withRogue(
    async (s, peer) => {
      // Version 2 first (CONNPROP), then 20 headers whose read list is cut short.
      await peer.ask(headerBytes({ version: 2, htype: 5, xid: 1, credit: 8, props: [] }));
      for (let i = 0; i < 20; i++) await peer.ask(words(100 + i, 2, 8, 0, 0, 0, 1, 5));
      const refused = lines.filter((l) => l.obj.code === 'ERR_TRANSPORT_PEER_PROTOCOL');
      t.is(refused.length, 8, 'eight logged, the rest only counted');
      t.like(refused[0].obj, { answered: 'RDMA2_ERR_BAD_XDR', xid: 100, version: 2 });
      t.is(typeof refused[0].obj.reason, 'string');
      t.is(typeof refused[0].obj.field, 'string', 'the header field at fault');
      t.regex(refused[0].msg, /^RDMA peer's message refused with RDMA2_ERR_BAD_XDR: /);
      t.true(refused[7].obj.moreNotLogged);
      t.regex(refused[7].msg, /further protocol errors of this peer are counted, not logged/);
      t.is(s.conns[0].snapshot().counters.errorsSent, 20, 'every one counted');
    },
    { logger },
  );
});

test('a connection that ends is logged: info when nothing was lost, warn with the calls failed when some were', async (t) => {
  const { lines, logger } = captureTransportLog();
  // Closed by us, nothing in flight: info.
  const s = await echoServer();
  try {
    const quiet = new Collector();
    const c = await RpcRdmaConnection.connect({
      device: await createSoftProvider().openDevice(),
      host: '127.0.0.1',
      port: s.listener.port,
      requester: quiet,
      options: { peerKey: `log-close-${process.pid}`, logger },
    });
    c.submit(TestCall.echo(1, Buffer.from('x'), false));
    await quiet.wait(1);
    c.close('done with it');
    await delay(20);
    t.like(lines.at(-1), {
      level: 'info',
      obj: {
        code: 'RDMA_CONNECTION_CLOSED',
        by: 'us',
        reason: 'done with it',
        callsFailed: 0,
        end: 'client',
      },
    });
  } finally {
    await s.close();
  }
  // The peer goes away with calls in flight: warn, with how many are to be resent.
  const held = await echoServer({}, { hold: true });
  try {
    const lost = new Collector();
    const c = await RpcRdmaConnection.connect({
      device: await createSoftProvider().openDevice(),
      host: '127.0.0.1',
      port: held.listener.port,
      requester: lost,
      options: { peerKey: `log-lost-${process.pid}`, logger },
    });
    for (let xid = 1; xid <= 3; xid++) c.submit(TestCall.echo(xid, Buffer.from('x'), false));
    await delay(50);
    held.conns[0].close('responder went away');
    await lost.wait(3);
    const warn = lines.find((l) => l.level === 'warn' && l.obj.code === 'ERR_TRANSPORT_CONNECTION_LOST');
    t.like(warn, { obj: { by: 'peer', callsFailed: 3, end: 'client' } });
    t.regex(warn?.msg ?? '', /3 call\(s\) in flight failed for retransmission/);
  } finally {
    await held.close();
  }
});
