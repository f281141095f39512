import test from 'ava';
import fc from 'fast-check';
import { AUTH_NONE, type AuthSysInit, authSysCredential, type OpaqueAuthInit } from '../../rpc/auth.js';
import { AcceptStat, AuthFlavor, AuthStat, RejectStat, ReplyStat } from '../../rpc/constants.js';
import { RpcHeaderError } from '../../rpc/errors.js';
import {
  type CallInit,
  encodeAcceptedReply,
  encodeCallHeader,
  encodeDeniedReply,
  peekMsgType,
  peekXid,
  RpcCallHeader,
  RpcReplyHeader,
  rewriteXid,
} from '../../rpc/message.js';
import { XdrWriter } from '../../rpc/xdr.js';

const u32 = fc.nat({ max: 0xffff_ffff });

const authSysInit: fc.Arbitrary<AuthSysInit> = fc.record({
  stamp: u32,
  machinename: fc.string({ unit: 'binary-ascii', maxLength: 255 }),
  uid: u32,
  gid: u32,
  gids: fc.array(u32, { maxLength: 16 }),
});

/** Every credential shape: AUTH_NONE, AUTH_SYS, RPCSEC_GSS and unknown flavors (opaque, up to 400 bytes). */
const credential: fc.Arbitrary<{ init: OpaqueAuthInit; sys?: AuthSysInit }> = fc.oneof(
  fc.constant({ init: AUTH_NONE }),
  authSysInit.map((sys) => ({ init: authSysCredential(sys), sys })),
  fc.uint8Array({ maxLength: 400 }).map((body) => ({ init: { flavor: AuthFlavor.RPCSEC_GSS, body } })),
  fc
    .tuple(
      u32.filter((f) => f !== AuthFlavor.AUTH_SYS),
      fc.uint8Array({ maxLength: 400 }),
    )
    .map(([flavor, body]) => ({ init: { flavor, body } })),
);

const verifier: fc.Arbitrary<OpaqueAuthInit> = fc.record({
  flavor: u32,
  body: fc.uint8Array({ maxLength: 400 }),
});

const callShape = fc.record({
  xid: u32,
  prog: u32,
  vers: u32,
  proc: u32,
  cred: credential,
  verf: verifier,
  body: fc.uint8Array({ maxLength: 64 }),
  lead: fc.nat({ max: 9 }),
});

type CallShape = typeof callShape extends fc.Arbitrary<infer T> ? T : never;

/** Encodes the call behind `lead` junk bytes and returns [buffer, header length]. */
function buildCall(s: CallShape): [Buffer, number] {
  const w = new XdrWriter(16);
  w.raw(Buffer.alloc(s.lead, 0xcc));
  const init: CallInit = {
    xid: s.xid,
    prog: s.prog,
    vers: s.vers,
    proc: s.proc,
    cred: s.cred.init,
    verf: s.verf,
  };
  const w2 = new XdrWriter(16);
  const headerLength = encodeCallHeader(w2, init);
  w.raw(w2.view()).raw(s.body);
  return [w.toBuffer(), headerLength];
}

function callSnapshot(h: RpcCallHeader) {
  return {
    xid: h.xid,
    rpcvers: h.rpcvers,
    prog: h.prog,
    vers: h.vers,
    proc: h.proc,
    cred: { flavor: h.cred.flavor, body: h.cred.body.toString('hex') },
    verf: { flavor: h.verf.flavor, body: h.verf.body.toString('hex') },
    authSys: h.authSys.valid
      ? {
          stamp: h.authSys.stamp,
          machinename: h.authSys.machinename,
          uid: h.authSys.uid,
          gid: h.authSys.gid,
          gids: h.authSys.gids,
        }
      : null,
    bodyOffset: h.bodyOffset,
    body: h.body.toString('hex'),
  };
}

