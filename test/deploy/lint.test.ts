/**
 * yamllint over every YAML file of deploy/ (the rendered examples stand for the templates), shellcheck over
 * every shell script of the repository, the compose demo's wiring, and the admin-call script the image's
 * HEALTHCHECK and the chart's preStop hook run.
 */
import { execFileSync, spawn } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, relative } from 'node:path';
import test from 'ava';
import { parse as parseYaml } from 'yaml';
import { CONFIG_SCHEMA, envName } from '../../gateway/config.js';
import { findExecutable, testWithPeers } from '../helpers/peers.js';
import { readRepo, repoPath, repoRoot } from './repo.js';

const SKIP_DIRS = new Set(['node_modules', 'dist', '.git', '.cache']);

/** Files under `dir` (repository-relative), skipping build output and dependencies. */
function walk(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    if (SKIP_DIRS.has(name)) continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path, out);
    else out.push(relative(repoRoot, path));
  }
  return out;
}

function isShellScript(file: string): boolean {
  if (file.endsWith('.sh') || file.endsWith('.bash')) return true;
  if (/\.(ts|js|mjs|json|md|ya?ml|pcap|bin|node|cc|h)$/.test(file)) return false;
  const head = readFileSync(repoPath(file)).subarray(0, 64).toString('latin1');
  return /^#!\s*(\/usr)?\/bin\/(env\s+)?(ba|da)?sh\b/.test(head);
}

testWithPeers('yamllint')('yamllint passes on every YAML file of deploy/', (t) => {
  const files = walk(repoPath('deploy')).filter((f) => /\.ya?ml$/.test(f) && !f.includes('/templates/'));
  t.true(files.length >= 8, files.join(' '));
  try {
    execFileSync(
      findExecutable('yamllint') ?? 'yamllint',
      ['-c', 'deploy/yamllint.yaml', '-f', 'parsable', ...files],
      {
        cwd: repoRoot,
        encoding: 'utf8',
      },
    );
    t.pass();
  } catch (err) {
    t.fail(`yamllint:\n${(err as { stdout?: string }).stdout ?? err}`);
  }
});

testWithPeers('shellcheck')('shellcheck passes on every shell script of the repository', (t) => {
  const scripts = walk(repoRoot).filter(isShellScript);
  t.true(scripts.includes('scripts/install-system-deps.sh'));
  try {
    execFileSync(findExecutable('shellcheck') ?? 'shellcheck', ['--format=gcc', ...scripts], {
      cwd: repoRoot,
      encoding: 'utf8',
    });
    t.pass();
  } catch (err) {
    t.fail(`shellcheck:\n${(err as { stdout?: string }).stdout ?? err}`);
  }
});

/** The Debian packages scripts/install-system-deps.sh installs (its `packages=( ... )` array). */
function systemDeps(): string[] {
  const m = /^packages=\(\n([\s\S]*?)^\)/m.exec(readRepo('scripts', 'install-system-deps.sh'));
  if (!m) throw new Error('no packages=( ... ) array in scripts/install-system-deps.sh');
  return m[1]
    .split('\n')
    .map((l) => l.replace(/#.*/, ''))
    .join(' ')
    .split(/\s+/)
    .filter(Boolean);
}

test('install-system-deps.sh installs the toolchain node-gyp needs and every package build-native.mjs asks for', (t) => {
  const pkgs = systemDeps();
  t.true(pkgs.includes('valgrind') && pkgs.includes('libibverbs-dev'), pkgs.join(' '));
  // node-gyp: a C/C++ compiler and make (build-essential), python3 for gyp. CI (.ci/run) installs with this
  // script only; without them build-native.mjs exits 0 with TOOLCHAIN_MISSING and CI fails late.
  for (const p of ['build-essential', 'python3']) t.true(pkgs.includes(p), `installs ${p}`);
  // What build-native.mjs tells a user to install (toolchain, rdma-core headers) is what CI installs.
  const script = readRepo('scripts', 'build-native.mjs');
  const named = [
    ...[...script.matchAll(/pkg: '([^']+)'/g)].map((m) => m[1]),
    ...[...script.matchAll(/install the Debian packages ([a-z0-9.+ -]+?) and run/g)].flatMap((m) =>
      m[1].split(' '),
    ),
  ];
  t.true(named.includes('build-essential') && named.includes('libibverbs-dev'), named.join(' '));
  for (const p of named) t.true(pkgs.includes(p), `build-native.mjs names ${p}; the script installs it`);
  // The image's build stage builds the same addons: its toolchain is covered (g++ and make by build-essential).
  const build = /^FROM [^\n]* AS build$([\s\S]*?)^FROM /m.exec(readRepo('deploy', 'docker', 'Dockerfile'));
  const apt = /apt-get install (?:-\S+\s+)*([^&]+)/.exec(build?.[1].replace(/\\\n/g, ' ') ?? '');
  t.truthy(apt, "the image's build stage installs packages");
  for (const p of apt![1].trim().split(/\s+/))
    t.true(
      pkgs.includes(p) || (['g++', 'gcc', 'make'].includes(p) && pkgs.includes('build-essential')),
      `the image's build stage needs ${p}`,
    );
});

/**
 * Compose's variable interpolation (https://docs.docker.com/reference/compose-file/interpolation/) of one
 * string: `$$`, `$VAR`, `${VAR}`, `${VAR:-default}`/`${VAR-default}`, `${VAR:?error}`/`${VAR?error}` (the
 * colon forms also treat an empty value as unset). A required variable that is missing throws its message.
 */
function interpolate(value: string, env: Record<string, string>): string {
  return value.replace(
    /\$(?:(\$)|([A-Za-z_][A-Za-z0-9_]*)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?)([-?])([^}]*))?\})/g,
    (_m, dollar, bare, name, colon, op, arg) => {
      if (dollar) return '$';
      if (bare) return env[bare] ?? '';
      const v = env[name];
      const unset = v === undefined || (colon === ':' && v === '');
      if (!unset) return v;
      if (op === '?') throw new Error(`required variable ${name} is missing a value: ${arg}`);
      return op === '-' ? arg : '';
    },
  );
}

