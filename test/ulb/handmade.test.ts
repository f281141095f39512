/**
 * NFSv4.1 / 4.2 COMPOUNDs built by hand from the XDR of RFC 8881 and RFC 7863 (no NFSv4.1 client was
 * captured; these are labelled hand-made): SEQUENCE + PUTFH + WRITE + GETATTR, two WRITEs, READ + READLINK
 * with a hand-made reply, a walk ended by an unknown operation, a READ after OPEN, and the fallbacks.
 */
import test from 'ava';
import {
  chooseReplyMechanism,
  createNfsRegistry,
  DdpKind,
  UlbCallPlan,
  UlbOutcome,
} from '../../gateway/ulb/index.js';
import { AuthFlavor } from '../../rpc/constants.js';
import { encodeAcceptedReply, encodeCallHeader, RpcCallHeader } from '../../rpc/message.js';
import { XdrWriter } from '../../rpc/xdr.js';
import { reduce } from './captures.js';

const registry = createNfsRegistry({ pathnameResults: true });
const SESSION = Buffer.alloc(16, 0xab);
const STATEID = Buffer.alloc(16, 0x5a);

function compound(
  minor: number,
  ops: ((w: XdrWriter) => unknown)[],
  flavor: number = AuthFlavor.AUTH_NONE,
): Buffer {
  const w = new XdrWriter();
  const cred = flavor === AuthFlavor.RPCSEC_GSS ? gssCred(2) : Buffer.alloc(0);
  encodeCallHeader(w, {
    xid: 7,
    prog: 100003,
    vers: 4,
    proc: 1,
    cred: { flavor, body: cred },
    verf: { flavor: 0, body: Buffer.alloc(0) },
  });
  w.opaque(Buffer.from('hand')).u32(minor).u32(ops.length);
  for (const op of ops) op(w);
  return w.toBuffer();
}

/** rpc_gss_cred_vers_1_t: version 1, RPCSEC_GSS_DATA, seq_num, service (2 = integrity), handle. */
function gssCred(service: number): Buffer {
  return new XdrWriter().u32(1).u32(0).u32(1).u32(service).opaque(Buffer.from('ctx')).toBuffer();
}

const sequence = (w: XdrWriter) => w.u32(53).fixedOpaque(SESSION).u32(1).u32(0).u32(0).u32(0);
const putfh = (w: XdrWriter) => w.u32(22).opaque(Buffer.alloc(28, 1));
const write = (w: XdrWriter, data: Buffer) => w.u32(38).fixedOpaque(STATEID).u64(0n).u32(2).opaque(data);
const read = (w: XdrWriter, count: number) => w.u32(25).fixedOpaque(STATEID).u64(0n).u32(count);
const getattr = (w: XdrWriter) => w.u32(9).u32(2).u32(0x0000011a).u32(0x00b0a23a); // type,change,size,fsid,fileid,mode,numlinks,...

function plan(msg: Buffer): UlbCallPlan {
  return registry.planCall(new RpcCallHeader().decode(msg), new UlbCallPlan());
}

function expectData(t: import('ava').ExecutionContext, msg: Buffer, p: UlbCallPlan, datas: Buffer[]): void {
  t.is(p.args.length, datas.length);
  datas.forEach((d, i) => {
    t.deepEqual(msg.subarray(p.args[i].offset, p.args[i].offset + p.args[i].length), d);
    t.is(msg.readUInt32BE(p.args[i].offset - 4), d.length);
  });
}

test('hand-made v4.1 SEQUENCE, PUTFH, WRITE, GETATTR: the data item, a bounded reply', (t) => {
  const data = Buffer.alloc(8191, 0x42);
  const msg = compound(1, [sequence, putfh, (w) => write(w, data), getattr]);
  const p = plan(msg);
  t.is(p.outcome, UlbOutcome.COMPLETE);
  t.is(p.minorVersion, 1);
  expectData(t, msg, p, [data]);
  t.deepEqual(p.results, []);
  // Bounded: the GETATTR asks only fixed-size attributes and owner/owner_group (maxOwnerLength each).
  t.true(p.maxReplySize > 2 * 1024 && p.maxReplySize < 4096);
});

