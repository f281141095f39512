import test from 'ava';
import fc from 'fast-check';
import { encodeOpaqueParts, encodeSourceArgs } from '../../gateway/test-program/codec.js';
import { TEST_PROGRAM, TEST_VERSION, TestProc } from '../../gateway/test-program/constants.js';
import {
  findPatternMismatch,
  patternWord,
  serveTestProgram,
  sourcePattern,
  TestProgramClient,
  testProgramUlb,
} from '../../gateway/test-program/index.js';
import { UlbCallPlan, UlbOutcome } from '../../gateway/ulb/types.js';
import { AcceptStat, AuthFlavor, AuthStat, RejectStat, ReplyStat } from '../../rpc/constants.js';
import { encodeCallHeader, RpcCallHeader } from '../../rpc/message.js';
import { XdrWriter } from '../../rpc/xdr.js';
import { RpcClient } from '../../tcp-frontend/client.js';

test('the pattern is the documented function of seed and index', (t) => {
  // W(0, 0) by hand from the formula in pattern.ts / docs/test-program.md.
  let h = (0 ^ Math.imul(1, 0x9e3779b9)) >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b) >>> 0;
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35) >>> 0;
  h ^= h >>> 16;
  t.is(patternWord(0, 0), h >>> 0);
  const p = sourcePattern(0, 6);
  t.is(p.readUInt32BE(0), patternWord(0, 0));
  t.is(p.readUInt16BE(4), patternWord(0, 1) >>> 16);
  t.not(sourcePattern(1, 64).compare(sourcePattern(2, 64)), 0);
});

test('findPatternMismatch finds any changed byte, and a prefix is consistent', (t) => {
  fc.assert(
    fc.property(fc.nat(5000), fc.integer({ min: 0, max: 0xffffffff }), fc.nat(), (len, seed, at) => {
      const p = sourcePattern(seed, len);
      if (findPatternMismatch(p, seed) !== -1) return false;
      if (
        !sourcePattern(seed, len + 3)
          .subarray(0, len)
          .equals(p)
      )
        return false;
      if (len === 0) return true;
      const i = at % len;
      p[i] ^= 0x01;
      return findPatternMismatch(p, seed) === i;
    }),
    { numRuns: 200 },
  );
  t.pass();
});

async function withServer(t: import('ava').ExecutionContext, maxData?: number) {
  const server = await serveTestProgram({ maxData });
  t.teardown(() => server.close({ drainTimeoutMs: 0 }));
  const rpc = await RpcClient.connect({ host: '127.0.0.1', port: server.addresses[0].port });
  t.teardown(() => rpc.destroy());
  return { server, rpc, client: new TestProgramClient(rpc) };
}

test('NULL, ECHO, SINK and SOURCE answer and verify', async (t) => {
  const { server, client } = await withServer(t);
  await client.null();
  for (const n of [0, 1, 2, 3, 4, 5, 1000, 65537]) {
    const data = Buffer.alloc(n, n & 0xff);
    t.true((await client.echo(data)).equals(data));
    t.is(await client.sink(data), n);
    t.is((await client.source(n, n * 31)).length, n);
  }
  t.deepEqual(server.handler.stats.calls, { NULL: 1, ECHO: 8, SINK: 8, SOURCE: 8 });
});

test('wrong program, version, procedure and arguments get the RFC 5531 answers', async (t) => {
  const { server, rpc } = await withServer(t);
  const prog = await rpc.call(TEST_PROGRAM + 1, TEST_VERSION, 0);
  t.is(prog.acceptStat, AcceptStat.PROG_UNAVAIL);
  const vers = await rpc.call(TEST_PROGRAM, 7, 0);
  t.is(vers.acceptStat, AcceptStat.PROG_MISMATCH);
  t.deepEqual([vers.mismatchLow, vers.mismatchHigh], [1, 1]);
  t.is((await rpc.call(TEST_PROGRAM, TEST_VERSION, 4)).acceptStat, AcceptStat.PROC_UNAVAIL);
  // ECHO whose opaque announces more bytes than follow; SOURCE with one word; SINK with trailing bytes;
  // NULL with an argument.
  const short = Buffer.alloc(8);
  short.writeUInt32BE(100, 0);
  const garbage = [
    rpc.call(TEST_PROGRAM, TEST_VERSION, TestProc.ECHO, short),
    rpc.call(TEST_PROGRAM, TEST_VERSION, TestProc.SOURCE, Buffer.alloc(4)),
    rpc.call(TEST_PROGRAM, TEST_VERSION, TestProc.SINK, [
      ...encodeOpaqueParts(Buffer.alloc(4)),
      Buffer.alloc(4),
    ]),
    rpc.call(TEST_PROGRAM, TEST_VERSION, TestProc.NULL, Buffer.alloc(4)),
  ];
  for (const r of await Promise.all(garbage)) t.is(r.acceptStat, AcceptStat.GARBAGE_ARGS);
  t.deepEqual(server.handler.stats.errorReplies, {
    PROG_UNAVAIL: 1,
    PROG_MISMATCH: 1,
    PROC_UNAVAIL: 1,
    GARBAGE_ARGS: 4,
  });
});

