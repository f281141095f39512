/**
 * NFSv4.1 session facts the router needs for session affinity and the backchannel relay (RFC 8881 §2.10,
 * DESIGN §1 "Backchannel"): which COMPOUNDs create, bind, use or destroy a session, the session id in the
 * ones that name it, the session a CREATE_SESSION / BIND_CONN_TO_SESSION reply grants, and the session a
 * CB_COMPOUND's CB_SEQUENCE names.
 *
 * Mostly fixed-position fields are read: the tag, then the first operation. The one exception is
 * DESTROY_SESSION, which may come anywhere after a SEQUENCE (RFC 8881 §18.37.3): finding it, and its
 * result in the reply, steps over the operations before it with the NFSv4 walker (nfs4.ts). Nothing here
 * allocates or throws; anything that does not parse is "not a session operation" (or, after SEQUENCE,
 * just that SEQUENCE) and the call is routed like any other.
 *
 * RPCSEC_GSS (RFC 2203 §5.3.2): with service none the arguments and results are plain; with integrity
 * they sit in `databody_integ` and are read there (`argsOf`, `unwrapIntegrity`), in calls, replies and
 * callbacks alike. Linux sends EXCHANGE_ID, CREATE_SESSION and BIND_CONN_TO_SESSION under krb5i when it
 * has a machine credential, and a sec=krb5i mount wraps every COMPOUND: a session not learned there has
 * no affinity and, worse, no backchannel, so every callback of it would be refused. With privacy
 * (krb5p) they are encrypted: such a session cannot be learned, its calls go without affinity and its
 * callbacks only where the connection leaves no choice (backchannel/relay.ts).
 */
import type { RpcCallHeader } from '../../rpc/message.js';
import { NFS_PROGRAM } from './nfs3.js';
import { findOpArgs, findResult, Nfs4Op, RESULT_HIDDEN } from './nfs4.js';
import { gssProcOf, NOT_WALKED, RPCSEC_GSS_DATA, successResultsOffset, type UlbCallPlan } from './types.js';

/** `sessionid4` is `opaque[NFS4_SESSIONID_SIZE]`, NFS4_SESSIONID_SIZE = 16 (RFC 8881 §3.1). */
export const SESSIONID_SIZE = 16;

/** What a call means for session state (the router's per-call tag; NONE costs nothing more). */
export const SessionOp = {
  NONE: 0,
  /** Starts with SEQUENCE: belongs to the session named (affinity). */
  SEQUENCE: 1,
  /** CREATE_SESSION: the session id is in the reply. */
  CREATE: 2,
  /** BIND_CONN_TO_SESSION: binds the connection it travels on (the reply says which directions). */
  BIND: 3,
  /**
   * DESTROY_SESSION, alone or anywhere after SEQUENCE (RFC 8881 §18.37.3): the session it names is gone
   * once the reply says that operation succeeded.
   */
  DESTROY: 4,
} as const;
export type SessionOp = (typeof SessionOp)[keyof typeof SessionOp];

/** Operation numbers not in the forward walker's table (RFC 8881 §18.34, §18.36). */
const OP_BIND_CONN_TO_SESSION = 41;
const OP_CREATE_SESSION = 43;
/** CB_SEQUENCE (RFC 8881 §20.9). */
const OP_CB_SEQUENCE = 11;
const NFSPROC4_COMPOUND = 1;
const CB_COMPOUND = 1;
/** SEQUENCE4args: sessionid, sequenceid, slotid, highest_slotid, cachethis (RFC 8881 §18.46.1). */
const SEQUENCE_ARGS_SIZE = SESSIONID_SIZE + 16;
/** csr_flags bit: the connection CREATE_SESSION came on is bound to the backchannel (RFC 8881 §18.36.3). */
export const CREATE_SESSION4_FLAG_CONN_BACK_CHAN = 0x2;
/** channel_dir_from_server4 CDFS4_BACK bit (CDFS4_BACK = 2, CDFS4_BOTH = 3; RFC 8881 §18.34.3). */
export const CDFS4_BACK = 0x2;

function u32(b: Buffer, at: number): number {
  return b.readUInt32BE(at);
}

/** rpc_gss_service_t values (RFC 2203 §5). */
const RPC_GSS_SVC_NONE = 1;
const RPC_GSS_SVC_INTEGRITY = 2;

/**
 * Where the arguments (or results) of the message being read lie, `[start, end)`: set by `argsOf` and
 * `unwrapIntegrity`. One, reused: everything here is synchronous and allocates nothing.
 */
