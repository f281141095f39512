/**
 * ONC RPC authentication: `opaque_auth` (RFC 5531 §8.2) and the AUTH_SYS credential body (RFC 5531
 * Appendix A). Decoding fills caller-owned objects that hold offsets into the message, so a decoded header
 * allocates nothing; the bytes become a Buffer view, or the machine name a string, only when asked for.
 * RPCSEC_GSS (flavor 6) and unknown flavors stay opaque: the gateway forwards them and never needs them.
 */
import { getU32BE } from '../common/bytes.js';
import { UsageError } from '../common/errors.js';
import { AuthFlavor, MAX_AUTH_BYTES, MAX_AUTH_SYS_GIDS, MAX_MACHINE_NAME } from './constants.js';
import { RpcHeaderError } from './errors.js';
import { XdrError, type XdrReader, XdrWriter, xdrAlign } from './xdr.js';

const EMPTY = Buffer.alloc(0);

/**
 * A decoded `opaque_auth`: the flavor and where its body lies in the message buffer. `flavor` is -1 when
 * the message has no such field (the verifier of a denied reply).
 */
export class OpaqueAuthView {
  flavor = -1;
  /** The message buffer the body lies in (not a copy). */
  buf: Buffer = EMPTY;
  /** Index of the first body byte in `buf`. */
  bodyStart = 0;
  /** Body length in bytes, without the XDR pad. */
  bodyLength = 0;

  /** A view of the body (allocates only the view object, never copies). */
  get body(): Buffer {
    return this.buf.subarray(this.bodyStart, this.bodyStart + this.bodyLength);
  }

  clear(): void {
    this.flavor = -1;
    this.buf = EMPTY;
    this.bodyStart = 0;
    this.bodyLength = 0;
  }

  /** Reads `flavor` and `opaque body<400>` at the reader's position. */
  decode(r: XdrReader, field: 'cred' | 'verf'): void {
    this.flavor = r.u32(field === 'cred' ? 'cred.flavor' : 'verf.flavor');
    const len = r.opaqueLength(MAX_AUTH_BYTES, field === 'cred' ? 'cred.body' : 'verf.body');
    this.buf = r.buf;
    this.bodyStart = r.pos;
    this.bodyLength = len;
    r.skipOpaqueData(len);
  }
}

/**
 * The decoded body of an AUTH_SYS credential (`authsys_parms`). Like the rest of a decoded header it points
 * into the message: `gidAt(i)` reads a supplementary gid from the buffer, `machinename` decodes its UTF-8
 * on demand, so decoding allocates and copies nothing.
 */
export class AuthSysParams {
  /** True when the last decoded credential was AUTH_SYS and these fields describe it. */
  valid = false;
  stamp = 0;
  uid = 0;
  gid = 0;
  gidCount = 0;
  /** Index in `buf` of the first supplementary gid. */
  gidsStart = 0;
  buf: Buffer = EMPTY;
  machinenameStart = 0;
  machinenameLength = 0;

  get machinename(): string {
    return this.buf.toString('utf8', this.machinenameStart, this.machinenameStart + this.machinenameLength);
  }

  /** The machine name bytes as a view (RFC 5531 does not promise UTF-8). */
  get machinenameBytes(): Buffer {
    return this.buf.subarray(this.machinenameStart, this.machinenameStart + this.machinenameLength);
  }

  /** Supplementary gid number `i` (0 <= i < gidCount). */
  gidAt(i: number): number {
    if (!(i >= 0 && i < this.gidCount)) {
      throw new UsageError('ERR_RPC_GID_INDEX', `gid index ${i} outside 0..${this.gidCount - 1}`, {
        index: i,
      });
    }
    return getU32BE(this.buf, this.gidsStart + 4 * i);
  }

  /** The supplementary gids as a new array. */
  get gids(): number[] {
    const out: number[] = [];
    for (let i = 0; i < this.gidCount; i++) out.push(getU32BE(this.buf, this.gidsStart + 4 * i));
    return out;
  }

  clear(): void {
    this.valid = false;
    this.stamp = 0;
    this.uid = 0;
    this.gid = 0;
    this.gidCount = 0;
    this.gidsStart = 0;
    this.buf = EMPTY;
    this.machinenameStart = 0;
    this.machinenameLength = 0;
  }

  /**
   * Decodes `authsys_parms` from the credential body `auth` with the reader `r` (whose window is narrowed to
   * the body for the duration, then restored). The body must be consumed exactly.
   */
  decode(r: XdrReader, auth: OpaqueAuthView): void {
    const savedPos = r.pos;
    const savedEnd = r.end;
    const bodyEnd = auth.bodyStart + auth.bodyLength;
    r.pos = auth.bodyStart;
    r.end = bodyEnd;
    this.stamp = r.u32('cred.auth_sys.stamp');
    const nameLen = r.opaqueLength(MAX_MACHINE_NAME, 'cred.auth_sys.machinename');
    this.buf = r.buf;
    this.machinenameStart = r.pos;
    this.machinenameLength = nameLen;
    r.skipOpaqueData(nameLen);
    this.uid = r.u32('cred.auth_sys.uid');
    this.gid = r.u32('cred.auth_sys.gid');
    const n = r.arrayLength(MAX_AUTH_SYS_GIDS, 4, 'cred.auth_sys.gids');
    this.gidsStart = r.pos;
    this.gidCount = n;
    r.skip(4 * n, 'cred.auth_sys.gids');
    if (r.pos !== bodyEnd) {
      throw new XdrError(
        'ERR_XDR_VALUE',
        `AUTH_SYS credential has ${bodyEnd - r.pos} bytes after its gids`,
        'cred.auth_sys',
        r.pos,
        { trailing: bodyEnd - r.pos },
      );
    }
    r.pos = savedPos;
    r.end = savedEnd;
    this.valid = true;
  }
}