test('every call shape round-trips; body offset and body are exact; fast and checked decoders agree', (t) => {
  const h = new RpcCallHeader();
  fc.assert(
    fc.property(callShape, (s) => {
      const [buf, headerLength] = buildCall(s);
      h.decode(buf, s.lead);
      const got = callSnapshot(h);
      t.deepEqual(got, {
        xid: s.xid,
        rpcvers: 2,
        prog: s.prog,
        vers: s.vers,
        proc: s.proc,
        cred: { flavor: s.cred.init.flavor, body: Buffer.from(s.cred.init.body ?? []).toString('hex') },
        verf: { flavor: s.verf.flavor, body: Buffer.from(s.verf.body ?? []).toString('hex') },
        authSys: s.cred.sys ? { ...s.cred.sys, gids: s.cred.sys.gids ?? [] } : null,
        bodyOffset: s.lead + headerLength,
        body: Buffer.from(s.body).toString('hex'),
      });
      t.is(h.headerLength, headerLength);
      t.is(h.isGss, s.cred.init.flavor === AuthFlavor.RPCSEC_GSS);
      t.deepEqual(callSnapshot(new RpcCallHeader().decodeChecked(buf, s.lead)), got);
      // The credential is a view into the message, not a copy.
      if (h.cred.bodyLength > 0) t.is(h.cred.body.buffer, buf.buffer);
    }),
    { numRuns: 300 },
  );
});

test('a reused call header keeps nothing of the previous message', (t) => {
  const h = new RpcCallHeader();
  const sys = new XdrWriter();
  encodeCallHeader(sys, {
    xid: 1,
    prog: 100003,
    vers: 3,
    proc: 6,
    cred: authSysCredential({ stamp: 9, machinename: 'm', uid: 5, gid: 6, gids: [7] }),
  });
  h.decode(sys.toBuffer());
  t.true(h.authSys.valid);
  t.is(h.authSys.gidAt(0), 7);
  const none = new XdrWriter();
  encodeCallHeader(none, { xid: 2, prog: 100000, vers: 2, proc: 0 });
  h.decode(none.toBuffer());
  t.false(h.authSys.valid);
  t.is(h.cred.flavor, AuthFlavor.AUTH_NONE);
  t.is(h.cred.bodyLength, 0);
  t.is(h.xid, 2);
});

test('every prefix of a call header is ERR_RPC_TRUNCATED, never a RangeError', (t) => {
  const h = new RpcCallHeader();
  fc.assert(
    fc.property(callShape, (s) => {
      const [buf, headerLength] = buildCall({ ...s, lead: 0 });
      for (let cut = 0; cut < headerLength; cut++) {
        const err = t.throws(() => h.decode(buf, 0, cut), { instanceOf: RpcHeaderError });
        t.is(err?.code, 'ERR_RPC_TRUNCATED', `cut at ${cut}`);
        t.true(err!.offset <= cut, `offset ${err?.offset} within ${cut}`);
        t.truthy(err?.field);
      }
      t.is(h.decode(buf, 0, headerLength).bodyOffset, headerLength);
    }),
    { numRuns: 40 },
  );
});

function callBytes(patch: (b: Buffer) => void, init: Partial<CallInit> = {}): Buffer {
  const w = new XdrWriter();
  encodeCallHeader(w, { xid: 0xabcdef01, prog: 100003, vers: 3, proc: 1, ...init });
  w.raw(Buffer.alloc(8));
  const b = w.toBuffer();
  patch(b);
  return b;
}

function callError(b: Buffer): RpcHeaderError {
  const err = (() => {
    try {
      new RpcCallHeader().decode(b);
    } catch (e) {
      return e;
    }
    return undefined;
  })();
  if (!(err instanceof RpcHeaderError)) throw new Error(`expected RpcHeaderError, got ${String(err)}`);
  return err;
}

test('a reply given to the call decoder, or an unknown msg_type, is ERR_RPC_MSG_TYPE at offset 4', (t) => {
  for (const type of [1, 2, 0xffff_ffff]) {
    const err = callError(callBytes((b) => b.writeUInt32BE(type, 4)));
    t.is(err.code, 'ERR_RPC_MSG_TYPE');
    t.is(err.field, 'msg_type');
    t.is(err.offset, 4);
    t.is(err.details.value, type);
    t.is(err.details.xid, 0xabcdef01);
  }
});

test('rpcvers other than 2 is ERR_RPC_VERSION and the xid is kept for an RPC_MISMATCH reply', (t) => {
  const h = new RpcCallHeader();
  for (const vers of [0, 1, 3, 0xffff_ffff]) {
    const err = t.throws(() => h.decode(callBytes((b) => b.writeUInt32BE(vers, 8))), {
      instanceOf: RpcHeaderError,
    });
    t.is(err?.code, 'ERR_RPC_VERSION');
    t.is(err?.offset, 8);
    t.is(err?.details.xid, 0xabcdef01);
    t.is(h.xid, 0xabcdef01);
  }
});

