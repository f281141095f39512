/**
 * NFSv4.1 sessions set up under RPCSEC_GSS integrity (krb5i: Linux sends CREATE_SESSION and
 * BIND_CONN_TO_SESSION so with a machine credential, and a sec=krb5i mount wraps every COMPOUND) are
 * learned through the router, their arguments and results read inside `databody_integ` (RFC 2203
 * §5.3.2.2), so that their callbacks reach their client. Under privacy (krb5p) nothing can be read.
 * The router is the product's, with its real session table and backchannel relay; the pool, the RDMA
 * connections and the client connections are stand-ins with only what the router touches. Messages are
 * hand-made from RFC 8881 / RFC 2203 XDR (nfs41-bytes.ts).
 */
import test from 'ava';
import type { CallRecord } from '../../gateway/router/call-record.js';
import { Router } from '../../gateway/router.js';
import { UlbRegistry } from '../../gateway/ulb/registry.js';
import type { ConnectionPool, ResponderHandler } from '../../rdma-backend/transport/index.js';
import type { FrontendConnection } from '../../tcp-frontend/server.js';
import {
  cbCompoundGss,
  cbNull,
  cbOp,
  compoundCallGss,
  compoundReplyGss,
  op,
  res,
  sessionId,
} from './nfs41-bytes.js';

/** Two RDMA connections (their backchannel ports captured) and clients to make. */
function world() {
  const sent: { conn: number; r: CallRecord }[] = [];
  const ports: ResponderHandler[] = [];
  const refused: unknown[] = [];
  const rdma = [0, 1].map((i) => ({
    id: i + 1,
    state: 'ready',
    queuedCalls: 0,
    credits: { canSend: () => true },
    submit(r: CallRecord) {
      sent.push({ conn: i, r });
    },
    setResponder(port: ResponderHandler) {
      ports[i] = port;
    },
    replyError(_call: unknown, e: unknown) {
      refused.push(e);
    },
    reply() {},
  }));
  const pool = { connections: () => rdma, onReady: () => () => {} } as unknown as ConnectionPool;
  const router = new Router({ registry: new UlbRegistry(), tickMs: 1e9 });
  router.attach(pool);
  const client = () => {
    const c = {
      id: 0,
      unsentBytes: 0,
      context: undefined,
      destroyed: null as string | null,
      log: { warn() {}, info() {}, debug() {} },
      replies: [] as Buffer[],
      callbacks: [] as Buffer[],
      sendReply(parts: Buffer[]) {
        c.replies.push(Buffer.from(parts[0]));
      },
      sendRecord(parts: Buffer[]) {
        c.callbacks.push(Buffer.from(parts[0]));
      },
      notifyWhenFlushed() {},
      replyReserved: 0,
      gone: false,
      remotePort: 0,
      reserveReplyRoom() {},
      releaseReplyRoom() {},
      awaitReplyRoom() {},
      release() {},
      destroy(code: string) {
        c.destroyed = code;
      },
    };
    return { c, conn: c as unknown as FrontendConnection };
  };
  /** A backward call from the server on connection `i`, as the transport hands it over. */
  const callback = (i: number, message: Buffer) =>
    ports[i].onCall({
      xid: message.readUInt32BE(0),
      version: 1,
      message,
      backward: true,
      writeChunks: [],
      replyChunk: null,
      invHandle: 0,
    } as never);
  return { router, sent, client, callback, refused };
}

test('krb5i: CREATE_SESSION through the router teaches the session and its backchannel; its callbacks reach the client', (t) => {
  const { router, sent, client, callback, refused } = world();
  t.teardown(() => router.close());
  const sid = sessionId(21);
  // Another client with calls of its own, so that a callback sent anywhere but to its owner would show.
  const other = client();
  const a = client();
  router.onRecord(a.conn, compoundCallGss(0x51, 2, 1, [op.createSession(0x77n)], 31));
  t.is(sent.length, 1);
  const on = sent[0].conn;
  router.onReply(sent[0].r, compoundReplyGss(0x51, 2, 0, [res.createSession(sid, 0x2)], 31));
  t.is(a.c.replies.length, 1, 'the reply reached the client');
  t.is(router.stats.sessionsLearned, 1, 'the session was learned from the krb5i CREATE_SESSION reply');
  // A krb5i SEQUENCE of the session goes on the connection it was created on (affinity), even when
  // another client's call has just made that connection the more loaded one.
  router.onRecord(other.conn, compoundCallGss(0x61, 1, 1, [op.putrootfh()], 5));
  router.onRecord(a.conn, compoundCallGss(0x52, 2, 1, [op.sequence(sid), op.putrootfh()], 32));
  t.is(sent[sent.length - 1].r.clientXid, 0x52);
  t.is(sent[sent.length - 1].conn, on, 'the SEQUENCE went on the session’s connection');
  // CB_SEQUENCE under krb5i names the session: it goes to its owner.
  callback(
    on,
    cbCompoundGss(0x9001, 2, [cbOp.sequence(sid), cbOp.recall(Buffer.alloc(12, 1), Buffer.alloc(8, 2))]),
  );
  t.is(a.c.callbacks.length, 1, 'the krb5i CB_SEQUENCE reached the client owning the session');
  t.is(a.c.callbacks[0].readUInt32BE(0), 0x9001, 'with the server’s XID (the MIC covers it)');
  // CB_NULL (AUTH_NONE) names no session: a client whose back channel is on that connection answers.
  callback(on, cbNull(0x9002));
  t.is(a.c.callbacks.length, 2, 'CB_NULL reached it too');
  t.is(other.c.callbacks.length, 0);
  t.deepEqual(refused, []);
  t.is(router.stats.backchannelOrphans, 0);
});

test('krb5i: BIND_CONN_TO_SESSION is learned on its connection; krb5p stays unlearnable', (t) => {
  const { router, sent, client, callback } = world();
  t.teardown(() => router.close());
  const sid = sessionId(22);
  const a = client();
  router.onRecord(a.conn, compoundCallGss(0x71, 2, 1, [op.bindConnToSession(sid)], 40));
  router.onReply(sent[0].r, compoundReplyGss(0x71, 2, 0, [res.bindConnToSession(sid, 3)], 40));
  t.is(router.stats.sessionsLearned, 1);
  callback(sent[0].conn, cbCompoundGss(0x9101, 2, [cbOp.sequence(sid)]));
  t.is(a.c.callbacks.length, 1, 'the callback of the bound session reached its client');
  // Under privacy the arguments and results are encrypted: nothing is learned, nothing read.
  const b = client();
  router.onRecord(b.conn, compoundCallGss(0x81, 3, 1, [op.createSession(0x78n)], 50));
  router.onReply(sent[1].r, compoundReplyGss(0x81, 3, 0, [res.createSession(sessionId(23), 0x2)], 50));
  t.is(router.stats.sessionsLearned, 1, 'a krb5p session is not learned');
  t.is(b.c.replies.length, 1);
});