const body = { start: 0, end: 0 };

/** What `argsOf` found. */
const Args = {
  /** The arguments are in `body`. */
  READABLE: 0,
  /** No arguments to read: an RPCSEC_GSS control message, or a `databody_integ` that does not fit. */
  NONE: 1,
  /** Encrypted (privacy), an unknown service, or a credential too short to be RPCSEC_GSS's. */
  HIDDEN: 2,
} as const;
type Args = (typeof Args)[keyof typeof Args];

/**
 * Where the procedure arguments of `call` (decoded from `msg`) lie, in `body`: as they are for any
 * flavor but RPCSEC_GSS and for its service none; inside `databody_integ` for integrity
 * (`unwrapIntegrity`). The credential is rpc_gss_cred_vers_1_t: version, gss_proc, seq_num, service,
 * handle (RFC 2203 §5).
 */
function argsOf(call: RpcCallHeader, msg: Buffer): Args {
  body.start = call.bodyOffset;
  body.end = msg.length;
  if (!call.isGss) return Args.READABLE;
  const gssProc = gssProcOf(call);
  if (gssProc < 0) return Args.HIDDEN;
  if (gssProc !== RPCSEC_GSS_DATA) return Args.NONE;
  const c = call.cred;
  const service = u32(c.buf, c.bodyStart + 12);
  if (service === RPC_GSS_SVC_NONE) return Args.READABLE;
  if (service !== RPC_GSS_SVC_INTEGRITY) return Args.HIDDEN;
  return unwrapIntegrity(msg) ? Args.READABLE : Args.NONE;
}

/**
 * Narrows `body` to the data inside `rpc_gss_integ_data` (RFC 2203 §5.3.2.2; results are protected the
 * same way, §5.3.3.2): `databody_integ` is an opaque holding the seq_num, then the arguments or results;
 * the checksum follows the opaque. False when the opaque does not fit in `body` or cannot hold the
 * seq_num: nothing is read from outside it.
 */
function unwrapIntegrity(msg: Buffer): boolean {
  const start = body.start;
  if (start + 8 > body.end) return false;
  const len = u32(msg, start);
  if (len < 4 || len > body.end - start - 4) return false;
  body.end = start + 4 + len;
  body.start = start + 8;
  return true;
}

/**
 * Whether the arguments of `call`, and so the results of its reply, are under RPCSEC_GSS integrity: the
 * router notes it on a session call, for `sessionOfReply` to read the reply inside `databody_integ`.
 */
export function gssIntegrity(call: RpcCallHeader): boolean {
  const c = call.cred;
  return gssProcOf(call) === RPCSEC_GSS_DATA && u32(c.buf, c.bodyStart + 12) === RPC_GSS_SVC_INTEGRITY;
}

/** Position after the COMPOUND tag (`utf8str_cs tag`), or -1 when the tag does not fit in `end`. */
function afterTag(b: Buffer, at: number, end: number): number {
  if (at + 4 > end) return -1;
  const len = u32(b, at);
  if (len > end - at - 4) return -1;
  return at + 4 + ((len + 3) & ~3);
}

/**
 * Classifies an NFSv4.1+ COMPOUND call (`call` is its decoded header, `msg` the whole call). When the
 * call names a session (SEQUENCE, BIND_CONN_TO_SESSION, DESTROY_SESSION) the id is copied to `out[0,16)`.
 * `plan`, when given, is the plan the registry has just made for this very call: where its walk found a
 * DESTROY_SESSION (`destroySessionArgs`) spares a second walk of the COMPOUND.
 */