test('credential or verifier bodies over 400 bytes are ERR_RPC_AUTH_TOO_LONG at their length word', (t) => {
  const cred = callError(callBytes((b) => b.writeUInt32BE(401, 28)));
  t.is(cred.code, 'ERR_RPC_AUTH_TOO_LONG');
  t.is(cred.field, 'cred.body');
  t.is(cred.offset, 28);
  t.is(cred.details.limit, 400);
  const verf = callError(callBytes((b) => b.writeUInt32BE(0xffff_ffff, 36)));
  t.is(verf.code, 'ERR_RPC_AUTH_TOO_LONG');
  t.is(verf.field, 'verf.body');
  t.is(verf.offset, 36);
  t.true(verf.cause instanceof Error, 'the XdrError is kept as the cause');
  // Exactly 400 is allowed.
  const ok = new XdrWriter();
  encodeCallHeader(ok, { xid: 1, prog: 1, vers: 1, proc: 1, cred: { flavor: 6, body: Buffer.alloc(400) } });
  t.is(new RpcCallHeader().decode(ok.view()).cred.bodyLength, 400);
});

/** A call whose AUTH_SYS body is written by hand (so it can be malformed). */
function authSysCall(body: Buffer): Buffer {
  return callBytes(() => {}, { cred: { flavor: AuthFlavor.AUTH_SYS, body } });
}

function authSysBody(nameLen: number, gidCount: number, trailing = 0): Buffer {
  const w = new XdrWriter();
  w.u32(1).opaque(Buffer.alloc(nameLen, 0x61)).u32(0).u32(0).u32(gidCount);
  for (let i = 0; i < gidCount; i++) w.u32(i);
  w.raw(Buffer.alloc(trailing));
  return w.toBuffer();
}

test('malformed AUTH_SYS credentials are ERR_RPC_AUTH_SYS naming the field', (t) => {
  const cases: Array<[string, Buffer, string]> = [
    ['machinename of 256 bytes', authSysBody(256, 0), 'cred.auth_sys.machinename'],
    ['17 gids', authSysBody(4, 17), 'cred.auth_sys.gids'],
    ['4 bytes after the gids', authSysBody(4, 2, 4), 'cred.auth_sys'],
    ['body of 8 bytes', authSysBody(4, 0).subarray(0, 8), 'cred.auth_sys.machinename'],
    [
      'gid count says 3, 2 present',
      authSysBody(4, 3).subarray(0, authSysBody(4, 3).length - 4),
      'cred.auth_sys.gids',
    ],
  ];
  for (const [name, body, field] of cases) {
    const err = callError(authSysCall(body));
    t.is(err.code, 'ERR_RPC_AUTH_SYS', name);
    t.is(err.field, field, name);
    t.true(err.offset >= 32 && err.offset <= 32 + body.length, `${name}: offset ${err.offset}`);
  }
  // The limits themselves are fine.
  const h = new RpcCallHeader().decode(authSysCall(authSysBody(255, 16)));
  t.is(h.authSys.machinename.length, 255);
  t.is(h.authSys.gidCount, 16);
  t.is(h.authSys.gidAt(15), 15);
});

test('mutated call headers decode the same in both decoders or fail with RpcHeaderError in both', (t) => {
  fc.assert(
    fc.property(
      callShape,
      fc.array(fc.tuple(fc.nat(), fc.nat({ max: 255 })), { minLength: 1, maxLength: 4 }),
      (s, flips) => {
        const [buf] = buildCall({ ...s, lead: 0 });
        for (const [at, v] of flips) buf[at % buf.length] = v;
        let fast: unknown;
        let checked: unknown;
        try {
          fast = callSnapshot(new RpcCallHeader().decode(buf));
        } catch (e) {
          fast = e;
        }
        try {
          checked = callSnapshot(new RpcCallHeader().decodeChecked(buf));
        } catch (e) {
          checked = e;
        }
        if (fast instanceof Error || checked instanceof Error) {
          t.true(fast instanceof RpcHeaderError, String(fast));
          t.true(checked instanceof RpcHeaderError, String(checked));
          t.is((fast as RpcHeaderError).code, (checked as RpcHeaderError).code);
        } else {
          t.deepEqual(fast, checked);
        }
      },
    ),
    { numRuns: 400 },
  );
});

