/**
 * bench/transport-loop.ts, the in-process transport loop counted under callgrind (docs/performance.md,
 * "Counting instructions per call"): its two modes and its refusal of a bad argument.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import test from 'ava';

const SCRIPT = fileURLToPath(new URL('../../bench/transport-loop.js', import.meta.url));

function run(...args: string[]) {
  return spawnSync(process.execPath, [SCRIPT, ...args], { encoding: 'utf8', timeout: 60_000 });
}

test('rounds: one line per round with the rate and the CPU time per call', (t) => {
  const r = run('--rounds', '2', '--seconds', '0.2', '--depth', '16');
  t.is(r.status, 0, r.stderr);
  const lines = r.stdout.trim().split('\n');
  t.is(lines.length, 2);
  for (const line of lines) {
    const m = /^(\d+\.\d)k calls\/s {2}(\d+\.\d\d) µs CPU per call \(system (\d+\.\d\d)\)$/.exec(line);
    t.truthy(m, line);
    t.true(Number(m?.[1]) > 0, 'calls completed');
    t.true(Number(m?.[2]) >= Number(m?.[3]), 'CPU time includes the system time');
  }
});

test('--calls runs exactly that many calls, also with the responder taking calls as views', (t) => {
  for (const extra of [[], ['--lend-calls'], ['--size', '4096']]) {
    const r = run('--calls', '3000', ...extra);
    t.is(r.status, 0, r.stderr);
    t.is(r.stdout, '', 'nothing on stdout: callgrind prints its count on stderr');
    t.is(r.stderr.trim(), 'transport-loop: 3000 calls', extra.join(' '));
  }
});

test('a bad argument is refused with a reason and status 2', (t) => {
  const cases: [string[], RegExp][] = [
    [['--depth', '0'], /--depth wants a whole number above 0, not 0/],
    [['--calls', 'many'], /--calls wants a whole number above 0, not many/],
    [['--size=-1'], /--size wants a whole number, not -1/],
    [['--seconds', '0'], /--seconds wants a time above 0, not 0/],
    [['--bogus'], /^transport-loop: Unknown option '--bogus'/],
  ];
  for (const [args, reason] of cases) {
    const r = run(...args);
    t.is(r.status, 2, args.join(' '));
    t.regex(r.stderr, reason);
  }
});
