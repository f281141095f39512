/**
 * RPC-over-RDMA header codec rate for a typical READ Call: the transport encodes one header per Call and
 * decodes one per Reply. Measured: encode into a reused fixed buffer (as into a registered send buffer)
 * + decode of the same bytes, Version 2 (RDMA2_MSG, one Write chunk of one segment) and Version 1
 * (RDMA_MSG, same chunk). Baseline, same run: hand-written Buffer reads/writes of the same words with
 * no validation — the floor any codec pays. Target: >= 2 M encode+decode per second on one core.
 * Each figure is the best of three runs (see `bestRate`).
 */

import {
  chunkHeaderSize,
  encodeV1ChunkHeader,
  encodeV2ChunkHeader,
  HeaderDecoder,
  RDMA_MSG,
  RDMA2_MSG,
} from '../../rdma-backend/protocol/index.js';
import { XdrWriter } from '../../rpc/xdr.js';
import { type BenchRow, measureRate, row, type Suite } from '../harness.js';

const TARGET = { of: 'value' as const, op: '>=' as const, value: 2_000_000 };

/**
 * Best of three shorter measurements: on a shared machine another process's burst only ever slows a
 * run down, so the best run is the closest to what one core really does (baseline measured the same way).
 */
function bestRate(fn: () => void, seconds: number): number {
  let best = 0;
  for (let i = 0; i < 3; i++) best = Math.max(best, measureRate(fn, seconds / 3));
  return best;
}

/** One Write chunk of one segment, offset above 2^53 like a Linux client's IOVA with the XID on top. */
const CHUNKS = { writes: [[{ handle: 0x1234_5601, length: 1 << 20, offset: 0x1234_5678_0000_1000n }]] };

/** The same 15 words with bare Buffer calls: no bounds checks, no objects, just the memory traffic. */
function rawBaseline(buf: Buffer): () => void {
  let sink = 0;
  return () => {
    buf.writeUInt32BE(1, 0);
    buf.writeUInt32BE(2, 4);
    buf.writeUInt32BE(128, 8);
    for (let i = 12; i < 60; i += 4) buf.writeUInt32BE(i, i);
    let acc = 0;
    for (let i = 0; i < 60; i += 4) acc ^= buf.readUInt32BE(i);
    sink ^= acc;
    if (sink === -1) throw new Error('unreachable');
  };
}

function codecLoop(version: 1 | 2): () => void {
  const size = chunkHeaderSize(version, CHUNKS);
  const sendBuffer = Buffer.alloc(4096);
  const w = XdrWriter.into(sendBuffer, 0, sendBuffer.length);
  const dec = new HeaderDecoder();
  let xid = 0;
  let sink = 0;
  return () => {
    xid = (xid + 1) >>> 0;
    w.reset(sendBuffer, 0, sendBuffer.length);
    if (version === 2) encodeV2ChunkHeader(w, RDMA2_MSG, xid, 128, 0, 0x1234_5601, CHUNKS);
    else encodeV1ChunkHeader(w, RDMA_MSG, xid, 128, CHUNKS);
    w.u32(xid, 'rpc xid'); // the RPC Call follows inline
    const h = dec.decode(sendBuffer, 0, size + 4);
    sink ^= h.xid ^ h.payloadOffset;
    if (sink === -1) throw new Error('unreachable');
  };
}

function decodeOnly(version: 1 | 2): () => void {
  const size = chunkHeaderSize(version, CHUNKS);
  const buf = Buffer.alloc(size + 4);
  const w = XdrWriter.into(buf);
  if (version === 2) encodeV2ChunkHeader(w, RDMA2_MSG, 7, 128, 1, 0, CHUNKS);
  else encodeV1ChunkHeader(w, RDMA_MSG, 7, 128, CHUNKS);
  w.u32(7, 'rpc xid');
  const dec = new HeaderDecoder();
  let sink = 0;
  return () => {
    sink ^= dec.decode(buf).payloadOffset;
    if (sink === -1) throw new Error('unreachable');
  };
}

export const protocolSuite: Suite = {
  name: 'protocol',
  async run(ctx) {
    const rows: BenchRow[] = [];
    const baseline = {
      name: 'raw Buffer words',
      value: bestRate(rawBaseline(Buffer.alloc(64)), ctx.seconds),
    };
    for (const version of [2, 1] as const) {
      const label = version === 2 ? 'v2 RDMA2_MSG' : 'v1 RDMA_MSG';
      ctx.log(`[bench] protocol: ${label} encode+decode`);
      rows.push(
        row({
          suite: 'protocol',
          name: `${label} READ call (1 write chunk, 1 segment) encode+decode`,
          value: bestRate(codecLoop(version), ctx.seconds),
          unit: 'headers/s',
          baseline,
          target: TARGET,
          extra: { headerBytes: chunkHeaderSize(version, CHUNKS) },
        }),
      );
      rows.push(
        row({
          suite: 'protocol',
          name: `${label} READ call decode only`,
          value: bestRate(decodeOnly(version), ctx.seconds),
          unit: 'headers/s',
          baseline,
        }),
      );
    }
    return rows;
  },
};
