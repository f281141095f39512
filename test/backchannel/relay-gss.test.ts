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
    backchannel: null,
    offline: false,
  } as never;
  sessions.learn(SID, client, link);
  const relay = new BackchannelRelay(sessions, stats);
  const deliver = (message: Buffer) =>
    relay.onBackwardCall(link, {
      xid: message.readUInt32BE(0),
      version: 1,
      message,
      backward: true,
      writeChunks: [],
      replyChunk: null,
      invHandle: 0,
    } as never);
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
