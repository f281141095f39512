/**
 * What the router sends and what it will not: an RPCSEC_GSS call of a lost RDMA connection is not sent
 * again (its seq_num is spent, RFC 2203 §5.3.3.1: its client is closed and signs it again), and a CALL
 * record too short to be a call header never reaches the transport (the client is closed). The pool, the
 * RDMA connections and the client connections are stand-ins with only what the router touches; the
 * router is the product's.
 */
import test from 'ava';
import type { CallRecord } from '../../gateway/router/call-record.js';
import { Router } from '../../gateway/router.js';
import { UlbRegistry } from '../../gateway/ulb/registry.js';
import type { ConnectionPool, TransportError } from '../../rdma-backend/transport/index.js';
import type { FrontendConnection } from '../../tcp-frontend/server.js';

/** XDR words and buffers, concatenated (hand-made: not the gateway's encoders). */
function xdr(...parts: (number | Buffer)[]): Buffer {
  return Buffer.concat(
    parts.map((p) => {
      if (typeof p !== 'number') return p;
      const b = Buffer.alloc(4);
      b.writeUInt32BE(p >>> 0, 0);
      return b;
    }),
  );
}

const PROG = 0x20000999;

/** An AUTH_NONE call of a program no binding knows, with `args` bytes of arguments (40 + args bytes). */
function call(xid: number, args = 0): Buffer {
  return xdr(xid, 0, 2, PROG, 1, 1, 0, 0, 0, 0, Buffer.alloc(args));
}

/**
 * An RPCSEC_GSS call (RFC 2203 §5.3.1): credential rpc_gss_cred_vers_1_t (version 1, RPCSEC_GSS_DATA,
 * `seq`, service none, handle "ctx1"), a 16-byte verifier standing for the MIC.
 */
function gssCall(xid: number, seq: number): Buffer {
  const cred = xdr(1, 0, seq, 1, 4, Buffer.from('ctx1'));
  return xdr(xid, 0, 2, PROG, 1, 1, 6, cred.length, cred, 6, 16, Buffer.alloc(16, 7), 0);
}

const LOST = {
  code: 'ERR_TRANSPORT_CONNECTION_LOST',
  retransmit: true,
  details: {},
} as unknown as TransportError;

/** RDMA connections that take calls while `up` (as many credits as asked), and clients to make. */
function world(connections = 1, registry = new UlbRegistry()) {
  const sent: { conn: number; r: CallRecord; bytes: Buffer }[] = [];
  const rdma = Array.from({ length: connections }, (_, i) => {
    const c = {
      id: i + 1,
      state: 'ready',
      queuedCalls: 0,
      up: true,
      credits: { canSend: () => c.up },
      submit(r: CallRecord) {
        sent.push({ conn: i, r, bytes: Buffer.from(r.message) });
      },
      setResponder() {},
    };
    return c;
  });
  let live = [...rdma];
  const pool = { connections: () => live, onReady: () => () => {} } as unknown as ConnectionPool;
  const router = new Router({ registry, tickMs: 1e9 });
  router.attach(pool);
  let nextId = 1;
  const client = () => {
    const c = {
      id: nextId++,
      unsentBytes: 0,
      context: undefined,
      destroyed: null as string | null,
      closeReason: undefined as unknown,
      warnings: [] as Record<string, unknown>[],
      log: {
        warn(o: Record<string, unknown>) {
          c.warnings.push(o);
        },
        info() {},
        debug() {},
      },
      replies: [] as Buffer[],
      sendReply(parts: Buffer[]) {
        c.replies.push(Buffer.from(parts[0]));
      },
      notifyWhenFlushed() {},
      replyReserved: 0,
      gone: false,
      remotePort: 0,
      reserveReplyRoom(bytes: number) {
        c.replyReserved += bytes;
      },
      releaseReplyRoom(bytes: number) {
        c.replyReserved -= bytes;
      },
      awaitReplyRoom() {},
      release() {},
      destroy(code: string, message: string, details: unknown) {
        c.destroyed = code;
        c.closeReason = { code, message, details };
      },
    };
    return { c, conn: c as unknown as FrontendConnection };
  };
  /** The connection `i` is lost: it fails its calls in flight for retransmission and leaves the pool. */
  const lose = (i: number) => {
    const conn = rdma[i];
    conn.state = 'closed';
    live = live.filter((c) => c !== conn);
    for (const s of sent.filter((s) => s.conn === i && s.r.link !== null)) router.onFailed(s.r, LOST);
  };
  return { router, rdma, sent, client, lose };
}

test('an RPCSEC_GSS call of a lost RDMA connection is not sent again: its client is closed to sign it anew', (t) => {
  const { router, sent, client, lose } = world(2);
  t.teardown(() => router.close());
  const a = client();
  const b = client();
  router.onRecord(a.conn, gssCall(0x1111, 41));
  router.onRecord(b.conn, call(0x2222)); // one burst: the same connection
  t.is(sent.length, 2);
  t.is(sent[0].conn, sent[1].conn);
  const lostConn = sent[0].r.link?.conn as never;
  const gssOn = sent[0].conn;
  lose(gssOn);
  t.is(sent.length, 3, "only b's call was submitted again");
  t.is(sent[2].bytes.readUInt32BE(0), sent[1].bytes.readUInt32BE(0), "b's call, under its gateway XID");
  t.not(sent[2].conn, gssOn);
  t.is(a.c.destroyed, 'ERR_RDMA_GSS_LOST', 'its client is closed, so that it retransmits with a new seq_num');
  t.like(a.c.warnings[0], { code: 'ERR_RDMA_GSS_LOST', xid: 0x1111 });
  const s = router.snapshot();
  t.is(s.gssNotResent, 1);
  t.is(s.retransmits, 1);
  t.is(s.inFlight, 1, "only b's call");
  t.is(s.queued, 0);
  t.is(s.recordsInUse, 1, 'the GSS call is over: its record is back');
  t.is(router.callsOn(lostConn), 0, 'nothing left on the lost connection');
  t.is(b.c.destroyed, null, 'other clients go on');
  // The client comes back and retransmits: same XID, a new seq_num. It goes (nothing holds its XID).
  const again = client();
  router.onRecord(again.conn, gssCall(0x1111, 42));
  t.is(sent.length, 4);
  t.is(sent[3].bytes.readUInt32BE(0), 0x1111, 'an RPCSEC_GSS call keeps its XID');
  t.is(sent[3].bytes.readUInt32BE(40), 42, 'with its new seq_num');
  t.not(sent[3].conn, gssOn);
  t.is(router.snapshot().duplicatesDropped, 0);
  router.onReply(sent[3].r, xdr(0x1111, 1, 0, 0, 0, 0));
  t.is(again.c.replies.length, 1);
});

