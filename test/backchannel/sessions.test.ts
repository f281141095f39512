/**
 * Session facts from NFSv4.1 COMPOUNDs (gateway/ulb/sessions.ts) and the session table, on hand-made
 * RFC 8881 messages (test/backchannel/nfs41-bytes.ts, labelled hand-made: no real NFSv4.1 capture).
 */
import test from 'ava';
import fc from 'fast-check';
import type { ClientState } from '../../gateway/router/client-state.js';
import { SessionTable } from '../../gateway/router/sessions.js';
import {
  SessionOp,
  SessionReply,
  sessionOfCallback,
  sessionOfReply,
  sessionOpOfCall,
} from '../../gateway/ulb/sessions.js';
import { RpcCallHeader } from '../../rpc/message.js';
import {
  cbCompound,
  cbNull,
  cbOp,
  compoundCall,
  compoundReply,
  op,
  res,
  rpcCall,
  sessionId,
  xdr,
} from './nfs41-bytes.js';

const header = new RpcCallHeader();
function classify(msg: Buffer, out = Buffer.alloc(16)): [number, Buffer] {
  return [sessionOpOfCall(header.decode(msg), msg, out), out];
}

test('hand-made: SEQUENCE-led compounds name their session; 4.0 and other programs are NONE', (t) => {
  const sid = sessionId(7);
  const [k, out] = classify(compoundCall(1, 1, [op.sequence(sid), op.putrootfh()], 'a tag of 13 b'));
  t.is(k, SessionOp.SEQUENCE);
  t.deepEqual(out, sid);
  t.is(classify(compoundCall(2, 2, [op.sequence(sid)]))[0], SessionOp.SEQUENCE, 'minor 2 too');
  t.is(classify(compoundCall(3, 0, [op.putrootfh()]))[0], SessionOp.NONE, 'NFSv4.0');
  t.is(classify(compoundCall(4, 1, [op.putrootfh()]))[0], SessionOp.NONE, 'no SEQUENCE');
  t.is(classify(compoundCall(5, 1, []))[0], SessionOp.NONE, 'no operations');
  const notNfs = rpcCall(6, 100005, 3, 1, xdr(0, 1, 1, op.sequence(sid)));
  t.is(classify(notNfs)[0], SessionOp.NONE, 'MOUNT');
});

test('hand-made: CREATE_SESSION, BIND_CONN_TO_SESSION and DESTROY_SESSION (alone or after SEQUENCE)', (t) => {
  const a = sessionId(1);
  const b = sessionId(2);
  t.is(classify(compoundCall(1, 1, [op.createSession(0x1234n)]))[0], SessionOp.CREATE);
  const [bk, bout] = classify(compoundCall(2, 1, [op.bindConnToSession(a)]));
  t.is(bk, SessionOp.BIND);
  t.deepEqual(bout, a);
  const [dk, dout] = classify(compoundCall(3, 1, [op.destroySession(b)]));
  t.is(dk, SessionOp.DESTROY);
  t.deepEqual(dout, b);
  const [sk, sout] = classify(compoundCall(4, 1, [op.sequence(a), op.destroySession(b)]));
  t.is(sk, SessionOp.DESTROY);
  t.deepEqual(sout, b, 'the session destroyed, not the one of SEQUENCE');
});

test('hand-made: replies give the session and whether the connection carries the backchannel', (t) => {
  const sid = sessionId(9);
  const out = Buffer.alloc(16);
  t.is(
    sessionOfReply(compoundReply(1, 0, [res.createSession(sid, 0x2)]), SessionOp.CREATE, out),
    SessionReply.BACK,
  );
  t.deepEqual(out, sid);
  t.is(
    sessionOfReply(compoundReply(1, 0, [res.createSession(sid, 0)]), SessionOp.CREATE, out),
    SessionReply.FORE,
  );
  // NFS4ERR_CLID_INUSE (10017): the COMPOUND fails; nothing learned.
  const failed = compoundReply(1, 10017, [res.createSessionError(10017)]);
  t.is(sessionOfReply(failed, SessionOp.CREATE, out), SessionReply.FAILED);
  // CDFS4_BACK = 2, CDFS4_BOTH = 3, CDFS4_FORE = 1
  for (const [dir, want] of [
    [1, SessionReply.FORE],
    [2, SessionReply.BACK],
    [3, SessionReply.BACK],
  ] as const) {
    t.is(sessionOfReply(compoundReply(1, 0, [res.bindConnToSession(sid, dir)]), SessionOp.BIND, out), want);
  }
  t.is(
    sessionOfReply(compoundReply(1, 0, [res.destroySession()]), SessionOp.DESTROY, out),
    SessionReply.FORE,
  );
  t.is(
    sessionOfReply(compoundReply(1, 10052, [xdr(44, 10052)]), SessionOp.DESTROY, out),
    SessionReply.FAILED,
  );
  // SEQUENCE: the session the server accepted the call in; fore channel only. NFS4ERR_BADSESSION (10052)
  // in the SEQUENCE result, or a COMPOUND that failed later (NFS4ERR_NOENT, 2), teaches nothing.
  const seqOut = Buffer.alloc(16);
  t.is(
    sessionOfReply(compoundReply(1, 0, [res.sequence(sid), res.putrootfh()]), SessionOp.SEQUENCE, seqOut),
    SessionReply.FORE,
  );
  t.deepEqual(seqOut, sid);
  t.is(
    sessionOfReply(compoundReply(1, 10052, [xdr(53, 10052)]), SessionOp.SEQUENCE, out),
    SessionReply.FAILED,
  );
  t.is(
    sessionOfReply(compoundReply(1, 2, [res.sequence(sid), xdr(24, 2)]), SessionOp.SEQUENCE, out),
    SessionReply.FAILED,
  );
  // A reply of another operation (the call was misclassified) is not believed.
  t.is(sessionOfReply(compoundReply(1, 0, [res.putrootfh()]), SessionOp.CREATE, out), SessionReply.FAILED);
  t.is(sessionOfReply(compoundReply(1, 0, [res.putrootfh()]), SessionOp.SEQUENCE, out), SessionReply.FAILED);
  // A denied RPC reply (AUTH_ERROR) is not a success.
  t.is(sessionOfReply(xdr(1, 1, 1, 1, 1), SessionOp.CREATE, out), SessionReply.FAILED);
});

