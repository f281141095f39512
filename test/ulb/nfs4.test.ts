/**
 * The NFSv4 binding against real libnfs ↔ nfs-ganesha NFSv4.0 COMPOUNDs (test/fixtures/nfs/nfs4.*): the
 * WRITE data at its exact offset, READ data and READLINK text located in reduced replies, every real
 * reply within the announced bound.
 */
import test from 'ava';
import { createNfsRegistry, Nfs4Op, UlbCallPlan, UlbOutcome } from '../../gateway/ulb/index.js';
import { bigFile, type Exchange, loadExchanges, reduce, sha256, smallFile } from './captures.js';

const exchanges = loadExchanges('nfs4');
const registry = createNfsRegistry();
const withPathnames = createNfsRegistry({ pathnameResults: true });
const compounds = (last: number): Exchange[] =>
  exchanges.filter((e) => e.header.proc === 1 && e.tsCall.opcodes.at(-1) === last);
const pad = (n: number) => (4 - (n % 4)) % 4;

test('COMPOUND with PUTFH, WRITE: the data tshark decoded, equal to the file written', (t) => {
  const writes = compounds(Nfs4Op.WRITE);
  t.is(writes.length, 1);
  const file = smallFile();
  for (const e of writes) {
    const plan = registry.planCall(e.header, new UlbCallPlan());
    t.is(plan.outcome, UlbOutcome.COMPLETE);
    t.is(plan.minorVersion, 0);
    t.is(plan.args.length, 1);
    const { offset, length } = plan.args[0];
    // WRITE4args: stateid, offset (hyper), stable, data<>.
    t.is(e.call.readUInt32BE(offset - 4), length);
    const fileOffset = Number(e.call.readBigUInt64BE(offset - 4 - 4 - 8));
    const data = e.call.subarray(offset, offset + length);
    t.deepEqual(data, file.subarray(fileOffset, fileOffset + length));
    t.deepEqual(e.tsCall.data, [{ length, sha256: sha256(data) }]);
    t.is(offset + length + pad(length), e.call.length); // WRITE is the last operation
    t.true(e.reply.length <= plan.maxReplySize);
  }
});

test('COMPOUND with PUTFH, READ: a Write chunk of count bytes; locate finds the data in the reduced reply', (t) => {
  const reads = compounds(Nfs4Op.READ);
  t.true(reads.length >= 2);
  const file = bigFile();
  for (const e of reads) {
    const plan = registry.planCall(e.header, new UlbCallPlan());
    t.is(plan.outcome, UlbOutcome.COMPLETE);
    const count = e.call.readUInt32BE(e.call.length - 4);
    t.deepEqual(plan.results, [count]);
    const [{ length, sha256: digest }] = e.tsReply.data;
    const at = e.reply.length - length - pad(length);
    t.is(sha256(e.reply.subarray(at, at + length)), digest);
    t.deepEqual(e.reply.subarray(at, at + length), file.subarray(0, length));
    t.is(plan.locateResult(reduce(e.reply, at, length), 0), at);
    t.true(e.reply.length <= plan.maxReplySize);
  }
});

test('COMPOUND ending in READLINK: located with pathnameResults, not offered without', (t) => {
  const [e] = compounds(Nfs4Op.READLINK);
  t.deepEqual(e.tsCall.opcodes, [Nfs4Op.PUTFH, Nfs4Op.GETATTR, Nfs4Op.LOOKUP, Nfs4Op.READLINK]);
  t.deepEqual(registry.planCall(e.header, new UlbCallPlan()).results, []);
  const plan = withPathnames.planCall(e.header, new UlbCallPlan());
  t.deepEqual(plan.results, [4096]);
  // make-fixtures.sh made the link with `ln -s big.bin link-to-big`.
  const path = Buffer.from('big.bin');
  const at = e.reply.length - path.length - pad(path.length);
  t.deepEqual(e.reply.subarray(at, at + path.length), path);
  // The GETATTR result before it is walked over: its attrlist is real ganesha output.
  t.is(plan.locateResult(reduce(e.reply, at, path.length), 0), at);
});

test('every captured COMPOUND is walked; bounded replies lie within the bound', (t) => {
  const plan = new UlbCallPlan();
  let bounded = 0;
  for (const e of exchanges) {
    registry.planCall(e.header, plan);
    t.not(plan.outcome, UlbOutcome.UNKNOWN, `ops ${e.tsCall.opcodes}`);
    if (plan.maxReplySize >= 0) {
      bounded++;
      t.true(e.reply.length <= plan.maxReplySize, `ops ${e.tsCall.opcodes}`);
    }
    t.true(e.reply.length >= plan.minReplySize);
    // OPEN's result is unbounded; everything libnfs sends besides is walked to the end.
    if (e.tsCall.opcodes.includes(Nfs4Op.OPEN)) t.is(plan.maxReplySize, -1);
  }
  t.true(bounded > exchanges.length / 2);
});

test('the OPEN arguments are skipped exactly: what follows OPEN is still walked', (t) => {
  const opens = exchanges.filter((e) => e.tsCall.opcodes.includes(Nfs4Op.OPEN));
  t.true(opens.length > 0);
  for (const e of opens) {
    t.is(registry.planCall(e.header, new UlbCallPlan()).outcome, UlbOutcome.COMPLETE);
    // Claim one operation more than present: if OPEN were skipped short or long, the walk would not run
    // out of bytes exactly here.
    const cut = Buffer.from(e.call);
    const countAt = findArgCount(e);
    cut.writeUInt32BE(cut.readUInt32BE(countAt) + 1, countAt);
    // With one more operation than present the walk runs out of bytes: garbled, so UNKNOWN.
    const h = e.header.constructor as new () => typeof e.header;
    t.is(registry.planCall(new h().decode(cut), new UlbCallPlan()).outcome, UlbOutcome.UNKNOWN);
  }
});

/** Offset of COMPOUND4args.argarray's count: after the tag and minorversion. */
function findArgCount(e: Exchange): number {
  const at = e.header.bodyOffset;
  const tag = e.call.readUInt32BE(at);
  return at + 4 + tag + pad(tag) + 4;
}