test('hand-made COMPOUND with two WRITEs (v4.2): two argument items in order', (t) => {
  const a = Buffer.alloc(5, 1);
  const b = Buffer.alloc(4096, 2);
  const msg = compound(2, [sequence, putfh, (w) => write(w, a), (w) => write(w, b)]);
  const p = plan(msg);
  expectData(t, msg, p, [a, b]);
  t.is(p.outcome, UlbOutcome.COMPLETE);
});

test('hand-made READ + READLINK: two result items, both located in a hand-made reduced reply', (t) => {
  const msg = compound(1, [sequence, putfh, (w) => read(w, 10000), (w) => w.u32(27), getattr]);
  const p = plan(msg);
  t.deepEqual(p.results, [10000, 4096]);
  t.deepEqual(p.resultKinds, [DdpKind.DATA, DdpKind.PATHNAME]);
  // The full reply, per RFC 8881 §18.46 (SEQUENCE4resok), §18.22 (READ4resok), §18.24 (READLINK4resok).
  const data = Buffer.alloc(9999, 0x77);
  const link = Buffer.from('../some/where');
  const w = new XdrWriter();
  const start = encodeAcceptedReply(w, { xid: 7, acceptStat: 0 });
  w.u32(0).opaque(Buffer.from('hand')).u32(5);
  w.u32(53).u32(0).fixedOpaque(SESSION).u32(1).u32(0).u32(63).u32(63).u32(0);
  w.u32(22).u32(0);
  w.u32(25).u32(0).u32(1).opaque(data);
  w.u32(27).u32(0).opaque(link);
  w.u32(9).u32(0).u32(1).u32(0x10).opaque(Buffer.alloc(8, 9)); // fattr4: bitmap {size}, attrlist
  const full = w.toBuffer();
  t.true(full.length <= p.maxReplySize);
  const dataAt = full.indexOf(data);
  const linkAt = full.indexOf(link);
  t.is(full.readUInt32BE(dataAt - 4), data.length);
  t.true(start > 0);
  // Both went to Write chunks: both are absent from the reduced reply.
  const reduced = reduce(reduce(full, linkAt, link.length), dataAt, data.length);
  t.is(p.locateResult(reduced, 0), dataAt);
  t.is(p.locateResult(reduced, 1), linkAt - data.length - 1); // 9999 bytes + 1 pad byte gone before it
  t.is(p.locateResult(reduced, 2), -1);
});

test('an operation the walker does not know ends the walk: earlier items stay, reply unknown', (t) => {
  const a = Buffer.alloc(100, 3);
  // LAYOUTGET (50) is not walked; the WRITE after it must not be reported.
  const msg = compound(1, [
    sequence,
    putfh,
    (w) => write(w, a),
    (w) => w.u32(50).u32(0).u32(1).u32(1),
    (w) => write(w, a),
  ]);
  const p = plan(msg);
  t.is(p.outcome, UlbOutcome.PARTIAL);
  expectData(t, msg, p, [a]);
  t.is(p.maxReplySize, -1);
});

test('a READ after OPEN gets no Write chunk (OPEN result cannot be walked); a READ before it does', (t) => {
  const open = (w: XdrWriter) =>
    w
      .u32(18)
      .u32(0)
      .u32(1)
      .u32(0)
      .u64(1n)
      .opaque(Buffer.from('owner'))
      .u32(0)
      .u32(0)
      .opaque(Buffer.from('f'));
  const p1 = plan(compound(1, [sequence, putfh, open, (w) => read(w, 4096)]));
  t.is(p1.outcome, UlbOutcome.COMPLETE);
  t.deepEqual(p1.results, []);
  const p2 = plan(compound(1, [sequence, putfh, (w) => read(w, 4096), open]));
  t.deepEqual(p2.results, [4096]);
});

