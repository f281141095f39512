/**
 * bench/chain-loop.ts, NULL calls through the whole product in one process, counted under callgrind
 * (docs/performance.md, "Counting instructions per call"): its two modes and its refusal of a bad argument.
 */
import test from 'ava';
import { assertCalls, assertRefusals, assertRounds, loopScript } from './loop-helpers.js';

const run = loopScript('chain-loop');

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

test('a bad argument is refused with a reason and status 2', (t) => {
  assertRefusals(t, run, [
    [['--connections', '0'], /--connections wants a whole number above 0, not 0/],
    [['--depth', '1.5'], /--depth wants a whole number above 0, not 1.5/],
    [['--pool', 'x'], /--pool wants a whole number above 0, not x/],
    [['--calls', 'many'], /--calls wants a whole number above 0, not many/],
    [['--seconds', '0'], /--seconds wants a time above 0, not 0/],
    [['--rounds=-1'], /--rounds wants a whole number above 0, not -1/],
    [['--bogus'], /^chain-loop: Unknown option '--bogus'/],
  ]);
});
