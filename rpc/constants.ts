/**
 * ONC RPC Version 2 protocol constants (RFC 5531 §9 and the RPCSEC_GSS additions of RFC 2203 / RFC 5403).
 * Plain `as const` objects: the values are what goes on the wire, the key names are the RFC's.
 */

/** The only RPC version this protocol defines (RFC 5531 §9: `rpcvers` "MUST be equal to 2"). */
export const RPC_VERSION = 2;

/** `msg_type` (RFC 5531 §9). */
export const MsgType = { CALL: 0, REPLY: 1 } as const;
export type MsgType = (typeof MsgType)[keyof typeof MsgType];

/** `reply_stat`. */
export const ReplyStat = { MSG_ACCEPTED: 0, MSG_DENIED: 1 } as const;
export type ReplyStat = (typeof ReplyStat)[keyof typeof ReplyStat];

/** `accept_stat`: how an accepted call went. */
export const AcceptStat = {
  SUCCESS: 0,
  PROG_UNAVAIL: 1,
  PROG_MISMATCH: 2,
  PROC_UNAVAIL: 3,
  GARBAGE_ARGS: 4,
  SYSTEM_ERR: 5,
} as const;
export type AcceptStat = (typeof AcceptStat)[keyof typeof AcceptStat];

/** `reject_stat`: why a call was denied. */
export const RejectStat = { RPC_MISMATCH: 0, AUTH_ERROR: 1 } as const;
export type RejectStat = (typeof RejectStat)[keyof typeof RejectStat];

/** `auth_stat` (RFC 5531 §9; 13 and 14 from RFC 2203 §5.3.3.3). */
export const AuthStat = {
  AUTH_OK: 0,
  AUTH_BADCRED: 1,
  AUTH_REJECTEDCRED: 2,
  AUTH_BADVERF: 3,
  AUTH_REJECTEDVERF: 4,
  AUTH_TOOWEAK: 5,
  AUTH_INVALIDRESP: 6,
  AUTH_FAILED: 7,
  AUTH_KERB_GENERIC: 8,
  AUTH_TIMEEXPIRE: 9,
  AUTH_TKT_FILE: 10,
  AUTH_DECODE: 11,
  AUTH_NET_ADDR: 12,
  RPCSEC_GSS_CREDPROBLEM: 13,
  RPCSEC_GSS_CTXPROBLEM: 14,
} as const;
export type AuthStat = (typeof AuthStat)[keyof typeof AuthStat];

/** `auth_flavor` numbers assigned by IANA (RFC 5531 §8.2 and the registry). */
export const AuthFlavor = {
  AUTH_NONE: 0,
  AUTH_SYS: 1,
  AUTH_SHORT: 2,
  AUTH_DH: 3,
  RPCSEC_GSS: 6,
} as const;
export type AuthFlavor = (typeof AuthFlavor)[keyof typeof AuthFlavor];

/** `opaque body<400>` of `opaque_auth` (RFC 5531 §8.2). */
export const MAX_AUTH_BYTES = 400;

/** `string machinename<255>` of `authsys_parms` (RFC 5531 Appendix A). */
export const MAX_MACHINE_NAME = 255;

/** `unsigned int gids<16>` of `authsys_parms` (RFC 5531 Appendix A). */
export const MAX_AUTH_SYS_GIDS = 16;

/**
 * Bytes of a call header before the credential: xid, msg_type, rpcvers, prog, vers, proc. The smallest call
 * (AUTH_NONE credential and verifier) is this plus 16.
 */
export const CALL_FIXED_PREFIX = 24;

/** The smallest well-formed call header: fixed prefix + two empty opaque_auth (flavor + length each). */
export const MIN_CALL_HEADER = CALL_FIXED_PREFIX + 16;

/** The smallest well-formed reply: xid, msg_type, reply_stat, then at least one more word. */
export const MIN_REPLY_HEADER = 16;
