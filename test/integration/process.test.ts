/**
 * The product as a user runs it: the command `npm start` runs (read from package.json, so the test follows
 * it), as a real process, serving within seconds; `rpcrdma-gateway ping` gets verified answers through it;
 * SIGTERM drains (calls in flight finish, their replies arrive) and the process exits 0.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import test from 'ava';
import { TestProgramClient } from '../../gateway/test-program/index.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const CLI = fileURLToPath(new URL('../../gateway/cli.js', import.meta.url));
const pkg = JSON.parse(readFileSync(`${ROOT}package.json`, 'utf8')) as { scripts: { start: string } };

interface Started {
  child: ChildProcess;
  port: number;
  adminUrl: string;
  ms: number;
  output: () => string;
}

/** `npm start`'s command with a free port (2049 may be taken on a test machine) and quiet logs. */
function npmStart(logLevel = 'warn'): Promise<Started> {
  const [cmd, ...args] = pkg.scripts.start.split(' ');
  if (cmd !== 'node') throw new Error(`unexpected start script: ${pkg.scripts.start}`);
  const began = Date.now();
  const child = spawn(
    process.execPath,
    [...args, '--listen', '127.0.0.1:0', '--admin-listen', '127.0.0.1:0', '--log-level', logLevel],
    {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`npm start did not serve within 10 s: ${out}`)), 10_000);
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /listening for ONC RPC over TCP on 127\.0\.0\.1:(\d+)/.exec(out);
      const admin = /admin: +(http:\/\/127\.0\.0\.1:\d+)/.exec(out);
      if (m && admin && /try it: +npx rpcrdma-gateway ping --target/.test(out)) {
        clearTimeout(timer);
        resolve({ child, port: Number(m[1]), adminUrl: admin[1], ms: Date.now() - began, output: () => out });
      }
    });
    child.stderr!.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.once('exit', (code) => reject(new Error(`npm start exited with ${code}: ${out}`)));
  });
}

function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { timeout: 20_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

/**
 * The gateway's calls in flight (`/v1/stats`, frontend section), polled until there is one, or 0 once
 * `over()` says the calls to catch have all been answered (then there is nothing left to catch).
 */
async function callsInFlight(adminUrl: string, over: () => boolean): Promise<number> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const done = over();
    const res = await fetch(`${adminUrl}/v1/stats?section=frontend`);
    if (!res.ok) throw new Error(`/v1/stats: ${res.status} ${await res.text()}`);
    const n = ((await res.json()) as { frontend: { callsInFlight: number } }).frontend.callsInFlight;
    if (n >= 1 || done) return n;
    if (Date.now() > deadline) throw new Error('no call in flight within 10 s');
  }
}

function exitOf(child: ChildProcess): Promise<number | null> {
  return child.exitCode !== null
    ? Promise.resolve(child.exitCode)
    : new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

test('npm start serves within seconds; ping answers through it; SIGTERM drains and exits 0', async (t) => {
  const g = await npmStart();
  t.teardown(() => {
    if (g.child.exitCode === null) g.child.kill('SIGKILL');
  });
  t.log(`serving after ${g.ms} ms`);
  t.true(g.ms < 10_000);
  t.regex(g.output(), /in-process responder .* the built-in test program 0x20475754/);
  t.regex(g.output(), /RDMA connections ready: 2\/2/);

  const ping = await cli(['ping', '--target', `127.0.0.1:${g.port}`, '--count', '3', '--interval', '0']);
  t.is(ping.code, 0, ping.stderr);
  t.regex(ping.stdout, /3 calls, 3 answered, 0 failed/);
  const big = await cli(['ping', '--target', `127.0.0.1:${g.port}`, '--count', '2', '--size', '1048576']);
  t.is(big.code, 0, big.stderr);
  t.regex(big.stdout, /1048576 bytes from .*seq=2/);

  // The admin API of the same process answers `rpcrdma-gateway status` with the traffic just sent.
  const status = await cli(['status', '--url', g.adminUrl, '--format', 'json']);
  t.is(status.code, 0, status.stderr);
  const summary = JSON.parse(status.stdout) as {
    serverInfo: { role: string; provider: string };
    readiness: { ready: boolean };
    upstreams: { upstreams: { state: string }[] };
  };
  t.is(summary.serverInfo.role, 'gateway');
  t.is(summary.serverInfo.provider, 'soft');
  t.true(summary.readiness.ready);
  t.deepEqual(
    summary.upstreams.upstreams.map((u) => u.state),
    ['ready', 'ready'],
  );
  const text = await cli(['status', '--url', g.adminUrl]);
  t.is(text.code, 0, text.stderr);
  const counted = /traffic since \S+: (\d+) calls/.exec(text.stdout);
  t.true(counted !== null && Number(counted[1]) >= 5, `the 5 pings are counted: ${text.stdout}`);

  // Calls in flight when SIGTERM arrives still get their (verified) replies; then the process exits 0.
  const client = await TestProgramClient.connect({ host: '127.0.0.1', port: g.port });
  const calls = Array.from({ length: 8 }, (_, i) => client.source(2 * 1024 * 1024, i));
  let settled = 0;
  for (const c of calls)
    c.then(
      () => settled++,
      () => settled++,
    );
  // SIGTERM once the gateway itself counts calls in flight (its admin API), not after a guessed delay.
  const inFlight = await callsInFlight(g.adminUrl, () => settled === calls.length);
  t.log(`SIGTERM with ${inFlight} call(s) in flight, ${settled} of 8 answered`);
  t.true(inFlight >= 1, 'calls were in flight when SIGTERM was sent');
  g.child.kill('SIGTERM');
  const results = await Promise.allSettled(calls);
  t.deepEqual(
    results.map((r) => r.status),
    Array(8).fill('fulfilled'),
    results.map((r) => (r.status === 'rejected' ? String(r.reason) : 'ok')).join(', '),
  );
  t.is(await exitOf(g.child), 0, g.output());
  client.rpc.destroy();
});

test('every log line of a running gateway is one JSON object with each field once', async (t) => {
  const g = await npmStart('debug');
  t.teardown(() => {
    if (g.child.exitCode === null) g.child.kill('SIGKILL');
  });
  const ping = await cli(['ping', '--target', `127.0.0.1:${g.port}`, '--count', '2']);
  t.is(ping.code, 0, ping.stderr);
  g.child.kill('SIGTERM');
  t.is(await exitOf(g.child), 0, g.output());
  const lines = g
    .output()
    .split('\n')
    .filter((l) => l.startsWith('{'));
  t.true(lines.length >= 5, `the gateway logged at debug level: ${lines.length} lines`);
  const components = new Set<string>();
  for (const line of lines) {
    const parsed = JSON.parse(line) as { role?: string; component?: string };
    t.is(parsed.role, 'gateway', line);
    if (parsed.component) components.add(parsed.component);
    // A child binding is appended, not replaced: a nested component logger would print the key twice.
    for (const key of ['"component":', '"role":', '"pid":', '"name":']) {
      t.true(line.split(key).length - 1 <= 1, `${key} more than once in ${line}`);
    }
  }
  t.true(components.has('frontend') && components.has('responder'), [...components].join(', '));
});
