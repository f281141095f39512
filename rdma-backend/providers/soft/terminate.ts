/**
 * Terminate causes (RFC 5040 §7, RFC 5041 §7, RFC 5044 §8; the codes also in the IANA RDDP registry),
 * each with the work-completion status the WR that hit it gets on the side that detected it and on the
 * side that receives the Terminate.
 */
import { VerbsError, WcStatus } from '../../verbs/index.js';
import {
  DDP_TAGGED,
  DDP_TAGGED_HEADER,
  DDP_UNTAGGED_HEADER,
  Op,
  READ_REQUEST_BODY,
  TERM_HDRCT_D,
  TERM_HDRCT_M,
  TERM_HDRCT_R,
  TERM_SEGMENT_LENGTH,
} from './wire.js';

export const Layer = { RDMAP: 0, DDP: 1, LLP: 2 } as const;

export interface TerminateCause {
  layer: number;
  type: number;
  code: number;
  name: string;
}

function cause(layer: number, type: number, code: number, name: string): TerminateCause {
  return { layer, type, code, name };
}

export const Term = {
  // RDMAP (layer 0): type 0 local catastrophic, 1 remote protection, 2 remote operation.
  LOCAL_CATASTROPHIC: cause(0, 0, 0, 'RDMAP local catastrophic error'),
  RDMAP_INVALID_STAG: cause(0, 1, 0x00, 'RDMAP remote protection: invalid STag'),
  RDMAP_BASE_BOUNDS: cause(0, 1, 0x01, 'RDMAP remote protection: base or bounds violation'),
  RDMAP_ACCESS_RIGHTS: cause(0, 1, 0x02, 'RDMAP remote protection: access rights violation'),
  RDMAP_STAG_NOT_ASSOC: cause(0, 1, 0x03, 'RDMAP remote protection: STag not associated with RDMAP stream'),
  RDMAP_TO_WRAP: cause(0, 1, 0x04, 'RDMAP remote protection: TO wrap'),
  RDMAP_VERSION: cause(0, 2, 0x05, 'RDMAP remote operation: invalid RDMAP version'),
  RDMAP_OPCODE: cause(0, 2, 0x06, 'RDMAP remote operation: unexpected opcode'),
  RDMAP_CATASTROPHIC_STREAM: cause(
    0,
    2,
    0x07,
    'RDMAP remote operation: catastrophic error, localized to stream',
  ),
  RDMAP_CANNOT_INVALIDATE: cause(0, 2, 0x09, 'RDMAP remote operation: STag cannot be invalidated'),
  // DDP (layer 1): type 1 tagged buffer, 2 untagged buffer.
  DDP_T_INVALID_STAG: cause(1, 1, 0x00, 'DDP tagged buffer: invalid STag'),
  DDP_T_BASE_BOUNDS: cause(1, 1, 0x01, 'DDP tagged buffer: base or bounds violation'),
  DDP_T_STAG_NOT_ASSOC: cause(1, 1, 0x02, 'DDP tagged buffer: STag not associated with DDP stream'),
  DDP_T_TO_WRAP: cause(1, 1, 0x03, 'DDP tagged buffer: TO wrap'),
  DDP_T_VERSION: cause(1, 1, 0x04, 'DDP tagged buffer: invalid DDP version'),
  DDP_U_INVALID_QN: cause(1, 2, 0x01, 'DDP untagged buffer: invalid QN'),
  DDP_U_NO_BUFFER: cause(1, 2, 0x02, 'DDP untagged buffer: invalid MSN, no buffer available'),
  DDP_U_MSN_RANGE: cause(1, 2, 0x03, 'DDP untagged buffer: invalid MSN, MSN range'),
  DDP_U_INVALID_MO: cause(1, 2, 0x04, 'DDP untagged buffer: invalid MO'),
  DDP_U_TOO_LONG: cause(1, 2, 0x05, 'DDP untagged buffer: message too long for available buffer'),
  DDP_U_VERSION: cause(1, 2, 0x06, 'DDP untagged buffer: invalid DDP version'),
  // LLP / MPA (layer 2, type 0).
  MPA_CRC: cause(2, 0, 0x02, 'MPA: received CRC error'),
  MPA_FPDU_START: cause(2, 0, 0x03, 'MPA: invalid FPDU / marker'),
  MPA_INVALID_REQ_REP: cause(2, 0, 0x04, 'MPA: invalid request or reply'),
  // RFC 6581 §9 (enhanced connection setup only).
  MPA_LOCAL_CATASTROPHIC: cause(2, 0, 0x05, 'MPA: local catastrophic error'),
  MPA_INSUFFICIENT_IRD: cause(2, 0, 0x06, 'MPA: insufficient IRD resources'),
  MPA_NO_MATCHING_RTR: cause(2, 0, 0x07, 'MPA: no matching RTR option'),
} as const;

/** Finds the named cause for a received Terminate Control word (unknown codes keep a generic name). */
export function describeTerminate(layer: number, type: number, code: number): TerminateCause {
  for (const c of Object.values(Term)) {
    if (c.layer === layer && c.type === type && c.code === code) return c;
  }
  return cause(layer, type, code, `Terminate layer ${layer} type ${type} code 0x${code.toString(16)}`);
}

/**
 * The status the oldest outstanding send-queue WR gets when the peer terminates the stream with `c`
 * (the WR that caused it, for a Read; a Send/Write normally completed before the Terminate arrived).
 */
