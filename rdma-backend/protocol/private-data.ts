/**
 * RPC-over-RDMA connection private data (RFC 8797 §5): 8 bytes carried in the CM connect request and
 * accept, announcing inline sizes and whether the sender accepts Send With Invalidate.
 *
 * ```
 *  0                   1                   2                   3
 * |                    Format Identifier (0xf6ab0e18)                |
 * |    Version    |  Reserved   |I| Inline Send Sz | Inline Recv Sz |
 * ```
 * Sizes are in 1 KiB units minus one (`(bytes >> 10) - 1`), so 1 KiB .. 256 KiB can be expressed.
 */
import { UsageError } from '../../common/errors.js';

export const RPCRDMA_PRIVATE_DATA_MAGIC = 0xf6ab0e18;
export const RPCRDMA_PRIVATE_DATA_VERSION = 1;
export const RPCRDMA_PRIVATE_DATA_SIZE = 8;
/** Flag bit I: the sender accepts RDMA Send With Invalidate (RFC 8797 §5.1). */
export const RPCRDMA_CMP_F_SND_W_INV_OK = 0x01;
/** The largest inline size the encoding can express (255 + 1 KiB units). */
export const RPCRDMA_PRIVATE_DATA_MAX_SIZE = 256 * 1024;

export interface ConnectionPrivateData {
  /** The sender accepts Send With Invalidate. */
  sendWithInvalidateOk: boolean;
  /** The largest message the sender will send inline, in bytes (a multiple of 1024). */
  inlineSendSize: number;
  /** The size of the sender's receive buffers, in bytes (a multiple of 1024). */
  inlineRecvSize: number;
  /** Reserved flag bits as received (the sender must send zero; receivers ignore them). */
  reservedFlags?: number;
}

function encodeSize(bytes: number, field: string): number {
  if (!Number.isInteger(bytes) || bytes < 1024) {
    throw new UsageError(
      'ERR_RPCRDMA_PRIVATE_DATA',
      `${field} ${bytes} is below the 1 KiB minimum (RFC 8797 §5)`,
      {
        field,
        bytes,
      },
    );
  }
  // Sizes round down to whole KiB, never advertising more than is really there; above 256 KiB the
  // encoding saturates.
  return (Math.min(bytes, RPCRDMA_PRIVATE_DATA_MAX_SIZE) >> 10) - 1;
}

/** The 8 bytes of private data announcing `pd` (into `out` at `offset` when given). */
export function encodePrivateData(pd: ConnectionPrivateData, out?: Buffer, offset = 0): Buffer {
  const buf = out ?? Buffer.alloc(RPCRDMA_PRIVATE_DATA_SIZE);
  if (offset < 0 || offset + RPCRDMA_PRIVATE_DATA_SIZE > buf.length) {
    throw new UsageError('ERR_RPCRDMA_PRIVATE_DATA', 'private data does not fit in the output buffer', {
      offset,
      bufferLength: buf.length,
    });
  }
  buf.writeUInt32BE(RPCRDMA_PRIVATE_DATA_MAGIC, offset);
  buf[offset + 4] = RPCRDMA_PRIVATE_DATA_VERSION;
  buf[offset + 5] = pd.sendWithInvalidateOk ? RPCRDMA_CMP_F_SND_W_INV_OK : 0;
  buf[offset + 6] = encodeSize(pd.inlineSendSize, 'inlineSendSize');
  buf[offset + 7] = encodeSize(pd.inlineRecvSize, 'inlineRecvSize');
  return buf;
}

/**
 * Reads RPC-over-RDMA private data. Returns undefined when the bytes are not ours — too short, another
 * format identifier, or a version other than 1 — in which case RFC 8797 §5.2 says to proceed as if no
 * private data had been sent (1 KiB inline, no Send With Invalidate). Never throws on network input.
 */
export function decodePrivateData(data: Uint8Array | undefined): ConnectionPrivateData | undefined {
  if (!data || data.length < RPCRDMA_PRIVATE_DATA_SIZE) return undefined;
  const magic = ((data[0] << 24) | (data[1] << 16) | (data[2] << 8) | data[3]) >>> 0;
  if (magic !== RPCRDMA_PRIVATE_DATA_MAGIC || data[4] !== RPCRDMA_PRIVATE_DATA_VERSION) return undefined;
  const flags = data[5];
  return {
    sendWithInvalidateOk: (flags & RPCRDMA_CMP_F_SND_W_INV_OK) !== 0,
    inlineSendSize: (data[6] + 1) * 1024,
    inlineRecvSize: (data[7] + 1) * 1024,
    reservedFlags: flags & ~RPCRDMA_CMP_F_SND_W_INV_OK,
  };
}
