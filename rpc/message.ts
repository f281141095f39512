/**
 * ONC RPC message headers (RFC 5531 §9): decoding into caller-owned, reusable header objects and encoding
 * with `XdrWriter`.
 *
 * Built for a proxy's hot path: a connection keeps one `RpcCallHeader` / `RpcReplyHeader` and calls
 * `decode()` per message. Decoding allocates nothing — credential, verifier and machine name are offsets
 * into the message, turned into views or strings only when a getter is used — and `bodyOffset` says where
 * the procedure arguments or results start, so the body can be forwarded untouched.
 *
 * Error policy: every failure is an `RpcHeaderError`; XDR failures from the reader are wrapped (see
 * errors.ts). Enums that select the layout of what follows (msg_type, reply_stat, accept_stat, reject_stat)
 * are checked, because an unknown value leaves the body offset unknown. Values that only carry meaning
 * (auth flavor, auth_stat) are reported as they are: new ones have been assigned since RFC 5531, and a
 * proxy must pass them through.
 */
import { getU32BE, setU32BE } from '../common/bytes.js';
import {
  AuthSysParams,
  decodeAuthSysFast,
  type OpaqueAuthInit,
  OpaqueAuthView,
  writeOpaqueAuth,
} from './auth.js';
import {
  AcceptStat,
  AuthFlavor,
  MAX_AUTH_BYTES,
  MIN_CALL_HEADER,
  MsgType,
  RejectStat,
  ReplyStat,
  RPC_VERSION,
} from './constants.js';
import { RpcHeaderError } from './errors.js';
import { XdrError, XdrReader, type XdrWriter, xdrAlign } from './xdr.js';

const EMPTY = Buffer.alloc(0);

/** The xid of a raw message (its first word) without decoding anything else. */
export function peekXid(buf: Buffer, start = 0): number {
  if (start < 0 || buf.length - start < 4) {
    throw new RpcHeaderError('ERR_RPC_TRUNCATED', 'message too short for an xid', 'xid', 0, {
      available: Math.max(0, buf.length - start),
    });
  }
  return getU32BE(buf, start);
}

/**
 * The msg_type of a raw message (CALL 0 or REPLY 1), without decoding anything else: tells a backchannel
 * Call from a forward Reply. Values other than 0 and 1 are returned as they are for the caller to reject.
 */
export function peekMsgType(buf: Buffer, start = 0): number {
  if (start < 0 || buf.length - start < 8) {
    throw new RpcHeaderError('ERR_RPC_TRUNCATED', 'message too short for a msg_type', 'msg_type', 4, {
      available: Math.max(0, buf.length - start),
    });
  }
  return getU32BE(buf, start + 4);
}

/**
 * Overwrites the xid of a raw message in place and returns the previous one. Do not use on RPCSEC_GSS
 * calls: their verifier is a MIC over the header starting at the xid (RFC 2203 §5.3.1).
 */
export function rewriteXid(buf: Buffer, xid: number, start = 0): number {
  if (!Number.isInteger(xid) || xid < 0 || xid > 0xffff_ffff) {
    throw new RpcHeaderError('ERR_RPC_VALUE', `xid ${xid} is not an unsigned 32-bit integer`, 'xid', 0, {
      value: xid,
    });
  }
  const old = peekXid(buf, start);
  setU32BE(buf, start, xid);
  return old;
}

/** A layout-selecting value that RFC 5531 does not define (the xid is kept for a reply to the caller). */
function badValue(
  code: string,
  message: string,
  field: string,
  offset: number,
  value: number,
  xid: number,
): RpcHeaderError {
  return new RpcHeaderError(code, message, field, offset, { value, xid });
}

/** What every decoded message header has: where it lies, its xid, and where its body starts. */
abstract class DecodedHeader {
  /** The message buffer this header was decoded from (not a copy). */
  buf: Buffer = EMPTY;
  /** Index of the xid in `buf`. */
  start = 0;
  /** One past the last byte of the message in `buf`. */
  end = 0;
  xid = 0;
  /** Index in `buf` of the first byte after the header: the procedure arguments or results. */
  bodyOffset = 0;

  /** Bytes of the header, from the xid to the body. */
  get headerLength(): number {
    return this.bodyOffset - this.start;
  }

  /** The body as a view (no copy). */
  get body(): Buffer {
    return this.buf.subarray(this.bodyOffset, this.end);
  }

  protected readonly reader = new XdrReader();

