/**
 * `npm run loadgen` (bench/loadgen/cli.ts, command.ts): the load generator on its own against any
 * endpoint serving the test program; its arguments, its summary, and its exit status, including when the
 * endpoint is missing or refuses the calls.
 */
import { type AddressInfo, createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import test, { type ExecutionContext } from 'ava';
import {
  LOADGEN_USAGE,
  LoadgenUsageError,
  parseLoadgenArgs,
  summarize,
} from '../../bench/loadgen/command.js';
import type { LoadResult } from '../../bench/loadgen/spec.js';
import { serveTestProgram } from '../../gateway/test-program/server.js';
import { frameRecord, RecordDecoder } from '../../tcp-frontend/record-marking.js';
import { freePort } from '../helpers/ports.js';
import { runScript } from '../helpers/run-script.js';

const CLI = fileURLToPath(new URL('../../bench/loadgen/cli.js', import.meta.url));

test('the defaults: NULL on 4 connections × 16 for 10 s after 1 s, one generator', (t) => {
  t.deepEqual(parseLoadgenArgs(['--target', '127.0.0.1:2051']), {
    help: false,
    loadgens: 1,
    spec: {
      target: '127.0.0.1:2051',
      ops: [{ op: 'null', size: 0, weight: 1 }],
      connections: 4,
      depth: 16,
      seconds: 10,
      warmupSeconds: 1,
      idle: 0,
    },
  });
});

test('ops with sizes and weights, numbers and NAME=VALUE', (t) => {
  const a = parseLoadgenArgs([
    '--target=[::1]:2049',
    '--op',
    'echo:4k:70,sink:1m:15,source:1048576:15',
    '--connections',
    '2',
    '--depth=8',
    '--seconds',
    '2.5',
    '--warmup',
    '0',
    '--loadgens',
    '2',
  ]);
  t.is(a.spec.target, '[::1]:2049');
  t.deepEqual(a.spec.ops, [
    { op: 'echo', size: 4096, weight: 70 },
    { op: 'sink', size: 1048576, weight: 15 },
    { op: 'source', size: 1048576, weight: 15 },
  ]);
  t.is(a.spec.connections, 2);
  t.is(a.spec.depth, 8);
  t.is(a.spec.seconds, 2.5);
  t.is(a.spec.warmupSeconds, 0);
  t.is(a.loadgens, 2);
  t.deepEqual(parseLoadgenArgs(['--target', 'h:1', '--op', 'null']).spec.ops, [
    { op: 'null', size: 0, weight: 1 },
  ]);
  t.true(parseLoadgenArgs(['--help']).help, '--help needs no target');
});

test('anything else is refused with the reason and the usage', (t) => {
  const T = ['--target', '127.0.0.1:2051'];
  const cases: [string[], RegExp][] = [
    [[], /^--target is required/],
    [['--target', 'nowhere'], /^--target: /],
    [[...T, '--op', 'ping'], /^--op: ping is not null, echo:SIZE/],
    [[...T, '--op', 'echo'], /^--op: echo needs a size of 0\.\.64m \(got echo\)/],
    [[...T, '--op', 'echo:lots'], /^--op: echo needs a size/],
    [[...T, '--op', 'sink:65m'], /^--op: sink needs a size of 0\.\.64m/],
    [[...T, '--op', 'null:8'], /^--op: null takes no size/],
    [[...T, '--op', 'echo:4k:0'], /^--op: the weight must be an integer in 1\.\.1000/],
    [[...T, '--op', 'echo:4k:1:2'], /^--op: echo:4k:1:2 is not/],
    [[...T, '--connections', '0'], /^--connections must be an integer in 1\.\.10000 \(got 0\)/],
    [[...T, '--depth', '1.5'], /^--depth must be an integer/],
    [[...T, '--seconds', '0'], /^--seconds must be a number in 0\.1\.\.86400/],
    [[...T, '--loadgens', '17'], /^--loadgens must be an integer in 1\.\.16/],
    [[...T, '--depth'], /^--depth needs a value/],
    [[...T, '--quick', 'x'], /^unknown argument --quick/],
    [[...T, 'extra'], /^unknown argument extra/],
  ];
  for (const [argv, reason] of cases) {
    const e = t.throws(() => parseLoadgenArgs(argv), { instanceOf: LoadgenUsageError }, argv.join(' '));
    t.regex(e!.message, reason, argv.join(' '));
    t.true(e!.message.endsWith(LOADGEN_USAGE), argv.join(' '));
  }
});

function result(o: Partial<LoadResult>): LoadResult {
  return {
    spec: {
      target: '127.0.0.1:2051',
      ops: [{ op: 'null', size: 0, weight: 1 }],
      connections: 1,
      depth: 4,
      seconds: 2,
      warmupSeconds: 1,
      idle: 0,
    },
    ops: 40_000,
    errors: 0,
    elapsedSeconds: 2,
    opsPerSec: 20_000,
    bytesPerSec: 0,
    latencyUs: { p50: 180, p90: 250, p99: 400, p999: 900, max: 2000, mean: 190.4 },
    histogram: '',
    clientCpuSeconds: 1.2,
    generators: 1,
    ...o,
  };
}

test('the summary: rate, percentiles, CPU per call, and failures said plainly', (t) => {
  const ok = summarize(result({}));
  t.regex(ok, /^NULL to 127\.0\.0\.1:2051: 1 connection × 4 outstanding, 1 generator, 2\.0 s measured\n/);
  t.regex(ok, /40000 calls, 20\.0k calls\/s\n/);
  t.regex(ok, /p50 180 {2}p90 250 {2}p99 400 {2}p99\.9 900 {2}max 2000 {2}mean 190/);
  t.regex(ok, /generator CPU: 1\.20 s \(30\.0 µs per call\)/);
  t.notRegex(ok, /FAILED|no call/);
  t.regex(
    summarize(result({ errors: 3, firstError: 'sink: wrong count' })),
    /3 calls FAILED; the first: sink: wrong count/,
  );
  t.regex(
    summarize(
      result({ ops: 0, opsPerSec: 0, firstError: 'during the warm-up: connection error: read ECONNRESET' }),
    ),
    /no call completed in the measured window; during the warm-up: connection error/,
  );
});

/** Runs the load generator's command line; its exit code and output. */
const runCli = (args: string[]) => runScript(CLI, args);

test('against the real test program, from two generators: exit 0, the summary on stderr and the result as JSON', async (t) => {
  const server = await serveTestProgram();
  t.teardown(() => server.close({ drainTimeoutMs: 0 }));
  const target = `127.0.0.1:${server.addresses[0].port}`;
  const run = await runCli([
    '--target',
    target,
    '--op',
    'echo:4k',
    '--connections',
    '2',
    '--depth',
    '4',
    '--seconds',
    '0.3',
    '--warmup',
    '0.1',
    '--loadgens',
    '2',
  ]);
  t.is(run.code, 0, run.stderr);
  const r = JSON.parse(run.stdout) as LoadResult;
  t.is(r.generators, 2);
  t.is(r.spec.connections, 2);
  t.is(r.errors, 0);
  t.true(r.ops > 20, `${r.ops} calls`);
  t.true(
    Math.abs(r.bytesPerSec - r.opsPerSec * 2 * 4096) <= r.bytesPerSec * 0.01,
    'ECHO counts its data both ways',
  );
  t.regex(
    run.stderr,
    new RegExp(`^ECHO 4KiB to ${target}: 2 connections × 4 outstanding, 2 generators`, 'm'),
  );
  const deadline = Date.now() + 3000;
  while (server.frontend.stats.connectionsOpen > 0 && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 20));
  t.is(server.frontend.stats.connectionsOpen, 0, 'the generators closed their connections');
});

