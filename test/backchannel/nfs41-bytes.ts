/**
 * NFSv4.1 messages written by hand, word by word, from the XDR of RFC 8881 (§16.2 COMPOUND, §18.36
 * CREATE_SESSION, §18.34 BIND_CONN_TO_SESSION, §18.37 DESTROY_SESSION, §18.46 SEQUENCE, §18.19 PUTFH,
 * §18.7 GETATTR, §18.13 LOOKUP, §18.16 OPEN, §18.11 LOCKT, §20.2 CB_RECALL, §20.9 CB_SEQUENCE, §16.2.1
 * CB_COMPOUND) and RFC 5531 (RPC headers, AUTH_NONE). Deliberately NOT built
 * with the gateway's own encoders (rpc/message.ts, rpc/xdr.ts), so that a shared misunderstanding cannot
 * make a test pass. Labelled "hand-made" wherever a test uses them; no real NFSv4.1 capture was made
 * (see test/fixtures/nfs41/README.md).
 */

/** XDR words and opaques, concatenated. */
export function xdr(...parts: (number | Buffer | bigint)[]): Buffer {
  const out: Buffer[] = [];
  for (const p of parts) {
    if (typeof p === 'number') {
      const b = Buffer.alloc(4);
      b.writeUInt32BE(p >>> 0, 0);
      out.push(b);
    } else if (typeof p === 'bigint') {
      const b = Buffer.alloc(8);
      b.writeBigUInt64BE(p, 0);
      out.push(b);
    } else {
      out.push(p);
    }
  }
  return Buffer.concat(out);
}

/** Variable-length opaque / string: length word, bytes, zero pad to 4. */
export function opaque(b: Buffer | string): Buffer {
  const data = typeof b === 'string' ? Buffer.from(b, 'utf8') : b;
  const pad = (4 - (data.length % 4)) % 4;
  return xdr(data.length, data, Buffer.alloc(pad));
}

export const NFS4_PROGRAM = 100003;
/** The callback program the test clients choose (csa_cb_program: any number). */
export const CB_PROGRAM = 0x40000000;

/** RPC call, AUTH_NONE credential and verifier (RFC 5531 §9). */
export function rpcCall(xid: number, prog: number, vers: number, proc: number, body: Buffer): Buffer {
  return xdr(xid, 0, 2, prog, vers, proc, 0, 0, 0, 0, body);
}

/** Accepted, SUCCESS reply, AUTH_NONE verifier. */
export function rpcReply(xid: number, body: Buffer): Buffer {
  return xdr(xid, 1, 0, 0, 0, 0, body);
}

export function compoundCall(xid: number, minor: number, ops: Buffer[], tag = 'hand'): Buffer {
  return rpcCall(xid, NFS4_PROGRAM, 4, 1, xdr(opaque(tag), minor, ops.length, ...ops));
}

export function compoundReply(xid: number, status: number, results: Buffer[], tag = 'hand'): Buffer {
  return rpcReply(xid, xdr(status, opaque(tag), results.length, ...results));
}

/**
 * The body of an RPCSEC_GSS message (RFC 2203 §5.3.2) for `service`: 1 (none) the data as it is; 2
 * (integrity) `databody_integ` = opaque(seq_num, data), then an opaque checksum of 20 bytes; 3 (privacy)
 * an opaque of bytes standing for the encrypted data.
 */
function gssBody(service: 1 | 2 | 3, seq: number, data: Buffer): Buffer {
  if (service === 1) return data;
  if (service === 2) return xdr(opaque(xdr(seq, data)), opaque(Buffer.alloc(20, 9)));
  return xdr(opaque(Buffer.alloc(data.length + 16, 0x5a)));
}

/**
 * COMPOUND call under RPCSEC_GSS (RFC 2203 §5.3.1): credential rpc_gss_cred_vers_1_t (version 1,
 * RPCSEC_GSS_DATA, seq_num, `service`, handle), a verifier of 16 bytes standing for the MIC; the
 * arguments as `gssBody` wraps them (krb5, krb5i, krb5p).
 */
