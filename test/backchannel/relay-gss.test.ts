/**
 * RPCSEC_GSS callbacks keep their XID through the relay: the call's verifier is a MIC over the header from
 * the XID on (RFC 2203 §5.3.1), so rewriting it would make the client drop the callback. Other callbacks
 * get a per-client XID as before. The relay with its real session table, stub connections.
 */
import test from 'ava';
import { BackchannelRelay, createBackchannelStats } from '../../gateway/backchannel/relay.js';
import type { ClientState as ClientStateType } from '../../gateway/router/client-state.js';
import { ClientState } from '../../gateway/router/client-state.js';
import { SessionTable } from '../../gateway/router/sessions.js';
import { encodeCallHeader } from '../../rpc/message.js';
import { XdrWriter } from '../../rpc/xdr.js';
import {
  cbCompound,
  cbCompoundGss,
  cbCompoundReply,
  cbNull,
  cbNullGss,
  cbOp,
  cbRes,
  sessionId,
} from './nfs41-bytes.js';

const SID = Buffer.alloc(16, 0xab);

/** CB_COMPOUND(CB_SEQUENCE for SID) from the server with the credential given. */
function callback(xid: number, flavor: number, body: Buffer): Buffer {
  const w = new XdrWriter();
  encodeCallHeader(w, {
    xid,
    prog: 0x40000000,
    vers: 1,
    proc: 1,
    cred: { flavor, body },
    verf: { flavor: 0, body: Buffer.alloc(0) },
  });
  w.opaque(Buffer.alloc(0)).u32(1).u32(0).u32(1); // tag, minorversion, callback_ident, one op
  w.u32(11).fixedOpaque(SID).u32(1).u32(0).u32(0).u32(0).u32(0); // CB_SEQUENCE
  return w.toBuffer();
}

/** rpc_gss_cred_vers_1_t: version 1, RPCSEC_GSS_DATA, seq_num 5, service none, handle "ctx1". */
const GSS_CRED = new XdrWriter().u32(1).u32(0).u32(5).u32(1).opaque(Buffer.from('ctx1')).toBuffer();

/** A backward call as the transport hands it over: inline, Version 1, no chunks. */
function inbound(message: Buffer) {
  return {
    xid: message.readUInt32BE(0),
    version: 1,
    message,
    backward: true,
    writeChunks: [],
    replyChunk: null,
    invHandle: 0,
  } as never;
}

function setup() {
  const sent: Buffer[] = [];
  const refused: unknown[] = [];
  const client = new ClientState({
    sendRecord: (parts: Buffer[]) => sent.push(Buffer.from(parts[0])),
    release() {},
  } as never) as ClientStateType;
  const sessions = new SessionTable();
  const stats = createBackchannelStats();
  const link = {
    conn: { state: 'ready', replyError: (_c: unknown, e: unknown) => refused.push(e), reply() {} },
    xids: new Map(),
    id: 1,
    pinClaimUntil: 0,
    backchannels: new Set(),
    offline: false,
  } as never;
  sessions.learn(SID, client, link);
  const relay = new BackchannelRelay(sessions, stats);
  const deliver = (message: Buffer) => relay.onBackwardCall(link, inbound(message));
  return { sent, refused, deliver, stats };
}

test('an RPCSEC_GSS callback reaches the client with the XID the server gave it; a second with that XID is refused', (t) => {
  const s = setup();
  s.deliver(callback(0x11223344, 6, GSS_CRED));
  t.is(s.sent.length, 1);
  t.is(s.sent[0].readUInt32BE(0), 0x11223344);
  s.deliver(callback(0x11223344, 6, GSS_CRED));
  t.is(s.sent.length, 1, 'not relayed while the first is pending');
  t.is(s.refused.length, 1);
  t.is(s.stats.backchannelXidBusy, 1);
  t.is(s.stats.backchannelOrphans, 0, 'the client is there: not an orphan');
});

test('an AUTH_SYS / AUTH_NONE callback gets a fresh per-client XID', (t) => {
  const s = setup();
  s.deliver(callback(0x11223344, 0, Buffer.alloc(0)));
  t.is(s.sent.length, 1);
  t.not(s.sent[0].readUInt32BE(0), 0x11223344);
});

/**
 * Two clients, A and C, each with a session whose back channel is on one connection (RFC 8881 §2.10.3.1),
 * or A alone; callbacks under RPCSEC_GSS integrity and privacy (RFC 2203 §5.3.2).
 */