export function remoteStatusFor(c: { layer: number; type: number }): number {
  if (c.layer === Layer.RDMAP && c.type === 1) return WcStatus.REM_ACCESS_ERR;
  if (c.layer === Layer.DDP && c.type === 1) return WcStatus.REM_ACCESS_ERR;
  if (c.layer === Layer.DDP && c.type === 2) return WcStatus.REM_INV_REQ_ERR;
  return WcStatus.REM_OP_ERR;
}

/**
 * The Hdrct bits (RFC 5040 §4.8) of a Terminate for `c`, caused by the received segment whose DDP control
 * and RDMAP control bytes are `ctrl` and `rdmap`: which of its headers the Terminate carries.
 * - LLP (MPA) errors carry none: the FPDU failed its CRC or framing, nothing in it is trusted (RFC 5044 §8).
 * - DDP errors carry the segment's length and DDP header (M, D), tagged or untagged as received, except for
 *   an invalid DDP version, whose header layout is unknown (RFC 5041 §7).
 * - RDMAP remote protection and remote operation errors carry them too, and an RDMA Read Request's RDMAP
 *   header besides (R), unless the RDMAP version is what was wrong with it; a local catastrophic error is
 *   not the segment's fault and carries none (RFC 5040 §7.2, §4.8).
 * Linux siw (siw_send_terminate) draws the same lines, but for RDMAP opcode and version errors, where it
 * leaves the DDP header out although the DDP layer, whose version was checked first, parsed it.
 */
export function terminateHdrct(c: TerminateCause, ctrl: number, rdmap: number): number {
  if (c.layer === Layer.LLP) return 0;
  if (c.layer === Layer.DDP) {
    return c === Term.DDP_T_VERSION || c === Term.DDP_U_VERSION ? 0 : TERM_HDRCT_M | TERM_HDRCT_D;
  }
  if (c.type === 0) return 0;
  const readRequest = (ctrl & DDP_TAGGED) === 0 && (rdmap & 0x0f) === Op.READ_REQUEST;
  return TERM_HDRCT_M | TERM_HDRCT_D | (readRequest && c !== Term.RDMAP_VERSION ? TERM_HDRCT_R : 0);
}

/** The headers a Terminate carried (RFC 5040 §4.8), as sent or received. */
export interface TerminateHeaders {
  /** The Hdrct bits of the Terminate Control word (`TERM_HDRCT_*`). */
  hdrct: number;
  /** The terminated segment's ULPDU_Length (M). */
  ddpSegmentLength?: number;
  /** Its DDP header, 14 bytes tagged or 18 untagged (D). */
  ddpHeader?: Buffer;
  /** Its RDMAP header: the 28 bytes of an RDMA Read Request (R). */
  rdmapHeader?: Buffer;
}

/**
 * Reads the headers that follow a Terminate Control word with Hdrct `hdrct` from `b[0, n)`, tolerantly:
 * the segment length when M or D is set (RFC 5040 §4.8 lays it out before the DDP header; Wireshark reads
 * it with D, Linux siw sets both), the DDP header when D (its T bit tells its length), the Read Request
 * header when R; a field cut short by the end of the message is left out. Copies (an error path).
 */
export function parseTerminateHeaders(hdrct: number, b: Buffer, n: number): TerminateHeaders {
  const h: TerminateHeaders = { hdrct };
  let p = 0;
  if (hdrct & (TERM_HDRCT_M | TERM_HDRCT_D)) {
    if (p + TERM_SEGMENT_LENGTH > n) return h;
    if (hdrct & TERM_HDRCT_M) h.ddpSegmentLength = b.readUInt16BE(p);
    p += TERM_SEGMENT_LENGTH;
  }
  if (hdrct & TERM_HDRCT_D) {
    if (p >= n) return h;
    const len = b[p] & DDP_TAGGED ? DDP_TAGGED_HEADER : DDP_UNTAGGED_HEADER;
    if (p + len > n) return h;
    h.ddpHeader = Buffer.from(b.subarray(p, p + len));
    p += len;
  }
  if (hdrct & TERM_HDRCT_R && p + READ_REQUEST_BODY <= n) {
    h.rdmapHeader = Buffer.from(b.subarray(p, p + READ_REQUEST_BODY));
  }
  return h;
}

/**
 * The error a DISCONNECTED event carries after a Terminate, sent (`local`) or received: its
 * layer/type/code and the offending segment's headers it carried. Code `IWARP_TERMINATE`.
 */
export class TerminateError extends VerbsError {
  constructor(
    readonly local: boolean,
    readonly terminate: TerminateCause,
    readonly headers: TerminateHeaders,
  ) {
    super('IWARP_TERMINATE', `${local ? 'sent' : 'received'} Terminate: ${terminate.name}`, {
      local,
      layer: terminate.layer,
      type: terminate.type,
      code: terminate.code,
      hdrct: hdrctString(headers.hdrct),
      ddpSegmentLength: headers.ddpSegmentLength,
      ddpHeader: headers.ddpHeader?.toString('hex'),
      rdmapHeader: headers.rdmapHeader?.toString('hex'),
    });
  }
}

function hdrctString(hdrct: number): string {
  return (
    (hdrct & TERM_HDRCT_M ? 'M' : '-') +
    (hdrct & TERM_HDRCT_D ? 'D' : '-') +
    (hdrct & TERM_HDRCT_R ? 'R' : '-')
  );
}
