/**
 * bench/chain-loop.ts, NULL calls through the whole product in one process, counted under callgrind
 * (docs/performance.md, "Counting instructions per call"): its two modes and its refusal of a bad argument.
 */
import { createServer, type Server, type Socket } from 'node:net';
import test, { type ExecutionContext } from 'ava';
import { serveTestProgram } from '../../gateway/test-program/server.js';
import { freePort } from '../helpers/ports.js';
import { assertCalls, assertRefusals, assertRounds, loopScript, loopScriptAsync } from './loop-helpers.js';

const run = loopScript('chain-loop');
const runAsync = loopScriptAsync('chain-loop');

/** A TCP server that does `onData` with each client's first bytes; closed at the test's end. */
async function rogue(t: ExecutionContext, onData: (s: Socket) => void): Promise<string> {
  const server: Server = createServer((s) => {
    s.on('error', () => {});
    s.once('data', () => onData(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  return `127.0.0.1:${(server.address() as { port: number }).port}`;
}

test('rounds: one line per round with the rate and the CPU time per call', (t) => {
  assertRounds(t, run('--rounds', '2', '--seconds', '0.2', '--connections', '2', '--depth', '8'), 2);
});

test('--calls runs exactly that many calls, with one connection or several and a pool of two', (t) => {
  for (const extra of [
    [],
    ['--connections', '1', '--depth', '1'],
    ['--connections', '3', '--depth', '7', '--pool', '2'],
  ]) {
    assertCalls(t, run('--calls', '2500', ...extra), 'chain-loop', 2500, extra.join(' '));
  }
});

test('--target: no gateway started, the calls go to the server named (the test program alone here)', async (t) => {
  const server = await serveTestProgram();
  t.teardown(() => server.close({ drainTimeoutMs: 0 }));
  const r = await runAsync('--calls', '2000', '--target', `127.0.0.1:${server.addresses[0].port}`);
  assertCalls(t, r, 'chain-loop', 2000, '--target');
  t.true(server.frontend.stats.recordsIn >= 2000, 'the test program itself answered them');
});

test('a server that answers with something other than a NULL reply stops the loop: status 1 and the reply', async (t) => {
  // A denied reply (MSG_DENIED, AUTH_ERROR): a record of the right length, the wrong words.
  const denied = Buffer.from('8000001800000001000000010000000100000001000000000000000000000000', 'hex');
  const at = await rogue(t, (s) => s.write(denied.subarray(0, 28)));
  const r = await runAsync('--calls', '100', '--connections', '1', '--target', at);
  t.is(r.status, 1);
  t.regex(r.stderr, /^chain-loop: unexpected reply: 8000001800000001000000010000000100000001/);
});

test('a server that closes a client connection stops the loop with status 1 and says so', async (t) => {
  const at = await rogue(t, (s) => s.destroy());
  const r = await runAsync('--calls', '100', '--connections', '2', '--target', at);
  t.is(r.status, 1);
  t.regex(r.stderr, /^chain-loop: the server closed a client connection/);
});

test('a target nobody listens on stops the loop with status 1 and the reason', async (t) => {
  const r = await runAsync('--calls', '100', '--target', `127.0.0.1:${await freePort()}`);
  t.is(r.status, 1);
  t.regex(r.stderr, /^chain-loop: cannot connect to 127\.0\.0\.1:\d+: .*ECONNREFUSED/);
});

test('a bad argument is refused with a reason and status 2', (t) => {
  assertRefusals(t, run, [
    [['--connections', '0'], /--connections wants a whole number above 0, not 0/],
    [['--depth', '1.5'], /--depth wants a whole number above 0, not 1.5/],
    [['--pool', 'x'], /--pool wants a whole number above 0, not x/],
    [['--calls', 'many'], /--calls wants a whole number above 0, not many/],
    [['--seconds', '0'], /--seconds wants a time above 0, not 0/],
    [['--rounds=-1'], /--rounds wants a whole number above 0, not -1/],
    [['--target', 'nowhere:port'], /^chain-loop: --target: /],
    [['--bogus'], /^chain-loop: Unknown option '--bogus'/],
  ]);
});
