/**
 * bench/chain-loop.ts, NULL calls through the whole product in one process, counted under callgrind
 * (docs/performance.md, "Counting instructions per call"): its two modes and its refusal of a bad argument.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import test from 'ava';

const SCRIPT = fileURLToPath(new URL('../../bench/chain-loop.js', import.meta.url));

function run(...args: string[]) {
  return spawnSync(process.execPath, [SCRIPT, ...args], { encoding: 'utf8', timeout: 60_000 });
}

test('rounds: one line per round with the rate and the CPU time per call', (t) => {
  const r = run('--rounds', '2', '--seconds', '0.2', '--connections', '2', '--depth', '8');
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

test('--calls runs exactly that many calls, with one connection or several and a pool of two', (t) => {
  for (const extra of [
    [],
    ['--connections', '1', '--depth', '1'],
    ['--connections', '3', '--depth', '7', '--pool', '2'],
  ]) {
    const r = run('--calls', '2500', ...extra);
    t.is(r.status, 0, r.stderr);
    t.is(r.stdout, '', 'nothing on stdout: callgrind prints its count on stderr');
    t.is(r.stderr.trim(), 'chain-loop: 2500 calls', extra.join(' '));
  }
});

test('a bad argument is refused with a reason and status 2', (t) => {
  const cases: [string[], RegExp][] = [
    [['--connections', '0'], /--connections wants a whole number above 0, not 0/],
    [['--depth', '1.5'], /--depth wants a whole number above 0, not 1.5/],
    [['--pool', 'x'], /--pool wants a whole number above 0, not x/],
    [['--calls', 'many'], /--calls wants a whole number above 0, not many/],
    [['--seconds', '0'], /--seconds wants a time above 0, not 0/],
    [['--rounds=-1'], /--rounds wants a whole number above 0, not -1/],
    [['--bogus'], /^chain-loop: Unknown option '--bogus'/],
  ];
  for (const [args, reason] of cases) {
    const r = run(...args);
    t.is(r.status, 2, args.join(' '));
    t.regex(r.stderr, reason);
  }
});