test('hand-made: CB_COMPOUND with CB_SEQUENCE names its session; CB_NULL and 4.0 callbacks do not', (t) => {
  const sid = sessionId(3);
  const out = Buffer.alloc(16);
  const recall = cbCompound(1, 1, [
    cbOp.sequence(sid),
    cbOp.recall(Buffer.alloc(12, 0xab), Buffer.alloc(28, 1)),
  ]);
  t.true(sessionOfCallback(header.decode(recall), recall, out));
  t.deepEqual(out, sid);
  const nul = cbNull(2);
  t.false(sessionOfCallback(header.decode(nul), nul, out));
  const v40 = cbCompound(3, 0, [cbOp.recall(Buffer.alloc(12), Buffer.alloc(8))]);
  t.false(sessionOfCallback(header.decode(v40), v40, out));
});

test('truncated and mutated session messages never throw (fast-check, fixed seed)', (t) => {
  const sid = sessionId(4);
  const samples = [
    compoundCall(1, 1, [op.sequence(sid), op.destroySession(sid)]),
    compoundCall(2, 1, [op.bindConnToSession(sid)]),
    compoundCall(3, 1, [op.createSession(5n)]),
    cbCompound(4, 1, [cbOp.sequence(sid), cbOp.recall(Buffer.alloc(12), Buffer.alloc(8))]),
  ];
  const replies = [
    compoundReply(1, 0, [res.createSession(sid)]),
    compoundReply(2, 0, [res.bindConnToSession(sid, 3)]),
  ];
  const out = Buffer.alloc(16);
  fc.assert(
    fc.property(
      fc.nat(samples.length - 1),
      fc.nat(),
      fc.nat(),
      fc.integer({ min: 0, max: 255 }),
      (i, cut, at, byte) => {
        const m = Buffer.from(samples[i]);
        m[at % m.length] = byte;
        const msg = m.subarray(0, 28 + (cut % (m.length - 27)));
        try {
          header.decode(msg);
        } catch {
          return true; // the router never classifies a call whose header does not decode
        }
        sessionOpOfCall(header, msg, out);
        sessionOfCallback(header, msg, out);
        const r = Buffer.from(replies[i % replies.length]);
        r[at % r.length] = byte;
        for (const k of [SessionOp.CREATE, SessionOp.BIND, SessionOp.DESTROY]) {
          sessionOfReply(r.subarray(0, cut % (r.length + 1)), k, out);
        }
        return true;
      },
    ),
    { numRuns: 3000, seed: 8_0002 },
  );
  t.pass();
});

test('session table: find by id, collisions chained, change of owner, forget', (t) => {
  const table = new SessionTable();
  const c1 = { sessions: [] } as unknown as ClientState;
  const c2 = { sessions: [] } as unknown as ClientState;
  const ids = Array.from({ length: 200 }, (_, i) => sessionId(i));
  for (const id of ids) table.learn(id, c1, null);
  t.is(table.size, 200);
  for (const id of ids) t.is(table.find(id)?.client, c1);
  t.is(table.find(sessionId(999)), null);
  const s = table.learn(ids[5], c2, null);
  t.is(s.client, c2);
  t.is(c1.sessions.length, 199);
  t.deepEqual(c2.sessions, [s]);
  table.forget(s);
  t.is(table.find(ids[5]), null);
  t.is(c2.sessions.length, 0);
  t.is(table.size, 199);
  // Ids differing in one byte are told apart (the byte comparison decides, not the hash).
  const x = Buffer.alloc(16);
  const y = Buffer.alloc(16);
  y[15] = 1;
  table.learn(x, c1, null);
  table.learn(y, c2, null);
  t.is(table.find(x)?.client, c1);
  t.is(table.find(y)?.client, c2);
});
