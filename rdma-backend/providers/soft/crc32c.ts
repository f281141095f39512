/**
 * CRC32c (Castagnoli, reflected polynomial 0x82F63B78) as MPA uses it (RFC 5044 §4.4, with the bit order
 * of RFC 3385 / iSCSI). `crc32c(buf, start, end, prev)` is chainable: feeding the pieces of a message in
 * order with each result as `prev` gives the CRC of the whole, so an FPDU can be checksummed straight from
 * the socket chunks and the registered buffers it is made of, without gathering it first.
 *
 * Large inputs go native, best first:
 * 1. the project's own addon (`rdma-backend/native/crc32c/`, built by `npm install`): AVX-512 VPCLMULQDQ
 *    folding (about 65 GB/s here) or the SSE4.2 CRC32 instruction over three interleaved lanes (about
 *    30 GB/s). MPA checksums every byte on both sides, so at RDMA Write speeds a single-lane CRC (about
 *    8 GB/s) costs a third of the link's throughput;
 * 2. `@node-rs/crc32` (single lane, prebuilt for every platform) when the addon is not built (no compiler,
 *    or not x86-64);
 * 3. the pure-TypeScript slice-by-8 implementation below, which also handles small inputs, where a native
 *    call costs more than it saves.
 * `RPCRDMA_SOFT_CRC=js` forces the TypeScript one, `=node-rs` skips the addon (for comparisons).
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { viewOf } from '../../../common/bytes.js';
import { findProjectRoot } from '../../../common/project-root.js';

const POLY = 0x82f63b78;

/** 8 tables of 256 entries: table k maps a byte to its CRC contribution k bytes further on. */
const T = new Int32Array(256 * 8);
for (let n = 0; n < 256; n++) {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ POLY : c >>> 1;
  T[n] = c;
}
for (let n = 0; n < 256; n++) {
  let c = T[n];
  for (let k = 1; k < 8; k++) {
    c = T[c & 0xff] ^ (c >>> 8);
    T[k * 256 + n] = c;
  }
}

/**
 * Pure-TypeScript slice-by-8 CRC32c of `buf[start, end)` continuing from the finished CRC `prev`: the
 * loop below over a view made for this call. Callers that keep a view with their buffer (the soft QP)
 * call `crc32cWithView` and make none.
 */
export function crc32cSoftware(buf: Uint8Array, start = 0, end = buf.length, prev = 0): number {
  return crc32cSoftwareView(viewOf(buf), start, end, prev);
}

/**
 * Slice-by-8 CRC32c of the view's bytes `[start, end)` continuing from the finished CRC `prev`. Each step
 * reads its two words with two loads of the view, where assembling them from eight byte loads cost about
 * a third more (callgrind, 80 bytes: 1,040 against 1,480 instructions on Node 24, 880 against 1,300 on
 * Node 20). A range outside the view throws a RangeError.
 */
export function crc32cSoftwareView(view: DataView, start: number, end: number, prev: number): number {
  let crc = ~prev;
  let i = start;
  const end8 = end - ((end - i) & 7);
  while (i < end8) {
    const a = view.getInt32(i, true) ^ crc;
    const b = view.getInt32(i + 4, true);
    crc =
      T[7 * 256 + (a & 0xff)] ^
      T[6 * 256 + ((a >>> 8) & 0xff)] ^
      T[5 * 256 + ((a >>> 16) & 0xff)] ^
      T[4 * 256 + (a >>> 24)] ^
      T[3 * 256 + (b & 0xff)] ^
      T[2 * 256 + ((b >>> 8) & 0xff)] ^
      T[256 + ((b >>> 16) & 0xff)] ^
      T[b >>> 24];
    i += 8;
  }
  while (i < end) crc = T[(crc ^ view.getUint8(i++)) & 0xff] ^ (crc >>> 8);
  return ~crc >>> 0;
}

type NativeCrc = (input: Buffer, start: number, end: number, prev: number) => number;

/** CRC-32/ISCSI's catalogue check value: an implementation is trusted only if it computes it. */
const CHECK = 0xe3069283;

type AddonMethod = 'avx512-fold' | 'sse42-3way';

function loadAddon(): { fn: NativeCrc; method: AddonMethod } | undefined {
  const root = findProjectRoot();
  const path =
    process.env.RPCRDMA_CRC32C_ADDON ??
    (root ? join(root, 'rdma-backend', 'native', 'crc32c', 'build', 'Release', 'crc32c.node') : undefined);
  if (path === undefined || !existsSync(path)) return undefined;
  try {
    const mod = createRequire(import.meta.url)(path) as {
      crc32c?: NativeCrc;
      supported?: boolean;
      method?: AddonMethod | 'none';
    };
    const fn = mod.crc32c;
    const method = mod.method;
    if (
      mod.supported === true &&
      (method === 'avx512-fold' || method === 'sse42-3way') &&
      typeof fn === 'function' &&
      fn(Buffer.from('123456789'), 0, 9, 0) === CHECK
    )
      return { fn, method };
  } catch {
    // Built for another Node ABI, or not loadable here: the next implementation serves.
  }
  return undefined;
}

function loadNodeRs(): NativeCrc | undefined {
  try {
    const mod = createRequire(import.meta.url)('@node-rs/crc32') as {
      crc32c?: (input: Buffer, initialState?: number) => number;
    };
    const fn = mod.crc32c;
    if (typeof fn !== 'function' || fn(Buffer.from('123456789')) >>> 0 !== CHECK) return undefined;
    return (buf, start, end, prev) =>
      fn(start === 0 && end === buf.length ? buf : buf.subarray(start, end), prev) >>> 0;
  } catch {
    // Not installed (optional dependency) or no binary for this platform.
  }
  return undefined;
}

const choice = process.env.RPCRDMA_SOFT_CRC;
const addon = choice === 'js' || choice === 'node-rs' ? undefined : loadAddon();
const nodeRs = addon === undefined && choice !== 'js' ? loadNodeRs() : undefined;
const native = addon?.fn ?? nodeRs;

/** Which implementation serves inputs above the threshold, for logs and benches. */
export const crc32cImplementation: AddonMethod | 'node-rs' | 'js' = addon
  ? addon.method
  : nodeRs
    ? 'node-rs'
    : 'js';

/**
 * Below this many bytes the JS loop beats the cost of a native call: about 40 ns for the addon (the JS
 * loop takes ~0.6 ns a byte), more for `@node-rs/crc32`, which also needs a subarray per call.
 */
const NATIVE_THRESHOLD = addon ? 96 : 512;

/** CRC32c of `buf[start, end)` continuing from the finished CRC `prev` (0 to start). */
export function crc32c(buf: Buffer, start = 0, end = buf.length, prev = 0): number {
  if (native !== undefined && end - start >= NATIVE_THRESHOLD) {
    return native(buf, start, end, prev);
  }
  return crc32cSoftware(buf, start, end, prev);
}

/**
 * `crc32c` for a caller that keeps a DataView `view` over `buf`'s bytes (the soft QP's receive chunk, its
 * send slab): small inputs take `crc32cSoftwareView`.
 */
export function crc32cWithView(
  buf: Buffer,
  view: DataView,
  start: number,
  end: number,
  prev: number,
): number {
  if (native !== undefined && end - start >= NATIVE_THRESHOLD) {
    return native(buf, start, end, prev);
  }
  return crc32cSoftwareView(view, start, end, prev);
}
