/**
 * The project's root directory (where `rdma-backend/native/binding.gyp` is), found upwards from a module's
 * own directory: the compiled modules run from `dist/…` and the sources from the root itself, and the
 * native binaries are built in place under the root, not copied into `dist/`.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export function findProjectRoot(from = dirname(fileURLToPath(import.meta.url))): string | undefined {
  let dir = from;
  for (let i = 0; i < 8; i++) {
    if (existsSync(join(dir, 'rdma-backend', 'native', 'binding.gyp'))) return dir;
    const up = dirname(dir);
    if (up === dir) break;
    dir = up;
  }
  return undefined;
}