test('rpcvers 3 gets RPC_MISMATCH (2, 2); an unsupported flavor gets AUTH_BADCRED', async (t) => {
  const { rpc } = await withServer(t);
  const w = new XdrWriter(64);
  encodeCallHeader(w, { xid: 77, prog: TEST_PROGRAM, vers: 1, proc: 0, rpcvers: 3 });
  const r = await rpc.callRaw([w.toBuffer()]);
  t.is(r.replyStat, ReplyStat.MSG_DENIED);
  t.is(r.rejectStat, RejectStat.RPC_MISMATCH);
  t.deepEqual([r.mismatchLow, r.mismatchHigh], [2, 2]);
  w.reset();
  encodeCallHeader(w, {
    xid: 78,
    prog: TEST_PROGRAM,
    vers: 1,
    proc: 0,
    cred: { flavor: AuthFlavor.AUTH_DH, body: Buffer.alloc(8) },
  });
  const a = await rpc.callRaw([w.toBuffer()]);
  t.is(a.rejectStat, RejectStat.AUTH_ERROR);
  t.is(a.authStat, AuthStat.AUTH_BADCRED);
});

test('SOURCE above the data limit is SYSTEM_ERR', async (t) => {
  const { rpc } = await withServer(t, 1000);
  const r = await rpc.call(TEST_PROGRAM, TEST_VERSION, TestProc.SOURCE, encodeSourceArgs(1001, 1));
  t.is(r.acceptStat, AcceptStat.SYSTEM_ERR);
  const ok = await rpc.call(TEST_PROGRAM, TEST_VERSION, TestProc.SOURCE, encodeSourceArgs(1000, 1));
  t.is(ok.acceptStat, AcceptStat.SUCCESS);
});

function decodedCall(proc: number, args: Buffer[]): RpcCallHeader {
  const w = new XdrWriter(64);
  encodeCallHeader(w, { xid: 1, prog: TEST_PROGRAM, vers: TEST_VERSION, proc });
  for (const a of args) w.raw(a);
  return new RpcCallHeader().decode(w.toBuffer());
}

test('the ULB names SINK data and SOURCE results as DDP-eligible, and bounds reply sizes', (t) => {
  const data = Buffer.alloc(13, 7);
  const plan = new UlbCallPlan();
  const plan1 = (call: RpcCallHeader) => {
    plan.reset(call);
    testProgramUlb.planCall(call, plan);
    return plan;
  };
  const sink = decodedCall(TestProc.SINK, encodeOpaqueParts(data));
  plan1(sink);
  t.is(plan.outcome, UlbOutcome.COMPLETE);
  t.is(plan.args.length, 1);
  t.is(plan.args[0].length, 13);
  t.is(plan.args[0].offset, sink.bodyOffset + 4);
  t.true(sink.buf.subarray(plan.args[0].offset, plan.args[0].offset + 13).equals(data));
  t.deepEqual(plan.results, []);
  t.is(plan.maxReplySize, 24 + 4);

  const echo = decodedCall(TestProc.ECHO, encodeOpaqueParts(data));
  plan1(echo);
  t.is(plan.args.length, 0, 'ECHO data is not DDP-eligible');
  t.is(plan.results.length, 0);
  t.is(plan.maxReplySize, 24 + 4 + 16);

  const source = decodedCall(TestProc.SOURCE, [encodeSourceArgs(5000, 9)]);
  plan1(source);
  t.deepEqual(plan.results, [5000]);
  t.is(plan.maxReplySize, 24 + 4 + 5000);
  // The result's data starts after the accepted-reply header (24 bytes here) and its length word.
  const reply = Buffer.alloc(28);
  reply.writeUInt32BE(1, 0);
  reply.writeUInt32BE(1, 4);
  reply.writeUInt32BE(5000, 24);
  t.is(plan.locateResult(reply, 0), 28);
  t.is(plan.locateResult(reply, 1), -1);
  const denied = Buffer.alloc(24);
  denied.writeUInt32BE(1, 4);
  denied.writeUInt32BE(1, 8);
  t.is(plan.locateResult(denied, 0), -1, 'a denied reply carries no result');

  plan1(decodedCall(TestProc.NULL, []));
  t.is(plan.maxReplySize, 24);

  // A SINK whose opaque overruns the message is not understood (the server answers GARBAGE_ARGS).
  const bad = Buffer.alloc(4);
  bad.writeUInt32BE(100, 0);
  plan1(decodedCall(TestProc.SINK, [bad]));
  t.is(plan.outcome, UlbOutcome.UNKNOWN);
  t.is(plan.args.length, 0);
});