test('fallbacks: RPCSEC_GSS integrity, unknown program, minor version 3; NULL of any program', (t) => {
  const gss = compound(1, [sequence, putfh, (w) => write(w, Buffer.alloc(8))], AuthFlavor.RPCSEC_GSS);
  const p = plan(gss);
  t.is(p.outcome, UlbOutcome.UNKNOWN);
  t.deepEqual(p.args, []);
  t.is(p.maxReplySize, -1);
  t.is(plan(compound(3, [sequence])).outcome, UlbOutcome.UNKNOWN);
  const w = new XdrWriter();
  encodeCallHeader(w, {
    xid: 1,
    prog: 100227,
    vers: 3,
    proc: 0,
    cred: { flavor: 0, body: Buffer.alloc(0) },
    verf: { flavor: 0, body: Buffer.alloc(0) },
  });
  const nul = plan(w.toBuffer());
  t.is(nul.outcome, UlbOutcome.COMPLETE);
  t.is(nul.maxReplySize, 24);
  const w2 = new XdrWriter();
  encodeCallHeader(w2, {
    xid: 1,
    prog: 100227,
    vers: 3,
    proc: 1,
    cred: { flavor: 0, body: Buffer.alloc(0) },
    verf: { flavor: 0, body: Buffer.alloc(0) },
  });
  t.is(plan(w2.toBuffer()).outcome, UlbOutcome.UNKNOWN);
});

test('RPCSEC_GSS context setup (procedure 0, gss_proc INIT / CONTINUE_INIT): reply size unknown, a Reply chunk is offered', (t) => {
  // rpc_gss_init_res (RFC 2203 §5.2.3.1): a handle and a GSS token, of no fixed size.
  const nullCall = (prog: number, vers: number, flavor: number, gssProc: number, token = Buffer.alloc(0)) => {
    const w = new XdrWriter();
    const cred =
      flavor === AuthFlavor.RPCSEC_GSS
        ? new XdrWriter().u32(1).u32(gssProc).u32(0).u32(1).opaque(Buffer.alloc(0)).toBuffer()
        : Buffer.alloc(0);
    encodeCallHeader(w, {
      xid: 9,
      prog,
      vers,
      proc: 0,
      cred: { flavor, body: cred },
      verf: { flavor: 0, body: Buffer.alloc(0) },
    });
    if (token.length > 0) w.opaque(token); // rpc_gss_init_arg: the client's GSS token
    return w.toBuffer();
  };
  const token = Buffer.alloc(600, 0x6e); // a Kerberos AP-REQ, roughly
  // NFSv4 (its binding sizes procedure 0 itself), NFSv3 and MOUNT, and a program with no binding.
  for (const [prog, vers] of [
    [100003, 4],
    [100003, 3],
    [100005, 3],
    [100227, 3],
  ]) {
    for (const gssProc of [1, 2, 3]) {
      const p = plan(nullCall(prog, vers, AuthFlavor.RPCSEC_GSS, gssProc, gssProc === 3 ? undefined : token));
      t.is(p.maxReplySize, -1, `program ${prog} v${vers}, gss_proc ${gssProc}`);
      t.is(chooseReplyMechanism(p, 1024, false), 'reply-chunk');
    }
    // RPCSEC_GSS_DATA NULL (a ping under a context) and AUTH_NONE NULL keep their header-only size.
    t.true(plan(nullCall(prog, vers, AuthFlavor.RPCSEC_GSS, 0)).maxReplySize > 0, `${prog}: DATA`);
    t.is(plan(nullCall(prog, vers, AuthFlavor.AUTH_NONE, 0)).maxReplySize, 24, `${prog}: AUTH_NONE`);
  }
});

