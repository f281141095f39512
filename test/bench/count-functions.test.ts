/**
 * bench/count-functions.ts end to end: the chain's NULL calls counted twice under valgrind's callgrind,
 * V8's code addresses named by the loop's perf map, the difference per call by function. This is the
 * instrument docs/performance.md measures small changes with ("Counting instructions per call"), so a
 * fresh machine must be able to run it. Needs valgrind (scripts/install-system-deps.sh installs it, CI
 * always has it; a developer machine without it skips loudly). In the serial phase of `npm test`: two
 * runs of Node under valgrind hold a core for about a minute and a half.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { testWithPeers } from '../helpers/peers.js';

const test = testWithPeers('valgrind');
const script = fileURLToPath(new URL('../../bench/count-functions.js', import.meta.url));

interface Counted {
  loop: string;
  calls: number[];
  total: number;
  rows: { name: string; perCall: number }[];
}

/** "name dir/file.js:line:column", as resolveName writes a function of the project's dist. */
const projectFunction = (dir: string) => new RegExp(`^\\S+ ${dir}/[\\w/-]+\\.js:\\d+:\\d+$`);

test('counts the chain by function: the NULL path of every layer named, largest first', (t) => {
  // Run from an empty directory: the tool must leave nothing in its caller's (V8's per-isolate logs).
  const caller = mkdtempSync(join(tmpdir(), 'count-functions-caller-'));
  t.teardown(() => rmSync(caller, { recursive: true, force: true }));
  const r = spawnSync(process.execPath, [script, '--top', '1000', '--json', '--calls', '300,900'], {
    encoding: 'utf8',
    timeout: 280_000,
    maxBuffer: 16 << 20,
    cwd: caller,
  });
  t.is(r.status, 0, r.stderr.slice(-2000));
  t.deepEqual(readdirSync(caller), [], 'files left in the directory count-functions was run from');
  const out = JSON.parse(r.stdout) as Counted;
  t.is(out.loop, 'chain-loop');
  t.deepEqual(out.calls, [300, 900]);
  t.true(out.rows.length > 100, `${out.rows.length} rows`);
  // The whole NULL call costs tens of thousands of instructions on any runtime; far fewer means the two
  // counts were not of the loop (a failed run, an empty file).
  t.true(out.total > 20_000, `total ${out.total} instructions per call`);
  for (let i = 1; i < out.rows.length; i++) t.true(out.rows[i - 1].perCall >= out.rows[i].perCall);
  const names = out.rows.map((row) => row.name);
  for (const dir of [
    'tcp-frontend',
    'gateway',
    'rdma-backend/transport',
    'rdma-backend/protocol',
    'rdma-backend/providers/soft',
  ]) {
    const pattern = projectFunction(dir);
    t.true(
      names.some((n) => pattern.test(n)),
      `no function of ${dir}/ among the counted rows (the perf map did not name the JIT's code)`,
    );
  }
  t.true(
    names.some((n) => n.startsWith('Builtins_')),
    "no V8 builtin among the rows (the node binary's symbols)",
  );
});