function twoClients(withC = true) {
  const sent = { A: [] as Buffer[], C: [] as Buffer[] };
  const released: Buffer[] = [];
  const refused: unknown[] = [];
  const replied: Buffer[] = [];
  const client = (name: 'A' | 'C') =>
    new ClientState({
      sendRecord: (parts: Buffer[]) => sent[name].push(Buffer.from(parts[0])),
      release() {},
    } as never) as ClientStateType;
  const A = client('A');
  const C = client('C');
  const sessions = new SessionTable();
  const stats = createBackchannelStats();
  const link = {
    conn: {
      state: 'ready',
      replyError: (_c: unknown, e: unknown) => refused.push(e),
      reply: (_c: unknown, m: Buffer) => replied.push(m),
    },
    xids: new Map(),
    id: 1,
    pinClaimUntil: 0,
    backchannels: new Set(),
    offline: false,
  } as never;
  sessions.bindBack(sessions.learn(sessionId(1), A, link), link);
  if (withC) sessions.bindBack(sessions.learn(sessionId(2), C, link), link);
  const relay = new BackchannelRelay(sessions, stats, undefined, (b) => released.push(b));
  const port = relay.portFor(link);
  const deliver = (message: Buffer) => port.onCall(inbound(message));
  return { sent, refused, replied, released, deliver, stats, relay, port, A };
}

const recallOps = (sid: Buffer) => [cbOp.sequence(sid), cbOp.recall(Buffer.alloc(12, 1), Buffer.alloc(8, 2))];

test('a callback under RPCSEC_GSS integrity reaches the owner of the session inside databody_integ', (t) => {
  const s = twoClients();
  s.deliver(cbCompoundGss(0x3001, 2, recallOps(sessionId(1))));
  t.is(s.sent.A.length, 1, "A's session: A");
  t.is(s.sent.C.length, 0, 'not C, whose back channel shares the connection');
  s.deliver(cbCompoundGss(0x3002, 2, recallOps(sessionId(2))));
  t.is(s.sent.C.length, 1, "C's session: C");
  t.is(s.stats.backchannelOrphans, 0);
});

test('a callback under RPCSEC_GSS privacy goes to the only client with a back channel there, else is refused', (t) => {
  const one = twoClients(false);
  one.deliver(cbCompoundGss(0x4001, 3, recallOps(sessionId(1))));
  t.is(one.sent.A.length, 1, 'one client: no choice to make');
  const two = twoClients();
  two.deliver(cbCompoundGss(0x4002, 3, recallOps(sessionId(1))));
  t.is(two.sent.A.length + two.sent.C.length, 0, 'two clients: not guessed');
  t.is(two.refused.length, 1);
  t.is(two.stats.backchannelOrphans, 1);
});

test("an RPCSEC_GSS CB_NULL goes to the only client with a back channel there, else is refused: its context is one client's", (t) => {
  const one = twoClients(false);
  one.deliver(cbNullGss(0x4101));
  t.is(one.sent.A.length, 1, 'one client: no choice to make');
  const two = twoClients();
  two.deliver(cbNullGss(0x4102));
  t.is(two.sent.A.length + two.sent.C.length, 0, 'two clients: not guessed');
  t.is(two.refused.length, 1);
  two.deliver(cbNull(0x4103));
  t.is(two.sent.A.length + two.sent.C.length, 1, 'a CB_NULL without GSS still goes to either');
});

test("a client's REPLY record goes back to the record pool: unmatched at once, relayed once sent", (t) => {
  const s = twoClients(false);
  const stray = cbCompoundReply(0x5001, [cbRes.sequence(sessionId(1)), cbRes.recall()]);
  s.relay.onClientReply(s.A, s.A.conn, stray);
  t.is(s.stats.backchannelRepliesDropped, 1);
  t.deepEqual(s.released, [stray], 'an answer matching no callback is released');
  s.deliver(cbCompound(0x5002, 1, recallOps(sessionId(1))));
  const answer = cbCompoundReply(s.sent.A[0].readUInt32BE(0), [cbRes.sequence(sessionId(1)), cbRes.recall()]);
  s.relay.onClientReply(s.A, s.A.conn, answer);
  t.deepEqual(s.replied, [answer], 'relayed to the server');
  t.is(s.released.length, 1, 'not while the transport holds it');
  s.port.onReplyReleased?.(answer);
  t.deepEqual(s.released, [stray, answer], 'released once the transport is done with it');
});