function replySnapshot(h: RpcReplyHeader) {
  return {
    xid: h.xid,
    replyStat: h.replyStat,
    acceptStat: h.acceptStat,
    rejectStat: h.rejectStat,
    mismatchLow: h.mismatchLow,
    mismatchHigh: h.mismatchHigh,
    authStat: h.authStat,
    verf: { flavor: h.verf.flavor, body: h.verf.body.toString('hex') },
    headerLength: h.headerLength,
    body: h.body.toString('hex'),
  };
}

test('accepted replies with every accept_stat round-trip (PROG_MISMATCH carries low/high)', (t) => {
  const h = new RpcReplyHeader();
  fc.assert(
    fc.property(
      u32,
      fc.constantFrom(...Object.values(AcceptStat)),
      verifier,
      u32,
      u32,
      fc.uint8Array({ maxLength: 32 }),
      (xid, acceptStat, verf, low, high, results) => {
        const w = new XdrWriter();
        const headerLength = encodeAcceptedReply(w, { xid, acceptStat, verf, mismatch: { low, high } });
        if (acceptStat === AcceptStat.SUCCESS) w.raw(results);
        const mismatch = acceptStat === AcceptStat.PROG_MISMATCH;
        t.deepEqual(replySnapshot(h.decode(w.view())), {
          xid,
          replyStat: ReplyStat.MSG_ACCEPTED,
          acceptStat,
          rejectStat: -1,
          mismatchLow: mismatch ? low : -1,
          mismatchHigh: mismatch ? high : -1,
          authStat: -1,
          verf: { flavor: verf.flavor, body: Buffer.from(verf.body ?? []).toString('hex') },
          headerLength,
          body: acceptStat === AcceptStat.SUCCESS ? Buffer.from(results).toString('hex') : '',
        });
        t.is(h.isSuccess, acceptStat === AcceptStat.SUCCESS);
        t.is(
          headerLength,
          24 +
            Buffer.from(verf.body ?? []).length +
            ((4 - ((verf.body?.length ?? 0) % 4)) % 4) +
            (mismatch ? 8 : 0),
        );
      },
    ),
    { numRuns: 200 },
  );
});

test('denied replies: RPC_MISMATCH carries low/high, AUTH_ERROR every auth_stat (and unknown ones)', (t) => {
  const h = new RpcReplyHeader();
  const mismatch = new XdrWriter();
  encodeDeniedReply(mismatch, {
    xid: 77,
    rejectStat: RejectStat.RPC_MISMATCH,
    mismatch: { low: 2, high: 2 },
  });
  t.deepEqual(replySnapshot(h.decode(mismatch.view())), {
    xid: 77,
    replyStat: ReplyStat.MSG_DENIED,
    acceptStat: -1,
    rejectStat: RejectStat.RPC_MISMATCH,
    mismatchLow: 2,
    mismatchHigh: 2,
    authStat: -1,
    verf: { flavor: -1, body: '' },
    headerLength: 24,
    body: '',
  });
  for (const authStat of [...Object.values(AuthStat), 99]) {
    const w = new XdrWriter();
    const len = encodeDeniedReply(w, { xid: 78, rejectStat: RejectStat.AUTH_ERROR, authStat });
    t.is(len, 20);
    h.decode(w.view());
    t.is(h.rejectStat, RejectStat.AUTH_ERROR);
    t.is(h.authStat, authStat);
    t.is(h.mismatchLow, -1, 'nothing left over from the previous reply');
    t.is(h.bodyOffset, 20);
  }
});

function replyWords(...words: number[]): Buffer {
  const b = Buffer.alloc(words.length * 4);
  words.forEach((w, i) => {
    b.writeUInt32BE(w, i * 4);
  });
  return b;
}