export function sessionOpOfCall(
  call: RpcCallHeader,
  msg: Buffer,
  out: Buffer,
  plan?: UlbCallPlan,
): SessionOp {
  if (call.prog !== NFS_PROGRAM || call.vers !== 4 || call.proc !== NFSPROC4_COMPOUND) return SessionOp.NONE;
  // Under integrity, within databody_integ; under privacy, not learnable (see the top of this file).
  if (argsOf(call, msg) !== Args.READABLE) return SessionOp.NONE;
  const end = body.end;
  let p = afterTag(msg, body.start, end);
  if (p < 0 || p + 12 > end) return SessionOp.NONE;
  const minor = u32(msg, p);
  const numOps = u32(msg, p + 4);
  const op = u32(msg, p + 8);
  p += 12;
  if (minor < 1 || numOps === 0) return SessionOp.NONE;
  switch (op) {
    case Nfs4Op.SEQUENCE: {
      if (p + SEQUENCE_ARGS_SIZE > end) return SessionOp.NONE;
      // RFC 8881 §18.37.3: after SEQUENCE, DESTROY_SESSION must be the last operation when it names
      // SEQUENCE's own session, and may stand anywhere when it names another. Either way the call is
      // DESTROY of the session DESTROY_SESSION names (the first one, if several: the record holds one id,
      // and a session left known is harmless, see sessionOfReply). That id is also the call's affinity,
      // which is what the server requires: "DESTROY_SESSION MUST be invoked on a connection that is
      // associated with the session being destroyed" (ibid.). Whether it is last is the server's to
      // check (NFS4ERR_NOT_ONLY_OP), and the reply says whether it succeeded. An operation before it that
      // the NFSv4 walker cannot step over hides it: the call is then the SEQUENCE it starts with.
      const walked = plan === undefined ? NOT_WALKED : plan.destroySessionArgs;
      const d =
        numOps < 2
          ? -1
          : walked !== NOT_WALKED
            ? walked
            : findOpArgs(msg, p + SEQUENCE_ARGS_SIZE, end, numOps - 1, Nfs4Op.DESTROY_SESSION);
      if (d >= 0 && d + SESSIONID_SIZE <= end) {
        msg.copy(out, 0, d, d + SESSIONID_SIZE);
        return SessionOp.DESTROY;
      }
      msg.copy(out, 0, p, p + SESSIONID_SIZE);
      return SessionOp.SEQUENCE;
    }
    case OP_CREATE_SESSION:
      return SessionOp.CREATE;
    case OP_BIND_CONN_TO_SESSION:
    // Without SEQUENCE first, DESTROY_SESSION must be the only operation (RFC 8881 §18.37.3); if it is
    // not, the server fails it with NFS4ERR_NOT_ONLY_OP and the reply says so.
    case Nfs4Op.DESTROY_SESSION:
      if (p + SESSIONID_SIZE > end) return SessionOp.NONE;
      msg.copy(out, 0, p, p + SESSIONID_SIZE);
      return op === OP_BIND_CONN_TO_SESSION ? SessionOp.BIND : SessionOp.DESTROY;
    default:
      return SessionOp.NONE;
  }
}

/**
 * The outcome of a session operation's reply. For CREATE / BIND: the session id granted is copied to
 * `out` and the result says whether the connection now carries the backchannel. For SEQUENCE: the
 * session the server accepted the call in (fore channel only). For DESTROY: whether the DESTROY_SESSION
 * operation succeeded (FORE) or not (FAILED); `out` is left alone (it holds the id the call named).
 */
export const SessionReply = {
  /** Not a successful reply of the expected shape: change nothing. */
  FAILED: -1,
  /** Succeeded; the connection carries only the fore channel. */
  FORE: 0,
  /** Succeeded; the connection carries the backchannel too. */
  BACK: 1,
} as const;
export type SessionReply = (typeof SessionReply)[keyof typeof SessionReply];

/**
 * Reads a session operation's reply (`op` is what `sessionOpOfCall` said about its call; `integrity`:
 * its call was under RPCSEC_GSS integrity, `gssIntegrity`, so the results are in `databody_integ`).
 */
export function sessionOfReply(reply: Buffer, op: SessionOp, out: Buffer, integrity = false): SessionReply {
  if (op === SessionOp.NONE) return SessionReply.FAILED;
  let p = successResultsOffset(reply, 0, reply.length);
  if (p < 0) return SessionReply.FAILED;
  body.start = p;
  body.end = reply.length;
  if (integrity && !unwrapIntegrity(reply)) return SessionReply.FAILED;
  p = body.start;
  const end = body.end;
  if (p + 4 > end) return SessionReply.FAILED;
  if (op === SessionOp.DESTROY) return destroyed(reply, p, end);
  if (u32(reply, p) !== 0) return SessionReply.FAILED; // COMPOUND4res.status ≠ NFS4_OK
  p = afterTag(reply, p + 4, end);
  if (p < 0 || p + 12 + SESSIONID_SIZE + 8 > end) return SessionReply.FAILED;
  const wantOp =
    op === SessionOp.CREATE
      ? OP_CREATE_SESSION
      : op === SessionOp.BIND
        ? OP_BIND_CONN_TO_SESSION
        : Nfs4Op.SEQUENCE;
  // resarray<>: count, then the first result: resop, status, resok.
  if (u32(reply, p) === 0 || u32(reply, p + 4) !== wantOp || u32(reply, p + 8) !== 0)
    return SessionReply.FAILED;
  p += 12;
  reply.copy(out, 0, p, p + SESSIONID_SIZE);
  p += SESSIONID_SIZE;
  // SEQUENCE4resok (sr_sessionid first, RFC 8881 §18.46.2) binds the fore channel only (§2.10.3.1).
  if (op === SessionOp.SEQUENCE) return SessionReply.FORE;
  if (op === SessionOp.CREATE) {
    // csr_sequence, csr_flags
    return (u32(reply, p + 4) & CREATE_SESSION4_FLAG_CONN_BACK_CHAN) !== 0
      ? SessionReply.BACK
      : SessionReply.FORE;
  }
  // bctsr_dir, bctsr_use_conn_in_rdma_mode
  return (u32(reply, p) & CDFS4_BACK) !== 0 ? SessionReply.BACK : SessionReply.FORE;
}