test('an AUTH_NONE / AUTH_SYS call of a lost RDMA connection is still sent again, its client kept', (t) => {
  const { router, sent, client, lose } = world(2);
  t.teardown(() => router.close());
  const a = client();
  router.onRecord(a.conn, call(0x3333));
  lose(sent[0].conn);
  t.is(sent.length, 2, 'resent on the other connection');
  t.is(a.c.destroyed, null);
  t.is(router.snapshot().retransmits, 1);
  t.is(router.snapshot().gssNotResent, 0);
});

test('CALL records too short to be a call header close their client; nothing reaches the transport', (t) => {
  const { router, sent, client } = world(1);
  t.teardown(() => router.close());
  const other = client();
  router.onRecord(other.conn, call(0x10));
  t.is(sent.length, 1);
  // 12 bytes: xid, CALL, rpcvers 2. 36 bytes: a header whose verifier's length word is missing.
  const short = [xdr(0x20, 0, 2), call(0x21).subarray(0, 36)];
  for (const [i, record] of short.entries()) {
    const c = client();
    router.onRecord(c.conn, record);
    t.is(c.c.destroyed, 'ERR_NOT_RPC_CALL', `${record.length} bytes: the client is closed`);
    t.like(c.c.warnings[0], { code: 'ERR_NOT_RPC_CALL', length: record.length });
    t.is(router.snapshot().malformed, i + 1);
    t.is(sent.length, 1, `${record.length} bytes: nothing sent on the RDMA side`);
  }
  t.is(router.snapshot().queued, 0);
  t.is(router.snapshot().recordsInUse, 1, 'only the other client’s call');
  // The other client goes on.
  router.onReply(sent[0].r, xdr(0x10, 1, 0, 0, 0, 0));
  router.onRecord(other.conn, call(0x11));
  t.is(sent.length, 2);
  t.is(other.c.destroyed, null);
  t.is(other.c.replies.length, 1);
});

test('a header that does not frame (an over-long credential) closes its client; one the server answers goes', (t) => {
  const { router, sent, client } = world(1);
  t.teardown(() => router.close());
  // A credential of 404 bytes (RFC 5531 §8.2: at most 400): where the call ends cannot be known.
  const tooLong = xdr(0x30, 0, 2, PROG, 1, 1, 1, 404, Buffer.alloc(404), 0, 0);
  const a = client();
  router.onRecord(a.conn, tooLong);
  t.is(a.c.destroyed, 'ERR_NOT_RPC_CALL');
  t.like(a.c.warnings[0], { code: 'ERR_NOT_RPC_CALL', headerCode: 'ERR_RPC_AUTH_TOO_LONG' });
  // The cheapest well-formed call (AUTH_NONE, no arguments: 40 bytes) goes.
  const b = client();
  router.onRecord(b.conn, call(0x31));
  t.is(call(0x31).length, 40);
  t.is(b.c.destroyed, null);
  t.is(sent.length, 1);
  // rpcvers 3 (RFC 5531 §9): the server answers RPC_MISMATCH itself.
  const mismatch = call(0x32);
  mismatch.writeUInt32BE(3, 8);
  const c = client();
  router.onRecord(c.conn, mismatch);
  t.is(c.c.destroyed, null);
  t.is(sent.length, 2);
  // An AUTH_SYS credential whose body is malformed (17 gids): the server answers AUTH_BADCRED.
  const gids = Array.from({ length: 17 }, (_, i) => i);
  const body = xdr(1, 0, 0, 0, 17, ...gids);
  const badSys = xdr(0x33, 0, 2, PROG, 1, 1, 1, body.length, body, 0, 0);
  const d = client();
  router.onRecord(d.conn, badSys);
  t.is(d.c.destroyed, null);
  t.is(sent.length, 3);
  t.is(router.snapshot().malformed, 1);
});

test('an RPCSEC_GSS call whose planning throws is still a GSS call: its XID is kept, and it is not resent', (t) => {
  // A binding that throws (the bindings are written not to; a bug there must cost only DDP and affinity).
  const registry = new UlbRegistry();
  registry.planCall = () => {
    throw new Error('a binding bug');
  };
  const { router, sent, client, lose } = world(2, registry);
  t.teardown(() => router.close());
  const a = client();
  router.onRecord(a.conn, gssCall(0x3333, 7));
  t.is(sent.length, 1);
  t.is(sent[0].bytes.readUInt32BE(0), 0x3333, 'its XID, under the verifier, goes as it is');
  lose(sent[0].conn);
  t.is(sent.length, 1, 'not sent again with its spent seq_num');
  t.is(a.c.destroyed, 'ERR_RDMA_GSS_LOST');
});
