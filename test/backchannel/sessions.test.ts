/**
 * Session facts from NFSv4.1 COMPOUNDs (gateway/ulb/sessions.ts) and the session table, on hand-made
 * RFC 8881 messages (test/backchannel/nfs41-bytes.ts, labelled hand-made: no real NFSv4.1 capture).
 */
import test from 'ava';
import fc from 'fast-check';
import type { ClientState } from '../../gateway/router/client-state.js';
import { MAX_SESSIONS_PER_CLIENT, SessionTable } from '../../gateway/router/sessions.js';
import {
  CallbackSession,
  SessionOp,
  SessionReply,
  sessionOfCallback,
  sessionOfReply,
  sessionOpOfCall,
} from '../../gateway/ulb/sessions.js';
import { RpcCallHeader } from '../../rpc/message.js';
import {
  cbCompound,
  cbCompoundGss,
  cbNull,
  cbOp,
  compoundCall,
  compoundCallGss,
  compoundReply,
  compoundReplyGss,
  NFS4ERR,
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

test('hand-made: DESTROY_SESSION wherever RFC 8881 §18.37.3 lets it stand after SEQUENCE', (t) => {
  const a = sessionId(11);
  const b = sessionId(12);
  const c = sessionId(13);
  const fh = Buffer.from('a file handle, 24 bytes.');
  const destroys = (ops: Buffer[], want: Buffer, what: string) => {
    const [k, out] = classify(compoundCall(1, 1, ops));
    t.is(k, SessionOp.DESTROY, what);
    t.deepEqual(out, want, `${what}: the session DESTROY_SESSION names`);
  };
  // Same session as SEQUENCE: DESTROY_SESSION must be the last operation.
  destroys([op.sequence(a), op.putrootfh(), op.destroySession(a)], a, 'SEQUENCE, PUTROOTFH, DESTROY(same)');
  destroys(
    [op.sequence(a), op.putfh(fh), op.getattrType(), op.lookup('d'), op.destroySession(a)],
    a,
    'SEQUENCE, PUTFH, GETATTR, LOOKUP, DESTROY(same)',
  );
  // Another session: anywhere after SEQUENCE, with operations after it too.
  destroys(
    [op.sequence(a), op.putfh(fh), op.getattrType(), op.destroySession(b), op.lookup('x'), op.getattrType()],
    b,
    'SEQUENCE(a), PUTFH, GETATTR, DESTROY(b), LOOKUP, GETATTR',
  );
  destroys([op.sequence(a), op.destroySession(b), op.putrootfh()], b, 'SEQUENCE(a), DESTROY(b), PUTROOTFH');
  destroys(
    [op.sequence(a), op.putrootfh(), op.open(7n, 'f'), op.destroySession(b)],
    b,
    'after OPEN (its arguments are walked)',
  );
  destroys(
    [op.sequence(a), op.putrootfh(), op.destroySession(b), op.destroySession(c)],
    b,
    'two: the first (the record holds one id)',
  );
  // Without SEQUENCE, DESTROY_SESSION must be alone; the server says NFS4ERR_NOT_ONLY_OP otherwise.
  destroys([op.destroySession(b), op.putrootfh()], b, 'DESTROY first, not alone');

  // Where DESTROY_SESSION cannot be found, the call is the SEQUENCE it starts with (nothing forgotten).
  const sequenceOf = (msg: Buffer, what: string) => {
    const [k, out] = classify(msg);
    t.is(k, SessionOp.SEQUENCE, what);
    t.deepEqual(out, a, `${what}: SEQUENCE's session`);
  };
  sequenceOf(compoundCall(2, 1, [op.sequence(a), op.putrootfh(), op.getattrType()]), 'no DESTROY_SESSION');
  sequenceOf(
    compoundCall(3, 1, [op.sequence(a), op.lockt(7n), op.destroySession(b)]),
    'behind LOCKT, which the walker cannot step over',
  );
  const beyond = compoundCall(4, 1, [op.sequence(a), op.putrootfh(), op.destroySession(b)]);
  beyond.writeUInt32BE(2, 40 + 8 + 4); // argarray count (after the AUTH_NONE header, tag 'hand', minor)
  sequenceOf(beyond, 'past the operation count');
  const cut = compoundCall(5, 1, [op.sequence(a), op.putrootfh(), op.destroySession(b)]);
  sequenceOf(cut.subarray(0, cut.length - 4), 'its session id cut short');
  t.is(classify(cut.subarray(0, 40 + 8 + 8 + 20))[0], SessionOp.NONE, 'SEQUENCE itself cut short');
});

test('hand-made: a DESTROY_SESSION reply counts only when that operation succeeded', (t) => {
  const a = sessionId(21);
  const named = sessionId(22);
  const out = Buffer.from(named);
  const outcome = (status: number, results: Buffer[]) =>
    sessionOfReply(compoundReply(1, status, results), SessionOp.DESTROY, out);
  const { FORE, FAILED } = SessionReply;
  t.is(outcome(0, [res.sequence(a), res.putrootfh(), res.destroySession()]), FORE, 'last, all NFS4_OK');
  t.is(
    outcome(NFS4ERR.NOENT, [res.sequence(a), res.destroySession(), res.error(15, NFS4ERR.NOENT)]),
    FORE,
    'succeeded, then a LOOKUP after it failed: the COMPOUND status is not its status',
  );
  t.is(
    outcome(NFS4ERR.NOENT, [
      res.sequence(a),
      res.putfh(),
      res.getattrType(),
      res.destroySession(),
      res.error(15, NFS4ERR.NOENT),
    ]),
    FORE,
    'the results before it stepped over',
  );
  t.deepEqual(out, named, 'the id the call named is left alone');
  t.is(
    outcome(NFS4ERR.WRONGSEC, [res.sequence(a), res.error(24, NFS4ERR.WRONGSEC)]),
    FAILED,
    'an operation before it failed: it never ran',
  );
  t.is(
    outcome(NFS4ERR.BADSESSION, [res.sequence(a), res.putrootfh(), res.error(44, NFS4ERR.BADSESSION)]),
    FAILED,
  );
  t.is(outcome(NFS4ERR.NOT_ONLY_OP, [res.sequence(a), res.error(44, NFS4ERR.NOT_ONLY_OP)]), FAILED);
  t.is(outcome(NFS4ERR.NOT_ONLY_OP, [res.error(44, NFS4ERR.NOT_ONLY_OP)]), FAILED, 'not alone, no SEQUENCE');
  t.is(outcome(0, [res.sequence(a), res.putrootfh()]), FAILED, 'NFS4_OK but no DESTROY_SESSION result');
  // OPEN's result cannot be stepped over: what follows it is hidden. An NFS4_OK COMPOUND still says
  // every operation succeeded; a failed one may have failed before DESTROY_SESSION or after: kept.
  t.is(outcome(0, [res.sequence(a), res.putfh(), res.open(), res.destroySession()]), FORE, 'hidden, NFS4_OK');
  t.is(
    outcome(NFS4ERR.NOENT, [
      res.sequence(a),
      res.putfh(),
      res.open(),
      res.destroySession(),
      res.error(15, NFS4ERR.NOENT),
    ]),
    FAILED,
    'hidden, COMPOUND failed: the safe answer',
  );
  const short = compoundReply(1, NFS4ERR.NOENT, [res.sequence(a), res.putrootfh(), res.destroySession()]);
  t.is(sessionOfReply(short.subarray(0, short.length - 8), SessionOp.DESTROY, out), FAILED, 'results cut');
  t.is(sessionOfReply(short.subarray(0, short.length - 4), SessionOp.DESTROY, out), FAILED, 'status cut');
  t.deepEqual(out, named);
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
  t.is(sessionOfCallback(header.decode(recall), recall, out), CallbackSession.NAMED);
  t.deepEqual(out, sid);
  const nul = cbNull(2);
  t.is(sessionOfCallback(header.decode(nul), nul, out), CallbackSession.NONE);
  const v40 = cbCompound(3, 0, [cbOp.recall(Buffer.alloc(12), Buffer.alloc(8))]);
  t.is(sessionOfCallback(header.decode(v40), v40, out), CallbackSession.NONE);
});

test('hand-made: RPCSEC_GSS callbacks (RFC 2203 §5.3.2): the session is read inside databody_integ; under privacy it is hidden', (t) => {
  const sid = sessionId(6);
  const ops = [cbOp.sequence(sid), cbOp.recall(Buffer.alloc(12, 0xab), Buffer.alloc(28, 1))];
  for (const service of [1, 2] as const) {
    const out = Buffer.alloc(16);
    const msg = cbCompoundGss(10 + service, service, ops);
    t.is(sessionOfCallback(header.decode(msg), msg, out), CallbackSession.NAMED, `service ${service}`);
    t.deepEqual(out, sid, `service ${service}: the id CB_SEQUENCE names`);
  }
  const priv = cbCompoundGss(13, 3, ops);
  t.is(sessionOfCallback(header.decode(priv), priv, Buffer.alloc(16)), CallbackSession.HIDDEN);
  // databody_integ's length beyond the message: nothing read from outside it.
  const integ = cbCompoundGss(14, 2, ops);
  const at = header.decode(integ).bodyOffset;
  integ.writeUInt32BE(integ.length, at);
  t.is(sessionOfCallback(header.decode(integ), integ, Buffer.alloc(16)), CallbackSession.NONE);
  // The same arguments cut inside databody_integ: its length bounds the parse, not the message's end.
  const short = cbCompoundGss(15, 2, ops);
  short.writeUInt32BE(4 + 4 + 4 + 4 + 4 + 8, at); // seq_num, tag, minor, ident, count, CB_SEQUENCE cut
  t.is(sessionOfCallback(header.decode(short), short, Buffer.alloc(16)), CallbackSession.NONE);
});

test('hand-made: COMPOUNDs under RPCSEC_GSS integrity (krb5i) are read inside databody_integ, calls and replies; privacy hides them', (t) => {
  const sid = sessionId(8);
  const other = sessionId(9);
  t.is(classify(compoundCallGss(1, 2, 1, [op.createSession(7n)]))[0], SessionOp.CREATE);
  const [bk, bout] = classify(compoundCallGss(2, 2, 1, [op.bindConnToSession(sid)]));
  t.is(bk, SessionOp.BIND);
  t.deepEqual(bout, sid);
  const [sk, sout] = classify(compoundCallGss(3, 2, 1, [op.sequence(sid), op.putrootfh()]));
  t.is(sk, SessionOp.SEQUENCE);
  t.deepEqual(sout, sid);
  // DESTROY_SESSION after SEQUENCE: found by walking inside databody_integ (no binding walked it).
  const [dk, dout] = classify(
    compoundCallGss(4, 2, 1, [op.sequence(sid), op.putrootfh(), op.destroySession(other)]),
  );
  t.is(dk, SessionOp.DESTROY);
  t.deepEqual(dout, other);
  t.is(classify(compoundCallGss(5, 1, 1, [op.sequence(sid)]))[0], SessionOp.SEQUENCE, 'service none');
  t.is(classify(compoundCallGss(6, 3, 1, [op.createSession(7n)]))[0], SessionOp.NONE, 'privacy: encrypted');
  // databody_integ's length beyond the message, or cut inside the SEQUENCE: nothing read from outside it.
  const over = compoundCallGss(7, 2, 1, [op.sequence(sid)]);
  const at = header.decode(over).bodyOffset;
  over.writeUInt32BE(over.length, at);
  t.is(classify(over)[0], SessionOp.NONE);
  const cut = compoundCallGss(8, 2, 1, [op.sequence(sid)]);
  cut.writeUInt32BE(4 + 8 + 4 + 4 + 4 + 8, at); // seq_num, tag 'hand', minor, count, SEQUENCE cut
  t.is(classify(cut)[0], SessionOp.NONE);

  const out = Buffer.alloc(16);
  const created = compoundReplyGss(1, 2, 0, [res.createSession(sid, 0x2)]);
  t.is(sessionOfReply(created, SessionOp.CREATE, out, true), SessionReply.BACK);
  t.deepEqual(out, sid);
  t.is(
    sessionOfReply(created, SessionOp.CREATE, Buffer.alloc(16)),
    SessionReply.FAILED,
    'read as plain: no session',
  );
  const bound = compoundReplyGss(2, 2, 0, [res.bindConnToSession(other, 1)]);
  t.is(sessionOfReply(bound, SessionOp.BIND, out, true), SessionReply.FORE);
  t.deepEqual(out, other);
  const destroyedReply = compoundReplyGss(3, 2, 0, [
    res.sequence(sid),
    res.putrootfh(),
    res.destroySession(),
  ]);
  t.is(sessionOfReply(destroyedReply, SessionOp.DESTROY, out, true), SessionReply.FORE);
  const failed = compoundReplyGss(4, 2, NFS4ERR.BADSESSION, [res.error(44, NFS4ERR.BADSESSION)]);
  t.is(sessionOfReply(failed, SessionOp.DESTROY, out, true), SessionReply.FAILED);
  const rOver = compoundReplyGss(5, 2, 0, [res.createSession(sid, 0x2)]);
  // databody_integ's length (after xid, REPLY, MSG_ACCEPTED, the verifier of 16 bytes and SUCCESS).
  rOver.writeUInt32BE(rOver.length, 20 + 16 + 4);
  t.is(sessionOfReply(rOver, SessionOp.CREATE, out, true), SessionReply.FAILED);
});

test('truncated and mutated session messages never throw (fast-check, fixed seed)', (t) => {
  const sid = sessionId(4);
  const other = sessionId(5);
  const fh = Buffer.alloc(20, 0xf1);
  const samples = [
    compoundCall(1, 1, [op.sequence(sid), op.destroySession(sid)]),
    compoundCall(2, 1, [op.bindConnToSession(sid)]),
    compoundCall(3, 1, [op.createSession(5n)]),
    cbCompound(4, 1, [cbOp.sequence(sid), cbOp.recall(Buffer.alloc(12), Buffer.alloc(8))]),
    cbCompoundGss(8, 2, [cbOp.sequence(sid), cbOp.recall(Buffer.alloc(12), Buffer.alloc(8))]),
    compoundCall(5, 1, [op.sequence(sid), op.putfh(fh), op.getattrType(), op.destroySession(sid)]),
    compoundCall(6, 1, [op.sequence(sid), op.open(5n, 'f'), op.destroySession(other), op.lookup('x')]),
    compoundCall(7, 1, [op.sequence(sid), op.lockt(5n), op.destroySession(other)]),
    compoundCallGss(9, 2, 1, [op.sequence(sid), op.putfh(fh), op.destroySession(other)]),
  ];
  const replies = [
    compoundReply(1, 0, [res.createSession(sid)]),
    compoundReply(2, 0, [res.bindConnToSession(sid, 3)]),
    compoundReply(3, 0, [res.sequence(sid), res.putfh(), res.getattrType(), res.destroySession()]),
    compoundReply(4, 2, [res.sequence(sid), res.open(), res.destroySession(), res.error(15, 2)]),
    compoundReply(5, 2, [res.sequence(sid), res.putfh(), res.destroySession(), res.error(15, 2)]),
  ];
  const integReplies = [
    compoundReplyGss(6, 2, 0, [res.createSession(sid)]),
    compoundReplyGss(7, 2, 0, [res.sequence(sid), res.putfh(), res.destroySession()]),
  ];
  const out = Buffer.alloc(16);
  let destroys = 0;
  let destroyed = 0;
  fc.assert(
    fc.property(
      fc.nat(samples.length - 1),
      fc.nat(),
      fc.nat(),
      fc.integer({ min: 0, max: 255 }),
      (i, cut, at, byte) => {
        const m = Buffer.from(samples[i]);
        m[at % m.length] = byte;
        // One in three is left whole (a byte changed at most), so the later operations are reached too.
        const msg = cut % 3 === 0 ? m : m.subarray(0, 28 + (cut % (m.length - 27)));
        try {
          header.decode(msg);
        } catch {
          return true; // the router never classifies a call whose header does not decode
        }
        // A DESTROY names 16 bytes of the message (never bytes from outside it).
        if (sessionOpOfCall(header, msg, out) === SessionOp.DESTROY) {
          destroys++;
          if (msg.indexOf(out) < 0) return false;
        }
        sessionOfCallback(header, msg, out);
        const r = Buffer.from(replies[i % replies.length]);
        r[at % r.length] = byte;
        const reply = cut % 3 === 0 ? r : r.subarray(0, cut % (r.length + 1));
        for (const k of [SessionOp.CREATE, SessionOp.BIND, SessionOp.SEQUENCE]) {
          sessionOfReply(reply, k, out);
          sessionOfReply(reply, k, out, true);
        }
        const integ = Buffer.from(integReplies[i % integReplies.length]);
        integ[at % integ.length] = byte;
        const integCut = cut % 3 === 0 ? integ : integ.subarray(0, cut % (integ.length + 1));
        for (const k of [SessionOp.CREATE, SessionOp.DESTROY]) {
          const before = Buffer.from(out);
          if (sessionOfReply(integCut, k, out, true) !== SessionReply.FAILED && k === SessionOp.CREATE)
            if (integCut.indexOf(out) < 0) return false; // an id from inside the reply only
          if (k === SessionOp.DESTROY && !out.equals(before)) return false;
        }
        const named = Buffer.from(out);
        if (sessionOfReply(reply, SessionOp.DESTROY, out) === SessionReply.FORE) destroyed++;
        if (!out.equals(named)) return false; // a DESTROY reply never rewrites the id the call named
        return true;
      },
    ),
    { numRuns: 3000, seed: 8_0002 },
  );
  t.true(destroys > 150, `DESTROY_SESSION found ${destroys} times`);
  t.true(destroyed > 150, `DESTROY_SESSION succeeded ${destroyed} times`);
});

/** A stand-in client for the session table: its sessions, whether it left, and a log. */
function fakeClient(warned: unknown[] = []): ClientState {
  return {
    sessions: new Set(),
    closed: false,
    sessionCapLogged: false,
    conn: { log: { warn: (o: unknown) => warned.push(o) } },
  } as unknown as ClientState;
}

test('session table: find by id, collisions chained, change of owner, forget', (t) => {
  const table = new SessionTable(1000);
  const c1 = fakeClient();
  const c2 = fakeClient();
  const ids = Array.from({ length: 200 }, (_, i) => sessionId(i));
  for (const id of ids) table.learn(id, c1, null);
  t.is(table.size, 200);
  for (const id of ids) t.is(table.find(id)?.client, c1);
  t.is(table.find(sessionId(999)), null);
  const s = table.learn(ids[5], c2, null);
  t.is(s.client, c2);
  t.is(c1.sessions.size, 200, 'the previous owner stays a binder');
  t.deepEqual([...c2.sessions], [s]);
  table.forget(s);
  t.is(table.find(ids[5]), null);
  t.is(c2.sessions.size, 0);
  t.is(c1.sessions.size, 199);
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

test('session table: a client holds at most MAX_SESSIONS_PER_CLIENT; the oldest goes first, logged once', (t) => {
  const table = new SessionTable();
  const warned: unknown[] = [];
  const c = fakeClient(warned);
  const n = MAX_SESSIONS_PER_CLIENT + 10;
  for (let i = 0; i < n; i++) table.learn(sessionId(i), c, null);
  t.is(c.sessions.size, MAX_SESSIONS_PER_CLIENT);
  t.is(table.size, MAX_SESSIONS_PER_CLIENT);
  t.is(table.evicted, 10);
  for (let i = 0; i < 10; i++)
    t.is(table.find(sessionId(i)), null, `session ${i} (among the oldest) forgotten`);
  t.is(table.find(sessionId(n - 1))?.client, c, 'the newest kept');
  t.is(warned.length, 1, 'one warning per client, not one per session');
});

test('session table: a client leaving releases its sessions in linear time (Set, not indexOf)', (t) => {
  // A client's sessions are removed one by one when it leaves; with an array searched from the front
  // and emptied from the back that was quadratic. Counting comparisons rather than timing: every
  // removal touches the client's collection once.
  const table = new SessionTable(Number.MAX_SAFE_INTEGER);
  const c = fakeClient();
  const n = 2000;
  for (let i = 0; i < n; i++) table.learn(sessionId(i), c, null);
  t.true(c.sessions instanceof Set, "the client's sessions are a Set (O(1) removal)");
  let forgotten = 0;
  for (const s of c.sessions) forgotten += table.release(c, s);
  t.is(forgotten, n);
  t.is(table.size, 0);
  t.is(c.sessions.size, 0);
});

test('session table: a FORE-only binder keeps the session alive after its owner leaves', (t) => {
  const table = new SessionTable();
  const owner = fakeClient();
  const binder = fakeClient();
  const s = table.learn(sessionId(1), owner, null);
  table.bindFore(s, binder);
  t.is(s.client, owner, 'CDFS4_FORE does not change the owner (RFC 8881 §18.34.3)');
  owner.closed = true;
  t.is(table.release(owner, s), 0, 'not forgotten');
  t.is(s.client, binder);
  t.is(table.find(sessionId(1)), s);
  binder.closed = true;
  t.is(table.release(binder, s), 1, 'forgotten with its last client');
  t.is(table.size, 0);
});
