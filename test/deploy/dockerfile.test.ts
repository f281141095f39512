/**
 * The container image, checked without a Docker engine: dockerfile-utils' linter, then the structure the
 * deployment relies on (docs/deploy.md): two bookworm stages, the build toolchain and rdma-core headers only
 * in the build stage, the rdma-core run-time libraries (ibverbs-providers included) in the runtime stage,
 * tini, the documented non-root user, a HEALTHCHECK on /livez, production dependencies only, and a
 * runtime stage that copies only what the gateway needs, both native addons (verbs, CRC32c) included where
 * their loaders find them.
 */
import { spawnSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import test from 'ava';
import { type Copy, DockerfileParser, type Env, type Instruction } from 'dockerfile-ast';
import { validate } from 'dockerfile-utils';
import { loadConfig } from '../../gateway/config.js';
import { inCI } from '../helpers/peers.js';
import { chartDir, helmLite, parseManifests, readRepo, repoPath } from './repo.js';

const DOCKERFILES = [
  'deploy/docker/Dockerfile',
  'deploy/compose/ganesha/Dockerfile',
  'deploy/compose/client/Dockerfile',
];
const text = readRepo('deploy', 'docker', 'Dockerfile');
const dockerfile = DockerfileParser.parse(text);

interface Stage {
  from: string;
  name: string | undefined;
  instructions: Instruction[];
}

function stages(): Stage[] {
  const out: Stage[] = [];
  for (const i of dockerfile.getInstructions()) {
    if (i.getKeyword() === 'FROM') {
      const args = i.getArguments().map((a) => a.getValue());
      out.push({ from: args[0], name: args[2], instructions: [] });
    } else out.at(-1)?.instructions.push(i);
  }
  return out;
}

/** A RUN/CMD instruction's text with line continuations joined. */
function body(i: Instruction): string {
  return i
    .getArguments()
    .map((a) => a.getValue())
    .join(' ');
}

/** Debian packages an `apt-get install` in the stage installs. */
function aptPackages(stage: Stage): string[] {
  const pkgs: string[] = [];
  for (const i of stage.instructions.filter((x) => x.getKeyword() === 'RUN')) {
    const m = /apt-get install ((?:-\S+\s+)*)([^&]+)/.exec(body(i));
    if (m) pkgs.push(...m[2].trim().split(/\s+/));
  }
  return pkgs;
}

for (const file of DOCKERFILES) {
  test(`dockerfile-utils finds nothing to report in ${file}`, (t) => {
    const problems = validate(readRepo(file)).map((d) => `${d.range.start.line + 1}: ${d.message}`);
    t.deepEqual(problems, []);
  });
}

test('the linter is live: a broken Dockerfile is reported', (t) => {
  const problems = validate('FROM node:24-bookworm\nEXPOSE notaport\nCMD\n');
  t.true(problems.length >= 1, JSON.stringify(problems.map((p) => p.message)));
});

test('two stages on the same Debian release: a bookworm build image and a bookworm-slim runtime', (t) => {
  const [build, runtime, ...more] = stages();
  t.is(more.length, 0);
  t.regex(build.from, /^node:\$\{NODE_VERSION\}-bookworm$/);
  t.regex(runtime.from, /^node:\$\{NODE_VERSION\}-bookworm-slim$/);
  t.regex(text, /^ARG NODE_VERSION=24$/m);
  t.is(build.name, 'build');
});

test('the build stage has the toolchain and rdma-core headers, and requires the addon', (t) => {
  const build = stages()[0];
  const pkgs = aptPackages(build);
  for (const p of ['python3', 'make', 'g++', 'pkg-config', 'libibverbs-dev', 'librdmacm-dev'])
    t.true(pkgs.includes(p), `build stage installs ${p}`);
  const runs = build.instructions.filter((i) => i.getKeyword() === 'RUN').map(body);
  t.true(runs.some((r) => r.includes('RDMA_NATIVE_REQUIRED=1 npm run build:native')));
  t.true(
    runs.some((r) => /npm prune --omit=dev/.test(r)),
    'dev dependencies are pruned before the copy',
  );
  // The lockfile is enforced: whatever installs must leave it byte-identical.
  t.true(runs.some((r) => /npm install .*&& cmp package-lock\.json/.test(r)));
});

test('the runtime stage installs the rdma-core run-time libraries (ibverbs-providers too) and tini, no -dev package', (t) => {
  const pkgs = aptPackages(stages()[1]);
  for (const p of ['libibverbs1', 'librdmacm1', 'ibverbs-providers', 'tini']) t.true(pkgs.includes(p), p);
  t.deepEqual(
    pkgs.filter((p) => p.endsWith('-dev') || ['g++', 'make', 'python3'].includes(p)),
    [],
  );
});

test('the runtime stage runs as the documented numeric non-root user, behind tini, with a /livez HEALTHCHECK', (t) => {
  const runtime = stages()[1];
  const users = runtime.instructions.filter((i) => i.getKeyword() === 'USER').map(body);
  t.deepEqual(users, ['10001:10001']);
  t.true(runtime.instructions.some((i) => i.getKeyword() === 'RUN' && /useradd .*--uid 10001/.test(body(i))));
  // docs/deploy.md documents the same user and the root + IPC_LOCK alternative.
  const docs = readRepo('docs', 'deploy.md');
  t.regex(docs, /10001/);
  t.regex(docs, /IPC_LOCK/);
  const entry = runtime.instructions.find((i) => i.getKeyword() === 'ENTRYPOINT');
  t.truthy(entry);
  t.deepEqual(JSON.parse(body(entry!).replace(/\s/g, '')).slice(0, 2), ['/usr/bin/tini', '--']);
  const health = runtime.instructions.find((i) => i.getKeyword() === 'HEALTHCHECK');
  t.truthy(health);
  t.regex(body(health!), /admin-call\.mjs.*GET.*\/livez/);
});

test('the runtime stage copies only what the gateway needs', (t) => {
  const runtime = stages()[1];
  const copies = runtime.instructions.filter((i): i is Copy => i.getKeyword() === 'COPY') as Copy[];
  t.false(runtime.instructions.some((i) => i.getKeyword() === 'ADD'));
  const allowedFromBuild = [
    '/src/package.json',
    '/src/node_modules/',
    '/src/dist/',
    '/src/rdma-backend/native/binding.gyp',
    '/src/rdma-backend/native/build-status.json',
    '/src/rdma-backend/native/build/Release/rdma_native.node',
    '/src/rdma-backend/native/crc32c/build/Release/crc32c.node',
  ];
  for (const c of copies) {
    const [src] = c.getArguments().map((a) => a.getValue());
    const from = c.getFromFlag()?.getValue();
    if (from) {
      t.is(from, 'build');
      t.true(allowedFromBuild.includes(src), `unexpected COPY --from=build ${src}`);
    } else {
      t.true(
        ['deploy/scripts/admin-call.mjs', 'deploy/docker/gateway.yaml'].includes(src),
        `unexpected COPY from the context: ${src}`,
      );
    }
  }
  // The build stage removes what is not product code from dist/ before the copy.
  const buildRuns = stages()[0].instructions.map(body).join('\n');
  t.regex(buildRuns, /rm -f dist\/\.tsbuildinfo/);
  t.regex(buildRuns, /find dist -name '\*\.map' -delete/);
});

test('every path the image copies from the build context exists and is not excluded by .dockerignore', (t) => {
  const ignore = readRepo('.dockerignore')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  t.is(ignore[0], '**', '.dockerignore starts by excluding everything');
  const allowed = ignore.filter((l) => l.startsWith('!')).map((l) => l.slice(1));
  for (const c of dockerfile.getInstructions().filter((i) => i.getKeyword() === 'COPY') as Copy[]) {
    if (c.getFromFlag()) continue;
    const sources = c
      .getArguments()
      .map((a) => a.getValue())
      .slice(0, -1);
    for (const src of sources) {
      t.true(existsSync(repoPath(src)), `${src} exists`);
      t.true(
        allowed.some((a) => src === a || src.startsWith(a)),
        `${src} is re-included by .dockerignore`,
      );
    }
  }
  // Local build output never enters the context.
  for (const generated of ['node_modules/', 'dist/', 'rdma-backend/native/build/'])
    t.false(
      allowed.some((a) => a === generated || generated.startsWith(a)) &&
        !ignore.includes(generated) &&
        !ignore.includes(generated.replace(/\/$/, '')),
      `${generated} is excluded`,
    );
});

/** The runtime stage's `COPY --from=build` instructions as [source, destination] pairs. */
function copiesFromBuild(): [string, string][] {
  return (stages()[1].instructions.filter((i) => i.getKeyword() === 'COPY') as Copy[])
    .filter((c) => c.getFromFlag()?.getValue() === 'build')
    .map((c) => c.getArguments().map((a) => a.getValue()) as [string, string]);
}

// Where the loaders look, relative to the project root that rdma-backend/native/binding.gyp marks
// (common/project-root.ts): the verbs addon (rdma-backend/providers/native) and the soft provider's CRC32c
// addon (rdma-backend/providers/soft/crc32c.ts; without it the MPA CRC falls back to @node-rs/crc32's single
// lane, from 512 bytes instead of 96).
const ROOT_MARKER = 'rdma-backend/native/binding.gyp';
const ADDONS = [
  'rdma-backend/native/build/Release/rdma_native.node',
  'rdma-backend/native/crc32c/build/Release/crc32c.node',
];

test('the image carries both native addons where their loaders look, under the root binding.gyp marks', (t) => {
  const runtime = stages()[1];
  const workdir = runtime.instructions.filter((i) => i.getKeyword() === 'WORKDIR').map(body);
  t.deepEqual(workdir, ['/app']);
  const copies = copiesFromBuild();
  // dist/ at the root, so findProjectRoot walks up from /app/dist/... to /app.
  t.true(copies.some(([src, dest]) => src === '/src/dist/' && dest === './dist/'));
  for (const path of [ROOT_MARKER, ...ADDONS])
    t.true(
      copies.some(([src, dest]) => src === `/src/${path}` && dest === `./${path}`),
      `COPY --from=build /src/${path} ./${path}`,
    );
  // build:native never fails for the CRC32c addon: the image build checks it is there, built afresh.
  const buildRuns = stages()[0]
    .instructions.filter((i) => i.getKeyword() === 'RUN')
    .map(body);
  t.true(
    buildRuns.some((r) =>
      /rm -rf rdma-backend\/native\/crc32c\/build && RDMA_NATIVE_REQUIRED=1 npm run build:native && test -f rdma-backend\/native\/crc32c\/build\/Release\/crc32c\.node/.test(
        r.replace(/\s+/g, ' '),
      ),
    ),
    'the build stage requires a fresh crc32c.node',
  );
});

const CRC_ADDON = repoPath('rdma-backend', 'native', 'crc32c', 'build', 'Release', 'crc32c.node');
if (!existsSync(CRC_ADDON) && !inCI)
  process.stderr.write(
    '\n!!! rdma-backend/native/crc32c is not built (no C compiler?): the image-layout CRC test is SKIPPED.\n' +
      '!!! Install build-essential python3 (scripts/install-system-deps.sh) and run `npm run build:native`.\n\n',
  );

/** Which CRC32c the compiled soft provider at `distDir` picks (its `crc32cImplementation`). */
function crcImplementationAt(distDir: string): string {
  const module = pathToFileURL(join(distDir, 'rdma-backend', 'providers', 'soft', 'crc32c.js')).href;
  const env = { ...process.env };
  for (const k of ['RPCRDMA_SOFT_CRC', 'RPCRDMA_CRC32C_ADDON', 'RPCRDMA_CRC32C_METHOD']) delete env[k];
  const r = spawnSync(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `process.stdout.write((await import(${JSON.stringify(module)})).crc32cImplementation)`,
    ],
    { encoding: 'utf8', env, timeout: 30_000 },
  );
  if (r.status !== 0) throw new Error(`loading ${module}: ${r.stderr}`);
  return r.stdout;
}

