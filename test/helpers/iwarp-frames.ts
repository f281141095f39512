/**
 * A minimal, independent iWARP framer used only by tests, as an oracle: MPA request/reply (RFC 5044 §7.1),
 * MPA FPDUs with CRC32c (RFC 5044 §4, §4.4), and DDP/RDMAP untagged Send messages (RFC 5041 §4.2,
 * RFC 5040 §4). It deliberately shares no code with the soft provider (rdma-backend/providers/soft/),
 * so a capture built here checks our codecs against Wireshark without trusting the provider.
 */

const MPA_REQ_KEY = Buffer.from('MPA ID Req Frame', 'latin1');
const MPA_REP_KEY = Buffer.from('MPA ID Rep Frame', 'latin1');

/** MPA flags byte (RFC 5044 §7.1): M markers, C CRC, R reject; revision 1. */
export const MPA_FLAG_MARKERS = 0x80;
export const MPA_FLAG_CRC = 0x40;
export const MPA_FLAG_REJECT = 0x20;

/** RDMAP opcodes (RFC 5040 §4.3). */
export const RDMAP_SEND = 0x3;
export const RDMAP_SEND_INVALIDATE = 0x4;

/** DDP queue numbers for untagged messages (RFC 5040 §5.1). */
export const DDP_QN_SEND = 0;

let crcTable: Uint32Array | undefined;

