/**
 * bench/transport-loop.ts, the in-process transport loop counted under callgrind (docs/performance.md,
 * "Counting instructions per call"): its two modes and its refusal of a bad argument.
 */
import test from 'ava';
import { assertCalls, assertRefusals, assertRounds, loopScript } from './loop-helpers.js';

const run = loopScript('transport-loop');

test('rounds: one line per round with the rate and the CPU time per call', (t) => {
  assertRounds(t, run('--rounds', '2', '--seconds', '0.2', '--depth', '16'), 2);
});

test('--calls runs exactly that many calls, also with the responder taking calls as views', (t) => {
  for (const extra of [[], ['--lend-calls'], ['--size', '4096']]) {
    assertCalls(t, run('--calls', '3000', ...extra), 'transport-loop', 3000, extra.join(' '));
  }
});

test('a bad argument is refused with a reason and status 2', (t) => {
  assertRefusals(t, run, [
    [['--depth', '0'], /--depth wants a whole number above 0, not 0/],
    [['--calls', 'many'], /--calls wants a whole number above 0, not many/],
    [['--size=-1'], /--size wants a whole number, not -1/],
    [['--seconds', '0'], /--seconds wants a time above 0, not 0/],
    [['--bogus'], /^transport-loop: Unknown option '--bogus'/],
  ]);
});