test('calls the endpoint refuses: exit 1, saying why', async (t) => {
  const server = await serveTestProgram();
  t.teardown(() => server.close({ drainTimeoutMs: 0 }));
  // Above the test program's record limit: the server closes the connection during the warm-up.
  const run = await runCli([
    '--target',
    `127.0.0.1:${server.addresses[0].port}`,
    '--op',
    'sink:8m',
    '--connections',
    '1',
    '--depth',
    '1',
    '--seconds',
    '0.2',
    '--warmup',
    '0.2',
  ]);
  t.is(run.code, 1);
  // A call that failed in the warm-up is a failure of the run too (the window ran short of a connection).
  t.regex(run.stderr, /1 calls FAILED; the first: during the warm-up: /);
});

test('an endpoint that is not there, or a bad argument: exit 1 or 2 with the reason, no stack trace', async (t) => {
  const port = await freePort();
  const down = await runCli(['--target', `127.0.0.1:${port}`, '--seconds', '0.2']);
  t.is(down.code, 1);
  t.regex(down.stderr, /^loadgen: load generator exited 1: loadgen failed: cannot connect to .*ECONNREFUSED/);
  t.notRegex(down.stderr, /\n\s+at /, 'an expected failure is its message, not a stack');
  t.is(down.stdout, '');
  const bad = await runCli(['--target', '127.0.0.1:1', '--depth', '0']);
  t.is(bad.code, 2);
  t.regex(bad.stderr, /^loadgen: --depth must be an integer in 1\.\.4096 \(got 0\)\nusage: npm run loadgen/);
  const help = await runCli(['--help']);
  t.is(help.code, 0);
  t.is(help.stdout, `${LOADGEN_USAGE}\n`);
});