  /** Points the reader at the message, reads the xid and checks msg_type; XDR errors are the caller's to wrap. */
  protected begin(buf: Buffer, start: number, end: number, expected: MsgType): XdrReader {
    this.buf = buf;
    this.start = start;
    this.end = end;
    this.xid = -1;
    const r = this.reader.reset(buf, start, end);
    this.xid = r.u32('xid');
    const at = r.pos;
    const type = r.u32('msg_type');
    if (type !== expected) {
      const want = expected === MsgType.CALL ? 'a CALL (0)' : 'a REPLY (1)';
      throw badValue(
        'ERR_RPC_MSG_TYPE',
        `expected ${want}, msg_type is ${type}`,
        'msg_type',
        at - start,
        type,
        this.xid,
      );
    }
    return r;
  }

  /** Wraps an XDR failure of this message as an RpcHeaderError (with the xid when it was decoded). */
  protected wrap(err: unknown): unknown {
    return err instanceof XdrError
      ? RpcHeaderError.fromXdr(err, this.start, this.xid >= 0 ? this.xid : undefined)
      : err;
  }
}

/** A decoded call header (`call_body`). */
export class RpcCallHeader extends DecodedHeader {
  rpcvers = 0;
  prog = 0;
  vers = 0;
  proc = 0;
  readonly cred = new OpaqueAuthView();
  readonly verf = new OpaqueAuthView();
  /** The AUTH_SYS credential fields; `authSys.valid` is false for any other flavor. */
  readonly authSys = new AuthSysParams();

  get isGss(): boolean {
    return this.cred.flavor === AuthFlavor.RPCSEC_GSS;
  }

  /**
   * Decodes the call header of the message `buf[start, end)`. On failure throws `RpcHeaderError`; fields
   * decoded before the failure (the xid in particular) are left set, so a server can answer RPC_MISMATCH or
   * GARBAGE_ARGS for that xid.
   */
  decode(buf: Buffer, start = 0, end = buf.length): this {
    if (
      start >= 0 &&
      end <= buf.length &&
      end - start >= MIN_CALL_HEADER &&
      this.decodeFast(buf, start, end)
    ) {
      return this;
    }
    return this.decodeChecked(buf, start, end);
  }

  /**
   * The hot path: reads words straight from the buffer with one bounds check per section. It returns false
   * on anything unusual (wrong type or version, an over-long or truncated field, a malformed AUTH_SYS body)
   * and `decode` then runs `decodeChecked`, which produces the precise error. Both must agree on every
   * well-formed message (a property test checks it).
   */
  private decodeFast(b: Buffer, start: number, end: number): boolean {
    if (getU32BE(b, start + 4) !== MsgType.CALL || getU32BE(b, start + 8) !== RPC_VERSION) return false;
    const credLen = getU32BE(b, start + 28);
    if (credLen > MAX_AUTH_BYTES) return false;
    const credStart = start + 32;
    const verfAt = credStart + xdrAlign(credLen);
    if (verfAt + 8 > end) return false;
    const verfLen = getU32BE(b, verfAt + 4);
    if (verfLen > MAX_AUTH_BYTES) return false;
    const bodyOffset = verfAt + 8 + xdrAlign(verfLen);
    if (bodyOffset > end) return false;
    const credFlavor = getU32BE(b, start + 24);
    if (credFlavor === AuthFlavor.AUTH_SYS) {
      if (!decodeAuthSysFast(b, credStart, credStart + credLen, this.authSys)) return false;
    } else {
      this.authSys.valid = false;
    }
    this.buf = b;
    this.start = start;
    this.end = end;
    this.xid = getU32BE(b, start);
    this.rpcvers = RPC_VERSION;
    this.prog = getU32BE(b, start + 12);
    this.vers = getU32BE(b, start + 16);
    this.proc = getU32BE(b, start + 20);
    const cred = this.cred;
    cred.flavor = credFlavor;
    cred.buf = b;
    cred.bodyStart = credStart;
    cred.bodyLength = credLen;
    const verf = this.verf;
    verf.flavor = getU32BE(b, verfAt);
    verf.buf = b;
    verf.bodyStart = verfAt + 8;
    verf.bodyLength = verfLen;
    this.bodyOffset = bodyOffset;
    return true;
  }

  /** The reference decoder, field by field through `XdrReader`, with precise errors. */
  decodeChecked(buf: Buffer, start = 0, end = buf.length): this {
    this.authSys.valid = false;
    try {
      const r = this.begin(buf, start, end, MsgType.CALL);
      const versAt = r.pos;
      this.rpcvers = r.u32('rpcvers');
      if (this.rpcvers !== RPC_VERSION) {
        throw badValue(
          'ERR_RPC_VERSION',
          `rpcvers is ${this.rpcvers}, only ${RPC_VERSION} exists (RFC 5531 §9)`,
          'rpcvers',
          versAt - start,
          this.rpcvers,
          this.xid,
        );
      }
      this.prog = r.u32('prog');
      this.vers = r.u32('vers');
      this.proc = r.u32('proc');
      this.cred.decode(r, 'cred');
      if (this.cred.flavor === AuthFlavor.AUTH_SYS) this.authSys.decode(r, this.cred);
      this.verf.decode(r, 'verf');
      this.bodyOffset = r.pos;
    } catch (err) {
      throw this.wrap(err);
    }
    return this;
  }
}