/**
 * The hot-path AUTH_SYS decoder for the credential body `b[start, end)` (already known to lie inside the
 * message). Returns false, leaving `out.valid` false, when the body is malformed in any way; the caller
 * then runs the checked decoder for the precise error.
 */
export function decodeAuthSysFast(b: Buffer, start: number, end: number, out: AuthSysParams): boolean {
  out.valid = false;
  // stamp, machinename length, uid, gid, gid count: 20 bytes with an empty name.
  if (end - start < 20) return false;
  const nameLen = getU32BE(b, start + 4);
  if (nameLen > MAX_MACHINE_NAME) return false;
  const p = start + 8 + xdrAlign(nameLen);
  if (end - p < 12) return false;
  const n = getU32BE(b, p + 8);
  if (n > MAX_AUTH_SYS_GIDS || end - (p + 12) !== 4 * n) return false;
  out.stamp = getU32BE(b, start);
  out.buf = b;
  out.machinenameStart = start + 8;
  out.machinenameLength = nameLen;
  out.uid = getU32BE(b, p);
  out.gid = getU32BE(b, p + 4);
  out.gidsStart = p + 12;
  out.gidCount = n;
  out.valid = true;
  return true;
}

/** What an encoder needs to write an `opaque_auth`. */
export interface OpaqueAuthInit {
  flavor: number;
  body?: Uint8Array;
}

/** AUTH_NONE with an empty body: the usual verifier of an AUTH_SYS call and of most replies. */
export const AUTH_NONE: Readonly<OpaqueAuthInit> = Object.freeze({
  flavor: AuthFlavor.AUTH_NONE,
  body: EMPTY,
});

/** The fields of an AUTH_SYS credential to encode. */
export interface AuthSysInit {
  stamp: number;
  machinename: string;
  uid: number;
  gid: number;
  gids?: readonly number[];
}

/** Writes `opaque_auth`; bodies over 400 bytes are refused (RFC 5531 §8.2). */
export function writeOpaqueAuth(w: XdrWriter, auth: Readonly<OpaqueAuthInit>, field: 'cred' | 'verf'): void {
  const body = auth.body ?? EMPTY;
  if (body.length > MAX_AUTH_BYTES) {
    throw new RpcHeaderError(
      'ERR_RPC_AUTH_TOO_LONG',
      `${field} body of ${body.length} bytes exceeds ${MAX_AUTH_BYTES}`,
      `${field}.body`,
      w.length,
      { length: body.length, limit: MAX_AUTH_BYTES },
    );
  }
  w.u32(auth.flavor, `${field}.flavor`);
  w.opaque(body, `${field}.body`);
}

/** Encodes an AUTH_SYS credential (done once per client identity, so it may allocate). */
export function authSysCredential(p: Readonly<AuthSysInit>): OpaqueAuthInit {
  const gids = p.gids ?? [];
  const nameLen = Buffer.byteLength(p.machinename, 'utf8');
  if (nameLen > MAX_MACHINE_NAME || gids.length > MAX_AUTH_SYS_GIDS) {
    throw new RpcHeaderError(
      'ERR_RPC_AUTH_SYS',
      `AUTH_SYS machinename of ${nameLen} bytes (max ${MAX_MACHINE_NAME}) or ${gids.length} gids (max ${MAX_AUTH_SYS_GIDS})`,
      nameLen > MAX_MACHINE_NAME ? 'cred.auth_sys.machinename' : 'cred.auth_sys.gids',
      0,
      { machinenameLength: nameLen, gidCount: gids.length },
    );
  }
  const size = 4 + 4 + xdrAlign(nameLen) + 4 + 4 + 4 + 4 * gids.length;
  const out = Buffer.alloc(size);
  try {
    const x = XdrWriter.into(out);
    x.u32(p.stamp, 'cred.auth_sys.stamp');
    x.string(p.machinename, 'cred.auth_sys.machinename');
    x.u32(p.uid, 'cred.auth_sys.uid');
    x.u32(p.gid, 'cred.auth_sys.gid');
    x.u32(gids.length, 'cred.auth_sys.gids');
    for (const g of gids) x.u32(g, 'cred.auth_sys.gids');
  } catch (err) {
    if (err instanceof XdrError) throw RpcHeaderError.fromXdr(err, 0);
    throw err;
  }
  return { flavor: AuthFlavor.AUTH_SYS, body: out };
}
