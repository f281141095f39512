/**
 * Safe fallback on messages the bindings cannot understand: real captured calls and replies, truncated,
 * with bytes flipped or words overwritten (fast-check). The bindings must never throw, never report an
 * item outside the message or misaligned, and `locateResult` must answer -1 or an offset inside the reply.
 */
import test from 'ava';
import fc from 'fast-check';
import { createNfsRegistry, Nfs4Op, UlbCallPlan, UlbOutcome } from '../../gateway/ulb/index.js';
import { SessionOp, SessionReply, sessionOfReply, sessionOpOfCall } from '../../gateway/ulb/sessions.js';
import { successResultsOffset } from '../../gateway/ulb/types.js';
import { RpcCallHeader } from '../../rpc/message.js';
import { loadExchanges } from './captures.js';

const exchanges = [...loadExchanges('nfs3'), ...loadExchanges('nfs4')];
const registry = createNfsRegistry({ pathnameResults: true });
const header = new RpcCallHeader();
const plan = new UlbCallPlan();
const original = new UlbCallPlan();

const mutation = fc.record({
  which: fc.nat(exchanges.length - 1),
  cut: fc.option(fc.nat(), { nil: undefined }),
  flips: fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 4 }),
  words: fc.array(fc.tuple(fc.nat(), fc.constantFrom(0, 1, 2, 0x7fffffff, 0xffffffff, 4096, 65536)), {
    maxLength: 3,
  }),
});

/** Mutates the bytes from `from` on (the procedure body: header garbage is the RPC decoder's concern). */
function mutate(
  buf: Buffer,
  from: number,
  m: { cut?: number; flips: [number, number][]; words: [number, number][] },
): Buffer {
  let b = Buffer.from(buf);
  const body = Math.max(1, b.length - from);
  for (const [at, v] of m.flips) b[from + (at % body)] = v;
  for (const [at, v] of m.words) {
    const word = from + (at % Math.max(1, Math.floor(body / 4))) * 4;
    if (word + 4 <= b.length) b.writeUInt32BE(v >>> 0, word);
  }
  if (m.cut !== undefined) b = b.subarray(0, from + (m.cut % (body + 1)));
  return b;
}

test('mutated calls: never a throw, never an item outside the message', (t) => {
  let reached = 0;
  fc.assert(
    fc.property(mutation, (m) => {
      const e = exchanges[m.which];
      const msg = mutate(e.call, e.header.bodyOffset, m);
      header.decode(msg);
      registry.planCall(header, plan);
      if (plan.binding !== null) reached++;
      let end = header.bodyOffset;
      for (const it of plan.args) {
        if (it.offset < end || it.offset % 4 !== 0 || it.length < 0) return false;
        end = it.offset + it.length + ((4 - (it.length % 4)) % 4);
        if (end > msg.length) return false;
      }
      return plan.results.every((n) => n > 0 && n <= 16 * 1024 * 1024);
    }),
    { numRuns: 3000, seed: 8 },
  );
  // Most mutations still decode far enough for a binding to answer; the rest must fall back cleanly.
  t.true(reached > 1000, `bindings answered ${reached} times`);
});

test('mutated replies: locateResult never throws and stays inside the reply', (t) => {
  const ddp = exchanges.filter((e) => registry.planCall(e.header, original).results.length > 0);
  t.true(ddp.length >= 4);
  fc.assert(
    fc.property(mutation, fc.nat(3), (m, index) => {
      const e = ddp[m.which % ddp.length];
      registry.planCall(e.header, original);
      const reply = mutate(e.reply, 24, m);
      const at = original.locateResult(reply, index);
      return at === -1 || (at >= 0 && at <= reply.length && at % 4 === 0);
    }),
    { numRuns: 3000, seed: 9 },
  );
});

// NFSv4.1 sessions (gateway/ulb/sessions.ts): the captured NFSv4.0 COMPOUNDs made session calls —
// minor version 1, SEQUENCE(A) put first and DESTROY_SESSION(B) last (RFC 8881 §18.37.3: another
// session's DESTROY_SESSION may stand anywhere after SEQUENCE) — so that finding DESTROY_SESSION, and its
// result in the reply, has real operations to step over. Each reply gets SEQUENCE's result first and,
// when the COMPOUND succeeded, DESTROY_SESSION's last. (SETCLIENTID and the like are not NFSv4.1
// operations: for the classifier they are just operations it cannot step over.)
const SID_A = Buffer.from('session A 16 by.');
const SID_B = Buffer.from('session B 16 by.');
const word = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0, 0);
  return b;
};
const pad4 = (n: number) => (n + 3) & ~3;

