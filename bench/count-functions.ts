/**
 * `node dist/bench/count-functions.js [--loop chain-loop|transport-loop] [--calls 10000,30000] [--top 40]
 * [--json] [-- LOOP-ARGS…]`: instructions per call by function, for the loop's calls (see
 * `callgrind-profile.ts` for how, and docs/performance.md "Counting instructions per call" for what it
 * has found). Runs the loop twice under `valgrind --tool=callgrind` with `node --perf-basic-prof`, about
 * 3½ minutes for the defaults. valgrind is a Debian package that `scripts/install-system-deps.sh`
 * installs (the addon's leak test and this tool's own test need it); without it this says so and exits
 * with status 2.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { parseCallgrindSelf, parsePerfMap, perCallDifference, resolveAll } from './callgrind-profile.js';

const LOOPS = ['chain-loop', 'transport-loop'];

function refuse(reason: string): never {
  process.stderr.write(`count-functions: ${reason}\n`);
  process.exit(2);
}

function options() {
  try {
    return parseArgs({
      allowPositionals: true,
      options: {
        loop: { type: 'string', default: 'chain-loop' },
        calls: { type: 'string', default: '10000,30000' },
        top: { type: 'string', default: '40' },
        json: { type: 'boolean', default: false },
      },
    });
  } catch (e) {
    return refuse((e as Error).message);
  }
}

const { values, positionals } = options();
if (!LOOPS.includes(values.loop)) refuse(`--loop is one of ${LOOPS.join(', ')}, not ${values.loop}`);
const counts = values.calls.split(',').map(Number);
if (counts.length !== 2 || !counts.every((n) => Number.isInteger(n) && n > 0) || counts[0] >= counts[1])
  refuse(`--calls wants two whole numbers, the smaller first (A,B), not ${values.calls}`);
const top = Number(values.top);
if (!Number.isInteger(top) || top < 1) refuse(`--top wants a whole number above 0, not ${values.top}`);
if (spawnSync('valgrind', ['--version'], { encoding: 'utf8' }).status !== 0)
  refuse('valgrind is not installed (Debian: apt-get install valgrind); nothing was counted');

const script = fileURLToPath(new URL(`./${values.loop}.js`, import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'count-functions-'));

/** One count: the self costs of a run of `calls` calls, their addresses named by the run's perf map. */
function count(calls: number): Map<string, number> {
  const out = join(work, `callgrind.${calls}`);
  const run = spawnSync(
    'valgrind',
    [
      '--tool=callgrind',
      `--callgrind-out-file=${out}`,
      process.execPath,
      '--perf-basic-prof',
      script,
      '--calls',
      String(calls),
      ...positionals,
    ],
    // In the work directory: `--perf-basic-prof` also makes V8 write an `isolate-*-v8.log` into the
    // current directory, which would otherwise pile up in the caller's (the project's root).
    { encoding: 'utf8', maxBuffer: 64 << 20, cwd: work },
  );
  // valgrind runs node in its own process: the map is named after valgrind's pid.
  const map = `/tmp/perf-${run.pid}.map`;
  try {
    if (run.status !== 0)
      throw new Error(`${values.loop} --calls ${calls} failed under valgrind:\n${run.stderr.slice(-2000)}`);
    return resolveAll(parseCallgrindSelf(readFileSync(out, 'utf8')), parsePerfMap(readFileSync(map, 'utf8')));
  } finally {
    rmSync(map, { force: true });
  }
}

let failure: Error | null = null;
try {
  const smaller = count(counts[0]);
  const larger = count(counts[1]);
  const { total, rows } = perCallDifference(smaller, larger, counts[1] - counts[0]);
  const shown = rows.slice(0, top);
  if (values.json) {
    process.stdout.write(`${JSON.stringify({ loop: values.loop, calls: counts, total, rows: shown })}\n`);
  } else {
    process.stdout.write(
      `${values.loop}: ${Math.round(total)} instructions per call (Node ${process.version})\n`,
    );
    for (const r of shown)
      process.stdout.write(
        `${Math.round(r.perCall).toString().padStart(8)} ${((100 * r.perCall) / total).toFixed(1).padStart(5)} %  ${r.name}\n`,
      );
  }
} catch (e) {
  failure = e as Error;
} finally {
  rmSync(work, { recursive: true, force: true });
}
if (failure !== null) refuse(failure.message);