test('reply mechanism (seed 002 §5.3.1)', (t) => {
  const p = { maxReplySize: 900, minReplySize: 100, results: [] as number[] };
  t.is(chooseReplyMechanism(p, 1024, false), 'inline');
  t.is(chooseReplyMechanism({ ...p, maxReplySize: 5000 }, 1024, false), 'reply-chunk');
  t.is(chooseReplyMechanism({ ...p, maxReplySize: 5000 }, 1024, true), 'responder-read');
  t.is(chooseReplyMechanism({ ...p, maxReplySize: -1 }, 1024, true), 'responder-read');
  t.is(chooseReplyMechanism({ ...p, maxReplySize: 5000, minReplySize: 2000 }, 1024, true), 'reply-chunk');
  // READ data in a Write chunk does not count against the inline limit.
  t.is(chooseReplyMechanism({ ...p, maxReplySize: 70000, results: [69500] }, 1024, false), 'inline');
});

/** A hand-made COMPOUND4res: the accepted reply header, status, tag, then the results `ops` write. */
function compoundReply(ops: ((w: XdrWriter) => unknown)[]): Buffer {
  const w = new XdrWriter();
  encodeAcceptedReply(w, { xid: 7, acceptStat: 0 });
  w.u32(0).opaque(Buffer.from('hand')).u32(ops.length);
  for (const op of ops) op(w);
  return w.toBuffer();
}

test('GETATTR: the bound counts its status and the 4.2 attributes at their RFC 7863 sizes', (t) => {
  const putfhRes = (w: XdrWriter) => w.u32(22).u32(0);
  // (attribute words asked, the attribute values a server returns)
  const cases: [string, number[], Buffer][] = [
    ['size (4)', [1 << 4], Buffer.alloc(8)],
    ['clone_blksize (77, uint32)', [0, 0, 1 << 13], Buffer.alloc(4)],
    ['space_freed (78, length4)', [0, 0, 1 << 14], Buffer.alloc(8)],
    ['change_attr_type (79, enum)', [0, 0, 1 << 15], Buffer.alloc(4)],
  ];
  for (const [name, words, values] of cases) {
    const getattrOf = (w: XdrWriter) => {
      w.u32(9).u32(words.length);
      for (const x of words) w.u32(x);
    };
    const p = plan(compound(2, [putfh, getattrOf]));
    t.is(p.outcome, UlbOutcome.COMPLETE, name);
    const reply = compoundReply([
      putfhRes,
      (w) => {
        w.u32(9).u32(0).u32(words.length);
        for (const x of words) w.u32(x);
        w.opaque(values);
      },
    ]);
    t.true(reply.length <= p.maxReplySize, `${name}: reply ${reply.length} within ${p.maxReplySize}`);
  }
  // sec_label (80) is variable: no bound.
  const label = (w: XdrWriter) =>
    w
      .u32(9)
      .u32(3)
      .u32(0)
      .u32(0)
      .u32(1 << 16);
  t.is(plan(compound(2, [putfh, label])).maxReplySize, -1);
});

test('READDIR (v4): a maxcount larger than any reply we take bounds nothing', (t) => {
  const readdir = (maxcount: number) => (w: XdrWriter) =>
    w
      .u32(26)
      .u64(0n)
      .fixedOpaque(Buffer.alloc(8))
      .u32(1024)
      .u32(maxcount)
      .u32(1)
      .u32(1 << 4);
  t.is(plan(compound(1, [sequence, putfh, readdir(0x7fffffff)])).maxReplySize, -1);
  const bounded = plan(compound(1, [sequence, putfh, readdir(8192)])).maxReplySize;
  t.true(bounded > 8192 && bounded < 16 * 1024, `${bounded}`);
});

test('without pathnameResults a READLINK takes no Write chunk, and neither does a READ after it (nfsd would pair them)', (t) => {
  const plain = createNfsRegistry();
  const p = plain.planCall(
    new RpcCallHeader().decode(compound(1, [sequence, putfh, (w) => w.u32(27), (w) => read(w, 10000)])),
    new UlbCallPlan(),
  );
  t.deepEqual(p.results, []);
  // A READ before the READLINK still gets its chunk.
  const before = plain.planCall(
    new RpcCallHeader().decode(compound(1, [sequence, putfh, (w) => read(w, 10000), (w) => w.u32(27)])),
    new UlbCallPlan(),
  );
  t.deepEqual(before.results, [10000]);
});