test('reply layout enums outside RFC 5531 are refused with their code, field and offset', (t) => {
  const h = new RpcReplyHeader();
  const cases: Array<[string, Buffer, string, string, number]> = [
    ['call to reply decoder', replyWords(5, 0, 2), 'ERR_RPC_MSG_TYPE', 'msg_type', 4],
    ['reply_stat 2', replyWords(5, 1, 2, 0), 'ERR_RPC_REPLY_STAT', 'reply_stat', 8],
    ['accept_stat 6', replyWords(5, 1, 0, 0, 0, 6), 'ERR_RPC_ACCEPT_STAT', 'accept_stat', 20],
    ['reject_stat 2', replyWords(5, 1, 1, 2), 'ERR_RPC_REJECT_STAT', 'reject_stat', 12],
    ['verifier over 400', replyWords(5, 1, 0, 0, 401), 'ERR_RPC_AUTH_TOO_LONG', 'verf.body', 16],
    [
      'PROG_MISMATCH without high',
      replyWords(5, 1, 0, 0, 0, 2, 1),
      'ERR_RPC_TRUNCATED',
      'mismatch_info.high',
      28,
    ],
    ['AUTH_ERROR without auth_stat', replyWords(5, 1, 1, 1), 'ERR_RPC_TRUNCATED', 'auth_stat', 16],
  ];
  for (const [name, buf, code, field, offset] of cases) {
    const err = t.throws(() => h.decode(buf), { instanceOf: RpcHeaderError }, name);
    t.is(err?.code, code, name);
    t.is(err?.field, field, name);
    t.is(err?.offset, offset, name);
    t.is(err?.details.xid, 5, name);
  }
});

test('every prefix of every reply shape is ERR_RPC_TRUNCATED', (t) => {
  const shapes: Buffer[] = [];
  for (const acceptStat of Object.values(AcceptStat)) {
    const w = new XdrWriter();
    encodeAcceptedReply(w, {
      xid: 1,
      acceptStat,
      verf: { flavor: 6, body: Buffer.alloc(5) },
      mismatch: { low: 1, high: 2 },
    });
    shapes.push(w.toBuffer());
  }
  const d1 = new XdrWriter();
  encodeDeniedReply(d1, { xid: 1, rejectStat: RejectStat.RPC_MISMATCH, mismatch: { low: 2, high: 2 } });
  const d2 = new XdrWriter();
  encodeDeniedReply(d2, { xid: 1, rejectStat: RejectStat.AUTH_ERROR, authStat: AuthStat.AUTH_TOOWEAK });
  shapes.push(d1.toBuffer(), d2.toBuffer());
  const h = new RpcReplyHeader();
  for (const buf of shapes) {
    for (let cut = 0; cut < buf.length; cut++) {
      const err = t.throws(() => h.decode(buf, 0, cut), { instanceOf: RpcHeaderError });
      t.is(err?.code, 'ERR_RPC_TRUNCATED');
    }
    t.is(h.decode(buf).bodyOffset, buf.length);
  }
});

test('peekXid, peekMsgType and rewriteXid work on raw messages without decoding', (t) => {
  const w = new XdrWriter();
  w.raw(Buffer.alloc(3));
  encodeCallHeader(w, { xid: 0xfedc_ba98, prog: 100003, vers: 4, proc: 1 });
  const b = w.toBuffer();
  t.is(peekXid(b, 3), 0xfedc_ba98);
  t.is(peekMsgType(b, 3), 0);
  t.is(rewriteXid(b, 0x8000_0001, 3), 0xfedc_ba98);
  t.is(new RpcCallHeader().decode(b, 3).xid, 0x8000_0001);
  t.is(t.throws(() => peekXid(Buffer.alloc(3)), { instanceOf: RpcHeaderError })?.code, 'ERR_RPC_TRUNCATED');
  t.is(
    t.throws(() => peekMsgType(Buffer.alloc(7)), { instanceOf: RpcHeaderError })?.code,
    'ERR_RPC_TRUNCATED',
  );
  for (const bad of [-1, 2 ** 32, 1.5, Number.NaN]) {
    t.is(t.throws(() => rewriteXid(b, bad, 3), { instanceOf: RpcHeaderError })?.code, 'ERR_RPC_VALUE');
  }
  t.is(peekXid(b, 3), 0x8000_0001, 'a refused rewrite changes nothing');
});

