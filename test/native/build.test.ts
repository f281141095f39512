/**
 * The optional build: without the rdma-core headers `npm install` still succeeds (the script exits 0)
 * and records why, and the provider turns that record into a message naming the Debian packages.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { findProjectRoot } from '../../common/project-root.js';
import { notBuiltError } from '../../rdma-backend/providers/native/addon.js';

test('without the rdma-core headers the build script succeeds and records the missing packages', (t) => {
  const root = findProjectRoot();
  if (!root) return t.fail('project root not found');
  const dir = mkdtempSync(join(tmpdir(), 'rdma-native-build-'));
  try {
    const statusFile = join(dir, 'status.json');
    const r = spawnSync(process.execPath, [join(root, 'scripts', 'build-native.mjs')], {
      encoding: 'utf8',
      env: {
        ...process.env,
        RDMA_NATIVE_HEADER_DIRS: join(dir, 'nothing-here'),
        RDMA_NATIVE_STATUS_FILE: statusFile,
        RDMA_NATIVE_SKIP_CRC32C: '1',
      },
    });
    t.is(r.status, 0, r.stderr);
    t.regex(r.stderr, /NOT built: .*libibverbs-dev librdmacm-dev/);
    const status = JSON.parse(readFileSync(statusFile, 'utf8'));
    t.like(status, {
      ok: false,
      code: 'HEADERS_MISSING',
      missingPackages: ['libibverbs-dev', 'librdmacm-dev'],
    });
    const e = notBuiltError(status, undefined);
    t.is(e.reason, 'addon-not-built');
    t.regex(
      e.message,
      /not built: rdma-core headers not found .*apt-get install libibverbs-dev librdmacm-dev/,
    );
    t.deepEqual(e.details.missingPackages, ['libibverbs-dev', 'librdmacm-dev']);

    const strict = spawnSync(process.execPath, [join(root, 'scripts', 'build-native.mjs')], {
      encoding: 'utf8',
      env: {
        ...process.env,
        RDMA_NATIVE_HEADER_DIRS: dir,
        RDMA_NATIVE_STATUS_FILE: statusFile,
        RDMA_NATIVE_SKIP_CRC32C: '1',
        RDMA_NATIVE_REQUIRED: '1',
      },
    });
    t.is(strict.status, 1, 'RDMA_NATIVE_REQUIRED=1 makes a failed build fail');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a missing binary with no build record still names the packages and the command', (t) => {
  const e = notBuiltError(undefined, '/x/rdma_native.node');
  t.regex(e.message, /\/x\/rdma_native\.node is missing.*libibverbs-dev librdmacm-dev.*npm run build:native/);
});