/**
 * Whether the DESTROY_SESSION of a COMPOUND succeeded (`p`: COMPOUND4res.status). The COMPOUND's status is
 * that of the last operation evaluated (RFC 8881 §16.2.3), so it does not answer the question when
 * operations follow DESTROY_SESSION (another session's, §18.37.3): one of them may have failed after it
 * succeeded. Its own result does, found by stepping over the ones before it (`findResult`). When one of
 * those cannot be stepped over (an operation whose result the walker does not know), the result is
 * hidden: only an NFS4_OK COMPOUND still says that every operation, DESTROY_SESSION included, succeeded;
 * otherwise the session is kept. That is the safe side: a session kept after all is only an entry that
 * lingers until its client leaves (no call names it again, and a CREATE_SESSION reply granting the same
 * id takes it over), while a session forgotten but still alive loses its callbacks and its affinity.
 */
function destroyed(reply: Buffer, p: number, end: number): SessionReply {
  const at = findResult(reply, p + 4, end, Nfs4Op.DESTROY_SESSION);
  if (at >= 0) return u32(reply, at) === 0 ? SessionReply.FORE : SessionReply.FAILED;
  return at === RESULT_HIDDEN && u32(reply, p) === 0 ? SessionReply.FORE : SessionReply.FAILED;
}

/** What a backward call says about its session (`sessionOfCallback`). */
export const CallbackSession = {
  /** Names no session: CB_NULL, an NFSv4.0 callback, or not parseable. */
  NONE: 0,
  /** CB_SEQUENCE names one; its id was copied out. */
  NAMED: 1,
  /** Its arguments are encrypted (RPCSEC_GSS privacy): which session it names cannot be read. */
  HIDDEN: 2,
} as const;
export type CallbackSession = (typeof CallbackSession)[keyof typeof CallbackSession];

/**
 * The session of a backward call: a CB_COMPOUND (procedure 1 of the client's callback program, any
 * program number — csa_cb_program is the client's choice) with minorversion ≥ 1 whose first operation is
 * CB_SEQUENCE (RFC 8881 §20.9.3: it must be). Copies the id to `out` and returns NAMED; NONE for CB_NULL,
 * NFSv4.0 callbacks and anything that does not parse; HIDDEN for arguments under RPCSEC_GSS privacy.
 *
 * RPCSEC_GSS (RFC 2203 §5.3.2): read inside `databody_integ` under integrity, as on the forward path
 * (`argsOf`); under privacy the session is HIDDEN, and a callback read at the wrong offset could be taken
 * for one naming no session and go to the wrong client.
 */
export function sessionOfCallback(call: RpcCallHeader, msg: Buffer, out: Buffer): CallbackSession {
  if (call.proc !== CB_COMPOUND) return CallbackSession.NONE;
  const args = argsOf(call, msg);
  if (args === Args.HIDDEN) return CallbackSession.HIDDEN;
  if (args === Args.NONE) return CallbackSession.NONE;
  const end = body.end;
  const p = afterTag(msg, body.start, end);
  // minorversion, callback_ident, argarray count, first argop, csa_sessionid
  if (p < 0 || p + 16 + SESSIONID_SIZE > end) return CallbackSession.NONE;
  if (u32(msg, p) < 1 || u32(msg, p + 8) === 0 || u32(msg, p + 12) !== OP_CB_SEQUENCE)
    return CallbackSession.NONE;
  msg.copy(out, 0, p + 16, p + 16 + SESSIONID_SIZE);
  return CallbackSession.NAMED;
}
