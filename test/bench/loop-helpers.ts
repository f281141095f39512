/**
 * What the tests of the closed-loop instruments (bench/transport-loop.ts, bench/chain-loop.ts) share: running
 * one as a child process, and the checks of the two modes bench/loop.ts gives them both.
 */
import { type SpawnSyncReturns, spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ExecutionContext } from 'ava';

/** A runner of `dist/bench/<name>.js` with arguments. */
export function loopScript(name: string): (...args: string[]) => SpawnSyncReturns<string> {
  const script = fileURLToPath(new URL(`../../bench/${name}.js`, import.meta.url));
  return (...args) => spawnSync(process.execPath, [script, ...args], { encoding: 'utf8', timeout: 60_000 });
}

/** What the checks read of a finished loop process. */
export type LoopRun = Pick<SpawnSyncReturns<string>, 'status' | 'stdout' | 'stderr'>;

/**
 * The same, without blocking this process: for a loop whose peer (a server the test runs) must answer
 * while the loop runs. Resolves with what `spawnSync` would have returned.
 */
export function loopScriptAsync(name: string): (...args: string[]) => Promise<LoopRun> {
  const script = fileURLToPath(new URL(`../../bench/${name}.js`, import.meta.url));
  return (...args) =>
    new Promise((resolve) => {
      const child = spawn(process.execPath, [script, ...args], { timeout: 60_000 });
      let stdout = '';
      let stderr = '';
      child.stdout.setEncoding('utf8').on('data', (d: string) => {
        stdout += d;
      });
      child.stderr.setEncoding('utf8').on('data', (d: string) => {
        stderr += d;
      });
      child.on('close', (status) => resolve({ status, stdout, stderr }));
    });
}

/**
 * Rounds mode: exit 0 and `rounds` lines, each a rate and a CPU time per call that includes its system part.
 * That the round completed calls is the CPU time per call being a number: the loop divides by the calls
 * completed, so a round without one prints NaN or Infinity there. The rate itself is not asked to be above
 * 0.0k: it is rounded to a tenth of a thousand, and a round that starts while the machine starves the
 * process (CI running other suites on two cores) completes its first calls late and prints 0.0k.
 */
export function assertRounds(t: ExecutionContext, r: SpawnSyncReturns<string>, rounds: number): void {
  t.is(r.status, 0, r.stderr);
  const lines = r.stdout.trim().split('\n');
  t.is(lines.length, rounds, r.stdout);
  for (const line of lines) {
    const m = /^(\d+\.\d)k calls\/s {2}(\d+\.\d\d) µs CPU per call \(system (\d+\.\d\d)\)$/.exec(line);
    t.truthy(m, `calls completed, and the line has the rate and the CPU per call: ${line}`);
    t.true(Number(m?.[2]) > 0, `a round that ran calls used CPU: ${line}`);
    t.true(Number(m?.[2]) >= Number(m?.[3]), `CPU time includes the system time: ${line}`);
  }
}

/** `--calls N` mode: exit 0, nothing on stdout (callgrind prints its count on stderr), and exactly N calls said. */
export function assertCalls(
  t: ExecutionContext,
  r: LoopRun,
  name: string,
  calls: number,
  what: string,
): void {
  t.is(r.status, 0, r.stderr);
  t.is(r.stdout, '', 'nothing on stdout: callgrind prints its count on stderr');
  t.is(r.stderr.trim(), `${name}: ${calls} calls`, what);
}

/** Each bad argument: status 2 and its reason on stderr. */
export function assertRefusals(
  t: ExecutionContext,
  run: (...args: string[]) => SpawnSyncReturns<string>,
  cases: [string[], RegExp][],
): void {
  for (const [args, reason] of cases) {
    const r = run(...args);
    t.is(r.status, 2, args.join(' '));
    t.regex(r.stderr, reason);
  }
}
