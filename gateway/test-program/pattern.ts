/**
 * The content of a SOURCE result: a deterministic function of the seed and the byte index, so a client can
 * verify every byte without having sent anything, and a byte moved to the wrong offset (a chunk placed at
 * the wrong position) is detected as surely as a corrupted one.
 *
 * Byte `i` of the result for `seed` is byte `i mod 4` (big-endian) of the 32-bit word `W(seed, floor(i/4))`:
 *
 *   h = seed XOR ((k + 1) * 0x9E3779B9 mod 2^32)
 *   h = h XOR (h >>> 16); h = h * 0x85EBCA6B mod 2^32
 *   h = h XOR (h >>> 13); h = h * 0xC2B2AE35 mod 2^32
 *   W(seed, k) = h XOR (h >>> 16)
 *
 * (the 32-bit finaliser of MurmurHash3 over a Weyl sequence: cheap, and no two nearby words repeat).
 */

/** Word `k` of the pattern for `seed`. */
export function patternWord(seed: number, k: number): number {
  let h = (seed ^ Math.imul(k + 1, 0x9e37_79b9)) >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85eb_ca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2_ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Fills `target[0, length)` with bytes `0 .. length-1` of the pattern for `seed`. */
export function fillPattern(target: Buffer, seed: number, length = target.length): void {
  const words = length >>> 2;
  let p = 0;
  for (let k = 0; k < words; k++, p += 4) {
    const w = patternWord(seed, k);
    target[p] = w >>> 24;
    target[p + 1] = w >>> 16;
    target[p + 2] = w >>> 8;
    target[p + 3] = w;
  }
  const rest = length & 3;
  if (rest > 0) {
    const w = patternWord(seed, words);
    for (let j = 0; j < rest; j++) target[p + j] = w >>> (24 - 8 * j);
  }
}

/** A new buffer holding the first `length` bytes of the pattern for `seed`. */
export function sourcePattern(seed: number, length: number): Buffer {
  const b = Buffer.allocUnsafe(length);
  fillPattern(b, seed, length);
  return b;
}

/** Index of the first byte of `data` that differs from the pattern for `seed`, or -1 when all match. */
export function findPatternMismatch(data: Buffer, seed: number): number {
  const n = data.length;
  for (let i = 0; i < n; i += 4) {
    const w = patternWord(seed, i >>> 2);
    const end = Math.min(4, n - i);
    for (let j = 0; j < end; j++) {
      if (data[i + j] !== ((w >>> (24 - 8 * j)) & 0xff)) return i + j;
    }
  }
  return -1;
}
