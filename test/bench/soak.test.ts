import test from 'ava';
import { failingSeeds, parseSoakArgs } from '../../bench/soak/run.js';

test('the soak reports the seeds of the failed tests only, whatever the seed source says', (t) => {
  const output = [
    '  ✔ TCP clients dropped at random moments (2.1s)',
    '    ℹ seed 1066358296 (random; replay with FAULT_SEED=1066358296)',
    '  ✘ [fail]: RDMA connections killed between Send and Reply',
    '    ℹ seed 3967407629 (random; replay with FAULT_SEED=3967407629)',
    '    ℹ 1 passes of the mix, 360 calls',
    '  ✘ [fail]: a fuzz campaign',
    '    ℹ seed 42 (commit c1ec03e742bc; replay with FUZZ_SEED=42)',
    '  ✔ another (1s)',
    '    ℹ seed 7 (random; replay with FAULT_SEED=7)',
  ].join('\n');
  t.deepEqual(failingSeeds(output), ['3967407629', '42']);
  t.deepEqual(failingSeeds('  ✔ all good\n    ℹ seed 1 (random; replay with FAULT_SEED=1)\n'), []);
});

test('soak arguments: minutes and cases, a bad one refused', (t) => {
  t.deepEqual(parseSoakArgs(['--minutes', '30']), { minutes: 30, cases: 1 });
  t.deepEqual(parseSoakArgs(['--minutes=2', '--cases', '3']), { minutes: 2, cases: 3 });
  t.throws(() => parseSoakArgs(['--minutes', 'x']), { message: /usage/ });
});
