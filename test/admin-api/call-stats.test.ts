/**
 * The router's per-call statistics (gateway/router/call-stats.ts) that feed `rpc_calls_total`,
 * `rpc_replies_total`, `rpc_call_duration_seconds` and `rdma_call_failures_total`: the bounded table, the
 * reply status decoding and the histogram bucketing.
 */
import test from 'ava';
import fc from 'fast-check';
import {
  CALL_TABLE_ENTRIES,
  CallStats,
  LATENCY_BOUNDS,
  REPLY_STATUSES,
  replyStatusIndex,
} from '../../gateway/router/call-stats.js';

/** An RPC reply: xid, REPLY, reply_stat, then either verf + accept_stat or reject_stat. */
function reply(words: number[], verfBody = 0): Buffer {
  const [replyStat, ...rest] = words;
  if (replyStat === 1) {
    const b = Buffer.alloc(16);
    b.writeUInt32BE(1, 4);
    b.writeUInt32BE(1, 8);
    b.writeUInt32BE(rest[0], 12);
    return b;
  }
  const pad = (verfBody + 3) & ~3;
  const b = Buffer.alloc(24 + pad);
  b.writeUInt32BE(1, 4);
  b.writeUInt32BE(0, 8);
  b.writeUInt32BE(verfBody ? 6 : 0, 12);
  b.writeUInt32BE(verfBody, 16);
  b.writeUInt32BE(rest[0], 20 + pad);
  return b;
}

test('reply statuses are decoded from reply_stat / accept_stat / reject_stat (RFC 5531 §9)', (t) => {
  for (let accept = 0; accept <= 5; accept++) {
    t.is(REPLY_STATUSES[replyStatusIndex(reply([0, accept]))], REPLY_STATUSES[accept]);
    // A verifier with a body (RPCSEC_GSS) shifts accept_stat; 5 bytes pad to 8.
    t.is(REPLY_STATUSES[replyStatusIndex(reply([0, accept], 5))], REPLY_STATUSES[accept]);
  }
  t.is(REPLY_STATUSES[replyStatusIndex(reply([1, 0]))], 'rpc_mismatch');
  t.is(REPLY_STATUSES[replyStatusIndex(reply([1, 1]))], 'auth_error');
  t.is(REPLY_STATUSES[replyStatusIndex(reply([1, 2]))], 'malformed');
  t.is(REPLY_STATUSES[replyStatusIndex(reply([0, 6]))], 'malformed');
  t.is(REPLY_STATUSES[replyStatusIndex(Buffer.alloc(12))], 'malformed');
  t.is(REPLY_STATUSES[replyStatusIndex(reply([0, 0], 8).subarray(0, 28))], 'malformed', 'truncated');
  const hugeVerf = reply([0, 0]);
  hugeVerf.writeUInt32BE(0xffff_fff0, 16);
  t.is(REPLY_STATUSES[replyStatusIndex(hugeVerf)], 'malformed');
});

test('replyStatusIndex never throws and stays in range on arbitrary bytes', (t) => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
      const i = replyStatusIndex(Buffer.from(bytes));
      return Number.isInteger(i) && i >= 0 && i < REPLY_STATUSES.length;
    }),
    { numRuns: 500 },
  );
  t.pass();
});

test('calls are counted per (program, version, procedure) in a bounded table with an overflow', (t) => {
  const s = new CallStats();
  s.call(100003, 3, 6);
  s.call(100003, 3, 6);
  s.call(100003, 4, 1);
  s.call(0x20475754, 1, 0);
  s.unclassifiedCall();
  let snap = s.snapshot();
  t.deepEqual(snap.calls, [
    { program: 100003, version: 3, procedure: 6, count: 2 },
    { program: 100003, version: 4, procedure: 1, count: 1 },
    { program: 0x20475754, version: 1, procedure: 0, count: 1 },
  ]);
  t.is(snap.callsOther, 1);
  // Fill the table: every key beyond CALL_TABLE_ENTRIES goes to "other"; known keys still count.
  for (let p = 0; p < CALL_TABLE_ENTRIES + 50; p++) s.call(7, 1, p);
  s.call(100003, 3, 6);
  snap = s.snapshot();
  t.is(snap.calls.length, CALL_TABLE_ENTRIES);
  t.is(snap.calls.find((c) => c.program === 100003 && c.procedure === 6)?.count, 3);
  const counted = snap.calls.reduce((n, c) => n + c.count, 0) + snap.callsOther;
  t.is(counted, 4 + 1 + CALL_TABLE_ENTRIES + 50 + 1, 'every call counted exactly once');
  t.is(snap.callsOther, 1 + 50 + 3, 'the 3 keys before the fill took table entries');
});

test('latency lands in the first bucket whose bound is ≥ the duration; the sum adds up', (t) => {
  const s = new CallStats();
  const ok = reply([0, 0]);
  const durationsMs = [0.01, 0.05, 0.3, 4, 4, 999, 20_000];
  for (const d of durationsMs) s.reply(ok, 1000, 1000 + d);
  const { latency, replies } = s.snapshot();
  t.deepEqual(latency.bounds, [...LATENCY_BOUNDS]);
  t.is(latency.counts.length, LATENCY_BOUNDS.length + 1);
  const expected = new Array(LATENCY_BOUNDS.length + 1).fill(0);
  for (const d of durationsMs) {
    const i = LATENCY_BOUNDS.findIndex((b) => d / 1000 <= b);
    expected[i === -1 ? LATENCY_BOUNDS.length : i]++;
  }
  t.deepEqual(latency.counts, expected);
  t.is(expected[LATENCY_BOUNDS.length], 1, '20 s overflows');
  t.true(Math.abs(latency.sumSeconds - durationsMs.reduce((a, b) => a + b) / 1000) < 1e-9);
  t.is(replies.success, durationsMs.length);
});

test('transport failures are counted by code, bounded', (t) => {
  const s = new CallStats();
  s.failure('ERR_TRANSPORT_CONNECTION_LOST');
  s.failure('ERR_TRANSPORT_CONNECTION_LOST');
  s.failure('ERR_TRANSPORT_PEER_READ_CHUNKS');
  for (let i = 0; i < 100; i++) s.failure(`ERR_X_${i}`);
  const f = s.snapshot().failures;
  t.is(f.ERR_TRANSPORT_CONNECTION_LOST, 2);
  t.is(f.ERR_TRANSPORT_PEER_READ_CHUNKS, 1);
  t.true(Object.keys(f).length <= 33);
  t.is(
    Object.values(f).reduce((a, b) => a + b),
    103,
  );
});