export function compoundCallGss(
  xid: number,
  service: 1 | 2 | 3,
  minor: number,
  ops: Buffer[],
  seq = 17,
  tag = 'hand',
): Buffer {
  const cred = xdr(1, 0, seq, service, opaque('ctxC'));
  const args = xdr(opaque(tag), minor, ops.length, ...ops);
  return xdr(
    xid,
    0,
    2,
    NFS4_PROGRAM,
    4,
    1,
    6,
    opaque(cred),
    6,
    opaque(Buffer.alloc(16, 7)),
    gssBody(service, seq, args),
  );
}

/** Accepted, SUCCESS COMPOUND reply under RPCSEC_GSS: a 16-byte verifier (the MIC of seq_num), results wrapped as the call's. */
export function compoundReplyGss(
  xid: number,
  service: 1 | 2 | 3,
  status: number,
  results: Buffer[],
  seq = 17,
  tag = 'hand',
): Buffer {
  const compound = xdr(status, opaque(tag), results.length, ...results);
  return xdr(xid, 1, 0, 6, opaque(Buffer.alloc(16, 8)), 0, gssBody(service, seq, compound));
}

/** channel_attrs4 (RFC 8881 §18.36.1), no RDMA IRD. */
function channelAttrs(maxRequests: number): Buffer {
  return xdr(0, 1_049_620, 1_049_480, 4096, 16, maxRequests, 0);
}

export const op = {
  sequence: (sessionId: Buffer, seq = 1, slot = 0) => xdr(53, sessionId, seq, slot, 0, 0),
  putrootfh: () => xdr(24),
  /** CREATE_SESSION with CREATE_SESSION4_FLAG_CONN_BACK_CHAN (0x2) requested. */
  createSession: (clientId: bigint, cbProgram = CB_PROGRAM) =>
    xdr(43, clientId, 1, 0x3, channelAttrs(64), channelAttrs(16), cbProgram, 1, 0),
  bindConnToSession: (sessionId: Buffer, dir = 3 /* CDFC4_FORE_OR_BOTH */) => xdr(41, sessionId, dir, 0),
  destroySession: (sessionId: Buffer) => xdr(44, sessionId),
  putfh: (fh: Buffer) => xdr(22, opaque(fh)),
  /** GETATTR of `type` (attribute 1): bitmap4 of one word. */
  getattrType: () => xdr(9, 1, 1 << 1),
  lookup: (name: string) => xdr(15, opaque(name)),
  /** OPEN for reading, no create (OPEN4_NOCREATE), CLAIM_NULL by name. */
  open: (clientId: bigint, name: string) =>
    xdr(18, 0, 1 /* OPEN4_SHARE_ACCESS_READ */, 0, clientId, opaque('owner-1'), 0, 0, opaque(name)),
  /** LOCKT (READ_LT, whole file): an operation the gateway's NFSv4 walker does not know. */
  lockt: (clientId: bigint) => xdr(13, 1, 0n, 0xffffffffffffffffn, clientId, opaque('lock-owner')),
};

export const res = {
  sequence: (sessionId: Buffer, seq = 1, slot = 0) => xdr(53, 0, sessionId, seq, slot, 63, 63, 0),
  putrootfh: () => xdr(24, 0),
  createSession: (sessionId: Buffer, flags = 0x2) =>
    xdr(43, 0, sessionId, 1, flags, channelAttrs(64), channelAttrs(16)),
  createSessionError: (status: number) => xdr(43, status),
  bindConnToSession: (sessionId: Buffer, dir: number) => xdr(41, 0, sessionId, dir, 0),
  destroySession: () => xdr(44, 0),
  /** Any failed operation: its resop and status only (nfs_resop4, RFC 8881 §16.2.2). */
  error: (opcode: number, status: number) => xdr(opcode, status),
  putfh: () => xdr(22, 0),
  /** GETATTR4resok: fattr4 of `type` = NF4DIR (2). */
  getattrType: () => xdr(9, 0, 1, 1 << 1, 4, 2),
  lookup: () => xdr(15, 0),
  /** OPEN4resok: stateid, change_info4, rflags, attrset (empty), OPEN_DELEGATE_NONE. */
  open: () => xdr(18, 0, 1, Buffer.alloc(12, 0x0e), 1, 5n, 6n, 0, 0, 0),
  lockt: () => xdr(13, 0),
};

