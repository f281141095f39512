/** The uint32-keyed map of the per-call lookups: it must behave exactly as a `Map` would. */
import test from 'ava';
import fc from 'fast-check';
import { U32Map } from '../../common/u32-map.js';

type Op =
  | { kind: 'set'; key: number; value: number }
  | { kind: 'delete'; key: number }
  | { kind: 'get'; key: number };

/** Keys that collide on purpose: few distinct values, values differing only in high or low bits. */
const key = fc.oneof(
  fc.integer({ min: 0, max: 40 }),
  fc.integer({ min: 0, max: 40 }).map((k) => (k << 24) >>> 0),
  fc.integer({ min: 0, max: 0xffff_ffff }),
  fc.constantFrom(0, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff),
);
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant('set' as const), key, value: fc.integer({ min: 0, max: 1000 }) }),
  fc.record({ kind: fc.constant('delete' as const), key }),
  fc.record({ kind: fc.constant('get' as const), key }),
);

test('any sequence of set, delete and get gives what a Map gives', (t) => {
  fc.assert(
    fc.property(fc.array(op, { maxLength: 600 }), (ops) => {
      const m = new U32Map<number>();
      const ref = new Map<number, number>();
      for (const o of ops) {
        if (o.kind === 'set') {
          m.set(o.key, o.value);
          ref.set(o.key, o.value);
        } else if (o.kind === 'delete') {
          if (m.delete(o.key) !== ref.delete(o.key)) return false;
        } else if (m.get(o.key) !== ref.get(o.key) || m.has(o.key) !== ref.has(o.key)) {
          return false;
        }
        if (m.size !== ref.size) return false;
      }
      // Every key the Map holds is found, and nothing else is there.
      for (const [k, v] of ref) if (m.get(k) !== v) return false;
      let n = 0;
      m.forEach((v, k) => {
        if (ref.get(k) === v) n++;
      });
      return n === ref.size;
    }),
    { numRuns: 300 },
  );
  t.pass();
});

/** Keys with home slot `home` in a 16-slot table (`new U32Map(8)`): the top 4 bits of k × golden ratio. */
function collidingKeys(n: number, home: number): number[] {
  const out: number[] = [];
  for (let k = 1; out.length < n; k++) if (Math.imul(k, 0x9e3779b1) >>> 28 === home) out.push(k);
  return out;
}

test('deleting inside a probe run keeps the entries after it reachable (backward shift)', (t) => {
  const [a, b, c] = collidingKeys(3, 5);
  const [d] = collidingKeys(1, 6); // lands after the run of home 5
  for (const order of [
    [a, b, c, d],
    [d, a, b, c],
  ]) {
    for (const gone of [a, b, c, d]) {
      const m = new U32Map<number>(8);
      for (const k of order) m.set(k, k * 10);
      t.true(m.delete(gone));
      for (const k of order)
        t.is(m.get(k), k === gone ? undefined : k * 10, `order ${order}, deleted ${gone}, key ${k}`);
      t.is(m.size, 3);
    }
  }
  // Runs that wrap around the end of the table.
  const [x, y, z] = collidingKeys(3, 15);
  const [w] = collidingKeys(1, 0);
  const m = new U32Map<number>(8);
  for (const k of [x, y, z, w]) m.set(k, k);
  t.true(m.delete(x));
  for (const k of [y, z, w]) t.is(m.get(k), k);
  t.true(m.delete(z));
  for (const k of [y, w]) t.is(m.get(k), k);
  // An entry past the wrap whose home lies after the hole must stay: a@13, b@14, c@15, d@0 (home 14).
  const [a13] = collidingKeys(1, 13);
  const [b14, d14] = collidingKeys(2, 14);
  const [c15] = collidingKeys(1, 15);
  const m2 = new U32Map<number>(8);
  for (const k of [a13, b14, c15, d14]) m2.set(k, k);
  t.true(m2.delete(a13));
  for (const k of [b14, c15, d14]) t.is(m2.get(k), k);
});

test('constant churn of 64 XIDs in flight (the hot path) keeps every entry reachable', (t) => {
  const m = new U32Map<object>();
  const live = new Map<number, object>();
  let xid = 0xffff_ff00; // wraps through 2^32
  for (let i = 0; i < 100_000; i++) {
    const v = {};
    m.set(xid, v);
    live.set(xid, v);
    if (live.size > 64) {
      const [oldest] = live.keys();
      t.is(m.get(oldest), live.get(oldest));
      t.true(m.delete(oldest));
      live.delete(oldest);
    }
    xid = (xid + 1) >>> 0;
  }
  t.is(m.size, 64);
  for (const [k, v] of live) t.is(m.get(k), v);
  m.clear();
  t.is(m.size, 0);
  t.false(m.has(xid - 1));
});

test('keys are uint32: a negative int32 names the same key; undefined values are refused', (t) => {
  const m = new U32Map<string>();
  m.set(-1, 'a');
  t.is(m.get(0xffff_ffff), 'a');
  t.true(m.delete(0xffff_ffff));
  t.throws(() => m.set(1, undefined as unknown as string), { instanceOf: TypeError });
});