/** CRC32c (Castagnoli, reflected polynomial 0x82F63B78), as MPA uses it. CRC32c("123456789") = 0xE3069283. */
export function crc32c(data: Uint8Array): number {
  if (!crcTable) {
    crcTable = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
      crcTable[n] = c >>> 0;
    }
  }
  let crc = 0xffffffff;
  for (let i = 0; i < data.length; i++) crc = crcTable[(crc ^ data[i]) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

function mpaFrame(key: Buffer, flags: number, revision: number, privateData: Uint8Array): Buffer {
  const out = Buffer.alloc(20 + privateData.length);
  key.copy(out, 0);
  out[16] = flags;
  out[17] = revision;
  out.writeUInt16BE(privateData.length, 18);
  out.set(privateData, 20);
  return out;
}

/** The MPA Request frame the initiator sends first on the TCP stream. */
export function mpaRequest(
  options: { crc?: boolean; privateData?: Uint8Array; revision?: number } = {},
): Buffer {
  const flags = options.crc === false ? 0 : MPA_FLAG_CRC;
  return mpaFrame(MPA_REQ_KEY, flags, options.revision ?? 1, options.privateData ?? Buffer.alloc(0));
}

/** The MPA Reply frame of the responder. */
export function mpaReply(
  options: { crc?: boolean; reject?: boolean; privateData?: Uint8Array; revision?: number } = {},
): Buffer {
  const flags = (options.crc === false ? 0 : MPA_FLAG_CRC) | (options.reject ? MPA_FLAG_REJECT : 0);
  return mpaFrame(MPA_REP_KEY, flags, options.revision ?? 1, options.privateData ?? Buffer.alloc(0));
}

/**
 * One FPDU (RFC 5044 §4.1, no markers): ULPDU_Length (u16), the ULPDU, zero pad so that length field +
 * ULPDU + pad is a multiple of 4, then the CRC32c of all of that — present (zero) even without CRC. The
 * CRC goes on the wire least significant byte first (RFC 5044 §4.4 / iSCSI convention).
 */
export function fpdu(ulpdu: Uint8Array, options: { crc?: boolean } = {}): Buffer {
  if (ulpdu.length > 0xffff) throw new Error('ULPDU longer than 65535 bytes');
  const unpadded = 2 + ulpdu.length;
  const padded = (unpadded + 3) & ~3;
  const out = Buffer.alloc(padded + 4);
  out.writeUInt16BE(ulpdu.length, 0);
  out.set(ulpdu, 2);
  const crc = options.crc === false ? 0 : crc32c(out.subarray(0, padded));
  out.writeUInt32LE(crc, padded);
  return out;
}

/**
 * A DDP untagged segment carrying an RDMAP Send (RFC 5041 §4.2 and RFC 5040 §4.1/4.6): DDP control (T=0,
 * L, DV=1), RDMAP control (RV=1, opcode), reserved-for-ULP word (the STag to invalidate for Send With
 * Invalidate), QN, MSN, MO, then the payload.
 */
export function ddpUntaggedSend(
  payload: Uint8Array,
  options: {
    msn: number;
    qn?: number;
    mo?: number;
    last?: boolean;
    opcode?: number;
    invalidateStag?: number;
  },
): Buffer {
  const out = Buffer.alloc(18 + payload.length);
  out[0] = (options.last === false ? 0 : 0x40) | 0x01;
  out[1] = 0x40 | ((options.opcode ?? RDMAP_SEND) & 0x0f);
  out.writeUInt32BE(options.invalidateStag ?? 0, 2);
  out.writeUInt32BE(options.qn ?? DDP_QN_SEND, 6);
  out.writeUInt32BE(options.msn >>> 0, 10);
  out.writeUInt32BE(options.mo ?? 0, 14);
  out.set(payload, 18);
  return out;
}

/**
 * Tracks the Send-queue MSN of one direction (it starts at 1, RFC 5041 §5.1) and frames whole messages
 * as single-segment Sends in FPDUs.
 */
export class SendFramer {
  private msn = 1;

  constructor(private readonly crc = true) {}

  /** The bytes on the TCP stream for one Send carrying `message`. */
  send(message: Uint8Array, opcode = RDMAP_SEND, invalidateStag = 0): Buffer {
    const ddp = ddpUntaggedSend(message, { msn: this.msn++, opcode, invalidateStag });
    return fpdu(ddp, { crc: this.crc });
  }
}

/**
 * A DDP tagged segment (RFC 5041 §4.1, RFC 5040 §4.2): DDP control (T=1, L, DV=1), RDMAP control (RV=1,
 * opcode: 0 Write, 2 Read Response), the STag and the 64-bit tagged offset, then the payload.
 */
export function ddpTagged(
  opcode: number,
  stag: number,
  to: bigint,
  payload: Uint8Array,
  last = true,
): Buffer {
  const out = Buffer.alloc(14 + payload.length);
  out[0] = 0x80 | (last ? 0x40 : 0) | 0x01;
  out[1] = 0x40 | (opcode & 0x0f);
  out.writeUInt32BE(stag >>> 0, 2);
  out.writeBigUInt64BE(BigInt.asUintN(64, to), 6);
  out.set(payload, 14);
  return out;
}

/** An RDMAP Read Request (RFC 5040 §4.4) on DDP queue 1: sink STag and offset, size, source STag and offset. */
export function ddpReadRequest(
  msn: number,
  read: { sinkStag: number; sinkTo: bigint; size: number; srcStag: number; srcTo: bigint },
): Buffer {
  const body = Buffer.alloc(28);
  body.writeUInt32BE(read.sinkStag >>> 0, 0);
  body.writeBigUInt64BE(read.sinkTo, 4);
  body.writeUInt32BE(read.size >>> 0, 12);
  body.writeUInt32BE(read.srcStag >>> 0, 16);
  body.writeBigUInt64BE(read.srcTo, 20);
  return ddpUntaggedSend(body, { msn, qn: 1, opcode: 0x1 });
}

/** One FPDU of a captured stream, its DDP/RDMAP fields read (CRC not checked). */
export interface ParsedFpdu {
  tagged: boolean;
  last: boolean;
  opcode: number;
  stag?: number;
  to?: bigint;
  msn?: number;
  /** Read Request: the sink STag and offset and the size it asks for. */
  read?: { sinkStag: number; sinkTo: bigint; size: number };
  /** Terminate: [layer, type, code] of its control word. */
  terminate?: [number, number, number];
  payload: Buffer;
}

/** Splits a stream of FPDUs (no markers) into its frames; a partial last frame is left out. */
export function parseFpdus(stream: Buffer): ParsedFpdu[] {
  const out: ParsedFpdu[] = [];
  let off = 0;
  while (off + 2 <= stream.length) {
    const len = stream.readUInt16BE(off);
    const total = ((2 + len + 3) & ~3) + 4;
    if (off + total > stream.length) break;
    const u = stream.subarray(off + 2, off + 2 + len);
    const tagged = (u[0] & 0x80) !== 0;
    const f: ParsedFpdu = {
      tagged,
      last: (u[0] & 0x40) !== 0,
      opcode: u[1] & 0x0f,
      payload: u.subarray(tagged ? 14 : 18),
    };
    if (tagged) {
      f.stag = u.readUInt32BE(2);
      f.to = u.readBigUInt64BE(6);
    } else {
      f.msn = u.readUInt32BE(10);
      if (f.opcode === 0x1)
        f.read = { sinkStag: u.readUInt32BE(18), sinkTo: u.readBigUInt64BE(22), size: u.readUInt32BE(30) };
      if (f.opcode === 0x7) {
        const w = u.readUInt32BE(18);
        f.terminate = [w >>> 28, (w >>> 24) & 0xf, (w >>> 16) & 0xff];
      }
    }
    out.push(f);
    off += total;
  }
  return out;
}
