/**
 * Terminate causes (RFC 5040 §7, RFC 5041 §7, RFC 5044 §8; the codes also in the IANA RDDP registry),
 * each with the work-completion status the WR that hit it gets on the side that detected it and on the
 * side that receives the Terminate.
 */
import { WcStatus } from '../../verbs/index.js';

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
