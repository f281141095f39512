/** Small helpers shared by the protocol tests. */

import { encodeHeader, type RpcRdmaHeaderInput } from '../../rdma-backend/protocol/index.js';
import { XdrWriter } from '../../rpc/xdr.js';

/** Concatenates hex words (whitespace ignored) into a Buffer: golden vectors are written one word a line. */
export function hex(...words: string[]): Buffer {
  return Buffer.from(words.join('').replace(/\s+/g, ''), 'hex');
}

/** Encodes a header with the default registry, optionally followed by payload bytes. */
export function encodeToBuffer(h: RpcRdmaHeaderInput, payload?: Uint8Array): Buffer {
  const w = new XdrWriter(64);
  encodeHeader(w, h);
  if (payload) w.raw(payload);
  return w.toBuffer();
}
