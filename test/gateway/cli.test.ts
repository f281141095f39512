import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { type AddressInfo, createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import test from 'ava';
import { freePort } from '../helpers/ports.js';

const CLI = fileURLToPath(new URL('../../gateway/cli.js', import.meta.url));

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(args: string[], env: Record<string, string> = {}, timeoutMs = 20_000): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { env: { ...process.env, ...env }, timeout: timeoutMs },
      (err, stdout, stderr) => {
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
      },
    );
  });
}

/** Starts `serve-test-program` on a free port; resolves with the process and its port. */
function serve(): Promise<{ child: ChildProcess; port: number; output: () => string }> {
  const child = spawn(
    process.execPath,
    [CLI, 'serve-test-program', '--listen', '127.0.0.1:0', '--log-format', 'json'],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      // The test fails; the server must not outlive it (one that starts late would stay behind).
      child.kill('SIGKILL');
      reject(new Error(`serve-test-program did not start: ${out}`));
    }, 10_000);
    const onData = (d: Buffer) => {
      out += d.toString();
      const m = /listening on 127\.0\.0\.1:(\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ child, port: Number(m[1]), output: () => out });
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.once('exit', (code) => reject(new Error(`serve-test-program exited with ${code}: ${out}`)));
  });
}

test('ping against serve-test-program (both real processes), then SIGTERM stops the server cleanly', async (t) => {
  const { child, port, output } = await serve();
  t.teardown(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  const echo = await run([
    'ping',
    '--target',
    `127.0.0.1:${port}`,
    '--count',
    '3',
    '--size',
    '4096',
    '--interval',
    '0',
  ]);
  t.is(echo.code, 0, echo.stderr);
  t.regex(echo.stdout, /ECHO of 4096 bytes/);
  t.is(echo.stdout.match(/4096 bytes from 127\.0\.0\.1:\d+: seq=\d time=[\d.]+ ms/g)?.length, 3);
  t.regex(echo.stdout, /3 calls, 3 answered, 0 failed/);
  t.regex(echo.stdout, /rtt min\/avg\/max = [\d.]+\/[\d.]+\/[\d.]+ ms/);
  const nul = await run(['ping', '--count', '1', '--size', '0'], {
    RPCRDMA_GATEWAY_FRONTEND_LISTEN: `127.0.0.1:${port}`,
  });
  t.is(nul.code, 0, nul.stderr);
  t.regex(nul.stdout, /NULL from 127\.0\.0\.1:\d+: seq=1/);
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  child.kill('SIGTERM');
  t.is(await exited, 0);
  t.regex(output(), /"msg":"stopped"/);
  t.regex(output(), /"ECHO":3/);
});

test('ping to a port where nothing listens fails with a message and status 1', async (t) => {
  const r = await run(['ping', '--target', '127.0.0.1:1', '--count', '1']);
  t.is(r.code, 1);
  t.regex(r.stderr, /cannot connect to 127\.0\.0\.1:1/);
});

test('--print-config prints the effective configuration; a bad value exits 2 naming the key', async (t) => {
  const ok = await run(['--print-config', '--frontend-max-calls-in-flight', '7'], {
    RPCRDMA_GATEWAY_LOG_LEVEL: 'debug',
  });
  t.is(ok.code, 0, ok.stderr);
  const printed = JSON.parse(ok.stdout);
  t.is(printed.frontend.maxCallsInFlight, 7);
  t.is(printed.log.level, 'debug');
  const bad = await run(['--print-config'], { RPCRDMA_GATEWAY_RDMA_POOL_SIZE: '0' });
  t.is(bad.code, 2);
  t.regex(bad.stderr, /rdma\.poolSize: expected an integer in 1\.\.64/);
});

test('version, help and an unknown command', async (t) => {
  const v = await run(['version']);
  t.regex(v.stdout, /^\d+\.\d+\.\d+\n$/);
  const h = await run(['help']);
  t.regex(h.stdout, /serve-test-program/);
  t.regex(h.stdout, /ping/);
  const hc = await run(['help', 'config']);
  t.regex(hc.stdout, /RPCRDMA_GATEWAY_FRONTEND_MAX_CALLS_IN_FLIGHT/);
  const u = await run(['frobnicate']);
  t.is(u.code, 2);
  t.regex(u.stderr, /unknown command 'frobnicate'/);
});

test('start: admin settings that cannot work are refused before anything listens (exit 2, naming the key)', async (t) => {
  const frontend = await freePort();
  const cases: [Record<string, string>, RegExp][] = [
    [
      {
        RPCRDMA_GATEWAY_ADMIN_LISTEN: '0.0.0.0:0',
        RPCRDMA_GATEWAY_ADMIN_ALLOW_UNAUTHENTICATED_WRITES: 'true',
      },
      /admin\.allowUnauthenticatedWrites: expected false while admin\.listen is not a loopback address/,
    ],
    [
      { RPCRDMA_GATEWAY_ADMIN_PROTECT_READS: 'true' },
      /admin\.protectReads: expected false while admin\.token is empty/,
    ],
    [{ RPCRDMA_GATEWAY_ADMIN_TOKEN: 'two words' }, /admin\.token: expected a bearer token/],
  ];
  for (const [env, message] of cases) {
    const r = await run(['start', '--listen', `127.0.0.1:${frontend}`], env);
    t.is(r.code, 2, r.stderr);
    t.regex(r.stderr, message);
    t.notRegex(r.stdout, /listening/, 'the gateway never started');
  }
});

test('a repeated --frontend-allowed-clients adds to the list; a token keeps no surrounding newline', async (t) => {
  const r = await run(
    [
      '--print-config',
      '--frontend-allowed-clients',
      '10.0.0.0/8',
      '--frontend-allowed-clients',
      '192.168.0.0/16',
    ],
    { RPCRDMA_GATEWAY_ADMIN_TOKEN: 's3cret\n' },
  );
  t.is(r.code, 0, r.stderr);
  t.deepEqual(JSON.parse(r.stdout).frontend.allowedClients, ['10.0.0.0/8', '192.168.0.0/16']);
});

test('responder: its admin API answers at the address it prints (/readyz, role responder), then SIGTERM exits 0', async (t) => {
  const rdmaPort = await freePort();
  const child = spawn(
    process.execPath,
    [
      CLI,
      'responder',
      '--responder-listen',
      `127.0.0.1:${rdmaPort}`,
      '--upstream',
      'embedded',
      '--admin-listen',
      '127.0.0.1:0',
      '--rdma-provider',
      'soft',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  t.teardown(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
  });
  child.stderr!.on('data', (d: Buffer) => {
    out += d.toString();
  });
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no admin line: ${out}`)), 15_000);
    const look = () => {
      const m = /admin: {3}(http:\/\/127\.0\.0\.1:\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    };
    child.stdout!.on('data', look);
    child.once('exit', (code) => reject(new Error(`responder exited with ${code}: ${out}`)));
  });
  t.regex(out, new RegExp(`accepting RPC-over-RDMA on 127\\.0\\.0\\.1:${rdmaPort}`));
  const ready = await fetch(`${url}/readyz`);
  t.is(ready.status, 200);
  t.like(await ready.json(), { ready: true, checks: { role: 'responder', listenerBound: true } });
  const info = (await (await fetch(`${url}/v1/server-info`)).json()) as { role: string; listening: string[] };
  t.is(info.role, 'responder');
  t.deepEqual(info.listening, [`127.0.0.1:${rdmaPort}`]);
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  child.kill('SIGTERM');
  t.is(await exited, 0, out);
});

test('an admin port already taken stops the gateway or responder it started and exits 1', async (t) => {
  const taken = createServer();
  await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
  t.teardown(() => taken.close());
  const adminPort = (taken.address() as AddressInfo).port;
  const [frontend, rdma] = [await freePort(), await freePort()];
  const roles: [string, string[], RegExp][] = [
    ['start', ['--listen', `127.0.0.1:${frontend}`], /rpcrdma-gateway start: listening/],
    [
      'responder',
      ['--responder-listen', `127.0.0.1:${rdma}`, '--upstream', 'embedded', '--rdma-provider', 'soft'],
      /rpcrdma-gateway responder: accepting/,
    ],
  ];
  for (const [command, args, banner] of roles) {
    const started = Date.now();
    const r = await run([command, ...args, '--admin-listen', `127.0.0.1:${adminPort}`]);
    // It exits by itself (`run` kills it only at 20 s): what it started does not stay up.
    const ms = Date.now() - started;
    t.true(ms < 15_000, `${command} exited after ${ms} ms`);
    t.is(r.code, 1, r.stderr);
    t.regex(r.stderr, /EADDRINUSE/);
    t.notRegex(r.stderr, /still open \d+ ms after the command ended/, `${command} left something open`);
    t.notRegex(r.stdout, banner, `no banner from ${command}`);
  }
});

test('a start-up that fails after something started exits by itself with its code (a bad route 2, a taken port 1)', async (t) => {
  const taken = createServer();
  await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
  t.teardown(() => taken.close());
  const takenPort = (taken.address() as AddressInfo).port;
  const frontend = await freePort();
  const cases: [string, string[], number, RegExp][] = [
    // The route is refused by the routing table (a configuration error: 2), now before anything starts;
    // it used to be refused once the embedded peer was up, print the error and stay alive.
    [
      'start',
      ['--listen', `127.0.0.1:${frontend}`, '--routes', 'mountd=tcp', '--admin-listen', '127.0.0.1:0'],
      2,
      /routes: 'mountd=tcp' names no upstream and passthrough\.upstream is off/,
    ],
    // The RDMA port is taken (a failure at run time: 1) after the embedded test program started.
    [
      'responder',
      [
        '--responder-listen',
        `127.0.0.1:${takenPort}`,
        '--upstream',
        'embedded',
        '--rdma-provider',
        'soft',
        '--admin-listen',
        '127.0.0.1:0',
      ],
      1,
      new RegExp(`cannot listen on 127\\.0\\.0\\.1:${takenPort}: EADDRINUSE`),
    ],
    // The client port is taken (1) after the embedded peer (its RDMA listener, its test program) and
    // the RDMA pool started: all of it is stopped again.
    ['start', ['--listen', `127.0.0.1:${takenPort}`, '--admin-listen', '127.0.0.1:0'], 1, /EADDRINUSE/],
  ];
  for (const [command, args, code, message] of cases) {
    const started = Date.now();
    const r = await run([command, ...args], {}, 15_000);
    const ms = Date.now() - started;
    t.true(ms < 10_000, `${command} exited after ${ms} ms (killed at 15 s: it hung)`);
    t.is(r.code, code, r.stderr);
    t.regex(r.stderr, message);
    // It ended because everything it started was stopped, not because the CLI gave up waiting.
    t.notRegex(r.stderr, /still open \d+ ms after the command ended/, `${command} ${args.join(' ')}`);
  }
});