function sessionExchange(e: (typeof exchanges)[number]): { call: Buffer; reply: Buffer; ok: boolean } {
  const c = e.call;
  const callTag = e.header.bodyOffset;
  const callOps = callTag + 4 + pad4(c.readUInt32BE(callTag)) + 8;
  const call = Buffer.concat([
    c.subarray(0, callOps - 8),
    word(1),
    word(c.readUInt32BE(callOps - 4) + 2),
    word(Nfs4Op.SEQUENCE),
    SID_A,
    Buffer.alloc(16, 0), // sequenceid, slotid, highest_slotid, cachethis
    c.subarray(callOps),
    word(Nfs4Op.DESTROY_SESSION),
    SID_B,
  ]);
  const r = e.reply;
  const at = successResultsOffset(r, 0, r.length);
  const ok = r.readUInt32BE(at) === 0;
  const results = at + 4 + 4 + pad4(r.readUInt32BE(at + 4)) + 4;
  const reply = Buffer.concat([
    r.subarray(0, results - 4),
    word(r.readUInt32BE(results - 4) + (ok ? 2 : 1)),
    word(Nfs4Op.SEQUENCE),
    word(0),
    SID_A,
    Buffer.alloc(20, 0), // sr_sequenceid ... sr_status_flags
    r.subarray(results),
    ok ? Buffer.concat([word(Nfs4Op.DESTROY_SESSION), word(0)]) : Buffer.alloc(0),
  ]);
  return { call, reply, ok };
}

const compounds = loadExchanges('nfs4')
  .filter((e) => e.header.proc === 1)
  .map(sessionExchange);
const sessionHeader = new RpcCallHeader();
const sid = Buffer.alloc(16);

test('NFSv4.1 sessions on the captured COMPOUNDs: DESTROY_SESSION found behind real operations', (t) => {
  let found = 0;
  let forgotten = 0;
  for (const { call, reply, ok } of compounds) {
    sessionHeader.decode(call);
    // DESTROY_SESSION is found exactly when the argument walk knows every operation before it.
    registry.planCall(sessionHeader, plan);
    const walkable = plan.outcome === UlbOutcome.COMPLETE;
    const k = sessionOpOfCall(sessionHeader, call, sid);
    t.is(k, walkable ? SessionOp.DESTROY : SessionOp.SEQUENCE);
    t.deepEqual(sid, walkable ? SID_B : SID_A);
    // With the plan (as the router calls it), the same answer without a second walk.
    const planned = Buffer.alloc(16);
    t.is(sessionOpOfCall(sessionHeader, call, planned, plan), k);
    t.deepEqual(planned, sid);
    t.is(plan.destroySessionArgs >= 0, walkable);
    if (k !== SessionOp.DESTROY) continue;
    found++;
    // Forgotten only after a COMPOUND that succeeded: a failed one stopped before DESTROY_SESSION.
    const outcome = sessionOfReply(reply, SessionOp.DESTROY, sid);
    t.is(outcome, ok ? SessionReply.FORE : SessionReply.FAILED);
    if (outcome === SessionReply.FORE) forgotten++;
  }
  t.true(
    found >= 10 && forgotten >= 10 && found < compounds.length,
    `${found} found, ${forgotten} forgotten`,
  );
  t.log(`${compounds.length} COMPOUNDs: DESTROY_SESSION found in ${found}, forgotten after ${forgotten}`);
});

test('NFSv4.1 sessions on mutated captured COMPOUNDs: never a throw, never an id from outside the message', (t) => {
  let destroys = 0;
  fc.assert(
    fc.property(mutation, (m) => {
      const { call, reply } = compounds[m.which % compounds.length];
      const msg = mutate(call, sessionHeader.decode(call).bodyOffset, m);
      sessionHeader.decode(msg);
      const k = sessionOpOfCall(sessionHeader, msg, sid);
      if (k === SessionOp.DESTROY) {
        destroys++;
        if (msg.indexOf(sid) < 0) return false;
      }
      // The plan's walk (as the router passes it) gives the same answer as the classifier's own walk.
      registry.planCall(sessionHeader, plan);
      const planned = Buffer.alloc(16);
      if (sessionOpOfCall(sessionHeader, msg, planned, plan) !== k) return false;
      if (k !== SessionOp.NONE && !planned.equals(sid)) return false;
      const r = mutate(reply, 24, m);
      for (const k of [SessionOp.SEQUENCE, SessionOp.CREATE, SessionOp.BIND]) sessionOfReply(r, k, sid);
      const named = Buffer.from(sid);
      sessionOfReply(r, SessionOp.DESTROY, sid);
      return sid.equals(named);
    }),
    { numRuns: 3000, seed: 10 },
  );
  t.true(destroys > 100, `DESTROY_SESSION found ${destroys} times`);
});