/** A decoded reply header (`reply_body`). Fields a reply of this shape does not carry hold -1. */
export class RpcReplyHeader extends DecodedHeader {
  /** MSG_ACCEPTED (0) or MSG_DENIED (1). */
  replyStat = -1;
  /** accept_stat of an accepted reply, else -1. */
  acceptStat = -1;
  /** reject_stat of a denied reply, else -1. */
  rejectStat = -1;
  /** PROG_MISMATCH: lowest and highest program version supported; RPC_MISMATCH: RPC versions. Else -1. */
  mismatchLow = -1;
  mismatchHigh = -1;
  /** auth_stat of an AUTH_ERROR denial, else -1. */
  authStat = -1;
  /** The verifier of an accepted reply; `verf.flavor` is -1 in a denied reply, which has none. */
  readonly verf = new OpaqueAuthView();
  // bodyOffset: the procedure results (SUCCESS). For every other shape it is where the reply ends (equal to
  // `end` for a well-formed message; anything after is left to the caller to judge).

  get isSuccess(): boolean {
    return this.acceptStat === AcceptStat.SUCCESS;
  }

  decode(buf: Buffer, start = 0, end = buf.length): this {
    this.replyStat = -1;
    this.acceptStat = -1;
    this.rejectStat = -1;
    this.mismatchLow = -1;
    this.mismatchHigh = -1;
    this.authStat = -1;
    this.verf.clear();
    try {
      const r = this.begin(buf, start, end, MsgType.REPLY);
      let at = r.pos;
      const stat = r.u32('reply_stat');
      if (stat === ReplyStat.MSG_ACCEPTED) {
        this.replyStat = stat;
        this.verf.decode(r, 'verf');
        at = r.pos;
        const accept = r.u32('accept_stat');
        if (accept > AcceptStat.SYSTEM_ERR) {
          throw badValue(
            'ERR_RPC_ACCEPT_STAT',
            `accept_stat ${accept} is not defined by RFC 5531`,
            'accept_stat',
            at - start,
            accept,
            this.xid,
          );
        }
        this.acceptStat = accept;
        if (accept === AcceptStat.PROG_MISMATCH) {
          this.mismatchLow = r.u32('mismatch_info.low');
          this.mismatchHigh = r.u32('mismatch_info.high');
        }
      } else if (stat === ReplyStat.MSG_DENIED) {
        this.replyStat = stat;
        at = r.pos;
        const reject = r.u32('reject_stat');
        if (reject === RejectStat.RPC_MISMATCH) {
          this.mismatchLow = r.u32('mismatch_info.low');
          this.mismatchHigh = r.u32('mismatch_info.high');
        } else if (reject === RejectStat.AUTH_ERROR) {
          this.authStat = r.u32('auth_stat');
        } else {
          throw badValue(
            'ERR_RPC_REJECT_STAT',
            `reject_stat ${reject} is not defined by RFC 5531`,
            'reject_stat',
            at - start,
            reject,
            this.xid,
          );
        }
        this.rejectStat = reject;
      } else {
        throw badValue(
          'ERR_RPC_REPLY_STAT',
          `reply_stat ${stat} is neither MSG_ACCEPTED nor MSG_DENIED`,
          'reply_stat',
          at - start,
          stat,
          this.xid,
        );
      }
      this.bodyOffset = r.pos;
    } catch (err) {
      throw this.wrap(err);
    }
    return this;
  }
}

/** The fields of a call header to encode. */
export interface CallInit {
  xid: number;
  prog: number;
  vers: number;
  proc: number;
  /** Defaults to AUTH_NONE. */
  cred?: Readonly<OpaqueAuthInit>;
  /** Defaults to AUTH_NONE. */
  verf?: Readonly<OpaqueAuthInit>;
  /** Only for tests of the RPC_MISMATCH path; defaults to 2. */
  rpcvers?: number;
}

/** The fields of an accepted reply header to encode. */
export interface AcceptedReplyInit {
  xid: number;
  acceptStat: AcceptStat;
  /** Defaults to AUTH_NONE. */
  verf?: Readonly<OpaqueAuthInit>;
  /** Required with PROG_MISMATCH: the lowest and highest program version supported. */
  mismatch?: { low: number; high: number };
}

