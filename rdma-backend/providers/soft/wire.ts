/**
 * iWARP wire constants (RFC 5044 MPA, RFC 5041 DDP, RFC 5040 RDMAP, RFC 6581 MPA v2).
 * Offsets are from the start of an FPDU, i.e. they include MPA's 2-byte ULPDU length.
 */

/** RFC 5044 §7.1: the 16-byte keys opening an MPA request and reply. */
export const MPA_KEY_REQ = Buffer.from('MPA ID Req Frame', 'latin1');
export const MPA_KEY_REP = Buffer.from('MPA ID Rep Frame', 'latin1');
export const MPA_HEADER_SIZE = 20;
/** RFC 5044 §7.1: private data is at most 512 bytes. */
export const MPA_MAX_PRIVATE_DATA = 512;
/** RFC 6581 §5: the IRD and ORD words that open private data in enhanced mode. */
export const MPA_V2_IRD_ORD_SIZE = 4;

export const MPA_FLAG_MARKERS = 0x80;
export const MPA_FLAG_CRC = 0x40;
export const MPA_FLAG_REJECT = 0x20;
export const MPA_FLAG_ENHANCED = 0x10;

/** RFC 6581 §5: IRD word bits; ORD word bits. */
export const MPA_V2_PEER_TO_PEER = 0x8000;
export const MPA_V2_ZERO_LENGTH_SEND_RTR = 0x4000;
export const MPA_V2_ZERO_LENGTH_WRITE_RTR = 0x8000;
export const MPA_V2_ZERO_LENGTH_READ_RTR = 0x4000;
export const MPA_V2_IRD_ORD_MASK = 0x3fff;

/** The RTR a peer-to-peer connection was set up with (RFC 6581 §5): the responder's first-FPDU check. */
export const Rtr = {
  /** Not peer-to-peer, or no RTR negotiated: any first FPDU. */
  NONE: 0,
  /** A zero-length RDMA Write, marked last. */
  WRITE: 1,
  /** A zero-length RDMA Read Request, answered with a zero-length Read Response. */
  READ: 2,
} as const;
export type Rtr = (typeof Rtr)[keyof typeof Rtr];

/** MPA framing: 2-byte ULPDU length before, pad to 4 and a 4-byte CRC after. */
export const MPA_LENGTH_SIZE = 2;
export const MPA_CRC_SIZE = 4;

/** DDP control byte (RFC 5041 §4): T tagged, L last, DV = 1 in the low 2 bits. */
export const DDP_TAGGED = 0x80;
export const DDP_LAST = 0x40;
export const DDP_VERSION = 1;
/** RDMAP control byte (RFC 5040 §4.2): RV = 1 in the top 2 bits, opcode in the low 4. */
export const RDMAP_VERSION = 1;

/** RFC 5040 §4.2 opcodes. */
export const Op = {
  WRITE: 0,
  READ_REQUEST: 1,
  READ_RESPONSE: 2,
  SEND: 3,
  SEND_INV: 4,
  SEND_SE: 5,
  SEND_SE_INV: 6,
  TERMINATE: 7,
} as const;

/** RFC 5040 §5.1: untagged queue numbers. */
export const QN_SEND = 0;
export const QN_READ_REQUEST = 1;
export const QN_TERMINATE = 2;

/** Header sizes counted from the FPDU start (length + DDP/RDMAP header). */
export const TAGGED_HEADER = 2 + 2 + 4 + 8; // 16
export const UNTAGGED_HEADER = 2 + 2 + 4 + 4 + 4 + 4; // 20
/** RFC 5040 §4.4: sink STag, sink TO, size, source STag, source TO. */
export const READ_REQUEST_BODY = 4 + 8 + 4 + 4 + 8; // 28
/** Where the RDMA Read Message Size lies in that body, after the Data Sink STag and tagged offset. */
export const READ_REQUEST_SIZE_AT = 12;
/** RFC 5040 §4.8: Terminate Control word. */
export const TERMINATE_CONTROL = 4;
/**
 * RFC 5040 §4.8: the Hdrct bits of the Terminate Control word (bits 16-18 of it, big-endian): M = the
 * DDP Segment Length field is valid, D = the terminated DDP header follows it, R = the terminated RDMAP
 * header (an RDMA Read Request's) follows that.
 */
export const TERM_HDRCT_M = 0x8000;
export const TERM_HDRCT_D = 0x4000;
export const TERM_HDRCT_R = 0x2000;
/** RFC 5040 §4.8: the DDP Segment Length field (the ULPDU_Length of the terminated FPDU, RFC 5044 §4.1). */
export const TERM_SEGMENT_LENGTH = 2;
/** RFC 5041 §4.2/§4.3: a DDP header without MPA's length: tagged 14 bytes, untagged 18. */
export const DDP_TAGGED_HEADER = TAGGED_HEADER - MPA_LENGTH_SIZE; // 14
export const DDP_UNTAGGED_HEADER = UNTAGGED_HEADER - MPA_LENGTH_SIZE; // 18
/** The largest Terminate ULPDU: header, control, segment length, untagged DDP header, Read Request header. */
export const TERMINATE_MAX_ULPDU =
  DDP_UNTAGGED_HEADER + TERMINATE_CONTROL + TERM_SEGMENT_LENGTH + DDP_UNTAGGED_HEADER + READ_REQUEST_BODY; // 70

/** Pad needed after a ULPDU of `ulpduLength` so that (2 + length + pad) is a multiple of 4. */
export function mpaPad(ulpduLength: number): number {
  return (4 - ((ulpduLength + 2) & 3)) & 3;
}