test('the compose demo has no admin token anyone could guess: it requires RPCRDMA_GATEWAY_ADMIN_TOKEN', (t) => {
  const text = readRepo('deploy', 'compose', 'compose.yaml');
  const { responder, gateway } = parseYaml(text, { merge: true }).services;
  for (const svc of [responder, gateway]) {
    const token = svc.environment.RPCRDMA_GATEWAY_ADMIN_TOKEN as string;
    // Unset or empty: compose refuses to run, naming the variable; set: that value, as given.
    for (const env of [{}, { RPCRDMA_GATEWAY_ADMIN_TOKEN: '' }] as Record<string, string>[])
      t.throws(() => interpolate(token, env), { message: /RPCRDMA_GATEWAY_ADMIN_TOKEN.*docs\/deploy\.md/ });
    t.is(interpolate(token, { RPCRDMA_GATEWAY_ADMIN_TOKEN: 'Xy7-secret' }), 'Xy7-secret');
  }
  // The interpolation is live: a default would have served.
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a compose interpolation, not a JS template
  t.is(interpolate('${T:-change-me}', {}), 'change-me');
  t.notRegex(text, /change-me/);
  // docs/deploy.md's compose demo says so, with a way to make one.
  const docs = readRepo('docs', 'deploy.md');
  const demo = /### Compose demo\n([\s\S]*?)\n## /.exec(docs)?.[1] ?? '';
  t.regex(demo, /export RPCRDMA_GATEWAY_ADMIN_TOKEN=/);
});

test('the compose demo wires client → gateway → responder → ganesha with real configuration variables', (t) => {
  const compose = parseYaml(readRepo('deploy', 'compose', 'compose.yaml'), { merge: true });
  const { ganesha, responder, gateway } = compose.services;
  t.truthy(ganesha && responder && gateway);
  const known = new Set(CONFIG_SCHEMA.map((d) => envName(d.key)));
  for (const svc of [responder, gateway])
    for (const name of Object.keys(svc.environment))
      t.true(known.has(name), `${name} is a configuration variable`);
  t.deepEqual(responder.command, ['responder']);
  t.deepEqual(gateway.command, ['start']);
  t.is(responder.environment.RPCRDMA_GATEWAY_UPSTREAM, 'ganesha:2049');
  t.is(responder.environment.RPCRDMA_GATEWAY_RESPONDER_LISTEN, '0.0.0.0:20049');
  t.is(gateway.environment.RPCRDMA_GATEWAY_RDMA_PEER, 'responder:20049');
  t.is(gateway.depends_on.responder.condition, 'service_healthy');
  // Both roles' health is the image's HEALTHCHECK, admin-call.mjs GET /livez at RPCRDMA_GATEWAY_ADMIN_LISTEN
  // (no --admin of its own): neither service overrides or disables it, and each sets that variable, the
  // responder to its own default port, so both publish on the host's loopback side by side.
  const health = /^HEALTHCHECK .*CMD (\[.*\])$/m.exec(
    readRepo('deploy', 'docker', 'Dockerfile').replace(/\\\n\s*/g, ''),
  );
  t.truthy(health, 'the image has a HEALTHCHECK');
  t.deepEqual(JSON.parse(health![1]), ['node', '/app/deploy/scripts/admin-call.mjs', 'GET', '/livez']);
  const published = new Set<string>();
  for (const [svc, port] of [
    [responder, 9250],
    [gateway, 9249],
  ] as const) {
    t.is(svc.healthcheck, undefined, 'the image healthcheck applies');
    t.is(svc.environment.RPCRDMA_GATEWAY_ADMIN_LISTEN, `0.0.0.0:${port}`);
    t.true(svc.ports.includes(`127.0.0.1:${port}:${port}`), `admin port ${port} published on loopback`);
    for (const p of svc.ports) {
      const hostSide = p.split(':').slice(0, 2).join(':');
      t.false(published.has(hostSide), `${hostSide} published once`);
      published.add(hostSide);
    }
    // Drain on SIGTERM needs more than Docker's 10 s.
    t.is(svc.stop_grace_period, '40s');
  }
  t.truthy(responder.environment.RPCRDMA_GATEWAY_ADMIN_TOKEN, 'a token for its write routes (drain)');
  t.is(responder.build.dockerfile, 'deploy/docker/Dockerfile');
  // ganesha as the interop tests run it (DESIGN §4): NFSv4 only, no UDP/NLM/RQUOTA, no grace period.
  const conf = readRepo('deploy', 'compose', 'ganesha', 'ganesha.conf');
  for (const line of [
    'NFS_Port = 2049;',
    'Enable_UDP = false;',
    'Enable_NLM = false;',
    'Enable_RQUOTA = false;',
    'Graceless = true;',
    'Only_Numeric_Owners = true;',
    'Attr_Expiration_Time = 0;',
    'FSAL { Name = VFS; }',
  ])
    t.true(conf.includes(line), line);
  t.regex(conf, /Protocols = 4;/);
});

