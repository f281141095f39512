/**
 * Builds outgoing FPDUs (RFC 5044 §4) for one batch of socket writes. Headers, pads, CRCs and small
 * payloads are packed into a slab (one contiguous chunk for a batch of small messages); payloads at or
 * above `copyThreshold` go out as views of the registered buffer (no copy; the WR completes only once
 * the socket has taken the bytes). The CRC is chained over the pieces in wire order.
 */
import { copyBytes, setU16BE, setU32LE, viewOf } from '../../../common/bytes.js';
import { crc32c, crc32cWithView } from './crc32c.js';
import { MPA_CRC_SIZE, MPA_LENGTH_SIZE, mpaPad } from './wire.js';

const SLAB_SIZE = 64 * 1024;

/** Registered bytes and a DataView over them (a soft MR): small payloads are copied through the view. */
export interface PayloadSource {
  readonly buffer: Buffer;
  readonly view: DataView;
}

export class TxFramer {
  /** Chunks ready for the socket, in order. */
  chunks: Buffer[] = [];
  /** Bytes in `chunks` plus the pending slab region. */
  bytes = 0;
  slab: Buffer = Buffer.allocUnsafe(SLAB_SIZE);
  /** A DataView over `slab`, made with it: the small payload copies and the CRC read through it. */
  private slabView = viewOf(this.slab);
  /** Start of the slab region not yet pushed to `chunks`. */
  private slabStart = 0;
  pos = 0;
  private crc = 0;
  private crcFrom = 0;
  private ulpduLength = 0;

  constructor(
    private readonly crcOn: boolean,
    private readonly copyThreshold = 2048,
  ) {}

  private ensure(n: number): void {
    if (this.pos + n <= this.slab.length) return;
    this.pushSlabRegion();
    this.slab = Buffer.allocUnsafe(Math.max(SLAB_SIZE, n));
    this.slabView = viewOf(this.slab);
    this.slabStart = 0;
    this.pos = 0;
    this.crcFrom = 0;
  }

  private pushSlabRegion(): void {
    if (this.pos > this.slabStart) {
      if (this.crcOn && this.crcFrom < this.pos) {
        this.crc = crc32cWithView(this.slab, this.slabView, this.crcFrom, this.pos, this.crc);
      }
      this.chunks.push(this.slab.subarray(this.slabStart, this.pos));
      this.slabStart = this.pos;
      this.crcFrom = this.pos;
    }
  }

  /**
   * Starts an FPDU whose ULPDU (DDP/RDMAP header + payload) is `ulpduLength` bytes, the header being
   * `headerLength` of them. Returns the slab offset where the caller writes the header (`this.slab`).
   */
  begin(ulpduLength: number, headerLength: number): number {
    this.ensure(MPA_LENGTH_SIZE + headerLength + this.copyThreshold + 8);
    this.ulpduLength = ulpduLength;
    this.crc = 0;
    this.crcFrom = this.pos;
    setU16BE(this.slab, this.pos, ulpduLength);
    const at = this.pos + MPA_LENGTH_SIZE;
    this.pos = at + headerLength;
    this.bytes += MPA_LENGTH_SIZE + headerLength;
    return at;
  }

  /** Appends payload bytes `[start, end)` of `src` to the current FPDU. */
  payload(src: PayloadSource, start: number, end: number): void {
    const n = end - start;
    if (n === 0) return;
    this.bytes += n;
    if (n < this.copyThreshold) {
      this.ensure(n + 8);
      copyBytes(src.view, start, this.slabView, this.pos, n);
      this.pos += n;
      return;
    }
    this.pushSlabRegion();
    const view = src.buffer.subarray(start, end);
    if (this.crcOn) this.crc = crc32c(view, 0, n, this.crc);
    this.chunks.push(view);
  }

  /** Writes pad and CRC (little-endian, RFC 5044 §4.4 / PROTOCOL-NOTES §6; zero when CRC is off). */
  end(): void {
    const pad = mpaPad(this.ulpduLength);
    this.ensure(pad + MPA_CRC_SIZE);
    for (let i = 0; i < pad; i++) this.slab[this.pos++] = 0;
    if (this.crcOn) {
      if (this.crcFrom < this.pos) {
        this.crc = crc32cWithView(this.slab, this.slabView, this.crcFrom, this.pos, this.crc);
      }
      setU32LE(this.slab, this.pos, this.crc);
    } else {
      setU32LE(this.slab, this.pos, 0);
    }
    this.pos += MPA_CRC_SIZE;
    this.crcFrom = this.pos;
    this.bytes += pad + MPA_CRC_SIZE;
  }

  /** Hands over the chunks of the batch and starts a new one (the slab's remaining space is reused). */
  take(): Buffer[] {
    this.pushSlabRegion();
    const out = this.chunks;
    this.chunks = [];
    this.bytes = 0;
    // The pushed regions are referenced by the socket until written: carry on after them, never over them.
    if (this.slab.length - this.pos < 4096) {
      this.slab = Buffer.allocUnsafe(SLAB_SIZE);
      this.slabView = viewOf(this.slab);
      this.pos = 0;
    }
    this.slabStart = this.pos;
    this.crcFrom = this.pos;
    return out;
  }
}
