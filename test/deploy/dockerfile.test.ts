/**
 * The container image, checked without a Docker engine: dockerfile-utils' linter, then the structure the
 * deployment relies on (docs/deploy.md): two bookworm stages, the build toolchain and rdma-core headers only
 * in the build stage, the rdma-core run-time libraries (ibverbs-providers included) in the runtime stage,
 * tini, the documented non-root user, a HEALTHCHECK on /livez, production dependencies only, and a
 * runtime stage that copies only what the gateway needs.
 */
import { existsSync } from 'node:fs';
import test from 'ava';
import { type Copy, DockerfileParser, type Instruction } from 'dockerfile-ast';
import { validate } from 'dockerfile-utils';
import { readRepo, repoPath } from './repo.js';

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
  ];
  for (const c of copies) {
    const [src] = c.getArguments().map((a) => a.getValue());
    const from = c.getFromFlag()?.getValue();
    if (from) {
      t.is(from, 'build');
      t.true(allowedFromBuild.includes(src), `unexpected COPY --from=build ${src}`);
    } else {
      t.is(src, 'deploy/scripts/admin-call.mjs', `unexpected COPY from the context: ${src}`);
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