(existsSync(CRC_ADDON) || inCI ? test : test.skip)(
  "laid out as the runtime stage copies it, the soft provider finds the CRC32c addon (not @node-rs/crc32's fallback)",
  (t) => {
    t.true(existsSync(CRC_ADDON), 'the CRC32c addon is built (npm run build:native)');
    // /app as the runtime stage's COPY --from=build instructions make it, from this checkout's build output:
    // real copies (a symlinked module would resolve to the checkout and find its root there), except
    // node_modules, which only provides @node-rs/crc32 (the fallback the image would otherwise use). What
    // this checkout has not built (the verbs addon needs rdma-core's headers) is left out.
    const app = mkdtempSync(join(tmpdir(), 'rpcrdma-image-app-'));
    try {
      for (const [src, dest] of copiesFromBuild()) {
        const from = repoPath(src.replace(/^\/src\//, ''));
        if (!existsSync(from)) continue;
        const to = join(app, dest);
        mkdirSync(dirname(to.replace(/\/$/, '')), { recursive: true });
        if (src === '/src/node_modules/') symlinkSync(from, to.replace(/\/$/, ''), 'dir');
        // dist/ without what the build stage leaves out (tests, benchmarks are not compiled there).
        else
          cpSync(from, to, {
            recursive: true,
            filter: (f) => !/\/dist\/(test|bench)(\/|$)/.test(f) && !f.endsWith('.map'),
          });
      }
      const inImage = crcImplementationAt(join(app, 'dist'));
      const inCheckout = crcImplementationAt(repoPath('dist'));
      t.is(inImage, inCheckout, 'the image picks what the checkout, with its addon built, picks');
      // On a CPU with SSE4.2 the addon serves (avx512-fold or sse42-3way); elsewhere it reports itself
      // unsupported and both fall back alike.
      if (/\bsse4_2\b/.test(readFileSync('/proc/cpuinfo', 'utf8')))
        t.true(['avx512-fold', 'sse42-3way'].includes(inImage), `in the image: ${inImage}`);
    } finally {
      rmSync(app, { recursive: true, force: true });
    }
  },
);

/** The runtime stage's ENV, name → value. */
function imageEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const i of stages()[1].instructions.filter((x) => x.getKeyword() === 'ENV'))
    for (const p of (i as Env).getProperties()) env[p.getName()] = p.getValue() ?? '';
  return env;
}

