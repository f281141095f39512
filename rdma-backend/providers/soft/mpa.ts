/**
 * MPA connection setup frames (RFC 5044 §7.1) with the enhanced IRD/ORD words of MPA revision 2
 * (RFC 6581 §5). Pure functions over Buffers; the connection drives the exchange.
 */
import { VerbsError } from '../../verbs/index.js';
import {
  MPA_FLAG_CRC,
  MPA_FLAG_ENHANCED,
  MPA_FLAG_MARKERS,
  MPA_FLAG_REJECT,
  MPA_HEADER_SIZE,
  MPA_KEY_REP,
  MPA_KEY_REQ,
  MPA_MAX_PRIVATE_DATA,
  MPA_V2_IRD_ORD_MASK,
  MPA_V2_IRD_ORD_SIZE,
} from './wire.js';

export interface MpaFrame {
  reply: boolean;
  markers: boolean;
  crc: boolean;
  reject: boolean;
  revision: number;
  /** Present when revision 2 with the E flag: the IRD and ORD words as sent. */
  enhanced?: { irdWord: number; ordWord: number };
  /** The upper layer's private data (IRD/ORD words stripped). */
  privateData: Buffer;
}

export class MpaError extends VerbsError {}

export function encodeMpa(f: MpaFrame): Buffer {
  const extra = f.enhanced ? MPA_V2_IRD_ORD_SIZE : 0;
  const pdLen = extra + f.privateData.length;
  if (pdLen > MPA_MAX_PRIVATE_DATA) {
    throw new MpaError('VERBS_INVALID_ARGUMENT', 'MPA private data exceeds 512 bytes (RFC 5044 §7.1)', {
      length: f.privateData.length,
      limit: MPA_MAX_PRIVATE_DATA - extra,
    });
  }
  const out = Buffer.alloc(MPA_HEADER_SIZE + pdLen);
  (f.reply ? MPA_KEY_REP : MPA_KEY_REQ).copy(out, 0);
  out[16] =
    (f.markers ? MPA_FLAG_MARKERS : 0) |
    (f.crc ? MPA_FLAG_CRC : 0) |
    (f.reject ? MPA_FLAG_REJECT : 0) |
    (f.enhanced ? MPA_FLAG_ENHANCED : 0);
  out[17] = f.revision;
  out.writeUInt16BE(pdLen, 18);
  if (f.enhanced) {
    out.writeUInt16BE(f.enhanced.irdWord, 20);
    out.writeUInt16BE(f.enhanced.ordWord, 22);
  }
  f.privateData.copy(out, MPA_HEADER_SIZE + extra);
  return out;
}

/** Checks the fixed 20-byte header at `buf[0]` (its key, its private data length); returns that length. */
function checkHeader(buf: Buffer, expectReply: boolean): number {
  const key = expectReply ? MPA_KEY_REP : MPA_KEY_REQ;
  if (buf.length < MPA_HEADER_SIZE || !buf.subarray(0, 16).equals(key)) {
    throw new MpaError('MPA_INVALID_FRAME', `expected an MPA ${expectReply ? 'reply' : 'request'} key`, {
      got: buf.subarray(0, 16).toString('latin1'),
    });
  }
  const pdLen = buf.readUInt16BE(18);
  if (pdLen > MPA_MAX_PRIVATE_DATA) {
    throw new MpaError(
      'MPA_INVALID_FRAME',
      `MPA private data length ${pdLen} exceeds ${MPA_MAX_PRIVATE_DATA} (RFC 5044 §7.1)`,
      { pdLen, max: MPA_MAX_PRIVATE_DATA },
    );
  }
  return pdLen;
}

/**
 * Bytes the frame starting at `buf[0]` needs in total, or -1 while the fixed header is incomplete.
 * Throws MpaError (MPA_INVALID_FRAME) as soon as the header is in and is not a valid one (wrong key,
 * Private Data Length over 512): the frame is refused then, not after waiting for bytes a conforming
 * peer never sends (Linux siw checks the length on the header alone too: siw_recv_mpa_rr, -EPROTO).
 */
export function mpaFrameLength(buf: Buffer, expectReply: boolean): number {
  if (buf.length < MPA_HEADER_SIZE) return -1;
  return MPA_HEADER_SIZE + checkHeader(buf, expectReply);
}

/** Decodes a complete frame; throws MpaError (code MPA_INVALID_FRAME) when it is not one. */
export function decodeMpa(buf: Buffer, expectReply: boolean): MpaFrame {
  const pdLen = checkHeader(buf, expectReply);
  const flags = buf[16];
  const revision = buf[17];
  if (revision !== 1 && revision !== 2) {
    throw new MpaError('MPA_INVALID_FRAME', 'unsupported MPA revision', { revision });
  }
  const enhancedFlag = revision === 2 && (flags & MPA_FLAG_ENHANCED) !== 0;
  let pd = buf.subarray(MPA_HEADER_SIZE, MPA_HEADER_SIZE + pdLen);
  let enhanced: MpaFrame['enhanced'];
  if (enhancedFlag) {
    if (pdLen < MPA_V2_IRD_ORD_SIZE) {
      throw new MpaError('MPA_INVALID_FRAME', 'enhanced MPA frame without IRD/ORD words', { pdLen });
    }
    enhanced = { irdWord: pd.readUInt16BE(0), ordWord: pd.readUInt16BE(2) };
    pd = pd.subarray(MPA_V2_IRD_ORD_SIZE);
  }
  return {
    reply: expectReply,
    markers: (flags & MPA_FLAG_MARKERS) !== 0,
    crc: (flags & MPA_FLAG_CRC) !== 0,
    reject: (flags & MPA_FLAG_REJECT) !== 0,
    revision,
    enhanced,
    privateData: Buffer.from(pd),
  };
}

export function irdOf(word: number): number {
  return word & MPA_V2_IRD_ORD_MASK;
}