/** nfsstat4 values the tests use (RFC 8881 §15.1). */
export const NFS4ERR = {
  NOENT: 2,
  WRONGSEC: 10016,
  BADSESSION: 10052,
  CONN_NOT_BOUND_TO_SESSION: 10055,
  NOT_ONLY_OP: 10081,
  OP_ILLEGAL: 10044,
} as const;

/** CB_COMPOUND call (procedure 1 of the callback program, version 1). */
export function cbCompound(xid: number, minor: number, ops: Buffer[], ident = 0, prog = CB_PROGRAM): Buffer {
  return rpcCall(xid, prog, 1, 1, xdr(opaque(''), minor, ident, ops.length, ...ops));
}

/**
 * CB_COMPOUND under RPCSEC_GSS (RFC 2203 §5.3): credential rpc_gss_cred_vers_1_t (version 1,
 * RPCSEC_GSS_DATA, seq_num, `service`, handle), a verifier of 16 bytes standing for the MIC. Service 1
 * (none): the arguments as they are; 2 (integrity): `databody_integ` = opaque(seq_num, arguments), then
 * an opaque checksum of 20 bytes; 3 (privacy): an opaque of bytes standing for the encrypted arguments.
 */
export function cbCompoundGss(xid: number, service: 1 | 2 | 3, ops: Buffer[], seq = 9): Buffer {
  const cred = xdr(1, 0, seq, service, opaque('ctxA'));
  const args = xdr(opaque(''), 1, 0, ops.length, ...ops);
  const body =
    service === 1
      ? args
      : service === 2
        ? xdr(opaque(xdr(seq, args)), opaque(Buffer.alloc(20, 9)))
        : xdr(opaque(Buffer.alloc(args.length + 16, 0x5a)));
  return xdr(xid, 0, 2, CB_PROGRAM, 1, 1, 6, opaque(cred), 6, opaque(Buffer.alloc(16, 7)), body);
}

/** CB_NULL under RPCSEC_GSS (procedure 0, RPCSEC_GSS_DATA, service none: no arguments). */
export function cbNullGss(xid: number): Buffer {
  const cred = xdr(1, 0, 9, 1, opaque('ctxA'));
  return xdr(xid, 0, 2, CB_PROGRAM, 1, 0, 6, opaque(cred), 6, opaque(Buffer.alloc(16, 7)));
}

/** CB_NULL (procedure 0). */
export function cbNull(xid: number, prog = CB_PROGRAM): Buffer {
  return rpcCall(xid, prog, 1, 0, Buffer.alloc(0));
}

export const cbOp = {
  sequence: (sessionId: Buffer, seq = 1, slot = 0) => xdr(11, sessionId, seq, slot, 0, 0, 0),
  /** CB_RECALL: stateid (seqid + 12 bytes), truncate = false, a file handle. */
  recall: (stateOther: Buffer, fh: Buffer) => xdr(4, 1, stateOther, 0, opaque(fh)),
};

export const cbRes = {
  sequence: (sessionId: Buffer, seq = 1, slot = 0) => xdr(11, 0, sessionId, seq, slot, 0, 0),
  recall: () => xdr(4, 0),
};

export function cbCompoundReply(xid: number, results: Buffer[]): Buffer {
  return rpcReply(xid, xdr(0, opaque(''), results.length, ...results));
}

/** A recognisable session id: ganesha builds them from the client id and a counter; any 16 bytes do. */
export function sessionId(n: number): Buffer {
  const b = Buffer.alloc(16);
  b.write('sess', 0, 'latin1');
  b.writeUInt32BE(n, 4);
  b.writeUInt32BE(0x5eed0000 + n, 12);
  return b;
}
