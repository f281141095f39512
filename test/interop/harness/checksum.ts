/** Test data files and their SHA-256, streamed so a 64 MiB file never sits in memory twice. */
import { createHash, randomFillSync } from 'node:crypto';
import { closeSync, createReadStream, existsSync, openSync, writeSync } from 'node:fs';

const CHUNK = 1 << 20;

/** Writes `size` random bytes to a new file at `path` (refuses to overwrite) and returns their SHA-256. */
export function writeRandomFile(path: string, size: number): string {
  if (existsSync(path)) throw new Error(`writeRandomFile: ${path} exists (test data files are always fresh)`);
  const hash = createHash('sha256');
  const buf = Buffer.allocUnsafe(Math.min(CHUNK, Math.max(size, 1)));
  const fd = openSync(path, 'wx');
  try {
    for (let left = size; left > 0; ) {
      const n = Math.min(left, buf.length);
      const view = buf.subarray(0, n);
      randomFillSync(view);
      writeSync(fd, view);
      hash.update(view);
      left -= n;
    }
  } finally {
    closeSync(fd);
  }
  return hash.digest('hex');
}

/** SHA-256 of a file's content, hex. */
export function sha256File(path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const hash = createHash('sha256');
    createReadStream(path)
      .on('data', (chunk) => hash.update(chunk))
      .on('error', reject)
      .on('end', () => resolve(hash.digest('hex')));
  });
}

/** The sizes issue 10 names: empty, one byte, one short of a page, just over 1 MiB, and 64 MiB. */
export const SIZES = {
  empty: 0,
  oneByte: 1,
  page: 4095,
  mibPlus: (1 << 20) + 3,
  big: 64 << 20,
} as const;
