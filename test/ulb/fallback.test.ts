/**
 * Safe fallback on messages the bindings cannot understand: real captured calls and replies, truncated,
 * with bytes flipped or words overwritten (fast-check). The bindings must never throw, never report an
 * item outside the message or misaligned, and `locateResult` must answer -1 or an offset inside the reply.
 */
import test from 'ava';
import fc from 'fast-check';
import { createNfsRegistry, UlbCallPlan } from '../../gateway/ulb/index.js';
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