/** NULL calls on one connection with `depth` outstanding, for `seconds` after `warmup` seconds. */
function oneConnection(port: number, depth: number, seconds: string, warmup: string) {
  return runCli([
    '--target',
    `127.0.0.1:${port}`,
    '--connections',
    '1',
    '--depth',
    String(depth),
    '--seconds',
    seconds,
    '--warmup',
    warmup,
  ]);
}

/**
 * A NULL server that answers the calls `answers` accepts (after `delayMs`) and swallows the others;
 * resolves with its port (closed at the test's end).
 */
async function nullServer(t: ExecutionContext, answers: () => boolean, delayMs = 0): Promise<number> {
  const server = createServer((s) => {
    s.on('error', () => {});
    const decoder = new RecordDecoder((record) => {
      if (!answers()) return;
      const reply = Buffer.alloc(24);
      reply.writeUInt32BE(record.readUInt32BE(0), 0);
      reply.writeUInt32BE(1, 4); // REPLY; MSG_ACCEPTED, AUTH_NONE verifier, SUCCESS: zeros
      const framed = Buffer.concat(frameRecord(reply));
      if (delayMs === 0) s.write(framed);
      else setTimeout(() => s.writable && s.write(framed), delayMs);
    });
    s.on('data', (d: Buffer) => decoder.push(d));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  return (server.address() as AddressInfo).port;
}

test('replies that never come are failures, not a faster row: calls sent before the window and still waiting at its end', async (t) => {
  // Every fourth call is swallowed: each takes a slot for good.
  let seen = 0;
  const port = await nullServer(t, () => ++seen % 4 !== 0);
  const run = await oneConnection(port, 8, '0.3', '0.3');
  t.is(run.code, 1);
  t.regex(
    run.stderr,
    /calls FAILED; the first: \d+ call\(s\) got no reply within \d+ ms \(half the measured window, and twice the slowest reply of the run\)/,
  );
});

test('a chain that stops answering inside the window fails the run: its calls sent in the window count too', async (t) => {
  // Answers every NULL call for 450 ms from the first one (the 300 ms warm-up and the first 150 ms of the
  // 600 ms window), then none: the calls waiting at the end were all sent inside the window.
  let first = 0;
  let answered = 0;
  const port = await nullServer(t, () => {
    first ||= performance.now();
    if (performance.now() - first > 450) return false;
    answered++;
    return true;
  });
  const run = await oneConnection(port, 4, '0.6', '0.3');
  t.true(answered > 0, 'it answered at first');
  t.is(run.code, 1, run.stdout);
  t.regex(
    run.stderr,
    /calls FAILED; the first: 4 call\(s\) got no reply within \d+ ms \(half the measured window, and twice the slowest reply of the run\)/,
  );
});

test('a chain slower than half a short window is slow, not lossy: every call answered, exit 0', async (t) => {
  // Replies take 150 ms; the window is 200 ms. Calls waiting at its end have waited up to ~150 ms: more
  // than half the window, less than twice the slowest reply.
  const port = await nullServer(t, () => true, 150);
  for (const warmup of ['0.3', '0.4', '0.45']) {
    const run = await oneConnection(port, 4, '0.2', warmup);
    t.is(run.code, 0, `warm-up ${warmup} s: ${run.stderr}`);
  }
});

test('a chain slower than the whole window is slow, not lossy: no call is counted lost', async (t) => {
  // Replies take 250 ms, the window 200 ms: some windows see no reply at all. Such a run has no figure
  // (exit 1, "no call completed"), but no call of it is called lost: the warm-up saw how slow it is.
  const port = await nullServer(t, () => true, 250);
  for (const warmup of ['0.3', '0.45']) {
    const run = await oneConnection(port, 4, '0.2', warmup);
    t.notRegex(run.stderr, /calls FAILED/, `warm-up ${warmup} s`);
    if (run.code !== 0)
      t.regex(run.stderr, /no call completed in the measured window/, `warm-up ${warmup} s`);
  }
});