test("the image's defaults listen on all interfaces, and the chart's configuration file wins over them", async (t) => {
  const env = imageEnv();
  // Environment variables beat the configuration file: any RPCRDMA_GATEWAY_* key in the image's ENV would
  // silently override the chart's ConfigMap. Only the variable naming the image's default file is there.
  t.deepEqual(
    Object.keys(env).filter((k) => k.startsWith('RPCRDMA_GATEWAY_')),
    ['RPCRDMA_GATEWAY_CONFIG'],
  );
  // `docker run image`: the baked file (copied to the path RPCRDMA_GATEWAY_CONFIG names) applies.
  const copy = (stages()[1].instructions.filter((i) => i.getKeyword() === 'COPY') as Copy[])
    .map((c) => c.getArguments().map((a) => a.getValue()))
    .find(([src]) => src === 'deploy/docker/gateway.yaml');
  t.is(copy?.[1], env.RPCRDMA_GATEWAY_CONFIG);
  const image = loadConfig({
    env: { ...env, RPCRDMA_GATEWAY_CONFIG: repoPath('deploy', 'docker', 'gateway.yaml') },
  }).config;
  t.deepEqual(image.frontend.listen, [{ host: '0.0.0.0', port: 2049 }]);
  t.is(image.log.format, 'json');
  // The chart: its ConfigMap, given with --config (which wins over RPCRDMA_GATEWAY_CONFIG), in the image's
  // environment. Its port, listen address and log format are the ones in force.
  const { renderChart } = await helmLite();
  const dir = mkdtempSync(join(tmpdir(), 'rpcrdma-image-'));
  try {
    writeFileSync(
      join(dir, 'v.yaml'),
      'ports: {nfs: 3049}\nlistenAddress: "::"\nconfig: {log: {format: pretty}}\n',
    );
    const docs = parseManifests(
      renderChart(chartDir, { valuesFiles: [join(dir, 'v.yaml')] })
        .manifests.map((m) => `---\n${m.text}`)
        .join('\n'),
    );
    const workload = docs.find((d) => d.kind === 'Deployment');
    const args = workload!.spec.template.spec.containers[0].args as string[];
    const configPath = args[args.indexOf('--config') + 1];
    t.is(configPath, env.RPCRDMA_GATEWAY_CONFIG, "the ConfigMap is mounted over the image's file");
    const file = join(dir, 'gateway.yaml');
    writeFileSync(file, docs.find((d) => d.kind === 'ConfigMap')!.data!['gateway.yaml']);
    const chart = loadConfig({ file, env }).config;
    t.deepEqual(chart.frontend.listen, [{ host: '::', port: 3049 }]);
    t.is(chart.log.format, 'pretty');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
