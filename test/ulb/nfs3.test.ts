/**
 * The NFSv3 and MOUNT bindings against real libnfs ↔ nfs-ganesha traffic (test/fixtures/nfs/nfs3.*):
 * WRITE data and READ data found at exact offsets (checked against the bytes of the file copied and
 * against tshark's decoding), READ and READLINK results located in reduced replies, and every reply of the
 * capture within the bounds the binding announced.
 */
import test from 'ava';
import { createNfsRegistry, Nfs3Proc, UlbCallPlan, UlbOutcome } from '../../gateway/ulb/index.js';
import { RpcCallHeader } from '../../rpc/message.js';
import { bigFile, type Exchange, loadExchanges, reduce, sha256 } from './captures.js';

const exchanges = loadExchanges('nfs3');
const registry = createNfsRegistry();
const withPathnames = createNfsRegistry({ pathnameResults: true });
const nfs = (proc: number): Exchange[] =>
  exchanges.filter((e) => e.header.prog === 100003 && e.header.proc === proc);

test('the capture holds what make-fixtures.sh did', (t) => {
  t.is(nfs(Nfs3Proc.WRITE).length, 1);
  t.is(nfs(Nfs3Proc.READ).length, 2); // nfs-cp out, nfs-cat through the symbolic link
  t.is(nfs(Nfs3Proc.READLINK).length, 1);
  t.true(exchanges.some((e) => e.header.prog === 100005));
});

test('WRITE: one argument item, exactly the data tshark decoded and the file content', (t) => {
  const file = bigFile();
  for (const e of nfs(Nfs3Proc.WRITE)) {
    const plan = registry.planCall(e.header, new UlbCallPlan());
    t.is(plan.outcome, UlbOutcome.COMPLETE);
    t.is(plan.args.length, 1);
    t.is(plan.results.length, 0);
    const { offset, length } = plan.args[0];
    t.is(offset % 4, 0);
    // WRITE3args: ..., offset (hyper), count, stable, data<>: the length word is just before the data.
    t.is(e.call.readUInt32BE(offset - 4), length);
    const fileOffset = Number(e.call.readBigUInt64BE(offset - 4 - 4 - 4 - 8));
    const data = e.call.subarray(offset, offset + length);
    t.deepEqual(data, file.subarray(fileOffset, fileOffset + length));
    t.deepEqual(e.tsCall.data, [{ length, sha256: sha256(data) }]);
    t.true(offset + length + ((4 - (length % 4)) % 4) === e.call.length);
    t.true(e.reply.length <= plan.maxReplySize);
  }
});

test('READ: one result item of the call count; locate finds where the data was in the reduced reply', (t) => {
  for (const e of nfs(Nfs3Proc.READ)) {
    const plan = registry.planCall(e.header, new UlbCallPlan());
    t.is(plan.outcome, UlbOutcome.COMPLETE);
    t.is(plan.args.length, 0);
    const count = e.call.readUInt32BE(e.call.length - 4);
    t.deepEqual(plan.results, [count]);
    const [{ length, sha256: digest }] = e.tsReply.data;
    // The data is the last item of READ3resok: it ends the reply, pad included.
    const at = e.reply.length - (length + ((4 - (length % 4)) % 4));
    t.is(sha256(e.reply.subarray(at, at + length)), digest);
    t.is(plan.locateResult(reduce(e.reply, at, length), 0), at);
    t.true(e.reply.length <= plan.maxReplySize);
    t.true(e.reply.length >= plan.minReplySize);
  }
});

test('READLINK: the path result is offered only with pathnameResults, and located exactly', (t) => {
  const [e] = nfs(Nfs3Proc.READLINK);
  const plain = registry.planCall(e.header, new UlbCallPlan());
  t.deepEqual(plain.results, []);
  t.true(e.reply.length <= plain.maxReplySize);
  const plan = withPathnames.planCall(e.header, new UlbCallPlan());
  t.deepEqual(plan.results, [4096]);
  const path = Buffer.from(e.tsReply.readlink);
  t.is(path.toString(), 'big.bin');
  const at = e.reply.length - (path.length + ((4 - (path.length % 4)) % 4));
  t.deepEqual(e.reply.subarray(at, at + path.length), path);
  t.is(plan.locateResult(reduce(e.reply, at, path.length), 0), at);
});

test('every captured call is understood and its real reply lies within the announced bounds', (t) => {
  const plan = new UlbCallPlan();
  for (const e of exchanges) {
    registry.planCall(e.header, plan);
    t.is(plan.outcome, UlbOutcome.COMPLETE, `prog ${e.header.prog} proc ${e.header.proc}`);
    const ddp = e.header.proc === Nfs3Proc.WRITE && e.header.prog === 100003 ? 1 : 0;
    t.is(plan.args.length, ddp);
    if (plan.maxReplySize >= 0) t.true(e.reply.length <= plan.maxReplySize, `proc ${e.header.proc}`);
    t.true(e.reply.length >= plan.minReplySize);
  }
  // MNT v3 lists auth flavors: unbounded, so a Reply chunk is offered; READDIRPLUS is bounded by maxcount.
  const mnt = exchanges.find((e) => e.header.prog === 100005 && e.header.proc === 1);
  t.truthy(mnt);
  if (mnt) t.is(registry.planCall(mnt.header, plan).maxReplySize, -1);
  const rdp = nfs(Nfs3Proc.READDIRPLUS)[0];
  // status, the directory's post_op_attr (88) and cookieverf (8) on top of maxcount, as Linux nfsd encodes.
  t.is(
    registry.planCall(rdp.header, plan).maxReplySize,
    24 + 4 + 88 + 8 + rdp.call.readUInt32BE(rdp.call.length - 4),
  );
});

test('READDIR / READDIRPLUS: a count larger than any reply we take bounds nothing (no chunk sized by the client)', (t) => {
  const plan = new UlbCallPlan();
  const rdp = nfs(Nfs3Proc.READDIRPLUS)[0];
  for (const maxcount of [0x7fffffff, 0xffffffff, 16 * 1024 * 1024 + 1]) {
    const call = Buffer.from(rdp.call);
    call.writeUInt32BE(maxcount, call.length - 4);
    registry.planCall(new RpcCallHeader().decode(call), plan);
    t.is(plan.outcome, UlbOutcome.COMPLETE);
    t.is(plan.maxReplySize, -1, `maxcount ${maxcount}`);
  }
  // At the limit it is still a bound.
  const call = Buffer.from(rdp.call);
  call.writeUInt32BE(16 * 1024 * 1024, call.length - 4);
  t.is(
    registry.planCall(new RpcCallHeader().decode(call), plan).maxReplySize,
    24 + 4 + 88 + 8 + 16 * 1024 * 1024,
  );
});

test('a failed READ carries no data: locate says -1', (t) => {
  const e = nfs(Nfs3Proc.READ)[0];
  const plan = registry.planCall(e.header, new UlbCallPlan());
  const reply = Buffer.from(e.reply);
  // Status is the first word after the 24-byte AUTH_NONE reply header.
  reply.writeUInt32BE(5, 24); // NFS3ERR_IO
  t.is(plan.locateResult(reply, 0), -1);
  t.is(plan.locateResult(e.reply, 1), -1);
});