/** The fields of a denied reply header to encode. */
export interface DeniedReplyInit {
  xid: number;
  rejectStat: RejectStat;
  /** Required with RPC_MISMATCH: the lowest and highest RPC version supported (2 and 2). */
  mismatch?: { low: number; high: number };
  /** Required with AUTH_ERROR. */
  authStat?: number;
}

const NONE: Readonly<OpaqueAuthInit> = Object.freeze({ flavor: AuthFlavor.AUTH_NONE, body: EMPTY });

/** Encoder failures leave as RpcHeaderError, like decoder failures. */
function asRpcError(err: unknown): unknown {
  return err instanceof XdrError ? RpcHeaderError.fromXdr(err, 0) : err;
}

function missing(field: string, why: string, at: number): RpcHeaderError {
  return new RpcHeaderError('ERR_RPC_VALUE', why, field, at);
}

/**
 * Appends a call header (up to and excluding the arguments) to `w` and returns `w.length`, i.e. the body
 * offset relative to the writer's start. The caller then writes or `writev`s the arguments.
 */
export function encodeCallHeader(w: XdrWriter, c: Readonly<CallInit>): number {
  try {
    w.u32(c.xid, 'xid');
    w.u32(MsgType.CALL, 'msg_type');
    w.u32(c.rpcvers ?? RPC_VERSION, 'rpcvers');
    w.u32(c.prog, 'prog');
    w.u32(c.vers, 'vers');
    w.u32(c.proc, 'proc');
    writeOpaqueAuth(w, c.cred ?? NONE, 'cred');
    writeOpaqueAuth(w, c.verf ?? NONE, 'verf');
  } catch (err) {
    throw asRpcError(err);
  }
  return w.length;
}

/** Appends an accepted reply header (up to the results, for SUCCESS) and returns `w.length`. */
export function encodeAcceptedReply(w: XdrWriter, a: Readonly<AcceptedReplyInit>): number {
  try {
    w.u32(a.xid, 'xid');
    w.u32(MsgType.REPLY, 'msg_type');
    w.u32(ReplyStat.MSG_ACCEPTED, 'reply_stat');
    writeOpaqueAuth(w, a.verf ?? NONE, 'verf');
    if (!Number.isInteger(a.acceptStat) || a.acceptStat < 0 || a.acceptStat > AcceptStat.SYSTEM_ERR) {
      throw new RpcHeaderError(
        'ERR_RPC_ACCEPT_STAT',
        `accept_stat ${a.acceptStat} is not defined by RFC 5531`,
        'accept_stat',
        w.length,
        { value: a.acceptStat },
      );
    }
    w.u32(a.acceptStat, 'accept_stat');
    if (a.acceptStat === AcceptStat.PROG_MISMATCH) {
      if (!a.mismatch) throw missing('mismatch_info', 'PROG_MISMATCH needs mismatch {low, high}', w.length);
      w.u32(a.mismatch.low, 'mismatch_info.low');
      w.u32(a.mismatch.high, 'mismatch_info.high');
    }
  } catch (err) {
    throw asRpcError(err);
  }
  return w.length;
}

/** Appends a denied reply (the whole message: a denial has no body) and returns `w.length`. */
export function encodeDeniedReply(w: XdrWriter, d: Readonly<DeniedReplyInit>): number {
  try {
    w.u32(d.xid, 'xid');
    w.u32(MsgType.REPLY, 'msg_type');
    w.u32(ReplyStat.MSG_DENIED, 'reply_stat');
    if (d.rejectStat === RejectStat.RPC_MISMATCH) {
      if (!d.mismatch) throw missing('mismatch_info', 'RPC_MISMATCH needs mismatch {low, high}', w.length);
      w.u32(d.rejectStat, 'reject_stat');
      w.u32(d.mismatch.low, 'mismatch_info.low');
      w.u32(d.mismatch.high, 'mismatch_info.high');
    } else if (d.rejectStat === RejectStat.AUTH_ERROR) {
      if (d.authStat === undefined) throw missing('auth_stat', 'AUTH_ERROR needs authStat', w.length);
      w.u32(d.rejectStat, 'reject_stat');
      w.u32(d.authStat, 'auth_stat');
    } else {
      throw new RpcHeaderError(
        'ERR_RPC_REJECT_STAT',
        `reject_stat ${d.rejectStat} is not defined by RFC 5531`,
        'reject_stat',
        w.length,
        { value: d.rejectStat },
      );
    }
  } catch (err) {
    throw asRpcError(err);
  }
  return w.length;
}