/** Runs admin-call.mjs against `handler`, returning its exit status, stderr and the request seen. */
async function adminCall(
  args: string[],
  status: number,
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number | null; stderr: string; seen?: { method?: string; url?: string; auth?: string } }> {
  let seen: { method?: string; url?: string; auth?: string } | undefined;
  const server = createServer((req: IncomingMessage, res) => {
    seen = { method: req.method, url: req.url, auth: req.headers.authorization };
    res.writeHead(status, { 'content-type': 'application/json' }).end('{"reason":"draining"}');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  try {
    const child = spawn(process.execPath, [repoPath('deploy', 'scripts', 'admin-call.mjs'), ...args], {
      env: { PATH: process.env.PATH, RPCRDMA_GATEWAY_ADMIN_LISTEN: `0.0.0.0:${port}`, ...env },
    });
    let stderr = '';
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    const code = await new Promise<number | null>((r) => child.on('close', r));
    return { code, stderr, seen };
  } finally {
    server.close();
  }
}

test('admin-call: GET /livez succeeds on 200, through loopback for a wildcard listen address, without a token', async (t) => {
  const r = await adminCall(['GET', '/livez'], 200, { RPCRDMA_GATEWAY_ADMIN_TOKEN: 'secret' });
  t.is(r.code, 0, r.stderr);
  t.deepEqual(r.seen, { method: 'GET', url: '/livez', auth: undefined });
});

test('admin-call: a 503 fails with the answer in the message', async (t) => {
  const r = await adminCall(['GET', '/readyz'], 503);
  t.is(r.code, 1);
  t.regex(r.stderr, /HTTP 503 .*draining/);
});

test('admin-call: POST carries the bearer token; a 401 fails', async (t) => {
  const ok = await adminCall(['POST', '/v1/drain', '--sleep-after-ms', '10'], 202, {
    RPCRDMA_GATEWAY_ADMIN_TOKEN: 'secret',
  });
  t.is(ok.code, 0, ok.stderr);
  t.deepEqual(ok.seen, { method: 'POST', url: '/v1/drain', auth: 'Bearer secret' });
  // A token from a Secret made from a file ends with a newline: sent trimmed, as the gateway reads it.
  const fromFile = await adminCall(['POST', '/v1/drain'], 202, { RPCRDMA_GATEWAY_ADMIN_TOKEN: ' secret\n' });
  t.is(fromFile.code, 0, fromFile.stderr);
  t.is(fromFile.seen?.auth, 'Bearer secret');
  const refused = await adminCall(['POST', '/v1/drain'], 401);
  t.is(refused.code, 1);
});

test('admin-call: nothing listening, and a usage error, fail with distinct statuses', async (t) => {
  const r = await adminCall(['GET', '/livez', '--admin', '127.0.0.1:1', '--timeout-ms', '500'], 200);
  t.is(r.code, 1);
  t.regex(r.stderr, /ECONNREFUSED/);
  const usage = await adminCall(['get', 'livez'], 200);
  t.is(usage.code, 2);
});