test('encoders refuse what the wire cannot carry, with RpcHeaderError codes', (t) => {
  const w = new XdrWriter();
  const cases: Array<[string, () => unknown, string]> = [
    [
      'cred body 401',
      () =>
        encodeCallHeader(w, {
          xid: 1,
          prog: 1,
          vers: 1,
          proc: 1,
          cred: { flavor: 6, body: Buffer.alloc(401) },
        }),
      'ERR_RPC_AUTH_TOO_LONG',
    ],
    ['xid 2^32', () => encodeCallHeader(w, { xid: 2 ** 32, prog: 1, vers: 1, proc: 1 }), 'ERR_RPC_VALUE'],
    [
      'PROG_MISMATCH without range',
      () => encodeAcceptedReply(w, { xid: 1, acceptStat: AcceptStat.PROG_MISMATCH }),
      'ERR_RPC_VALUE',
    ],
    [
      'accept_stat 6',
      () => encodeAcceptedReply(w, { xid: 1, acceptStat: 6 as AcceptStat }),
      'ERR_RPC_ACCEPT_STAT',
    ],
    [
      'RPC_MISMATCH without range',
      () => encodeDeniedReply(w, { xid: 1, rejectStat: RejectStat.RPC_MISMATCH }),
      'ERR_RPC_VALUE',
    ],
    [
      'AUTH_ERROR without stat',
      () => encodeDeniedReply(w, { xid: 1, rejectStat: RejectStat.AUTH_ERROR }),
      'ERR_RPC_VALUE',
    ],
    [
      'reject_stat 2',
      () => encodeDeniedReply(w, { xid: 1, rejectStat: 2 as RejectStat }),
      'ERR_RPC_REJECT_STAT',
    ],
    [
      '17 gids',
      () => authSysCredential({ stamp: 0, machinename: 'x', uid: 0, gid: 0, gids: new Array(17).fill(1) }),
      'ERR_RPC_AUTH_SYS',
    ],
    [
      'name of 256',
      () => authSysCredential({ stamp: 0, machinename: 'x'.repeat(256), uid: 0, gid: 0 }),
      'ERR_RPC_AUTH_SYS',
    ],
    ['uid -1', () => authSysCredential({ stamp: 0, machinename: 'x', uid: -1, gid: 0 }), 'ERR_RPC_AUTH_SYS'],
  ];
  for (const [name, fn, code] of cases) {
    w.reset();
    const err = t.throws(fn, { instanceOf: RpcHeaderError }, name);
    t.is(err?.code, code, name);
  }
});

test('encoding into a fixed buffer that is too small is ERR_RPC_OVERFLOW', (t) => {
  const cred = authSysCredential({ stamp: 1, machinename: 'host', uid: 1, gid: 1, gids: [1, 2] });
  const full = new XdrWriter();
  const needed = encodeCallHeader(full, { xid: 1, prog: 100003, vers: 3, proc: 6, cred });
  for (let room = 0; room < needed; room++) {
    const w = XdrWriter.into(Buffer.alloc(room));
    const err = t.throws(() => encodeCallHeader(w, { xid: 1, prog: 100003, vers: 3, proc: 6, cred }), {
      instanceOf: RpcHeaderError,
    });
    t.is(err?.code, 'ERR_RPC_OVERFLOW');
  }
  const exact = XdrWriter.into(Buffer.alloc(needed));
  t.is(encodeCallHeader(exact, { xid: 1, prog: 100003, vers: 3, proc: 6, cred }), needed);
  t.deepEqual(exact.view(), full.view());
});

test('a call header matches the RFC 5531 layout byte for byte', (t) => {
  const w = new XdrWriter();
  const cred = authSysCredential({
    stamp: 0x01020304,
    machinename: 'abcde',
    uid: 1000,
    gid: 100,
    gids: [10],
  });
  encodeCallHeader(w, { xid: 0x11223344, prog: 100003, vers: 3, proc: 6, cred });
  const expected = [
    '11223344',
    '00000000',
    '00000002',
    '000186a3',
    '00000003',
    '00000006', // xid CALL 2 NFS v3 READ
    '00000001',
    '00000020', // AUTH_SYS, 32 bytes
    '01020304',
    '00000005',
    '6162636465000000',
    '000003e8',
    '00000064',
    '00000001',
    '0000000a',
    '00000000',
    '00000000', // verifier AUTH_NONE
  ].join('');
  t.is(w.view().toString('hex'), expected);
});
